//! A set of live resources, each holding its own byte pattern, written and
//! read back through the GPU.
//!
//! This is how the tests prove the allocator on real memory: every resource
//! in a [`ResourceSet`] is alive at once, each gets a unique pattern, all are
//! written, then all are copied back to fresh readback buffers and checked.
//! Two allocations that overlap clobber each other's pattern; memory bound at
//! the wrong offset shows the wrong bytes. On top of that, the set checks on
//! the CPU that no two allocations share a byte and that each honours its
//! resource's memory requirements.

use ash::vk;
use vkalloc::stats::DefragStats;
use vkalloc::vk::{Buffer, Image, MappedBuffer, MappedImage, Movable};
use vkalloc::{
    Allocation, AllocationDesc, AllocationOptions, DefragDesc, MappedAllocation, MemoryUsage,
    ResourceKind,
};

use crate::commands::LayoutTransition;
use crate::pattern;
use crate::GpuContext;

/// Buffer usages every test buffer gets: copies both ways, plus the usages
/// that raise alignment requirements on real drivers.
pub const TEST_BUFFER_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw()
        | vk::BufferUsageFlags::UNIFORM_BUFFER.as_raw()
        | vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::VERTEX_BUFFER.as_raw(),
);

/// The format of test images: 4 bytes a texel, copied bit for bit.
pub const TEST_IMAGE_FORMAT: vk::Format = vk::Format::R8G8B8A8_UINT;
const TEXEL_BYTES: u64 = 4;

/// A live resource and its memory, as the allocator's typed surface hands
/// it out.
#[derive(Debug)]
pub enum Held {
    /// A buffer in memory the host does not touch.
    Buffer(Buffer),
    /// A persistently mapped buffer.
    MappedBuffer(MappedBuffer),
    /// An image in memory the host does not touch.
    Image(Image),
    /// A linear image in mapped memory.
    MappedImage(MappedImage),
}

impl Held {
    /// The allocation.
    pub fn allocation(&self) -> &Allocation {
        match self {
            Held::Buffer(b) => b.allocation(),
            Held::MappedBuffer(b) => b.allocation(),
            Held::Image(i) => i.allocation(),
            Held::MappedImage(i) => i.allocation(),
        }
    }

    /// The mapping, for host-written resources.
    pub fn mapped(&self) -> Option<&MappedAllocation> {
        match self {
            Held::MappedBuffer(b) => Some(b.allocation()),
            Held::MappedImage(i) => Some(i.allocation()),
            Held::Buffer(_) | Held::Image(_) => None,
        }
    }

    fn mapped_mut(&mut self) -> Option<&mut MappedAllocation> {
        match self {
            Held::MappedBuffer(b) => Some(b.mapped_mut()),
            Held::MappedImage(i) => Some(i.mapped_mut()),
            Held::Buffer(_) | Held::Image(_) => None,
        }
    }
}

/// What a [`Subject`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubjectKind {
    /// A buffer of this many bytes.
    Buffer(vk::Buffer, u64),
    /// A single-mip 2D [`TEST_IMAGE_FORMAT`] image with optimal tiling.
    OptimalImage(vk::Image, vk::Extent2D),
    /// A single-mip 2D [`TEST_IMAGE_FORMAT`] image with linear tiling, in
    /// host-visible memory, written through the mapping.
    LinearImage(vk::Image, vk::Extent2D),
}

/// How a subject's pattern gets into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritePath {
    /// Through the allocation's mapping (then flushed).
    Host,
    /// Copied by the GPU from a staging buffer.
    Gpu,
}

/// One live resource of a [`ResourceSet`].
#[derive(Debug)]
pub struct Subject {
    /// A description for failure messages.
    pub label: String,
    /// The resource.
    pub kind: SubjectKind,
    /// The resource with its memory.
    pub held: Held,
    /// The seed of its pattern.
    pub seed: u64,
    /// How it is written.
    pub write: WritePath,
    /// The resource's memory requirements, as the driver gave them.
    pub requirements: vk::MemoryRequirements,
}

impl Subject {
    /// Bytes of the pattern: the buffer size or the image's texels.
    pub fn content_bytes(&self) -> u64 {
        match self.kind {
            SubjectKind::Buffer(_, size) => size,
            SubjectKind::OptimalImage(_, e) | SubjectKind::LinearImage(_, e) => {
                u64::from(e.width) * u64::from(e.height) * TEXEL_BYTES
            }
        }
    }
}

/// Resources that are all alive at once, each with its own pattern.
///
/// Add resources, [`ResourceSet::write_all`], [`ResourceSet::check_all`]
/// (as often as wanted), then [`ResourceSet::destroy_all`].
pub struct ResourceSet<'a> {
    ctx: &'a GpuContext,
    subjects: Vec<Subject>,
    seed_base: u64,
    written: bool,
}

impl<'a> ResourceSet<'a> {
    /// An empty set; patterns are derived from `seed_base` and each
    /// subject's position, so two sets with different bases differ too.
    pub fn new(ctx: &'a GpuContext, seed_base: u64) -> Self {
        Self {
            ctx,
            subjects: Vec::new(),
            seed_base,
            written: false,
        }
    }

    /// The resources so far.
    pub fn subjects(&self) -> &[Subject] {
        &self.subjects
    }

    fn next_seed(&self) -> u64 {
        self.seed_base
            .wrapping_mul(0x1000_0000_01B3)
            .wrapping_add(self.subjects.len() as u64 + 1)
    }

    /// Creates a buffer of `size` bytes through the allocator.
    ///
    /// With `mapped`, the buffer comes from `create_buffer_mapped` and is
    /// written through its mapping; otherwise it is written by a GPU copy.
    ///
    /// # Errors
    /// What the allocator returned.
    pub fn add_buffer(
        &mut self,
        label: &str,
        size: u64,
        options: &AllocationOptions<'_>,
        mapped: bool,
    ) -> Result<&Subject, vkalloc::Error> {
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(TEST_BUFFER_USAGE)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let allocator = self.ctx.allocator();
        let (buffer, held, write) = if mapped {
            // SAFETY: the create info is valid (non-zero size, supported
            // usages, exclusive sharing) and outlives the call.
            let b = unsafe { allocator.create_buffer_mapped(&info, options) }?;
            (b.raw(), Held::MappedBuffer(b), WritePath::Host)
        } else {
            // SAFETY: as above.
            let b = unsafe { allocator.create_buffer(&info, options) }?;
            (b.raw(), Held::Buffer(b), WritePath::Gpu)
        };
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { self.ctx.device().get_buffer_memory_requirements(buffer) };
        let label = format!("{label} (buffer, {size} B, {:?})", options.usage);
        Ok(self.push(Subject {
            label,
            kind: SubjectKind::Buffer(buffer, size),
            held,
            seed: self.next_seed(),
            write,
            requirements,
        }))
    }

    /// Creates a buffer of `size` bytes with `vkCreateBuffer`, allocates
    /// memory for it with the allocator's raw [`vkalloc::Allocator::allocate`]
    /// (or `allocate_mapped` with `mapped`) and binds it with
    /// `vkBindBufferMemory`: the path of a caller that manages its own
    /// resources.
    ///
    /// # Errors
    /// What the allocator returned.
    ///
    /// # Panics
    /// If a Vulkan call fails.
    pub fn add_raw_buffer(
        &mut self,
        label: &str,
        size: u64,
        options: &AllocationOptions<'_>,
        mapped: bool,
    ) -> Result<&Subject, vkalloc::Error> {
        let device = self.ctx.device();
        let allocator = self.ctx.allocator();
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(TEST_BUFFER_USAGE)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: the create info is valid and outlives the call.
        let buffer = unsafe { device.create_buffer(&info, None) }.expect("vkCreateBuffer failed");
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { device.get_buffer_memory_requirements(buffer) };
        let desc = AllocationDesc {
            size: requirements.size,
            alignment: requirements.alignment,
            memory_type_bits: requirements.memory_type_bits,
            kind: ResourceKind::Buffer,
            options: *options,
            ..AllocationDesc::default()
        };
        let bind = |a: &Allocation| {
            // SAFETY: the buffer is unbound; the allocation satisfies its
            // requirements (checked again by `check_placement`) and lives
            // until `destroy_all`, which destroys the buffer first.
            unsafe { device.bind_buffer_memory(buffer, a.vk_memory(), a.offset()) }
                .expect("vkBindBufferMemory failed");
        };
        let held = if mapped {
            allocator.allocate_mapped(&desc).map(|m| {
                bind(&m);
                // SAFETY: `buffer` is this device's, `size` bytes, bound to
                // `m` just above, and destroyed only through the allocator.
                Held::MappedBuffer(unsafe { Buffer::from_raw_parts(buffer, m, size) })
            })
        } else {
            allocator.allocate(&desc).map(|a| {
                bind(&a);
                // SAFETY: as above.
                Held::Buffer(unsafe { Buffer::from_raw_parts(buffer, a, size) })
            })
        };
        let held = match held {
            Ok(held) => held,
            Err(err) => {
                // SAFETY: the buffer was never bound or used.
                unsafe { device.destroy_buffer(buffer, None) };
                return Err(err);
            }
        };
        let write = if mapped {
            WritePath::Host
        } else {
            WritePath::Gpu
        };
        let label = format!("{label} (raw buffer, {size} B, {:?})", options.usage);
        Ok(self.push(Subject {
            label,
            kind: SubjectKind::Buffer(buffer, size),
            held,
            seed: self.next_seed(),
            write,
            requirements,
        }))
    }

    /// Creates an optimal-tiling [`TEST_IMAGE_FORMAT`] image through the
    /// allocator; it is written by a GPU copy.
    ///
    /// # Errors
    /// What the allocator returned.
    pub fn add_optimal_image(
        &mut self,
        label: &str,
        extent: vk::Extent2D,
        options: &AllocationOptions<'_>,
    ) -> Result<&Subject, vkalloc::Error> {
        let info = image_info(extent, vk::ImageTiling::OPTIMAL, vk::ImageLayout::UNDEFINED);
        // SAFETY: the create info describes a valid 2D color image and
        // outlives the call.
        let bound = unsafe { self.ctx.allocator().create_image(&info, options) }?;
        let image = bound.raw();
        // SAFETY: `image` was just created on this device.
        let requirements = unsafe { self.ctx.device().get_image_memory_requirements(image) };
        let label = format!(
            "{label} (optimal image {}x{}, {:?})",
            extent.width, extent.height, options.usage
        );
        Ok(self.push(Subject {
            label,
            kind: SubjectKind::OptimalImage(image, extent),
            held: Held::Image(bound),
            seed: self.next_seed(),
            write: WritePath::Gpu,
            requirements,
        }))
    }

    /// Creates a linear-tiling [`TEST_IMAGE_FORMAT`] image through the
    /// allocator, in host-visible memory (`options.usage` should be
    /// `Upload` or `Readback`); it is written through the mapping.
    ///
    /// # Errors
    /// What the allocator returned, or [`vkalloc::Error::NotHostVisible`]
    /// when the allocator put it in memory that can't be mapped.
    pub fn add_linear_image(
        &mut self,
        label: &str,
        extent: vk::Extent2D,
        options: &AllocationOptions<'_>,
    ) -> Result<&Subject, vkalloc::Error> {
        let info = image_info(
            extent,
            vk::ImageTiling::LINEAR,
            vk::ImageLayout::PREINITIALIZED,
        );
        let allocator = self.ctx.allocator();
        // SAFETY: the create info describes a valid 2D color image and
        // outlives the call.
        let bound = unsafe { allocator.create_image(&info, options) }?;
        let image = bound.raw();
        let memory_type = bound.allocation().memory_type();
        let mapped = match bound.into_mapped() {
            Ok(m) => m,
            Err(bound) => {
                // SAFETY: the image was just created and never used by the device.
                unsafe { allocator.destroy_image(bound) }.expect("destroy_image failed");
                return Err(vkalloc::Error::NotHostVisible { memory_type });
            }
        };
        // SAFETY: `image` was just created on this device.
        let requirements = unsafe { self.ctx.device().get_image_memory_requirements(image) };
        let label = format!(
            "{label} (linear image {}x{}, {:?})",
            extent.width, extent.height, options.usage
        );
        Ok(self.push(Subject {
            label,
            kind: SubjectKind::LinearImage(image, extent),
            held: Held::MappedImage(mapped),
            seed: self.next_seed(),
            write: WritePath::Host,
            requirements,
        }))
    }

    fn push(&mut self, subject: Subject) -> &Subject {
        assert!(!self.written, "add every resource before write_all");
        self.subjects.push(subject);
        self.subjects.last().expect("just pushed")
    }

    /// Checks on the CPU what needs no GPU: every allocation honours its
    /// resource's size, alignment and memory type bits, host-visible usages
    /// got host-visible memory, and no two allocations (these and `others`)
    /// share a byte of the same `VkDeviceMemory`.
    ///
    /// # Panics
    /// On the first broken rule, naming the resources.
    pub fn check_placement(&self, others: &[(&str, &Allocation)]) {
        let types = self.ctx.info().memory_properties.memory_types_as_slice();
        for s in &self.subjects {
            let a = s.held.allocation();
            let r = &s.requirements;
            assert!(
                a.size() >= r.size,
                "{}: allocation of {} B for a resource that needs {} B",
                s.label,
                a.size(),
                r.size
            );
            assert!(
                r.alignment == 0 || a.offset() % r.alignment == 0,
                "{}: offset {} is not aligned to {}",
                s.label,
                a.offset(),
                r.alignment
            );
            assert!(
                r.memory_type_bits & (1 << a.memory_type()) != 0,
                "{}: memory type {} is not in the resource's memoryTypeBits {:#b}",
                s.label,
                a.memory_type(),
                r.memory_type_bits
            );
            if s.held.mapped().is_some() {
                let flags = types[a.memory_type() as usize].property_flags;
                assert!(
                    flags.contains(vk::MemoryPropertyFlags::HOST_VISIBLE),
                    "{}: mapped allocation in memory type {} with flags {flags:?}",
                    s.label,
                    a.memory_type()
                );
            }
        }
        let mut all: Vec<(&str, &Allocation)> = self
            .subjects
            .iter()
            .map(|s| (s.label.as_str(), s.held.allocation()))
            .collect();
        all.extend_from_slice(others);
        assert_disjoint(&all);
    }

    /// Writes every subject's pattern: host-written ones through their
    /// mapping (then flushed), the others with one GPU submission of copies
    /// from staging buffers, which are destroyed afterwards. Images end in
    /// `TRANSFER_SRC_OPTIMAL` layout.
    ///
    /// # Panics
    /// If a step fails.
    pub fn write_all(&mut self) {
        assert!(!self.written, "write_all runs once");
        self.written = true;
        let ctx = self.ctx;
        let allocator = ctx.allocator();
        let device = ctx.device();
        // Host writes first.
        for s in &mut self.subjects {
            if s.write != WritePath::Host {
                continue;
            }
            let seed = s.seed;
            let content = s.content_bytes();
            let Some(m) = s.held.mapped_mut() else {
                panic!("{}: host write path without a mapping", s.label);
            };
            match s.kind {
                SubjectKind::Buffer(..) => {
                    pattern::fill(seed, &mut m.as_mut_slice()[..content as usize])
                }
                SubjectKind::LinearImage(image, extent) => {
                    let subresource = vk::ImageSubresource {
                        aspect_mask: vk::ImageAspectFlags::COLOR,
                        mip_level: 0,
                        array_layer: 0,
                    };
                    // SAFETY: `image` is a live linear image of this device.
                    let layout = unsafe { device.get_image_subresource_layout(image, subresource) };
                    let row_bytes = u64::from(extent.width) * TEXEL_BYTES;
                    let bytes = pattern::pattern(seed, content as usize);
                    let dst = m.as_mut_slice();
                    for y in 0..u64::from(extent.height) {
                        let at = (layout.offset + y * layout.row_pitch) as usize;
                        let from = (y * row_bytes) as usize;
                        dst[at..at + row_bytes as usize]
                            .copy_from_slice(&bytes[from..from + row_bytes as usize]);
                    }
                }
                SubjectKind::OptimalImage(..) => {
                    unreachable!("optimal images are written by the GPU")
                }
            }
            let size = m.size();
            allocator
                .flush(m, 0, size)
                .unwrap_or_else(|e| panic!("{}: flush failed: {e}", s.label));
        }

        // Staging buffers for the GPU-written ones.
        let mut staging: Vec<(usize, MappedBuffer)> = Vec::new();
        for (i, s) in self.subjects.iter().enumerate() {
            if s.write != WritePath::Gpu {
                continue;
            }
            staging.push((i, upload_buffer(ctx, s.content_bytes(), s.seed, "staging")));
        }

        ctx.one_shot(|cmd| {
            for (i, staging) in &staging {
                let s = &self.subjects[*i];
                let buffer = &staging.raw();
                // SAFETY: `cmd` is recording inside one_shot; the staging
                // buffer and the subject are live, bound, made with transfer
                // usages, and outlive the submission (one_shot waits).
                unsafe {
                    match s.kind {
                        SubjectKind::Buffer(dst, size) => {
                            ctx.cmd_copy_buffer(cmd, *buffer, dst, size)
                        }
                        SubjectKind::OptimalImage(image, extent) => {
                            ctx.cmd_image_barrier(
                                cmd,
                                image,
                                LayoutTransition::UNDEFINED_TO_TRANSFER_DST,
                            );
                            ctx.cmd_copy_buffer_to_image(cmd, *buffer, image, extent);
                            ctx.cmd_image_barrier(
                                cmd,
                                image,
                                LayoutTransition::TRANSFER_DST_TO_SRC,
                            );
                        }
                        SubjectKind::LinearImage(..) => {
                            unreachable!("linear images are written by the host")
                        }
                    }
                }
            }
            for s in &self.subjects {
                if let SubjectKind::LinearImage(image, _) = s.kind {
                    // SAFETY: as above; the image is in PREINITIALIZED layout
                    // with host-written contents.
                    unsafe {
                        ctx.cmd_image_barrier(cmd, image, LayoutTransition::from_preinitialized())
                    };
                }
            }
            // SAFETY: `cmd` is recording.
            unsafe { ctx.cmd_transfer_barrier(cmd) };
        });

        for (_, buffer) in staging {
            // SAFETY: the submission that used the buffer has completed.
            unsafe { allocator.destroy_buffer(buffer) }.expect("destroy_buffer failed");
        }
    }

    /// Copies every subject into a fresh readback buffer with one GPU
    /// submission and checks every pattern; host-visible subjects are also
    /// checked through their own mapping. Also runs
    /// [`ResourceSet::check_placement`] with the readback buffers alive.
    ///
    /// # Panics
    /// Naming every subject whose bytes are wrong.
    pub fn check_all(&self) {
        self.check_all_with(&[]);
    }

    /// As [`ResourceSet::check_all`], with `others` (live allocations of
    /// another set) included in the placement check.
    pub fn check_all_with(&self, others: &[(&str, &Allocation)]) {
        assert!(self.written, "write_all before check_all");
        let ctx = self.ctx;
        let allocator = ctx.allocator();
        let readbacks: Vec<MappedBuffer> = self
            .subjects
            .iter()
            .map(|s| readback_buffer(ctx, s.content_bytes()))
            .collect();
        let mut all_others: Vec<(&str, &Allocation)> = readbacks
            .iter()
            .map(|b| ("readback buffer", &**b.allocation()))
            .collect();
        all_others.extend_from_slice(others);
        self.check_placement(&all_others);

        ctx.one_shot(|cmd| {
            for (s, readback) in self.subjects.iter().zip(&readbacks) {
                let buffer = &readback.raw();
                // SAFETY: `cmd` is recording inside one_shot; the subject and
                // the readback buffer are live, bound, made with transfer
                // usages; images are in TRANSFER_SRC_OPTIMAL since write_all.
                unsafe {
                    match s.kind {
                        SubjectKind::Buffer(src, size) => {
                            ctx.cmd_copy_buffer(cmd, src, *buffer, size)
                        }
                        SubjectKind::OptimalImage(image, extent)
                        | SubjectKind::LinearImage(image, extent) => {
                            ctx.cmd_copy_image_to_buffer(cmd, image, *buffer, extent)
                        }
                    }
                }
            }
            // SAFETY: `cmd` is recording.
            unsafe { ctx.cmd_transfer_barrier(cmd) };
        });

        let mut failures = Vec::new();
        for (s, readback) in self.subjects.iter().zip(&readbacks) {
            let m = readback.allocation();
            let content = s.content_bytes() as usize;
            allocator
                .invalidate(m, 0, m.size())
                .unwrap_or_else(|e| panic!("invalidate failed: {e}"));
            let a = s.held.allocation();
            let place = format!(
                "memory {:#x} offset {} size {}",
                a.memory().0,
                a.offset(),
                a.size()
            );
            if let Err(err) = pattern::check(s.seed, &m.as_slice()[..content]) {
                failures.push(format!("{} [{place}] read back by the GPU: {err}", s.label));
            }
            if let (SubjectKind::Buffer(..), Some(own)) = (&s.kind, s.held.mapped()) {
                allocator
                    .invalidate(own, 0, own.size())
                    .unwrap_or_else(|e| panic!("invalidate failed: {e}"));
                if let Err(err) = pattern::check(s.seed, &own.as_slice()[..content]) {
                    failures.push(format!(
                        "{} [{place}] through its own mapping: {err}",
                        s.label
                    ));
                }
            }
        }
        for buffer in readbacks {
            // SAFETY: the submission that used the buffer has completed.
            unsafe { allocator.destroy_buffer(buffer) }.expect("destroy_buffer failed");
        }
        assert!(
            failures.is_empty(),
            "{} check(s) over {} live resources found the wrong bytes (overlapping allocations, \
             or memory bound at the wrong place):\n{}",
            failures.len(),
            self.subjects.len(),
            failures.join("\n")
        );
    }

    /// Every allocation of the set with its label, for
    /// [`assert_disjoint`] or another set's [`ResourceSet::check_placement`].
    pub fn allocations(&self) -> Vec<(&str, &Allocation)> {
        self.subjects
            .iter()
            .map(|s| (s.label.as_str(), s.held.allocation()))
            .collect()
    }

    /// Runs defragmentation passes (at most `max_passes`, until one is
    /// complete), moving the set's unmapped buffers and optimal images on
    /// the GPU with [`vkalloc::Allocator::perform_moves`]; other moves are
    /// dropped (so cancelled). Checks `validate()` after every pass. Returns
    /// the session's statistics.
    ///
    /// # Panics
    /// If a step fails.
    pub fn defragment(&mut self, desc: &DefragDesc, max_passes: u32) -> DefragStats {
        let ctx = self.ctx;
        let allocator = ctx.allocator();
        let mut defrag = allocator
            .begin_defragmentation(desc)
            .expect("begin_defragmentation");
        for _ in 0..max_passes {
            let mut moves: std::collections::HashMap<vkalloc::AllocationId, vkalloc::Move> = defrag
                .begin_pass(allocator)
                .expect("begin_pass")
                .into_iter()
                .map(|m| (m.id(), m))
                .collect();
            let none = moves.is_empty();
            let mut kept = Vec::new();
            let mut moving = Vec::new();
            let mut items = Vec::new();
            for s in std::mem::take(&mut self.subjects) {
                let mv = moves.remove(&s.held.allocation().id());
                let Subject {
                    label,
                    kind,
                    held,
                    seed,
                    write,
                    requirements,
                } = s;
                let rebuild = move |held| Subject {
                    label,
                    kind,
                    held,
                    seed,
                    write,
                    requirements,
                };
                match (mv, held) {
                    (Some(mv), Held::Buffer(b)) => {
                        items.push((mv, Movable::Buffer(b)));
                        moving.push(Box::new(rebuild) as Box<dyn FnOnce(Held) -> Subject>);
                    }
                    (Some(mv), Held::Image(image)) => {
                        items.push((
                            mv,
                            Movable::Image {
                                image,
                                layout: vk::ImageLayout::TRANSFER_SRC_OPTIMAL,
                            },
                        ));
                        moving.push(Box::new(rebuild));
                    }
                    (_, held) => kept.push(rebuild(held)),
                }
            }
            drop(moves);
            // SAFETY: the queue is held for the call; every earlier
            // submission was waited for (one_shot waits), so the resources
            // are idle.
            let moved = ctx
                .with_queue(|queue, family| unsafe {
                    allocator.perform_moves(&mut defrag, queue, family, items)
                })
                .unwrap_or_else(|(e, _)| panic!("perform_moves failed: {e}"));
            for (rebuild, m) in moving.into_iter().zip(moved) {
                let mut s = match m {
                    Movable::Buffer(b) => rebuild(Held::Buffer(b)),
                    Movable::Image { image, .. } => rebuild(Held::Image(image)),
                };
                s.kind = match (s.kind, &s.held) {
                    (SubjectKind::Buffer(_, size), Held::Buffer(b)) => {
                        SubjectKind::Buffer(b.raw(), size)
                    }
                    (SubjectKind::OptimalImage(_, extent), Held::Image(i)) => {
                        SubjectKind::OptimalImage(i.raw(), extent)
                    }
                    (kind, _) => kind,
                };
                kept.push(s);
            }
            self.subjects = kept;
            let report = defrag.end_pass(allocator).expect("end_pass");
            if let Err(e) = allocator.validate() {
                panic!("validate after a pass: {e}\n{}", allocator.summary());
            }
            if none || report.complete {
                break;
            }
        }
        defrag.end(allocator).expect("end")
    }

    /// Destroys the subjects for which `doomed` is true and keeps the rest
    /// (still written, still checked by [`ResourceSet::check_all`]).
    pub fn destroy_if(&mut self, mut doomed: impl FnMut(&Subject) -> bool) {
        let (gone, kept): (Vec<Subject>, Vec<Subject>) = std::mem::take(&mut self.subjects)
            .into_iter()
            .partition(|s| doomed(s));
        self.subjects = kept;
        for s in gone {
            destroy_subject(self.ctx, s);
        }
    }

    /// Destroys the most recently added subject; returns `false` when the
    /// set is empty.
    pub fn destroy_last(&mut self) -> bool {
        match self.subjects.pop() {
            Some(s) => {
                destroy_subject(self.ctx, s);
                true
            }
            None => false,
        }
    }

    /// Destroys the oldest subject; returns `false` when the set is empty.
    pub fn destroy_first(&mut self) -> bool {
        if self.subjects.is_empty() {
            return false;
        }
        let s = self.subjects.remove(0);
        destroy_subject(self.ctx, s);
        true
    }

    /// Destroys every resource and frees its memory.
    pub fn destroy_all(self) {
        for s in self.subjects {
            destroy_subject(self.ctx, s);
        }
    }
}

fn destroy_subject(ctx: &GpuContext, s: Subject) {
    let allocator = ctx.allocator();
    // SAFETY: every submission using the resource was waited for (one_shot
    // waits); each resource travels with its own memory.
    let destroyed: Result<(), vkalloc::Error> = unsafe {
        match s.held {
            Held::Buffer(b) => allocator.destroy_buffer(b).map_err(Into::into),
            Held::MappedBuffer(b) => allocator.destroy_buffer(b).map_err(Into::into),
            Held::Image(i) => allocator.destroy_image(i).map_err(Into::into),
            Held::MappedImage(i) => allocator.destroy_image(i).map_err(Into::into),
        }
    };
    if let Err(e) = destroyed {
        panic!("{}: destroying failed: {e}", s.label);
    }
}

/// The create info of a single-mip 2D test image usable as a copy source
/// and destination.
pub fn image_info(
    extent: vk::Extent2D,
    tiling: vk::ImageTiling,
    initial_layout: vk::ImageLayout,
) -> vk::ImageCreateInfo<'static> {
    vk::ImageCreateInfo::default()
        .image_type(vk::ImageType::TYPE_2D)
        .format(TEST_IMAGE_FORMAT)
        .extent(vk::Extent3D {
            width: extent.width,
            height: extent.height,
            depth: 1,
        })
        .mip_levels(1)
        .array_layers(1)
        .samples(vk::SampleCountFlags::TYPE_1)
        .tiling(tiling)
        .usage(vk::ImageUsageFlags::TRANSFER_SRC | vk::ImageUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .initial_layout(initial_layout)
}

/// A mapped `Upload` buffer of `size` bytes holding `pattern(seed)`, flushed.
///
/// # Panics
/// If the allocator fails.
pub fn upload_buffer(ctx: &GpuContext, size: u64, seed: u64, tag: &str) -> MappedBuffer {
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk::BufferUsageFlags::TRANSFER_SRC)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let options = AllocationOptions {
        tag,
        ..AllocationOptions::usage(MemoryUsage::Upload)
    };
    // SAFETY: the create info is valid and outlives the call.
    let mut buffer = unsafe { ctx.allocator().create_buffer_mapped(&info, &options) }
        .unwrap_or_else(|e| panic!("creating a {size} B upload buffer failed: {e}"));
    let m = buffer.mapped_mut();
    pattern::fill(seed, &mut m.as_mut_slice()[..size as usize]);
    let len = m.size();
    ctx.allocator()
        .flush(m, 0, len)
        .unwrap_or_else(|e| panic!("flush failed: {e}"));
    buffer
}

/// A mapped `Readback` buffer of `size` bytes, a copy destination.
///
/// # Panics
/// If the allocator fails.
pub fn readback_buffer(ctx: &GpuContext, size: u64) -> MappedBuffer {
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(vk::BufferUsageFlags::TRANSFER_DST)
        .sharing_mode(vk::SharingMode::EXCLUSIVE);
    let options = AllocationOptions {
        tag: "readback",
        ..AllocationOptions::usage(MemoryUsage::Readback)
    };
    // SAFETY: the create info is valid and outlives the call.
    unsafe { ctx.allocator().create_buffer_mapped(&info, &options) }
        .unwrap_or_else(|e| panic!("creating a {size} B readback buffer failed: {e}"))
}

/// Panics if two of the allocations share a byte of the same memory object.
pub fn assert_disjoint(allocations: &[(&str, &Allocation)]) {
    let mut ranges: Vec<(u64, u64, u64, &str)> = allocations
        .iter()
        .map(|(label, a)| (a.memory().0, a.offset(), a.offset() + a.size(), *label))
        .collect();
    ranges.sort_unstable();
    for pair in ranges.windows(2) {
        let (m0, start0, end0, l0) = pair[0];
        let (m1, start1, end1, l1) = pair[1];
        assert!(
            m0 != m1 || end0 <= start1,
            "overlapping allocations in memory {m0:#x}: {l0} at [{start0}, {end0}) and {l1} at [{start1}, {end1})"
        );
    }
}
