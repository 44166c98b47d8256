# Snapshots of the booted emulated host (sourced by run.sh; e2e/vm/README.md, "Snapshots").
#
# A snapshot is one machine shape (machine.sh's command line: image, layout, memory, NIC,
# container disk, kernel arguments) booted once to the point every job starts from — systemd up,
# udev settled, job-runner.sh waiting for its job — and saved there: the root disk as it was
# (disk.img) and the guest's RAM and device state (state.zst, qemu's migration stream). A run
# restores it on a copy of that disk with its own job disk, in seconds instead of a boot.
#
# Key: a hash of what the saved guest depends on: the machine's command line, the kernel command
# line, the image, kernel and initrd files (size and time), the base image's stamp, job-runner.sh,
# this file and qemu's version. Any change makes another key, and so another snapshot. When one is
# made, the others beyond the SNAP_KEEP_COUNT (8) most recently used, and any not used for
# SNAP_KEEP_DAYS (7), are removed: each is ~700 MB, and a day of edits to the machine once left 14
# behind and filled the disk under a whole suite. Made under a lock per key, in a temporary
# directory renamed into place: concurrent runs wait for one boot and share it.

SNAP_KEEP_DAYS=${SNAP_KEEP_DAYS:-7}
SNAP_KEEP_COUNT=${SNAP_KEEP_COUNT:-8}

# snapshot_prune: removes the snapshots (and their locks) not used for SNAP_KEEP_DAYS and those
# beyond the SNAP_KEEP_COUNT most recently used (a use touches the directory). The suite uses
# fewer shapes than that, so a run in progress never loses the one it restores from.
snapshot_prune() {
  local d
  find "$SNAP_ROOT" -mindepth 1 -maxdepth 1 -type d -name '[0-9a-f]*' -mtime +"$SNAP_KEEP_DAYS" -exec rm -rf {} + 2>/dev/null || true
  # shellcheck disable=SC2012 # the names are our own hex keys
  ls -1dt "$SNAP_ROOT"/[0-9a-f]*/ 2>/dev/null | tail -n +"$((SNAP_KEEP_COUNT + 1))" | while read -r d; do
    d=${d%/}
    rm -rf "$d" && rm -f "$SNAP_ROOT/.lock-${d##*/}"
  done
}

# snapshot_root: where snapshots live ($GPUPLANE_E2E_SNAPSHOTS; by default next to the image,
# or under ~/.cache when that is not writable); sets SNAP_ROOT.
snapshot_root() {
  SNAP_ROOT=${GPUPLANE_E2E_SNAPSHOTS:-$E2E_CACHE/snapshots}
  if ! mkdir -p "$SNAP_ROOT" 2>/dev/null || [ ! -w "$SNAP_ROOT" ]; then
    SNAP_ROOT=${XDG_CACHE_HOME:-$HOME/.cache}/gpuplane-e2e/snapshots
    mkdir -p "$SNAP_ROOT"
  fi
}

# snapshot_key: the key of the shape machine_init set up (see above).
snapshot_key() {
  local f
  {
    echo "format 1"
    printf '%s\n' "${MACHINE[@]}" "--" "${KERNEL_ARGS[@]}"
    for f in "$IMAGE" "$E2E_CACHE/vmlinuz" "$E2E_CACHE/initrd.img" "$E2E_CACHE/ct.img"; do
      [ -e "$f" ] && stat -c '%n %s %Y' "$f"
    done
    cat "$E2E_CACHE/stamp"
    sha256sum "$E2E_VM_DIR/job-runner.sh" "$E2E_VM_DIR/snapshot.sh" "$E2E_VM_DIR/machine.sh" | cut -d' ' -f1
    $QEMU --version | head -1
  } | sha256sum | cut -c1-16
}

# snapshot_watch QEMU-PID: launch's watcher command while a snapshot boots: once the runner said
# @@READY@@, saves the machine (qmp-save.py: migrate into state.zst, quit), once. launch ends the
# watcher once qemu quit: qmp-save.py marks success itself (state.zst.done).
snapshot_watch() {
  [ -e "$SNAP_W/saving" ] && return 0
  tr -d '\r' <"$SNAP_W/result.log" 2>/dev/null | grep -qx '@@READY@@' || return 0
  touch "$SNAP_W/saving"
  date +%s%N >"$SNAP_W/ready_at"
  python3 "$E2E_VM_DIR/qmp-save.py" "$SNAP_W/qmp.sock" "$SNAP_W/state.zst" 2>"$SNAP_W/save.err" || true
}

# snapshot_make DIR: boots the shape on a fresh copy of the image with the runner and a blank job
# disk, saves it when ready, and fills DIR (disk.img, state.zst, shape, times). One more boot when
# the emulator hung (launch's watcher), as for any run. Returns 1, with the reason on stderr, when
# no snapshot could be made.
snapshot_make() {
  local dir=$1 try t0 total_ms=0
  SNAP_W=$dir
  case "$dir" in *[!A-Za-z0-9._/+-]*) echo "run.sh: snapshot path $dir has characters qemu's exec: URI cannot take" >&2; return 1 ;; esac
  for try in 1 2; do
    rm -f "$dir"/{saving,state.zst,state.zst.done,ready_at,save.err,qmp.sock}
    boot_disk "$dir/disk.img" || return 1
    rm -f "$dir/job.img"; truncate -s "${JOB_DISK_MB}M" "$dir/job.img"
    t0=$(date +%s%N)
    LAUNCH_WATCH=snapshot_watch VM_TIMEOUT=${VM_SNAPSHOT_TIMEOUT:-600} \
      launch "$dir" "${KERNEL_ARGS[*]}" -no-reboot -qmp "unix:$dir/qmp.sock,server=on,wait=off"
    [ -e "$dir/hung" ] && [ $try = 1 ] && { echo "run.sh: the snapshot boot hung in the emulator; booting once more" >&2; continue; }
    break
  done
  if [ ! -e "$dir/state.zst.done" ] || [ "$qrc" != 0 ]; then
    {
      echo "run.sh: could not make the snapshot (qemu exit $qrc after ${secs}s)"
      [ -e "$dir/hung" ] && echo "run.sh: the guest kernel hung in the emulator on both boots"
      [ -s "$dir/save.err" ] && cat "$dir/save.err"
      echo "---- qemu.log"; tail -20 "$dir/qemu.log"
      echo "---- last 40 lines of the console"; tail -40 "$dir/console.log" | tr -d '\r'
      echo "---- result port"; tail -20 "$dir/result.log" | tr -d '\r'
    } >&2
    return 1
  fi
  printf '%s\n' "${MACHINE[@]}" "-append" "${KERNEL_ARGS[*]}" >"$dir/shape"
  echo "boot_s $(( ($(cat "$dir/ready_at") - t0) / 1000000000 )) total_s $(( ($(date +%s%N) - t0) / 1000000000 ))" >"$dir/times"
  rm -f "$dir"/{job.img,console.log,result.log,qemu.log,saving,qmp.sock,ready_at,save.err,hung,state.zst.done}
}

# snapshot_ensure: sets SNAP to the directory of the current shape's snapshot, making it first
# when there is none (one boot, said on stderr). Exit 125 when it cannot be made.
snapshot_ensure() {
  local key tmp
  snapshot_root
  key=$(snapshot_key)
  SNAP=$SNAP_ROOT/$key
  if [ ! -e "$SNAP/ok" ]; then
    exec 8>"$SNAP_ROOT/.lock-$key"
    flock 8
    if [ ! -e "$SNAP/ok" ]; then
      tmp=$SNAP_ROOT/.tmp-$key-$$
      rm -rf "$tmp"; mkdir -p "$tmp"
      echo "run.sh: no snapshot of this machine yet ($key): booting it once to make one" >&2
      if ! snapshot_make "$tmp"; then rm -rf "$tmp"; exit 125; fi
      touch "$tmp/ok"
      rm -rf "$SNAP"; mv "$tmp" "$SNAP"
      snapshot_prune
      echo "run.sh: snapshot $key made ($(cat "$SNAP/times"); $(du -sh "$SNAP" | cut -f1))" >&2
    fi
    exec 8>&-
  fi
  touch "$SNAP"
}
