//! Deferred destruction of the crate's own [`Buffer`] and [`Image`] values: a
//! [`FreeQueue`] takes them whole (mapped or not) and, once the GPU has
//! reached the value they were queued with, destroys the handle and frees
//! the memory, so an engine keeps no delayed-destroy queue of its own.

use ash::vk::Handle;

use super::bound::{Buffer, Image};
use crate::deferred::RetiredResource;
use crate::device::DedicatedResource;
use crate::{Allocation, FreeQueue};

impl FreeQueue {
    /// Queues `buffer` (mapped or not) to be destroyed, and its memory
    /// freed, by the first [`FreeQueue::collect`] with a value of at least
    /// `value`.
    ///
    /// A frame loop whose submissions signal a timeline semaphore: what a
    /// frame replaces is queued with the value its submission signals, and
    /// destroyed once the GPU has passed it.
    ///
    /// ```no_run
    /// use ash::vk;
    /// use vkalloc::vk::{AshDevice, Buffer, Image};
    /// use vkalloc::{Allocator, FreeQueue};
    ///
    /// struct Frames {
    ///     retired: FreeQueue,
    ///     timeline: vk::Semaphore,
    ///     /// The value this frame's submission signals.
    ///     signalled: u64,
    /// }
    ///
    /// fn end_frame(
    ///     device: &ash::Device,
    ///     allocator: &Allocator<AshDevice>,
    ///     frames: &mut Frames,
    ///     old_vertices: Buffer,
    ///     old_texture: Image,
    /// ) -> Result<(), vk::Result> {
    ///     // SAFETY: no command after this frame's submission uses them, and
    ///     // no view of them is left.
    ///     unsafe {
    ///         frames.retired.destroy_buffer_after(old_vertices, frames.signalled);
    ///         frames.retired.destroy_image_after(old_texture, frames.signalled);
    ///     }
    ///     // SAFETY: the semaphore is live.
    ///     let reached = unsafe { device.get_semaphore_counter_value(frames.timeline) }?;
    ///     let done = frames.retired.collect(allocator, reached);
    ///     assert!(done.refused_resources.is_empty(), "one allocator made them all");
    ///     allocator.begin_frame();
    ///     frames.signalled += 1;
    ///     Ok(())
    /// }
    ///
    /// fn teardown(device: &ash::Device, allocator: &Allocator<AshDevice>, frames: &Frames) {
    ///     // SAFETY: waiting for the device is always valid.
    ///     let _ = unsafe { device.device_wait_idle() };
    ///     frames.retired.collect_all(allocator);
    /// }
    /// ```
    ///
    /// # Safety
    /// Once the GPU has reached `value` the device no longer uses the buffer
    /// and no view of it is left; the queue is collected with the allocator
    /// that made the buffer (another allocator refuses it and hands it back
    /// in [`crate::Collected::refused_resources`]).
    pub unsafe fn destroy_buffer_after<A: Into<Allocation>>(&self, buffer: Buffer<A>, value: u64) {
        let (raw, allocation) = buffer.into_raw_parts();
        // SAFETY: a `Buffer` is a live buffer of the device of the allocator
        // that made its memory, bound to it and destroyed only through it
        // (consumed here); the caller promises the rest.
        let retired = unsafe {
            RetiredResource::new(DedicatedResource::Buffer(raw.as_raw()), allocation.into())
        };
        self.destroy_after(retired, value);
    }

    /// Queues `image` (mapped or not) to be destroyed, and its memory freed;
    /// see [`Self::destroy_buffer_after`].
    ///
    /// # Safety
    /// As [`Self::destroy_buffer_after`], for the image.
    pub unsafe fn destroy_image_after<A: Into<Allocation>>(&self, image: Image<A>, value: u64) {
        let (raw, allocation) = image.into_raw_parts();
        // SAFETY: as for buffers.
        let retired = unsafe {
            RetiredResource::new(DedicatedResource::Image(raw.as_raw()), allocation.into())
        };
        self.destroy_after(retired, value);
    }
}
