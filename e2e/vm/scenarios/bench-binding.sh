#!/bin/bash
# Runs inside the VM: two stand-in GPUs moved to vfio-pci and back, ROUNDS times, alternating
# four ways: the bare sysfs writes (driver_override, unbind, drivers_probe: the limit), Debian's
# driverctl (set-override / unset-override), gpuplane (one `converge` process each way), and the
# gpuplane agent (`gpuplane run --manifests`, as gpuplane.service runs it: the manifest in the
# directory it watches is replaced; done when the agent has rewritten its status file and both
# devices are on the target driver). Prints one
# "TIME <method> <round> <ms>" line per move there and back, and "DRV" lines to show each landed.
set -u
. /usr/local/bin/scenario-lib.sh
# Settings travel as a file (run.sh passes files, not environment): ROUNDS=N.
[ -f /usr/local/bin/bench.env ] && . /usr/local/bin/bench.env
ROUNDS=${ROUNDS:-5}
DEVS="0000:41:00.0 0000:42:00.0"
dpkg -i /usr/local/bin/driverctl_*.deb >/dev/null 2>&1 || echo "NOTE driverctl not installed"
modprobe vfio-pci
now() { T=${EPOCHREALTIME/./}; }
where() { for d in $DEVS; do basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none; done | tr '\n' ' '; }
part() { mkdir -p $M/$1; { part_head '  deletionPolicy: Retain'; cat <<EOT; } > $M/$1/p.yaml
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
# The agent: started once, before the rounds, on the "back" manifest.
mkdir -p $M/live /tmp/st
cp $M/back/p.yaml $M/live/p.yaml
THERE=$(cat $M/there/p.yaml); BACK=$(cat $M/back/p.yaml)
GPUPLANE_LOG=${AGENT_LOG:-warn} NO_COLOR=1 \
  $G run --manifests $M/live --status-dir /tmp/st --metrics-addr 127.0.0.1:9465 --drift-interval 3600 $GP \
  > /tmp/agent.log 2>&1 &
APID=$!
AST=/tmp/st/GpuPartition-vmhost.yaml
exec 9<> <(:)
# on DRIVER: both devices on DRIVER (shell builtins only: the wait must not load the VM)
on() { for d in $DEVS; do [[ /sys/bus/pci/devices/$d/driver -ef /sys/bus/pci/drivers/$1 ]] || return 1; done; }
# agent_move TEXT DRIVER [DIR STATUS LOG]: replaces the manifest in DIR (default $M/live), waits
# (10 ms steps, at most 60 s) until the agent rewrote STATUS and both devices are on DRIVER
agent_move() { local dir=${3:-$M/live} st=${4:-$AST} log=${5:-/tmp/agent.log}; : > /tmp/ref
  printf '%s\n' "$1" > $dir/p.yaml; local n=0
  until [[ $st -nt /tmp/ref ]] && on "$2"; do read -t 0.01 -u 9; n=$((n + 1)); [ $n -gt 6000 ] && { echo "NOTE agent did not converge to $2"; tail -5 $log; return; }; done; }
ag_there() { agent_move "$THERE" vfio-pci; }
ag_back() { agent_move "$BACK" bochs-drm; }
until [ -f $AST ]; do sleep 0.2; done
# OTHER's agent ("agent-other"), on its own directory and status files, started once too. Two
# agents would both converge the host, so one is paused (SIGSTOP) while the other moves; each
# way ends where it began (back), so each finds the host as it left it.
AST2=/tmp/st2/GpuPartition-vmhost.yaml
if [ -n "${OTHER:-}" ]; then
  mkdir -p $M/live2 /tmp/st2; cp $M/back/p.yaml $M/live2/p.yaml
  GPUPLANE_LOG=warn NO_COLOR=1 $OTHER run --manifests $M/live2 --status-dir /tmp/st2 \
    --metrics-addr 127.0.0.1:9466 --drift-interval 3600 $GP > /tmp/agent2.log 2>&1 &
  APID2=$!
  until [ -f $AST2 ]; do sleep 0.2; done
  kill -STOP $APID2
fi
# switch_to main|other: the agent that moves next runs, the other is paused (not timed).
switch_to() { [ -n "${OTHER:-}" ] || return 0
  if [ "$1" = other ]; then kill -STOP $APID; kill -CONT $APID2; else kill -STOP $APID2; kill -CONT $APID; fi; sleep 0.3; }
ao_there() { agent_move "$THERE" vfio-pci $M/live2 $AST2 /tmp/agent2.log; }
ao_back() { agent_move "$BACK" bochs-drm $M/live2 $AST2 /tmp/agent2.log; }
# Another gpuplane build to compare with (bench.env: OTHER=/usr/local/bin/<file>).
go_there() { $OTHER converge -f $M/there $GP > /dev/null 2>&1 || echo "NOTE other there failed"; }
go_back() { $OTHER converge -f $M/back $GP > /dev/null 2>&1 || echo "NOTE other back failed"; }
METHODS="bare driverctl gpuplane agent${OTHER:+ other agent-other}"
# A first gpuplane run each way outside the figures: page cache, the binary's first load.
gp_there; gp_back; ag_there; ag_back
[ -n "${OTHER:-}" ] && { go_there; go_back; switch_to other; ao_there; ao_back; switch_to main; }
echo "== rounds: $ROUNDS"
for r in $(seq 1 $ROUNDS); do
  for m in $METHODS; do
    case $m in bare) a=bare_there; b=bare_back;; driverctl) a=dc_there; b=dc_back;; gpuplane) a=gp_there; b=gp_back;; agent) a=ag_there; b=ag_back;; other) a=go_there; b=go_back;;
      agent-other) a=ao_there; b=ao_back; switch_to other;; esac
    # Only the moves are timed (EPOCHREALTIME, no process started), not the look at where
    # the devices went.
    t0=${EPOCHREALTIME/./}; $a; t1=${EPOCHREALTIME/./}; w1=$(where)
    t2=${EPOCHREALTIME/./}; $b; t3=${EPOCHREALTIME/./}; w2=$(where)
    there=$(( (t1 - t0) / 1000 )); back=$(( (t3 - t2) / 1000 ))
    echo "TIME $m $r $(( there + back )) there=$there back=$back"
    echo "DRV $m $r there: $w1 back: $w2"
    [ "$m" = agent-other ] && switch_to main
  done
done
# bench.env AGENT_LOG=gpuplane=debug: the agent's timeline of the last move back
[ -n "${AGENT_LOG:-}" ] && { sed 's/^/ALOG /' /tmp/agent.log | tail -60; }
echo "== full observations and refreshes in one converge each way"
for dir in there back; do
  GPUPLANE_LOG=gpuplane=debug NO_COLOR=1 $G converge -f $M/$dir $GP 2>&1 >/dev/null \
    | awk -v d=$dir '/observe: the whole host/ {o++} /refresh after/ {r++} /host write:/ {w++} END {print "LOOKS", d, "observe=" o+0, "refresh=" r+0, "writes=" w+0}'
done
echo "== where gpuplane's time goes (each ROUNDS times)"
for r in $(seq 1 $ROUNDS); do
  now; t0=$T; $G --version >/dev/null; now; t1=$T
  $G observe $GP --output json >/dev/null; now; t2=$T
  $G converge -f $M/back $GP >/dev/null 2>&1; now; t3=$T
  echo "PART start $r $(( (t1 - t0) / 1000 ))"
  echo "PART observe $r $(( (t2 - t1) / 1000 ))"
  echo "PART converged-converge $r $(( (t3 - t2) / 1000 ))"
  if [ -n "${OTHER:-}" ]; then
    now; t0=$T; $OTHER observe $GP --output json >/dev/null; now; t1=$T
    $OTHER converge -f $M/back $GP >/dev/null 2>&1; now; t2=$T
    echo "PART other-observe $r $(( (t1 - t0) / 1000 ))"
    echo "PART other-converged-converge $r $(( (t2 - t1) / 1000 ))"
  fi
done
