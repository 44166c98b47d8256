#!/usr/bin/env bash
# Captures, read-only, the files gpuplane's real backend reads on a GPU host (sysfs attributes and
# links of display-class and NVIDIA devices, /proc/driver/nvidia, IOMMU groups, the kernel command
# line), into OUTDIR/root, laid out as under /. Fixture tests run `gpuplane observe --host local
# --host-root OUTDIR/root` on it. Nothing is written outside OUTDIR.
#   capture-gpu-host.sh OUTDIR
set -u
out=${1:?usage: capture-gpu-host.sh OUTDIR}
root=$out/root
mkdir -p "$root"
copy() { for f in "$@"; do [ -r "$f" ] && [ -f "$f" ] || continue; mkdir -p "$root$(dirname "$f")"; cat "$f" >"$root$f" 2>/dev/null || true; done; }
link() { for l in "$@"; do [ -L "$l" ] || continue; mkdir -p "$root$(dirname "$l")"; ln -sfn "$(readlink "$l")" "$root$l"; done; }
for d in /sys/bus/pci/devices/*; do
  a=$(basename "$d")
  cls=$(cat "$d/class"); ven=$(cat "$d/vendor")
  case "$cls" in 0x03*) ;; *) [ "$ven" = 0x10de ] || continue ;; esac
  mkdir -p "$root/sys/bus/pci/devices/$a"
  for f in vendor device class subsystem_vendor subsystem_device numa_node driver_override; do copy "$d/$f"; done
  link "$d/driver" "$d/iommu_group"
  for drm in "$d"/drm/card* "$d"/drm/renderD*; do [ -e "$drm/dev" ] && copy "$drm/dev"; done
done
for drv in /sys/bus/pci/drivers/*; do mkdir -p "$root$drv"; done
for g in /sys/kernel/iommu_groups/*; do [ -e "$g/type" ] && copy "$g/type"; done
mkdir -p "$root/sys/kernel/iommu_groups"
copy /proc/cmdline /proc/devices /proc/driver/nvidia/version /sys/module/nvidia/version /etc/hostname
for i in /proc/driver/nvidia/gpus/*/information; do copy "$i"; done
mkdir -p "$root/proc" "$root/etc/pve-absent"
rmdir "$root/etc/pve-absent"
echo "captured into $root"
