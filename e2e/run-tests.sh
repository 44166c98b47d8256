#!/usr/bin/env bash
# Runs every test target of the workspace one by one, so that one failure never hides the rest
# (`cargo test` stops at the first failing test binary), and prints each target's time and
# result at the end. Exit 0 only when every target passed. Called by e2e/test-all.sh; usable
# alone (after the set-up) as `e2e/run-tests.sh [FILTER]`, FILTER a regex over "NAME KIND"
# (e.g. `vm_`, `^kube_agent test$`, ` lib$` for the unit tests).
#
# Environment: TEST_THREADS (default 2) is passed to each test binary as --test-threads.
set -uo pipefail
cd "$(dirname "$0")/.."
FILTER=${1:-}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# The targets cargo test runs: "manifest kind name" per line (lib, bin, test), from cargo's own
# build messages.
cargo test --workspace --no-run --message-format=json 2>"$T/build.err" | python3 -c '
import json, sys
found = set()
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test"):
        continue
    kind = m["target"]["kind"][0]
    if kind in ("lib", "bin", "test"):
        found.add((m["manifest_path"], kind, m["target"]["name"]))
# The crates bottom-up (crds, controller, e2e), in each the unit tests first, then the
# integration tests by name (the real-component ones, e2e/, last).
order = {"crds": 0, "controller": 1, "e2e": 2}
kinds = {"lib": 0, "bin": 1, "test": 2}
key = lambda t: (order.get(t[0].split("/")[-2], 9), kinds[t[1]], t[2])
for t in sorted(found, key=key):
    print(*t)
' >"$T/targets" || { cat "$T/build.err" >&2; exit 1; }
[ -s "$T/targets" ] || { echo "run-tests: no test targets found" >&2; cat "$T/build.err" >&2; exit 1; }
threads=${TEST_THREADS:-2}
total0=$(date +%s)
: >"$T/summary"
failed=0
# Every run selects with --workspace, as the build above did: selecting by package (-p,
# --manifest-path) unifies features differently and rebuilds crates (minutes on two cores).
# The unit tests of all crates run as one step, the binaries' as another, then each test target.
{ echo "- lib (unit tests of every crate)"; echo "- bin (the binaries' own tests)"
  awk '$2 == "test" {print $1, $2, $3}' "$T/targets"; } >"$T/steps"
while read -r manifest kind name; do
  [ -z "$FILTER" ] || [[ "$name $kind" =~ $FILTER ]] || continue
  case $kind in
    lib) sel=(--lib) ; name="(unit tests)" ;;
    bin) sel=(--bins) ; name="(binaries)" ;;
    test) sel=(--test "$name") ;;
  esac
  echo "== test $name"
  t0=$(date +%s)
  cargo test --workspace "${sel[@]}" -- --test-threads="$threads" 2>&1 | tee "$T/out"
  rc=${PIPESTATUS[0]}
  secs=$(( $(date +%s) - t0 ))
  n=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$T/out" | awk '{p+=$4; f+=$6} END {printf "%d passed, %d failed", p, f}')
  if [ "$rc" = 0 ]; then r=ok; else r=FAILED; failed=$((failed + 1)); fi
  printf '%-8s %5ss  %-32s %s\n' "$r" "$secs" "$name" "$n" >>"$T/summary"
done <"$T/steps"
if [ -z "$FILTER" ]; then
  echo "== doc tests"
  t0=$(date +%s)
  if cargo test -q --workspace --doc 2>&1 | tee "$T/out"; then r=ok; else r=FAILED; failed=$((failed + 1)); fi
  printf '%-8s %5ss  %-32s\n' "$r" "$(( $(date +%s) - t0 ))" "(doc tests)" >>"$T/summary"
fi
echo
echo "== test summary: $(grep -c . "$T/summary") targets, $failed failed, $(( $(date +%s) - total0 )) s"
cat "$T/summary"
[ "$failed" = 0 ]
