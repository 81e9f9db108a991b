//! The `traceEvents` array, read from the chunks of text held ([`read_array`]): each element
//! parsed by serde_json where it lies, its fields borrowed from the chunk, and handed to the
//! collector; a fault reported as a parse of the whole text reports it ([`replay`]).

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::collect::Collector;
use super::event::Element;
use super::json::json_error;
use super::settled::settled_event;
use super::text::{relocated, Pos, Source, SourceReader};
use crate::error::ImportError;

/// An element of `traceEvents` longer than this (whitespace and strings, each string cut at
/// [`crate::MAX_STRING_BYTES`], can make one of any length) is read by the streaming deserializer
/// instead of being held whole ([`read_array`]); real trace events are a few hundred bytes.
/// Small in unit tests, so that their longer elements take that path.
const MAX_HELD_ELEMENT_BYTES: usize = if cfg!(test) { 1024 } else { 4 << 20 };

/// Where [`read_array`] is in the `traceEvents` array, as the text that puts a JSON parser
/// there: `[` (before the first element), `[[]` (after an element), `[[],` (after a comma).
type ArrayState = &'static str;

/// What became of an attempt to read an element from the text held.
enum Attempt {
    /// Read (and handed to the collector), `len` bytes long.
    Read(usize),
    /// The text held ends inside the element (or may: a number at its end).
    More,
    /// A fault in the text, at its position (in the text held, from the element's start).
    Bad(serde_json::Error),
}

/// Reads the `traceEvents` array from `s` (at its `[`) through its `]`, handing each element to
/// the collector. Each element is parsed by `serde_json` from the chunk buffer (one
/// `StreamDeserializer` step, which tells where the element ends), its fields borrowed from
/// the buffer; one that the chunk cuts is parsed again once the next chunk is read after it
/// (the buffer grows for an element longer than a chunk). An element longer than
/// [`MAX_HELD_ELEMENT_BYTES`] that is an object or an array is read by serde_json's streaming
/// reader instead ([`stream_element`]). The separators (`,`, `]`) and whitespace between
/// elements are read here.
///
/// Why this and not `serde_json::from_reader` over the whole text (whose reader goes a byte at
/// a time), nor `from_slice` over the text read into memory (memory grows with the file):
/// measured with `/usr/bin/time -v target/release/gpumeter usage FILE`, three runs of each
/// build interleaved, user time and peak RSS, on `tracelens_b200_eager_trace.json` of
/// `shared/data` (1×: 14 MB of JSON) and on it repeated to 10× (all events nine more times,
/// each positive `ts` shifted by k × 1.1 × the trace's span: 68 MB of JSON, 6.5 MB gzipped),
/// on a 2-core machine shared with other builds (±0.03 s):
///
/// | input      | in memory (`from_slice`) | `from_reader`        | chunks (this)        |
/// |------------|--------------------------|----------------------|----------------------|
/// | 1× plain   | 0.02–0.03 s, 21 MB       | 0.07–0.09 s, 8 MB    | 0.02–0.03 s, 9 MB    |
/// | 1× gzip    | 0.03–0.04 s, 23 MB       | 0.08–0.19 s, 8 MB    | 0.04–0.05 s, 9 MB    |
/// | 10× plain  | 0.17–0.18 s, 76 MB       | 0.46–0.53 s, 14 MB   | 0.18–0.21 s, 15 MB   |
/// | 10× gzip   | 0.22–0.24 s, 83 MB       | 0.46–0.63 s, 15 MB   | 0.23–0.26 s, 15 MB   |
///
/// The rest of the time is serde_json's parse, SHA-256 and inflate; the string cap costs a few
/// SIMD searches per chunk ([`super::string_cap::StringCap`]'s fast path) and positions are counted a chunk at a
/// time ([`Source`]). The elements' ends are found by serde_json itself (one
/// `StreamDeserializer` step reports where the value ended), not by a scanner of brackets and
/// strings of our own: the first version of this had one, and it was a fifth of the profile.
///
/// # Errors
/// A fault of the collector, a read error (as a JSON error of category I/O), or bad JSON,
/// reported as a parse of the whole text would report it ([`replay`]).
pub(super) fn read_array(c: &mut Collector<'_>, s: &mut Source<'_>) -> Result<(), ImportError> {
    let path = c.path;
    let io = |e| json_error(path, serde_json::Error::io(e));
    s.consume(1);
    let mut state: ArrayState = "[";
    loop {
        let next = s.skip_ws().map_err(io)?;
        match (state, next) {
            ("[" | "[[]", Some(b']')) => {
                s.consume(1);
                return Ok(());
            }
            ("[[]", Some(b',')) => {
                s.consume(1);
                state = "[[],";
                continue;
            }
            ("[[]", _) | (_, None) => return Err(replay(path, s, state, None)),
            _ => {}
        }
        loop {
            let data = &s.buf[s.pos..s.end];
            // Most events are settled by their `ph` and `cat` and skipped whole by serde_json,
            // exactly as the full visitor would read them (`settled` module docs).
            if let Some((ev, len)) = settled_event(data) {
                c.element(Element::Event(ev))?;
                s.consume(len);
                break;
            }
            let attempt = {
                let mut it =
                    serde_json::Deserializer::from_slice(data).into_iter::<Element<&RawValue>>();
                match it.next() {
                    Some(Ok(el)) => {
                        let len = it.byte_offset();
                        if len == data.len() && !s.eof && !matches!(data[0], b'{' | b'[' | b'"') {
                            Attempt::More
                        } else {
                            c.element(el)?;
                            Attempt::Read(len)
                        }
                    }
                    Some(Err(e)) if s.eof => Attempt::Bad(e),
                    Some(Err(e)) if e.is_eof() || ends_at(data, &e) => Attempt::More,
                    Some(Err(e)) => Attempt::Bad(e),
                    // Not met: `data` starts with a byte that is not whitespace.
                    None => Attempt::More,
                }
            };
            match attempt {
                Attempt::Read(len) => {
                    s.consume(len);
                    break;
                }
                Attempt::More => {
                    let held = s.end - s.pos;
                    if held > MAX_HELD_ELEMENT_BYTES && matches!(s.buf[s.pos], b'{' | b'[') {
                        stream_element(c, s)?;
                        break;
                    }
                    // At the end of the text, the next attempt reports the fault. Read at
                    // least as much again as is held, so that a long element is parsed again
                    // a few times, not once per read.
                    let was_eof = s.eof;
                    if !s.fill().map_err(io)? && was_eof {
                        return Err(replay(path, s, state, None));
                    }
                    while s.end - s.pos < 2 * held && s.fill().map_err(io)? {}
                }
                Attempt::Bad(e) => {
                    let start = s.at();
                    let at = if e.line() == 1 {
                        (start.line, start.col + e.column())
                    } else {
                        (start.line + e.line() - 1, e.column())
                    };
                    let fallback = relocated(&e, at.0, at.1);
                    return Err(replay(path, s, state, Some((fallback, at))));
                }
            }
        }
        state = "[[]";
    }
}

/// Whether serde_json's error `e` in `data` is at its end (where more text could make it no
/// fault: a number cut after its `.`).
fn ends_at(data: &[u8], e: &serde_json::Error) -> bool {
    let mut end = Pos { line: 1, col: 0 };
    end.advance(data);
    (e.line(), e.column()) == (end.line, end.col)
}

/// An element too long to be held, read by serde_json's streaming reader straight from `s`
/// (positions in its errors are the text's: it reads after whitespace that stands for what
/// came before). Only an object or an array: serde_json reads no byte past its end.
fn stream_element(c: &mut Collector<'_>, s: &mut Source<'_>) -> Result<(), ImportError> {
    let at = s.at();
    let pad = std::io::repeat(b'\n')
        .take(at.line as u64 - 1)
        .chain(std::io::repeat(b' ').take(at.col as u64));
    let mut de = serde_json::Deserializer::from_reader(pad.chain(SourceReader(s)));
    let el = Element::<Box<RawValue>>::deserialize(&mut de).map_err(|e| json_error(c.path, e))?;
    c.element(el)
}

/// The error a parse of the whole text gives at a fault that [`read_array`] met at `s`'s
/// position, in array state `state`: the rest of the text is parsed by serde_json's streaming
/// reader after text that puts it in the same state at the same position (newlines, spaces,
/// then `state`), with the same element visitor, up to its first error. `fallback` (the fault
/// as met, placed in the text) is reported should that parse find none.
fn replay(
    path: &Path,
    s: &mut Source<'_>,
    state: ArrayState,
    fallback: Option<(serde_json::Error, (usize, usize))>,
) -> ImportError {
    /// Reads at most three elements (`[]`, the faulty one and the next), then gives up.
    struct Seed;
    impl<'de> DeserializeSeed<'de> for Seed {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(Seed)
        }
    }
    impl<'de> Visitor<'de> for Seed {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of trace events")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            for _ in 0..3 {
                if seq.next_element::<Element<Box<RawValue>>>()?.is_none() {
                    break;
                }
            }
            Err(de::Error::custom(NO_FAULT))
        }
    }
    const NO_FAULT: &str = "no fault found again";
    let at = s.at();
    let t = state.len();
    let (lines, spaces, tail) = if at.col >= t {
        (at.line - 1, at.col - t, state.to_string())
    } else if at.line >= 2 {
        (at.line - 2, 0, format!("{state}\n{}", " ".repeat(at.col)))
    } else {
        (0, 0, String::new())
    };
    if !tail.is_empty() {
        let held = &s.buf[s.pos..s.end];
        let text = std::io::repeat(b'\n')
            .take(lines as u64)
            .chain(std::io::repeat(b' ').take(spaces as u64))
            .chain(tail.as_bytes())
            .chain(held)
            .chain(&mut s.cap);
        let mut de = serde_json::Deserializer::from_reader(text);
        if let Err(e) = Seed.deserialize(&mut de) {
            if e.line() != 0 {
                return json_error(path, e);
            }
        }
    }
    match fallback {
        Some((e, (line, column))) => ImportError::Json {
            path: path.to_path_buf(),
            line,
            column,
            source: e,
        },
        None => {
            let (line, column) = (at.line, at.col);
            ImportError::Json {
                path: path.to_path_buf(),
                line,
                column,
                source: de::Error::custom(format_args!(
                    "EOF while parsing a list at line {line} column {column}"
                )),
            }
        }
    }
}
