//! Tests of the settled-event fast path: what it takes, the full visitor reads to the same
//! event and length (a property test on generated elements), and which real-looking elements
//! it takes or leaves.

use proptest::prelude::*;
use serde_json::value::RawValue;

use super::{settled_event, MAX_PH_CAT_BYTES};
use crate::kineto::event::Element;

/// The full visitor's reading of the element at the start of `data`: the texts of its eight
/// fields, its duplicate (key index and text), and its length; `None` when it reads no event.
type Full = (Vec<Option<String>>, Option<(usize, String)>, usize);

fn full(data: &[u8]) -> Option<Full> {
    let mut it = serde_json::Deserializer::from_slice(data).into_iter::<Element<&RawValue>>();
    match it.next() {
        Some(Ok(Element::Event(ev))) => Some((
            ev.fields
                .iter()
                .map(|f| f.map(|v| v.get().to_string()))
                .collect(),
            ev.duplicate.map(|(i, v)| (i, v.get().to_string())),
            it.byte_offset(),
        )),
        _ => None,
    }
}

fn fast(data: &[u8]) -> Option<Full> {
    settled_event(data).map(|(ev, len)| {
        (
            ev.fields
                .iter()
                .map(|f| f.map(|v| v.get().to_string()))
                .collect(),
            ev.duplicate.map(|(i, v)| (i, v.get().to_string())),
            len,
        )
    })
}

const EVENT: &str = r#"{
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::slice",
            "pid": 6583,
            "tid": 6583,
            "ts": 1365627863588.761,
            "dur": 57.843,
            "args": {
                "External id": 2,
                "Input Strides": [[1], [], []],
                "Ev Idx": 1
            }
        },
        {"ph": "X"}"#;

#[test]
fn a_settled_event_takes_the_fast_path_as_the_full_visitor_reads_it() {
    let got = fast(EVENT.as_bytes()).expect("taken");
    assert_eq!(Some(&got), full(EVENT.as_bytes()).as_ref());
    assert_eq!(got.0[0].as_deref(), Some(r#""X""#));
    assert_eq!(got.0[1].as_deref(), Some(r#""cpu_op""#));
    assert!(got.0[2..].iter().all(Option::is_none));
    assert_eq!(&EVENT[got.2 - 1..got.2], "}");
    // Compact text, and flow events (`s`, `f`) of an unknown category.
    for text in [
        r#"{"ph":"X","cat":"python_function","name":"x"}"#,
        r#"{"ph": "f", "cat": "ac2g", "id": 7, "bp": "e"}"#,
        r#"{ "ph" : "X" , "cat" : "gpu_user_annotation" }"#,
    ] {
        assert!(fast(text.as_bytes()).is_some(), "{text}");
        assert_eq!(fast(text.as_bytes()), full(text.as_bytes()), "{text}");
    }
}

#[test]
fn events_that_are_not_settled_or_not_plain_take_the_full_path() {
    for text in [
        // What the meter reads: work, API calls, ranges, B/E pairs.
        r#"{"ph": "X", "cat": "kernel", "name": "k"}"#,
        r#"{"ph": "X", "cat": " Kernel ", "name": "k"}"#,
        r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel"}"#,
        r#"{"ph": "X", "cat": "cuda_profiler_range"}"#,
        r#"{"ph": "B", "cat": "cpu_op"}"#,
        r#"{"ph": "E", "cat": "cpu_op"}"#,
        // Another order of members, a missing one, a value of another type.
        r#"{"cat": "cpu_op", "ph": "X"}"#,
        r#"{"ph": "X", "name": "n", "cat": "cpu_op"}"#,
        r#"{"ph": "X"}"#,
        r#"{"ph": "X", "cat": null}"#,
        r#"{"ph": 5, "cat": "cpu_op"}"#,
        // An escape anywhere, in `ph` or `cat` or later.
        r#"{"ph": "\u0058", "cat": "cpu_op"}"#,
        r#"{"ph": "X", "cat": "cpu\u005fop"}"#,
        r#"{"ph": "X", "cat": "cpu_op", "name": "a \"quoted\" name"}"#,
        r#"{"ph": "X", "cat": "cpu_op", "k\u0065y": 1}"#,
        // Cut by the end of the text held, or faulty.
        r#"{"ph": "X", "cat": "cpu_op", "name": "ab"#,
        r#"{"ph": "X", "cat": "cpu_op", "name": "a" "b"}"#,
        r#"{"ph": "X", "cat": "cpu_op", "n": [1, 2,]}"#,
        "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"a\u{1}b\"}",
        // Not an object.
        r#"["ph", "X"]"#,
    ] {
        assert_eq!(fast(text.as_bytes()), None, "{text}");
    }
    // Invalid UTF-8 in a field (the full visitor refuses it) or in an ignored key's value
    // (which it lets pass): both left to it.
    for text in [
        &b"{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"\xff\"}"[..],
        &b"{\"ph\": \"X\", \"cat\": \"cpu_op\", \"other\": \"\xff\"}"[..],
    ] {
        assert_eq!(fast(text), None);
    }
    // A `ph` or `cat` longer than the fast path looks at.
    let long = format!(
        r#"{{"ph": "X", "cat": "{}"}}"#,
        "c".repeat(MAX_PH_CAT_BYTES + 1)
    );
    assert_eq!(fast(long.as_bytes()), None);
    let at_max = format!(
        r#"{{"ph": "X", "cat": "{}"}}"#,
        "c".repeat(MAX_PH_CAT_BYTES)
    );
    assert!(fast(at_max.as_bytes()).is_some());
}

/// Pieces of string contents: plain text, text that looks like members, escapes (valid,
/// lone surrogates, bad), a raw control character, non-ASCII and invalid UTF-8.
fn piece() -> impl Strategy<Value = &'static [u8]> {
    let plain = prop::sample::select(vec![
        &b"a"[..],
        b"ph",
        b"cat",
        b"{}[],:",
        b" ",
        "é".as_bytes(),
    ]);
    let hostile = prop::sample::select(vec![
        &b"\\\"ph\\\": \\\"B\\\""[..],
        b", \\\"cat\\\": \\\"kernel\\\"",
        b"\\\\",
        b"\\\"",
        b"\\n",
        b"\\u00e9",
        b"\\ud800",
        b"\\x",
        b"\x01",
        b"\xff",
        b"\xc3",
    ]);
    prop_oneof![12 => plain, 1 => hostile]
}

fn string() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(piece(), 0..4).prop_map(|p| {
        let mut s = b"\"".to_vec();
        s.extend(p.concat());
        s.push(b'"');
        s
    })
}

fn ws() -> impl Strategy<Value = &'static [u8]> {
    prop::sample::select(vec![&b""[..], b" ", b"\n            ", b"\t", b"\r\n"])
}

/// A JSON value (or a near miss): scalars, strings, and nested objects and arrays.
fn value() -> impl Strategy<Value = Vec<u8>> {
    let leaf = prop_oneof![
        string(),
        prop::sample::select(vec![
            &b"1"[..],
            b"-2.5",
            b"1e3",
            b"1365627863588.761",
            b"01",
            b"1.",
            b"-",
            b"true",
            b"null",
            b"nul",
        ])
        .prop_map(<[u8]>::to_vec),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec((string(), ws(), inner.clone()), 0..4).prop_map(|m| {
                let mut s = b"{".to_vec();
                for (i, (k, w, v)) in m.into_iter().enumerate() {
                    if i > 0 {
                        s.push(b',');
                    }
                    s.extend(k);
                    s.extend(w);
                    s.push(b':');
                    s.extend(v);
                }
                s.push(b'}');
                s
            }),
            prop::collection::vec((ws(), inner), 0..4).prop_map(|m| {
                let mut s = b"[".to_vec();
                for (i, (w, v)) in m.into_iter().enumerate() {
                    if i > 0 {
                        s.push(b',');
                    }
                    s.extend(w);
                    s.extend(v);
                }
                s.push(b']');
                s
            }),
        ]
    })
}

/// A member's key: one the visitor reads, `ph` and `cat` again, or another.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            &b"\"name\""[..],
            b"\"ph\"",
            b"\"cat\"",
            b"\"args\"",
            b"\"ts\"",
            b"\"other\"",
            b"\"k\\u0065y\"",
        ])
        .prop_map(<[u8]>::to_vec),
        string(),
    ]
}

fn ph() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![&b"\"X\""[..], b"\"i\"", b"\"s\"", b"\"f\"", b"\"B\"", b"\"E\""])
            .prop_map(<[u8]>::to_vec),
        1 => value(),
    ]
}

fn cat() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![
            &b"\"cpu_op\""[..],
            b"\"python_function\"",
            b"\"ac2g\"",
            b"\"gpu_user_annotation\"",
            b"\"Trace\"",
            b"\"kernel\"",
            b"\" KERNEL\"",
            b"\"cuda_runtime\"",
            b"\"cuda_profiler_range\"",
        ])
        .prop_map(<[u8]>::to_vec),
        1 => value(),
    ]
}

/// An element: mostly `{"ph": …, "cat": …` then other members, sometimes keys in another
/// order; then sometimes cut short or with one byte put in anywhere; then what follows it in
/// the array.
fn element() -> impl Strategy<Value = Vec<u8>> {
    let members = prop::collection::vec((ws(), key(), ws(), value()), 0..5);
    let edit = prop_oneof![
        6 => Just(None),
        1 => (any::<prop::sample::Index>(), Just(None)).prop_map(|(i, b)| Some((i, b))),
        1 => (
            any::<prop::sample::Index>(),
            prop::sample::select(vec![b'"', b'\\', b'\x01', b'\xff', b',', b'}', b'{', b' '])
                .prop_map(Some)
        )
            .prop_map(|(i, b)| Some((i, b))),
    ];
    let tail = prop::sample::select(vec![&b""[..], b",", b",\n        {\"ph\": \"X\"}]", b"]"]);
    (
        ws(),
        ph(),
        ws(),
        cat(),
        prop::bool::weighted(0.1),
        members,
        edit,
        tail,
    )
        .prop_map(|(w, ph, w2, cat, swap, members, edit, tail)| {
            let mut s = b"{".to_vec();
            let (k1, v1, k2, v2) = if swap {
                (&b"\"cat\""[..], cat, &b"\"ph\""[..], ph)
            } else {
                (&b"\"ph\""[..], ph, &b"\"cat\""[..], cat)
            };
            s.extend(w);
            s.extend(k1);
            s.extend(b": ");
            s.extend(v1);
            s.push(b',');
            s.extend(w2);
            s.extend(k2);
            s.push(b':');
            s.extend(w2);
            s.extend(v2);
            for (w, k, w2, v) in members {
                s.push(b',');
                s.extend(w);
                s.extend(k);
                s.extend(w2);
                s.push(b':');
                s.extend(v);
            }
            s.extend(w);
            s.push(b'}');
            match edit {
                Some((i, None)) => s.truncate(i.index(s.len())),
                Some((i, Some(b))) => s.insert(i.index(s.len() + 1), b),
                None => {}
            }
            s.extend(tail);
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]
    /// Whatever the fast path takes, the full visitor reads to the same event (the same
    /// fields, as the same JSON text, and no duplicate) and the same length; and it takes the
    /// plain settled events.
    #[test]
    fn the_fast_path_reads_what_the_full_visitor_reads(data in element()) {
        if let Some(got) = fast(&data) {
            prop_assert_eq!(Some(got), full(&data), "{}", String::from_utf8_lossy(&data));
        }
    }
}

/// The generator reaches both paths often: the property above is not vacuous.
#[test]
fn generated_elements_reach_both_paths() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut taken, mut left) = (0, 0);
    for _ in 0..2000 {
        let data = element()
            .new_tree(&mut runner)
            .map(|t| t.current())
            .unwrap_or_default();
        if fast(&data).is_some() {
            taken += 1;
        } else {
            left += 1;
        }
    }
    assert!(taken > 100 && left > 100, "taken {taken}, left {left}");
}
