//! The overlay's CPU cost with many live allocations, without a GPU: a simulated
//! device holds `N` allocations (default 10,000) in default blocks and a pool;
//! each frame replaces 4 of them (as a streamer would), refreshes the
//! snapshot, lays out the overlay's docked panels at 4K (with a streaming
//! panel of 48 textures) and tessellates them (what the demo does on a frame
//! that lays out, minus the upload). `cold` figures take a new snapshot
//! and lay out every strip again each frame (the worst case: every block
//! changed). A second thread allocates and frees meanwhile; its slowest call,
//! with and without snapshots running, shows whether a snapshot stalls it.
//!
//! `cargo run --release -p vkalloc-heapmap --example overlay_cpu -- [N] [FRAMES]`
//! prints one JSON object (with `OVERLAY_CPU_ALONE=1`: only the median snapshot
//! and layout milliseconds, without the second thread, for profiling; with
//! `OVERLAY_CPU_WARM_ONLY=1` too, without the cold frames).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vkalloc::sim::{tables, SimDevice};
use vkalloc::{
    AllocationDesc, AllocationOptions, Allocator, AllocatorDesc, MemoryUsage, PoolDesc,
    ResourceKind,
};
use vkalloc_heapmap::{
    draw_docked_on, FrameSample, OverlayData, StreamingInfo, TextureStream, Timeline, ViewState,
};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The other thread: allocate and free until told to stop; its slowest call.
fn churn(allocator: Arc<Allocator<SimDevice>>, stop: Arc<AtomicBool>) -> Duration {
    let mut worst = Duration::ZERO;
    let desc = AllocationDesc {
        size: 4096,
        alignment: 256,
        kind: ResourceKind::Buffer,
        options: AllocationOptions::usage(MemoryUsage::GpuOnly).tagged("churn uniform"),
        ..AllocationDesc::default()
    };
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let a = allocator.allocate(&desc).expect("churn allocate");
        allocator.free(a).expect("churn free");
        worst = worst.max(t.elapsed());
    }
    worst
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let frames: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let allocator = Arc::new(
        Allocator::new(SimDevice::new(tables::lavapipe()), AllocatorDesc::default()).unwrap(),
    );
    let pool = allocator
        .create_pool(&PoolDesc {
            usage: MemoryUsage::GpuOnly,
            block_size: 64 << 20,
            ..PoolDesc::new("textures")
        })
        .unwrap();
    let tags = [
        "sphere vertices",
        "frame uniforms",
        "staging",
        "m00_albedo",
        "hdr target",
        "misc",
    ];
    let mut live = Vec::with_capacity(n);
    for i in 0..n {
        let mut options =
            AllocationOptions::usage(MemoryUsage::GpuOnly).tagged(tags[i % tags.len()]);
        if i % 4 == 3 {
            options.pool = Some(pool);
        }
        live.push(
            allocator
                .allocate(&AllocationDesc {
                    size: 1024 * (1 + (i as u64 * 7919) % 61),
                    alignment: 256,
                    kind: if i % 4 == 3 {
                        ResourceKind::OptimalImage
                    } else {
                        ResourceKind::Buffer
                    },
                    options,
                    ..AllocationDesc::default()
                })
                .unwrap(),
        );
    }
    let mut timeline = Timeline::default();
    for i in 0..300 {
        timeline.push(FrameSample {
            gpu_ms: 4.0 + (i % 7) as f64 * 0.1,
            allocations: (i % 5) as u32,
            frees: (i % 3) as u32,
            ..FrameSample::default()
        });
    }
    let streaming = StreamingInfo {
        pool_bytes: 900 << 20,
        pool_committed: 960 << 20,
        budget: 1 << 30,
        textures: (0..48)
            .map(|i| TextureStream {
                name: format!(
                    "material_{:02}_{}",
                    i / 3,
                    ["albedo", "normal", "orm"][i % 3]
                ),
                resident_mip: (i % 4) as u32,
                wanted_mip: Some((i % 3) as u32),
                resident_bytes: (i as u64 + 1) << 20,
                wanted_bytes: Some((i as u64 + 2) << 20),
            })
            .collect(),
        pending_loads: Some(3),
        upload_bytes_per_s: Some(9.0e9),
        evictions: Some(12),
    };
    let ctx = egui::Context::default();
    let mut state = ViewState::default();
    let mut snapshot = vkalloc::Snapshot::default();
    let ppp = 2.0;
    let mut step = 0usize;
    let mut frame = |cold: bool,
                     snapshot_ms: &mut Vec<f64>,
                     layout_ms: &mut Vec<f64>,
                     total_ms: &mut Vec<f64>| {
        // Replace 4 allocations, as a streaming frame does.
        for _ in 0..4 {
            step += 1;
            let i = (step * 7919) % live.len();
            let old = std::mem::replace(
                &mut live[i],
                allocator
                    .allocate(&AllocationDesc {
                        size: 1024 * (1 + (step as u64 * 31) % 61),
                        alignment: 256,
                        kind: ResourceKind::Buffer,
                        options: AllocationOptions::usage(MemoryUsage::GpuOnly)
                            .tagged(tags[step % tags.len()]),
                        ..AllocationDesc::default()
                    })
                    .unwrap(),
            );
            allocator.free(old).unwrap();
        }
        if cold {
            snapshot = vkalloc::Snapshot::default();
            state = ViewState::default();
        }
        let t0 = Instant::now();
        allocator.refresh_snapshot(&mut snapshot);
        let t1 = Instant::now();
        let mut input = egui::RawInput::default();
        vkalloc_heapmap::raster::fit_input(&mut input, 3840.0, 2160.0, ppp);
        // The demo's docked layout, with its streaming panel (48 textures).
        let out = ctx.run_ui(input, |ui| {
            draw_docked_on(
                ui,
                &OverlayData {
                    snapshot: Some(&snapshot),
                    streaming: Some(&streaming),
                    timeline: Some(&timeline),
                    ..OverlayData::default()
                },
                &mut state,
                egui::Color32::TRANSPARENT,
            );
        });
        let prims = ctx.tessellate(out.shapes, out.pixels_per_point);
        std::hint::black_box(prims);
        let t2 = Instant::now();
        snapshot_ms.push(ms(t1 - t0));
        layout_ms.push(ms(t2 - t1));
        total_ms.push(ms(t2 - t0));
    };
    // Warm up (fonts), then measure alone; then again with another thread
    // allocating and freeing meanwhile, for its slowest call.
    let (mut s, mut l, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        frame(false, &mut s, &mut l, &mut t);
    }
    let (mut s, mut l, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..frames {
        frame(false, &mut s, &mut l, &mut t);
    }
    let (mut cs, mut cl, mut ct) = (vec![0.0], vec![0.0], vec![0.0]);
    // `OVERLAY_CPU_WARM_ONLY=1` skips the cold frames (for instruction counts
    // of the frames that lay out incrementally).
    let cold_frames = if std::env::var_os("OVERLAY_CPU_WARM_ONLY").is_some() {
        0
    } else {
        cs.clear();
        cl.clear();
        ct.clear();
        frames.div_ceil(4)
    };
    for _ in 0..cold_frames {
        frame(true, &mut cs, &mut cl, &mut ct);
    }
    if std::env::var_os("OVERLAY_CPU_ALONE").is_some() {
        println!(
            "incremental snapshot {:.3} ms, layout {:.3} ms; cold snapshot {:.3} ms, layout {:.3} ms",
            percentile(&mut s, 0.5),
            percentile(&mut l, 0.5),
            percentile(&mut cs, 0.5),
            percentile(&mut cl, 0.5)
        );
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (a, st) = (allocator.clone(), stop.clone());
        std::thread::spawn(move || churn(a, st))
    };
    let (mut s2, mut l2, mut t2) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..frames {
        frame(false, &mut s2, &mut l2, &mut t2);
    }
    stop.store(true, Ordering::Relaxed);
    let worst_with = worker.join().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (a, st) = (allocator.clone(), stop.clone());
        std::thread::spawn(move || churn(a, st))
    };
    let busy = Instant::now();
    while busy.elapsed() < Duration::from_millis(20 * frames as u64 / 10) {
        std::hint::spin_loop();
    }
    stop.store(true, Ordering::Relaxed);
    let worst_without = worker.join().unwrap();
    println!(
        "{{\"live_allocations\": {}, \"blocks\": {}, \"frames\": {frames}, \"snapshot_ms\": {{\"median\": {:.4}, \"p99\": {:.4}}}, \"layout_tessellate_ms\": {{\"median\": {:.4}, \"p99\": {:.4}}}, \"total_ms\": {{\"median\": {:.4}, \"p99\": {:.4}}}, \"cold_total_ms\": {{\"median\": {:.4}, \"p99\": {:.4}}}, \"other_thread_worst_call_ms\": {{\"with_snapshots\": {:.4}, \"without\": {:.4}}}}}",
        allocator.statistics().total.allocation_count,
        allocator.statistics().total.block_count,
        percentile(&mut s, 0.5),
        percentile(&mut s, 0.99),
        percentile(&mut l, 0.5),
        percentile(&mut l, 0.99),
        percentile(&mut t, 0.5),
        percentile(&mut t, 0.99),
        percentile(&mut ct, 0.5),
        percentile(&mut ct, 0.99),
        ms(worst_with),
        ms(worst_without),
    );
    for a in live {
        allocator.free(a).unwrap();
    }
    allocator.destroy_pool(pool).unwrap();
}
