//! Fuzzes the Nsight Systems SQLite importer the way the CLI reads an export: the input is
//! written to a file in a fresh temporary directory and imported with
//! `gpumeter_import::import_path` and `Format::Nsys` (SQLite opens it read-only in place), then
//! metered and reported. The same bytes then go through `import_bytes` (the in-memory,
//! `sqlite3_deserialize` path of the library API). The whole input is the database file.
//!
//! A fresh directory per input keeps runs reproducible: nothing SQLite may leave beside the
//! file (`-journal`, `-wal`, `-shm`) is seen by the next input.
#![no_main]

use gpumeter_core::{Meter, MeterConfig};
use gpumeter_import::{import_bytes, import_path, Format, ImportOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let opts = ImportOptions {
        format: Format::Nsys,
        ..ImportOptions::default()
    };
    // The file system is not what is fuzzed, but a run that cannot write the file must not
    // quietly fuzz only the in-memory path: it stops here, saying why.
    let dir = tempfile::tempdir().expect("nsys_sqlite: cannot create a temporary directory");
    let path = dir.path().join("fuzz.sqlite");
    std::fs::write(&path, data).expect("nsys_sqlite: cannot write the temporary file");
    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    if import_path(&mut meter, &path, &opts).is_ok() {
        let _ = meter.finish();
    }
    drop(dir);
    let mut meter = Meter::new(MeterConfig {
        // A small cell budget: inputs past it take the error path fast.
        max_cells: 20_000,
        ..MeterConfig::default()
    });
    if import_bytes(&mut meter, "fuzz.sqlite", data, &opts).is_ok() {
        let _ = meter.finish();
    }
});
