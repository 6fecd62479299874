//! Human- and tool-facing forms of the statistics: the JSON dump and the
//! text summary. Plain functions over plain data, so any UI can draw them.
//!
//! # The JSON dump (`Allocator::to_json`), schema version 2
//! One object:
//! - `schema`: `"vkalloc-dump"`; `schema_version`: `2` (see
//!   [`crate::snapshot::SCHEMA_VERSION`]; readers refuse other versions).
//! - `frame`: the caller's frame number, or `null`; `allocator_frame`: the
//!   allocator's frame counter (`Allocator::begin_frame` calls), which ages
//!   are counted against.
//! - `statistics`: the cheap counters ([`Statistics`]): `total`, `heaps` (each
//!   with `index`, `size`, `device_local`, `usage` (ours) and `budget`
//!   (`block_bytes`, `budget`, `usage` (the whole process's), `from_driver`:
//!   whether `VK_EXT_memory_budget` gave them)), `types`, `pools`,
//!   `device_memory_objects`, `device_memory_allocations_total` and
//!   `device_memory_frees_total` (running totals of `vkAllocateMemory` calls
//!   and releases), `corruptions_detected`.
//! - `lists`: one per block list that holds a block: `memory_type`, `heap`,
//!   `flags` (`VkMemoryPropertyFlags` bits), `pool` (name or `null`),
//!   `pool_budget`, and `blocks`, each with `id` and `generation` (equal in
//!   two dumps of one process: the block did not change), `size`, `dedicated`, `mapped`,
//!   `allocation_count`, `allocation_bytes`, `free_range_count`,
//!   `largest_free`, `fragmentation` (`1 - largest_free / total_free`),
//!   `free_ranges` (`[offset, size]` pairs) and `allocations`: one record per
//!   live allocation with `offset`, `size`, `kind` (`linear`, `optimal` or
//!   `unknown`: the layout class), `tag` (or `null`), `dedicated`,
//!   `age_frames` (or `null` where unknown), `made_in_frame` (the allocator
//!   frame it was made in, where known) and `aliases` (alias group members,
//!   when there are any).
//! - `largest_free`, `free_range_count`, `free_bytes`: over all blocks.
//!
//! Sizes and offsets are bytes. Version 1 had no `schema_version` (it had
//! `version: 1`), no `heap`/`flags`/`pool_budget` per list and no
//! `dedicated`/`age_frames` per allocation. Fields added within version 2
//! (`allocator_frame`, block `id`/`generation`, `made_in_frame`, the
//! `device_memory_*_total` counters) read as 0 or absent from older dumps.

#![forbid(unsafe_code)]

use serde::Serialize;

use crate::snapshot::{Snapshot, SCHEMA_VERSION};
use crate::stats::{format_bytes, DetailedStatistics, Statistics};

/// The dump's schema name.
pub const DUMP_SCHEMA: &str = "vkalloc-dump";
/// The dump's schema version; bumped on any incompatible change.
pub const DUMP_VERSION: u32 = SCHEMA_VERSION;

#[derive(Serialize)]
struct Dump<'a> {
    schema: &'static str,
    schema_version: u32,
    #[serde(flatten)]
    snapshot: &'a Snapshot,
}

/// The JSON dump of detailed statistics (schema above).
pub fn to_json(details: &DetailedStatistics) -> String {
    snapshot_to_json(&Snapshot::from_details(details.clone()))
}

/// The JSON dump of a snapshot (schema above).
pub fn snapshot_to_json(snapshot: &Snapshot) -> String {
    serde_json::to_string_pretty(&Dump {
        schema: DUMP_SCHEMA,
        schema_version: DUMP_VERSION,
        snapshot,
    })
    .expect("statistics are plain data and always serialize")
}
/// A text summary: one line per heap, memory type and pool in use.
pub fn summary(stats: &Statistics) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let t = &stats.total;
    let _ = writeln!(
        out,
        "vkalloc: {} allocations, {} in {} blocks of {} ({} dedicated), {} device memory objects",
        t.allocation_count,
        format_bytes(t.allocation_bytes),
        t.block_count,
        format_bytes(t.block_bytes),
        t.dedicated_count,
        stats.device_memory_objects
    );
    for h in &stats.heaps {
        let _ = writeln!(
            out,
            "  heap {}{}: {} of {} ({} by us), budget {}{}",
            h.index,
            if h.device_local {
                " (device-local)"
            } else {
                ""
            },
            format_bytes(h.budget.usage),
            format_bytes(h.size),
            format_bytes(h.usage.block_bytes),
            format_bytes(h.budget.budget),
            if h.budget.from_driver {
                ""
            } else {
                " (estimated)"
            }
        );
    }
    for ty in stats.types.iter().filter(|ty| ty.usage.block_count > 0) {
        let _ = writeln!(
            out,
            "  type {} [{:?}] heap {}: {} allocations, {} used of {} in {} blocks",
            ty.index,
            ty.flags,
            ty.heap,
            ty.usage.allocation_count,
            format_bytes(ty.usage.allocation_bytes),
            format_bytes(ty.usage.block_bytes),
            ty.usage.block_count
        );
    }
    for p in &stats.pools {
        let _ = writeln!(
            out,
            "  pool '{}' (type {}): {} allocations, {} used of {} committed{}",
            p.name,
            p.memory_type,
            p.usage.allocation_count,
            format_bytes(p.usage.allocation_bytes),
            format_bytes(p.usage.block_bytes),
            p.budget
                .map(|b| format!(", budget {}", format_bytes(b)))
                .unwrap_or_default()
        );
    }
    let d = &stats.defragmentation;
    if d.passes > 0 {
        let _ = writeln!(
            out,
            "  defragmentation: {} passes, {} moved in {} moves ({} cancelled), {} blocks ({}) freed",
            d.passes,
            format_bytes(d.bytes_moved),
            d.allocations_moved,
            d.moves_cancelled,
            d.blocks_freed,
            format_bytes(d.bytes_freed)
        );
    }
    out
}
