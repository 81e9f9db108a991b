//! docs/ARCHITECTURE.md, "Invariants" (loss is counted): for random record sets with
//! random faults injected, records metered + records lost = records in, per device, exactly
//! (and, for records whose device cannot be told, per source).

use std::collections::BTreeMap;

use gpumeter::core::MeterKind;
use gpumeter::import::{import_bytes, ImportOptions};
use gpumeter::{Meter, MeterConfig};
use proptest::prelude::*;

/// What one generated event is.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Kernel,
    Memcpy,
    ZeroTs,
    NegativeDur,
    TooLong,
    TsNotANumber,
    BytesNotANumber,
    NegativeGrid,
    StreamOutOfRange,
    ArgsNotAnObject,
    KeyTwice,
    UnknownDevice,
    /// An exact copy of the previous event.
    Copy,
    BeginEnd,
    BeginOnly,
    EndOnly,
    Instant,
}

const SHAPES: [Shape; 17] = [
    Shape::Kernel,
    Shape::Memcpy,
    Shape::ZeroTs,
    Shape::NegativeDur,
    Shape::TooLong,
    Shape::TsNotANumber,
    Shape::BytesNotANumber,
    Shape::NegativeGrid,
    Shape::StreamOutOfRange,
    Shape::ArgsNotAnObject,
    Shape::KeyTwice,
    Shape::UnknownDevice,
    Shape::Copy,
    Shape::BeginEnd,
    Shape::BeginOnly,
    Shape::EndOnly,
    Shape::Instant,
];

/// A Kineto trace (modern schema) of `events` and, per device id (`None`: no device can be
/// told), how many GPU work records it holds.
fn trace(events: &[(usize, u8, u32)]) -> (String, BTreeMap<Option<u8>, u64>) {
    let mut out: Vec<String> = Vec::new();
    let mut input: BTreeMap<Option<u8>, u64> = BTreeMap::new();
    let mut last: Option<(String, u8)> = None;
    for (i, &(shape, dev, t)) in events.iter().enumerate() {
        let shape = SHAPES[shape % SHAPES.len()];
        let ts = format!("{}.{:03}", 1000 + u64::from(t) * 7, t % 1000);
        let kernel = |ts: &str, dur: &str, extra: &str| {
            format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "k{i}", "pid": {dev}, "tid": 7, "ts": {ts}, "dur": {dur}, "args": {{"device": {dev}, "stream": 7, "correlation": {i}, "grid": [2, 1, 1]{extra}}}}}"#
            )
        };
        let (text, device) = match shape {
            Shape::Kernel => (kernel(&ts, "1.5", ""), Some(dev)),
            Shape::Memcpy => (
                format!(
                    r#"{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": {dev}, "tid": 7, "ts": {ts}, "dur": 0.5, "args": {{"device": {dev}, "correlation": {i}, "bytes": 1}}}}"#
                ),
                Some(dev),
            ),
            Shape::ZeroTs => (kernel("0", "1", ""), Some(dev)),
            Shape::NegativeDur => (kernel(&ts, "-2", ""), Some(dev)),
            Shape::TooLong => (kernel(&ts, "604800000001", ""), Some(dev)),
            Shape::TsNotANumber => (kernel("\"soon\"", "1", ""), Some(dev)),
            Shape::BytesNotANumber => (
                format!(
                    r#"{{"ph": "X", "cat": "gpu_memset", "pid": {dev}, "tid": 7, "ts": {ts}, "dur": 1, "args": {{"device": {dev}, "bytes": "lots"}}}}"#
                ),
                Some(dev),
            ),
            Shape::NegativeGrid => (
                kernel(&ts, "1", "").replace("[2, 1, 1]", "[-2, 1, 1]"),
                Some(dev),
            ),
            Shape::StreamOutOfRange => (
                kernel(&ts, "1", "").replace("\"stream\": 7", "\"stream\": 99999999999"),
                Some(dev),
            ),
            Shape::ArgsNotAnObject => (
                format!(
                    r#"{{"ph": "X", "cat": "kernel", "pid": {dev}, "tid": 7, "ts": {ts}, "dur": 1, "args": "none"}}"#
                ),
                Some(dev),
            ),
            Shape::KeyTwice => (
                kernel(&ts, "1", "").replacen("\"dur\": 1", "\"dur\": 1, \"dur\": 2", 1),
                Some(dev),
            ),
            Shape::UnknownDevice => (
                kernel(&ts, "1", "")
                    .replace(&format!("\"device\": {dev}"), "\"device\": -3")
                    .replace(&format!("\"pid\": {dev}"), "\"pid\": -3"),
                None,
            ),
            Shape::Copy => match &last {
                Some((text, d)) => (text.clone(), Some(*d)),
                None => continue,
            },
            Shape::BeginEnd => (
                format!(
                    r#"{{"ph": "B", "cat": "kernel", "name": "b{i}", "pid": {dev}, "tid": {tid}, "ts": {ts}, "args": {{"device": {dev}, "correlation": {i}}}}}, {{"ph": "E", "pid": {dev}, "tid": {tid}, "ts": {end}}}"#,
                    tid = 1000 + i,
                    end = 1001 + u64::from(t) * 7,
                ),
                Some(dev),
            ),
            Shape::BeginOnly => (
                format!(
                    r#"{{"ph": "B", "cat": "kernel", "pid": {dev}, "tid": {tid}, "ts": {ts}, "args": {{"device": {dev}}}}}"#,
                    tid = 1000 + i
                ),
                Some(dev),
            ),
            Shape::EndOnly => (
                format!(
                    r#"{{"ph": "E", "cat": "gpu_memcpy", "pid": {dev}, "tid": {tid}, "ts": {ts}, "args": {{"device": {dev}}}}}"#,
                    tid = 1000 + i
                ),
                Some(dev),
            ),
            Shape::Instant => (
                format!(
                    r#"{{"ph": "i", "cat": "kernel", "pid": {dev}, "tid": 7, "ts": {ts}, "args": {{"device": {dev}}}}}"#
                ),
                Some(dev),
            ),
        };
        *input.entry(device).or_insert(0) += 1;
        if let Some(d) = device {
            last = Some((text.clone(), d));
        }
        out.push(text);
    }
    let doc = format!(
        r#"{{"baseTimeNanoseconds": 1764662400000000000, "traceEvents": [{}]}}"#,
        out.join(",\n")
    );
    (doc, input)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn metered_plus_lost_equals_records_in_per_device(
        events in proptest::collection::vec((0usize..64, 0u8..3, 0u32..5000), 0..60)
    ) {
        let (text, input) = trace(&events);
        let mut meter = Meter::new(MeterConfig::default());
        let s = import_bytes(&mut meter, "p.json", text.as_bytes(), &ImportOptions::default());
        let s = match s {
            Ok(s) => s,
            Err(e) => return Err(TestCaseError::fail(format!("{e}\n{text}"))),
        };
        let r = match meter.finish() {
            Ok(r) => r,
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        };
        let label = s.sha256[..16].to_string();
        for (device, n_in) in &input {
            let (metered, lost) = match device {
                Some(d) => {
                    let key = format!("{label}#{d}");
                    // Generated copies and kernels each count 1, memcpys carry 1 byte each.
                    let metered = r.device_total(&key, MeterKind::KernelLaunches)
                        + r.device_total(&key, MeterKind::MemcpyHtodBytes);
                    let lost: u64 = r
                        .loss
                        .iter()
                        .filter(|l| l.device_key == key)
                        .map(|l| l.records)
                        .sum();
                    (metered, lost)
                }
                None => {
                    let lost: u64 = r
                        .loss
                        .iter()
                        .filter(|l| l.device.is_none() && l.device_key == label)
                        .map(|l| l.records)
                        .sum();
                    (0, lost)
                }
            };
            prop_assert_eq!(
                metered + u128::from(lost),
                u128::from(*n_in),
                "device {:?}: {:?}\n{}",
                device,
                r.loss,
                text
            );
        }
        // Nothing is lost or metered on a device no event named.
        let named: Vec<String> = input
            .keys()
            .map(|d| d.map_or(label.clone(), |d| format!("{label}#{d}")))
            .collect();
        prop_assert!(r.loss.iter().all(|l| named.contains(&l.device_key)), "{:?}", r.loss);
        prop_assert!(r.loss.iter().all(|l| !l.lower_bound));
    }
}
