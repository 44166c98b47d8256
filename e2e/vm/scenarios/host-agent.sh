#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh): the real gpuplane binary against the real kernel.
# Stand-in GPUs are bochs-display devices (vendor 1234, driver bochs-drm); Proxmox is not installed,
# so /etc/pve is a plain directory. Prints machine-readable lines for e2e/tests/vm_host/agent.rs.
set -u
. /usr/local/bin/scenario-lib.sh
pve_vm "$KEPT_NIC\n"
drv() { for d in 0000:41:00.0 0000:42:00.0 0000:44:01.0 0000:81:00.0 0000:82:00.0; do
  echo "DRV $1 $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none) $(cat /sys/bus/pci/devices/$d/driver_override)"; done; }

echo "== observe"
$G observe $GP --output json | json | sed 's/^/OBSERVE /'

echo "== split: NUMA 1 to vfio-pci"
partition split '{numaNode: 0}' '{numaNode: 1}' vfio-pci "$VMC"
converge split
drv split; ls /dev/vfio | sed 's/^/VFIO split /'
sed 's/^/PCICFG split /' /etc/pve/mapping/pci.cfg
mkdir -p $M/again && cp $M/split/partition.yaml $M/again/; converge again

echo "== back: NUMA 1 to the host driver"
partition back '{numaNode: 0}' '{numaNode: 1}' nvidia
converge back
drv back; sed 's/^/PCICFG back /' /etc/pve/mapping/pci.cfg

echo "== held: a process holds 0000:82:00.0"
card=$(ls /sys/bus/pci/devices/0000:82:00.0/drm | grep '^card' | head -1)
sleep 600 < /dev/dri/$card & holder=$!
sleep 1
mkdir -p $M/held && cp $M/split/partition.yaml $M/held/; converge held
drv held
kill $holder; wait $holder 2>/dev/null

echo "== shared: 0000:44:01.0 shares its IOMMU group with an e1000 and a bridge"
partition shared '{addresses: ["0000:41:00.0", "0000:42:00.0"]}' '{addresses: ["0000:44:01.0"]}' vfio-pci "$VMC"
converge shared
drv shared

echo "== unit: an SGLang stand-in as a real systemd unit on the host"
install_standin
mkmodel /srv/models/tiny
card42=$(ls /sys/bus/pci/devices/0000:42:00.0/drm | grep '^card' | head -1)
# server DIR CARD: the stand-in keeps /dev/dri/CARD open, as SGLang keeps /dev/nvidiaN open
partition unit '{numaNode: 0}' '{numaNode: 1}' nvidia; server unit "$(hold "$card42")" 30 120
converge unit
echo "ACTIVE unit $(systemctl is-active sglang-e2e.service)"
echo "HOLDERS unit $($G observe $GP --output json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d["pciDevices"]["0000:42:00.0"].get("holders", [])))')"
grep -c '^ExecStart=/opt/sglang-venv/bin/python3 -m sglang.launch_server' /etc/systemd/system/sglang-e2e.service | sed 's/^/EXECSTART unit /'
mkdir -p $M/unit-again && cp $M/unit/*.yaml $M/unit-again/; converge unit-again

echo "== move: 0000:42:00.0, held by the running server, goes to the VM"
card41=$(ls /sys/bus/pci/devices/0000:41:00.0/drm | grep '^card' | head -1)
partition move '{addresses: ["0000:41:00.0", "0000:44:01.0"]}' '{addresses: ["0000:42:00.0"]}' vfio-pci "$VMC"; server move "$(hold "$card41")" 30 120
converge move
echo "ACTIVE move $(systemctl is-active sglang-e2e.service)"
journalctl -u sglang-e2e.service -o cat --no-pager | grep -E '^(Stopped|Started|Stopping)' | sed 's/^/JOURNAL move /'
drv move
systemctl stop sglang-e2e.service
