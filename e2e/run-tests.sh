#!/usr/bin/env bash
# Runs every test target of the workspace one by one, so that one failure never hides the rest
# (`cargo test` stops at the first failing test binary), and prints each target's time and
# result at the end. Exit 0 only when every target passed. Called by e2e/test-all.sh; usable
# alone (after the set-up) as `e2e/run-tests.sh [FILTER]`, FILTER a regex over "NAME KIND"
# (e.g. `vm_`, `^kube_agent test$`, ` lib$` for the unit tests).
#
# Each target's output is printed whole when it ends ("== test NAME (ok, 12s, ended +340 s)").
#
# Order: the fast signal first — the unit tests, the property tests (*_props) and the CLI's
# (cli), one after another before anything boots; a failure there is printed at once, in a
# "FAST SIGNAL" line (the run goes on: one failure never hides the rest). Then the lanes side by
# side: the other targets in MAIN_LANES lanes, the VM targets (vm_*, qemu under TCG) in
# VM_LANES more; each kind of lane takes its next target from one queue, the longest first
# (MAIN_ORDER, VM_ORDER), so that no lane idles while another holds a long target. The VMs themselves are bounded by e2e/vm/run.sh
# (VM_SLOTS): a target's own tests run side by side too.
#
# Environment: TEST_THREADS (default 2) is passed to each test binary as --test-threads;
# TEST_LANES (default 2) runs the lanes side by side, 1 runs every target one after another;
# VM_LANES (default 2) is the number of VM lanes, MAIN_LANES (default 2) of the other lanes.
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
lanes=${TEST_LANES:-2}
total0=$(date +%s)
# cpu_busy: the machine's busy CPU seconds so far (user, nice, system, irq, softirq), every process
cpu_busy() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{printf "%d", ($2+$3+$4+$7+$8)/hz}' /proc/stat; }
cpu0=$(cpu_busy)
# Free disk where the VMs copy their disks (~0.7 GB each, a failed one's kept): a full disk fails
# every VM and API-server target at once with "No space left on device", so say it first.
free_gb=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR==2 {print int($4 / 1048576)}')
echo "== ${free_gb} GB free in ${TMPDIR:-/tmp}"
[ "$free_gb" -ge 8 ] || echo "== WARNING: less than 8 GB free in ${TMPDIR:-/tmp}: the VM targets need about that; clear old /tmp/gpuplane-vm.* work dirs" >&2
# Every run selects with --workspace, as the build above did: selecting by package (-p,
# --manifest-path) unifies features differently and rebuilds crates (minutes on two cores).
# The unit tests of all crates run as one step, the binaries' as another, then each test target.
{ echo "- lib (unit tests of every crate)"; echo "- bin (the binaries' own tests)"
  awk '$2 == "test" {print $1, $2, $3}' "$T/targets"; } >"$T/steps"
mkdir -p "$T/res"
# step I KIND NAME: runs one target; its output is printed whole when it ends (under a lock, so
# two lanes never interleave), its result line goes to $T/res/I.
step() {
  local i=$1 kind=$2 name=$3 sel t0 rc secs n r
  case $kind in
    lib) sel=(--lib) ; name="(unit tests)" ;;
    bin) sel=(--bins) ; name="(binaries)" ;;
    test) sel=(--test "$name") ;;
    doc) sel=(--doc) ; name="(doc tests)" ;;
  esac
  t0=$(date +%s)
  # "+N s": seconds since the test phase began, for a timeline of the lanes.
  { flock 9; echo "-- started $name (+$(( t0 - total0 )) s)"; } 9>"$T/print.lock"
  if [ "$kind" = doc ]; then
    cargo test -q --workspace "${sel[@]}" >"$T/out.$i" 2>&1
  else
    cargo test --workspace "${sel[@]}" -- --test-threads="$threads" >"$T/out.$i" 2>&1
  fi
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  n=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$T/out.$i" | awk '{p+=$4; f+=$6} END {printf "%d passed, %d failed", p, f}')
  if [ "$rc" = 0 ]; then r=ok; else r=FAILED; fi
  printf '%-8s %5ss  %-32s %s\n' "$r" "$secs" "$name" "$n" >"$T/res/$i"
  { flock 9; echo "== test $name ($r, ${secs}s, ended +$(( t0 + secs - total0 )) s)"; cat "$T/out.$i"; } 9>"$T/print.lock"
}
# lane FILE: runs the steps listed in FILE ("I KIND NAME" lines) one after another.
lane() { while read -r i kind name; do step "$i" "$kind" "$name"; done <"$1"; }
# queue_lane FILE: runs FILE's next step until FILE is empty (a queue shared by every lane that
# pops from it, under a lock).
# A pop that cannot rewrite FILE (a full disk: `sed -i` writes a new file) stops the lane, where
# it would run the same step again and again until the job's time ran out (seen in CI); its
# steps then count as failed with no result.
queue_lane() { local line
  while :; do
    if ! line=$({ flock 9; l=$(head -1 "$1") && { [ -z "$l" ] || sed -i 1d "$1"; } && printf '%s' "$l"; } 9>"$1.lock"); then
      echo "== run-tests: cannot take the next target from $1 (is the disk full? df: $(df -Pk "$T" | awk 'NR==2 {print int($4 / 1024)}') MB free); this lane stops" >&2
      return 1
    fi
    [ -n "$line" ] || return 0
    # shellcheck disable=SC2086
    step $line
  done; }
# longest_first FILE ORDER...: FILE's lines reordered, the targets named in ORDER first in that
# order, the others after them in their own order.
longest_first() { local f=$1 n; shift
  for n in "$@"; do grep " $n\$" "$f" || true; done >"$f.sorted"
  grep -v -F -x -f "$f.sorted" "$f" >>"$f.sorted" || true
  mv "$f.sorted" "$f"; }
# The VM targets, longest first (by their times on two cores); one not listed goes last.
VM_ORDER="vm_lxc vm_crash vm_host vm_reboot vm_kernel_args vm_renumber vm_deb vm_serving vm_smoke"
# The other lanes' long targets, longest first. They mostly wait (on their servers, polls and
# timeouts: kube_faults keeps about a third of one core busy), so MAIN_LANES of them run side by
# side.
MAIN_ORDER="kube_faults kube_fleet kube_pool kube_agent kube_webhook kube_serving kube_conflicts kube_reboot image deb"
# is_fast NAME KIND: the fast signal's targets.
is_fast() { [ "$2" != test ] || [[ $1 == *_props || $1 == cli ]]; }
i=0
: >"$T/lane.fast"; : >"$T/lane.vm"; : >"$T/lane.main"
while read -r manifest kind name; do
  i=$((i + 1))
  [ -z "$FILTER" ] || [[ "$name $kind" =~ $FILTER ]] || continue
  # Lanes (TEST_LANES=2, the default): the VM targets (qemu under TCG) beside the rest. The
  # others mostly wait on real servers (a kube-apiserver test keeps about a fifth of two cores
  # busy), so the lanes fit beside each other; TEST_LANES=1 runs everything in one lane.
  if is_fast "$name" "$kind"; then echo "$i $kind $name" >>"$T/lane.fast"
  elif [ "$lanes" -ge 2 ] && [[ $name == vm_* ]]; then echo "$i $kind $name" >>"$T/lane.vm"
  else echo "$i $kind $name" >>"$T/lane.main"; fi
done <"$T/steps"
[ -n "$FILTER" ] || echo "$((i + 1)) doc doc" >>"$T/lane.main"
# Both queues, longest first.
# shellcheck disable=SC2086
longest_first "$T/lane.vm" $VM_ORDER
# shellcheck disable=SC2086
longest_first "$T/lane.main" $MAIN_ORDER
cat "$T/lane.fast" "$T/lane.vm" "$T/lane.main" >"$T/steps.all"
all=$(grep -c . "$T/steps.all")
vm_lanes=$([ -s "$T/lane.vm" ] && echo "${VM_LANES:-2}" || echo 0)
main_lanes=$([ "$lanes" -ge 2 ] && echo "${MAIN_LANES:-2}" || echo 1)
echo "== running $all test steps: $(grep -c . "$T/lane.fast") for the fast signal first, then the rest in $((main_lanes + vm_lanes)) lane(s)"
lane "$T/lane.fast"
fast_failed=$(cat "$T/res/"* 2>/dev/null | grep '^FAILED' || true)
if [ -n "$fast_failed" ]; then
  echo "== FAST SIGNAL: failed before anything booted (output above; the other targets run on):"
  echo "$fast_failed"
elif [ -s "$T/lane.fast" ]; then
  echo "== fast signal: $(grep -c . "$T/lane.fast") targets passed in $(( $(date +%s) - total0 )) s"
fi
lanes_up=()
for _ in $(seq 1 "$vm_lanes"); do queue_lane "$T/lane.vm" & lanes_up+=($!); done
for _ in $(seq 2 "$main_lanes"); do queue_lane "$T/lane.main" & lanes_up+=($!); done
queue_lane "$T/lane.main"
for p in "${lanes_up[@]}"; do wait "$p"; done
# The summary in the steps' order; a step that left no result line counts as failed.
: >"$T/summary"
while read -r i kind name; do
  if [ -s "$T/res/$i" ]; then cat "$T/res/$i"; else printf '%-8s %5ss  %-32s\n' FAILED "?" "$name (no result)"; fi
done < <(sort -n "$T/steps.all") >>"$T/summary"
failed=$(grep -c '^FAILED' "$T/summary")
echo
wall=$(( $(date +%s) - total0 ))
echo "== test summary: $(grep -c . "$T/summary") targets, $failed failed, $wall s (CPU busy $(( $(cpu_busy) - cpu0 )) s of the $(( wall * $(nproc) )) s $(nproc) cores give)"
cat "$T/summary"
[ "$failed" = 0 ]
