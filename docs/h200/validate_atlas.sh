#!/usr/bin/env bash
# Issue 7: the page atlas on the NVIDIA driver under the Khronos validation layer
# (synchronization validation on), BC maps. Carry Debian's vulkan-validationlayers
# .deb in .vl/ (apt-get download vulkan-validationlayers) besides the loader's .gl/
# and a release demo at ./bin/demo-renderer:
#
#   OUT=/some/dir bash docs/h200/validate_atlas.sh        # about 1 minute (bakes 16 materials first)
set -uo pipefail
OUT=${OUT:?set OUT to the output directory}
mkdir -p /opt/vl "$OUT" && dpkg -x .vl/*.deb /opt/vl
export VK_LAYER_PATH=/opt/vl/usr/share/vulkan/explicit_layer.d
export LD_LIBRARY_PATH=/opt/vl/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export VKALLOC_REQUIRE_VALIDATION=1
./bin/demo-renderer --size 1920x1080 --texture-size 8192 --textures bc --residency atlas --frames 120 \
    --texture-budget 256MiB --show-mips --png-every 60 --out /tmp/validate-atlas >"$OUT/v.log" 2>&1
echo "exit $?: $(grep -c 'Validation Error' "$OUT/v.log") validation errors"
grep -o 'SYNC-HAZARD-[A-Z-]*\|VUID-[A-Za-z0-9_-]*' "$OUT/v.log" | sort | uniq -c | head
tail -n 1 "$OUT/v.log" | cut -c1-400
