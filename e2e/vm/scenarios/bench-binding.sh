#!/bin/bash
# Runs inside the VM: two stand-in GPUs moved to vfio-pci and back, ROUNDS times, alternating
# three ways: the bare sysfs writes (driver_override, unbind, drivers_probe: the limit), Debian's
# driverctl (set-override / unset-override), and gpuplane (one `converge` each way). Prints one
# "TIME <method> <round> <ms>" line per move there and back, and "DRV" lines to show each landed.
set -u
. /usr/local/bin/scenario-lib.sh
# Settings travel as a file (run.sh passes files, not environment): ROUNDS=N.
[ -f /usr/local/bin/bench.env ] && . /usr/local/bin/bench.env
ROUNDS=${ROUNDS:-5}
DEVS="0000:41:00.0 0000:42:00.0"
dpkg -i /usr/local/bin/driverctl_*.deb >/dev/null 2>&1 || echo "NOTE driverctl not installed"
modprobe vfio-pci
ms() { echo $(( $(date +%s%N) / 1000000 )); }
where() { for d in $DEVS; do basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none; done | tr '\n' ' '; }
part() { mkdir -p $M/$1; cat > $M/$1/p.yaml <<EOT
apiVersion: gpuplane.dev/v1alpha1
kind: GpuPartition
metadata: {name: vmhost}
spec:
  nodeName: vmhost
  deletionPolicy: Retain
  slices:
    - name: moved
      gpus: {addresses: [$(echo $DEVS | sed 's/ /, /')]}
      driver: $2
EOT
}
part there vfio-pci
part back nvidia
bare_there() { for d in $DEVS; do echo vfio-pci > /sys/bus/pci/devices/$d/driver_override; echo $d > /sys/bus/pci/devices/$d/driver/unbind; echo $d > /sys/bus/pci/drivers_probe; done; }
bare_back() { for d in $DEVS; do echo > /sys/bus/pci/devices/$d/driver_override; echo $d > /sys/bus/pci/devices/$d/driver/unbind; echo $d > /sys/bus/pci/drivers_probe; done; }
dc_there() { for d in $DEVS; do driverctl set-override $d vfio-pci; done; }
dc_back() { for d in $DEVS; do driverctl unset-override $d; done; }
gp_there() { $G converge -f $M/there $GP > /dev/null 2>/tmp/gp.err || { echo "NOTE gpuplane there failed"; cat /tmp/gp.err; }; }
gp_back() { $G converge -f $M/back $GP > /dev/null 2>/tmp/gp.err || { echo "NOTE gpuplane back failed"; cat /tmp/gp.err; }; }
# A first gpuplane run each way outside the figures: page cache, the binary's first load.
gp_there; gp_back
echo "== rounds: $ROUNDS"
for r in $(seq 1 $ROUNDS); do
  for m in bare driverctl gpuplane; do
    case $m in bare) a=bare_there; b=bare_back;; driverctl) a=dc_there; b=dc_back;; gpuplane) a=gp_there; b=gp_back;; esac
    t0=$(ms); $a; t1=$(ms); w1=$(where); $b; t2=$(ms); w2=$(where)
    echo "TIME $m $r $(( t2 - t0 )) there=$(( t1 - t0 )) back=$(( t2 - t1 ))"
    echo "DRV $m $r there: $w1 back: $w2"
  done
done
echo "== where gpuplane's time goes (each ROUNDS times)"
for r in $(seq 1 $ROUNDS); do
  t0=$(ms); $G --version >/dev/null; t1=$(ms)
  $G observe $GP --output json >/dev/null; t2=$(ms)
  $G converge -f $M/back $GP >/dev/null 2>&1; t3=$(ms)
  echo "PART start $r $(( t1 - t0 ))"
  echo "PART observe $r $(( t2 - t1 ))"
  echo "PART converged-converge $r $(( t3 - t2 ))"
done
