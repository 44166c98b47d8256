#!/bin/bash
# Runs a script on the emulated GPU host, and prints what the script printed.
#
#   run.sh SCRIPT [FILE...]
#
# SCRIPT and each FILE go onto a job disk (job-runner.sh: FILE is linked as /usr/local/bin/<name>,
# every one mode 0755); the guest (Debian's kernel, systemd as PID 1), once multi-user.target is
# reached and udev settled, runs SCRIPT once and powers off. run.sh prints the script's
# stdout+stderr on its stdout, unchanged, and exits with the script's exit status.
#
# By default the guest is not booted: a snapshot of this machine shape, booted once and saved at
# the point where it waits for its job (snapshot.sh; made by the first run that needs it), is
# restored on a private copy of its disk, in a few seconds. VM_BOOT=fresh boots the kernel instead,
# for what a restore cannot show (boot-time state: the kernel command line of a boot entry, the
# layout a firmware gives at boot, a new boot id); run.sh says on stderr which it did.
#
# The machine: machine.sh.
#
# Environment:
#   KARGS               extra kernel command line (e.g. "iommu=pt"; "loglevel=7" undoes "quiet"
#                       for a verbose console.log); part of the machine shape (its snapshot)
#   VM_ARGS             the job's own arguments (e.g. "gpuplane.crash=split"), not the kernel's:
#                       the scenarios read them with job_arg (scenario-lib.sh)
#   VM_BOOT=fresh       boot the kernel instead of restoring the shape's snapshot
#   GPUPLANE_E2E_SNAPSHOTS  where snapshots are kept (default $GPUPLANE_E2E_CACHE/snapshots, or
#                       ~/.cache/gpuplane-e2e/snapshots when that is not writable)
#   VM_SLOTS            at most this many VMs of this machine run at once, over every process
#                       (default 2: a TCG guest keeps about one core busy); a run waits for a slot
#   VM_TIMEOUT          seconds before the VM is killed (default 300)
#   VM_MEM              guest memory in MiB, split evenly over the two nodes (default 1536)
#   VM_NET=user         add a user-mode NIC; the guest gets 10.0.2.15, the host is 10.0.2.2 ("host")
#   VM_QEMU_ARGS        extra qemu arguments (word-split)
#   VM_HANG_SECS        a guest kernel reporting a CPU stuck (soft lockup) this long has hung in
#                       the emulator: that VM is ended and run once more from a fresh copy of
#                       its disk (restored again, or booted again), said on stderr (default 90)
#   VM_QUIET=1          do not print the VM's wall time on stderr
#   VM_FAULTS=1         the guest may ask for hardware faults: a line `@@FAULT N COMMAND@@` on its
#                       result port runs COMMAND (pcie_aer_inject_error or device_del on a device
#                       id) once on qemu's monitor (qmp-faults.py); each is listed on stderr
#   VM_KEEP=1           keep the work dir (disk image, job disk, console.log) even on success
#   VM_REBOOT=1         a reboot of the guest restarts it on the same disk (default: it ends the
#                       VM); SCRIPT runs again at every boot and can tell them apart by a file
#                       it leaves on the disk. The output is everything from the first run's
#                       @@JOB@@ to the last @@END@@ (the later boots' @@BEGIN@@ lines included).
#                       A restored run's reboots are fresh boots of its disk.
#   VM_REBOOT=entry     the same, and each next boot runs the kernel command line of the boot
#                       entry the bootloader stand-ins (scenario-lib.sh boot_standins) recorded
#                       in /var/lib/standin-boot/entry, as a bootloader would; at most
#                       VM_MAX_BOOTS boots (default 3). The real bootloader is not run.
#                       Each later boot is a fresh boot.
#   VM_PCI_LAYOUT=renumbered  the same devices in the same slots at other addresses (the
#                       NUMA nodes' bus ranges swapped, rp1b on pcie.0): see machine.sh and
#                       e2e/vm/README.md
#   VM_CT=1             attach the container root filesystem (ct.img of build-image.sh) as a
#                       second disk, /dev/vdb, in snapshot mode (what the guest writes to it is
#                       dropped when the VM ends): the LXC container of e2e/vm/pct
#   VM_IMAGE=kube-node  boot the single-node Kubernetes image of build-kube-image.sh instead of
#                       the base image (give it VM_MEM=4096)
#   GPUPLANE_E2E_CACHE  where build-image.sh put the image (default /var/cache/gpuplane-e2e)
# Exit status: the script's; 124 if the VM timed out; 125 if the VM ended without reporting or no
# snapshot could be made (the console log's tail then goes to stderr and the work dir is kept); 2
# for usage/setup errors.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
. "$E2E_VM_DIR/machine.sh"
. "$E2E_VM_DIR/snapshot.sh"

if [ $# -lt 1 ]; then
  echo "usage: $0 SCRIPT [FILE...]" >&2
  exit 2
fi
SCRIPT=$1; shift
for f in "$SCRIPT" "$@"; do
  [ -f "$f" ] || { echo "run.sh: no such file: $f" >&2; exit 2; }
done
for t in $QEMU debugfs mke2fs zstd python3; do
  command -v $t >/dev/null || { echo "run.sh: $t not found; $E2E_HINT" >&2; exit 2; }
done
for f in base.img vmlinuz initrd.img stamp; do
  [ -f "$E2E_CACHE/$f" ] || { echo "run.sh: $E2E_CACHE/$f missing; $E2E_HINT" >&2; exit 2; }
done
case "$(cat "$E2E_CACHE/stamp")" in
  "script_sha=$(e2e_script_sha) "*) ;;
  *) echo "run.sh: $E2E_CACHE/base.img is stale (build-image.sh changed); $E2E_HINT" >&2; exit 2 ;;
esac
case "${VM_BOOT:-restore}" in
  restore|fresh) ;;
  *) echo "run.sh: VM_BOOT is restore (the default) or fresh, not ${VM_BOOT}" >&2; exit 2 ;;
esac
machine_init

W=$(mktemp -d "${TMPDIR:-/tmp}/gpuplane-vm.XXXXXX")
qpid=""
on_signal() {
  [ -n "$qpid" ] && kill "$qpid" 2>/dev/null
  [ -n "${TICKET:-}" ] && rm -f "$TICKET"
  rm -rf "$W/disk.img" "$W/job.img" "$W/job"
  exit 130
}
trap on_signal INT TERM

# stage_job FILE...: the job's files copied into W/job at once (the caller's files may be gone
# after a wait for a slot): the script, the files, the job's arguments.
stage_job() {
  local j=$W/job f
  rm -rf "$j"; mkdir -p "$j/files"
  install -m 0755 "$SCRIPT" "$j/job.sh"
  for f in "$@"; do install -m 0755 "$f" "$j/files/${f##*/}"; done
  printf '%s\n' "${VM_ARGS:-}" >"$j/args"
}

# make_job: the job disk W/job.img (job-runner.sh reads it), just before the machine runs: an ext4
# file system, made without mounting (mke2fs -d), holding what stage_job staged, the clock and a
# seed.
make_job() {
  local j=$W/job
  date +%s >"$j/epoch"
  head -c 64 /dev/urandom >"$j/seed"
  rm -f "$W/job.img"; truncate -s "${JOB_DISK_MB}M" "$W/job.img"
  if ! mke2fs -q -t ext4 -L gpe2e-job -d "$j" -F "$W/job.img" >"$W/mke2fs.log" 2>&1; then
    cat "$W/mke2fs.log" >&2
    echo "run.sh: the job's files do not fit a ${JOB_DISK_MB} MiB job disk (work dir $W)" >&2
    exit 2
  fi
}

# prepare_disk: a private root disk, W/disk.img: the restored snapshot's disk, or a copy of the
# image with the job runner written in for a fresh boot.
prepare_disk() {
  if [ "${VM_BOOT:-restore}" = restore ]; then
    cp --sparse=always "$SNAP/disk.img" "$W/disk.img"
  else
    boot_disk "$W/disk.img" || { echo "run.sh: work dir $W" >&2; exit 2; }
  fi
}

# take_slot: waits for one of VM_SLOTS slots (a lock file each, per user, held until run.sh and
# its qemu exit), first come first served: each waiter leaves a ticket named by the time it came,
# and only the oldest ticket of a live run.sh tries the slots, so a run that waits is not
# overtaken by one that came later (the lanes start the longest targets first).
take_slot() {
  local d=/tmp/gpuplane-vm-slots-$(id -u) i first
  mkdir -p "$d"
  TICKET=$d/ticket.$(date +%s%N).$$
  : >"$TICKET"
  while :; do
    first=$(find "$d" -maxdepth 1 -name 'ticket.*' | sort | head -1)
    if [ "$first" = "$TICKET" ]; then
      for i in $(seq 1 "${VM_SLOTS:-2}"); do
        exec 7>>"$d/slot.$i"
        if flock -n 7; then rm -f "$TICKET"; return 0; fi
        exec 7>&-
      done
    elif ! kill -0 "${first##*.}" 2>/dev/null; then
      rm -f "$first"   # its run.sh is gone
    fi
    sleep 0.2
  done
}
stage_job "$@"
take_slot

noreboot=(-no-reboot)
[ "${VM_REBOOT:-}" = 1 ] && noreboot=()
if [ "${VM_BOOT:-restore}" = restore ]; then
  snapshot_ensure
  restore=(-incoming "exec:zstd -dcq $SNAP/state.zst")
  how="restored from snapshot ${SNAP##*/}"
else
  restore=()
  how="booted fresh (VM_BOOT=fresh)"
fi
[ "${VM_QUIET:-}" = 1 ] || echo "run.sh: $how" >&2

# boots: runs the machine until the script has ended: once, or with VM_REBOOT=entry across the
# guest's own reboots, each next boot (a fresh one) with the kernel command line of the boot entry
# that the bootloader stand-ins recorded on the guest's disk (ENTRY, read with debugfs once the
# guest is down): the harness plays the bootloader. The script's output of every boot is kept in
# order.
ENTRY=/var/lib/standin-boot/entry
boots() {
  local n=1 entry append=${KERNEL_ARGS[*]} first=("${restore[@]}") faults=() relay=""
  : >"$W/result.all"
  while :; do
    if [ "${VM_FAULTS:-}" = 1 ]; then
      rm -f "$W/qmp.sock"
      faults=(-qmp "unix:$W/qmp.sock,server=on,wait=off")
      python3 "$E2E_VM_DIR/qmp-faults.py" "$W/qmp.sock" "$W/result.log" "$W/faults.log" &
      relay=$!
    fi
    launch "$W" "$append" "${noreboot[@]}" "${first[@]}" "${faults[@]}"
    if [ -n "$relay" ]; then kill "$relay" 2>/dev/null || true; wait "$relay" 2>/dev/null || true; relay=""; fi
    first=()
    [ -e "$W/hung" ] && return 0
    cat "$W/result.log" >>"$W/result.all" 2>/dev/null || true
    [ "${VM_REBOOT:-}" = entry ] || return 0
    # Ended: the last job start has its @@END@@.
    if tr -d '\r' <"$W/result.all" | awk '/^@@JOB@@$/ {o = 1} /^@@END@@ rc=[0-9]*$/ {o = 0} END {exit o}'; then
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
    append="${BASE_ARGS[*]} $entry"
  done
}
make_job
prepare_disk
boots
# One more try, from a fresh copy of the disk, when the guest hung in the emulator; the test still
# has to pass whole on that try, and stderr says that it was needed.
if [ -e "$W/hung" ]; then
  echo "run.sh: the guest kernel hung in the emulator after ${secs}s (a CPU stuck for ${VM_HANG_SECS:-90}s or more; not the script):" >&2
  grep -m 4 'soft lockup\|self-detected stall' "$W/console.log" | tr -d '\r' >&2 || true
  echo "run.sh: running once more from a fresh copy of the disk ($how)" >&2
  cp "$W/console.log" "$W/console.hung.log"
  make_job
  prepare_disk
  boots
fi
secs=$(printf '%d.%03d' $((total_ms / 1000)) $((total_ms % 1000)))
echo "$secs" >"$W/wall_seconds"
[ ! -s "$W/faults.log" ] || sed 's/^/run.sh: fault /' "$W/faults.log" >&2
[ "${VM_QUIET:-}" = 1 ] || echo "run.sh: VM ran ${secs}s (every boot or restore, script, power-off)" >&2

# The script's output: from the first @@JOB@@ (job-runner.sh) to the last @@END@@ (the image's
# run-check), the later boots' runner lines left out.
sed 's/\r$//' "$W/result.all" >"$W/result.txt"
end_line=$(grep -n '^@@END@@ rc=[0-9]*$' "$W/result.txt" | tail -1 || true)
if grep -q '^@@JOB@@$' "$W/result.txt" && [ -n "$end_line" ]; then
  begin=$(grep -n '^@@JOB@@$' "$W/result.txt" | head -1 | cut -d: -f1)
  end=${end_line%%:*}
  rc=${end_line##*rc=}
  sed -n "$((begin + 1)),$((end - 1))p" "$W/result.txt" | grep -v '^@@JOB@@$' || true
  if [ "${VM_KEEP:-}" = 1 ]; then
    echo "run.sh: work dir kept: $W" >&2
  else
    rm -rf "$W"
  fi
  exit "$rc"
fi

rm -rf "$W/disk.img" "$W/job.img" "$W/job"
{
  echo "run.sh: the VM ended without reporting a result (qemu exit $qrc after ${secs}s)."
  if [ -e "$W/hung" ]; then
    echo "run.sh: the guest kernel hung in the emulator on both tries (a CPU stuck for ${VM_HANG_SECS:-90}s or more)"
  elif [ $qrc = 124 ] || [ $qrc = 137 ]; then
    echo "run.sh: timed out after ${VM_TIMEOUT:-300}s (set VM_TIMEOUT to wait longer)"
  fi
  echo "---- qemu.log"; tail -20 "$W/qemu.log"
  echo "---- last 60 lines of $W/console.log"; tail -60 "$W/console.log" | tr -d '\r'
  echo "---- partial result ($W/result.txt)"; tail -20 "$W/result.txt"
} >&2
if [ $qrc = 124 ] || [ $qrc = 137 ]; then exit 124; fi
exit 125
