# Sourced by the scenarios in e2e/vm/scenarios/ inside the VM, where e2e/src/vm.rs installs it as
# /usr/local/bin/scenario-lib.sh (on the job disk, job-runner.sh): the gpuplane binary and its flags for the emulated host, and
# helpers that print machine-readable lines for e2e/tests/vm_host/, and reset_host/host_digest for
# a boot shared by several scenarios (e2e/vm/shared-boot.sh).
G=/usr/local/bin/gpuplane
GP="--host local --node-name vmhost --gpu-vendor 1234 --gpu-driver bochs-drm"
M=/root/m; mkdir -p $M
# job_arg NAME: VALUE of the job's argument NAME=VALUE (run.sh VM_ARGS), empty when not given
job_arg() { tr ' ' '\n' </job/args | sed -n "s/^$1=//p" | head -1; }
# json: stdin's JSON on one line ({} when it is not JSON)
json() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d, separators=(",",":")))' 2>/dev/null || echo '{}'; }
# converge DIR: gpuplane converge -f $M/DIR; prints "RC DIR n", "JSON DIR {...}", "STDERR DIR ..."
converge() { converge_run $1; converge_say $1 $?; }
# converge_run DIR: the converge alone, its output left in /tmp/out.json and /tmp/err
converge_run() { $G converge -f $M/$1 $GP --output json > /tmp/out.json 2>/tmp/err; }
# converge_say DIR RC: the lines `converge` prints, from the last converge_run's output
converge_say() { echo "RC $1 $2"; json < /tmp/out.json | sed "s/^/JSON $1 /"; sed "s/^/STDERR $1 /" /tmp/err | head -5; }
# converge_budget DIR: converge, and again (up to three more tries) while a try's preflight ran
# out of its 30 s budget (reads through `pct exec` in a TCG guest on two loaded cores:
# RELIABILITY.md, runs 18, 37 and 38, where one retry was not enough): the agent tries again at
# each next pass, a one-shot converge does not. Each retry is said ("RETRY DIR ..."); the lines
# printed are the last try's. A preflight that fails for any other reason is not retried.
converge_budget() {
  converge_run $1; rc=$?
  for try in 1 2 3; do
    [ $rc -ne 0 ] && grep -q 'PreflightFailed' /tmp/out.json && grep -q 'past its budget\|did not finish within' /tmp/out.json || break
    echo "RETRY $1 the preflight ran out of its budget; converging again (retry $try of 3)"
    converge_run $1; rc=$?
  done
  converge_say $1 $rc
}
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
# KEPT_NIC: pci.cfg lines the agent must keep (a comment, a NIC mapping of this node), printf's format
KEPT_NIC='# mappings kept by hand\nnic\n\tmap id=8086:100e,node=vmhost,path=0000:44:02.0\n'
# pve_vm PCICFG: the Proxmox directories, VM 300 ("snp-guest", its hostpci0 the mapping emu-vm)
# and /etc/pve/mapping/pci.cfg made of PCICFG (printf's format)
pve_vm() {
  mkdir -p /etc/pve/lxc /etc/pve/qemu-server /etc/pve/mapping
  printf 'name: snp-guest\nhostpci0: mapping=emu-vm,pcie=1\n' > /etc/pve/qemu-server/300.conf
  printf "$1" > /etc/pve/mapping/pci.cfg
}
# part_head [SPEC-LINES]: the GpuPartition "vmhost" (node vmhost) up to its "slices:" line;
# SPEC-LINES: more spec fields before the slices, each line indented by two spaces
part_head() {
  printf 'apiVersion: gpuplane.dev/v1alpha1\nkind: GpuPartition\nmetadata: {name: vmhost}\nspec:\n  nodeName: vmhost\n'
  if [ -n "${1:-}" ]; then printf '%s\n' "$1"; fi
  echo '  slices:'
}
# rules [MORE]: a host slice's rules for the stand-in SGLang servers (namespace default, the
# stand-in's interpreter, /srv/models, host placement, root, STANDIN_* env), MORE appended
# (", adoptUnits: [sglang-e2e]")
rules() { echo '{namespaces: [default], interpreters: [/opt/sglang-venv/bin/python3], modelRoots: [/srv/models], allowHostPlacement: true, user: root, allowedEnv: ["STANDIN_*"]'"${1:+, $1}}"; }
# partition DIR HOST-SELECTOR VM-SELECTOR VM-DRIVER [VM-CONSUMER]: $M/DIR/partition.yaml, node
# vmhost, a host slice (the stand-in SGLang servers' rules) and a vm slice
partition() { mkdir -p $M/$1; { part_head; cat <<EOF; } > $M/$1/partition.yaml
    - name: host
      gpus: $2
      driver: nvidia
      servers: $(rules "adoptUnits: [sglang-e2e]")
    - name: vm
      gpus: $3
      driver: $4
${5:-}
EOF
}
# server DIR [ENV] [STALL] [DEADLINE]: the stand-in SGLang server "e2e" on the host slice, unit
# sglang-e2e, into $M/DIR/server.yaml. ENV: more env entries, one "    - {name: ..., value: ...}"
# line each (see hold); STALL and DEADLINE: its startup bounds in seconds (default 60 and 180).
# SRV_NAME, SRV_SLICE, SRV_UNIT, SRV_LOCATION and SRV_LISTEN change the name (e2e), the slice
# (host), the unit (sglang-e2e), where it runs (Host) and the listen address (127.0.0.1).
server() { cat > $M/$1/server.yaml <<EOF
apiVersion: gpuplane.dev/v1alpha1
kind: InferenceServer
metadata: {name: ${SRV_NAME:-e2e}, namespace: default}
spec:
  partitionRef: {name: vmhost, slice: ${SRV_SLICE:-host}}
  unit: {name: ${SRV_UNIT:-sglang-e2e}, location: ${SRV_LOCATION:-Host}}
  python: /opt/sglang-venv/bin/python3
  model: {path: /srv/models/tiny, servedName: tiny}
  tensorParallelSize: 2
  listen: {host: ${SRV_LISTEN:-127.0.0.1}, port: 30000}
  p2p: Disabled
  env:
    - {name: STANDIN_LOAD_SECONDS, value: "1"}
    - {name: STANDIN_GRAPH_SECONDS, value: "1"}
${2:-}
  startup: {stallAfterSeconds: ${3:-60}, deadlineSeconds: ${4:-180}}
EOF
}
# hold CARD: the env entry that makes the stand-in hold /dev/dri/CARD open, as a CUDA process
# holds its GPU.
hold() { echo "    - {name: STANDIN_HOLD_DEVICES, value: \"/dev/dri/$1\"}"; }
# drv TAG: "DRV TAG ADDRESS DRIVER DRIVER_OVERRIDE" for each stand-in GPU (vendor 1234), in
# address order, whatever its address
drv() { for d in /sys/bus/pci/devices/*; do
  [ "$(cat $d/vendor)" = 0x1234 ] || continue
  echo "DRV $1 ${d##*/} $(basename "$(readlink $d/driver)" 2>/dev/null || echo none) $(cat $d/driver_override)"; done; }
# The vm slice's consumer: VM 300 through the PCI mapping emu-vm.
VMC='      consumer: {vm: {vmid: 300, pciMapping: emu-vm}}'
# host_digest: what a scenario may leave behind, on one line: the observed host (gpuplane observe
# without manifests), the files and units the scenarios write, the mounts and loaded vfio modules.
# A shared boot (e2e/vm/shared-boot.sh) prints it before the first scenario and after each reset.
host_digest() {
  {
    echo "observe $($G observe $GP --output json | json)"
    find /etc/pve /var/lib/gpuplane /root/m /srv /etc/gpuplane-standin /opt /run/gpuplane-standin -maxdepth 2 2>/dev/null | sort | sed 's/^/file /'
    ls /etc/systemd/system | grep -i sglang | sed 's/^/unitfile /'
    systemctl list-units --all --plain --no-legend 'sglang*' | awk '{print "unit", $1, $3, $4}'
    findmnt -rn -o TARGET | grep -E '^/(etc|srv|root|opt|var)' | sed 's/^/mount /'
    lsmod | awk '$1 ~ /^vfio/ {print "module", $1}' | sort
    ls /dev/vfio 2>/dev/null | sed 's/^/vfio /'
  } | python3 -c 'import json,sys; print(json.dumps([l.rstrip("\n") for l in sys.stdin], separators=(",",":")))'
}
# reset_host: undoes what the scenarios do to the host, so that the next scenario of a shared boot
# starts from the host the image boots into: units stopped and removed, the stand-in GPUs back on
# bochs-drm with no driver_override, vfio modules unloaded, the agent's state, /etc/pve,
# models, manifests and the stand-in removed, leftover mounts unmounted, the journal emptied.
# What it cannot undo: the kernel log (IO_PAGE_FAULT lines written to /dev/kmsg stay), so
# scenarios that write there run last.
reset_host() {
  for u in $(systemctl list-units --all --plain --no-legend 'sglang*' | awk '{print $1}'); do systemctl stop "$u"; done
  # Every unit the agent wrote (its header on the first line), whatever a scenario named it.
  for f in /etc/systemd/system/*.service; do
    [ -f "$f" ] && [ "$(head -n1 "$f")" = "# Managed by gpuplane; local edits are overwritten." ] || continue
    systemctl stop "$(basename "$f")" 2>/dev/null; rm -f "$f"
  done
  rm -rf /etc/systemd/system/sglang*
  systemctl daemon-reload; systemctl reset-failed 2>/dev/null
  pkill -f sglang.launch_server; pkill -x sleep
  for m in $(findmnt -rn -o TARGET | grep -E '^/(etc/pve|srv|root/m)' | sort -r); do umount -l "$m"; done
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat $d/vendor)" = 0x1234 ] || continue
    echo > $d/driver_override
    drv=$(basename "$(readlink $d/driver)" 2>/dev/null)
    [ "$drv" = bochs-drm ] && continue
    [ -n "$drv" ] && echo "$(basename $d)" > $d/driver/unbind
    echo "$(basename $d)" > /sys/bus/pci/drivers_probe
  done
  for _ in 1 2 3; do for m in $(lsmod | awk '$1 ~ /^vfio/ {print $1}'); do modprobe -r "$m" 2>/dev/null; done; done
  rm -rf /etc/pve /var/lib/gpuplane /root/m /srv/models /etc/gpuplane-standin /opt/sglang-venv /opt/standin-src /run/gpuplane-standin /tmp/out.json /tmp/err /tmp/pci.cfg.keep
  mkdir -p $M
  journalctl --rotate >/dev/null 2>&1; journalctl --vacuum-time=1s >/dev/null 2>&1
}
# boot_standins: stand-ins of the two bootloader refresh commands, used by the agent through
# GPUPLANE_PROXMOX_BOOT_TOOL/GPUPLANE_UPDATE_GRUB (exported here). THE REAL BOOTLOADER IS NOT RUN
# IN THESE TESTS: each stand-in only records that it ran (/var/lib/standin-boot/ran) and the
# kernel command line the real tool would put into the boot entry (/var/lib/standin-boot/entry)
# -- proxmox-boot-tool: the text of /etc/kernel/cmdline; update-grub (grub-mkconfig sources
# /etc/default/grub): the entry's own root and rw, then $GRUB_CMDLINE_LINUX
# $GRUB_CMDLINE_LINUX_DEFAULT. The harness plays the bootloader: it boots that entry next
# (run.sh VM_REBOOT=entry, or a second boot with KARGS set from it).
export GPUPLANE_PROXMOX_BOOT_TOOL=/usr/local/sbin/proxmox-boot-tool GPUPLANE_UPDATE_GRUB=/usr/local/sbin/update-grub
boot_standins() {
  mkdir -p /usr/local/sbin /var/lib/standin-boot
  cat > /usr/local/sbin/proxmox-boot-tool <<'SH'
#!/bin/sh
# STAND-IN: records the run and the entry's command line; the real proxmox-boot-tool is not run.
[ "$1" = refresh ] || { echo "stand-in: only refresh" >&2; exit 2; }
echo "proxmox-boot-tool $*" >> /var/lib/standin-boot/ran
tr -s ' \t\n' '   ' < /etc/kernel/cmdline | sed 's/ *$//' > /var/lib/standin-boot/entry
SH
  cat > /usr/local/sbin/update-grub <<'SH'
#!/bin/sh
# STAND-IN: records the run and the default entry's command line as grub-mkconfig builds it
# (it sources /etc/default/grub); the real update-grub is not run.
echo "update-grub${1:+ $*}" >> /var/lib/standin-boot/ran
. /etc/default/grub
echo "root=/dev/vda rw $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT" | tr -s ' ' | sed 's/ *$//' > /var/lib/standin-boot/entry
SH
  chmod 755 /usr/local/sbin/proxmox-boot-tool /usr/local/sbin/update-grub
}
