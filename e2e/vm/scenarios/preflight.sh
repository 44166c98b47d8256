#!/bin/bash
# Runs inside the VM: preflight and the smoke test on the real target. A small real model
# directory (two safetensors shards, written here) is cut short: preflight names the shard and
# nothing is written; complete again, the server starts and its smoke test (math, thinking, a
# tool call) passes against the SGLang stand-in; told to return no tool call, a new unit's smoke
# test fails and says so.
set -u
. /usr/local/bin/scenario-lib.sh
install_standin
# manifests DIR EXTRA-ENV: the slice (NUMA 0 stays on its driver) and one server on the host
manifests() { mkdir -p $M/$1; { part_head; cat <<EOF; } > $M/$1/all.yaml
    - name: inference
      gpus: {numaNode: 0}
      driver: nvidia
      servers: $(rules)
---
apiVersion: gpuplane.dev/v1alpha1
kind: InferenceServer
metadata: {name: pf, namespace: default}
spec:
  partitionRef: {name: vmhost, slice: inference}
  unit: {name: gpuplane-pf, location: Host}
  python: /opt/sglang-venv/bin/python3
  model: {path: /srv/models/small, servedName: small}
  tensorParallelSize: 2
  speculative: {algorithm: NEXTN, numSteps: 1, eagleTopk: 1, numDraftTokens: 2}
  toolCallParser: qwen3_coder
  reasoningParser: qwen3
  listen: {host: 127.0.0.1, port: 30000}
  p2p: Disabled
  env:
    - {name: STANDIN_LOAD_SECONDS, value: "1"}
    - {name: STANDIN_GRAPH_SECONDS, value: "1"}
    - {name: STANDIN_NO_TOOL_CALL_FILE, value: /run/standin-no-tool-call}
$2
  startup: {stallAfterSeconds: 30, deadlineSeconds: 180}
  smokeTest:
    timeoutSeconds: 30
    requests:
      - {name: math, prompt: "What is 17 * 23?", expect: {answerContains: "391"}}
      - {name: thinking, prompt: "Why is the sky blue?", expect: {reasoning: true}}
      - name: tools
        prompt: "What is the weather in Paris?"
        tools: [{name: get_weather, description: "current weather of a city", parameters: [city]}]
        expect: {toolCall: get_weather}
EOF
}
mkmodel /srv/models/small

echo "== truncated: the second shard lost its last 1000 bytes"
truncate -s -1000 /srv/models/small/model-00002-of-00002.safetensors
manifests truncated ""
$G preflight -f $M/truncated $GP > /tmp/pf.json 2>/tmp/err; echo "RC pf-truncated $?"
json < /tmp/pf.json | sed 's/^/JSON pf-truncated /'
sed 's/^/STDERR pf-truncated /' /tmp/err | head -5
converge truncated
echo "UNITFILE truncated $(test -e /etc/systemd/system/gpuplane-pf.service && echo present || echo absent)"

echo "== complete: the model written again"
mkmodel /srv/models/small
$G preflight -f $M/truncated $GP > /tmp/pf.json 2>/tmp/err; echo "RC pf-complete $?"
json < /tmp/pf.json | sed 's/^/JSON pf-complete /'
mkdir -p $M/complete && cp $M/truncated/all.yaml $M/complete/; converge complete
echo "ACTIVE complete $(systemctl is-active gpuplane-pf.service)"

echo "== notool: the server answers without a parsed tool call; a new unit is tested"
touch /run/standin-no-tool-call
manifests notool "    - {name: OMP_NUM_THREADS, value: \"4\"}"
converge notool
systemctl stop gpuplane-pf.service
