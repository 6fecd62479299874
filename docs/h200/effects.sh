#!/usr/bin/env bash
# The effects' aliased transients on the H200 (issue 10 item 4): the bytes the alias
# group saves at 4K on NVIDIA's memory requirements, and what the shadow map and
# bloom cost in GPU time.
#
# From the repository root, with a release demo binary at ./bin/demo-renderer:
#   OUT=/some/dir bash docs/h200/effects.sh
# Writes into $OUT:
#   effects-on/, effects-off/   the demo's runs (report.json, heap.json)
#   effects.json                the figures below, one JSON object
#   effects_4k.png              one 4K frame with the effects
# Figures: report.json's `aliasing` (bytes_saved, the group's allocation and members)
# and the median and p99 GPU frame time with and without the effects, with the
# shadow and bloom passes' own medians (timestamps).
set -euo pipefail
OUT=${OUT:?set OUT to the output directory}
BIN=${BIN:-./bin/demo-renderer}
FRAMES=${FRAMES:-120}
mkdir -p "$OUT"
common=(--size 3840x2160 --frames "$FRAMES" --png-every 0 --no-validation)

"$BIN" "${common[@]}" --effects on --out "$OUT/effects-on" | tee "$OUT/effects-on.log"
"$BIN" "${common[@]}" --effects off --out "$OUT/effects-off" | tee "$OUT/effects-off.log"
"$BIN" --size 3840x2160 --frames 1 --no-validation --out "$OUT/picture" > /dev/null
cp "$OUT/picture/frame_0000.png" "$OUT/effects_4k.png"

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
    return {"median": pct(values, 0.5), "p99": pct(values, 0.99)}
result = {}
for name in ["effects-on", "effects-off"]:
    r = load(name)
    frames = r["frames"]
    result[name] = {
        "gpu_total_ms": stats([f["gpu_total_ms"] for f in frames]),
        "gpu_shadow_ms": stats([f["gpu_ms"].get("shadow", 0.0) for f in frames]),
        "gpu_bloom_ms": stats([f["gpu_ms"].get("bloom", 0.0) for f in frames]),
        "aliasing": r["aliasing"],
    }
result["bytes_saved_4k"] = result["effects-on"]["aliasing"]["bytes_saved"]
result["gpu_total_delta_ms_median"] = (
    result["effects-on"]["gpu_total_ms"]["median"] - result["effects-off"]["gpu_total_ms"]["median"]
)
with open(f"{out}/effects.json", "w") as f:
    json.dump(result, f, indent=1)
print(json.dumps({k: result[k] for k in ["bytes_saved_4k", "gpu_total_delta_ms_median"]}, indent=1))
PY
