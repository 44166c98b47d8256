#!/bin/bash
# Builds the base image of the emulated GPU host used by the VM end-to-end tests (see run.sh):
# a debootstrap'ed Debian bookworm root filesystem with systemd as PID 1, python3, the guest
# kernel's modules, and a oneshot unit that runs /usr/local/bin/check.sh once at boot, sends what
# it prints to the host over the second serial port (ttyS1) between @@BEGIN@@ and
# "@@END@@ rc=N" lines, and powers the machine off.
#
#   build-image.sh [--force]
#
# The result is cached in $GPUPLANE_E2E_CACHE (default /var/cache/gpuplane-e2e) and rebuilt only
# when this script changes or the host's newest Debian kernel changes (see the stamp file).
# Needs root (debootstrap) and a Debian mirror ($DEBIAN_MIRROR, default http://deb.debian.org/debian).
# Takes a few minutes the first time.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

force=0
[ "${1:-}" = "--force" ] && force=1
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

e2e_pick_kernel || { echo "build-image: no Debian kernel with modules and initrd in /boot; $E2E_HINT" >&2; exit 1; }
want="script_sha=$(e2e_script_sha) kernel=$E2E_KVER"

fresh() { [ -f "$E2E_CACHE/base.img" ] && [ -f "$E2E_CACHE/stamp" ] && [ "$(cat "$E2E_CACHE/stamp")" = "$want" ]; }

if [ $force = 0 ] && fresh; then exit 0; fi
[ "$(id -u)" -eq 0 ] || { echo "build-image: must run as root (debootstrap)" >&2; exit 1; }
for t in debootstrap mkfs.ext4; do
  command -v $t >/dev/null || { echo "build-image: $t missing; run e2e/setup/install-vm-deps.sh" >&2; exit 1; }
done

mkdir -p "$E2E_CACHE"
exec 9>"$E2E_CACHE/.build.lock"
flock 9                                   # one build at a time; a second waits and then finds it fresh
if [ $force = 0 ] && fresh; then exit 0; fi

start=$(date +%s)
B=$(mktemp -d "$E2E_CACHE/build.XXXXXX")
R=$B/rootfs
cleanup() {
  # never rm -rf through a mount left behind by an interrupted debootstrap
  if findmnt -rno TARGET | grep -q "^$R"; then
    findmnt -rno TARGET | grep "^$R" | sort -r | while read -r m; do umount -l "$m" || true; done
  fi
  rm -rf "$B"
}
trap cleanup EXIT
LOG=$E2E_CACHE/build.log
: >"$LOG"
echo "build-image: building into $E2E_CACHE (kernel $E2E_KVER, log $LOG)" >&2

if ! debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,kmod,udev,procps,psmisc,python3,iproute2,pciutils,util-linux,lxc \
    bookworm "$R" "$MIRROR" >>"$LOG" 2>&1; then
  tail -30 "$LOG" >&2
  echo "build-image: debootstrap failed (log $LOG)" >&2
  exit 1
fi

# Debian's LXC is there for the container path (e2e/vm/pct, vm_lxc): nothing starts a container
# at boot and LXC's own bridge (lxc-net, which wants dnsmasq) stays off.
for u in lxc.service lxc-net.service lxc-monitord.service; do
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done

# The container's root filesystem (ct.img; run.sh VM_CT=1 attaches it as /dev/vdb): a copy of
# this tree as debootstrap made it (systemd, python3, coreutils: what `pct exec` and the agent's
# preflight run inside a container), without the guest kernel's modules or the check runner.
CT=$B/ct
cp -a "$R" "$CT"
echo ct129 >"$CT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 ct129\n' >"$CT/etc/hosts"
: >"$CT/etc/machine-id"
mkdir -p "$CT/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$CT/etc/systemd/journald.conf.d/e2e.conf"
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         console-getty.service container-getty@.service systemd-timesyncd.service; do
  ln -sf /dev/null "$CT/etc/systemd/system/$u"
done
rm -rf "$CT"/var/cache/apt/archives/*.deb "$CT"/var/lib/apt/lists/* "$CT"/usr/share/doc/* "$CT"/usr/share/man/*
ct_mb=$(du -sm "$CT" | cut -f1)
truncate -s "$(( ct_mb * 13 / 10 + 256 ))M" "$B/ct.img"
mkfs.ext4 -q -L gpe2e-ct -d "$CT" "$B/ct.img" >>"$LOG" 2>&1
rm -rf "$CT"

# Kernel modules of the guest kernel (bochs DRM, vfio-pci, virtio, ...).
mkdir -p "$R/lib/modules"
cp -a "/lib/modules/$E2E_KVER" "$R/lib/modules/"
depmod -b "$R" "$E2E_KVER"

# Identity and quiet boot.
echo gpuhost >"$R/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 gpuhost\n10.0.2.2 host\n' >"$R/etc/hosts"
echo 5f1c0a7e2d6b4e0f9a3c8b7d6e5f4a3b >"$R/etc/machine-id"   # fixed: no first-boot logic
printf '/dev/vda / ext4 rw,errors=remount-ro 0 0\n' >"$R/etc/fstab"
mkdir -p "$R/etc/systemd/journald.conf.d"
printf '[Journal]\nStorage=volatile\n' >"$R/etc/systemd/journald.conf.d/e2e.conf"
for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer \
         serial-getty@ttyS0.service serial-getty@ttyS1.service getty@tty1.service \
         systemd-firstboot.service systemd-timesyncd.service; do
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done
mkdir -p "$R/usr/local/bin" "$R/usr/local/lib/gpuplane-e2e"

# The check runner: check.sh's stdout+stderr go to ttyS1 (a file on the host) and to the journal
# and console (for debugging), framed by markers; then the machine powers off.
cat >"$R/usr/local/lib/gpuplane-e2e/run-check" <<'EOF'
#!/bin/bash
res=/dev/ttyS1
stty -F "$res" raw -echo 2>/dev/null || true
exec 3>"$res"
echo "@@BEGIN@@" >&3
echo "@@BEGIN@@"
cd /root || cd /
# Let udev finish coldplug (module loading, driver binding) so the script sees a settled host.
udevadm settle --timeout=120 2>/dev/null || true
if [ -x /usr/local/bin/check.sh ]; then
  /usr/local/bin/check.sh </dev/null 2>&1 | tee /dev/fd/3
  rc=${PIPESTATUS[0]}
else
  echo "run-check: /usr/local/bin/check.sh missing" | tee /dev/fd/3
  rc=127
fi
echo "@@END@@ rc=$rc" >&3
echo "@@END@@ rc=$rc"
exec 3>&-
systemctl --no-block poweroff
EOF
chmod 755 "$R/usr/local/lib/gpuplane-e2e/run-check"

cat >"$R/etc/systemd/system/gpuplane-check.service" <<'EOF'
[Unit]
Description=gpuplane e2e: run /usr/local/bin/check.sh once, then power off
After=multi-user.target gpuplane-net.service

[Service]
Type=oneshot
Environment=HOME=/root
ExecStart=/usr/local/lib/gpuplane-e2e/run-check
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF

# Optional user-mode networking (run.sh VM_NET=user adds a NIC and gpuplane.net=1): a static
# 10.0.2.15/24 with the host reachable as 10.0.2.2 ("host" in /etc/hosts).
cat >"$R/usr/local/lib/gpuplane-e2e/net-up" <<'EOF'
#!/bin/sh
ip link set lo up
for d in /sys/class/net/*; do
  n=${d##*/}
  [ "$n" = lo ] && continue
  ip link set "$n" up && ip addr add 10.0.2.15/24 dev "$n" && ip route add default via 10.0.2.2 && exit 0
done
echo "net-up: no network interface" >&2
exit 1
EOF
chmod 755 "$R/usr/local/lib/gpuplane-e2e/net-up"
cat >"$R/etc/systemd/system/gpuplane-net.service" <<'EOF'
[Unit]
Description=gpuplane e2e: static user-mode network
ConditionKernelCommandLine=gpuplane.net=1
After=systemd-udev-settle.service systemd-udevd.service
Before=gpuplane-check.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStartPre=/bin/sh -c 'for i in $(seq 50); do ls /sys/class/net | grep -qv "^lo$" && exit 0; sleep 0.2; done'
ExecStart=/usr/local/lib/gpuplane-e2e/net-up

[Install]
WantedBy=multi-user.target
EOF
mkdir -p "$R/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/gpuplane-check.service "$R/etc/systemd/system/multi-user.target.wants/"
ln -sf /etc/systemd/system/gpuplane-net.service "$R/etc/systemd/system/multi-user.target.wants/"

# Trim what a test host never needs.
rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/* "$R"/usr/share/doc/* "$R"/usr/share/man/*

# Size: what the tree uses plus ~1 GiB free for test binaries and logs (the file is sparse).
used_mb=$(du -sm "$R" | cut -f1)
size_mb=$(( used_mb * 13 / 10 + 1024 ))
truncate -s "${size_mb}M" "$B/base.img"
mkfs.ext4 -q -L gpe2e-root -d "$R" "$B/base.img" >>"$LOG" 2>&1
cp "/boot/vmlinuz-$E2E_KVER" "$B/vmlinuz"
cp "/boot/initrd.img-$E2E_KVER" "$B/initrd.img"

# Publish: image, kernel and initrd first, the stamp last (renames are atomic).
rm -f "$E2E_CACHE/stamp"
mv -f "$B/base.img" "$E2E_CACHE/base.img"
mv -f "$B/ct.img" "$E2E_CACHE/ct.img"
mv -f "$B/vmlinuz" "$E2E_CACHE/vmlinuz"
mv -f "$B/initrd.img" "$E2E_CACHE/initrd.img"
echo "$want" >"$E2E_CACHE/stamp"
echo "build-image: done in $(( $(date +%s) - start ))s (rootfs ${used_mb} MiB, image ${size_mb} MiB sparse)" >&2
