#!/usr/bin/env bash
# The agent's own figures (benches/figures.rs), this checkout against an earlier commit, side by
# side in one run on one machine: both bench binaries are built (release; the base in a target
# directory of its own, ~7 min the first time), then run alternately RUNS times each, and each
# figure's median of the runs' medians is printed with the ratio now / base.
#
#   controller/benches/ab.sh BASE [RUNS]        # e.g. controller/benches/ab.sh origin/main~3 3
#
# Environment: GPUPLANE_BENCH_SCALE (iterations ×N, default 1), GPUPLANE_BENCH_ONLY (figures whose
# name contains it; the base ignores it if it predates the filter, and its extra rows are
# dropped). The base is checked out as a detached worktree under target/bench-ab/ and removed
# at the end. Figures only: nothing here asserts a time.
set -euo pipefail

base=${1:?usage: ab.sh BASE [RUNS]}
runs=${2:-3}
root=$(git rev-parse --show-toplevel)
work="$root/target/bench-ab"
tree="$work/base"
mkdir -p "$work"
rev=$(git -C "$root" rev-parse --short "$base")
now=$(git -C "$root" rev-parse --short HEAD)
dirty=$(git -C "$root" status --porcelain --untracked-files=no | head -1)
[ -n "$dirty" ] && now="$now+changes"

cleanup() { git -C "$root" worktree remove --force "$tree" >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup
git -C "$root" worktree add --detach "$tree" "$rev" >/dev/null

# Builds a checkout's bench in target directory $3 and copies the executable to
# $work/figures-$2. The base has a target directory of its own (kept under target/bench-ab/ for
# the next comparison): in a shared one cargo takes the one checkout's build for the other's,
# the member's name and the dependency files being the same.
build() {
    local exe
    exe=$(cd "$1" && CARGO_TARGET_DIR="$3" cargo bench -q -p gpuplane --bench figures \
        --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*figures[^"]*\)".*/\1/p' | tail -1)
    cp "$exe" "$work/figures-$2"
    echo "$work/figures-$2"
}
echo "building $rev (base) and $now (now) ..." >&2
bin_base=$(build "$tree" base "$work/target")
bin_now=$(build "$root" now "$root/target")
cmp -s "$bin_base" "$bin_now" && { echo "ab.sh: base and now built the same executable" >&2; exit 1; }
[ -x "$bin_base" ] && [ -x "$bin_now" ] || { echo "ab.sh: a bench did not build" >&2; exit 1; }

# Runs alternate (base, now, base, now, ...) so that a change in the machine's load falls on both.
for i in $(seq 1 "$runs"); do
    for side in base now; do
        bin=$bin_base; dir=$tree/controller
        [ "$side" = now ] && { bin=$bin_now; dir=$root/controller; }
        echo "run $i: $side" >&2
        (cd "$dir" && "$bin" --bench) | grep '^| ' | grep -v '^| figure\|^|---' |
            sed "s/^/$side|/" >>"$work/rows.$$"
    done
done

awk -F'|' -v rev="$rev" -v now="$now" -v runs="$runs" -v only="${GPUPLANE_BENCH_ONLY:-}" '
function us(t) { split(t, a, " "); return a[2] == "ms" ? a[1] * 1000 : a[1] + 0 }
function med(list,   n, v, i, j, t) {
    n = split(list, v, ",")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function show(x) { return x >= 1000 ? sprintf("%.2f ms", x / 1000) : sprintf("%.1f µs", x) }
{
    side = $1; name = $3; gsub(/^ +| +$/, "", name)
    if (only != "" && index(name, only) == 0) next
    if (!(name in seen)) { seen[name] = 1; order[++n] = name }
    m[side, name] = m[side, name] (m[side, name] == "" ? "" : ",") us($5)
    note[side, name] = $8
}
END {
    printf "| figure (median of %d runs'"'"' medians) | %s (base) | %s (now) | now / base |\n", runs, rev, now
    print "|---|---|---|---|"
    for (i = 1; i <= n; i++) {
        k = order[i]
        if (m["base", k] == "" || m["now", k] == "") { printf "| %s | %s | %s | — |\n", k, m["base", k] == "" ? "—" : show(med(m["base", k])), m["now", k] == "" ? "—" : show(med(m["now", k])); continue }
        b = med(m["base", k]); w = med(m["now", k])
        printf "| %s | %s | %s | %.2f× |\n", k, show(b), show(w), w / b
    }
}' "$work/rows.$$"
rm -f "$work/rows.$$"
