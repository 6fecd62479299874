//! Memory tables of real GPUs, kept as JSON data files in `sim/tables/`.
//!
//! # The schema
//!
//! One JSON object per file, read into [`GpuTable`]:
//!
//! ```json
//! {
//!   "name": "nvidia_h200",
//!   "source": "where the figures come from",
//!   "memory_properties": {
//!     "types": [ { "flags": "DEVICE_LOCAL|HOST_VISIBLE", "heap_index": 0 } ],
//!     "heaps": [ { "size": 150754820096, "device_local": true } ]
//!   },
//!   "limits": {
//!     "buffer_image_granularity": 1024,
//!     "max_memory_allocation_count": 4294967295,
//!     "non_coherent_atom_size": 64,
//!     "max_memory_allocation_size": 18446744073709551615,
//!     "memory_budget": true
//!   },
//!   "dedicated_image_threshold": 33554432
//! }
//! ```
//!
//! - `flags` is either the raw `VkMemoryPropertyFlags` number or the flag
//!   names joined with `|` (`DEVICE_LOCAL`, `HOST_VISIBLE`, `HOST_COHERENT`,
//!   `HOST_CACHED`, `LAZILY_ALLOCATED`, `PROTECTED`, `DEVICE_COHERENT_AMD`,
//!   `DEVICE_UNCACHED_AMD`, or a hex number such as `0x100` for bits without a
//!   name); `NONE` or `""` is no flag. Tables are written with names.
//! - Sizes are in bytes. `max_memory_allocation_size` is
//!   `18446744073709551615` (`u64::MAX`) where the figure is not known.
//! - `limits.memory_budget` says whether the device has
//!   `VK_EXT_memory_budget`.
//! - `dedicated_image_threshold` is the image size in bytes from which the
//!   driver reports `prefersDedicatedAllocation`, or `null` where it does not
//!   do so by size.
//!
//! Unknown fields are rejected, so a misspelt field fails loudly.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::device::{DeviceLimits, MemoryProperties};
use crate::select::{MAX_MEMORY_HEAPS, MAX_MEMORY_TYPES};

/// One GPU's memory table: what a device reports, as plain data.
///
/// The [module documentation](self) describes the JSON schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuTable {
    /// A short identifier, such as `nvidia_h200`; also the data file's name.
    pub name: String,
    /// Where the figures come from, and how far they can be trusted.
    pub source: String,
    /// The memory heaps and types.
    #[serde(with = "repr")]
    pub memory_properties: MemoryProperties,
    /// The limits the allocator obeys.
    pub limits: DeviceLimits,
    /// The image size in bytes from which the driver prefers a dedicated
    /// allocation (`prefersDedicatedAllocation`), or `None` where it does not
    /// prefer one by size.
    pub dedicated_image_threshold: Option<u64>,
}

/// A table that does not load or does not describe a possible device.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// The JSON does not follow the schema.
    #[error("the table is not valid JSON for the schema: {0}")]
    Json(#[from] serde_json::Error),
    /// The JSON follows the schema but describes no possible device.
    #[error("table {name}: {problem}")]
    Invalid {
        /// The table's name.
        name: String,
        /// What is wrong, as a sentence.
        problem: String,
    },
}

impl GpuTable {
    /// Reads and validates a table from JSON in the schema of the
    /// [module documentation](self).
    ///
    /// # Errors
    /// [`TableError`] when the JSON does not parse or the table fails
    /// [`GpuTable::validate`].
    pub fn from_json(json: &str) -> Result<Self, TableError> {
        let table: Self = serde_json::from_str(json)?;
        table.validate()?;
        Ok(table)
    }

    /// The table as pretty-printed JSON, with flags written as names.
    pub fn to_json(&self) -> String {
        let mut json = serde_json::to_string_pretty(self).expect("a table always serializes");
        json.push('\n');
        json
    }

    /// Checks that the table describes a possible device: at most 32 types
    /// and 16 heaps, at least one of each, every type on an existing heap,
    /// and power-of-two granularity and atom size.
    ///
    /// # Errors
    /// [`TableError::Invalid`] naming the first problem found.
    pub fn validate(&self) -> Result<(), TableError> {
        let props = &self.memory_properties;
        let limits = &self.limits;
        let problem = if props.types.is_empty() || props.types.len() > MAX_MEMORY_TYPES {
            Some(format!(
                "it has {} memory types, not 1 to 32",
                props.types.len()
            ))
        } else if props.heaps.is_empty() || props.heaps.len() > MAX_MEMORY_HEAPS {
            Some(format!("it has {} heaps, not 1 to 16", props.heaps.len()))
        } else if let Some(index) = props
            .types
            .iter()
            .position(|ty| ty.heap_index as usize >= props.heaps.len())
        {
            Some(format!(
                "memory type {index} names a heap that does not exist"
            ))
        } else if let Some(index) = props.heaps.iter().position(|heap| heap.size == 0) {
            Some(format!("heap {index} has size zero"))
        } else if !limits.buffer_image_granularity.is_power_of_two() {
            Some("bufferImageGranularity is not a power of two".to_owned())
        } else if !limits.non_coherent_atom_size.is_power_of_two() {
            Some("nonCoherentAtomSize is not a power of two".to_owned())
        } else if limits.max_memory_allocation_count == 0 {
            Some("maxMemoryAllocationCount is zero".to_owned())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(TableError::Invalid {
                name: self.name.clone(),
                problem,
            }),
            None => Ok(()),
        }
    }

    /// Whether the driver would prefer a dedicated allocation for an image of
    /// `size` bytes.
    pub fn prefers_dedicated_image(&self, size: u64) -> bool {
        self.dedicated_image_threshold
            .is_some_and(|threshold| size >= threshold)
    }
}

/// The built-in tables: name and JSON text.
const BUILT_IN: [(&str, &str); 7] = [
    (
        "nvidia_discrete",
        include_str!("tables/nvidia_discrete.json"),
    ),
    (
        "nvidia_discrete_rebar",
        include_str!("tables/nvidia_discrete_rebar.json"),
    ),
    ("amd_discrete", include_str!("tables/amd_discrete.json")),
    (
        "intel_integrated",
        include_str!("tables/intel_integrated.json"),
    ),
    ("mobile_tiler", include_str!("tables/mobile_tiler.json")),
    ("lavapipe", include_str!("tables/lavapipe.json")),
    ("nvidia_h200", include_str!("tables/nvidia_h200.json")),
];

/// The names of the built-in tables, in the order [`all_tables`] returns
/// them.
pub const TABLE_NAMES: [&str; 7] = [
    BUILT_IN[0].0,
    BUILT_IN[1].0,
    BUILT_IN[2].0,
    BUILT_IN[3].0,
    BUILT_IN[4].0,
    BUILT_IN[5].0,
    BUILT_IN[6].0,
];

/// Parses a built-in table; they are checked by the tests, so failure is a
/// bug in the data files.
fn built_in(name: &str, json: &str) -> GpuTable {
    match GpuTable::from_json(json) {
        Ok(table) => table,
        Err(error) => panic!("built-in GPU table {name} is broken: {error}"),
    }
}

/// Every built-in table, in the order of [`TABLE_NAMES`].
pub fn all_tables() -> Vec<GpuTable> {
    BUILT_IN
        .iter()
        .map(|(name, json)| built_in(name, json))
        .collect()
}

/// The built-in table called `name`, if there is one.
pub fn table(name: &str) -> Option<GpuTable> {
    BUILT_IN
        .iter()
        .find(|(table_name, _)| *table_name == name)
        .map(|(name, json)| built_in(name, json))
}

/// An RTX 3080-class NVIDIA GPU without resizable BAR: the BAR window is a
/// separate 256 MiB device-local heap.
pub fn nvidia_discrete() -> GpuTable {
    built_in(BUILT_IN[0].0, BUILT_IN[0].1)
}

/// The same NVIDIA GPU with resizable BAR: the device-local host-visible type
/// covers the whole device-local heap.
pub fn nvidia_discrete_rebar() -> GpuTable {
    built_in(BUILT_IN[1].0, BUILT_IN[1].1)
}

/// An RDNA2-class AMD GPU with a 256 MiB BAR heap and the
/// `DEVICE_COHERENT_AMD | DEVICE_UNCACHED_AMD` types.
pub fn amd_discrete() -> GpuTable {
    built_in(BUILT_IN[2].0, BUILT_IN[2].1)
}

/// An Intel integrated GPU: one heap, every type device-local.
pub fn intel_integrated() -> GpuTable {
    built_in(BUILT_IN[3].0, BUILT_IN[3].1)
}

/// A Mali-like mobile tiler with a lazily allocated type.
pub fn mobile_tiler() -> GpuTable {
    built_in(BUILT_IN[4].0, BUILT_IN[4].1)
}

/// Mesa 22.3 lavapipe, the software driver CI runs on.
pub fn lavapipe() -> GpuTable {
    built_in(BUILT_IN[5].0, BUILT_IN[5].1)
}

/// The NVIDIA H200 the project measures on.
pub fn nvidia_h200() -> GpuTable {
    built_in(BUILT_IN[6].0, BUILT_IN[6].1)
}

/// Serde for [`MemoryProperties`] inside a table, with flags written as
/// names and read as names or numbers.
mod repr {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::device::{MemoryHeap, MemoryProperties, MemoryPropertyFlags, MemoryType};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Properties {
        types: Vec<Type>,
        heaps: Vec<MemoryHeap>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Type {
        flags: Flags,
        heap_index: u32,
    }

    /// Property flags as they appear in a table.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum FlagsIn {
        Bits(u32),
        Names(String),
    }

    struct Flags(MemoryPropertyFlags);

    impl Serialize for Flags {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(&self.0)
        }
    }

    impl<'de> Deserialize<'de> for Flags {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            match FlagsIn::deserialize(deserializer)? {
                FlagsIn::Bits(bits) => Ok(Self(MemoryPropertyFlags(bits))),
                FlagsIn::Names(names) => parse_flags(&names)
                    .map(Self)
                    .map_err(serde::de::Error::custom),
            }
        }
    }

    /// Parses flag names joined with `|`, as `MemoryPropertyFlags`'s `Debug`
    /// writes them.
    pub(super) fn parse_flags(text: &str) -> Result<MemoryPropertyFlags, String> {
        const NAMES: [(&str, MemoryPropertyFlags); 9] = [
            ("NONE", MemoryPropertyFlags::NONE),
            ("DEVICE_LOCAL", MemoryPropertyFlags::DEVICE_LOCAL),
            ("HOST_VISIBLE", MemoryPropertyFlags::HOST_VISIBLE),
            ("HOST_COHERENT", MemoryPropertyFlags::HOST_COHERENT),
            ("HOST_CACHED", MemoryPropertyFlags::HOST_CACHED),
            ("LAZILY_ALLOCATED", MemoryPropertyFlags::LAZILY_ALLOCATED),
            ("PROTECTED", MemoryPropertyFlags::PROTECTED),
            (
                "DEVICE_COHERENT_AMD",
                MemoryPropertyFlags::DEVICE_COHERENT_AMD,
            ),
            (
                "DEVICE_UNCACHED_AMD",
                MemoryPropertyFlags::DEVICE_UNCACHED_AMD,
            ),
        ];
        let mut flags = MemoryPropertyFlags::NONE;
        for word in text
            .split('|')
            .map(str::trim)
            .filter(|word| !word.is_empty())
        {
            if let Some(hex) = word.strip_prefix("0x") {
                let bits = u32::from_str_radix(hex, 16)
                    .map_err(|_| format!("{word:?} is not a hexadecimal flag value"))?;
                flags |= MemoryPropertyFlags(bits);
            } else if let Some((_, flag)) = NAMES.iter().find(|(name, _)| *name == word) {
                flags |= *flag;
            } else {
                return Err(format!("{word:?} is not a memory property flag"));
            }
        }
        Ok(flags)
    }

    pub(super) fn serialize<S: Serializer>(
        props: &MemoryProperties,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        Properties {
            types: props
                .types
                .iter()
                .map(|ty| Type {
                    flags: Flags(ty.flags),
                    heap_index: ty.heap_index,
                })
                .collect(),
            heaps: props.heaps.clone(),
        }
        .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<MemoryProperties, D::Error> {
        let props = Properties::deserialize(deserializer)?;
        Ok(MemoryProperties {
            types: props
                .types
                .into_iter()
                .map(|ty| MemoryType {
                    flags: ty.flags.0,
                    heap_index: ty.heap_index,
                })
                .collect(),
            heaps: props.heaps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryPropertyFlags as Flags;

    const MIB: u64 = 1 << 20;

    #[test]
    fn every_built_in_table_loads_and_validates() {
        let tables = all_tables();
        assert_eq!(tables.len(), TABLE_NAMES.len());
        for (table, name) in tables.iter().zip(TABLE_NAMES) {
            assert_eq!(
                table.name, name,
                "the file's name field matches its file name"
            );
            table.validate().unwrap();
            assert!(!table.source.is_empty());
            assert_eq!(table, &super::table(name).unwrap());
        }
        assert!(super::table("voodoo2").is_none());
    }

    #[test]
    fn tables_round_trip_through_json() {
        for table in all_tables() {
            let json = table.to_json();
            assert_eq!(GpuTable::from_json(&json).unwrap(), table);
        }
    }

    #[test]
    fn h200_matches_the_reading() {
        let h200 = nvidia_h200();
        let props = &h200.memory_properties;
        assert_eq!(props.heaps.len(), 2);
        assert_eq!(props.heaps[0].size, 143_771 * MIB);
        assert!(props.heaps[0].device_local);
        assert_eq!(props.heaps[1].size, 101_361_423_360); // 96,666 MiB, rounded
        assert!(!props.heaps[1].device_local);
        let expected = [
            (Flags::NONE, 1),
            (Flags::DEVICE_LOCAL, 0),
            (Flags::HOST_VISIBLE | Flags::HOST_COHERENT, 1),
            (
                Flags::HOST_VISIBLE | Flags::HOST_COHERENT | Flags::HOST_CACHED,
                1,
            ),
            (
                Flags::DEVICE_LOCAL | Flags::HOST_VISIBLE | Flags::HOST_COHERENT,
                0,
            ),
        ];
        let got: Vec<_> = props
            .types
            .iter()
            .map(|ty| (ty.flags, ty.heap_index))
            .collect();
        assert_eq!(got, expected);
        assert_eq!(h200.limits.buffer_image_granularity, 1024);
        assert_eq!(h200.limits.max_memory_allocation_count, u32::MAX);
        assert_eq!(h200.limits.non_coherent_atom_size, 64);
        assert!(h200.limits.memory_budget);
        // Read off the driver: 4 GiB - 2 MiB per allocation, and a dedicated
        // preference found for a 64 MiB image but not a 16 MiB one.
        assert_eq!(h200.limits.max_memory_allocation_size, 4_292_870_144);
        assert!(!h200.prefers_dedicated_image(16 * MIB));
        assert!(h200.prefers_dedicated_image(64 * MIB));
    }

    #[test]
    fn lavapipe_matches_vulkaninfo() {
        let lvp = lavapipe();
        assert_eq!(lvp.memory_properties.heaps[0].size, 2 << 30);
        assert_eq!(lvp.memory_properties.types.len(), 1);
        assert_eq!(lvp.memory_properties.types[0].flags, Flags(0xf));
        assert_eq!(lvp.limits.buffer_image_granularity, 64);
        assert_eq!(lvp.limits.max_memory_allocation_size, 2 << 30);
        assert!(!lvp.limits.memory_budget);
        assert!(!lvp.prefers_dedicated_image(u64::MAX));
    }

    #[test]
    fn flags_read_as_names_or_numbers() {
        assert_eq!(repr::parse_flags("NONE"), Ok(Flags::NONE));
        assert_eq!(repr::parse_flags(""), Ok(Flags::NONE));
        assert_eq!(
            repr::parse_flags("DEVICE_LOCAL | HOST_VISIBLE|0x100"),
            Ok(Flags::DEVICE_LOCAL | Flags::HOST_VISIBLE | Flags(0x100))
        );
        assert!(repr::parse_flags("HOST_VISIBEL").is_err());
        assert!(repr::parse_flags("0xZZ").is_err());
        let json = nvidia_h200()
            .to_json()
            .replace("\"DEVICE_LOCAL|HOST_VISIBLE|HOST_COHERENT\"", "7");
        assert_eq!(GpuTable::from_json(&json).unwrap(), nvidia_h200());
    }

    #[test]
    fn bad_tables_are_rejected() {
        let good = lavapipe().to_json();
        let misspelt = good.replace("\"source\"", "\"sauce\"");
        assert!(matches!(
            GpuTable::from_json(&misspelt),
            Err(TableError::Json(_))
        ));
        let no_heap = good.replace("\"heap_index\": 0", "\"heap_index\": 3");
        assert!(matches!(
            GpuTable::from_json(&no_heap),
            Err(TableError::Invalid { .. })
        ));
        let atom = good.replace(
            "\"non_coherent_atom_size\": 64",
            "\"non_coherent_atom_size\": 48",
        );
        let error = GpuTable::from_json(&atom).unwrap_err();
        assert!(error.to_string().contains("nonCoherentAtomSize"), "{error}");
    }
}
