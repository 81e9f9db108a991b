//! End-to-end tests of the `gpumeter` binary: the issue's acceptance cases that go through the
//! command line (exit codes, determinism, readable tables) and JSON Schema validation of real
//! outputs. Shared traces are read from `../shared/data` beside the project; with `CI=true` a
//! missing folder fails the test instead of skipping it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;
use common::*;

mod events;

/// Σ of a meter's `totals` rows of a usage report (all tenants and devices).
fn meter_total(usage: &Value, meter: &str) -> u128 {
    usage["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .filter(|t| t["meter"] == meter)
        .map(|t| {
            t["quantity"]
                .as_str()
                .expect("quantity")
                .parse::<u128>()
                .expect("integer quantity")
        })
        .sum()
}

fn dec(v: &Value) -> (i128, u32) {
    // Decimal string → (mantissa, scale), exact.
    let t = v.as_str().expect("decimal string");
    let (int, frac) = t.split_once('.').unwrap_or((t, ""));
    let m: i128 = format!("{int}{frac}").parse().expect("decimal");
    (m, frac.len() as u32)
}

#[test]
fn bert_preview_lines_sum_to_subtotal_and_is_deterministic() {
    let Some(bert) = shared("tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz") else {
        return;
    };
    let book = book();
    let args = ["preview", s(&bert), "--prices", s(&book), "--json"];
    let a = gpumeter(&args);
    let b = gpumeter(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout, "two runs must give byte-identical JSON");
    let doc = json(&a);
    validate("gpumeter.invoice.v1.schema.json", &doc);
    let invoices = doc["invoices"].as_array().expect("invoices");
    assert_eq!(invoices.len(), 1);
    for inv in invoices {
        let (sub, scale) = dec(&inv["subtotal"]);
        let mut sum = 0i128;
        for line in inv["lines"].as_array().expect("lines") {
            let (m, sc) = dec(&line["amount"]);
            assert_eq!(sc, scale, "every amount at the currency's scale");
            sum += m;
        }
        assert_eq!(sum, sub, "lines sum exactly to the subtotal");
        assert!(!inv["lines"].as_array().expect("lines").is_empty());
        assert_eq!(inv["currency"], "USD");
        assert_eq!(inv["tenant"], "unattributed");
    }
    // The text table reads well to a person: a header, aligned amounts, a total.
    let t = gpumeter(&["preview", s(&bert), "--prices", s(&book)]);
    assert!(t.status.success(), "{}", stderr(&t));
    let text = stdout(&t);
    assert!(text.contains("unattributed"), "{text}");
    assert!(text.contains("sm_ns"), "{text}");
    assert!(text.to_lowercase().contains("total"), "{text}");
    assert!(text.contains("USD"), "{text}");
}

#[test]
fn usage_json_matches_schema_and_expected_bert_figures() {
    let Some(bert) = shared("tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz") else {
        return;
    };
    let doc = json(&gpumeter(&["usage", s(&bert), "--json"]));
    validate("gpumeter.usage.v1.schema.json", &doc);
    let total = |meter: &str| meter_total(&doc, meter).to_string();
    assert_eq!(total("kernel_launches"), "60");
    assert_eq!(total("kernel_ns"), "307197");
    assert_eq!(total("gpu_busy_ns"), "309437");
    assert_eq!(total("sm_ns"), "26111418");
    // The trace has deviceProperties: warp_ns is metered, and above sm_ns (≥ 1 warp per SM).
    let warp: u128 = total("warp_ns").parse().expect("int");
    assert!(warp > 26_111_418, "warp_ns {warp}");
    assert_eq!(total("memcpy_dtoh_bytes"), "1");
    assert_eq!(
        doc["sources"][0]["name"],
        bert.file_name().and_then(|n| n.to_str()).expect("name")
    );
    // The digest re-derives: SHA-256 of the canonical JSON without the field.
    let mut stripped = doc.clone();
    stripped.as_object_mut().expect("object").remove("sha256");
    let recomputed = gpumeter::core::document_sha256(&stripped, "sha256").expect("digest");
    assert_eq!(doc["sha256"], recomputed.as_str());
}

#[test]
fn every_shared_trace_and_the_example_validate_against_the_schemas() {
    let mut inputs = vec![example()];
    for name in [
        "hta_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
        "hta_sampled_rank-0.json.gz",
        "hta_sampled_rank-1.json.gz",
        "tracelens_b200_eager_trace.json.gz",
        "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    ] {
        match shared(name) {
            Some(p) => inputs.push(p),
            None => return,
        }
    }
    for input in &inputs {
        let u = json(&gpumeter(&["usage", s(input), "--json", "--window", "15m"]));
        validate("gpumeter.usage.v1.schema.json", &u);
        let i = json(&gpumeter(&[
            "preview",
            s(input),
            "--prices",
            s(&book()),
            "--json",
        ]));
        validate("gpumeter.invoice.v1.schema.json", &i);
    }
}

#[test]
fn sampled_ranks_together_two_devices_unpriced_with_warning() {
    let (Some(r0), Some(r1)) = (
        shared("hta_sampled_rank-0.json.gz"),
        shared("hta_sampled_rank-1.json.gz"),
    ) else {
        return;
    };
    let u = json(&gpumeter(&["usage", s(&r0), s(&r1), "--json"]));
    assert_eq!(u["devices"].as_array().expect("devices").len(), 2);
    for d in u["devices"].as_array().expect("devices") {
        assert_eq!(d["not_meterable"][0]["meter"], "sm_ns");
    }
    assert!(u["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .all(|t| t["meter"] != "sm_ns"));
    let i = json(&gpumeter(&[
        "preview",
        s(&r0),
        s(&r1),
        "--prices",
        s(&book()),
        "--json",
    ]));
    let inv = &i["invoices"][0];
    assert!(
        !inv["unpriced"].as_array().expect("unpriced").is_empty(),
        "{inv:#}"
    );
    assert!(!inv["warnings"].as_array().expect("warnings").is_empty());
    let text = stdout(&gpumeter(&[
        "preview",
        s(&r0),
        s(&r1),
        "--prices",
        s(&book()),
    ]));
    assert!(text.to_lowercase().contains("unpriced"), "{text}");
}

#[test]
fn example_preview_runs_and_windows_split_at_the_hour() {
    let u = json(&gpumeter(&["usage", s(&example()), "--json"]));
    let windows: std::collections::BTreeSet<&str> = u["usage"]
        .as_array()
        .expect("usage")
        .iter()
        .map(|r| r["window_start"].as_str().expect("window"))
        .collect();
    assert_eq!(
        windows.into_iter().collect::<Vec<_>>(),
        vec!["2026-11-30T23:00:00Z", "2026-12-01T00:00:00Z"]
    );
    assert_eq!(u["records"]["skipped"]["gpu_user_annotation"], 240);
    assert_eq!(u["records"]["skipped"]["cuda_sync"], 2);
    let o = gpumeter(&["preview", s(&example()), "--prices", s(&book())]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn bad_input_files_exit_1_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A truncated .gz: the first half of a real gzip stream.
    let gz = std::fs::read(example()).expect("example");
    let truncated = dir.path().join("truncated.json.gz");
    std::fs::write(&truncated, &gz[..gz.len() / 2]).expect("write");
    // JSON that is not a trace.
    let not_trace = dir.path().join("not-a-trace.json");
    std::fs::write(&not_trace, br#"{"hello": "world"}"#).expect("write");
    for p in [&truncated, &not_trace, &dir.path().join("missing.json")] {
        let o = gpumeter(&["usage", s(p)]);
        assert_eq!(o.status.code(), Some(1), "{}: {}", p.display(), stderr(&o));
        let name = p.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            stderr(&o).contains(name),
            "error must name {name}: {}",
            stderr(&o)
        );
    }
}

/// A file no format reader recognizes exits 1 with an error that names every format
/// `--format auto` tried, the raw CUPTI buffer's layouts included, and how to say which.
#[test]
fn an_unknown_format_names_every_format_it_tried() {
    let dir = tempfile::tempdir().expect("tempdir");
    let unknown = dir.path().join("mystery.bin");
    std::fs::write(&unknown, b"hello, not a trace\n").expect("write");
    let o = gpumeter(&["usage", s(&unknown)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    for what in [
        "mystery.bin",
        ".gmr recording",
        "Nsight Systems SQLite",
        "Kineto trace",
        "usage report",
        "raw CUPTI buffer in the CUPTI 12.8",
        "--format",
        "--cupti-api-version",
    ] {
        assert!(err.contains(what), "{what:?} in {err}");
    }
}

/// `--window` takes compound sizes (`1h30m`: 5400 s windows) and says what is wrong with one
/// it refuses, and no help text leaks the source's rustdoc links or design-file sections.
#[test]
fn window_sizes_and_help_texts_read_well() {
    let o = gpumeter(&["usage", s(&example()), "--window", "1h30m", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["window_seconds"], 5400);
    for (w, says) in [
        ("0s", "must be longer than 0 s"),
        ("7m", "does not divide one day"),
        ("1.5h", "write"),
    ] {
        let o = gpumeter(&["usage", s(&example()), "--window", w]);
        assert_eq!(o.status.code(), Some(2), "{w}");
        let e = stderr(&o);
        let ok = if says == "write" {
            e.contains("`1.5` is not a whole number") && e.contains("1h30m")
        } else {
            e.contains(says)
        };
        assert!(ok, "{w}: {e}");
    }
    for args in [
        &["--help"][..],
        &["usage", "--help"],
        &["preview", "--help"],
        &["invoice", "finalize", "--help"],
    ] {
        let help = String::from_utf8_lossy(&gpumeter(args).stdout).to_string();
        assert!(!help.contains("[`"), "{args:?}: a rustdoc link in {help}");
        assert!(
            !help.contains("DESIGN §"),
            "{args:?}: a design section in {help}"
        );
    }
}

/// A usage report with nothing metered says so instead of printing empty tables.
#[test]
fn an_empty_report_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = dir.path().join("empty.json");
    std::fs::write(&empty, br#"{"traceEvents": []}"#).expect("write");
    let o = gpumeter(&["usage", s(&empty)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("Devices  none"), "{text}");
    assert!(
        text.contains("Totals  none: no usage was metered"),
        "{text}"
    );
    assert!(
        !text.contains("TENANT  DEVICE"),
        "no empty table header: {text}"
    );
    // A report with usage keeps its tables.
    let o = gpumeter(&["usage", s(&example())]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        text.contains("TENANT") && !text.contains("Totals  none"),
        "{text}"
    );
}

/// `gpumeter --help` names every subcommand in its description, and `--from` and `--to` say
/// that each needs the other.
#[test]
fn help_names_every_subcommand_and_that_from_needs_to() {
    let o = gpumeter(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout).to_string();
    let about = help.lines().next().unwrap_or("");
    for what in [
        "usage",
        "invoice",
        "credit bank",
        ".gmr",
        "price-book",
        "shell completions",
        "man page",
    ] {
        assert!(
            about.contains(what),
            "{what:?} in the description {about:?}"
        );
    }
    for cmd in ["preview", "invoice"] {
        let args: &[&str] = if cmd == "invoice" {
            &["invoice", "finalize", "--help"]
        } else {
            &["preview", "--help"]
        };
        let o = gpumeter(args);
        let help = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(help.contains("needs --to"), "{cmd}: {help}");
        assert!(help.contains("needs --from"), "{cmd}: {help}");
    }
}

#[test]
fn record_faults_are_loss_exit_0_rest_metered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("faults.json");
    let trace = r#"{"schemaVersion":1,"traceEvents":[
      {"ph":"X","cat":"kernel","name":"ok1","pid":0,"tid":7,"ts":1700000000000000,"dur":5,"args":{"device":0,"stream":7,"correlation":1,"grid":[1,1,1],"block":[32,1,1]}},
      {"ph":"X","cat":"kernel","name":"neg","pid":0,"tid":7,"ts":1700000000000010,"dur":-3,"args":{"device":0,"stream":7,"correlation":2,"grid":[1,1,1],"block":[32,1,1]}},
      {"ph":"X","cat":"kernel","name":"zero","pid":0,"tid":7,"ts":0,"dur":4,"args":{"device":0,"stream":7,"correlation":3,"grid":[1,1,1],"block":[32,1,1]}},
      {"ph":"X","cat":"kernel","name":"ok2","pid":0,"tid":7,"ts":1700000000000020,"dur":7,"args":{"device":0,"stream":7,"correlation":4,"grid":[1,1,1],"block":[32,1,1]}}
    ]}"#;
    std::fs::write(&p, trace).expect("write");
    let o = gpumeter(&["usage", s(&p), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let u = json(&o);
    let loss = |reason: &str| -> u64 {
        u["loss"]
            .as_array()
            .expect("loss")
            .iter()
            .filter(|l| l["reason"] == reason)
            .map(|l| l["records"].as_u64().expect("n"))
            .sum()
    };
    assert_eq!(loss("end_before_start"), 1);
    assert_eq!(loss("zero_timestamp"), 1);
    let kernel_ns = meter_total(&u, "kernel_ns");
    assert_eq!(kernel_ns, 12_000);
    // The preview of usage with loss carries a warning.
    let i = json(&gpumeter(&[
        "preview",
        s(&p),
        "--prices",
        s(&book()),
        "--json",
    ]));
    let warnings = i["invoices"][0]["warnings"].to_string();
    assert!(
        warnings.contains("loss") || warnings.contains("lost"),
        "{warnings}"
    );
    // A pipeline finds it by its code, not by the English.
    assert!(
        i["invoices"][0]["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w["code"] == "usage_loss" && w["message"].is_string()),
        "{warnings}"
    );
}

#[test]
fn sqlite_without_activity_tables_exit_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("empty.sqlite");
    let db = rusqlite::Connection::open(&p).expect("create sqlite");
    db.execute_batch("CREATE TABLE unrelated (x INTEGER); INSERT INTO unrelated VALUES (1);")
        .expect("fill sqlite");
    drop(db);
    let o = gpumeter(&["usage", s(&p)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("empty.sqlite"), "{}", stderr(&o));
}

#[test]
fn bad_command_lines_exit_2() {
    let ex = example();
    for args in [
        vec!["usage", s(&ex), "--format", "parquet"],
        vec!["usage", s(&ex), "--window", "7m"],
        vec!["usage"],
        vec!["preview", s(&ex)],
        vec!["frobnicate"],
        vec![
            "preview",
            s(&ex),
            "--prices",
            "x.toml",
            "--from",
            "yesterday",
            "--to",
            "2026-01-01T00:00:00Z",
        ],
        vec!["usage", s(&ex), "--tenant", ""],
        vec!["usage", s(&ex), "--tenant", "idle"],
        vec!["usage", s(&ex), "--tenant", "x\n  Total 0.00"],
    ] {
        let o = gpumeter(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn prices_check_accepts_the_example_and_rejects_a_bad_book() {
    let o = gpumeter(&["prices", "check", s(&book())]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for sku in ["h100", "a100", "v100", "h200", "b200", "l4"] {
        assert!(text.to_lowercase().contains(sku), "missing {sku}: {text}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "schema = \"gpumeter.pricebook/v1\"\nversion = \"x\"\ncurrency = \"USD\"\n[[rate]]\nsku = \"nope\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\nunit_price = \"1\"\n").expect("write");
    let o = gpumeter(&["prices", "check", s(&bad)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("bad.toml"), "{}", stderr(&o));
}

#[test]
fn a_device_catalog_makes_sm_ns_meterable_and_the_usage_priced() {
    let (Some(r0), Some(r1)) = (
        shared("hta_sampled_rank-0.json.gz"),
        shared("hta_sampled_rank-1.json.gz"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = dir.path().join("devices.toml");
    std::fs::write(
        &catalog,
        "[[device]]\nid = 0\nname = \"NVIDIA A100-SXM4-80GB\"\nsm_count = 108\ncompute_capability = \"8.0\"\n\n\
         [[device]]\nid = 1\nname = \"NVIDIA A100-SXM4-80GB\"\nsm_count = 108\ncompute_capability = \"8.0\"\n",
    )
    .expect("write");
    let args = [
        "usage",
        s(&r0),
        s(&r1),
        "--devices",
        s(&catalog),
        "--tenant",
        "acme",
        "--json",
    ];
    let u = json(&gpumeter(&args));
    for d in u["devices"].as_array().expect("devices") {
        assert_eq!(d["sm_count"], 108);
        assert!(d["not_meterable"].as_array().expect("list").is_empty());
    }
    let sm: Vec<&Value> = u["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .filter(|t| t["meter"] == "sm_ns")
        .collect();
    assert_eq!(sm.len(), 2);
    assert!(sm.iter().all(|t| t["tenant"] == "acme"));
    let i = json(&gpumeter(&[
        "preview",
        s(&r0),
        s(&r1),
        "--devices",
        s(&catalog),
        "--prices",
        s(&book()),
        "--json",
    ]));
    let inv = &i["invoices"][0];
    assert!(
        inv["unpriced"].as_array().expect("unpriced").is_empty(),
        "{inv:#}"
    );
    assert!(inv["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .any(|l| l["sku"] == "a100" && l["meter"] == "sm_ns"));
}

#[test]
fn a_period_off_the_window_edges_is_a_bad_command_line() {
    let ex = example();
    let b = book();
    let o = gpumeter(&[
        "preview",
        s(&ex),
        "--prices",
        s(&b),
        "--from",
        "2026-11-30T23:30:00Z",
        "--to",
        "2026-12-01T01:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn a_reader_that_stops_early_is_not_a_crash() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpumeter"))
        .args(["prices", "check", s(&book())])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert!(matches!(out.status.code(), Some(0)), "{:?}", out.status);
}

#[test]
fn a_preview_with_nothing_to_bill_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("all-lost.json");
    std::fs::write(&p, r#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":0,"dur":4,"args":{"device":0,"stream":7,"correlation":3,"grid":[1,1,1],"block":[32,1,1]}}]}"#).expect("write");
    let o = gpumeter(&["preview", s(&p), "--prices", s(&book())]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("lost"), "{}", stderr(&o));
}

/// A raw CUPTI 12.8 buffer built from the decoder's layout tables (header field names).
fn cupti_record(buf: &mut Vec<u8>, kind: gpumeter_cupti::ActivityKind, fields: &[(&str, i128)]) {
    let layout = gpumeter_cupti::ApiVersion::Cupti12_8
        .layouts()
        .into_iter()
        .find(|l| l.kind == kind)
        .expect("layout");
    let at = buf.len();
    buf.resize(at + layout.size, 0);
    buf[at..at + 4].copy_from_slice(&kind.0.to_le_bytes());
    for (name, value) in fields {
        let f = layout
            .fields
            .iter()
            .find(|f| f.name == *name)
            .expect("field");
        buf[at + f.offset..at + f.offset + f.width]
            .copy_from_slice(&value.to_le_bytes()[..f.width]);
    }
}

/// Appends to `buf` a CUPTI 12.8 kernel of correlation id 1 over `[t0, t0 + 1000)` ns with a
/// grid of height and depth 1, and `fields` (its width, block, …) as [`cupti_record`] takes them.
fn one_kernel(buf: &mut Vec<u8>, t0: u64, fields: &[(&str, i128)]) {
    let mut all = vec![
        ("start", i128::from(t0)),
        ("end", i128::from(t0) + 1_000),
        ("gridY", 1),
        ("gridZ", 1),
        ("correlationId", 1),
    ];
    all.extend_from_slice(fields);
    cupti_record(buf, gpumeter_cupti::ActivityKind::CONCURRENT_KERNEL, &all);
}

/// A finished recording's header (CUPTI API 26, process 42, both clocks at `t0`, producer
/// `producer` version "0", not instrumented) of one device: id 0, `name`, `uuid`, 132 SMs,
/// compute capability 9.0.
fn one_gpu_header(
    t0: u64,
    host: &str,
    producer: &str,
    name: &str,
    uuid: Option<&str>,
) -> gpumeter_recording::gmr::GmrHeader {
    use gpumeter_recording::gmr::{ClockPair, GmrDevice, GmrHeader, Producer};
    GmrHeader {
        cupti_api_version: 26,
        host: host.into(),
        clock: ClockPair {
            cupti_timestamp_ns: t0,
            unix_time_ns: t0,
        },
        process_id: 42,
        devices: vec![GmrDevice {
            id: 0,
            name: Some(name.into()),
            uuid: uuid.map(Into::into),
            sm_count: Some(132),
            compute_capability: Some("9.0".into()),
        }],
        producer: Producer {
            name: producer.into(),
            version: "0".into(),
        },
        instrumented: false,
        labels: Default::default(),
    }
}

/// A CUPTI 12.8 buffer of one device (`uuid`, 132 SMs), one 1 µs kernel at `kernel_at` (ns)
/// and, for each `(memoryOperationType, timestamp ns)` of `memory`, a 4096-byte device
/// allocation event of process 77 at one address.
fn kernel_and_memory_buffer(uuid: i128, kernel_at: i128, memory: &[(i128, i128)]) -> Vec<u8> {
    use gpumeter_cupti::ActivityKind;
    let mut buf = Vec::new();
    cupti_record(
        &mut buf,
        ActivityKind::DEVICE,
        &[("id", 0), ("numMultiprocessors", 132), ("uuid", uuid)],
    );
    cupti_record(
        &mut buf,
        ActivityKind::CONCURRENT_KERNEL,
        &[
            ("start", kernel_at),
            ("end", kernel_at + 1_000),
            ("gridX", 1),
            ("gridY", 1),
            ("gridZ", 1),
            ("correlationId", 1),
        ],
    );
    for &(op, t) in memory {
        cupti_record(
            &mut buf,
            ActivityKind::MEMORY2,
            &[
                ("memoryOperationType", op),
                ("memoryKind", 3),
                ("address", 0x7f00_0000_0000),
                ("bytes", 4096),
                ("timestamp", t),
                ("processId", 77),
            ],
        );
    }
    buf
}

#[test]
fn a_raw_cupti_buffer_meters_sm_ns_with_its_device_record_and_counts_lost_timestamps() {
    use gpumeter_cupti::ActivityKind;
    let t0: i128 = 1_793_606_160_000_000_000;
    let mut buf = Vec::new();
    cupti_record(
        &mut buf,
        ActivityKind::DEVICE,
        &[
            ("id", 0),
            ("numMultiprocessors", 132),
            ("computeCapabilityMajor", 9),
            ("computeCapabilityMinor", 0),
            ("uuid", 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
        ],
    );
    let kernel = |buf: &mut Vec<u8>, start: i128, end: i128, grid: i128, corr: i128| {
        cupti_record(
            buf,
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", start),
                ("end", end),
                ("deviceId", 0),
                ("gridX", grid),
                ("gridY", 1),
                ("gridZ", 1),
                ("blockX", 128),
                ("blockY", 1),
                ("blockZ", 1),
                ("correlationId", corr),
                ("contextId", 1),
                ("streamId", 7),
            ],
        );
    };
    kernel(&mut buf, t0, t0 + 1_000, 264, 1); // 132 SMs × 1000 ns
    kernel(&mut buf, t0 + 2_000, t0 + 2_500, 66, 2); // 66 SMs × 500 ns
    kernel(&mut buf, 0, t0 + 3_000, 10, 3); // start not recorded: loss
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("activity.cupti");
    std::fs::write(&p, &buf).expect("write");
    for format in ["auto", "cupti"] {
        let u = json(&gpumeter(&["usage", s(&p), "--format", format, "--json"]));
        validate("gpumeter.usage.v1.schema.json", &u);
        assert_eq!(u["sources"][0]["format"], "cupti");
        let dev = &u["devices"][0];
        assert_eq!(dev["sm_count"], 132, "{dev:#}");
        assert_eq!(dev["compute_capability"], "9.0");
        let key = dev["device_key"].as_str().expect("key");
        assert!(key.starts_with("GPU-"), "{key}");
        let total = |meter: &str| meter_total(&u, meter);
        assert_eq!(total("sm_ns"), 132 * 1_000 + 66 * 500);
        assert_eq!(total("kernel_launches"), 2);
        assert_eq!(u["loss"][0]["reason"], "zero_timestamp");
        assert_eq!(u["loss"][0]["records"], 1);
    }
    // An unsupported producer version is a bad command line.
    let o = gpumeter(&["usage", s(&p), "--cupti-api-version", "25"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A .gmr given as --format gmr must be one: a raw buffer is refused with exit 1.
    let o = gpumeter(&["usage", s(&p), "--format", "gmr"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("activity.cupti"), "{}", stderr(&o));
}

/// The recording `scripts/gpu-smoke.sh` made on an NVIDIA H200 (driver 580, CUPTI 13.0) with
/// this project's injection library: a CUDA C program that launched 2101 kernels (1000
/// `gm_smoke_add`, 1000 `gm_smoke_scale`, 101 `gm_smoke_fill`).
#[test]
fn the_real_h200_recording_meters_what_the_workload_launched() {
    let gmr = root().join("examples/data/h200-cuda13-smoke.gmr");
    let u = json(&gpumeter(&["usage", s(&gmr), "--json"]));
    validate("gpumeter.usage.v1.schema.json", &u);
    assert_eq!(u["sources"][0]["format"], "gmr");
    assert_eq!(u["records"]["kernel"], 2101);
    assert!(u["loss"].as_array().expect("loss").is_empty());
    let dev = &u["devices"][0];
    assert_eq!(dev["name"], "NVIDIA H200");
    assert_eq!(dev["sm_count"], 132);
    assert_eq!(dev["compute_capability"], "9.0");
    assert!(dev["device_key"].as_str().expect("key").starts_with("GPU-"));
    let show = stdout(&gpumeter(&["recording", "show", s(&gmr)]));
    for (name, n) in [
        ("gm_smoke_add", "1,000"),
        ("gm_smoke_scale", "1,000"),
        ("gm_smoke_fill", "101"),
    ] {
        assert!(
            show.lines()
                .any(|l| l.contains(name) && l.split_whitespace().next() == Some(n)),
            "{name} × {n} not in:\n{show}"
        );
    }
    let i = json(&gpumeter(&[
        "preview",
        s(&gmr),
        "--prices",
        s(&book()),
        "--json",
    ]));
    validate("gpumeter.invoice.v1.schema.json", &i);
    assert!(i["invoices"][0]["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .any(|l| l["sku"] == "h200"));
}

#[test]
fn a_tenant_map_splits_the_sampled_ranks_by_process_without_changing_totals() {
    let (Some(r0), Some(r1)) = (
        shared("hta_sampled_rank-0.json.gz"),
        shared("hta_sampled_rank-1.json.gz"),
    ) else {
        return;
    };
    // The ranks' host processes (the pid of their cuda_runtime events): rank 0 is 4037 and
    // launches on device 0, rank 1 is 4045 and launches on device 1.
    let dir = tempfile::tempdir().expect("tempdir");
    let map = dir.path().join("tenants.toml");
    std::fs::write(&map, "[pid]\n4037 = \"team-a\"\n4045 = \"team-b\"\n").expect("write map");

    let totals = |u: &Value| -> std::collections::BTreeMap<(String, String, String), u128> {
        let mut m = std::collections::BTreeMap::new();
        for t in u["totals"].as_array().expect("totals") {
            let q: u128 = t["quantity"]
                .as_str()
                .expect("quantity")
                .parse()
                .expect("integer");
            let key = (
                t["tenant"].as_str().expect("tenant").to_string(),
                t["device_key"].as_str().expect("device_key").to_string(),
                t["meter"].as_str().expect("meter").to_string(),
            );
            *m.entry(key).or_insert(0) += q;
        }
        m
    };
    let plain = json(&gpumeter(&["usage", s(&r0), s(&r1), "--json"]));
    let mapped = json(&gpumeter(&[
        "usage",
        s(&r0),
        s(&r1),
        "--tenant-map",
        s(&map),
        "--json",
    ]));
    validate("gpumeter.usage.v1.schema.json", &mapped);
    // Each rank's device keys start with its source's label (16 hex digits of its identity).
    let label = |file: &str| -> String {
        let sources = mapped["sources"].as_array().expect("sources");
        let s = sources
            .iter()
            .find(|s| s["name"] == file)
            .expect("the rank's source");
        s["sha256"].as_str().expect("sha256")[..16].to_string()
    };
    let (rank0, rank1) = (
        label("hta_sampled_rank-0.json.gz"),
        label("hta_sampled_rank-1.json.gz"),
    );
    let plain = totals(&plain);
    let mapped = totals(&mapped);
    assert!(
        plain.keys().all(|(t, _, _)| t == "unattributed"),
        "{plain:?}"
    );

    // Per (device, meter), the tenants' sum with the map is the untagged total without it.
    let by_cell = |m: &std::collections::BTreeMap<(String, String, String), u128>| {
        let mut c = std::collections::BTreeMap::new();
        for ((_, d, meter), q) in m {
            *c.entry((d.clone(), meter.clone())).or_insert(0u128) += q;
        }
        c
    };
    assert_eq!(by_cell(&mapped), by_cell(&plain));

    // Every record is attributed, team-a only on rank 0's device, team-b only on rank 1's.
    let devices = |tenant: &str| -> std::collections::BTreeSet<String> {
        mapped
            .keys()
            .filter(|(t, _, _)| t == tenant)
            .map(|(_, d, _)| d.clone())
            .collect()
    };
    let (a, b) = (devices("team-a"), devices("team-b"));
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(b.len(), 1, "{b:?}");
    assert!(a.iter().all(|d| d.starts_with(&rank0)), "{a:?}");
    assert!(b.iter().all(|d| d.starts_with(&rank1)), "{b:?}");
    assert!(
        mapped
            .keys()
            .all(|(t, _, _)| t == "team-a" || t == "team-b"),
        "{mapped:?}"
    );
    for tenant in ["team-a", "team-b"] {
        let launches: u128 = mapped
            .iter()
            .filter(|((t, _, m), _)| t == tenant && m == "kernel_launches")
            .map(|(_, q)| q)
            .sum();
        assert!(launches > 0, "{tenant} has no kernel launches");
    }

    // The preview bills the two tenants separately.
    let i = json(&gpumeter(&[
        "preview",
        s(&r0),
        s(&r1),
        "--tenant-map",
        s(&map),
        "--prices",
        s(&book()),
        "--json",
    ]));
    validate("gpumeter.invoice.v1.schema.json", &i);
    let tenants: Vec<&str> = i["invoices"]
        .as_array()
        .expect("invoices")
        .iter()
        .map(|inv| inv["tenant"].as_str().expect("tenant"))
        .collect();
    assert_eq!(tenants, ["team-a", "team-b"]);

    // A bad map is a bad input file: exit 1, naming the file and the key.
    std::fs::write(&map, "[pid]\n4037 = \"team-a\"\nrank1 = \"team-b\"\n").expect("write map");
    let o = gpumeter(&["usage", s(&r0), "--tenant-map", s(&map)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("tenants.toml") && e.contains("[pid] key `rank1`"),
        "{e}"
    );
}

/// `memory_byte_ns` across two reports: an allocation left open by the first is listed in its
/// `open_allocations`, and `--opening` bills it in the second from the first's end to the
/// release, so the two together bill every ns once.
#[test]
fn open_allocations_carry_into_the_next_report_with_opening() {
    let t0: i128 = 1_793_606_160_000_000_000;
    let buffer = |kernel_at: i128, memory: &[(i128, i128)]| {
        kernel_and_memory_buffer(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef, kernel_at, memory)
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("first.cupti");
    let second = dir.path().join("second.cupti");
    std::fs::write(&first, buffer(t0, &[(1, t0 + 100)])).expect("write");
    std::fs::write(&second, buffer(t0 + 5_000, &[(2, t0 + 3_000)])).expect("write");
    let u1 = json(&gpumeter(&[
        "usage",
        s(&first),
        "--tenant",
        "acme",
        "--json",
    ]));
    validate("gpumeter.usage.v1.schema.json", &u1);
    assert_eq!(meter_total(&u1, "memory_byte_ns"), 4096 * 900);
    let open = &u1["open_allocations"];
    assert_eq!(open.as_array().map(Vec::len), Some(1), "{open:#}");
    assert_eq!(open[0]["address"], "0x7f0000000000");
    assert_eq!(open[0]["tenant"], "acme");
    assert_eq!(open[0]["process_id"], 77);
    let r1 = dir.path().join("first.json");
    std::fs::write(&r1, u1.to_string()).expect("write");
    let u2 = json(&gpumeter(&[
        "usage",
        s(&second),
        "--opening",
        s(&r1),
        "--json",
    ]));
    validate("gpumeter.usage.v1.schema.json", &u2);
    // Billed from the first report's end (t0 + 1000) to the release (t0 + 3000), to the
    // tenant the first report gave it.
    assert_eq!(meter_total(&u2, "memory_byte_ns"), 4096 * 2_000);
    assert_eq!(
        u2["totals"].as_array().map(|t| t
            .iter()
            .any(|r| r["meter"] == "memory_byte_ns" && r["tenant"] == "acme")),
        Some(true)
    );
    assert_eq!(u2["open_allocations"].as_array().map(Vec::len), Some(0));
    // Without the opening state the release has no allocation: loss.
    let u3 = json(&gpumeter(&["usage", s(&second), "--json"]));
    assert_eq!(u3["loss"][0]["reason"], "release_without_allocation");
    // An opening file that is not a usage report: exit 1, naming it.
    let o = gpumeter(&["usage", s(&second), "--opening", s(&first)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("first.cupti"), "{}", stderr(&o));
    // A report whose content no longer matches its sha256 (edited): exit 1.
    let mut edited = u1.clone();
    edited["open_allocations"][0]["bytes"] = Value::from("1");
    let r1e = dir.path().join("edited.json");
    std::fs::write(&r1e, edited.to_string()).expect("write");
    let o = gpumeter(&["usage", s(&second), "--opening", s(&r1e)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("sha256"), "{}", stderr(&o));
}

/// A Kineto trace and a `.gmr` recording of the same GPU (same UUID) in one report: all
/// inputs are merged in time order, so the recording's earlier records are not `late` although
/// the trace is read first, and the argument order changes nothing.
#[test]
fn a_trace_and_a_recording_of_one_gpu_merge_in_time_order() {
    use gpumeter_recording::gmr::{Frame, GmrWriter};
    let uuid = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";
    let t0: u64 = 1_793_606_160_000_000_000;
    let dir = tempfile::tempdir().expect("tempdir");
    // The trace: one kernel 300 s after t0 (more than the 60 s reordering horizon).
    let trace = dir.path().join("trace.json");
    let kineto = serde_json::json!({
        "schemaVersion": 1,
        "baseTimeNanoseconds": t0,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": uuid,
                              "numSms": 132}],
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "late_kernel", "pid": 0, "tid": 7,
                         "ts": 300_000_000, "dur": 1,
                         "args": {"device": 0, "stream": 7, "correlation": 9,
                                  "grid": [1, 1, 1], "block": [128, 1, 1]}}]
    });
    std::fs::write(&trace, kineto.to_string()).expect("write");
    // The recording: one kernel at t0, on the GPU of the same UUID.
    let mut buf = Vec::new();
    one_kernel(&mut buf, t0, &[("gridX", 1)]);
    let header = one_gpu_header(t0, "node", "test", "NVIDIA H100 80GB HBM3", Some(uuid));
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    w.write_frame(&Frame::ActivityBuffer(buf)).expect("frame");
    let rec = dir.path().join("run.gmr");
    std::fs::write(&rec, w.finish().expect("finish")).expect("write");
    let a = json(&gpumeter(&["usage", s(&trace), s(&rec), "--json"]));
    let b = json(&gpumeter(&["usage", s(&rec), s(&trace), "--json"]));
    for u in [&a, &b] {
        validate("gpumeter.usage.v1.schema.json", u);
        assert_eq!(
            u["loss"].as_array().map(Vec::len),
            Some(0),
            "{:#}",
            u["loss"]
        );
        assert_eq!(u["devices"].as_array().map(Vec::len), Some(1));
        assert_eq!(meter_total(u, "kernel_launches"), 2);
    }
    assert_eq!(a["usage"], b["usage"]);
}

/// The same Kineto trace given gzipped and plain is one trace: metered once, with a warning.
#[test]
fn a_trace_given_gzipped_and_plain_is_metered_once() {
    let Some(gz) = shared("tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("bert.json");
    let mut text = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(std::fs::File::open(&gz).expect("open")),
        &mut text,
    )
    .expect("gunzip");
    std::fs::write(&plain, &text).expect("write");
    let one = json(&gpumeter(&["usage", s(&gz), "--json"]));
    let both = json(&gpumeter(&["usage", s(&gz), s(&plain), "--json"]));
    assert_eq!(
        meter_total(&both, "kernel_launches"),
        meter_total(&one, "kernel_launches")
    );
    assert_eq!(both["devices"].as_array().map(Vec::len), Some(1));
    assert!(
        both["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w["code"] == "duplicate_source"
                && w["message"]
                    .as_str()
                    .is_some_and(|w| w.contains("once decompressed"))),
        "{:#}",
        both["warnings"]
    );
}

const HOUR_NS: u64 = 3_600_000_000_000;

/// A Kineto trace with one device and one kernel `ts_us` µs after `base` (modern schema) or at
/// `ts_us` µs (2021 schema, `base` = None).
fn kineto_one_kernel(base: Option<u64>, ts_us: u64, device_name: &str, kernel: &str) -> Value {
    let mut t = serde_json::json!({
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": device_name, "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132}],
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": kernel, "pid": 0, "tid": 7,
                         "ts": ts_us, "dur": 5,
                         "args": {"device": 0, "stream": 7, "correlation": 1,
                                  "grid": [1, 1, 1], "block": [32, 1, 1]}}]
    });
    if let Some(b) = base {
        t["baseTimeNanoseconds"] = Value::from(b);
    }
    t
}

/// A kernel in the last whole hour a u64 of ns can start (2554-07-21T23:00:00Z): `usage`
/// meters it (exit 0), `preview` without a period cannot end the default period there, which
/// is the input's fault (exit 1, naming the usage row), not the command line's (exit 2).
#[test]
fn a_kernel_in_2554_previews_as_bad_input_not_a_bad_command_line() {
    let last_window = u64::MAX / HOUR_NS * HOUR_NS;
    assert!(last_window.checked_add(HOUR_NS).is_none());
    let start = last_window + 60_000_000_000; // 60 s into that window
    let dir = tempfile::tempdir().expect("tempdir");
    let modern = dir.path().join("modern-2554.json");
    let old = dir.path().join("schema2021-2554.json");
    std::fs::write(
        &modern,
        kineto_one_kernel(Some(last_window), 60_000_000, "NVIDIA H100", "k").to_string(),
    )
    .expect("write");
    std::fs::write(
        &old,
        kineto_one_kernel(None, start / 1_000, "NVIDIA H100", "k").to_string(),
    )
    .expect("write");
    let expected_start = {
        let u = json(&gpumeter(&["usage", s(&modern), "--json"]));
        u["usage"][0]["window_start"]
            .as_str()
            .expect("a usage row")
            .to_string()
    };
    assert!(
        expected_start.starts_with("2554-07-21T23:00:00"),
        "{expected_start}"
    );
    for p in [&modern, &old] {
        let o = gpumeter(&["usage", s(p)]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let u = json(&gpumeter(&["usage", s(p), "--json"]));
        assert_eq!(meter_total(&u, "kernel_launches"), 1);
        assert_eq!(u["usage"][0]["window_start"], expected_start.as_str());
        let o = gpumeter(&["preview", s(p), "--prices", s(&book())]);
        assert_eq!(o.status.code(), Some(1), "{}: {}", p.display(), stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("usage[0].window_start"), "{e}");
        assert!(e.contains(&expected_start), "{e}");
        // An explicit period before that window is a good command line: nothing to bill.
        let o = gpumeter(&[
            "preview",
            s(p),
            "--prices",
            s(&book()),
            "--from",
            "2554-07-21T22:00:00Z",
            "--to",
            "2554-07-21T23:00:00Z",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(stderr(&o).contains("no usage to invoice"), "{}", stderr(&o));
        // A given period off the window edges is still the command line's fault.
        let o = gpumeter(&[
            "preview",
            s(p),
            "--prices",
            s(&book()),
            "--from",
            "2554-07-21T22:30:00Z",
            "--to",
            "2554-07-21T23:00:00Z",
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("--from/--to"), "{}", stderr(&o));
    }
}

/// Characters that act on a terminal: none may reach text output raw.
fn raw_terminal_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| c != '\n' && gpumeter::core::text::is_escaped(c))
        .collect()
}

/// Device, kernel and file names with ESC sequences, newlines and a right-to-left override:
/// every text rendering and every stderr line shows them escaped; JSON keeps them exactly
/// (escaped as `\uXXXX`); table columns stay aligned on the escaped text.
#[test]
fn control_characters_from_inputs_are_escaped_in_text_output() {
    let dir = tempfile::tempdir().expect("tempdir");
    let device = "NVIDIA H100\u{1b}[2J\nfake row \u{202e}llib";
    let device_shown = "NVIDIA H100\\u{1b}[2J\\nfake row \\u{202e}llib";
    let file = dir.path().join("tr\u{1b}[31mace\n.json");
    let file_shown = "tr\\u{1b}[31mace\\n.json";
    std::fs::write(
        &file,
        kineto_one_kernel(
            Some(1_793_606_000_000_000_000),
            60_000_000,
            device,
            "kern\u{1b}]0;pwned\u{7}el",
        )
        .to_string(),
    )
    .expect("write");
    let check = |what: &str, o: &Output| {
        for (stream, text) in [("stdout", stdout(o)), ("stderr", stderr(o))] {
            let raw = raw_terminal_controls(&text);
            assert!(raw.is_empty(), "{what} {stream}: raw {raw:?} in {text}");
            assert!(
                !text.lines().any(|l| l.starts_with("fake row")),
                "{what} {stream}: a name's newline started a line: {text}"
            );
        }
    };

    // usage, text: the escaped names, and the Devices table aligned on them.
    let o = gpumeter(&["usage", s(&file)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check("usage", &o);
    let text = stdout(&o);
    assert!(text.contains(device_shown), "{text}");
    assert!(text.contains(file_shown), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.trim_start().starts_with("DEVICE  KEY"))
        .expect("devices header");
    let end_of = |line: &str, word: &str| {
        line.find(word)
            .map(|b| line[..b].chars().count() + word.chars().count())
    };
    // SMs is right-aligned: the header's "SMs" and the row's "132" end in one column.
    assert_eq!(
        end_of(lines[header], "SMs"),
        end_of(lines[header + 1], "132"),
        "{text}"
    );

    // usage, JSON: exact names (parsers see the same strings), no raw controls on the wire.
    let o = gpumeter(&["usage", s(&file), "--json"]);
    check("usage --json", &o);
    let u = json(&o);
    assert_eq!(u["devices"][0]["name"], device);
    assert_eq!(
        u["sources"][0]["name"],
        file.file_name().and_then(|n| n.to_str()).expect("name")
    );
    assert!(stdout(&o).contains("\\u202e"), "{}", stdout(&o));

    // preview, text: an SKU that matches everything ("*") with an ESC in its id; the usage
    // report's warnings (naming the file) are in the invoice's warnings.
    let book = dir.path().join("star.toml");
    std::fs::write(
        &book,
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"v\\u001b[8m1\"\ncurrency = \"USD\"\n\
         [[sku]]\nid = \"any\\u001b[5m\"\nmatch = [\"*\"]\n\
         [[rate]]\nsku = \"any\\u001b[5m\"\nmeter = \"kernel_launches\"\nunit = \"1\"\nunit_price = \"0.25\"\n",
    )
    .expect("write");
    let o = gpumeter(&["preview", s(&file), "--prices", s(&book)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check("preview", &o);
    let text = stdout(&o);
    // (The file's name is in no invoice: device keys come from the source's content.)
    for shown in ["any\\u{1b}[5m", "v\\u{1b}[8m1"] {
        assert!(text.contains(shown), "{shown} not in {text}");
    }
    let i = json(&gpumeter(&[
        "preview",
        s(&file),
        "--prices",
        s(&book),
        "--json",
    ]));
    assert_eq!(i["invoices"][0]["lines"][0]["sku"], "any\u{1b}[5m");
    assert_eq!(i["invoices"][0]["lines"][0]["amount"], "0.25");

    // notice: lines (a period without usage repeats the report's warnings on stderr).
    let o = gpumeter(&[
        "preview",
        s(&file),
        "--prices",
        s(&book),
        "--from",
        "2000-01-01T00:00:00Z",
        "--to",
        "2000-01-01T01:00:00Z",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check("preview notice", &o);
    assert!(
        stderr(&o).contains("notice: usage report:"),
        "{}",
        stderr(&o)
    );

    // error: lines, naming a bad file and a missing one.
    let bad = dir.path().join("bad\u{1b}[2J\n.json");
    std::fs::write(&bad, b"{\"hello\": \"world\"}").expect("write");
    for p in [bad.clone(), dir.path().join("missing\u{202e}\u{9b}2J.json")] {
        let o = gpumeter(&["usage", s(&p)]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        check("error", &o);
        assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }

    // prices check, with a catalog whose device name carries ESC and a newline.
    let catalog = dir.path().join("devices.toml");
    std::fs::write(
        &catalog,
        "[[device]]\nid = 0\nname = \"NVIDIA H100\\u001b[2J\\nfake row\"\nsm_count = 132\n",
    )
    .expect("write");
    let o = gpumeter(&["prices", "check", s(&book), "--devices", s(&catalog)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    check("prices check", &o);
    assert!(
        stdout(&o).contains("NVIDIA H100\\u{1b}[2J\\nfake row"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("any\\u{1b}[5m"), "{}", stdout(&o));
}

/// A finished `.gmr` of process 42 on device 0 (132 SMs, a UUID): one kernel of 200 blocks over
/// [t0, t0 + 1000) and a PM-sample frame of device 0 written after it: [t0, t0 + 1000) with
/// 99 000 active SM cycles over 1 000 elapsed and 6 000 + 4 000 DRAM bytes, then
/// [t0 + 1000, t0 + 2000) after an overflow, 13 200 cycles, 100 bytes read, no write counter.
fn pm_recording(dir: &Path) -> PathBuf {
    use gpumeter::core::PmSample;
    use gpumeter_recording::gmr::{Frame, GmrWriter, PmSamples};
    let t0: u64 = 1_793_606_160_000_000_000;
    let mut buf = Vec::new();
    one_kernel(
        &mut buf,
        t0,
        &[
            ("gridX", 200),
            ("blockX", 128),
            ("blockY", 1),
            ("blockZ", 1),
            ("contextId", 1),
        ],
    );
    let header = one_gpu_header(
        t0,
        "node",
        "test",
        "NVIDIA H100",
        Some("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88"),
    );
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    w.write_frame(&Frame::ActivityBuffer(buf)).expect("frame");
    w.write_pm_samples(&PmSamples {
        device_id: 0,
        samples: vec![
            PmSample {
                start_ns: t0,
                end_ns: t0 + 1000,
                sm_active_cycles: Some(99_000),
                sm_elapsed_cycles: Some(1000),
                dram_read_bytes: Some(6_000),
                dram_write_bytes: Some(4_000),
                overflow: false,
            },
            PmSample {
                start_ns: t0 + 1000,
                end_ns: t0 + 2000,
                sm_active_cycles: Some(13_200),
                sm_elapsed_cycles: Some(1000),
                dram_read_bytes: Some(100),
                dram_write_bytes: None,
                overflow: true,
            },
        ],
    })
    .expect("pm frame");
    let rec = dir.join("pm.gmr");
    std::fs::write(&rec, w.finish().expect("finish")).expect("write");
    rec
}

/// `recording show` lists a recording's PM-sample frames per device: samples, frames, span,
/// each counter's sum (with how many samples carry it when not all do), overflows; `--json`
/// gives the same numbers.
#[test]
fn recording_show_lists_pm_samples_per_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = pm_recording(dir.path());
    let o = gpumeter(&["recording", "show", s(&rec)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("1 PM-sample frame (2 samples), 0 of unknown types"),
        "{text}"
    );
    let pm = text
        .lines()
        .find(|l| l.starts_with("pm "))
        .unwrap_or_else(|| panic!("no pm line in {text}"));
    for shown in [
        "device 0: 2 samples in 1 frame over 0.000002000 s",
        "SM active 112,200 cycles",
        "SM elapsed 2,000 cycles",
        "DRAM read 6,100 bytes",
        "DRAM written 4,000 bytes (in 1 sample of 2)",
        "1 sample after a hardware-buffer overflow",
    ] {
        assert!(pm.contains(shown), "{shown} not in {pm}");
    }
    let v = json(&gpumeter(&["recording", "show", s(&rec), "--json"]));
    assert_eq!(v["pm_frames"], 1);
    assert_eq!(v["pm_samples"], 2);
    let d = &v["pm"][0];
    assert_eq!(d["device"], 0);
    assert_eq!(d["samples"], 2);
    assert_eq!(d["first_start_ns"], 1_793_606_160_000_000_000u64);
    assert_eq!(d["last_end_ns"], 1_793_606_160_000_002_000u64);
    assert_eq!(d["sm_active_cycles"]["sum"], 112_200);
    assert_eq!(d["dram_write_bytes"]["samples"], 1);
    assert_eq!(d["overflows"], 1);
    // A recording without PM frames has no pm line and an empty list.
    let plain = dir.path().join("plain.gmr");
    let bytes = std::fs::read(&rec).expect("read");
    let file = gpumeter_recording::gmr::read_gmr(&bytes).expect("gmr");
    let mut w = gpumeter_recording::gmr::GmrWriter::new(Vec::new(), &file.header).expect("w");
    w.write_frame(&file.frames[0].frame).expect("frame");
    std::fs::write(&plain, w.finish().expect("finish")).expect("write");
    let text = stdout(&gpumeter(&["recording", "show", s(&plain)]));
    assert!(!text.lines().any(|l| l.starts_with("pm ")), "{text}");
    let v = json(&gpumeter(&["recording", "show", s(&plain), "--json"]));
    assert_eq!(v["pm"], serde_json::json!([]));
}

/// `gpumeter usage` meters a recording's PM samples end to end: sm_active_ns and dram_bytes
/// (the interval with the kernel to its process's tenant, the one without a kernel to idle), and
/// the overflow as loss.
///
/// Needs the meter's PM-sample metering (`Meter::push_pm_sample`, issue 16 item 2).
#[test]
fn usage_meters_pm_samples_of_a_recording() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = pm_recording(dir.path());
    let o = gpumeter(&["usage", s(&rec), "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let u = json(&o);
    assert_eq!(meter_total(&u, "sm_ns"), 132_000);
    assert_eq!(meter_total(&u, "sm_active_ns"), 112_200);
    // The second sample has no write counter: DRAM is booked only from samples with both.
    assert_eq!(meter_total(&u, "dram_bytes"), 10_000);
    let loss: u64 = u["loss"]
        .as_array()
        .expect("loss")
        .iter()
        .filter(|l| l["reason"] == "pm_sample_overflow")
        .map(|l| l["records"].as_u64().expect("n"))
        .sum();
    assert_eq!(loss, 1);
}

/// `recording show` prints a recording's host, device and kernel names escaped.
#[test]
fn recording_show_escapes_names_from_the_recording() {
    use gpumeter_recording::gmr::{Frame, GmrWriter, StringTable};
    let t0: u64 = 1_793_606_160_000_000_000;
    let mut buf = Vec::new();
    one_kernel(&mut buf, t0, &[("gridX", 1), ("name", 0x1000)]);
    let header = one_gpu_header(
        t0,
        "node\u{1b}[2J",
        "test\u{85}",
        "NVIDIA H100\nfake row\u{202e}",
        None,
    );
    let mut names = StringTable::new();
    names.insert(0x1000, "kern\u{1b}[31mel\r\n");
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    w.write_strings(&names).expect("strings");
    w.write_frame(&Frame::ActivityBuffer(buf)).expect("frame");
    let dir = tempfile::tempdir().expect("tempdir");
    let rec = dir.path().join("run\u{1b}[5m.gmr");
    std::fs::write(&rec, w.finish().expect("finish")).expect("write");
    let o = gpumeter(&["recording", "show", s(&rec)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let raw = raw_terminal_controls(&text);
    assert!(raw.is_empty(), "raw {raw:?} in {text}");
    assert!(!text.lines().any(|l| l.starts_with("fake row")), "{text}");
    for shown in [
        "node\\u{1b}[2J",
        "NVIDIA H100\\nfake row\\u{202e}",
        "test\\u{85}",
        "kern\\u{1b}[31mel\\r\\n",
        "run\\u{1b}[5m.gmr",
    ] {
        assert!(text.contains(shown), "{shown} not in {text}");
    }
    // --json keeps the names exactly.
    let o = gpumeter(&["recording", "show", s(&rec), "--json"]);
    assert!(
        raw_terminal_controls(&stdout(&o)).is_empty(),
        "{}",
        stdout(&o)
    );
    let v = json(&o);
    assert_eq!(v["kernel_names"][0]["name"], "kern\u{1b}[31mel\r\n");
}

/// Names that break the tenant-name rule (trimmed, printable, not reserved in any case).
/// Each with a phrase of the rule it breaks and the character the message must not print.
const BAD_TENANTS: [(&str, &str, Option<char>); 7] = [
    ("idle ", "must not begin or end with whitespace", None),
    (" alice", "must not begin or end with whitespace", None),
    ("IDLE", "`idle` is reserved (in any case)", None),
    (
        "Unattributed",
        "`unattributed` is reserved (in any case)",
        None,
    ),
    (
        "al\u{200b}ice",
        "must be printable: character 2 is U+200B",
        Some('\u{200b}'),
    ),
    (
        "a\u{1b}[2Jb",
        "must be printable: character 1 is U+001B",
        Some('\u{1b}'),
    ),
    (
        "a\nb",
        "must be printable: character 1 is U+000A",
        Some('\n'),
    ),
];

fn assert_names_rule(e: &str, rule: &str, raw: Option<char>) {
    assert!(
        e.contains(rule),
        "the message must name the rule `{rule}`: {e}"
    );
    if let Some(c) = raw {
        assert!(
            !e.trim_end_matches('\n').contains(c),
            "the message must not print U+{:04X} raw: {e:?}",
            u32::from(c)
        );
    }
}

#[test]
fn a_bad_tenant_on_the_command_line_is_exit_2_naming_the_rule() {
    let ex = example();
    for (name, rule, raw) in BAD_TENANTS {
        for cmd in [
            vec!["usage", s(&ex), "--tenant", name],
            vec!["preview", s(&ex), "--prices", s(&book()), "--tenant", name],
        ] {
            let o = gpumeter(&cmd);
            assert_eq!(o.status.code(), Some(2), "{name:?}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(e.starts_with("error: --tenant: "), "{e}");
            assert_names_rule(&e, rule, raw);
        }
    }
    // The command line is checked before any file is read: a bad --tenant with a missing
    // price book is still exit 2.
    let o = gpumeter(&[
        "preview",
        s(&ex),
        "--prices",
        "missing.toml",
        "--tenant",
        "IDLE",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A good name is accepted.
    let u = json(&gpumeter(&[
        "usage",
        s(&ex),
        "--tenant",
        "Zoë team-7",
        "--json",
    ]));
    assert!(u["totals"]
        .as_array()
        .expect("totals")
        .iter()
        .all(|t| t["tenant"] == "Zoë team-7"));
}

#[test]
fn a_bad_tenant_in_a_tenant_map_is_exit_1_naming_file_key_and_rule() {
    let ex = example();
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, (name, rule, raw)) in BAD_TENANTS.into_iter().enumerate() {
        let map = dir.path().join(format!("tenants-{i}.toml"));
        // A TOML basic string with \uXXXX escapes: the file itself is plain ASCII.
        let quoted: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c.to_string()
                } else {
                    format!("\\u{:04X}", u32::from(c))
                }
            })
            .collect();
        std::fs::write(&map, format!("[pid]\n4242 = \"{quoted}\"\n")).expect("write");
        for cmd in [
            vec!["usage", s(&ex), "--tenant-map", s(&map)],
            vec![
                "preview",
                s(&ex),
                "--prices",
                s(&book()),
                "--tenant-map",
                s(&map),
            ],
        ] {
            let o = gpumeter(&cmd);
            assert_eq!(o.status.code(), Some(1), "{name:?}: {}", stderr(&o));
            let e = stderr(&o);
            assert!(e.contains(&format!("tenants-{i}.toml")), "{e}");
            assert!(e.contains("[pid] key `4242`"), "{e}");
            assert_names_rule(&e, rule, raw);
        }
    }
}

#[test]
fn a_bad_tenant_in_an_opening_report_is_exit_1_naming_the_entry() {
    let t0: i128 = 1_793_606_160_000_000_000;
    let buffer = |kernel_at: i128, op: i128, t: i128| {
        kernel_and_memory_buffer(0x0123_4567_89ab_cdef, kernel_at, &[(op, t)])
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("first.cupti");
    let second = dir.path().join("second.cupti");
    std::fs::write(&first, buffer(t0, 1, t0 + 100)).expect("write");
    std::fs::write(&second, buffer(t0 + 5_000, 2, t0 + 3_000)).expect("write");
    let u1 = json(&gpumeter(&[
        "usage",
        s(&first),
        "--tenant",
        "acme",
        "--json",
    ]));
    assert_eq!(u1["open_allocations"][0]["tenant"], "acme");
    // The report as given is good opening state.
    let good = dir.path().join("good.json");
    std::fs::write(&good, u1.to_string()).expect("write");
    let o = gpumeter(&["usage", s(&second), "--opening", s(&good)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (name, rule, raw) in BAD_TENANTS {
        // The tenant edited and the report sealed again: only the tenant is wrong.
        let mut edited = u1.clone();
        edited["open_allocations"][0]["tenant"] = Value::from(name);
        let digest =
            gpumeter::core::document_sha256(&edited, "sha256").expect("digest of the report");
        edited["sha256"] = Value::from(digest);
        let r = dir.path().join("opening.json");
        std::fs::write(&r, edited.to_string()).expect("write");
        let o = gpumeter(&["usage", s(&second), "--opening", s(&r)]);
        assert_eq!(o.status.code(), Some(1), "{name:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("opening.json"), "{e}");
        assert!(e.contains("open_allocations[0].tenant"), "{e}");
        assert_names_rule(&e, rule, raw);
    }
}

/// `gpumeter prices check` (issue 10 item 2): each refusal exits 1 naming the file, line,
/// column, table and field; a book with every feature passes and shows it; `--devices` warns
/// of SKUs no catalog device matches.
mod prices_check_book {
    use super::*;

    const HEAD: &str = "schema = \"gpumeter.pricebook/v1\"\nversion = \"t\"\ncurrency = \"USD\"\n[[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n";
    const RATE: &str = "[[rate]]\nsku = \"h100\"\nmeter = \"sm_ns\"\nunit = \"SM·hour\"\n";

    fn full_book() -> PathBuf {
        root().join("crates/gpumeter-rating/tests/data/pricebook_full.toml")
    }

    /// (body after HEAD, `line:column: table.field` expected in stderr, a fragment of the
    /// reason). Lines count from 1 in HEAD + body; HEAD has 6 lines, RATE 4.
    const CASES: &[(&str, &str, &str)] = &[
        // negative price
        ("unit_price = \"-1\"\n", "11:1: rate[0].unit_price", "negative"),
        // tiers out of order
        ("model = \"graduated\"\ntiers = [{ up_to = \"10\", unit_price = \"1\" }, { up_to = \"5\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }]\n", "12:48: rate[0].tiers[1].up_to", "increasing"),
        // overlapping tiers
        ("model = \"volume\"\ntiers = [{ up_to = \"10\", unit_price = \"1\" }, { up_to = \"10\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }]\n", "12:48: rate[0].tiers[1].up_to", "overlaps"),
        // an empty first tier
        ("model = \"volume\"\ntiers = [{ up_to = \"0\", unit_price = \"1\" }, { up_to = \"inf\", unit_price = \"1\" }]\n", "12:12: rate[0].tiers[0].up_to", "gap"),
        // a last tier that is not inf
        ("model = \"graduated\"\ntiers = [{ up_to = \"10\", unit_price = \"1\" }]\n", "12:12: rate[0].tiers[0].up_to", "unbounded"),
        // unit_price contradicting the first tier
        ("unit_price = \"2\"\nmodel = \"graduated\"\ntiers = [{ up_to = \"inf\", unit_price = \"1\" }]\n", "11:1: rate[0].unit_price", "contradicts"),
        // per_unit with tiers
        ("tiers = [{ up_to = \"inf\", unit_price = \"1\" }]\n", "11:1: rate[0].tiers", "only for model"),
        // package without package_size
        ("unit_price = \"1\"\nmodel = \"package\"\n", "12:1: rate[0].model", "package_size"),
        // a flat fee finer than a cent
        ("model = \"volume\"\ntiers = [{ up_to = \"inf\", unit_price = \"1\", flat_fee = \"0.005\" }]\n", "12:45: rate[0].tiers[0].flat_fee", "minor unit"),
        // an increment that is not whole canonical units
        ("unit_price = \"1\"\nincrement = \"0.0000000000000001\"\n", "12:1: rate[0].increment", "whole number of SM·ns"),
        // overlapping bands in one zone
        ("unit_price = \"1\"\n[[band]]\nname = \"a\"\ntz = \"UTC\"\nhours = \"22:00-06:00\"\nmultiplier = \"0.5\"\n[[band]]\nname = \"b\"\ntz = \"UTC\"\nhours = \"05:00-07:00\"\nmultiplier = \"0.7\"\n", "20:1: band[1].hours", "overlaps band[0]"),
        // an unknown time zone
        ("unit_price = \"1\"\n[[band]]\nname = \"a\"\ntz = \"Europe/Atlantis\"\nhours = \"22:00-06:00\"\nmultiplier = \"0.5\"\n", "14:1: band[0].tz", "IANA"),
        // a product of price and multiplier too fine for a decimal
        ("unit_price = \"0.0000000000000000000001\"\n[[band]]\nname = \"a\"\ntz = \"UTC\"\nhours = \"22:00-06:00\"\nmultiplier = \"0.0000001\"\n", "16:1: band[0].multiplier", "exactly"),
    ];

    #[test]
    fn each_invalid_book_exits_1_with_line_column_and_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = dir.path().join("bad.toml");
        for (body, place, fragment) in CASES {
            std::fs::write(&bad, format!("{HEAD}{RATE}{body}")).expect("write");
            let o = gpumeter(&["prices", "check", s(&bad)]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{body}: {err}");
            assert!(
                err.contains(&format!("bad.toml:{place}")),
                "`{place}` not in: {err}"
            );
            assert!(err.contains(fragment), "`{fragment}` not in: {err}");
            assert!(stdout(&o).is_empty(), "{}", stdout(&o));
        }
    }

    #[test]
    fn a_book_with_every_feature_passes_and_shows_it() {
        let o = gpumeter(&["prices", "check", s(&full_book())]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        for want in [
            "ok: the price book is valid",
            "rate[0] sm_ns: 0.01750 USD per SM·hour, graduated, increment 0.001 SM·hour",
            "valid [-∞, 2027-01-01T00:00:00Z)",
            "rate[1] sm_ns: 0.000004 USD per SM·s, graduated",
            "valid [2027-01-01T00:00:00Z, ∞)",
            "tier[2] up to inf: 0.0140 USD per SM·hour, flat fee 2.50 USD",
            "rate[2] sm_ns: 0.012 USD per SM·hour, volume",
            "per package of 100 GB",
            "band[0] off-peak: America/New_York, mon tue wed thu fri, 22:00-06:00 (wraps midnight), multiplier 0.60",
        ] {
            assert!(text.contains(want), "`{want}` not in:\n{text}");
        }
        // The example book passes too.
        let o = gpumeter(&["prices", "check", s(&book())]);
        assert!(o.status.success(), "{}", stderr(&o));
    }

    #[test]
    fn devices_warn_of_skus_no_catalog_device_matches_and_exit_0() {
        let dir = tempfile::tempdir().expect("tempdir");
        let catalog = dir.path().join("devices.toml");
        std::fs::write(
            &catalog,
            "[[device]]\nid = 0\nname = \"NVIDIA H100 80GB HBM3\"\nsm_count = 132\ncompute_capability = \"9.0\"\n",
        )
        .expect("write");
        let o = gpumeter(&["prices", "check", s(&full_book()), "--devices", s(&catalog)]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains("\nWarnings\n"), "{text}");
        assert!(
            text.contains("sku[1] `a100` (line 13): no device of the catalog matches it"),
            "{text}"
        );
        assert!(!text.contains("`h100` (line"), "{text}");
    }
}

mod render;

mod habits;

// --- Usage reports merge (`--format usage`, issue 10 item 3) ---------------------------------

/// A one-GPU Kineto trace (modern schema) of an H100 with a UUID, so that the GPU is one
/// device in every trace that names it; `events` are (category, name, ts µs after the base,
/// dur µs, grid x, bytes). The base is 2026-11-02T07:00:00Z, an hour edge.
fn kineto_h100(events: &[(&str, &str, u64, u64, u64, u64)]) -> Value {
    let events: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, &(cat, name, ts, dur, grid, bytes))| {
            let mut args = serde_json::json!({"device": 0, "stream": 7 + (i % 2),
                                              "correlation": i + 1});
            if cat == "kernel" {
                args["grid"] = serde_json::json!([grid, 1, 1]);
                args["block"] = serde_json::json!([128, 1, 1]);
            } else {
                args["bytes"] = Value::from(bytes);
            }
            serde_json::json!({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7 + (i % 2),
                               "ts": ts, "dur": dur, "args": args})
        })
        .collect();
    serde_json::json!({
        "schemaVersion": 1,
        "baseTimeNanoseconds": 1_793_602_800_000_000_000u64,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "computeMajor": 9,
                              "computeMinor": 0, "numSms": 132,
                              "uuid": "GPU-5b0ac4f5-0e2a-4c1e-9f31-7d3f00c0ffee"}],
        "traceEvents": events
    })
}

const HOUR_US: u64 = 3_600_000_000;

/// The work of one job over two hours, none of it across the hour edge: the first hour's
/// events, then the second's (kernels on two streams overlap, so the SM cap applies).
#[allow(clippy::type_complexity)]
fn two_hours() -> (
    Vec<(&'static str, &'static str, u64, u64, u64, u64)>,
    Vec<(&'static str, &'static str, u64, u64, u64, u64)>,
) {
    let first = vec![
        (
            "gpu_memcpy",
            "Memcpy HtoD (Pageable -> Device)",
            10,
            40,
            0,
            1 << 20,
        ),
        ("kernel", "gemm", 100, 700, 264, 0),
        ("kernel", "softmax", 300, 900, 100, 0),
        ("kernel", "gemm", HOUR_US - 50, 50, 500, 0),
    ];
    let second = vec![
        ("kernel", "gemm", HOUR_US, 1_000, 264, 0),
        ("kernel", "softmax", HOUR_US + 500, 2_000, 40, 0),
        (
            "gpu_memcpy",
            "Memcpy DtoH (Device -> Pageable)",
            HOUR_US + 3_000,
            20,
            0,
            4096,
        ),
    ];
    (first, second)
}

/// Writes the whole trace, its two halves, and the halves' usage reports (`usage --json`)
/// into `dir`: (whole trace, first half's trace, report of the first, report of the second).
fn split_reports(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let (first, second) = two_hours();
    let all: Vec<_> = first.iter().chain(&second).copied().collect();
    let write = |name: &str, v: &Value| {
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).expect("write");
        p
    };
    let whole = write("whole.json", &kineto_h100(&all));
    let a = write("node-a.json", &kineto_h100(&first));
    let b = write("node-b.json", &kineto_h100(&second));
    let report = |trace: &Path, name: &str| {
        let o = gpumeter(&["usage", s(trace), "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let p = dir.join(name);
        std::fs::write(&p, &o.stdout).expect("write report");
        p
    };
    let ra = report(&a, "a.usage.json");
    let rb = report(&b, "b.usage.json");
    (whole, a, ra, rb)
}

#[test]
fn reports_split_at_a_window_edge_merge_to_the_report_of_the_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (whole, _, ra, rb) = split_reports(dir.path());
    let whole_report = json(&gpumeter(&["usage", s(&whole), "--json"]));
    let merged_out = gpumeter(&["usage", "--format", "usage", s(&ra), s(&rb), "--json"]);
    let merged = json(&merged_out);
    validate("gpumeter.usage.v1.schema.json", &merged);
    // Both halves have usage, in different windows.
    assert_eq!(
        whole_report["usage"].as_array().map(|u| {
            u.iter()
                .map(|r| r["window_start"].as_str().expect("window"))
                .collect::<std::collections::BTreeSet<_>>()
                .len()
        }),
        Some(2)
    );
    // Row for row, the same usage and totals as metering the whole input at once.
    assert_eq!(merged["usage"], whole_report["usage"]);
    assert_eq!(merged["totals"], whole_report["totals"]);
    assert_eq!(
        merged["devices"][0]["device_key"],
        whole_report["devices"][0]["device_key"]
    );
    assert_eq!(merged["records"], whole_report["records"]);
    assert!(meter_total(&merged, "sm_ns") > 0);
    // Each source keeps its own SHA-256; each report is named with its digest.
    let names: Vec<&str> = merged["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|x| x["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["node-a.json", "node-b.json"]);
    let merged_reports = &merged["extensions"]["merged_reports"];
    let ra_doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&ra).expect("read")).expect("json");
    assert_eq!(merged_reports[0]["name"], "a.usage.json");
    assert_eq!(merged_reports[0]["sha256"], ra_doc["sha256"]);
    assert_eq!(merged_reports[1]["name"], "b.usage.json");
    // The merged report is sealed: its digest re-derives.
    let recomputed = gpumeter::core::document_sha256(&merged, "sha256").expect("digest");
    assert_eq!(merged["sha256"], recomputed.as_str());
    // Detected without --format, in the other order: the same bytes.
    let auto = gpumeter(&["usage", s(&rb), s(&ra), "--json"]);
    assert!(auto.status.success(), "{}", stderr(&auto));
    assert_eq!(auto.stdout, merged_out.stdout);
    // The reports' own window may be given; the text table works too.
    let t = gpumeter(&["usage", s(&ra), s(&rb), "--window", "1h"]);
    assert!(t.status.success(), "{}", stderr(&t));
    assert!(stdout(&t).contains("sm_ns"), "{}", stdout(&t));
}

#[test]
fn preview_of_merged_reports_bills_the_lines_of_the_whole_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (whole, _, ra, rb) = split_reports(dir.path());
    let whole_inv = json(&gpumeter(&[
        "preview",
        s(&whole),
        "--prices",
        s(&book()),
        "--json",
    ]));
    let merged_inv = json(&gpumeter(&[
        "preview",
        "--format",
        "usage",
        s(&ra),
        s(&rb),
        "--prices",
        s(&book()),
        "--json",
    ]));
    validate("gpumeter.invoice.v1.schema.json", &merged_inv);
    let invoices = |d: &Value| d["invoices"].as_array().expect("invoices").clone();
    let (w, m) = (invoices(&whole_inv), invoices(&merged_inv));
    assert_eq!(w.len(), 1);
    assert_eq!(m.len(), w.len());
    for (w, m) in w.iter().zip(&m) {
        assert!(!w["lines"].as_array().expect("lines").is_empty());
        assert_eq!(m["lines"], w["lines"]);
        assert_eq!(m["total"], w["total"]);
        assert_eq!(m["period"], w["period"]);
    }
}

#[test]
fn an_edited_report_is_refused_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, _, ra, rb) = split_reports(dir.path());
    let mut doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&ra).expect("read")).expect("json");
    let q: u128 = doc["usage"][0]["quantity"]
        .as_str()
        .expect("quantity")
        .parse()
        .expect("integer");
    doc["usage"][0]["quantity"] = Value::from((q + 1).to_string());
    let edited = dir.path().join("edited.usage.json");
    std::fs::write(&edited, serde_json::to_string_pretty(&doc).expect("json")).expect("write");
    for format in ["usage", "auto"] {
        let o = gpumeter(&["usage", "--format", format, s(&edited), s(&rb)]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("edited.usage.json") && e.contains("sha256"),
            "{e}"
        );
    }
    // Not JSON at all, under --format usage: a bad input file, named.
    let junk = dir.path().join("junk.usage.json");
    std::fs::write(&junk, "{\"schema\": \"gpumeter.usage/v1\", ").expect("write");
    let o = gpumeter(&["usage", "--format", "usage", s(&junk), s(&rb)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("junk.usage.json"), "{}", stderr(&o));
}

#[test]
fn the_same_report_twice_counts_once_and_reports_sharing_a_source_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, a, ra, rb) = split_reports(dir.path());
    let alone = json(&gpumeter(&["usage", s(&ra), s(&rb), "--json"]));
    // The same bytes under another name, and the same path again.
    let copy = dir.path().join("a-copy.usage.json");
    std::fs::copy(&ra, &copy).expect("copy");
    let twice = json(&gpumeter(&[
        "usage",
        s(&ra),
        s(&copy),
        s(&rb),
        s(&ra),
        "--json",
    ]));
    assert_eq!(twice["usage"], alone["usage"]);
    assert_eq!(twice["totals"], alone["totals"]);
    assert_eq!(twice["sources"], alone["sources"]);
    let warnings: Vec<&str> = twice["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter(|w| w["code"] == "duplicate_report")
        .map(|w| w["message"].as_str().expect("warning"))
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("a.usage.json") && w.contains("counted once")),
        "{warnings:?}"
    );
    // Another report of the same trace (another tenant): the trace would be billed twice.
    let o = gpumeter(&["usage", s(&a), "--tenant", "team-a", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let other = dir.path().join("a-team.usage.json");
    std::fs::write(&other, &o.stdout).expect("write");
    let o = gpumeter(&["usage", s(&ra), s(&other), s(&rb)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("node-a.json") && e.contains("twice"),
        "the source is named: {e}"
    );
}

#[test]
fn reports_are_not_mixed_with_traces_nor_merged_across_window_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, a, ra, rb) = split_reports(dir.path());
    // A report among traces (detected) and a trace under --format usage: bad command lines.
    let o = gpumeter(&["usage", s(&ra), s(&a)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("a.usage.json") && e.contains("node-a.json"),
        "{e}"
    );
    let o = gpumeter(&["usage", "--format", "usage", s(&ra), s(&a)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("node-a.json"), "{}", stderr(&o));
    // Options that only metering uses, and another window: bad command lines.
    let book = book();
    for extra in [
        &["--tenant", "team-a"][..],
        &["--cupti-api-version", "26"],
        &["--window", "15m"],
    ] {
        let mut args = vec!["preview", s(&ra), s(&rb), "--prices", s(&book)];
        args.extend_from_slice(extra);
        let o = gpumeter(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(extra[0]), "{}", stderr(&o));
    }
    // A report of another window size: refused naming it.
    let b15 = dir.path().join("b15.usage.json");
    let node_b = dir.path().join("node-b.json");
    let o = gpumeter(&["usage", s(&node_b), "--window", "15m", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&b15, &o.stdout).expect("write");
    let o = gpumeter(&["usage", s(&ra), s(&b15)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("b15.usage.json") && e.contains("window_seconds"),
        "{e}"
    );
}

// --- The README's example invoice, line by line (examples/README.md) -------------------------

/// The example's invoice as examples/README.md derives it with a pocket calculator: per-window
/// usage from `usage --json`, then each line's quantity and amount by hand.
#[test]
fn the_example_invoice_is_what_the_walkthrough_computes() {
    let u = json(&gpumeter(&["usage", s(&example()), "--json"]));
    let per_window = |window: &str, meter: &str| -> u128 {
        u["usage"]
            .as_array()
            .expect("usage")
            .iter()
            .filter(|r| r["window_start"] == window && r["meter"] == meter)
            .map(|r| {
                r["quantity"]
                    .as_str()
                    .expect("q")
                    .parse::<u128>()
                    .expect("int")
            })
            .sum()
    };
    let (nov, dec) = ("2026-11-30T23:00:00Z", "2026-12-01T00:00:00Z");
    let o = gpumeter(&["preview", s(&example()), "--prices", s(&book()), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc = json(&o);
    validate("gpumeter.invoice.v1.schema.json", &doc);
    let inv = &doc["invoices"][0];
    let lines = inv["lines"].as_array().expect("lines");
    let q = |l: &Value, k: &str| l[k].as_str().expect(k).parse::<u128>().expect("int");
    let fields = |l: &Value| {
        (
            l["meter"].as_str().unwrap_or("").to_string(),
            l["band"].as_str().unwrap_or("").to_string(),
            l["tier"].as_str().unwrap_or("").to_string(),
            l["unit_price"].as_str().unwrap_or("").to_string(),
            l["amount"].as_str().unwrap_or("").to_string(),
        )
    };
    let f = |m: &str, b: &str, t: &str, p: &str, a: &str| {
        (m.into(), b.into(), t.into(), p.into(), a.into())
    };
    let got: Vec<(String, String, String, String, String)> = lines.iter().map(fields).collect();
    assert_eq!(
        got,
        vec![
            f("gpu_busy_ns", "", "", "0.10", "0.01"),
            f("gpu_busy_ns", "", "", "0.12", "0.01"),
            f("sm_ns", "", "1: 0–20", "0.022652", "0.39"),
            f("sm_ns", "off-peak", "1: 0–20", "0.0135912", "0.04"),
            f("sm_ns", "off-peak", "2: 20–inf", "0.011400", "0.07"),
            f("memcpy_htod_bytes", "", "", "0.01", "0.16"),
        ]
    );
    assert_eq!(inv["subtotal"], "0.68");
    // Busy time: the price changes at the month edge; the 0.01-hour increment (36 s) leaves
    // the tail of December's busy time unbilled and carried.
    let busy = per_window(nov, "gpu_busy_ns") + per_window(dec, "gpu_busy_ns");
    let step = 36_000_000_000u128;
    let fragment = busy % step;
    assert_eq!(q(&lines[0], "quantity"), per_window(nov, "gpu_busy_ns"));
    assert_eq!(q(&lines[0], "fragment_carried"), 0);
    assert_eq!(q(&lines[1], "quantity"), per_window(dec, "gpu_busy_ns"));
    assert_eq!(q(&lines[1], "fragment_carried"), fragment);
    assert_eq!(
        q(&lines[1], "billable_quantity"),
        per_window(dec, "gpu_busy_ns") - fragment
    );
    assert_eq!(
        inv["extensions"]["fragments_out"][0]["quantity"],
        fragment.to_string()
    );
    // SM time: tier 1 ends at 20 SM·hours = 72 × 10^12 SM·ns, inside December's window,
    // which is also in the New York off-peak band (19:00 EST on Monday 30 November).
    let edge = 20 * 3_600_000_000_000u128;
    assert_eq!(q(&lines[2], "quantity"), per_window(nov, "sm_ns"));
    assert_eq!(q(&lines[3], "quantity"), edge - per_window(nov, "sm_ns"));
    assert_eq!(
        q(&lines[4], "quantity"),
        per_window(nov, "sm_ns") + per_window(dec, "sm_ns") - edge
    );
    // Each amount: round(billable × price ÷ factor) half-even to the cent, in integers.
    let cents = |billable: u128, price_num: u128, price_scale: u32, factor: u128| {
        let num = billable * price_num * 100;
        let den = 10u128.pow(price_scale) * factor;
        let (quot, rem) = (num / den, num % den);
        let up = 2 * rem > den || (2 * rem == den && quot % 2 == 1);
        quot + u128::from(up)
    };
    let hour = 3_600_000_000_000u128;
    let want = [
        cents(q(&lines[0], "billable_quantity"), 10, 2, hour),
        cents(q(&lines[1], "billable_quantity"), 12, 2, hour),
        cents(q(&lines[2], "billable_quantity"), 22_652, 6, hour),
        cents(q(&lines[3], "billable_quantity"), 135_912, 7, hour),
        cents(q(&lines[4], "billable_quantity"), 11_400, 6, hour),
        cents(q(&lines[5], "billable_quantity"), 1, 2, 1_000_000_000),
    ];
    let amounts: Vec<u128> = lines
        .iter()
        .map(|l| {
            let a = l["amount"].as_str().expect("amount").replace('.', "");
            a.parse::<u128>().expect("cents")
        })
        .collect();
    assert_eq!(amounts, want);
}

/// A report read with `--format usage` brings only tenant names the command line would take:
/// a resealed report with a control character or a look-alike of `idle` is refused (exit 1).
#[test]
fn a_report_with_a_tenant_name_the_rule_refuses_is_bad_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let o = gpumeter(&["usage", s(&example()), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    for bad in ["evil\u{1b}[2J", "\u{456}dle", " padded"] {
        let mut report: gpumeter::UsageReport =
            serde_json::from_slice(&o.stdout).expect("a usage report");
        report.usage[0].tenant = bad.to_string();
        report.seal().expect("seal");
        let path = dir.path().join("agent.json");
        std::fs::write(&path, serde_json::to_vec(&report).expect("json")).expect("write");
        let r = gpumeter(&["usage", "--format", "usage", s(&path)]);
        assert_eq!(r.status.code(), Some(1), "{bad:?}: {}", stderr(&r));
        let err = stderr(&r);
        assert!(err.contains("agent.json"), "{err}");
        assert!(err.contains("usage[0].tenant"), "{err}");
        assert!(!err.contains('\u{1b}'), "the name is escaped: {err:?}");
    }
}

/// `usage --by-window`: one table per UTC window, headed by its start and end (RFC 3339, end
/// exclusive), whose rows add up to the totals; the plain text has no window tables; with
/// `--json` it is a bad command line (exit 2).
#[test]
fn usage_by_window_shows_each_window_and_its_rows_sum_to_the_totals() {
    let ex = example();
    let plain = gpumeter(&["usage", s(&ex)]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert!(!stdout(&plain).contains("\nWindow "), "{}", stdout(&plain));
    let out = gpumeter(&["usage", s(&ex), "--by-window"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let heads: Vec<&str> = text.lines().filter(|l| l.starts_with("Window ")).collect();
    assert_eq!(
        heads,
        [
            "Window 2026-11-30T23:00:00Z to 2026-12-01T00:00:00Z (end exclusive)",
            "Window 2026-12-01T00:00:00Z to 2026-12-01T01:00:00Z (end exclusive)",
        ],
        "{text}"
    );
    // The same text as without --by-window once the window tables are taken out.
    let start = text.find("\nWindow ").expect("a window table");
    let end = text.find("\nTotals").expect("totals");
    assert_eq!(
        format!("{}{}", &text[..start], &text[end..]),
        stdout(&plain)
    );
    // Per (tenant, device, meter), the window rows sum to the totals row.
    let rows = |section: &str| -> Vec<(String, String, String, u128)> {
        section
            .lines()
            .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with("TENANT"))
            .map(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                let q: u128 = c[3].replace(',', "").parse().expect("quantity");
                (c[0].to_string(), c[1].to_string(), c[2].to_string(), q)
            })
            .collect()
    };
    let mut by_window = std::collections::BTreeMap::new();
    for (t, d, m, q) in rows(&text[start..end]) {
        *by_window.entry((t, d, m)).or_insert(0u128) += q;
    }
    let totals_end = text[end..].find("\n\n").map_or(text.len(), |i| end + i + 1);
    let totals: std::collections::BTreeMap<_, _> = rows(&text[end + 1..totals_end])
        .into_iter()
        .map(|(t, d, m, q)| ((t, d, m), q))
        .collect();
    assert!(!totals.is_empty(), "{text}");
    assert_eq!(by_window, totals, "{text}");

    let refused = gpumeter(&["usage", s(&ex), "--by-window", "--json"]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("--by-window"),
        "{}",
        stderr(&refused)
    );
    assert!(refused.stdout.is_empty());
}

/// (device id, meter) pairs.
type Pairs = Vec<(u32, String)>;

/// The (device id, meter) pairs of the Devices table's NOT METERABLE column, and those the
/// Warnings section says are not meterable (`M is …` / `M and N are not meterable on device
/// D (KEY): …`), of a `usage` text.
fn not_meterable_pairs(text: &str) -> (Pairs, Pairs) {
    use std::collections::BTreeSet;
    let mut column = BTreeSet::new();
    let devices = text
        .split("\nDevices\n")
        .nth(1)
        .and_then(|t| t.split("\n\n").next())
        .unwrap_or("");
    let mut lines = devices.lines();
    let header = lines.next().unwrap_or("");
    let at = header.find("NOT METERABLE");
    for line in lines {
        let id: u32 = line
            .split_whitespace()
            .next()
            .and_then(|d| d.parse().ok())
            .expect("a device id");
        let cell = at.and_then(|i| line.get(i..)).unwrap_or("").trim();
        for meter in cell.split(", ").filter(|m| !m.is_empty()) {
            column.insert((id, meter.to_string()));
        }
    }
    let mut warned = BTreeSet::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("  - ")) {
        let Some((meters, rest)) = line
            .split_once(" is not meterable on device ")
            .or_else(|| line.split_once(" are not meterable on device "))
        else {
            continue;
        };
        let id: u32 = rest
            .split_whitespace()
            .next()
            .and_then(|d| d.parse().ok())
            .expect("a device id");
        for meter in meters.split(" and ") {
            warned.insert((id, meter.to_string()));
        }
    }
    (column.into_iter().collect(), warned.into_iter().collect())
}

/// The Devices table's NOT METERABLE column names the meters the warnings name, on the same
/// device: a Kineto trace without a device table (no SM count: sm_ns and warp_ns), the same
/// with a catalog whose compute capability the occupancy calculator does not know (warp_ns),
/// the committed recordings, and the shared traces without device tables when present.
#[test]
fn the_not_meterable_column_and_its_warnings_agree() {
    let hostile = root().join("tests/hostile");
    let trace = hostile.join("graph-launch-2021.json");
    let catalog = hostile.join("catalog-cc-99.toml");
    let mut runs: Vec<(Vec<String>, bool)> = vec![
        (vec![s(&trace).to_string()], true),
        (
            vec![
                s(&trace).to_string(),
                "--devices".into(),
                s(&catalog).to_string(),
            ],
            true,
        ),
    ];
    for gmr in ["h200-cuda13-instructions.gmr", "h200-cuda13-smoke.gmr"] {
        runs.push((
            vec![s(&root().join("examples/data").join(gmr)).to_string()],
            false,
        ));
    }
    for name in ["hta_sampled_rank-0.json.gz", "hta_sampled_rank-1.json.gz"] {
        if let Some(p) = shared(name) {
            runs.push((vec![s(&p).to_string()], true));
        }
    }
    for (args, expect_some) in runs {
        let mut all = vec!["usage"];
        all.extend(args.iter().map(String::as_str));
        let out = gpumeter(&all);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        let (column, warned) = not_meterable_pairs(&text);
        assert_eq!(column, warned, "{args:?}:\n{text}");
        if expect_some {
            assert!(!column.is_empty(), "{args:?}:\n{text}");
        }
    }
    // Without a device table: both meters the warning names, in the column and in the JSON.
    let doc = json(&gpumeter(&["usage", s(&trace), "--json"]));
    let entries: Vec<(String, String)> = doc["devices"][0]["not_meterable"]
        .as_array()
        .expect("not_meterable")
        .iter()
        .map(|n| {
            (
                n["meter"].as_str().expect("meter").to_string(),
                n["code"].as_str().expect("code").to_string(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("sm_ns".to_string(), "sm_count_unknown".to_string()),
            ("warp_ns".to_string(), "sm_count_unknown".to_string()),
        ]
    );
}

/// A usage report written before warnings had codes (plain strings) is still merged by
/// `--format usage`: its digest verifies, and its warnings are shown and carried as they were.
#[test]
fn a_report_written_before_codes_is_read_by_format_usage() {
    let old = root().join("tests/before-codes/recording_26.gmr.1h.json");
    let text = gpumeter(&["usage", s(&old), "--format", "usage"]);
    assert!(text.status.success(), "{}", stderr(&text));
    assert!(
        stdout(&text).contains("recording_26.gmr.1h.json: warp_instructions is not meterable"),
        "{}",
        stdout(&text)
    );
    let doc = json(&gpumeter(&["usage", s(&old), "--json"]));
    validate("gpumeter.usage.v1.schema.json", &doc);
    let warnings = doc["warnings"].as_array().expect("warnings");
    assert!(!warnings.is_empty());
    assert!(warnings.iter().all(Value::is_string), "{warnings:?}");
}

/// Issue 17: a price book with FLOP rates passes `prices check`, and `preview` of a Kineto
/// trace in CUPTI-profiler mode (ranges with SASS op counters, no kernel events) bills each
/// precision's FLOPs exactly: 2 ranges of 10¹² FFMA and 5·10¹¹ FADD each = 5·10¹² fp32 FLOP =
/// 5 TFLOP at 0.40 USD = 2.00.
#[test]
fn flop_rates_check_and_price_a_profiler_mode_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let book = dir.path().join("flops.toml");
    std::fs::write(
        &book,
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"flops-1\"\ncurrency = \"USD\"\n\
         [[sku]]\nid = \"a100\"\nmatch = [\"NVIDIA A100*\"]\n\
         [[rate]]\nsku = \"a100\"\nmeter = \"flops_fp32\"\nunit = \"TFLOP\"\nunit_price = \"0.40\"\n\
         [[rate]]\nsku = \"a100\"\nmeter = \"flops_fp64\"\nunit = \"GFLOP\"\nunit_price = \"0.001\"\n\
         [[rate]]\nsku = \"a100\"\nmeter = \"tensor_ops\"\nunit = \"PFLOP\"\nunit_price = \"1\"\n",
    )
    .expect("write");
    let o = gpumeter(&["prices", "check", s(&book)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let counters = |ffma: u64, fadd: u64| {
        [
            "dadd", "dmul", "dfma", "fadd", "fmul", "ffma", "hadd", "hmul", "hfma",
        ]
        .iter()
        .map(|op| {
            let v = match *op {
                "ffma" => ffma,
                "fadd" => fadd,
                _ => 0,
            };
            format!("\"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum\": {v}")
        })
        .collect::<Vec<_>>()
        .join(", ")
    };
    let range = |ts: u64| {
        format!(
            r#"{{"ph": "X", "cat": "cuda_profiler_range", "name": "sgemm", "pid": 0, "tid": 0, "ts": {ts}, "dur": 100, "args": {{{}}}}}"#,
            counters(1_000_000_000_000, 500_000_000_000)
        )
    };
    let trace = dir.path().join("prof.json");
    std::fs::write(
        &trace,
        format!(
            r#"{{"baseTimeNanoseconds": 1700000000000000000, "deviceProperties": [{{"id": 0, "name": "NVIDIA A100-PG509-200", "numSms": 108, "computeMajor": 8, "computeMinor": 0}}], "traceEvents": [{}, {}]}}"#,
            range(1_000),
            range(2_000)
        ),
    )
    .expect("write");
    let o = gpumeter(&["preview", s(&trace), "--prices", s(&book), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: Value = serde_json::from_slice(&o.stdout).expect("invoice JSON");
    let lines = doc["invoices"][0]["lines"].as_array().expect("lines");
    let fp32 = lines
        .iter()
        .find(|l| l["meter"] == "flops_fp32")
        .expect("an fp32 line");
    assert_eq!(fp32["amount"], "2.00", "{fp32}");
    assert_eq!(fp32["quantity"], "5000000000000", "{fp32}");
    // fp64 counted 0 and tensor_ops not recorded: no line bills them.
    assert!(
        lines.iter().all(|l| l["meter"] != "tensor_ops"),
        "{lines:?}"
    );
    let warnings = doc["invoices"][0]["warnings"].to_string();
    assert!(warnings.contains("instrumented run"), "{warnings}");
}
