//! Strings cut at [`MAX_STRING_BYTES`] (issue 13): the dropped part is digested into the cut
//! string, so names that differ only past the cut stay distinct (and equal ones equal), and it
//! is validated as serde_json validates a string, so a fault past the cut is refused with the
//! same typed error as before it.

use gpumeter_core::{Meter, MeterConfig};
use gpumeter_import::{import_bytes, ImportError, ImportOptions, CUT_MARK, MAX_STRING_BYTES};

use super::ok;

/// A trace of two kernels equal in every field but their names.
fn two_kernels(a: &str, b: &str) -> String {
    let k = |name: &str| {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {{"device": 0, "correlation": 1}}}}"#
        )
    };
    format!("{{\"traceEvents\": [\n{},\n{}\n]}}", k(a), k(b))
}

/// Meters `text`: records metered, and records lost as duplicates.
fn meter(text: &str) -> (u64, u64) {
    let mut meter = Meter::new(MeterConfig::default());
    let s = ok(import_bytes(
        &mut meter,
        "t.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ));
    let report = ok(meter.finish());
    let dup = report
        .loss
        .iter()
        .filter(|l| l.reason == "duplicate")
        .map(|l| l.records)
        .sum();
    (s.records, dup)
}

/// A name of 80 000 bytes whose byte 70 000 is `c`.
fn long_name(c: char) -> String {
    let mut name = "k".repeat(80_000);
    name.replace_range(70_000..70_001, &c.to_string());
    name
}

#[test]
fn names_that_differ_past_the_cut_stay_two_names() {
    const _: () = assert!(70_000 > MAX_STRING_BYTES, "byte 70 000 lies past the cut");
    // Two names that differ only at byte 70 000: two kernels, neither a duplicate.
    let (records, dup) = meter(&two_kernels(&long_name('a'), &long_name('b')));
    assert_eq!((records, dup), (2, 0));
    // The same name twice: one kernel, the other a duplicate (as for short names).
    let (records, dup) = meter(&two_kernels(&long_name('a'), &long_name('a')));
    assert_eq!(dup, 1, "{records}");
    let (short_records, short_dup) = meter(&two_kernels("k", "k"));
    assert_eq!((records, dup), (short_records, short_dup));
}

/// The cut device name ends in the mark and the digest of what was dropped.
#[test]
fn a_cut_name_ends_in_the_digest_of_the_rest() {
    let name = long_name('a');
    let text = format!(
        r#"{{"deviceProperties": [{{"id": 0, "name": "{name}"}}], "traceEvents": [
            {{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}}]}}"#
    );
    let mut meter = Meter::new(MeterConfig::default());
    ok(import_bytes(
        &mut meter,
        "t.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ));
    let report = ok(meter.finish());
    let got = report.devices[0].name.as_deref().unwrap_or("");
    let (kept, digest) = got.split_at(MAX_STRING_BYTES);
    assert!(kept == &name[..MAX_STRING_BYTES]);
    use sha2::Digest;
    let want = sha2::Sha256::digest(&name.as_bytes()[MAX_STRING_BYTES..]);
    assert_eq!(digest, format!("{CUT_MARK}{}]", hex::encode(&want[..16])));
}

/// What becomes of a trace whose second kernel is named `name`: the JSON error (file, line,
/// serde_json's message without its position), else the records metered and lost by reason.
fn refusal(name: &str) -> (String, usize, String) {
    let text = two_kernels("k", name);
    let mut meter = Meter::new(MeterConfig::default());
    match import_bytes(
        &mut meter,
        "t.json",
        text.as_bytes(),
        &ImportOptions::default(),
    ) {
        Err(ImportError::Json {
            path, line, source, ..
        }) => {
            let msg = source.to_string();
            let msg = msg.split(" at line ").next().unwrap_or("").to_string();
            (path.display().to_string(), line, msg)
        }
        Ok(s) => {
            let report = ok(meter.finish());
            let loss: Vec<(String, u64)> = report
                .loss
                .iter()
                .map(|l| (l.reason.clone(), l.records))
                .collect();
            ("ok".to_string(), s.records as usize, format!("{loss:?}"))
        }
        Err(other) => panic!("expected a JSON error, got {other:?}"),
    }
}

#[test]
fn a_fault_past_the_cut_is_refused_as_before_it() {
    // A bad escape, a control character, invalid UTF-8 (as `\u` text cannot be: written raw
    // below), a bad `\u` escape and a lone surrogate, at byte 70 000 and at byte 10.
    for fault in [r"\q", "\u{1}", r"\u12x4", r"\udc00", r"\ud800x"] {
        let at = |n: usize| format!("{}{fault}{}", "k".repeat(n), "k".repeat(9_000));
        let short = refusal(&at(10));
        let long = refusal(&at(70_000));
        assert_eq!(long, short, "{fault:?}");
        // A lone surrogate escape is valid JSON text, and a kernel's name is kept as its
        // text: the trace is read (both kernels metered) wherever it lies. The rest are JSON
        // errors on the second kernel's line.
        if fault.starts_with(r"\ud") {
            assert_eq!(long.1, 2, "{fault:?}: {long:?}");
        } else {
            assert_eq!(long.0, "t.json");
            assert_eq!(long.1, 3, "the second kernel's line");
        }
    }
    // Unterminated past the cut.
    let text = format!(
        r#"{{"traceEvents": [{{"ph": "X", "cat": "kernel", "name": "{}"#,
        "k".repeat(70_000)
    );
    let mut meter = Meter::new(MeterConfig::default());
    let r = import_bytes(
        &mut meter,
        "t.json",
        text.as_bytes(),
        &ImportOptions::default(),
    );
    assert!(matches!(r, Err(ImportError::Json { .. })), "{r:?}");
}

#[test]
fn invalid_utf8_past_the_cut_is_refused_as_before_it() {
    let text = |n: usize| {
        let mut t = format!(
            r#"{{"traceEvents": [{{"ph": "X", "cat": "kernel", "name": "{}"#,
            "k".repeat(n)
        )
        .into_bytes();
        t.extend_from_slice(b"\xff\xfe");
        t.extend_from_slice(
            br#"kk", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"device": 0}}]}"#,
        );
        t
    };
    let msg = |t: &[u8]| {
        let mut meter = Meter::new(MeterConfig::default());
        match import_bytes(&mut meter, "t.json", t, &ImportOptions::default()) {
            Err(ImportError::Json { line, source, .. }) => {
                let m = source.to_string();
                (line, m.split(" at line ").next().unwrap_or("").to_string())
            }
            other => panic!("expected a JSON error, got {other:?}"),
        }
    };
    assert_eq!(msg(&text(70_000)), msg(&text(10)));
}

/// Review: one name written two ways JSON allows (`a` and its escape `\u0061`) is one string,
/// so the two kernels are one kernel and a duplicate, whether the escape lies before or past
/// the cut (serde_json decodes escapes before the cut; the dropped part's digest must too).
///
/// DEFECT (open): `StringCap` digests the dropped part's raw JSON bytes (and counts the kept
/// part in raw bytes, escapes included), so the same name written with an escape past the cut
/// is two kernels: both metered, no `duplicate` loss. A fix digests the decoded characters
/// (the `Tail` lexer already decodes `\u` escapes and pairs) and counts `len` in decoded bytes.
#[test]

fn an_escape_past_the_cut_is_the_character_it_stands_for() {
    let plain = long_name('a');
    let mut escaped = "k".repeat(80_000);
    escaped.replace_range(70_000..70_001, "\\u0061");
    assert_eq!(meter(&two_kernels(&plain, &escaped)).1, 1, "past the cut");
    let mut short = "k".repeat(100);
    short.replace_range(50..51, "a");
    let mut short_escaped = "k".repeat(100);
    short_escaped.replace_range(50..51, "\\u0061");
    assert_eq!(
        meter(&two_kernels(&short, &short_escaped)).1,
        1,
        "a short name"
    );
    // Before the cut (the cut falls at the same character) and past it, multi-byte and
    // surrogate-pair escapes and `\/`.
    let name = |before: &str, after: &str| {
        let mut n = "k".repeat(80_000);
        n.replace_range(70_000..70_001, after);
        n.replace_range(100..101, before);
        n
    };
    let literal = name("\u{e9}", "\u{1F600}/");
    let escaped = name("\\u00E9", "\\ud83d\\ude00\\/");
    assert_eq!(meter(&two_kernels(&literal, &escaped)).1, 1, "escapes");
    // And a different character past the cut is still another name.
    let other = name("\u{e9}", "\u{1F601}/");
    assert_eq!(
        meter(&two_kernels(&literal, &other)),
        (2, 0),
        "another name"
    );
}
