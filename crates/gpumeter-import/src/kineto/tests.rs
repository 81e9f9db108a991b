//! Tests of the Kineto reader: GPU event fields, the document read in chunks of every size
//! (the same events, faults placed as in the whole text), strings cut across chunks, and the
//! tables of counters and launch calls.

use std::io::Read;
use std::path::Path;

use gpumeter_core::CopyDirection;
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::collect::NOT_AN_EVENT_OBJECT;
use super::cpu::is_launch;
use super::gpu::{direction_from_name, stream_from_tid, text_is_zero};
use super::ranges::SASS_OP_FIELDS;
use super::{finish, read_events};
use crate::cut::MAX_STRING_BYTES;
use crate::error::ImportError;

#[test]
fn directions() {
    assert_eq!(
        direction_from_name("Memcpy HtoD (Pageable -> Device)"),
        CopyDirection::HostToDevice
    );
    assert_eq!(
        direction_from_name("Memcpy DtoH (Device -> Pinned)"),
        CopyDirection::DeviceToHost
    );
    assert_eq!(
        direction_from_name("Memcpy DtoD (Device -> Device)"),
        CopyDirection::DeviceToDevice
    );
    assert_eq!(
        direction_from_name("Memcpy PtoP (Device -> Device)"),
        CopyDirection::Peer
    );
    assert_eq!(
        direction_from_name("Memcpy HtoH (Pinned -> Pinned)"),
        CopyDirection::Other
    );
    assert_eq!(direction_from_name(""), CopyDirection::Other);
}

#[test]
fn tids() {
    let raw = |s: &str| serde_json::from_str::<Box<RawValue>>(s).ok();
    let t = |s: &str| raw(s).map(|r| stream_from_tid(&r));
    assert_eq!(t("7"), Some(Ok(Some(7))));
    assert_eq!(t("\"stream 7\""), Some(Ok(Some(7))));
    assert_eq!(t("\"stream 7 \""), Some(Ok(Some(7))));
    assert_eq!(t("-1"), Some(Ok(Some(u32::MAX))));
    assert_eq!(t("\"PyTorch Profiler\""), Some(Ok(None)));
    // A stream id outside u32 is not truncated into another stream.
    assert_eq!(t("4294967303"), Some(Err(4_294_967_303)));
    assert_eq!(t("\"stream -2\""), Some(Err(-2)));
}

/// The fields of an event settled as ignorable are dropped, not kept, but still checked:
/// a string that is not UTF-8 in one is a JSON error, as when it was kept raw.
#[test]
fn settled_events_are_still_checked() {
    let path = Path::new("t.json");
    let ok =
        br#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "args": {"k": ["b"]}}]}"#;
    assert!(read_events(path, &ok[..]).is_ok());
    for bad in [
        &b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"\xff\"}]}"[..],
        &b"{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"cpu_op\", \"args\": {\"k\": [\"\xff\"]}}]}"[..],
    ] {
        match read_events(path, bad) {
            Err(ImportError::Json { .. }) => {}
            Err(e) => panic!("expected a JSON error, got {e}"),
            Ok(_) => panic!("expected a JSON error"),
        }
    }
}

/// Reads `text` in reads of the sizes `sizes` (cycled; a 0 is taken as 1).
struct Splits<'a> {
    text: &'a [u8],
    sizes: Vec<usize>,
    next: usize,
}

impl Read for Splits<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let size = self.sizes.get(self.next % self.sizes.len().max(1)).copied();
        self.next += 1;
        let n = size
            .unwrap_or(usize::MAX)
            .max(1)
            .min(out.len())
            .min(self.text.len());
        out[..n].copy_from_slice(&self.text[..n]);
        self.text = &self.text[n..];
        Ok(n)
    }
}

/// What a Kineto text gives, read in reads of `sizes`: the parsed file's debug text, or the
/// error's message.
fn outcome(text: &[u8], sizes: &[usize]) -> String {
    let path = Path::new("t.json");
    let reader = Splits {
        text,
        sizes: sizes.to_vec(),
        next: 0,
    };
    match read_events(path, reader).and_then(|c| finish(c, "t.json@0")) {
        Ok(p) => format!("{p:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// Kineto texts with what the scanner of elements must get right: strings holding
/// brackets, commas, escaped quotes and backslashes, escapes of every kind, nesting,
/// elements that are not objects, B/E pairs, a long element (read by the streaming path),
/// whitespace and newlines anywhere.
fn tricky_texts() -> Vec<String> {
    let kernel = |name: &str, ts: u64| {
        format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": {ts}, "dur": 3, "args": {{"device": 0, "stream": 7, "correlation": {ts}, "grid": [1, 2, 3], "block": [32, 1, 1]}}}}"#
        )
    };
    let long_args = format!(
        r#"{{"ph": "X", "cat": "kernel", "name": "long", "pid": 0, "tid": 7, "ts": 50, "dur": 1, "args": {{"device": 0, "pad": [{}], "s": "{}"}}}}"#,
        vec!["[1, {\"a\": \"]}\"}]"; 40].join(", \n"),
        "x".repeat(700)
    );
    let cpu = r#"{"ph": "X", "cat": "cpu_op", "name": "a[{,\"}]\\", "args": {"k": [[], {}, "\u00e9\ud83d\ude00", null, true, -1.5e3]}}"#;
    let events = [
        kernel(r#"k\"[0]\\,{"#, 10),
        cpu.to_string(),
        "7".to_string(),
        "[1, [2, [3]], \"]\"]".to_string(),
        "\"a string, ]\"".to_string(),
        "null".to_string(),
        kernel("\\u0041 \\n \\t \\\\ \\/", 20),
        r#"{"ph": "B", "cat": "kernel", "name": "b", "pid": 0, "tid": 8, "ts": 30, "args": {"device": 0, "stream": 8}}"#.to_string(),
        r#"{"ph": "E", "pid": 0, "tid": 8, "ts": 40}"#.to_string(),
        long_args,
        kernel("é😀", 60),
        "123456789012345678901234567890".to_string(),
        "-0.5e-7".to_string(),
    ];
    let head = r#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "G[,]", "totalGlobalMem": 1}], "distributedInfo": {"rank": [0]}, "traceEvents": "#;
    vec![
        format!(
            "{head}[{}], \"baseTimeNanoseconds\": 1000, \"z\": [\"]\"]}}",
            events.join(",")
        ),
        format!(
            "{head}[\n  {}\n ]\n, \"after\": {{\"x\": \"[\"}}\n}}\n",
            events.join(" ,\n  ")
        ),
        format!("\u{feff}{head} \n [ ] }}"),
        format!("{head}[{}]}}", events[..2].join(",")),
    ]
}

/// Texts that are not valid JSON, with faults inside elements, between them, at the
/// end, and after the array.
fn broken_texts() -> Vec<String> {
    let ev = r#"{"ph": "X", "cat": "cpu_op", "name": "a,]"}"#;
    let long = format!(
        r#"{{"ph": "X", "cat": "cpu_op", "args": [{}, ]}}"#,
        "1, ".repeat(600)
    );
    vec![
        format!("{{\"traceEvents\": [{ev}, {{\"ph\": }}]}}"),
        format!("{{\"traceEvents\": [{ev},\n {ev} {ev}]}}"),
        // Faults at the start of a line (the replay's prefix is then on the line before).
        format!("{{\"traceEvents\": [{ev}\n{ev}]}}"),
        format!("{{\"traceEvents\": [\n{{\"ph\": }}]}}"),
        format!("{{\"traceEvents\": [{ev},\n]}}"),
        format!("{{\"traceEvents\": [{ev},\n {ev},]}}"),
        format!("{{\"traceEvents\": [{ev},\n 7 8]}}"),
        format!("{{\"traceEvents\": [{ev},\n 1.]}}"),
        format!("{{\"traceEvents\": [{ev},\n tru]}}"),
        format!("{{\"traceEvents\": [{ev},\n {ev}"),
        format!("{{\"traceEvents\": [{ev},\n \"abc"),
        format!("{{\"traceEvents\": [\n"),
        format!("{{\"traceEvents\": [{ev}]\n, \"x\": }}"),
        format!("{{\"traceEvents\": [{ev}]\n\n  ]"),
        format!("{{\"traceEvents\": [{ev}, {ev}}}"),
        format!("{{\"traceEvents\": [{ev}, \n{long}]}}"),
        format!("{{\"traceEvents\":   \n  5}}"),
        format!("{{\"a\": 1,\n \"traceEvents\": [{ev}, {{\"name\": \"\\x\"}}]}}"),
    ]
}

/// The same text read in one piece and in reads of many sizes (elements, strings and
/// escapes cut across chunks everywhere) gives the same events, or the same error.
#[test]
fn splits_give_identical_events() {
    for text in tricky_texts().iter().chain(&broken_texts()) {
        let whole = outcome(text.as_bytes(), &[usize::MAX]);
        if std::env::var("DUMP").is_ok() {
            eprintln!("{text}");
        }
        for sizes in [&[1][..], &[2], &[3], &[7, 1, 13], &[64], &[100, 5]] {
            assert_eq!(
                outcome(text.as_bytes(), sizes),
                whole,
                "{text} in {sizes:?}"
            );
        }
    }
}

/// The texts read: every element of the array, in order, with what it holds.
#[test]
fn tricky_texts_are_read_whole() {
    let text = &tricky_texts()[0];
    let out = outcome(text.as_bytes(), &[usize::MAX]);
    assert!(!out.starts_with("error"), "{out}");
    // Four kernels (one a B/E pair, one the long element), none lost.
    let path = Path::new("t.json");
    let c = match read_events(path, text.as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(c.next_index, 13);
    assert_eq!(c.skipped.get(NOT_AN_EVENT_OBJECT), Some(&6));
    assert_eq!(c.pending.len(), 5);
    let works = format!(
        "{:?}",
        c.pending.iter().map(|p| &p.rec.work).collect::<Vec<_>>()
    );
    for name in ["k\"[0]\\,{", "A \n \t \\ /", "b", "long", "é😀"] {
        assert!(works.contains(&format!("{name:?}")), "{name} in {works}");
    }
    assert!(c.invalid.is_empty());
}

/// A fault is reported where a parse of the whole text reports it (line and column of
/// the text, serde_json's message), however the text was cut into chunks.
#[test]
fn faults_are_placed_as_in_the_whole_text() {
    for text in broken_texts() {
        /// The shape of a trace, for serde_json's type error at a `traceEvents` that is
        /// not an array.
        #[derive(Deserialize)]
        struct Trace {
            #[serde(rename = "traceEvents")]
            _events: Vec<IgnoredAny>,
        }
        let whole = match serde_json::from_str::<Trace>(&text) {
            Err(e) => (e.line(), e.column(), e.to_string()),
            Ok(_) => panic!("valid: {text}"),
        };
        for sizes in [&[usize::MAX][..], &[1], &[5, 3]] {
            let reader = Splits {
                text: text.as_bytes(),
                sizes: sizes.to_vec(),
                next: 0,
            };
            match read_events(Path::new("t.json"), reader) {
                Err(ImportError::Json {
                    line,
                    column,
                    source,
                    ..
                }) => {
                    assert_eq!((line, column), (whole.0, whole.1), "{text}");
                    let (msg, at) = (
                        source.to_string(),
                        format!(" at line {line} column {column}"),
                    );
                    assert!(msg.ends_with(&at), "{msg} for {text}");
                    // The message is serde_json's, but for a type error (which says what
                    // was expected, here a trace).
                    if !whole.2.contains("invalid type") {
                        assert_eq!(msg, whole.2, "{text}");
                    }
                }
                Err(ImportError::NotATrace { reason, .. }) => {
                    // On the line of the value (serde_json's streaming reader places a
                    // type error after the byte it peeked, as before chunks).
                    let at = format!("at line {} column ", whole.0);
                    assert!(reason.contains(&at), "{reason}");
                    assert!(reason.contains("invalid type: integer `5`"), "{reason}");
                }
                Err(e) => panic!("{text}: {e}"),
                Ok(_) => panic!("{text}: read"),
            }
        }
    }
}

/// The HTA AlexNet trace of `shared/data` (320 kB of JSON), decompressed; `None` (with a
/// notice) when the folder is absent outside CI, a failure under `CI=true`.
fn alexnet() -> Option<Vec<u8>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/hta_alexnet_benchmark_result_2869224_1695835535_trace.json.gz");
    let Ok(gz) = std::fs::read(&path) else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{} is missing (CI=true)",
            path.display()
        );
        {
            // Straight to stderr, past the test harness's capture: a skip is never silent.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: {} is missing", path.display());
        }
        return None;
    };
    let mut text = Vec::new();
    match flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut text) {
        Ok(_) => Some(text),
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

mod split_props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// A real trace cut into chunks at random places gives the same events as read in
        /// one piece.
        #[test]
        fn random_splits_of_a_real_trace(sizes in proptest::collection::vec(1usize..5000, 1..6)) {
            if let Some(text) = alexnet() {
                let whole = outcome(&text, &[usize::MAX]);
                prop_assert!(!whole.starts_with("error"), "{}", whole);
                prop_assert_eq!(outcome(&text, &sizes), whole);
            }
        }

        /// The same for the tricky and broken texts, cut anywhere.
        #[test]
        fn random_splits_of_tricky_texts(sizes in proptest::collection::vec(1usize..80, 1..6)) {
            for text in tricky_texts().iter().chain(&broken_texts()) {
                prop_assert_eq!(outcome(text.as_bytes(), &sizes), outcome(text.as_bytes(), &[usize::MAX]));
            }
        }
    }
}

/// A string over the cap inside an element that crosses chunks is still cut (one count),
/// and never held whole: the text around it is read as before.
#[test]
fn long_strings_are_cut_across_chunks() {
    let name = "n".repeat(MAX_STRING_BYTES + 100);
    let text = format!(
        r#"{{"traceEvents": [{{"ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {{"device": 0}}}}, 5]}}"#
    );
    for sizes in [&[usize::MAX][..], &[1000, 7]] {
        let reader = Splits {
            text: text.as_bytes(),
            sizes: sizes.to_vec(),
            next: 0,
        };
        let c = match read_events(Path::new("t.json"), reader) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(c.cut_strings, 1);
        assert_eq!(c.next_index, 2);
        assert_eq!(c.pending.len(), 1);
    }
}

#[test]
fn zero_text() {
    assert!(text_is_zero("0"));
    assert!(text_is_zero("0.000"));
    assert!(text_is_zero("-0e7"));
    assert!(!text_is_zero("0.001"));
    assert!(!text_is_zero("10"));
}

#[test]
fn sass_op_fields_are_the_metrics_in_args() {
    for (field, m) in SASS_OP_FIELDS
        .iter()
        .zip(gpumeter_core::ops::SASS_OP_METRICS)
    {
        assert_eq!(field.strip_prefix("args."), Some(m.name));
    }
}

#[test]
fn launches_are_kernel_and_graph_launch_calls() {
    for name in [
        "cudaLaunchKernel",
        "cudaLaunchKernel_ptsz",
        "cudaLaunchKernelExC",
        "cudaLaunchCooperativeKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "cudaGraphLaunch",
        "cuGraphLaunch",
    ] {
        assert!(is_launch(name), "{name}");
    }
    for name in [
        "cudaLaunchHostFunc",
        "cuLaunchHostFunc",
        "cudaMemcpyAsync",
        "cudaGraphInstantiate",
    ] {
        assert!(!is_launch(name), "{name}");
    }
}
