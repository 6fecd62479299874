//! The `VK_EXT_debug_utils` messenger: counts and prints what the validation
//! layer (and the loader) report.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};

use ash::vk;
use parking_lot::Mutex;

/// How many messages of each severity a context has received.
///
/// Shared with the Vulkan messenger callback through its user-data pointer,
/// so each [`crate::GpuContext`] counts only its own messages even when tests
/// run in parallel.
#[derive(Debug, Default)]
pub struct MessageCounters {
    errors: AtomicU32,
    warnings: AtomicU32,
    /// The text of the first error messages, kept for the panic message.
    first_errors: Mutex<Vec<String>>,
}

/// Error messages kept for the final report; the rest are only printed.
const KEPT_ERRORS: usize = 8;

impl MessageCounters {
    /// Messages of `ERROR` severity so far.
    pub fn errors(&self) -> u32 {
        self.errors.load(Ordering::SeqCst)
    }

    /// Messages of `WARNING` severity so far.
    pub fn warnings(&self) -> u32 {
        self.warnings.load(Ordering::SeqCst)
    }

    /// Returns the error count and sets it back to zero (for tests that
    /// provoke an error on purpose).
    pub fn take_errors(&self) -> u32 {
        self.first_errors.lock().clear();
        self.errors.swap(0, Ordering::SeqCst)
    }

    /// The first few error messages, for a failing test's report.
    pub fn first_errors(&self) -> Vec<String> {
        self.first_errors.lock().clone()
    }

    fn record(&self, severity: vk::DebugUtilsMessageSeverityFlagsEXT, text: String) {
        if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
            self.errors.fetch_add(1, Ordering::SeqCst);
            let mut kept = self.first_errors.lock();
            if kept.len() < KEPT_ERRORS {
                kept.push(text);
            }
        } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
            self.warnings.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The severities the messenger is created for.
pub(crate) fn severities() -> vk::DebugUtilsMessageSeverityFlagsEXT {
    vk::DebugUtilsMessageSeverityFlagsEXT::ERROR | vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
}

/// The message types the messenger is created for.
pub(crate) fn message_types() -> vk::DebugUtilsMessageTypeFlagsEXT {
    vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
        | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
        | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE
}

/// The messenger callback. `user_data` points at the context's
/// [`MessageCounters`].
pub(crate) unsafe extern "system" fn callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: Vulkan passes either null or a pointer to callback data that is
    // valid for the duration of this call; the strings inside it are
    // NUL-terminated or null, which the `_as_c_str` helpers handle.
    let (id, message) = unsafe {
        match data.as_ref() {
            Some(data) => (
                data.message_id_name_as_c_str()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                data.message_as_c_str()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            None => (String::new(), String::new()),
        }
    };
    let level = if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
        "ERROR"
    } else if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::WARNING) {
        "WARNING"
    } else {
        "INFO"
    };
    let text = format!("[vulkan {level} {types:?}] {id}: {message}");
    eprintln!("{text}");
    // SAFETY: `user_data` is the address of the `MessageCounters` that the
    // owning `GpuContext` keeps boxed (so it never moves) and frees only after
    // destroying the messenger and the instance; `MessageCounters` is `Sync`.
    if let Some(counters) = unsafe { (user_data as *const MessageCounters).as_ref() } {
        counters.record(severity, text);
    }
    vk::FALSE
}
