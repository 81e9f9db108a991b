//! `usage --events` (issue 14, item 1): JSON Lines events of the shared BERT trace in each
//! format, valid against the schemas and the same bytes on every run and on every
//! destination; the combinations of `--events` with `--json` and of the events options
//! without `--events`; mapping and quantity refusals with exit 1 and nothing written.

use std::path::Path;

use serde_json::Value;

use super::common::*;

const BERT: &str = "tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz";

/// Each line of `text` as JSON, validated against `schemas/<schema_file>`.
fn lines(schema_file: &str, text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            validate(schema_file, &v);
            v
        })
        .collect()
}

#[test]
fn bert_events_to_stdout_and_to_a_file_are_the_same_valid_lines() {
    let Some(bert) = shared(BERT) else { return };
    let report = json(&gpumeter(&["usage", s(&bert), "--json"]));
    let rows = report["usage"].as_array().expect("usage").len();
    let dir = tempfile::tempdir().expect("tempdir");
    for (format, schema) in [
        ("cloudevents", "gpumeter.events.cloudevents.v1.schema.json"),
        ("stripe", "gpumeter.events.stripe.v1.schema.json"),
        ("lago", "gpumeter.events.lago.v1.schema.json"),
    ] {
        let args = [
            "usage",
            s(&bert),
            "--events",
            "-",
            "--events-format",
            format,
        ];
        let a = gpumeter(&args);
        let b = gpumeter(&args);
        assert!(a.status.success(), "{format}: {}", stderr(&a));
        assert_eq!(a.stdout, b.stdout, "{format}: the same bytes on every run");
        let text = stdout(&a);
        assert!(
            text.ends_with('\n'),
            "{format}: each line ends with a newline"
        );
        assert!(
            !text.contains("gpumeter usage report"),
            "no report with --events -"
        );
        let events = lines(schema, &text);
        assert_eq!(events.len(), rows, "{format}: one event per usage row");

        // To a file, with the JSON report on standard output: the same bytes.
        let file = dir.path().join(format!("{format}.jsonl"));
        let o = gpumeter(&[
            "usage",
            s(&bert),
            "--events",
            s(&file),
            "--events-format",
            format,
            "--json",
        ]);
        assert_eq!(json(&o), report, "{format}: --json still prints the report");
        assert_eq!(std::fs::read(&file).expect("events file"), a.stdout);
    }
    // The default format is CloudEvents; the text report stays on standard output.
    let file = dir.path().join("default.jsonl");
    let o = gpumeter(&["usage", s(&bert), "--events", s(&file)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("gpumeter usage report"),
        "{}",
        stdout(&o)
    );
    let text = std::fs::read_to_string(&file).expect("events file");
    lines("gpumeter.events.cloudevents.v1.schema.json", &text);
}

#[test]
fn events_options_conflicting_or_alone_are_a_bad_command_line() {
    let example = example();
    let o = gpumeter(&["usage", s(&example), "--events", "-", "--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--events - writes the events to standard output"));
    assert!(o.stdout.is_empty());
    // --by-window shapes the text report, which --events - does not write.
    let o = gpumeter(&["usage", s(&example), "--events", "-", "--by-window"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("drop --by-window"), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    for args in [
        ["--events-format", "stripe"],
        ["--events-map", "examples/events-map.toml"],
    ] {
        let o = gpumeter(&["usage", s(&example), args[0], args[1]]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--events <FILE>"), "{}", stderr(&o));
    }
    let o = gpumeter(&[
        "usage",
        s(&example),
        "--events",
        "-",
        "--events-format",
        "csv",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn a_bad_mapping_is_exit_1_with_its_line_and_column_and_no_events_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let map = dir.path().join("map.toml");
    std::fs::write(&map, "[tenants.alice]\nstripe_customer = \"cus_1\"\n").expect("write");
    let out = dir.path().join("events.jsonl");
    let o = gpumeter(&[
        "usage",
        s(&example()),
        "--events",
        s(&out),
        "--events-map",
        s(&map),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("map.toml:2:1: stripe_customer = \"cus_1\": unknown field"),
        "{err}"
    );
    assert!(!out.exists(), "nothing written");
    assert!(o.stdout.is_empty(), "no report either");
    // The mapping is read before the inputs, as the price book is: its error comes first.
    let o = gpumeter(&[
        "usage",
        s(&dir.path().join("missing.json.gz")),
        "--events",
        s(&out),
        "--events-map",
        s(&map),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("map.toml:2:1: "), "{}", stderr(&o));
}

#[test]
fn the_example_mapping_sends_mapped_ids_and_leaves_other_meters_out() {
    let map = root().join("examples/events-map.toml");
    let o = gpumeter(&[
        "usage",
        s(&example()),
        "--events",
        "-",
        "--events-format",
        "lago",
        "--events-map",
        s(&map),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let events = lines("gpumeter.events.lago.v1.schema.json", &stdout(&o));
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e["external_subscription_id"], "sub_house_gpu");
        let code = e["code"].as_str().expect("code");
        assert!(
            ["gpu_busy_ns", "gpu_sm_ns", "gpu_memcpy_htod_bytes"].contains(&code),
            "{code}"
        );
    }
    assert!(
        stderr(&o).contains("usage rows of meters the events mapping leaves out"),
        "{}",
        stderr(&o)
    );
}

/// The README example's report with one `warp_ns` row raised to `quantity`, sealed again, as
/// a usage report file to merge (`--format usage`).
fn report_with_warp_ns(dir: &Path, quantity: u128) -> std::path::PathBuf {
    let o = gpumeter(&["usage", s(&example()), "--json"]);
    let mut report: gpumeter::UsageReport =
        serde_json::from_slice(&o.stdout).expect("a usage report");
    let row = report
        .usage
        .iter_mut()
        .find(|r| r.meter == gpumeter::MeterKind::WarpNs)
        .expect("a warp_ns row");
    let old = row.quantity.0;
    row.quantity.0 = quantity;
    let (tenant, key) = (row.tenant.clone(), row.device_key.clone());
    let total = report
        .totals
        .iter_mut()
        .find(|t| {
            t.meter == gpumeter::MeterKind::WarpNs && t.tenant == tenant && t.device_key == key
        })
        .expect("its total");
    total.quantity.0 = total.quantity.0 - old + quantity;
    report.seal().expect("seal");
    let path = dir.join("raised.json");
    std::fs::write(&path, serde_json::to_vec(&report).expect("JSON")).expect("write");
    path
}

#[test]
fn a_stripe_quantity_past_15_digits_is_exit_1_naming_the_row_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("stripe.jsonl");
    for (quantity, ok) in [
        (999_999_999_999_999u128, true),
        (1_000_000_000_000_000, false),
    ] {
        let report = report_with_warp_ns(dir.path(), quantity);
        let _ = std::fs::remove_file(&out);
        let o = gpumeter(&[
            "usage",
            s(&report),
            "--events",
            s(&out),
            "--events-format",
            "stripe",
        ]);
        if ok {
            assert!(o.status.success(), "{}", stderr(&o));
            let text = std::fs::read_to_string(&out).expect("events");
            assert!(text.contains(r#""value":"999999999999999""#));
        } else {
            assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
            let err = stderr(&o);
            assert!(
                err.contains("warp_ns): quantity 1000000000000000 has more than 15 digits"),
                "{err}"
            );
            assert!(err.contains("error: usage["), "{err}");
            assert!(!out.exists(), "no partial events file");
        }
    }
}

/// File names, which may hold control and bidirectional characters, never reach the events:
/// a device key without a UUID comes from the source's content (issue 30 item 3; before, it
/// was `<file name>@<8 hex>#<id>`), so a copy under a hostile name gives the very events of
/// the original, ids included, with nothing that moves a terminal's cursor.
#[test]
fn file_names_never_reach_the_events() {
    let dir = tempfile::tempdir().expect("tempdir");
    let name = "gpu\u{202e}z\u{1b}[2J.json.gz";
    let file = dir.path().join(name);
    std::fs::copy(example(), &file).expect("copy");
    let o = gpumeter(&["usage", s(&file), "--events", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        !text.contains('\u{202e}') && !text.contains('\u{1b}') && !text.contains(".json"),
        "{text}"
    );
    let original = gpumeter(&["usage", s(&example()), "--events", "-"]);
    assert!(original.status.success(), "{}", stderr(&original));
    assert_eq!(text, stdout(&original));
    let events = lines("gpumeter.events.cloudevents.v1.schema.json", &text);
    let key = events[0]["data"]["device_key"]
        .as_str()
        .expect("device key");
    assert!(key.ends_with("#0") && key.len() == 18, "{key:?}");
}

/// Stripe refuses meter events more than 35 days old: the BERT trace of 2025 is, so its
/// Stripe events come with a warning naming the oldest window (the events are still
/// written: the limit depends on when they are sent); `--quiet` drops the warning.
#[test]
fn stripe_events_older_than_35_days_are_warned_of() {
    let Some(bert) = shared(BERT) else { return };
    let args = [
        "usage",
        s(&bert),
        "--events",
        "-",
        "--events-format",
        "stripe",
    ];
    let o = gpumeter(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = lines("gpumeter.events.stripe.v1.schema.json", &stdout(&o)).len();
    assert!(
        stderr(&o).contains(&format!(
            "warning: {rows} of {rows} Stripe events have a timestamp more than 35 days ago \
             (the oldest 2025-07-18T09:00:00Z)"
        )),
        "{}",
        stderr(&o)
    );
    let o = gpumeter(&[&args[..], &["-q"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    // Other formats carry no such limit.
    let o = gpumeter(&[
        "usage",
        s(&bert),
        "--events",
        "-",
        "--events-format",
        "lago",
    ]);
    assert!(!stderr(&o).contains("Stripe"), "{}", stderr(&o));
}

/// The notice of rows left out by `only_mapped_meters` agrees with its count.
#[test]
fn one_row_left_out_is_one_row() {
    let Some(bert) = shared(BERT) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let map = dir.path().join("map.toml");
    // The BERT trace has one row of each of six meters; all but memcpy_dtoh_bytes mapped.
    let meters = [
        "gpu_busy_ns",
        "kernel_ns",
        "kernel_launches",
        "sm_ns",
        "warp_ns",
    ];
    let text: String = std::iter::once("only_mapped_meters = true\n".to_string())
        .chain(meters.iter().map(|m| format!("[meters.{m}]\n")))
        .collect();
    std::fs::write(&map, text).expect("write");
    let o = gpumeter(&["usage", s(&bert), "--events", "-", "--events-map", s(&map)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), meters.len());
    assert_eq!(
        stderr(&o),
        "notice: 1 usage row of meters the events mapping leaves out (only_mapped_meters) \
         was not written\n"
    );
}

/// A recording without its end frame may still be growing: its report is incomplete, and its
/// events are refused (exit 1, no events written; before issue 30 item 12 they were written
/// with a warning) unless `--allow-incomplete`, which warns; a finished recording has neither.
/// `invoice finalize` refuses it the same way.
#[test]
fn events_and_finalization_of_an_unfinished_recording_are_refused_unless_allowed() {
    let data = root().join("examples/data");
    let finished = data.join("h200-cuda13-green-context.gmr");
    let o = gpumeter(&["usage", s(&finished), "--events", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    // Its last 40 bytes cut (inside the end frame): the activity buffers are whole, the
    // end frame is gone.
    let dir = tempfile::tempdir().expect("tempdir");
    let cut = dir.path().join("cut.gmr");
    let bytes = std::fs::read(&finished).expect("recording");
    std::fs::write(&cut, &bytes[..bytes.len() - 40]).expect("write");
    let events = dir.path().join("events.jsonl");
    let o = gpumeter(&["usage", s(&cut), "--events", s(&events)]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: the usage report is incomplete (\"complete\": false: a .gmr recording has no end frame"),
        "{}",
        stderr(&o)
    );
    assert!(!events.exists(), "no events written");
    let o = gpumeter(&["usage", s(&cut), "--events", "-", "--allow-incomplete"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stdout(&o).is_empty());
    assert!(
        stderr(&o).starts_with(
            "warning: the usage report is incomplete (a .gmr recording has no end frame"
        ),
        "{}",
        stderr(&o)
    );
    // --allow-incomplete needs --events.
    let o = gpumeter(&["usage", s(&cut), "--allow-incomplete"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Finalization: refused, then allowed with a warning on stderr and on every invoice.
    let book = root().join("examples/pricebook.toml");
    let bank = dir.path().join("bank.db");
    let finalize = |extra: &[&str]| {
        let mut args = vec![
            "invoice",
            "finalize",
            s(&cut),
            "--prices",
            s(&book),
            "--bank",
            s(&bank),
            "--json",
        ];
        args.extend_from_slice(extra);
        gpumeter(&args)
    };
    let o = finalize(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("is incomplete"), "{}", stderr(&o));
    let o = finalize(&["--allow-incomplete"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning: the usage report is incomplete"),
        "{}",
        stderr(&o)
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    for inv in doc["invoices"].as_array().expect("invoices") {
        assert!(
            inv["warnings"]
                .as_array()
                .expect("warnings")
                .iter()
                .any(|w| w["code"] == "incomplete_usage"),
            "{inv}"
        );
    }
}

/// A report without usage writes an empty events file and says so (it said nothing).
#[test]
fn no_usage_is_an_empty_events_file_with_a_notice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("empty.json");
    std::fs::write(&trace, r#"{"traceEvents": []}"#).expect("write");
    let events = dir.path().join("events.jsonl");
    let o = gpumeter(&["usage", s(&trace), "--events", s(&events)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(&events).expect("events"), b"");
    assert_eq!(
        stderr(&o),
        "notice: the report has no usage row in a closed window: no events were written\n"
    );
}
