#!/usr/bin/env bash
# The overlay's cost on the H200 (issue 8, goals: <= 0.3 ms GPU at 4K, <= 0.5 ms CPU
# per frame with 10,000 live allocations).
#
# From the repository root, with a release demo binary at ./bin/demo-renderer:
#   OUT=/some/dir bash docs/h200/overlay.sh
# Writes into $OUT:
#   no-overlay/, overlay/, overlay-10k/   the demo's runs (report.json, heap.json)
#   overlay.json                          the figures below, one JSON object
#   overlay_cpu.json                      the CPU-only bench (if cargo is on the PATH)
#   overlay_4k.png                        one 4K frame with the overlay
# Figures: median and p99 of the `overlay` pass's GPU time (timestamps around the
# overlay's draws inside the tone-map pass), the frame's GPU total with and without
# --overlay, and the overlay's CPU time per frame on the render thread
# (`overlay_cpu_ms` in report.json: installing the last layout, posting the next)
# with 10,000 extra live allocations, and the layout thread's time per layout
# (`overlay_layout_ms`: snapshot, egui layout, tessellation, on another core).
set -euo pipefail
OUT=${OUT:?set OUT to the output directory}
BIN=${BIN:-./bin/demo-renderer}
FRAMES=${FRAMES:-120}
mkdir -p "$OUT"
common=(--size 3840x2160 --frames "$FRAMES" --png-every 0 --no-validation)

"$BIN" "${common[@]}" --out "$OUT/no-overlay" | tee "$OUT/no-overlay.log"
"$BIN" "${common[@]}" --overlay --out "$OUT/overlay" | tee "$OUT/overlay.log"
"$BIN" "${common[@]}" --overlay --extra-allocations 10000 --out "$OUT/overlay-10k" | tee "$OUT/overlay-10k.log"
# One frame to look at.
"$BIN" --size 3840x2160 --frames 1 --overlay --no-validation --out "$OUT/picture" > /dev/null
cp "$OUT/picture/frame_0000.png" "$OUT/overlay_4k.png"

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    with open(f"{out}/{name}/report.json") as f:
        return json.load(f)
def pct(values, p):
    v = sorted(values)
    if not v:
        return None
    k = max(1, min(len(v), int(-(-p * len(v) // 1))))
    return v[k - 1]
def stats(values):
    values = values[5:] if len(values) > 10 else values  # skip warm-up frames
    return {"median": pct(values, 0.5), "p99": pct(values, 0.99), "max": max(values) if values else None}
result = {}
for name in ["no-overlay", "overlay", "overlay-10k"]:
    r = load(name)
    frames = r["frames"]
    result[name] = {
        "gpu_total_ms": stats([f["gpu_total_ms"] for f in frames]),
        "gpu_overlay_ms": stats([f["gpu_ms"].get("overlay", 0.0) for f in frames]),
        "overlay_cpu_ms": stats([f.get("overlay_cpu_ms", 0.0) for f in frames]),
        # Frames that installed a new layout (at most every 50 ms).
        "overlay_cpu_ms_layout_frames": stats([f.get("overlay_cpu_ms", 0.0) for f in frames if f.get("overlay_laid_out")]),
        # The layout thread's time per layout, and per frame on average.
        "overlay_layout_ms": stats([f["overlay_layout_ms"] for f in frames if f.get("overlay_layout_ms") is not None]),
        "overlay_layout_ms_per_frame_mean": sum(f.get("overlay_layout_ms") or 0.0 for f in frames) / max(1, len(frames)),
        "live_allocations": r["allocator"]["total"]["allocation_count"],
    }
result["goals"] = {
    "gpu_overlay_ms_median_4k": result["overlay"]["gpu_overlay_ms"]["median"],
    "gpu_overlay_goal_ms": 0.3,
    "gpu_total_delta_ms_median": result["overlay"]["gpu_total_ms"]["median"] - result["no-overlay"]["gpu_total_ms"]["median"],
    "cpu_ms_median_10k": result["overlay-10k"]["overlay_cpu_ms"]["median"],
    "cpu_ms_p99_10k": result["overlay-10k"]["overlay_cpu_ms"]["p99"],
    "cpu_ms_max_10k": result["overlay-10k"]["overlay_cpu_ms"]["max"],
    "cpu_ms_layout_frames_median_10k": result["overlay-10k"]["overlay_cpu_ms_layout_frames"]["median"],
    "layout_thread_ms_median_10k": result["overlay-10k"]["overlay_layout_ms"]["median"],
    "layout_thread_ms_per_frame_mean_10k": result["overlay-10k"]["overlay_layout_ms_per_frame_mean"],
    "cpu_goal_ms": 0.5,
}
with open(f"{out}/overlay.json", "w") as f:
    json.dump(result, f, indent=1)
print(json.dumps(result["goals"], indent=1))
PY

# The same CPU work without a GPU (snapshot + layout + tessellation of 10,000
# allocations, and whether a snapshot stalls another thread's allocations).
if [ -x ./bin/overlay_cpu ]; then
    ./bin/overlay_cpu 10000 200 | tee "$OUT/overlay_cpu.json"
elif command -v cargo > /dev/null; then
    cargo run --release -q -p vkalloc-heapmap --example overlay_cpu -- 10000 200 | tee "$OUT/overlay_cpu.json"
fi
