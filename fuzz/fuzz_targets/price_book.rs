//! Fuzzes the price-book parser (`gpumeter_rating::PriceBook::from_toml_str`) and, for every
//! book it accepts, rating: a fixed usage report is rated with the book (`rate`, over the
//! report's own windows and over an explicit period), and the invoice document is rendered
//! (`to_text_table`, JSON) and its digests checked, as `gpumeter preview` and `prices check` do.
//!
//! The input is the TOML text; bytes that are not UTF-8 are replaced (U+FFFD) rather than
//! skipped, so that mutations that break an encoding still reach the parser.
//!
//! The report is built once, by metering synthetic records with `gpumeter_core::Meter`:
//! tenant `acme`; an `NVIDIA H100 80GB HBM3` (132 SMs, 9.0) with kernels (one across the
//! 08:00 window edge), copies both ways and a memset; an `NVIDIA A100-SXM4-80GB` (108 SMs)
//! with a kernel; and a device with no name (no SKU can match it), 2026-12-01 07:59–08:02 UTC.
#![no_main]

use std::sync::LazyLock;

use gpumeter_core::time::parse_rfc3339;
use gpumeter_core::{
    ActivityRecord, ComputeCapability, CopyDirection, DeviceInfo, KernelLaunch, Meter, MeterConfig,
    UsageReport, Work,
};
use gpumeter_rating::{rate, PriceBook};
use libfuzzer_sys::fuzz_target;

const S: u64 = 1_000_000_000;

fn time(text: &str) -> u64 {
    parse_rfc3339(text).expect("price_book: a fixed time of the synthetic report")
}

fn kernel(blocks: u32) -> Work {
    Work::Kernel(KernelLaunch {
        grid: Some([blocks, 1, 1]),
        block: Some([256, 1, 1]),
        registers_per_thread: Some(32),
        shared_mem_bytes: Some(16 << 10),
        ..KernelLaunch::default()
    })
}

fn device(key: &str, id: u32, name: Option<&str>, sms: u32, cc: (u32, u32)) -> DeviceInfo {
    let mut d = DeviceInfo::bare(key, id);
    d.name = name.map(str::to_string);
    d.sm_count = Some(sms);
    d.compute_capability = Some(ComputeCapability {
        major: cc.0,
        minor: cc.1,
    });
    d
}

static REPORT: LazyLock<UsageReport> = LazyLock::new(|| {
    let mut meter = Meter::new(MeterConfig {
        tenant: gpumeter_core::TenantName::parse("acme").ok(),
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    let h100 = meter.register_device(device(
        "GPU-00000000-0000-0000-0000-000000000100",
        0,
        Some("NVIDIA H100 80GB HBM3"),
        132,
        (9, 0),
    ));
    let a100 = meter.register_device(device(
        "GPU-00000000-0000-0000-0000-000000000a10",
        1,
        Some("NVIDIA A100-SXM4-80GB"),
        108,
        (8, 0),
    ));
    let nameless = meter.register_device(device("fuzz.json@00000000#2", 2, None, 80, (7, 0)));
    let t0 = time("2026-12-01T07:59:00Z");
    let copy = |bytes, direction| Work::Memcpy { bytes, direction };
    for rec in [
        ActivityRecord::new(
            h100,
            t0,
            t0 + 10 * S,
            copy(1 << 30, CopyDirection::HostToDevice),
        ),
        ActivityRecord::new(a100, t0 + 5 * S, t0 + 65 * S, kernel(216)),
        ActivityRecord::new(h100, t0 + 10 * S, t0 + 90 * S, kernel(264)),
        ActivityRecord::new(nameless, t0 + 20 * S, t0 + 30 * S, kernel(80)),
        ActivityRecord::new(h100, t0 + 90 * S, t0 + 91 * S, Work::Memset { bytes: 4096 }),
        ActivityRecord::new(h100, t0 + 91 * S, t0 + 180 * S, kernel(66)),
        ActivityRecord::new(
            h100,
            t0 + 180 * S,
            t0 + 181 * S,
            copy(1 << 20, CopyDirection::DeviceToHost),
        ),
    ] {
        meter.push(rec);
    }
    meter
        .finish()
        .expect("price_book: the synthetic usage report")
});

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(book) = PriceBook::from_toml_str("fuzz.toml", &text) else {
        return;
    };
    let _ = book.summary();
    let _ = book.check_devices(&["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", ""]);
    let report = &*REPORT;
    let period = (time("2026-12-01T07:00:00Z"), time("2026-12-01T09:00:00Z"));
    for p in [None, Some(period)] {
        if let Ok(doc) = rate(report, &book, p, &Default::default()) {
            let _ = doc.verify_digests();
            let _ = doc.to_text_table();
            let _ = serde_json::to_string(&doc);
            let _ = gpumeter_rating::render::invoice_csv(&doc);
            let _ = gpumeter_rating::render::invoice_html(&doc, report);
        }
    }
});
