//! The correlation joins of a streamed raw buffer are bounded by the file's join distance, not
//! learned whole (issue 13; `gpumeter_recording`'s `lookahead` module): a file where every kernel
//! launch has its EXTERNAL_CORRELATION and RUNTIME records (the synthetic "full mix") meters,
//! every process and external id joined, in a child process under an address-space ceiling
//! (`ulimit -v`) that the whole file's join tables do not fit in. That streamed reports equal
//! the whole-file path's, joins far from their work and past the window's cap included, is
//! shown in `crates/gpumeter-recording/tests/stream_file.rs`.

use std::path::PathBuf;
use std::process::Command;

use gpumeter::core::{Meter, MeterConfig, MeterKind};
use gpumeter::cupti::{meter_buffer_file, CuptiOptions};
use gpumeter_synth::SynthConfig;

use crate::ok;

/// Set in the child: the directory of the file to meter.
const CHILD: &str = "GPUMETER_JOINS_CHILD";
/// Set in the child that only says its address space before metering (`VmPeak`, KiB): the
/// test binary's own mappings, which grow with the code linked into it.
const BASELINE: &str = "GPUMETER_JOINS_BASELINE";
/// What metering may add to the child's address space, KiB: 46 MiB above its baseline.
/// Measured (`VmPeak` less the baseline) in a debug build with one malloc arena: metering the
/// file with the bounded joins adds about 31 MiB. The whole file's join tables (process and
/// external ids of 460 000 correlation ids) were measured at 33 MiB more than the bounded
/// joins (86 against 53 MiB of `VmPeak`, issue 13), so about 64 MiB. The ceiling is relative
/// to the baseline, so the test binary's own growth does not decide it (a fixed 72 MiB ceiling
/// left too little room once issue 30's code was linked in).
const BUDGET_KIB: u64 = 46 << 10;
/// Kernel launches of the file (each with its EXTERNAL_CORRELATION and RUNTIME records): just
/// past 7/8 of 2^19, so that the whole join tables, which grow by doubling, take 2^20 slots.
const LAUNCHES: u64 = 460_000;
/// The exact name of this test, to run it alone in a child.
const NAME: &str = "suite::stream_joins::a_full_mix_file_streams_its_joins_in_bounded_memory";

/// `VmPeak` of this process, KiB.
fn vm_peak_kib() -> u64 {
    let status = ok(std::fs::read_to_string("/proc/self/status"));
    let line = status
        .lines()
        .find(|l| l.starts_with("VmPeak:"))
        .unwrap_or_else(|| panic!("no VmPeak in /proc/self/status"));
    ok(line
        .trim_start_matches("VmPeak:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<u64>())
}

#[test]
fn a_full_mix_file_streams_its_joins_in_bounded_memory() {
    if std::env::var_os(BASELINE).is_some() {
        println!("baseline-kib: {}", vm_peak_kib());
        return;
    }
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
        // The child's address space before it meters, as the metering child will start.
        let out = ok(Command::new(&exe)
            .args(["--exact", NAME, "--test-threads=1", "--nocapture"])
            .env(BASELINE, "1")
            .env("MALLOC_ARENA_MAX", "1")
            .output());
        let text = String::from_utf8_lossy(&out.stdout);
        let baseline: u64 = text
            .lines()
            // The harness prints the test's name on the same line.
            .find_map(|l| l.split_once("baseline-kib: ").map(|(_, n)| n))
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("the baseline child said no baseline: {text}"));
        let ceiling = baseline + BUDGET_KIB;
        let status = ok(Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {ceiling} && exec \"$0\" --exact {NAME} --test-threads=1 --nocapture"
            ))
            .arg(exe)
            .env(CHILD, dir.path())
            // One arena: the address space then follows what is allocated (each further
            // arena reserves 64 MiB of it).
            .env("MALLOC_ARENA_MAX", "1")
            .status());
        assert!(
            status.success(),
            "a full-mix file of {LAUNCHES} launches failed under a {ceiling} KiB ceiling \
             ({baseline} KiB before metering): {status}"
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
