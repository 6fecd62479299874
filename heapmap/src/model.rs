//! What the panels draw: resource categories and their colours, dumps read
//! back into snapshots, streaming and timeline data, and dump differences.

use std::collections::{HashMap, VecDeque};

use egui::Color32;
use serde::{Deserialize, Serialize};
use vkalloc::snapshot::{AllocationRecord, Snapshot, SCHEMA_VERSION};

/// What an allocation holds, as the overlay colours it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Category {
    /// Sampled images: material textures, the overlay's font atlas.
    Texture,
    /// Render targets: colour, depth, swapchain-like attachments.
    RenderTarget,
    /// Vertex and index buffers.
    Geometry,
    /// Uniform and other per-frame constant buffers.
    Uniform,
    /// Staging and readback buffers.
    Staging,
    /// Anything else.
    Other,
}

impl Category {
    /// Every category, in legend order.
    pub const ALL: [Category; 6] = [
        Category::Texture,
        Category::RenderTarget,
        Category::Geometry,
        Category::Uniform,
        Category::Staging,
        Category::Other,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Category::Texture => "texture",
            Category::RenderTarget => "render target",
            Category::Geometry => "geometry",
            Category::Uniform => "uniform",
            Category::Staging => "staging",
            Category::Other => "other",
        }
    }

    /// Its colour in every panel and heap map.
    pub fn color(self) -> Color32 {
        match self {
            Category::Texture => Color32::from_rgb(66, 133, 244),
            Category::RenderTarget => Color32::from_rgb(234, 96, 60),
            Category::Geometry => Color32::from_rgb(80, 190, 90),
            Category::Uniform => Color32::from_rgb(240, 200, 60),
            Category::Staging => Color32::from_rgb(170, 100, 220),
            Category::Other => Color32::from_rgb(150, 150, 150),
        }
    }

    /// The category of an allocation from its tag (words such as `texture`,
    /// `target`, `vertices`, `uniform`, `staging`), else from its layout
    /// class (`optimal` images are textures).
    pub fn classify(tag: Option<&str>, kind: &str) -> Category {
        if let Some(tag) = tag {
            let t = tag.to_ascii_lowercase();
            let has = |words: &[&str]| words.iter().any(|w| t.contains(w));
            if has(&["staging", "upload", "readback"]) {
                return Category::Staging;
            }
            if has(&["target", "depth", "hdr", "ldr", "attachment", "swapchain"]) {
                return Category::RenderTarget;
            }
            if has(&["vert", "index", "indices", "mesh", "geometry"]) {
                return Category::Geometry;
            }
            if has(&["uniform", "ubo", "constants"]) {
                return Category::Uniform;
            }
            if has(&[
                "texture", "albedo", "normal", "orm", "mip", "ktx2", "font", "atlas",
            ]) {
                return Category::Texture;
            }
        }
        match kind {
            "optimal" => Category::Texture,
            _ => Category::Other,
        }
    }

    /// The category of an allocation record.
    pub fn of(a: &AllocationRecord) -> Category {
        Category::classify(a.tag.as_deref(), &a.kind)
    }
}

/// Colour of free space in block strips.
pub const FREE_COLOR: Color32 = Color32::from_rgb(40, 44, 52);
/// Colour of the budget line and warnings.
pub const WARN_COLOR: Color32 = Color32::from_rgb(255, 80, 80);
/// Colour of the budget line when within budget.
pub const BUDGET_COLOR: Color32 = Color32::from_rgb(255, 255, 255);
/// Colour of allocations only in the newer dump of a diff.
pub const ADDED_COLOR: Color32 = Color32::from_rgb(90, 230, 110);
/// Colour of allocations only in the older dump of a diff.
pub const FREED_COLOR: Color32 = Color32::from_rgb(255, 90, 90);

/// Why a dump cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// Not JSON (a truncated file, for one).
    #[error("not a JSON document ({0}); is the dump complete?")]
    Json(String),
    /// JSON, but not a vkalloc dump.
    #[error("not a vkalloc dump (no \"schema\": \"vkalloc-dump\")")]
    NotADump,
    /// A dump of another schema version.
    #[error("dump schema version {found}, this tool reads version {expected}; write the dump again with this vkalloc")]
    Version {
        /// The dump's version.
        found: u64,
        /// The version read here.
        expected: u32,
    },
    /// The right version, but fields are missing or of the wrong type.
    #[error("the dump does not follow schema version {SCHEMA_VERSION}: {0}")]
    Schema(String),
    /// Fields hold impossible values (edited by hand?).
    #[error("the dump is inconsistent: {0}")]
    Inconsistent(String),
}

/// Reads a JSON dump (`Allocator::to_json`) back into a snapshot, checking its
/// schema and version and that every range lies inside its block.
pub fn read_dump(json: &str) -> Result<Snapshot, DumpError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| DumpError::Json(e.to_string()))?;
    if value.get("schema").and_then(|s| s.as_str()) != Some(vkalloc::report::DUMP_SCHEMA) {
        return Err(DumpError::NotADump);
    }
    let version = value
        .get("schema_version")
        .or_else(|| value.get("version"))
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    if version != SCHEMA_VERSION as u64 {
        return Err(DumpError::Version {
            found: version,
            expected: SCHEMA_VERSION,
        });
    }
    let snapshot: Snapshot =
        serde_json::from_value(value).map_err(|e| DumpError::Schema(e.to_string()))?;
    for (li, list) in snapshot.lists.iter().enumerate() {
        for (bi, block) in list.blocks.iter().enumerate() {
            let ranges = block
                .allocations
                .iter()
                .map(|a| (a.offset, a.size))
                .chain(block.free_ranges.iter().map(|r| (r[0], r[1])));
            for (offset, size) in ranges {
                if offset.checked_add(size).is_none_or(|end| end > block.size) {
                    return Err(DumpError::Inconsistent(format!(
                        "list {li} block {bi}: range at {offset} of {size} bytes ends past the block's {} bytes",
                        block.size
                    )));
                }
            }
            // The dump lists both in address order, the free ranges apart:
            // what draws them (a zoomed strip's search) relies on it.
            if block
                .allocations
                .windows(2)
                .any(|w| w[1].offset < w[0].offset)
            {
                return Err(DumpError::Inconsistent(format!(
                    "list {li} block {bi}: allocations out of address order"
                )));
            }
            if block
                .free_ranges
                .windows(2)
                .any(|w| w[1][0] < w[0][0] + w[0][1])
            {
                return Err(DumpError::Inconsistent(format!(
                    "list {li} block {bi}: free ranges overlap or are out of address order"
                )));
            }
        }
    }
    Ok(snapshot)
}

/// One texture as the streamer sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TextureStream {
    /// Its name.
    pub name: String,
    /// The finest mip level resident.
    pub resident_mip: u32,
    /// The finest mip level wanted, where the streamer computes it.
    pub wanted_mip: Option<u32>,
    /// Bytes resident.
    pub resident_bytes: u64,
    /// Bytes the wanted mips would take, where known.
    pub wanted_bytes: Option<u64>,
}

/// The streaming panel's data: plain numbers the texture streamer fills.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamingInfo {
    /// Bytes allocated in the texture pool.
    pub pool_bytes: u64,
    /// Bytes of device memory the texture pool holds.
    pub pool_committed: u64,
    /// The texture budget.
    pub budget: u64,
    /// Per texture.
    pub textures: Vec<TextureStream>,
    /// Loads queued, where a streamer runs.
    pub pending_loads: Option<u32>,
    /// Bytes uploaded per second, where a streamer runs.
    pub upload_bytes_per_s: Option<f64>,
    /// Mips evicted so far, where a streamer runs.
    pub evictions: Option<u64>,
}

/// One frame in the timeline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FrameSample {
    /// GPU milliseconds of the frame (all passes).
    pub gpu_ms: f64,
    /// Allocations made during the frame.
    pub allocations: u32,
    /// Allocations freed during the frame.
    pub frees: u32,
    /// `vkAllocateMemory` calls during the frame (`Statistics::device_memory_allocations_total` deltas).
    pub device_allocations: u32,
    /// Resident texture bytes.
    pub texture_bytes: u64,
    /// The texture budget.
    pub texture_budget: u64,
}

/// The last frames, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// Frames kept.
    pub capacity: usize,
    /// The samples.
    pub frames: VecDeque<FrameSample>,
}

impl Default for Timeline {
    fn default() -> Self {
        Self::new(300)
    }
}

impl Timeline {
    /// An empty timeline keeping `capacity` frames.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            frames: VecDeque::with_capacity(capacity.max(1)),
        }
    }

    /// Adds a frame, dropping the oldest past the capacity.
    pub fn push(&mut self, sample: FrameSample) {
        if self.frames.len() == self.capacity {
            self.frames.pop_front();
        }
        self.frames.push_back(sample);
    }
}

/// An allocation's identity across two dumps: its list, block, range and tag.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AllocationKey {
    /// Memory type.
    pub memory_type: u32,
    /// Pool name.
    pub pool: Option<String>,
    /// Block index in its list.
    pub block: usize,
    /// Offset in the block.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Tag.
    pub tag: Option<String>,
}

/// Bytes and counts per tag.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TagChange {
    /// Allocations only in the newer dump.
    pub added: u64,
    /// Their bytes.
    pub added_bytes: u64,
    /// Allocations only in the older dump.
    pub freed: u64,
    /// Their bytes.
    pub freed_bytes: u64,
}

/// What changed between two dumps: allocations only in the old one (freed),
/// only in the new one (allocated), and per-tag totals (the leak finder).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Diff {
    /// Allocations only in the older dump.
    pub freed: Vec<(AllocationKey, Category)>,
    /// Allocations only in the newer dump.
    pub added: Vec<(AllocationKey, Category)>,
    /// Allocations in both.
    pub kept: u64,
    /// Per tag (`None`: untagged), sorted by tag.
    pub by_tag: Vec<(Option<String>, TagChange)>,
}

fn keys(s: &Snapshot) -> HashMap<AllocationKey, Category> {
    let mut out = HashMap::new();
    for list in &s.lists {
        for (bi, block) in list.blocks.iter().enumerate() {
            for a in &block.allocations {
                out.insert(
                    AllocationKey {
                        memory_type: list.memory_type,
                        pool: list.pool.clone(),
                        block: bi,
                        offset: a.offset,
                        size: a.size,
                        tag: a.tag.as_deref().map(str::to_owned),
                    },
                    Category::of(a),
                );
            }
        }
    }
    out
}

impl Diff {
    /// Compares `old` with `new`.
    pub fn between(old: &Snapshot, new: &Snapshot) -> Self {
        let old_keys = keys(old);
        let new_keys = keys(new);
        let mut diff = Diff::default();
        let mut tags: HashMap<Option<String>, TagChange> = HashMap::new();
        for (k, c) in &old_keys {
            if new_keys.contains_key(k) {
                diff.kept += 1;
            } else {
                let t = tags.entry(k.tag.clone()).or_default();
                t.freed += 1;
                t.freed_bytes = t.freed_bytes.saturating_add(k.size);
                diff.freed.push((k.clone(), *c));
            }
        }
        for (k, c) in &new_keys {
            if !old_keys.contains_key(k) {
                let t = tags.entry(k.tag.clone()).or_default();
                t.added += 1;
                t.added_bytes = t.added_bytes.saturating_add(k.size);
                diff.added.push((k.clone(), *c));
            }
        }
        diff.freed.sort();
        diff.added.sort();
        diff.by_tag = tags.into_iter().collect();
        diff.by_tag.sort_by(|a, b| a.0.cmp(&b.0));
        diff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert_eq!(
            Category::classify(Some("m03_albedo.ktx2"), "optimal"),
            Category::Texture
        );
        assert_eq!(
            Category::classify(Some("hdr target"), "optimal"),
            Category::RenderTarget
        );
        assert_eq!(
            Category::classify(Some("sphere vertices"), "linear"),
            Category::Geometry
        );
        assert_eq!(
            Category::classify(Some("staging ring"), "linear"),
            Category::Staging
        );
        assert_eq!(
            Category::classify(Some("frame uniforms"), "linear"),
            Category::Uniform
        );
        assert_eq!(Category::classify(None, "optimal"), Category::Texture);
        assert_eq!(Category::classify(None, "linear"), Category::Other);
    }

    #[test]
    fn bad_dumps_are_errors() {
        assert!(matches!(
            read_dump("{\"schema\": \"vkal"),
            Err(DumpError::Json(_))
        ));
        assert!(matches!(read_dump("[1, 2]"), Err(DumpError::NotADump)));
        assert!(matches!(
            read_dump(r#"{"schema": "vkalloc-dump", "version": 1, "lists": []}"#),
            Err(DumpError::Version { found: 1, .. })
        ));
        assert!(matches!(
            read_dump(r#"{"schema": "vkalloc-dump", "schema_version": 2, "lists": 3}"#),
            Err(DumpError::Schema(_))
        ));
        let empty = r#"{"schema": "vkalloc-dump", "schema_version": 2, "statistics": {"total": {"block_count":0,"block_bytes":0,"allocation_count":0,"allocation_bytes":0,"dedicated_count":0}, "heaps": [], "types": [], "pools": [], "device_memory_objects": 0, "corruptions_detected": 0}, "lists": [], "largest_free": 0, "free_range_count": 0, "free_bytes": 0}"#;
        let s = read_dump(empty).unwrap();
        assert_eq!(s.allocation_count(), 0);
        let past_end = empty.replace(
            "\"lists\": []",
            r#""lists": [{"memory_type": 0, "blocks": [{"size": 100, "dedicated": false, "allocation_count": 1, "allocation_bytes": 50, "free_range_count": 0, "largest_free": 0, "fragmentation": 0.0, "allocations": [{"offset": 80, "size": 50, "kind": "linear"}]}]}]"#,
        );
        assert!(matches!(
            read_dump(&past_end),
            Err(DumpError::Inconsistent(_))
        ));
        let overflow = past_end.replace("\"offset\": 80", "\"offset\": 18446744073709551615");
        assert!(matches!(
            read_dump(&overflow),
            Err(DumpError::Inconsistent(_))
        ));
    }
}
