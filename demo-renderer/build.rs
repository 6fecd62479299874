//! Compiles every GLSL source in `shaders/` to SPIR-V with `glslangValidator`
//! and writes `shaders.rs`, a table of the modules, into `OUT_DIR`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let shader_dir = manifest.join("../shaders");
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed={}", shader_dir.display());

    // Every file, includes (.glsl) too, so that editing any of them recompiles.
    for entry in std::fs::read_dir(&shader_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&shader_dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", shader_dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("vert" | "frag" | "comp")
            )
        })
        .collect();
    sources.sort();

    // The PBR shaders also as a variant sampling with a hardware minimum LOD
    // (`-DTILE_MIN_LOD`: GL_ARB_sparse_texture_clamp, for devices with
    // shaderResourceMinLod when streaming by tiles).
    let mut modules: Vec<(PathBuf, String, Option<&str>)> = Vec::new();
    for src in &sources {
        let name = src.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("pbr") && !name.ends_with(".vert") {
            modules.push((src.clone(), format!("{name}.minlod"), Some("TILE_MIN_LOD")));
        }
        modules.push((src.clone(), name, None));
    }
    modules.sort_by(|a, b| a.1.cmp(&b.1));
    let mut table = String::from("/// Every compiled shader module: (file name, SPIR-V bytes).\npub const ALL: &[(&str, &[u8])] = &[\n");
    for (src, name, define) in &modules {
        println!("cargo:rerun-if-changed={}", src.display());
        let out = out_dir.join(format!("{name}.spv"));
        compile(src, &out, &shader_dir, *define);
        table.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            out.display().to_string()
        ));
    }
    table.push_str("];\n");
    for (_, name, _) in &modules {
        let ident = name.replace('.', "_").to_uppercase();
        let out = out_dir.join(format!("{name}.spv"));
        table.push_str(&format!(
            "/// SPIR-V of `shaders/{name}`.\npub const {ident}: &[u8] = include_bytes!({:?});\n",
            out.display().to_string()
        ));
    }
    std::fs::write(out_dir.join("shaders.rs"), table).expect("write shaders.rs");
}

fn compile(src: &Path, out: &Path, include_dir: &Path, define: Option<&str>) {
    let result = Command::new("glslangValidator")
        .arg("-V")
        .args(["--target-env", "vulkan1.3"])
        .arg(format!("-I{}", include_dir.display()))
        .args(define.map(|d| format!("-D{d}")))
        .arg("-o")
        .arg(out)
        .arg(src)
        .output();
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "\n\nglslangValidator was not found on PATH; it compiles the demo's shaders.\n\
             Run `cargo xtask demo` (it installs what is missing), or install it yourself:\n\
             `sudo apt-get install glslang-tools` (Debian/Ubuntu).\n"
        ),
        Err(e) => panic!("could not run glslangValidator: {e}"),
        Ok(o) if !o.status.success() => panic!(
            "glslangValidator failed on {}:\n{}{}",
            src.display(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Ok(_) => {}
    }
}
