# The emulated GPU host's machine (sourced by run.sh): the qemu command line of a machine shape and
# one launch of it with the hang watcher. A snapshot is only valid for the exact machine it was
# saved from, so both the snapshot boot and every restore build their command line here, and the
# snapshot's key hashes it (snapshot.sh).
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
#   pcie.0: virtio-blk root disk (00:03.0, numa_node -1), the job disk (virtio-blk, serial
#   gpe2e-job, 00:08.0: job-runner.sh), the container disk with VM_CT=1 (00:07.0), a virtio-net
#   NIC with VM_NET=user (00:04.0); a vmgenid device (ACPI), so that a restored guest reseeds.
# bochs-display is vendor:device 1234:1111, class 0x038000, driven by the "bochs" DRM driver; each
# has an id (gpu0a, gpu0b, gpu0c, gpu1a, gpu1b: its root port's name) for qemu's monitor (VM_FAULTS).
# Kernel args always include intel_iommu=on (groups of type DMA-FQ); KARGS=iommu=pt gives identity.

QEMU=qemu-system-x86_64
# The job disk's size: every job disk of a machine has it, the blank one a snapshot saw included
# (a restored guest keeps the size it probed).
JOB_DISK_MB=2048

# machine_init: checks the shape's environment (VM_PCI_LAYOUT, VM_NET, VM_CT, VM_MEM, VM_IMAGE,
# KARGS, VM_QEMU_ARGS) and sets IMAGE, MEM and the arrays MACHINE (every qemu argument but the per-run files)
# and KERNEL_ARGS (the kernel command line, one word each: BASE_ARGS, the machine's, then KARGS).
machine_init() {
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
  MEM=${VM_MEM:-1536}
  local half=$(( MEM / 2 )) nr0 nr1 rp1b_bus pci_hp=() net ct=()
  # Root port slot numbers are 100 + chassis: unique on the machine (the kernel suffixes a repeated
  # slot name with -1, -2 in probe order) and above the pcie-pci-bridge's SHPC slots, which the
  # kernel names 1..31 after their device numbers (so 44:01.0's slot is "1").
  case "${VM_PCI_LAYOUT:-default}" in
    default) nr0=0x40 nr1=0x80 rp1b_bus=pxb1 ;;
    # The same GPUs in the same slots, every address changed: the two NUMA nodes' bus ranges
    # swapped (slot 101's GPU is at 81:00.0, where slot 111's was), and slot 112's root port moved
    # off NUMA node 1 onto the root complex (pcie.0, no NUMA node): its GPU is at 01:00.0. A root
    # port on pcie.0 is hot-plugged through ACPI by default (its slot then named by ACPI, "0");
    # with ACPI hotplug off the kernel's pciehp drives it and names it by its slot number.
    renumbered) nr0=0x80 nr1=0x40 rp1b_bus=pcie.0,addr=0x6
      pci_hp=(-global ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off) ;;
    *) echo "run.sh: unknown VM_PCI_LAYOUT ${VM_PCI_LAYOUT}" >&2; exit 2 ;;
  esac
  # no_timer_check: under TCG on a loaded host the kernel's early IO-APIC timer check can miss its
  # ticks and panic ("timer doesn't work through Interrupt-remapped IO-APIC"); it tests the
  # emulator's timing, not anything of ours.
  BASE_ARGS=(console=ttyS0 root=/dev/vda rw quiet intel_iommu=on panic=-1 systemd.show_status=0 no_timer_check)
  # The e1000 is a group companion, not a network.
  net=(-netdev hubport,id=nd-none,hubid=9)
  if [ "${VM_NET:-}" = user ]; then
    net+=(-netdev user,id=nd-user -device virtio-net-pci,netdev=nd-user,bus=pcie.0,addr=0x4)
    BASE_ARGS+=(gpuplane.net=1)
  fi
  # shellcheck disable=SC2206
  KERNEL_ARGS=("${BASE_ARGS[@]}" ${KARGS:-})
  if [ "${VM_CT:-}" = 1 ]; then
    [ -f "$E2E_CACHE/ct.img" ] || { echo "run.sh: $E2E_CACHE/ct.img missing; $E2E_HINT" >&2; exit 2; }
    # Snapshot mode: what the guest writes to the container disk is dropped when the VM ends.
    ct=(-drive "file=$E2E_CACHE/ct.img,if=none,id=ct,format=raw,snapshot=on"
        -device virtio-blk-pci,drive=ct,bus=pcie.0,addr=0x7)
  fi
  MACHINE=(
    -nodefaults -display none
    -accel tcg -M q35,kernel-irqchip=split -smp 2 -m "$MEM"
    -object "memory-backend-ram,id=m0,size=${half}M" -object "memory-backend-ram,id=m1,size=$(( MEM - half ))M"
    -numa node,nodeid=0,cpus=0,memdev=m0 -numa node,nodeid=1,cpus=1,memdev=m1
    -device intel-iommu,intremap=on
    "${pci_hp[@]}"
    -device "pxb-pcie,id=pxb0,bus_nr=$nr0,numa_node=0,bus=pcie.0"
    -device pcie-root-port,id=rp0a,bus=pxb0,chassis=1,slot=101
    -device bochs-display,bus=rp0a,id=gpu0a
    -device pcie-root-port,id=rp0b,bus=pxb0,chassis=2,slot=102
    -device bochs-display,bus=rp0b,id=gpu0b
    -device pcie-root-port,id=rp0c,bus=pxb0,chassis=3,slot=103
    -device pcie-pci-bridge,id=br0,bus=rp0c
    -device bochs-display,bus=br0,addr=1,id=gpu0c
    -device e1000,bus=br0,addr=2,netdev=nd-none
    -device "pxb-pcie,id=pxb1,bus_nr=$nr1,numa_node=1,bus=pcie.0"
    -device pcie-root-port,id=rp1a,bus=pxb1,chassis=11,slot=111
    -device bochs-display,bus=rp1a,id=gpu1a
    -device "pcie-root-port,id=rp1b,bus=$rp1b_bus,chassis=12,slot=112"
    -device bochs-display,bus=rp1b,id=gpu1b
    "${net[@]}" "${ct[@]}"
    -device vmgenid
    -kernel "$E2E_CACHE/vmlinuz" -initrd "$E2E_CACHE/initrd.img"
  )
  # shellcheck disable=SC2206
  MACHINE+=(${VM_QEMU_ARGS:-})
}

# machine_files W: the qemu arguments naming W's per-run files: the root disk W/disk.img, the job
# disk W/job.img, the console W/console.log and the result port W/result.log. Not part of a
# snapshot's key: a restore gives the same devices other files.
machine_files() {
  local w=$1
  MACHINE_FILES=(
    -drive "file=$w/disk.img,if=none,id=root,format=raw"
    -device virtio-blk-pci,drive=root,bus=pcie.0,addr=0x3
    -drive "file=$w/job.img,if=none,id=job,format=raw"
    -device virtio-blk-pci,drive=job,bus=pcie.0,addr=0x8,serial=gpe2e-job
    -chardev "file,id=con,path=$w/console.log" -serial chardev:con
    -chardev "file,id=res,path=$w/result.log" -device isa-serial,chardev=res,index=1
  )
}

# launch W KERNEL-ARGS [QEMU-ARG...]: runs the machine once on W's files (with the given kernel
# command line and extra qemu arguments: -no-reboot, -incoming, -qmp); sets qrc (qemu's exit, 124
# on timeout) and secs (this run's wall time) and adds it to total_ms. While it runs, a watcher
# reads the guest's console: a guest kernel that reports a CPU stuck for VM_HANG_SECS (90) or more
# (its soft-lockup watchdog, both vCPUs spinning with interrupts on) has hung inside the emulator —
# seen once in CI, under TCG on a loaded two-core host, in early boot before any script ran — and
# will not come back; the watcher ends that VM and leaves W/hung. LAUNCH_WATCH, when set, is a
# command the watcher runs every second with qemu's pid (snapshot.sh saves the machine with it).
launch() {
  local w=$1 append=$2 start ms wpid hang=${VM_HANG_SECS:-90}
  shift 2
  rm -f "$w/hung" "$w/console.log" "$w/result.log"
  machine_files "$w"
  start=$(date +%s%N)
  timeout --kill-after=10 "${VM_TIMEOUT:-300}" $QEMU "${MACHINE[@]}" "${MACHINE_FILES[@]}" \
    -append "$append" "$@" >"$w/qemu.log" 2>&1 &
  qpid=$!
  ( n=0
    while kill -0 "$qpid" 2>/dev/null; do
      sleep 1; n=$((n + 1))
      [ -z "${LAUNCH_WATCH:-}" ] || $LAUNCH_WATCH "$qpid" || true
      [ $((n % 5)) = 0 ] || continue
      if grep -Eo 'soft lockup - CPU#[0-9]+ stuck for [0-9]+s' "$w/console.log" 2>/dev/null \
          | awk -v h="$hang" '{ n = $NF; sub(/s$/, "", n); if (n + 0 >= h) f = 1 } END { exit !f }'; then
        touch "$w/hung"; kill "$qpid" 2>/dev/null; exit 0
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

# boot_disk DISK: a copy of the image as DISK, ready for a first boot (a fresh run's or a snapshot's):
# job-runner.sh written in as /usr/local/bin/check.sh (mode 0755, root's), which the image's
# run-check unit runs at every boot; with debugfs, no mount, no root needed.
boot_disk() {
  local img=$1 dst=/usr/local/bin/check.sh
  cp --sparse=always "$IMAGE" "$img"
  printf '%s\n' "rm $dst" "write $E2E_VM_DIR/job-runner.sh $dst" "set_inode_field $dst mode 0100755" \
    "set_inode_field $dst uid 0" "set_inode_field $dst gid 0" >"$img.debugfs"
  debugfs -w -f "$img.debugfs" "$img" >"$img.debugfs.log" 2>&1
  if ! debugfs -R "stat $dst" "$img" 2>/dev/null | grep -q 'Mode:  0755'; then
    cat "$img.debugfs.log" >&2
    echo "run.sh: could not write $dst into $img" >&2
    return 1
  fi
  rm -f "$img.debugfs" "$img.debugfs.log"
}
