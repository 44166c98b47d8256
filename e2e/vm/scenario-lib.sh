# Sourced by the scenarios in e2e/vm/scenarios/ inside the VM, where e2e/src/vm.rs installs it as
# /usr/local/bin/scenario-lib.sh: the gpuplane binary and its flags for the emulated host, and
# helpers that print machine-readable lines for e2e/tests/vm_agent.rs.
G=/usr/local/bin/gpuplane
GP="--host local --node-name vmhost --gpu-vendor 1234 --gpu-driver bochs-drm"
M=/root/m; mkdir -p $M
# json: stdin's JSON on one line ({} when it is not JSON)
json() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d, separators=(",",":")))' 2>/dev/null || echo '{}'; }
# converge DIR: gpuplane converge -f $M/DIR; prints "RC DIR n", "JSON DIR {...}", "STDERR DIR ..."
converge() { $G converge -f $M/$1 $GP --output json > /tmp/out.json 2>/tmp/err; echo "RC $1 $?"; json < /tmp/out.json | sed "s/^/JSON $1 /"; sed "s/^/STDERR $1 /" /tmp/err | head -5; }
# install_standin: the SGLang stand-in (standin.tar) as /opt/sglang-venv/bin/python3 -m sglang.launch_server
install_standin() { mkdir -p /opt/standin-src && tar xf /usr/local/bin/standin.tar -C /opt/standin-src && sh /opt/standin-src/standin/install.sh /opt/sglang-venv >/dev/null; }
# mkmodel DIR: a small real model directory: config.json (heads, MTP layers) and two safetensors
# shards with their index, written byte by byte as the safetensors format says (the agent's
# preflight reads them; the stand-in reads config.json)
mkmodel() { python3 - "$1" <<'PY'
import json, os, struct, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
for f in os.listdir(d): os.remove(os.path.join(d, f))
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_attention_heads": 16,
           "num_key_value_heads": 8, "num_hidden_layers": 2, "num_nextn_predict_layers": 1}, open(d + "/config.json", "w"))
wm, total = {}, 0
for i, n in ((1, 3000), (2, 5000)):
    name = "model-%05d-of-00002.safetensors" % i
    h = json.dumps({"__metadata__": {"format": "pt"}, "layer.%d.weight" % i: {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
    h += b" " * (-len(h) % 8)
    open(os.path.join(d, name), "wb").write(struct.pack("<Q", len(h)) + h + os.urandom(n))
    wm["layer.%d.weight" % i] = name; total += n
json.dump({"metadata": {"total_size": total}, "weight_map": wm}, open(d + "/model.safetensors.index.json", "w"))
PY
}
# partition DIR HOST-SELECTOR VM-SELECTOR VM-DRIVER [VM-CONSUMER]: $M/DIR/partition.yaml, node
# vmhost, a host slice (the stand-in SGLang servers' rules) and a vm slice
partition() { mkdir -p $M/$1; cat > $M/$1/partition.yaml <<EOF
apiVersion: gpuplane.dev/v1alpha1
kind: GpuPartition
metadata: {name: vmhost}
spec:
  nodeName: vmhost
  slices:
    - name: host
      gpus: $2
      driver: nvidia
      servers: {namespaces: [default], interpreters: [/opt/sglang-venv/bin/python3], modelRoots: [/srv/models], allowHostPlacement: true, user: root, adoptUnits: [sglang-e2e]}
    - name: vm
      gpus: $3
      driver: $4
${5:-}
EOF
}
# The vm slice's consumer: VM 300 through the PCI mapping emu-vm.
VMC='      consumer: {vm: {vmid: 300, pciMapping: emu-vm}}'
