#!/bin/bash
# Readiness and stall detection in the qemu VM: the agent (`gpuplane run --manifests`, release
# build, as the .deb runs it) against the SGLang stand-in as a real systemd unit. Prints each
# round and the medians and spreads of: "fired up" (from then on /health_generate answers 200)
# -> Ready=True published; last startup-phase line -> StartupStalled published. Not part of
# CI (figures, not assertions); docs/BENCHMARKS.md.
#
#   e2e/bench/readiness.sh [ROUNDS] [POLL-SECONDS]   (default 5 and 5, the agent's default
#                                                     poll interval; needs e2e/test-all.sh's VM set-up)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-5}
POLL=${2:-5}
CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
export GPUPLANE_E2E_CACHE=$CACHE
cargo build --release -q -p gpuplane
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
printf 'ROUNDS=%s\nPOLL=%s\n' "$ROUNDS" "$POLL" >"$W/bench.env"
# AGENT_LOG=gpuplane=debug: the agent logs at that level and each ready round prints its timeline
[ -n "${AGENT_LOG:-}" ] && echo "AGENT_LOG=$AGENT_LOG" >>"$W/bench.env"
cp target/release/gpuplane "$W/gpuplane"
tar cf "$W/standin.tar" -C e2e standin
VM_TIMEOUT=${VM_TIMEOUT:-1500} e2e/vm/run.sh e2e/vm/scenarios/bench-readiness.sh "$W/gpuplane" \
  e2e/vm/scenario-lib.sh "$W/standin.tar" "$W/bench.env" | tee "$W/out.txt"
python3 - "$W/out.txt" <<'PY'
import statistics, sys
ready, stall, after = [], [], None
for line in open(sys.argv[1]):
    w = line.split()
    if w[:1] == ["READY"] and w[2] != "none":
        ready.append(int(w[2]))
    if w[:1] == ["STALL"] and w[2] != "none":
        stall.append(int(w[2])); after = int(w[3])
def show(name, v):
    if not v:
        return f"{name:44} no figure"
    return f"{name:44} median {statistics.median(v):7.0f} ms  min {min(v):6d}  max {max(v):6d}  (n={len(v)})"
print()
print(show("fired up -> Ready=True", ready))
print(show("last phase line -> StartupStalled", stall))
if stall:
    print(f"{'  of which beyond stallAfterSeconds':44} median {statistics.median(stall) - after * 1000:7.0f} ms  max {max(stall) - after * 1000:6d}")
PY
