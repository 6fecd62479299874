#!/usr/bin/env bash
# Streaming by tiles on the H200 (issue 7): quality against the all-resident render,
# and frame time with where the render thread's time goes.
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer
# (and, for the loader, the .gl/ packages the device README names):
#
#   OUT=/some/dir bash docs/h200/tiles.sh                 # 16 materials, about 6 min
#   OUT=/some/dir PHASE=64 bash docs/h200/tiles.sh        # 64 materials at 1 GiB, about 6 min
#   OUT=/some/dir PHASE=16,64 bash docs/h200/tiles.sh     # both
#   OUT=/some/dir PHASE=t64,q64 CAPS="r256" bash docs/h200/tiles.sh   # 64 materials: timing first, then quality
#   OUT=/some/dir PHASE=m64 CONFIGS="r256,tiles.max-ring=256 ..." bash docs/h200/tiles.sh
#   OUT=/some/dir PHASE=t16 REPEAT=2 CONFIGS16="future,tiles.late-spare=future none,tiles.late-spare=0" bash docs/h200/tiles.sh
#   OUT=/some/dir PHASE=m16 SMALL=512MiB OFF=1 CONFIGS16="all,tiles.late-spare=all ..." bash docs/h200/tiles.sh
#   OUT=/some/dir PHASE=budgets bash docs/h200/tiles.sh   # 512 MiB, unlimited; 256 MiB timing x REPEAT
#   OUT=/some/dir PHASE=spare bash docs/h200/tiles.sh     # 64 materials, spare loads capped
#   OUT=/some/dir PHASE=spare SPARE_CAPS="r256 r512" bash docs/h200/tiles.sh   # margin and ring capped
#   OUT=/some/dir PHASE=atlas ATLAS_BUDGETS="256MiB 1GiB" REPEAT=3 bash docs/h200/tiles.sh   # the page atlas
#   OUT=/some/dir PHASE=atlas64 REPEAT=2 bash docs/h200/tiles.sh   # the page atlas, 64 materials at 1 GiB
#   OUT=/some/dir PHASE=atlasall bash docs/h200/tiles.sh   # the atlas at 256 MiB .. 16 GiB: quality, on and off
#   OUT=/some/dir PHASE=m64 OFF=1 RESIDENCY=atlas CONFIGS="a4,tiles.ahead-share=4" bash docs/h200/tiles.sh
#   OUT=/some/dir PHASE=atlas64s REPEAT=2 bash docs/h200/tiles.sh  # issue 38: 64 and 16 materials at 256 MiB, about 9 min
#
# Budgets: SMALL (256 MiB), LARGE (1 GiB).
#
# Settings as docs/h200/streaming.sh (4K, 8K BC7/BC5 maps, the 240-frame path with
# its two cuts). The all-resident references' PNG frames go to $WORK (default
# /tmp/vkalloc-streaming), written here first if missing (16 materials ~1 min, 64
# materials ~2 min).
#
# Phase 16:
# 1. Quality, frame by frame against the reference: tiles at 256 MiB and 1 GiB.
# 2. Frame time without --compare (no readback), GPU clocks logged every 100 ms with
#    nvidia-smi beside each run: streaming off at 256 MiB (the issue's p99
#    reference), levels at 256 MiB, tiles at 256 MiB and 1 GiB, streaming off at 1 GiB.
# Phase 64: the reference with every mip resident, tiles at 1 GiB with --compare,
# and tiles at 1 GiB and streaming off at 1 GiB for the frame time.
#
# Printed per run: the summary line; for quality runs PSNR min / mean, frames below
# 40 dB and each cut frame's PSNR; for timing runs GPU median / p99 over the whole
# run and frames 70-240, per-pass medians, the SM clock's median and minimum, and
# the medians of the render thread's streamer time (stream_cpu_ms), sparse binds,
# bind call time, reads, copies' recording, and the wait for the last copies.
set -uo pipefail

BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
WORK=${WORK:-/tmp/vkalloc-streaming}
PHASE=${PHASE:-16}
# A local dry run (lavapipe): COMMON_ARGS="--size 320x180 --texture-size 1024 --frames 60
# --no-validation --anisotropy 0" SMALL=32MiB LARGE=64MiB WORK=/tmp/tiles-dry.
read -r -a COMMON <<<"${COMMON_ARGS:---size 3840x2160 --texture-size 8192 --textures bc --frames 240 --no-validation}"
SMALL=${SMALL:-256MiB}
LARGE=${LARGE:-1GiB}
mkdir -p "$OUT/r" "$WORK"

# reference DIR [ARGS...]: every mip resident, every frame a PNG.
reference() {
    local dir=$1
    shift
    if [[ ! -f "$dir/report.json" ]]; then
        echo "== reference (every mip resident) into $dir"
        mkdir -p "$dir"
        "$BIN" "${COMMON[@]}" --out "$dir" --streaming off --png-every 1 "$@" \
            >"$dir/log.txt" 2>&1 || tail -5 "$dir/log.txt"
    fi
}

# run NAME [VAR=VALUE...] -- ARGS...: one run, clocks logged beside it.
# A fresh machine's first run drew at idle clocks (345 MHz; BENCHMARKS.md): the
# first timing run of each invocation follows an untimed warm-up run of the
# same arguments (materials baked, clocks up). WARM_UP=0 skips it.
warmed=${WARM_UP:-1}
run() {
    local name=$1
    shift
    if [[ "$warmed" == 1 && "$name" == t* ]]; then
        warmed=0
        local rest=("$@")
        while [[ ${#rest[@]} -gt 0 && "${rest[0]}" != "--" ]]; do rest=("${rest[@]:1}"); done
        "$BIN" "${COMMON[@]}" --png-every 0 --out /tmp/tiles-runs/warm-up "${rest[@]:1}" >/dev/null 2>&1
        echo "== warm-up run done"
    fi
    local tunes=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do
        tunes+=(--tune "$1")
        shift
    done
    shift
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw \
        --format=csv,noheader -lms 100 >"$OUT/r/$name.clk" 2>&1 &
    local smi=$!
    mkdir -p "/tmp/tiles-runs/$name"
    "$BIN" "${COMMON[@]}" "${tunes[@]}" --png-every 0 --out "/tmp/tiles-runs/$name" "$@" \
        >"$OUT/r/$name.log" 2>&1
    echo "== $name (exit $?)"
    tail -n 1 "$OUT/r/$name.log"
    kill "$smi" 2>/dev/null
    cp "/tmp/tiles-runs/$name/report.json" "$OUT/r/$name.json" 2>/dev/null
}

# cap_tunes CAP: sets `tunes` (--tune items) for a SPARE_CAPS / CAPS entry:
# none; N caps every spare load (tiles.max-spare=N); rN the margin and ring
# alone (tiles.max-ring=N).
cap_tunes() {
    tunes=()
    case $1 in
        none) ;;
        r*) tunes=(tiles.max-ring=${1#r}) ;;
        *) tunes=(tiles.max-spare=$1) ;;
    esac
}

# matrix PREFIX REFDIR "CONFIGS" ARGS...: after the reference in REFDIR (every
# mip resident, ARGS' materials, 24 GiB), a timing and a quality run with ARGS
# per CONFIGS entry "name,key=value,key=value ..." (--tune items).
matrix() {
    local prefix=$1 refdir=$2 configs=$3
    shift 3
    local mats=()
    [[ "$*" == *"--materials 64"* ]] && mats=(--materials 64)
    reference "$refdir" "${mats[@]}" --texture-budget 24GiB
    local entry parts name
    for entry in $configs; do
        IFS=, read -r -a parts <<<"$entry"
        name=${parts[0]}
        run "t${prefix}_$name" "${parts[@]:1}" -- "$@"
        run "q${prefix}_$name" "${parts[@]:1}" -- "$@" --compare "$refdir"
    done
}

if [[ ",$PHASE," == *",16,"* ]]; then
    reference "$WORK/reference" --texture-budget 16GiB
    REF=(--compare "$WORK/reference")
    run q_tiles_small -- --residency tiles --texture-budget "$SMALL" "${REF[@]}"
    run q_tiles_large -- --residency tiles --texture-budget "$LARGE" "${REF[@]}"
    run t_off_small -- --streaming off --texture-budget "$SMALL"
    run t_levels_small -- --residency levels --texture-budget "$SMALL"
    run t_tiles_small -- --residency tiles --texture-budget "$SMALL"
    run t_tiles_large -- --residency tiles --texture-budget "$LARGE"
    run t_off_large -- --streaming off --texture-budget "$LARGE"
fi
if [[ ",$PHASE," == *",budgets,"* ]]; then
    # The issue's figure set by tiles: 512 MiB and unlimited (16 GiB: every
    # tile fits), quality against the reference and frame time, streaming off
    # beside each; then REPEAT rounds of off and tiles at 256 MiB, alternating,
    # for the p99 ratio over more than one run.
    reference "$WORK/reference" --texture-budget 16GiB
    REF=(--compare "$WORK/reference")
    run q_tiles_512 -- --residency tiles --texture-budget 512MiB "${REF[@]}"
    run q_tiles_unl -- --residency tiles --texture-budget 16GiB "${REF[@]}"
    run t_off_512 -- --streaming off --texture-budget 512MiB
    run t_tiles_512 -- --residency tiles --texture-budget 512MiB
    run t_off_unl -- --streaming off --texture-budget 16GiB
    run t_tiles_unl -- --residency tiles --texture-budget 16GiB
    for k in $(seq 1 "${REPEAT:-3}"); do
        run "t_off_small_$k" -- --streaming off --texture-budget "$SMALL"
        run "t_tiles_small_$k" -- --residency tiles --texture-budget "$SMALL"
    done
fi
if [[ ",$PHASE," == *",spare,"* ]]; then
    # 64 materials at 1 GiB with the loads of tiles the present view does not want
    # capped per frame: quality and time. SPARE_CAPS entries: none; N caps them all
    # (tiles.max-spare=N); rN caps the margin and ring alone
    # (tiles.max-ring=N), the look-ahead's loads keeping their own cap.
    reference "$WORK/reference_materials64" --materials 64 --texture-budget 24GiB
    REF=(--compare "$WORK/reference_materials64")
    for cap in ${SPARE_CAPS:-none 256 64}; do
        cap_tunes "$cap"
        run "q_spare_$cap" "${tunes[@]}" -- --materials 64 --residency tiles --texture-budget "$LARGE" "${REF[@]}"
        run "t_spare_$cap" "${tunes[@]}" -- --materials 64 --residency tiles --texture-budget "$LARGE"
    done
fi
if [[ ",$PHASE," == *",t64,"* ]]; then
    # 64 materials at 1 GiB, frame time first (no reference needed): tiles,
    # streaming off, and each of CAPS (as SPARE_CAPS; default r256).
    run t_tiles_m64 -- --materials 64 --residency tiles --texture-budget "$LARGE"
    run t_off_m64 -- --materials 64 --streaming off --texture-budget "$LARGE"
    for cap in ${CAPS:-r256}; do
        cap_tunes "$cap"
        run "t_spare_$cap" "${tunes[@]}" -- --materials 64 --residency tiles --texture-budget "$LARGE"
    done
fi
if [[ ",$PHASE," == *",q64,"* ]]; then
    # The same runs' quality against the all-resident render.
    reference "$WORK/reference_materials64" --materials 64 --texture-budget 24GiB
    REF=(--compare "$WORK/reference_materials64")
    run q_tiles_m64 -- --materials 64 --residency tiles --texture-budget "$LARGE" "${REF[@]}"
    for cap in ${CAPS:-r256}; do
        cap_tunes "$cap"
        run "q_spare_$cap" "${tunes[@]}" -- --materials 64 --residency tiles --texture-budget "$LARGE" "${REF[@]}"
    done
fi
if [[ ",$PHASE," == *",m64,"* ]]; then
    # 64 materials at LARGE, a timing and a quality run per entry of CONFIGS
    # (OFF=1: streaming off's timing run first, for the p99 ratio).
    [[ "${OFF:-0}" == 1 ]] && run t_off_m64 -- --materials 64 --streaming off --texture-budget "$LARGE"
    matrix "" "$WORK/reference_materials64" "${CONFIGS:-none}" --materials 64 --residency "${RESIDENCY:-tiles}" --texture-budget "$LARGE"
fi
if [[ ",$PHASE," == *",m16,"* ]]; then
    # 16 materials at SMALL, per entry of CONFIGS16 (OFF=1 as for m64).
    [[ "${OFF:-0}" == 1 ]] && run t16_off -- --streaming off --texture-budget "$SMALL"
    matrix 16 "$WORK/reference" "${CONFIGS16:-none}" --residency "${RESIDENCY:-tiles}" --texture-budget "$SMALL"
fi
if [[ ",$PHASE," == *",t16,"* ]]; then
    # Frame time only, 16 materials at SMALL: REPEAT rounds of streaming off
    # and each CONFIGS16 entry ("name,key=value ...", --tune items), for the p99 ratio over
    # more than one run.
    for k in $(seq 1 "${REPEAT:-2}"); do
        run "t16_off_$k" -- --streaming off --texture-budget "$SMALL"
        for entry in ${CONFIGS16:-none}; do
            IFS=, read -r -a parts <<<"$entry"
            run "t16_${parts[0]}_$k" "${parts[@]:1}" -- --residency tiles --texture-budget "$SMALL"
        done
    done
fi
if [[ ",$PHASE," == *",atlas,"* ]]; then
    # The page atlas (--residency atlas: tiles copied into atlas slots, no
    # sparse binds): quality at each of ATLAS_BUDGETS (default SMALL) against
    # the reference, then REPEAT rounds of streaming off, the atlas and the
    # sparse tiles at SMALL for the frame time.
    reference "$WORK/reference" --texture-budget 16GiB
    REF=(--compare "$WORK/reference")
    for b in ${ATLAS_BUDGETS:-$SMALL}; do
        run "q_atlas_$b" -- --residency atlas --texture-budget "$b" "${REF[@]}"
    done
    for k in $(seq 1 "${REPEAT:-2}"); do
        run "t_off_$k" -- --streaming off --texture-budget "$SMALL"
        run "t_atlas_$k" -- --residency atlas --texture-budget "$SMALL"
        run "t_tiles_$k" -- --residency tiles --texture-budget "$SMALL"
    done
fi
if [[ ",$PHASE," == *",atlasall,"* ]]; then
    # The issue's figure set for the page atlas (the default where it runs): at
    # each of ATLAS_BUDGETS (default 256 MiB, 512 MiB, 1 GiB, 16 GiB) quality
    # against the reference, then a timing run of streaming off and of the atlas.
    reference "$WORK/reference" --texture-budget 16GiB
    REF=(--compare "$WORK/reference")
    for b in ${ATLAS_BUDGETS:-256MiB 512MiB 1GiB 16GiB}; do
        run "q_atlas_$b" -- --residency atlas --texture-budget "$b" "${REF[@]}"
        run "t_off_$b" -- --streaming off --texture-budget "$b"
        run "t_atlas_$b" -- --residency atlas --texture-budget "$b"
    done
fi
if [[ ",$PHASE," == *",atlas64,"* ]]; then
    # The same with 64 materials at LARGE: the reference (bakes them), quality,
    # then REPEAT rounds of streaming off, the atlas and the sparse tiles.
    reference "$WORK/reference_materials64" --materials 64 --texture-budget 24GiB
    REF=(--compare "$WORK/reference_materials64")
    run q_atlas_m64 -- --materials 64 --residency atlas --texture-budget "$LARGE" "${REF[@]}"
    for k in $(seq 1 "${REPEAT:-2}"); do
        run "t_off_m64_$k" -- --materials 64 --streaming off --texture-budget "$LARGE"
        run "t_atlas_m64_$k" -- --materials 64 --residency atlas --texture-budget "$LARGE"
        run "t_tiles_m64_$k" -- --materials 64 --residency tiles --texture-budget "$LARGE"
    done
fi
if [[ ",$PHASE," == *",atlas64s,"* ]]; then
    # Issue 38: 64 materials (16 GiB of maps) at SMALL, the budget 16 stream at
    # (64:1), by the page atlas: quality against the 64-material reference, 16
    # materials' quality at SMALL beside it (it must not regress), then REPEAT
    # rounds of streaming off and the atlas, 64 and 16 materials, for the frame time.
    reference "$WORK/reference_materials64" --materials 64 --texture-budget 24GiB
    reference "$WORK/reference" --texture-budget 16GiB
    run q_atlas_m64_small -- --materials 64 --residency atlas --texture-budget "$SMALL" --compare "$WORK/reference_materials64"
    run q_atlas_small -- --residency atlas --texture-budget "$SMALL" --compare "$WORK/reference"
    for k in $(seq 1 "${REPEAT:-2}"); do
        run "t_off_m64_small_$k" -- --materials 64 --streaming off --texture-budget "$SMALL"
        run "t_atlas_m64_small_$k" -- --materials 64 --residency atlas --texture-budget "$SMALL"
        run "t_off_small_$k" -- --streaming off --texture-budget "$SMALL"
        run "t_atlas_small_$k" -- --residency atlas --texture-budget "$SMALL"
    done
fi
if [[ ",$PHASE," == *",tm64,"* ]]; then
    # The same with 64 materials at LARGE and CONFIGS.
    for k in $(seq 1 "${REPEAT:-2}"); do
        run "t64_off_$k" -- --materials 64 --streaming off --texture-budget "$LARGE"
        for entry in ${CONFIGS:-none}; do
            IFS=, read -r -a parts <<<"$entry"
            run "t64_${parts[0]}_$k" "${parts[@]:1}" -- --materials 64 --residency tiles --texture-budget "$LARGE"
        done
    done
fi
if [[ ",$PHASE," == *",64,"* ]]; then
    reference "$WORK/reference_materials64" --materials 64 --texture-budget 24GiB
    REF=(--compare "$WORK/reference_materials64")
    run q_tiles_m64 -- --materials 64 --residency tiles --texture-budget "$LARGE" "${REF[@]}"
    run t_off_m64 -- --materials 64 --streaming off --texture-budget "$LARGE"
    run t_tiles_m64 -- --materials 64 --residency tiles --texture-budget "$LARGE"
fi

command -v python3 >/dev/null || exit 0
python3 - "$OUT/r" <<'PY'
import glob, json, os, statistics as st, sys
d = sys.argv[1]
for j in sorted(glob.glob(d + "/*.json")):
    n = os.path.basename(j)[:-5]
    fr = json.load(open(j))["frames"]
    if n.startswith("q"):
        p = [f["psnr_db"] for f in fr if "psnr_db" in f]
        cuts = [(f["frame"], round(f["psnr_db"], 1)) for f in fr if f.get("camera_cut") and "psnr_db" in f]
        steady = [f["psnr_db"] for f in fr if not f.get("camera_cut") and "psnr_db" in f]
        worst = min(((f["psnr_db"], f["frame"]) for f in fr if "psnr_db" in f), default=None)
        over = sum(f["texture_resident_bytes"] > f["texture_budget"] for f in fr)
        if p:
            print(f"{n}: PSNR min {min(p):.2f} mean {st.mean(p):.1f}, {sum(x < 40 for x in p)} frames below 40 dB, "
                  f"{sum(x < 38 for x in p)} below 38 ({sum(x < 38 for x in steady)} not cut frames), "
                  f"worst {worst}; {over} frames over budget; cut frames {cuts}")
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
    cpu = []
    for k in ("stream_cpu_ms", "feedback_ms", "lookahead_ms", "plan_ms", "page_ms", "map_ms",
              "sparse_binds", "tile_loads", "tile_wanted_loads", "bind_ms", "upload_ms", "copy_ms",
              "stream_wait_ms", "tile_late_loads", "late_ms", "wall_ms"):
        v = [f[k] for f in fr if isinstance(f.get(k), (int, float))]
        if v:
            cpu.append(f"{k} {st.median(v):.2f}")
    print(f"{n}: GPU median/p99 all {pr(0, len(fr))}, 70-240 {pr(70, 240)} | {ps} | {clk} | {' '.join(cpu)}")
PY
