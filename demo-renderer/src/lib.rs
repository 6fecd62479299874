//! The vkalloc demo renderer: a PBR material gallery on Vulkan 1.3 (ash), where
//! every buffer, image and render target is allocated through vkalloc.
//!
//! Layers, each looking only down: [`gpu`] (instance, device, memory, swapchain),
//! [`frame`] (passes, targets, timestamps), [`scene`] (meshes, camera path,
//! gallery), [`camera`] (where the frames' poses come from: the script, a
//! recorded path, the window's fly camera), [`materials`] (the baked KTX2 files and their upload), and [`app`]
//! (the headless and windowed loops, the report).

pub mod app;
pub mod camera;
pub mod cli;
pub mod frame;
pub mod gpu;
pub mod materials;
pub mod overlay;
pub mod report;
pub mod scene;
pub mod shaders;
pub mod streaming;
pub mod tuning;
pub mod window;
