//! Kineto traces a hostile review wrote: categories in another case, events without a
//! category, B/E pairs whose `pid` is a string on one side, device tables that contradict
//! themselves, elements of `traceEvents` that are not objects and keys given twice.

use std::collections::BTreeMap;

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

/// The report's one warning that contains `needle`.
fn warning<'r>(r: &'r UsageReport, needle: &str) -> &'r str {
    let w: Vec<&gpumeter_core::Warning> =
        r.warnings.iter().filter(|w| w.contains(needle)).collect();
    assert_eq!(w.len(), 1, "{needle:?} in {:?}", r.warnings);
    w[0]
}

fn skipped(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
}

const BASE: &str = r#""baseTimeNanoseconds": 1700000000000000000, "deviceProperties": [{"id": 0, "name": "G", "numSms": 10}]"#;

#[test]
fn known_categories_match_in_any_case_and_with_surrounding_whitespace() {
    let text = format!(
        r#"{{{BASE}, "traceEvents": [
        {{"ph": "X", "cat": "KERNEL", "name": "k1", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {{"device": 0}}}},
        {{"ph": "X", "cat": "kernel ", "name": "k2", "pid": 0, "tid": 7, "ts": 20, "dur": 3, "args": {{"device": 0}}}},
        {{"ph": "X", "cat": " Gpu_Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 30, "dur": 1, "args": {{"device": 0, "bytes": 64}}}},
        {{"ph": "X", "cat": "MEMSET", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 40, "dur": 1, "args": {{"device": 0, "bytes": 32}}}},
        {{"ph": "X", "cat": "trace ", "name": "t", "pid": 0, "tid": 0, "ts": 1, "dur": 100}},
        {{"ph": "X", "cat": "CUDA_SYNC", "name": "s", "pid": 0, "tid": 7, "ts": 50, "dur": 1, "args": {{"device": 0}}}},
        {{"ph": "i", "cat": "cuda_sync", "name": "s", "pid": 0, "tid": 7, "ts": 60, "args": {{"device": 0}}}},
        {{"ph": "B", "cat": "Gpu_User_Annotation", "name": "step", "ts": 5}}
    ]}}"#
    );
    let (r, s) = meter_text(&text);
    let key = source_key(&s, 0);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 2);
    assert_eq!(r.device_total(&key, MeterKind::KernelNs), 5_000);
    assert_eq!(r.device_total(&key, MeterKind::MemcpyHtodBytes), 64);
    assert_eq!(r.device_total(&key, MeterKind::MemsetBytes), 32);
    // Skipped under the category as Kineto spells it, not as this file does; once per event,
    // whatever its phase (a B without pid and tid too).
    assert_eq!(
        r.records.skipped,
        skipped(&[("Trace", 1), ("cuda_sync", 2), ("gpu_user_annotation", 1)])
    );
    assert_eq!(s.records + s.skipped, 8, "every event is accounted for");
}

#[test]
fn a_cpu_side_launch_in_another_case_still_gives_the_process_id() {
    let text = format!(
        r#"{{{BASE}, "traceEvents": [
        {{"ph": "X", "cat": "CUDA_Runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 1, "ts": 9, "dur": 1, "args": {{"correlation": 5}}}},
        {{"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {{"device": 0, "correlation": 5}}}}
    ]}}"#
    );
    let mut meter = Meter::new(MeterConfig::default());
    let map = ok(
        <TenantMap as gpumeter_import::TenantMapFile>::from_toml_str(
            "t.toml",
            "[pid]\n4242 = \"carol\"\n",
        ),
    );
    meter.set_tenant_map(map);
    ok(import_bytes(
        &mut meter,
        "r.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ));
    let r = ok(meter.finish());
    let carol: u128 = r
        .totals
        .iter()
        .filter(|t| t.tenant == "carol" && t.meter == MeterKind::KernelNs)
        .map(|t| t.quantity.0)
        .sum();
    assert_eq!(carol, 2_000);
}

#[test]
fn events_without_a_category_that_name_a_device_are_counted_and_warned_about() {
    let text = format!(
        r#"{{{BASE}, "traceEvents": [
        {{"ph": "X", "name": "k?", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {{"device": 0}}}},
        {{"name": "k? no ph", "pid": 0, "tid": 7, "ts": 12, "dur": 2, "args": {{"device": 0}}}},
        {{"ph": "B", "cat": "kernel", "name": "outer", "pid": 0, "tid": 9, "ts": 20, "args": {{"device": 0}}}},
        {{"ph": "B", "name": "inner?", "pid": 0, "tid": 9, "ts": 21, "args": {{"device": 0}}}},
        {{"ph": "E", "pid": 0, "tid": 9, "ts": 22}},
        {{"ph": "E", "pid": 0, "tid": 9, "ts": 30}},
        {{"ph": "X", "name": "cpu thing", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {{"device": null}}}},
        {{"ph": "X", "name": "cpu thing", "pid": 0, "tid": 7, "ts": 10, "dur": 2}},
        {{"ph": "i", "name": "instant", "pid": 0, "tid": 7, "ts": 10, "args": {{"device": 0}}}},
        {{"ph": "M", "name": "process_name", "pid": 0, "args": {{"device": 0, "name": "GPU 0"}}}}
    ]}}"#
    );
    let (r, s) = meter_text(&text);
    let key = source_key(&s, 0);
    // Two X and one B without `cat` name a device: counted once each, never metered.
    assert_eq!(
        r.records.skipped,
        skipped(&[("no_category_with_device", 3)])
    );
    let w = warning(&r, "no_category_with_device");
    assert!(
        w.starts_with("r.json: 3 complete or begin events have no `cat` but an `args.device`"),
        "{w}"
    );
    // The B without `cat` is closed by its own E: the kernel B lasts 20..30, not 20..22.
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 1);
    assert_eq!(r.device_total(&key, MeterKind::KernelNs), 10_000);
    assert!(r.loss.is_empty(), "{:?}", r.loss);
}

#[test]
fn begin_and_end_pair_when_pid_or_tid_is_a_string_on_one_side() {
    let text = format!(
        r#"{{{BASE}, "traceEvents": [
        {{"ph": "B", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 10, "args": {{"device": 0}}}},
        {{"ph": "E", "pid": "0", "tid": "7", "ts": 14}},
        {{"ph": "B", "cat": "kernel", "name": "b", "pid": "0", "tid": "stream 7", "ts": 20, "args": {{"device": 0}}}},
        {{"ph": "E", "pid": 0, "tid": "stream 7", "ts": 25}},
        {{"ph": "B", "cat": "kernel", "name": "c", "pid": "\u0030", "tid": 8, "ts": 30, "args": {{"device": 0}}}},
        {{"ph": "E", "pid": 0, "tid": 8, "ts": 36}}
    ]}}"#
    );
    let (r, s) = meter_text(&text);
    let key = source_key(&s, 0);
    assert!(r.loss.is_empty(), "{:?}", r.loss);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 3);
    assert_eq!(r.device_total(&key, MeterKind::KernelNs), 15_000);
    // Still two keys when the texts differ: a number is not the string "0.0".
    let text = format!(
        r#"{{{BASE}, "traceEvents": [
        {{"ph": "B", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 10, "args": {{"device": 0}}}},
        {{"ph": "E", "pid": "0.0", "tid": 7, "ts": 14}}
    ]}}"#
    );
    let (r, s) = meter_text(&text);
    assert_eq!(r.lost(&source_key(&s, 0), "invalid_field"), 1);
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

#[test]
fn non_object_elements_are_counted_and_the_rest_is_metered() {
    let text = format!(
        r#"{{{BASE}, "traceEvents": [
        {{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {{"device": 0}}}},
        null, 5, [1, 2, {{"ph": "X"}}], "x", true, -1.5e300,
        {{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": "abc", "args": {{"device": 0}}}}
    ]}}"#
    );
    let (r, s) = meter_text(&text);
    assert_eq!(
        r.device_total(&source_key(&s, 0), MeterKind::KernelLaunches),
        1
    );
    assert_eq!(r.records.skipped, skipped(&[("not_an_event_object", 6)]));
    let w = warning(&r, "not_an_event_object");
    assert!(
        w.starts_with("r.json: 6 elements of `traceEvents` are not JSON objects")
            && w.contains("(the first: traceEvents[1], null)"),
        "{w}"
    );
    // Elements keep their positions: the bad kernel is element 7.
    assert!(
        invalid_warning(&r).starts_with("r.json: traceEvents[7]: field `dur` = `abc`"),
        "{}",
        invalid_warning(&r)
    );
}

#[test]
fn a_key_given_twice_names_both_values() {
    let text = r#"{"traceEvents": [
        {"ph": "X", "cat": "Kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 1764662400000000, "dur": 3, "args": {"device": 0}},
        {"ph": "X", "cat": "Kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 1764662400000010, "ts": 1764662400000020, "dur": 3, "args": {"device": 0}},
        {"ph": "X", "cat": "Kernel", "name": "k3", "pid": 0, "tid": 7, "ts": 1764662400000030, "dur": 3, "args": {"device": 0, "device": 1}},
        {"ph": "X", "cat": "Kernel", "name": "k4", "pid": 0, "tid": 7, "ts": 1764662400000040, "dur": 3, "args": {"device": 0, "registers per thread": 32, "registers per thread": 64}},
        {"ph": "X", "cat": "Kernel", "name": "k5", "pid": 0, "tid": 7, "ts": 1764662400000050, "dur": 3, "args": {"device": 0, "External id": 1, "External id": 2}}
    ]}"#;
    let (r, s) = meter_text(text);
    let key = source_key(&s, 0);
    // k5's unread key given twice changes nothing; k2, k3 and k4 are lost.
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 2);
    assert_eq!(r.lost(&key, "invalid_field"), 3);
    let w = warning(&r, "field `ts`");
    assert!(
        w.contains(
            "traceEvents[1]: field `ts` = `1764662400000010` and `1764662400000020`: given twice \
             in the event"
        ),
        "{w}"
    );
    let w = warning(&r, "field `args.device`");
    assert!(
        w.contains(
            "traceEvents[2]: field `args.device` = `0` and `1`: the key `device` is given twice \
             in args"
        ),
        "{w}"
    );
    let w = warning(&r, "field `args.registers per thread`");
    assert!(
        w.contains("= `32` and `64`: the key `registers per thread` is given twice in args"),
        "{w}"
    );
}

/// The shared real traces skip and warn exactly as before the review fixes: no element that
/// is not an object, no event without a category that names a device.
#[test]
fn real_traces_skip_what_they_skipped_before() {
    let Some(dir) = data_dir() else { return };
    for (file, expected) in [
        (BERT, skipped(&[("Trace", 1), ("gpu_user_annotation", 1)])),
        (ALEXNET, skipped(&[("Trace", 1), ("cuda_sync", 41)])),
        (RANK0, skipped(&[("Trace", 1)])),
        (RANK1, skipped(&[("Trace", 1)])),
        (B200, skipped(&[("gpu_user_annotation", 3)])),
    ] {
        let (r, _) = meter_files(&dir, &[file], &ImportOptions::default());
        assert_eq!(r.records.skipped, expected, "{file}");
        assert!(r.loss.is_empty(), "{file}: {:?}", r.loss);
        assert!(
            r.warnings.iter().all(|w| w.contains("not meterable")),
            "{file}: {:?}",
            r.warnings
        );
    }
}
