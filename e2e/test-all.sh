#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian bookworm machine (idempotent, cached) and
# runs every test. This is the README's second command and what .ci/run calls.
#
# The set-up's two long downloads (the SGLang venv from PyPI, the VM image from a Debian mirror)
# mostly wait on the network and the disk, so they run in the background, beside the parts that
# keep both cores busy (the Go build of kube-apiserver, clippy and the workspace build); the tests
# start once all of it is done. Each step prints its time; the background steps' output is
# printed whole when they end. GPUPLANE_SETUP_SERIAL=1 runs every step one after another.
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUPLANE_E2E_CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
t_all=$(date +%s)
# timed NAME CMD...: runs CMD in the foreground and prints its time.
timed() { local name=$1 t0; shift; t0=$(date +%s); echo "== $name"; "$@"; echo "-- $name: $(( $(date +%s) - t0 ))s"; }
# setup SCRIPT: one set-up script as root, with the cache.
setup() { $SUDO env GPUPLANE_E2E_CACHE="$GPUPLANE_E2E_CACHE" bash "$1"; }
# bg NAME CMD...: runs CMD in the background, its output kept for when it ends.
declare -A BG=()
bg() { local name=$1; shift
  if [ "${GPUPLANE_SETUP_SERIAL:-}" = 1 ]; then timed "$name" "$@"; return; fi
  echo "== $name (in the background)"
  ( t0=$(date +%s); rc=0; "$@" >"$T/$name.log" 2>&1 || rc=$?
    echo "-- $name: $(( $(date +%s) - t0 ))s, exit $rc" >>"$T/$name.log"; exit $rc ) &
  BG[$name]=$!; }
# wait_bg: waits for every background step, prints its output, fails when one failed.
wait_bg() { local name bad=0
  for name in "${!BG[@]}"; do
    if wait "${BG[$name]}"; then :; else bad=1; fi
    echo "== $name (background) output:"; cat "$T/$name.log"
  done
  [ $bad = 0 ] || { echo "test-all: a background set-up step failed (output above)" >&2; exit 1; }; }

# The steps that install Debian packages run first, one after another (apt takes one at a time).
for s in e2e/setup/*.sh; do
  case $s in */kube-build.sh|*/kube-cel-build.sh|*/sglang-venv.sh) continue ;; esac
  timed "$s" setup "$s"
done
# The SGLang venv installs python3-venv itself when it is missing: then it runs now, alone.
if /usr/bin/python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  bg sglang-venv setup e2e/setup/sglang-venv.sh
else
  timed e2e/setup/sglang-venv.sh setup e2e/setup/sglang-venv.sh
fi
if [ -x e2e/vm/build-image.sh ]; then
  bg vm-image $SUDO env GPUPLANE_E2E_CACHE="$GPUPLANE_E2E_CACHE" nice -n 5 bash e2e/vm/build-image.sh
fi
# The CEL lane's server (Kubernetes' CRD server from Debian sid's Go sources, e2e/tests/kube_cel.rs):
# a Go build like the next one; in the background, niced, it fills what the other steps leave.
bg kube-cel $SUDO env GPUPLANE_E2E_CACHE="$GPUPLANE_E2E_CACHE" nice -n 5 bash e2e/setup/kube-cel-build.sh
timed e2e/setup/kube-build.sh setup e2e/setup/kube-build.sh
timed "cargo fmt --check" cargo fmt --all -- --check
timed "cargo clippy" cargo clippy --workspace --all-targets -q -- -D warnings
timed "cargo build" cargo build --workspace --bins -q
wait_bg
# The chart on a real kubelet node (e2e/tests/vm_kube_node.rs) is opt-in: its cold set-up (three
# more Kubernetes binaries, the node image) and its boot do not fit CI's budget on two cores.
if [ "${GPUPLANE_E2E_REAL_NODE:-}" = 1 ]; then
  timed "e2e/vm/build-kube-image.sh (GPUPLANE_E2E_REAL_NODE=1)" setup e2e/vm/build-kube-image.sh
fi
echo "== set-up and build done in $(( $(date +%s) - t_all ))s"
echo "== cargo test (each target on its own: one failure never hides the rest; times at the end)"
e2e/run-tests.sh
