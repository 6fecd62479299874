#!/usr/bin/env bash
# The streamer's pre-fill before the first frame on the H200 (issue 7, `--prefill`).
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer:
#
#   OUT=/some/dir docs/h200/prefill.sh        # about 10 min (plus the reference, once)
#
# Same settings and reference as docs/h200/streaming.sh (4K, 8K BC7/BC5 maps, the
# 240-frame path; the all-resident reference's PNG frames in $WORK, default
# /tmp/vkalloc-streaming, written here if streaming.sh has not already). Then, at
# 256 MiB and 1 GiB, streaming on with `--prefill on` and `--prefill off`, each
# compared frame by frame with the reference.
#
# Prints per run: the start-up line ("streaming: pre-fill X ms before the first
# frame (Y MiB read, ...; settled|stalled|time limit ...)"), then frame 0's PSNR
# and mip deficit, the report's prefill_ms / prefill_bytes / prefill_end /
# prefill_peak_bytes, and the run's min/mean PSNR and frames below 40 dB. The
# goal: frame 0 at or above 40 dB with the pre-fill at both budgets (it is far
# below with `--prefill off`), prefill_peak_bytes within the budget.
set -euo pipefail

BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
WORK=${WORK:-/tmp/vkalloc-streaming}
COMMON=(--size 3840x2160 --texture-size 8192 --textures bc --frames 240)
mkdir -p "$OUT" "$WORK"

if [[ ! -f "$WORK/reference/report.json" ]]; then
    echo "== reference (every mip resident) into $WORK/reference"
    mkdir -p "$WORK/reference"
    "$BIN" "${COMMON[@]}" --out "$WORK/reference" --streaming off --texture-budget 16GiB \
        --png-every 1 >"$WORK/reference/log.txt" 2>&1
fi

for budget in 256MiB 1GiB; do
    for prefill in on off; do
        name="prefill_${prefill}_${budget}"
        echo "== $name"
        mkdir -p "$OUT/$name"
        "$BIN" "${COMMON[@]}" --out "$OUT/$name" --streaming on --texture-budget "$budget" \
            --prefill "$prefill" --png-every 0 --compare "$WORK/reference" \
            >"$OUT/$name/log.txt" 2>&1 || echo "== $name FAILED; see $OUT/$name/log.txt"
        grep -h "pre-fill" "$OUT/$name/log.txt" | head -n 1 || true
        python3 - "$OUT/$name/report.json" <<'PY' || true
import json, sys
r = json.load(open(sys.argv[1]))
s, f0 = r["streaming"], r["frames"][0]
print(f"frame 0: {f0['psnr_db']:.1f} dB, mip deficit {f0['mip_deficit']:.3f}; "
      f"prefill_ms {s['prefill_ms']:.1f}, prefill_bytes {s['prefill_bytes']}, "
      f"prefill_end {s['prefill_end']}, prefill_peak_bytes {s['prefill_peak_bytes']} "
      f"(budget {f0['texture_budget']}); PSNR min {s['min_psnr_db']:.1f} mean "
      f"{s['mean_psnr_db']:.1f}, {s['frames_below_40_db']} frames below 40 dB")
PY
    done
done
