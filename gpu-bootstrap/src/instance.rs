//! The loader and the instance: validation layer, synchronization validation
//! and the debug messenger, each as the caller asks.

use std::ffi::{c_char, c_void, CStr};

use ash::vk;

use crate::{version_string, BootstrapError};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// Which API version the instance asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiVersion {
    /// This version, whatever the loader reports.
    Exactly(u32),
    /// The loader's instance version capped at `max`; below `min` is
    /// [`BootstrapError::LoaderTooOld`].
    LoaderUpTo {
        /// The lowest accepted.
        min: u32,
        /// The cap.
        max: u32,
    },
}

/// Whether the instance runs with `VK_LAYER_KHRONOS_validation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Validation {
    /// Never.
    Off,
    /// When the layer is installed; without it the instance is created
    /// anyway and [`VulkanInstance::validation`] is false.
    IfInstalled,
    /// Always: a missing layer is [`BootstrapError::NoValidationLayer`].
    Required,
}

/// A `VK_EXT_debug_utils` messenger: the caller's callback and its data.
#[derive(Clone, Copy, Debug)]
pub struct Messenger {
    /// The severities reported.
    pub severities: vk::DebugUtilsMessageSeverityFlagsEXT,
    /// The message types reported.
    pub types: vk::DebugUtilsMessageTypeFlagsEXT,
    /// The callback (it decides whether a message is a failure).
    pub callback: vk::PFN_vkDebugUtilsMessengerCallbackEXT,
    /// Passed to `callback` as its user data.
    pub user_data: *mut c_void,
    /// Also chain the messenger into `vkCreateInstance`, so that the
    /// instance's own creation and destruction are reported.
    pub report_instance_lifetime: bool,
    /// Create it without the validation layer too, when the loader offers
    /// `VK_EXT_debug_utils` (loader and driver messages); otherwise only
    /// with validation.
    pub without_validation: bool,
}

/// What instance to create.
#[derive(Clone, Copy, Debug)]
pub struct InstanceDesc<'a> {
    /// `pApplicationName`.
    pub application_name: Option<&'a CStr>,
    /// `applicationVersion`.
    pub application_version: u32,
    /// `pEngineName`.
    pub engine_name: Option<&'a CStr>,
    /// The API version asked for.
    pub api_version: ApiVersion,
    /// Instance extensions of the caller's (e.g. the window system's); the
    /// debug and validation extensions are added here as needed.
    pub extensions: &'a [*const c_char],
    /// The validation layer.
    pub validation: Validation,
    /// With validation, also turn on synchronization validation
    /// (`VK_EXT_validation_features`, provided by the layer).
    pub sync_validation: bool,
    /// The debug messenger, if any.
    pub messenger: Option<Messenger>,
}

impl Default for InstanceDesc<'_> {
    /// Vulkan 1.3, no names, no layers, no extensions, no messenger.
    fn default() -> Self {
        Self {
            application_name: None,
            application_version: 0,
            engine_name: None,
            api_version: ApiVersion::Exactly(vk::API_VERSION_1_3),
            extensions: &[],
            validation: Validation::Off,
            sync_validation: false,
            messenger: None,
        }
    }
}

/// A created instance and its messenger. The caller owns both: destroy them
/// with [`VulkanInstance::destroy`] (or each in its own teardown order).
pub struct VulkanInstance {
    /// The instance.
    pub instance: ash::Instance,
    /// The messenger and its loader, when one was created.
    pub debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Whether the validation layer is on.
    pub validation: bool,
    /// The API version the instance was created with.
    pub api_version: u32,
}

impl VulkanInstance {
    /// Destroys the messenger, then the instance.
    ///
    /// # Safety
    /// Nothing created from the instance is alive, and neither is used after.
    pub unsafe fn destroy(self) {
        // SAFETY: the caller's promise: nothing made from them is alive.
        unsafe {
            if let Some((loader, messenger)) = &self.debug {
                loader.destroy_debug_utils_messenger(*messenger, None);
            }
            self.instance.destroy_instance(None);
        }
    }
}

/// Loads the system's Vulkan loader.
pub fn load_entry() -> Result<ash::Entry, BootstrapError> {
    // SAFETY: loading the system's Vulkan loader runs its initialization code;
    // it is the library every Vulkan program loads, and nothing unloads it
    // while the returned entry lives.
    unsafe { ash::Entry::load() }.map_err(|e| BootstrapError::Loader(e.to_string()))
}

/// Creates an instance as `desc` says, and its messenger.
///
/// # Errors
/// A missing required layer, a loader older than asked, or a failed Vulkan
/// call. Nothing is left alive on error.
///
/// # Safety
/// Every pointer in `desc.extensions` is a NUL-terminated name that lives
/// across the call; the messenger's `user_data` is what its `callback`
/// expects, and stays valid until the messenger and instance are destroyed.
pub unsafe fn create_instance(
    entry: &ash::Entry,
    desc: &InstanceDesc<'_>,
) -> Result<VulkanInstance, BootstrapError> {
    let vk_err = |call| move |result| BootstrapError::Vulkan { call, result };
    // SAFETY: plain queries of the loader, no handles involved.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }
        .map_err(vk_err("vkEnumerateInstanceLayerProperties"))?;
    let installed = layers
        .iter()
        .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
    let validation = match desc.validation {
        Validation::Off => false,
        Validation::IfInstalled => installed,
        Validation::Required if installed => true,
        Validation::Required => return Err(BootstrapError::NoValidationLayer),
    };
    let api_version = match desc.api_version {
        ApiVersion::Exactly(v) => v,
        ApiVersion::LoaderUpTo { min, max } => {
            // SAFETY: a plain query of the loader.
            let loader = unsafe { entry.try_enumerate_instance_version() }
                .map_err(vk_err("vkEnumerateInstanceVersion"))?
                .unwrap_or(vk::API_VERSION_1_0);
            if loader < min {
                return Err(BootstrapError::LoaderTooOld {
                    found: version_string(loader),
                    needed: version_string(min),
                });
            }
            loader.min(max)
        }
    };
    let messenger = match desc.messenger {
        Some(m) if validation => Some(m),
        Some(m) if m.without_validation => {
            // SAFETY: a plain query of the loader.
            let extensions = unsafe { entry.enumerate_instance_extension_properties(None) }
                .map_err(vk_err("vkEnumerateInstanceExtensionProperties"))?;
            extensions
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::debug_utils::NAME))
                .then_some(m)
        }
        _ => None,
    };
    let sync_validation = validation && desc.sync_validation;

    let mut app = vk::ApplicationInfo::default()
        .application_version(desc.application_version)
        .api_version(api_version);
    if let Some(name) = desc.application_name {
        app = app.application_name(name);
    }
    if let Some(name) = desc.engine_name {
        app = app.engine_name(name);
    }
    let layer_names = if validation {
        vec![VALIDATION_LAYER.as_ptr()]
    } else {
        Vec::new()
    };
    let mut extensions = desc.extensions.to_vec();
    if messenger.is_some() {
        extensions.push(ash::ext::debug_utils::NAME.as_ptr());
    }
    if sync_validation {
        extensions.push(ash::ext::validation_features::NAME.as_ptr());
    }
    let sync = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
    let mut validation_features =
        vk::ValidationFeaturesEXT::default().enabled_validation_features(&sync);
    let mut messenger_info = messenger.map(|m| {
        vk::DebugUtilsMessengerCreateInfoEXT::default()
            .message_severity(m.severities)
            .message_type(m.types)
            .pfn_user_callback(m.callback)
            .user_data(m.user_data)
    });
    let mut info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layer_names)
        .enabled_extension_names(&extensions);
    let chained = messenger.is_some_and(|m| m.report_instance_lifetime);
    if let Some(m) = messenger_info.as_mut().filter(|_| chained) {
        info = info.push_next(m);
    }
    if sync_validation {
        info = info.push_next(&mut validation_features);
    }
    // SAFETY: the create info and everything it points to (names, app info,
    // messenger info whose user data the caller keeps valid) live across the
    // call.
    let instance =
        unsafe { entry.create_instance(&info, None) }.map_err(vk_err("vkCreateInstance"))?;

    let debug = match messenger_info {
        Some(m) => {
            let loader = ash::ext::debug_utils::Instance::new(entry, &instance);
            // SAFETY: the instance is live with VK_EXT_debug_utils enabled;
            // the caller keeps the user data valid while the messenger lives.
            match unsafe { loader.create_debug_utils_messenger(&m, None) } {
                Ok(messenger) => Some((loader, messenger)),
                Err(result) => {
                    // SAFETY: nothing was created from the instance.
                    unsafe { instance.destroy_instance(None) };
                    return Err(vk_err("vkCreateDebugUtilsMessengerEXT")(result));
                }
            }
        }
        None => None,
    };
    Ok(VulkanInstance {
        instance,
        debug,
        validation,
        api_version,
    })
}
