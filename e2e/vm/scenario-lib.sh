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
