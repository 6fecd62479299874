#!/usr/bin/env bash
# Texture streaming figures on the H200 (issue 7).
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer:
#
#   OUT=/some/dir docs/h200/streaming.sh            # everything (about 20-30 min)
#   OUT=/some/dir docs/h200/streaming.sh 256MiB     # only the runs whose name contains 256MiB
#
# Every run renders the gallery's 240-frame camera path (with its two camera cuts)
# at 4K with 8K BC7/BC5 materials and writes $OUT/<run>/report.json and a log.
# First a reference run with every mip resident (streaming off, a budget above the
# whole set) writes its PNG frames, about 5 GB, into $WORK (default
# /tmp/vkalloc-streaming, not $OUT; kept for later calls); every other run compares
# each of its frames with them (--compare: per-frame `psnr_db`,
# `streaming.min_psnr_db`). Then each budget (256 MiB, 512 MiB, 1 GiB, unlimited)
# with streaming on and off, and --materials 64 at 1 GiB (against its own
# reference). A last pair at 256 MiB without --compare (no readback) gives the
# frame times to compare on and off.
#
# Look-ahead (--lookahead, default 16 frames): the `lookahead0_*` runs repeat the
# streaming-on runs at 256 MiB and 1 GiB with --lookahead 0 (off), and the
# `lookahead32_*` runs with 32 frames, against the same reference; compare their
# summary lines' "PSNR min … mean …, N frames below 40 dB" and refill times with
# `budget_*_on`'s (`OUT=… docs/h200/streaming.sh lookahead` runs only those).
#
# The summary at the end is one line per run: the report's summary line.
set -euo pipefail

BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
WORK=${WORK:-/tmp/vkalloc-streaming}
FILTER=${1:-}
COMMON=(--size 3840x2160 --texture-size 8192 --textures bc --frames 240)
mkdir -p "$OUT" "$WORK"

run() {
    local name=$1
    shift
    if [[ -n "$FILTER" && "$name" != *"$FILTER"* && "$name" != reference* ]]; then
        return 0
    fi
    # References write every frame as a PNG: into $WORK; the report is copied to $OUT.
    local dir="$OUT/$name"
    if [[ "$name" == reference* ]]; then
        dir="$WORK/$name"
        if [[ -f "$dir/report.json" ]]; then
            echo "== $name: kept from an earlier run in $dir"
            return 0
        fi
    fi
    echo "== $name: $BIN ${COMMON[*]} $*"
    mkdir -p "$dir" "$OUT/$name"
    local status=0
    "$BIN" "${COMMON[@]}" --out "$dir" "$@" >"$OUT/$name/log.txt" 2>&1 || status=$?
    tail -n 3 "$OUT/$name/log.txt"
    if [[ "$dir" != "$OUT/$name" && -f "$dir/report.json" ]]; then
        cp "$dir/report.json" "$OUT/$name/report.json"
    fi
    if [[ $status -ne 0 ]]; then
        echo "== $name FAILED (exit $status); see $OUT/$name/log.txt"
    fi
}

# Every mip resident: 16 materials x 3 maps x ~85 MiB is about 4 GiB.
run reference --streaming off --texture-budget 16GiB --png-every 1

for budget in 256MiB 512MiB 1GiB 16GiB; do
    for mode in on off; do
        run "budget_${budget}_${mode}" --streaming "$mode" --texture-budget "$budget" \
            --png-every 0 --compare "$WORK/reference"
    done
done

# The look-ahead off and longer, at the budgets where frames fall below 40 dB.
for budget in 256MiB 1GiB; do
    for la in 0 32; do
        run "lookahead${la}_${budget}_on" --streaming on --lookahead "$la" --texture-budget "$budget" \
            --png-every 0 --compare "$WORK/reference"
    done
done

# 64 materials (~16 GiB of maps) under 1 GiB; the camera path visits every material.
if [[ -z "$FILTER" || "materials64" == *"$FILTER"* ]]; then
    run reference_materials64 --materials 64 --streaming off --texture-budget 24GiB --png-every 1
    run materials64_1GiB_on --materials 64 --streaming on --texture-budget 1GiB \
        --png-every 0 --compare "$WORK/reference_materials64"
    run materials64_1GiB_off --materials 64 --streaming off --texture-budget 1GiB \
        --png-every 0 --compare "$WORK/reference_materials64"
fi

# Frame times without any readback: streaming on against off at 256 MiB.
run timing_256MiB_on --streaming on --texture-budget 256MiB --png-every 0
run timing_256MiB_off --streaming off --texture-budget 256MiB --png-every 0

echo
echo "== summary"
for f in "$OUT"/*/report.json; do
    d=$(dirname "$f")
    printf '%s: %s\n' "$(basename "$d")" \
        "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"])' "$f" 2>/dev/null || echo '?')"
done
