#!/bin/bash
# Builds the gpuplane OCI image archive offline: no registry, no Docker daemon, no image tool.
#
#   packaging/image/build.sh [--binary PATH] [--name NAME] OUT.tar
#
# The image holds the gpuplane binary (default: target/release/gpuplane, built if missing; its
# debug information left out, its symbols kept for backtraces), the
# programs the agent runs inside the pod (nsenter, from Debian's util-linux, and /bin/sh, Debian's
# dash: the chart's host-tool wrappers are `#!/bin/sh` scripts that nsenter into the host), the
# shared libraries they need (copied from this machine, as ldd lists them), and the CA certificates. One layer; entrypoint ["/usr/bin/gpuplane"] (no shell); user root (the agent
# is a privileged node agent; the webhook Deployment runs it as 65532).
#
# Reproducible: file times are SOURCE_DATE_EPOCH (default: the last commit's time), names are
# sorted, owners numeric 0, gzip without a name or time, JSON written in a fixed key order. The
# same inputs give the same digests. Labels follow the OCI image spec's annotation keys.
#
# `ctr -n k8s.io images import OUT.tar` (containerd) or `skopeo copy oci-archive:OUT.tar ...`
# load it; NAME is stored fully qualified (docker.io/gpuplane/gpuplane:<version> by default),
# as kubelet looks images up.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=target/release/gpuplane
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
NAME=docker.io/gpuplane/gpuplane:$VERSION
while [ $# -gt 1 ]; do
  case "$1" in
    --binary) BIN=$2; shift 2 ;;
    --name) NAME=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -eq 1 ] || { echo "usage: $0 [--binary PATH] [--name NAME] OUT.tar" >&2; exit 2; }
OUT=$(realpath -m "$1")
if [ ! -x "$BIN" ]; then
  [ "$BIN" = target/release/gpuplane ] || { echo "no binary at $BIN" >&2; exit 1; }
  cargo build --release --bin gpuplane
fi
EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED=$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)
NSENTER=$(command -v nsenter) || { echo "nsenter (util-linux) is needed" >&2; exit 1; }
DASH=$(command -v dash) || { echo "dash is needed (the host-tool wrappers' /bin/sh)" >&2; exit 1; }
command -v objcopy >/dev/null || { echo "objcopy (binutils) is needed" >&2; exit 1; }

T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ROOT=$T/root
mkdir -p "$ROOT/usr/bin" "$ROOT/bin" "$ROOT/etc/ssl/certs" "$ROOT/tmp" "$ROOT/var/lib/gpuplane"
chmod 1777 "$ROOT/tmp"
# A debug build carries hundreds of MB of debug information, which no pod reads and gzip -9 takes
# a minute over; objcopy's output is the same for the same input (reproducible).
objcopy --strip-debug "$BIN" "$ROOT/usr/bin/gpuplane"
chmod 0755 "$ROOT/usr/bin/gpuplane"
install -m 0755 "$NSENTER" "$ROOT/usr/bin/nsenter"
install -m 0755 "$DASH" "$ROOT/bin/sh"
install -m 0644 /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
# Shared libraries of both programs, at the paths the dynamic loader looks for them.
for lib in $( { ldd "$BIN"; ldd "$NSENTER"; ldd "$DASH"; } | grep -o '/[^ ]*\.so[^ ]*' | sort -u); do
  mkdir -p "$ROOT$(dirname "$lib")"
  cp -L "$lib" "$ROOT$lib"
done
printf 'root:x:0:0:root:/root:/usr/bin/nologin\nnonroot:x:65532:65532:nonroot:/:/usr/bin/nologin\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ROOT/etc/group"

mkdir -p "$T/oci/blobs/sha256"
tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner -C "$ROOT" -cf "$T/layer.tar" .
DIFFID=$(sha256sum "$T/layer.tar" | cut -d' ' -f1)
gzip -n -9 "$T/layer.tar"
blob_file() { local d; d=$(sha256sum "$1" | cut -d' ' -f1); mv "$1" "$T/oci/blobs/sha256/$d"; echo "$d $(stat -c %s "$T/oci/blobs/sha256/$d")"; }
blob_text() { printf '%s' "$1" >"$T/blob"; blob_file "$T/blob"; }
read -r LAYER LAYER_SIZE < <(blob_file "$T/layer.tar.gz")
LABELS=$(printf '"org.opencontainers.image.title":"gpuplane","org.opencontainers.image.description":"GPU host reconciliation agent: observe -> plan -> apply","org.opencontainers.image.version":"%s","org.opencontainers.image.revision":"%s","org.opencontainers.image.created":"%s","org.opencontainers.image.licenses":"Apache-2.0","org.opencontainers.image.source":"https://github.com/gpuplane/gpuplane"' "$VERSION" "$REVISION" "$CREATED")
CONFIG=$(printf '{"architecture":"amd64","config":{"Entrypoint":["/usr/bin/gpuplane"],"Env":["PATH=/usr/bin:/bin","SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"],"Labels":{%s},"User":"0:0","WorkingDir":"/"},"created":"%s","os":"linux","rootfs":{"diff_ids":["sha256:%s"],"type":"layers"}}' "$LABELS" "$CREATED" "$DIFFID")
read -r CFG CFG_SIZE < <(blob_text "$CONFIG")
MANIFEST=$(printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:%s","size":%s}],"annotations":{%s}}' "$CFG" "$CFG_SIZE" "$LAYER" "$LAYER_SIZE" "$LABELS")
read -r MAN MAN_SIZE < <(blob_text "$MANIFEST")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"amd64","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$MAN" "$MAN_SIZE" "$NAME" "${NAME##*:}" >"$T/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$T/oci/oci-layout"
tar --sort=name --mtime="@$EPOCH" --owner=0 --group=0 --numeric-owner -C "$T/oci" -cf "$OUT" oci-layout index.json blobs
echo "$OUT $NAME sha256:$MAN"
