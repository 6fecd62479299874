//! What the allocator targets share besides the interpreter: the operations
//! both have ([`Common`], run by [`crate::interpreter`]), the shadow of the
//! ranges the allocator holds ([`Ranges`]), and the checks both make of a
//! new allocation and of the allocator after each operation.

use std::collections::BTreeMap;
use std::sync::Arc;

use vkalloc::device::DeviceMemory;
use vkalloc::sim::SimDevice;
use vkalloc::stats::Statistics;
use vkalloc::{Allocation, AllocationDesc, Allocator, PoolId, ResourceKind};

/// The simulated device the targets run on.
pub type Sim = Arc<SimDevice>;
/// The allocator on it.
pub type Alloc = Allocator<Sim>;

/// The operations both targets have: calls whose checks do not depend on
/// the target (the target adds its own through [`crate::interpreter::Target`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Common {
    /// `trim`.
    Trim,
    /// `begin_frame`.
    BeginFrame,
    /// `statistics`: heaps and types sum to the total.
    Statistics,
    /// `detailed_statistics`: as many records as the shadow counts.
    DetailedStatistics,
    /// `to_json` parses.
    Json,
    /// `leaks`: one per allocation the shadow counts.
    Leaks,
    /// `check_corruption` finds none.
    CheckCorruption,
}

/// Checks what `statistics` says of itself: heaps and types sum to the
/// total, and no more bytes are allocated than blocks hold.
pub fn check_statistics(stats: &Statistics) {
    let heaps: u64 = stats.heaps.iter().map(|h| h.usage.allocation_count).sum();
    let types: u64 = stats.types.iter().map(|t| t.usage.allocation_count).sum();
    assert_eq!(heaps, stats.total.allocation_count);
    assert_eq!(types, stats.total.allocation_count);
    assert!(stats.total.allocation_bytes <= stats.total.block_bytes);
}

/// Checks the allocator after an operation: `validate()` holds, the device
/// saw no contract violation, no corruption was detected, the total count is
/// `expected`, and each live pool (`(index, id, expected count)`) counts what
/// the shadow holds in it.
pub fn check_allocator(
    allocator: &Alloc,
    sim: &Sim,
    expected: u64,
    pools: impl Iterator<Item = (usize, PoolId, u64)>,
) {
    if let Err(e) = allocator.validate() {
        panic!("validate: {e}");
    }
    assert_eq!(sim.violations(), 0, "{:?}", sim.violation_log());
    let stats = allocator.statistics();
    assert_eq!(stats.total.allocation_count, expected, "allocation count");
    assert_eq!(stats.corruptions_detected, 0, "corruption detected");
    for (p, id, expected) in pools {
        let pool = stats.pools.iter().find(|s| s.index == id.index());
        let pool = pool.unwrap_or_else(|| panic!("pool {p} missing from the statistics"));
        assert_eq!(pool.usage.allocation_count, expected, "pool {p} count");
    }
}

/// Checks a new allocation against its request: its size, its alignment,
/// its memory type among the request's bits, its kind and its pool.
pub fn check_new(a: &Allocation, desc: &AllocationDesc<'_>) {
    assert_eq!(a.size(), desc.size, "size");
    let alignment = desc.alignment.max(1);
    assert_eq!(a.offset() % alignment, 0, "alignment of {desc:?}");
    assert_ne!(
        desc.memory_type_bits & (1 << a.memory_type()),
        0,
        "memory type {} outside the bits of {desc:?}",
        a.memory_type()
    );
    assert_eq!(a.kind(), desc.kind);
    assert_eq!(a.pool(), desc.options.pool, "pool");
}

/// Where a range lies: its memory object and offset.
pub type Key = (DeviceMemory, u64);

/// The key of an allocation's range.
pub fn key(a: &Allocation) -> Key {
    (a.memory(), a.offset())
}

#[derive(Clone, Copy, Debug)]
struct Span {
    size: u64,
    kind: ResourceKind,
}

/// Every range the allocator holds for a target, by memory and offset:
/// a new one must overlap none and, with a granularity page of more than a
/// byte, share no page with a range of a conflicting kind.
pub struct Ranges {
    page: u64,
    map: BTreeMap<Key, Span>,
}

/// Whether two resource kinds must not share a granularity page.
pub fn conflicts(a: ResourceKind, b: ResourceKind) -> bool {
    let class = |k: ResourceKind| match k {
        ResourceKind::Buffer | ResourceKind::LinearImage => 0,
        ResourceKind::OptimalImage => 1,
        ResourceKind::Unknown => 2,
    };
    class(a) != class(b) || class(a) == 2
}

impl Ranges {
    /// No ranges, checked against pages of `granularity` bytes (0 or 1:
    /// overlaps only).
    pub fn new(granularity: u64) -> Ranges {
        Ranges {
            page: granularity.max(1),
            map: BTreeMap::new(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Records a range the allocator holds (`what`, for messages), checking
    /// it against its neighbours.
    pub fn claim(&mut self, key: Key, size: u64, kind: ResourceKind, what: &str) {
        let (memory, offset) = key;
        let end = offset
            .checked_add(size)
            .unwrap_or_else(|| panic!("{what} at {offset} +{size} ends past u64::MAX"));
        let page = self.page;
        if let Some((&(m, o), s)) = self.map.range(..=key).next_back() {
            if m == memory {
                assert!(
                    o + s.size <= offset,
                    "{what} [{offset}, +{size}) overlaps [{o}, +{}) in {memory:?}",
                    s.size
                );
                if page > 1 && conflicts(s.kind, kind) {
                    assert!(
                        (o + s.size - 1) / page < offset / page,
                        "{what} [{offset}, +{size}) {kind:?} shares a {page}-byte page with [{o}, +{}) {:?}",
                        s.size,
                        s.kind
                    );
                }
            }
        }
        if let Some((&(m, o), s)) = self.map.range(key..).next() {
            if m == memory {
                assert!(
                    end <= o,
                    "{what} [{offset}, +{size}) overlaps [{o}, +{}) in {memory:?}",
                    s.size
                );
                if page > 1 && conflicts(s.kind, kind) {
                    assert!(
                        (end - 1) / page < o / page,
                        "{what} [{offset}, +{size}) {kind:?} shares a {page}-byte page with [{o}, +{}) {:?}",
                        s.size,
                        s.kind
                    );
                }
            }
        }
        self.map.insert(key, Span { size, kind });
    }

    /// Forgets a range the allocator no longer holds; it must be recorded.
    pub fn release(&mut self, key: Key) {
        assert!(
            self.map.remove(&key).is_some(),
            "range {key:?} missing from the shadow"
        );
    }
}

/// [`crate::interpreter::Target::common`] for a target whose `Op` (in
/// scope where this is invoked) names the shared operations as [`Common`]
/// does.
macro_rules! common_of_op {
    () => {
        fn common(op: Op) -> Result<$crate::ops::Common, Op> {
            use $crate::ops::Common;
            Ok(match op {
                Op::Trim => Common::Trim,
                Op::BeginFrame => Common::BeginFrame,
                Op::Statistics => Common::Statistics,
                Op::DetailedStatistics => Common::DetailedStatistics,
                Op::Json => Common::Json,
                Op::Leaks => Common::Leaks,
                Op::CheckCorruption => Common::CheckCorruption,
                op => return Err(op),
            })
        }
    };
}
pub(crate) use common_of_op;
