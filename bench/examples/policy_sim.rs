//! Replays the standard traces against vkalloc on the simulated H200 (its
//! memory table read off the driver) and prints, per allocator setting, the
//! `vkAllocateMemory` calls and peak committed / peak live: a quick way to
//! weigh block and dedicated policies without a GPU.
//!
//! `cargo run --release -p bench --example policy_sim -- [full|small]`

use std::collections::HashMap;
use std::sync::Arc;

use bench::trace::{self, Scale, TraceEvent};
use vkalloc::sim::{tables, SimDevice};
use vkalloc::{Allocator, AllocatorDesc};

fn main() {
    let scale = match std::env::args().nth(1).as_deref() {
        Some("small") => Scale::Small,
        _ => Scale::Full,
    };
    let settings: Vec<(&str, AllocatorDesc)> = vec![
        ("default", AllocatorDesc::default()),
        ("no reuse", AllocatorDesc::default().with_recycle_bytes(0)),
        (
            "reuse 512 MiB",
            AllocatorDesc::default().with_recycle_bytes(512 << 20),
        ),
        (
            "reuse 1 GiB",
            AllocatorDesc::default().with_recycle_bytes(1 << 30),
        ),
        (
            "reuse 512 MiB, honour>=64MiB",
            AllocatorDesc::default()
                .with_recycle_bytes(512 << 20)
                .with_honour_dedicated_preference_from(64 << 20),
        ),
    ];
    println!("| trace | setting | vkAllocateMemory | peak committed MiB | peak live MiB | ratio |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for name in trace::STANDARD_TRACES {
        let t = trace::generate(name, trace::DEFAULT_SEED, scale).expect("standard trace");
        for (label, desc) in &settings {
            let sim = Arc::new(SimDevice::new(tables::nvidia_h200()));
            let allocator = Allocator::new(Arc::clone(&sim), *desc).unwrap();
            let mut live = HashMap::new();
            let (mut live_bytes, mut peak_live) = (0u64, 0u64);
            for e in &t.events {
                match e {
                    TraceEvent::Alloc(a) => {
                        let alloc = allocator.allocate(&a.desc()).expect("allocation");
                        live_bytes += a.size;
                        peak_live = peak_live.max(live_bytes);
                        live.insert(a.id, alloc);
                    }
                    TraceEvent::Free { id } => {
                        let alloc = live.remove(id).expect("live id");
                        live_bytes -= alloc.size();
                        allocator.free(alloc).unwrap();
                    }
                    TraceEvent::Frame { .. } => allocator.begin_frame(),
                }
            }
            for (_, a) in live.drain() {
                allocator.free(a).unwrap();
            }
            let peak: u64 = (0..2).map(|h| sim.peak_bytes(h)).sum();
            println!(
                "| {name} | {label} | {} | {:.0} | {:.0} | {:.2} |",
                sim.allocate_calls(),
                peak as f64 / 1048576.0,
                peak_live as f64 / 1048576.0,
                peak as f64 / peak_live as f64
            );
        }
    }
}
