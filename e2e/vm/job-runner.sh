#!/bin/bash
# Runs inside the VM as /usr/local/bin/check.sh (run.sh writes it into every disk it boots or
# snapshots; the image's run-check unit starts it once the host is settled, its output going to the
# result port). It runs the job that run.sh put on the job disk (virtio serial "gpe2e-job", an ext4
# file system made with mke2fs -d):
#   job.sh       the script to run (run.sh's SCRIPT)
#   files/NAME   the files it needs, linked as /usr/local/bin/NAME
#   args         the job's arguments (run.sh's VM_ARGS: gpuplane.crash=split ...), one line; the
#                scenarios read them with job_arg (scenario-lib.sh)
#   epoch, seed  the host's clock and 64 random bytes when the job was made
#
# A fresh boot finds the job at once. A snapshot boot (run.sh making a snapshot) finds a blank job
# disk: it prints "@@READY@@" on the result port and polls the disk; the harness saves the machine
# there, and every restore of it gives the disk a job, which the next poll (0.1 s) finds. A restored
# guest carries the snapshot's clock, random state and boot id: the clock is set from `epoch`, the
# random pool gets `seed` (at every boot; and the vmgenid device makes the kernel reseed on restore); the boot id
# stays the snapshot's (e2e/vm/README.md, "Snapshots").
#
# Prints "@@JOB@@" when the job starts: run.sh reads the job's output from there on.
set -u
JOBDEV=/dev/disk/by-id/virtio-gpe2e-job
# job_ready: the job disk holds an ext4 file system (magic 0xef53 at byte 1080), read with O_DIRECT:
# the guest's page cache may hold the blank disk the snapshot saw.
job_ready() {
  [ -b $JOBDEV ] &&
    [ "$(dd if=$JOBDEV bs=4096 count=1 iflag=direct 2>/dev/null | od -An -j1080 -N2 -tx2 | tr -d ' ')" = ef53 ]
}
restored=0
if ! job_ready; then
  [ -b $JOBDEV ] || { echo "job-runner: no job disk ($JOBDEV)"; exit 2; }
  echo "@@READY@@"
  until job_ready; do sleep 0.1; done
  restored=1
fi
blockdev --flushbufs $JOBDEV
mkdir -p /job
mountpoint -q /job || mount -t ext4 $JOBDEV /job || { echo "job-runner: cannot mount the job disk"; exit 2; }
# A later boot of this disk (VM_REBOOT) mounts it with the local file systems; `nofail` (a boot
# without the disk goes on) also means local-fs.target does not wait for it (systemd.mount(5)),
# so a unit that runs a job file on a later boot (an agent's unit: /usr/local/bin/gpuplane links
# here) says RequiresMountsFor=/job, or it may start first and fail to exec.
grep -q ' /job ' /etc/fstab || echo "$JOBDEV /job ext4 defaults,nofail 0 0" >>/etc/fstab
# A fresh boot read the clock from the emulated RTC (the host's); a restored guest's clock is the
# snapshot's until set.
[ $restored = 0 ] || date -s "@$(cat /job/epoch)" >/dev/null
cat /job/seed >/dev/urandom
for f in /job/files/*; do
  [ -e "$f" ] && ln -sfn "$f" "/usr/local/bin/${f##*/}"
done
echo "@@JOB@@"
exec /job/job.sh </dev/null
