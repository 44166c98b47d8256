#!/bin/bash
# Boots the emulated GPU host once with a script to run, and prints what the script printed.
#
#   run.sh SCRIPT [FILE...]
#
# SCRIPT is installed as /usr/local/bin/check.sh and each FILE as /usr/local/bin/<basename>
# (all mode 0755) in a private copy of the base image built by build-image.sh. The guest
# (Debian's kernel, systemd as PID 1) runs check.sh once after reaching multi-user.target and powers
# off. run.sh prints the script's stdout+stderr on its stdout, unchanged, and exits with the
# script's exit status.
#
# The machine (qemu TCG, q35 + intel-iommu with interrupt remapping, 2 vCPUs, 2 NUMA nodes):
# (root port slot numbers: 100 + chassis, rp0a..rp1b = 101, 102, 103, 111, 112)
#   pxb-pcie "pxb0" numa_node=0 (buses 0x40..)
#     pcie-root-port rp0a  -> bochs-display            stand-in GPU, own IOMMU group
#     pcie-root-port rp0b  -> bochs-display            stand-in GPU, own IOMMU group
#     pcie-root-port rp0c  -> pcie-pci-bridge br0      devices behind it share one IOMMU group:
#                               slot 1: bochs-display  stand-in GPU with a group companion
#                               slot 2: e1000          the companion (class 0x0200)
#   pxb-pcie "pxb1" numa_node=1 (buses 0x80..)
#     pcie-root-port rp1a  -> bochs-display            stand-in GPU, own IOMMU group
#     pcie-root-port rp1b  -> bochs-display            stand-in GPU, own IOMMU group
#   pcie.0: virtio-blk root disk (numa_node -1), and a virtio-net NIC with VM_NET=user.
# bochs-display is vendor:device 1234:1111, class 0x038000, driven by the "bochs" DRM driver.
# Kernel args always include intel_iommu=on (groups of type DMA-FQ); KARGS=iommu=pt gives identity.
#
# Environment:
#   KARGS               extra kernel command line (e.g. "iommu=pt"; "loglevel=7" undoes "quiet"
#                       for a verbose console.log)
#   VM_TIMEOUT          seconds before the VM is killed (default 300)
#   VM_MEM              guest memory in MiB, split evenly over the two nodes (default 1536)
#   VM_NET=user         add a user-mode NIC; the guest gets 10.0.2.15, the host is 10.0.2.2 ("host")
#   VM_QEMU_ARGS        extra qemu arguments (word-split)
#   VM_HANG_SECS        a guest kernel reporting a CPU stuck (soft lockup) this long has hung in
#                       the emulator: that VM is ended and booted once more from a fresh copy of
#                       the image, said on stderr (default 90)
#   VM_QUIET=1          do not print the VM's wall time on stderr
#   VM_KEEP=1           keep the work dir (disk image, console.log) even on success
#   VM_REBOOT=1         a reboot of the guest restarts it on the same disk (default: it ends the
#                       VM); check.sh runs again at every boot and can tell them apart by a file
#                       it leaves on the disk. The output is everything from the first boot's
#                       @@BEGIN@@ to the last @@END@@ (the later boots' @@BEGIN@@ lines included).
#   VM_REBOOT=entry     the same, and each next boot runs the kernel command line of the boot
#                       entry the bootloader stand-ins (scenario-lib.sh boot_standins) recorded
#                       in /var/lib/standin-boot/entry, as a bootloader would; at most
#                       VM_MAX_BOOTS boots (default 3). The real bootloader is not run.
#   VM_PCI_LAYOUT=renumbered  the same devices in the same slots at other addresses (the
#                       NUMA nodes' bus ranges swapped, rp1b on pcie.0): see "The machine" below
#                       and e2e/vm/README.md
#   VM_CT=1             attach the container root filesystem (ct.img of build-image.sh) as a
#                       second disk, /dev/vdb, in snapshot mode (what the guest writes to it is
#                       dropped when the VM ends): the LXC container of e2e/vm/pct
#   VM_IMAGE=kube-node  boot the single-node Kubernetes image of build-kube-image.sh instead of
#                       the base image (give it VM_MEM=4096)
#   GPUPLANE_E2E_CACHE  where build-image.sh put the image (default /var/cache/gpuplane-e2e)
# Exit status: the script's; 124 if the VM timed out; 125 if the VM ended without reporting
# (the console log's tail then goes to stderr and the work dir is kept); 2 for usage/setup errors.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if [ $# -lt 1 ]; then
  echo "usage: $0 SCRIPT [FILE...]" >&2
  exit 2
fi
SCRIPT=$1; shift
for f in "$SCRIPT" "$@"; do
  [ -f "$f" ] || { echo "run.sh: no such file: $f" >&2; exit 2; }
done

QEMU=qemu-system-x86_64
command -v $QEMU >/dev/null || { echo "run.sh: $QEMU not found; $E2E_HINT" >&2; exit 2; }
command -v debugfs >/dev/null || { echo "run.sh: debugfs not found; $E2E_HINT" >&2; exit 2; }
for f in base.img vmlinuz initrd.img stamp; do
  [ -f "$E2E_CACHE/$f" ] || { echo "run.sh: $E2E_CACHE/$f missing; $E2E_HINT" >&2; exit 2; }
done
case "$(cat "$E2E_CACHE/stamp")" in
  "script_sha=$(e2e_script_sha) "*) ;;
  *) echo "run.sh: $E2E_CACHE/base.img is stale (build-image.sh changed); $E2E_HINT" >&2; exit 2 ;;
esac
IMAGE=$E2E_CACHE/base.img
case "${VM_IMAGE:-base}" in
  base) ;;
  kube-node)
    IMAGE=$E2E_CACHE/kube-node.img
    if [ ! -f "$IMAGE" ] || [ "$(cat "$E2E_CACHE/kube-node.stamp" 2>/dev/null)" != "$(e2e_kube_want)" ]; then
      echo "run.sh: $IMAGE is missing or stale; run e2e/vm/build-kube-image.sh (as root)" >&2
      exit 2
    fi ;;
  *) echo "run.sh: unknown VM_IMAGE ${VM_IMAGE}" >&2; exit 2 ;;
esac

W=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-vm.XXXXXX")
qpid=""
on_signal() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
  rm -f "$W/disk.img"
  exit 130
}
trap on_signal INT TERM

# Private copy of the image with the script and files written in (no mount, no root needed).
prepare_disk() {  # FILE...: a fresh copy of the image with check.sh and FILEs in it
  cp --sparse=always "$IMAGE" "$W/disk.img"
  {
    inject() {  # src dst
      echo "rm $2"
      echo "write $1 $2"
      echo "set_inode_field $2 mode 0100755"
      echo "set_inode_field $2 uid 0"
      echo "set_inode_field $2 gid 0"
    }
    inject "$(realpath "$SCRIPT")" /usr/local/bin/check.sh
    for f in "$@"; do inject "$(realpath "$f")" "/usr/local/bin/$(basename "$f")"; done
  } >"$W/debugfs.cmds"
  debugfs -w -f "$W/debugfs.cmds" "$W/disk.img" >"$W/debugfs.log" 2>&1
  for f in check.sh $(for f in "$@"; do basename "$f"; done); do
    if ! debugfs -R "stat /usr/local/bin/$f" "$W/disk.img" 2>/dev/null | grep -q 'Mode:  0755'; then
      cat "$W/debugfs.log" >&2
      echo "run.sh: could not write /usr/local/bin/$f into the image (work dir $W)" >&2
      exit 2
    fi
  done
}
prepare_disk "$@"

# The machine.
mem=${VM_MEM:-1536}
half=$(( mem / 2 ))
# Root port slot numbers are 100 + chassis: unique on the machine (the kernel suffixes a repeated
# slot name with -1, -2 in probe order) and above the pcie-pci-bridge's SHPC slots, which the
# kernel names 1..31 after their device numbers (so 44:01.0's slot is "1").
case "${VM_PCI_LAYOUT:-default}" in
  default) nr0=0x40 nr1=0x80 rp1b_bus=pxb1 pci_hp=() ;;
  # The same GPUs in the same slots, every address changed: the two NUMA nodes' bus ranges
  # swapped (slot 101's GPU is at 81:00.0, where slot 111's was), and slot 112's root port moved
  # off NUMA node 1 onto the root complex (pcie.0, no NUMA node): its GPU is at 01:00.0. A root
  # port on pcie.0 is hot-plugged through ACPI by default (its slot then named by ACPI, "0");
  # with ACPI hotplug off the kernel's pciehp drives it and names it by its slot number.
  renumbered) nr0=0x80 nr1=0x40 rp1b_bus=pcie.0,addr=0x6
    pci_hp=(-global ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off) ;;
  *) echo "run.sh: unknown VM_PCI_LAYOUT ${VM_PCI_LAYOUT}" >&2; exit 2 ;;
esac
dev=(
  -device pxb-pcie,id=pxb0,bus_nr=$nr0,numa_node=0,bus=pcie.0
  -device pcie-root-port,id=rp0a,bus=pxb0,chassis=1,slot=101
  -device bochs-display,bus=rp0a
  -device pcie-root-port,id=rp0b,bus=pxb0,chassis=2,slot=102
  -device bochs-display,bus=rp0b
  -device pcie-root-port,id=rp0c,bus=pxb0,chassis=3,slot=103
  -device pcie-pci-bridge,id=br0,bus=rp0c
  -device bochs-display,bus=br0,addr=1
  -device e1000,bus=br0,addr=2,netdev=nd-none
  -device pxb-pcie,id=pxb1,bus_nr=$nr1,numa_node=1,bus=pcie.0
  -device pcie-root-port,id=rp1a,bus=pxb1,chassis=11,slot=111
  -device bochs-display,bus=rp1a
  -device pcie-root-port,id=rp1b,bus=$rp1b_bus,chassis=12,slot=112
  -device bochs-display,bus=rp1b
)
net=(-netdev hubport,id=nd-none,hubid=9)   # the e1000 is a companion device, not a network
# no_timer_check: under TCG on a loaded host the kernel's early IO-APIC timer check can miss its
# ticks and panic ("timer doesn't work through Interrupt-remapped IO-APIC"); it tests the
# emulator's timing, not anything of ours.
kargs="console=ttyS0 root=/dev/vda rw quiet intel_iommu=on panic=-1 systemd.show_status=0 no_timer_check"
if [ "${VM_NET:-}" = user ]; then
  net+=(-netdev user,id=nd-user -device virtio-net-pci,netdev=nd-user,bus=pcie.0,addr=0x4)
  kargs="$kargs gpuplane.net=1"
fi

ct=()
if [ "${VM_CT:-}" = 1 ]; then
  [ -f "$E2E_CACHE/ct.img" ] || { echo "run.sh: $E2E_CACHE/ct.img missing; $E2E_HINT" >&2; exit 2; }
  ct=(-drive file="$E2E_CACHE/ct.img",if=none,id=ct,format=raw,snapshot=on
      -device virtio-blk-pci,drive=ct,bus=pcie.0,addr=0x7)
fi

noreboot=-no-reboot
[ "${VM_REBOOT:-}" = 1 ] && noreboot=""
# launch: boots the machine once on $W/disk.img; sets qrc (qemu's exit, 124 on timeout) and secs
# (this boot's wall time), and adds it to total_ms (every boot of the run).
# A watcher reads the guest's console while it runs: a guest kernel that reports a CPU stuck for
# HANG_SECS or more (its soft-lockup watchdog, both vCPUs spinning with interrupts on) has hung
# inside the emulator — seen once in CI, under TCG on a loaded two-core host, in early boot before
# any script ran — and will not come back; the watcher ends that VM and leaves $W/hung.
HANG_SECS=${VM_HANG_SECS:-90}
launch() {
  local start ms wpid
  rm -f "$W/hung" "$W/console.log" "$W/result.log"
  start=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout --kill-after=10 "${VM_TIMEOUT:-300}" $QEMU \
    -nodefaults -display none $noreboot \
    -accel tcg -M q35,kernel-irqchip=split -smp 2 -m "$mem" \
    -object memory-backend-ram,id=m0,size=${half}M -object memory-backend-ram,id=m1,size=$(( mem - half ))M \
    -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1 \
    -device intel-iommu,intremap=on \
    "${pci_hp[@]}" "${dev[@]}" "${net[@]}" \
    -drive file="$W/disk.img",if=none,id=root,format=raw \
    -device virtio-blk-pci,drive=root,bus=pcie.0,addr=0x3 "${ct[@]}" \
    -chardev file,id=con,path="$W/console.log" -serial chardev:con \
    -chardev file,id=res,path="$W/result.log" -device isa-serial,chardev=res,index=1 \
    -kernel "$E2E_CACHE/vmlinuz" -initrd "$E2E_CACHE/initrd.img" \
    -append "$kargs $bootargs" \
    ${VM_QEMU_ARGS:-} >"$W/qemu.log" 2>&1 &
  qpid=$!
  ( while kill -0 "$qpid" 2>/dev/null; do
      sleep 5
      if grep -Eo 'soft lockup - CPU#[0-9]+ stuck for [0-9]+s' "$W/console.log" 2>/dev/null \
          | awk -v h="$HANG_SECS" '{ n = $NF; sub(/s$/, "", n); if (n + 0 >= h) f = 1 } END { exit !f }'; then
        touch "$W/hung"; kill "$qpid" 2>/dev/null; exit 0
      fi
    done ) &
  wpid=$!
  qrc=0
  wait "$qpid" || qrc=$?
  qpid=""
  kill "$wpid" 2>/dev/null || true; wait "$wpid" 2>/dev/null || true
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  secs=$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))
  total_ms=$(( ${total_ms:-0} + ms ))
}
# boots: boots the machine until the script has ended: once, or with VM_REBOOT=entry across the
# guest's own reboots, each next boot with the kernel command line of the boot entry that the
# bootloader stand-ins recorded on the guest's disk (ENTRY, read with debugfs once the guest is
# down): the harness plays the bootloader. The script's output of every boot is kept in order.
ENTRY=/var/lib/standin-boot/entry
boots() {
  local n=1 entry
  bootargs=${KARGS:-}
  : >"$W/result.all"
  while :; do
    launch
    [ -e "$W/hung" ] && return 0
    cat "$W/result.log" >>"$W/result.all" 2>/dev/null || true
    [ "${VM_REBOOT:-}" = entry ] || return 0
    # Ended: the last @@BEGIN@@ has its @@END@@.
    if tr -d '\r' <"$W/result.all" | awk '/^@@BEGIN@@$/ {o = 1} /^@@END@@ rc=[0-9]*$/ {o = 0} END {exit o}'; then
      return 0
    fi
    n=$((n + 1))
    if [ $n -gt "${VM_MAX_BOOTS:-3}" ]; then
      echo "run.sh: the guest rebooted again after ${VM_MAX_BOOTS:-3} boots; not booting it once more" >&2
      return 0
    fi
    entry=$(debugfs -R "cat $ENTRY" "$W/disk.img" 2>/dev/null | tr -d '\r' | tr '\n' ' ' | sed 's/ *$//')
    if [ -z "$entry" ]; then
      echo "run.sh: the guest went down before its script ended, and $ENTRY is empty: no boot entry to boot" >&2
      return 0
    fi
    echo "run.sh: the guest rebooted; boot $n runs the entry the bootloader stand-in recorded: $entry" >&2
    bootargs=$entry
  done
}
# One more try, from a fresh copy of the image, when a boot hung in the emulator; the test
# still has to pass whole on that try, and stderr says that it was needed.
boots
if [ -e "$W/hung" ]; then
  echo "run.sh: the guest kernel hung in the emulator after ${secs}s (a CPU stuck for ${HANG_SECS}s or more; not the script):" >&2
  grep -m 4 'soft lockup\|self-detected stall' "$W/console.log" | tr -d '\r' >&2 || true
  echo "run.sh: booting once more from a fresh copy of the image" >&2
  cp "$W/console.log" "$W/console.hung.log"
  prepare_disk "$@"
  boots
fi
secs=$(printf '%d.%03d' $((total_ms / 1000)) $((total_ms % 1000)))
echo "$secs" >"$W/wall_seconds"
[ "${VM_QUIET:-}" = 1 ] || echo "run.sh: VM ran ${secs}s (every boot, script, power-off)" >&2

sed 's/\r$//' "$W/result.all" >"$W/result.txt"
end_line=$(grep -n '^@@END@@ rc=[0-9]*$' "$W/result.txt" | tail -1 || true)
if grep -q '^@@BEGIN@@$' "$W/result.txt" && [ -n "$end_line" ]; then
  begin=$(grep -n '^@@BEGIN@@$' "$W/result.txt" | head -1 | cut -d: -f1)
  end=${end_line%%:*}
  rc=${end_line##*rc=}
  sed -n "$((begin + 1)),$((end - 1))p" "$W/result.txt"
  if [ "${VM_KEEP:-}" = 1 ]; then
    echo "run.sh: work dir kept: $W" >&2
  else
    rm -rf "$W"
  fi
  exit "$rc"
fi

rm -f "$W/disk.img"
{
  echo "run.sh: the VM ended without reporting a result (qemu exit $qrc after ${secs}s)."
  if [ -e "$W/hung" ]; then
    echo "run.sh: the guest kernel hung in the emulator on both boots (a CPU stuck for ${HANG_SECS}s or more)"
  elif [ $qrc = 124 ] || [ $qrc = 137 ]; then
    echo "run.sh: timed out after ${VM_TIMEOUT:-300}s (set VM_TIMEOUT to wait longer)"
  fi
  echo "---- qemu.log"; tail -20 "$W/qemu.log"
  echo "---- last 60 lines of $W/console.log"; tail -60 "$W/console.log" | tr -d '\r'
  echo "---- partial result ($W/result.txt)"; tail -20 "$W/result.txt"
} >&2
if [ $qrc = 124 ] || [ $qrc = 137 ]; then exit 124; fi
exit 125
