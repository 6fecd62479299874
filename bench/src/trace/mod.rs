//! Allocation traces: the format (defined in the allocator as
//! [`vkalloc::trace::format`], documented there and in
//! `bench/TRACE_FORMAT.md`, re-exported here) and the standard generated
//! traces ([`gen`]).

pub mod gen;

pub use gen::{generate, generate_all, Scale, DEFAULT_SEED, STANDARD_TRACES};
pub use vkalloc::trace::format;
pub use vkalloc::trace::format::*;
