#!/bin/bash
# Runs inside the VM: a crash after every host write, on the real kernel (issue 13, item 1), all
# in one boot. For each transition an uninterrupted run counts its host writes N; then for every
# k in 1..=N the host is put back to the transition's start, `gpuplane converge` runs with
# GPUPLANE_KILL_AFTER_WRITE=k (it SIGKILLs itself right after write k, in the apply door), the
# host is read (the crash state), a fresh converge runs to completion, one more runs (it must
# write nothing), and the host is read again. Prints machine-readable lines for
# e2e/tests/vm_crash.rs, which judges them:
#   N T n                         the uninterrupted run of transition T made n writes
#   REF T {truth}                 the host after the uninterrupted run
#   KILL T k rc writes last-step  the killed run: exit status, "host write" log lines, the last one
#   CRASH T k {truth}             the host right after the kill
#   RECOVER T k rc writes         the fresh converge: exit status and writes
#   AGAIN T k rc writes           the converge after it
#   AFTER T k {truth}             the host after both
#   TIME T s                      seconds the transition's crash points took
# and, for the kills inside a locked edit of a Proxmox file (GPUPLANE_KILL_IN_LOCK=POINT:L, L
# counting the run's locked edits, POINT held | temp | renamed), per point P=POINT:L:
#   NL T n                        the uninterrupted run took n locks
#   IKILL T P rc writes           the killed run
#   ICRASH T P {truth}            the host right after the kill (a lock, a temp file may be left)
#   IWAIT T P rc writes reason    a one-shot converge while the dead writer's lock is young:
#                                 exit 1 with WaitingForLock, or 0 when it needs no lock
#   IAGENT T P rc before after    `gpuplane run --manifests` (the agent) started with the lock
#                                 young; once its status says "before", the lock is aged past
#                                 pmxcfs's 120 s (touch -d: what waiting does to it) and the agent
#                                 must converge with no one else acting: its last Ready reason
#   IAGAIN T P rc writes          a converge after it
#   IAFTER T P {truth}            the host after both
# The truth is read from sysfs (driver, driver_override), /sys/module, the mapping file
# /etc/pve/mapping/pci.cfg, the unit file and systemd (is-active, NeedDaemonReload), and lists
# any temporary file left in the directories the agent writes.
#
# Transitions: split (NUMA 1 to vfio-pci behind a Proxmox PCI mapping, vfio-pci not yet loaded),
# back (the reverse), server (a real unit running the SGLang stand-in is written and started) and
# move (the GPU that running server holds goes to the VM: stop, rebind, mapping, unit, start).
# The job argument gpuplane.crash=split,back (run.sh VM_ARGS) limits the transitions (default: all four).
set -u
. /usr/local/bin/scenario-lib.sh
install_standin
mkmodel /srv/models/tiny   # the agent's preflight reads it before the server is placed
# Foreign lines the agent must keep: a comment, a NIC mapping of this node, another node's GPU.
pve_vm "$KEPT_NIC"'\n# the other node\nremote\n\tmap id=10de:2335,node=othernode,path=0000:c1:00.0\n'
ONLY=$(job_arg gpuplane.crash | tr , ' ')
ONLY=${ONLY:-split back server move}

# server DIR CARD: the stand-in keeps /dev/dri/CARD open, as SGLang keeps /dev/nvidiaN open
card() { ls /sys/bus/pci/devices/$1/drm | grep '^card' | head -1; }

# truth: the host as one JSON line
truth() { python3 - <<'PY'
import json, os, subprocess
gpus = ["0000:41:00.0", "0000:42:00.0", "0000:44:01.0", "0000:81:00.0", "0000:82:00.0"]
t = {"drivers": {}}
for g in gpus:
    p = "/sys/bus/pci/devices/" + g
    drv = os.path.basename(os.readlink(p + "/driver")) if os.path.exists(p + "/driver") else "none"
    t["drivers"][g] = [drv, open(p + "/driver_override").read().strip()]
t["vfioModule"] = os.path.isdir("/sys/module/vfio_pci")
t["pciCfg"] = open("/etc/pve/mapping/pci.cfg").read()
t["vmConf"] = open("/etc/pve/qemu-server/300.conf").read()
left = []
for top in ["/etc/pve", "/etc/systemd/system", "/var/lib/gpuplane"]:
    for d, _, fs in os.walk(top):
        left += [os.path.join(d, f) for f in fs if ".tmp." in f or f.endswith(".gpuplane-new")]
t["leftovers"] = left
lockdir = "/etc/pve/priv/lock"
t["locks"] = sorted(os.listdir(lockdir)) if os.path.isdir(lockdir) else []
u = "/etc/systemd/system/sglang-e2e.service"
t["unit"] = open(u).read() if os.path.exists(u) else None
show = lambda p: subprocess.run(["systemctl", "show", "-p", p, "--value", "sglang-e2e.service"],
                                capture_output=True, text=True).stdout.strip()
t["active"] = show("ActiveState")
t["needReload"] = show("NeedDaemonReload")
print(json.dumps(t, separators=(",", ":")))
PY
}

# run DIR: a converge to completion; prints "rc writes"
run() { $G converge -f $M/$1 $GP --output json > /tmp/out.json 2>/tmp/err; local rc=$?
  echo "$rc $(python3 -c 'import json,sys; print(json.load(sys.stdin).get("writes", "?"))' < /tmp/out.json 2>/dev/null || echo '?')"
  [ $rc = 0 ] || sed "s/^/STDERR /" /tmp/err | head -5 >&2; }
# kill_at DIR K: the converge killed after write K; prints "rc writes last-step"
kill_at() { GPUPLANE_KILL_AFTER_WRITE=$2 GPUPLANE_LOG=gpuplane::door=info \
  $G converge -f $M/$1 $GP --output json > /tmp/out.json 2>/tmp/err; local rc=$?
  local w; w=$(grep -c 'host write: ' /tmp/err)
  echo "$rc $w $(grep 'host write: ' /tmp/err | tail -1 | sed -e 's/\x1b\[[0-9;]*m//g' -e 's/.*host write: //' -e 's/ kind=.*//')"; }

# The runs under a dead writer's young lock wait 2 s for it instead of Proxmox's 10 (each point
# has two such waits).
LT="--lock-timeout 2"
# nlocks DIR: the locked edits an uninterrupted converge takes (it converges the host)
nlocks() { GPUPLANE_LOG=gpuplane::host::local::files=debug $G converge -f $M/$1 $GP >/dev/null 2>/tmp/err
  grep -c 'locked: ' /tmp/err; }
# ikill_at DIR POINT:L: the converge killed inside its L-th locked edit; prints "rc writes"
ikill_at() { GPUPLANE_KILL_IN_LOCK=$2 GPUPLANE_LOG=gpuplane::door=info \
  $G converge -f $M/$1 $GP --output json > /tmp/out.json 2>/tmp/err; local rc=$?
  echo "$rc $(grep -c 'host write: ' /tmp/err)"; }
# iwait DIR: a one-shot converge; prints "rc writes partition-Ready-reason"
iwait() { $G converge -f $M/$1 $GP $LT --output json > /tmp/out.json 2>/tmp/err; local rc=$?
  echo "$rc $(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("writes", "?"), [c["reason"] for c in d["status"]["GpuPartition/vmhost"]["conditions"] if c["type"] == "Ready"][0])' < /tmp/out.json 2>/dev/null || echo '? ?')"; }
# ready_reason FILE: the Ready reason in a status file ("" when none yet)
ready_reason() { python3 - "$1" <<'PY' 2>/dev/null
import re, sys
for block in re.split(r"\n(?=- )", open(sys.argv[1]).read()):
    if re.search(r"\btype: Ready\b", block):
        m = re.search(r"\breason: (\S+)", block)
        print(m.group(1) if m else "")
        break
PY
}
# iagent DIR: the agent started while the dead writer's lock is young; once its status reads a
# reason, the lock is aged past 120 s; the agent converges on its own. Prints "rc before after".
iagent() { local st=/tmp/agent-status before="" after="" i
  rm -rf $st; mkdir -p $st
  $G run --manifests $M/$1 $GP $LT --status-dir $st --poll-interval 1 --drift-interval 600 \
    --metrics-addr 127.0.0.1:0 --max-rounds 40 >/tmp/agent.log 2>&1 & local pid=$!
  for i in $(seq 1 60); do before=$(ready_reason $st/GpuPartition-vmhost.yaml); [ -n "$before" ] && break; sleep 0.5; done
  for l in /etc/pve/priv/lock/*; do [ -e "$l" ] && touch -d "@$(( $(date +%s) - 121 ))" "$l"; done
  for i in $(seq 1 240); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill $pid 2>/dev/null; wait $pid; local rc=$?
  after=$(ready_reason $st/GpuPartition-vmhost.yaml)
  echo "$rc ${before:-none} ${after:-none}"; }

# inlock T DIR RESET: a kill at each point inside each locked edit of the transition
inlock() { local t=$1 dir=$2 reset=$3 t0=$SECONDS p l
  echo "== $t: kills inside locked edits"
  $reset
  local n; n=$(nlocks $dir)
  echo "NL $t $n"
  for l in $(seq 1 "$n"); do for p in held temp renamed; do
    $reset
    echo "IKILL $t $p:$l $(ikill_at $dir $p:$l)"
    echo "ICRASH $t $p:$l $(truth)"
    echo "IWAIT $t $p:$l $(iwait $dir)"
    echo "IAGENT $t $p:$l $(iagent $dir)"
    echo "IAGAIN $t $p:$l $(run $dir)"
    echo "IAFTER $t $p:$l $(truth)"
  done; done
  echo "ITIME $t $(( SECONDS - t0 ))"
}

# The transitions' start states.
to_back() { run back >/dev/null; }
to_split() { run split >/dev/null; }
to_start_of_split() { to_back; modprobe -r vfio_pci 2>/dev/null; }
no_server() { systemctl stop sglang-e2e.service 2>/dev/null
  rm -f /etc/systemd/system/sglang-e2e.service; rm -rf /var/lib/gpuplane/units; systemctl daemon-reload
  systemctl reset-failed sglang-e2e.service 2>/dev/null; }
to_start_of_server() { no_server; to_back; }
to_start_of_move() { run server >/dev/null; }

# crash T DIR RESET: every crash point of the transition to DIR from the state RESET makes
crash() { local t=$1 dir=$2 reset=$3 t0=$SECONDS
  echo "== $t"
  $reset
  read -r rc n < <(run $dir)
  echo "N $t $n rc=$rc"
  echo "REF $t $(truth)"
  for k in $(seq 1 "$n"); do
    $reset
    echo "KILL $t $k $(kill_at $dir $k)"
    echo "CRASH $t $k $(truth)"
    echo "RECOVER $t $k $(run $dir)"
    echo "AGAIN $t $k $(run $dir)"
    echo "AFTER $t $k $(truth)"
  done
  echo "TIME $t $(( SECONDS - t0 ))"
}

partition back '{numaNode: 0}' '{numaNode: 1}' nvidia
partition split '{numaNode: 0}' '{numaNode: 1}' vfio-pci "$VMC"
partition server '{numaNode: 0}' '{numaNode: 1}' nvidia; server server "$(hold "$(card 0000:42:00.0)")"
partition move '{addresses: ["0000:41:00.0", "0000:44:01.0"]}' '{addresses: ["0000:42:00.0"]}' vfio-pci "$VMC"
server move "$(hold "$(card 0000:41:00.0)")"

for t in $ONLY; do
  case $t in
    split) crash split split to_start_of_split; inlock split split to_start_of_split ;;
    back) crash back back to_split; inlock back back to_split ;;
    server) crash server server to_start_of_server ;;
    move) crash move move to_start_of_move ;;
  esac
done
no_server
echo "== done"
