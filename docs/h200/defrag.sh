#!/usr/bin/env bash
# Texture-pool defragmentation figures on the H200 (issue 10 item 3).
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer:
#
#   OUT=/some/dir docs/h200/defrag.sh
#
# Renders the gallery's 240-frame camera path at 4K with 8K BC7/BC5 materials,
# --materials 64 at a 512 MiB texture budget (the pool fragments as textures grow
# and shrink through the camera cuts), without PNGs, three times: defragmentation
# off (--defrag-budget 0), the default (32 MiB per frame) and 256 MiB per frame.
# Each run writes $OUT/<run>/report.json and a log; the summary at the end is each
# report's summary line (its "defrag:" part: passes, MiB moved, fragmentation
# failures and deferrals) and the per-frame GPU time of the frames that moved
# images (the copies run in the frame's command buffer, after the scene pass).
set -euo pipefail

BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
COMMON=(--size 3840x2160 --texture-size 8192 --textures bc --frames 240
    --materials 64 --texture-budget 512MiB --png-every 0)
mkdir -p "$OUT"

for run in "off 0" "default 32MiB" "large 256MiB"; do
    set -- $run
    name=$1
    echo "== $name: $BIN ${COMMON[*]} --defrag-budget $2"
    mkdir -p "$OUT/$name"
    "$BIN" "${COMMON[@]}" --defrag-budget "$2" --out "$OUT/$name" \
        >"$OUT/$name/log.txt" 2>&1 || echo "== $name FAILED; see $OUT/$name/log.txt"
done

echo
echo "== summary"
for name in off default large; do
    f="$OUT/$name/report.json"
    [[ -f "$f" ]] || continue
    python3 - "$f" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[2] + ": " + r["summary"])
moving = [f for f in r["frames"] if f.get("defrag_bytes_moved", 0) > 0]
if moving:
    gpu = sorted(f["gpu_total_ms"] for f in moving)
    mib = sum(f["defrag_bytes_moved"] for f in moving) / 2**20
    print(f"  {len(moving)} frames moved {mib:.1f} MiB; their GPU ms median {gpu[len(gpu)//2]:.2f}, max {gpu[-1]:.2f}")
PY
done
