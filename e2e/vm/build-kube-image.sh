#!/bin/bash
# Builds the image of the emulated GPU host as a single-node Kubernetes v1.20.2 cluster, for the
# real-node test (e2e/tests/vm_kube_node.rs; run.sh boots it with VM_IMAGE=kube-node):
#
#   the base image (build-image.sh: Debian bookworm, systemd, the check runner, the guest kernel's
#   modules), plus
#   - from Debian: containerd, runc, containernetworking-plugins, iptables, conntrack, etcd-server
#   - from the Debian `kubernetes` source package (e2e/setup/kube-build.sh, KUBE_BUILD_NODE=1):
#     kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl in
#     /usr/local/bin
#     and the pod sandbox image k8s.gcr.io/pause:3.2 (its pause.c, static) as an OCI archive in
#     /etc/kubernetes/images/, which k8s-prep.service imports into containerd at boot
#   - the node's configuration, e2e/vm/kube-node/ copied onto / (containerd, CNI, kubelet, units)
#   - a fresh CA and the API server's serving certificate (the in-cluster names and 10.96.0.1, so
#     pods verify it with their service account's ca.crt), a service-account key, a static token
#     file (admin in system:masters; the kubelet as system:node:gpuhost) and kubeconfigs for both,
#     in /etc/kubernetes/
#   - /etc/pve: the mount point of a Proxmox host's cluster filesystem, which the chart mounts.
#
#   build-kube-image.sh [--force]
#
# Cached as $GPUPLANE_E2E_CACHE/kube-node.img with kube-node.stamp; rebuilt when this script,
# kube-node/, the base image or the kube binaries change. Needs root (chroot apt-get) and a Debian
# mirror. A build takes a few minutes (not counting kube-build.sh's compile when it is cold).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPO=$(cd "$E2E_VM_DIR/../.." && pwd)

force=0
[ "${1:-}" = "--force" ] && force=1
[ "$(id -u)" -eq 0 ] || { echo "build-kube-image: must run as root (chroot apt-get)" >&2; exit 1; }

"$E2E_VM_DIR/build-image.sh"
KUBE_BUILD_NODE=1 "$REPO/e2e/setup/kube-build.sh" >/dev/null
want=$(e2e_kube_want)
fresh() { [ -f "$E2E_CACHE/kube-node.img" ] && [ "$(cat "$E2E_CACHE/kube-node.stamp" 2>/dev/null)" = "$want" ]; }
if [ $force = 0 ] && fresh; then exit 0; fi

exec 9>"$E2E_CACHE/.build-kube.lock"
flock 9
if [ $force = 0 ] && fresh; then exit 0; fi

start=$(date +%s)
B=$(mktemp -d "$E2E_CACHE/build-kube.XXXXXX")
R=$B/rootfs
trap 'rm -rf "$B"' EXIT
LOG=$E2E_CACHE/build-kube.log
: >"$LOG"
echo "build-kube-image: building into $E2E_CACHE/kube-node.img (log $LOG)" >&2

# The base image's tree (modes, owners and links kept), read straight out of the ext4 file.
# debugfs skips device nodes: make the few a chroot'ed apt-get needs.
mkdir -p "$R"
for e in $(debugfs -R "ls -p /" "$E2E_CACHE/base.img" 2>/dev/null | cut -d/ -f6 | grep -vxE '|\.|\.\.|lost\+found'); do
  debugfs -R "rdump /$e $R" "$E2E_CACHE/base.img" >>"$LOG" 2>&1
done
[ -x "$R/usr/local/lib/gpuplane-e2e/run-check" ] || { echo "build-kube-image: could not read base.img" >&2; exit 1; }
mkdir -p "$R/dev"
for n in "null 1 3" "zero 1 5" "random 1 8" "urandom 1 9"; do
  set -- $n
  [ -e "$R/dev/$1" ] || mknod -m 666 "$R/dev/$1" c "$2" "$3"
done

# Debian's container runtime, CNI plugins and etcd; no service starts inside the chroot.
cp /etc/resolv.conf "$R/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d"
chmod 755 "$R/usr/sbin/policy-rc.d"
if ! { chroot "$R" apt-get update -qq &&
       DEBIAN_FRONTEND=noninteractive chroot "$R" apt-get install -y -qq --no-install-recommends \
         containerd runc containernetworking-plugins iptables conntrack ca-certificates etcd-server \
         ethtool socat ebtables; } >>"$LOG" 2>&1; then
  tail -30 "$LOG" >&2
  echo "build-kube-image: apt-get in the chroot failed (log $LOG)" >&2
  exit 1
fi
chroot "$R" apt-get clean
rm -rf "$R/usr/sbin/policy-rc.d" "$R"/var/lib/apt/lists/* "$R"/usr/share/doc/* "$R"/usr/share/man/*
rm -f "$R/etc/resolv.conf"

KB=$E2E_CACHE/kube/bin
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  install -m 0755 "$KB/$b" "$R/usr/local/bin/$b"
done
cp -a "$E2E_VM_DIR/kube-node/." "$R/"
W=$R/etc/systemd/system/multi-user.target.wants
for u in etcd containerd k8s-prep kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  [ -f "$R/etc/systemd/system/$u.service" ] && f=/etc/systemd/system/$u.service || f=/lib/systemd/system/$u.service
  ln -sf "$f" "$W/$u.service"
done
mkdir -p "$R/etc/pve"

# Identities: throwaway ones, made per image (the VM has no network interface).
K=$R/etc/kubernetes
mkdir -p "$K/images" "$K/pki"
(
  cd "$K/pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
    -keyout ca.key -out ca.crt -subj "/CN=gpuplane-e2e-node-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.99.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    >apiserver.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile apiserver.ext -out apiserver.crt
  rm -f apiserver.csr apiserver.ext ca.srl ca.key
) >>"$LOG" 2>&1
openssl genrsa -out "$K/sa.key" 2048 2>>"$LOG"
admin=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
kubelet=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s,admin,admin,system:masters\n%s,system:node:gpuhost,kubelet,system:nodes\n' "$admin" "$kubelet" >"$K/tokens.csv"
kubeconfig() {
  printf 'apiVersion: v1\nkind: Config\nclusters: [{name: local, cluster: {server: "https://127.0.0.1:6443", certificate-authority: /etc/kubernetes/pki/ca.crt}}]\nusers: [{name: u, user: {token: %s}}]\ncontexts: [{name: local, context: {cluster: local, user: u}}]\ncurrent-context: local\n' "$1"
}
kubeconfig "$admin" >"$K/admin.kubeconfig"
kubeconfig "$kubelet" >"$K/kubelet.kubeconfig"
chmod 600 "$K/sa.key" "$K/tokens.csv" "$K"/*.kubeconfig "$K/pki/apiserver.key"

# The pause image: one layer holding /pause, stored under the name containerd's config asks for.
P=$B/pause
mkdir -p "$P/root" "$P/oci/blobs/sha256"
install -m 0755 "$KB/pause" "$P/root/pause"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$P/root" -cf "$P/layer.tar" .
diffid=$(sha256sum "$P/layer.tar" | cut -d' ' -f1)
gzip -n -9 "$P/layer.tar"
blob() { local d; d=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "$P/oci/blobs/sha256/$d"; echo "$d $(stat -c %s "$P/oci/blobs/sha256/$d")"; }
read -r layer lsize < <(blob "$P/layer.tar.gz")
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$diffid" >"$P/cfg"
read -r cfg csize < <(blob "$P/cfg")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}]}' "$cfg" "$csize" "$layer" "$lsize" >"$P/man"
read -r man msize < <(blob "$P/man")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"k8s.gcr.io/pause:3.2","org.opencontainers.image.ref.name":"3.2"}}]}' "$man" "$msize" >"$P/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$P/oci/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$P/oci" -cf "$K/images/pause.tar" oci-layout index.json blobs

# Room for images, etcd and logs on top of the tree (the file is sparse).
used_mb=$(du -sm "$R" | cut -f1)
size_mb=$(( used_mb * 13 / 10 + 2048 ))
truncate -s "${size_mb}M" "$B/kube-node.img"
mkfs.ext4 -q -L gpe2e-root -d "$R" "$B/kube-node.img" >>"$LOG" 2>&1
rm -f "$E2E_CACHE/kube-node.stamp"
mv -f "$B/kube-node.img" "$E2E_CACHE/kube-node.img"
echo "$want" >"$E2E_CACHE/kube-node.stamp"
echo "build-kube-image: done in $(( $(date +%s) - start ))s (rootfs ${used_mb} MiB, image ${size_mb} MiB sparse)" >&2
