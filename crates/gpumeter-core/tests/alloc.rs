//! `Meter::push` in steady state allocates nothing (issue 13): after a warm-up that grows the
//! meter's buffers (reorder heap, running set, duplicate keys, interned keys and sets, the
//! cells of the windows, the occupancy cache) to their working size, pushing 1 M kernel
//! records of four processes on several streams, up to four running at once, within one
//! window, makes no heap allocation at all: the count asserted is 0, not a bound.
//!
//! What the warm-up must have seen for that to hold: every (process, stream) key, every set
//! of processes that runs together, every launch configuration, and a window the records stay
//! in (a new window makes a cell, which allocates). The reordering horizon bounds the records
//! buffered (here 10 µs of record time: a few dozen records), so the buffers stop growing.

// A counting allocator needs `unsafe impl GlobalAlloc`; it only delegates to `System`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use gpumeter_core::{
    ActivityRecord, ComputeCapability, DeviceInfo, DeviceSlot, KernelLaunch, Meter, MeterConfig,
    MeterKind, OpCounts, Work,
};

struct Counting;

thread_local! {
    /// Whether this thread's allocations are counted (the test harness's other threads are
    /// not).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    /// This thread's counted allocations (per thread: the tests run in parallel).
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
    }
}

/// The allocations this thread has counted.
fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: every method delegates to `System` with the caller's arguments unchanged, so
// `System`'s guarantees are this allocator's; counting touches only an atomic and a
// const-initialized thread-local without destructor (no allocation, no reentrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr` was allocated by `System` (every allocation goes there) with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A day boundary: the records below stay in its first hour.
const BASE: u64 = 1_700_000_000_000_000_000 - 1_700_000_000_000_000_000 % 86_400_000_000_000;

/// Kernel `i`: process `i % 4 + 1`, stream `i % 3`, starting every 250 ns and running 1 µs
/// (up to four at once), one of three launch configurations.
fn kernel(dev: DeviceSlot, i: u64) -> ActivityRecord {
    let k = KernelLaunch {
        grid: Some([40 + (i % 3) as u32 * 60, 1, 1]),
        block: Some([128, 1, 1]),
        registers_per_thread: Some(32),
        shared_mem_bytes: Some(0),
        warp_instructions: Some(1_000),
        ops: Default::default(),
        ..KernelLaunch::default()
    };
    let start = BASE + 1_000 + i * 250;
    let mut r = ActivityRecord::new(dev, start, start + 1_000, Work::Kernel(k));
    r.process_id = Some((i % 4) as u32 + 1);
    r.stream_id = (i % 3) as u32;
    r.correlation_id = i as u32;
    r
}

#[test]
fn pushing_a_million_kernels_after_warm_up_allocates_nothing() {
    const WARM_UP: u64 = 10_000;
    const N: u64 = 1_000_000;
    let mut meter = Meter::new(MeterConfig {
        reorder_horizon_ns: 10_000,
        ..MeterConfig::default()
    });
    let mut gpu = DeviceInfo::bare("GPU-0", 0);
    gpu.sm_count = Some(132);
    gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
    let dev = meter.register_device(gpu);
    for i in 0..WARM_UP {
        meter.push(kernel(dev, i));
    }
    COUNTING.with(|c| c.set(true));
    for i in WARM_UP..WARM_UP + N {
        meter.push(kernel(dev, i));
    }
    COUNTING.with(|c| c.set(false));
    let allocations = allocations();
    assert!(
        meter.buffered_records() < 200,
        "buffered {}",
        meter.buffered_records()
    );
    let report = meter.finish().expect("a report");
    assert_eq!(
        report.device_total("GPU-0", MeterKind::KernelLaunches),
        u128::from(WARM_UP + N)
    );
    assert_eq!(
        report.device_total("GPU-0", MeterKind::KernelNs),
        u128::from(WARM_UP + N) * 1_000
    );
    // Kernels start every 250 ns and run 1 µs: busy from the first start to the last end.
    assert_eq!(
        report.device_total("GPU-0", MeterKind::GpuBusyNs),
        u128::from(WARM_UP + N - 1) * 250 + 1_000
    );
    assert_eq!(allocations, 0, "heap allocations while pushing {N} kernels");
}

/// Kernel `i` of [`kernel`] carrying operation counts (issue 17); every `zero_every`-th one
/// has no duration (a record of no duration never runs: the sweep drops it unstarted).
fn kernel_with_ops(dev: DeviceSlot, i: u64, zero_every: u64) -> ActivityRecord {
    let mut r = kernel(dev, i);
    if let Work::Kernel(k) = &mut r.work {
        k.set_op_counts(OpCounts {
            flops_fp64: Some(i),
            flops_fp32: Some(2 * i),
            flops_fp16: Some(0),
            tensor_ops: Some(7),
        });
    }
    if i.is_multiple_of(zero_every) {
        r.end_ns = r.start_ns;
    }
    r
}

/// The per-device slab of pending kernels' operation counts reuses its entries: pushing
/// kernels with operation counts after the warm-up allocates nothing, also when some of them
/// have no duration (never started, so their entry must be freed where they are dropped).
#[test]
fn pushing_kernels_with_operation_counts_after_warm_up_allocates_nothing() {
    const WARM_UP: u64 = 10_000;
    const N: u64 = 200_000;
    for zero_every in [u64::MAX, 5] {
        let mut meter = Meter::new(MeterConfig {
            reorder_horizon_ns: 10_000,
            ..MeterConfig::default()
        });
        let mut gpu = DeviceInfo::bare("GPU-0", 0);
        gpu.sm_count = Some(132);
        gpu.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
        let dev = meter.register_device(gpu);
        for i in 1..WARM_UP {
            meter.push(kernel_with_ops(dev, i, zero_every));
        }
        // Built before counting: a record's counts are boxed (a record of its own, not the
        // meter's allocation).
        let records: Vec<ActivityRecord> = (WARM_UP..WARM_UP + N)
            .map(|i| kernel_with_ops(dev, i, zero_every))
            .collect();
        let before = allocations();
        COUNTING.with(|c| c.set(true));
        for r in records {
            meter.push(r);
        }
        COUNTING.with(|c| c.set(false));
        let allocations = allocations() - before;
        let report = meter.finish().expect("a report");
        let want: u128 = (1..WARM_UP + N).map(u128::from).sum();
        assert_eq!(report.device_total("GPU-0", MeterKind::FlopsFp64), want);
        assert_eq!(
            allocations, 0,
            "heap allocations while pushing {N} kernels with operation counts, one in \
             {zero_every} of no duration"
        );
    }
}
