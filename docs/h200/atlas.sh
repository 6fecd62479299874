#!/usr/bin/env bash
# Issue 7: what a page atlas's sampling alone costs in PSNR on the H200
# (--tune atlas-emulation=MODE, BENCHMARKS.md "What a page atlas's sampling
# alone would cost"). Every level resident, 4K, 16 materials, 8K BC maps; the
# emulation against the sampler's own render of the same shading.
#
#   OUT=/some/dir bash docs/h200/atlas.sh                     # visibility: modes 3 and 1, about 3 min
#   OUT=/some/dir SHADINGS="visibility forward" bash docs/h200/atlas.sh
#   OUT=/some/dir MODES="3" ANISO=1 bash docs/h200/atlas.sh
#   A local dry run (a lavapipe with non-uniform indexing): SIZE=320x180 TEX=512 TEXTURES=rgba8 FRAMES=20
#   (with ANISO=0: lavapipe's textureQueryLod counts anisotropy its sampler does not
#   filter, so its forward pass at 4x draws 26 dB; 46 dB without.)
#
# Run from the repository root with a release demo binary at ./bin/demo-renderer
# (and the loader's .gl/ packages the device README names). Modes: 1 the
# specification's level of detail in the compute pass (the forward pass always
# takes the sampler's, textureQueryLod), 2 the same with the coarser sample's
# gradients doubled, 3 the sampler's level of detail from the level probe.
set -uo pipefail
BIN=${BIN:-./bin/demo-renderer}
OUT=${OUT:?set OUT to the output directory}
mkdir -p "$OUT"
C=(--size "${SIZE:-3840x2160}" --texture-size "${TEX:-8192}" --textures "${TEXTURES:-bc}" --frames "${FRAMES:-240}" --no-validation
   --streaming off --texture-budget 16GiB --anisotropy "${ANISO:-4}")
for shading in ${SHADINGS:-visibility}; do
    ref=/tmp/atlas-ref-$shading
    "$BIN" "${C[@]}" --shading "$shading" --png-every 1 --out "$ref" >"$OUT/ref_$shading.txt" 2>&1
    echo "== reference $shading (exit $?)"
    modes=${MODES:-3 1}
    [[ "$shading" == forward ]] && modes=1
    for m in $modes; do
        "$BIN" "${C[@]}" --tune "atlas-emulation=$m" --shading "$shading" --png-every 0 \
            --compare "$ref" --out "/tmp/atlas-$shading-$m" >"$OUT/${shading}_$m.txt" 2>&1
        echo "$shading mode $m: $(tail -n 1 "$OUT/${shading}_$m.txt" | grep -o 'PSNR[^;]*')"
        cp "/tmp/atlas-$shading-$m/report.json" "$OUT/${shading}_$m.json"
    done
    rm -rf "$ref"
done
