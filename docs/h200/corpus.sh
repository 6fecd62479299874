#!/usr/bin/env bash
# The trace corpus (issue 9 item 1) and end-of-trace compaction (issue 10 item 5) on
# the H200.
#
# From the repository root, with a release bench binary at ./bin/bench (built here:
# `cargo build --release -p bench`, carried as BENCHMARKS.md "Running it on the H200
# again" says, with its libraries):
#
#   OUT=/some/dir bash docs/h200/corpus.sh
#
# Writes into $OUT:
#   corpus-small/   the corpus at small scale (32 seeded configurations, requirements read
#                   from the H200's driver, plus the five standard traces), all three
#                   allocators, 3 reps: allocators.json (rows), allocators.md (tables),
#                   log.txt (the configurations, the summary: geometric mean and worst
#                   case per metric and allocator, peer/ours ratios, the Pareto check)
#   corpus-full/    the same sample at full scale (60,000 operations per trace, budgets
#                   a share of the whole 140 GiB heap), ours and VMA only: gpu-allocator
#                   is quadratic at full scale (see BENCHMARKS.md)
#   defrag/         --defrag on the standard traces at full scale, ours alone: the rows
#                   gain live_at_end_bytes, committed_before_defrag_bytes,
#                   committed_after_defrag_bytes, defrag_bytes_moved, defrag_ms; the log
#                   ends with the table "Ours compacted at the end of each trace" whose
#                   `met` column checks committed after <= max(1.1 x live, live + 64 MiB)
#   defrag-corpus/  --defrag over the small corpus, ours alone
# The seed is printed first in each log; CORPUS_SEED=N checks another sample.
set -euo pipefail
OUT=${OUT:?set OUT to the output directory}
BIN=${BIN:-./bin/bench}
SEED=${CORPUS_SEED:-825173086512}
REPS=${REPS:-3}
mkdir -p "$OUT"

run() {
    local name=$1
    shift
    mkdir -p "$OUT/$name"
    echo "== $name: $BIN $*"
    local status=0
    "$BIN" --no-range --corpus-seed "$SEED" --out "$OUT/$name/allocators.json" "$@" \
        >"$OUT/$name/log.txt" 2>&1 || status=$?
    if [[ $status -ne 0 ]]; then
        echo "== $name FAILED (exit $status); see $OUT/$name/log.txt"
        tail -n 5 "$OUT/$name/log.txt"
    fi
}

run corpus-small --corpus --reps "$REPS"
run defrag --traces renderer-mix,streaming-churn,frame-transient,fragmentation \
    --scale full --defrag --allocators ours --reps "$REPS"
run defrag-corpus --corpus --defrag --allocators ours --reps 1
run corpus-full --corpus --scale full --allocators ours,vma --reps 1

for name in corpus-small corpus-full; do
    echo
    echo "== $name"
    sed -n '/^### Per allocator/,/^### Does ours/p' "$OUT/$name/log.txt" | head -n -1 || true
    grep -E '^vs ' "$OUT/$name/log.txt" || true
done
for name in defrag defrag-corpus; do
    echo
    echo "== $name"
    sed -n '/^## Ours compacted/,/^wrote/p' "$OUT/$name/log.txt" || true
done
