//! Fuzzes the reading of a `gpumeter.usage/v1` report, the `--opening FILE` path: the input is
//! parsed as a `gpumeter_core::UsageReport` with serde_json, and for every report that parses
//!
//! 1. `verify_digest` runs (canonical JSON and SHA-256 of whatever was parsed);
//! 2. it is continued by a fresh meter (`Meter::continue_from`: its `open_allocations`, its
//!    sources and its `extensions.device_ends`), whatever the digest says: the CLI refuses a
//!    report whose digest does not match before this step, but the fuzzer cannot forge
//!    digests, so checking it first would keep every mutation from it; then the device of the
//!    first open allocation is registered, a release
//!    of that allocation and a kernel after it are pushed, and the report is built;
//! 3. the report itself is rated with a fixed price book (`gpumeter_rating::rate`), the path
//!    of a usage report given as input to rating (the library API; the README's
//!    `--format usage`).
//!
//! The whole input is the JSON document.
#![no_main]

use std::sync::LazyLock;

use gpumeter_core::time::parse_rfc3339;
use gpumeter_core::{
    ActivityRecord, DeviceInfo, KernelLaunch, MemoryEvent, MemoryOp, Meter, MeterConfig,
    UsageReport, Work,
};
use gpumeter_rating::{rate, PriceBook};
use libfuzzer_sys::fuzz_target;

/// 2026-12-01T08:00:00Z, when the report has no usable `billed_to`.
const T0: u64 = 1_796_112_000_000_000_000;

const BOOK: &str = r#"
schema = "gpumeter.pricebook/v1"
version = "fuzz"
currency = "USD"
invoice_minimum = "0.50"

[[sku]]
id = "h100"
match = ["NVIDIA H100 80GB HBM3", "NVIDIA H100*"]

[[sku]]
id = "any"
match = ["*"]

[[rate]]
sku = "h100"
meter = "sm_ns"
unit = "SM·hour"
unit_price = "0.022652"

[[rate]]
sku = "any"
meter = "gpu_busy_ns"
unit = "hour"
unit_price = "0.10"

[[rate]]
sku = "any"
meter = "memory_byte_ns"
unit = "GiB·hour"
unit_price = "0.002"

[[rate]]
sku = "any"
meter = "memcpy_htod_bytes"
unit = "GB"
unit_price = "0.01"

[[rate]]
sku = "any"
meter = "kernel_launches"
unit = "1M"
unit_price = "0.05"

[[rate]]
sku = "any"
meter = "energy_mj"
unit = "kWh"
unit_price = "0.30"
"#;

static PRICES: LazyLock<PriceBook> = LazyLock::new(|| {
    PriceBook::from_toml_str("fuzz-prices.toml", BOOK).expect("usage_report: the fixed price book")
});

/// `0x…` hex or decimal, as the report writes addresses.
fn address(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => t.parse().ok(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(report) = serde_json::from_slice::<UsageReport>(data) else {
        return;
    };
    let _ = report.verify_digest();

    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    // The whole `--opening` path: open allocations, the earlier report's sources and per-device
    // ends (`extensions.device_ends`).
    let _ = meter.continue_from(&report);
    if let Some(open) = report.open_allocations.first() {
        let t = parse_rfc3339(&open.billed_to)
            .ok()
            .filter(|&t| t > 0 && t < u64::MAX - 10_000)
            .unwrap_or(T0);
        let dev = meter.register_device(DeviceInfo::bare(open.device_key.clone(), open.device));
        if let Some(addr) = address(&open.address) {
            let mut release = MemoryEvent::new(dev, t + 1_000, addr, 0, MemoryOp::Release);
            release.process_id = open.process_id;
            meter.push_memory(release);
        }
        meter.push(ActivityRecord::new(
            dev,
            t + 2_000,
            t + 3_000,
            Work::Kernel(KernelLaunch {
                grid: Some([1, 1, 1]),
                block: Some([128, 1, 1]),
                ..KernelLaunch::default()
            }),
        ));
    }
    let _ = meter.finish();

    if let Ok(doc) = rate(&report, &PRICES, None, &Default::default()) {
        let _ = doc.verify_digests();
        let _ = doc.to_text_table();
    }
});
