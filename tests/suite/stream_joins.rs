//! The correlation joins of a streamed raw buffer are bounded by the file's join distance, not
//! learned whole (issue 13; `gpumeter_cupti`'s `lookahead` module): a file where every kernel
//! launch has its EXTERNAL_CORRELATION and RUNTIME records (the synthetic "full mix") meters,
//! every process and external id joined, in a child process under an address-space ceiling
//! (`ulimit -v`) that the whole file's join tables do not fit in. That streamed reports equal
//! the whole-file path's, joins far from their work and past the window's cap included, is
//! shown in `crates/gpumeter-cupti/tests/stream_file.rs`.

use std::path::PathBuf;
use std::process::Command;

use gpumeter::core::{Meter, MeterConfig, MeterKind};
use gpumeter::cupti::{meter_buffer_file, CuptiOptions};
use gpumeter_synth::SynthConfig;

use crate::ok;

/// Set in the child: the directory of the file to meter.
const CHILD: &str = "GPUMETER_JOINS_CHILD";
/// The child's address-space ceiling, KiB: 72 MiB. Measured (`VmPeak`) in a debug build with
/// one malloc arena: metering the file with the bounded joins peaks at about 53 MiB; with the
/// whole file's join tables (process and external ids of 460 000 correlation ids) at about
/// 86 MiB.
const CEILING_KIB: u64 = 72 << 10;
/// Kernel launches of the file (each with its EXTERNAL_CORRELATION and RUNTIME records): just
/// past 7/8 of 2^19, so that the whole join tables, which grow by doubling, take 2^20 slots.
const LAUNCHES: u64 = 460_000;

#[test]
fn a_full_mix_file_streams_its_joins_in_bounded_memory() {
    let Some(dir) = std::env::var_os(CHILD) else {
        let dir = ok(tempfile::tempdir());
        let cfg = SynthConfig {
            kernels: LAUNCHES,
            seed: 31,
            ..SynthConfig::default()
        };
        assert!(cfg.external_correlation && cfg.api_records, "the full mix");
        let raw = ok(std::fs::File::create(dir.path().join("full.bin")));
        ok(gpumeter_synth::write_raw(
            &cfg,
            std::io::BufWriter::new(raw),
        ));
        let exe = ok(std::env::current_exe());
        let status = ok(Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {CEILING_KIB} && exec \"$0\" --exact \
                 suite::stream_joins::a_full_mix_file_streams_its_joins_in_bounded_memory \
                 --test-threads=1 --nocapture"
            ))
            .arg(exe)
            .env(CHILD, dir.path())
            // One arena: the address space then follows what is allocated (each further
            // arena reserves 64 MiB of it).
            .env("MALLOC_ARENA_MAX", "1")
            .status());
        assert!(
            status.success(),
            "a full-mix file of {LAUNCHES} launches failed under a {CEILING_KIB} KiB ceiling: \
             {status}"
        );
        return;
    };
    let path = PathBuf::from(dir).join("full.bin");
    let mut m = Meter::new(MeterConfig::default());
    let s = ok(meter_buffer_file(&mut m, &path, &CuptiOptions::default()));
    // Every launch joined to its process and external ids.
    assert_eq!(
        (s.process_ids_joined, s.external_ids_joined),
        (LAUNCHES, LAUNCHES)
    );
    let r = ok(m.finish());
    let launches: u128 = r
        .totals
        .iter()
        .filter(|t| t.meter == MeterKind::KernelLaunches)
        .map(|t| t.quantity.0)
        .sum();
    assert_eq!(launches, u128::from(LAUNCHES));
}
