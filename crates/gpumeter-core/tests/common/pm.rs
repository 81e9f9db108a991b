//! Helpers shared by the PM-sampling tests (`pm.rs`, `pm_edges.rs`); each includes this file
//! next to [`crate::common`].

use gpumeter_core::{
    ActivityRecord, DeviceSlot, Meter, MeterConfig, PmSample, TenantMap, WindowSize,
};

use crate::common::{kernel, BASE};

/// A sample of `[BASE + a, BASE + b)` ns with both pairs of counters.
pub fn sample(a: u64, b: u64, active: u64, elapsed: u64, read: u64, write: u64) -> PmSample {
    PmSample {
        start_ns: BASE + a,
        end_ns: BASE + b,
        sm_active_cycles: Some(active),
        sm_elapsed_cycles: Some(elapsed),
        dram_read_bytes: Some(read),
        dram_write_bytes: Some(write),
        overflow: false,
    }
}

/// A kernel of `grid` blocks over `[BASE + a, BASE + b)` of process `pid`.
pub fn k(dev: DeviceSlot, a: u64, b: u64, grid: u32, pid: u32) -> ActivityRecord {
    let mut r = ActivityRecord::new(dev, BASE + a, BASE + b, kernel(grid));
    r.process_id = Some(pid);
    r.correlation_id = (a as u32).wrapping_mul(7).wrapping_add(pid);
    r
}

/// A kernel for property tests: start and length in µs, grid, process (1..=4).
#[derive(Debug, Clone)]
pub struct K {
    pub start: u64,
    pub len: u64,
    pub grid: u32,
    pub pid: u32,
}

/// Kernels starting within 3 ms, lasting up to 0.8 ms, of 1..200 blocks, of processes 1..=4.
pub fn arb_kernel() -> impl proptest::strategy::Strategy<Value = K> {
    use proptest::strategy::Strategy as _;
    (0u64..3000, 1u64..800, 1u32..200, 1u32..5).prop_map(|(start, len, grid, pid)| K {
        start,
        len,
        grid,
        pid,
    })
}

/// The tenants of processes 1, 2, 3 and 4.
const TENANTS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Processes 1.. → alice, bob, carol, dave.
fn tenants() -> TenantMap {
    let mut tm = TenantMap::default();
    for (i, t) in TENANTS.iter().enumerate() {
        tm.pid.insert(i as u32 + 1, t.parse().expect("tenant"));
    }
    tm
}

/// A meter of `window_s`-second windows with [`tenants`].
pub fn meter(window_s: u64) -> Meter {
    let mut m = Meter::new(MeterConfig {
        window: WindowSize::from_seconds(window_s).expect("window"),
        ..MeterConfig::default()
    });
    m.set_tenant_map(tenants());
    m
}
