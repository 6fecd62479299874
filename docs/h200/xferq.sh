#!/usr/bin/env bash
# Streaming uploads on the transfer-only queue, with queue-family ownership
# transfers, on the H200 (issue 7 item 3).
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer
# and the Khronos validation layer installed:
#
#   OUT=/some/dir docs/h200/xferq.sh
#
# 1. validation: 1920x1080, 48 frames of the camera path (its first camera cut
#    included), 8K BC7/BC5 materials under a 256 MiB texture budget, uploads on
#    the transfer queue (--upload-queue transfer), the validation layer on with
#    synchronization validation (the demo enables it). The script exits 1 (after
#    the timing runs) on any validation error, a missing layer, a frame over
#    budget, or a report whose streaming.upload_queue is not "transfer"; the first
#    20 error messages are printed.
# 2. timing: 4K, 240 frames, no PNGs, no validation, 256 MiB, once with
#    --upload-queue transfer and once with --upload-queue graphics. Prints for each
#    the GPU frame time median and p99 (all frames, and frames 24.. after the
#    warm-up), the frames' upload bytes, upload_gbps (file bytes over the time the
#    worker threads spent reading them into staging: CPU side), upload_gpu_gbps
#    (bytes copied from staging over the GPU time of those copies, from timestamps
#    on the queue that ran them), and the streaming line of the summary.
#
# Each run writes $OUT/<run>/report.json and $OUT/<run>/log.txt.
set -euo pipefail

BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
COMMON=(--texture-size 8192 --textures bc --texture-budget 256MiB)
mkdir -p "$OUT"
status=0

run() {
    local name=$1
    shift
    echo "== $name: $BIN ${COMMON[*]} $*"
    mkdir -p "$OUT/$name"
    local rc=0
    "$BIN" "${COMMON[@]}" --out "$OUT/$name" "$@" >"$OUT/$name/log.txt" 2>&1 || rc=$?
    tail -n 2 "$OUT/$name/log.txt"
    if [[ $rc -ne 0 ]]; then
        echo "== $name FAILED (exit $rc); see $OUT/$name/log.txt"
        status=1
    fi
    return 0
}

# 1. Validation on the transfer path.
run validation_transfer --size 1920x1080 --frames 48 --upload-queue transfer --png-every 0
log="$OUT/validation_transfer/log.txt"
if grep -q "VK_LAYER_KHRONOS_validation is not installed" "$log"; then
    echo "== validation_transfer: the validation layer is not installed: nothing was validated"
    status=1
fi
if grep -q "\[vulkan error\]" "$log"; then
    echo "== validation_transfer: validation errors:"
    grep "\[vulkan error\]" "$log" | head -n 20
    status=1
fi
if grep -q "\[vulkan warning\]" "$log"; then
    echo "== validation_transfer: $(grep -c "\[vulkan warning\]" "$log") validation warnings (first 5):"
    grep "\[vulkan warning\]" "$log" | head -n 5
fi
if [[ -f "$OUT/validation_transfer/report.json" ]]; then
    python3 - "$OUT/validation_transfer/report.json" <<'PY' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("streaming") or {}
print(f"validation_transfer: upload_queue {s.get('upload_queue')}, "
      f"transfer family {r['device'].get('upload_queue_family')}, "
      f"{r['validation_errors']} validation errors, "
      f"{s.get('residency_changes')} residency changes, "
      f"{s.get('upload_bytes', 0) / 2**20:.1f} MiB uploaded, "
      f"{s.get('frames_over_budget')} frames over budget")
if s.get("upload_queue") != "transfer" or r["validation_errors"] != 0 or s.get("frames_over_budget") != 0:
    sys.exit(1)
PY
fi

# 2. Timing at 4K: transfer queue against graphics queue.
for q in transfer graphics; do
    run "timing_$q" --size 3840x2160 --frames 240 --png-every 0 --no-validation --upload-queue "$q"
done

echo
echo "== summary"
for q in transfer graphics; do
    f="$OUT/timing_$q/report.json"
    [[ -f "$f" ]] || continue
    python3 - "$f" "$q" <<'PY'
import json, math, sys
r = json.load(open(sys.argv[1]))
s = r.get("streaming") or {}
g = r["gpu_frame_ms"]
warm = sorted(f["gpu_total_ms"] for f in r["frames"][24:])
def rank(v, p):
    # nearest rank, as the report's percentiles
    return v[min(len(v) - 1, max(0, math.ceil(p * len(v)) - 1))] if v else float("nan")
print(f"{sys.argv[2]}: upload_queue {s.get('upload_queue')}; GPU frame median {g['median']:.2f} ms, "
      f"p99 {g['p99']:.2f} ms; after warm-up (frames 24..) median {rank(warm, 0.5):.2f} ms, "
      f"p99 {rank(warm, 0.99):.2f} ms; uploads {s.get('upload_bytes', 0) / 2**30:.2f} GiB, "
      f"upload_gbps {s.get('upload_gbps', 0):.2f} GB/s (reads into staging), "
      f"upload_gpu_gbps {s.get('upload_gpu_gbps', 0):.2f} GB/s (copies from staging, GPU timestamps)")
line = [p for p in r["summary"].split("; ") if p.startswith("streaming")]
print("  " + (line[0] if line else r["summary"]))
PY
done
exit $status
