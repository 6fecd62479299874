#!/usr/bin/env bash
# Own time (issue 9 item 4) on the H200: allocate + free own time of the three allocators
# over the corpus, and per trace the faster peer's (alloc + free own median) / ours'.
#
# From the repository root, with a release bench binary at ./bin/bench (built here:
# `cargo build --release -p bench`, carried as BENCHMARKS.md "Running it on the H200
# again" says, with its libraries):
#
#   OUT=/some/dir bash docs/h200/owntime.sh
#
# Writes $OUT/owntime/allocators.json (rows: alloc_own_ns_median, free_own_ns_median per
# trace and allocator), allocators.md and log.txt, then prints (python3, if present) one
# line per trace, worst ratio first: "ratio trace ours a+f | vma a+f | gpu-allocator a+f",
# and a last line with the median ratio over traces and how many traces reach 2x.
# BIN=path picks another binary (run the old one the same way, back to back, to compare).
set -euo pipefail
OUT=${OUT:?set OUT to the output directory}
BIN=${BIN:-./bin/bench}
SEED=${CORPUS_SEED:-825173086512}
REPS=${REPS:-3}
mkdir -p "$OUT/owntime"
"$BIN" --no-range --corpus --corpus-seed "$SEED" --reps "$REPS" \
    --out "$OUT/owntime/allocators.json" 2>&1 | tee "$OUT/owntime/log.txt"
if command -v python3 > /dev/null; then
    python3 - "$OUT/owntime/allocators.json" <<'PY'
import json, statistics, sys
by = {}
for r in json.load(open(sys.argv[1])):
    by.setdefault(r["trace"], {})[r["allocator"]] = r
pair = lambda r: r["alloc_own_ns_median"] + r["free_own_ns_median"]
rows = []
for trace, d in by.items():
    peers = [pair(r) for a, r in d.items() if a != "ours"]
    if "ours" in d and peers:
        rows.append((min(peers) / pair(d["ours"]), trace, d))
rows.sort()
for ratio, trace, d in rows:
    cells = " | ".join(
        f"{a} {d[a]['alloc_own_ns_median']:.0f}+{d[a]['free_own_ns_median']:.0f}"
        for a in ("ours", "vma", "gpu-allocator") if a in d)
    print(f"{ratio:5.2f} {trace:40s} {cells}")
ratios = [r for r, _, _ in rows]
print(f"median ratio {statistics.median(ratios):.2f} (min {ratios[0]:.2f}, max {ratios[-1]:.2f}); "
      f"{sum(r >= 2 for r in ratios)} of {len(ratios)} traces at 2x or more")
PY
fi
