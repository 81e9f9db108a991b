//! Criterion bench `rating`: rating throughput in usage rows per second (docs/PERFORMANCE.md, "Targets", asks at
//! least 1 M rows/s) on a synthetic month of hourly usage, 1 008 000 rows: 100 tenants × 2 H100s
//! × 720 windows × 7 meters. Two price books side by side in one run: the reference, per-unit
//! prices only (what rating did before tiers and bands), and the full book: graduated SM-time
//! tiers with flat fees, a New York off-peak band, a mid-month price change and a billing
//! increment. Results and the command are in docs/PERFORMANCE.md.
//!
//! Run: `cargo bench --bench rating`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumeter::core::{DeviceEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow};
use gpumeter::rating::{rate, CarriedFragments, PriceBook};

const HOUR_NS: u64 = 3_600_000_000_000;
/// 2026-12-01T00:00:00Z in ns.
const DEC1: u64 = 1_796_083_200 * 1_000_000_000;

const SKU: &str = "schema = \"gpumeter.pricebook/v1\"\nversion = \"bench\"\ncurrency = \"USD\"\n\
[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n";

fn per_unit_book() -> PriceBook {
    let mut text = SKU.to_string();
    for (meter, unit, price) in [
        ("sm_ns", "SM·hour", "0.022652"),
        ("gpu_busy_ns", "hour", "0.10"),
        ("kernel_ns", "hour", "0.05"),
        ("kernel_launches", "1M", "0.01"),
        ("memcpy_htod_bytes", "GB", "0.01"),
        ("memcpy_dtoh_bytes", "GB", "0.01"),
        ("warp_ns", "warp·hour", "0.0001"),
    ] {
        text.push_str(&format!(
            "[[rate]]\nsku = \"h100\"\nmeter = \"{meter}\"\nunit = \"{unit}\"\nunit_price = \"{price}\"\n"
        ));
    }
    parse(&text)
}

fn full_book() -> PriceBook {
    let mut text = SKU.to_string();
    text.push_str(
        "[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nmodel = \"graduated\"\n\
         tiers = [ { up_to = \"500\", unit_price = \"0.022652\" }, { up_to = \"5000\", unit_price = \"0.020\", flat_fee = \"1.00\" }, { up_to = \"inf\", unit_price = \"0.018\", flat_fee = \"5.00\" } ]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"gpu_busy_ns\"\nunit = \"hour\"\nunit_price = \"0.10\"\nincrement = \"0.01\"\nvalid_to = \"2026-12-16T00:00:00Z\"\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"gpu_busy_ns\"\nunit = \"hour\"\nunit_price = \"0.12\"\nincrement = \"0.01\"\nvalid_from = \"2026-12-16T00:00:00Z\"\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_ns\"\nunit = \"hour\"\nmodel = \"volume\"\n\
         tiers = [ { up_to = \"100\", unit_price = \"0.05\" }, { up_to = \"inf\", unit_price = \"0.04\" } ]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1M\"\nmodel = \"package\"\npackage_size = \"1\"\nunit_price = \"0.01\"\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"memcpy_htod_bytes\"\nunit = \"GB\"\nunit_price = \"0.01\"\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"memcpy_dtoh_bytes\"\nunit = \"GB\"\nunit_price = \"0.01\"\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"warp_ns\"\nunit = \"warp·hour\"\nunit_price = \"0.0001\"\n\
         [[band]]\nname = \"off-peak\"\ntz = \"America/New_York\"\ndays = [\"mon\", \"tue\", \"wed\", \"thu\", \"fri\"]\nhours = \"19:00-07:00\"\nmultiplier = \"0.60\"\nmeters = [\"sm_ns\", \"gpu_busy_ns\"]\n",
    );
    parse(&text)
}

fn parse(text: &str) -> PriceBook {
    match PriceBook::from_toml_str("bench.toml", text) {
        Ok(b) => b,
        Err(e) => panic!("bench book: {e}"),
    }
}

/// 100 tenants × 2 devices × 720 hourly windows × 7 meters = 1 008 000 rows.
fn month_of_usage() -> UsageReport {
    let meters = [
        MeterKind::SmNs,
        MeterKind::GpuBusyNs,
        MeterKind::KernelNs,
        MeterKind::KernelLaunches,
        MeterKind::MemcpyHtodBytes,
        MeterKind::MemcpyDtohBytes,
        MeterKind::WarpNs,
    ];
    let devices: Vec<DeviceEntry> = (0..2)
        .map(|d| DeviceEntry {
            device: d,
            device_key: format!("GPU-{d}"),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            sm_count: Some(132),
            compute_capability: Some("9.0".into()),
            not_meterable: vec![],
        })
        .collect();
    let windows: Vec<String> = (0..720)
        .map(|w| gpumeter::core::time::rfc3339(DEC1 + w * HOUR_NS))
        .collect();
    let mut usage = Vec::with_capacity(1_008_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for t in 0..100 {
        let tenant = format!("tenant-{t:03}");
        for d in 0..2u32 {
            for ws in &windows {
                for &meter in &meters {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    usage.push(UsageRow {
                        tenant: tenant.clone(),
                        device: d,
                        device_key: format!("GPU-{d}"),
                        window_start: ws.clone(),
                        meter,
                        quantity: Quantity(u128::from(x % 1_000_000_000_000)),
                    });
                }
            }
        }
    }
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".into(),
        metering_policy: "v1".into(),
        window_seconds: 3600,
        complete: Some(true),
        sources: vec![],
        devices,
        records: RecordCounts::default(),
        loss: vec![],
        usage,
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: vec![],
        // Sealing would hash 1 M rows; rating copies a non-empty digest as given.
        sha256: "0".repeat(64),
    };
    r.totals.clear();
    r
}

fn bench(c: &mut Criterion) {
    let usage = month_of_usage();
    let mut g = c.benchmark_group("rating");
    g.sample_size(10);
    g.throughput(Throughput::Elements(usage.usage.len() as u64));
    let none = CarriedFragments::new();
    for (name, book) in [
        ("per_unit_reference", per_unit_book()),
        ("tiers_bands_increments", full_book()),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let doc = rate(&usage, &book, None, &none);
                assert!(doc.as_ref().is_ok_and(|d| d.invoices.len() == 100));
                doc
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
