//! Every compiled SPIR-V module passes `spirv-val` for Vulkan 1.3.

use std::process::Command;

#[test]
fn every_module_validates() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("spirv-val");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(!demo_renderer::shaders::ALL.is_empty());
    for (name, spirv) in demo_renderer::shaders::ALL {
        let path = dir.join(format!("{name}.spv"));
        std::fs::write(&path, spirv).unwrap();
        let out = Command::new("spirv-val")
            .args(["--target-env", "vulkan1.3"])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| {
                panic!("cannot run spirv-val ({e}): run `cargo xtask test` or `apt-get install spirv-tools`")
            });
        assert!(
            out.status.success(),
            "{name} fails spirv-val:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
