#!/usr/bin/env bash
# Issue 9, wall time on the H200: the corpus with the bytes each allocator passes to
# vkAllocateMemory (`device_allocated_bytes`), for two seeds.
#
# From the repository root, with a release bench binary at ./bin/bench (built here:
# `cargo build --release -p bench`, carried as BENCHMARKS.md "Running it on the H200
# again" says, with its libraries):
#
#   OUT=/some/dir bash docs/h200/wall.sh
#
# Writes $OUT/seed-<N>/allocators.json (rows; `device_allocated_bytes` beside
# `device_allocations`, `driver_ms`, `wall_ms`, `peak_committed_bytes`) and log.txt (the
# corpus summary: geometric mean / worst per metric and allocator, "allocated MiB" among
# them, and the peer/ours ratios). Prints the summaries, then, where python3 is
# installed, per trace: ours' wall over the best peer's, each allocator's calls,
# allocated MiB and driver ms, and a least-squares fit of driver ms on calls and
# allocated MiB over every row (what a call and a MiB cost on this driver).
set -euo pipefail
OUT=${OUT:?set OUT to the output directory}
BIN=${BIN:-./bin/bench}
REPS=${REPS:-2}
SEEDS=${SEEDS:-"825173086512 7"}
mkdir -p "$OUT"
for seed in $SEEDS; do
    dir="$OUT/seed-$seed"
    mkdir -p "$dir"
    echo "== seed $seed: $BIN --no-range --corpus --corpus-seed $seed --reps $REPS"
    "$BIN" --no-range --corpus --corpus-seed "$seed" --reps "$REPS" \
        --out "$dir/allocators.json" >"$dir/log.txt" 2>&1 || echo "== seed $seed FAILED; see $dir/log.txt"
    sed -n '/^### Per allocator/,/^### Does ours/p' "$dir/log.txt" | head -n -1 || true
done
command -v python3 >/dev/null || exit 0
for seed in $SEEDS; do
    python3 - "$OUT/seed-$seed/allocators.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
by = {}
for r in rows:
    by.setdefault(r["trace"], {})[r["allocator"]] = r
M = 2 ** 20
print(f"\n{sys.argv[1]}")
print("| trace | ours wall / best peer | calls ours / vma / g-a | allocated MiB ours / vma / g-a | driver ms ours / vma / g-a |")
print("| --- | ---: | ---: | ---: | ---: |")
for t, d in by.items():
    if not {"ours", "vma", "gpu-allocator"} <= d.keys():
        continue
    o, v, g = d["ours"], d["vma"], d["gpu-allocator"]
    best = min(v["wall_ms"], g["wall_ms"])
    print(f"| {t} | {o['wall_ms'] / best:.2f} | {o['device_allocations']:.0f} / {v['device_allocations']:.0f} / {g['device_allocations']:.0f} "
          f"| {o['device_allocated_bytes'] / M:.0f} / {v['device_allocated_bytes'] / M:.0f} / {g['device_allocated_bytes'] / M:.0f} "
          f"| {o['driver_ms']:.1f} / {v['driver_ms']:.1f} / {g['driver_ms']:.1f} |")
# driver_ms ~ a * calls + b * MiB, least squares over every row.
xs = [(r["device_allocations"], r["device_allocated_bytes"] / M, r["driver_ms"]) for r in rows]
s11 = sum(c * c for c, _, _ in xs); s12 = sum(c * m for c, m, _ in xs); s22 = sum(m * m for _, m, _ in xs)
t1 = sum(c * y for c, _, y in xs); t2 = sum(m * y for _, m, y in xs)
det = s11 * s22 - s12 * s12
if det:
    a = (t1 * s22 - t2 * s12) / det
    b = (s11 * t2 - s12 * t1) / det
    print(f"\ndriver ms ~= {a:.3f} ms per vkAllocateMemory call + {b:.4f} ms per allocated MiB (frees included)")
PY
done
