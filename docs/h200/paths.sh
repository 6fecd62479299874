#!/usr/bin/env bash
# Issue 38 on the H200: quality on recorded camera paths with no future, against the
# script's look-ahead on its own path; 64 materials at 256 MiB; frame time at 256 MiB.
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer (and the
# loader's packages, as the device README says); each phase fits one 10-minute call:
#
#   OUT=/some/dir PHASE=a bash docs/h200/paths.sh   # the script: its look-ahead, replayed with
#                                                  # a prediction, replayed blind (~6 min)
#   OUT=/some/dir PHASE=w bash docs/h200/paths.sh   # walkthrough, flick, skim (~4 min; RESPOND0=1
#                                                  # adds flick without the answer to changes)
#   OUT=/some/dir PHASE=b bash docs/h200/paths.sh   # 64 materials: the script, replayed (~5 min)
#   OUT=/some/dir PHASE=t bash docs/h200/paths.sh   # frame time at 256 MiB, on and off (~1 min)
#   OUT=/some/dir PHASE=f bash docs/h200/paths.sh   # the budget's front: flick and seed 404 at
#                                                  # each of $BUDGETS (~5 min for three)
#   OUT=/some/dir PHASE=r SEEDS="11 12" bash docs/h200/paths.sh
#                                                  # paths nobody tuned to, drawn from seeds by
#                                                  # assets/paths/random_path.py (~2 min a seed;
#                                                  # ALT_ARGS="..." adds a run of each, ~1 min)
#
# Each path's reference (streaming off, every mip of every map resident: --texture-budget
# $REF_BUDGET, not the demo's default 1 GiB, which keeps only mips 1..2 of 16 8K materials; every
# frame a PNG) goes to $WORK and is kept for later calls on the same machine with the same
# arguments; every quality run reads its frames back against it (--compare). The script's path is recorded (--record-path) in
# its reference run and replayed with --camera-path: the same poses, with no future and no
# announced cuts. Frame time: streaming on and off at 256 MiB, twice each after a warm-up run,
# without --compare (no readback). One line per run (docs/h200/paths_summary.py) goes to
# $OUT/summary.txt, the reports and logs to $OUT/reports-$PHASE.tgz.
set -uo pipefail
BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
WORK=${WORK:-/tmp/vkalloc-paths}
PHASE=${PHASE:-a}
read -r -a COMMON <<<"${COMMON_ARGS:---size 3840x2160 --texture-size 8192 --textures bc --frames 240 --no-validation}"
# Extra arguments of the quality runs alone (e.g. QUALITY_ARGS="--tune view.guard=1.25"): the
# references, streaming off, stay as they are and are reused.
read -r -a QUALITY <<<"${QUALITY_ARGS:-}"
BUDGET=${BUDGET:-256MiB}
# The references' budget holds every mip of every map (64 materials: 16 GiB of maps).
REF_BUDGET=${REF_BUDGET:-24GiB}
mkdir -p "$OUT/reports" "$WORK"

# run NAME ARGS...: one demo run into $WORK/NAME; its report and log kept in $OUT/reports.
run() {
    local name=$1
    shift
    local t0=$SECONDS
    rm -rf "${WORK:?}/$name" # a failed run must not leave an earlier report to be read as its own
    "$BIN" "${COMMON[@]}" --out "$WORK/$name" "$@" >"$OUT/reports/$name.log" 2>&1
    local rc=$?
    cp "$WORK/$name/report.json" "$OUT/reports/$name.json" 2>/dev/null
    echo "== $name: exit $rc, $((SECONDS - t0)) s: $*" | tee -a "$OUT/summary.txt"
    python3 "$(dirname "$0")/paths_summary.py" "$name=$WORK/$name/report.json" | tee -a "$OUT/summary.txt"
}
# reference NAME [ARGS...]: the path's reference run ref_NAME, unless one is kept in $WORK.
# quality REF NAME [ARGS...]: streaming at $BUDGET, every frame against ref_REF.
# A kept reference is reused only when it was made with the same arguments: one made with
# other settings (the default budget, another size) would be read as this one.
reference() {
    local name=$1
    shift
    local args=("${COMMON[@]}" --streaming off --texture-budget "$REF_BUDGET" --png-every 1 "$@")
    # The key: the arguments and a camera path's poses (phase r rewrites its seeds' paths each
    # call: a kept reference of another generator's path would be read as this one's).
    local key="${args[*]}" prev=""
    for a in "$@"; do
        [[ $prev == --camera-path && -f $a ]] && key+=" [$(cksum <"$a")]"
        prev=$a
    done
    local kept="$WORK/ref_$name/args.txt"
    if [[ -f "$WORK/ref_$name/report.json" && -f "$kept" && "$(cat "$kept")" == "$key" ]]; then
        return
    fi
    run "ref_$name" --streaming off --texture-budget "$REF_BUDGET" --png-every 1 "$@"
    [[ -f "$WORK/ref_$name/report.json" ]] && printf '%s' "$key" >"$kept"
}
quality() {
    local ref=$1 name=$2
    shift 2
    run "$name" --streaming on --texture-budget "$BUDGET" --png-every 0 --compare "$WORK/ref_$ref" \
        ${QUALITY[@]+"${QUALITY[@]}"} "$@"
}

case "$PHASE" in
a)
    reference script --record-path "$WORK/script.jsonl"
    quality script script
    quality script script_replayed --camera-path "$WORK/script.jsonl"
    quality script script_replayed_off --camera-path "$WORK/script.jsonl" --lookahead 0
    ;;
w)
    for p in walkthrough flick; do
        reference "$p" --camera-path "assets/paths/$p.jsonl"
        quality "$p" "$p" --camera-path "assets/paths/$p.jsonl"
    done
    if [[ -n "${RESPOND0:-}" ]]; then
        quality flick flick_respond0 --camera-path assets/paths/flick.jsonl --tune view.respond=0
    fi
    # skim.jsonl is 120 frames long (a later --frames wins).
    reference skim --camera-path assets/paths/skim.jsonl --frames 120
    quality skim skim --camera-path assets/paths/skim.jsonl --frames 120
    ;;
b)
    reference m64 --materials 64 --record-path "$WORK/script64.jsonl"
    quality m64 m64 --materials 64
    quality m64 m64_replayed --materials 64 --camera-path "$WORK/script64.jsonl"
    ;;
r)
    for seed in ${SEEDS:-11 12}; do
        python3 assets/paths/random_path.py "$seed" >"$WORK/seed$seed.jsonl"
        reference "seed$seed" --camera-path "$WORK/seed$seed.jsonl"
        quality "seed$seed" "seed$seed" --camera-path "$WORK/seed$seed.jsonl"
        # ALT_ARGS: a second quality run of each seed, against the same reference.
        if [[ -n "${ALT_ARGS:-}" ]]; then
            read -r -a alt <<<"$ALT_ARGS"
            quality "seed$seed" "seed${seed}_alt" --camera-path "$WORK/seed$seed.jsonl" "${alt[@]}"
        fi
    done
    ;;
f)
    # Refill against the budget: the paths whose views want more than 256 MiB holds, or more
    # than a frame uploads, at several budgets (one reference each, shared by the runs).
    python3 assets/paths/random_path.py 404 >"$WORK/seed404.jsonl"
    reference flick --camera-path assets/paths/flick.jsonl
    reference seed404 --camera-path "$WORK/seed404.jsonl"
    for b in ${BUDGETS:-256MiB 384MiB 512MiB}; do
        BUDGET=$b quality flick "flick_$b" --camera-path assets/paths/flick.jsonl
        BUDGET=$b quality seed404 "seed404_$b" --camera-path "$WORK/seed404.jsonl"
    done
    ;;
t)
    run warm --streaming on --texture-budget "$BUDGET" --png-every 0
    for i in 1 2; do
        run "on_$i" --streaming on --texture-budget "$BUDGET" --png-every 0
        run "off_$i" --streaming off --texture-budget "$BUDGET" --png-every 0
    done
    ;;
*)
    echo "PHASE is a, w, b, r, f or t" >&2
    exit 2
    ;;
esac
tar czf "$OUT/reports-$PHASE.tgz" -C "$OUT" reports && rm -rf "$OUT/reports"
