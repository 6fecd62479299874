//! The window swapchain (see `--window`): format and present-mode choice,
//! acquire, present, and recreation on resize. Swapchain images belong to the
//! window system, so they are the one kind of image not made by the allocator.

use ash::vk;

use super::{Context, GpuError, VkCheck};

/// A swapchain and its per-image views and semaphores.
pub struct Swapchain {
    surface_loader: ash::khr::surface::Instance,
    loader: ash::khr::swapchain::Device,
    /// The surface it presents to (owned by the caller).
    pub surface: vk::SurfaceKHR,
    /// The swapchain.
    pub swapchain: vk::SwapchainKHR,
    /// Its images.
    pub images: Vec<vk::Image>,
    /// A view per image.
    pub views: Vec<vk::ImageView>,
    /// The images' format.
    pub format: vk::Format,
    /// The images' size.
    pub extent: vk::Extent2D,
    /// Whether images can be copied from (screenshots).
    pub can_read_back: bool,
    acquired: vk::Semaphore,
    rendered: Vec<vk::Semaphore>,
}

/// What [`Swapchain::acquire`] found.
pub enum Acquired {
    /// An image to render into, and the semaphore its acquisition signals.
    Image(u32, vk::Semaphore),
    /// The swapchain no longer matches the surface: recreate it.
    OutOfDate,
}

impl Swapchain {
    /// Creates a swapchain for `surface` of about `size` pixels; `vsync` picks FIFO.
    pub fn new(
        ctx: &Context,
        surface: vk::SurfaceKHR,
        size: (u32, u32),
        vsync: bool,
    ) -> Result<Self, GpuError> {
        let surface_loader = ash::khr::surface::Instance::new(&ctx.entry, &ctx.instance);
        let loader = ash::khr::swapchain::Device::new(&ctx.instance, &ctx.device);
        let mut s = Self {
            surface_loader,
            loader,
            surface,
            swapchain: vk::SwapchainKHR::null(),
            images: Vec::new(),
            views: Vec::new(),
            format: vk::Format::UNDEFINED,
            extent: vk::Extent2D::default(),
            can_read_back: false,
            acquired: vk::Semaphore::null(),
            rendered: Vec::new(),
        };
        // SAFETY: valid create info.
        s.acquired = unsafe {
            ctx.device
                .create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
        }
        .check("vkCreateSemaphore")?;
        s.recreate(ctx, size, vsync)?;
        Ok(s)
    }

    /// Recreates the swapchain at about `size` (after a resize or when out of date).
    /// The device must be idle.
    pub fn recreate(
        &mut self,
        ctx: &Context,
        size: (u32, u32),
        vsync: bool,
    ) -> Result<(), GpuError> {
        let d = &ctx.device;
        let pd = ctx.physical_device;
        // SAFETY: the surface and physical device are live.
        let (caps, formats, modes) = unsafe {
            (
                self.surface_loader
                    .get_physical_device_surface_capabilities(pd, self.surface)
                    .check("vkGetPhysicalDeviceSurfaceCapabilitiesKHR")?,
                self.surface_loader
                    .get_physical_device_surface_formats(pd, self.surface)
                    .check("vkGetPhysicalDeviceSurfaceFormatsKHR")?,
                self.surface_loader
                    .get_physical_device_surface_present_modes(pd, self.surface)
                    .check("vkGetPhysicalDeviceSurfacePresentModesKHR")?,
            )
        };
        let format = formats
            .iter()
            .find(|f| {
                matches!(
                    f.format,
                    vk::Format::B8G8R8A8_SRGB | vk::Format::R8G8B8A8_SRGB
                ) && f.color_space == vk::ColorSpaceKHR::SRGB_NONLINEAR
            })
            .or(formats.first())
            .copied()
            .ok_or_else(|| GpuError::Other("the surface reports no formats".into()))?;
        let mode = if vsync || !modes.contains(&vk::PresentModeKHR::MAILBOX) {
            vk::PresentModeKHR::FIFO
        } else {
            vk::PresentModeKHR::MAILBOX
        };
        let extent = if caps.current_extent.width != u32::MAX {
            caps.current_extent
        } else {
            vk::Extent2D {
                width: size
                    .0
                    .clamp(caps.min_image_extent.width, caps.max_image_extent.width),
                height: size
                    .1
                    .clamp(caps.min_image_extent.height, caps.max_image_extent.height),
            }
        };
        let mut count = caps.min_image_count + 1;
        if caps.max_image_count > 0 {
            count = count.min(caps.max_image_count);
        }
        let can_read_back = caps
            .supported_usage_flags
            .contains(vk::ImageUsageFlags::TRANSFER_SRC);
        let mut usage = vk::ImageUsageFlags::COLOR_ATTACHMENT;
        if can_read_back {
            usage |= vk::ImageUsageFlags::TRANSFER_SRC;
        }
        let old = self.swapchain;
        let info = vk::SwapchainCreateInfoKHR::default()
            .surface(self.surface)
            .min_image_count(count)
            .image_format(format.format)
            .image_color_space(format.color_space)
            .image_extent(extent)
            .image_array_layers(1)
            .image_usage(usage)
            .image_sharing_mode(vk::SharingMode::EXCLUSIVE)
            .pre_transform(caps.current_transform)
            .composite_alpha(vk::CompositeAlphaFlagsKHR::OPAQUE)
            .present_mode(mode)
            .clipped(true)
            .old_swapchain(old);
        // SAFETY: the device is idle; the old swapchain is retired by this call and
        // destroyed right after with its views.
        unsafe {
            self.swapchain = self
                .loader
                .create_swapchain(&info, None)
                .check("vkCreateSwapchainKHR")?;
            self.destroy_views(d);
            if old != vk::SwapchainKHR::null() {
                self.loader.destroy_swapchain(old, None);
            }
            self.images = self
                .loader
                .get_swapchain_images(self.swapchain)
                .check("vkGetSwapchainImagesKHR")?;
            for &image in &self.images {
                let view = d
                    .create_image_view(
                        &vk::ImageViewCreateInfo::default()
                            .image(image)
                            .view_type(vk::ImageViewType::TYPE_2D)
                            .format(format.format)
                            .subresource_range(vk::ImageSubresourceRange {
                                aspect_mask: vk::ImageAspectFlags::COLOR,
                                base_mip_level: 0,
                                level_count: 1,
                                base_array_layer: 0,
                                layer_count: 1,
                            }),
                        None,
                    )
                    .check("vkCreateImageView")?;
                self.views.push(view);
                self.rendered.push(
                    d.create_semaphore(&vk::SemaphoreCreateInfo::default(), None)
                        .check("vkCreateSemaphore")?,
                );
            }
        }
        self.format = format.format;
        self.extent = extent;
        self.can_read_back = can_read_back;
        Ok(())
    }

    fn destroy_views(&mut self, d: &ash::Device) {
        // SAFETY: the device is idle (callers guarantee it).
        unsafe {
            for v in self.views.drain(..) {
                d.destroy_image_view(v, None);
            }
            for s in self.rendered.drain(..) {
                d.destroy_semaphore(s, None);
            }
        }
    }

    /// Acquires the next image.
    pub fn acquire(&self) -> Result<Acquired, GpuError> {
        // SAFETY: the semaphore is unsignalled (the previous frame waited on it and finished).
        match unsafe {
            self.loader.acquire_next_image(
                self.swapchain,
                u64::MAX,
                self.acquired,
                vk::Fence::null(),
            )
        } {
            Ok((i, _suboptimal)) => Ok(Acquired::Image(i, self.acquired)),
            Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => Ok(Acquired::OutOfDate),
            Err(e) => Err(GpuError::Vk {
                call: "vkAcquireNextImageKHR",
                result: e,
            }),
        }
    }

    /// The semaphore the frame rendering into image `index` signals.
    pub fn rendered(&self, index: u32) -> vk::Semaphore {
        self.rendered[index as usize]
    }

    /// Presents image `index`; returns false when the swapchain should be recreated.
    pub fn present(&self, ctx: &Context, index: u32) -> Result<bool, GpuError> {
        let swapchains = [self.swapchain];
        let indices = [index];
        let waits = [self.rendered[index as usize]];
        let info = vk::PresentInfoKHR::default()
            .wait_semaphores(&waits)
            .swapchains(&swapchains)
            .image_indices(&indices);
        // SAFETY: the image was acquired and rendered; the semaphore will be signalled by that submission.
        match unsafe { self.loader.queue_present(ctx.queue, &info) } {
            Ok(false) => Ok(true),
            Ok(true) | Err(vk::Result::ERROR_OUT_OF_DATE_KHR) => Ok(false),
            Err(e) => Err(GpuError::Vk {
                call: "vkQueuePresentKHR",
                result: e,
            }),
        }
    }

    /// Destroys the swapchain, views and semaphores (not the surface); the device must be idle.
    pub fn destroy(&mut self, ctx: &Context) {
        self.destroy_views(&ctx.device);
        // SAFETY: the device is idle.
        unsafe {
            if self.swapchain != vk::SwapchainKHR::null() {
                self.loader.destroy_swapchain(self.swapchain, None);
                self.swapchain = vk::SwapchainKHR::null();
            }
            ctx.device.destroy_semaphore(self.acquired, None);
        }
    }

    /// Whether `family` of the physical device can present to `surface`.
    pub fn supports(
        entry: &ash::Entry,
        instance: &ash::Instance,
        pd: vk::PhysicalDevice,
        family: u32,
        surface: vk::SurfaceKHR,
    ) -> bool {
        let loader = ash::khr::surface::Instance::new(entry, instance);
        // SAFETY: plain query on live objects.
        unsafe { loader.get_physical_device_surface_support(pd, family, surface) }.unwrap_or(false)
    }
}
