//! The simulated device: memory tables of real GPUs, and a
//! [`crate::device::MemoryDevice`] that runs on them with failure injection.
//!
//! Tests of the allocator run here, with no GPU: [`SimDevice`] takes a
//! [`GpuTable`] (the heaps, types and limits a driver reports) and behaves as
//! that device would for memory: heaps fill up, the object count runs out,
//! budgets move, chosen calls fail ([`FailurePlan`]), and mapped memory is real
//! host memory that tests can write and read back. Calls that break the
//! device seam's contract are counted as [`Violation`]s rather than left
//! undefined, so a test can assert that the allocator made none.
//!
//! The built-in tables are JSON files in `src/sim/tables/`, read with
//! [`GpuTable::from_json`]; the [`tables`] module documents the schema.
//!
//! | table | what it models |
//! | --- | --- |
//! | [`nvidia_discrete`] | NVIDIA desktop GPU, BAR window as a separate 256 MiB heap |
//! | [`nvidia_discrete_rebar`] | the same with resizable BAR |
//! | [`amd_discrete`] | AMD RDNA2 with a 256 MiB BAR heap and `DEVICE_COHERENT_AMD` types |
//! | [`intel_integrated`] | Intel integrated GPU, one heap |
//! | [`mobile_tiler`] | Mali-like tiler with a lazily allocated type, no memory budget |
//! | [`lavapipe`] | Mesa 22.3 lavapipe as CI runs it |
//! | [`nvidia_h200`] | the H200 the project measures on |
//!
//! ```
//! use vkalloc::device::{MemoryAllocateInfo, MemoryDevice};
//! use vkalloc::sim::{self, FailurePlan, SimDevice};
//!
//! let device = SimDevice::builder(sim::nvidia_h200())
//!     .heap_capacity(0, 64 << 20)
//!     .failures(FailurePlan::new().fail_allocate_call(2))
//!     .build();
//! let info = MemoryAllocateInfo { size: 1 << 20, memory_type: 1, dedicated: None, priority: None, export: Default::default(), import_fd: None };
//! // SAFETY: the type index and size are valid for this device.
//! let memory = unsafe { device.allocate_memory(&info) }.unwrap();
//! // SAFETY: as above.
//! assert!(unsafe { device.allocate_memory(&info) }.is_err());
//! // SAFETY: `memory` is live and not mapped.
//! unsafe { device.free_memory(memory) };
//! assert_eq!(device.violations(), 0);
//! ```

mod device;
pub mod tables;

pub use device::{
    CallFailure, FailurePlan, RangeProblem, SimDevice, SimDeviceBuilder, SimHeapStats,
    SimMemoryInfo, SimStats, Violation,
};
pub use tables::{
    all_tables, amd_discrete, intel_integrated, lavapipe, mobile_tiler, nvidia_discrete,
    nvidia_discrete_rebar, nvidia_h200, table, GpuTable, TableError, TABLE_NAMES,
};
