#!/bin/bash
# Runs inside the VM: how soon the agent (gpuplane.service's `gpuplane run --manifests`, release
# build) publishes what an SGLang server does, against the stand-in as a real systemd unit.
# Each round restarts the server through a manifest change (an environment value), then:
#   ready: the stand-in logs "The server is fired up and ready to roll!" (from then on
#          /health_generate answers 200) -> the agent logs Ready=True for the server;
#   stall: the stand-in's weight load never ends (its last phase line is "Load weight begin.") ->
#          the agent logs Ready=False (StartupStalled), stallAfterSeconds after that line at best.
# Times come from the journal (both units log there, microsecond timestamps, one clock).
# Prints "READY r ms", "STALL r ms-after-last-progress stall-after-s" and "NOTE" lines.
set -u
. /usr/local/bin/scenario-lib.sh
# Settings travel as a file (run.sh passes files, not environment): ROUNDS=N, POLL=seconds.
[ -f /usr/local/bin/bench.env ] && . /usr/local/bin/bench.env
ROUNDS=${ROUNDS:-5}
POLL=${POLL:-5}
STALL=${STALL:-10}
install_standin
mkmodel /srv/models/tiny
mkdir -p $M/live /tmp/st
{ part_head '  deletionPolicy: Retain'; cat <<EOT; } > $M/live/partition.yaml
    - name: host
      gpus: {addresses: ["0000:41:00.0"]}
      driver: nvidia
      servers: $(rules)
EOT
# server ROUND LOAD-SECONDS: the manifest of the one server (a new ROUND restarts it)
server() { cat > $M/live/.server.tmp <<EOT
apiVersion: gpuplane.dev/v1alpha1
kind: InferenceServer
metadata: {name: bench, namespace: default}
spec:
  partitionRef: {name: vmhost, slice: host}
  unit: {name: gpuplane-sglang-bench, location: Host}
  python: /opt/sglang-venv/bin/python3
  model: {path: /srv/models/tiny, servedName: tiny}
  tensorParallelSize: 1
  listen: {host: 127.0.0.1, port: 30000}
  p2p: Disabled
  env:
    - {name: BENCH_ROUND, value: "$1"}
    - {name: STANDIN_LOAD_SECONDS, value: "$2"}
    - {name: STANDIN_GRAPH_SECONDS, value: "1"}
  startup: {stallAfterSeconds: $STALL, deadlineSeconds: 600}
EOT
mv $M/live/.server.tmp $M/live/server.yaml; }
server 0 1
systemd-run --unit=gpuplane-bench --setenv=NO_COLOR=1 --setenv=GPUPLANE_LOG=${AGENT_LOG:-info} \
  $G run --manifests $M/live --status-dir /tmp/st --metrics-addr 127.0.0.1:9465 \
  --poll-interval $POLL --drift-interval 3600 $GP >/dev/null
ST=/tmp/st/InferenceServer-default_bench.yaml
# until_reason REASON: waits (at most 120 s) until the server's status file no longer shows
# REASON (the previous round's) and then shows it again, reading the file only (no command run,
# so the wait itself does not load the VM)
wait_reason() { python3 - "$ST" "$1" <<'PY'
import sys, time
path, want = sys.argv[1], "reason: " + sys.argv[2]
def has():
    try:
        return want in open(path).read()
    except OSError:
        return False
end = time.time() + 120
while time.time() < end and has():
    time.sleep(0.1)
while time.time() < end and not has():
    time.sleep(0.1)
if not has():
    print("NOTE timed out waiting for", sys.argv[2])
    sys.exit(1)
PY
}
# ... and on a time-out shows why and ends the scenario
until_reason() { wait_reason "$1" && return; ls /tmp/st; sed 's/^/STATUS /' /tmp/st/*.yaml | head -60
  journalctl -u gpuplane-bench.service -o cat --no-pager | tail -30 | sed 's/^/AGENT /'
  journalctl -u gpuplane-sglang-bench.service -o cat --no-pager | tail -20 | sed 's/^/SERVER /'; exit 1; }
# figure KIND SINCE: one figure from the journal since the epoch time SINCE
figure() { journalctl --since "@$(( ${2%.*} - 1 ))" -o json --no-pager -u gpuplane-sglang-bench.service \
  -u gpuplane-bench.service > /tmp/journal.json; python3 - "$1" "$3" "$STALL" /tmp/journal.json ${AGENT_LOG:+timeline} <<'PY'
import json, sys
kind, rnd, stall = sys.argv[1], sys.argv[2], int(sys.argv[3])
ev = []
for line in open(sys.argv[4], errors="replace"):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    msg = e.get("MESSAGE")
    if isinstance(msg, list):
        msg = bytes(msg).decode("utf-8", "replace")
    ev.append((int(e["__REALTIME_TIMESTAMP"]), e.get("_SYSTEMD_UNIT", ""), msg or ""))
ev.sort()
if not ev:
    print("NOTE no journal entries for round", rnd)
def first(pred, after=0):
    return next((t for t, u, m in ev if t >= after and pred(u, m)), None)
server = lambda u: u == "gpuplane-sglang-bench.service"
agent = lambda u: u == "gpuplane-bench.service"
if kind == "ready":
    up = first(lambda u, m: server(u) and "The server is fired up and ready to roll!" in m)
    seen = up and first(lambda u, m: agent(u) and "InferenceServer/default/bench" in m and "Ready=True" in m, up)
    print("READY", rnd, (seen - up) // 1000 if seen else "none")
    if up and seen and sys.argv[5:] == ["timeline"]:
        for t, u, m in ev:
            if up - 1_500_000 <= t <= seen:
                print("ALOG", (t - up) // 1000, u.split(".")[0], m[:150])
    if not seen:
        print("NOTE units", sorted({u for _, u, _ in ev}), "up", up, [m[:100] for _, u, m in ev if agent(u)][-5:])
else:
    last = None
    for t, u, m in ev:
        if server(u) and "] Load weight begin." in m:
            last = t
    seen = last and first(lambda u, m: agent(u) and "InferenceServer/default/bench" in m and "StartupStalled" in m, last)
    print("STALL", rnd, (seen - last) // 1000 if seen else "none", stall)
PY
}
until_reason ServerReady
echo "== rounds: $ROUNDS, poll interval $POLL s, stallAfterSeconds $STALL"
for r in $(seq 1 $ROUNDS); do
  t0=$EPOCHREALTIME; server "$r" 1; until_reason ServerReady; sleep 1; figure ready "$t0" "$r"
  t0=$EPOCHREALTIME; server "stall-$r" 100000; until_reason StartupStalled; sleep 1; figure stall "$t0" "$r"
done
systemctl stop gpuplane-bench.service gpuplane-sglang-bench.service
journalctl -u gpuplane-bench.service -o cat --no-pager | grep -ciE 'panic|error' | sed 's/^/AGENT-ERRORS /'
