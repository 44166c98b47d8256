#!/usr/bin/env bash
# Captures, READ-ONLY, what gpuplane's real backend (controller/src/host/local: pci.rs, mod.rs,
# iommu.rs, identity.rs) reads about a host's NVIDIA GPUs, and packs it into one tarball:
#
#   capture.sh OUT.tar.gz
#
# The tarball holds, under one folder named by the capture's date:
#   root/       plain files laid out as under / (sysfs attributes at the devices' real paths,
#               /sys/devices/pci.../<addr>, the 4096-byte config space of each NVIDIA device,
#               /proc/driver/nvidia, /proc/cmdline, /proc/devices, /sys/module/nvidia/version,
#               the IOMMU groups' types, the slots' addresses)
#   links.tsv   each symlink the backend follows, `PATH<TAB>TARGET` as readlink printed it
#               (/sys/bus/pci/devices/<addr>, <dev>/driver, <dev>/iommu_group,
#               /sys/kernel/iommu_groups/<g>/devices/<addr>)
#   dirs.txt    empty directories that matter (/sys/bus/pci/slots, the drivers, ...)
#   cmd/        nvidia-smi's identity query and `nvidia-smi -q`, lspci -vvv / -xxxx of each
#               captured device (when lspci is installed), the kernel's IOMMU log lines
#   meta.txt    when, which kernel, as whom, what was missing
#
# It only reads files and runs queries: no write to /sys or /proc, no bind, unbind, reset,
# clock or mode change; nvidia-smi is only asked `--query-gpu` and `-q`. Everything it writes
# goes to a temporary folder and then to OUT.tar.gz. mkroot.sh turns the unpacked folder into
# a root that `gpuplane observe --host local --host-root` reads (README.md).
# CAPTURE_VENDOR=0x1af4 (say) captures another vendor's devices, to try it without NVIDIA GPUs.
set -u
tarball=${1:?usage: capture.sh OUT.tar.gz}
case "$tarball" in /*) ;; *) tarball=$PWD/$tarball ;; esac

# The config space beyond its first 64 bytes is readable by root only.
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  exec sudo -n bash "$0" "$tarball"
fi

day=$(date -u +%Y-%m-%d)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
top=$tmp/${CAPTURE_NAME:-h200}-$day
root=$top/root
mkdir -p "$root" "$top/cmd"
: >"$top/links.tsv"
: >"$top/dirs.txt"
meta() { echo "$*" >>"$top/meta.txt"; }

meta "captured: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
meta "kernel: $(uname -r)"
meta "uid: $(id -u)"
meta "script: controller/src/host/local/testdata/h200/capture.sh (read-only)"

# copy FILE...: a readable regular file, byte for byte, to the same path under root/.
copy() {
  for f in "$@"; do
    if [ -f "$f" ] && [ -r "$f" ]; then
      mkdir -p "$root$(dirname "$f")"
      cat "$f" >"$root$f" 2>/dev/null || meta "unreadable: $f"
    fi
  done
}
# link PATH...: record a symlink and its target as readlink prints it.
link() {
  for l in "$@"; do
    [ -L "$l" ] && printf '%s\t%s\n' "$l" "$(readlink "$l")" >>"$top/links.tsv"
  done
}
dir() { echo "$1" >>"$top/dirs.txt"; }

# attrs DEV_REAL_PATH: the attributes read_device_in() reads, at the device's real path.
attrs() {
  local d=$1
  mkdir -p "$root$d"
  for f in vendor device class subsystem_vendor subsystem_device numa_node driver_override revision; do
    copy "$d/$f"
  done
  # Health (issue 40): AER counters (a root port's totals too), the link against its maximum,
  # the reset methods offered, the power state. Reads only: `reset` itself is never touched.
  for f in aer_dev_correctable aer_dev_nonfatal aer_dev_fatal aer_rootport_total_err_cor \
           aer_rootport_total_err_nonfatal aer_rootport_total_err_fatal current_link_speed \
           current_link_width max_link_speed max_link_width reset_method power_state; do
    copy "$d/$f"
  done
  link "$d/driver" "$d/iommu_group"
  for drm in "$d"/drm/card* "$d"/drm/renderD*; do
    [ -e "$drm/dev" ] && copy "$drm/dev"
  done
}

declare -A seen=()
# device ADDR [config]: one device, its /sys/bus/pci/devices link, and every bridge above it.
device() {
  local a=$1 want_config=${2:-}
  local l=/sys/bus/pci/devices/$a
  [ -e "$l" ] || return
  local real
  real=$(readlink -f "$l")
  if [ -z "${seen[$a]:-}" ]; then
    seen[$a]=1
    link "$l"
    attrs "$real"
  fi
  if [ -n "$want_config" ] && [ ! -f "$root$real/config" ]; then
    copy "$real/config"
    meta "config $a: $(stat -c %s "$root$real/config" 2>/dev/null || echo missing) bytes, sha256 $(sha256sum <"$root$real/config" 2>/dev/null | cut -d' ' -f1)"
  fi
  # The hops above: /sys/devices/pci0000:00/0000:00:01.0/... each a device of its own.
  local up=${real%/*} b
  while :; do
    b=${up##*/}
    if [[ "$b" == pci* ]]; then
      mkdir -p "$root$up"
      break
    elif [[ "$b" =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$ ]]; then
      device "$b" # which walks on up from there
      break
    else
      break
    fi
  done
}

gpus=()
for d in /sys/bus/pci/devices/*; do
  a=${d##*/}
  [ "$(cat "$d/vendor" 2>/dev/null)" = "${CAPTURE_VENDOR:-0x10de}" ] || continue
  gpus+=("$a")
  device "$a" config
  # Every device sharing its IOMMU group (the backend observes them as companions).
  g=$(readlink "$d/iommu_group" 2>/dev/null)
  if [ -n "$g" ]; then
    g=${g##*/}
    for m in /sys/kernel/iommu_groups/"$g"/devices/*; do
      link "$m"
      device "${m##*/}" config
    done
  fi
done
meta "nvidia devices: ${gpus[*]:-none}"

# IOMMU: every group's type (the mode is read from them), the command line, the log lines.
for t in /sys/kernel/iommu_groups/*/type; do copy "$t"; done
dir /sys/kernel/iommu_groups
meta "iommu groups: $(ls /sys/kernel/iommu_groups 2>/dev/null | wc -l)"
copy /proc/cmdline /sys/module/kvm_amd/parameters/sev_snp
if dmesg >/dev/null 2>&1; then
  dmesg 2>/dev/null | grep -E 'iommu: Default domain type|IO_PAGE_FAULT|DMAR:.*Request device|SEV-SNP' \
    | sed 's/^\[[^]]*\] //' >"$top/cmd/kmsg-iommu.txt"
  # The NVIDIA driver's lines (Xid, "GPU at PCI:...: GPU-<uuid>", fallen off the bus), with
  # the kernel's timestamps kept, and the PCIe AER lines (issue 40).
  dmesg 2>/dev/null | grep -E 'NVRM|AER|pcieport|fallen off the bus' >"$top/cmd/kmsg-health.txt"
  meta "kmsg health lines: $(wc -l <"$top/cmd/kmsg-health.txt")"
else
  meta "dmesg: not readable"
fi

# Physical slots: the address of each (often none in a VM).
dir /sys/bus/pci/slots
n=0
for s in /sys/bus/pci/slots/*; do
  [ -e "$s" ] || continue
  n=$((n + 1))
  copy "$s/address"
done
meta "pci slots: $n"

# Drivers registered, the nvidia module, its per-GPU files, char majors, the node name.
for drv in /sys/bus/pci/drivers/*; do [ -d "$drv" ] && dir "$drv"; done
copy /sys/module/nvidia/version /proc/driver/nvidia/version /proc/devices /etc/hostname
for i in /proc/driver/nvidia/gpus/*/information; do copy "$i"; done
for p in /etc/pve /run/systemd/system; do
  [ -d "$p" ] && dir "$p"
done

# Commands: the identity query exactly as LocalHost runs it, then the full text report.
if command -v nvidia-smi >/dev/null; then
  timeout 120 nvidia-smi --query-gpu=pci.bus_id,uuid,serial --format=csv,noheader \
    >"$top/cmd/nvidia-smi-query.csv" 2>"$top/cmd/nvidia-smi-query.err"
  meta "nvidia-smi --query-gpu: exit $?"
  timeout 120 nvidia-smi -q >"$top/cmd/nvidia-smi-q.txt" 2>&1
  meta "nvidia-smi -q: exit $?"
  # Health (issue 40): the counters and state a health reader would ask for, as CSV.
  timeout 120 nvidia-smi --query-gpu=pci.bus_id,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.volatile.total,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max --format=csv \
    >"$top/cmd/nvidia-smi-health.csv" 2>&1
  meta "nvidia-smi --query-gpu (health): exit $?"
else
  meta "nvidia-smi: not installed"
fi
if command -v lspci >/dev/null; then
  lspci -tvnn >"$top/cmd/lspci-tvnn.txt" 2>&1
  for a in "${!seen[@]}"; do
    lspci -vvv -nn -s "$a" >"$top/cmd/lspci-vvv-$a.txt" 2>&1
    lspci -xxxx -s "$a" >"$top/cmd/lspci-xxxx-$a.txt" 2>&1
  done
  meta "lspci: $(lspci --version 2>&1 | head -1)"
else
  meta "lspci: not installed"
fi

tar -czf "$tarball" -C "$tmp" "${CAPTURE_NAME:-h200}-$day"
echo "captured into $tarball:"
tar -tzvf "$tarball"
echo "--- meta.txt"
cat "$top/meta.txt"
