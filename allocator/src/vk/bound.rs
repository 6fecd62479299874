//! Bound resources: a buffer or an image together with the memory bound to
//! it, created and destroyed through the allocator as one value. The type
//! says which kind of resource the memory holds, so destroying a buffer with
//! an image's memory does not compile:
//!
//! ```compile_fail
//! # fn f(allocator: &vkalloc::Allocator<vkalloc::vk::AshDevice>, image: vkalloc::vk::Image) {
//! // SAFETY: the device is done with the image.
//! let _ = unsafe { allocator.destroy_buffer(image) }; // error: an `Image` is not a `Buffer`
//! # }
//! ```
//!
//! while the same call with `destroy_image` does:
//!
//! ```
//! # fn f(allocator: &vkalloc::Allocator<vkalloc::vk::AshDevice>, image: vkalloc::vk::Image) {
//! // SAFETY: the device is done with the image.
//! let _ = unsafe { allocator.destroy_image(image) };
//! # }
//! ```

use ash::vk;

use crate::{Allocation, Error, MappedAllocation};

/// A `VkBuffer` and its memory.
///
/// Made by [`crate::Allocator::create_buffer`] (or, mapped,
/// [`crate::Allocator::create_buffer_mapped`]); give it back with
/// [`crate::Allocator::destroy_buffer`]. Dropping it leaks both.
#[derive(Debug)]
#[must_use = "a buffer dropped without `destroy_buffer` leaks the buffer and its memory"]
pub struct Buffer<A = Allocation> {
    raw: vk::Buffer,
    allocation: A,
    size: u64,
    /// The create info's usage, when known (needed to re-create the buffer
    /// for a defragmentation move).
    usage: Option<vk::BufferUsageFlags>,
}

/// A buffer in host-visible memory, mapped for its whole life.
pub type MappedBuffer = Buffer<MappedAllocation>;

impl<A> Buffer<A> {
    pub(crate) fn new(raw: vk::Buffer, allocation: A, size: u64) -> Self {
        Self {
            raw,
            allocation,
            size,
            usage: None,
        }
    }

    pub(crate) fn with_usage(self, usage: vk::BufferUsageFlags) -> Self {
        Self {
            usage: Some(usage),
            ..self
        }
    }

    /// The usage it was created with, when the allocator created it (a
    /// buffer from [`Self::from_raw_parts`] has none): what a moved copy is
    /// created with.
    pub fn usage(&self) -> Option<vk::BufferUsageFlags> {
        self.usage
    }

    /// The `VkBuffer`, to record commands with.
    pub fn raw(&self) -> vk::Buffer {
        self.raw
    }

    /// Its memory.
    pub fn allocation(&self) -> &A {
        &self.allocation
    }

    /// The buffer's size (`VkBufferCreateInfo::size`), which may be smaller
    /// than its allocation.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The buffer and its allocation, apart. The caller then destroys the
    /// buffer itself and frees the allocation with
    /// [`crate::Allocator::free`].
    pub fn into_raw_parts(self) -> (vk::Buffer, A) {
        (self.raw, self.allocation)
    }

    /// A buffer the caller created and bound itself, to be destroyed
    /// through [`crate::Allocator::destroy_buffer`].
    ///
    /// # Safety
    /// `raw` is a buffer of the allocator's device, of `size` bytes, bound to
    /// `allocation` (made for a buffer), and nothing else will destroy it.
    pub unsafe fn from_raw_parts(raw: vk::Buffer, allocation: A, size: u64) -> Self {
        Self::new(raw, allocation, size)
    }

    /// [`Self::from_raw_parts`] for a buffer created with `usage`, which a
    /// defragmentation move ([`crate::Allocator::prepare_move`]) re-creates
    /// the buffer with (it needs `TRANSFER_SRC | TRANSFER_DST`).
    ///
    /// # Safety
    /// As [`Self::from_raw_parts`], and `raw` was created with `usage` and
    /// `VK_SHARING_MODE_EXCLUSIVE`, without flags.
    pub unsafe fn from_raw_parts_with_usage(
        raw: vk::Buffer,
        allocation: A,
        size: u64,
        usage: vk::BufferUsageFlags,
    ) -> Self {
        Self::new(raw, allocation, size).with_usage(usage)
    }
}

impl MappedBuffer {
    /// The mapped memory, to write or read (see [`MappedAllocation::write`]).
    pub fn mapped_mut(&mut self) -> &mut MappedAllocation {
        &mut self.allocation
    }
}

/// What an image was created with, kept so it can be re-created (a
/// defragmentation move) or described without asking the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageInfo {
    /// `VkImageCreateInfo::flags`.
    pub flags: vk::ImageCreateFlags,
    /// `VkImageCreateInfo::imageType`.
    pub image_type: vk::ImageType,
    /// `VkImageCreateInfo::format`.
    pub format: vk::Format,
    /// `VkImageCreateInfo::extent`.
    pub extent: vk::Extent3D,
    /// `VkImageCreateInfo::mipLevels`.
    pub mip_levels: u32,
    /// `VkImageCreateInfo::arrayLayers`.
    pub array_layers: u32,
    /// `VkImageCreateInfo::samples`.
    pub samples: vk::SampleCountFlags,
    /// `VkImageCreateInfo::tiling`.
    pub tiling: vk::ImageTiling,
    /// `VkImageCreateInfo::usage`.
    pub usage: vk::ImageUsageFlags,
}

impl ImageInfo {
    /// The fields kept from a create info.
    pub fn of(info: &vk::ImageCreateInfo<'_>) -> Self {
        Self {
            flags: info.flags,
            image_type: info.image_type,
            format: info.format,
            extent: info.extent,
            mip_levels: info.mip_levels,
            array_layers: info.array_layers,
            samples: info.samples,
            tiling: info.tiling,
            usage: info.usage,
        }
    }

    /// A create info with these fields (exclusive sharing, undefined
    /// initial layout).
    pub fn create_info(&self) -> vk::ImageCreateInfo<'static> {
        vk::ImageCreateInfo::default()
            .flags(self.flags)
            .image_type(self.image_type)
            .format(self.format)
            .extent(self.extent)
            .mip_levels(self.mip_levels)
            .array_layers(self.array_layers)
            .samples(self.samples)
            .tiling(self.tiling)
            .usage(self.usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .initial_layout(vk::ImageLayout::UNDEFINED)
    }
}

/// A `VkImage` and its memory.
///
/// Made by [`crate::Allocator::create_image`]; give it back with
/// [`crate::Allocator::destroy_image`]. Dropping it leaks both. A
/// linear image in host-visible memory can be mapped with
/// [`Image::into_mapped`].
#[derive(Debug)]
#[must_use = "an image dropped without `destroy_image` leaks the image and its memory"]
pub struct Image<A = Allocation> {
    raw: vk::Image,
    allocation: A,
    info: ImageInfo,
}

/// An image in host-visible memory, mapped (a linear image written by the host).
pub type MappedImage = Image<MappedAllocation>;

impl<A> Image<A> {
    pub(crate) fn new(raw: vk::Image, allocation: A, info: &vk::ImageCreateInfo<'_>) -> Self {
        Self {
            raw,
            allocation,
            info: ImageInfo::of(info),
        }
    }

    /// The `VkImage`.
    pub fn raw(&self) -> vk::Image {
        self.raw
    }

    /// Its memory.
    pub fn allocation(&self) -> &A {
        &self.allocation
    }

    /// What it was created with.
    pub fn info(&self) -> &ImageInfo {
        &self.info
    }

    /// The image and its allocation, apart; see [`Buffer::into_raw_parts`].
    pub fn into_raw_parts(self) -> (vk::Image, A) {
        (self.raw, self.allocation)
    }
}

impl Image {
    /// The mapped form, when the memory is host-visible.
    ///
    /// # Errors
    /// Gives the image back when its memory can't be mapped.
    #[allow(clippy::result_large_err)] // Moved once, as `Allocation::into_mapped` does.
    pub fn into_mapped(self) -> Result<MappedImage, Image> {
        let Self {
            raw,
            allocation,
            info,
        } = self;
        match allocation.into_mapped() {
            Ok(allocation) => Ok(Image {
                raw,
                allocation,
                info,
            }),
            Err(allocation) => Err(Image {
                raw,
                allocation,
                info,
            }),
        }
    }
}

impl MappedImage {
    /// The mapped memory.
    pub fn mapped_mut(&mut self) -> &mut MappedAllocation {
        &mut self.allocation
    }
}

/// A resource the allocator would not destroy, handed back with the reason.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
#[must_use = "the resource inside is lost unless it is destroyed where it belongs"]
pub struct DestroyError<T: std::fmt::Debug> {
    error: Error,
    resource: T,
}

impl<T: std::fmt::Debug> DestroyError<T> {
    pub(crate) fn new(error: Error, resource: T) -> Self {
        Self { error, resource }
    }

    /// What went wrong.
    pub fn error(&self) -> &Error {
        &self.error
    }

    /// The resource, untouched.
    pub fn into_resource(self) -> T {
        self.resource
    }
}

impl<T: std::fmt::Debug> From<DestroyError<T>> for Error {
    fn from(e: DestroyError<T>) -> Self {
        e.error
    }
}
