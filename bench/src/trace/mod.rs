//! Allocation traces: the format ([`format`], documented there and in
//! `bench/TRACE_FORMAT.md`) and the standard generated traces ([`gen`]).

pub mod format;
pub mod gen;

pub use format::*;
pub use gen::{generate, generate_all, Scale, DEFAULT_SEED, STANDARD_TRACES};
