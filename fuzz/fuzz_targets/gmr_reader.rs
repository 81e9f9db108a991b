//! Fuzzes the `.gmr` reader and `meter_gmr` (frames, checksums, string tables, header JSON,
//! buffers decoded with the header's API version). An input that does not start with the magic
//! and whose first byte is odd gets that byte replaced by a valid 20-byte preamble, so the
//! fuzzer spends its effort on frames.
#![no_main]

use gpumeter_core::{Meter, MeterConfig};
use gpumeter_recording::gmr::{read_gmr, GMR_FORMAT_VERSION, GMR_MAGIC};
use gpumeter_recording::{meter_gmr, CuptiOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let owned;
    let bytes = match data.split_first() {
        Some((&flag, rest)) if flag & 1 == 1 && !data.starts_with(&GMR_MAGIC) => {
            let mut v = GMR_MAGIC.to_vec();
            v.extend_from_slice(&GMR_FORMAT_VERSION.to_le_bytes());
            v.extend_from_slice(rest);
            owned = v;
            &owned[..]
        }
        _ => data,
    };
    if let Ok(file) = read_gmr(bytes) {
        // Frames are in file order, each after the previous one.
        for w in file.frames.windows(2) {
            assert!(w[0].offset < w[1].offset && w[0].index < w[1].index);
        }
    }
    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    if meter_gmr(&mut meter, "fuzz.gmr", bytes, &CuptiOptions::default()).is_ok() {
        let _ = meter.finish();
    }
});
