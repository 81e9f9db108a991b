//! Fuzzes the tenant-map parser (`--tenant-map FILE`:
//! `<TenantMap as gpumeter_import::TenantMapFile>::from_toml_str`) and, for every map it
//! accepts, attribution with it: a meter with the map and records whose process id and external
//! correlation id are the map's first keys (and ids no rule names) builds its report, so the
//! map's tenant names reach the report and its canonical-JSON digest.
//!
//! The input is the TOML text; bytes that are not UTF-8 are replaced (U+FFFD).
#![no_main]

use gpumeter_core::{ActivityRecord, DeviceInfo, Meter, MeterConfig, TenantMap, Work};
use gpumeter_import::TenantMapFile;
use libfuzzer_sys::fuzz_target;

/// 2026-12-01T08:00:00Z.
const T0: u64 = 1_796_112_000_000_000_000;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(map) = <TenantMap as TenantMapFile>::from_toml_str("fuzz.toml", &text) else {
        return;
    };
    let pid = map.pid.keys().min().copied();
    let external = map.external.keys().min().copied();
    let mut meter = Meter::new(MeterConfig {
        tenant: gpumeter_core::TenantName::parse("acme").ok(),
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    meter.set_tenant_map(map);
    let dev = meter.register_device(DeviceInfo::bare("fuzz.json@00000000#0", 0));
    let attributions = [
        (pid, None),
        (None, external),
        (pid, external),
        (Some(u32::MAX), Some(u64::MAX)),
    ];
    for (i, (process_id, external_id)) in (0u64..).zip(attributions) {
        let mut rec = ActivityRecord::new(
            dev,
            T0 + i * 1_000,
            T0 + i * 1_000 + 500,
            Work::Memset { bytes: 64 },
        );
        rec.process_id = process_id;
        rec.external_id = external_id;
        meter.push(rec);
    }
    let _ = meter.finish();
});
