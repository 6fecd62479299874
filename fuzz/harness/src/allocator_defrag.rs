//! Defragmentation, pinning and alias groups on the simulated device: one
//! allocator on a GPU table picked by the input (small blocks, so that
//! passes have something to move), a pool and fragmentation to start from
//! (many allocations alike, every few freed), then a sequence that mixes, in
//! any order: allocations (sizes from a byte to blocks and beyond,
//! alignments, kinds, usages, TLSF and linear pools, dedicated policies,
//! created pinned, mapped) and more fragmentation, writes into mapped
//! memory, frees of any live allocation, `set_movable` / `is_movable`, alias
//! groups (and `set_movable` on them: pinning is fine, unpinning is
//! `InvalidAlias`), pool create / destroy / reset (also of a pool with moves
//! out), up to three defragmentation sessions at once with every algorithm
//! and fuzzed limits, memory types and pools: `begin_pass`, `commit` with
//! the right old allocation, with a wrong one, with a move of an ended pass
//! or of another session, through another allocator, `cancel`, dropped
//! moves, `is_cancelled`, `end_pass`, `end`, sessions dropped with a pass
//! open (the allocator ends such a pass at its next frame, trim, session,
//! pass, `leaks` or pool destruction); a move's source freed before its commit is tried, the allocation a
//! commit handed back freed before the pass ends, a source pinned while its
//! move is out; `trim`, `begin_frame`, statistics, detailed statistics,
//! `to_json`, `leaks`, `check_corruption`, and a snapshot refreshed in place
//! against a fresh one. `Op::Pass` runs a pass with an action per move, so
//! that those interleavings are common.
//!
//! After every operation: `validate()` holds (the per-block count of marked
//! records included), the simulated device saw no contract violation, the
//! total and per-pool allocation counts equal the shadow's (live
//! allocations and alias groups, plus one per move of an open pass: its
//! reserved destination or the old allocation handed over), no two live
//! ranges (allocations, alias groups, reserved destinations, old
//! allocations awaiting the end of their pass) overlap in one memory object
//! or put a linear and an optimal resource on one `bufferImageGranularity`
//! page, and every byte written to mapped memory reads back (a committed
//! move's contents are copied to the new place, as the GPU would). Each move
//! is checked against its source (size, type, kind, pool, place, alignment)
//! and against what may move (not pinned, not an alias group, not dedicated,
//! not in a linear pool, in a list the session asked for, not the source or
//! destination of another open move); each commit, refusal (its kind, both
//! parts handed back), `is_cancelled` and pass report against the shadow.
//! Passes of dropped sessions, when the allocator ends them, are checked as
//! ended passes (the allocator's totals grow by what they did). At the end
//! the sessions are ended, everything is freed and trimmed, and the
//! allocator's leak report (`destroy`) must be empty, the device holding no
//! memory.
//!
//! Not covered: threads (one thread drives it), shards other than the first
//! (opened under contention only), the GPU copy itself (`vk::defrag`),
//! failures of the device (no `FailurePlan`), heap budgets.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::handle::{kind, small_runs_from, Handle};
use crate::interpreter::{self, Target};
use crate::ops::{self, conflicts, Alloc, Key, Ranges, Sim};
use arbitrary::Arbitrary;
use vkalloc::sim::{tables, GpuTable, SimDevice};
use vkalloc::stats::{DefragStats, DetailedStatistics, Statistics};
use vkalloc::{
    AliasGroup, AliasRequirement, Allocation, AllocationDesc, AllocationOptions, Allocator,
    AllocatorDesc, CommitErrorKind, DedicatedPolicy, DefragAlgorithm, DefragDesc, DefragError,
    Defragmentation, Error, LinearMode, MemoryUsage, Move, PassInterval, PoolAlgorithm, PoolDesc,
    PoolId, ResourceKind, Snapshot,
};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Live allocations at most (more are not made: a pass over thousands of
/// allocations, validated after every operation, is slow).
const MAX_LIVE: usize = 192;
const MAX_GROUPS: usize = 16;
const MAX_SESSIONS: usize = 3;
const MAX_POOLS: usize = 6;
/// Moves of ended passes kept, to commit later (refused as stale).
const MAX_STALE_MOVES: usize = 8;
/// Bytes one write moves at most.
const MAX_IO: usize = 32;

fn note(event: &'static str) {
    crate::note(event);
}

// ---- The input ---------------------------------------------------------------

/// The target's input: a setup, then its operations (as the interpreter's
/// input, which it decodes the same as).
#[derive(Arbitrary, Debug)]
pub struct Input(interpreter::Input<Setup, Op>);

/// The allocator, a pool and the fragmentation to start from.
#[derive(Arbitrary, Debug)]
struct Setup {
    table: u8,
    /// Every heap's capacity: (n % 4 + 1) * 16 MiB, at most its size
    /// (mapped memory is host memory in the simulation).
    heap_capacity: u8,
    block_size: BlockSize,
    keep_empty_blocks: u8,
    /// Corruption margins around host-visible allocations: 0 (off), 16, 64.
    debug_margin: u8,
    recycle: bool,
    /// Runs of slots for small requests: from the first allocation, from a
    /// few, or at the default (which few inputs reach).
    small_runs: u8,
    /// A pool made first (the fills may name it).
    pool: Option<PoolReq>,
    /// Fragmentation to start from.
    prefill: Fill,
    prefill2: Option<Fill>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum BlockSize {
    K64,
    K256,
    M1,
    M4,
    Default,
    /// 4 KiB to 8 MiB.
    Pow2(u8),
}

impl BlockSize {
    fn get(self) -> u64 {
        match self {
            BlockSize::K64 => 64 * KIB,
            BlockSize::K256 => 256 * KIB,
            BlockSize::M1 => MIB,
            BlockSize::M4 => 4 * MIB,
            BlockSize::Default => 0,
            BlockSize::Pow2(e) => 1 << (12 + e % 12),
        }
    }
}

/// A byte count: mostly small next to a block, so that blocks hold many.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Size {
    Tiny(u8),
    Small(u16),
    /// 1/64 to 64/64 of the allocator's block size.
    OfBlock(u8),
    Pow2(u8),
    Any(u64),
}

impl Size {
    fn get(self, block: u64) -> u64 {
        match self {
            Size::Tiny(n) => n.into(),
            Size::Small(n) => n.into(),
            Size::OfBlock(n) => block / 64 * (u64::from(n % 64) + 1),
            Size::Pow2(e) => 1 << (e % 64),
            Size::Any(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Alignment {
    /// 1 to 64 KiB.
    Pow2(u8),
    Zero,
    /// Any power of two.
    Huge(u8),
    /// Mostly not a power of two: refused.
    Odd(u16),
}

impl Alignment {
    fn get(self) -> u64 {
        match self {
            Alignment::Pow2(e) => 1 << (e % 17),
            Alignment::Zero => 0,
            Alignment::Huge(e) => 1 << (e % 64),
            Alignment::Odd(n) => n.into(),
        }
    }
}

fn usage(n: u8) -> MemoryUsage {
    match n % 4 {
        0 => MemoryUsage::GpuOnly,
        1 => MemoryUsage::Upload,
        2 => MemoryUsage::Readback,
        _ => MemoryUsage::Transient,
    }
}

fn dedicated(n: u8) -> DedicatedPolicy {
    match n % 4 {
        0 | 3 => DedicatedPolicy::Auto,
        1 => DedicatedPolicy::Never,
        _ => DedicatedPolicy::Always,
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Req {
    size: Size,
    alignment: Alignment,
    kind: u8,
    usage: u8,
    /// Index into every pool id made so far (live or destroyed).
    pool: Option<u8>,
    dedicated: u8,
    mapped: bool,
    pinned: bool,
    tagged: bool,
    /// `memoryTypeBits`: all, or these.
    type_bits: Option<u32>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct MemberReq {
    size: Size,
    alignment: Alignment,
    kind: u8,
    first: u8,
    last: u8,
    type_bits: Option<u8>,
    tagged: bool,
}

#[derive(Arbitrary, Debug, Clone)]
struct AliasReq {
    /// The first 8 are used.
    members: Vec<MemberReq>,
    usage: u8,
    pool: Option<u8>,
    dedicated: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct PoolReq {
    usage: u8,
    block_size: BlockSize,
    min_blocks: u8,
    max_blocks: u8,
    /// 0-2: TLSF, 3: linear stack, 4: linear ring.
    algorithm: u8,
    /// A hard budget in 64 KiB steps.
    budget: Option<u8>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum AlgoReq {
    Fast,
    Full,
    Room { bytes: Size, alignment: Alignment },
}

#[derive(Arbitrary, Debug, Clone)]
struct DefragReq {
    algorithm: AlgoReq,
    max_bytes: Option<Size>,
    max_allocations: Option<u8>,
    /// Leaves memory type n % 32 out (`None`: every type).
    skip_type: Option<u8>,
    default_blocks: bool,
    /// `None`: every TLSF pool; `Some`: indices into every pool id made.
    pools: Option<Vec<u8>>,
}

impl DefragReq {
    /// A session over every memory type and pool, without limits.
    fn everything(algorithm: AlgoReq) -> DefragReq {
        DefragReq {
            algorithm,
            max_bytes: None,
            max_allocations: None,
            skip_type: None,
            default_blocks: true,
            pools: None,
        }
    }
}

/// What to do with a move of an open pass instead of committing it.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum GiveUp {
    Cancel,
    Drop,
    /// Keep it past the end of its pass, to commit later (stale).
    Keep,
}

/// Many allocations alike, then every few freed: fragmentation to work on.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Fill {
    count: u8,
    /// 1/256 to 32/256 of the block size.
    size: u8,
    /// 1 to 4 KiB.
    alignment: u8,
    kind: u8,
    usage: u8,
    pool: Option<u8>,
    mapped: bool,
    /// Frees every (n % 4 + 2)th.
    free_every: u8,
}

/// What [`Op::Pass`] does with one move of its pass.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum MoveAction {
    Commit,
    /// Commit, then free the allocation handed back (before the pass ends).
    CommitThenFree,
    /// Commit with another live allocation (refused), then leave it.
    CommitWrong(u16),
    /// Free the source, then offer another allocation (refused).
    FreeSourceThenCommit(u16),
    FreeSource,
    /// `set_movable(false)` on the source, then commit.
    PinThenCommit,
    GiveUp(GiveUp),
    IsCancelled,
    CommitForeign,
    /// Offer the move to another session, or a kept move to this one.
    CommitStale(bool),
    /// Reset the move's pool (if in a pool).
    ResetPool,
    Leave,
}

/// One operation of the input.
#[derive(Arbitrary, Debug, Clone)]
enum Op {
    /// A pass of a session (a new one with `algorithm` if `new_session` or
    /// none is open) with an action per move, in order (cycled); then ends the
    /// pass if `end`.
    Pass {
        session: u8,
        new_session: bool,
        algorithm: AlgoReq,
        actions: Vec<MoveAction>,
        end: bool,
    },
    Allocate(Req),
    Fill(Fill),
    Free {
        index: u16,
    },
    Write {
        index: u16,
        offset: u16,
        len: u8,
        byte: u8,
    },
    SetMovable {
        index: u16,
        movable: bool,
    },
    IsMovable {
        index: u16,
    },
    AllocateAlias(AliasReq),
    FreeAlias {
        index: u8,
    },
    SetMovableAlias {
        index: u8,
        movable: bool,
    },
    CreatePool(PoolReq),
    DestroyPool {
        index: u8,
    },
    ResetPool {
        index: u8,
    },
    FreeStale {
        index: u8,
    },
    BeginSession(DefragReq),
    BeginPass {
        session: u8,
    },
    /// Commits a move with its source.
    Commit {
        session: u8,
        index: u8,
    },
    /// Commits every move whose source is held.
    CommitAll {
        session: u8,
    },
    /// Commits a move with another live allocation: refused.
    CommitWrong {
        session: u8,
        index: u8,
        other: u16,
    },
    /// Commits a kept move of an ended pass (or another session's move) into
    /// a session: refused as stale.
    CommitStale {
        session: u8,
        index: u8,
        from_other_session: bool,
    },
    /// Commits a move through the other allocator: refused as stale.
    CommitForeign {
        session: u8,
        index: u8,
    },
    GiveUp {
        session: u8,
        index: u8,
        how: GiveUp,
    },
    IsCancelled {
        session: u8,
        index: u8,
        stale: bool,
    },
    /// Frees the source of a move of an open pass.
    FreeSource {
        session: u8,
        index: u8,
    },
    /// Frees the allocation a commit of an open pass handed back.
    FreeMoved {
        session: u8,
        index: u8,
    },
    EndPass {
        session: u8,
    },
    EndSession {
        session: u8,
    },
    DropSession {
        session: u8,
    },
    /// `begin_pass`, `end_pass` and `end` with the other allocator.
    ForeignSession {
        session: u8,
    },
    /// Passes with every move committed, until complete or `passes` ran;
    /// in a new session with `algorithm` if there is none.
    Run {
        session: u8,
        passes: u8,
        algorithm: AlgoReq,
    },
    Trim,
    BeginFrame,
    Statistics,
    DetailedStatistics,
    Json,
    Leaks,
    CheckCorruption,
    Snapshot,
}

// ---- The shadow ----------------------------------------------------------------

struct Live {
    handle: Handle,
    id: u64,
    /// The pool's index in `State::pools`.
    pool: Option<usize>,
    /// Pinned by the caller (`set_movable(false)` or made pinned): a
    /// property of the allocation, kept across moves (same id).
    pinned: bool,
    /// The alignment asked for (at least 1).
    alignment: u64,
    /// Bytes written, by offset in the allocation.
    written: BTreeMap<u64, u8>,
}

struct Group {
    group: AliasGroup,
    pool: Option<usize>,
}

struct PoolShadow {
    id: PoolId,
    live: bool,
    linear: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecState {
    /// Handed out; the source is live, held by the caller.
    Pending,
    /// Committed: the old allocation is handed over (its range stays until
    /// the pass ends), the destination is the caller's.
    Committed,
    /// The source was freed during the pass.
    SourceFreed,
}

/// One move of an open pass, as the shadow sees it.
#[derive(Clone, Debug)]
struct Rec {
    id: u64,
    /// Bytes (the allocation's size).
    size: u64,
    pool: Option<usize>,
    source: Key,
    dest: Key,
    state: RecState,
    /// Whether the allocator still counts it (a pool reset frees it).
    counted: bool,
}

struct OpenPass {
    records: Vec<Rec>,
    /// The moves not yet committed or given up, by record.
    moves: Vec<Option<Move>>,
    /// Moves given up but kept, to commit once the pass has ended.
    kept: Vec<Move>,
}

struct Session {
    defrag: Defragmentation,
    desc: DefragDesc,
    pass: Option<OpenPass>,
    /// What the session's ended passes reported, summed.
    stats: DefragStats,
}

struct State {
    sim: Sim,
    allocator: Alloc,
    other: Alloc,
    granularity: u64,
    block_size: u64,
    live: Vec<Live>,
    groups: Vec<Group>,
    /// Handles a pool reset freed (only ever freed, never touched).
    stale: Vec<Handle>,
    stale_groups: Vec<AliasGroup>,
    pools: Vec<PoolShadow>,
    sessions: Vec<Session>,
    /// The open passes of sessions dropped, until the allocator ends them.
    orphans: Vec<Vec<Rec>>,
    /// Passes of dropped sessions the allocator has ended.
    sessions_dropped_mid_pass: u64,
    /// Moves kept past their pass.
    stale_moves: Vec<Move>,
    /// Every range the allocator holds for us, by memory and offset.
    ranges: Ranges,
    /// What every ended pass reported, summed.
    defrag_totals: DefragStats,
    snapshot: Snapshot,
    /// The number of the operation running (from 1), for tags.
    ops: u64,
}

fn tables_list() -> [fn() -> GpuTable; 7] {
    [
        tables::lavapipe,
        tables::nvidia_h200,
        tables::nvidia_discrete,
        tables::intel_integrated,
        tables::mobile_tiler,
        tables::amd_discrete,
        tables::nvidia_discrete_rebar,
    ]
}

fn add_stats(total: &mut DefragStats, s: &DefragStats) {
    total.passes += s.passes;
    total.bytes_moved += s.bytes_moved;
    total.allocations_moved += s.allocations_moved;
    total.moves_cancelled += s.moves_cancelled;
    total.blocks_freed += s.blocks_freed;
    total.bytes_freed += s.bytes_freed;
}

impl State {
    fn new(setup: &Setup) -> Option<State> {
        let list = tables_list();
        let table = list[usize::from(setup.table) % list.len()]();
        let granularity = table.limits.buffer_image_granularity;
        let capacity = (u64::from(setup.heap_capacity % 4) + 1) * 16 * MIB;
        let heaps: Vec<u64> = table
            .memory_properties
            .heaps
            .iter()
            .map(|h| h.size)
            .collect();
        let mut builder = SimDevice::builder(table);
        for (heap, &size) in heaps.iter().enumerate() {
            builder = builder.heap_capacity(heap as u32, capacity.min(size));
        }
        let sim = Arc::new(builder.build());
        let mut desc = AllocatorDesc::default()
            .with_keep_empty_blocks(u32::from(setup.keep_empty_blocks % 3))
            .with_debug_margin(match setup.debug_margin % 3 {
                0 => 0,
                1 => 16,
                _ => 64,
            })
            .with_recycle_bytes(if setup.recycle { 8 * MIB } else { 0 })
            .with_small_runs_from(small_runs_from(setup.small_runs));
        let block_size = setup.block_size.get();
        if block_size != 0 {
            desc = desc.with_block_size(block_size);
        }
        let allocator = Allocator::new(Arc::clone(&sim), desc).ok()?;
        let other = Allocator::new(Arc::clone(&sim), AllocatorDesc::default()).ok()?;
        let block_size = if block_size == 0 {
            32 * MIB
        } else {
            block_size
        };
        Some(State {
            sim,
            allocator,
            other,
            granularity,
            block_size,
            live: Vec::new(),
            groups: Vec::new(),
            stale: Vec::new(),
            stale_groups: Vec::new(),
            pools: Vec::new(),
            sessions: Vec::new(),
            orphans: Vec::new(),
            sessions_dropped_mid_pass: 0,
            stale_moves: Vec::new(),
            ranges: Ranges::new(granularity),
            defrag_totals: DefragStats::default(),
            snapshot: Snapshot::default(),
            ops: 0,
        })
    }

    // ---- ranges ----

    fn claim(&mut self, key: Key, size: u64, kind: ResourceKind, what: &str) {
        self.ranges.claim(key, size, kind, what);
    }

    fn release(&mut self, key: Key) {
        self.ranges.release(key);
    }

    fn key(a: &Allocation) -> Key {
        ops::key(a)
    }

    // ---- indices ----

    fn live_index(&self, index: u16) -> Option<usize> {
        (!self.live.is_empty()).then(|| usize::from(index) % self.live.len())
    }

    fn pool_index(&self, index: u8) -> Option<usize> {
        (!self.pools.is_empty()).then(|| usize::from(index) % self.pools.len())
    }

    fn session_index(&self, index: u8) -> Option<usize> {
        (!self.sessions.is_empty()).then(|| usize::from(index) % self.sessions.len())
    }

    fn find_live(&self, id: u64) -> Option<usize> {
        self.live.iter().position(|l| l.id == id)
    }

    /// Every move of an open pass, and the orphans.
    fn records(&self) -> impl Iterator<Item = &Rec> {
        self.sessions
            .iter()
            .filter_map(|s| s.pass.as_ref())
            .flat_map(|p| p.records.iter())
            .chain(self.orphans.iter().flatten())
    }

    fn records_mut(&mut self) -> impl Iterator<Item = &mut Rec> {
        self.sessions
            .iter_mut()
            .filter_map(|s| s.pass.as_mut())
            .flat_map(|p| p.records.iter_mut())
            .chain(self.orphans.iter_mut().flatten())
    }

    // ---- operations ----

    fn apply(&mut self, op: Op) {
        match op {
            Op::Allocate(req) => self.allocate(req),
            Op::Pass {
                session,
                new_session,
                algorithm,
                actions,
                end,
            } => self.pass(session, new_session, algorithm, &actions, end),
            Op::Fill(fill) => self.fill(fill),
            Op::Free { index } => {
                if let Some(i) = self.live_index(index) {
                    self.free_live(i);
                }
            }
            Op::Write {
                index,
                offset,
                len,
                byte,
            } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let live = &mut self.live[i];
                let Handle::Mapped(m) = &mut live.handle else {
                    return;
                };
                let size = m.size();
                let len = (usize::from(len) % (MAX_IO + 1)) as u64;
                let offset = u64::from(offset) % size;
                let len = len.min(size - offset);
                let data: Vec<u8> = (0..len).map(|k| byte.wrapping_add(k as u8)).collect();
                m.write(offset, &data).expect("an in-bounds write");
                for (k, &b) in data.iter().enumerate() {
                    live.written.insert(offset + k as u64, b);
                }
            }
            Op::SetMovable { index, movable } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let id = self.live[i].id;
                match self
                    .allocator
                    .set_movable(self.live[i].handle.allocation(), movable)
                {
                    Ok(()) => {
                        if !movable && self.records().any(|r| r.id == id) {
                            note("pinned during a move");
                        }
                        self.live[i].pinned = !movable;
                    }
                    Err(e) => panic!("set_movable({movable}) of a live allocation: {e:?}"),
                }
            }
            Op::IsMovable { index } => {
                let Some(i) = self.live_index(index) else {
                    return;
                };
                let live = &self.live[i];
                let a = live.handle.allocation();
                let linear = live.pool.is_some_and(|p| self.pools[p].linear);
                let expected = !a.is_dedicated() && !linear && !live.pinned;
                assert_eq!(
                    self.allocator.is_movable(a),
                    expected,
                    "is_movable of allocation {} (dedicated {}, linear pool {linear}, pinned {})",
                    live.id,
                    a.is_dedicated(),
                    live.pinned
                );
                assert!(!self.other.is_movable(a), "movable in another allocator");
            }
            Op::AllocateAlias(req) => self.allocate_alias(&req),
            Op::FreeAlias { index } => {
                if self.groups.is_empty() {
                    return;
                }
                let g = self
                    .groups
                    .swap_remove(usize::from(index) % self.groups.len());
                self.release(Self::key(g.group.allocation()));
                if let Err(e) = self.allocator.free_alias_group(g.group) {
                    panic!("free_alias_group: {:?}", e.error());
                }
            }
            Op::SetMovableAlias { index, movable } => {
                if self.groups.is_empty() {
                    return;
                }
                let g = &self.groups[usize::from(index) % self.groups.len()];
                let a = g.group.allocation();
                match self.allocator.set_movable(a, movable) {
                    Ok(()) => assert!(!movable, "an alias group's allocation was made movable"),
                    Err(Error::InvalidAlias(_)) => {
                        note("set_movable(true) on an alias group refused");
                        assert!(movable, "pinning an alias group was refused")
                    }
                    Err(e) => panic!("set_movable on an alias group: unexpected {e:?}"),
                }
                assert!(!self.allocator.is_movable(a), "an alias group is movable");
            }
            Op::CreatePool(req) => self.create_pool(req),
            Op::DestroyPool { index } => {
                let Some(p) = self.pool_index(index) else {
                    return;
                };
                let result = self.allocator.destroy_pool(self.pools[p].id);
                // A live pool's destruction first ends the passes of dropped
                // sessions.
                if self.pools[p].live {
                    self.orphans_ended();
                }
                let held = self.live.iter().any(|l| l.pool == Some(p))
                    || self.groups.iter().any(|g| g.pool == Some(p))
                    || self.records().any(|r| r.counted && r.pool == Some(p));
                match result {
                    Ok(()) => {
                        assert!(self.pools[p].live, "a destroyed pool was destroyed again");
                        assert!(!held, "a pool holding allocations was destroyed");
                        self.pools[p].live = false;
                    }
                    Err(Error::PoolNotEmpty { .. }) => {
                        assert!(held, "an empty pool was refused")
                    }
                    Err(Error::UnknownPool(_)) => assert!(!self.pools[p].live),
                    Err(e) => panic!("destroy_pool: unexpected {e:?}"),
                }
            }
            Op::ResetPool { index } => {
                let Some(p) = self.pool_index(index) else {
                    return;
                };
                // SAFETY: the handles the reset frees go to `stale`, which is
                // only ever passed to `free` (or dropped).
                match unsafe { self.allocator.reset_pool(self.pools[p].id) } {
                    Ok(()) => {
                        assert!(self.pools[p].live);
                        self.reset_shadow(p);
                    }
                    Err(Error::UnknownPool(_)) => assert!(!self.pools[p].live),
                    Err(e) => panic!("reset_pool: unexpected {e:?}"),
                }
            }
            Op::FreeStale { index } => {
                let n = self.stale.len() + self.stale_groups.len();
                if n == 0 {
                    return;
                }
                let i = usize::from(index) % n;
                let a = if i < self.stale.len() {
                    self.stale.swap_remove(i).into_allocation()
                } else {
                    let g = self.stale_groups.swap_remove(i - self.stale.len());
                    match self.allocator.free_alias_group(g) {
                        Ok(()) => return,
                        Err(e) if matches!(e.error(), Error::UnknownPool(_)) => return,
                        Err(e) => panic!("stale group free: unexpected {:?}", e.error()),
                    }
                };
                match self.allocator.free(a) {
                    Ok(()) => {}
                    Err(e) if matches!(e.error(), Error::UnknownPool(_)) => {}
                    Err(e) => panic!("stale free: unexpected {:?}", e.error()),
                }
            }
            Op::BeginSession(req) => self.begin_session(&req),
            Op::BeginPass { session } => {
                if let Some(s) = self.session_index(session) {
                    self.begin_pass(s);
                }
            }
            Op::Commit { session, index } => {
                if let Some((s, r)) = self.pending_move(session, index) {
                    self.commit(s, r);
                }
            }
            Op::CommitAll { session } => {
                if let Some(s) = self.session_index(session) {
                    self.commit_all(s);
                }
            }
            Op::CommitWrong {
                session,
                index,
                other,
            } => {
                if let Some((s, r)) = self.pending_move(session, index) {
                    self.commit_wrong(s, r, other);
                }
            }
            Op::CommitStale {
                session,
                index,
                from_other_session,
            } => self.commit_stale(session, index, from_other_session),
            Op::CommitForeign { session, index } => {
                if let Some((s, r)) = self.pending_move(session, index) {
                    self.commit_foreign(s, r);
                }
            }
            Op::GiveUp {
                session,
                index,
                how,
            } => {
                let Some((s, r)) = self.pending_move(session, index) else {
                    return;
                };
                let pass = self.sessions[s].pass.as_mut().expect("open");
                let mv = pass.moves[r].take().expect("pending");
                match how {
                    GiveUp::Cancel => self.sessions[s].defrag.cancel(mv),
                    GiveUp::Drop => drop(mv),
                    GiveUp::Keep => pass.kept.push(mv),
                }
            }
            Op::IsCancelled {
                session,
                index,
                stale,
            } => self.is_cancelled(session, index, stale),
            Op::FreeSource { session, index } => {
                self.free_of_pass(session, index, RecState::Pending);
            }
            Op::FreeMoved { session, index } => {
                if self.free_of_pass(session, index, RecState::Committed) {
                    note("a moved allocation freed before its pass ended");
                }
            }
            Op::EndPass { session } => {
                if let Some(s) = self.session_index(session) {
                    self.end_pass(s);
                }
            }
            Op::EndSession { session } => {
                if let Some(s) = self.session_index(session) {
                    self.end_session(s);
                }
            }
            Op::DropSession { session } => {
                let Some(s) = self.session_index(session) else {
                    return;
                };
                // The allocator ends its open pass at its next frame, trim,
                // session, pass or `leaks` (`orphans_ended`).
                let session = self.sessions.swap_remove(s);
                if let Some(pass) = session.pass {
                    note("session dropped with a pass open");
                    self.orphans.push(pass.records);
                    for mv in pass.moves.into_iter().flatten().chain(pass.kept) {
                        self.keep_stale(mv);
                    }
                }
                drop(session.defrag);
            }
            Op::ForeignSession { session } => {
                let Some(s) = self.session_index(session) else {
                    return;
                };
                let open = self.sessions[s].pass.is_some();
                let defrag = &mut self.sessions[s].defrag;
                assert_eq!(
                    defrag.begin_pass(&self.other).map(|m| m.len()),
                    Err(DefragError::ForeignAllocator)
                );
                assert_eq!(
                    defrag.end_pass(&self.other).map(|r| r.moves),
                    Err(DefragError::ForeignAllocator)
                );
                assert_eq!(
                    defrag.pass_open(),
                    open,
                    "a foreign call changed the session"
                );
            }
            Op::Run {
                session,
                passes,
                algorithm,
            } => {
                if self.sessions.is_empty() {
                    self.begin_session(&DefragReq::everything(algorithm));
                }
                let Some(s) = self.session_index(session) else {
                    return;
                };
                for _ in 0..=passes % 4 {
                    if self.sessions[s].pass.is_none() {
                        self.begin_pass(s);
                    }
                    self.commit_all(s);
                    if self.end_pass(s) {
                        break;
                    }
                    self.check();
                }
            }
            Op::Trim
            | Op::BeginFrame
            | Op::Statistics
            | Op::DetailedStatistics
            | Op::Json
            | Op::Leaks
            | Op::CheckCorruption => unreachable!("the interpreter runs the common operations"),
            Op::Snapshot => {
                self.allocator.refresh_snapshot(&mut self.snapshot);
                let fresh = self.allocator.snapshot();
                assert!(
                    self.snapshot.lists == fresh.lists,
                    "a snapshot refreshed in place differs from a fresh one:\n{:?}\n{:?}",
                    self.snapshot.lists,
                    fresh.lists
                );
                assert_eq!(self.snapshot.alias_member_count, fresh.alias_member_count);
                assert_eq!(self.snapshot.allocation_count(), self.expected_count());
            }
        }
    }

    fn allocate(&mut self, req: Req) {
        if self.live.len() >= MAX_LIVE {
            return;
        }
        let pool = req.pool.and_then(|p| self.pool_index(p));
        let tag = format!("a{}", self.ops);
        let desc = AllocationDesc {
            size: req.size.get(self.block_size),
            alignment: req.alignment.get(),
            memory_type_bits: req.type_bits.unwrap_or(u32::MAX),
            kind: kind(req.kind),
            options: AllocationOptions {
                usage: usage(req.usage),
                pool: pool.map(|p| self.pools[p].id),
                dedicated: dedicated(req.dedicated),
                tag: if req.tagged { &tag } else { "" },
                pinned: req.pinned,
                ..AllocationOptions::default()
            },
            ..AllocationDesc::default()
        };
        let result = if req.mapped {
            self.allocator.allocate_mapped(&desc).map(Handle::Mapped)
        } else {
            self.allocator.allocate(&desc).map(Handle::Plain)
        };
        let handle = match result {
            Ok(handle) => handle,
            Err(Error::ZeroSize) => return assert_eq!(desc.size, 0),
            Err(Error::InvalidAlignment(_)) => {
                return assert!(desc.alignment > 1 && !desc.alignment.is_power_of_two())
            }
            Err(_) => return,
        };
        let a = handle.allocation();
        ops::check_new(a, &desc);
        let alignment = desc.alignment.max(1);
        let id = a.id().0;
        assert!(
            self.find_live(id).is_none() && self.records().all(|r| r.id != id),
            "id {id} handed out twice"
        );
        self.claim(Self::key(a), a.size(), a.kind(), "a new allocation");
        let mut live = Live {
            handle,
            id,
            pool,
            pinned: req.pinned,
            alignment,
            written: BTreeMap::new(),
        };
        live.handle.touch_ends(&mut live.written);
        self.live.push(live);
    }

    fn fill(&mut self, fill: Fill) {
        let before = self.live.len();
        let count = usize::from(fill.count % 64) + 1;
        let size = (self.block_size / 256).max(1) * (u64::from(fill.size % 32) + 1);
        for _ in 0..count {
            self.allocate(Req {
                size: Size::Any(size),
                alignment: Alignment::Pow2(fill.alignment % 13),
                kind: fill.kind,
                usage: fill.usage,
                pool: fill.pool,
                dedicated: 1,
                mapped: fill.mapped,
                pinned: false,
                tagged: false,
                type_bits: None,
            });
        }
        let every = usize::from(fill.free_every % 4) + 2;
        // Newest first, so that the indices of the older ones stay.
        for i in (before..self.live.len()).rev() {
            if (i - before).is_multiple_of(every) {
                self.free_live(i);
            }
        }
    }

    fn allocate_alias(&mut self, req: &AliasReq) {
        if self.groups.len() >= MAX_GROUPS {
            return;
        }
        let pool = req.pool.and_then(|p| self.pool_index(p));
        let tags: Vec<String> = (0..req.members.len().min(8))
            .map(|i| format!("m{i}"))
            .collect();
        let members: Vec<AliasRequirement<'_>> = req
            .members
            .iter()
            .take(8)
            .zip(&tags)
            .map(|(m, tag)| AliasRequirement {
                size: m.size.get(self.block_size),
                alignment: m.alignment.get(),
                memory_type_bits: m.type_bits.map_or(u32::MAX, u32::from),
                kind: kind(m.kind),
                lifetime: PassInterval::new(u32::from(m.first % 8), u32::from(m.last % 8)),
                tag: if m.tagged { tag } else { "" },
            })
            .collect();
        let options = AllocationOptions {
            usage: usage(req.usage),
            pool: pool.map(|p| self.pools[p].id),
            dedicated: dedicated(req.dedicated),
            ..AllocationOptions::default()
        };
        let Ok(group) = self.allocator.allocate_alias_group(&members, options) else {
            return;
        };
        let a = group.allocation();
        assert_eq!(group.members().len(), members.len());
        let mut end = 0u64;
        for (m, r) in group.members().iter().zip(&members) {
            assert_eq!(m.size, r.size);
            assert_ne!(r.memory_type_bits & (1 << a.memory_type()), 0);
            let start = a.offset() + m.offset;
            assert_eq!(start % r.alignment.max(1), 0, "member alignment");
            end = end.max(m.offset + m.size);
        }
        assert!(end <= a.size(), "a member past the group's end");
        let page = self.granularity.max(1);
        let placed = group.members();
        for (i, x) in placed.iter().enumerate() {
            for y in &placed[i + 1..] {
                if !x.lifetime.overlaps(&y.lifetime) {
                    continue;
                }
                let (xs, xe) = (a.offset() + x.offset, a.offset() + x.offset + x.size);
                let (ys, ye) = (a.offset() + y.offset, a.offset() + y.offset + y.size);
                assert!(xe <= ys || ye <= xs, "members live together overlap");
                if page > 1 && conflicts(x.kind, y.kind) {
                    let (lo_end, hi_start) = if xe <= ys { (xe, ys) } else { (ye, xs) };
                    assert!(
                        (lo_end - 1) / page < hi_start / page,
                        "members live together share a page"
                    );
                }
            }
        }
        assert!(!self.allocator.is_movable(a), "an alias group is movable");
        self.claim(Self::key(a), a.size(), a.kind(), "an alias group");
        note(if a.is_dedicated() {
            "alias group, dedicated"
        } else {
            "alias group"
        });
        self.groups.push(Group { group, pool });
    }

    fn create_pool(&mut self, req: PoolReq) {
        if self.pools.len() >= MAX_POOLS {
            return;
        }
        let algorithm = match req.algorithm % 5 {
            3 => PoolAlgorithm::Linear(LinearMode::Stack),
            4 => PoolAlgorithm::Linear(LinearMode::Ring),
            _ => PoolAlgorithm::Tlsf,
        };
        let desc = PoolDesc {
            usage: usage(req.usage),
            block_size: req.block_size.get(),
            min_blocks: u32::from(req.min_blocks % 3),
            max_blocks: u32::from(req.max_blocks % 8),
            algorithm,
            budget: req.budget.map(|b| (u64::from(b) + 1) * 64 * KIB),
            ..PoolDesc::new(format!("pool{}", self.pools.len()))
        };
        if let Ok(id) = self.allocator.create_pool(&desc) {
            self.pools.push(PoolShadow {
                id,
                live: true,
                linear: matches!(algorithm, PoolAlgorithm::Linear(_)),
            });
        }
    }

    /// The shadow of a reset of pool `p`: its allocations and groups are
    /// stale, its moves freed.
    fn reset_shadow(&mut self, p: usize) {
        let mut i = 0;
        while i < self.live.len() {
            if self.live[i].pool == Some(p) {
                let live = self.live.swap_remove(i);
                self.release(Self::key(live.handle.allocation()));
                self.stale.push(live.handle);
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.groups.len() {
            if self.groups[i].pool == Some(p) {
                let g = self.groups.swap_remove(i);
                self.release(Self::key(g.group.allocation()));
                self.stale_groups.push(g.group);
            } else {
                i += 1;
            }
        }
        let mut freed = Vec::new();
        for r in self.records_mut() {
            if r.counted && r.pool == Some(p) {
                note("a pool reset freed a move");
                r.counted = false;
                match r.state {
                    // The source was live (released above) or freed.
                    RecState::Pending | RecState::SourceFreed => freed.push(r.dest),
                    // The destination was live (released above).
                    RecState::Committed => freed.push(r.source),
                }
            }
        }
        for key in freed {
            self.release(key);
        }
    }

    fn remove_live(&mut self, i: usize, release: bool) -> Live {
        self.check_written(i);
        let live = self.live.swap_remove(i);
        if release {
            self.release(Self::key(live.handle.allocation()));
        }
        live
    }

    fn free_live(&mut self, i: usize) {
        let live = self.remove_live(i, true);
        let id = live.id;
        for r in self.records_mut() {
            if r.id == id && r.state == RecState::Pending {
                note("a move's source freed during its pass");
                r.state = RecState::SourceFreed;
            }
        }
        if let Err(e) = self.allocator.free(live.handle.into_allocation()) {
            panic!("free: unexpected {:?}", e.error());
        }
    }

    fn keep_stale(&mut self, mv: Move) {
        if self.stale_moves.len() < MAX_STALE_MOVES {
            self.stale_moves.push(mv);
        }
    }

    // ---- defragmentation ----

    fn begin_session(&mut self, req: &DefragReq) {
        if self.sessions.len() >= MAX_SESSIONS {
            return;
        }
        let algorithm = match req.algorithm {
            AlgoReq::Fast => DefragAlgorithm::Fast,
            AlgoReq::Full => DefragAlgorithm::Full,
            AlgoReq::Room { bytes, alignment } => DefragAlgorithm::Room {
                bytes: bytes.get(self.block_size),
                alignment: alignment.get(),
            },
        };
        let mut desc = DefragDesc::default().with_algorithm(algorithm);
        if let Some(bytes) = req.max_bytes {
            desc.max_bytes_per_pass = bytes.get(self.block_size);
        }
        if let Some(n) = req.max_allocations {
            desc.max_allocations_per_pass = u32::from(n % 32);
        }
        if let Some(t) = req.skip_type {
            desc.memory_types = !(1 << (t % 32));
        }
        desc.default_blocks = req.default_blocks || req.pools.is_none();
        let mut expected = Ok(());
        if let Some(pools) = &req.pools {
            let mut ids = Vec::new();
            for &p in pools.iter().take(4) {
                let Some(p) = self.pool_index(p) else {
                    continue;
                };
                let shadow = &self.pools[p];
                if expected.is_ok() {
                    if !shadow.live {
                        expected = Err(DefragError::UnknownPool(shadow.id));
                    } else if shadow.linear {
                        expected = Err(DefragError::LinearPool(shadow.id));
                    }
                }
                ids.push(shadow.id);
            }
            desc.pools = Some(ids);
        }
        match self.allocator.begin_defragmentation(&desc) {
            Ok(defrag) => {
                assert_eq!(expected, Ok(()), "begin_defragmentation accepted {desc:?}");
                self.orphans_ended();
                assert!(!defrag.pass_open());
                assert_eq!(defrag.desc(), &desc);
                self.sessions.push(Session {
                    defrag,
                    desc,
                    pass: None,
                    stats: DefragStats::default(),
                });
            }
            Err(e) => assert_eq!(Err(e), expected, "begin_defragmentation of {desc:?}"),
        }
    }

    fn begin_pass(&mut self, s: usize) {
        let session = &mut self.sessions[s];
        let result = session.defrag.begin_pass(&self.allocator);
        if session.pass.is_some() {
            assert_eq!(
                result.map(|m| m.len()),
                Err(DefragError::PassOpen),
                "begin_pass with a pass open"
            );
            return;
        }
        let moves = match result {
            Ok(moves) => moves,
            Err(e) => panic!("begin_pass: unexpected {e:?}"),
        };
        assert!(session.defrag.pass_open());
        let desc = session.desc.clone();
        // The pass began after the allocator ended the dropped sessions'.
        self.orphans_ended();
        assert!(
            moves.len() as u64 <= u64::from(desc.max_allocations_per_pass),
            "{} moves, at most {} a pass",
            moves.len(),
            desc.max_allocations_per_pass
        );
        let bytes: u64 = moves.iter().map(|m| m.size()).sum();
        assert!(
            bytes <= desc.max_bytes_per_pass,
            "{bytes} bytes moved in a pass"
        );
        note("begin_pass");
        if !moves.is_empty() {
            note(match desc.algorithm {
                DefragAlgorithm::Fast => "pass with moves: fast",
                DefragAlgorithm::Full => "pass with moves: full",
                DefragAlgorithm::Room { .. } => "pass with moves: room",
            });
            if self.sessions.iter().any(|s| s.pass.is_some()) {
                note("pass with moves beside another open pass");
            }
            if self.sessions_dropped_mid_pass > 0 {
                note("pass with moves after a session dropped with a pass open");
            }
        }
        let mut records = Vec::with_capacity(moves.len());
        for (k, mv) in moves.iter().enumerate() {
            let id = mv.id().0;
            assert!(
                moves[..k].iter().all(|m| m.id() != mv.id()),
                "allocation {id} moved twice in one pass"
            );
            let i = self.find_live(id).unwrap_or_else(|| {
                panic!("a move of allocation {id}, which the caller doesn't hold")
            });
            let busy = self
                .records()
                .find(|r| r.id == id && r.state != RecState::SourceFreed);
            assert!(
                busy.is_none(),
                "allocation {id} moved while it is in another open move: {busy:?}"
            );
            let live = &self.live[i];
            let a = live.handle.allocation();
            assert!(!live.pinned, "pinned allocation {id} moved");
            assert!(!a.is_dedicated(), "dedicated allocation {id} moved");
            let linear = live.pool.is_some_and(|p| self.pools[p].linear);
            assert!(!linear, "allocation {id} of a linear pool moved");
            assert_ne!(
                desc.memory_types & (1 << a.memory_type()),
                0,
                "memory type {} not asked for",
                a.memory_type()
            );
            match (live.pool, &desc.pools) {
                (None, _) => assert!(desc.default_blocks, "default blocks not asked for"),
                (Some(p), Some(ids)) => {
                    assert!(ids.contains(&self.pools[p].id), "pool {p} not asked for")
                }
                (Some(_), None) => {}
            }
            assert_eq!(mv.size(), a.size(), "move size");
            assert_eq!(mv.memory_type(), a.memory_type(), "move memory type");
            assert_eq!(mv.kind(), a.kind(), "move kind");
            assert_eq!(mv.pool(), a.pool(), "move pool");
            assert_eq!(mv.source(), Self::key(a), "move source");
            let dest = mv.destination();
            assert_ne!(dest, mv.source(), "a move to where it is");
            assert_eq!(dest.1 % live.alignment, 0, "destination alignment");
            records.push(Rec {
                id,
                size: mv.size(),
                pool: live.pool,
                source: mv.source(),
                dest,
                state: RecState::Pending,
                counted: true,
            });
        }
        for (mv, r) in moves.iter().zip(&records) {
            self.claim(r.dest, mv.size(), mv.kind(), "a move's destination");
        }
        let session = &mut self.sessions[s];
        session.pass = Some(OpenPass {
            records,
            moves: moves.into_iter().map(Some).collect(),
            kept: Vec::new(),
        });
    }

    /// A session with an open pass and one of its moves not yet committed or
    /// given up: `(session, record)`.
    fn pending_move(&self, session: u8, index: u8) -> Option<(usize, usize)> {
        let s = self.session_index(session)?;
        let pass = self.sessions[s].pass.as_ref()?;
        let open: Vec<usize> = (0..pass.moves.len())
            .filter(|&r| pass.moves[r].is_some())
            .collect();
        (!open.is_empty()).then(|| (s, open[usize::from(index) % open.len()]))
    }

    /// Commits move `r` of session `s` with its source, if the caller holds it.
    fn commit(&mut self, s: usize, r: usize) {
        let rec = self.sessions[s].pass.as_ref().expect("open").records[r].clone();
        if rec.state != RecState::Pending || !rec.counted {
            return;
        }
        let Some(i) = self.find_live(rec.id) else {
            panic!("the source of a pending move is not held");
        };
        let old = self.remove_live(i, false);
        let mapped = old.handle.is_mapped();
        let pass = self.sessions[s].pass.as_mut().expect("open");
        let mv = pass.moves[r].take().expect("pending");
        let (size, memory_type, kind, pool) = (mv.size(), mv.memory_type(), mv.kind(), mv.pool());
        let new =
            match self.sessions[s]
                .defrag
                .commit(&self.allocator, mv, old.handle.into_allocation())
            {
                Ok(new) => new,
                Err(e) => panic!("commit with the move's source refused: {:?}", e.kind),
            };
        assert_eq!(new.id().0, rec.id, "a move changed the id");
        assert_eq!(
            Self::key(&new),
            rec.dest,
            "the new allocation is not at the destination"
        );
        assert_eq!(new.size(), size);
        assert_eq!(new.memory_type(), memory_type);
        assert_eq!(new.kind(), kind);
        assert_eq!(new.pool(), pool);
        assert!(!new.is_dedicated());
        // A pin set on the source while its move was out stays on the
        // allocation that replaces it (finding
        // `a_pin_set_during_a_pass_survives_the_commit`, fixed).
        assert_eq!(
            self.allocator.is_movable(&new),
            !old.pinned,
            "the moved allocation's pin"
        );
        let mut handle = Handle::wrap(new, mapped);
        // The GPU's copy: the bytes written come along.
        if let Handle::Mapped(m) = &mut handle {
            let slice = m.as_mut_slice();
            for (&offset, &b) in &old.written {
                slice[offset as usize] = b;
            }
        }
        self.live.push(Live { handle, ..old });
        let pass = self.sessions[s].pass.as_mut().expect("open");
        pass.records[r].state = RecState::Committed;
        note(if rec.pool.is_some() {
            "commit in a pool"
        } else {
            "commit in default blocks"
        });
        if mapped {
            note("commit of mapped memory");
        }
    }

    fn pass(
        &mut self,
        session: u8,
        new_session: bool,
        algorithm: AlgoReq,
        actions: &[MoveAction],
        end: bool,
    ) {
        if new_session || self.sessions.is_empty() {
            self.begin_session(&DefragReq::everything(algorithm));
        }
        let Some(s) = self.session_index(session) else {
            return;
        };
        let s = if new_session {
            self.sessions.len() - 1
        } else {
            s
        };
        if self.sessions[s].pass.is_none() {
            self.begin_pass(s);
            self.check();
        }
        let n = self.sessions[s].pass.as_ref().map_or(0, |p| p.moves.len());
        if !actions.is_empty() {
            for r in 0..n {
                let pending = self.sessions[s]
                    .pass
                    .as_ref()
                    .is_some_and(|p| p.moves[r].is_some());
                if !pending {
                    continue;
                }
                self.move_action(s, r, actions[r % actions.len()]);
                self.check();
            }
        }
        if end {
            self.end_pass(s);
        }
    }

    fn move_action(&mut self, s: usize, r: usize, action: MoveAction) {
        let rec = self.sessions[s].pass.as_ref().expect("open").records[r].clone();
        let source = self
            .find_live(rec.id)
            .filter(|_| rec.state == RecState::Pending);
        match action {
            MoveAction::Commit => self.commit(s, r),
            MoveAction::CommitThenFree => {
                self.commit(s, r);
                let committed = self.sessions[s].pass.as_ref().expect("open").records[r].state
                    == RecState::Committed;
                if committed {
                    if let Some(i) = self.find_live(rec.id) {
                        note("a moved allocation freed before its pass ended");
                        self.free_live(i);
                    }
                }
            }
            MoveAction::CommitWrong(other) => self.commit_wrong(s, r, other),
            MoveAction::FreeSourceThenCommit(other) => {
                if let Some(i) = source {
                    self.free_live(i);
                    self.check();
                }
                self.check_cancelled(s, r);
                self.commit_wrong(s, r, other);
            }
            MoveAction::FreeSource => {
                if let Some(i) = source {
                    self.free_live(i);
                }
            }
            MoveAction::PinThenCommit => {
                if let Some(i) = source {
                    self.allocator
                        .set_movable(self.live[i].handle.allocation(), false)
                        .expect("set_movable(false) of a live allocation");
                    self.live[i].pinned = true;
                    note("pinned during a move");
                    self.commit(s, r);
                }
            }
            MoveAction::GiveUp(how) => {
                let pass = self.sessions[s].pass.as_mut().expect("open");
                let mv = pass.moves[r].take().expect("pending");
                match how {
                    GiveUp::Cancel => self.sessions[s].defrag.cancel(mv),
                    GiveUp::Drop => drop(mv),
                    GiveUp::Keep => pass.kept.push(mv),
                }
            }
            MoveAction::IsCancelled => self.check_cancelled(s, r),
            MoveAction::CommitForeign => self.commit_foreign(s, r),
            MoveAction::CommitStale(other_session) => {
                let target = if other_session {
                    // Offer this session's move to another one.
                    (0..self.sessions.len()).find(|&t| t != s)
                } else {
                    Some(s)
                };
                if let Some(t) = target {
                    self.commit_stale(t as u8, r as u8, other_session);
                }
            }
            MoveAction::ResetPool => {
                if let Some(p) = rec.pool {
                    // SAFETY: as in `Op::ResetPool`.
                    if unsafe { self.allocator.reset_pool(self.pools[p].id) }.is_ok() {
                        self.reset_shadow(p);
                    }
                }
            }
            MoveAction::Leave => {}
        }
    }

    fn commit_all(&mut self, s: usize) {
        let Some(pass) = &self.sessions[s].pass else {
            return;
        };
        let todo: Vec<usize> = (0..pass.moves.len())
            .filter(|&r| {
                pass.moves[r].is_some()
                    && pass.records[r].state == RecState::Pending
                    && pass.records[r].counted
            })
            .collect();
        for r in todo {
            self.commit(s, r);
        }
    }

    fn commit_wrong(&mut self, s: usize, r: usize, other: u16) {
        let rec = self.sessions[s].pass.as_ref().expect("open").records[r].clone();
        let candidates: Vec<usize> = (0..self.live.len())
            .filter(|&i| self.live[i].id != rec.id)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let i = candidates[usize::from(other) % candidates.len()];
        let wrong = self.remove_live(i, false);
        let pass = self.sessions[s].pass.as_mut().expect("open");
        let mv = pass.moves[r].take().expect("pending");
        let mapped = wrong.handle.is_mapped();
        let wrong_id = wrong.id;
        let result =
            self.sessions[s]
                .defrag
                .commit(&self.allocator, mv, wrong.handle.into_allocation());
        let e = match result {
            Ok(_) => panic!("a commit with the wrong allocation was accepted"),
            Err(e) => e,
        };
        let expected = match rec.state {
            RecState::SourceFreed => CommitErrorKind::SourceFreed,
            _ => CommitErrorKind::WrongAllocation,
        };
        if rec.counted {
            assert_eq!(
                e.kind, expected,
                "commit with allocation {wrong_id} for {rec:?}"
            );
        } else {
            assert_ne!(e.kind, CommitErrorKind::StalePass);
        }
        note(match e.kind {
            CommitErrorKind::SourceFreed => "commit refused: source freed",
            _ => "commit refused: wrong allocation",
        });
        let (mv, a) = e.into_parts();
        assert_eq!(mv.id().0, rec.id, "another move came back");
        assert_eq!(a.id().0, wrong_id, "another allocation came back");
        self.sessions[s].pass.as_mut().expect("open").moves[r] = Some(mv);
        self.live.push(Live {
            handle: Handle::wrap(a, mapped),
            ..wrong
        });
    }

    fn commit_foreign(&mut self, s: usize, r: usize) {
        let rec = self.sessions[s].pass.as_ref().expect("open").records[r].clone();
        if rec.state != RecState::Pending || !rec.counted {
            return;
        }
        let i = self
            .find_live(rec.id)
            .expect("the source of a pending move");
        let old = self.remove_live(i, false);
        let mapped = old.handle.is_mapped();
        let mv = self.sessions[s].pass.as_mut().expect("open").moves[r]
            .take()
            .expect("pending");
        let result = self.sessions[s]
            .defrag
            .commit(&self.other, mv, old.handle.into_allocation());
        let e = match result {
            Ok(_) => panic!("a commit through another allocator was accepted"),
            Err(e) => e,
        };
        assert_eq!(e.kind, CommitErrorKind::StalePass);
        note("commit refused: another allocator");
        let (mv, a) = e.into_parts();
        assert_eq!(a.id().0, rec.id);
        self.sessions[s].pass.as_mut().expect("open").moves[r] = Some(mv);
        self.live.push(Live {
            handle: Handle::wrap(a, mapped),
            ..old
        });
    }

    /// Commits a kept move, or another session's pending move, into a
    /// session: refused as stale, both handed back.
    fn commit_stale(&mut self, session: u8, index: u8, from_other_session: bool) {
        let Some(s) = self.session_index(session) else {
            return;
        };
        // The move, and where it goes back.
        let (mv, back) = if from_other_session {
            let others: Vec<(usize, usize)> = (0..self.sessions.len())
                .filter(|&t| t != s)
                .filter_map(|t| {
                    let pass = self.sessions[t].pass.as_ref()?;
                    Some(
                        (0..pass.moves.len())
                            .filter(|&r| pass.moves[r].is_some())
                            .map(move |r| (t, r)),
                    )
                })
                .flatten()
                .collect();
            if others.is_empty() {
                return;
            }
            let (t, r) = others[usize::from(index) % others.len()];
            let mv = self.sessions[t].pass.as_mut().expect("open").moves[r]
                .take()
                .expect("pending");
            (mv, Some((t, r)))
        } else {
            if self.stale_moves.is_empty() {
                return;
            }
            let k = usize::from(index) % self.stale_moves.len();
            (self.stale_moves.swap_remove(k), None)
        };
        // The old allocation: the move's source if held, else any.
        let i = match self.find_live(mv.id().0) {
            Some(i) => i,
            None if !self.live.is_empty() => usize::from(index) % self.live.len(),
            None => {
                match back {
                    Some((t, r)) => {
                        self.sessions[t].pass.as_mut().expect("open").moves[r] = Some(mv)
                    }
                    None => self.stale_moves.push(mv),
                }
                return;
            }
        };
        let old = self.remove_live(i, false);
        let mapped = old.handle.is_mapped();
        let id = mv.id();
        let cancelled = self.sessions[s].defrag.is_cancelled(&self.allocator, &mv);
        assert!(cancelled, "a stale move is not cancelled");
        let result =
            self.sessions[s]
                .defrag
                .commit(&self.allocator, mv, old.handle.into_allocation());
        let e = match result {
            Ok(_) => panic!("a stale move was committed"),
            Err(e) => e,
        };
        assert_eq!(e.kind, CommitErrorKind::StalePass);
        note(if back.is_some() {
            "commit refused: another session's move"
        } else {
            "commit refused: a move of an ended pass"
        });
        let (mv, a) = e.into_parts();
        assert_eq!(mv.id(), id);
        assert_eq!(a.id().0, old.id);
        match back {
            Some((t, r)) => self.sessions[t].pass.as_mut().expect("open").moves[r] = Some(mv),
            None => self.stale_moves.push(mv),
        }
        self.live.push(Live {
            handle: Handle::wrap(a, mapped),
            ..old
        });
    }

    fn is_cancelled(&mut self, session: u8, index: u8, stale: bool) {
        let Some(s) = self.session_index(session) else {
            return;
        };
        if stale {
            if self.stale_moves.is_empty() {
                return;
            }
            let mv = &self.stale_moves[usize::from(index) % self.stale_moves.len()];
            assert!(
                self.sessions[s].defrag.is_cancelled(&self.allocator, mv),
                "a stale move is not cancelled"
            );
            return;
        }
        if let Some((s, r)) = self.pending_move(session, index) {
            self.check_cancelled(s, r);
        }
    }

    /// Checks `is_cancelled` of pending move `r` of session `s`, in it and
    /// in the other sessions.
    fn check_cancelled(&self, s: usize, r: usize) {
        let pass = self.sessions[s].pass.as_ref().expect("open");
        let rec = &pass.records[r];
        let mv = pass.moves[r].as_ref().expect("pending");
        let cancelled = self.sessions[s].defrag.is_cancelled(&self.allocator, mv);
        if cancelled {
            note("is_cancelled: true");
        }
        if rec.counted {
            assert_eq!(
                cancelled,
                rec.state == RecState::SourceFreed,
                "is_cancelled of {rec:?}"
            );
        }
        for (t, other) in self.sessions.iter().enumerate() {
            if t != s {
                assert!(
                    other.defrag.is_cancelled(&self.allocator, mv),
                    "another session's move is not cancelled in this one"
                );
            }
        }
    }

    /// Ends the open pass of session `s` (or checks the refusal); returns
    /// whether it reported `complete`.
    fn end_pass(&mut self, s: usize) -> bool {
        let session = &mut self.sessions[s];
        let result = session.defrag.end_pass(&self.allocator);
        let Some(pass) = session.pass.take() else {
            assert_eq!(
                result.map(|r| r.moves),
                Err(DefragError::NoPassBegun),
                "end_pass without a pass"
            );
            return true;
        };
        let report = match result {
            Ok(report) => report,
            Err(e) => panic!("end_pass: unexpected {e:?}"),
        };
        assert!(!session.defrag.pass_open());
        add_stats(&mut session.stats, &report.stats);
        self.ended(pass, &report.stats, report.moves, report.complete);
        report.complete
    }

    /// The shadow of the end of `pass`, checked against what the allocator
    /// reported (the session's own totals are the caller's to add).
    fn ended(&mut self, pass: OpenPass, stats: &DefragStats, moves: u64, complete: bool) {
        let committed = pass
            .records
            .iter()
            .filter(|r| r.state == RecState::Committed)
            .count() as u64;
        let bytes: u64 = pass
            .records
            .iter()
            .filter(|r| r.state == RecState::Committed)
            .map(|r| r.size)
            .sum();
        let n = pass.records.len() as u64;
        if stats.blocks_freed > 0 {
            note("a pass freed blocks");
        }
        assert_eq!(moves, n, "moves reported");
        assert_eq!(complete, n == 0, "complete");
        assert_eq!(stats.passes, 1);
        assert_eq!(stats.allocations_moved, committed, "allocations moved");
        assert_eq!(stats.bytes_moved, bytes, "bytes moved");
        assert_eq!(stats.moves_cancelled, n - committed, "moves cancelled");
        add_stats(&mut self.defrag_totals, stats);
        for r in &pass.records {
            if !r.counted {
                continue;
            }
            match r.state {
                RecState::Committed => self.release(r.source),
                RecState::Pending | RecState::SourceFreed => self.release(r.dest),
            }
        }
        for mv in pass.moves.into_iter().flatten().chain(pass.kept) {
            self.keep_stale(mv);
        }
    }

    /// The shadow of the allocator ending the open passes of dropped
    /// sessions (it just did, if any were dropped): each ended as by
    /// `end_pass`, their figures checked against the allocator's totals.
    fn orphans_ended(&mut self) {
        if self.orphans.is_empty() {
            return;
        }
        note("passes of dropped sessions ended");
        let total = self.allocator.statistics().defragmentation;
        let mut expected = DefragStats::default();
        for records in std::mem::take(&mut self.orphans) {
            let committed = records
                .iter()
                .filter(|r| r.state == RecState::Committed)
                .count() as u64;
            expected.passes += 1;
            expected.allocations_moved += committed;
            expected.bytes_moved += records
                .iter()
                .filter(|r| r.state == RecState::Committed)
                .map(|r| r.size)
                .sum::<u64>();
            expected.moves_cancelled += records.len() as u64 - committed;
            for r in records.iter().filter(|r| r.counted) {
                match r.state {
                    RecState::Committed => self.release(r.source),
                    RecState::Pending | RecState::SourceFreed => self.release(r.dest),
                }
            }
            self.sessions_dropped_mid_pass += 1;
        }
        let before = self.defrag_totals;
        assert_eq!(
            total.passes - before.passes,
            expected.passes,
            "passes ended"
        );
        assert_eq!(
            total.allocations_moved - before.allocations_moved,
            expected.allocations_moved,
            "allocations moved by dropped sessions' passes"
        );
        assert_eq!(
            total.bytes_moved - before.bytes_moved,
            expected.bytes_moved,
            "bytes moved by dropped sessions' passes"
        );
        assert_eq!(
            total.moves_cancelled - before.moves_cancelled,
            expected.moves_cancelled,
            "moves cancelled with dropped sessions' passes"
        );
        // Blocks freed are the allocator's to count.
        self.defrag_totals = total;
    }

    fn end_session(&mut self, s: usize) {
        let session = self.sessions.swap_remove(s);
        let before = session.stats;
        let open = session.pass.is_some();
        let result = session.defrag.end(&self.allocator);
        let total = match result {
            Ok(total) => total,
            Err(e) => panic!("end: unexpected {e:?}"),
        };
        if let Some(pass) = session.pass {
            // The pass `end` ended: its stats are the total less the rest.
            let stats = DefragStats {
                passes: total.passes.wrapping_sub(before.passes),
                bytes_moved: total.bytes_moved.wrapping_sub(before.bytes_moved),
                allocations_moved: total
                    .allocations_moved
                    .wrapping_sub(before.allocations_moved),
                moves_cancelled: total.moves_cancelled.wrapping_sub(before.moves_cancelled),
                blocks_freed: total.blocks_freed.wrapping_sub(before.blocks_freed),
                bytes_freed: total.bytes_freed.wrapping_sub(before.bytes_freed),
            };
            let n = pass.records.len() as u64;
            self.ended(pass, &stats, n, n == 0);
        } else {
            assert!(!open);
            assert_eq!(total, before, "the session's totals");
        }
    }

    // ---- checks ----

    /// Frees the live allocation of a move of `session`'s open pass in
    /// `state` (a pending move's source, or a committed move's new
    /// allocation), picked by `index`; whether one was freed.
    fn free_of_pass(&mut self, session: u8, index: u8, state: RecState) -> bool {
        let Some(s) = self.session_index(session) else {
            return false;
        };
        let Some(pass) = &self.sessions[s].pass else {
            return false;
        };
        let ids: Vec<u64> = pass
            .records
            .iter()
            .filter(|r| r.state == state)
            .map(|r| r.id)
            .collect();
        if ids.is_empty() {
            return false;
        }
        let id = ids[usize::from(index) % ids.len()];
        match self.find_live(id) {
            Some(i) => {
                self.free_live(i);
                true
            }
            None => false,
        }
    }

    fn check_written(&self, i: usize) {
        let live = &self.live[i];
        live.handle
            .check_written(&live.written, &format_args!("allocation {}", live.id));
    }

    fn expected_count(&self) -> u64 {
        (self.live.len() + self.groups.len() + self.records().filter(|r| r.counted).count()) as u64
    }
}

impl Target for State {
    const NAME: &'static str = "allocator_defrag";
    type Setup = Setup;
    type Op = Op;

    fn new(setup: &Setup) -> Option<State> {
        State::new(setup)
    }

    /// The pool the setup asks for, then the fragmentation.
    fn start(&mut self, setup: &Setup) {
        if let Some(pool) = setup.pool {
            self.create_pool(pool);
        }
        self.fill(setup.prefill);
        if let Some(fill) = setup.prefill2 {
            self.fill(fill);
        }
        self.check();
    }

    crate::ops::common_of_op!();

    fn apply(&mut self, op: Op, number: u64) {
        self.ops = number;
        State::apply(self, op);
    }

    fn allocator(&self) -> &Alloc {
        &self.allocator
    }

    fn expected_count(&self) -> u64 {
        State::expected_count(self)
    }

    /// The allocator ended the open passes of dropped sessions, if any.
    fn settled(&mut self) {
        self.orphans_ended();
    }

    fn check_statistics(&self, stats: &Statistics) {
        assert_eq!(
            stats.defragmentation, self.defrag_totals,
            "the allocator's defragmentation totals"
        );
        for s in &self.sessions {
            assert_eq!(s.defrag.statistics(), s.stats, "a session's totals");
        }
    }

    fn check_details(&self, details: &DetailedStatistics) {
        let members: usize = self.groups.iter().map(|g| g.group.members().len()).sum();
        assert_eq!(
            details.alias_member_count, members as u64,
            "alias members in the detailed statistics"
        );
        let saved: u64 = self.groups.iter().map(|g| g.group.bytes_saved()).sum();
        // The statistics subtract each group's range (padding and
        // margins included), `bytes_saved` its size as asked.
        assert!(details.aliased_bytes_saved <= saved, "aliased bytes saved");
    }

    fn check(&self) {
        if let Err(e) = self.other.validate() {
            panic!("validate (other allocator): {e}");
        }
        let counted = self.allocator.statistics().total.allocation_count;
        assert_eq!(
            counted,
            self.expected_count(),
            "allocation count: {} live, {} groups, records {:?}",
            self.live.len(),
            self.groups.len(),
            self.records().collect::<Vec<_>>()
        );
        let pools = self
            .pools
            .iter()
            .enumerate()
            .filter(|(_, shadow)| shadow.live);
        let pools = pools.map(|(p, shadow)| {
            let expected = self.live.iter().filter(|l| l.pool == Some(p)).count()
                + self.groups.iter().filter(|g| g.pool == Some(p)).count()
                + self
                    .records()
                    .filter(|r| r.counted && r.pool == Some(p))
                    .count();
            (p, shadow.id, expected as u64)
        });
        ops::check_allocator(&self.allocator, &self.sim, self.expected_count(), pools);
        for i in 0..self.live.len() {
            self.check_written(i);
        }
    }

    /// Ends every session, frees everything, then destroys the allocator:
    /// its leaks must be the moves of dropped sessions exactly.
    fn finish(mut self) {
        while let Some(s) = self.sessions.len().checked_sub(1) {
            self.end_session(s);
            self.check();
        }
        self.stale_moves.clear();
        while !self.live.is_empty() {
            self.free_live(self.live.len() - 1);
        }
        while let Some(g) = self.groups.pop() {
            self.release(Self::key(g.group.allocation()));
            if let Err(e) = self.allocator.free_alias_group(g.group) {
                panic!("free_alias_group: {:?}", e.error());
            }
        }
        for handle in std::mem::take(&mut self.stale) {
            match self.allocator.free(handle.into_allocation()) {
                Ok(()) => {}
                Err(e) if matches!(e.error(), Error::UnknownPool(_)) => {}
                Err(e) => panic!("stale free: unexpected {:?}", e.error()),
            }
        }
        for g in std::mem::take(&mut self.stale_groups) {
            match self.allocator.free_alias_group(g) {
                Ok(()) => {}
                Err(e) if matches!(e.error(), Error::UnknownPool(_)) => {}
                Err(e) => panic!("stale group free: unexpected {:?}", e.error()),
            }
        }
        self.check();
        self.allocator.trim();
        self.orphans_ended();
        self.check();
        assert!(self.ranges.is_empty(), "ranges left in the shadow");
        let stats = self.allocator.statistics();
        assert_eq!(stats.total.allocation_count, 0);
        let State {
            sim,
            allocator,
            other,
            ..
        } = self;
        drop(other);
        let report = allocator.destroy();
        assert!(report.is_empty(), "leaks: {report}");
        assert_eq!(sim.live_objects(), 0, "device memory left after destroy");
        assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
    }
}

/// Runs one input: the setup (a pool, fragmentation), every operation with
/// the checks after each, then the end (sessions ended, everything freed,
/// the leak report checked).
pub fn run(input: Input) {
    interpreter::run::<State>(input.0);
}
