#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh): installs the gpuplane .deb as an operator
# would, gives it manifests for the stand-in GPUs, adds a stand-in pve-guests.service (Proxmox's
# guest autostart, which must see the GPUs already on their drivers), and starts both in one
# systemd transaction, as a boot does. Prints machine-readable lines for e2e/tests/vm_deb.rs.
set -u
echo "== install"
dpkg -i /usr/local/bin/gpuplane.deb >/tmp/dpkg.log 2>&1; echo "DPKG rc=$?"
tail -n 3 /tmp/dpkg.log
echo "ENABLED $(systemctl is-enabled gpuplane.service 2>&1)"
echo "ACTIVE-AFTER-INSTALL $(systemctl is-active gpuplane.service 2>&1)"
cat > /etc/gpuplane/manifests/partition.yaml <<'YAML'
apiVersion: gpuplane.dev/v1alpha1
kind: GpuPartition
metadata: {name: gpuhost}
spec:
  nodeName: gpuhost
  slices:
    - name: host
      gpus: {addresses: ["0000:41:00.0", "0000:42:00.0"]}
      driver: nvidia
    - name: vm
      gpus: {numaNode: 1}
      driver: vfio-pci
YAML
# The stand-in GPUs are bochs-display devices on the bochs-drm driver.
echo 'GPUPLANE_ARGS="--gpu-vendor 1234 --gpu-driver bochs-drm --metrics-addr 127.0.0.1:9464"' >/etc/default/gpuplane
cat > /etc/systemd/system/pve-guests.service <<'UNIT'
[Unit]
Description=stand-in for Proxmox guest autostart
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for d in 0000:81:00.0 0000:82:00.0; do echo "GUESTS-SAW $d $(basename $(readlink /sys/bus/pci/devices/$d/driver))"; done'
UNIT
systemctl daemon-reload
echo "== boot transaction"
systemctl start gpuplane.service pve-guests.service; echo "START rc=$?"
for d in 0000:41:00.0 0000:42:00.0 0000:81:00.0 0000:82:00.0; do
  echo "DRV $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none)"
done
echo "== journal"
journalctl -o short-monotonic --no-pager -u gpuplane.service -u pve-guests.service \
  | grep -E "Started|GUESTS-SAW|Ready=|Starting" | sed 's/^/JOURNAL /'
echo "== status files"
for f in /var/lib/gpuplane/status/*.yaml; do echo "STATUS $(basename "$f")"; sed "s/^/  /" "$f" | head -n 12; done
