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
# Another gpuplane build to compare with (bench.env: OTHER=/usr/local/bin/<file>).
go_there() { $OTHER converge -f $M/there $GP > /dev/null 2>&1 || echo "NOTE other there failed"; }
go_back() { $OTHER converge -f $M/back $GP > /dev/null 2>&1 || echo "NOTE other back failed"; }
METHODS="bare driverctl gpuplane${OTHER:+ other}"
# A first gpuplane run each way outside the figures: page cache, the binary's first load.
gp_there; gp_back
echo "== rounds: $ROUNDS"
for r in $(seq 1 $ROUNDS); do
  for m in $METHODS; do
    case $m in bare) a=bare_there; b=bare_back;; driverctl) a=dc_there; b=dc_back;; gpuplane) a=gp_there; b=gp_back;; other) a=go_there; b=go_back;; esac
    t0=$(ms); $a; t1=$(ms); w1=$(where); $b; t2=$(ms); w2=$(where)
    echo "TIME $m $r $(( t2 - t0 )) there=$(( t1 - t0 )) back=$(( t2 - t1 ))"
    echo "DRV $m $r there: $w1 back: $w2"
  done
done
echo "== full observations and refreshes in one converge each way"
for dir in there back; do
  GPUPLANE_LOG=gpuplane=debug NO_COLOR=1 $G converge -f $M/$dir $GP 2>&1 >/dev/null \
    | awk -v d=$dir '/observe: the whole host/ {o++} /refresh after/ {r++} /host write:/ {w++} END {print "LOOKS", d, "observe=" o+0, "refresh=" r+0, "writes=" w+0}'
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
