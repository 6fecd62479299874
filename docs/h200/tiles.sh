#!/usr/bin/env bash
# Streaming by tiles on the H200 (issue 7): quality with the per-cell look-ahead and
# the cut frames' own loads, and where the frame time goes.
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer
# (and, for the loader, the .gl/ packages the device README names):
#
#   OUT=/some/dir bash docs/h200/tiles.sh            # about 6 min (plus the reference)
#
# Budgets: SMALL (256 MiB), LARGE (1 GiB), HUGE (8 GiB: every wanted tile resident).
#
# Same settings and reference as docs/h200/streaming.sh (4K, 8K BC7/BC5 maps, the
# 240-frame path with its two cuts; the all-resident reference's PNG frames in
# $WORK, default /tmp/vkalloc-streaming, written here first if missing, ~1 min).
#
# 1. Quality, compared frame by frame with the reference: tiles at 256 MiB and
#    1 GiB, levels at 256 MiB. Printed: the summary line, then per run PSNR
#    min / mean, frames below 40 dB, and each cut frame's PSNR (the cut frames
#    were the worst by tiles before the 2026-12-01 look-ahead: 13.7 dB at 256 MiB).
# 2. Frame time without --compare (no readback), GPU clocks logged every 100 ms
#    with nvidia-smi beside each run:
#    - levels and tiles at 256 MiB;
#    - tiles with VKALLOC_DEMO_TILES_FREEZE_AFTER=60 (no residency change after
#      frame 60: if frames 70-240 are then as fast as by levels, the cost is in
#      changing residency, the binds and waits; if not, in the pages resident);
#    - tiles with VKALLOC_DEMO_TILES_FREEZE_AFTER=0 (the mip tails alone:
#      sparse images that are barely bound);
#    - tiles at 8 GiB, and frozen after 60 (every wanted tile resident).
#    Printed per run: GPU median / p99 over frames 10-60 and 70-240, per-pass
#    medians over 70-240, and the SM clock's median and minimum during the run.
set -uo pipefail

BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
WORK=${WORK:-/tmp/vkalloc-streaming}
# A local dry run (lavapipe): COMMON_ARGS="--size 320x180 --texture-size 1024 --frames 60
# --no-validation --anisotropy 0" SMALL=32MiB LARGE=64MiB HUGE=256MiB WORK=/tmp/tiles-dry.
read -r -a COMMON <<<"${COMMON_ARGS:---size 3840x2160 --texture-size 8192 --textures bc --frames 240 --no-validation}"
SMALL=${SMALL:-256MiB}
LARGE=${LARGE:-1GiB}
HUGE=${HUGE:-8GiB}
mkdir -p "$OUT/r" "$WORK"

if [[ ! -f "$WORK/reference/report.json" ]]; then
    echo "== reference (every mip resident) into $WORK/reference"
    mkdir -p "$WORK/reference"
    "$BIN" "${COMMON[@]}" --out "$WORK/reference" --streaming off --texture-budget 16GiB \
        --png-every 1 >"$WORK/reference/log.txt" 2>&1 || tail -5 "$WORK/reference/log.txt"
fi

# run NAME [VAR=VALUE...] -- ARGS...: one run, clocks logged beside it.
run() {
    local name=$1
    shift
    local envs=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do
        envs+=("$1")
        shift
    done
    shift
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw \
        --format=csv,noheader -lms 100 >"$OUT/r/$name.clk" 2>&1 &
    local smi=$!
    mkdir -p "/tmp/tiles-runs/$name"
    env "${envs[@]}" "$BIN" "${COMMON[@]}" --png-every 0 --out "/tmp/tiles-runs/$name" "$@" \
        >"$OUT/r/$name.log" 2>&1
    echo "== $name (exit $?)"
    tail -n 1 "$OUT/r/$name.log"
    kill "$smi" 2>/dev/null
    cp "/tmp/tiles-runs/$name/report.json" "$OUT/r/$name.json" 2>/dev/null
}

REF=(--compare "$WORK/reference")
run q_tiles_small -- --residency tiles --texture-budget "$SMALL" "${REF[@]}"
run q_tiles_large -- --residency tiles --texture-budget "$LARGE" "${REF[@]}"
run q_levels_small -- --residency levels --texture-budget "$SMALL" "${REF[@]}"

run t_levels_small -- --residency levels --texture-budget "$SMALL"
run t_tiles_small -- --residency tiles --texture-budget "$SMALL"
run t_tiles_small_freeze60 VKALLOC_DEMO_TILES_FREEZE_AFTER=60 -- --residency tiles --texture-budget "$SMALL"
run t_tiles_small_tails VKALLOC_DEMO_TILES_FREEZE_AFTER=0 -- --residency tiles --texture-budget "$SMALL"
run t_tiles_huge -- --residency tiles --texture-budget "$HUGE"
run t_tiles_huge_freeze60 VKALLOC_DEMO_TILES_FREEZE_AFTER=60 -- --residency tiles --texture-budget "$HUGE"

command -v python3 >/dev/null || exit 0
python3 - "$OUT/r" <<'PY'
import glob, json, os, statistics as st, sys
d = sys.argv[1]
for j in sorted(glob.glob(d + "/*.json")):
    n = os.path.basename(j)[:-5]
    fr = json.load(open(j))["frames"]
    if n.startswith("q_"):
        p = [f["psnr_db"] for f in fr if "psnr_db" in f]
        cuts = [(f["frame"], round(f["psnr_db"], 1)) for f in fr if f.get("camera_cut") and "psnr_db" in f]
        if p:
            print(f"{n}: PSNR min {min(p):.1f} mean {st.mean(p):.1f}, {sum(x < 40 for x in p)} frames below 40 dB; cut frames {cuts}")
        continue
    def pr(a, b):
        g = sorted(f["gpu_total_ms"] for f in fr[a:b])
        return f"{st.median(g):.2f}/{g[int(0.99 * (len(g) - 1))]:.2f}" if g else "-"
    passes = {}
    for f in fr[70:]:
        for k, v in f["gpu_ms"].items():
            passes.setdefault(k, []).append(v)
    ps = " ".join(f"{k}={st.median(v):.2f}" for k, v in passes.items())
    sm = []
    for line in open(f"{d}/{n}.clk"):
        c = line.split(", ")
        if len(c) > 1 and c[1].split()[0].isdigit():
            sm.append(int(c[1].split()[0]))
    clk = f"SM MHz median {st.median(sm)} min {min(sm)}" if sm else "no clocks"
    print(f"{n}: GPU median/p99 frames 10-60 {pr(10, 60)}, 70-240 {pr(70, 240)} | {ps} | {clk}")
PY
