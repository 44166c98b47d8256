#!/bin/bash
# Runs inside the VM: faults of the real host for the real backend (issue 13, item 2), one boot.
# A read-only /etc/pve/mapping (as /etc/pve is when pmxcfs has no quorum: a read-only bind
# mount), a full disk under the mapping file (a 64 KiB tmpfs filled up), and a server unit that
# fails while starting (the SGLang stand-in runs out of KV-cache memory and exits 1). Each fault:
# a converge while it lasts, then it is taken away, a converge, and one more. Prints the
# `converge` lines of scenario-lib.sh and, per step NAME:
#   PCICFG NAME line              /etc/pve/mapping/pci.cfg after the converge
#   LEFT NAME path                a temporary file left under /etc/pve or /etc/systemd/system
#   DRV NAME addr driver override the stand-in GPUs' drivers
#   ACTIVE NAME state             the server unit's ActiveState (unit fault)
set -u
. /usr/local/bin/scenario-lib.sh
install_standin
mkmodel /srv/models/tiny   # the agent's preflight reads it before the server is placed
pve_vm "$KEPT_NIC"

# server DIR [EXTRA-ENV-LINE]
after() {  # NAME: what the host looks like after step NAME
  sed "s/^/PCICFG $1 /" /etc/pve/mapping/pci.cfg
  find /etc/pve /etc/systemd/system -name '*.tmp.*' | sed "s/^/LEFT $1 /"
  for d in 0000:41:00.0 0000:42:00.0 0000:81:00.0 0000:82:00.0; do
    echo "DRV $1 $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none) $(cat /sys/bus/pci/devices/$d/driver_override)"; done
}
run() { mkdir -p $M/$1; cp $M/$2/*.yaml $M/$1/; converge $1; after $1; }
partition split '{numaNode: 0}' '{numaNode: 1}' vfio-pci "$VMC"
partition back '{numaNode: 0}' '{numaNode: 1}' nvidia

echo "== read-only /etc/pve/mapping (no quorum)"
mount --bind /etc/pve/mapping /etc/pve/mapping && mount -o remount,bind,ro /etc/pve/mapping
echo "MOUNT ro $(findmnt -no OPTIONS /etc/pve/mapping | cut -d, -f1)"
run ro split
run ro-still split
umount /etc/pve/mapping
run ro-gone split
run ro-again split
run ro-reset back

echo "== a full disk under the mapping file"
cp /etc/pve/mapping/pci.cfg /tmp/pci.cfg.keep
mount -t tmpfs -o size=64k tmpfs /etc/pve/mapping
cp /tmp/pci.cfg.keep /etc/pve/mapping/pci.cfg
dd if=/dev/zero of=/etc/pve/mapping/filler bs=1k 2>/dev/null
echo "MOUNT full $(df --output=avail -k /etc/pve/mapping | tail -1 | tr -d ' ')"
run full split
rm /etc/pve/mapping/filler
run full-gone split
run full-again split
cp /etc/pve/mapping/pci.cfg /tmp/pci.cfg.keep; umount /etc/pve/mapping; cp /tmp/pci.cfg.keep /etc/pve/mapping/pci.cfg
run full-reset back

echo "== a server that fails while starting (out of KV-cache memory)"
mkdir -p $M/fail $M/fixed
partition fail '{numaNode: 0}' '{numaNode: 1}' nvidia; server fail '    - {name: STANDIN_KV_MIB, value: "-1"}' 60 120
converge fail; echo "ACTIVE fail $(systemctl show -p ActiveState --value sglang-e2e.service)"
partition fixed '{numaNode: 0}' '{numaNode: 1}' nvidia; server fixed '' 60 120
converge fixed; echo "ACTIVE fixed $(systemctl show -p ActiveState --value sglang-e2e.service)"
mkdir -p $M/fixed-again && cp $M/fixed/*.yaml $M/fixed-again/; converge fixed-again
systemctl stop sglang-e2e.service
echo "== done"
