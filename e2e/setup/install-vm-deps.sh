#!/bin/bash
# Installs the Debian packages the VM-based end-to-end tests need:
#   - qemu-system-x86 to emulate the GPU host (TCG, q35, intel-iommu),
#   - linux-image-amd64 (+ initramfs-tools) for the guest kernel, its initrd and modules,
#   - debootstrap, e2fsprogs (mkfs.ext4 -d, debugfs) to build and patch the guest root filesystem
#     and make the job disks (e2e/vm/run.sh), zstd for the snapshots' saved state,
#   - busybox-static, cpio for small initramfs experiments.
# Idempotent: does nothing (and touches no network) when everything is already installed.
# Needs root (or sudo) and a Debian mirror reachable through apt.
set -euo pipefail

PKGS=(
  qemu-system-x86
  linux-image-amd64
  initramfs-tools
  kmod
  debootstrap
  debian-archive-keyring
  e2fsprogs
  zstd
  busybox-static
  cpio
  coreutils
  util-linux
)

missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [ "$st" = "install ok installed" ] || missing+=("$p")
done

# A kernel package alone is not enough: there must be a bootable kernel with its modules and initrd.
have_kernel() {
  local k kv
  for k in /boot/vmlinuz-*; do
    [ -e "$k" ] || continue
    kv=${k#/boot/vmlinuz-}
    [ -d "/lib/modules/$kv" ] && [ -f "/boot/initrd.img-$kv" ] && return 0
  done
  return 1
}

if [ ${#missing[@]} -eq 0 ] && have_kernel && command -v qemu-system-x86_64 >/dev/null; then
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-vm-deps: installing ${missing[*]}" >&2
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  # Wait for another apt/dpkg run instead of failing on its lock; show apt's output only on failure.
  if ! { $SUDO apt-get -o DPkg::Lock::Timeout=900 update -qq &&
         $SUDO apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install-vm-deps: apt-get failed" >&2
    exit 1
  fi
fi

if ! have_kernel; then
  # linux-image installed but its initrd was never generated (e.g. initramfs-tools came later).
  for k in /boot/vmlinuz-*; do
    kv=${k#/boot/vmlinuz-}
    [ -f "/boot/initrd.img-$kv" ] || $SUDO update-initramfs -c -k "$kv" >/dev/null 2>&1
  done
fi

have_kernel || { echo "install-vm-deps: no kernel with modules and initrd under /boot" >&2; exit 1; }
command -v qemu-system-x86_64 >/dev/null || { echo "install-vm-deps: qemu-system-x86_64 missing" >&2; exit 1; }
