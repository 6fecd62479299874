//! The vkalloc demo renderer: a PBR material gallery on Vulkan 1.3 (ash), where
//! every buffer, image and render target is allocated through vkalloc.
//!
//! Layers, each looking only down (no module imports one that imports it back;
//! `cargo test -p xtask` checks): [`gpu`] (instance, device, memory, swapchain);
//! [`materials`] (the baked KTX2 files and their upload), [`scene`] (meshes,
//! camera path, gallery), [`camera`] (where the frames' poses come from: the
//! script, a recorded path, the window's fly camera) and [`streaming`]; the
//! [`overlay`] (which knows neither the renderer nor the report); [`frame`]
//! (passes, targets, timestamps); [`report`]; and on top [`app`] and
//! [`window`] (the headless and windowed loops), with [`overlay_loop`], the
//! overlay's part of both.

pub mod app;
pub mod camera;
pub mod cli;
pub mod frame;
pub mod gpu;
pub mod materials;
pub mod overlay;
pub mod overlay_loop;
pub mod report;
pub mod scene;
pub mod shaders;
pub mod streaming;
pub mod tuning;
pub mod window;
