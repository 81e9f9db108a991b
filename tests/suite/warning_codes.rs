//! Typed warnings and not-meterable reasons (issue 14): the usage and invoice schemas' lists of
//! codes are the code registries (`WarningCode::KNOWN`, `NotMeterableCode::KNOWN`), new reports carry a
//! code on every warning and `not_meterable` entry, and reports written before codes
//! (`tests/before-codes/`: warnings as plain strings) are still read by `--format usage` and
//! `--opening`, their `sha256` verifies, and they are written back byte for byte.

use std::path::{Path, PathBuf};

use gpumeter::core::{NotMeterableCode, WarningCode};
use gpumeter::{merge_usage_reports, meter_inputs, read_usage_report, UsageOptions};

use crate::{example, ok, validate};

fn before_codes() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/before-codes");
    let mut files: Vec<PathBuf> = ok(std::fs::read_dir(&dir))
        .map(|e| ok(e).path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    files
}

/// The `enum` of `$defs.<name>` in the usage schema.
fn schema_enum(name: &str) -> Vec<String> {
    schema_enum_of("gpumeter.usage.v1.schema.json", name)
}

/// The `enum` of `$defs.<name>` in `schemas/<schema>`.
fn schema_enum_of(schema: &str, name: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(schema);
    let v: serde_json::Value = ok(serde_json::from_str(&ok(std::fs::read_to_string(path))));
    let list = v["$defs"][name]["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("$defs.{name}.enum"));
    list.iter()
        .map(|c| c.as_str().expect("a code").to_string())
        .collect()
}

#[test]
fn the_schemas_code_lists_are_the_code_registries() {
    let warnings: Vec<String> = WarningCode::usage()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(schema_enum("warning_code"), warnings);
    // An invoice carries the usage codes (the usage report's warnings it copies) and its own;
    // only the price-book check's code is in neither document.
    let on_invoices: Vec<String> = WarningCode::KNOWN
        .iter()
        .filter(|c| **c != WarningCode::SkuDeviceUnknown)
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(
        schema_enum_of("gpumeter.invoice.v1.schema.json", "warning_code"),
        on_invoices
    );
    let usage_then_invoice: Vec<&WarningCode> =
        WarningCode::usage().chain(WarningCode::INVOICE).collect();
    assert_eq!(
        usage_then_invoice,
        WarningCode::KNOWN
            .iter()
            .filter(|c| **c != WarningCode::SkuDeviceUnknown)
            .collect::<Vec<_>>()
    );
    let all: Vec<String> = WarningCode::KNOWN
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    let reasons: Vec<String> = NotMeterableCode::KNOWN
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(schema_enum("not_meterable_code"), reasons);
    for name in all.iter().chain(&reasons) {
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name} is not snake_case"
        );
    }
}

#[test]
fn new_reports_code_every_warning_and_not_meterable_entry() {
    let r = ok(meter_inputs(
        &[example("h200-cuda13-instructions-2threads.gmr")],
        &UsageOptions::default(),
    ));
    validate("gpumeter.usage.v1.schema.json", &r);
    assert!(!r.warnings.is_empty());
    for w in &r.warnings {
        assert!(
            WarningCode::KNOWN.contains(w.code()),
            "{:?} has no known code",
            w
        );
        // A report's reader has no design file to look a section up in.
        assert!(!w.contains("DESIGN"), "{w}");
    }
    assert!(r
        .warnings
        .iter()
        .any(|w| *w.code() == WarningCode::InstrumentedRun));
    for d in &r.devices {
        for n in &d.not_meterable {
            assert!(NotMeterableCode::KNOWN.contains(&n.code), "{n:?}");
        }
    }
    let json: serde_json::Value = ok(serde_json::to_value(&r));
    for w in json["warnings"].as_array().expect("warnings") {
        assert!(w["code"].is_string() && w["message"].is_string(), "{w}");
    }
}

#[test]
fn reports_written_before_codes_read_verify_and_write_back_as_they_were() {
    for file in before_codes() {
        let text = ok(std::fs::read_to_string(&file));
        let r = ok(read_usage_report(&file));
        assert!(r.verify_digest(), "{}: sha256", file.display());
        assert!(!r.warnings.is_empty(), "{}", file.display());
        for w in &r.warnings {
            assert_eq!(w.code(), &WarningCode::Uncoded, "{w}");
        }
        let entries: Vec<_> = r.devices.iter().flat_map(|d| &d.not_meterable).collect();
        assert!(!entries.is_empty(), "{}", file.display());
        for n in entries {
            assert_eq!(n.code, NotMeterableCode::Uncoded);
        }
        validate("gpumeter.usage.v1.schema.json", &r);
        let mut again = ok(serde_json::to_string_pretty(&r));
        again.push('\n');
        assert_eq!(again, text, "{}: written back as read", file.display());
        // `--format usage`: merged (each digest verified), the old warnings carried with the
        // report's name and still without a code.
        let merged = ok(merge_usage_reports(std::slice::from_ref(&file)));
        assert!(merged.verify_digest());
        assert!(merged
            .warnings
            .iter()
            .any(|w| *w.code() == WarningCode::Uncoded));
    }
}

#[test]
fn an_opening_report_written_before_codes_is_taken() {
    let old = before_codes()
        .into_iter()
        .find(|p| p.to_string_lossy().contains("recording_26"))
        .expect("recording_26 before codes");
    let options = UsageOptions {
        opening: Some(old),
        ..UsageOptions::default()
    };
    let r = ok(meter_inputs(
        &[example("finetune-2xh100.json.gz")],
        &options,
    ));
    assert!(r.verify_digest());
    assert!(!r.totals.is_empty());
}
