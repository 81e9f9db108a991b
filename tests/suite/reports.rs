//! Issue 30, items 3, 11, 12 and 13, across requests: a trace gunzipped or re-gzipped is the
//! same source (one identity, the same device keys, the same event ids; a merge of the two
//! reports is refused as one source billed twice); every reader refuses a report that fails
//! the checks (a row listed twice is not summed into a bill); gzipped usage reports are read;
//! a snapshot or unfinished report is not finalized or sent unless allowed; and the event key
//! tells a 1 h run of a trace from a 30 min one. Each test failed before its item was done
//! (the copies had other identities and keys, the merge summed the twice-listed row, the
//! gzipped report was taken for a Kineto trace, the snapshot was finalized, the 30 min run's
//! first events had the 1 h run's ids).

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use gpumeter::core::{MeterConfig, MeterKind, WindowSize};
use gpumeter::events::{usage_events, EventFormat, EventOptions, EventsError, UsageEvent};
use gpumeter::{meter_inputs, BillOptions, Error, PriceBook, UsageOptions, UsageReport};

use crate::{example, ok};

fn tmp() -> tempfile::TempDir {
    ok(tempfile::tempdir())
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    ok(std::fs::write(&p, bytes));
    p
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    ok(flate2::read::MultiGzDecoder::new(bytes).read_to_end(&mut out));
    out
}

fn gzip(bytes: &[u8], level: u32) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
    ok(e.write_all(bytes));
    ok(e.finish())
}

fn ids(r: &UsageReport) -> Vec<String> {
    ok(usage_events(
        r,
        &EventOptions::new(EventFormat::CloudEvents),
    ))
    .events
    .iter()
    .map(|e| UsageEvent::id(e).to_string())
    .collect()
}

fn report_file(dir: &Path, name: &str, r: &UsageReport) -> PathBuf {
    write(dir, name, ok(serde_json::to_string_pretty(r)).as_bytes())
}

fn usage_options() -> UsageOptions {
    UsageOptions {
        format: gpumeter::Format::Usage,
        ..UsageOptions::default()
    }
}

/// Item 3: the example trace (gzip, devices without UUIDs), gunzipped, re-gzipped at another
/// level and renamed: one identity, the same device keys and event ids; merging two of their
/// reports is refused (the same source twice), and metering them together meters it once.
#[test]
fn a_recompressed_or_renamed_trace_is_the_same_source() {
    let d = tmp();
    let original = example("finetune-2xh100.json.gz");
    let gz = ok(std::fs::read(&original));
    let text = gunzip(&gz);
    let plain = write(d.path(), "plain.json", &text);
    let again = write(d.path(), "again.json.gz", &gzip(&text, 1));
    let reports: Vec<UsageReport> = [&original, &plain, &again]
        .iter()
        .map(|p| ok(meter_inputs(&[p.to_path_buf()], &UsageOptions::default())))
        .collect();
    let keys = |r: &UsageReport| -> Vec<String> {
        r.devices.iter().map(|d| d.device_key.clone()).collect()
    };
    for r in &reports[1..] {
        assert_eq!(r.sources[0].sha256, reports[0].sources[0].sha256);
        assert_eq!(keys(r), keys(&reports[0]));
        assert_eq!(r.usage, reports[0].usage);
        assert_eq!(ids(r), ids(&reports[0]));
    }
    assert!(
        keys(&reports[0])
            .iter()
            .all(|k| !k.contains("finetune") && k.starts_with(&reports[0].sources[0].sha256[..16])),
        "{:?}",
        keys(&reports[0])
    );
    // Two reports of one content are one source billed twice: the merge refuses them.
    let a = report_file(d.path(), "a.json", &reports[0]);
    let b = report_file(d.path(), "b.json", &reports[2]);
    match meter_inputs(&[a, b], &usage_options()) {
        Err(Error::Merge(gpumeter::MergeError::SharedSource { .. })) => {}
        other => panic!("expected SharedSource, got {other:?}"),
    }
    // Given together, metered once, with a warning.
    let both = ok(meter_inputs(
        &[original, plain, again],
        &UsageOptions::default(),
    ));
    assert_eq!(both.usage, reports[0].usage);
    assert_eq!(both.sources.len(), 1);
}

/// Item 11: a report that lists one row twice is refused by every reader (merge, preview,
/// bill, events, the C ABI's parse), never summed into the bill.
#[test]
fn every_reader_refuses_a_report_that_lists_a_row_twice() {
    let d = tmp();
    let mut r = ok(meter_inputs(
        &[example("finetune-2xh100.json.gz")],
        &UsageOptions::default(),
    ));
    let again = r.usage[0].clone();
    r.usage.push(again);
    ok(r.seal_with_totals());
    let n = r.usage.len() - 1;
    let want = format!("usage[{n}] has the tenant, device, window and meter of usage[0]");
    let file = report_file(d.path(), "twice.json", &r);
    let merged = meter_inputs(std::slice::from_ref(&file), &usage_options());
    let msg = merged.expect_err("merge").to_string();
    assert!(msg.starts_with(&format!("twice.json: {want}")), "{msg}");
    let book = ok(PriceBook::from_path(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/pricebook.toml")
            .as_path(),
    ));
    let msg = gpumeter::preview(&r, &book, None)
        .expect_err("preview")
        .to_string();
    assert!(msg.contains(&want), "{msg}");
    let mut ledger = ok(gpumeter::bank::open(
        &d.path().join("bank.db").display().to_string(),
    ));
    let msg = gpumeter::bill(&mut ledger, &r, &book, None, true)
        .expect_err("bill")
        .to_string();
    assert!(msg.contains(&want), "{msg}");
    match usage_events(&r, &EventOptions::new(EventFormat::Stripe)) {
        Err(EventsError::Check(e)) => assert!(e.to_string().starts_with(&want), "{e}"),
        other => panic!("expected a check error, got {other:?}"),
    }
    let text = ok(serde_json::to_string(&r));
    let msg = gpumeter::parse_usage_report(text.as_bytes(), Path::new("usage_json"))
        .expect_err("parse")
        .to_string();
    assert!(msg.starts_with(&format!("usage_json: {want}")), "{msg}");
}

/// Item 11: a gzipped usage report is read (detected and with `--format usage`), not taken
/// for a Kineto trace.
#[test]
fn a_gzipped_usage_report_is_read() {
    let d = tmp();
    let r = ok(meter_inputs(
        &[example("finetune-2xh100.json.gz")],
        &UsageOptions::default(),
    ));
    let text = ok(serde_json::to_string_pretty(&r));
    let gz = write(d.path(), "usage.json.gz", &gzip(text.as_bytes(), 6));
    for options in [UsageOptions::default(), usage_options()] {
        let merged = ok(meter_inputs(std::slice::from_ref(&gz), &options));
        assert_eq!(merged.usage, r.usage);
        assert_eq!(merged.complete, Some(true));
    }
    assert_eq!(ok(gpumeter::read_usage_report(&gz)), r);
}

/// Item 12: a snapshot (`complete: false`) is not finalized nor sent as events unless
/// allowed; allowed, every invoice says so; its preview warns too.
#[test]
fn a_snapshot_is_not_finalized_or_sent_unless_allowed() {
    let d = tmp();
    let full = ok(meter_inputs(
        &[example("finetune-2xh100.json.gz")],
        &UsageOptions::default(),
    ));
    let mut snap = full.clone();
    snap.complete = Some(false);
    ok(snap.seal());
    let book = ok(PriceBook::from_path(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/pricebook.toml")
            .as_path(),
    ));
    let mut ledger = ok(gpumeter::bank::open(
        &d.path().join("bank.db").display().to_string(),
    ));
    match gpumeter::bill(&mut ledger, &snap, &book, None, true) {
        Err(Error::Incomplete { .. }) => {}
        other => panic!("expected Incomplete, got {:?}", other.map(|f| f.outcomes)),
    }
    // A rolled-back preview of it is fine, and says it is incomplete.
    let preview = ok(gpumeter::bill(&mut ledger, &snap, &book, None, false));
    assert!(preview.document.invoices.iter().all(|i| i
        .warnings
        .iter()
        .any(|w| *w.code() == gpumeter::core::WarningCode::IncompleteUsage)));
    let allowed = BillOptions::new(true).allow_incomplete(true);
    let done = ok(gpumeter::bill_with(
        &mut ledger,
        &snap,
        &book,
        None,
        &allowed,
    ));
    assert!(!done.document.invoices.is_empty());
    assert!(done.document.invoices.iter().all(|i| i
        .warnings
        .iter()
        .any(|w| *w.code() == gpumeter::core::WarningCode::IncompleteUsage)));
    // Events: refused, then allowed with the reason.
    assert!(matches!(
        usage_events(&snap, &EventOptions::new(EventFormat::Lago)),
        Err(EventsError::Incomplete { .. })
    ));
    let events = ok(usage_events(
        &snap,
        &EventOptions {
            allow_incomplete: true,
            ..EventOptions::new(EventFormat::Lago)
        },
    ));
    assert!(events.incomplete.is_some());
    // The complete report's preview has no such warning.
    let complete = ok(gpumeter::preview(&full, &book, None));
    assert!(complete.invoices.iter().all(|i| i
        .warnings
        .iter()
        .all(|w| *w.code() != gpumeter::core::WarningCode::IncompleteUsage)));
}

/// Item 13: one trace metered in 1 h and in 30 min windows: the windows that start at the same
/// instant have different quantities and now different ids.
#[test]
fn a_1h_and_a_30min_run_of_one_trace_send_different_ids() {
    let run = |seconds: u64| {
        ok(meter_inputs(
            &[example("finetune-2xh100.json.gz")],
            &UsageOptions {
                meter: MeterConfig {
                    window: ok(WindowSize::from_seconds(seconds)),
                    ..MeterConfig::default()
                },
                ..UsageOptions::default()
            },
        ))
    };
    let (hour, half) = (run(3600), run(1800));
    let hour_ids = ids(&hour);
    let half_ids = ids(&half);
    let mut shared_start = 0;
    for (i, h) in hour.usage.iter().enumerate() {
        if let Some(j) = half.usage.iter().position(|x| {
            (&x.tenant, &x.device_key, &x.window_start, x.meter)
                == (&h.tenant, &h.device_key, &h.window_start, h.meter)
        }) {
            shared_start += 1;
            assert_ne!(hour_ids[i], half_ids[j], "{:?}", h);
        }
    }
    assert!(shared_start > 0, "the runs share window starts");
    assert!(hour.usage.iter().any(|u| u.meter == MeterKind::GpuBusyNs));
}

/// Item 9 through the facade: `bill_with` refuses a period that has not ended by the
/// options' clock (`BillOptions::at`), finalizes it with `allow_open_period(true)`, and a
/// retry under the system clock (`BillOptions::new`, the period long past) changes nothing.
#[test]
fn a_period_not_ended_by_the_callers_clock_is_refused_unless_allowed() {
    use gpumeter::bank::{BankError, FinalizeRefusal, Outcome};
    let d = tmp();
    let report = ok(meter_inputs(
        &[example("finetune-2xh100.json.gz")],
        &UsageOptions::default(),
    ));
    let book = ok(PriceBook::from_path(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/pricebook.toml")
            .as_path(),
    ));
    let mut ledger = ok(gpumeter::bank::open(
        &d.path().join("bank.db").display().to_string(),
    ));
    let early = BillOptions::new(true).at(0);
    match gpumeter::bill_with(&mut ledger, &report, &book, None, &early) {
        Err(Error::Bank(BankError::Finalize(r))) => {
            assert!(matches!(*r, FinalizeRefusal::OpenPeriod { .. }), "{r}");
        }
        other => panic!("expected OpenPeriod, got {:?}", other.map(|f| f.outcomes)),
    }
    // Nothing was written: the bank has no invoice yet.
    let preview = ok(gpumeter::bill(&mut ledger, &report, &book, None, false));
    assert!(preview.outcomes.iter().all(|o| *o == Outcome::Applied));
    let open = early.allow_open_period(true);
    let done = ok(gpumeter::bill_with(
        &mut ledger,
        &report,
        &book,
        None,
        &open,
    ));
    assert!(!done.document.invoices.is_empty());
    assert!(done.outcomes.iter().all(|o| *o == Outcome::Applied));
    let again = ok(gpumeter::bill_with(
        &mut ledger,
        &report,
        &book,
        None,
        &BillOptions::new(true),
    ));
    assert!(again
        .outcomes
        .iter()
        .all(|o| *o == Outcome::AlreadyFinalized));
    assert_eq!(again.document.invoices, done.document.invoices);
}

/// Hostile review of issue 30, finding 5: a key `gpumeter.usage/v1` does not define (a row's
/// `quantity_override`, a top-level `note`, a key in a device or in a recording's entry) is
/// outside what `sha256` covers, so every reader refuses it, naming the file and the key,
/// instead of ignoring it (it was read with the digest still verifying). Keys inside
/// `extensions` stay free-form and covered by the digest; a report written before `complete`
/// still reads.
#[test]
fn every_reader_refuses_a_key_the_schema_does_not_define() {
    let d = tmp();
    let r = ok(meter_inputs(
        &[example("finetune-2xh100.json.gz")],
        &UsageOptions::default(),
    ));
    let sealed: serde_json::Value = ok(serde_json::to_value(&r));
    // (the key, the object it is added to, as a JSON pointer)
    let cases = [
        ("quantity_override", "/usage/0"),
        ("note", ""),
        ("uuid", "/devices/0"),
        ("tenant_hint", "/records"),
    ];
    for (key, at) in cases {
        let mut v = sealed.clone();
        let Some(serde_json::Value::Object(object)) = v.pointer_mut(at) else {
            panic!("{at} is an object of the report");
        };
        object.insert(key.to_string(), "999".into());
        let text = ok(serde_json::to_string_pretty(&v));
        let file = write(d.path(), "extra.json", text.as_bytes());
        let needle = format!("unknown field `{key}`");
        for (reader, result) in [
            ("read", gpumeter::read_usage_report(&file).map(|_| ())),
            (
                "parse",
                gpumeter::parse_usage_report(text.as_bytes(), Path::new("usage_json")).map(|_| ()),
            ),
            (
                "merge",
                meter_inputs(std::slice::from_ref(&file), &usage_options()).map(|_| ()),
            ),
        ] {
            let msg = result.expect_err(reader).to_string();
            let name = if reader == "parse" {
                "usage_json"
            } else {
                "extra.json"
            };
            assert!(
                msg.contains(name) && msg.contains(&needle),
                "{reader}: {msg}"
            );
        }
    }
    // A recording's entry in `extensions` has a schema of its own: no other key either.
    let mut v = sealed.clone();
    v["extensions"] = serde_json::json!({"recordings": [{
        "recording": "h/1/2/3", "device_ends": [], "weight": 2
    }]});
    let msg = gpumeter::parse_usage_report(ok(serde_json::to_vec(&v)).as_slice(), Path::new("r"))
        .expect_err("recording entry")
        .to_string();
    assert!(msg.contains("unknown field `weight`"), "{msg}");
    // Any key of `extensions` itself is kept, covered by the digest: it verifies once sealed,
    // and changing it afterwards is caught.
    let mut with = r.clone();
    with.extensions
        .other
        .insert("note".to_string(), "kept".into());
    ok(with.seal());
    let text = ok(serde_json::to_string(&with));
    assert_eq!(
        ok(gpumeter::parse_usage_report(
            text.as_bytes(),
            Path::new("x")
        )),
        with
    );
    let tampered = text.replace("\"kept\"", "\"changed\"");
    assert!(gpumeter::parse_usage_report(tampered.as_bytes(), Path::new("x")).is_err());
    // A report written before `complete` existed still reads.
    let mut old = r.clone();
    old.complete = None;
    ok(old.seal());
    let text = ok(serde_json::to_string(&old));
    assert!(!text.contains("\"complete\""), "{text:.200}");
    let read = ok(gpumeter::parse_usage_report(
        text.as_bytes(),
        Path::new("old"),
    ));
    assert_eq!(read.complete, None);
}
