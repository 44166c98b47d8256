#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh, run.sh with VM_REBOOT=1) at each of two boots.
#
# First boot: installs the gpuplane .deb as an operator would, gives it manifests for the stand-in
# GPUs and adds an enabled stand-in pve-guests.service (Proxmox's guest autostart, which must find
# the GPUs already on their drivers), then reboots.
# Second boot: the real boot order did the rest; prints the drivers, what the guests' autostart saw
# and this boot's journal of both units.
# Prints machine-readable lines for e2e/tests/vm_deb.rs.
set -u
MARK=/var/lib/gpuplane-e2e-installed
if [ ! -e $MARK ]; then
  echo "== first boot: install"
  echo "BOOT-ID $(cat /proc/sys/kernel/random/boot_id)"
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
[Install]
WantedBy=multi-user.target
UNIT
  systemctl enable pve-guests.service 2>&1 | tail -n 1
  for d in 0000:81:00.0 0000:82:00.0; do
    echo "DRV-BEFORE-REBOOT $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none)"
  done
  touch $MARK
  sync
  echo "== reboot"
  systemctl reboot
  sleep 600   # the reboot stops this unit; its output ends here
  exit 1
fi

echo "== second boot"
echo "BOOT-ID $(cat /proc/sys/kernel/random/boot_id)"
for d in 0000:41:00.0 0000:42:00.0 0000:81:00.0 0000:82:00.0; do
  echo "DRV $d $(basename "$(readlink /sys/bus/pci/devices/$d/driver)" 2>/dev/null || echo none)"
done
echo "ACTIVE $(systemctl is-active gpuplane.service) $(systemctl is-active pve-guests.service)"
echo "== journal of this boot"
journalctl -b -o short-monotonic --no-pager -u gpuplane.service -u pve-guests.service \
  | grep -E "Started|GUESTS-SAW|Ready=|Starting|converged|ready" | sed 's/^/JOURNAL /'
echo "== status files"
for f in /var/lib/gpuplane/status/*.yaml; do echo "STATUS $(basename "$f")"; sed "s/^/  /" "$f" | head -n 12; done
