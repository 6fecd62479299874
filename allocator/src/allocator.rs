//! The allocator: memory types' default blocks, pools, dedicated
//! allocations, budgets and statistics, over any [`MemoryDevice`].
//!
//! Locking: each memory type's default blocks and each pool have their own
//! mutex, so threads allocating from different types or pools never wait on
//! each other. Device memory is created and freed outside those locks.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::allocation::{Allocation, ListRef, Location, MappedAllocation};
use crate::block::{Block, PoolAlgorithm};
use crate::block_list::{BlockList, ListConfig};
use crate::budget::Budgets;
use crate::corruption;
use crate::desc::{AllocationDesc, DedicatedPolicy, DriverDedicated};
use crate::device::{MappedRange, MemoryDevice, MemoryPropertyFlags};
use crate::error::Error;
use crate::memory::{self, Doomed, MemoryRequest, ObjectCount, PoolCaps};
use crate::pool::{PoolDesc, PoolId};
use crate::range::{Range, RangeRequest};
use crate::recycle::RecycleBin;
use crate::select::{self, HeapRoom, MemoryUsage, SelectError, TypeRequest};
use crate::stats::{
    BlockInfo, Counters, DetailedStatistics, HeapStatistics, ListDetails, PoolStatistics,
    Statistics, TypeStatistics, Usage,
};
use crate::trace::{Recorder, TraceError};
use crate::type_cache::{self, TypeCache};

/// How the allocator sizes blocks and when it makes dedicated allocations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocatorDesc {
    /// The block size default blocks grow to on heaps larger than 1 GiB
    /// (smaller heaps use 1/8 of their size). Blocks start at 1/8 of it and
    /// double with each new block, so small programs don't pay for a large
    /// block up front.
    pub block_size: u64,
    /// A driver's `prefersDedicatedAllocation` is honoured for allocations of
    /// at least this many bytes; smaller ones share blocks, saving
    /// `vkAllocateMemory` calls (which cost 0.1–7 ms each on some drivers).
    pub honour_dedicated_preference_from: u64,
    /// Empty blocks kept per memory type (or pool, above its `min_blocks`) for
    /// reuse instead of being freed at once.
    pub keep_empty_blocks: u32,
    /// Bytes of corruption margin before and after each allocation in
    /// host-visible shared blocks, filled with a pattern and checked on free
    /// (see [`crate::corruption`]). 0 (the default) turns the check off.
    pub debug_margin: u64,
    /// Bytes of freed dedicated memory kept per memory type for reuse by a
    /// later allocation of about the same size (at most 1/8 larger); at most
    /// 1/16 of the type's heap. A
    /// driver's *preference* for dedicated memory is then met with a memory
    /// object of the allocation's own that does not name the resource, so it
    /// can be reused; *required* dedicated memory always names it. 0 turns
    /// reuse off (and preferred dedicated memory names the resource).
    pub recycle_bytes: u64,
}

impl Default for AllocatorDesc {
    fn default() -> Self {
        Self {
            block_size: 256 << 20,
            honour_dedicated_preference_from: 32 << 20,
            keep_empty_blocks: 1,
            debug_margin: 0,
            recycle_bytes: 512 << 20,
        }
    }
}

/// Heaps up to this size get blocks of 1/8 of the heap.
const SMALL_HEAP_MAX: u64 = 1 << 30;

/// One memory type's state.
#[derive(Debug)]
struct TypeState {
    flags: MemoryPropertyFlags,
    heap: u32,
    host_visible: bool,
    /// `HOST_VISIBLE` without `HOST_COHERENT`: allocations are padded to
    /// `nonCoherentAtomSize` so flushing one never touches a neighbour.
    non_coherent: bool,
    block_size: u64,
    list: Mutex<BlockList>,
    /// Freed dedicated blocks kept for reuse.
    recycle: Mutex<RecycleBin>,
    /// Default blocks and pools of this type together.
    counters: Counters,
}

/// A pool's state.
#[derive(Debug)]
struct PoolState {
    desc: PoolDesc,
    memory_type: u32,
    /// Bytes per block (`desc.block_size`, or the type's default for 0).
    block_size: u64,
    caps: PoolCaps,
    /// Bumped by `reset_pool`: allocations of an older epoch are already freed.
    epoch: AtomicU32,
    list: Mutex<BlockList>,
    counters: Counters,
}

#[derive(Debug, Default)]
struct PoolSlot {
    generation: u32,
    pool: Option<Arc<PoolState>>,
}

/// A leaked allocation, found when the allocator is dropped or asked.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Leak {
    /// The memory type.
    pub memory_type: u32,
    /// The pool's name, if it came from a pool.
    pub pool: Option<String>,
    /// Offset in its block.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Its tag, if one was given.
    pub tag: Option<String>,
}

static NEXT_ALLOCATOR_ID: AtomicU32 = AtomicU32::new(1);

/// A Vulkan memory suballocator over a [`MemoryDevice`].
///
/// `Send + Sync`: share it between threads behind an `Arc`. See the crate
/// documentation for a tour.
pub struct Allocator<D: MemoryDevice> {
    device: D,
    id: u32,
    desc: AllocatorDesc,
    types: Vec<TypeState>,
    pools: RwLock<Vec<PoolSlot>>,
    budgets: Budgets,
    objects: ObjectCount,
    type_cache: TypeCache,
    corruptions: AtomicU64,
    frame: AtomicU64,
    /// Whether `recorder` holds a recorder: checked without locking.
    recording: AtomicBool,
    recorder: Mutex<Option<Recorder>>,
}

impl<D: MemoryDevice> std::fmt::Debug for Allocator<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocator")
            .field("id", &self.id)
            .field("desc", &self.desc)
            .field("types", &self.types.len())
            .finish_non_exhaustive()
    }
}

impl<D: MemoryDevice> Allocator<D> {
    /// An allocator over `device`.
    ///
    /// # Errors
    /// [`Error::InvalidPool`] is never returned here; the only error is
    /// [`Error::Invariant`] when the device reports no memory type or heap.
    pub fn new(device: D, desc: AllocatorDesc) -> Result<Self, Error> {
        let props = device.memory_properties().clone();
        let limits = *device.limits();
        if props.types.is_empty() || props.heaps.is_empty() || props.types.len() > 32 {
            return Err(Error::Invariant(format!(
                "device reports {} memory types and {} heaps",
                props.types.len(),
                props.heaps.len()
            )));
        }
        let types = props
            .types
            .iter()
            .map(|t| {
                let heap_size = props.heaps[t.heap_index as usize].size;
                let block_size = if heap_size <= SMALL_HEAP_MAX {
                    (heap_size / 8).max(1 << 20)
                } else {
                    desc.block_size
                }
                .min(limits.max_memory_allocation_size);
                let host_visible = t.flags.contains(MemoryPropertyFlags::HOST_VISIBLE);
                TypeState {
                    flags: t.flags,
                    heap: t.heap_index,
                    host_visible,
                    non_coherent: host_visible
                        && !t.flags.contains(MemoryPropertyFlags::HOST_COHERENT),
                    block_size,
                    list: Mutex::new(BlockList::new(ListConfig {
                        block_size,
                        fixed_block_size: false,
                        min_blocks: 0,
                        keep_empty: desc.keep_empty_blocks,
                    })),
                    recycle: Mutex::new(RecycleBin::new(desc.recycle_bytes.min(heap_size / 16))),
                    counters: Counters::default(),
                }
            })
            .collect();
        let budgets = Budgets::new(&props);
        budgets.refresh(&device);
        Ok(Self {
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            device,
            desc,
            types,
            pools: RwLock::new(Vec::new()),
            budgets,
            objects: ObjectCount::default(),
            type_cache: TypeCache::new(),
            corruptions: AtomicU64::new(0),
            frame: AtomicU64::new(0),
            recording: AtomicBool::new(false),
            recorder: Mutex::new(None),
        })
    }

    /// The device the allocator works on.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The settings the allocator was made with.
    pub fn desc(&self) -> &AllocatorDesc {
        &self.desc
    }

    /// Reads heap budgets afresh (`VK_EXT_memory_budget`) and marks a frame
    /// boundary in a recorded trace; call once a frame.
    pub fn begin_frame(&self) {
        self.budgets.refresh(&self.device);
        let frame = self.frame.fetch_add(1, Ordering::Relaxed);
        self.record(|r| r.frame(frame));
    }

    /// Starts recording every allocation and free as a trace (format in
    /// [`crate::trace::format`]), written to `writer`. Replaces a recording
    /// already running, whose result is dropped.
    ///
    /// # Errors
    /// [`TraceError`] when the header can't be written.
    pub fn start_recording(
        &self,
        writer: Box<dyn Write + Send>,
        name: &str,
    ) -> Result<(), TraceError> {
        let recorder = Recorder::new(writer, name)?;
        *self.recorder.lock() = Some(recorder);
        self.recording.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops recording and hands back the writer, flushed. `None` when no
    /// recording was running.
    ///
    /// # Errors
    /// The first write error met while recording.
    pub fn stop_recording(&self) -> Option<Result<Box<dyn Write + Send>, TraceError>> {
        self.recording.store(false, Ordering::Release);
        self.recorder.lock().take().map(Recorder::finish)
    }

    fn record(&self, event: impl FnOnce(&mut Recorder)) {
        if self.recording.load(Ordering::Relaxed) {
            if let Some(recorder) = self.recorder.lock().as_mut() {
                event(recorder);
            }
        }
    }

    /// Allocates memory for `desc`.
    ///
    /// Picks the best memory type for the usage and falls back to the next
    /// one when a type is out of memory or over budget.
    ///
    /// # Errors
    /// See [`Error`]: every variant says how to recover. Nothing is left
    /// allocated when an error is returned.
    pub fn allocate(&self, desc: &AllocationDesc<'_>) -> Result<Allocation, Error> {
        check_request(desc)?;
        let allocation = match desc.options.pool {
            Some(id) => self.allocate_in_pool(&self.pool(id)?, desc)?,
            None => self.allocate_with(desc, MemoryPropertyFlags::NONE)?,
        };
        self.record(|r| r.alloc(desc, allocation.memory, allocation.offset));
        Ok(allocation)
    }

    fn allocate_with(
        &self,
        desc: &AllocationDesc<'_>,
        extra_required: MemoryPropertyFlags,
    ) -> Result<Allocation, Error> {
        let mut last_error = None;
        let mut tried = None;
        if let Some(memory_type) = self.fast_choice(desc, extra_required) {
            match self.allocate_in_type(memory_type, desc) {
                Ok(allocation) => return Ok(allocation),
                Err(e) if e.may_fall_back() => last_error = Some(e),
                Err(e) => return Err(e),
            }
            tried = Some(memory_type);
        }
        let candidates = self.rank_types(
            desc.options.usage,
            desc.memory_type_bits,
            desc,
            extra_required,
        )?;
        for memory_type in candidates.filter(|&t| Some(t) != tried) {
            match self.allocate_in_type(memory_type, desc) {
                Ok(allocation) => return Ok(allocation),
                Err(e) if e.may_fall_back() => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(Error::OutOfDeviceMemory { size: desc.size }))
    }

    /// Allocates host-visible, persistently mapped memory for `desc`.
    ///
    /// `HOST_VISIBLE` is added to the usage's required flags, so the result
    /// can always be mapped.
    ///
    /// # Errors
    /// As [`Self::allocate`]; [`Error::NotHostVisible`] when a pool of a
    /// device-only type was named.
    pub fn allocate_mapped(&self, desc: &AllocationDesc<'_>) -> Result<MappedAllocation, Error> {
        check_request(desc)?;
        let allocation = match desc.options.pool {
            Some(id) => self.allocate_in_pool(&self.pool(id)?, desc)?,
            None => self.allocate_with(desc, MemoryPropertyFlags::HOST_VISIBLE)?,
        };
        match allocation.into_mapped() {
            Ok(mapped) => {
                self.record(|r| r.alloc(desc, mapped.memory(), mapped.offset()));
                Ok(mapped)
            }
            Err(allocation) => {
                let memory_type = allocation.memory_type;
                self.free(allocation)?;
                Err(Error::NotHostVisible { memory_type })
            }
        }
    }

    /// Gives an allocation back.
    ///
    /// Allocations of a linear pool that was reset since are already free;
    /// freeing them again is a no-op.
    ///
    /// # Errors
    /// [`Error::ForeignAllocation`] if another allocator made it.
    pub fn free(&self, allocation: impl Into<Allocation>) -> Result<(), Error> {
        let allocation = allocation.into();
        let location = allocation.location;
        if location.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        self.record(|r| r.free(allocation.memory, allocation.offset));
        if allocation.host_address != 0 && self.desc.debug_margin > 0 {
            let block_address = allocation.host_address - allocation.offset as usize;
            self.check_margins(block_address, &location.range, &allocation);
        }
        let memory_type = allocation.memory_type;
        let ts = &self.types[memory_type as usize];
        match location.list {
            ListRef::Type(_) => {
                let doomed = ts
                    .list
                    .lock()
                    .free(location.block, location.range.id, location.range.offset)
                    .map_err(|e| Error::Invariant(e.to_string()))?;
                ts.counters.remove_allocations(1, location.range.size);
                if let Some(block) = doomed {
                    let doomed = if block.recyclable {
                        ts.recycle.lock().keep(block)
                    } else {
                        vec![block]
                    };
                    for block in doomed {
                        self.destroy_block(memory_type, block, None);
                    }
                }
            }
            ListRef::Pool(id) => {
                let pool = self.pool(id)?;
                let doomed = {
                    let mut list = pool.list.lock();
                    if pool.epoch.load(Ordering::Relaxed) != location.epoch {
                        return Ok(());
                    }
                    list.free(location.block, location.range.id, location.range.offset)
                        .map_err(|e| Error::Invariant(e.to_string()))?
                };
                ts.counters.remove_allocations(1, location.range.size);
                pool.counters.remove_allocations(1, location.range.size);
                if let Some(block) = doomed {
                    self.destroy_block(memory_type, block, Some(&pool));
                }
            }
        }
        Ok(())
    }

    /// Makes host writes to `allocation[offset..offset + size]` visible to
    /// the device. A no-op for `HOST_COHERENT` memory.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a range outside the allocation;
    /// [`Error::Device`] if the driver fails.
    pub fn flush(
        &self,
        allocation: &MappedAllocation,
        offset: u64,
        size: u64,
    ) -> Result<(), Error> {
        match self.mapped_range(allocation, offset, size)? {
            Some(range) => memory::flush(&self.device, &range),
            None => Ok(()),
        }
    }

    /// Makes device writes to `allocation[offset..offset + size]` visible to
    /// the host. A no-op for `HOST_COHERENT` memory.
    ///
    /// # Errors
    /// As [`Self::flush`].
    pub fn invalidate(
        &self,
        allocation: &MappedAllocation,
        offset: u64,
        size: u64,
    ) -> Result<(), Error> {
        match self.mapped_range(allocation, offset, size)? {
            Some(range) => memory::invalidate(&self.device, &range),
            None => Ok(()),
        }
    }

    /// The atom-aligned range to flush or invalidate, or `None` when the
    /// memory is coherent.
    fn mapped_range(
        &self,
        allocation: &MappedAllocation,
        offset: u64,
        size: u64,
    ) -> Result<Option<MappedRange>, Error> {
        let a = allocation.allocation();
        let end = offset
            .checked_add(size)
            .filter(|&end| end <= a.size)
            .ok_or(Error::OutOfBounds {
                offset,
                end: offset.saturating_add(size),
                size: a.size,
            })?;
        if !self.types[a.memory_type as usize].non_coherent || size == 0 {
            return Ok(None);
        }
        let atom = self.device.limits().non_coherent_atom_size.max(1);
        let start = (a.offset + offset) / atom * atom;
        let mut stop = (a.offset + end).div_ceil(atom) * atom;
        // Padding keeps shared allocations atom-aligned; a dedicated block may
        // end off an atom boundary, and Vulkan allows ranges that reach its end.
        let block_end = a.offset + a.location.range.size;
        if a.dedicated {
            stop = stop.min(block_end);
        }
        Ok(Some(MappedRange {
            memory: a.memory,
            offset: start,
            size: stop - start,
        }))
    }

    /// Creates a pool.
    ///
    /// `min_blocks` blocks are created at once.
    ///
    /// # Errors
    /// [`Error::InvalidPool`] for inconsistent fields;
    /// [`Error::NoCompatibleMemoryType`] if no type fits; any error of
    /// creating the first blocks.
    pub fn create_pool(&self, desc: &PoolDesc) -> Result<PoolId, Error> {
        if desc.max_blocks == 0 || desc.min_blocks > desc.max_blocks {
            return Err(Error::InvalidPool(
                "need 0 < max_blocks and min_blocks <= max_blocks",
            ));
        }
        let memory_type = match desc.memory_type {
            Some(t) if (t as usize) < self.types.len() => t,
            Some(_) => {
                return Err(Error::InvalidPool(
                    "memory_type is not a type of this device",
                ))
            }
            None => {
                let probe = AllocationDesc {
                    size: desc.block_size.max(1),
                    memory_type_bits: desc.memory_type_bits,
                    ..AllocationDesc::default()
                };
                self.rank_types(
                    desc.usage,
                    desc.memory_type_bits,
                    &probe,
                    MemoryPropertyFlags::NONE,
                )?
                .next()
                .expect("ranking returns at least one type")
            }
        };
        let ts = &self.types[memory_type as usize];
        let block_size = if desc.block_size == 0 {
            ts.block_size
        } else {
            desc.block_size
        };
        if let Some(budget) = desc.budget {
            if budget < block_size.saturating_mul(desc.min_blocks as u64) {
                return Err(Error::InvalidPool(
                    "budget is smaller than min_blocks blocks",
                ));
            }
        }
        let mut slots = self.pools.write();
        let index = slots
            .iter()
            .position(|s| s.pool.is_none())
            .unwrap_or_else(|| {
                slots.push(PoolSlot::default());
                slots.len() - 1
            });
        let id = PoolId {
            index: index as u32,
            generation: slots[index].generation,
        };
        let pool = Arc::new(PoolState {
            desc: desc.clone(),
            memory_type,
            block_size,
            caps: PoolCaps {
                id,
                committed: Default::default(),
                budget: desc.budget.unwrap_or(u64::MAX),
                blocks: Default::default(),
                max_blocks: desc.max_blocks,
            },
            epoch: AtomicU32::new(0),
            list: Mutex::new(BlockList::new(ListConfig {
                block_size,
                fixed_block_size: true,
                min_blocks: desc.min_blocks,
                keep_empty: self.desc.keep_empty_blocks,
            })),
            counters: Counters::default(),
        });
        for _ in 0..desc.min_blocks {
            match self.create_shared_block(memory_type, block_size, false, Some(&pool)) {
                Ok(block) => {
                    pool.list.lock().insert(block);
                }
                Err(e) => {
                    for block in pool.list.lock().drain() {
                        self.destroy_block(memory_type, block, Some(&pool));
                    }
                    return Err(e);
                }
            }
        }
        slots[index].pool = Some(pool);
        Ok(id)
    }

    /// Destroys an empty pool and frees its blocks.
    ///
    /// # Errors
    /// [`Error::PoolNotEmpty`] while it holds allocations;
    /// [`Error::UnknownPool`] for a stale id.
    pub fn destroy_pool(&self, id: PoolId) -> Result<(), Error> {
        let pool = {
            let mut slots = self.pools.write();
            let slot = slots
                .get_mut(id.index as usize)
                .filter(|s| s.generation == id.generation && s.pool.is_some())
                .ok_or(Error::UnknownPool(id))?;
            let pool = slot.pool.as_ref().expect("checked above");
            let live = pool.counters.snapshot().allocation_count;
            if live > 0 {
                return Err(Error::PoolNotEmpty { pool: id, live });
            }
            slot.generation = slot.generation.wrapping_add(1);
            slot.pool.take().expect("checked above")
        };
        let blocks = pool.list.lock().drain();
        for block in blocks {
            self.destroy_block(pool.memory_type, block, Some(&pool));
        }
        Ok(())
    }

    /// Frees every allocation of a pool at once (the per-frame reset of a
    /// linear pool). Dedicated allocations of the pool are released; its
    /// blocks are kept. Handles of the freed allocations may be dropped, or
    /// passed to [`Self::free`], which then does nothing.
    ///
    /// # Errors
    /// [`Error::UnknownPool`] for a stale id.
    pub fn reset_pool(&self, id: PoolId) -> Result<(), Error> {
        let pool = self.pool(id)?;
        let ts = &self.types[pool.memory_type as usize];
        let mut doomed = Vec::new();
        {
            let mut list = pool.list.lock();
            pool.epoch.fetch_add(1, Ordering::Relaxed);
            let mut count = 0u64;
            let mut bytes = 0u64;
            let mut dedicated = Vec::new();
            for (index, block) in list.iter() {
                count += block.allocation_count() as u64;
                bytes += block.allocated_bytes();
                if block.is_dedicated() {
                    dedicated.push(index);
                }
            }
            for index in dedicated {
                doomed.extend(list.remove(index));
            }
            list.iter_mut().for_each(Block::clear);
            ts.counters.remove_allocations(count, bytes);
            pool.counters.remove_allocations(count, bytes);
        }
        for block in doomed {
            self.destroy_block(pool.memory_type, block, Some(&pool));
        }
        Ok(())
    }

    /// Frees every empty block beyond each list's `min_blocks`, including
    /// those kept for reuse.
    pub fn trim(&self) {
        for (t, ts) in self.types.iter().enumerate() {
            let mut blocks = ts.list.lock().take_empty();
            blocks.extend(ts.recycle.lock().drain());
            for block in blocks {
                self.destroy_block(t as u32, block, None);
            }
        }
        for pool in self.live_pools() {
            let blocks = pool.list.lock().take_empty();
            for block in blocks {
                self.destroy_block(pool.memory_type, block, Some(&pool));
            }
        }
    }

    /// Cheap statistics: per heap, type and pool, read without locks.
    pub fn statistics(&self) -> Statistics {
        let props = self.device.memory_properties();
        let mut stats = Statistics {
            heaps: props
                .heaps
                .iter()
                .enumerate()
                .map(|(i, h)| HeapStatistics {
                    index: i as u32,
                    size: h.size,
                    device_local: h.device_local,
                    usage: Usage::default(),
                    budget: self.budgets.view(i as u32),
                })
                .collect(),
            device_memory_objects: self.objects.get(),
            corruptions_detected: self.corruptions.load(Ordering::Relaxed),
            ..Statistics::default()
        };
        for (i, ts) in self.types.iter().enumerate() {
            let usage = ts.counters.snapshot();
            stats.heaps[ts.heap as usize].usage.add(&usage);
            stats.total.add(&usage);
            stats.types.push(TypeStatistics {
                index: i as u32,
                heap: ts.heap,
                flags: ts.flags,
                usage,
            });
        }
        for pool in self.live_pools() {
            stats.pools.push(PoolStatistics {
                index: pool.caps.id.index,
                name: pool.desc.name.clone(),
                memory_type: pool.memory_type,
                budget: pool.desc.budget,
                usage: pool.counters.snapshot(),
            });
        }
        stats
    }

    /// Detailed statistics: every block with its allocations and free
    /// ranges. Locks each list in turn; meant for debugging and tools, not
    /// every frame.
    pub fn detailed_statistics(&self) -> DetailedStatistics {
        let mut details = DetailedStatistics {
            statistics: self.statistics(),
            ..DetailedStatistics::default()
        };
        let mut add_list = |memory_type: u32, pool: Option<String>, list: &BlockList| {
            let blocks: Vec<BlockInfo> = list.iter().map(|(_, b)| BlockInfo::of(b, true)).collect();
            if blocks.is_empty() {
                return;
            }
            for b in &blocks {
                details.largest_free = details.largest_free.max(b.largest_free);
                details.free_range_count += b.free_range_count as u64;
                details.free_bytes += b.free_ranges.iter().map(|r| r[1]).sum::<u64>();
            }
            details.lists.push(ListDetails {
                memory_type,
                pool,
                blocks,
            });
        };
        for (t, ts) in self.types.iter().enumerate() {
            add_list(t as u32, None, &ts.list.lock());
        }
        for pool in self.live_pools() {
            add_list(
                pool.memory_type,
                Some(pool.desc.name.clone()),
                &pool.list.lock(),
            );
        }
        details
    }

    /// The detailed statistics as JSON (schema in [`crate::stats`]).
    pub fn to_json(&self) -> String {
        crate::report::to_json(&self.detailed_statistics())
    }

    /// A text summary a person can read: heaps against budget, then each
    /// memory type and pool in use.
    pub fn summary(&self) -> String {
        crate::report::summary(&self.statistics())
    }

    /// Checks the corruption margins of every live allocation (see
    /// [`AllocatorDesc::debug_margin`]); returns how many are damaged.
    /// Slow: reads every margin under each list's lock.
    pub fn check_corruption(&self) -> u64 {
        let margin = self.desc.debug_margin;
        if margin == 0 {
            return 0;
        }
        let mut damaged = 0;
        let mut check = |list: &BlockList| {
            for (_, block) in list.iter() {
                if block.host_address == 0 || block.is_dedicated() {
                    continue;
                }
                block.for_each_allocation(&mut |offset, size, _| {
                    let range = Range {
                        id: crate::range::RangeId(0),
                        offset,
                        size,
                    };
                    if !corruption::intact(block.host_address, &range, margin) {
                        damaged += 1;
                    }
                });
            }
        };
        for ts in &self.types {
            check(&ts.list.lock());
        }
        for pool in self.live_pools() {
            check(&pool.list.lock());
        }
        damaged
    }

    /// Live allocations: what would be reported as leaked if the allocator
    /// were dropped now.
    pub fn leaks(&self) -> Vec<Leak> {
        let mut leaks = Vec::new();
        let mut collect = |memory_type: u32, pool: Option<&str>, list: &BlockList| {
            for (_, block) in list.iter() {
                block.for_each_allocation(&mut |offset, size, _| {
                    leaks.push(Leak {
                        memory_type,
                        pool: pool.map(str::to_owned),
                        offset,
                        size,
                        tag: block.tags.get(&offset).map(|t| t.to_string()),
                    })
                });
            }
        };
        for (t, ts) in self.types.iter().enumerate() {
            collect(t as u32, None, &ts.list.lock());
        }
        for pool in self.live_pools() {
            collect(pool.memory_type, Some(&pool.desc.name), &pool.list.lock());
        }
        leaks
    }

    /// Checks every invariant: each block's range allocator, each list's
    /// bookkeeping, and that the cheap counters match the blocks. Slow; for
    /// tests and debugging. Call it when no other thread is allocating.
    ///
    /// # Errors
    /// [`Error::Invariant`] naming the first broken invariant.
    pub fn validate(&self) -> Result<(), Error> {
        let mut objects = 0u32;
        let mut by_type = vec![Usage::default(); self.types.len()];
        let check_list = |list: &BlockList, usage: &mut Usage| -> Result<u32, Error> {
            list.validate().map_err(Error::Invariant)?;
            let mut n = 0;
            for (_, block) in list.iter() {
                n += 1;
                usage.add(&Usage {
                    block_count: 1,
                    block_bytes: block.size,
                    allocation_count: block.allocation_count() as u64,
                    allocation_bytes: block.allocated_bytes(),
                    dedicated_count: u32::from(block.is_dedicated()),
                });
            }
            Ok(n)
        };
        for (t, ts) in self.types.iter().enumerate() {
            objects += check_list(&ts.list.lock(), &mut by_type[t])?;
            for block in ts.recycle.lock().iter() {
                if !block.is_empty() || !block.is_dedicated() {
                    return Err(Error::Invariant(format!(
                        "memory type {t}: a kept block is not an empty dedicated block"
                    )));
                }
                objects += 1;
                by_type[t].add(&Usage {
                    block_count: 1,
                    block_bytes: block.size,
                    dedicated_count: 1,
                    ..Usage::default()
                });
            }
        }
        for pool in self.live_pools() {
            let mut usage = Usage::default();
            objects += check_list(&pool.list.lock(), &mut usage)?;
            let counted = pool.counters.snapshot();
            if counted != usage {
                return Err(Error::Invariant(format!(
                    "pool '{}': counters {counted:?} but blocks hold {usage:?}",
                    pool.desc.name
                )));
            }
            by_type[pool.memory_type as usize].add(&usage);
        }
        for (t, ts) in self.types.iter().enumerate() {
            let counted = ts.counters.snapshot();
            if counted != by_type[t] {
                return Err(Error::Invariant(format!(
                    "memory type {t}: counters {counted:?} but blocks hold {:?}",
                    by_type[t]
                )));
            }
        }
        if objects != self.objects.get() {
            return Err(Error::Invariant(format!(
                "{} device memory objects counted but {objects} blocks exist",
                self.objects.get()
            )));
        }
        Ok(())
    }

    // ---- internals -------------------------------------------------------

    fn memory_context(&self) -> memory::Context<'_> {
        memory::Context {
            device: &self.device,
            objects: &self.objects,
            budgets: &self.budgets,
        }
    }

    fn pool(&self, id: PoolId) -> Result<Arc<PoolState>, Error> {
        self.pools
            .read()
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
            .and_then(|s| s.pool.clone())
            .ok_or(Error::UnknownPool(id))
    }

    fn live_pools(&self) -> Vec<Arc<PoolState>> {
        self.pools
            .read()
            .iter()
            .filter_map(|s| s.pool.clone())
            .collect()
    }

    fn rank_types(
        &self,
        usage: MemoryUsage,
        memory_type_bits: u32,
        desc: &AllocationDesc<'_>,
        extra_required: MemoryPropertyFlags,
    ) -> Result<select::TypeCandidates, Error> {
        let mut rooms = [HeapRoom::UNKNOWN; 16];
        let heaps = self.budgets.heap_count().min(rooms.len());
        for (heap, room) in rooms.iter_mut().enumerate().take(heaps) {
            *room = HeapRoom(self.budgets.room(heap as u32));
        }
        let rooms = &rooms[..heaps];
        let props = self.device.memory_properties();
        let usage = if extra_required.is_empty() {
            usage
        } else {
            let mut flags = usage.resolve(props, memory_type_bits, desc.size, rooms);
            flags.required |= extra_required;
            MemoryUsage::Custom(flags)
        };
        let request = TypeRequest {
            usage,
            memory_type_bits,
            size: desc.size,
            within_budget: desc.options.within_budget,
        };
        select::rank_memory_types(props, &request, rooms).map_err(|e| match e {
            SelectError::NoMemoryTypeBits { .. } => Error::NoCompatibleMemoryType {
                memory_type_bits,
                required: MemoryPropertyFlags::NONE,
            },
            SelectError::NoTypeWithRequiredFlags { required, .. } => {
                Error::NoCompatibleMemoryType {
                    memory_type_bits,
                    required,
                }
            }
            SelectError::NoTypeWithinBudget { size, .. } => Error::NoTypeWithinBudget { size },
        })
    }

    /// The memory type the full ranking would choose first, found through
    /// the memo when that is cheap and certain; `None` sends the caller to the
    /// full ranking.
    fn fast_choice(
        &self,
        desc: &AllocationDesc<'_>,
        extra_required: MemoryPropertyFlags,
    ) -> Option<u32> {
        let usage = desc.options.usage;
        let implied = matches!(usage, MemoryUsage::Upload | MemoryUsage::Readback);
        if desc.options.within_budget || !(extra_required.is_empty() || implied) {
            return None;
        }
        let props = self.device.memory_properties();
        let first = self
            .type_cache
            .first_choice(props, usage, desc.memory_type_bits)?;
        type_cache::choose(props, first, desc.size, |heap| self.budgets.room(heap))
    }

    /// The range request for `desc` in memory type `memory_type`: non-coherent
    /// host-visible memory pads to whole atoms.
    fn range_request(&self, memory_type: u32, desc: &AllocationDesc<'_>) -> RangeRequest {
        let mut size = desc.size;
        let mut alignment = desc.alignment.max(1);
        let margin = self.margin(memory_type);
        if margin > 0 {
            size += corruption::lead(margin, alignment) + margin;
        }
        if self.types[memory_type as usize].non_coherent {
            let atom = self.device.limits().non_coherent_atom_size.max(1);
            alignment = alignment.max(atom);
            size = size.div_ceil(atom) * atom;
        }
        RangeRequest {
            size,
            alignment,
            kind: desc.kind.range_kind(),
        }
    }

    /// The corruption margin for shared blocks of `memory_type`.
    fn margin(&self, memory_type: u32) -> u64 {
        if self.types[memory_type as usize].host_visible {
            self.desc.debug_margin
        } else {
            0
        }
    }

    /// Checks the margins of an allocation being freed; logs and counts a
    /// corruption.
    fn check_margins(&self, block_address: usize, range: &Range, allocation: &Allocation) {
        let margin = self.margin(allocation.memory_type);
        if margin > 0 && !allocation.dedicated && !corruption::intact(block_address, range, margin)
        {
            self.corruptions.fetch_add(1, Ordering::Relaxed);
            log::error!(
                "vkalloc: corruption next to the allocation of {} bytes at offset {} of memory type {}",
                allocation.size,
                allocation.offset,
                allocation.memory_type
            );
        }
    }

    /// Whether `desc` gets its own device memory in a list of `block_size` blocks.
    fn wants_dedicated(&self, desc: &AllocationDesc<'_>, block_size: u64) -> Result<bool, Error> {
        let size = desc.size;
        let policy = desc.options.dedicated;
        if desc.driver_dedicated == DriverDedicated::Required {
            return match policy {
                DedicatedPolicy::Never => Err(Error::DedicatedRequired),
                _ => Ok(true),
            };
        }
        if size > block_size {
            return Ok(policy != DedicatedPolicy::Never);
        }
        // Keep a quarter of maxMemoryAllocationCount for blocks.
        let limit = self.device.limits().max_memory_allocation_count;
        let crowded = self.objects.get() >= limit - limit / 4;
        Ok(match policy {
            DedicatedPolicy::Always => true,
            DedicatedPolicy::Never => false,
            DedicatedPolicy::Auto if crowded => false,
            DedicatedPolicy::Auto => {
                (desc.driver_dedicated == DriverDedicated::Preferred
                    && size >= self.desc.honour_dedicated_preference_from)
                    || size > block_size / 2
            }
        })
    }

    fn allocate_in_type(
        &self,
        memory_type: u32,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        let ts = &self.types[memory_type as usize];
        if self.wants_dedicated(desc, ts.block_size)? {
            return self.allocate_dedicated(memory_type, desc, None);
        }
        let request = self.range_request(memory_type, desc);
        let sizes: Vec<u64> = {
            let mut list = ts.list.lock();
            if let Some((block, range)) = list.allocate(&request) {
                return Ok(self.finish(memory_type, None, &mut list, block, range, desc));
            }
            list.next_block_sizes(request.size).collect()
        };
        let mut last_error = Error::OutOfDeviceMemory { size: desc.size };
        for size in sizes {
            match self.create_shared_block(memory_type, size, desc.options.within_budget, None) {
                Ok(block) => {
                    let mut list = ts.list.lock();
                    let index = list.insert(block);
                    let range = list
                        .block_mut(index)
                        .and_then(|b| b.allocate(&request))
                        .expect("an empty block of at least the request's size fits it");
                    return Ok(self.finish(memory_type, None, &mut list, index, range, desc));
                }
                Err(e @ Error::OutOfDeviceMemory { .. }) => last_error = e,
                Err(e) => return Err(e),
            }
        }
        Err(last_error)
    }

    fn allocate_in_pool(
        &self,
        pool: &Arc<PoolState>,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        let memory_type = pool.memory_type;
        if desc.memory_type_bits & (1 << memory_type) == 0 {
            return Err(Error::NoCompatibleMemoryType {
                memory_type_bits: desc.memory_type_bits,
                required: self.types[memory_type as usize].flags,
            });
        }
        let block_size = pool.block_size;
        let linear = matches!(pool.desc.algorithm, PoolAlgorithm::Linear(_));
        // A linear pool's blocks are its whole capacity: a larger request
        // never fits, and a dedicated allocation would defeat its purpose.
        if linear && desc.size > block_size {
            return Err(Error::TooLarge {
                size: desc.size,
                max: block_size,
            });
        }
        // In a pool, memory of its own only where the driver requires it or
        // the allocation is larger than half a block.
        let dedicated = self.wants_dedicated(desc, block_size)?
            && (desc.driver_dedicated == DriverDedicated::Required
                || (!linear && desc.size > block_size / 2));
        if dedicated {
            return self.allocate_dedicated(memory_type, desc, Some(pool));
        }
        let request = self.range_request(memory_type, desc);
        {
            let mut list = pool.list.lock();
            if let Some((block, range)) = list.allocate(&request) {
                return Ok(self.finish(memory_type, Some(pool), &mut list, block, range, desc));
            }
        }
        let block = self.create_shared_block(
            memory_type,
            block_size,
            desc.options.within_budget,
            Some(pool),
        )?;
        let mut list = pool.list.lock();
        let index = list.insert(block);
        let range = list
            .block_mut(index)
            .and_then(|b| b.allocate(&request))
            .ok_or(Error::TooLarge {
                size: desc.size,
                max: block_size,
            });
        match range {
            Ok(range) => Ok(self.finish(memory_type, Some(pool), &mut list, index, range, desc)),
            Err(e) => {
                // Only reachable when alignment or granularity padding makes
                // the request larger than a whole block: give the block back.
                let block = list.remove(index).expect("just inserted");
                drop(list);
                self.destroy_block(memory_type, block, Some(pool));
                Err(e)
            }
        }
    }

    fn allocate_dedicated(
        &self,
        memory_type: u32,
        desc: &AllocationDesc<'_>,
        pool: Option<&Arc<PoolState>>,
    ) -> Result<Allocation, Error> {
        let ts = &self.types[memory_type as usize];
        let kind = desc.kind.range_kind();
        // Memory that names no resource can be reused later; the resource is
        // named where the driver requires it or the caller asked for it.
        let named = desc.driver_dedicated == DriverDedicated::Required
            || desc.options.dedicated == DedicatedPolicy::Always
            || self.desc.recycle_bytes == 0;
        let recyclable = pool.is_none() && !named;
        let reused = if recyclable {
            ts.recycle.lock().take(desc.size)
        } else {
            None
        };
        let block = match reused {
            Some(mut block) => {
                block.reuse_dedicated(kind);
                block
            }
            None => {
                let created = memory::create(
                    self.memory_context(),
                    &MemoryRequest {
                        memory_type,
                        heap: ts.heap,
                        size: desc.size,
                        dedicated_to: if named { desc.dedicated_to } else { None },
                        host_visible: ts.host_visible,
                        within_budget: desc.options.within_budget,
                        pool: pool.map(|p| &p.caps),
                        shared_block: false,
                    },
                )?;
                ts.counters.add_block(desc.size, true);
                if let Some(pool) = pool {
                    pool.counters.add_block(desc.size, true);
                }
                Block::dedicated(
                    created.memory,
                    desc.size,
                    created.host_address,
                    kind,
                    recyclable,
                )
            }
        };
        let range = block.dedicated_range();
        match pool {
            Some(pool) => {
                let mut list = pool.list.lock();
                let index = list.insert(block);
                Ok(self.finish(memory_type, Some(pool), &mut list, index, range, desc))
            }
            None => {
                let mut list = ts.list.lock();
                let index = list.insert(block);
                Ok(self.finish(memory_type, None, &mut list, index, range, desc))
            }
        }
    }

    fn create_shared_block(
        &self,
        memory_type: u32,
        size: u64,
        within_budget: bool,
        pool: Option<&Arc<PoolState>>,
    ) -> Result<Block, Error> {
        let ts = &self.types[memory_type as usize];
        let created = memory::create(
            self.memory_context(),
            &MemoryRequest {
                memory_type,
                heap: ts.heap,
                size,
                dedicated_to: None,
                host_visible: ts.host_visible,
                within_budget,
                pool: pool.map(|p| &p.caps),
                shared_block: true,
            },
        )?;
        ts.counters.add_block(size, false);
        let algorithm = match pool {
            Some(pool) => {
                pool.counters.add_block(size, false);
                pool.desc.algorithm
            }
            None => PoolAlgorithm::Tlsf,
        };
        Ok(Block::new(
            created.memory,
            size,
            created.host_address,
            algorithm,
            self.device.limits().buffer_image_granularity,
        ))
    }

    fn destroy_block(&self, memory_type: u32, block: Block, pool: Option<&Arc<PoolState>>) {
        let ts = &self.types[memory_type as usize];
        let dedicated = block.is_dedicated();
        ts.counters.remove_block(block.size, dedicated);
        if let Some(pool) = pool {
            pool.counters.remove_block(block.size, dedicated);
        }
        memory::destroy(
            self.memory_context(),
            Doomed {
                heap: ts.heap,
                memory: block.memory,
                size: block.size,
                host_address: block.host_address,
                pool: pool.map(|p| (&p.caps, !dedicated)),
            },
        );
    }

    /// Records a committed range as a handed-out allocation.
    fn finish(
        &self,
        memory_type: u32,
        pool: Option<&Arc<PoolState>>,
        list: &mut BlockList,
        block_index: u32,
        range: Range,
        desc: &AllocationDesc<'_>,
    ) -> Allocation {
        let block = list.block_mut(block_index).expect("block just used");
        let margin = self.margin(memory_type);
        let offset = if margin > 0 && !block.is_dedicated() {
            let offset = range.offset + corruption::lead(margin, desc.alignment);
            corruption::fill(block.host_address, &range, offset, desc.size);
            offset
        } else {
            range.offset
        };
        if !desc.options.tag.is_empty() {
            block.tags.insert(range.offset, desc.options.tag.into());
        }
        self.types[memory_type as usize]
            .counters
            .add_allocation(range.size);
        let (list_ref, epoch) = match pool {
            Some(pool) => {
                pool.counters.add_allocation(range.size);
                (
                    ListRef::Pool(pool.caps.id),
                    pool.epoch.load(Ordering::Relaxed),
                )
            }
            None => (ListRef::Type(memory_type), 0),
        };
        Allocation {
            memory: block.memory,
            offset,
            size: desc.size,
            memory_type,
            kind: desc.kind,
            host_address: if block.host_address == 0 {
                0
            } else {
                block.host_address + offset as usize
            },
            dedicated: block.is_dedicated(),
            location: Location {
                allocator: self.id,
                list: list_ref,
                block: block_index,
                range,
                epoch,
            },
        }
    }
}

fn check_request(desc: &AllocationDesc<'_>) -> Result<(), Error> {
    if desc.size == 0 {
        return Err(Error::ZeroSize);
    }
    if desc.alignment > 1 && !desc.alignment.is_power_of_two() {
        return Err(Error::InvalidAlignment(desc.alignment));
    }
    if desc.memory_type_bits == 0 {
        return Err(Error::NoCompatibleMemoryType {
            memory_type_bits: 0,
            required: MemoryPropertyFlags::NONE,
        });
    }
    Ok(())
}

impl<D: MemoryDevice> Drop for Allocator<D> {
    fn drop(&mut self) {
        let leaks = self.leaks();
        if !leaks.is_empty() {
            let bytes: u64 = leaks.iter().map(|l| l.size).sum();
            log::error!(
                "vkalloc: allocator dropped with {} live allocations ({} bytes); freeing their memory anyway",
                leaks.len(),
                bytes
            );
            for leak in leaks.iter().take(64) {
                log::error!(
                    "vkalloc: leaked {} bytes at offset {} of memory type {}{}{}",
                    leak.size,
                    leak.offset,
                    leak.memory_type,
                    leak.pool
                        .as_deref()
                        .map(|p| format!(" in pool '{p}'"))
                        .unwrap_or_default(),
                    leak.tag
                        .as_deref()
                        .map(|t| format!(", tag '{t}'"))
                        .unwrap_or_default(),
                );
            }
        }
        for pool in self.live_pools() {
            let blocks = pool.list.lock().drain();
            for block in blocks {
                self.destroy_block(pool.memory_type, block, Some(&pool));
            }
        }
        for t in 0..self.types.len() {
            let mut blocks = self.types[t].list.lock().drain();
            blocks.extend(self.types[t].recycle.lock().drain());
            for block in blocks {
                self.destroy_block(t as u32, block, None);
            }
        }
    }
}
