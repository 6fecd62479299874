//! The logical device: what a physical device supports ([`DeviceSupport`]),
//! then one device with the queues, extensions and features a caller asks
//! for ([`create_device`]). Each caller decides what to ask for (what is
//! optional to it, what it must have); this module checks, chains the
//! feature structs the device's API version allows, and creates.

use std::ffi::{CStr, CString};

use ash::vk;

use crate::BootstrapError;

/// A device feature a caller may ask for, by its Vulkan name. A feature of a
/// Vulkan version is supported only where the device and the instance are of
/// that version or later; an extension's feature only where the device
/// offers the extension, which [`create_device`] then enables with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// `sparseBinding` (Vulkan 1.0).
    SparseBinding,
    /// `sparseResidencyImage2D` (Vulkan 1.0).
    SparseResidencyImage2D,
    /// `shaderResourceMinLod` (Vulkan 1.0).
    ShaderResourceMinLod,
    /// `samplerAnisotropy` (Vulkan 1.0).
    SamplerAnisotropy,
    /// `textureCompressionBC` (Vulkan 1.0).
    TextureCompressionBc,
    /// `fragmentStoresAndAtomics` (Vulkan 1.0).
    FragmentStoresAndAtomics,
    /// `geometryShader` (Vulkan 1.0).
    GeometryShader,
    /// `shaderSampledImageArrayDynamicIndexing` (Vulkan 1.0).
    ShaderSampledImageArrayDynamicIndexing,
    /// `shaderSampledImageArrayNonUniformIndexing` (Vulkan 1.2).
    ShaderSampledImageArrayNonUniformIndexing,
    /// `runtimeDescriptorArray` (Vulkan 1.2).
    RuntimeDescriptorArray,
    /// `descriptorBindingPartiallyBound` (Vulkan 1.2).
    DescriptorBindingPartiallyBound,
    /// `descriptorBindingSampledImageUpdateAfterBind` (Vulkan 1.2).
    DescriptorBindingSampledImageUpdateAfterBind,
    /// `hostQueryReset` (Vulkan 1.2).
    HostQueryReset,
    /// `timelineSemaphore` (Vulkan 1.2).
    TimelineSemaphore,
    /// `bufferDeviceAddress` (Vulkan 1.2).
    BufferDeviceAddress,
    /// `dynamicRendering` (Vulkan 1.3).
    DynamicRendering,
    /// `synchronization2` (Vulkan 1.3).
    Synchronization2,
    /// `maintenance4` (Vulkan 1.3).
    Maintenance4,
    /// `memoryPriority` (`VK_EXT_memory_priority`).
    MemoryPriority,
    /// `pageableDeviceLocalMemory` (`VK_EXT_pageable_device_local_memory`,
    /// which needs `VK_EXT_memory_priority`: both are enabled).
    PageableDeviceLocalMemory,
}

/// Where a feature comes from.
enum Source {
    /// `VkPhysicalDeviceFeatures`.
    Core,
    /// `VkPhysicalDeviceVulkan12Features`.
    Vulkan12,
    /// `VkPhysicalDeviceVulkan13Features`.
    Vulkan13,
    /// A feature struct of these extensions (all enabled with it).
    Extensions(&'static [&'static CStr]),
}

const MEMORY_PRIORITY: &[&CStr] = &[ash::ext::memory_priority::NAME];
const PAGEABLE: &[&CStr] = &[
    ash::ext::memory_priority::NAME,
    ash::ext::pageable_device_local_memory::NAME,
];

impl Feature {
    /// Its name in the Vulkan specification.
    pub fn name(self) -> &'static str {
        match self {
            Feature::SparseBinding => "sparseBinding",
            Feature::SparseResidencyImage2D => "sparseResidencyImage2D",
            Feature::ShaderResourceMinLod => "shaderResourceMinLod",
            Feature::SamplerAnisotropy => "samplerAnisotropy",
            Feature::TextureCompressionBc => "textureCompressionBC",
            Feature::FragmentStoresAndAtomics => "fragmentStoresAndAtomics",
            Feature::GeometryShader => "geometryShader",
            Feature::ShaderSampledImageArrayDynamicIndexing => {
                "shaderSampledImageArrayDynamicIndexing"
            }
            Feature::ShaderSampledImageArrayNonUniformIndexing => {
                "shaderSampledImageArrayNonUniformIndexing"
            }
            Feature::RuntimeDescriptorArray => "runtimeDescriptorArray",
            Feature::DescriptorBindingPartiallyBound => "descriptorBindingPartiallyBound",
            Feature::DescriptorBindingSampledImageUpdateAfterBind => {
                "descriptorBindingSampledImageUpdateAfterBind"
            }
            Feature::HostQueryReset => "hostQueryReset",
            Feature::TimelineSemaphore => "timelineSemaphore",
            Feature::BufferDeviceAddress => "bufferDeviceAddress",
            Feature::DynamicRendering => "dynamicRendering",
            Feature::Synchronization2 => "synchronization2",
            Feature::Maintenance4 => "maintenance4",
            Feature::MemoryPriority => "memoryPriority",
            Feature::PageableDeviceLocalMemory => "pageableDeviceLocalMemory",
        }
    }

    fn source(self) -> Source {
        use Feature as F;
        match self {
            F::SparseBinding
            | F::SparseResidencyImage2D
            | F::ShaderResourceMinLod
            | F::SamplerAnisotropy
            | F::TextureCompressionBc
            | F::FragmentStoresAndAtomics
            | F::GeometryShader
            | F::ShaderSampledImageArrayDynamicIndexing => Source::Core,
            F::ShaderSampledImageArrayNonUniformIndexing
            | F::RuntimeDescriptorArray
            | F::DescriptorBindingPartiallyBound
            | F::DescriptorBindingSampledImageUpdateAfterBind
            | F::HostQueryReset
            | F::TimelineSemaphore
            | F::BufferDeviceAddress => Source::Vulkan12,
            F::DynamicRendering | F::Synchronization2 | F::Maintenance4 => Source::Vulkan13,
            F::MemoryPriority => Source::Extensions(MEMORY_PRIORITY),
            F::PageableDeviceLocalMemory => Source::Extensions(PAGEABLE),
        }
    }
}

/// The feature structs of one device, as queried or as enabled.
#[derive(Clone, Copy, Default)]
struct Chain {
    core: vk::PhysicalDeviceFeatures,
    v12: vk::PhysicalDeviceVulkan12Features<'static>,
    v13: vk::PhysicalDeviceVulkan13Features<'static>,
    priority: vk::PhysicalDeviceMemoryPriorityFeaturesEXT<'static>,
    pageable: vk::PhysicalDevicePageableDeviceLocalMemoryFeaturesEXT<'static>,
}

impl Chain {
    /// The flag of `feature` in its struct.
    fn flag(&mut self, feature: Feature) -> &mut vk::Bool32 {
        use Feature as F;
        match feature {
            F::SparseBinding => &mut self.core.sparse_binding,
            F::SparseResidencyImage2D => &mut self.core.sparse_residency_image2_d,
            F::ShaderResourceMinLod => &mut self.core.shader_resource_min_lod,
            F::SamplerAnisotropy => &mut self.core.sampler_anisotropy,
            F::TextureCompressionBc => &mut self.core.texture_compression_bc,
            F::FragmentStoresAndAtomics => &mut self.core.fragment_stores_and_atomics,
            F::GeometryShader => &mut self.core.geometry_shader,
            F::ShaderSampledImageArrayDynamicIndexing => {
                &mut self.core.shader_sampled_image_array_dynamic_indexing
            }
            F::ShaderSampledImageArrayNonUniformIndexing => {
                &mut self.v12.shader_sampled_image_array_non_uniform_indexing
            }
            F::RuntimeDescriptorArray => &mut self.v12.runtime_descriptor_array,
            F::DescriptorBindingPartiallyBound => &mut self.v12.descriptor_binding_partially_bound,
            F::DescriptorBindingSampledImageUpdateAfterBind => {
                &mut self.v12.descriptor_binding_sampled_image_update_after_bind
            }
            F::HostQueryReset => &mut self.v12.host_query_reset,
            F::TimelineSemaphore => &mut self.v12.timeline_semaphore,
            F::BufferDeviceAddress => &mut self.v12.buffer_device_address,
            F::DynamicRendering => &mut self.v13.dynamic_rendering,
            F::Synchronization2 => &mut self.v13.synchronization2,
            F::Maintenance4 => &mut self.v13.maintenance4,
            F::MemoryPriority => &mut self.priority.memory_priority,
            F::PageableDeviceLocalMemory => &mut self.pageable.pageable_device_local_memory,
        }
    }
}

/// What one physical device supports, at the API version the instance and
/// the device share.
pub struct DeviceSupport {
    physical_device: vk::PhysicalDevice,
    /// Its properties.
    pub properties: vk::PhysicalDeviceProperties,
    /// The lower of the instance's API version and the device's: the
    /// version whose features and commands may be used.
    pub api_version: u32,
    /// Its queue families.
    pub queue_families: Vec<vk::QueueFamilyProperties>,
    extensions: Vec<CString>,
    supported: Chain,
}

impl DeviceSupport {
    /// Queries `physical_device` of `instance`, created with
    /// `instance_api_version` (Vulkan 1.1 or later).
    ///
    /// # Errors
    /// [`BootstrapError::Vulkan`] when the extensions cannot be listed.
    ///
    /// # Safety
    /// `physical_device` belongs to `instance`, which is live.
    pub unsafe fn query(
        instance: &ash::Instance,
        physical_device: vk::PhysicalDevice,
        instance_api_version: u32,
    ) -> Result<DeviceSupport, BootstrapError> {
        // SAFETY: the caller's promise: the device belongs to the live instance.
        let (properties, queue_families, extensions) = unsafe {
            (
                instance.get_physical_device_properties(physical_device),
                instance.get_physical_device_queue_family_properties(physical_device),
                instance.enumerate_device_extension_properties(physical_device),
            )
        };
        let extensions = extensions
            .map_err(|result| BootstrapError::Vulkan {
                call: "vkEnumerateDeviceExtensionProperties",
                result,
            })?
            .iter()
            .filter_map(|e| e.extension_name_as_c_str().ok().map(CStr::to_owned))
            .collect();
        let mut support = DeviceSupport {
            physical_device,
            properties,
            api_version: instance_api_version.min(properties.api_version),
            queue_families,
            extensions,
            supported: Chain::default(),
        };
        let chained = support.chained(|_| true);
        let supported = &mut support.supported;
        if support.api_version < vk::API_VERSION_1_1 {
            // SAFETY: as above.
            supported.core = unsafe { instance.get_physical_device_features(physical_device) };
            return Ok(support);
        }
        let mut f2 = vk::PhysicalDeviceFeatures2::default();
        if chained.v12 {
            f2 = f2.push_next(&mut supported.v12);
        }
        if chained.v13 {
            f2 = f2.push_next(&mut supported.v13);
        }
        if chained.priority {
            f2 = f2.push_next(&mut supported.priority);
        }
        if chained.pageable {
            f2 = f2.push_next(&mut supported.pageable);
        }
        // SAFETY: as above, at Vulkan 1.1 or later; each chained struct is of
        // a version the instance and device share or of an extension the
        // device offers.
        unsafe { instance.get_physical_device_features2(physical_device, &mut f2) };
        supported.core = f2.features;
        // The chain's links pointed into this frame: the structs are kept as
        // plain data.
        supported.v12.p_next = std::ptr::null_mut();
        supported.v13.p_next = std::ptr::null_mut();
        supported.priority.p_next = std::ptr::null_mut();
        supported.pageable.p_next = std::ptr::null_mut();
        Ok(support)
    }

    /// The physical device.
    pub fn physical_device(&self) -> vk::PhysicalDevice {
        self.physical_device
    }

    /// `deviceName`.
    pub fn name(&self) -> String {
        self.properties
            .device_name_as_c_str()
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Whether the device offers extension `name`.
    pub fn has_extension(&self, name: &CStr) -> bool {
        self.extensions.iter().any(|e| e.as_c_str() == name)
    }

    /// Whether the device supports `feature` (false where its version or
    /// extension is missing).
    pub fn supports(&self, feature: Feature) -> bool {
        if !self.available(feature) {
            return false;
        }
        let mut chain = self.supported;
        *chain.flag(feature) == vk::TRUE
    }

    /// The features of `features` the device does not support, by name;
    /// none: `Ok`.
    ///
    /// # Errors
    /// [`BootstrapError::Unsupported`], naming the device and each missing
    /// feature.
    pub fn require(&self, features: &[Feature]) -> Result<(), BootstrapError> {
        let missing: Vec<String> = features
            .iter()
            .filter(|&&f| !self.supports(f))
            .map(|f| f.name().to_owned())
            .collect();
        self.unsupported(missing)
    }

    fn unsupported(&self, missing: Vec<String>) -> Result<(), BootstrapError> {
        if missing.is_empty() {
            return Ok(());
        }
        Err(BootstrapError::Unsupported {
            device: self.name(),
            api_version: crate::version_string(self.api_version),
            missing,
        })
    }

    /// Whether `feature`'s struct may be chained: its version shared by
    /// the instance and the device, or its extensions offered.
    fn available(&self, feature: Feature) -> bool {
        match feature.source() {
            Source::Core => true,
            Source::Vulkan12 => self.api_version >= vk::API_VERSION_1_2,
            Source::Vulkan13 => self.api_version >= vk::API_VERSION_1_3,
            Source::Extensions(names) => names.iter().all(|n| self.has_extension(n)),
        }
    }

    /// Which structs beyond the core one hold a feature `wanted` picks and
    /// may be chained.
    fn chained(&self, wanted: impl Fn(Feature) -> bool) -> Chained {
        let any = |features: &[Feature]| features.iter().any(|&f| wanted(f) && self.available(f));
        Chained {
            v12: any(&[
                Feature::ShaderSampledImageArrayNonUniformIndexing,
                Feature::RuntimeDescriptorArray,
                Feature::DescriptorBindingPartiallyBound,
                Feature::DescriptorBindingSampledImageUpdateAfterBind,
                Feature::HostQueryReset,
                Feature::TimelineSemaphore,
                Feature::BufferDeviceAddress,
            ]),
            v13: any(&[
                Feature::DynamicRendering,
                Feature::Synchronization2,
                Feature::Maintenance4,
            ]),
            priority: any(&[Feature::MemoryPriority]),
            pageable: any(&[Feature::PageableDeviceLocalMemory]),
        }
    }
}

/// Which feature structs are chained.
struct Chained {
    v12: bool,
    v13: bool,
    priority: bool,
    pageable: bool,
}

/// Queues of one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueRequest {
    /// The family's index.
    pub family: u32,
    /// How many queues (all at priority 1.0); at least 1.
    pub count: u32,
}

/// What device to create. Everything named is required: a caller that
/// takes a feature or extension only where supported asks
/// [`DeviceSupport::supports`] or [`DeviceSupport::has_extension`] first.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceDesc<'a> {
    /// The queues, one request per family.
    pub queues: &'a [QueueRequest],
    /// Device extensions (those of the features are added).
    pub extensions: &'a [&'a CStr],
    /// Features to enable.
    pub features: &'a [Feature],
}

/// Creates the logical device `desc` asks for on `support`'s physical
/// device. The feature structs chained are those of the features asked
/// for, each only at a version the instance and the device share.
///
/// # Errors
/// [`BootstrapError::Unsupported`] naming every feature and extension the
/// device lacks (nothing is created), [`BootstrapError::NoQueueFamily`] for a
/// family or queue count the device does not have, [`BootstrapError::Vulkan`]
/// when `vkCreateDevice` fails.
///
/// # Safety
/// `instance` is the live instance `support` was queried from.
pub unsafe fn create_device(
    instance: &ash::Instance,
    support: &DeviceSupport,
    desc: &DeviceDesc<'_>,
) -> Result<ash::Device, BootstrapError> {
    let extensions = check(support, desc)?;
    let mut enabled = Chain::default();
    for &feature in desc.features {
        *enabled.flag(feature) = vk::TRUE;
    }
    let chained = support.chained(|f| desc.features.contains(&f));
    let priorities: Vec<Vec<f32>> = desc
        .queues
        .iter()
        .map(|q| vec![1.0; q.count as usize])
        .collect();
    let queue_infos: Vec<vk::DeviceQueueCreateInfo<'_>> = desc
        .queues
        .iter()
        .zip(&priorities)
        .map(|(q, p)| {
            vk::DeviceQueueCreateInfo::default()
                .queue_family_index(q.family)
                .queue_priorities(p)
        })
        .collect();
    let extension_names: Vec<_> = extensions.iter().map(|e| e.as_ptr()).collect();
    let core = enabled.core;
    let mut info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queue_infos)
        .enabled_extension_names(&extension_names)
        .enabled_features(&core);
    if chained.v12 {
        info = info.push_next(&mut enabled.v12);
    }
    if chained.v13 {
        info = info.push_next(&mut enabled.v13);
    }
    if chained.priority {
        info = info.push_next(&mut enabled.priority);
    }
    if chained.pageable {
        info = info.push_next(&mut enabled.pageable);
    }
    // SAFETY: the caller's promise: `instance` is live and the physical
    // device is its own; every extension and feature was checked above as
    // offered, every struct chained is of a version both share or of an
    // enabled extension, and the create info's pointers outlive the call.
    unsafe { instance.create_device(support.physical_device, &info, None) }.map_err(|result| {
        BootstrapError::Vulkan {
            call: "vkCreateDevice",
            result,
        }
    })
}

/// Checks `desc` against `support` before anything is created, and returns
/// the extensions to enable: the caller's, then those of its features, each
/// once.
///
/// # Errors
/// [`BootstrapError::Unsupported`] naming every missing extension and
/// feature; [`BootstrapError::NoQueueFamily`] for a family the device lacks
/// or too many queues; [`BootstrapError::QueueFamilyTwice`].
fn check<'a>(
    support: &DeviceSupport,
    desc: &DeviceDesc<'a>,
) -> Result<Vec<&'a CStr>, BootstrapError> {
    // The caller's extensions, then those of its features, each once.
    let mut extensions: Vec<&CStr> = Vec::new();
    let features_extensions = desc.features.iter().flat_map(|f| match f.source() {
        Source::Extensions(names) => names,
        _ => &[][..],
    });
    for &name in desc.extensions.iter().chain(features_extensions) {
        if !extensions.contains(&name) {
            extensions.push(name);
        }
    }
    let mut missing: Vec<String> = extensions
        .iter()
        .filter(|&&e| !support.has_extension(e))
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    missing.extend(
        desc.features
            .iter()
            .filter(|&&f| !support.supports(f))
            .map(|f| f.name().to_owned()),
    );
    support.unsupported(missing)?;
    for q in desc.queues {
        let family = support.queue_families.get(q.family as usize);
        if q.count == 0 || family.is_none_or(|f| f.queue_count < q.count) {
            return Err(BootstrapError::NoQueueFamily {
                family: q.family,
                count: q.count,
                families: support.queue_families.len(),
            });
        }
        if desc.queues.iter().filter(|o| o.family == q.family).count() > 1 {
            return Err(BootstrapError::QueueFamilyTwice { family: q.family });
        }
    }
    Ok(extensions)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device of `api_version` named "test gpu" that offers `extensions`,
    /// has `features` set in its structs, and one family of two queues.
    fn device(api_version: u32, extensions: &[&CStr], features: &[Feature]) -> DeviceSupport {
        let mut properties = vk::PhysicalDeviceProperties::default();
        for (to, &from) in properties.device_name.iter_mut().zip(b"test gpu") {
            *to = from as std::ffi::c_char;
        }
        properties.api_version = api_version;
        let mut supported = Chain::default();
        for &f in features {
            *supported.flag(f) = vk::TRUE;
        }
        DeviceSupport {
            physical_device: vk::PhysicalDevice::null(),
            properties,
            api_version,
            queue_families: vec![vk::QueueFamilyProperties {
                queue_count: 2,
                ..Default::default()
            }],
            extensions: extensions.iter().map(|&e| e.to_owned()).collect(),
            supported,
        }
    }

    const ONE_QUEUE: &[QueueRequest] = &[QueueRequest {
        family: 0,
        count: 1,
    }];

    #[test]
    fn a_feature_of_a_later_version_or_a_missing_extension_is_unsupported() {
        let all = [
            Feature::TimelineSemaphore,
            Feature::DynamicRendering,
            Feature::MemoryPriority,
        ];
        let d = device(vk::API_VERSION_1_2, &[], &all);
        assert!(d.supports(Feature::TimelineSemaphore));
        // The flag is set, but the device is 1.2 and lacks the extension.
        assert!(!d.supports(Feature::DynamicRendering));
        assert!(!d.supports(Feature::MemoryPriority));
        assert!(!d.supports(Feature::SparseBinding), "a flag not set");
        let d = device(vk::API_VERSION_1_3, MEMORY_PRIORITY, &all);
        assert!(d.supports(Feature::DynamicRendering));
        assert!(d.supports(Feature::MemoryPriority));
    }

    #[test]
    fn missing_features_and_extensions_are_named() {
        let d = device(vk::API_VERSION_1_2, &[], &[Feature::HostQueryReset]);
        assert!(d.require(&[Feature::HostQueryReset]).is_ok());
        let e = d
            .require(&[Feature::HostQueryReset, Feature::Synchronization2])
            .unwrap_err();
        let BootstrapError::Unsupported {
            ref device,
            ref missing,
            ..
        } = e
        else {
            panic!("not Unsupported: {e:?}");
        };
        assert_eq!(device, "test gpu");
        assert_eq!(missing, &["synchronization2".to_string()]);
        let message = e.to_string();
        assert!(
            message.contains("test gpu (Vulkan 1.2.0) does not support synchronization2"),
            "{message}"
        );

        let desc = DeviceDesc {
            queues: ONE_QUEUE,
            extensions: &[ash::khr::swapchain::NAME],
            features: &[Feature::PageableDeviceLocalMemory, Feature::HostQueryReset],
        };
        let e = check(&d, &desc).unwrap_err();
        let BootstrapError::Unsupported { missing, .. } = e else {
            panic!("not Unsupported: {e:?}");
        };
        assert_eq!(
            missing,
            [
                "VK_KHR_swapchain",
                "VK_EXT_memory_priority",
                "VK_EXT_pageable_device_local_memory",
                "pageableDeviceLocalMemory",
            ]
        );
    }

    #[test]
    fn a_feature_brings_its_extensions_once() {
        let features = [Feature::MemoryPriority, Feature::PageableDeviceLocalMemory];
        let d = device(vk::API_VERSION_1_3, PAGEABLE, &features);
        let desc = DeviceDesc {
            queues: ONE_QUEUE,
            extensions: &[ash::ext::memory_priority::NAME],
            features: &features,
        };
        assert_eq!(check(&d, &desc).expect("supported"), PAGEABLE);
    }

    #[test]
    fn queues_the_device_lacks_are_refused() {
        let d = device(vk::API_VERSION_1_3, &[], &[]);
        let ask = |queues: &[QueueRequest]| {
            let desc = DeviceDesc {
                queues,
                ..DeviceDesc::default()
            };
            check(&d, &desc).map(|extensions| extensions.len())
        };
        assert!(ask(&[QueueRequest {
            family: 0,
            count: 2
        }])
        .is_ok());
        for (family, count) in [(0, 3), (0, 0), (1, 1)] {
            assert!(
                matches!(
                    ask(&[QueueRequest { family, count }]),
                    Err(BootstrapError::NoQueueFamily { .. })
                ),
                "family {family} x{count}"
            );
        }
        assert!(matches!(
            ask(&[ONE_QUEUE[0], ONE_QUEUE[0]]),
            Err(BootstrapError::QueueFamilyTwice { family: 0 })
        ));
    }

    #[test]
    fn only_the_structs_of_features_asked_for_and_available_are_chained() {
        let d = device(vk::API_VERSION_1_2, &[], &[]);
        let chained = d.chained(|f| f == Feature::TimelineSemaphore);
        assert!(chained.v12 && !chained.v13 && !chained.priority && !chained.pageable);
        // A 1.3 struct is never chained on a 1.2 device, nor an extension's
        // struct without the extension.
        let chained = d.chained(|_| true);
        assert!(chained.v12 && !chained.v13 && !chained.priority && !chained.pageable);
        let chained = d.chained(|f| f == Feature::SamplerAnisotropy);
        assert!(!chained.v12, "a core feature chains nothing");
    }
}
