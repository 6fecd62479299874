//! The effects' transient targets on lavapipe: the sun's shadow map and the bloom
//! image share one allocation through an alias group. Two 320x180 frames with the
//! validation layer (synchronization validation on) silent; `report.json`'s
//! `aliasing` says what was saved; `heap.json` shows both members on the same bytes
//! of one allocation (one `VkDeviceMemory` range). With `--effects off` there is
//! no group.

use crate::common;

use std::path::Path;

fn run(name: &str, extra: &[&str]) -> (std::path::PathBuf, String) {
    let out = common::scratch(name);
    let run = common::run_ok(
        common::demo()
            .args([
                "--frames",
                "2",
                "--size",
                "320x180",
                "--texture-size",
                "256",
                "--textures",
                "rgba8",
                "--png-every",
                "0",
            ])
            .args(extra)
            .args(common::out_args(&out)),
    );
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(stdout.contains("0 validation errors"), "{stdout}");
    (out, stdout)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn shadow_map_and_bloom_share_memory() {
    let (out, stdout) = run("aliasing", &[]);
    let report = json(&out.join("report.json"));
    assert_eq!(report["validation_errors"], 0, "{report}");
    let aliasing = &report["aliasing"];
    let saved = aliasing["bytes_saved"].as_u64().unwrap();
    assert!(saved > 0, "{aliasing}");
    assert!(stdout.contains("aliasing saved"), "{stdout}");
    let groups = aliasing["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{aliasing}");
    let members = groups[0]["members"].as_array().unwrap();
    let names: Vec<_> = members
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shadow-map", "bloom"]);
    let sum: u64 = members.iter().map(|m| m["size"].as_u64().unwrap()).sum();
    let allocation = groups[0]["allocation_bytes"].as_u64().unwrap();
    assert_eq!(saved, sum - allocation, "{aliasing}");

    // The dump: one allocation holds both members, on overlapping bytes.
    let dump = std::fs::read_to_string(out.join("heap.json")).expect("heap.json written");
    let snapshot = vkalloc_heapmap::read_dump(&dump).expect("heap.json reads back");
    let groups: Vec<_> = snapshot
        .blocks()
        .flat_map(|b| b.allocations.iter())
        .filter(|a| !a.aliases.is_empty())
        .collect();
    assert_eq!(groups.len(), 1, "one alias group in the dump");
    let group = groups[0];
    assert!(
        group
            .tag
            .as_deref()
            .unwrap_or("")
            .contains("transient targets"),
        "{:?}",
        group.tag
    );
    assert_eq!(group.size, allocation);
    let member = |tag: &str| {
        group
            .aliases
            .iter()
            .find(|m| m.tag.as_deref() == Some(tag))
            .unwrap_or_else(|| panic!("{tag} in {:?}", group.aliases))
    };
    let (shadow, bloom) = (member("shadow-map"), member("bloom"));
    assert!(shadow.last_pass < bloom.first_pass, "disjoint lifetimes");
    assert!(
        shadow.offset < bloom.offset + bloom.size && bloom.offset < shadow.offset + shadow.size,
        "the members share bytes: {shadow:?} {bloom:?}"
    );
    assert!(shadow.offset + shadow.size <= group.size && bloom.offset + bloom.size <= group.size);
}

#[test]
fn effects_off_allocates_no_group() {
    let (out, stdout) = run("aliasing-off", &["--effects", "off"]);
    let report = json(&out.join("report.json"));
    assert_eq!(report["aliasing"]["bytes_saved"], 0, "{report}");
    assert!(report["aliasing"]["groups"].as_array().unwrap().is_empty());
    assert!(!stdout.contains("aliasing saved"), "{stdout}");
    assert_eq!(report["settings"]["effects"], false);
    let dump = std::fs::read_to_string(out.join("heap.json")).expect("heap.json written");
    let snapshot = vkalloc_heapmap::read_dump(&dump).expect("heap.json reads back");
    assert!(snapshot
        .blocks()
        .flat_map(|b| b.allocations.iter())
        .all(|a| a.aliases.is_empty()));
}
