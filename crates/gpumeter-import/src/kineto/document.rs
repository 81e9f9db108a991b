//! Reading the document: the top-level object of a Kineto trace, read by serde's visitors
//! ([`read_events`]), its `traceEvents` array handed to [`read_array`], its
//! `baseTimeNanoseconds` and `deviceProperties` kept for `finish`; faults told apart as bad
//! JSON or not a trace.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::array::read_array;
use super::collect::Collector;
use super::json::{json_error, JStr};
use super::text::{relocated, Pos, Remap, SerdeSide, Source};
use crate::error::{shorten, ImportError};

/// Where the parser is, to tell "not a trace" from "bad JSON" when serde reports a type error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Before the top-level object was entered.
    Top,
    /// Inside the top-level object.
    InObject,
    /// At the value of `traceEvents`, before its array was entered.
    EventsValue,
    /// Inside the `traceEvents` array.
    InEvents,
}

/// The top level of a document being read: where the parser is, what it met there, and the
/// collector its events go to.
struct Top<'p> {
    events: Collector<'p>,
    stage: Stage,
    saw_events: bool,
    /// Top-level keys seen, to refuse one given twice.
    top_keys: HashSet<String>,
    /// The first file-level fault met inside an event; the parse is then aborted.
    failure: Option<ImportError>,
}

/// The top-level object, read by serde's visitors.
struct TopSeed<'c, 'p, 's, 'r>(&'c mut Top<'p>, &'s RefCell<Source<'r>>);

impl<'de> DeserializeSeed<'de> for TopSeed<'_, '_, '_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, '_, '_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with a `traceEvents` array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let TopSeed(c, src) = self;
        c.stage = Stage::InObject;
        while let Some(key) = map.next_key::<JStr<'de>>()? {
            if !c.top_keys.insert(key.0.to_string()) {
                c.failure = Some(ImportError::DuplicateKey {
                    path: c.events.path.to_path_buf(),
                    key: shorten(&key.0),
                });
                return Err(de::Error::custom("a top-level key given twice"));
            }
            match key.0.as_ref() {
                "traceEvents" => {
                    c.stage = Stage::EventsValue;
                    map.next_value_seed(EventsSeed(&mut *c, src))?;
                    c.stage = Stage::InObject;
                    c.saw_events = true;
                }
                "baseTimeNanoseconds" => c.events.base = Some(map.next_value()?),
                "deviceProperties" => c.events.device_properties = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// The value of `traceEvents`. When it is an array (the text's next byte that is not
/// whitespace is `[`), the array is read by [`read_array`] from the text itself, not by the
/// deserializer, which is then handed a stand-in `[]` (positions in its later errors are
/// mapped back, [`Remap`]). Anything else is left to the deserializer, whose type error says
/// what it is.
struct EventsSeed<'c, 'p, 's, 'r>(&'c mut Top<'p>, &'s RefCell<Source<'r>>);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, '_, '_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        let EventsSeed(c, src) = self;
        // serde_json has read the text up to the `:` and no further (it peeks no byte after
        // the colon), so the text's position is the deserializer's.
        let before = src.borrow().at();
        let next = src.borrow_mut().skip_ws();
        let next = match next {
            Ok(b) => b,
            Err(e) => {
                c.failure = Some(json_error(c.events.path, serde_json::Error::io(e)));
                return Err(de::Error::custom("aborted at a read error"));
            }
        };
        if next != Some(b'[') {
            let mut s = src.borrow_mut();
            s.remap = Some(Remap {
                serde: before,
                real: s.at(),
            });
            drop(s);
            return d.deserialize_seq(EventsArray);
        }
        c.stage = Stage::InEvents;
        let read = read_array(&mut c.events, &mut src.borrow_mut());
        if let Err(e) = read {
            c.failure = Some(e);
            return Err(de::Error::custom("aborted at a faulty trace event"));
        }
        let mut s = src.borrow_mut();
        s.inject = b"[]";
        s.remap = Some(Remap {
            serde: Pos {
                line: before.line,
                col: before.col + 2,
            },
            real: s.at(),
        });
        drop(s);
        d.deserialize_seq(EventsArray)
    }
}

/// What the deserializer reads at `traceEvents`: the stand-in `[]` (the array itself was read
/// by [`read_array`]), or a value that is not an array (a type error).
struct EventsArray;

impl<'de> Visitor<'de> for EventsArray {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// Reads the trace events of a Kineto trace (already decompressed) from a stream, without
/// touching any meter: memory holds the GPU work events kept (and open `B` events), not the
/// document. `path` names the file in errors. A UTF-8 byte-order mark is skipped.
///
/// Memory is flat in the input's size (peak RSS 9 MB for a gzip of 1 GiB of CPU-side events,
/// or of a 1 GB kernel name: 1.06 GB and 3.2 GB when the text was parsed in memory), and the
/// CPU time that of parsing the text in memory: see [`read_array`] for the figures.
///
/// # Errors
/// A file-level [`ImportError`]: bad JSON (with line and column), not a trace, a top-level key
/// given twice, a file-level fault found in an event. A read error of `reader` is reported as
/// JSON error of category I/O: the caller, who knows what it reads, says what it was.
pub(crate) fn read_events<'p>(
    path: &'p Path,
    mut reader: impl Read,
) -> Result<Collector<'p>, ImportError> {
    let head = byte_order_mark_skipped(path, &mut reader)?;
    let mut top = Top {
        events: Collector::new(path),
        stage: Stage::Top,
        saw_events: false,
        top_keys: HashSet::new(),
        failure: None,
    };
    let src = RefCell::new(Source::new(Box::new(head.as_slice().chain(reader))));
    let mut de = serde_json::Deserializer::from_reader(SerdeSide(&src));
    let result = TopSeed(&mut top, &src)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    drop(de);
    let src = src.into_inner();
    top.events.cut_strings = src.cap.cut;
    if let Err(e) = result {
        if let Some(fault) = top.failure.take() {
            return Err(fault);
        }
        return Err(parse_error(path, top.stage, src.remap, e));
    }
    if !top.saw_events {
        return Err(not_a_trace(path, "no `traceEvents` array".to_string()));
    }
    Ok(top.events)
}

/// The first bytes of `reader`, up to 3, without a UTF-8 byte-order mark: it is not JSON, so it
/// is skipped (positions then count from after it).
fn byte_order_mark_skipped(path: &Path, reader: &mut impl Read) -> Result<Vec<u8>, ImportError> {
    let mut head = [0u8; 3];
    let mut got = 0;
    while got < head.len() {
        match reader.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(json_error(path, serde_json::Error::io(e))),
        }
    }
    let head = &head[..got];
    Ok(if head == b"\xEF\xBB\xBF" {
        Vec::new()
    } else {
        head.to_vec()
    })
}

fn not_a_trace(path: &Path, reason: String) -> ImportError {
    ImportError::NotATrace {
        path: path.to_path_buf(),
        reason,
    }
}

/// The error of a parse that failed with serde_json's `e` at `stage`: placed in the text
/// (`remap`), and "not a trace" for a type error at the top level or at `traceEvents`.
fn parse_error(
    path: &Path,
    stage: Stage,
    remap: Option<Remap>,
    e: serde_json::Error,
) -> ImportError {
    let data = e.classify() == serde_json::error::Category::Data;
    let (line, column) = match remap {
        Some(r) if e.line() != 0 => r.map(e.line(), e.column()),
        _ => (e.line(), e.column()),
    };
    let e = if (line, column) == (e.line(), e.column()) {
        e
    } else {
        relocated(&e, line, column)
    };
    if data {
        match stage {
            Stage::Top => {
                return not_a_trace(path, format!("the top level is not a JSON object ({e})"))
            }
            Stage::EventsValue => {
                return not_a_trace(path, format!("`traceEvents` is not an array ({e})"))
            }
            Stage::InObject | Stage::InEvents => {}
        }
    }
    ImportError::Json {
        path: path.to_path_buf(),
        line,
        column,
        source: e,
    }
}
