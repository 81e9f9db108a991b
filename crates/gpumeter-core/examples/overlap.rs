//! Meters `n` kernels laid out one of three ways and prints the time taken and the report's
//! `gpu_busy_ns`, for comparing overlap with sequential work (docs/PERFORMANCE.md):
//!
//! ```text
//! cargo run --release -p gpumeter-core --example overlap -- <sequential|one-tenant|processes> <n>
//! ```
//!
//! * `sequential`: kernel `i` runs `[i·10 µs, i·10 µs + 5 µs)`, one process;
//! * `one-tenant`: every kernel runs from `i` ns to `n + i + 10 µs`, one process: all overlap;
//! * `processes`: the same overlap, kernel `i` of process `i` (every kernel its own tenant);
//! * `streams`: the steady state of `tests/alloc.rs`, a meter's hot path: kernel `i` of
//!   process `i % 4 + 1` on stream `i % 3`, starting every 250 ns for 1 µs (four at once), of
//!   40, 100 or 160 blocks (so the device cap applies), with an instruction count, and a
//!   reordering horizon of 10 µs (few records buffered).
//!
//! Kernels are 1 block of 128 threads (`streams`: as said) on a 132-SM compute capability 9.0
//! device.

use std::time::Instant;

use gpumeter_core::{
    ActivityRecord, ComputeCapability, DeviceInfo, KernelLaunch, Meter, MeterConfig, MeterKind,
    Work,
};

const BASE: u64 = 1_700_000_000_000_000_000;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map_or("sequential", String::as_str);
    let n: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(50_000);
    let t0 = Instant::now();
    let mut config = MeterConfig::default();
    if mode == "streams" {
        config.reorder_horizon_ns = 10_000;
    }
    let mut meter = Meter::new(config);
    let mut gpu = DeviceInfo::bare("GPU-0", 0);
    gpu.sm_count = Some(132);
    gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
    let dev = meter.register_device(gpu);
    for i in 0..n {
        let (start, end, pid) = match mode {
            "sequential" => (BASE + i * 10_000, BASE + i * 10_000 + 5_000, 1),
            "one-tenant" => (BASE + i, BASE + n + i + 10_000, 1),
            "streams" => (BASE + i * 250, BASE + i * 250 + 1_000, (i % 4) as u32 + 1),
            _ => (BASE + i, BASE + n + i + 10_000, i as u32 + 1),
        };
        let k = KernelLaunch {
            grid: Some([1, 1, 1]),
            block: Some([128, 1, 1]),
            registers_per_thread: Some(32),
            shared_mem_bytes: Some(0),
            ..KernelLaunch::default()
        };
        let mut r = ActivityRecord::new(dev, start, end, Work::Kernel(k));
        if mode == "streams" {
            if let Work::Kernel(k) = &mut r.work {
                k.grid = Some([40 + (i % 3) as u32 * 60, 1, 1]);
                k.warp_instructions = Some(1_000);
            }
            r.stream_id = (i % 3) as u32;
        }
        r.process_id = Some(pid);
        r.correlation_id = i as u32;
        meter.push(r);
    }
    let report = meter.finish().expect("a report");
    let busy = report.device_total("GPU-0", MeterKind::GpuBusyNs);
    let sm = report.device_total("GPU-0", MeterKind::SmNs);
    println!(
        "{mode} n={n}: {:.3} s, gpu_busy_ns={busy}, sm_ns={sm}, rows={}",
        t0.elapsed().as_secs_f64(),
        report.usage.len()
    );
}
