//! Fuzzes the Kineto / PyTorch-profiler importer (`gpumeter_import::import_bytes` with
//! `Format::Kineto`), plain and gzip, and the meter and report on top of it.
//!
//! Byte 0 is a flag byte, the rest is the file:
//! * bit 0: gzip the rest first (flate2), so that valid gzip streams of fuzzed JSON reach the
//!   decompression, its size limit and the parser; without it the rest goes in as is (a rest
//!   that starts with the gzip magic `1f 8b` takes the gzip path with a damaged stream);
//! * bit 1 (with bit 0): two gzip members, the rest split at its middle (`MultiGzDecoder`);
//! * bit 2: `Format::Auto` instead of `Format::Kineto` (format detection from the bytes).
#![no_main]

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use gpumeter_core::{Meter, MeterConfig};
use gpumeter_import::{import_bytes, Format, ImportOptions};
use libfuzzer_sys::fuzz_target;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    // Writing into a Vec cannot fail.
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let owned;
    let (name, bytes) = if flags & 1 == 1 {
        owned = if flags & 2 == 2 {
            let (a, b) = rest.split_at(rest.len() / 2);
            let mut v = gzip(a);
            v.extend(gzip(b));
            v
        } else {
            gzip(rest)
        };
        ("fuzz.json.gz", &owned[..])
    } else if rest.starts_with(&[0x1f, 0x8b]) {
        ("fuzz.json.gz", rest)
    } else {
        ("fuzz.json", rest)
    };
    let opts = ImportOptions {
        format: if flags & 4 == 4 {
            Format::Auto
        } else {
            Format::Kineto
        },
        ..ImportOptions::default()
    };
    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    if import_bytes(&mut meter, name, bytes, &opts).is_ok() {
        let _ = meter.finish();
    }
});
