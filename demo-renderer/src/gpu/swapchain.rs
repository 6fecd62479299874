//! The window swapchain (see `--window`).
