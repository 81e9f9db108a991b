//! Fuzzes the usage-events mapping parser (`usage --events-map FILE`:
//! `gpumeter::events::EventMap::from_toml_str`) and, for every mapping it accepts, the events
//! of a fixed report in every format: the map's tenants (also `unattributed`), meters, source
//! and refusal rules reach `usage_events`, and every event serializes with a 64-digit key.
//!
//! The input is the TOML text; bytes that are not UTF-8 are replaced (U+FFFD).
#![no_main]

use gpumeter::events::{to_json_lines, usage_events, EventFormat, EventMap, EventOptions};
use gpumeter_core::report::Quantity;
use gpumeter_core::{MeterKind, UsageReport};
use libfuzzer_sys::fuzz_target;

/// A sealed, complete report with one row per (tenant, meter): the map's first tenant,
/// `unattributed`, and a tenant no map names; `sm_ns` (within what the device's 1000 SMs can
/// do in the hour) and `warp_ns` (past Stripe's 15 digits) for each.
fn report(first_tenant: Option<&str>) -> UsageReport {
    let mut tenants = vec!["unattributed".to_string(), "zed".to_string()];
    // Once each: two rows of one key are refused (`usage_events` would send one id twice).
    if let Some(t) = first_tenant.filter(|t| !tenants.iter().any(|x| x == t)) {
        tenants.insert(0, t.to_string());
    }
    let text = serde_json::json!({
        "schema": "gpumeter.usage/v1", "metering_policy": "v1", "window_seconds": 3600,
        "complete": true, "sources": [],
        "devices": [{"device": 0, "device_key": "00000000000000f0#0", "name": "NVIDIA H100",
                     "sm_count": 1000, "compute_capability": "9.0", "not_meterable": []}],
        "records": {"kernel": 0, "memcpy": 0, "memset": 0, "skipped": {}},
        "loss": [], "usage": [], "totals": [], "open_allocations": [], "warnings": [],
        "sha256": ""
    });
    let mut report: UsageReport = serde_json::from_value(text).expect("a report");
    for tenant in tenants {
        for (meter, quantity) in [
            (MeterKind::SmNs, 999_999_999_999_999u128),
            (MeterKind::WarpNs, u128::MAX),
        ] {
            report.usage.push(gpumeter_core::UsageRow {
                tenant: tenant.clone(),
                device: 0,
                device_key: "00000000000000f0#0".into(),
                window_start: "2026-12-01T08:00:00Z".into(),
                meter,
                quantity: Quantity(quantity),
            });
        }
    }
    // Totals and digest as the meter writes them, so the report passes the readers' checks
    // (a report that fails them would make every map's events an error, reaching nothing).
    report.seal_with_totals().expect("a sealed report");
    report
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(map) = EventMap::from_toml_str("fuzz.toml", &text) else {
        return;
    };
    let report = report(map.tenants.keys().next().map(String::as_str));
    for format in [
        EventFormat::CloudEvents,
        EventFormat::Stripe,
        EventFormat::Lago,
    ] {
        for closed_before_ns in [None, Some(1_796_112_000_000_000_000)] {
            let opts = EventOptions {
                map: Some(&map),
                closed_before_ns,
                ..EventOptions::new(format)
            };
            let Ok(events) = usage_events(&report, &opts) else {
                continue;
            };
            for e in &events.events {
                assert_eq!(e.id().len(), 64);
            }
            let lines = to_json_lines(&events.events).expect("JSON");
            assert_eq!(lines.lines().count(), events.events.len());
        }
    }
});
