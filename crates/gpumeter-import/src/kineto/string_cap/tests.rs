//! Tests of the string cap: strings cut at the cap with a digest of the rest, validated past
//! the cut as serde_json validates them, and the fast path agreeing with the lexer.

use super::*;
use crate::cut::{CUT_MARK, CUT_SUFFIX_BYTES, MAX_STRING_BYTES};

/// `text` read through [`StringCap`]: what comes out, and how many strings were cut.
fn capped(text: &[u8]) -> (Vec<u8>, u64) {
    let mut cap = StringCap::new(text);
    let mut out = Vec::new();
    // Small reads, so that states cross read boundaries.
    let mut buf = [0u8; 7];
    loop {
        match cap.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read: {e}"),
        }
    }
    (out, cap.cut)
}

fn decoded(json: &[u8]) -> Vec<String> {
    match serde_json::from_slice(json) {
        Ok(v) => v,
        Err(e) => panic!("not JSON after the cap: {e}"),
    }
}

#[test]
fn string_cap() {
    const M: usize = MAX_STRING_BYTES;
    // Short strings, escaped quotes and backslashes pass untouched.
    let short = br#"{"a\"b": ["c\\", "\u00e9\ud83d\ude00", 1.5, "]"]}"#;
    assert_eq!(capped(short), (short.to_vec(), 0));
    // A long string is cut at MAX_STRING_BYTES, the next one is read whole.
    let text = format!(r#"["{}", "{}", "z"]"#, "a".repeat(M + 10), "b".repeat(M));
    let (out, cut) = capped(text.as_bytes());
    assert_eq!(cut, 1);
    let v = decoded(&out);
    assert_eq!(v[1..], ["b".repeat(M), "z".to_string()]);
    assert_eq!(v[0].len(), M + CUT_SUFFIX_BYTES);
    assert_eq!(cut_prefix(&v[0]), "a".repeat(M));
    // Never inside a character: 2-byte `é`s cut at M bytes (M is even)...
    let text = format!(r#"["x{}"]"#, "é".repeat(M));
    let v = decoded(&capped(text.as_bytes()).0);
    assert_eq!(
        cut_prefix(&v[0]).len(),
        M + 1,
        "the character under way is finished"
    );
    // ... nor inside an escape, nor between the halves of a surrogate pair.
    for prefix in [M - 1, M - 6, M - 7] {
        let text = format!(r#"["{}\ud83d\ude00\n\"rest"]"#, "a".repeat(prefix));
        let (out, cut) = capped(text.as_bytes());
        assert_eq!(cut, 1);
        let v = decoded(&out);
        let kept = cut_prefix(&v[0]);
        assert!(kept.starts_with(&"a".repeat(prefix)), "{prefix}");
        // Cut at a character boundary of the decoded text, at or past M bytes of it
        // (escapes count as the bytes they stand for).
        let full = format!("{}😀\n\"rest", "a".repeat(prefix));
        assert!(full.starts_with(kept) && kept.len() >= M, "{prefix}");
        assert!(kept.len() < full.len(), "{prefix}");
    }
    // The dropped part's escapes are followed: an escaped quote does not end the string.
    let text = format!(r#"["{}\"], [\"", "after"]"#, "a".repeat(M + 3));
    let v = decoded(&capped(text.as_bytes()).0);
    assert_eq!(cut_prefix(&v[0]), "a".repeat(M));
    assert_eq!(v[1], "after");
}

/// The part of `s` before the cut mark (all of it when it has none), checking the digest's
/// shape.
fn cut_prefix(s: &str) -> &str {
    match s.find(CUT_MARK) {
        Some(at) => {
            let digest = &s[at + CUT_MARK.len()..];
            assert_eq!(digest.len(), 33, "{digest}");
            assert!(digest.ends_with(']'));
            assert!(digest[..32].bytes().all(|b| b.is_ascii_hexdigit()));
            &s[..at]
        }
        None => s,
    }
}

/// Strings that differ only past the cut stay distinct; equal ones stay equal; the digest
/// is of the dropped text.
#[test]
fn cut_strings_keep_a_digest_of_the_rest() {
    use sha2::Digest;
    const M: usize = MAX_STRING_BYTES;
    let a = "a".repeat(M + 100);
    let mut b = a.clone();
    b.replace_range(M + 50..M + 51, "b");
    let text = format!(r#"["{a}", "{b}", "{a}"]"#);
    let (out, cut) = capped(text.as_bytes());
    assert_eq!(cut, 3);
    let v = decoded(&out);
    assert_ne!(v[0], v[1]);
    assert_eq!(v[0], v[2]);
    let digest = sha2::Sha256::digest("a".repeat(100).as_bytes());
    assert_eq!(
        v[0],
        format!("{}{CUT_MARK}{}]", "a".repeat(M), hex::encode(&digest[..16]))
    );
}

/// serde_json's message for `text` as a list of strings, without its position.
fn refusal(text: &[u8]) -> Option<String> {
    let e = serde_json::from_slice::<Vec<String>>(text).err()?;
    let msg = e.to_string();
    Some(msg.split(" at line ").next().unwrap_or("").to_string())
}

/// A fault past the cut is refused as serde_json refuses it before the cut (the same
/// message), and what is valid there stays valid: escapes, surrogate pairs, UTF-8.
#[test]
fn cut_strings_are_validated_past_the_cut() {
    const M: usize = MAX_STRING_BYTES;
    let pad = "a".repeat(M + 10);
    let good: [&[u8]; 5] = [
        br#"\n\"\u00e9"#,
        br#"\ud83d\ude00"#,
        "é😀".as_bytes(),
        br#"x\\"#,
        br#"\/\b\f\r\t"#,
    ];
    for tail in good {
        let mut text = format!("[\"{pad}").into_bytes();
        text.extend_from_slice(tail);
        text.extend_from_slice(b"\"]");
        let (out, cut) = capped(&text);
        assert_eq!(cut, 1);
        let v = decoded(&out);
        assert!(
            cut_prefix(&v[0]) == &pad[..M],
            "{}",
            String::from_utf8_lossy(tail)
        );
    }
    let bad: [&[u8]; 10] = [
        br#"\q"#,
        br#"\u12g4"#,
        b"\x01",
        b"\n",
        b"\xff",
        b"\xe2\x82",
        br#"\ud83dx"#,
        br#"\ude00"#,
        br#"\ud83d\u0041"#,
        br#"\ud83d\n"#,
    ];
    for tail in bad {
        // The same fault before the cut, and past it.
        let mut short = b"[\"x".to_vec();
        short.extend_from_slice(tail);
        short.extend_from_slice(b"y\"]");
        let mut long = format!("[\"{pad}").into_bytes();
        long.extend_from_slice(tail);
        long.extend_from_slice(b"y\"]");
        let want = refusal(&short);
        assert!(want.is_some(), "{}", String::from_utf8_lossy(tail));
        let (out, _) = capped(&long);
        assert_eq!(refusal(&out), want, "{}", String::from_utf8_lossy(tail));
    }
    // Unterminated past the cut: still an error.
    let (out, _) = capped(format!("[\"{pad}abc").as_bytes());
    assert!(refusal(&out).is_some());
}

/// The cap's fast path (a chunk without `\\` and with a `"` in each half-cap block, passed
/// over whole) gives what the lexer gives byte by byte, for strings of lengths around the
/// cap, long strings spanning chunks, and chunks of every size.
#[test]
fn string_cap_fast_path_agrees_with_the_lexer() {
    const M: usize = MAX_STRING_BYTES;
    let mut texts = Vec::new();
    for len in [M - 3, M - 2, M - 1, M, M + 1, M + 2] {
        texts.push(format!(
            r#"["{}", "b", "{}"]"#,
            "a".repeat(len),
            "c".repeat(len / 3)
        ));
    }
    // Many strings of 40 kB (each holds a whole block: the lexer reads them) and of 20 kB
    // (each block holds a quote: passed over), none cut.
    texts.push(format!(
        "[{}]",
        vec![format!("\"{}\"", "d".repeat(40_000)); 8].join(", ")
    ));
    texts.push(format!(
        "[{}]",
        vec![format!("\"{}\"", "g".repeat(20_000)); 16].join(",")
    ));
    // A string over the cap between short ones, and one after a backslash (slow path).
    texts.push(format!(
        r#"["x", "{}", "y", "\\", "{}"]"#,
        "e".repeat(3 * M),
        "f".repeat(M + 9)
    ));
    for text in &texts {
        let slow = capped(text.as_bytes());
        for size in [1 << 20, 3 * M, M + 1, M / 2, 1000] {
            let mut cap = StringCap::new(&b""[..]);
            let mut out = Vec::new();
            for piece in text.as_bytes().chunks(size) {
                let mut buf = piece.to_vec();
                let kept = cap.filter(&mut buf);
                out.extend_from_slice(&buf[..kept]);
                out.extend_from_slice(cap.queued());
                cap.queue.clear();
                cap.queue_pos = 0;
            }
            assert!(
                out == slow.0 && cap.cut == slow.1,
                "{} bytes in {size}",
                text.len()
            );
        }
    }
    // The fast path is taken: a chunk with quotes in every block and no backslash.
    let cap = StringCap::new(&b""[..]);
    assert!(cap.uncut(texts[6].as_bytes()).is_none());
    assert!(cap.uncut(texts[7].as_bytes()).is_some());
    assert!(cap.uncut(texts[8].as_bytes()).is_none());
}
