//! Incremental defragmentation: moving live allocations so that blocks
//! empty out and can be released.
//!
//! A session ([`crate::Allocator::begin_defragmentation`]) runs passes. Each
//! pass ([`Defragmentation::begin_pass`]) hands out [`Move`]s: a source
//! allocation, named by its [`crate::AllocationId`], and a reserved
//! destination. For each move the caller copies the contents (on the GPU:
//! see `vk::defrag` for buffer and image copies), creates and binds a new
//! resource at the destination, then [`Defragmentation::commit`]s the move,
//! handing over the *old* allocation and receiving the new one (same id).
//! [`Defragmentation::end_pass`] then frees the old ranges, releases blocks
//! that became empty, and frees the destinations of moves not committed.
//! Repeat until a pass reports [`PassReport::complete`].
//!
//! ```
//! use vkalloc::sim::{tables, SimDevice};
//! use vkalloc::{
//!     AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, DefragAlgorithm, DefragDesc,
//!     MemoryUsage,
//! };
//!
//! let allocator = Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default())?;
//! let desc = AllocationDesc {
//!     size: 64 << 10,
//!     options: AllocationOptions::usage(MemoryUsage::GpuOnly),
//!     ..AllocationDesc::default()
//! };
//! let all = (0..64).map(|_| allocator.allocate(&desc)).collect::<Result<Vec<_>, _>>()?;
//! let mut kept = Vec::new();
//! for (i, a) in all.into_iter().enumerate() {
//!     if i % 2 == 0 { allocator.free(a)?; } else { kept.push(a); } // holes
//! }
//! let full = DefragDesc::default().with_algorithm(DefragAlgorithm::Full);
//! let mut defrag = allocator.begin_defragmentation(&full)?;
//! loop {
//!     for mv in defrag.begin_pass(&allocator)? {
//!         let i = kept.iter().position(|a| a.id() == mv.id()).expect("a live allocation");
//!         let old = kept.swap_remove(i);
//!         // Copy `mv.source()` to `mv.destination()` and bind a new resource there.
//!         kept.push(defrag.commit(&allocator, mv, old)?);
//!     }
//!     if defrag.end_pass(&allocator)?.complete {
//!         break;
//!     }
//! }
//! let stats = defrag.end(&allocator)?;
//! assert!(stats.allocations_moved > 0); // compacted toward offset 0
//! for a in kept {
//!     allocator.free(a)?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Typed so misuse does not compile or is refused:
//! - a [`Move`] is consumed by `commit` (or [`Defragmentation::cancel`]), so
//!   it can't be committed twice;
//! - the old allocation is handed over at commit and freed only when the
//!   pass ends, so it can't be freed before (the GPU may still read it);
//! - a commit with another allocation than the move's source is refused
//!   with a [`CommitError`] handing both back;
//! - `end_pass` with no pass begun is [`DefragError::NoPassBegun`].
//!
//! A second commit of one move does not compile (the move was consumed):
//!
//! ```compile_fail
//! # use vkalloc::{Allocation, Allocator, Defragmentation, Move};
//! # fn twice<D: vkalloc::device::MemoryDevice>(
//! #     allocator: &Allocator<D>, defrag: &mut Defragmentation, mv: Move, a: Allocation, b: Allocation,
//! # ) {
//! let _ = defrag.commit(allocator, mv, a);
//! let _ = defrag.commit(allocator, mv, b);
//! # }
//! ```
//!
//! What is never moved: dedicated allocations, linear pools (skipped; naming
//! one in [`DefragDesc::pools`] is [`DefragError::LinearPool`]), alias
//! groups, and allocations marked not movable with
//! [`crate::Allocator::set_movable`] (pins take effect at the next
//! `begin_pass`). With [`DefragAlgorithm::Fast`] a block holding a pinned
//! allocation is skipped as a source, since it can't be emptied.
//!
//! Threads: other threads may allocate and free during a pass. Freeing a
//! move's source cancels the move: a commit can then only be offered
//! another allocation and is refused with [`CommitErrorKind::SourceFreed`];
//! the destination is freed at the end of the pass. The GPU must be done
//! with the source before it is freed, as for any free.

#![forbid(unsafe_code)]

use crate::allocation::{Allocation, AllocationId, ListRef, Location};
use crate::desc::ResourceKind;
use crate::device::DeviceMemory;
use crate::pool::PoolId;
use crate::stats::DefragStats;

/// Where moves go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub enum DefragAlgorithm {
    /// Empty the emptiest blocks into the holes of fuller ones; blocks
    /// holding a pinned allocation are left alone. Few moves per block freed.
    #[default]
    Fast,
    /// Compaction: everything moves toward the fullest blocks and, inside a
    /// block, toward lower offsets. More moves; the fewest blocks.
    Full,
    /// Opens one free range of at least `bytes`, its start aligned to
    /// `alignment` (a power of two; 0 or 1: none), in some block: of the
    /// windows of that size, the one holding the fewest bytes of movable
    /// allocations is emptied into free ranges outside it. For a caller
    /// whose request fits the free bytes but no free range (a texture
    /// streamer's grow under a hard pool budget). A pass moves nothing when
    /// such a range is free already, or when every window holds an
    /// allocation that can't move (pinned, or larger than a pass may move)
    /// or no room outside it; a window costlier than a pass's limits is
    /// emptied over several passes. Buffer-image granularity between the
    /// opened range and its neighbours is not accounted for: ask for a
    /// granularity more where kinds mix.
    Room {
        /// Bytes the free range must hold.
        bytes: u64,
        /// Alignment of its start.
        alignment: u64,
    },
}

/// What a defragmentation session may touch and how much a pass may move.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DefragDesc {
    /// The algorithm.
    pub algorithm: DefragAlgorithm,
    /// Bytes a pass may move (each move's range counts whole).
    pub max_bytes_per_pass: u64,
    /// Moves a pass may hand out.
    pub max_allocations_per_pass: u32,
    /// Memory types whose default blocks and pools are defragmented (bit i:
    /// type i).
    pub memory_types: u32,
    /// Whether memory types' default blocks are defragmented.
    pub default_blocks: bool,
    /// The pools to defragment: `None` for every TLSF pool (linear pools are
    /// skipped); `Some` names them, and naming a linear pool is an error.
    pub pools: Option<Vec<PoolId>>,
}

impl Default for DefragDesc {
    fn default() -> Self {
        Self {
            algorithm: DefragAlgorithm::Fast,
            max_bytes_per_pass: 64 << 20,
            max_allocations_per_pass: 256,
            memory_types: u32::MAX,
            default_blocks: true,
            pools: None,
        }
    }
}

impl DefragDesc {
    /// The same description with `algorithm`.
    pub fn with_algorithm(self, algorithm: DefragAlgorithm) -> Self {
        Self { algorithm, ..self }
    }

    /// The same description with per-pass limits.
    pub fn with_pass_limits(self, bytes: u64, allocations: u32) -> Self {
        Self {
            max_bytes_per_pass: bytes,
            max_allocations_per_pass: allocations,
            ..self
        }
    }

    /// The same description restricted to `memory_types` (a bit mask).
    pub fn with_memory_types(self, memory_types: u32) -> Self {
        Self {
            memory_types,
            ..self
        }
    }

    /// The same description defragmenting only `pools` (and no default
    /// blocks).
    pub fn only_pools(self, pools: Vec<PoolId>) -> Self {
        Self {
            pools: Some(pools),
            default_blocks: false,
            ..self
        }
    }
}

/// Why a session or pass call was refused. Nothing changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DefragError {
    /// [`Defragmentation::end_pass`] with no pass begun.
    #[error("no defragmentation pass was begun")]
    NoPassBegun,
    /// [`Defragmentation::begin_pass`] while a pass is open: end it first.
    #[error("a defragmentation pass is already open")]
    PassOpen,
    /// The session belongs to another allocator.
    #[error("the defragmentation session belongs to another allocator")]
    ForeignAllocator,
    /// A pool named in [`DefragDesc::pools`] does not exist.
    #[error("pool {0:?} does not exist")]
    UnknownPool(PoolId),
    /// A pool named in [`DefragDesc::pools`] uses the linear algorithm,
    /// whose allocations can't move (they are freed in order or at once).
    #[error("pool {0:?} is linear and can't be defragmented")]
    LinearPool(PoolId),
}

/// One move of a pass: copy `size` bytes from the source place to the
/// destination place, bind a new resource at the destination, then
/// [`Defragmentation::commit`] it. Consumed by the commit, so it can't be
/// committed twice; dropping it cancels it.
#[derive(Debug)]
#[must_use = "a move is committed or cancelled; dropping it cancels it"]
pub struct Move {
    pub(crate) session: u64,
    pub(crate) pass: u64,
    pub(crate) index: usize,
    pub(crate) id: AllocationId,
    pub(crate) size: u64,
    pub(crate) memory_type: u32,
    pub(crate) kind: ResourceKind,
    pub(crate) pool: Option<PoolId>,
    pub(crate) source_memory: DeviceMemory,
    pub(crate) source_offset: u64,
    pub(crate) dest_memory: DeviceMemory,
    pub(crate) dest_offset: u64,
}

impl Move {
    /// The id of the allocation to move (see [`crate::Allocation::id`]).
    pub fn id(&self) -> AllocationId {
        self.id
    }

    /// Bytes to copy (the allocation's size).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The memory type (moves never change it).
    pub fn memory_type(&self) -> u32 {
        self.memory_type
    }

    /// The resource kind.
    pub fn kind(&self) -> ResourceKind {
        self.kind
    }

    /// The pool, if the allocation is in one.
    pub fn pool(&self) -> Option<PoolId> {
        self.pool
    }

    /// The source's memory and offset (where the old resource is bound).
    pub fn source(&self) -> (DeviceMemory, u64) {
        (self.source_memory, self.source_offset)
    }

    /// The destination's memory and offset: bind the new resource there.
    pub fn destination(&self) -> (DeviceMemory, u64) {
        (self.dest_memory, self.dest_offset)
    }
}

/// Why a commit was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommitErrorKind {
    /// The allocation handed over is not the move's source.
    #[error("the allocation is not the move's source")]
    WrongAllocation,
    /// The move's source was freed during the pass: the move is void.
    #[error("the move's source was freed during the pass")]
    SourceFreed,
    /// The move belongs to another session or an ended pass.
    #[error("the move belongs to another session or an ended pass")]
    StalePass,
}

/// A refused commit: the move and the allocation come back unchanged.
#[derive(Debug, thiserror::Error)]
#[error("{kind}")]
pub struct CommitError {
    /// Why.
    pub kind: CommitErrorKind,
    /// The move and the allocation (boxed: the error stays small).
    pub(crate) parts: Box<(Move, Allocation)>,
}

impl CommitError {
    /// The move and the allocation, handed back.
    pub fn into_parts(self) -> (Move, Allocation) {
        *self.parts
    }
}

/// What a pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PassReport {
    /// Moves the pass handed out.
    pub moves: u64,
    /// What the pass did (`passes` is 1).
    pub stats: DefragStats,
    /// Whether the pass found nothing to move: the session is done.
    pub complete: bool,
}

/// One planned move, inside the session.
#[derive(Debug)]
pub(crate) struct Record {
    pub list: ListRef,
    pub source: Location,
    pub id: u64,
    pub size: u64,
    pub source_memory: DeviceMemory,
    pub source_offset: u64,
    pub dest_location: Location,
    /// The destination until it is handed over by a commit.
    pub dest: Option<Allocation>,
    /// The source, once handed over by a commit; freed when the pass ends.
    pub old: Option<Allocation>,
}

/// Passes given up by dropped sessions, each its records, waiting for the
/// allocator to end them (shared by the allocator and its sessions).
pub(crate) type Abandoned = std::sync::Arc<parking_lot::Mutex<Vec<Vec<Record>>>>;

/// A defragmentation session, kept by the caller across frames (it does
/// not borrow the allocator; each call takes it).
///
/// End it with [`Self::end`]. Dropping it is allowed at any point and
/// leaves nothing behind: a session dropped with a pass open gives the
/// pass up, and the allocator ends it as [`Self::end_pass`] would at its
/// next [`crate::Allocator::begin_frame`], [`crate::Allocator::trim`],
/// [`crate::Allocator::begin_defragmentation`], any session's
/// [`Self::begin_pass`], [`crate::Allocator::leaks`],
/// [`crate::Allocator::destroy_pool`] or teardown: the old
/// allocations handed over at [`Self::commit`] and the destinations of the
/// moves not committed are freed, every planning mark is cleared, and the
/// committed moves count in [`crate::stats::Statistics::defragmentation`]. As
/// before `end_pass`, the GPU must be done with the pass's copies when the
/// session is dropped. A session that outlives its allocator drops its
/// records with it (the allocator's teardown has freed their memory).
#[derive(Debug)]
#[must_use = "a defragmentation session does nothing until passes are run"]
pub struct Defragmentation {
    pub(crate) allocator: u32,
    pub(crate) session: u64,
    pub(crate) desc: DefragDesc,
    pub(crate) stats: DefragStats,
    pub(crate) pass: u64,
    pub(crate) open: Option<Vec<Record>>,
    /// Where a dropped open pass goes, for the allocator to end.
    pub(crate) abandoned: Abandoned,
}

impl Defragmentation {
    /// The session's totals so far.
    pub fn statistics(&self) -> DefragStats {
        self.stats
    }

    /// The description the session runs with.
    pub fn desc(&self) -> &DefragDesc {
        &self.desc
    }

    /// Whether a pass is open.
    pub fn pass_open(&self) -> bool {
        self.open.is_some()
    }

    /// Gives a move up: its destination is freed when the pass ends and the
    /// source stays where it is. Same as dropping it.
    pub fn cancel(&mut self, mv: Move) {
        drop(mv);
    }
}

impl Drop for Defragmentation {
    fn drop(&mut self) {
        if let Some(records) = self.open.take() {
            log::debug!(
                "vkalloc: defragmentation session dropped with a pass open ({} moves); the allocator ends the pass",
                records.len()
            );
            self.abandoned.lock().push(records);
        }
    }
}
