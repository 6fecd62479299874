//! Instance, debug messenger, physical-device choice, logical device and queues
//! (graphics, and a transfer-only one for streaming uploads where there is one).

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ash::vk;
use gpu_bootstrap::{
    ApiVersion, BootstrapError, DeviceDesc, DevicePick, DeviceSupport, Feature, InstanceDesc,
    Messenger, QueueRequest, Validation,
};
use Feature as F;

use super::GpuError;

/// How to create a [`Context`].
#[derive(Clone, Debug, Default)]
pub struct ContextDesc {
    /// Index into the list of physical devices that support Vulkan 1.3; `None` picks
    /// the first discrete GPU, else the first device.
    pub device_index: Option<usize>,
    /// Enable `VK_LAYER_KHRONOS_validation` (when installed) and the debug messenger.
    pub validation: bool,
    /// Use a bindless texture array where the device supports descriptor indexing.
    pub bindless: bool,
    /// Instance extensions a window surface needs (from `ash_window`).
    pub surface_extensions: Vec<*const std::ffi::c_char>,
    /// Which queue streaming uploads go on (`--upload-queue`).
    pub upload_queue: UploadQueue,
    /// A check (`--tune upload-split=1`): where there is no transfer queue,
    /// the transfer path's two submissions on the graphics queue itself.
    pub upload_split: bool,
}

/// `--upload-queue`: which queue streaming uploads go on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadQueue {
    /// The transfer-only queue where the device has one, else the graphics queue.
    #[default]
    Auto,
    /// The graphics queue, one command buffer per batch.
    Graphics,
    /// The transfer-only queue; device creation fails where there is none.
    Transfer,
}

/// The queue streaming uploads go on when it is not the graphics queue's one
/// command buffer: a transfer-only family's queue (with queue-family ownership
/// transfers), or, for testing that path on one-family devices
/// (`--tune upload-split=1`), the graphics queue itself.
#[derive(Clone, Copy, Debug)]
pub struct UploadQueueInfo {
    /// Its family (equal to the graphics family in the test mode).
    pub family: u32,
    /// The queue.
    pub queue: vk::Queue,
    /// Whether its family supports timestamps.
    pub timestamps: bool,
}

/// Picks a transfer-only queue family (TRANSFER without GRAPHICS or COMPUTE) with
/// at least one queue: the first such family, or `None`.
pub fn transfer_only_family(families: &[vk::QueueFamilyProperties]) -> Option<u32> {
    families
        .iter()
        .position(|f| {
            f.queue_count > 0
                && f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                && !f
                    .queue_flags
                    .intersects(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE)
        })
        .map(|i| i as u32)
}

/// Counts of the debug messenger's messages, by severity.
#[derive(Debug, Default)]
pub struct MessageCounts {
    /// Error-severity messages.
    pub errors: AtomicU32,
    /// Warning-severity messages.
    pub warnings: AtomicU32,
}

/// Device properties the renderer adapts to.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// `deviceName`.
    pub name: String,
    /// The device type, as Vulkan names it.
    pub device_type: String,
    /// `apiVersion` as `major.minor.patch`.
    pub api_version: String,
    /// `driverVersion`, raw.
    pub driver_version: u32,
    /// Nanoseconds per timestamp tick.
    pub timestamp_period: f32,
    /// Whether the queue supports timestamps.
    pub timestamps: bool,
    /// `textureCompressionBC`.
    pub bc_textures: bool,
    /// `samplerAnisotropy` and its maximum.
    pub max_anisotropy: Option<f32>,
    /// Whether this is a software rasterizer (lavapipe, SwiftShader).
    pub is_cpu: bool,
    /// Whether `VK_EXT_memory_budget` was enabled.
    pub memory_budget: bool,
    /// Whether `VK_EXT_memory_priority` was enabled (with `memoryPriority`).
    pub memory_priority: bool,
    /// Whether `VK_EXT_pageable_device_local_memory` was enabled (with
    /// `pageableDeviceLocalMemory`).
    pub pageable_memory: bool,
    /// Whether materials use one bindless texture array (descriptor indexing,
    /// with `shaderSampledImageArrayNonUniformIndexing`: the atlas-filtering
    /// emulation, `--tune atlas-emulation`, indexes it non-uniformly).
    pub bindless: bool,
    /// Whether fragment shaders may write storage buffers (the streaming feedback).
    pub fragment_stores: bool,
    /// Whether the gallery can shade from a visibility buffer (`geometryShader` and
    /// `maintenance4`, enabled where supported).
    pub visibility_shading: bool,
    /// Whether queries may be reset from the host (`hostQueryReset`, enabled where
    /// supported): the streaming uploads' timestamps, on any queue.
    pub host_query_reset: bool,
    /// Sparse residency of 2D images with the graphics queue able to bind
    /// (`sparseBinding`, `sparseResidencyImage2D`, `VK_QUEUE_SPARSE_BINDING_BIT`):
    /// streaming by tiles is possible.
    pub sparse_tiles: bool,
    /// `shaderResourceMinLod` (with `sparse_tiles`): the shaders clamp the
    /// sampler's LOD to the resident level in hardware.
    pub min_lod: bool,
}

/// The Vulkan instance and device, one graphics queue, and the debug messenger.
pub struct Context {
    /// The loader.
    pub entry: ash::Entry,
    /// The instance.
    pub instance: ash::Instance,
    /// The chosen physical device.
    pub physical_device: vk::PhysicalDevice,
    /// The logical device.
    pub device: ash::Device,
    /// The graphics (and present) queue family.
    pub queue_family: u32,
    /// The graphics queue.
    pub queue: vk::Queue,
    /// The queue streaming uploads go on, when it is not the graphics queue's
    /// one command buffer (see [`UploadQueueInfo`]).
    pub upload: Option<UploadQueueInfo>,
    /// What the renderer knows of the device.
    pub info: DeviceInfo,
    /// Message counts of the debug messenger (zero when validation is off).
    pub messages: Arc<MessageCounts>,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

unsafe extern "system" fn debug_callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: `user` is the `MessageCounts` inside the `Arc` that the `Context` holds
    // for as long as the messenger exists; `data` is valid for this call.
    let counts = unsafe { &*(user as *const MessageCounts) };
    // SAFETY: the layer passes a valid callback-data struct whose message is a C string.
    let message = unsafe {
        let data = &*data;
        if data.message_id_number == COPY_INTO_GENERAL_HINT {
            return vk::FALSE;
        }
        if data.p_message.is_null() {
            String::new()
        } else {
            CStr::from_ptr(data.p_message)
                .to_string_lossy()
                .into_owned()
        }
    };
    if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        counts.errors.fetch_add(1, Ordering::Relaxed);
        eprintln!("[vulkan error] {message}");
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        counts.warnings.fetch_add(1, Ordering::Relaxed);
        eprintln!("[vulkan warning] {message}");
    }
    vk::FALSE
}

/// The demo's error for a failure of the shared start-up.
fn bootstrap_err(e: BootstrapError) -> GpuError {
    match e {
        BootstrapError::Loader(reason) => GpuError::Loader(reason),
        BootstrapError::Vulkan { call, result } => GpuError::Vk { call, result },
        e => GpuError::NoDevice(e.to_string()),
    }
}

/// The layer's performance hint that a copy's destination image is in
/// `GENERAL` rather than `TRANSFER_DST_OPTIMAL`, ignored: the sparse images of
/// streaming by tiles stay in `GENERAL` on purpose (a layout transition could
/// touch the pages of stale tiles; `streaming::tiles`), and the hint came once
/// per copied run, hundreds a frame.
const COPY_INTO_GENERAL_HINT: i32 = 0x4dae_5635;

impl Context {
    /// Creates the instance and device. `surface_ok` tells whether a queue family can
    /// present (always true headless).
    pub fn new(
        desc: &ContextDesc,
        surface_ok: &dyn Fn(&ash::Entry, &ash::Instance, vk::PhysicalDevice, u32) -> bool,
        pre_device: &mut dyn FnMut(&ash::Entry, &ash::Instance) -> Result<(), GpuError>,
    ) -> Result<Self, GpuError> {
        let entry = gpu_bootstrap::load_entry().map_err(bootstrap_err)?;
        let messages = Arc::new(MessageCounts::default());
        let instance_desc = InstanceDesc {
            application_name: Some(c"vkalloc demo"),
            application_version: 1,
            engine_name: Some(c"vkalloc demo"),
            api_version: ApiVersion::Exactly(vk::API_VERSION_1_3),
            extensions: &desc.surface_extensions,
            validation: if desc.validation {
                Validation::IfInstalled
            } else {
                Validation::Off
            },
            sync_validation: true,
            messenger: Some(Messenger {
                severities: vk::DebugUtilsMessageSeverityFlagsEXT::ERROR
                    | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING,
                types: vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                    | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                    | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
                callback: Some(debug_callback),
                user_data: Arc::as_ptr(&messages) as *mut c_void,
                report_instance_lifetime: true,
                without_validation: false,
            }),
        };
        // SAFETY: the surface extensions are static names; the messenger's
        // user data (`messages`) lives in the Context, which destroys the
        // messenger first.
        let created = unsafe { gpu_bootstrap::create_instance(&entry, &instance_desc) }
            .map_err(bootstrap_err)?;
        if desc.validation && !created.validation {
            eprintln!(
                "note: VK_LAYER_KHRONOS_validation is not installed; running without validation"
            );
        }
        let (instance, debug) = (created.instance, created.debug);
        pre_device(&entry, &instance)?;

        // From here on, failures must destroy the instance; wrap the rest.
        match Self::create_device(&entry, &instance, desc, surface_ok) {
            Ok((physical_device, device, queue_family, upload, info)) => {
                // SAFETY: the queue family was requested with one queue.
                let queue = unsafe { device.get_device_queue(queue_family, 0) };
                let upload = upload.map(|(family, timestamps)| UploadQueueInfo {
                    family,
                    // SAFETY: a transfer family was requested with one queue; the
                    // test mode's family is the graphics one.
                    queue: unsafe { device.get_device_queue(family, 0) },
                    timestamps,
                });
                Ok(Self {
                    entry,
                    instance,
                    physical_device,
                    device,
                    queue_family,
                    queue,
                    upload,
                    info,
                    messages,
                    debug,
                })
            }
            Err(e) => {
                // SAFETY: nothing else was created from the instance except the messenger.
                unsafe {
                    if let Some((loader, m)) = &debug {
                        loader.destroy_debug_utils_messenger(*m, None);
                    }
                    instance.destroy_instance(None);
                }
                Err(e)
            }
        }
    }

    /// Lists the Vulkan devices as `index: name (type, api)` lines.
    pub fn list_devices(instance: &ash::Instance) -> Vec<String> {
        // SAFETY: plain queries on a live instance.
        let devices = unsafe { instance.enumerate_physical_devices() }.unwrap_or_default();
        devices
            .iter()
            .enumerate()
            .map(|(i, &pd)| {
                // SAFETY: `pd` came from this instance.
                let p = unsafe { instance.get_physical_device_properties(pd) };
                format!(
                    "{i}: {} ({:?}, Vulkan {}.{})",
                    p.device_name_as_c_str()
                        .map(|c| c.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    p.device_type,
                    vk::api_version_major(p.api_version),
                    vk::api_version_minor(p.api_version)
                )
            })
            .collect()
    }

    #[allow(clippy::type_complexity)]
    fn create_device(
        entry: &ash::Entry,
        instance: &ash::Instance,
        desc: &ContextDesc,
        surface_ok: &dyn Fn(&ash::Entry, &ash::Instance, vk::PhysicalDevice, u32) -> bool,
    ) -> Result<
        (
            vk::PhysicalDevice,
            ash::Device,
            u32,
            Option<(u32, bool)>,
            DeviceInfo,
        ),
        GpuError,
    > {
        let pick = match desc.device_index {
            Some(i) => DevicePick::Index(i),
            None => DevicePick::FirstDiscreteElseFirst,
        };
        let (_, chosen) =
            gpu_bootstrap::pick_physical_device(instance, pick).map_err(|e| match e {
                BootstrapError::NoDevice => GpuError::NoDevice(
                    "the Vulkan loader found no physical device (install a driver; on machines without a GPU, \
                     lavapipe: `apt-get install mesa-vulkan-drivers`)"
                        .into(),
                ),
                BootstrapError::BadDeviceIndex { index, .. } => GpuError::NoDevice(format!(
                    "--device {index} is out of range; the devices are: {}",
                    Self::list_devices(instance).join("; ")
                )),
                e => bootstrap_err(e),
            })?;
        let listing = Self::list_devices(instance).join("; ");
        // SAFETY: `chosen` came from this live instance, created at Vulkan 1.3.
        let support = unsafe { DeviceSupport::query(instance, chosen, vk::API_VERSION_1_3) }
            .map_err(bootstrap_err)?;
        let props = support.properties;
        let name = support.name();
        if props.api_version < vk::API_VERSION_1_3 {
            return Err(GpuError::NoDevice(format!(
                "{name} supports Vulkan {}.{}; the demo needs 1.3 (devices: {listing})",
                vk::api_version_major(props.api_version),
                vk::api_version_minor(props.api_version)
            )));
        }
        support
            .require(&[F::DynamicRendering, F::Synchronization2])
            .map_err(bootstrap_err)?;
        let has = |f: Feature| support.supports(f);
        let families = &support.queue_families;
        let queue_family = families
            .iter()
            .enumerate()
            .find(|(i, f)| {
                f.queue_flags.contains(vk::QueueFlags::GRAPHICS)
                    && surface_ok(entry, instance, chosen, *i as u32)
            })
            .map(|(i, _)| i as u32)
            .ok_or_else(|| {
                GpuError::NoDevice(format!("{name} has no graphics queue that can present"))
            })?;
        let timestamps = families[queue_family as usize].timestamp_valid_bits > 0
            && props.limits.timestamp_period > 0.0;
        // Streaming uploads: a transfer-only family where there is one (auto,
        // transfer); the graphics queue's one command buffer else, or, with
        // --tune upload-split=1, the transfer path's two submissions on the
        // graphics queue (for testing that path where there is one family).
        let transfer = transfer_only_family(families);
        let upload = match (desc.upload_queue, transfer) {
            (UploadQueue::Transfer, None) => {
                let flags: Vec<String> = families
                    .iter()
                    .map(|f| format!("{:?} x{}", f.queue_flags, f.queue_count))
                    .collect();
                return Err(GpuError::NoDevice(format!(
                    "--upload-queue transfer: {name} has no transfer-only queue family \
                     (its families: {}); use --upload-queue auto or graphics",
                    flags.join("; ")
                )));
            }
            (UploadQueue::Transfer | UploadQueue::Auto, Some(f)) => Some(f),
            _ => None,
        };
        let split_test = desc.upload_split;
        let upload = match upload {
            Some(f) => Some((
                f,
                families[f as usize].timestamp_valid_bits > 0
                    && props.limits.timestamp_period > 0.0,
            )),
            None if split_test => Some((queue_family, timestamps)),
            None => None,
        };

        let mut extensions = Vec::new();
        if !desc.surface_extensions.is_empty() {
            extensions.push(ash::khr::swapchain::NAME);
        }
        let memory_budget = support.has_extension(ash::ext::memory_budget::NAME);
        if memory_budget {
            extensions.push(ash::ext::memory_budget::NAME);
        }
        // Memory priority (render targets stay resident before textures when
        // video memory is oversubscribed) and changing it later, where the
        // driver has them.
        let memory_priority = has(F::MemoryPriority);
        let pageable_memory = memory_priority && has(F::PageableDeviceLocalMemory);
        // Bindless materials: one array of every texture, indexed per draw and updated
        // while in use (descriptor indexing, core in Vulkan 1.2). The bindless shaders
        // also index it non-uniformly (the atlas-filtering emulation's branch, taken
        // only on request): their SPIR-V declares that capability, so the device
        // must have it.
        const BINDLESS: [Feature; 5] = [
            F::ShaderSampledImageArrayDynamicIndexing,
            F::ShaderSampledImageArrayNonUniformIndexing,
            F::RuntimeDescriptorArray,
            F::DescriptorBindingPartiallyBound,
            F::DescriptorBindingSampledImageUpdateAfterBind,
        ];
        let bindless = desc.bindless
            && BINDLESS.iter().all(|&f| has(f))
            && props.limits.max_per_stage_descriptor_sampled_images >= 256;
        // Visibility shading: the id pass reads gl_PrimitiveID in its fragment
        // shader (the Geometry capability: `geometryShader`), and glslang's
        // Vulkan 1.3 compute shaders declare their group size with LocalSizeId
        // (`maintenance4`).
        let visibility_shading = has(F::GeometryShader) && has(F::Maintenance4);
        // Tiled streaming: sparse images whose tiles are bound one memory page at
        // a time, by vkQueueBindSparse on the graphics queue.
        let sparse_tiles = has(F::SparseBinding)
            && has(F::SparseResidencyImage2D)
            && families[queue_family as usize]
                .queue_flags
                .contains(vk::QueueFlags::SPARSE_BINDING);
        let min_lod = sparse_tiles && has(F::ShaderResourceMinLod);
        let mut features = vec![F::DynamicRendering, F::Synchronization2];
        // Taken wherever the device has them.
        features.extend(
            [
                F::SamplerAnisotropy,
                F::TextureCompressionBc,
                F::FragmentStoresAndAtomics,
                F::HostQueryReset,
            ]
            .into_iter()
            .filter(|&f| has(f)),
        );
        let wanted = [
            (
                sparse_tiles,
                &[F::SparseBinding, F::SparseResidencyImage2D][..],
            ),
            (min_lod, &[F::ShaderResourceMinLod]),
            (visibility_shading, &[F::GeometryShader, F::Maintenance4]),
            (bindless, &BINDLESS),
            (memory_priority, &[F::MemoryPriority]),
            (pageable_memory, &[F::PageableDeviceLocalMemory]),
        ];
        for (on, those) in wanted {
            if on {
                features.extend_from_slice(those);
            }
        }
        let mut queues = vec![QueueRequest {
            family: queue_family,
            count: 1,
        }];
        if let Some((f, _)) = upload.filter(|&(f, _)| f != queue_family) {
            queues.push(QueueRequest {
                family: f,
                count: 1,
            });
        }
        let device_desc = DeviceDesc {
            queues: &queues,
            extensions: &extensions,
            features: &features,
        };
        // SAFETY: `instance` is the live instance `support` was queried from.
        let device = unsafe { gpu_bootstrap::create_device(instance, &support, &device_desc) }
            .map_err(bootstrap_err)?;

        let is_cpu = props.device_type == vk::PhysicalDeviceType::CPU;
        let info = DeviceInfo {
            name,
            device_type: format!("{:?}", props.device_type),
            api_version: format!(
                "{}.{}.{}",
                vk::api_version_major(props.api_version),
                vk::api_version_minor(props.api_version),
                vk::api_version_patch(props.api_version)
            ),
            driver_version: props.driver_version,
            timestamp_period: props.limits.timestamp_period,
            timestamps,
            bc_textures: has(F::TextureCompressionBc),
            max_anisotropy: has(F::SamplerAnisotropy)
                .then_some(props.limits.max_sampler_anisotropy),
            is_cpu,
            memory_budget,
            memory_priority,
            pageable_memory,
            bindless,
            fragment_stores: has(F::FragmentStoresAndAtomics),
            visibility_shading,
            host_query_reset: has(F::HostQueryReset),
            sparse_tiles,
            min_lod,
        };
        Ok((chosen, device, queue_family, upload, info))
    }

    /// The queue streaming uploads go on, as the report names it: "transfer"
    /// (a transfer-only family, with ownership transfers), "graphics", or
    /// "graphics-split" (the transfer path's two submissions on the graphics
    /// queue: `--tune upload-split=1`, for testing).
    pub fn upload_queue_name(&self) -> &'static str {
        match self.upload {
            Some(u) if u.family != self.queue_family => "transfer",
            Some(_) => "graphics-split",
            None => "graphics",
        }
    }

    /// Error-severity messages so far.
    pub fn error_count(&self) -> u32 {
        self.messages.errors.load(Ordering::Relaxed)
    }

    /// Waits until the device is idle.
    pub fn wait_idle(&self) {
        // SAFETY: the device is live; errors here mean device loss, reported later.
        let _ = unsafe { self.device.device_wait_idle() };
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the owner destroyed every child object before dropping the context
        // (the renderer and allocator are dropped first).
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
            if let Some((loader, m)) = self.debug.take() {
                loader.destroy_debug_utils_messenger(m, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family(flags: vk::QueueFlags, count: u32) -> vk::QueueFamilyProperties {
        vk::QueueFamilyProperties {
            queue_flags: flags,
            queue_count: count,
            ..Default::default()
        }
    }

    #[test]
    fn picks_a_transfer_only_family() {
        use vk::QueueFlags as Q;
        // lavapipe: one family that does everything.
        let lvp = [family(Q::GRAPHICS | Q::COMPUTE | Q::TRANSFER, 1)];
        assert_eq!(transfer_only_family(&lvp), None);
        // NVIDIA-like: graphics, compute (with transfer), two transfer-only families.
        let nv = [
            family(
                Q::GRAPHICS | Q::COMPUTE | Q::TRANSFER | Q::SPARSE_BINDING,
                16,
            ),
            family(Q::TRANSFER | Q::SPARSE_BINDING, 2),
            family(Q::COMPUTE | Q::TRANSFER | Q::SPARSE_BINDING, 8),
            family(Q::TRANSFER | Q::SPARSE_BINDING, 1),
        ];
        assert_eq!(transfer_only_family(&nv), Some(1));
        // A compute family that also transfers is not transfer-only; an empty one is skipped.
        let other = [
            family(Q::GRAPHICS | Q::TRANSFER, 1),
            family(Q::COMPUTE | Q::TRANSFER, 2),
            family(Q::TRANSFER, 0),
            family(Q::TRANSFER | Q::VIDEO_DECODE_KHR, 1),
        ];
        assert_eq!(transfer_only_family(&other), Some(3));
    }
}
