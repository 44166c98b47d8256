#!/bin/bash
# Builds the second API server of the tests: Kubernetes' CRD server (k8s.io/apiextensions-apiserver,
# the same code that serves CustomResourceDefinitions inside every kube-apiserver) at the newest
# version Debian sid ships (0.36.x when written = Kubernetes 1.36), with sid's etcd 3.5 and kubectl.
# It is the lane that runs the CRDs' CEL rules (`x-kubernetes-validations`, GA since 1.29) and
# server-side apply as Argo CD and Flux use it; the 1.20 server of kube-build.sh stays for what needs
# a whole API server (Leases, Events, admission webhooks).
#
#   $GPUPLANE_E2E_CACHE/kube-cel/bin/apiextensions-apiserver   (built here, version v1.<minor>.<patch>)
#   $GPUPLANE_E2E_CACHE/kube-cel/bin/etcd                      (sid's etcd-server, as shipped)
#   $GPUPLANE_E2E_CACHE/kube-cel/bin/kubectl                   (sid's kubectl, as shipped)
#   $GPUPLANE_E2E_CACHE/kube-cel/bin/discovery-front           (e2e/kube/discovery-front: the /api
#                                                              and /apis discovery the standalone
#                                                              server leaves to kube-apiserver's
#                                                              aggregator; kubectl needs it)
#   $GPUPLANE_E2E_CACHE/kube-cel/go                            (sid's Go, kept to rebuild the front)
#   $GPUPLANE_E2E_CACHE/kube-cel/VERSION                       (the Kubernetes version built)
#
# Nothing on this machine is installed or changed: sid's package lists live in a private apt state
# directory under the cache, the packages are fetched with `apt-get download` (the Go source of
# apiextensions-apiserver and its dependencies as golang-*-dev packages, Go itself) and extracted
# with `dpkg-deb -x`, and the server is built in GOPATH mode from those sources. Only a Debian mirror
# is needed. A cold run takes about 7 minutes on two cores (the download ~30 s, ~280 MB); a warm run
# checks the binaries and exits. If sid cannot be reached or no longer ships the sources, it says so
# and exits 1 (the tests of this lane then fail with that message; the rest of the suite does not
# depend on it).
#
# Environment: GPUPLANE_E2E_CACHE (default /var/cache/gpuplane-e2e); KUBE_CEL_FORCE=1 rebuilds;
# KUBE_CEL_KEEP=1 keeps the extracted sources (about 2.3 GB) after a build; DEBIAN_MIRROR
# (default http://deb.debian.org/debian).
set -euo pipefail

CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}/kube-cel
FRONT_SRC=$(cd "$(dirname "$0")/../kube/discovery-front" && pwd)/main.go
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BIN=$CACHE/bin
log() { printf '[kube-cel-build] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The discovery front, built again whenever its source changed (sid's Go is kept for it).
front_sum() { sha256sum "$FRONT_SRC" | cut -d' ' -f1; }
front_built() { [ -x "$BIN/discovery-front" ] && [ "$(cat "$BIN/discovery-front.sha256" 2>/dev/null)" = "$(front_sum)" ]; }
build_front() {
  local goroot; goroot=$(ls -d "$CACHE"/go/usr/lib/go-1.* 2>/dev/null | sort -V | tail -1)
  [ -x "$goroot/bin/go" ] || return 1
  log "building the discovery front ($FRONT_SRC)"
  env -u GOFLAGS GOROOT="$goroot" GO111MODULE=off GOPATH="$CACHE/go/gopath" GOCACHE="$CACHE/go/cache" \
    GOTOOLCHAIN=local CGO_ENABLED=0 "$goroot/bin/go" build -trimpath -ldflags "-s -w" \
    -o "$BIN/discovery-front" "$FRONT_SRC" || die "the discovery front does not build"
  front_sum >"$BIN/discovery-front.sha256"
}

built() {
  [ -s "$CACHE/VERSION" ] || return 1
  local v; v=$(cat "$CACHE/VERSION")
  # The server has no --version flag (it serves /version): the version linked in is checked.
  [ -x "$BIN/etcd" ] && [ -x "$BIN/kubectl" ] && [ -x "$BIN/apiextensions-apiserver" ] &&
    grep -aqF "$v" "$BIN/apiextensions-apiserver"
}
if [ "${KUBE_CEL_FORCE:-0}" != 1 ] && built; then
  front_built || build_front || die "no Go in $CACHE/go to build the discovery front; run with KUBE_CEL_FORCE=1"
  log "cached build found: Kubernetes $(cat "$CACHE/VERSION") CRD server"
  exit 0
fi
START=$(date +%s)
mkdir -p "$CACHE"

# --- A private apt state for sid (this machine's apt is not touched) ------------------------------
APT=$CACHE/apt
mkdir -p "$APT/lists/partial" "$APT/archives/partial" "$APT/cache" "$APT/debs"
printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s sid main\n' "$MIRROR" >"$APT/sources.list"
: >"$APT/status"
A=(-o "Dir::State::Lists=$APT/lists" -o "Dir::State::Status=$APT/status"
   -o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null
   -o "Dir::Cache=$APT/cache" -o "Dir::Cache::archives=$APT/archives"
   -o Debug::NoLocking=1 -o APT::Architecture=amd64 -o APT::Sandbox::User=root)
log "reading Debian sid's package lists from $MIRROR"
apt-get "${A[@]}" -qq update >"$APT/update.log" 2>&1 ||
  die "cannot read sid's package lists from $MIRROR (apt-get update failed; $APT/update.log). This lane needs a Debian mirror that carries sid."
SRC_PKG=golang-k8s-apiextensions-apiserver-dev
CANDIDATE=$(apt-cache "${A[@]}" policy "$SRC_PKG" 2>/dev/null | awk '/Candidate:/ {print $2}')
case $CANDIDATE in
  ""|"(none)") die "Debian sid no longer ships $SRC_PKG; no Kubernetes CRD server can be built for the CEL lane" ;;
esac
# 0.36.4-1 → Kubernetes v1.36.4 (the staging repositories share Kubernetes' minor and patch).
UPSTREAM=${CANDIDATE%%-*}; UPSTREAM=${UPSTREAM#*:}
MINOR=$(echo "$UPSTREAM" | cut -d. -f2); PATCH=$(echo "$UPSTREAM" | cut -d. -f3 | sed 's/[^0-9].*//')
VERSION=v1.$MINOR.$PATCH
log "sid ships $SRC_PKG $CANDIDATE: building the Kubernetes $VERSION CRD server"

# --- The sources: the package's Go dependency closure, Go, etcd and kubectl -----------------------
# Only golang-* packages are taken from the closure (the C libraries some of them name are not
# needed to compile this server with CGO_ENABLED=0).
apt-cache "${A[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$SRC_PKG" 2>/dev/null |
  grep -v '^[ <]' | sort -u | grep '^golang-' |
  grep -v -e '^golang-go$' -e '^golang-any$' -e '^golang-src$' -e '^golang-golang-x-tools$' >"$APT/closure"
GO_PKG=$(grep -E '^golang-1\.[0-9]+-go$' "$APT/closure" | sort -V | tail -1)
[ -n "$GO_PKG" ] || die "no Go compiler (golang-1.N-go) in $SRC_PKG's dependencies"
log "downloading $(wc -l <"$APT/closure") golang packages ($GO_PKG among them), etcd-server and kubectl"
(cd "$APT/debs" && rm -f ./*.deb &&
  apt-get "${A[@]}" -qq download $(cat "$APT/closure") etcd-server kubectl >"$APT/download.log" 2>&1) ||
  die "downloading the packages failed ($APT/download.log)"

ROOT=$CACHE/root
rm -rf "$ROOT"; mkdir -p "$ROOT"
log "extracting $(ls "$APT/debs" | wc -l) packages (not installed)"
for d in "$APT/debs"/*.deb; do dpkg-deb -x "$d" "$ROOT"; done
GOROOT=$ROOT/usr/lib/${GO_PKG%-go}
GOROOT=${GOROOT/golang-/go-}
[ -x "$GOROOT/bin/go" ] || die "no go binary at $GOROOT/bin/go"

# --- The build --------------------------------------------------------------------------------------
log "building with $("$GOROOT/bin/go" version) in GOPATH mode (a few minutes)"
mkdir -p "$BIN" "$CACHE/gocache"
LD="-s -w"
for kv in "gitVersion=$VERSION" "gitMajor=1" "gitMinor=$MINOR" "gitTreeState=clean"; do
  LD="$LD -X k8s.io/component-base/version.$kv"
done
(cd "$ROOT" && env -u GOFLAGS GOROOT="$GOROOT" GOPATH="$ROOT/usr/share/gocode" GO111MODULE=off \
  GOCACHE="$CACHE/gocache" GOTOOLCHAIN=local CGO_ENABLED=0 \
  "$GOROOT/bin/go" build -trimpath -ldflags "$LD" -o "$BIN/apiextensions-apiserver.new" \
  k8s.io/apiextensions-apiserver) || die "the Go build failed (output above)"
mv "$BIN/apiextensions-apiserver.new" "$BIN/apiextensions-apiserver"
install -m 0755 "$ROOT/usr/bin/etcd" "$BIN/etcd"
install -m 0755 "$ROOT/usr/bin/kubectl" "$BIN/kubectl"
# Go itself is kept (about 250 MB) for the discovery front; the sources go.
rm -rf "$CACHE/go"; mkdir -p "$CACHE/go/usr/lib" "$CACHE/go/usr/share"
cp -a "$GOROOT" "$CACHE/go/usr/lib/"
[ -d "$ROOT/usr/share/${GOROOT##*/}" ] && cp -a "$ROOT/usr/share/${GOROOT##*/}" "$CACHE/go/usr/share/"
build_front
echo "$VERSION" >"$CACHE/VERSION"
if [ "${KUBE_CEL_KEEP:-0}" != 1 ]; then rm -rf "$ROOT" "$CACHE/gocache" "$APT/debs"; fi
built || die "the built server does not report Kubernetes $VERSION"
log "built the Kubernetes $VERSION CRD server in $(( $(date +%s) - START ))s: $BIN"
