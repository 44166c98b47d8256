#!/bin/bash
# Binding side by side in the qemu VM (real kernel, vfio-pci, bochs-display stand-in GPUs): two
# GPUs to vfio-pci and back, ROUNDS times, alternating the bare sysfs writes (the limit), Debian's
# driverctl, gpuplane (release build, one `converge` process each way) and the gpuplane agent
# (`gpuplane run --manifests`, running: its manifest replaced each way). Prints each run and the
# medians, spreads and ratios. Not part of CI (figures, not assertions); docs/BENCHMARKS.md.
#
#   e2e/bench/binding.sh [ROUNDS]        (default 7; needs e2e/test-all.sh's VM set-up)
# OTHER_BIN=FILE: another gpuplane build timed the same way in the same boot, alternated with the
# rest ("other": e.g. the previous main's release binary; "agent-other": its running agent, the
# two agents paused in turn), and the per-round ratios printed.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-7}
CACHE=${GPUPLANE_E2E_CACHE:-/var/cache/gpuplane-e2e}
export GPUPLANE_E2E_CACHE=$CACHE
mkdir -p "$CACHE/debs"
if ! ls "$CACHE"/debs/driverctl_*.deb >/dev/null 2>&1; then
  (cd "$CACHE/debs" && apt-get download driverctl)
fi
cargo build --release -q -p gpuplane
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
echo "ROUNDS=$ROUNDS" >"$W/bench.env"
# AGENT_LOG=gpuplane=debug: print the agent's log of the last move (its timeline)
[ -n "${AGENT_LOG:-}" ] && echo "AGENT_LOG=$AGENT_LOG" >>"$W/bench.env"
cp target/release/gpuplane "$W/gpuplane"
OTHER_FILE=()
if [ -n "${OTHER_BIN:-}" ]; then
  cp "$OTHER_BIN" "$W/gpuplane-other"; OTHER_FILE=("$W/gpuplane-other")
  echo "OTHER=/usr/local/bin/gpuplane-other" >>"$W/bench.env"
fi
VM_TIMEOUT=${VM_TIMEOUT:-1500} e2e/vm/run.sh e2e/vm/scenarios/bench-binding.sh "$W/gpuplane" \
  e2e/vm/scenario-lib.sh "$CACHE"/debs/driverctl_*.deb "$W/bench.env" "${OTHER_FILE[@]}" | tee "$W/out.txt"
python3 - "$W/out.txt" <<'PY'
import statistics, sys
t, parts, rounds = {}, {}, {}
for line in open(sys.argv[1]):
    w = line.split()
    if w[:1] == ["TIME"]:
        t.setdefault(w[1], []).append(int(w[3]))
        rounds.setdefault(w[1], {})[w[2]] = int(w[3])
    if w[:1] == ["PART"]:
        parts.setdefault(w[1], []).append(int(w[3]))
def show(name, v):
    return f"{name:24} median {statistics.median(v):7.0f} ms  min {min(v):6d}  max {max(v):6d}  (n={len(v)})"
print("\n== there and back, two GPUs")
for k, v in t.items():
    print(show(k, v))
if "bare" in t:
    b = statistics.median(t["bare"])
    for k in ("driverctl", "gpuplane", "agent", "other", "agent-other"):
        if k in t:
            print(f"{k} / bare: {statistics.median(t[k]) / b:.2f}x")
# Per round (the ways alternate within a round): the median of each round's ratio.
for a, b in (("gpuplane", "driverctl"), ("other", "driverctl"), ("gpuplane", "other"), ("agent", "bare"),
             ("agent-other", "bare"), ("agent", "agent-other")):
    if a in rounds and b in rounds:
        r = [rounds[a][k] / rounds[b][k] for k in rounds[a] if k in rounds[b] and rounds[b][k] > 0]
        print(f"{a} / {b}, per round: median {statistics.median(r):.2f}x  ({', '.join(f'{x:.2f}' for x in r)})")
print("\n== gpuplane's parts (one process each)")
for k, v in parts.items():
    print(show(k, v))
PY
