//! The pool table, replicated so that readers on different threads share no
//! cache line: a pool allocation or free reads the table (to find the pool's
//! `Arc`), and one `RwLock` taken for reading by every thread would put a
//! contended atomic on every pool operation. Each replica is a `RwLock` on
//! cache lines of its own; a reader takes its thread's replica (the same
//! thread-local home as the block vectors' shards), a writer takes every
//! replica in order, changes the first and copies it to the others. Writes
//! (creating and destroying pools) are rare.

#![forbid(unsafe_code)]

use parking_lot::{RwLock, RwLockReadGuard};

use super::PoolSlot;
use crate::block_vector::{home, MAX_SHARDS};

/// One copy of the table, alone on its cache lines.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Replica(RwLock<Vec<PoolSlot>>);

/// The replicated table.
#[derive(Debug)]
pub(super) struct PoolTable {
    replicas: Box<[Replica]>,
}

impl PoolTable {
    pub fn new() -> Self {
        Self {
            replicas: (0..MAX_SHARDS).map(|_| Replica::default()).collect(),
        }
    }

    /// The table, read through this thread's replica.
    pub fn read(&self) -> RwLockReadGuard<'_, Vec<PoolSlot>> {
        self.replicas[home() % self.replicas.len()].0.read()
    }

    /// Changes the table: every replica is locked for writing (in order),
    /// `change` runs on the first, and the others become copies of it.
    pub fn write<R>(&self, change: impl FnOnce(&mut Vec<PoolSlot>) -> R) -> R {
        let mut guards: Vec<_> = self.replicas.iter().map(|r| r.0.write()).collect();
        let (first, rest) = guards.split_first_mut().expect("at least one replica");
        let out = change(first);
        for other in rest {
            other.clone_from(first);
        }
        out
    }

    /// Empties the table, handing back the first replica's slots.
    pub fn take(&mut self) -> Vec<PoolSlot> {
        let mut slots = Vec::new();
        for (i, r) in self.replicas.iter_mut().enumerate() {
            let taken = std::mem::take(r.0.get_mut());
            if i == 0 {
                slots = taken;
            }
        }
        slots
    }
}
