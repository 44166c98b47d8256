#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh), twice: the same GPUs in the same slots with
# their buses renumbered between the boots (issue 24). e2e/tests/vm_renumber.rs boots it first
# with run.sh's default layout, then with VM_PCI_LAYOUT=renumbered and the agent's state of the
# first boot (the STATE lines, installed as /usr/local/bin/renumber-<story>.state): a host whose
# firmware renumbered its buses over a reboot, while /var/lib/gpuplane and /etc/pve stayed.
#
# Two stories, each from the booted host (reset_host between them) with its own state:
#   follow  host {numaNode: 0} and vm {slots: [111, 112]} (vfio-pci, VM 300's mapping emu-vm):
#           after the renumbering the vm slice finds its GPUs in their slots at new addresses,
#           and the mapping is rewritten to list them there.
#   stall   vm {numaNode: 1} alone: slot 112's root port left NUMA node 1, so the same spec would
#           now give the slice other GPUs than the ledger says it had: HostLayoutChanged, and
#           nothing is changed, until a person accepts the layout (the accept-layout
#           annotation with the hash the message offers): then slot 111 alone goes to the VM.
# Lines (TAG STORY rest): IDENT (one per stand-in GPU: address, slot, NUMA node, driver,
# driver_override, topology path), RC/JSON/STDERR (scenario-lib's converge), DRV, PCICFG,
# LEDGER (gpus.json on one line), STATE (the agent's state, a base64 tar.gz), TEXT/TEXTRC (a
# converge in text, as a person reads it), ACCEPT (the hash written into the annotation).
set -u
. /usr/local/bin/scenario-lib.sh

# ident STORY: the stand-in GPUs as gpuplane observe sees them
ident() { $G observe $GP --output json | python3 -c '
import json, sys
for a, d in sorted(json.load(sys.stdin)["pciDevices"].items()):
    if d.get("vendor") != "1234":
        continue
    i = d.get("identity", {})
    print("IDENT", sys.argv[1], a, i.get("slot", "-"), d.get("numaNode"), d.get("driver", "-"),
          d.get("driverOverride", "-"), i.get("path", "-"))
' "$1"; }
# drv STORY: driver and driver_override of every stand-in GPU
pcicfg() { sed "s/^/PCICFG $1 /" /etc/pve/mapping/pci.cfg; }
ledger() { echo "LEDGER $1 $(json < /var/lib/gpuplane/gpus.json)"; }
# pve: VM 300 and a mapping kept by hand, as host-agent.sh writes them
pve() {
  pve_vm "$KEPT_NIC\n"
}
# spec STORY: the story's manifests (the same text at both boots)
spec() {
  case $1 in
    follow) partition follow '{numaNode: 0}' '{slots: ["111", "112"]}' vfio-pci "$VMC" ;;
    stall) mkdir -p $M/stall; { part_head; cat <<EOF; } > $M/stall/partition.yaml
    - name: vm
      gpus: {numaNode: 1}
      driver: vfio-pci
$VMC
EOF
    ;;
  esac
}
state_file() { echo /usr/local/bin/renumber-$1.state; }

if [ ! -f "$(state_file follow)" ]; then
  echo "== before: the default layout"
  ident before
  for s in follow stall; do
    echo "== $s: converge, then the state the next boot starts from"
    pve; spec $s
    converge $s
    drv $s; pcicfg $s; ledger $s
    echo "STATE $s $(tar czf - -C / var/lib/gpuplane etc/pve | base64 -w0)"
    reset_host
  done
  exit 0
fi

echo "== after: the renumbered layout"
ident after
for s in follow stall; do
  echo "== $s: the state of the first boot, the same spec"
  rm -rf /var/lib/gpuplane /etc/pve
  base64 -d "$(state_file $s)" | tar xzf - -C /
  spec $s
  drv $s-restored; pcicfg $s-restored; ledger $s-restored
  converge $s
  drv $s; pcicfg $s; ledger $s
  # Again: follow is converged (zero writes); stall stays stalled, as a person reads it.
  cp -r $M/$s $M/$s-again; converge $s-again
  $G converge -f $M/$s $GP > /tmp/text 2>&1; echo "TEXTRC $s $?"
  sed "s/^/TEXT $s /" /tmp/text
  drv $s-again; pcicfg $s-again
  if [ $s = stall ]; then
    # A person checked the host and accepts the new layout with the hash the message offers.
    hash=$(sed -n 's/.*accept-layout=\([0-9a-f]*\).*/\1/p' /tmp/text | head -1)
    echo "ACCEPT stall $hash"
    mkdir -p $M/stall-accepted
    sed "s|^metadata: {name: vmhost}\$|metadata: {name: vmhost, annotations: {gpuplane.dev/accept-layout: \"$hash\"}}|" \
      $M/stall/partition.yaml > $M/stall-accepted/partition.yaml
    converge stall-accepted
    drv stall-accepted; pcicfg stall-accepted; ledger stall-accepted
  fi
  reset_host
done
exit 0
