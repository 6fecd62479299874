//! vkalloc, raw `Allocator::allocate` / `free`.

use std::collections::HashMap;

use ash::vk;
use ash::vk::Handle;
use vkalloc::vk::{AshDevice, AshDeviceOptions, Buffer, Movable};
use vkalloc::{
    Allocation, AllocationDesc, AllocationId, AllocationOptions, Allocator, AllocatorDesc,
    DedicatedPolicy, Strategy,
};

use super::{Contender, Placement, Request};
use crate::compact::{compact, CompactStats};
use crate::vkdev::VulkanContext;

/// vkalloc's settings: those of `strategy` (`--strategy`), or what
/// `VKALLOC_BENCH_DESC` names on top of them for exploring a policy
/// (`block_size=N,keep_empty_blocks=N,recycle_bytes=N,
/// honour_dedicated_preference_from=N,small_runs_from=N`, bytes or counts). Rows stay labelled
/// `ours`: set it only for experiments, and say so with their figures.
pub fn desc_from_env(strategy: Strategy) -> Result<AllocatorDesc, String> {
    let mut desc = AllocatorDesc::for_strategy(strategy);
    let Ok(spec) = std::env::var("VKALLOC_BENCH_DESC") else {
        return Ok(desc);
    };
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("VKALLOC_BENCH_DESC: '{item}' is not key=value"))?;
        let n: u64 = value
            .parse()
            .map_err(|_| format!("VKALLOC_BENCH_DESC: '{value}' is not a number"))?;
        desc = match key {
            "block_size" => desc.with_block_size(n),
            "keep_empty_blocks" => desc.with_keep_empty_blocks(n.min(u64::from(u32::MAX)) as u32),
            "recycle_bytes" => desc.with_recycle_bytes(n),
            "honour_dedicated_preference_from" => desc.with_honour_dedicated_preference_from(n),
            "small_runs_from" => desc.with_small_runs_from(n.min(u64::from(u32::MAX)) as u32),
            _ => return Err(format!("VKALLOC_BENCH_DESC: unknown setting '{key}'")),
        };
    }
    Ok(desc)
}

/// vkalloc on the shared device, with its default settings.
pub struct Ours {
    allocator: Allocator<AshDevice>,
    /// Queue 0 of family 0, for defragmentation copies.
    queue: vk::Queue,
}

/// What a buffer bound over an allocation for a defragmentation move is
/// created with.
const MOVE_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw() | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

impl Ours {
    /// Creates the allocator on the context's device, with `strategy`'s
    /// settings ([`desc_from_env`]).
    pub fn new(ctx: &VulkanContext, strategy: Strategy) -> Result<Self, String> {
        // SAFETY: the device outlives the allocator (the caller drops it
        // before the context), and `memory_budget` says whether the
        // extension was enabled on it.
        let allocator = unsafe {
            Allocator::on_ash(
                &ctx.instance,
                ctx.physical_device,
                &ctx.device,
                AshDeviceOptions {
                    memory_budget: ctx.info.memory_budget,
                    ..AshDeviceOptions::default()
                },
                desc_from_env(strategy)?,
            )
        }
        .map_err(|e| format!("vkalloc: {e}"))?;
        // SAFETY: the context's device was created with one queue in family 0.
        let queue = unsafe { ctx.device.get_device_queue(0, 0) };
        Ok(Self { allocator, queue })
    }

    /// Binds a new `VkBuffer` over all of `a`'s bytes, so a defragmentation
    /// move can copy them; `Err(a)` when the device's requirements for such
    /// a buffer don't fit the allocation (size, alignment, memory type) or
    /// creating or binding it fails.
    fn wrap(&self, a: Allocation) -> Result<Buffer, Allocation> {
        let device = self.allocator.device().raw();
        let info = vk::BufferCreateInfo::default()
            .size(a.size())
            .usage(MOVE_USAGE)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: a valid create info for this device.
        let Ok(raw) = (unsafe { device.create_buffer(&info, None) }) else {
            return Err(a);
        };
        // SAFETY: `raw` is a live buffer of this device.
        let req = unsafe { device.get_buffer_memory_requirements(raw) };
        let fits = req.size <= a.size()
            && a.offset().is_multiple_of(req.alignment.max(1))
            && req.memory_type_bits & (1 << a.memory_type()) != 0;
        // SAFETY: the buffer is unbound; `fits` checked the requirements
        // against the allocation's memory, offset and size.
        let bound = fits
            && unsafe {
                device.bind_buffer_memory(raw, vk::DeviceMemory::from_raw(a.memory().0), a.offset())
            }
            .is_ok();
        if !bound {
            // SAFETY: unused by any command.
            unsafe { device.destroy_buffer(raw, None) };
            return Err(a);
        }
        let size = a.size();
        // SAFETY: `raw` was created with MOVE_USAGE, exclusive, no flags, of
        // `a.size()` bytes, and is bound to `a`; only `unwrap` destroys it.
        Ok(unsafe { Buffer::from_raw_parts_with_usage(raw, a, size, MOVE_USAGE) })
    }

    /// Destroys the buffer [`Self::wrap`] (or a move) bound and gives back
    /// its allocation.
    fn unwrap(&self, m: Movable) -> Allocation {
        let device = self.allocator.device().raw();
        let (raw, a) = match m {
            Movable::Buffer(b) => b.into_raw_parts(),
            Movable::Image { image, .. } => {
                let (raw, a) = image.into_raw_parts();
                // SAFETY: no command uses it (perform_moves waited).
                unsafe { device.destroy_image(raw, None) };
                return a;
            }
        };
        // SAFETY: no command uses it (perform_moves waited for its copies).
        unsafe { device.destroy_buffer(raw, None) };
        a
    }

    /// [`Contender::compact`] on the device: wraps every movable allocation
    /// in a buffer, runs the passes with `perform_moves`, unwraps.
    fn compact_on_device(
        &mut self,
        live: &mut [Option<Allocation>],
    ) -> Result<CompactStats, String> {
        let slot_of: HashMap<AllocationId, usize> = live
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.as_ref().map(|a| (a.id(), i)))
            .collect();
        let mut held: Vec<Option<Movable>> = Vec::new();
        let mut pinned = 0;
        for slot in live.iter_mut() {
            let Some(a) = slot.take() else { continue };
            if a.is_dedicated() {
                *slot = Some(a);
                continue;
            }
            match self.wrap(a) {
                Ok(b) => held.push(Some(Movable::Buffer(b))),
                Err(a) => {
                    // Left where it is; pinned so no move is planned for it.
                    let _ = self.allocator.set_movable(&a, false);
                    pinned += 1;
                    *slot = Some(a);
                }
            }
        }
        let mut lost: Vec<Movable> = Vec::new();
        let queue = self.queue;
        let allocator = &self.allocator;
        let result = compact(
            allocator,
            &mut held,
            |m| m.allocation().id(),
            |session, pairs| {
                // SAFETY: queue 0 of family 0 (graphics: transfer too) is
                // used by no one else; every buffer is live and nothing
                // writes it (the bench records no other commands).
                match unsafe { allocator.perform_moves(session, queue, 0, pairs) } {
                    Ok(kept) => Ok(kept),
                    Err((e, back)) => {
                        lost.extend(back);
                        Err(format!("perform_moves: {e}"))
                    }
                }
            },
        );
        for m in held.into_iter().flatten().chain(lost) {
            let a = self.unwrap(m);
            match slot_of.get(&a.id()) {
                Some(&i) => live[i] = Some(a),
                None => {
                    let _ = self.allocator.free(a);
                }
            }
        }
        result.map(|s| CompactStats { pinned, ..s })
    }

    /// The allocator, for statistics.
    pub fn allocator(&self) -> &Allocator<AshDevice> {
        &self.allocator
    }
}

impl Contender for Ours {
    type Handle = vkalloc::Allocation;

    fn name(&self) -> &'static str {
        "ours"
    }

    #[inline]
    fn allocate(&mut self, r: &Request<'_>) -> Result<Self::Handle, String> {
        let desc = AllocationDesc {
            size: r.size,
            alignment: r.alignment,
            memory_type_bits: r.memory_type_bits,
            kind: r.kind.into(),
            driver_dedicated: r.dedicated.into(),
            dedicated_to: None,
            options: AllocationOptions {
                usage: r.usage.into(),
                pool: None,
                dedicated: DedicatedPolicy::Auto,
                tag: r.tag,
                within_budget: false,
                pinned: false,
                priority: None,
            },
        };
        self.allocator
            .allocate(&desc)
            .map_err(|e| format!("vkalloc: {e}"))
    }

    #[inline]
    fn free(&mut self, handle: Self::Handle) {
        // A failure here is a bug; it shows as a leak at the end of the run.
        let _ = self.allocator.free(handle);
    }

    fn placement(&self, h: &Self::Handle) -> Placement {
        Placement {
            memory: h.memory().0,
            offset: h.offset(),
            size: h.size(),
            memory_type: h.memory_type(),
        }
    }

    fn begin_frame(&mut self, _index: u64) {
        self.allocator.begin_frame();
    }

    fn compact(
        &mut self,
        live: &mut [Option<Self::Handle>],
    ) -> Option<Result<CompactStats, String>> {
        Some(self.compact_on_device(live))
    }

    fn largest_free_range(&self) -> Option<u64> {
        Some(self.allocator.detailed_statistics().largest_free)
    }

    fn memory_report(&self) -> String {
        let d = self.allocator.detailed_statistics();
        let (mut shared, mut shared_bytes, mut shared_used, mut empty, mut empty_bytes) =
            (0, 0, 0, 0, 0);
        let (mut dedicated, mut dedicated_bytes) = (0, 0);
        let mut sizes = Vec::new();
        for list in &d.lists {
            for b in &list.blocks {
                if b.dedicated {
                    dedicated += 1;
                    dedicated_bytes += b.size;
                } else {
                    shared += 1;
                    shared_bytes += b.size;
                    shared_used += b.allocation_bytes;
                    sizes.push(b.size >> 20);
                    if b.allocation_count == 0 {
                        empty += 1;
                        empty_bytes += b.size;
                    }
                }
            }
        }
        format!(
            "{dedicated} dedicated ({}); {shared} shared blocks ({}, {} used; MiB each {sizes:?}), {empty} empty ({})",
            super::mib(dedicated_bytes),
            super::mib(shared_bytes),
            super::mib(shared_used),
            super::mib(empty_bytes),
        )
    }
}
