//! The one allocation path: pick the memory type (or the pool), decide
//! between dedicated memory and a shared block, build the range request with
//! checked arithmetic, and hand it to the block vector. Freeing, flushing
//! and invalidating live here too.

#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use super::Allocator;
use crate::allocation::{Allocation, FreeError, ListRef, MappedAllocation};
use crate::block_vector::{
    BlockVector, DedicatedPlacement, FreeOutcome, ListKind, SharedPlacement,
};
use crate::corruption;
use crate::desc::{AllocationDesc, DedicatedPolicy, DriverDedicated};
use crate::device::{MappedRange, MemoryDevice, MemoryPropertyFlags};
use crate::error::Error;
use crate::memory;
use crate::range::RangeRequest;
use crate::select::{self, HeapRoom, MemoryUsage, SelectError, TypeRequest};
use crate::type_cache;

/// Requests at most this large are decided by the type's configured
/// largest block: no cap the policy sets ([`crate::policy::MIN_BLOCK_SIZE`]
/// and more) can make them large ([`crate::policy::large_request`]) or give
/// them memory of their own.
const CAP_DECIDES_FROM: u64 = crate::policy::MIN_BLOCK_SIZE / crate::policy::LARGE_REQUEST_DIVISOR;

impl<D: MemoryDevice> Allocator<D> {
    /// Allocates memory for `desc`.
    ///
    /// Picks the best memory type for the usage and falls back to the next
    /// one when a type is out of memory or over budget.
    ///
    /// # Errors
    /// See [`Error`]: every variant says how to recover. Nothing is left
    /// allocated when an error is returned.
    pub fn allocate(&self, desc: &AllocationDesc<'_>) -> Result<Allocation, Error> {
        self.allocate_checked(desc, MemoryPropertyFlags::NONE)
    }

    /// The memory type [`Self::allocate`] tries first for `desc` (its pool's
    /// type in a pool), without allocating: with requirements read from a
    /// create info (`Allocator::buffer_requirements` with feature `ash`), an
    /// engine learns where a resource would live before creating it.
    ///
    #[cfg_attr(feature = "sim", doc = "```")]
    #[cfg_attr(not(feature = "sim"), doc = "```ignore")]
    /// use vkalloc::{Allocator, AllocatorDesc, AllocationDesc, AllocationOptions, MemoryUsage};
    /// use vkalloc::sim::{SimDevice, tables};
    ///
    /// let allocator = Allocator::new(SimDevice::new(tables::nvidia_h200()), AllocatorDesc::default())?;
    /// let desc = AllocationDesc { size: 1 << 20, options: AllocationOptions::usage(MemoryUsage::GpuOnly), ..AllocationDesc::default() };
    /// let t = allocator.memory_type_for(&desc)?;
    /// let a = allocator.allocate(&desc)?;
    /// assert_eq!(a.memory_type(), t);
    /// allocator.free(a)?;
    /// # Ok::<(), vkalloc::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`Self::allocate`] when no memory type fits (or the request is
    /// invalid, or its pool unknown).
    pub fn memory_type_for(&self, desc: &AllocationDesc<'_>) -> Result<u32, Error> {
        check_request(desc)?;
        if let Some(id) = desc.options.pool {
            let memory_type = self.pool(id)?.vector.memory_type;
            if desc.memory_type_bits & (1 << memory_type) == 0 {
                return Err(Error::NoCompatibleMemoryType {
                    memory_type_bits: desc.memory_type_bits,
                    required: self.types[memory_type as usize].flags,
                });
            }
            return Ok(memory_type);
        }
        let mut candidates = self.rank_types(
            desc.options.usage,
            desc.memory_type_bits,
            desc.size,
            desc.options.within_budget,
            MemoryPropertyFlags::NONE,
        )?;
        candidates
            .next()
            .ok_or(Error::OutOfDeviceMemory { size: desc.size })
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
        let allocation = self.allocate_checked(desc, MemoryPropertyFlags::HOST_VISIBLE)?;
        allocation.into_mapped().map_err(|allocation| {
            let memory_type = allocation.memory_type;
            // Only a pool of a device-only type gets here; its fresh
            // allocation frees cleanly, so the error can't hide another.
            let _ = self.free(allocation);
            Error::NotHostVisible { memory_type }
        })
    }

    fn allocate_checked(
        &self,
        desc: &AllocationDesc<'_>,
        extra_required: MemoryPropertyFlags,
    ) -> Result<Allocation, Error> {
        check_request(desc)?;
        if self.idle_armed() {
            self.poll_idle();
        }
        // The result is handed back as it came (never unpacked and packed
        // again), so the `Allocation` is not copied on the way out.
        let result = match desc.options.pool {
            Some(id) => self.allocate_in_pool(id, desc),
            None => self.allocate_in_types(desc, extra_required),
        };
        #[cfg(feature = "trace")]
        if let Ok(allocation) = &result {
            self.record(|r| r.alloc(desc, allocation.memory, allocation.offset));
        }
        result
    }

    /// Allocates in pool `id`, whose memory type `desc` must allow.
    fn allocate_in_pool(
        &self,
        id: crate::pool::PoolId,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        let pool = self.pool(id)?;
        let memory_type = pool.vector.memory_type;
        if desc.memory_type_bits & (1 << memory_type) == 0 {
            return Err(Error::NoCompatibleMemoryType {
                memory_type_bits: desc.memory_type_bits,
                required: self.types[memory_type as usize].flags,
            });
        }
        match self.allocate_in(&pool.vector, desc) {
            // Empty blocks the pool keeps count against its budget: given
            // back, the request may fit (a byte budget is usable to the byte).
            Err(e @ Error::PoolExhausted { .. }) => {
                if pool.vector.release_empty(self.env()) > 0 {
                    self.allocate_in(&pool.vector, desc)
                } else {
                    Err(e)
                }
            }
            result => result,
        }
    }

    /// Tries the memory types best first, falling back on out-of-memory:
    /// the memo's first choice here, the full ranking in
    /// [`Self::allocate_ranked`] (kept out of line, so the common path
    /// carries no fallback loop).
    fn allocate_in_types(
        &self,
        desc: &AllocationDesc<'_>,
        extra_required: MemoryPropertyFlags,
    ) -> Result<Allocation, Error> {
        let Some(memory_type) = self.fast_choice(desc, extra_required) else {
            return self.allocate_ranked(desc, extra_required, None, None);
        };
        let result = self.allocate_in(&self.types[memory_type as usize].vector, desc);
        match result {
            Err(e) if e.may_fall_back() => {
                self.allocate_ranked(desc, extra_required, Some(memory_type), Some(e))
            }
            result => result,
        }
    }

    /// The memory types in the full ranking's order, but `tried` (the
    /// memo's choice, which failed with `last_error`).
    #[inline(never)]
    fn allocate_ranked(
        &self,
        desc: &AllocationDesc<'_>,
        extra_required: MemoryPropertyFlags,
        tried: Option<u32>,
        mut last_error: Option<Error>,
    ) -> Result<Allocation, Error> {
        let candidates = self.rank_types(
            desc.options.usage,
            desc.memory_type_bits,
            desc.size,
            desc.options.within_budget,
            extra_required,
        )?;
        for memory_type in candidates.filter(|&t| Some(t) != tried) {
            match self.allocate_in(&self.types[memory_type as usize].vector, desc) {
                Ok(allocation) => return Ok(allocation),
                Err(e) if e.may_fall_back() => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(Error::OutOfDeviceMemory { size: desc.size }))
    }

    /// Allocates in one block vector, a type's default blocks or a pool's:
    /// dedicated memory or a shared block, and the exact request. The
    /// decision and the call are one function, so no enum of placements is
    /// built, moved and matched on the hot path.
    fn allocate_in(
        &self,
        vector: &BlockVector,
        desc: &AllocationDesc<'_>,
    ) -> Result<Allocation, Error> {
        let kind = vector.kind();
        let configured = vector.block_size;
        // A type's default blocks decide by the largest block the policy
        // would make now (the pressure on the heap and its budget cap it:
        // [`crate::policy::point`]); requests too small for that to change
        // a decision skip reading the budget, and while memory objects run
        // short the configured block holds (a request past the cap would
        // otherwise take an object of its own).
        let block_size =
            if kind == ListKind::Default && desc.size > CAP_DECIDES_FROM && !self.objects_crowded()
            {
                configured.min(vector.block_cap(self.env()))
            } else {
                configured
            };
        // A linear pool's blocks are its whole capacity: a larger request
        // never fits, and a dedicated allocation would defeat its purpose.
        if kind == ListKind::LinearPool && desc.size > block_size {
            return Err(Error::TooLarge {
                size: desc.size,
                max: block_size,
            });
        }
        let mut dedicated = self.wants_dedicated(desc, block_size)?;
        let required = desc.driver_dedicated == DriverDedicated::Required;
        // Memory of its own only because the policy's cap is below the
        // type's largest block (not the caller's, the driver's or the
        // configured size's wish).
        let mut cap_only = false;
        match kind {
            ListKind::Default => {
                let minor_preference = || {
                    desc.driver_dedicated == DriverDedicated::Preferred
                        && self.minor_preference_takes_own(vector, desc)
                };
                if !dedicated {
                    dedicated = minor_preference();
                } else if block_size < configured
                    && !self.wants_dedicated(desc, configured)?
                    && !minor_preference()
                {
                    cap_only = true;
                }
            }
            // In a pool, memory of its own only where the driver requires it
            // or the allocation is larger than half a block (a linear pool:
            // only where the driver requires it).
            ListKind::Pool => dedicated &= required || desc.size > block_size / 2,
            ListKind::LinearPool => dedicated &= required,
        }
        // Room that existing blocks already have comes first there (every
        // shard's, waiting for busy locks): it costs no new memory on a heap
        // near its budget.
        if cap_only {
            let shared = self.shared_placement(vector.memory_type, desc)?;
            if let Some(result) =
                vector.allocate_in_existing_before_memory(self.env(), &shared, desc)
            {
                return result;
            }
        }
        if dedicated {
            let placement = if kind == ListKind::Default {
                self.dedicated_placement(desc)
            } else {
                // Exactly the request: a pool recycles nothing, and its
                // budget is counted to the byte.
                DedicatedPlacement {
                    size: desc.size,
                    named: desc.dedicated_to,
                    recyclable: false,
                    import_fd: None,
                }
            };
            return vector.allocate_dedicated(self.env(), &placement, desc);
        }
        let shared = self.shared_placement(vector.memory_type, desc)?;
        // A type's default blocks (not a pool's, not linear), where the
        // caller left the choice to the allocator and memory objects are not
        // running short: a large request ([`crate::policy::large_request`])
        // takes room in an existing block, else memory of its own where the
        // committed target cuts its block, else a new block.
        if kind == ListKind::Default
            && desc.options.dedicated == DedicatedPolicy::Auto
            && crate::policy::large_request(desc.size, block_size)
            && !self.objects_crowded()
        {
            if let Some(result) = vector.allocate_in_existing(self.env(), &shared, desc) {
                return result;
            }
            if vector.large_request_takes_own(self.env(), shared.request.size) {
                // The room of the shards that were busy before memory is
                // made (`allocate_shared` looks there itself).
                if let Some(result) =
                    vector.allocate_in_existing_before_memory(self.env(), &shared, desc)
                {
                    return result;
                }
                return vector.allocate_dedicated(
                    self.env(),
                    &self.dedicated_placement(desc),
                    desc,
                );
            }
        }
        vector.allocate_shared(self.env(), &shared, desc)
    }

    /// Whether a request the driver prefers dedicated, below
    /// [`crate::AllocatorDesc::honour_dedicated_preference_from`], gets
    /// memory of its own in a type's default blocks
    /// ([`crate::policy::minor_preference_takes_own`]): where the caller
    /// left the choice to the allocator, the type is not host-visible and
    /// memory objects are not running short.
    fn minor_preference_takes_own(&self, vector: &BlockVector, desc: &AllocationDesc<'_>) -> bool {
        let honour_from = self.desc.honour_dedicated_preference_from;
        // The sizes first: the live bytes are summed over the shards.
        desc.options.dedicated == DedicatedPolicy::Auto
            && desc.size < honour_from
            && desc.size >= honour_from / 2
            && !self.types[vector.memory_type as usize]
                .flags
                .contains(MemoryPropertyFlags::HOST_VISIBLE)
            && !self.objects_crowded()
            && crate::policy::minor_preference_takes_own(
                desc.size,
                honour_from,
                vector.usage().allocation_bytes,
            )
    }

    /// Memory of its own for `desc`. Memory that names no resource can be
    /// reused later, and is made in whole granules
    /// ([`crate::policy::recyclable_size`]); the resource is named where the
    /// driver requires it or the caller asked, or where reuse is off.
    fn dedicated_placement(&self, desc: &AllocationDesc<'_>) -> DedicatedPlacement {
        let named = desc.driver_dedicated == DriverDedicated::Required
            || desc.options.dedicated == DedicatedPolicy::Always
            || self.desc.recycle_bytes == 0;
        let size = if named {
            desc.size
        } else {
            let rounded = crate::policy::recyclable_size(desc.size);
            if rounded <= self.device.limits().max_memory_allocation_size {
                rounded
            } else {
                desc.size
            }
        };
        DedicatedPlacement {
            size,
            named: if named { desc.dedicated_to } else { None },
            recyclable: !named,
            import_fd: None,
        }
    }

    /// Whether device memory objects are running short: a quarter of
    /// `maxMemoryAllocationCount` is kept for blocks.
    fn objects_crowded(&self) -> bool {
        let limit = self.hot.max_allocation_count;
        self.objects.get() >= limit - limit / 4
    }

    /// The range to find in a shared block of `memory_type`: the corruption
    /// margins around the allocation, and whole atoms for non-coherent memory.
    /// Every sum is checked: a request that overflows can never fit.
    pub(super) fn shared_placement(
        &self,
        memory_type: u32,
        desc: &AllocationDesc<'_>,
    ) -> Result<SharedPlacement, Error> {
        let max_allocation_size = self.hot.max_allocation_size;
        let too_large = || Error::TooLarge {
            size: desc.size,
            max: max_allocation_size,
        };
        let mut alignment = desc.alignment.max(1);
        // The type looked up once, for its margin and its coherence.
        let ty = &self.types[memory_type as usize];
        let margin = ty.vector.margin(self.hot.debug_margin);
        let (mut size, lead) = if margin > 0 {
            let lead = corruption::lead(margin, alignment).ok_or_else(too_large)?;
            let size = desc
                .size
                .checked_add(lead)
                .and_then(|s| s.checked_add(margin))
                .ok_or_else(too_large)?;
            (size, lead)
        } else {
            (desc.size, 0)
        };
        if ty.vector.non_coherent {
            let atom = self.device.limits().non_coherent_atom_size.max(1);
            alignment = alignment.max(atom);
            size = size.checked_next_multiple_of(atom).ok_or_else(too_large)?;
        }
        if size > max_allocation_size {
            return Err(too_large());
        }
        Ok(SharedPlacement {
            request: RangeRequest {
                size,
                alignment,
                kind: desc.kind.range_kind(),
            },
            lead,
            margin,
        })
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
        let crowded = self.objects_crowded();
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

    /// Whether this allocator made `allocation`.
    pub fn owns(&self, allocation: &Allocation) -> bool {
        allocation.location.allocator == self.id
    }

    /// Gives an allocation back.
    ///
    /// Allocations of a pool that was reset since are already free; freeing
    /// them again is a no-op.
    ///
    /// # Errors
    /// The allocation comes back inside the [`FreeError`], so nothing is
    /// lost: [`Error::ForeignAllocation`] if another allocator made it (free
    /// it there); [`Error::UnknownPool`] if its pool was reset and destroyed
    /// since (the memory is already gone: drop it).
    #[inline]
    pub fn free(&self, allocation: impl Into<Allocation>) -> Result<(), FreeError> {
        self.free_allocation(allocation.into())
    }

    /// [`Self::free`] once the argument is an [`Allocation`]: it is read
    /// where the caller put it, not moved into a copy of its own first (the
    /// `into` inside a function that then borrows the result costs a copy
    /// of the whole allocation on every free).
    #[inline(never)]
    fn free_allocation(&self, allocation: Allocation) -> Result<(), FreeError> {
        if self.idle_armed() {
            self.poll_idle();
        }
        // Borrowed, not copied: the hot path reads a few of its fields.
        let location = &allocation.location;
        if location.allocator != self.id {
            return Err(FreeError::new(Error::ForeignAllocation, allocation));
        }
        // One call site of the vector's free (a pool's vector is kept alive
        // by `pool`); the vector applies the debug margin only where it is
        // host-visible (`BlockVector::margin`, as at allocation).
        let pool;
        let vector = match location.list {
            ListRef::Type(t) => &self.types[t as usize].vector,
            ListRef::Pool(id) => match self.pool(id) {
                Ok(p) => {
                    pool = p;
                    &pool.vector
                }
                Err(e) => return Err(FreeError::new(e, allocation)),
            },
        };
        let freed = vector.free(&|| self.env(), location, self.hot.debug_margin);
        match freed {
            Ok(FreeOutcome::AlreadyFree) => Ok(()),
            Ok(freed) => {
                if freed == FreeOutcome::Corrupted {
                    self.corruptions.fetch_add(1, Ordering::Relaxed);
                    log::error!(
                        "vkalloc: corruption next to the allocation of {} bytes at offset {} of memory type {}",
                        allocation.size,
                        allocation.offset,
                        allocation.memory_type
                    );
                }
                #[cfg(feature = "trace")]
                self.record(|r| r.free(allocation.memory, allocation.offset));
                Ok(())
            }
            Err(e) => Err(FreeError::new(*e, allocation)),
        }
    }

    /// Makes host writes to `allocation[offset..offset + size]` visible to
    /// the device. A no-op for `HOST_COHERENT` memory.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for a range outside the allocation;
    /// [`Error::ForeignAllocation`] if another allocator made it;
    /// [`Error::Device`] if the driver fails.
    pub fn flush(
        &self,
        allocation: &MappedAllocation,
        offset: u64,
        size: u64,
    ) -> Result<(), Error> {
        self.sync_mapped(allocation, offset, size, memory::flush)
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
        self.sync_mapped(allocation, offset, size, memory::invalidate)
    }

    /// Flushes or invalidates (`op`) the atom-aligned range, if the memory
    /// is not coherent.
    fn sync_mapped(
        &self,
        allocation: &MappedAllocation,
        offset: u64,
        size: u64,
        op: fn(&dyn MemoryDevice, &MappedRange) -> Result<(), Error>,
    ) -> Result<(), Error> {
        match self.mapped_range(allocation, offset, size)? {
            Some(range) => op(&self.device, &range),
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
        if a.location.allocator != self.id {
            return Err(Error::ForeignAllocation);
        }
        let end = offset
            .checked_add(size)
            .filter(|&end| end <= a.size)
            .ok_or(Error::OutOfBounds {
                offset,
                end: offset.saturating_add(size),
                size: a.size,
            })?;
        if !self.types[a.memory_type as usize].vector.non_coherent || size == 0 {
            return Ok(None);
        }
        let atom = self.device.limits().non_coherent_atom_size.max(1);
        // The allocation lies inside its block's range, which lies inside
        // the block: none of these sums overflow.
        let start = (a.offset + offset) / atom * atom;
        let mut stop = (a.offset + end).div_ceil(atom) * atom;
        // Padding keeps shared allocations atom-aligned; a dedicated block may
        // end off an atom boundary, and Vulkan allows ranges that reach its end.
        let range_end = a.location.range.offset + a.location.range.size;
        if a.dedicated {
            stop = stop.min(range_end);
        }
        Ok(Some(MappedRange {
            memory: a.memory,
            offset: start,
            size: stop - start,
        }))
    }

    pub(super) fn rank_types(
        &self,
        usage: MemoryUsage,
        memory_type_bits: u32,
        size: u64,
        within_budget: bool,
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
            let mut flags = usage.resolve(props, memory_type_bits, size, rooms);
            flags.required |= extra_required;
            MemoryUsage::Custom(flags)
        };
        let request = TypeRequest {
            usage,
            memory_type_bits,
            size,
            within_budget,
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
        type_cache::choose(
            first,
            desc.size,
            |heap| self.budgets.room(heap),
            |heap| self.budgets.rebar_limit(heap),
        )
    }
}

pub(super) fn check_request(desc: &AllocationDesc<'_>) -> Result<(), Error> {
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
