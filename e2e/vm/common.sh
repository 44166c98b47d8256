# Shared by build-image.sh and run.sh (sourced, not executed).
#
# Cache layout ($GPUPLANE_E2E_CACHE, default /var/cache/gpuplane-e2e):
#   base.img     ext4 root filesystem (Debian bookworm, systemd as PID 1), raw, sparse
#   vmlinuz      the guest kernel (a copy of the host's Debian linux-image-amd64 kernel)
#   initrd.img   its initrd (Debian's initramfs-tools one: has virtio_blk and ext4)
#   ct.img       the LXC container's root filesystem (ext4, raw): run.sh VM_CT=1 attaches it
#   stamp        what the image was built from; run.sh refuses a stale image
#   build.log    output of the last build

E2E_VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
E2E_CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
E2E_HINT="run e2e/setup/install-vm-deps.sh and then e2e/vm/build-image.sh (as root)"

# Newest Debian kernel under /boot that has its modules and initrd; sets E2E_KVER.
e2e_pick_kernel() {
  E2E_KVER=""
  local k kv
  for k in $(ls /boot/vmlinuz-* 2>/dev/null | sort -V); do
    kv=${k#/boot/vmlinuz-}
    if [ -d "/lib/modules/$kv" ] && [ -f "/boot/initrd.img-$kv" ]; then E2E_KVER=$kv; fi
  done
  [ -n "$E2E_KVER" ]
}

# Hash of build-image.sh: the image is rebuilt whenever that script changes.
e2e_script_sha() {
  sha256sum "$E2E_VM_DIR/build-image.sh" | cut -d' ' -f1
}

# What the single-node Kubernetes image (build-kube-image.sh, kube-node.img) is built from: that
# script, the node configuration tree, the base image's stamp and the kube binaries (size, time).
e2e_kube_want() {
  local tree bins
  tree=$(cd "$E2E_VM_DIR/kube-node" && find . -type f | LC_ALL=C sort | xargs stat -c '%n %a' | sha256sum | cut -d' ' -f1)
  tree=$tree-$(cd "$E2E_VM_DIR/kube-node" && find . -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)
  bins=$(cd "$E2E_CACHE/kube/bin" && stat -c '%n %s %Y' kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl pause 2>/dev/null | sha256sum | cut -c1-16)
  echo "script_sha=$(sha256sum "$E2E_VM_DIR/build-kube-image.sh" | cut -d' ' -f1) tree=$tree bins=$bins base=$(cat "$E2E_CACHE/stamp" 2>/dev/null | sha256sum | cut -c1-16)"
}
