//! Several raw CUPTI buffers and `.gmr` recordings metered as streams merged in time order
//! (issue 13, `gpumeter_recording::meter_files`): for every order of the inputs the report is, byte
//! for byte, the one of the whole-file path (every file read whole, `push_batches`), for the
//! committed inputs, synthetic ones of other seeds and devices, and crafted sources that tie
//! in time; inputs the merge must not stream (the same work in two files, instruction counts)
//! are refused by it and metered whole by the facade; and two large synthetic sources meter in
//! a memory ceiling below what holding them whole needs.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpumeter::core::{Meter, MeterConfig, UsageReport};
use gpumeter::cupti::{
    meter_files, meter_sources, read_source, ActivityKind, ApiVersion, CuptiFormat, CuptiInput,
    CuptiOptions,
};
use gpumeter::{meter_inputs, UsageOptions};
use gpumeter_synth::SynthConfig;

use crate::{example, ok};

/// An input: its path and format.
type Input = (PathBuf, CuptiFormat);

fn json(r: &UsageReport) -> String {
    ok(serde_json::to_string_pretty(r))
}

fn opts(api: ApiVersion) -> CuptiOptions<'static> {
    CuptiOptions {
        api,
        ..CuptiOptions::default()
    }
}

/// The whole-file path: every file read whole, announced in order, `push_batches`.
fn whole(inputs: &[Input], api: ApiVersion) -> String {
    let mut m = Meter::new(MeterConfig::default());
    whole_into(&mut m, inputs, api);
    json(&ok(m.finish()))
}

/// [`whole`] into a meter given (one continuing a report, say).
fn whole_into(m: &mut Meter, inputs: &[Input], api: ApiVersion) {
    let files: Vec<(String, Vec<u8>, CuptiFormat)> = inputs
        .iter()
        .map(|(p, f)| {
            let (name, bytes) = ok(read_source(p));
            (name, bytes, *f)
        })
        .collect();
    let sources: Vec<CuptiInput<'_>> = files
        .iter()
        .map(|(name, bytes, format)| CuptiInput {
            name,
            bytes,
            format: *format,
        })
        .collect();
    ok(meter_sources(m, &sources, &opts(api)));
}

/// The streaming merge; `None` when it refuses the inputs (the meter then untouched).
fn streamed(inputs: &[Input], api: ApiVersion) -> Option<UsageReport> {
    let paths: Vec<(&Path, CuptiFormat)> = inputs.iter().map(|(p, f)| (p.as_path(), *f)).collect();
    let mut m = Meter::new(MeterConfig::default());
    let summaries = ok(meter_files(&mut m, &paths, &opts(api)))?;
    assert_eq!(summaries.len(), inputs.len());
    Some(ok(m.finish()))
}

/// Every order of `items`.
fn orders<T: Clone>(items: &[T]) -> Vec<Vec<T>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut o in orders(&rest) {
            o.insert(0, first.clone());
            out.push(o);
        }
    }
    out
}

/// In every order, the merge streams `inputs` and its report is the whole-file path's, byte
/// for byte; and every order meters the same usage. Returns the first order's report.
fn every_order_streams_as_whole(inputs: &[Input], api: ApiVersion) -> UsageReport {
    let mut first: Option<UsageReport> = None;
    for order in orders(inputs) {
        let s = streamed(&order, api).unwrap_or_else(|| {
            panic!("the merge refused {order:?}");
        });
        assert_eq!(json(&s), whole(&order, api), "order {order:?}");
        if let Some(f) = &first {
            assert_eq!(f.usage, s.usage, "order {order:?}");
            assert_eq!(f.loss, s.loss, "order {order:?}");
            assert_eq!(f.totals, s.totals, "order {order:?}");
        } else {
            first = Some(s);
        }
    }
    first.unwrap_or_else(|| panic!("no order"))
}

fn raw(dir: &tempfile::TempDir, name: &str, cfg: &SynthConfig) -> Input {
    let path = dir.path().join(name);
    ok(gpumeter_synth::write_raw(
        cfg,
        ok(std::fs::File::create(&path)),
    ));
    (path, CuptiFormat::Cupti)
}

fn gmr(dir: &tempfile::TempDir, name: &str, cfg: &SynthConfig) -> Input {
    let path = dir.path().join(name);
    ok(gpumeter_synth::write_gmr(
        cfg,
        ok(std::fs::File::create(&path)),
    ));
    (path, CuptiFormat::Gmr)
}

fn small(seed: u64, devices: u32, kernels: u64) -> SynthConfig {
    SynthConfig {
        kernels,
        devices,
        seed,
        kernels_per_second: 200_000,
        kernels_per_buffer: 3_000,
        ..SynthConfig::default()
    }
}

#[test]
fn committed_recordings_and_a_raw_buffer_merge_as_whole_in_every_order() {
    let inputs = vec![
        (example("h200-cuda13-green-context.gmr"), CuptiFormat::Gmr),
        (example("h200-cuda13-smoke.gmr"), CuptiFormat::Gmr),
        (
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("crates/gpumeter-cupti/tests/c/live/h200_r580_cupti_130001.bin"),
            CuptiFormat::Cupti,
        ),
    ];
    let r = every_order_streams_as_whole(&inputs, ok(ApiVersion::from_cupti(130_001)));
    assert_eq!(r.sources.len(), 3);
}

#[test]
fn synthetic_sources_of_other_seeds_devices_and_formats_merge_as_whole_in_every_order() {
    let dir = ok(tempfile::tempdir());
    let base = small(1, 2, 6_000);
    // The same GPUs as `base` (same seed: same UUIDs), 7 ns later: two processes' work on one
    // GPU, interleaved in time.
    let shifted = SynthConfig {
        start_ns: base.start_ns + 7,
        ..base.clone()
    };
    let inputs = vec![
        raw(&dir, "a.bin", &base),
        gmr(&dir, "b.gmr", &small(2, 1, 5_000)),
        gmr(&dir, "c.gmr", &shifted),
        raw(&dir, "d.bin", &small(3, 3, 3_000)),
    ];
    let r = every_order_streams_as_whole(&inputs, ApiVersion::Cupti12_8);
    assert_eq!(r.sources.len(), 4);
}

/// 12.8 kernels: (start ns, duration ns, correlation id, stream), context 1, device 0 of the
/// DEVICE record `uuid` names.
fn kernels(uuid: u128, ks: &[(u64, u64, u32, u32)], memory: &[(u64, u32, u64)]) -> Vec<u8> {
    let api = ApiVersion::Cupti12_8;
    let layouts = api.layouts();
    let layout = |kind: ActivityKind| {
        layouts
            .iter()
            .find(|l| l.kind == kind)
            .unwrap_or_else(|| panic!("no {kind}"))
    };
    let mut out = Vec::new();
    let mut rec = |kind: ActivityKind, fields: &[(&str, u128)]| {
        let l = layout(kind);
        let mut r = vec![0u8; l.size];
        r[..4].copy_from_slice(&kind.0.to_le_bytes());
        for (name, v) in fields {
            let f = l
                .fields
                .iter()
                .find(|f| f.name == *name)
                .unwrap_or_else(|| panic!("no field {name}"));
            r[f.offset..f.offset + f.width].copy_from_slice(&v.to_le_bytes()[..f.width]);
        }
        out.extend(r);
    };
    rec(
        ActivityKind::DEVICE,
        &[("id", 0), ("numMultiprocessors", 132), ("uuid", uuid)],
    );
    for &(start, dur, corr, stream) in ks {
        rec(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", start.into()),
                ("end", (start + dur).into()),
                ("gridX", 264),
                ("gridY", 1),
                ("gridZ", 1),
                ("blockX", 128),
                ("blockY", 1),
                ("blockZ", 1),
                ("correlationId", corr.into()),
                ("contextId", 1),
                ("streamId", stream.into()),
            ],
        );
    }
    for &(t, op, addr) in memory {
        rec(
            ActivityKind::MEMORY2,
            &[
                ("memoryOperationType", op.into()),
                ("memoryKind", 3),
                ("address", addr.into()),
                ("bytes", 4096),
                ("timestamp", t.into()),
                ("processId", 7),
                ("deviceId", 0),
                ("contextId", 1),
            ],
        );
    }
    out
}

#[test]
fn crafted_sources_that_tie_in_time_merge_as_whole_in_every_order() {
    const T0: u64 = 1_793_606_160_000_000_000;
    const GPU: u128 = 0x74e1_28b2_90b6_b409_07c8_33be_e5ff_6f88;
    let dir = ok(tempfile::tempdir());
    let write = |name: &str, bytes: Vec<u8>| -> Input {
        let p = dir.path().join(name);
        ok(std::fs::write(&p, bytes));
        (p, CuptiFormat::Cupti)
    };
    // Three processes on one GPU, kernels starting at the same ns across sources, and memory
    // released by one source at the ns another allocates the same address; one source out of
    // time order within itself.
    let a = kernels(
        GPU,
        &[
            (T0, 1_000, 1, 7),
            (T0 + 500, 2_000, 2, 8),
            (T0 + 3_000, 10, 3, 7),
        ],
        &[(T0 + 100, 1, 0x1000), (T0 + 500, 2, 0x2000)],
    );
    let b = kernels(
        GPU,
        &[
            (T0 + 500, 700, 11, 9),
            (T0, 1_000, 12, 10),
            (T0 + 3_000, 5, 13, 9),
        ],
        &[
            (T0 + 500, 1, 0x2000),
            (T0 + 500, 2, 0x1000),
            (T0 + 100, 1, 0x3000),
        ],
    );
    let c = kernels(
        GPU,
        &[(T0 + 3_000, 1, 21, 11), (T0 + 500, 1, 22, 12)],
        &[(T0 + 3_000, 2, 0x3000)],
    );
    let inputs = vec![write("a.bin", a), write("b.bin", b), write("c.bin", c)];
    let r = every_order_streams_as_whole(&inputs, ApiVersion::Cupti12_8);
    assert_eq!(r.devices.len(), 1);
}

#[test]
fn the_same_file_twice_is_metered_once_by_the_merge() {
    let dir = ok(tempfile::tempdir());
    let cfg = small(5, 1, 5_000);
    let a = raw(&dir, "a.bin", &cfg);
    let b = raw(&dir, "copy.bin", &cfg);
    let c = gmr(&dir, "c.gmr", &small(6, 1, 5_000));
    let r = every_order_streams_as_whole(&[a, b, c], ApiVersion::Cupti12_8);
    assert!(
        r.warnings.iter().any(|w| w.contains("was metered once")),
        "{:?}",
        r.warnings
    );
}

#[test]
fn the_same_work_in_other_bytes_or_instruction_counts_are_metered_whole() {
    let dir = ok(tempfile::tempdir());
    let cfg = small(8, 2, 5_000);
    let a = raw(&dir, "a.bin", &cfg);
    // The same records with a zeroed tail: other bytes (another SHA-256), the same work.
    let mut padded = ok(std::fs::read(&a.0));
    padded.extend([0u8; 64]);
    let p = dir.path().join("padded.bin");
    ok(std::fs::write(&p, padded));
    let repeated = vec![a.clone(), (p, CuptiFormat::Cupti)];
    // The same work as a raw buffer and as a recording.
    let as_gmr = vec![a.clone(), gmr(&dir, "a.gmr", &cfg)];
    let instructions = vec![
        (example("h200-cuda13-instructions.gmr"), CuptiFormat::Gmr),
        (example("h200-cuda13-smoke.gmr"), CuptiFormat::Gmr),
    ];
    for (inputs, api) in [
        (&repeated, ApiVersion::Cupti12_8),
        (&as_gmr, ApiVersion::Cupti12_8),
        (&instructions, ApiVersion::Cupti12_8),
    ] {
        for order in orders(inputs) {
            assert!(streamed(&order, api).is_none(), "{order:?} streamed");
            // The facade meters them whole: the whole-file path's report.
            let paths: Vec<PathBuf> = order.iter().map(|(p, _)| p.clone()).collect();
            let options = UsageOptions {
                cupti_api: Some(api.cupti_api_version()),
                ..UsageOptions::default()
            };
            assert_eq!(
                json(&ok(meter_inputs(&paths, &options))),
                whole(&order, api)
            );
        }
    }
    // The repeated work was found and metered once.
    for inputs in [&repeated, &as_gmr] {
        let paths = [inputs[0].0.clone(), inputs[1].0.clone()];
        let r = ok(meter_inputs(&paths, &UsageOptions::default()));
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("so it is metered once")),
            "{:?}",
            r.warnings
        );
    }
}

#[test]
fn the_facade_streams_several_inputs_as_the_whole_file_path() {
    let dir = ok(tempfile::tempdir());
    let inputs = vec![
        gmr(&dir, "x.gmr", &small(11, 2, 8_000)),
        raw(&dir, "y.bin", &small(12, 1, 8_000)),
    ];
    for order in orders(&inputs) {
        let paths: Vec<PathBuf> = order.iter().map(|(p, _)| p.clone()).collect();
        let r = ok(meter_inputs(&paths, &UsageOptions::default()));
        assert_eq!(json(&r), whole(&order, ApiVersion::Cupti12_8));
    }
}

/// Set in the child of the memory-ceiling test: run the workload instead of spawning.
const CHILD: &str = "GPUMETER_MERGE_CHILD";
/// The child's address-space ceiling, KiB: 384 MiB.
const CEILING_KIB: u64 = 384 << 10;
/// Kernels per synthetic source of the memory-ceiling test.
const BIG: u64 = 1_000_000;

/// Two synthetic raw buffers of 1 M kernels each (kernel records only) are metered by the
/// merge under an address-space ceiling that is less than the two files alone: the files are
/// never held whole, and nothing grows with their records.
#[test]
fn two_large_sources_merge_in_bounded_memory() {
    let Some(dir) = std::env::var_os(CHILD) else {
        let dir = ok(tempfile::tempdir());
        let mut bytes = 0;
        for (name, seed) in [("big-a.bin", 21), ("big-b.bin", 22)] {
            let cfg = SynthConfig {
                kernels: BIG,
                seed,
                external_correlation: false,
                api_records: false,
                ..SynthConfig::default()
            };
            bytes += cfg.bytes();
            raw(&dir, name, &cfg);
        }
        assert!(
            bytes > CEILING_KIB << 10,
            "the files ({bytes} bytes) must not fit under the ceiling"
        );
        let exe = ok(std::env::current_exe());
        let status = ok(Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {CEILING_KIB} && exec \"$0\" --exact \
                 suite::merge_files::two_large_sources_merge_in_bounded_memory \
                 --test-threads=1 --nocapture"
            ))
            .arg(exe)
            .env(CHILD, dir.path())
            .env("MALLOC_ARENA_MAX", "2")
            .status());
        assert!(
            status.success(),
            "two sources of {BIG} kernels failed under a {CEILING_KIB} KiB ceiling: {status}"
        );
        return;
    };
    let dir = PathBuf::from(dir);
    let inputs = [
        (dir.join("big-a.bin"), CuptiFormat::Cupti),
        (dir.join("big-b.bin"), CuptiFormat::Cupti),
    ];
    let r = streamed(&inputs, ApiVersion::Cupti12_8).unwrap_or_else(|| panic!("refused"));
    let launches: u128 = r
        .totals
        .iter()
        .filter(|t| t.meter == gpumeter::core::MeterKind::KernelLaunches)
        .map(|t| t.quantity.0)
        .sum();
    assert_eq!(launches, 2 * u128::from(BIG));
}

#[test]
fn a_recording_an_opening_report_read_is_metered_whole_with_other_inputs() {
    let dir = ok(tempfile::tempdir());
    let a = gmr(&dir, "a.gmr", &small(31, 1, 3_000));
    let b = raw(&dir, "b.bin", &small(32, 1, 3_000));
    let first = ok(meter_inputs(
        std::slice::from_ref(&a.0),
        &UsageOptions::default(),
    ));
    let opening = dir.path().join("first.json");
    ok(std::fs::write(&opening, json(&first)));
    let options = UsageOptions {
        opening: Some(opening),
        ..UsageOptions::default()
    };
    for order in orders(&[a.clone(), b.clone()]) {
        let paths: Vec<(&Path, CuptiFormat)> =
            order.iter().map(|(p, f)| (p.as_path(), *f)).collect();
        let mut m = Meter::new(MeterConfig::default());
        ok(m.continue_from(&first));
        let refused = ok(meter_files(&mut m, &paths, &opts(ApiVersion::Cupti12_8)));
        assert!(refused.is_none(), "{order:?} streamed");
        // The whole-file path, continuing the first report: a.gmr's work is billed already.
        whole_into(&mut m, &order, ApiVersion::Cupti12_8);
        let whole = json(&ok(m.finish()));
        let paths: Vec<PathBuf> = order.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(json(&ok(meter_inputs(&paths, &options))), whole);
    }
}
