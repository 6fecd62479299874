//! Pools: creating them (first blocks made outside the pool table's lock),
//! resetting linear pools, destroying them; and trimming every vector.

use std::sync::Arc;

use super::{Allocator, PoolSlot, PoolState};
use crate::allocation::ListRef;
use crate::block::PoolAlgorithm;
use crate::block_list::ListConfig;
use crate::block_vector::{BlockVector, Close, LeakedBlocks, VectorConfig};
use crate::device::{MemoryDevice, MemoryPropertyFlags};
use crate::error::Error;
use crate::memory::PoolCaps;
use crate::pool::{PoolDesc, PoolId};
use crate::priority::AtomicPriority;

impl<D: MemoryDevice> Allocator<D> {
    /// Creates a pool.
    ///
    /// `min_blocks` blocks are created at once.
    ///
    /// # Errors
    /// [`Error::InvalidPool`] for inconsistent fields;
    /// [`Error::NoCompatibleMemoryType`] if no type fits; any error of
    /// creating the first blocks.
    pub fn create_pool(&self, desc: &PoolDesc) -> Result<PoolId, Error> {
        if !self.device.limits().external_memory.contains(desc.export) {
            return Err(Error::NotEnabled(
                "the pool's export handle types need their extensions enabled on the device \
                 (OPAQUE_FD: VK_KHR_external_memory_fd, and AshDeviceOptions::external_memory_fd)",
            ));
        }
        if desc.max_blocks == 0 || desc.min_blocks > desc.max_blocks {
            return Err(Error::InvalidPool(
                "need 0 < max_blocks and min_blocks <= max_blocks",
            ));
        }
        if let PoolAlgorithm::Linear(_) = desc.algorithm {
            if desc.block_size > self.device.limits().max_memory_allocation_size {
                return Err(Error::InvalidPool(
                    "block_size is larger than maxMemoryAllocationSize",
                ));
            }
        }
        let memory_type = match desc.memory_type {
            Some(t) if (t as usize) < self.types.len() => t,
            Some(_) => {
                return Err(Error::InvalidPool(
                    "memory_type is not a type of this device",
                ))
            }
            None => self
                .rank_types(
                    desc.usage,
                    desc.memory_type_bits,
                    desc.block_size.max(1),
                    false,
                    MemoryPropertyFlags::NONE,
                )?
                .next()
                .ok_or(Error::NoCompatibleMemoryType {
                    memory_type_bits: desc.memory_type_bits,
                    required: MemoryPropertyFlags::NONE,
                })?,
        };
        let ts = &self.types[memory_type as usize];
        let block_size = if desc.block_size == 0 {
            ts.vector.block_size
        } else {
            desc.block_size
        };
        if block_size > self.device.limits().max_memory_allocation_size {
            return Err(Error::InvalidPool(
                "block_size is larger than maxMemoryAllocationSize",
            ));
        }
        if let Some(budget) = desc.budget {
            if budget < block_size.saturating_mul(desc.min_blocks as u64) {
                return Err(Error::InvalidPool(
                    "budget is smaller than min_blocks blocks",
                ));
            }
        }
        // Reserve a slot; the first blocks are made without the table's lock.
        let id = self.pools.write(|slots| {
            let index = slots
                .iter()
                .position(|s| s.pool.is_none() && !s.reserved)
                .unwrap_or_else(|| {
                    slots.push(PoolSlot::default());
                    slots.len() - 1
                });
            slots[index].reserved = true;
            PoolId {
                index: index as u32,
                generation: slots[index].generation,
                allocator: self.id,
            }
        });
        let pool = Arc::new(PoolState {
            desc: desc.clone(),
            vector: BlockVector::new(VectorConfig {
                memory_type,
                heap: ts.vector.heap,
                host_visible: ts.vector.host_visible,
                non_coherent: ts.vector.non_coherent,
                pinned: ts.vector.pinned,
                algorithm: desc.algorithm,
                list: ListConfig {
                    block_size,
                    fixed_block_size: true,
                    min_blocks: desc.min_blocks,
                    keep_empty: crate::policy::pool_keep_empty(
                        desc.strategy,
                        self.desc.keep_empty_blocks,
                    ),
                },
                caps: Some(PoolCaps {
                    id,
                    committed: Default::default(),
                    budget: desc.budget.unwrap_or(u64::MAX),
                    blocks: Default::default(),
                    max_blocks: desc.max_blocks,
                    priority: AtomicPriority::new(desc.priority),
                    export: desc.export,
                }),
                recycle_bytes: 0,
                recycle_heap_share: 0,
                list_ref: ListRef::Pool(id),
                runs_from: self.desc.small_runs_from,
                pool_name: Some(desc.name.as_str().into()),
                strategy: desc.strategy,
            }),
        });
        let made = pool.vector.reserve_blocks(self.env(), desc.min_blocks);
        let failed = self.pools.write(|slots| {
            let slot = &mut slots[id.index as usize];
            slot.reserved = false;
            match made {
                Ok(()) => {
                    slot.pool = Some(Arc::clone(&pool));
                    None
                }
                Err(e) => Some(e),
            }
        });
        match failed {
            None => Ok(id),
            Some(e) => {
                pool.vector.teardown(self.env(), LeakedBlocks::Keep);
                Err(e)
            }
        }
    }

    /// Destroys an empty pool and frees its blocks.
    ///
    /// # Errors
    /// [`Error::PoolNotEmpty`] while it holds allocations (the destinations
    /// and old allocations of an open defragmentation pass on it count: end
    /// the pass, or drop its session);
    /// [`Error::UnknownPool`] for a stale id.
    pub fn destroy_pool(&self, id: PoolId) -> Result<(), Error> {
        let pool = self.pool(id)?;
        // A dropped defragmentation session's pass may hold reserved
        // destinations in the pool: ended first, they are not live.
        self.end_abandoned_passes();
        // Under every shard's lock: the count is exact (no placement half
        // done), and a placement after it sees the pool closed and places
        // nothing (`BlockVector::close`).
        match pool.vector.close() {
            Close::Closed => {}
            Close::AlreadyClosed => return Err(Error::UnknownPool(id)),
            Close::Live(live) => return Err(Error::PoolNotEmpty { pool: id, live }),
        }
        self.pools.write(|slots| {
            if let Some(slot) = slots
                .get_mut(id.index as usize)
                .filter(|s| s.generation == id.generation)
            {
                slot.generation = slot.generation.wrapping_add(1);
                slot.pool = None;
            }
        });
        pool.vector.teardown(self.env(), LeakedBlocks::Keep);
        Ok(())
    }

    /// Frees every allocation of a pool at once (the per-frame reset of a
    /// linear pool). Dedicated allocations of the pool are released; its
    /// blocks are kept. Handles of the freed allocations may be dropped, or
    /// passed to [`Self::free`], which then does nothing.
    ///
    /// # Safety
    /// The reset frees memory that handles made before it still point to,
    /// and the pool hands those bytes out again. So after the call, no
    /// [`crate::MappedAllocation`] of this pool made before it may be read
    /// or written (through [`crate::MappedAllocation::as_slice`],
    /// `as_mut_slice`, `write`, `read` or its pointer): drop those handles
    /// or free them. (The device, too, must be done with the memory, as for
    /// any free.)
    ///
    /// Safe code can't call it, so it can't leave aliasing handles behind:
    ///
    /// ```compile_fail
    /// # fn f<D: vkalloc::device::MemoryDevice>(a: &vkalloc::Allocator<D>, pool: vkalloc::PoolId) {
    /// a.reset_pool(pool).unwrap(); // error: call to unsafe function
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::UnknownPool`] for a stale id.
    pub unsafe fn reset_pool(&self, id: PoolId) -> Result<(), Error> {
        self.pool(id)?.vector.reset(self.env());
        Ok(())
    }

    /// Frees every empty block beyond each list's `min_blocks`, including
    /// dedicated memory kept for reuse (and first ends the passes of dropped
    /// defragmentation sessions, see [`crate::Defragmentation`]).
    pub fn trim(&self) {
        self.end_abandoned_passes();
        self.for_each_vector(|vector, _| vector.trim(self.env()));
    }
}
