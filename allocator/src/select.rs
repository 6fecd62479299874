//! Memory-type selection: which `VkMemoryType` an allocation comes from.
//!
//! Selection is a pure function over plain data. It reads the device's
//! [`MemoryProperties`], a [`TypeRequest`] and how many bytes each heap can
//! still take ([`HeapRoom`]), and returns every acceptable memory type, best
//! first ([`TypeCandidates`]). The caller tries them in order and moves to the
//! next one when `vkAllocateMemory` runs out of memory. Nothing here allocates,
//! locks or calls the device, and the same inputs always give the same answer.
//!
//! The chosen type is where new memory is made. Before it makes any, the
//! allocator also takes room that the existing blocks of a *sibling* type
//! have: another type of the same heap with every property of the chosen one
//! and, beyond them, only `DEVICE_LOCAL`, `HOST_VISIBLE` or `HOST_COHERENT`
//! (`crate::policy::sibling_types`). On a discrete GPU with a resizable BAR
//! a [`MemoryUsage::GpuOnly`] request may so land in a block of the
//! `DEVICE_LOCAL | HOST_VISIBLE` type that uploads left empty: the same
//! device memory, and [`crate::Allocation::memory_type`] says which type.
//!
//! # The cost rule
//!
//! A request resolves to [`TypeFlags`]: `required`, `preferred` and
//! `not_preferred` property flags. A memory type is a candidate when its bit is
//! set in `memoryTypeBits`, it has every `required` flag, and it is not one of
//! the special types below. Its cost is the number of `preferred` flags it
//! lacks plus the number of `not_preferred` flags it has (the rule VMA uses).
//! Lower cost ranks first; equal costs keep the lower type index first.
//!
//! Some types are left out unless the request names their flag, because
//! landing in them by accident is costly:
//! - `LAZILY_ALLOCATED` types (tile memory of mobile GPUs) can only back
//!   transient attachments, so they are left out unless the request requires
//!   or prefers `LAZILY_ALLOCATED`.
//! - `PROTECTED` types need a protected queue and protected resources, so they
//!   are left out unless the request requires `PROTECTED`.
//! - `DEVICE_COHERENT_AMD` and `DEVICE_UNCACHED_AMD` types bypass the GPU's
//!   caches. They exist for writing crash-breadcrumb markers that survive a
//!   device loss and are much slower for anything else, so they are left out
//!   unless the request requires or prefers one of these two flags.
//!
//! # Budgets
//!
//! A type whose heap has less room than the allocation's size is *over
//! budget*. Over-budget types rank after every type whose heap has room (each
//! group ordered by cost), so an allocation spills to another heap before it
//! pushes a heap past its budget. With [`TypeRequest::within_budget`] set,
//! over-budget types are left out altogether. See [`HeapRoom`] for how room is
//! measured, and [`heap_rooms`] to compute it for every heap.
//!
//! # Presets
//!
//! [`MemoryUsage`] names the common cases; each resolves to [`TypeFlags`]:
//!
//! | preset | required | preferred | not preferred |
//! | --- | --- | --- | --- |
//! | [`MemoryUsage::GpuOnly`] | – | `DEVICE_LOCAL` | `HOST_VISIBLE` |
//! | [`MemoryUsage::Upload`], ReBAR has room | `HOST_VISIBLE` | `HOST_COHERENT`, `DEVICE_LOCAL` | `HOST_CACHED` |
//! | [`MemoryUsage::Upload`], otherwise | `HOST_VISIBLE` | `HOST_COHERENT` | `HOST_CACHED`, `DEVICE_LOCAL` |
//! | [`MemoryUsage::Readback`] | `HOST_VISIBLE` | `HOST_CACHED`, `HOST_COHERENT` | `DEVICE_LOCAL` |
//! | [`MemoryUsage::Transient`] | – | `DEVICE_LOCAL`, `LAZILY_ALLOCATED` | `HOST_VISIBLE` |
//!
//! The ReBAR rule for uploads is spelled out at [`MemoryUsage::Upload`].

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

use crate::device::{HeapBudget, MemoryHeap, MemoryProperties, MemoryPropertyFlags as Flags};

/// The most memory types a Vulkan device has (`VK_MAX_MEMORY_TYPES`).
pub const MAX_MEMORY_TYPES: usize = 32;

/// The most memory heaps a Vulkan device has (`VK_MAX_MEMORY_HEAPS`).
pub const MAX_MEMORY_HEAPS: usize = 16;

/// An upload prefers the device-local host-visible (ReBAR) type only when the
/// allocation is at most `1 / REBAR_HEAP_FRACTION` of that type's heap.
///
/// On a GPU without resizable BAR the window is a 256 MiB heap, so only
/// staging buffers up to 32 MiB go there and a few large uploads cannot fill
/// it; with resizable BAR the heap is the whole of video memory and the rule
/// hardly ever bites.
pub const REBAR_HEAP_FRACTION: u64 = 8;

/// Without `VK_EXT_memory_budget`, a heap is assumed to be usable up to this
/// percentage of its size (see [`HeapRoom::estimate`]).
pub const ESTIMATED_BUDGET_PERCENT: u64 = 80;

/// The flags with which a request ranks memory types.
///
/// See the [module documentation](self) for the cost rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TypeFlags {
    /// Flags a memory type must have to be a candidate at all.
    pub required: Flags,
    /// Flags that lower a type's cost by one each when present.
    pub preferred: Flags,
    /// Flags that raise a type's cost by one each when present.
    pub not_preferred: Flags,
}

/// `DEVICE_COHERENT_AMD | DEVICE_UNCACHED_AMD`.
const AMD_UNCACHED: Flags = Flags(Flags::DEVICE_COHERENT_AMD.0 | Flags::DEVICE_UNCACHED_AMD.0);

impl TypeFlags {
    /// Flags with the given required, preferred and not-preferred sets.
    pub const fn new(required: Flags, preferred: Flags, not_preferred: Flags) -> Self {
        Self {
            required,
            preferred,
            not_preferred,
        }
    }

    /// The cost of a memory type with `flags`: preferred flags it lacks plus
    /// not-preferred flags it has. It says nothing about whether the type is
    /// acceptable; see [`TypeFlags::accepts`].
    pub fn cost(&self, flags: Flags) -> u32 {
        (self.preferred & !flags).count() + (self.not_preferred & flags).count()
    }

    /// Whether a memory type with `flags` is a candidate: it has every
    /// required flag and is not one of the special types this request does
    /// not ask for (lazily allocated, protected, AMD device-uncached).
    pub fn accepts(&self, flags: Flags) -> bool {
        flags.contains(self.required) && !self.leaves_out(flags)
    }

    /// Whether a type with `flags` is one of the special types left out
    /// because this request does not name their flag.
    fn leaves_out(&self, flags: Flags) -> bool {
        let asked = self.required | self.preferred;
        let lazy =
            flags.intersects(Flags::LAZILY_ALLOCATED) && !asked.intersects(Flags::LAZILY_ALLOCATED);
        let protected =
            flags.intersects(Flags::PROTECTED) && !self.required.contains(Flags::PROTECTED);
        let amd = flags.intersects(AMD_UNCACHED) && !asked.intersects(AMD_UNCACHED);
        lazy || protected || amd
    }
}

/// What an allocation is for; resolves to [`TypeFlags`] for one device.
///
/// The table in the [module documentation](self) lists what each preset
/// resolves to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum MemoryUsage {
    /// Only the GPU touches the memory: render targets, textures, vertex and
    /// storage buffers filled by copies. Prefers `DEVICE_LOCAL`, avoids
    /// `HOST_VISIBLE` (which on discrete GPUs is the scarce BAR window or
    /// system memory) for new memory; room in existing blocks of a
    /// host-visible type of the same heap may still take it (see the
    /// module's notes), and such an allocation can be mapped.
    #[default]
    GpuOnly,
    /// The host writes, the GPU reads: staging buffers, per-frame uniforms.
    ///
    /// Requires `HOST_VISIBLE`, prefers `HOST_COHERENT` (no flushes) and
    /// avoids `HOST_CACHED` (write-combined memory is what sequential host
    /// writes want). On top of that it prefers `DEVICE_LOCAL`, so the GPU
    /// reads the data from its own memory, when **all** of these hold:
    ///
    /// 1. Among the types allowed by `memoryTypeBits` that have
    ///    `DEVICE_LOCAL | HOST_VISIBLE` (and are not special types, see the
    ///    [module documentation](self)) there is one; the best of them by cost
    ///    with `HOST_COHERENT` preferred and `HOST_CACHED` not preferred, ties
    ///    to the lower index, is the *ReBAR type*.
    /// 2. The ReBAR type's heap has room for the allocation: its [`HeapRoom`]
    ///    (budget minus usage, or [`ESTIMATED_BUDGET_PERCENT`] of the heap
    ///    size minus the allocator's own usage without a budget) is at least
    ///    the allocation size.
    /// 3. The allocation is at most `1 / `[`REBAR_HEAP_FRACTION`] of the ReBAR
    ///    type's heap size.
    ///
    /// Otherwise it avoids `DEVICE_LOCAL` instead, so the upload goes to
    /// system memory even where a ReBAR type has a lower index. On integrated
    /// GPUs every type is device-local, so either way the choice falls to
    /// the other flags.
    Upload,
    /// The GPU writes, the host reads: query results, screenshots, readback
    /// buffers. Requires `HOST_VISIBLE`, prefers `HOST_CACHED` (uncached
    /// reads are very slow) and `HOST_COHERENT` (no invalidates), and avoids
    /// `DEVICE_LOCAL` (host reads across PCIe from video memory are the
    /// slowest of all). A type that is both cached and coherent wins; between
    /// one that is only cached and one that is only coherent the lower index
    /// wins.
    Readback,
    /// Transient attachments (`TRANSIENT_ATTACHMENT` images that live inside
    /// one render pass). Prefers `DEVICE_LOCAL | LAZILY_ALLOCATED`, so tilers
    /// keep them in tile memory, and avoids `HOST_VISIBLE`.
    Transient,
    /// Explicit flags, ranked as given.
    Custom(TypeFlags),
}

impl MemoryUsage {
    /// The flags this usage resolves to on a device with `props`, for an
    /// allocation of `size` bytes restricted to `memory_type_bits`, given the
    /// room left in each heap (`heaps`, indexed by heap; missing entries
    /// count as [`HeapRoom::UNKNOWN`]).
    ///
    /// Only [`MemoryUsage::Upload`] depends on anything but `self`.
    pub fn resolve(
        self,
        props: &MemoryProperties,
        memory_type_bits: u32,
        size: u64,
        heaps: &[HeapRoom],
    ) -> TypeFlags {
        match self {
            Self::GpuOnly => TypeFlags::new(Flags::NONE, Flags::DEVICE_LOCAL, Flags::HOST_VISIBLE),
            Self::Upload => {
                let rebar = rebar_type(props, memory_type_bits)
                    .is_some_and(|index| rebar_has_room(props, index, size, heaps));
                let (preferred, not_preferred) = if rebar {
                    (
                        Flags::HOST_COHERENT | Flags::DEVICE_LOCAL,
                        Flags::HOST_CACHED,
                    )
                } else {
                    (
                        Flags::HOST_COHERENT,
                        Flags::HOST_CACHED | Flags::DEVICE_LOCAL,
                    )
                };
                TypeFlags::new(Flags::HOST_VISIBLE, preferred, not_preferred)
            }
            Self::Readback => TypeFlags::new(
                Flags::HOST_VISIBLE,
                Flags::HOST_CACHED | Flags::HOST_COHERENT,
                Flags::DEVICE_LOCAL,
            ),
            Self::Transient => TypeFlags::new(
                Flags::NONE,
                Flags::DEVICE_LOCAL | Flags::LAZILY_ALLOCATED,
                Flags::HOST_VISIBLE,
            ),
            Self::Custom(flags) => flags,
        }
    }
}

/// The ReBAR type for uploads restricted to `memory_type_bits`: the best
/// `DEVICE_LOCAL | HOST_VISIBLE` type, as rule 1 of [`MemoryUsage::Upload`]
/// says, or `None` when there is none.
pub fn rebar_type(props: &MemoryProperties, memory_type_bits: u32) -> Option<u32> {
    let want = TypeFlags::new(
        Flags::DEVICE_LOCAL | Flags::HOST_VISIBLE,
        Flags::HOST_COHERENT,
        Flags::HOST_CACHED,
    );
    let bits = memory_type_bits & props.all_types_mask();
    let mut best: Option<(u32, u32)> = None;
    for (index, ty) in props.types.iter().enumerate().take(MAX_MEMORY_TYPES) {
        let index = index as u32;
        if bits & (1 << index) == 0 || !want.accepts(ty.flags) {
            continue;
        }
        let cost = want.cost(ty.flags);
        if !matches!(best, Some((best_cost, _)) if best_cost <= cost) {
            best = Some((cost, index));
        }
    }
    best.map(|(_, index)| index)
}

/// Whether an upload of `size` bytes fits the heap of ReBAR type
/// `type_index`: rules 2 and 3 of [`MemoryUsage::Upload`].
pub fn rebar_has_room(
    props: &MemoryProperties,
    type_index: u32,
    size: u64,
    heaps: &[HeapRoom],
) -> bool {
    let Some(ty) = props.types.get(type_index as usize) else {
        return false;
    };
    rebar_fits(props, type_index, size, room_of(heaps, ty.heap_index))
}

/// [`rebar_has_room`] given only the room of the type's own heap (the one
/// [`rebar_has_room`] reads): no array of every heap's room to fill.
pub(crate) fn rebar_fits(
    props: &MemoryProperties,
    type_index: u32,
    size: u64,
    room: HeapRoom,
) -> bool {
    let Some(ty) = props.types.get(type_index as usize) else {
        return false;
    };
    let Some(heap) = props.heaps.get(ty.heap_index as usize) else {
        return false;
    };
    room.fits(size) && size <= heap.size / REBAR_HEAP_FRACTION
}

/// How many more bytes a heap can take before it goes over budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HeapRoom(pub u64);

impl HeapRoom {
    /// Room that is not known: every allocation fits.
    pub const UNKNOWN: Self = Self(u64::MAX);

    /// The room `VK_EXT_memory_budget` reports: budget minus usage, or zero
    /// when usage is already past the budget.
    pub const fn from_budget(budget: HeapBudget) -> Self {
        Self(budget.budget.saturating_sub(budget.usage))
    }

    /// An estimate without `VK_EXT_memory_budget`:
    /// [`ESTIMATED_BUDGET_PERCENT`] of the heap's size minus the bytes the
    /// allocator itself holds in it (`own_usage`). Other processes are
    /// invisible here.
    pub fn estimate(heap: &MemoryHeap, own_usage: u64) -> Self {
        let usable = (u128::from(heap.size) * u128::from(ESTIMATED_BUDGET_PERCENT) / 100) as u64;
        Self(usable.saturating_sub(own_usage))
    }

    /// Whether an allocation of `size` bytes fits.
    pub const fn fits(self, size: u64) -> bool {
        size <= self.0
    }
}

impl Default for HeapRoom {
    fn default() -> Self {
        Self::UNKNOWN
    }
}

/// The room of every heap of `props`, in a fixed array indexed by heap;
/// entries past the last heap are [`HeapRoom::UNKNOWN`].
///
/// With `budgets` (one entry per heap, from
/// [`crate::device::MemoryDevice::heap_budgets`]) each heap's room is
/// [`HeapRoom::from_budget`]; without, [`HeapRoom::estimate`] from
/// `own_usage` (bytes the allocator holds per heap; missing entries count as
/// zero). A heap missing from `budgets` is estimated.
pub fn heap_rooms(
    props: &MemoryProperties,
    budgets: Option<&[HeapBudget]>,
    own_usage: &[u64],
) -> [HeapRoom; MAX_MEMORY_HEAPS] {
    let mut rooms = [HeapRoom::UNKNOWN; MAX_MEMORY_HEAPS];
    for (index, (room, heap)) in rooms.iter_mut().zip(&props.heaps).enumerate() {
        *room = match budgets.and_then(|budgets| budgets.get(index)) {
            Some(budget) => HeapRoom::from_budget(*budget),
            None => HeapRoom::estimate(heap, own_usage.get(index).copied().unwrap_or(0)),
        };
    }
    rooms
}

/// The room of heap `heap` in `heaps`; [`HeapRoom::UNKNOWN`] past its end.
fn room_of(heaps: &[HeapRoom], heap: u32) -> HeapRoom {
    heaps
        .get(heap as usize)
        .copied()
        .unwrap_or(HeapRoom::UNKNOWN)
}

/// One memory-type question: what for, which types the resource accepts, how
/// big, and whether it must stay within budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TypeRequest {
    /// What the memory is for.
    pub usage: MemoryUsage,
    /// `VkMemoryRequirements::memoryTypeBits`: bit `i` set when type `i`
    /// can back the resource.
    pub memory_type_bits: u32,
    /// The allocation's size in bytes (the block's size when choosing a type
    /// for a new block).
    pub size: u64,
    /// Leave out types whose heap lacks room for `size`, instead of ranking
    /// them last.
    pub within_budget: bool,
}

impl TypeRequest {
    /// A request that may go over budget.
    pub const fn new(usage: MemoryUsage, memory_type_bits: u32, size: u64) -> Self {
        Self {
            usage,
            memory_type_bits,
            size,
            within_budget: false,
        }
    }

    /// The same request with [`TypeRequest::within_budget`] set to `yes`.
    pub const fn within_budget(mut self, yes: bool) -> Self {
        self.within_budget = yes;
        self
    }
}

/// Why no memory type fits a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectError {
    /// `memoryTypeBits` names no memory type of this device. The bits come
    /// from the wrong device, or are zero; pass the resource's own memory
    /// requirements.
    #[error("memoryTypeBits {memory_type_bits:#x} names no memory type of this device")]
    NoMemoryTypeBits {
        /// The bits as passed.
        memory_type_bits: u32,
    },
    /// No allowed type has every required flag (after leaving out the
    /// special types the request does not ask for). Relax the required
    /// flags, or move them to the preferred set.
    #[error("no memory type in {memory_type_bits:#x} has the required flags {required}")]
    NoTypeWithRequiredFlags {
        /// The required flags the request resolved to.
        required: Flags,
        /// The bits as passed.
        memory_type_bits: u32,
    },
    /// Types fit, but the request must stay within budget and none of their
    /// heaps has room for `size` bytes. Free memory, wait for the budget to
    /// grow, or allow the request to go over budget.
    #[error("no memory type in {memory_type_bits:#x} has room for {size} bytes within budget")]
    NoTypeWithinBudget {
        /// The request's size in bytes.
        size: u64,
        /// The bits as passed.
        memory_type_bits: u32,
    },
}

/// Candidate memory types for one request, best first.
///
/// A fixed-size value (no heap allocation) and an [`Iterator`] over type
/// indices: take the first, and on out-of-memory go on to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeCandidates {
    types: [u32; MAX_MEMORY_TYPES],
    next: u8,
    len: u8,
    over_budget: u32,
    flags: TypeFlags,
}

impl TypeCandidates {
    /// The candidates not yet taken, best first.
    pub fn as_slice(&self) -> &[u32] {
        &self.types[usize::from(self.next)..usize::from(self.len)]
    }

    /// The best candidate not yet taken, without taking it.
    pub fn peek(&self) -> Option<u32> {
        self.as_slice().first().copied()
    }

    /// Whether the heap of candidate `type_index` lacks room for the request
    /// (it was ranked after every type whose heap has room). Always false for
    /// a type that is not a candidate.
    pub fn is_over_budget(&self, type_index: u32) -> bool {
        type_index < 32 && self.over_budget & (1 << type_index) != 0
    }

    /// The flags the request resolved to.
    pub fn flags(&self) -> TypeFlags {
        self.flags
    }
}

impl Iterator for TypeCandidates {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let first = self.peek()?;
        self.next += 1;
        Some(first)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let len = self.as_slice().len();
        (len, Some(len))
    }
}

impl ExactSizeIterator for TypeCandidates {}

impl std::iter::FusedIterator for TypeCandidates {}

/// Ranks the memory types of `props` for `request`, best first.
///
/// `heaps` holds the room left in each heap, indexed by heap (see
/// [`heap_rooms`]); pass `&[]` when budgets do not matter, and every heap
/// counts as having room. The [module documentation](self) gives the rules.
///
/// # Errors
/// [`SelectError`] when no type is a candidate.
pub fn rank_memory_types(
    props: &MemoryProperties,
    request: &TypeRequest,
    heaps: &[HeapRoom],
) -> Result<TypeCandidates, SelectError> {
    let memory_type_bits = request.memory_type_bits;
    let bits = memory_type_bits & props.all_types_mask();
    if bits == 0 {
        return Err(SelectError::NoMemoryTypeBits { memory_type_bits });
    }
    let flags = request
        .usage
        .resolve(props, memory_type_bits, request.size, heaps);

    // Sort keys: over budget (bit 16), then cost (bits 8..16), then index
    // (bits 0..8). Cost is at most 64, so the fields never overlap.
    let mut keys = [0u32; MAX_MEMORY_TYPES];
    let mut len = 0usize;
    let mut over_budget = 0u32;
    let mut any_accepted = false;
    for (index, ty) in props.types.iter().enumerate().take(MAX_MEMORY_TYPES) {
        if bits & (1 << index) == 0 || !flags.accepts(ty.flags) {
            continue;
        }
        any_accepted = true;
        let over = !room_of(heaps, ty.heap_index).fits(request.size);
        if over {
            if request.within_budget {
                continue;
            }
            over_budget |= 1 << index;
        }
        let key = (u32::from(over) << 16) | (flags.cost(ty.flags) << 8) | index as u32;
        // Insertion sort: at most 32 entries, already in index order.
        let mut at = len;
        while at > 0 && keys[at - 1] > key {
            keys[at] = keys[at - 1];
            at -= 1;
        }
        keys[at] = key;
        len += 1;
    }

    if len == 0 {
        return Err(if any_accepted {
            SelectError::NoTypeWithinBudget {
                size: request.size,
                memory_type_bits,
            }
        } else {
            SelectError::NoTypeWithRequiredFlags {
                required: flags.required,
                memory_type_bits,
            }
        });
    }
    let mut types = [0u32; MAX_MEMORY_TYPES];
    for (slot, key) in types.iter_mut().zip(&keys[..len]) {
        *slot = key & 0xff;
    }
    Ok(TypeCandidates {
        types,
        next: 0,
        len: len as u8,
        over_budget,
        flags,
    })
}

/// The best memory type for `request`: the first of [`rank_memory_types`].
///
/// # Errors
/// As [`rank_memory_types`].
pub fn best_memory_type(
    props: &MemoryProperties,
    request: &TypeRequest,
    heaps: &[HeapRoom],
) -> Result<u32, SelectError> {
    let mut candidates = rank_memory_types(props, request, heaps)?;
    Ok(candidates
        .next()
        .expect("rank_memory_types returns at least one candidate"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemoryType;
    use crate::sim::{self, GpuTable};

    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    const ALL: u32 = u32::MAX;

    fn table(name: &str) -> GpuTable {
        sim::table(name).unwrap_or_else(|| panic!("no table named {name}"))
    }

    /// Ranks `usage` on table `name` and checks the order against `expected`
    /// (best first).
    #[track_caller]
    fn check(name: &str, usage: MemoryUsage, bits: u32, size: u64, expected: &[u32]) {
        check_rooms(name, usage, bits, size, &[], expected);
    }

    /// As [`check`], with room given per heap.
    #[track_caller]
    fn check_rooms(
        name: &str,
        usage: MemoryUsage,
        bits: u32,
        size: u64,
        rooms: &[HeapRoom],
        expected: &[u32],
    ) {
        let table = table(name);
        let request = TypeRequest::new(usage, bits, size);
        let got = rank_memory_types(&table.memory_properties, &request, rooms)
            .unwrap_or_else(|e| panic!("{name} {usage:?}: {e}"));
        assert_eq!(
            got.peek(),
            expected.first().copied(),
            "{name} {usage:?}: first"
        );
        assert_eq!(got.as_slice(), expected, "{name} {usage:?}: order");
        assert_eq!(got.len(), expected.len());
    }

    #[track_caller]
    fn check_err(name: &str, request: TypeRequest, rooms: &[HeapRoom], expected: SelectError) {
        let table = table(name);
        assert_eq!(
            rank_memory_types(&table.memory_properties, &request, rooms),
            Err(expected)
        );
    }

    use MemoryUsage::{GpuOnly, Readback, Transient, Upload};

    #[test]
    fn presets_on_every_table() {
        // (table, usage, size, expected order best first)
        let cases: &[(&str, MemoryUsage, u64, &[u32])] = &[
            // NVIDIA without ReBAR: 0 none/host, 1 DL, 2 HV|HC/host,
            // 3 HV|HC|HCa/host, 4 DL|HV|HC on the 256 MiB BAR heap.
            ("nvidia_discrete", GpuOnly, MIB, &[1, 0, 4, 2, 3]),
            ("nvidia_discrete", Upload, MIB, &[4, 2, 3]),
            ("nvidia_discrete", Upload, 32 * MIB, &[4, 2, 3]),
            ("nvidia_discrete", Upload, 32 * MIB + 1, &[2, 3, 4]),
            ("nvidia_discrete", Readback, MIB, &[3, 2, 4]),
            ("nvidia_discrete", Transient, MIB, &[1, 0, 4, 2, 3]),
            // NVIDIA with ReBAR: type 4 on the 10 GiB device-local heap.
            ("nvidia_discrete_rebar", GpuOnly, MIB, &[1, 0, 4, 2, 3]),
            ("nvidia_discrete_rebar", Upload, MIB, &[4, 2, 3]),
            ("nvidia_discrete_rebar", Upload, 1280 * MIB, &[4, 2, 3]),
            ("nvidia_discrete_rebar", Upload, 2 * GIB, &[2, 3, 4]),
            ("nvidia_discrete_rebar", Readback, MIB, &[3, 2, 4]),
            ("nvidia_discrete_rebar", Transient, MIB, &[1, 0, 4, 2, 3]),
            // AMD: 0 DL, 1 HV|HC/host, 2 DL|HV|HC/BAR, 3 HV|HC|HCa/host,
            // 4..=7 the same with DEVICE_COHERENT|DEVICE_UNCACHED (left out).
            ("amd_discrete", GpuOnly, MIB, &[0, 2, 1, 3]),
            ("amd_discrete", Upload, MIB, &[2, 1, 3]),
            ("amd_discrete", Upload, 64 * MIB, &[1, 2, 3]),
            ("amd_discrete", Readback, MIB, &[3, 1, 2]),
            ("amd_discrete", Transient, MIB, &[0, 2, 1, 3]),
            // Intel integrated: 0 DL, 1 DL|HV|HC, 2 DL|HV|HC|HCa.
            ("intel_integrated", GpuOnly, MIB, &[0, 1, 2]),
            ("intel_integrated", Upload, MIB, &[1, 2]),
            ("intel_integrated", Upload, 4 * GIB, &[1, 2]),
            ("intel_integrated", Readback, MIB, &[2, 1]),
            ("intel_integrated", Transient, MIB, &[0, 1, 2]),
            // Mobile tiler: 0 DL|HV|HC, 1 DL|HV|HC|HCa, 2 DL|LAZY.
            ("mobile_tiler", GpuOnly, MIB, &[0, 1]),
            ("mobile_tiler", Upload, MIB, &[0, 1]),
            ("mobile_tiler", Readback, MIB, &[1, 0]),
            ("mobile_tiler", Transient, MIB, &[2, 0, 1]),
            // lavapipe: one type that has everything.
            ("lavapipe", GpuOnly, MIB, &[0]),
            ("lavapipe", Upload, MIB, &[0]),
            ("lavapipe", Readback, MIB, &[0]),
            ("lavapipe", Transient, MIB, &[0]),
            // H200: the ReBAR layout on a 143,771 MiB heap (1/8 is about
            // 17.5 GiB).
            ("nvidia_h200", GpuOnly, MIB, &[1, 0, 4, 2, 3]),
            ("nvidia_h200", Upload, MIB, &[4, 2, 3]),
            ("nvidia_h200", Upload, 16 * GIB, &[4, 2, 3]),
            ("nvidia_h200", Upload, 20 * GIB, &[2, 3, 4]),
            ("nvidia_h200", Readback, MIB, &[3, 2, 4]),
            ("nvidia_h200", Transient, MIB, &[1, 0, 4, 2, 3]),
        ];
        for &(name, usage, size, expected) in cases {
            check(name, usage, ALL, size, expected);
        }
        // Every table is covered.
        for table in sim::all_tables() {
            assert!(
                cases.iter().any(|case| case.0 == table.name),
                "{} has no case",
                table.name
            );
        }
    }

    #[test]
    fn memory_type_bits_exclude_the_best_type() {
        check("nvidia_discrete", GpuOnly, !(1 << 1), MIB, &[0, 4, 2, 3]);
        check("nvidia_discrete", GpuOnly, 0b10100, MIB, &[4, 2]);
        check("nvidia_discrete", Upload, !(1 << 4), MIB, &[2, 3]);
        check("nvidia_h200", Readback, !(1 << 3), MIB, &[2, 4]);
        check("amd_discrete", GpuOnly, !1, MIB, &[2, 1, 3]);
        check("mobile_tiler", Transient, 0b011, MIB, &[0, 1]);
        check("intel_integrated", Readback, 0b011, MIB, &[1]);
        // Bits past the last type are ignored.
        check("lavapipe", GpuOnly, 0xffff_fff1, MIB, &[0]);
    }

    #[test]
    fn rebar_left_out_by_the_bits_does_not_matter() {
        // With the ReBAR type masked out, rule 1 finds no ReBAR type and the
        // upload avoids DEVICE_LOCAL: the same order as without it.
        check("nvidia_discrete_rebar", Upload, 0b01111, MIB, &[2, 3]);
        let rebar = table("nvidia_discrete_rebar");
        assert_eq!(rebar_type(&rebar.memory_properties, ALL), Some(4));
        assert_eq!(rebar_type(&rebar.memory_properties, 0b01111), None);
        assert_eq!(
            rebar_type(&table("amd_discrete").memory_properties, ALL),
            Some(2)
        );
        assert_eq!(
            rebar_type(&table("lavapipe").memory_properties, ALL),
            Some(0)
        );
    }

    #[test]
    fn errors() {
        check_err(
            "nvidia_discrete",
            TypeRequest::new(GpuOnly, 0, MIB),
            &[],
            SelectError::NoMemoryTypeBits {
                memory_type_bits: 0,
            },
        );
        check_err(
            "nvidia_discrete",
            TypeRequest::new(GpuOnly, 1 << 5, MIB),
            &[],
            SelectError::NoMemoryTypeBits {
                memory_type_bits: 1 << 5,
            },
        );
        check_err(
            "nvidia_discrete",
            TypeRequest::new(Readback, 1 << 1, MIB),
            &[],
            SelectError::NoTypeWithRequiredFlags {
                required: Flags::HOST_VISIBLE,
                memory_type_bits: 1 << 1,
            },
        );
        // A lazily allocated type is only taken when asked for.
        check_err(
            "mobile_tiler",
            TypeRequest::new(GpuOnly, 1 << 2, MIB),
            &[],
            SelectError::NoTypeWithRequiredFlags {
                required: Flags::NONE,
                memory_type_bits: 1 << 2,
            },
        );
        check_err(
            "lavapipe",
            TypeRequest::new(GpuOnly, 1, MIB).within_budget(true),
            &[HeapRoom(MIB - 1)],
            SelectError::NoTypeWithinBudget {
                size: MIB,
                memory_type_bits: 1,
            },
        );
    }

    #[test]
    fn amd_device_uncached_types_only_when_asked() {
        let debug = Flags::DEVICE_COHERENT_AMD | Flags::DEVICE_UNCACHED_AMD;
        let required = MemoryUsage::Custom(TypeFlags::new(
            Flags::HOST_VISIBLE | Flags::DEVICE_COHERENT_AMD,
            Flags::HOST_COHERENT,
            Flags::DEVICE_LOCAL | Flags::HOST_CACHED,
        ));
        check("amd_discrete", required, ALL, MIB, &[5, 6, 7]);
        let preferred =
            MemoryUsage::Custom(TypeFlags::new(Flags::HOST_VISIBLE, debug, Flags::NONE));
        check("amd_discrete", preferred, ALL, MIB, &[5, 6, 7, 1, 2, 3]);
        // The markers' usual choice: device-local, host-visible, uncached.
        let marker = MemoryUsage::Custom(TypeFlags::new(
            Flags::HOST_VISIBLE | Flags::DEVICE_UNCACHED_AMD,
            Flags::DEVICE_LOCAL,
            Flags::NONE,
        ));
        check("amd_discrete", marker, ALL, MIB, &[6, 5, 7]);
    }

    #[test]
    fn protected_types_only_when_required() {
        let props = MemoryProperties {
            types: vec![
                MemoryType {
                    flags: Flags::DEVICE_LOCAL | Flags::PROTECTED,
                    heap_index: 0,
                },
                MemoryType {
                    flags: Flags::DEVICE_LOCAL,
                    heap_index: 0,
                },
            ],
            heaps: vec![MemoryHeap {
                size: GIB,
                device_local: true,
            }],
        };
        let plain = TypeRequest::new(GpuOnly, ALL, MIB);
        let got = rank_memory_types(&props, &plain, &[]).unwrap();
        assert_eq!(got.as_slice(), &[1]);
        let preferred = TypeRequest::new(
            MemoryUsage::Custom(TypeFlags::new(Flags::NONE, Flags::PROTECTED, Flags::NONE)),
            ALL,
            MIB,
        );
        assert_eq!(
            rank_memory_types(&props, &preferred, &[])
                .unwrap()
                .as_slice(),
            &[1]
        );
        let required = TypeRequest::new(
            MemoryUsage::Custom(TypeFlags::new(Flags::PROTECTED, Flags::NONE, Flags::NONE)),
            ALL,
            MIB,
        );
        assert_eq!(
            rank_memory_types(&props, &required, &[])
                .unwrap()
                .as_slice(),
            &[0]
        );
    }

    #[test]
    fn exhausted_heaps_rank_last() {
        let full = HeapRoom(0);
        let room = HeapRoom::UNKNOWN;
        // Device-local heap full: GPU-only spills to system memory, and the
        // device-local types come last in cost order.
        check_rooms(
            "nvidia_discrete_rebar",
            GpuOnly,
            ALL,
            MIB,
            &[full, room],
            &[0, 2, 3, 1, 4],
        );
        // System memory full: readback falls back to the ReBAR type first.
        check_rooms(
            "nvidia_discrete",
            Readback,
            ALL,
            MIB,
            &[room, full, room],
            &[4, 3, 2],
        );
        // Room just enough, and one byte short.
        check_rooms("lavapipe", GpuOnly, ALL, MIB, &[HeapRoom(MIB)], &[0]);
        check_rooms(
            "amd_discrete",
            GpuOnly,
            ALL,
            MIB,
            &[HeapRoom(MIB - 1)],
            &[2, 1, 3, 0],
        );
        // A missing heap entry counts as unknown room.
        check_rooms("amd_discrete", GpuOnly, ALL, MIB, &[room], &[0, 2, 1, 3]);

        let table = table("nvidia_discrete_rebar");
        let request = TypeRequest::new(GpuOnly, ALL, MIB);
        let got = rank_memory_types(&table.memory_properties, &request, &[full, room]).unwrap();
        assert!(got.is_over_budget(1) && got.is_over_budget(4));
        assert!(!got.is_over_budget(0) && !got.is_over_budget(2) && !got.is_over_budget(31));
        // Within budget, the full heap's types are left out.
        let got = rank_memory_types(
            &table.memory_properties,
            &request.within_budget(true),
            &[full, room],
        )
        .unwrap();
        assert_eq!(got.as_slice(), &[0, 2, 3]);
    }

    #[test]
    fn full_rebar_heap_sends_uploads_to_host_memory() {
        let room = HeapRoom::UNKNOWN;
        // The 256 MiB BAR heap of NVIDIA without ReBAR has 512 KiB left.
        let bar_full = [room, room, HeapRoom(MIB / 2)];
        check_rooms("nvidia_discrete", Upload, ALL, MIB, &bar_full, &[2, 3, 4]);
        let table = table("nvidia_discrete");
        let request = TypeRequest::new(Upload, ALL, MIB).within_budget(true);
        let got = rank_memory_types(&table.memory_properties, &request, &bar_full).unwrap();
        assert_eq!(got.as_slice(), &[2, 3]);
        // Exactly enough room keeps the ReBAR type first.
        check_rooms(
            "nvidia_discrete",
            Upload,
            ALL,
            MIB,
            &[room, room, HeapRoom(MIB)],
            &[4, 2, 3],
        );
        // AMD's BAR heap full.
        check_rooms(
            "amd_discrete",
            Upload,
            ALL,
            MIB,
            &[room, room, HeapRoom(0)],
            &[1, 3, 2],
        );
        // H200: ReBAR heap over budget, host heap fine.
        check_rooms(
            "nvidia_h200",
            Upload,
            ALL,
            MIB,
            &[HeapRoom(0), room],
            &[2, 3, 4],
        );
    }

    #[test]
    fn heap_rooms_from_budgets_and_estimates() {
        let table = table("nvidia_discrete");
        let props = &table.memory_properties;
        let budgets = [
            HeapBudget {
                budget: 8 * GIB,
                usage: 3 * GIB,
            },
            HeapBudget {
                budget: GIB,
                usage: 2 * GIB,
            },
            HeapBudget {
                budget: 200 * MIB,
                usage: 0,
            },
        ];
        let rooms = heap_rooms(props, Some(&budgets), &[]);
        assert_eq!(
            &rooms[..4],
            &[
                HeapRoom(5 * GIB),
                HeapRoom(0),
                HeapRoom(200 * MIB),
                HeapRoom::UNKNOWN
            ]
        );
        let rooms = heap_rooms(props, None, &[GIB]);
        assert_eq!(rooms[0], HeapRoom(8 * GIB - GIB)); // 80% of 10 GiB, minus 1 GiB.
        assert_eq!(rooms[1], HeapRoom(16 * GIB * 4 / 5));
        assert_eq!(rooms[2], HeapRoom(256 * MIB * 4 / 5));
        // With no budget, an upload of 40 MiB is over 1/8 of the BAR heap.
        check_rooms("nvidia_discrete", Upload, ALL, 40 * MIB, &rooms, &[2, 3, 4]);
        assert_eq!(
            HeapRoom::estimate(&props.heaps[2], u64::MAX),
            HeapRoom(0),
            "usage past the estimate leaves no room"
        );
    }

    #[test]
    fn candidates_iterate_best_first() {
        let table = table("nvidia_discrete");
        let request = TypeRequest::new(GpuOnly, ALL, MIB);
        let mut candidates = rank_memory_types(&table.memory_properties, &request, &[]).unwrap();
        assert_eq!(
            candidates.flags(),
            GpuOnly.resolve(&table.memory_properties, ALL, MIB, &[])
        );
        assert_eq!(candidates.len(), 5);
        assert_eq!(candidates.next(), Some(1));
        assert_eq!(candidates.as_slice(), &[0, 4, 2, 3]);
        assert_eq!(candidates.len(), 4);
        assert_eq!(candidates.collect::<Vec<_>>(), vec![0, 4, 2, 3]);
        assert_eq!(
            best_memory_type(&table.memory_properties, &request, &[]),
            Ok(1)
        );
    }

    #[test]
    fn usage_serializes() {
        let custom = MemoryUsage::Custom(TypeFlags::new(
            Flags::HOST_VISIBLE,
            Flags::HOST_COHERENT,
            Flags::DEVICE_LOCAL,
        ));
        for usage in [GpuOnly, Upload, Readback, Transient, custom] {
            let json = serde_json::to_string(&usage).unwrap();
            assert_eq!(serde_json::from_str::<MemoryUsage>(&json).unwrap(), usage);
        }
        assert_eq!(MemoryUsage::default(), GpuOnly);
    }

    fn flags_strategy() -> impl Strategy<Value = Flags> {
        (0u32..0x100).prop_map(Flags)
    }

    fn usage_strategy() -> impl Strategy<Value = MemoryUsage> {
        prop_oneof![
            Just(GpuOnly),
            Just(Upload),
            Just(Readback),
            Just(Transient),
            (flags_strategy(), flags_strategy(), flags_strategy())
                .prop_map(|(r, p, n)| MemoryUsage::Custom(TypeFlags::new(r, p, n))),
        ]
    }

    fn room_strategy() -> impl Strategy<Value = HeapRoom> {
        prop_oneof![
            Just(HeapRoom::UNKNOWN),
            Just(HeapRoom(0)),
            (0u64..4 * GIB).prop_map(HeapRoom),
        ]
    }

    proptest! {
        #[test]
        fn ranking_honours_bits_flags_and_budget(
            table_index in 0usize..7,
            usage in usage_strategy(),
            bits in prop_oneof![Just(u32::MAX), any::<u32>()],
            size in 1u64..8 * GIB,
            within_budget in any::<bool>(),
            rooms in proptest::collection::vec(room_strategy(), 0..4),
        ) {
            let tables = sim::all_tables();
            let table = &tables[table_index % tables.len()];
            let props = &table.memory_properties;
            let request = TypeRequest { usage, memory_type_bits: bits, size, within_budget };
            let flags = usage.resolve(props, bits, size, &rooms);
            let eligible: Vec<u32> = (0..props.types.len() as u32)
                .filter(|&i| bits & (1 << i) != 0 && flags.accepts(props.types[i as usize].flags))
                .collect();
            let fits = |i: u32| room_of(&rooms, props.heap_of(i)).fits(size);
            match rank_memory_types(props, &request, &rooms) {
                Ok(candidates) => {
                    let got = candidates.as_slice();
                    prop_assert!(!got.is_empty());
                    let mut seen = 0u32;
                    let mut last_key = None;
                    for &i in got {
                        let ty = props.types[i as usize];
                        prop_assert!(bits & (1 << i) != 0, "type {} not in bits", i);
                        prop_assert!(ty.flags.contains(flags.required), "type {} lacks required", i);
                        prop_assert!(flags.accepts(ty.flags));
                        prop_assert!(seen & (1 << i) == 0, "type {} twice", i);
                        seen |= 1 << i;
                        prop_assert_eq!(candidates.is_over_budget(i), !fits(i));
                        if within_budget {
                            prop_assert!(fits(i));
                        }
                        let key = (!fits(i), flags.cost(ty.flags), i);
                        prop_assert!(last_key < Some(key), "out of order at type {}", i);
                        last_key = Some(key);
                    }
                    // Every eligible type is there, unless left out by budget.
                    for &i in &eligible {
                        prop_assert_eq!(seen & (1 << i) != 0, !within_budget || fits(i));
                    }
                }
                Err(SelectError::NoMemoryTypeBits { .. }) => {
                    prop_assert_eq!(bits & props.all_types_mask(), 0);
                }
                Err(SelectError::NoTypeWithRequiredFlags { required, .. }) => {
                    prop_assert_eq!(required, flags.required);
                    prop_assert!(eligible.is_empty());
                }
                Err(SelectError::NoTypeWithinBudget { .. }) => {
                    prop_assert!(within_budget);
                    prop_assert!(!eligible.is_empty());
                    prop_assert!(eligible.iter().all(|&i| !fits(i)));
                }
            }
        }

        #[test]
        fn ranking_is_deterministic(
            table_index in 0usize..7,
            usage in usage_strategy(),
            bits in any::<u32>(),
            size in 1u64..8 * GIB,
        ) {
            let tables = sim::all_tables();
            let table = &tables[table_index % tables.len()];
            let request = TypeRequest::new(usage, bits, size);
            let a = rank_memory_types(&table.memory_properties, &request, &[]);
            let b = rank_memory_types(&table.memory_properties, &request, &[]);
            prop_assert_eq!(a, b);
        }
    }
}
