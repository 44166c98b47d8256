#!/bin/bash
# Runs inside the VM: the reference story with a real systemd unit running the SGLang stand-in on
# a host whose P2P is broken (the stand-in's marker file): P2P on -> the server stalls and the
# agent says StartupStalled with the phase and the log; P2P Auto after the kernel logged
# IO_PAGE_FAULTs for the slice's GPUs -> P2P and custom all-reduce off -> Ready; a spec change
# restarts the unit once; an unrelated converge does not.
set -u
. /usr/local/bin/scenario-lib.sh
install_standin
mkmodel /srv/models/qwen
mkdir -p /etc/gpuplane-standin && touch /etc/gpuplane-standin/p2p-corrupt
# scenario DIR P2P NUM_STEPS
scenario() { mkdir -p $M/$1; { part_head; cat <<EOF; } > $M/$1/all.yaml
    - name: inference
      gpus: {numaNode: 0}
      driver: nvidia
      servers: $(rules "adoptUnits: [sglang-qwen]")
---
apiVersion: gpuplane.dev/v1alpha1
kind: InferenceServer
metadata: {name: qwen, namespace: default}
spec:
  partitionRef: {name: vmhost, slice: inference}
  unit: {name: sglang-qwen, location: Host}
  python: /opt/sglang-venv/bin/python3
  model: {path: /srv/models/qwen, servedName: qwen}
  tensorParallelSize: 2
  speculative: {algorithm: NEXTN, numSteps: $3, eagleTopk: 1, numDraftTokens: $(( $3 + 1 ))}
  toolCallParser: qwen3_coder
  reasoningParser: qwen3
  listen: {host: 127.0.0.1, port: 30000}
  p2p: $2
  env:
    - {name: STANDIN_LOAD_SECONDS, value: "2"}
    - {name: STANDIN_GRAPH_SECONDS, value: "1"}
  startup: {stallAfterSeconds: 20, deadlineSeconds: 300}
EOF
}
echo "== enabled: P2P on, on a host whose P2P is broken"
scenario enabled Enabled 3; converge enabled
echo "ACTIVE enabled $(systemctl is-active sglang-qwen.service)"
systemctl show sglang-qwen.service -p NRestarts,ExecMainStartTimestampMonotonic | sed 's/^/SHOW enabled /'

echo "== auto: the kernel logged IO_PAGE_FAULTs for the slice's GPUs"
for d in 0000:41:00.0 0000:42:00.0; do
  echo "AMD-Vi: Event logged [IO_PAGE_FAULT device=$d domain=0x000e address=0x7f000 flags=0x0020]" > /dev/kmsg
done
scenario auto Auto 3; converge auto
echo "ACTIVE auto $(systemctl is-active sglang-qwen.service)"
grep -E '^(ExecStart|Environment)=' /etc/systemd/system/sglang-qwen.service | sed 's/^/UNIT auto /'
python3 -c 'import urllib.request;print("MODELS auto", urllib.request.urlopen("http://127.0.0.1:30000/v1/models").read().decode())'
pid1=$(systemctl show -p MainPID --value sglang-qwen.service)

echo "== again: an unrelated converge"
mkdir -p $M/again && cp $M/auto/all.yaml $M/again/; converge again
echo "PID again $([ "$(systemctl show -p MainPID --value sglang-qwen.service)" = "$pid1" ] && echo same || echo changed)"

echo "== steps: numSteps 3 -> 4 (numDraftTokens 4 -> 5)"
scenario steps Auto 4; converge steps
echo "PID steps $([ "$(systemctl show -p MainPID --value sglang-qwen.service)" = "$pid1" ] && echo same || echo changed)"
mkdir -p $M/steps-again && cp $M/steps/all.yaml $M/steps-again/; converge steps-again
systemctl stop sglang-qwen.service
