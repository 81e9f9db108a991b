//! The fast path of most trace events: an element whose `ph` and `cat`, its first two
//! members, settle it as ignorable ([`super::event::RawEvent::settled`]: most CPU-side events,
//! `python_function`, `cpu_op`, flow events) is validated by serde_json skipping it whole
//! (`IgnoredAny`), instead of being read key by key with its fields kept as raw values
//! ([`settled_event`]).
//!
//! Why: a profile of `gpumeter usage` on the B200 trace put serde_json's parse of the
//! elements at half of the main thread, most of it matching every key of every event and
//! borrowing every known field as a `RawValue`, though an event settled by its `ph` and `cat`
//! keeps none of them. In isolation, on that trace's 14.2 MB `traceEvents` array, one
//! `StreamDeserializer` step per element: the full visitor 15.0 ms, `IgnoredAny` 10.3 ms
//! (docs/PERFORMANCE.md, section "Kineto import: settled events skipped whole, inflate beside
//! the parse").
//!
//! Exact: the element is taken by this path only when the full visitor would read it to the
//! same event, and otherwise read by the full visitor as before, so every event, fault and
//! position is what it was. The conditions:
//! - it opens with `{"ph": "...", "cat": "..."` (any JSON whitespace between the tokens; both
//!   strings without `\` and at most [`MAX_PH_CAT_BYTES`] long), so the full visitor's event
//!   holds these two fields and nothing else once settled: it drops every later member
//!   unread, a repeated key included;
//! - the two values settle it ([`super::event::RawEvent::settled`], the full visitor's own
//!   test);
//! - serde_json skips it whole without error (its syntax, control characters in strings,
//!   escapes are what the full visitor checks: the same `ignore_value` reads every value);
//! - its text has no `\` and is valid UTF-8: then its keys, which the full visitor decodes
//!   (`parse_str`), fail exactly where serde_json's skip fails (a control character, the end of
//!   the text), and the raw values it would borrow (whose text it checks as UTF-8) are valid.
//!
//! This is no parser of JSON: the prefix is only matched to choose the path, and the element
//! is then validated by serde_json. The property test `settled_props` checks, on generated
//! elements with escapes, nested objects, strings holding `"ph"` and `"cat"`, invalid UTF-8,
//! control characters and cut text, that whatever this path takes, the full visitor reads to
//! the same event and length.

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

use super::event::RawEvent;

/// The longest `ph` or `cat` string (its text between the quotes, in bytes) the fast path
/// matches: Kineto's are a few bytes. It bounds the search for the closing quote, so an
/// element the fast path refuses costs it a few dozen bytes of scanning.
pub(super) const MAX_PH_CAT_BYTES: usize = 64;

/// The element at the start of `data` (an element of `traceEvents`, at its first byte), when
/// its `ph` and `cat` settle it and it takes the fast path (module docs): the event the full
/// visitor would read (its `ph` and `cat` fields only) and the element's length in bytes.
/// `None`: read it with the full visitor (`Element`), which may also find that it is cut by
/// the end of `data` or faulty.
pub(super) fn settled_event(data: &[u8]) -> Option<(RawEvent<&RawValue>, usize)> {
    let (ph, cat) = ph_and_cat(data)?;
    let mut ev = RawEvent::default();
    ev.fields[0] = Some(raw(ph)?);
    ev.fields[1] = Some(raw(cat)?);
    if !ev.settled() {
        return None;
    }
    let mut it = serde_json::Deserializer::from_slice(data).into_iter::<IgnoredAny>();
    if !matches!(it.next(), Some(Ok(_))) {
        return None;
    }
    let len = it.byte_offset();
    let text = &data[..len];
    if memchr::memchr(b'\\', text).is_some() || std::str::from_utf8(text).is_err() {
        return None;
    }
    Some((ev, len))
}

/// `text`, a JSON string, as the raw value it is.
fn raw(text: &[u8]) -> Option<&RawValue> {
    serde_json::from_slice(text).ok()
}

/// The JSON texts (quotes included) of `ph` and `cat` when `data` opens with
/// `{"ph": "…", "cat": "…"` (whitespace allowed between tokens, each string without `\` or
/// `"` inside and at most [`MAX_PH_CAT_BYTES`] bytes between its quotes); `None` otherwise.
/// Only matched, not validated: [`settled_event`] has serde_json validate what it takes.
fn ph_and_cat(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut at = 0;
    token(data, &mut at, b"{")?;
    token(data, &mut at, b"\"ph\"")?;
    token(data, &mut at, b":")?;
    let ph = string(data, &mut at)?;
    token(data, &mut at, b",")?;
    token(data, &mut at, b"\"cat\"")?;
    token(data, &mut at, b":")?;
    let cat = string(data, &mut at)?;
    Some((ph, cat))
}

/// Moves `at` past JSON whitespace and then `t`, when `t` follows.
fn token(data: &[u8], at: &mut usize, t: &[u8]) -> Option<()> {
    skip_ws(data, at);
    data.get(*at..)?.starts_with(t).then(|| *at += t.len())
}

/// Moves `at` past JSON whitespace and a string without `\` of at most [`MAX_PH_CAT_BYTES`]
/// bytes, returning its text with the quotes.
fn string<'a>(data: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    skip_ws(data, at);
    let start = *at;
    if data.get(start) != Some(&b'"') {
        return None;
    }
    let inner = data.get(start + 1..)?;
    let window = &inner[..inner.len().min(MAX_PH_CAT_BYTES + 1)];
    let close = memchr::memchr2(b'"', b'\\', window)?;
    if window[close] != b'"' {
        return None;
    }
    *at = start + close + 2;
    Some(&data[start..*at])
}

fn skip_ws(data: &[u8], at: &mut usize) {
    while matches!(data.get(*at), Some(b' ' | b'\n' | b'\t' | b'\r')) {
        *at += 1;
    }
}

#[cfg(test)]
mod tests;
