#!/usr/bin/env bash
# Installs everything the tests need on a fresh Debian bookworm machine (idempotent, cached) and
# runs every test. This is the README's second command and what .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
export GPUPLANE_E2E_CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
for s in e2e/setup/*.sh; do
  echo "== $s"
  $SUDO env GPUPLANE_E2E_CACHE="$GPUPLANE_E2E_CACHE" bash "$s"
done
[ -x e2e/vm/build-image.sh ] && { echo "== e2e/vm/build-image.sh"; $SUDO env GPUPLANE_E2E_CACHE="$GPUPLANE_E2E_CACHE" bash e2e/vm/build-image.sh; }
# The chart on a real kubelet node (e2e/tests/vm_kube_node.rs) is opt-in: its cold set-up (three
# more Kubernetes binaries, the node image) and its boot do not fit CI's budget on two cores.
if [ "${GPUPLANE_E2E_REAL_NODE:-}" = 1 ]; then
  echo "== e2e/vm/build-kube-image.sh (GPUPLANE_E2E_REAL_NODE=1)"
  $SUDO env GPUPLANE_E2E_CACHE="$GPUPLANE_E2E_CACHE" bash e2e/vm/build-kube-image.sh
fi
echo "== cargo fmt --check, clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
echo "== cargo test (each target on its own: one failure never hides the rest; times at the end)"
cargo build --workspace --bins -q
exec e2e/run-tests.sh
