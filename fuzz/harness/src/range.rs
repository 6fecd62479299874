//! The range-allocator targets: a sequence of operations from `arbitrary`,
//! run through `vkalloc::range::shadow::Driver`, which checks every
//! placement and refusal against the shadow model, the counters after every
//! operation, and `validate()` with both walks (here after every operation
//! too).

use arbitrary::Arbitrary;
use vkalloc::range::shadow::{Driver, Policy};
use vkalloc::range::{
    LinearAllocator, LinearMode, RangeAllocator, RangeKind, RangeRequest, TlsfAllocator,
};

/// One fuzz input: the allocator's shape, then the operations.
#[derive(Arbitrary, Debug)]
pub struct RangeInput {
    /// Bytes managed.
    pub capacity: Capacity,
    /// `bufferImageGranularity` as a power of two (taken modulo 64).
    pub granularity_log2: u8,
    /// For the linear target: a ring rather than a stack.
    pub ring: bool,
    /// What to do.
    pub ops: Vec<RangeOp>,
}

/// A capacity, skewed towards the interesting ones.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Capacity {
    /// Nothing fits.
    Zero,
    /// Up to 255 bytes.
    Tiny(u8),
    /// Up to 64 KiB.
    Small(u16),
    /// Up to 4 GiB.
    Medium(u32),
    /// Anything.
    Any(u64),
    /// `u64::MAX` minus a little.
    NearMax(u16),
}

impl Capacity {
    fn bytes(self) -> u64 {
        match self {
            Capacity::Zero => 0,
            Capacity::Tiny(n) => n.into(),
            Capacity::Small(n) => n.into(),
            Capacity::Medium(n) => n.into(),
            Capacity::Any(n) => n,
            Capacity::NearMax(n) => u64::MAX - u64::from(n),
        }
    }
}

/// A request size (never zero: the trait asks for a non-zero size).
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Size {
    /// 1 to 256 bytes.
    Tiny(u8),
    /// Up to 64 KiB.
    Small(u16),
    /// Up to 4 GiB.
    Medium(u32),
    /// A power of two (exponent modulo 64).
    Pow2(u8),
    /// `capacity * n / 256`, rounded down (at least 1).
    OfCapacity(u8),
    /// Exactly the capacity.
    Capacity,
    /// `u64::MAX` minus a little.
    NearMax(u16),
    /// Anything.
    Any(u64),
}

impl Size {
    fn bytes(self, capacity: u64) -> u64 {
        let n = match self {
            Size::Tiny(n) => u64::from(n) + 1,
            Size::Small(n) => n.into(),
            Size::Medium(n) => n.into(),
            Size::Pow2(e) => 1 << (e % 64),
            Size::OfCapacity(n) => ((u128::from(capacity) * u128::from(n)) >> 8) as u64,
            Size::Capacity => capacity,
            Size::NearMax(n) => u64::MAX - u64::from(n),
            Size::Any(n) => n,
        };
        n.max(1)
    }
}

/// The resource layout of a request.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Kind {
    /// Buffers and linear images.
    Linear,
    /// Optimal-tiling images.
    Optimal,
    /// Unknown contents.
    Unknown,
}

impl From<Kind> for RangeKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Linear => RangeKind::Linear,
            Kind::Optimal => RangeKind::Optimal,
            Kind::Unknown => RangeKind::Unknown,
        }
    }
}

/// One operation on the range allocator.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum RangeOp {
    /// Allocate; `via_find` uses `find` (twice, checked pure) and `commit`.
    Allocate {
        size: Size,
        /// Alignment as a power of two, exponent modulo 64.
        align_log2: u8,
        kind: Kind,
        via_find: bool,
    },
    /// Free the live allocation at `index` modulo their number.
    Free { index: u16 },
    /// Free the oldest live allocation (a ring's order).
    FreeOldest,
    /// Free the newest live allocation (a stack's order).
    FreeNewest,
    /// Free a recently freed id again: must be refused.
    FreeDead { index: u8 },
    /// Free a made-up id: refused unless it happens to be live.
    FreeMadeUp { id: u32 },
    /// Free everything at once.
    Clear,
    /// Free everything one by one (`order % 3`: shuffled, oldest first,
    /// newest first).
    Drain { order: u64 },
}

/// Runs `input` on the allocator `make(capacity, granularity)` under
/// `policy`'s promises; returns the number of operations run.
pub fn run(
    input: &RangeInput,
    policy: Policy,
    make: impl FnOnce(u64, u64) -> Box<dyn RangeAllocator>,
) -> u64 {
    let capacity = input.capacity.bytes();
    let granularity = 1u64 << (input.granularity_log2 % 64);
    let mut allocator = make(capacity, granularity);
    let context = format!("{policy:?}, capacity {capacity}, granularity {granularity}");
    let mut driver = Driver::new(allocator.as_mut(), policy, granularity, context);
    for &op in &input.ops {
        match op {
            RangeOp::Allocate {
                size,
                align_log2,
                kind,
                via_find,
            } => {
                let request = RangeRequest {
                    size: size.bytes(capacity),
                    alignment: 1 << (align_log2 % 64),
                    kind: kind.into(),
                };
                driver.allocate(&request, via_find);
            }
            RangeOp::Free { index } => {
                let live = driver.live_count();
                if let Some(id) = (live > 0)
                    .then(|| driver.live_id(usize::from(index) % live))
                    .flatten()
                {
                    driver.free_id(id);
                }
            }
            RangeOp::FreeOldest => {
                if let Some(id) = driver.oldest() {
                    driver.free_id(id);
                }
            }
            RangeOp::FreeNewest => {
                if let Some(id) = driver.newest() {
                    driver.free_id(id);
                }
            }
            RangeOp::FreeDead { index } => {
                if let Some(id) = driver.dead_id(index.into()) {
                    driver.stale_free(id);
                }
            }
            RangeOp::FreeMadeUp { id } => driver.made_up_free(id),
            RangeOp::Clear => driver.clear(),
            RangeOp::Drain { order } => driver.drain(order),
        }
        driver.check_counts();
        driver.full_check();
    }
    driver.drain(0);
    driver.ops() as u64
}

/// The `range_tlsf` target: the TLSF allocator against the shadow model.
pub fn tlsf(input: &RangeInput) {
    let ops = run(input, Policy::GoodFit, |capacity, granularity| {
        // Runs from the first allocation, so the fuzzer reaches them.
        Box::new(TlsfAllocator::new(capacity, granularity).with_runs_from(0))
    });
    crate::count("range_tlsf", ops);
}

/// The `range_linear` target: the linear allocator (a stack, or a ring when
/// the input says so) against the shadow model.
pub fn linear(input: &RangeInput) {
    let (policy, mode) = if input.ring {
        (Policy::Ring, LinearMode::Ring)
    } else {
        (Policy::Stack, LinearMode::Stack)
    };
    let ops = run(input, policy, |capacity, granularity| {
        Box::new(LinearAllocator::new(capacity, mode, granularity))
    });
    crate::count("range_linear", ops);
}
