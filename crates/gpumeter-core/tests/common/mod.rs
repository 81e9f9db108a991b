//! Helpers shared by the meter's integration tests.

use std::collections::BTreeMap;

use gpumeter_core::{DeviceInfo, KernelLaunch, MeterKind, UsageReport, Work};

/// A day boundary near 2023-11-14 in ns: a window edge for every window size.
pub const BASE: u64 = 1_700_000_000_000_000_000 - 1_700_000_000_000_000_000 % 86_400_000_000_000;
/// One second in ns.
pub const S: u64 = 1_000_000_000;
/// The device key of [`device`].
pub const KEY: &str = "GPU-test";

/// A kernel of `grid` blocks of 128 threads, nothing else known.
pub fn kernel(grid: u32) -> Work {
    Work::Kernel(KernelLaunch {
        grid: Some([grid, 1, 1]),
        block: Some([128, 1, 1]),
        ..KernelLaunch::default()
    })
}

/// Device [`KEY`] (id 0, named "NVIDIA Test") with `sms` SMs.
pub fn device(sms: Option<u32>) -> DeviceInfo {
    let mut d = DeviceInfo::bare(KEY, 0);
    d.sm_count = sms;
    d.name = Some("NVIDIA Test".into());
    d
}

/// Σ of `meter` per tenant over the report's totals.
pub fn per_tenant(r: &UsageReport, meter: MeterKind) -> BTreeMap<String, u128> {
    let mut m = BTreeMap::new();
    for t in r.totals.iter().filter(|t| t.meter == meter) {
        *m.entry(t.tenant.clone()).or_insert(0) += t.quantity.0;
    }
    m
}
