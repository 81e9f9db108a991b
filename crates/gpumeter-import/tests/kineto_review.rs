//! Kineto traces a hostile review wrote: categories in another case, events without a
//! category, B/E pairs whose `pid` is a string on one side, device tables that contradict
//! themselves, elements of `traceEvents` that are not objects and keys given twice.

use super::*;

/// Imports `text` as `r.json` into a fresh meter and finishes it.
fn meter_text(text: &str) -> (UsageReport, ImportSummary) {
    let mut meter = Meter::new(MeterConfig::default());
    let s = ok(import_bytes(
        &mut meter,
        "r.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ));
    (ok(meter.finish()), s)
}

#[test]
fn a_device_listed_twice_with_different_values_refuses_the_file() {
    let events = r#""traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {"device": 0}}]"#;
    let text = format!(
        r#"{{"deviceProperties": [{{"id": 0, "name": "G", "numSms": 132}}, {{"id": 1, "name": "G", "numSms": 132}}, {{"id": 0, "name": "G", "numSms": 10}}], {events}}}"#
    );
    let mut meter = Meter::new(MeterConfig::default());
    match import_bytes(
        &mut meter,
        "r.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ) {
        Err(
            e @ ImportError::BadField {
                record: RecordLocation::DeviceProperties(2),
                field: "id",
                ..
            },
        ) => {
            let msg = e.to_string();
            assert!(
                msg.contains("deviceProperties[2].id and deviceProperties[0].id are both 0"),
                "{msg}"
            );
        }
        other => panic!("expected BadField on deviceProperties[2].id, got {other:?}"),
    }
    let r = ok(meter.finish());
    assert!(
        r.sources.is_empty() && r.totals.is_empty(),
        "meter untouched"
    );
    // The same entry twice (keys in another order) is one device.
    let text = format!(
        r#"{{"deviceProperties": [{{"id": 0, "name": "G", "numSms": 132}}, {{"numSms": 132, "name": "G", "id": 0}}], {events}}}"#
    );
    let (r, _) = meter_text(&text);
    assert_eq!(r.devices.len(), 1);
    assert_eq!(r.devices[0].sm_count, Some(132));
}
