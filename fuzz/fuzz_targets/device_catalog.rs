//! Fuzzes the device-catalog parser (`--devices FILE`:
//! `gpumeter_import::DeviceCatalog::from_toml_str`) and, for every catalog it accepts, its use:
//! the catalog is applied (`DeviceCatalog::apply`) to a meter with a bare device (id 0, known by
//! nothing but its key) and a device with a UUID (id 1), then kernels are pushed on both and the
//! report is built. SM counts, compute capabilities and per-SM limits then come from the fuzzed
//! catalog, including ones the occupancy calculator does not know.
//!
//! The input is the TOML text; bytes that are not UTF-8 are replaced (U+FFFD).
#![no_main]

use gpumeter_core::{ActivityRecord, DeviceInfo, KernelLaunch, Meter, MeterConfig, Work};
use gpumeter_import::DeviceCatalog;
use libfuzzer_sys::fuzz_target;

/// 2026-12-01T08:00:00Z.
const T0: u64 = 1_796_112_000_000_000_000;

/// (grid, block, registers per thread, shared memory per block in bytes)
const LAUNCHES: [([u32; 3], [u32; 3], u32, u64); 3] = [
    ([132, 1, 1], [256, 1, 1], 32, 16 << 10),
    ([4096, 2, 1], [1024, 1, 1], 255, 227 << 10),
    ([1, 1, 1], [32, 1, 1], 0, 0),
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(catalog) = DeviceCatalog::from_toml_str("fuzz.toml", &text) else {
        return;
    };
    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    let bare = meter.register_device(DeviceInfo::bare("fuzz.json@00000000#0", 0));
    let mut with_uuid = DeviceInfo::bare("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88", 1);
    with_uuid.uuid = Some("74e128b2-90b6-b409-07c8-33bee5ff6f88".into());
    let other = meter.register_device(with_uuid);
    let _ = catalog.apply(&mut meter);
    for (i, (grid, block, regs, shared)) in (0u64..).zip(LAUNCHES) {
        for dev in [bare, other] {
            let start = T0 + i * 10_000;
            meter.push(ActivityRecord::new(
                dev,
                start,
                start + 5_000,
                Work::Kernel(KernelLaunch {
                    grid: Some(grid),
                    block: Some(block),
                    registers_per_thread: Some(regs),
                    shared_mem_bytes: Some(shared),
                    ..KernelLaunch::default()
                }),
            ));
        }
    }
    let _ = meter.finish();
});
