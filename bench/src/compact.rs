//! `--defrag`: compacting vkalloc at the end of a trace, before the final
//! frees, with its defragmentation ([`DefragAlgorithm::Full`], passes until
//! one finds nothing to move; up to [`PASS_BYTES`] and [`PASS_MOVES`] a
//! pass).
//!
//! [`compact`] runs the passes over any kind of held resource; the caller
//! says how a pass's moves are performed. On a Vulkan device
//! ([`crate::contenders::ours::Ours`]) every movable allocation is wrapped in
//! a `VkBuffer` bound over its bytes and the moves are done with
//! `Allocator::perform_moves` (copies on the GPU, new buffers bound at the
//! destinations); on a simulated device ([`commit_all`]) the moves are just
//! committed.

use std::collections::HashMap;

use vkalloc::device::MemoryDevice;
use vkalloc::{
    Allocation, AllocationId, Allocator, DefragAlgorithm, DefragDesc, Defragmentation, Move,
};

/// Passes after which a session is ended even if the last one still moved
/// something (Full compaction converges long before).
pub const MAX_PASSES: u64 = 1000;

/// Wall time after which [`compact`] ends the session after the current
/// pass, complete or not (a pass's planning is slow with ~100,000 small
/// allocations: see BENCHMARKS.md).
pub const TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Bytes a pass may move: one submission of copies.
pub const PASS_BYTES: u64 = 256 << 20;

/// Moves a pass may hand out.
pub const PASS_MOVES: u32 = 4096;

/// What the compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactStats {
    /// Passes run.
    pub passes: u64,
    /// Bytes moved (committed moves).
    pub bytes_moved: u64,
    /// Allocations moved.
    pub allocations_moved: u64,
    /// Moves handed out but not committed.
    pub moves_cancelled: u64,
    /// Blocks released.
    pub blocks_freed: u64,
    /// Live allocations left out because they could not be moved (pinned;
    /// dedicated ones are not counted: they are never moved).
    pub pinned: u64,
    /// Whether the last pass found nothing to move (false: stopped by
    /// [`MAX_PASSES`] or [`TIME_LIMIT`]).
    pub complete: bool,
}

/// Runs a Full defragmentation session on `allocator` over the resources in
/// `live` (any slot may be empty), until a pass finds nothing to move or
/// [`MAX_PASSES`] or [`TIME_LIMIT`], then [`Allocator::trim`]s (kept empty blocks and
/// recycled dedicated memory are freed). For each pass, `perform` gets the moves paired with their
/// resources (taken out of `live`) and returns the resources to keep (moved
/// or not), which go back to the slots they came from.
///
/// # Errors
/// A defragmentation error, a move whose allocation is not in `live`, or
/// what `perform` returned (resources it did not return are lost).
pub fn compact<D, T>(
    allocator: &Allocator<D>,
    live: &mut [Option<T>],
    id_of: impl Fn(&T) -> AllocationId,
    mut perform: impl FnMut(&mut Defragmentation, Vec<(Move, T)>) -> Result<Vec<T>, String>,
) -> Result<CompactStats, String>
where
    D: MemoryDevice,
{
    let slot_of: HashMap<AllocationId, usize> = live
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.as_ref().map(|t| (id_of(t), i)))
        .collect();
    let desc = DefragDesc::default()
        .with_algorithm(DefragAlgorithm::Full)
        .with_pass_limits(PASS_BYTES, PASS_MOVES);
    let mut session = allocator
        .begin_defragmentation(&desc)
        .map_err(|e| format!("begin_defragmentation: {e}"))?;
    let mut result = Ok(());
    let mut complete = false;
    let start = std::time::Instant::now();
    for _ in 0..MAX_PASSES {
        if start.elapsed() > TIME_LIMIT {
            break;
        }
        let moves = match session.begin_pass(allocator) {
            Ok(m) => m,
            Err(e) => {
                result = Err(format!("begin_pass: {e}"));
                break;
            }
        };
        let mut pairs = Vec::with_capacity(moves.len());
        for mv in moves {
            match slot_of.get(&mv.id()).and_then(|&i| live[i].take()) {
                Some(t) => pairs.push((mv, t)),
                None => drop(mv), // not ours to move: cancelled
            }
        }
        if !pairs.is_empty() {
            match perform(&mut session, pairs) {
                Ok(kept) => {
                    for t in kept {
                        if let Some(&i) = slot_of.get(&id_of(&t)) {
                            live[i] = Some(t);
                        }
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        match session.end_pass(allocator) {
            Ok(report) if report.complete => {
                complete = true;
                break;
            }
            Ok(_) => {}
            Err(e) => {
                result = Err(format!("end_pass: {e}"));
                break;
            }
        }
    }
    let stats = session
        .end(allocator)
        .map_err(|e| format!("end of defragmentation: {e}"))?;
    result?;
    // Defragmentation releases the blocks it empties above each list's
    // `keep_empty_blocks`; the kept empty blocks and the freed dedicated
    // memory kept for reuse (the recycle bin) stay committed until trimmed.
    allocator.trim();
    Ok(CompactStats {
        passes: stats.passes,
        bytes_moved: stats.bytes_moved,
        allocations_moved: stats.allocations_moved,
        moves_cancelled: stats.moves_cancelled,
        blocks_freed: stats.blocks_freed,
        pinned: 0,
        complete,
    })
}

/// A `perform` for [`compact`] that commits every move without copying
/// anything: for a simulated device, where there are no contents.
pub fn commit_all<D: MemoryDevice>(
    allocator: &Allocator<D>,
) -> impl FnMut(&mut Defragmentation, Vec<(Move, Allocation)>) -> Result<Vec<Allocation>, String> + '_
{
    move |session, pairs| {
        Ok(pairs
            .into_iter()
            .map(|(mv, old)| match session.commit(allocator, mv, old) {
                Ok(new) => new,
                Err(e) => e.into_parts().1,
            })
            .collect())
    }
}
