//! Fuzzes the CUPTI activity-buffer decoder with every supported API version's layouts
//! (`ApiVersion::ALL`), and the metering path on top of it (joins, devices, conversion to
//! activity records). The first input byte picks the version and the start alignment, so
//! unaligned buffers are covered too.
#![no_main]

use gpumeter_core::{Meter, MeterConfig};
use gpumeter_cupti::{decode, ApiVersion};
use gpumeter_recording::{meter_buffer, CuptiOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    // Bits 3..7 pick the version (0 = 12.8, 1 = 13.0, 2 = 13.4, modulo the count), bits 0..2
    // skip 0..7 bytes: the decoder must accept any alignment.
    let api = ApiVersion::ALL[usize::from(sel >> 3) % ApiVersion::ALL.len()];
    let skip = usize::from(sel & 7).min(rest.len());
    let buf = &rest[skip..];
    if let Ok(d) = decode(buf, api) {
        // A decoded buffer accounts for every byte.
        let used: usize = d.records.iter().map(|r| r.size).sum();
        assert_eq!(used + d.trailing_zero_bytes, buf.len());
    }
    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    let opts = CuptiOptions {
        api,
        ..CuptiOptions::default()
    };
    if meter_buffer(&mut meter, "fuzz.bin", buf, &opts).is_ok() {
        let _ = meter.finish();
    }
});
