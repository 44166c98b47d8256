#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh) at each boot, under run.sh VM_REBOOT=entry:
# `reboot: Auto` (issue 25, part 3) with the agent as a systemd service on manifest files.
#
# Boot 1 (booted with iommu=pt, the host as it was): the agent (gpuplane run --manifests, a unit
# enabled for every boot) converges a partition without kernel arguments: the SGLang stand-in
# serves on the host slice {numaNode: 0}, the vm slice {numaNode: 1} is on vfio-pci for VM 300.
# Then the operator's change: spec.host.kernelArgs {present: [vfio-pci.disable_idle_d3=1],
# absent: [iommu=pt]}, reboot: Auto, a maintenance window that is open all day. The agent writes
# /etc/kernel/cmdline, runs the refresh, stops the server and runs `systemctl reboot` itself;
# this script sleeps until the shutdown ends it.
# Boot 2 (run.sh booted the entry the proxmox-boot-tool stand-in recorded: THE REAL BOOTLOADER IS
# NOT RUN, scenario-lib.sh boot_standins says what the stand-in does): the agent starts at boot,
# verifies /proc/cmdline, reports the partition Ready and starts the server again. The script
# waits for that and prints what a person would look at.
# Lines: CMDLINE, BOOT-ID, PHASE, STATUS (a status file's conditions as "type status reason"),
# MESSAGE, ACTIVE, DRV, PARAM, FILE, RAN, AGENTLOG (the agent's log of both boots, each begun by
# "=== boot <id>": the image keeps no journal across boots).
set -u
. /usr/local/bin/scenario-lib.sh
MARK=/var/lib/e2e-reboot-auto
S=/var/lib/gpuplane/status
LOG=/var/log/gpuplane-e2e.log
echo "CMDLINE $(cat /proc/cmdline)"
echo "BOOT-ID $(cat /proc/sys/kernel/random/boot_id)"
# conds FILE: "STATUS type status reason" per condition of a status file (the agent's YAML:
# list items with sorted keys; no YAML library in the image), and "MESSAGE type text" for some
conds() { python3 - "$1" <<'PY'
import sys
conds, cur = [], None
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("- lastTransitionTime:"):
        cur = {}; conds.append(cur)
    elif cur is not None and line.startswith("  ") and ": " in line and not line.startswith("   "):
        k, v = line.strip().split(": ", 1)
        if len(v) >= 2 and v[0] == v[-1] == "'":
            v = v[1:-1].replace("''", "'")
        cur[k] = v
    elif not line.startswith(" "):
        cur = None
for c in conds:
    print("STATUS", c.get("type"), c.get("status"), c.get("reason", ""))
    if c.get("type") in ("Ready", "RebootRequired", "Reconciling"):
        print("MESSAGE", c.get("type"), c.get("message", ""))
PY
}
part_status() { echo $S/GpuPartition-vmhost.yaml; }
# wait_for SECONDS PATTERN...: until the partition's status has every STATUS line PATTERN, for
# at most SECONDS of the guest's clock (a look that misses sleeps a second too: the deadline is
# time, not a count of looks, which under TCG took from 0.3 s to several seconds each)
wait_for() { local end=$((SECONDS + $1)) p ok; shift; while [ "$SECONDS" -lt "$end" ]; do
  if [ -f "$(part_status)" ]; then
    c=$(conds "$(part_status)"); ok=1
    for p in "$@"; do grep -q "^STATUS $p" <<<"$c" || ok=0; done
    [ "$ok" = 1 ] && return 0
  fi; sleep 1; done; return 1; }
spec() {  # spec [HOST-YAML]: the partition (with spec.host) and the server, as the operator commits them
  partition auto '{numaNode: 0}' '{numaNode: 1}' vfio-pci "$VMC"
  [ -z "${1:-}" ] || sed -i "s|^  nodeName: vmhost\$|  nodeName: vmhost\n  host: $1|" $M/auto/partition.yaml
  server auto
}

if [ ! -e $MARK ]; then
  echo "PHASE boot1"
  mkdir -p /etc/pve/lxc /etc/pve/qemu-server /etc/pve/mapping /etc/kernel
  printf 'name: guest\nhostpci0: mapping=emu-vm,pcie=1\n' > /etc/pve/qemu-server/300.conf
  printf '# mappings kept by hand\n' > /etc/pve/mapping/pci.cfg
  printf 'root=/dev/vda rw quiet intel_iommu=on iommu=pt\n' > /etc/kernel/cmdline
  boot_standins
  install_standin; mkmodel /srv/models/tiny
  spec
  cat > /etc/systemd/system/gpuplane-e2e.service <<UNIT
[Unit]
Description=gpuplane on manifest files (the e2e reboot story)
# \$G links into the job disk, which a later boot mounts with nofail (not ordered before
# local-fs.target): without this the agent could start before it and fail to exec, silently.
RequiresMountsFor=/job
[Service]
Environment=GPUPLANE_LOG=info GPUPLANE_PROXMOX_BOOT_TOOL=$GPUPLANE_PROXMOX_BOOT_TOOL GPUPLANE_UPDATE_GRUB=$GPUPLANE_UPDATE_GRUB
ExecStartPre=/bin/sh -c 'echo "=== boot \$\$(cat /proc/sys/kernel/random/boot_id)"'
KillMode=mixed
ExecStart=$G run --manifests $M/auto --status-dir $S --metrics-addr 127.0.0.1:9464 --drift-interval 5 --poll-interval 1 $GP
StandardOutput=append:$LOG
StandardError=append:$LOG
[Install]
WantedBy=multi-user.target
UNIT
  touch $MARK; sync
  systemctl enable --now gpuplane-e2e.service 2>&1 | tail -n 1
  wait_for 240 "Ready True" || echo "PHASE not-ready-before"
  conds "$(part_status)"
  echo "ACTIVE before $(systemctl is-active sglang-e2e.service)"
  drv before
  echo "PHASE change"
  spec '{kernelArgs: {present: [vfio-pci.disable_idle_d3=1], absent: [iommu=pt]}, reboot: Auto, maintenanceWindow: {start: "00:00", end: "23:59"}}'
  sync
  sleep 600   # the agent reboots the host; the shutdown ends this script
  echo "PHASE no-reboot"
  conds "$(part_status)"
  exit 1
fi

echo "PHASE boot2"
# The status of this boot (boot 1's file says Ready too): the arguments verified.
if ! wait_for 600 "Ready True" "RebootRequired False KernelArgsBooted"; then
  echo "PHASE not-ready-after"
  # Why: the agent's unit and every line it wrote in this boot (the filtered log below shows
  # host writes and conditions only; a refusal or an error of observe is a warning).
  echo "AGENTUNIT $(systemctl is-active gpuplane-e2e.service) since $(systemctl show -p ActiveEnterTimestampMonotonic --value gpuplane-e2e.service)"
  echo "AGENTEXIT $(systemctl show -p Result -p ExecMainCode -p ExecMainStatus gpuplane-e2e.service | tr '\n' ' ')"
  journalctl -b -u gpuplane-e2e.service --no-pager 2>/dev/null | tail -n 8 | sed 's/^/JOURNAL /'
  sed 's/\x1b\[[0-9;]*m//g' $LOG | sed -n '/^=== boot '"$(cat /proc/sys/kernel/random/boot_id)"'/,$p' | tail -n 60 | sed 's/^/AGENTRAW /'
  systemctl list-jobs --no-pager | sed 's/^/JOBS /'
fi
for i in $(seq 60); do [ "$(systemctl is-active sglang-e2e.service)" = active ] && break; sleep 1; done
conds "$(part_status)"
echo "ACTIVE after $(systemctl is-active sglang-e2e.service)"
drv after
echo "PARAM $(cat /sys/module/vfio_pci/parameters/disable_idle_d3 2>/dev/null || echo -)"
echo "FILE $(tr '\n' ' ' < /etc/kernel/cmdline)"
sed 's/^/RAN /' /var/lib/standin-boot/ran
sed 's/\x1b\[[0-9;]*m//g' $LOG | grep -E "^=== boot|host write|(Ready|RebootRequired|Reconciling)=|SIGTERM|stopped after" | sed 's/^/AGENTLOG /'
exit 0
