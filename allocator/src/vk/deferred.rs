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
    /// The embedding guide (`docs/embedding.md` in the crate, section 4,
    /// *Retiring buffers and images in the frame loop*) shows it in a frame
    /// loop; its code is compiled with the crate's doctests.
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
