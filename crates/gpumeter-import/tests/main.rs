//! Integration tests of the importers: the real traces of `shared/data` against
//! `shared/data/EXPECTED.md`, and synthetic files for the edge cases.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gpumeter_core::{Meter, MeterConfig, MeterKind, TenantMap, TenantName, UsageReport};
use gpumeter_import::{
    detect_format, import_bytes, import_path, import_paths, DeviceCatalog, Format, ImportError,
    ImportOptions, ImportSummary, RecordLocation,
};

const BERT: &str = "tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz";
const ALEXNET: &str = "hta_alexnet_benchmark_result_2869224_1695835535_trace.json.gz";
const RANK0: &str = "hta_sampled_rank-0.json.gz";
const RANK1: &str = "hta_sampled_rank-1.json.gz";
const B200: &str = "tracelens_b200_eager_trace.json.gz";
const NSYS: &str = "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite";

/// The shared trace folder, or `None` (with a notice) when it is absent outside CI. Under
/// `CI=true` a missing folder fails the test.
fn data_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("trace data folder {} is missing (CI=true)", dir.display());
    }
    {
        // Straight to stderr, past the test harness's capture: a skip is never silent.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {} is missing; skipping this test",
            dir.display()
        );
    }
    None
}

/// A tenant name known to be valid.
fn tn(name: &str) -> TenantName {
    ok(TenantName::parse(name))
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// The key of device `id` of a source without UUIDs: `<first 16 hex of its identity>#<id>`, from the
/// summary's identity.
fn source_key(s: &ImportSummary, id: u32) -> String {
    format!("{}#{id}", &s.sha256[..16])
}

/// Imports `files` from the data folder into one default meter and finishes it.
fn meter_files(
    dir: &Path,
    files: &[&str],
    opts: &ImportOptions,
) -> (UsageReport, Vec<ImportSummary>) {
    let mut meter = Meter::new(MeterConfig::default());
    let summaries = files
        .iter()
        .map(|f| ok(import_path(&mut meter, &dir.join(f), opts)))
        .collect();
    (ok(meter.finish()), summaries)
}

/// One row of EXPECTED.md.
struct Expected {
    launches: u128,
    kernel_ns: u128,
    busy_ns: u128,
    /// `None`: not meterable.
    sm_ns: Option<u128>,
    bytes: &'static [(MeterKind, u128)],
}

fn check(report: &UsageReport, key: &str, e: &Expected) {
    let t = |m| report.device_total(key, m);
    assert_eq!(
        t(MeterKind::KernelLaunches),
        e.launches,
        "{key} kernel_launches"
    );
    assert_eq!(t(MeterKind::KernelNs), e.kernel_ns, "{key} kernel_ns");
    assert_eq!(t(MeterKind::GpuBusyNs), e.busy_ns, "{key} gpu_busy_ns");
    let dev = report
        .device(key)
        .unwrap_or_else(|| panic!("no device {key} in the report"));
    let sm_not_meterable = dev.not_meterable.iter().any(|n| n.meter == MeterKind::SmNs);
    match e.sm_ns {
        Some(sm) => {
            assert!(!sm_not_meterable, "{key}: sm_ns should be meterable");
            assert_eq!(t(MeterKind::SmNs), sm, "{key} sm_ns");
        }
        None => {
            assert!(sm_not_meterable, "{key}: sm_ns should be not meterable");
            assert!(
                !report
                    .totals
                    .iter()
                    .any(|r| r.device_key == key && r.meter == MeterKind::SmNs),
                "{key}: no sm_ns totals expected"
            );
        }
    }
    let byte_meters = [
        MeterKind::MemcpyHtodBytes,
        MeterKind::MemcpyDtohBytes,
        MeterKind::MemcpyDtodBytes,
        MeterKind::MemcpyPeerBytes,
        MeterKind::MemcpyOtherBytes,
        MeterKind::MemsetBytes,
    ];
    for m in byte_meters {
        let want = e.bytes.iter().find(|(k, _)| *k == m).map_or(0, |(_, v)| *v);
        assert_eq!(t(m), want, "{key} {m}");
    }
    assert!(
        report.loss.iter().all(|l| l.device_key != key),
        "{key}: unexpected loss {:?}",
        report.loss
    );
}

mod expected {
    use super::*;

    #[test]
    fn bert_h100() {
        let Some(dir) = data_dir() else { return };
        let (report, s) = meter_files(&dir, &[BERT], &ImportOptions::default());
        assert_eq!(s[0].format, Format::Kineto);
        assert_eq!(s[0].device_keys, vec![source_key(&s[0], 0)]);
        // The key names the content (item 3 of issue 30), never the file.
        assert!(
            !s[0].device_keys[0].contains("json"),
            "{:?}",
            s[0].device_keys
        );
        check(
            &report,
            &s[0].device_keys[0],
            &Expected {
                launches: 60,
                kernel_ns: 307_197,
                busy_ns: 309_437,
                sm_ns: Some(26_111_418),
                bytes: &[(MeterKind::MemcpyDtohBytes, 1)],
            },
        );
        assert_eq!(
            report.devices.len(),
            1,
            "only devices with activity are reported"
        );
        assert_eq!(
            report.devices[0].name.as_deref(),
            Some("NVIDIA H100 80GB HBM3")
        );
        assert_eq!(report.devices[0].sm_count, Some(132));
        assert_eq!(report.devices[0].compute_capability.as_deref(), Some("9.0"));
        assert_eq!(report.records.kernel, 60);
        assert_eq!(report.records.memcpy, 1);
        assert_eq!(report.records.skipped.get("gpu_user_annotation"), Some(&1));
        assert_eq!(report.sources[0].name, BERT);
        assert_eq!(report.sources[0].format, "kineto");
        assert_eq!(report.sources[0].sha256.len(), 64);
        // Windows are real UTC times (2025-07-18), from baseTimeNanoseconds + ts.
        assert!(report
            .usage
            .iter()
            .all(|u| u.window_start.starts_with("2025-07-18T")));
    }

    #[test]
    fn alexnet_cuda_sync_not_billed() {
        let Some(dir) = data_dir() else { return };
        let (report, s) = meter_files(&dir, &[ALEXNET], &ImportOptions::default());
        check(
            &report,
            &s[0].device_keys[0],
            &Expected {
                launches: 79,
                kernel_ns: 10_692_000,
                busy_ns: 66_141_000,
                sm_ns: Some(1_147_272_000),
                bytes: &[
                    (MeterKind::MemcpyHtodBytes, 244_403_360),
                    (MeterKind::MemsetBytes, 21_760),
                ],
            },
        );
        assert_eq!(report.records.skipped.get("cuda_sync"), Some(&41));
        assert_eq!(report.records.skipped.get("Trace"), Some(&1));
        assert_eq!(s[0].skipped, 42);
        assert_eq!(s[0].records, 79 + 16 + 3);
        assert_eq!(report.devices.len(), 1, "8 GPUs listed, one with activity");
    }

    #[test]
    fn sampled_ranks_together() {
        let Some(dir) = data_dir() else { return };
        let (report, s) = meter_files(&dir, &[RANK0, RANK1], &ImportOptions::default());
        assert_eq!(report.devices.len(), 2);
        assert_eq!(s[0].device_keys, vec![source_key(&s[0], 0)]);
        assert_eq!(s[1].device_keys, vec![source_key(&s[1], 1)]);
        assert_eq!(s[0].source_name, RANK0);
        assert_eq!(s[1].source_name, RANK1);
        check(
            &report,
            &s[0].device_keys[0],
            &Expected {
                launches: 1154,
                kernel_ns: 606_519_000,
                busy_ns: 547_656_000,
                sm_ns: None,
                bytes: &[
                    (MeterKind::MemcpyHtodBytes, 4_866_112),
                    (MeterKind::MemcpyDtohBytes, 6_115),
                    (MeterKind::MemcpyDtodBytes, 209_194_904),
                    (MeterKind::MemsetBytes, 8_030_732),
                ],
            },
        );
        check(
            &report,
            &s[1].device_keys[0],
            &Expected {
                launches: 1104,
                kernel_ns: 651_026_000,
                busy_ns: 580_050_000,
                sm_ns: None,
                bytes: &[
                    (MeterKind::MemcpyHtodBytes, 63_474_164),
                    (MeterKind::MemcpyDtohBytes, 2_396),
                    (MeterKind::MemcpyDtodBytes, 3_298_965_512),
                    (MeterKind::MemsetBytes, 856),
                ],
            },
        );
        assert_eq!(report.devices[1].device, 1);
        assert!(report
            .devices
            .iter()
            .all(|d| d.sm_count.is_none() && d.name.is_none()));
    }

    #[test]
    fn b200() {
        let Some(dir) = data_dir() else { return };
        let (report, s) = meter_files(&dir, &[B200], &ImportOptions::default());
        check(
            &report,
            &s[0].device_keys[0],
            &Expected {
                launches: 768,
                kernel_ns: 10_862_916,
                busy_ns: 11_596_482,
                sm_ns: Some(1_171_616_708),
                bytes: &[
                    (MeterKind::MemcpyHtodBytes, 33_109),
                    (MeterKind::MemcpyDtodBytes, 771_323_904),
                ],
            },
        );
        assert_eq!(report.devices[0].name.as_deref(), Some("NVIDIA B200"));
        assert_eq!(report.devices[0].sm_count, Some(148));
    }

    const NSYS_EXPECTED: Expected = Expected {
        launches: 5,
        kernel_ns: 88_573_480,
        busy_ns: 373_273_080,
        sm_ns: Some(177_146_960),
        bytes: &[
            (MeterKind::MemcpyHtodBytes, 2_621_440_000),
            (MeterKind::MemcpyDtohBytes, 1_310_720_000),
        ],
    };

    #[test]
    fn nsys_sqlite() {
        let Some(dir) = data_dir() else { return };
        let (report, s) = meter_files(&dir, &[NSYS], &ImportOptions::default());
        assert_eq!(s[0].format, Format::Nsys);
        let key = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";
        assert_eq!(s[0].device_keys, vec![key.to_string()]);
        check(&report, key, &NSYS_EXPECTED);
        let dev = report.device(key).unwrap_or_else(|| panic!("no device"));
        assert_eq!(dev.name.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
        assert_eq!(dev.sm_count, Some(108));
        assert_eq!(dev.compute_capability.as_deref(), Some("8.0"));
        assert_eq!(report.sources[0].format, "nsys");
        // Session start 2023-06-26T21:00:57Z + relative ns.
        assert!(report
            .usage
            .iter()
            .all(|u| u.window_start == "2023-06-26T21:00:00Z"));
    }

    #[test]
    fn nsys_from_bytes_and_process_ids() {
        let Some(dir) = data_dir() else { return };
        let bytes = ok(std::fs::read(dir.join(NSYS)));
        let mut meter = Meter::new(MeterConfig::default());
        // (globalPid >> 24) & 0xFFFFFF of 302119223558144.
        meter.set_tenant_map(TenantMap {
            external: HashMap::new(),
            pid: HashMap::from([(1_230_493, tn("carol"))]),
        });
        let s = ok(import_bytes(
            &mut meter,
            NSYS,
            &bytes,
            &ImportOptions::default(),
        ));
        let report = ok(meter.finish());
        check(&report, &s.device_keys[0], &NSYS_EXPECTED);
        assert!(
            report.totals.iter().all(|t| t.tenant == "carol"),
            "{:?}",
            report.totals
        );
    }
}

mod errors {
    use super::*;

    fn untouched(meter: Meter) {
        let report = ok(meter.finish());
        assert!(report.sources.is_empty() && report.devices.is_empty() && report.totals.is_empty());
    }

    #[test]
    fn truncated_gzip_names_the_file() {
        let Some(dir) = data_dir() else { return };
        let bytes = ok(std::fs::read(dir.join(BERT)));
        let tmp = ok(tempfile::tempdir());
        let path = tmp.path().join("half.json.gz");
        ok(std::fs::write(&path, &bytes[..bytes.len() / 2]));
        let mut meter = Meter::new(MeterConfig::default());
        match import_path(&mut meter, &path, &ImportOptions::default()) {
            Err(e @ ImportError::Gzip { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("half.json.gz") && msg.contains("truncated or corrupt gzip"),
                    "{msg}"
                );
                if let ImportError::Gzip { path: p, .. } = e {
                    assert_eq!(p, path);
                }
            }
            other => panic!("expected a gzip error, got {other:?}"),
        }
        untouched(meter);
    }

    #[test]
    fn json_that_is_not_a_trace() {
        let mut meter = Meter::new(MeterConfig::default());
        for text in [r#"{"a":1}"#, r#"{"traceEvents": 5}"#, "[1, 2]", "\"x\""] {
            match import_bytes(
                &mut meter,
                "x.json",
                text.as_bytes(),
                &ImportOptions {
                    format: Format::Kineto,
                    catalog: None,
                },
            ) {
                Err(ImportError::NotATrace { path, .. }) => {
                    assert_eq!(path, PathBuf::from("x.json"))
                }
                other => panic!("{text}: expected NotATrace, got {other:?}"),
            }
        }
        untouched(meter);
    }

    #[test]
    fn garbage() {
        let mut meter = Meter::new(MeterConfig::default());
        let opts = ImportOptions::default();
        match import_bytes(&mut meter, "noise.bin", b"\x00\x01garbage", &opts) {
            Err(ImportError::UnknownFormat { path }) => {
                assert_eq!(path, PathBuf::from("noise.bin"))
            }
            other => panic!("expected UnknownFormat, got {other:?}"),
        }
        // Positions are in the whole file, as a plain JSON parse of it reports them.
        for text in [
            &b"{\n  \"traceEvents\": [\n   {\"ph\": }\n]}"[..],
            // (An element that is not an object, `7`, is valid JSON: counted, see
            // kineto_review::non_object_elements_are_counted_and_the_rest_is_metered.)
            b"{\"x\": 1, \"traceEvents\": [{\"ph\": \"X\"}, 7,]}",
            b"{\"traceEvents\": [",
            b"{\"traceEvents\": [{\"name\": \"\xff\"}]}",
        ] {
            let whole = match serde_json::from_slice::<serde_json::Value>(text) {
                Err(e) => (e.line(), e.column()),
                Ok(_) => (0, 0),
            };
            match import_bytes(&mut meter, "t.json", text, &opts) {
                Err(ImportError::Json {
                    path, line, column, ..
                }) => {
                    assert_eq!(path, PathBuf::from("t.json"));
                    if whole != (0, 0) {
                        assert_eq!((line, column), whole, "{}", String::from_utf8_lossy(text));
                    }
                }
                other => panic!("expected Json, got {other:?}"),
            }
        }
        let nsys = ImportOptions {
            format: Format::Nsys,
            catalog: None,
        };
        match import_bytes(
            &mut meter,
            "t.sqlite",
            b"not a database at all, not even close....",
            &nsys,
        ) {
            Err(ImportError::Sqlite { path, .. }) => assert_eq!(path, PathBuf::from("t.sqlite")),
            other => panic!("expected Sqlite, got {other:?}"),
        }
        let tmp = ok(tempfile::tempdir());
        let missing = tmp.path().join("missing.json");
        match import_path(&mut meter, &missing, &opts) {
            Err(ImportError::Io { path, .. }) => assert_eq!(path, missing),
            other => panic!("expected Io, got {other:?}"),
        }
        untouched(meter);
    }

    #[test]
    fn sqlite_without_activity_tables() {
        let tmp = ok(tempfile::tempdir());
        let path = tmp.path().join("other.sqlite");
        {
            let conn = ok(rusqlite::Connection::open(&path));
            ok(conn.execute_batch("CREATE TABLE recipes (id INTEGER, name TEXT); INSERT INTO recipes VALUES (1, 'soup');"));
        }
        let mut meter = Meter::new(MeterConfig::default());
        match import_path(&mut meter, &path, &ImportOptions::default()) {
            Err(e @ ImportError::NoActivityTables { .. }) => {
                assert!(e.to_string().contains("other.sqlite"))
            }
            other => panic!("expected NoActivityTables, got {other:?}"),
        }
        untouched(meter);
    }

    #[test]
    fn a_bad_field_loses_its_record_and_a_warning_names_record_field_and_value() {
        let text = r#"{"traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 1, "args": {"device": 0}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 20, "dur": 1, "args": {"device": 0, "bytes": "many"}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_bytes(
            &mut meter,
            "bad.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ));
        assert_eq!(s.records, 2, "both records are accounted for");
        let key = source_key(&s, 0);
        let r = ok(meter.finish());
        assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 1);
        assert_eq!(r.records.memcpy, 0);
        assert_eq!(r.lost(&key, "invalid_field"), 1);
        let w = invalid_warning(&r);
        assert!(
            w.starts_with("bad.json: traceEvents[1]: field `args.bytes` = `many`"),
            "{w}"
        );
    }

    #[test]
    fn a_file_level_fault_leaves_the_meter_untouched() {
        // A negative baseTimeNanoseconds is the whole file's clock: no record can be placed.
        let text = r#"{"baseTimeNanoseconds": -5, "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 1, "args": {"device": 0}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        match import_bytes(
            &mut meter,
            "bad.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ) {
            Err(ImportError::BadField {
                path,
                record,
                field,
                value,
                ..
            }) => {
                assert_eq!(path, PathBuf::from("bad.json"));
                assert_eq!(record, RecordLocation::TopLevel);
                assert_eq!(field, "baseTimeNanoseconds");
                assert_eq!(value, "-5");
            }
            other => panic!("expected BadField, got {other:?}"),
        }
        untouched(meter);
    }
}

/// The report's one `invalid_field` warning.
fn invalid_warning(r: &UsageReport) -> String {
    let w: Vec<&gpumeter_core::Warning> = r
        .warnings
        .iter()
        .filter(|w| w.contains("(invalid_field)"))
        .collect();
    assert_eq!(w.len(), 1, "{:?}", r.warnings);
    w[0].to_string()
}

mod synthetic {
    use super::*;

    fn import(text: &str, meter: &mut Meter) -> ImportSummary {
        ok(import_bytes(
            meter,
            "synthetic.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ))
    }

    #[test]
    fn loss_for_negative_dur_and_zero_ts() {
        let text = r#"{"baseTimeNanoseconds": 1700000000000000000, "deviceProperties": [{"id": 0, "name": "G", "numSms": 10}], "traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "good1", "pid": 0, "tid": 7, "ts": 100.0, "dur": 2.5, "args": {"device": 0, "stream": 7, "correlation": 1, "grid": [4, 1, 1]}},
          {"ph": "X", "cat": "kernel", "name": "neg", "pid": 0, "tid": 7, "ts": 110.0, "dur": -3, "args": {"device": 0, "stream": 7, "correlation": 2, "grid": [4, 1, 1]}},
          {"ph": "X", "cat": "kernel", "name": "zero", "pid": 0, "tid": 7, "ts": 0, "dur": 1.0, "args": {"device": 0, "stream": 7, "correlation": 3, "grid": [4, 1, 1]}},
          {"ph": "X", "cat": "kernel", "name": "good2", "pid": 0, "tid": 7, "ts": 120.000, "dur": 1.5, "args": {"device": 0, "stream": 7, "correlation": 4, "grid": [40, 1, 1]}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        let s = import(text, &mut meter);
        assert_eq!(s.records, 4);
        let report = ok(meter.finish());
        let key = &source_key(&s, 0);
        assert_eq!(report.lost(key, "end_before_start"), 1);
        assert_eq!(report.lost(key, "zero_timestamp"), 1);
        assert_eq!(report.device_total(key, MeterKind::KernelLaunches), 2);
        assert_eq!(report.device_total(key, MeterKind::KernelNs), 4_000);
        assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), 4_000);
        assert_eq!(
            report.device_total(key, MeterKind::SmNs),
            4 * 2_500 + 10 * 1_500
        );
    }

    #[test]
    fn schema_2021() {
        let text = r#"{"schemaVersion": 1, "traceEvents": [
          {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 1621401187223000, "dur": 5, "args": {"correlation": 9, "external id": 77}},
          {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 1621401187223005, "dur": 3, "args": {"correlation": 9, "external id": 77, "grid": [1, 1, 1], "block": [128, 1, 1], "registers per thread": 32, "shared memory": 0}},
          {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": "stream 7", "ts": 1621401187223010, "dur": 2, "args": {"correlation": 10, "bytes": 64}},
          {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7", "ts": 1621401187223020, "dur": 1, "args": {"correlation": 11, "bytes": 16}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        meter.set_tenant_map(TenantMap {
            external: HashMap::new(),
            pid: HashMap::from([(4242, tn("carol"))]),
        });
        let s = import(text, &mut meter);
        assert_eq!(s.records, 3);
        let report = ok(meter.finish());
        let key = &source_key(&s, 0);
        assert_eq!(report.device_total(key, MeterKind::KernelLaunches), 1);
        assert_eq!(report.device_total(key, MeterKind::KernelNs), 3_000);
        assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), 6_000);
        assert_eq!(report.device_total(key, MeterKind::MemcpyDtohBytes), 64);
        assert_eq!(report.device_total(key, MeterKind::MemsetBytes), 16);
        // The kernel's correlation joins the Runtime event of pid 4242; the copies have no
        // matching API event.
        let carol: Vec<_> = report
            .totals
            .iter()
            .filter(|t| t.tenant == "carol")
            .map(|t| t.meter)
            .collect();
        assert!(
            carol.contains(&MeterKind::KernelNs) && !carol.contains(&MeterKind::MemcpyDtohBytes),
            "{carol:?}"
        );
        // Absolute µs: 2021-05-19T05:13:07Z.
        assert!(
            report
                .usage
                .iter()
                .all(|u| u.window_start == "2021-05-19T05:00:00Z"),
            "{:?}",
            report.usage
        );
    }

    #[test]
    fn modern_exact_ns() {
        let text = r#"{"baseTimeNanoseconds": 1000000000000, "traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.001, "dur": 0.999, "args": {"device": 0, "stream": 7}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.001, "dur": 0.0005, "args": {"device": 0, "stream": 8}},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.001, "dur": 0.0015, "args": {"device": 0, "stream": 9}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        let s = import(text, &mut meter);
        let report = ok(meter.finish());
        let key = &source_key(&s, 0);
        // start 1_000_000_001_001; durations 999, round-half-even(0.5) = 0, (1.5) = 2.
        assert_eq!(report.device_total(key, MeterKind::KernelNs), 999 + 2);
        assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), 999);
        assert_eq!(report.device_total(key, MeterKind::KernelLaunches), 3);
        assert!(report.loss.is_empty());
        assert_eq!(
            gpumeter_import::units::micros_text_to_ns("1.001"),
            Ok(1_001)
        );
        assert_eq!(1_000_000_000_000 + 1_001, 1_000_000_001_001_i128);
    }

    #[test]
    fn modern_start_is_base_plus_ts() {
        // One kernel from 1_000_000_001_001 to 1_000_000_002_000, one window of 60 s: its
        // window start shows the absolute start's window; a second file shifted by one window
        // lands in the next.
        let text = r#"{"baseTimeNanoseconds": 59999999999000, "traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0.999, "dur": 1.0, "args": {"device": 0}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig {
            window: ok(gpumeter_core::WindowSize::parse("60s")),
            ..MeterConfig::default()
        });
        import(text, &mut meter);
        let report = ok(meter.finish());
        // start = 59_999_999_999_999 (1 ns before the 1000th minute edge), end 1000 ns later.
        let kernel_rows: Vec<_> = report
            .usage
            .iter()
            .filter(|u| u.meter == MeterKind::KernelNs)
            .map(|u| (u.window_start.clone(), u.quantity.0))
            .collect();
        assert_eq!(
            kernel_rows,
            vec![
                ("1970-01-01T16:39:00Z".to_string(), 1),
                ("1970-01-01T16:40:00Z".to_string(), 999)
            ]
        );
    }

    #[test]
    fn process_id_join_from_cuda_runtime() {
        let text = r#"{"traceEvents": [
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 1, "ts": 1700000000000000, "dur": 5, "args": {"correlation": 100, "External id": 1}},
          {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 5353, "tid": 1, "ts": 1700000000000001, "dur": 5, "args": {"correlation": 200}},
          {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 1700000000000010, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 100, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 1700000000000020, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 200}},
          {"ph": "X", "cat": "kernel", "name": "c", "pid": 0, "tid": 7, "ts": 1700000000000030, "dur": 4, "args": {"device": 0, "stream": 7, "correlation": 300}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        meter.set_tenant_map(TenantMap {
            external: HashMap::new(),
            pid: HashMap::from([
                (4242, tn("carol")),
                (5353, tn("dave")),
                (0, tn("device-index-is-not-a-pid")),
            ]),
        });
        import(text, &mut meter);
        let report = ok(meter.finish());
        let kernel_ns = |tenant: &str| {
            report
                .totals
                .iter()
                .filter(|t| t.tenant == tenant && t.meter == MeterKind::KernelNs)
                .map(|t| t.quantity.0)
                .sum::<u128>()
        };
        assert_eq!(kernel_ns("carol"), 2_000);
        assert_eq!(kernel_ns("dave"), 3_000);
        assert_eq!(kernel_ns("unattributed"), 4_000);
        assert_eq!(kernel_ns("device-index-is-not-a-pid"), 0);
    }

    #[test]
    fn kineto_external_id_is_not_an_attribution_id() {
        // Kineto's `External id` is PyTorch's operator id: records carry none, so an
        // `[external]` rule for that number never matches; the pid rule does.
        let text = r#"{"traceEvents": [
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 1, "ts": 1700000000000000, "dur": 5, "args": {"correlation": 100, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 1700000000000010, "dur": 2, "args": {"device": 0, "stream": 7, "correlation": 100, "External id": 1}},
          {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 1700000000000020, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 300, "External id": 2}},
          {"ph": "X", "cat": "kernel", "name": "c", "pid": 0, "tid": 7, "ts": 1700000000000030, "dur": 4, "args": {"device": 0, "stream": 7, "correlation": 301, "External id": "not a number"}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        meter.set_tenant_map(TenantMap {
            external: HashMap::from([(1, tn("alice")), (2, tn("bob"))]),
            pid: HashMap::from([(4242, tn("carol"))]),
        });
        let s = import(text, &mut meter);
        assert_eq!(
            s.records, 3,
            "a malformed `External id` is not read, not an error"
        );
        let report = ok(meter.finish());
        let kernel_ns = |tenant: &str| {
            report
                .totals
                .iter()
                .filter(|t| t.tenant == tenant && t.meter == MeterKind::KernelNs)
                .map(|t| t.quantity.0)
                .sum::<u128>()
        };
        assert_eq!(kernel_ns("alice"), 0);
        assert_eq!(kernel_ns("bob"), 0);
        assert_eq!(kernel_ns("carol"), 2_000);
        assert_eq!(kernel_ns("unattributed"), 7_000);
    }

    #[test]
    fn times_outside_u64_ns_are_lost_naming_the_side() {
        // Each bad event beside a good one: the good one is metered, the bad one is lost
        // (`invalid_field`) and the warning names the field that puts it outside u64 ns.
        let bad = |event: &str| -> String {
            let text = format!(
                r#"{{"traceEvents": [{event},
                {{"ph": "X", "cat": "kernel", "pid": 0, "ts": 100, "dur": 1, "args": {{"device": 0}}}}]}}"#
            );
            let mut meter = Meter::new(MeterConfig::default());
            let s = ok(import_bytes(
                &mut meter,
                "range.json",
                text.as_bytes(),
                &ImportOptions::default(),
            ));
            let key = source_key(&s, 0);
            let r = ok(meter.finish());
            assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 1);
            assert_eq!(r.lost(&key, "invalid_field"), 1);
            invalid_warning(&r)
        };
        // 18446744073709552 µs = 18_446_744_073_709_552_000 ns > u64::MAX.
        let w = bad(
            r#"{"ph": "X", "cat": "kernel", "pid": 0, "ts": 18446744073709552, "dur": 1, "args": {"device": 0}}"#,
        );
        assert!(w.contains("field `ts`") && w.contains("after 2554"), "{w}");
        // The start fits, the end does not.
        let w = bad(
            r#"{"ph": "X", "cat": "kernel", "pid": 0, "ts": 18446744073709551, "dur": 1, "args": {"device": 0}}"#,
        );
        assert!(w.contains("field `dur`") && w.contains("after 2554"), "{w}");
        let w = bad(
            r#"{"ph": "X", "cat": "kernel", "pid": 0, "ts": -5, "dur": 1, "args": {"device": 0}}"#,
        );
        assert!(w.contains("field `ts`") && w.contains("before 1970"), "{w}");
    }

    #[test]
    fn a_540_year_duration_is_too_long_not_an_error() {
        // Integer-µs (2021 schema) trace: 540 years of µs do not fit u64 ns after the start.
        let years_540_us: u64 = 540 * 365 * 86_400 * 1_000_000;
        let text = format!(
            r#"{{"traceEvents": [
            {{"ph": "X", "cat": "Kernel", "pid": 0, "ts": 1682725898082228, "dur": {years_540_us}, "args": {{"device": 0}}}},
            {{"ph": "X", "cat": "Kernel", "pid": 0, "ts": 1682725898082300, "dur": 5, "args": {{"device": 0}}}}]}}"#
        );
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_bytes(
            &mut meter,
            "long.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ));
        let key = source_key(&s, 0);
        let r = ok(meter.finish());
        assert_eq!(r.device_total(&key, MeterKind::KernelNs), 5_000);
        assert_eq!(r.lost(&key, "too_long"), 1);
    }

    #[test]
    fn a_base_beyond_2554_blames_base_time_nanoseconds() {
        let text = r#"{"baseTimeNanoseconds": 18446744073709551616, "traceEvents": [
            {"ph": "X", "cat": "kernel", "pid": 0, "ts": 1, "dur": 1, "args": {"device": 0}}]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        match import_bytes(
            &mut meter,
            "base.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ) {
            Err(ImportError::BadField { field, reason, .. }) => {
                assert_eq!(field, "baseTimeNanoseconds");
                assert!(reason.contains("after 2554"), "{reason}");
            }
            other => panic!("expected BadField, got {other:?}"),
        }
    }

    #[test]
    fn unsorted_input_is_sorted_before_metering() {
        // Two kernels 2 minutes apart written in reverse order: with a 60 s reordering horizon
        // the second would be late if the importer did not sort.
        let text = r#"{"traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "late", "pid": 0, "tid": 7, "ts": 1700000120000000, "dur": 1, "args": {"device": 0}},
          {"ph": "X", "cat": "kernel", "name": "early", "pid": 0, "tid": 7, "ts": 1700000000000000, "dur": 1, "args": {"device": 0}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        let s = import(text, &mut meter);
        let report = ok(meter.finish());
        assert!(report.loss.is_empty(), "{:?}", report.loss);
        assert_eq!(
            report.device_total(&source_key(&s, 0), MeterKind::KernelLaunches),
            2
        );
    }

    #[test]
    fn device_from_pid_when_args_lack_it_and_uuid_keys() {
        let text = r#"{"deviceProperties": [{"id": 3, "name": "G", "numSms": 8, "uuid": "abcd"}], "traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "tid": 7, "ts": 1700000000000000, "dur": 1},
          {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "pid": 3, "tid": 7, "ts": 1700000000000002, "dur": 1, "args": {"bytes": 5}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        let s = import(text, &mut meter);
        assert_eq!(s.device_keys, vec!["GPU-abcd".to_string()]);
        let report = ok(meter.finish());
        assert_eq!(report.devices[0].device, 3);
        assert_eq!(
            report.device_total("GPU-abcd", MeterKind::MemcpyPeerBytes),
            5
        );
        assert_eq!(report.device_total("GPU-abcd", MeterKind::GpuBusyNs), 2_000);
    }

    #[test]
    fn duplicate_source_is_metered_once() {
        let text = r#"{"traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1700000000000000, "dur": 1, "args": {"device": 0}}
        ]}"#;
        let mut meter = Meter::new(MeterConfig::default());
        let first = import(text, &mut meter);
        let second = ok(import_bytes(
            &mut meter,
            "copy.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ));
        assert!(!first.duplicate_source);
        assert!(second.duplicate_source);
        assert_eq!(second.records, 0);
        let report = ok(meter.finish());
        assert_eq!(report.sources.len(), 1);
        // Same bytes, same SHA-256: the same device key whatever the name.
        assert_eq!(second.device_keys, vec![source_key(&second, 0)]);
        assert_eq!(
            report.device_total(&source_key(&first, 0), MeterKind::KernelLaunches),
            1
        );
        assert!(report.warnings.iter().any(|w| w.contains("copy.json")));
    }

    #[test]
    fn plain_and_gzip_give_the_same_usage() {
        use std::io::Write;
        let text = r#"{"traceEvents": [
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1700000000000000, "dur": 1, "args": {"device": 0}}
        ]}"#;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        ok(gz.write_all(text.as_bytes()));
        let gz = ok(gz.finish());
        // The name says JSON; the magic bytes say gzip: the bytes win.
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_bytes(
            &mut meter,
            "t.json",
            &gz,
            &ImportOptions::default(),
        ));
        assert_eq!(s.records, 1);
        let report = ok(meter.finish());
        assert_eq!(
            report.device_total(&source_key(&s, 0), MeterKind::KernelNs),
            1_000
        );
    }

    #[test]
    fn detection() {
        let p = Path::new("x");
        assert_eq!(
            detect_format(p, b"SQLite format 3\0...."),
            Some(Format::Nsys)
        );
        assert_eq!(detect_format(p, &[0x1f, 0x8b, 8, 0]), Some(Format::Kineto));
        assert_eq!(
            detect_format(p, b"  \n{\"traceEvents\""),
            Some(Format::Kineto)
        );
        assert_eq!(detect_format(p, b"\xEF\xBB\xBF{"), Some(Format::Kineto));
        assert_eq!(detect_format(p, b"garbage"), None);
        assert_eq!(
            detect_format(Path::new("a/t.sqlite"), b""),
            Some(Format::Nsys)
        );
        assert_eq!(
            detect_format(Path::new("a/t.JSON"), b""),
            Some(Format::Kineto)
        );
        assert_eq!(Format::parse("nsys"), Some(Format::Nsys));
        assert_eq!(Format::parse("auto"), Some(Format::Auto));
        assert_eq!(Format::parse("gmr"), None);
        assert_eq!("kineto".parse::<Format>(), Ok(Format::Kineto));
        assert_eq!(Format::Kineto.to_string(), "kineto");
    }
}

mod nsys_synthetic {
    use super::*;

    fn build(sql: &str) -> (tempfile::TempDir, PathBuf) {
        let tmp = ok(tempfile::tempdir());
        let path = tmp.path().join("s.sqlite");
        let conn = ok(rusqlite::Connection::open(&path));
        ok(conn.execute_batch(sql));
        drop(conn);
        (tmp, path)
    }

    #[test]
    fn memcpy_only_without_kernel_table_or_gpu_table() {
        let (_tmp, path) = build(
            r#"CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
               INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '');
               CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, "end" INTEGER, deviceId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (300, 400, 2, NULL, 10, 10);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (100, 200, 2, NULL, 7, 8);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (150, 100, 2, NULL, 1, 1);"#,
        );
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, &path, &ImportOptions::default()));
        assert_eq!(s.records, 3);
        assert_eq!(s.device_keys, vec![source_key(&s, 2)]);
        let report = ok(meter.finish());
        let key = &source_key(&s, 2);
        assert_eq!(report.device_total(key, MeterKind::MemcpyPeerBytes), 10);
        assert_eq!(report.device_total(key, MeterKind::MemcpyDtodBytes), 7);
        assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), 200);
        assert_eq!(report.lost(key, "end_before_start"), 1);
        assert!(report.warnings.iter().all(|w| !w.contains("absolute")));
    }

    #[test]
    fn same_file_name_in_two_folders_is_two_devices() {
        let table = r#"CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, smCount INTEGER);
            CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);"#;
        let (_ta, a) = build(&format!(
            "{table} INSERT INTO TARGET_INFO_GPU VALUES (0, 'GA', 10);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1700000000000000000, 1700000000000000050, 0, 4);"
        ));
        let (_tb, b) = build(&format!(
            "{table} INSERT INTO TARGET_INFO_GPU VALUES (0, 'GB', 20);
             INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1700000000000000000, 1700000000000000070, 0, 8);"
        ));
        assert_eq!(a.file_name(), b.file_name());
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_paths(&mut meter, &[a, b], &ImportOptions::default()));
        let report = ok(meter.finish());
        let (ka, kb) = (source_key(&s[0], 0), source_key(&s[1], 0));
        assert_ne!(ka, kb);
        assert_eq!(report.devices.len(), 2);
        for (key, name, sms, bytes, busy) in [(&ka, "GA", 10, 4, 50), (&kb, "GB", 20, 8, 70)] {
            let dev = report
                .device(key)
                .unwrap_or_else(|| panic!("no device {key}"));
            assert_eq!((dev.name.as_deref(), dev.sm_count), (Some(name), Some(sms)));
            assert_eq!(report.device_total(key, MeterKind::MemsetBytes), bytes);
            assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), busy);
        }
        assert!(report.loss.is_empty(), "{:?}", report.loss);
    }

    #[test]
    fn session_offsets_past_i64_are_valid_and_before_1970_is_named() {
        // utcEpochNs + start = 2^63 (in 2262): past i64 but within u64 ns.
        let (_tmp, path) = build(
            r#"CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
               INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (9223372036854775807);
               CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1, 2, 0, 4);"#,
        );
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, &path, &ImportOptions::default()));
        assert_eq!(s.records, 1);
        let report = ok(meter.finish());
        assert_eq!(
            report.device_total(&source_key(&s, 0), MeterKind::MemsetBytes),
            4
        );
        let (_tmp2, path) = build(
            r#"CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
               INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (5);
               CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (-10, 2, 0, 4);"#,
        );
        // A record-level fault: the record is lost, the warning names the field (issue 9).
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, &path, &ImportOptions::default()));
        let report = ok(meter.finish());
        assert_eq!(report.lost(&source_key(&s, 0), "invalid_field"), 1);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("field `start` = `-10`") && w.contains("before 1970")),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn without_session_start_times_are_absolute_with_a_warning() {
        let (_tmp, path) = build(
            r#"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1700000000000000000, 1700000000000000050, 0, 4);"#,
        );
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_path(&mut meter, &path, &ImportOptions::default()));
        let report = ok(meter.finish());
        let key = &source_key(&s, 0);
        assert_eq!(report.device_total(key, MeterKind::MemsetBytes), 4);
        assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), 50);
        assert!(
            report.warnings.iter().any(|w| w.contains("absolute")),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn missing_required_column_and_bad_values() {
        let (_tmp, path) =
            build(r#"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, deviceId INTEGER);"#);
        let mut meter = Meter::new(MeterConfig::default());
        match import_path(&mut meter, &path, &ImportOptions::default()) {
            Err(ImportError::MissingColumn { table, column, .. }) => {
                assert_eq!(
                    (table.as_str(), column.as_str()),
                    ("CUPTI_ACTIVITY_KIND_KERNEL", "end")
                );
            }
            other => panic!("expected MissingColumn, got {other:?}"),
        }
        let (_tmp2, path) = build(
            r#"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, "end" INTEGER, deviceId INTEGER, bytes INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1, 2, 0, 'lots');"#,
        );
        // A record-level fault: the record is lost, the warning names it (issue 9).
        let s = ok(import_path(&mut meter, &path, &ImportOptions::default()));
        let report = ok(meter.finish());
        assert_eq!(report.sources.len(), 1, "the refused file left no source");
        assert_eq!(report.lost(&source_key(&s, 0), "invalid_field"), 1);
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.contains("CUPTI_ACTIVITY_KIND_MEMSET rowid 1: field `bytes` = `lots`")),
            "{:?}",
            report.warnings
        );
    }
}

mod nsys_hostile;

mod multi {
    use super::*;

    /// A Kineto trace with one device 0 (`props`: its `deviceProperties` entry) and kernels
    /// `(ts µs, dur µs, grid x)`.
    fn kineto(props: &str, kernels: &[(u64, u64, u32)]) -> String {
        let events: Vec<String> = kernels
            .iter()
            .enumerate()
            .map(|(i, (ts, dur, gx))| {
                format!(
                    r#"{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, "args": {{"device": 0, "stream": 7, "correlation": {i}, "grid": [{gx}, 1, 1]}}}}"#
                )
            })
            .collect();
        format!(
            r#"{{"deviceProperties": [{props}], "traceEvents": [{}]}}"#,
            events.join(",\n")
        )
    }

    #[test]
    fn same_file_name_in_two_folders_is_two_devices() {
        let tmp = ok(tempfile::tempdir());
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        ok(std::fs::create_dir(&a));
        ok(std::fs::create_dir(&b));
        let (pa, pb) = (a.join("trace.json"), b.join("trace.json"));
        // Same name, same device id, same instant; different GPUs, different bytes.
        ok(std::fs::write(
            &pa,
            kineto(
                r#"{"id": 0, "name": "GA", "numSms": 10}"#,
                &[(1_700_000_000_000_000, 2, 40)],
            ),
        ));
        ok(std::fs::write(
            &pb,
            kineto(
                r#"{"id": 0, "name": "GB", "numSms": 20}"#,
                &[(1_700_000_000_000_000, 3, 40)],
            ),
        ));
        let check = |report: &UsageReport, s: &[ImportSummary]| {
            assert_eq!(s[0].source_name, "trace.json");
            assert_eq!(s[1].source_name, "trace.json");
            assert_ne!(s[0].sha256, s[1].sha256);
            let (ka, kb) = (source_key(&s[0], 0), source_key(&s[1], 0));
            assert_ne!(ka, kb);
            assert_eq!(s[0].device_keys, vec![ka.clone()]);
            assert_eq!(s[1].device_keys, vec![kb.clone()]);
            assert_eq!(report.devices.len(), 2);
            assert!(report.loss.is_empty(), "{:?}", report.loss);
            for (key, name, sms, ns) in [(&ka, "GA", 10u32, 2_000u128), (&kb, "GB", 20, 3_000)] {
                let dev = report
                    .device(key)
                    .unwrap_or_else(|| panic!("no device {key}"));
                assert_eq!(dev.name.as_deref(), Some(name));
                assert_eq!(dev.sm_count, Some(sms));
                assert_eq!(report.device_total(key, MeterKind::KernelLaunches), 1);
                assert_eq!(report.device_total(key, MeterKind::KernelNs), ns);
                assert_eq!(report.device_total(key, MeterKind::GpuBusyNs), ns);
                // 40 blocks hold all of the device's SMs.
                assert_eq!(
                    report.device_total(key, MeterKind::SmNs),
                    u128::from(sms) * ns
                );
            }
        };
        // As one batch, and one by one.
        let mut meter = Meter::new(MeterConfig::default());
        let s = ok(import_paths(
            &mut meter,
            &[pa.clone(), pb.clone()],
            &ImportOptions::default(),
        ));
        check(&ok(meter.finish()), &s);
        let mut meter = Meter::new(MeterConfig::default());
        let s: Vec<_> = [&pa, &pb]
            .iter()
            .map(|p| ok(import_path(&mut meter, p, &ImportOptions::default())))
            .collect();
        check(&ok(meter.finish()), &s);
    }

    /// An Nsight export of one A GPU with a UUID whose session starts at `session_ns`.
    fn nsys_file(dir: &Path, name: &str, uuid: &str, session_ns: u64) -> PathBuf {
        let path = dir.join(name);
        let conn = ok(rusqlite::Connection::open(&path));
        ok(conn.execute_batch(&format!(
            r#"CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER);
               INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES ({session_ns});
               CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, uuid TEXT, smCount INTEGER);
               INSERT INTO TARGET_INFO_GPU VALUES (0, 'G', '{uuid}', 8);
               CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, "end" INTEGER, deviceId INTEGER, streamId INTEGER, correlationId INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER);
               INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10000, 13000, 0, 7, 2, 16, 1, 1);
               INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 5000, 0, 7, 1, 4, 1, 1);"#
        )));
        path
    }

    #[test]
    fn order_of_inputs_for_one_gpu_does_not_matter() {
        let tmp = ok(tempfile::tempdir());
        let uuid = "GPU-0c0ffee0-0000-0000-0000-000000000001";
        // Kineto: two kernels at 2023-11-14T22:23:20Z; Nsight: two kernels 10 minutes earlier,
        // on the same GPU (same UUID).
        let later = tmp.path().join("later.json");
        ok(std::fs::write(
            &later,
            kineto(
                &format!(r#"{{"id": 0, "name": "G", "numSms": 8, "uuid": "{uuid}"}}"#),
                &[
                    (1_700_000_600_000_000, 5, 2),
                    (1_700_000_600_000_010, 5, 64),
                ],
            ),
        ));
        let earlier = nsys_file(
            tmp.path(),
            "earlier.sqlite",
            uuid,
            1_700_000_000_000_000_000,
        );
        let run = |paths: &[PathBuf]| {
            let mut meter = Meter::new(MeterConfig::default());
            let s = ok(import_paths(&mut meter, paths, &ImportOptions::default()));
            (ok(meter.finish()), s)
        };
        let (ab, s_ab) = run(&[later.clone(), earlier.clone()]);
        let (ba, s_ba) = run(&[earlier.clone(), later.clone()]);
        for (r, s) in [(&ab, &s_ab), (&ba, &s_ba)] {
            assert!(r.loss.is_empty(), "{:?}", r.loss);
            assert!(s.iter().all(|s| s.device_keys == vec![uuid.to_string()]));
            assert_eq!(r.devices.len(), 1);
            assert_eq!(r.device_total(uuid, MeterKind::KernelLaunches), 4);
            assert_eq!(
                r.device_total(uuid, MeterKind::KernelNs),
                4_000 + 3_000 + 5_000 + 5_000
            );
            assert_eq!(
                r.device_total(uuid, MeterKind::SmNs),
                4 * 4_000 + 8 * 3_000 + 2 * 5_000 + 8 * 5_000
            );
        }
        assert_eq!(ab.totals, ba.totals);
        assert_eq!(ab.usage, ba.usage);
        assert_eq!(ab.devices, ba.devices);
        assert_eq!(ab.records, ba.records);
        // Only the order of the sources differs.
        let names = |r: &UsageReport| r.sources.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&ab), ["later.json", "earlier.sqlite"]);
        assert_eq!(names(&ba), ["earlier.sqlite", "later.json"]);
        assert_eq!(s_ab[0], s_ba[1]);
        assert_eq!(s_ab[1], s_ba[0]);
        // One by one, the later file first, the earlier file's records are beyond the
        // reordering horizon: what the batch avoids.
        let mut meter = Meter::new(MeterConfig::default());
        for p in [&later, &earlier] {
            ok(import_path(&mut meter, p, &ImportOptions::default()));
        }
        assert_eq!(ok(meter.finish()).lost(uuid, "late"), 2);
    }

    #[test]
    fn a_failing_input_leaves_the_meter_untouched_and_duplicates_are_metered_once() {
        let tmp = ok(tempfile::tempdir());
        let good = tmp.path().join("good.json");
        ok(std::fs::write(
            &good,
            kineto(r#"{"id": 0}"#, &[(1_700_000_000_000_000, 1, 1)]),
        ));
        let missing = tmp.path().join("missing.json");
        let mut meter = Meter::new(MeterConfig::default());
        match import_paths(
            &mut meter,
            &[good.clone(), missing.clone()],
            &ImportOptions::default(),
        ) {
            Err(ImportError::Io { path, .. }) => assert_eq!(path, missing),
            other => panic!("expected Io, got {other:?}"),
        }
        let copy = tmp.path().join("copy.json");
        ok(std::fs::copy(&good, &copy));
        let s = ok(import_paths(
            &mut meter,
            &[&good, &copy, &good],
            &ImportOptions::default(),
        ));
        assert_eq!(
            s.iter().map(|s| s.duplicate_source).collect::<Vec<_>>(),
            [false, true, true]
        );
        assert_eq!(s[0].records, 1);
        assert_eq!(s[1].records, 0);
        let report = ok(meter.finish());
        assert_eq!(
            report.sources.len(),
            1,
            "the failed batch announced nothing"
        );
        assert_eq!(report.sources[0].name, "good.json");
        assert_eq!(
            report.device_total(&source_key(&s[0], 0), MeterKind::KernelLaunches),
            1
        );
        assert!(ok(import_paths::<PathBuf>(
            &mut Meter::new(MeterConfig::default()),
            &[],
            &ImportOptions::default()
        ))
        .is_empty());
    }
}

mod catalog {
    use super::*;

    #[test]
    fn catalog_makes_sm_ns_meterable_for_sampled_ranks() {
        let Some(dir) = data_dir() else { return };
        let catalog = ok(DeviceCatalog::from_toml_str(
            "devices.toml",
            r#"
            [[device]]
            id = 0
            name = "NVIDIA A100-SXM4-80GB"
            sm_count = 108
            compute_capability = "8.0"

            [[device]]
            id = 1
            name = "NVIDIA A100-SXM4-80GB"
            sm_count = 108
            compute_capability = "8.0"
            "#,
        ));
        let opts = ImportOptions {
            format: Format::Auto,
            catalog: Some(catalog),
        };
        let (report, s) = meter_files(&dir, &[RANK0, RANK1], &opts);
        for (summary, busy) in s.iter().zip([547_656_000u128, 580_050_000]) {
            let key = &summary.device_keys[0];
            let dev = report
                .device(key)
                .unwrap_or_else(|| panic!("no device {key}"));
            assert!(dev.not_meterable.is_empty(), "{:?}", dev.not_meterable);
            assert_eq!(dev.sm_count, Some(108));
            assert_eq!(dev.name.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
            assert_eq!(dev.compute_capability.as_deref(), Some("8.0"));
            let sm = report.device_total(key, MeterKind::SmNs);
            assert!(sm > 0 && sm <= 108 * busy, "{key}: sm_ns {sm}");
        }
        // Busy time does not depend on the catalog.
        assert_eq!(
            report.device_total(&s[0].device_keys[0], MeterKind::GpuBusyNs),
            547_656_000
        );
    }

    #[test]
    fn catalog_from_path_and_apply_to_registered_devices() {
        let tmp = ok(tempfile::tempdir());
        let path = tmp.path().join("devices.toml");
        ok(std::fs::write(
            &path,
            "[[device]]\nid = 0\nsm_count = 4\nname = \"G\"\n",
        ));
        let catalog = ok(DeviceCatalog::from_path(&path));
        let mut meter = Meter::new(MeterConfig::default());
        let text = r#"{"traceEvents": []}"#;
        ok(import_bytes(
            &mut meter,
            "empty.json",
            text.as_bytes(),
            &ImportOptions::default(),
        ));
        meter.register_device(gpumeter_core::DeviceInfo::bare("a#0", 0));
        meter.register_device(gpumeter_core::DeviceInfo::bare("b#1", 1));
        assert_eq!(catalog.apply(&mut meter), 1);
        let d = meter
            .device(gpumeter_core::DeviceSlot(0))
            .unwrap_or_else(|| panic!("slot 0"));
        assert_eq!((d.sm_count, d.name.as_deref()), (Some(4), Some("G")));
        match DeviceCatalog::from_path(&tmp.path().join("nope.toml")) {
            Err(ImportError::Io { .. }) => {}
            other => panic!("expected Io, got {other:?}"),
        }
    }
}

mod properties {
    use gpumeter_import::units::micros_text_to_ns;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn micros_text_equals_integer_arithmetic(int in 0u64..10_000_000_000_000_000, frac in 0u32..1000, neg in any::<bool>()) {
            let text = format!("{}{int}.{frac:03}", if neg { "-" } else { "" });
            let want = (i128::from(int) * 1000 + i128::from(frac)) * if neg { -1 } else { 1 };
            prop_assert_eq!(micros_text_to_ns(&text), Ok(want));
        }

        #[test]
        fn integer_micros(int in 0u64..10_000_000_000_000_000) {
            prop_assert_eq!(micros_text_to_ns(&int.to_string()), Ok(i128::from(int) * 1000));
        }

        #[test]
        fn four_decimals_round_half_even(int in 0u64..1_000_000_000_000, frac in 0u32..10_000) {
            let text = format!("{int}.{frac:04}");
            let tenths = i128::from(int) * 10_000 + i128::from(frac); // in 0.1 ns
            let (q, r) = (tenths / 10, tenths % 10);
            let want = if r > 5 || (r == 5 && q % 2 == 1) { q + 1 } else { q };
            prop_assert_eq!(micros_text_to_ns(&text), Ok(want));
        }

        #[test]
        fn no_panic_on_any_text(s in "\\PC{0,40}") {
            let _ = micros_text_to_ns(&s);
        }
    }
}

mod fuzzish {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any bytes: an error or a summary, never a panic.
        #[test]
        fn import_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut meter = Meter::new(MeterConfig::default());
            let _ = import_bytes(&mut meter, "f.json", &bytes, &ImportOptions::default());
            let _ = import_bytes(&mut meter, "f.sqlite", &bytes, &ImportOptions { format: Format::Nsys, catalog: None });
        }

        /// Mutations of a valid trace: never a panic.
        #[test]
        fn mutated_trace_never_panics(pos in 0usize..400, byte in any::<u8>()) {
            let text = r#"{"baseTimeNanoseconds": 1700000000000000000, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.25, "args": {"device": 0, "stream": 7, "grid": [1, 2, 3], "bytes": 4}}, {"ph": "X", "cat": "cuda_runtime", "pid": 9, "args": {"correlation": 1}}]}"#;
            let mut bytes = text.as_bytes().to_vec();
            let i = pos % bytes.len();
            bytes[i] = byte;
            let mut meter = Meter::new(MeterConfig::default());
            let _ = import_bytes(&mut meter, "m.json", &bytes, &ImportOptions::default());
        }
    }
}

mod tenant_map {
    use super::*;
    use gpumeter_core::{ActivityRecord, DeviceInfo, KernelLaunch, Work};
    use gpumeter_import::TenantMapFile as _;

    fn parse(text: &str) -> Result<TenantMap, ImportError> {
        TenantMap::from_toml_str("tenants.toml", text)
    }

    /// The reason of a refused map, checked to name the file.
    fn refused(text: &str) -> String {
        match parse(text) {
            Err(e @ ImportError::TenantMap { .. }) => {
                let msg = e.to_string();
                assert!(msg.starts_with("tenants.toml: tenant map: "), "{msg}");
                msg
            }
            other => panic!("{text:?}: expected a tenant-map error, got {other:?}"),
        }
    }

    #[test]
    fn parses_external_and_pid_rules() {
        let map = ok(parse(
            r#"
            [external]
            1001 = "alice"
            18446744073709551615 = "max"
            [pid]
            4242 = "carol"
            0 = "zero"
            4294967295 = "max-pid"
            "#,
        ));
        assert_eq!(
            map.external,
            HashMap::from([(1001, tn("alice")), (u64::MAX, tn("max"))])
        );
        assert_eq!(
            map.pid,
            HashMap::from([
                (4242, tn("carol")),
                (0, tn("zero")),
                (u32::MAX, tn("max-pid"))
            ])
        );
        // Quoted keys are TOML keys like any other; an empty file or empty tables are no rules.
        assert_eq!(ok(parse("[pid]\n\"7\" = \"q\"\n")).pid[&7].as_str(), "q");
        assert_eq!(ok(parse("")), TenantMap::default());
        assert_eq!(ok(parse("[external]\n[pid]\n")), TenantMap::default());
    }

    #[test]
    fn refuses_bad_maps_naming_table_and_key() {
        for (text, needle) in [
            (
                "[pid]\n40x7 = \"a\"\n",
                "[pid] key `40x7`: not a decimal integer",
            ),
            (
                "[pid]\n-1 = \"a\"\n",
                "[pid] key `-1`: not a decimal integer",
            ),
            (
                "[pid]\n\"+7\" = \"a\"\n",
                "[pid] key `+7`: not a decimal integer",
            ),
            (
                "[pid]\n\"\" = \"a\"\n",
                "[pid] key ``: not a decimal integer",
            ),
            (
                "[pid]\n4294967296 = \"a\"\n",
                "[pid] key `4294967296`: a process id must be at most 4294967295",
            ),
            (
                "[external]\n18446744073709551616 = \"a\"\n",
                "[external] key `18446744073709551616`: an external correlation id must be at most",
            ),
            (
                "[external]\n0x10 = \"a\"\n",
                "[external] key `0x10`: not a decimal integer",
            ),
            (
                "[external]\n1001 = 5\n",
                "[external] key `1001`: the tenant must be a string",
            ),
            ("[pid]\n7 = \"idle\"\n", "[pid] key `7`: `idle` is reserved"),
            (
                "[external]\n8 = \"unattributed\"\n",
                "[external] key `8`: `unattributed` is reserved",
            ),
            (
                "[external]\n1001 = \"\"\n",
                "[external] key `1001`: a tenant name must not be empty",
            ),
            (
                "[pid]\n1 = \"  \"\n",
                "[pid] key `1`: a tenant name must not be empty",
            ),
            (
                "[pid]\n1 = \"a\\tb\"\n",
                "[pid] key `1`: a tenant name must be printable: character 1 is U+0009",
            ),
            ("[pid]\n1 = \"IDLE\"\n", "[pid] key `1`: `idle` is reserved"),
            (
                "[pid]\n1 = \"alice \"\n",
                "[pid] key `1`: a tenant name must not begin or end with whitespace",
            ),
            (
                "[pid]\n1 = \"al\\u200Bice\"\n",
                "[pid] key `1`: a tenant name must be printable: character 2 is U+200B",
            ),
            (
                "[pid]\n7 = \"a\"\n07 = \"b\"\n",
                "process id 7 is given twice",
            ),
            ("[pids]\n1 = \"a\"\n", "unknown table [pids]"),
            ("[tenant]\n", "unknown table [tenant]"),
            ("pid = 3\n", "`pid` must be the table [external] or [pid]"),
        ] {
            let msg = refused(text);
            assert!(msg.contains(needle), "{text:?}: {msg}");
        }
        // A TOML syntax error (and a duplicate key, which TOML itself refuses) names the file.
        refused("[pid\n");
        refused("[pid]\n1 = \"a\"\n1 = \"b\"\n");
    }

    #[test]
    fn from_path_names_the_file() {
        let dir = ok(tempfile::tempdir());
        let path = dir.path().join("map.toml");
        ok(std::fs::write(
            &path,
            "[pid]\n4242 = \"carol\"\nabc = \"x\"\n",
        ));
        match TenantMap::from_path(&path) {
            Err(e @ ImportError::TenantMap { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&path.display().to_string()), "{msg}");
                assert!(msg.contains("[pid] key `abc`"), "{msg}");
            }
            other => panic!("{other:?}"),
        }
        ok(std::fs::write(&path, "[pid]\n4242 = \"carol\"\n"));
        assert_eq!(ok(TenantMap::from_path(&path)).pid[&4242].as_str(), "carol");
        let missing = dir.path().join("missing.toml");
        assert!(matches!(
            TenantMap::from_path(&missing),
            Err(ImportError::Io { path, .. }) if path == missing
        ));
    }

    #[test]
    fn an_external_rule_beats_a_pid_rule() {
        let map = ok(parse(
            "[external]\n1001 = \"alice\"\n[pid]\n4242 = \"carol\"\n",
        ));
        let mut meter = Meter::new(MeterConfig {
            tenant: Some(tn("source")),
            ..MeterConfig::default()
        });
        let dev = meter.register_device(DeviceInfo::bare("GPU-test", 0));
        let base = 1_700_000_000_000_000_000u64;
        // (external id, pid, duration): both rules match → alice; pid only → carol; neither →
        // the source's tenant.
        for (i, (ext, pid, dur)) in [
            (Some(1001), Some(4242), 10),
            (None, Some(4242), 20),
            (Some(9), Some(1), 40),
        ]
        .into_iter()
        .enumerate()
        {
            let start = base + 1_000 * i as u64;
            let mut r = ActivityRecord::new(
                dev,
                start,
                start + dur,
                Work::Kernel(KernelLaunch::default()),
            );
            r.external_id = ext;
            r.process_id = pid;
            r.correlation_id = i as u32;
            meter.push(r);
        }
        // Rules are resolved at report time: setting the map after the records is fine.
        meter.set_tenant_map(map);
        let report = ok(meter.finish());
        let kernel_ns = |tenant: &str| -> u128 {
            report
                .totals
                .iter()
                .filter(|t| t.tenant == tenant && t.meter == MeterKind::KernelNs)
                .map(|t| t.quantity.0)
                .sum()
        };
        assert_eq!(kernel_ns("alice"), 10);
        assert_eq!(kernel_ns("carol"), 20);
        assert_eq!(kernel_ns("source"), 40);
    }
}

/// Review fixes: tenant names that look alike (Kineto's are in `kineto_review.rs`).
mod review {
    use super::*;
    use gpumeter_import::TenantMapFile as _;

    /// Two different tenants of one map that look alike (same UTS #39 skeleton) are refused,
    /// naming both keys and writing the names with their code points.
    #[test]
    fn a_tenant_map_refuses_look_alike_tenants_naming_both_keys() {
        for (text, needle) in [
            (
                "[external]\n1001 = \"alice\"\n[pid]\n7 = \"\u{0430}lice\"\n",
                "[pid] key `7`: the tenant `\\u{0430}lice` looks like the tenant `alice` of \
                 [external] key `1001`",
            ),
            (
                "[pid]\n1 = \"bob\"\n2 = \"\u{ff42}ob\"\n",
                "[pid] key `2`: the tenant `\\u{FF42}ob` looks like the tenant `bob` of [pid] \
                 key `1`",
            ),
            (
                "[pid]\n1 = \"team-1\"\n2 = \"team-l\"\n",
                "[pid] key `2`: the tenant `team-l` looks like the tenant `team-1` of [pid] key \
                 `1`",
            ),
        ] {
            match TenantMap::from_toml_str("tenants.toml", text) {
                Err(e @ ImportError::TenantMap { .. }) => {
                    let msg = e.to_string();
                    assert!(msg.contains(needle), "{msg}");
                    assert!(msg.contains("UTS #39") && msg.is_ascii(), "{msg}");
                }
                other => panic!("{text:?}: expected a tenant-map error, got {other:?}"),
            }
        }
        // One tenant under several keys, and names that merely differ in case, are fine.
        let map = ok(TenantMap::from_toml_str(
            "tenants.toml",
            "[external]\n1 = \"alice\"\n[pid]\n7 = \"alice\"\n8 = \"Alice\"\n",
        ));
        assert_eq!((map.external.len(), map.pid.len()), (1, 2));
        // The names the review found are refused in a map as on the command line.
        for name in ["idle\\u2800", "\\u0456dle", "alice\\uFE0F", "\\u3164"] {
            let text = format!("[pid]\n1 = \"{name}\"\n");
            match TenantMap::from_toml_str("tenants.toml", &text) {
                Err(ImportError::TenantMap { reason, .. }) => {
                    assert!(
                        reason.starts_with("[pid] key `1`: ") && reason.is_ascii(),
                        "{reason}"
                    )
                }
                other => panic!("{text:?}: expected a tenant-map error, got {other:?}"),
            }
        }
    }
}

mod kineto_review;
mod long_strings;
mod profiler_ranges;
mod profiler_ranges_review;
mod sizes;
