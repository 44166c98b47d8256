#!/bin/bash
# Runs inside the VM (as /usr/local/bin/check.sh), twice: kernel arguments written where the
# bootloader reads them, and the reboot that applies them (issue 25, part 3).
# e2e/tests/vm_kernel_args.rs boots it first with KARGS=iommu=pt (the host as it was booted
# before), then with the kernel arguments of the boot entry the stand-in refresh recorded, and
# the agent's state of the first boot restored (the STATE lines, installed as
# /usr/local/bin/kargs-<story>.state): what survives a real reboot on the host's disk.
#
# THE REAL BOOTLOADER IS NOT RUN HERE. /usr/local/sbin/proxmox-boot-tool and
# /usr/local/sbin/update-grub are stand-ins written below: each only records that it ran and
# the kernel command line the real tool would put into the boot entry — proxmox-boot-tool: the
# text of /etc/kernel/cmdline; update-grub (grub-mkconfig sources /etc/default/grub): the
# entry's own root and rw, then $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT. The harness
# plays the bootloader: it boots the second time with that entry.
#
# Two stories, each from the booted host (reset_host between them), with the same partition:
# a host slice {numaNode: 0} on the host driver and a vm slice {numaNode: 1} on vfio-pci for
# VM 300, with spec.host.kernelArgs {present: [vfio-pci.disable_idle_d3=1], absent: [iommu=pt]}:
#   cmdline  /etc/kernel/cmdline (a proxmox-boot-tool host)
#   grub     /etc/default/grub, no /etc/kernel/cmdline (a GRUB host)
# Lines (TAG STORY rest): CMDLINE (/proc/cmdline), RC/JSON/STDERR (scenario-lib's converge),
# FILE (the bootloader config, JSON-quoted), RAN (the stand-ins' record of each run; RANS:
# how many), ENTRY
# (the boot entry's command line), DRV, PARAM (vfio_pci's disable_idle_d3 as the kernel reads
# it), STATE (base64 tar.gz of the agent's state, /etc/pve and the bootloader files).
set -u
. /usr/local/bin/scenario-lib.sh
B=/var/lib/standin-boot

quoted() { python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$1"; }
pve() {
  mkdir -p /etc/pve/lxc /etc/pve/qemu-server /etc/pve/mapping
  printf 'name: guest\nhostpci0: mapping=emu-vm,pcie=1\n' > /etc/pve/qemu-server/300.conf
  printf '# mappings kept by hand\n' > /etc/pve/mapping/pci.cfg
}
ARGS_SPEC='  host:
    kernelArgs:
      present: [vfio-pci.disable_idle_d3=1]
      absent: [iommu=pt]
    reboot: Manual'
spec() { mkdir -p $M/$1; { part_head "$ARGS_SPEC"; cat <<EOF2; } > $M/$1/partition.yaml
    - name: host
      gpus: {numaNode: 0}
      driver: nvidia
    - name: vm
      gpus: {numaNode: 1}
      driver: vfio-pci
$VMC
EOF2
}
# bootfile STORY: the bootloader config as the host had it before the agent
bootfile() {
  rm -f /etc/kernel/cmdline /etc/default/grub
  mkdir -p /etc/kernel /etc/default
  case $1 in
    cmdline) printf 'root=/dev/vda rw quiet intel_iommu=on iommu=pt\n' > /etc/kernel/cmdline ;;
    grub) printf '%s\n' '# If you change this file, run '"'"'update-grub'"'"' afterwards to update' \
        '# /boot/grub/grub.cfg.' '' 'GRUB_DEFAULT=0' 'GRUB_TIMEOUT=5' \
        'GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`' \
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet intel_iommu=on iommu=pt"' 'GRUB_CMDLINE_LINUX=""' '' \
        '#GRUB_BADRAM="0x01234567,0xfefefefe,0x89abcdef,0xefefefef"' > /etc/default/grub ;;
  esac
}
file_of() { case $1 in cmdline) echo /etc/kernel/cmdline ;; grub) echo /etc/default/grub ;; esac; }
report() {  # STORY PHASE
  echo "FILE $2 $(quoted "$(file_of $1)")"
  sed "s/^/RAN $2 /" $B/ran 2>/dev/null
  echo "RANS $2 $(cat $B/ran 2>/dev/null | wc -l)"
  echo "ENTRY $2 $(cat $B/entry 2>/dev/null)"
  drv $2
  echo "PARAM $2 $(cat /sys/module/vfio_pci/parameters/disable_idle_d3 2>/dev/null || echo -)"
}
state_file() { echo /usr/local/bin/kargs-$1.state; }

echo "CMDLINE boot $(cat /proc/cmdline)"
if [ ! -f "$(state_file cmdline)" ]; then
  echo "== boot 1: the host booted with iommu=pt"
  for s in cmdline grub; do
    echo "== $s: converge, then the state the reboot keeps"
    rm -rf $B; boot_standins; pve; spec $s; bootfile $s
    echo "FILE $s-before $(quoted "$(file_of $s)")"
    converge $s
    report $s $s
    cp -r $M/$s $M/$s-again; converge $s-again
    echo "STATE $s $(tar czf - -C / var/lib/gpuplane etc/pve var/lib/standin-boot "$(file_of $s | cut -c2-)" | base64 -w0)"
    reset_host; rm -rf $B /etc/kernel/cmdline /etc/default/grub
  done
  exit 0
fi

echo "== boot 2: the harness booted the entry the stand-in refresh recorded"
for s in cmdline grub; do
  echo "== $s: the state of boot 1, the same spec"
  rm -rf /var/lib/gpuplane /etc/pve $B /etc/kernel/cmdline /etc/default/grub
  base64 -d "$(state_file $s)" | tar xzf - -C /
  : > $B/ran
  boot_standins; spec $s
  converge $s
  report $s $s-after
  cp -r $M/$s $M/$s-again; converge $s-again
  reset_host
done
exit 0
