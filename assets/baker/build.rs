//! intel_tex_2's prebuilt ISPC kernels include C++ objects (the ASTC encoder)
//! that need the C++ runtime at link time on Linux (package `g++` / `libstdc++-dev`).

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" {
        println!("cargo:rustc-link-lib=dylib=stdc++");
    }
}
