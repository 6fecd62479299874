#!/usr/bin/env bash
# Threads figures on the H200 (issue 9 item 5, issue 37): alloc+free pairs
# per second and committed MiB with 1, 2, 4, 8, 16 threads, in two
# workloads: `upload` (each thread keeps 64 live host-visible buffers of
# 256 B..1 MiB) and `device` (261 device-local buffers of 64 KiB..16 MiB,
# ~750 MiB, over all the threads), replacing one at a time; vkalloc vs VMA
# (vk-mem, internally synchronised) vs gpu-allocator behind a Mutex; every
# thread in one memory type (`type`) and a pool per thread (`pools`).
#
# Run from the repository root with a release bench binary at ./bin/bench
# (cargo build --release -p bench && cp target/release/bench bin/):
#
#   OUT=/some/dir docs/h200/threads.sh          # about 10 min (REPS=3: 6)
#
# Writes $OUT/threads-device.md (the NVIDIA driver: all three allocators) and
# $OUT/threads-sim.md (vkalloc alone on the simulated H200 table: no driver
# under it), each a table per mode: the median pairs/s (min..max) of REPS
# runs of SECONDS each, ours vs its 1-thread figure, and vma/ours,
# gpu-allocator/ours, the slowest..fastest thread's pairs/s, and each
# allocator's committed MiB (once the sets are filled -> at the window's end)
# and live MiB. The goals: ours at 8 threads >= 4x ours at 1 thread and
# >= 3x VMA at 8 threads, growing with threads; in `device`, `type`, ours'
# committed at the end with T threads <= 1.2x ours with 1 thread.
set -euo pipefail

BIN=${BIN:-./bin/bench}
OUT=${OUT:?set OUT to the output directory}
REPS=${REPS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-1}
THREADS=${THREADS:-1,2,4,8,16}
mkdir -p "$OUT"

# The real driver, not lavapipe.
unset VK_DRIVER_FILES VK_ICD_FILENAMES || true

nproc | sed 's/^/hardware threads: /' | tee "$OUT/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | tee -a "$OUT/machine.txt" || true

echo "== device: $BIN threads --threads $THREADS --reps $REPS --seconds $SECONDS_PER_RUN"
"$BIN" threads --threads "$THREADS" --reps "$REPS" --seconds "$SECONDS_PER_RUN" \
    2>&1 | tee "$OUT/threads-device.md"

echo "== simulated device: $BIN threads --sim --threads $THREADS --reps $REPS --seconds $SECONDS_PER_RUN"
"$BIN" threads --sim --threads "$THREADS" --reps "$REPS" --seconds "$SECONDS_PER_RUN" \
    2>&1 | tee "$OUT/threads-sim.md"
