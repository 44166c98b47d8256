#!/bin/bash
# Runs inside the VM (run.sh VM_FAULTS=1): each GPU's health on a real kernel (issue 40). The
# faults are real to the guest kernel: qemu injects PCIe AER errors at a stand-in GPU's root port
# (the kernel's AER driver counts them in the port's aer_dev_* files, as on a host) and
# hot-unplugs one GPU; the NVIDIA driver's Xid line is written to /dev/kmsg as the driver writes
# it (the GPUs are stand-ins: no NVIDIA driver runs here). Each fault is asked of the harness
# with `fault` (qmp-faults.py relays it to qemu's monitor); the scenario waits until the kernel
# shows it, then converges once. (A correctable error is not among them: qemu 7.2 sets it in the
# root port's correctable status register but sends the kernel no message, so no counter moves;
# tried with RCVR and BAD_TLP, the port's reporting enabled and unmasked. The twin covers it.)
# Prints:
#   PORT gpu port aer|noaer        each GPU's upstream port and whether it has AER counters
#   SEEN P ms                      how long phase P's fault took to show in sysfs
#   RC/JSON/STDERR P ...           the converge after phase P (scenario-lib.sh `converge`)
#   MS P ms                        that converge's wall time (from the fault seen to the status)
set -u
. /usr/local/bin/scenario-lib.sh
GPUS="0000:41:00.0 0000:42:00.0 0000:44:01.0 0000:81:00.0 0000:82:00.0"
# The partition: NUMA 0's three GPUs on the host driver, NUMA 1's two on vfio-pci for VM 300
# (the AER counters, the link and config space are PCI core's: watched on any driver).
pve_vm "$KEPT_NIC\n"
partition p '{numaNode: 0}' '{numaNode: 1}' vfio-pci "$VMC"
port_of() { basename "$(dirname "$(readlink -f /sys/bus/pci/devices/$1)")"; }
for g in $GPUS; do
  p=$(port_of $g)
  echo "PORT $g $p $([ -e /sys/bus/pci/devices/$p/aer_dev_fatal ] && echo aer || echo noaer)"
done
n=0
# fault COMMAND: asks the harness to run COMMAND on qemu's monitor
fault() { n=$((n + 1)); echo "@@FAULT $n $*@@"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
# total DEV KIND: DEV's aer_dev_KIND total (0 when unreadable)
total() { awk '/^TOTAL_/ {print $2}' /sys/bus/pci/devices/$1/aer_dev_$2 2>/dev/null | grep . || echo 0; }
# seen P T0 CHECK...: waits (60 s at most) until CHECK succeeds, then prints SEEN P ms since T0
seen() { local p=$1 t0=$2; shift 2
  for _ in $(seq 1 600); do
    if "$@"; then echo "SEEN $p $(( $(now_ms) - t0 ))"; return 0; fi
    sleep 0.1
  done
  echo "SEEN $p timeout"; }
at_least() { [ "$(total $1 $2)" -ge "$3" ]; }
gone() { [ ! -e /sys/bus/pci/devices/$1 ]; }
# phase P: the partition converged once, timed
phase() { local t0; mkdir -p $M/$1; cp $M/p/partition.yaml $M/$1/; t0=$(now_ms)
  converge $1; echo "MS $1 $(( $(now_ms) - t0 ))"; }

echo "== base: five quiet GPUs, NUMA 1's on vfio-pci"
phase base

echo "== nonfatal: a completion timeout at 41:00.0's root port"
p=$(port_of 0000:41:00.0); t0=$(now_ms)
fault pcie_aer_inject_error rp0a COMP_TIME
seen nonfatal $t0 at_least $p nonfatal 1; phase nonfatal

echo "== fatal: a surprise down at 81:00.0's root port (the GPU on vfio-pci)"
p=$(port_of 0000:81:00.0); t0=$(now_ms)
fault pcie_aer_inject_error rp1a SDN
seen fatal $t0 at_least $p fatal 1; phase fatal

echo "== xid: the NVIDIA driver's Xid 48 (uncorrectable ECC) for 44:01.0, written as the driver does"
t0=$(now_ms)
echo "NVRM: Xid (PCI:0000:44:01): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0." > /dev/kmsg
seen xid $t0 true; phase xid

echo "== unplug: 82:00.0 (on vfio-pci) taken off the bus (device_del of the GPU on root port rp1b)"
t0=$(now_ms)
fault device_del gpu1b
seen unplug $t0 gone 0000:82:00.0; phase unplug
dmesg | grep -E 'AER|pcieport|pciehp' | tail -20 | sed 's/^/DMESG unplug /'
echo "== done"
