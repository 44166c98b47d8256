#!/bin/bash
# Runs inside the VM (booted with VM_CT=1): the container path on a real LXC runtime (issue 28).
# The agent (the real gpuplane binary, --host local) splits the stand-in GPUs between LXC
# container 129 (Debian's LXC, started and stopped through e2e/vm/pct, which is OURS, not
# Proxmox's) and VM 300's mapping, and back, once with each style of device lines:
#   mount   lxc.mount.entry + lxc.cgroup2.devices.allow lines
#   devn    devN: lines (Proxmox's own passthrough: a node per device, allowed one by one)
# The NVIDIA files come from e2e/vm/nvidia-standin (minors 0..4 for 41:00.0, 42:00.0, 44:01.0,
# 81:00.0, 82:00.0, in probe order; nodes with majors 195 and 238 that no driver answers).
# Prints machine-readable lines for e2e/tests/vm_lxc.rs:
#   RC/JSON/STDERR P ...        each converge (scenario-lib.sh `converge`)
#   STATE P running|stopped     the container after phase P
#   DEVS P {json}               inside the container: each /dev/nvidia* node's type, major:minor
#                               and what open(O_RDWR) gives (ok or the errno's name)
#   LS P line                   `ls -l /dev/nvidia*` inside the container, for a person
#   FOREIGN P result            inside the container: mknod + open of 195:3 (GPU 81:00.0, the
#                               VM's after the split): EPERM where the cgroup refuses it
#   CONF P line                 /etc/pve/lxc/129.conf after phase P
#   DRV P address driver override
#   HOLDER P pid                the in-container holder's PID as the host sees it
#   CRASH ...                   with gpuplane.lxccrash=1 only: see crash_at below
set -u
. /usr/local/bin/scenario-lib.sh
nvidia-standin setup || { echo "nvidia-standin failed"; exit 1; }
echo "MAJORS setup $(grep -E ' nvidia' /proc/devices | tr '\n' ' ')"
mkdir -p /var/lib/lxc/129/rootfs
mount /dev/vdb /var/lib/lxc/129/rootfs || { echo "no container disk (run.sh VM_CT=1)"; exit 1; }
mkdir -p /etc/pve/lxc /etc/pve/qemu-server /etc/pve/mapping
printf 'name: snp-guest\nhostpci0: mapping=emu-vm,pcie=1\n' > /etc/pve/qemu-server/300.conf
GPUS='"0000:41:00.0", "0000:42:00.0", "0000:44:01.0", "0000:81:00.0", "0000:82:00.0"'

# ctconf STYLE: container 129's configuration as a person left it, with one GPU line of STYLE
# (the agent keeps the style it finds) and lines the agent must keep.
ctconf() {
  local gpu
  if [ "$1" = devn ]; then gpu='dev0: /dev/nvidia0,mode=0666'
  else gpu='lxc.cgroup2.devices.allow: c 195:* rwm
lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file'; fi
  cat > /etc/pve/lxc/129.conf <<EOF
# SGLang container (kept by hand)
arch: amd64
cores: 2
hostname: ct129
memory: 1024
ostype: debian
rootfs: local-zfs:subvol-129-disk-0,size=8G
$gpu
EOF
}
# parts P: the partitions of phase P: all (the five GPUs in CT 129) and split (NUMA 1 to VM 300)
parts() {
  mkdir -p $M/$1-all $M/$1-split
  { part_head; cat <<EOF; } > $M/$1-all/partition.yaml
    - name: ct
      gpus: {addresses: [$GPUS]}
      driver: nvidia
      consumer: {lxc: {vmid: 129}}
EOF
  { part_head; cat <<EOF; } > $M/$1-split/partition.yaml
    - name: ct
      gpus: {numaNode: 0}
      driver: nvidia
      consumer: {lxc: {vmid: 129}}
    - name: vm
      gpus: {numaNode: 1}
      driver: vfio-pci
      consumer: {vm: {vmid: 300, pciMapping: emu-vm}}
EOF
}
# inside P: what a CUDA process in the container would meet
inside() {
  local p=$1 st
  st=$(pct status 129 | sed 's/^status: //')
  echo "STATE $p $st"
  [ "$st" = running ] || return 0
  # One attach: the listing, then each node opened, then a node for 195:3 made and opened.
  pct exec 129 -- sh -c 'ls -l /dev | grep nvidia | sed "s/^/LS /"; python3 -c "$0"' '
import errno, glob, json, os, stat
out = {}
for p in sorted(glob.glob("/dev/nvidia*")):
    st = os.stat(p)
    kind = "char" if stat.S_ISCHR(st.st_mode) else "other"
    try:
        os.close(os.open(p, os.O_RDWR)); res = "ok"
    except OSError as e:
        res = errno.errorcode.get(e.errno, str(e.errno))
    out[p] = {"type": kind, "dev": "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)), "open": res}
print("DEVS " + json.dumps(out, separators=(",", ":")))
try:
    os.mknod("/tmp/n3", 0o20666, os.makedev(195, 3))
except OSError as e:
    print("FOREIGN mknod", errno.errorcode.get(e.errno))
else:
    try:
        os.close(os.open("/tmp/n3", os.O_RDWR)); print("FOREIGN open ok")
    except OSError as e:
        print("FOREIGN open", errno.errorcode.get(e.errno))
    os.unlink("/tmp/n3")
' | sed "s/^\([A-Z]*\) /\1 $p /"
}
show() { # show P: the host side of phase P
  sed "s/^/CONF $1 /" /etc/pve/lxc/129.conf
  for d in 0000:41:00.0 0000:42:00.0 0000:44:01.0 0000:81:00.0 0000:82:00.0; do
    echo "DRV $1 $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none) $(cat /sys/bus/pci/devices/$d/driver_override)"
  done
}

for style in mount devn; do
  echo "== $style: the five GPUs in container 129"
  pct stop 129 2>/dev/null
  ctconf $style; parts $style
  converge $style-all; show $style-all; inside $style-all

  echo "== $style: a process in the container holds /dev/nvidia3 (81:00.0), which the split moves"
  # O_PATH: the stand-in node has no driver to open, but the descriptor names it, as a CUDA
  # process's /dev/nvidiaN descriptor does; the holder scan reads it through the host's /proc.
  pct exec 129 -- python3 -c 'import os, time; fd = os.open("/dev/nvidia3", os.O_PATH); time.sleep(600)' &
  attach=$!
  for _ in $(seq 1 50); do
    h=$(pgrep -f 'os.open\("/dev/nvidia3"' | while read -r pid; do grep -q lxc /proc/$pid/cgroup && [ "$(cat /proc/$pid/comm)" = python3 ] && echo $pid; done | head -1)
    [ -n "$h" ] && break; sleep 0.2
  done
  echo "HOLDER $style-held ${h:-none} $(cat /proc/${h:-0}/cgroup 2>/dev/null | tr '\n' ' ')"
  mkdir -p $M/$style-held && cp $M/$style-split/partition.yaml $M/$style-held/
  converge $style-held; show $style-held; inside $style-held
  kill $attach 2>/dev/null; [ -n "${h:-}" ] && kill "$h" 2>/dev/null; wait $attach 2>/dev/null
  sleep 1

  echo "== $style: split (NUMA 1 to VM 300)"
  converge $style-split; show $style-split; inside $style-split
  mkdir -p $M/$style-again && cp $M/$style-split/partition.yaml $M/$style-again/; converge $style-again

  echo "== $style: back (all five in container 129)"
  mkdir -p $M/$style-back && cp $M/$style-all/partition.yaml $M/$style-back/
  converge $style-back; show $style-back; inside $style-back
done

# Opt-in (job argument gpuplane.lxccrash=1, about 15 more minutes): a kill -9 after every
# host write of the split and of the way back, mount style, then a fresh converge and one more:
#   CRASHN T n                      the uninterrupted transition's writes
#   CRASH T k killrc recoverrc recoverwrites againwrites state minors
if [ "$(job_arg gpuplane.lxccrash)" = 1 ]; then
  echo "== crash: a kill after every write of the split and back (mount style)"
  pct stop 129; ctconf mount
  cstate() { echo "$(pct status 129 | sed 's/^status: //') $(grep -o '/dev/nvidia[0-9]* ' /etc/pve/lxc/129.conf | tr -d ' ' | sort | tr '\n' ,)"; }
  writes() { python3 -c 'import json,sys; print(json.load(sys.stdin).get("writes", "?"))' < /tmp/out.json 2>/dev/null || echo '?'; }
  one() { $G converge -f $M/$1 $GP --output json > /tmp/out.json 2>/tmp/err; echo "$? $(writes)"; }
  for t in split back; do
    if [ $t = split ]; then from=mount-all; to=mount-split; else from=mount-split; to=mount-all; fi
    one $from >/dev/null
    read -r _ n < <(one $to)
    echo "CRASHN $t $n"
    for k in $(seq 1 "$n"); do
      one $from >/dev/null
      GPUPLANE_KILL_AFTER_WRITE=$k $G converge -f $M/$to $GP --output json >/dev/null 2>&1; krc=$?
      read -r rrc rw < <(one $to)
      read -r _ aw < <(one $to)
      echo "CRASH $t $k $krc $rrc $rw $aw $(cstate)"
    done
  done
fi
# The server inside the container: the SGLang stand-in installed in container 129, its unit
# written there by the agent (pct push) and run by the container's systemd (pct exec systemctl),
# preflight through pct exec, readiness over the container's network (vmbr0, 10.10.0.0/24: the
# agent reaches 10.10.0.129:30000, the address of the config's net0).
#   SRV P active|...            the unit inside the container after phase P
#   HEALTH P code               GET http://10.10.0.129:30000/health from the host
#   SRVHOLD P json              the holders gpuplane observe reports for 41:00.0 and 42:00.0
#   JOURNAL P line              the unit's start/stop lines in the container's journal
echo "== server: the SGLang stand-in as a unit inside container 129, on the split (mount style)"
ip link add vmbr0 type bridge && ip addr add 10.10.0.1/24 dev vmbr0 && ip link set vmbr0 up
pct stop 129
ctconf mount
echo 'net0: name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:01:29,ip=10.10.0.129/24,gw=10.10.0.1,type=veth' >> /etc/pve/lxc/129.conf
R=/var/lib/lxc/129/rootfs
mkdir -p $R/opt/standin-src && tar xf /usr/local/bin/standin.tar -C $R/opt/standin-src
mkmodel $R/srv/models/tiny
pct start 129
pct exec 129 -- sh /opt/standin-src/standin/install.sh /opt/sglang-venv >/dev/null
POLICY='      servers: {namespaces: [default], interpreters: [/opt/sglang-venv/bin/python3], modelRoots: [/srv/models], user: root, allowedEnv: ["STANDIN_*"], adoptUnits: [sglang-ct]}'
# ctserver DIR FROM HOLD: DIR's partition is FROM's with the server policy, and the server, which
# holds the device nodes HOLD (comma-separated) as SGLang holds its GPUs
ctserver() {
  mkdir -p $M/$1
  python3 - "$M/$2/partition.yaml" "$M/$1/partition.yaml" "$POLICY" <<'PY'
import sys
src, dst, policy = sys.argv[1:]
out = []
for l in open(src).read().splitlines():
    out.append(l)
    if l == "      consumer: {lxc: {vmid: 129}}":
        out.append(policy)
open(dst, "w").write("\n".join(out) + "\n")
PY
  SRV_NAME=ct SRV_SLICE=ct SRV_UNIT=sglang-ct SRV_LOCATION=Container SRV_LISTEN=0.0.0.0 \
    server "$1" "    - {name: STANDIN_HOLD_DEVICES, value: \"$3\"}" 60 240
}
srv() { # srv P: the server as the container, the host and the agent see it
  echo "SRV $1 $(pct exec 129 -- systemctl is-active sglang-ct.service 2>&1)"
  echo "HEALTH $1 $(python3 -c 'import urllib.request as u
try: print(u.urlopen("http://10.10.0.129:30000/health", timeout=5).status)
except Exception as e: print(type(e).__name__)')"
  echo "SRVHOLD $1 $($G observe $GP --output json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps([d["pciDevices"][a].get("holders", []) for a in ("0000:41:00.0", "0000:42:00.0")], separators=(",",":")))')"
}
ctserver srv-split mount-split /dev/nvidia0,/dev/nvidia1
converge_budget srv-split; srv srv-split; inside srv-split
mkdir -p $M/srv-again && cp $M/srv-split/*.yaml $M/srv-again/; converge_budget srv-again
echo "== server: back to all five GPUs while the server runs: its unit stops first, the container restarts, the server starts again"
ctserver srv-back mount-all /dev/nvidia0,/dev/nvidia1
converge_budget srv-back; srv srv-back; inside srv-back; show srv-back
pct exec 129 -- journalctl -u sglang-ct.service -o cat --no-pager 2>/dev/null | grep -E '^(Stopped|Started|Stopping)' | sed 's/^/JOURNAL srv-back /'

pct stop 129
echo "== done"
