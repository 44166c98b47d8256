#!/bin/bash
# Builds the real Kubernetes pieces the gpuplane end-to-end tests run against:
#
#   $GPUPLANE_E2E_CACHE/kube/bin/kube-apiserver   (v1.20.2)
#   $GPUPLANE_E2E_CACHE/kube/bin/kubectl          (v1.20.2, the same version as the server)
#   etcd                                          (Debian's etcd-server package, on PATH)
#
# and, with KUBE_BUILD_NODE=1, what a real single-node cluster also needs (the real-node e2e test,
# e2e/tests/vm_kube_node.rs, bakes them into its VM image):
#
#   $GPUPLANE_E2E_CACHE/kube/bin/kubelet, kube-controller-manager, kube-scheduler, kube-proxy  (v1.20.2)
#   $GPUPLANE_E2E_CACHE/kube/bin/pause     (the pod sandbox binary, build/pause/linux/pause.c, static)
#
# No prebuilt Kubernetes binaries are fetched from the internet. Debian bookworm ships the complete
# Kubernetes 1.20.2 source tree, vendored dependencies included, as the source package `kubernetes`
# (version 1.20.5+really1.20.2), and Debian's own Go (golang-go, 1.19) compiles it. Only Debian
# package mirrors are needed.
#
# Idempotent: when both binaries are already in the cache and report v1.20.2, it only makes sure the
# Debian packages are installed and prints the paths. A cold build takes a few minutes (about 5 on
# two cores). Interrupted builds resume where they stopped (unpacked tree and generated code stay).
#
# Environment:
#   GPUPLANE_E2E_CACHE   cache root (default /var/cache/gpuplane-e2e); the build lives in ./kube
#   KUBE_BUILD_KEEP=1    keep the source tree and the Go build cache after a successful build
#                        (default: remove them; about 2 GiB)
#   KUBE_BUILD_FORCE=1   rebuild even if the binaries are there
#   KUBE_BUILD_NODE=1    also build kubelet, kube-controller-manager, kube-scheduler, kube-proxy (static,
#                        CGO_ENABLED=0: a kubelet that talks to containerd over CRI needs no cgo).
#                        If the source tree was removed after an earlier build, it is fetched again.
#
# Needs root (or sudo) for apt-get. Runs on Debian bookworm.
set -euo pipefail

KUBE_VERSION=v1.20.2
CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}/kube
BIN=$CACHE/bin

log() { printf '[kube-build] %s\n' "$*" >&2; }

if [ "$(id -u)" = 0 ]; then SUDO=(); else SUDO=(sudo); fi

# --- Debian packages -------------------------------------------------------------------------------
# golang-go: the compiler. etcd-server: the etcd binary. golang-github-modern-go-reflect2-dev: a fixed
# reflect2 (see below). openssl/curl: used by control-plane.sh. ca-certificates for apt over https.
RUNTIME_PKGS=(etcd-server openssl curl)
BUILD_PKGS=(golang-go golang-github-modern-go-reflect2-dev ca-certificates)

apt_install() {
  local missing=()
  for p in "$@"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

have_version() { # binary args-that-print-the-version...
  local out
  [ -x "$1" ] && out=$("$@" 2>/dev/null) && [[ $out == *"$KUBE_VERSION"* ]]
}

# The binaries wanted, and how each reports its version.
WANT=(kube-apiserver kubectl)
[ "${KUBE_BUILD_NODE:-0}" = 1 ] && WANT+=(kubelet kube-controller-manager kube-scheduler kube-proxy)
version_args() { if [ "$1" = kubectl ]; then echo "version --client --short"; else echo --version; fi; }
is_built() { # shellcheck disable=SC2046
  have_version "$BIN/$1" $(version_args "$1")
}

print_paths() {
  local b
  for b in "${WANT[@]}"; do printf '%-24s %s\n' "$b:" "$BIN/$b"; done
  echo "etcd:                    $(command -v etcd)"
}

apt_install "${RUNTIME_PKGS[@]}"

TODO=()
for b in "${WANT[@]}"; do
  if [ "${KUBE_BUILD_FORCE:-0}" = 1 ] || ! is_built "$b"; then TODO+=("$b"); fi
done
[ "${KUBE_BUILD_NODE:-0}" = 1 ] && [ ! -x "$BIN/pause" ] && TODO+=(pause)
if [ ${#TODO[@]} -eq 0 ]; then
  log "cached build found"
  print_paths
  exit 0
fi

START=$(date +%s)
apt_install "${BUILD_PKGS[@]}"

# --- Source ----------------------------------------------------------------------------------------
# `apt-get source` needs a deb-src entry for bookworm; add one of our own unless one exists already.
has_debsrc() {
  grep -rqsE '^[[:space:]]*deb-src[[:space:]].*[[:space:]]bookworm[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d/*.list && return 0
  # deb822 stanzas: a "Types:" line naming deb-src in a file that also names the bookworm suite.
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN{RS=""} /Types:[^\n]*deb-src/ && /Suites:[^\n]*bookworm([ \n]|$)/ {found=1} END{exit !found}' "$f" && return 0
  done
  return 1
}
SRC_LIST=/etc/apt/sources.list.d/gpuplane-e2e-debsrc.sources
if ! has_debsrc; then
  log "adding a bookworm deb-src entry: $SRC_LIST"
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' |
    "${SUDO[@]}" tee "$SRC_LIST" >/dev/null
  "${SUDO[@]}" apt-get update -qq
fi

if ! mkdir -p "$CACHE/src" "$BIN" 2>/dev/null; then
  "${SUDO[@]}" mkdir -p "$CACHE" && "${SUDO[@]}" chown "$(id -u):$(id -g)" "$CACHE"
  mkdir -p "$CACHE/src" "$BIN"
fi
cd "$CACHE/src"
TREE=$CACHE/src/kubernetes-1.20.2
if [ ! -f "$TREE/.unpacked" ]; then
  if ! ls kubernetes_*.orig.tar.gz >/dev/null 2>&1; then
    log "downloading Debian source package 'kubernetes'"
    # --download-only: no dpkg-source needed; we only use the upstream tarball.
    apt-get source --download-only kubernetes 2>&1 >/dev/null | grep -v 'unsandboxed as root' >&2 || true
    ls kubernetes_*.orig.tar.gz >/dev/null 2>&1 || { log "apt-get source kubernetes failed"; exit 1; }
  fi
  rm -rf "$TREE"
  log "unpacking $(ls kubernetes_*.orig.tar.gz)"
  tar xzf kubernetes_*.orig.tar.gz
  [ -d "$TREE" ] || { log "expected $TREE after unpacking"; exit 1; }
  touch "$TREE/.unpacked"
fi

# GOPATH mode: the tree must sit at $GOPATH/src/k8s.io/kubernetes (its vendor/ then resolves).
export GOPATH=$CACHE/gopath GO111MODULE=off CGO_ENABLED=0 GOCACHE=$CACHE/gocache GOFLAGS=
mkdir -p "$GOPATH/src/k8s.io"
ln -sfn "$TREE" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"
log "go: $(go version)"

# reflect2 v1.0.1 (vendored by 1.20) relies on runtime internals that changed in Go 1.18: the server
# crashes with SIGSEGV while iterating maps (first CRD write). Debian's package carries v1.0.2.
if [ ! -f vendor/github.com/modern-go/reflect2/go_above_118.go ]; then
  log "replacing vendored github.com/modern-go/reflect2 with Debian's v1.0.2"
  rm -rf vendor/github.com/modern-go/reflect2
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
fi

# The OpenAPI type validator (vendored twice: go-openapi/validate and kube-openapi's fork) treats a
# value equal to its type's zero value as JSON null: `reflect.DeepEqual(reflect.Zero(t),
# reflect.ValueOf(data))`. With the Go 1.15 that upstream built 1.20 with, the two reflect.Values never
# compared equal, so only a real null failed. Since Go 1.19, reflect.Zero and an interface holding ""
# both point at runtime.zeroVal, so every empty string fails `type: string` ("... in body must be of
# type string: "null"") in custom resources and in CRD defaults. Restore the original behaviour.
for f in vendor/github.com/go-openapi/validate/type.go vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go; do
  [ -f "$f" ] || continue
  if grep -q 'reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))' "$f"; then
    log "patching $f (empty strings are not null)"
    sed -i 's/if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {/if data == nil {/' "$f"
  fi
done

# The release tarball does not contain the generated OpenAPI definitions the apiserver links in
# (upstream's build generates them). Generate them with the vendored openapi-gen over every package
# that asks for it, as upstream's hack/ scripts do.
if [ ! -f pkg/generated/openapi/zz_generated.openapi.go ]; then
  log "generating pkg/generated/openapi"
  go build -o "$CACHE/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  inputs=$(grep -Rl --include='*.go' '+k8s:openapi-gen=' pkg cmd plugin vendor/k8s.io 2>/dev/null |
    grep -v '_test\.go$' | grep -vE '^vendor/k8s.io/(code-generator|sample-apiserver)/' |
    xargs -n1 dirname | LC_ALL=C sort -u | sed 's,^,k8s.io/kubernetes/,' | paste -sd,)
  "$CACHE/openapi-gen" -i "$inputs" -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$CACHE/openapi-violations.report" \
    >"$CACHE/openapi-gen.log" 2>&1 || { tail -20 "$CACHE/openapi-gen.log" >&2; exit 1; }
fi

# Version stamping, as upstream's hack/lib/version.sh does. Both packages matter: component-base
# serves /version (kube-apiserver), client-go's is what kubectl reports; GOPATH-mode import paths.
ldflags="-s -w"
for pkg in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=20"
  ldflags+=" -X $pkg.gitCommit=debian-1.20.5+really1.20.2 -X $pkg.gitTreeState=clean"
  ldflags+=" -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done

GO_TODO=()
for b in "${TODO[@]}"; do [ "$b" = pause ] || GO_TODO+=("$b"); done
[ ${#GO_TODO[@]} -eq 0 ] || log "compiling ${GO_TODO[*]} (minutes each)"
mkdir -p "$BIN/.new"
for b in "${GO_TODO[@]}"; do
  s=$(date +%s)
  go build -ldflags "$ldflags" -o "$BIN/.new/" "./cmd/$b"
  mv -f "$BIN/.new/$b" "$BIN/"
  is_built "$b" || { log "built $b does not report $KUBE_VERSION"; exit 1; }
  log "$b built in $(( $(date +%s) - s ))s"
done
rmdir "$BIN/.new"

# The pod sandbox ("pause") image's one binary, from the same tree: containerd's CRI starts every pod,
# hostNetwork ones too, from its sandbox image, and no registry is reachable in the test VM.
if [ "${KUBE_BUILD_NODE:-0}" = 1 ] && [ ! -x "$BIN/pause" ]; then
  apt_install gcc libc6-dev
  gcc -Os -static -DVERSION=v3.2 -o "$BIN/pause.new" build/pause/linux/pause.c && strip "$BIN/pause.new"
  mv -f "$BIN/pause.new" "$BIN/pause"
  log "pause built"
fi

if [ "${KUBE_BUILD_KEEP:-0}" != 1 ]; then
  rm -rf "$CACHE/src" "$CACHE/gopath" "$CACHE/gocache" "$CACHE/openapi-gen" "$CACHE/openapi-gen.log" "$CACHE/openapi-violations.report"
fi
log "built in $(( $(date +%s) - START ))s"
print_paths
