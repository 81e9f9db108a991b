//! Kineto / PyTorch-profiler Chrome-trace JSON (plain or gzip) to activity records
//! (DESIGN §3).
//!
//! * Time: `ts`/`dur` are µs. With a top-level `baseTimeNanoseconds` (modern files), `ts` is
//!   relative to it: absolute ns = base + round(ts × 1000); without it (older files), `ts` is
//!   absolute µs. The decimal text is converted exactly ([`crate::units`]). A raw `ts` of 0
//!   means "not recorded" and gives a start of 0 whatever the base (loss `zero_timestamp`); a
//!   negative `dur` is loss `end_before_start`.
//! * Work: categories `kernel`/`Kernel`, `gpu_memcpy`/`Memcpy`, `gpu_memset`/`Memset`. Not work,
//!   counted as skipped by category: `gpu_user_annotation`, `cuda_sync`, `cuda_profiler_range`,
//!   `Trace`. Categories are matched ignoring ASCII case and surrounding whitespace (`KERNEL`,
//!   `"kernel "`), and counted under Kineto's spelling. Everything else (CPU-side events,
//!   flows, metadata) is ignored and not counted, except what could hide GPU work: a complete
//!   (`X`) or begin (`B`) event without a `cat` whose `args.device` names a device is counted
//!   as skipped (`no_category_with_device`) with a warning, a `cat` that is not a string as
//!   `unreadable_category`, and an element of `traceEvents` that is not a JSON object
//!   (`null`, `5`, `[1,2]`, `"x"`) as `not_an_event_object` with a warning naming the first.
//! * `B`/`E` pairs: an `E` closes the innermost open `B` (of any category) with the same `pid`
//!   and `tid`, compared as text: a string's content and a number's text are the same key
//!   (`"0"` and `0`).
//! * A key given twice in an event or in its `args` (`ts`, `args.device`) makes a GPU work
//!   event a lost record (`invalid_field`) whose warning gives both values; a device id given
//!   twice in `deviceProperties` with different values refuses the file (identical entries are
//!   one device).
//! * Device: `args.device`, else the event's integer `pid` (a GPU event's `pid` is the device
//!   index). Stream: `args.stream`, else `tid` (`7` or `"stream 7"`).
//! * Process id: the OS `pid` of the CPU-side `cuda_runtime`/`cuda_driver` (2021 schema:
//!   `Runtime`/`Driver`) event with the same `args.correlation`.
//! * External id: none. Kineto's `args."External id"` is PyTorch's own operator id, not a
//!   tenant tag (DESIGN §4 attributes by CUPTI EXTERNAL_CORRELATION ids that an agent pushes):
//!   it is not read, so it neither matches a tenant map's `[external]` ids nor makes one
//!   attribution key per operator in the meter.
//! * Devices without a UUID are keyed `<label>#<id>`, the label being given by the caller
//!   (`<file name>@<sha8>`, see the crate docs).
//! * Reading: a stream ([`read_events`], serde's visitors over `traceEvents`, through
//!   `serde_json::from_reader` on a 64 KiB buffer; the caller decompresses gzip as a stream and
//!   hashes in the same pass). Memory holds the GPU work events kept and open `B` events, never
//!   the document: an event is read into owned raw fields (nothing can borrow from a stream),
//!   and one whose `ph` and `cat` settle it as ignorable (most CPU-side events) has its other
//!   fields checked and dropped, not kept. Strings are cut at [`MAX_STRING_BYTES`] as they are
//!   read ([`StringCap`]), since serde_json reads a string whole.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use gpumeter_core::time::MAX_RECORD_NS;
use gpumeter_core::{
    ActivityRecord, ComputeCapability, CopyDirection, DeviceInfo, DeviceSlot, KernelLaunch,
    LossReason, SmLimits, Work,
};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::{shorten, ImportError, RecordLocation};
use crate::units::{integer_text, micros_text_to_ns};
use crate::Parsed;

/// A JSON string borrowed from the input when it has no escapes.
struct JStr<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for JStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<JStr<'de>, E> {
                Ok(JStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<JStr<'de>, E> {
                Ok(JStr(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<JStr<'de>, E> {
                Ok(JStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// One trace event's fields, each kept as the JSON value written, of any type: a value of the
/// wrong type is a fault of that record, found when the record is read, never a parse error of
/// the whole file. A key given twice is noted in `duplicate` with both values (the first is
/// kept): such an event is ambiguous, and a GPU work event that has one is lost
/// (`invalid_field`). A view of an [`OwnedEvent`].
struct Event<'a> {
    ph: Option<&'a RawValue>,
    cat: Option<&'a RawValue>,
    name: Option<&'a RawValue>,
    pid: Option<&'a RawValue>,
    tid: Option<&'a RawValue>,
    ts: Option<&'a RawValue>,
    dur: Option<&'a RawValue>,
    args: Option<&'a RawValue>,
    duplicate: Option<Duplicate<'a>>,
}

/// The first key given twice in an event or its `args`: the field as messages name it, and
/// the first and second values.
#[derive(Clone, Copy)]
struct Duplicate<'a> {
    field: &'static str,
    first: &'a RawValue,
    second: &'a RawValue,
}

impl Duplicate<'_> {
    /// The record-level fault: the field with both values (`` `1` and `2` `` once printed
    /// between the message's backticks).
    fn fault(&self, f: &Fault<'_>, reason: String) -> ImportError {
        ImportError::BadField {
            path: f.path.to_path_buf(),
            record: f.record.clone(),
            field: self.field,
            value: format!(
                "{}` and `{}",
                shorten(self.first.get()),
                shorten(self.second.get())
            ),
            reason,
        }
    }
}

/// The keys of [`Event`], in the order of its fields.
const EVENT_KEYS: [&str; 8] = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"];

/// A trace event as read from the stream: each field the JSON text written, owned (the input
/// is read as a stream, never held whole, so nothing can borrow from it). A key given twice is
/// noted in `duplicate` (its index in [`EVENT_KEYS`] and the second value; the first is kept).
#[derive(Default)]
struct OwnedEvent {
    fields: [Option<Box<RawValue>>; 8],
    duplicate: Option<(usize, Box<RawValue>)>,
}

impl OwnedEvent {
    /// The event's fields, borrowed.
    fn view(&self) -> Event<'_> {
        let f = |i: usize| self.fields[i].as_deref();
        Event {
            ph: f(0),
            cat: f(1),
            name: f(2),
            pid: f(3),
            tid: f(4),
            ts: f(5),
            dur: f(6),
            args: f(7),
            duplicate: self.duplicate.as_ref().and_then(|(i, second)| {
                Some(Duplicate {
                    field: EVENT_KEYS[*i],
                    first: self.fields[*i].as_deref()?,
                    second,
                })
            }),
        }
    }

    /// Whether nothing but `ph` and `cat` can matter any more: `ph` is a string other than `B`
    /// and `E`, and `cat` a string whose class is neither work nor a CUDA API call. Such an
    /// event (most CPU-side events) is only counted (or not) by its category, whatever its
    /// other fields hold, so they are checked ([`Checked`]) and dropped instead of kept.
    fn settled(&self) -> bool {
        let (Some(ph), Some(cat)) = (self.fields[0].as_deref(), self.fields[1].as_deref()) else {
            return false;
        };
        let ph_done = raw_str(ph).is_ok_and(|p| p != "B" && p != "E");
        ph_done
            && raw_str(cat).is_ok_and(|c| matches!(classify(&c).0, Class::Ignored | Class::Skipped))
    }
}

/// A JSON value read and dropped, as [`IgnoredAny`] but with every string in it decoded (into
/// serde_json's reused scratch buffer, nothing allocated), so that a string that is not valid
/// UTF-8 is still the JSON error it was when the field was kept as a raw value.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

/// The index of a key in a list of known keys (`None`: a key not read), matched without
/// keeping the key.
struct KeyIndex(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIndex {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIndex {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

/// An element of `traceEvents`: a trace event (a JSON object), or some other JSON value,
/// which is no event (its kind is kept for the warning).
enum Element {
    Event(OwnedEvent),
    NotAnObject(&'static str),
}

impl<'de> Deserialize<'de> for Element {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Element;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a trace event (a JSON object) or another JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Element, A::Error> {
                let mut ev = OwnedEvent::default();
                let mut settled = false;
                while let Some(key) = map.next_key_seed(KeyIndex(&EVENT_KEYS))? {
                    let Some(i) = key else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    if settled {
                        map.next_value::<Checked>()?;
                        continue;
                    }
                    let value: Box<RawValue> = map.next_value()?;
                    match ev.fields.get_mut(i) {
                        Some(slot @ None) => {
                            *slot = Some(value);
                            settled = i <= 1 && ev.settled();
                        }
                        Some(Some(_)) => {
                            ev.duplicate.get_or_insert((i, value));
                        }
                        None => {}
                    }
                }
                Ok(Element::Event(ev))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Element::NotAnObject("an array"))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Element, E> {
                Ok(Element::NotAnObject("null"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Element, E> {
                Ok(Element::NotAnObject("a boolean"))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Element, E> {
                Ok(Element::NotAnObject("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Element, E> {
                Ok(Element::NotAnObject("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Element, E> {
                Ok(Element::NotAnObject("a number"))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Element, E> {
                Ok(Element::NotAnObject("a string"))
            }
        }
        // `deserialize_any`, not `deserialize_map`: a value of another type is read (and
        // counted), not a type error that refuses the whole file.
        d.deserialize_any(V)
    }
}

/// The text of a JSON string value (borrowed when it has no escapes), or why it is not one:
/// not a string, or a string that is not valid Unicode (a lone surrogate escape).
fn raw_str(raw: &RawValue) -> Result<Cow<'_, str>, String> {
    let t = raw.get();
    if !t.starts_with('"') {
        return Err("not a string".to_string());
    }
    if let Some(inner) = t.get(1..t.len() - 1).filter(|i| !i.contains('\\')) {
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(t)
        .map(Cow::Owned)
        .map_err(|e| format!("not valid Unicode text: {e}"))
}

/// The `args` of an event that gpumeter reads. A key given twice is noted in `duplicate`
/// (the first value is kept), as for [`Event`]: [`parse_args`] refuses such args.
#[derive(Default)]
struct Args<'a> {
    device: Option<&'a RawValue>,
    stream: Option<&'a RawValue>,
    correlation: Option<&'a RawValue>,
    context: Option<&'a RawValue>,
    grid: Option<&'a RawValue>,
    block: Option<&'a RawValue>,
    registers_per_thread: Option<&'a RawValue>,
    shared_memory: Option<&'a RawValue>,
    bytes: Option<&'a RawValue>,
    duplicate: Option<Duplicate<'a>>,
}

/// The keys of [`Args`] as Kineto writes them, with the field name messages use for each, in
/// the order of its fields.
const ARGS_KEYS: [(&str, &str); 9] = [
    ("device", "args.device"),
    ("stream", "args.stream"),
    ("correlation", "args.correlation"),
    ("context", "args.context"),
    ("grid", "args.grid"),
    ("block", "args.block"),
    ("registers per thread", "args.registers per thread"),
    ("shared memory", "args.shared memory"),
    ("bytes", "args.bytes"),
];

impl<'a> Args<'a> {
    fn slot(&mut self, i: usize) -> Option<&mut Option<&'a RawValue>> {
        Some(match i {
            0 => &mut self.device,
            1 => &mut self.stream,
            2 => &mut self.correlation,
            3 => &mut self.context,
            4 => &mut self.grid,
            5 => &mut self.block,
            6 => &mut self.registers_per_thread,
            7 => &mut self.shared_memory,
            8 => &mut self.bytes,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for Args<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Args<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an args object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Args<'de>, A::Error> {
                let mut args = Args::default();
                while let Some(key) = map.next_key::<JStr<'de>>()? {
                    let Some(i) = ARGS_KEYS.iter().position(|(k, _)| *k == key.0.as_ref()) else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    let value: &'de RawValue = map.next_value()?;
                    if let Some(slot) = args.slot(i) {
                        match *slot {
                            None => *slot = Some(value),
                            Some(first) => {
                                args.duplicate.get_or_insert(Duplicate {
                                    field: ARGS_KEYS[i].1,
                                    first,
                                    second: value,
                                });
                            }
                        }
                    }
                }
                Ok(args)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct DeviceProps<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uuid: Option<&'a RawValue>,
    #[serde(rename = "numSms", borrow, default)]
    num_sms: Option<&'a RawValue>,
    #[serde(rename = "computeMajor", borrow, default)]
    compute_major: Option<&'a RawValue>,
    #[serde(rename = "computeMinor", borrow, default)]
    compute_minor: Option<&'a RawValue>,
    #[serde(rename = "maxThreadsPerMultiprocessor", borrow, default)]
    max_threads_per_sm: Option<&'a RawValue>,
    #[serde(rename = "maxBlocksPerMultiProcessor", borrow, default)]
    max_blocks_per_sm: Option<&'a RawValue>,
    #[serde(rename = "regsPerMultiprocessor", borrow, default)]
    regs_per_sm: Option<&'a RawValue>,
    #[serde(rename = "regsPerBlock", borrow, default)]
    regs_per_block: Option<&'a RawValue>,
    #[serde(rename = "sharedMemPerMultiprocessor", borrow, default)]
    shared_mem_per_sm: Option<&'a RawValue>,
    #[serde(rename = "sharedMemPerBlock", borrow, default)]
    shared_mem_per_block: Option<&'a RawValue>,
    #[serde(rename = "sharedMemPerBlockOptin", borrow, default)]
    shared_mem_per_block_optin: Option<&'a RawValue>,
    #[serde(rename = "warpSize", borrow, default)]
    warp_size: Option<&'a RawValue>,
}

/// What an event's category makes of it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Kernel,
    Memcpy,
    Memset,
    /// GPU-side, not work: counted as skipped.
    Skipped,
    /// CPU-side CUDA API call: source of the correlation → process id join.
    Api,
    Ignored,
}

/// The categories gpumeter knows, as Kineto writes them (modern and 2021 schema), with what
/// each makes of an event. Matched ignoring ASCII case and surrounding whitespace: `KERNEL` or
/// `"kernel "` is a kernel, never an unknown category silently passed over.
const CATEGORIES: [(&str, Class); 13] = [
    ("kernel", Class::Kernel),
    ("gpu_memcpy", Class::Memcpy),
    ("Memcpy", Class::Memcpy),
    ("gpu_memset", Class::Memset),
    ("Memset", Class::Memset),
    ("gpu_user_annotation", Class::Skipped),
    ("cuda_sync", Class::Skipped),
    ("cuda_profiler_range", Class::Skipped),
    ("Trace", Class::Skipped),
    ("cuda_runtime", Class::Api),
    ("cuda_driver", Class::Api),
    ("Runtime", Class::Api),
    ("Driver", Class::Api),
];

/// What a category makes of an event, and the category as [`CATEGORIES`] spells it (the key
/// of `records.skipped`; empty for an unknown category).
fn classify(cat: &str) -> (Class, &'static str) {
    let cat = cat.trim();
    CATEGORIES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(cat))
        .map_or((Class::Ignored, ""), |&(known, class)| (class, known))
}

/// The class of an event's category, when it has one that is a string.
fn class_of(ev: &Event<'_>) -> Option<Class> {
    ev.cat.and_then(|c| raw_str(c).ok()).map(|c| classify(&c).0)
}

/// The key a `B` and its `E` are paired on, from a `pid` or `tid`: a string's content and a
/// number's text are the same key (`"0"` and `0`), as Chrome trace viewers pair them; any
/// other value (`null`, an array, a string that is not valid Unicode) by its JSON text.
#[derive(Hash, PartialEq, Eq)]
enum PairKey {
    Text(String),
    Json(String),
}

fn pair_key(raw: &RawValue) -> PairKey {
    let t = raw.get();
    match t.as_bytes().first() {
        Some(b'"') => raw_str(raw).map_or_else(
            |_| PairKey::Json(t.to_string()),
            |s| PairKey::Text(s.into_owned()),
        ),
        Some(b'-' | b'0'..=b'9') => PairKey::Text(t.to_string()),
        _ => PairKey::Json(t.to_string()),
    }
}

/// Builds [`ImportError::BadField`]s for one record.
struct Fault<'p> {
    path: &'p Path,
    record: RecordLocation,
}

impl Fault<'_> {
    fn err(&self, field: &'static str, value: &str, reason: impl Into<String>) -> ImportError {
        ImportError::BadField {
            path: self.path.to_path_buf(),
            record: self.record.clone(),
            field,
            value: shorten(value),
            reason: reason.into(),
        }
    }

    /// The number text of a raw JSON value: a number as written, or the content of a string;
    /// `None` for `null`.
    fn number_text<'v>(
        &self,
        field: &'static str,
        raw: &'v RawValue,
    ) -> Result<Option<Cow<'v, str>>, ImportError> {
        let t = raw.get();
        match t.as_bytes().first() {
            Some(b'n') if t == "null" => Ok(None),
            Some(b'"') => serde_json::from_str::<String>(t)
                .map(|s| Some(Cow::Owned(s)))
                .map_err(|e| self.err(field, t, e.to_string())),
            Some(b'-' | b'0'..=b'9') => Ok(Some(Cow::Borrowed(t))),
            _ => Err(self.err(field, t, "expected a number")),
        }
    }

    fn int_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<i128>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        let Some(t) = self.number_text(field, raw)? else {
            return Ok(None);
        };
        integer_text(&t)
            .map(Some)
            .map_err(|e| self.err(field, &t, e))
    }

    fn u32_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<u32>, ImportError> {
        match self.int_opt(field, raw)? {
            None => Ok(None),
            Some(v) => u32::try_from(v).map(Some).map_err(|_| {
                self.err(
                    field,
                    &v.to_string(),
                    "out of range for an unsigned 32-bit value",
                )
            }),
        }
    }

    fn u64_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<u64>, ImportError> {
        match self.int_opt(field, raw)? {
            None => Ok(None),
            Some(v) => u64::try_from(v).map(Some).map_err(|_| {
                self.err(
                    field,
                    &v.to_string(),
                    "out of range for an unsigned 64-bit value",
                )
            }),
        }
    }

    /// `[x, y, z]` of non-negative integers.
    fn dim3_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<[u32; 3]>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        if raw.get() == "null" {
            return Ok(None);
        }
        let parts: Vec<&RawValue> = serde_json::from_str(raw.get())
            .map_err(|_| self.err(field, raw.get(), "expected an array [x, y, z]"))?;
        let [x, y, z] = parts.as_slice() else {
            return Err(self.err(field, raw.get(), "expected three dimensions [x, y, z]"));
        };
        let mut out = [0u32; 3];
        for (o, p) in out.iter_mut().zip([x, y, z]) {
            *o = self
                .u32_opt(field, Some(p))?
                .ok_or_else(|| self.err(field, raw.get(), "a dimension is null"))?;
        }
        Ok(Some(out))
    }

    /// A string value; `None` for a missing field or `null`. The error says what is wrong: not
    /// a string, or not valid Unicode (a lone surrogate escape).
    fn string_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<String>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        if raw.get() == "null" {
            return Ok(None);
        }
        raw_str(raw)
            .map(|s| Some(s.into_owned()))
            .map_err(|why| self.err(field, raw.get(), why))
    }
}

/// A stream id from `args.stream` or `tid`: CUPTI stream ids are `u32`; −1 (Kineto writes it
/// for device-wide syncs) is taken as `u32::MAX`. `None` for any other value outside `u32`:
/// it cannot be a CUPTI stream, and truncating it would make two streams one.
fn stream_from(v: i128) -> Option<u32> {
    match v {
        -1 => Some(u32::MAX),
        v => u32::try_from(v).ok(),
    }
}

/// Parses the `tid` of a GPU event as a stream: `7`, `"7"` or `"stream 7"`. `Ok(None)` when
/// the `tid` is not a stream at all (a thread name); `Err(value)` for a stream number outside
/// `u32`.
fn stream_from_tid(raw: &RawValue) -> Result<Option<u32>, i128> {
    let t = raw.get();
    let digits = match integer_text(t) {
        Ok(v) => return stream_from(v).map(Some).ok_or(v),
        Err(_) => match raw_str(raw) {
            Ok(s) => s.trim().to_string(),
            Err(_) => return Ok(None),
        },
    };
    let digits = digits
        .strip_prefix("stream")
        .map(str::trim)
        .unwrap_or(&digits);
    match integer_text(digits) {
        Ok(v) => stream_from(v).map(Some).ok_or(v),
        Err(_) => Ok(None),
    }
}

/// Whether the text of a JSON number is zero (`0`, `0.0`, `-0`, `0e5`).
fn text_is_zero(t: &str) -> bool {
    t.bytes()
        .take_while(|c| !matches!(c, b'e' | b'E'))
        .all(|c| matches!(c, b'0' | b'-' | b'.'))
}

/// Copy direction from a Kineto memcpy event's name (`Memcpy HtoD (Pageable -> Device)`).
fn direction_from_name(name: &str) -> CopyDirection {
    let kind = name
        .strip_prefix("Memcpy")
        .map(str::trim_start)
        .unwrap_or(name)
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    match kind {
        "HtoD" => CopyDirection::HostToDevice,
        "DtoH" => CopyDirection::DeviceToHost,
        "DtoD" => CopyDirection::DeviceToDevice,
        "PtoP" => CopyDirection::Peer,
        _ => CopyDirection::Other,
    }
}

fn json_error(path: &Path, source: serde_json::Error) -> ImportError {
    ImportError::Json {
        path: path.to_path_buf(),
        line: source.line(),
        column: source.column(),
        source,
    }
}

/// A GPU work event, converted but for its absolute times (the `baseTimeNanoseconds` it needs
/// may come after `traceEvents` in the file), its device and its process id.
struct Pending<'de> {
    index: usize,
    device_id: u32,
    correlation: Option<u32>,
    /// The field `ts_text` comes from (`ts`; for a `B`/`E` pair, the `B` event's `ts`).
    ts_field: &'static str,
    /// `ts` as written, for messages.
    ts_text: Cow<'de, str>,
    /// `ts` in ns (relative to the base when there is one).
    ts_ns: i128,
    /// The field the duration comes from (`dur`; for a `B`/`E` pair, the `E` event's `ts`).
    dur_field: &'static str,
    dur_text: Cow<'de, str>,
    dur_ns: i128,
    /// The record with `start_ns`/`end_ns` still 0 and a placeholder device.
    rec: ActivityRecord,
}

impl Pending<'_> {
    /// The same, owning its texts (kept past the event they were read from).
    fn into_owned(self) -> Pending<'static> {
        Pending {
            ts_text: Cow::Owned(self.ts_text.into_owned()),
            dur_text: Cow::Owned(self.dur_text.into_owned()),
            index: self.index,
            device_id: self.device_id,
            correlation: self.correlation,
            ts_field: self.ts_field,
            dur_field: self.dur_field,
            ts_ns: self.ts_ns,
            dur_ns: self.dur_ns,
            rec: self.rec,
        }
    }
}

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

/// A `B` (begin) event waiting for its `E` on the same `pid` and `tid`.
struct Open {
    index: usize,
    class: Class,
    event: OwnedEvent,
}

/// Receives the top-level keys and the trace events as the JSON parser meets them, so a trace
/// is read in one pass, as a stream, holding only the GPU work events it keeps (and open `B`
/// events). Built by [`read_events`], turned into records by [`finish`].
pub(crate) struct Collector<'p> {
    path: &'p Path,
    stage: Stage,
    saw_events: bool,
    /// Top-level keys seen, to refuse one given twice.
    top_keys: HashSet<String>,
    base: Option<Box<RawValue>>,
    device_properties: Option<Box<RawValue>>,
    /// The first file-level fault met inside an event; the parse is then aborted.
    failure: Option<ImportError>,
    next_index: usize,
    pending: Vec<Pending<'static>>,
    /// GPU work events lost to a field that cannot be represented: (device id when the event
    /// tells it, the fault).
    invalid: Vec<(Option<u32>, ImportError)>,
    skipped: BTreeMap<String, u64>,
    pid_of_correlation: HashMap<u32, u32>,
    names: HashMap<String, Arc<str>>,
    /// Open `B` events per (`pid`, `tid`) ([`pair_key`]), innermost last.
    open: HashMap<(PairKey, PairKey), Vec<Open>>,
    /// CPU-side launch events whose correlation id cannot be read (their kernels get no
    /// process id from them).
    bad_api_events: u64,
    /// Kernel names that are not valid Unicode (metered without a name).
    bad_names: u64,
    /// The first element of `traceEvents` that is not an object: (index, its JSON type).
    not_objects: Option<(usize, &'static str)>,
    /// Strings cut by [`StringCap`] (set once the stream is read).
    cut_strings: u64,
}

impl Collector<'_> {
    fn fault(&self, index: usize) -> Fault<'_> {
        Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        }
    }

    /// Counts one event in `records.skipped` under `category`.
    fn skip(&mut self, category: &str) {
        match self.skipped.get_mut(category) {
            Some(n) => *n += 1,
            None => {
                self.skipped.insert(category.to_string(), 1);
            }
        }
    }

    /// Reads one event. Only file-level faults are errors; a GPU work event that cannot be
    /// read is lost (`invalid_field`).
    fn event(&mut self, index: usize, owned: OwnedEvent) -> Result<(), ImportError> {
        let ev = owned.view();
        let ph = match ev.ph.map(raw_str) {
            None => Cow::Borrowed("X"),
            Some(Ok(p)) => p,
            Some(Err(_)) => {
                // Which phase is not known: a work event of this category cannot be read.
                if class_of(&ev).is_some_and(is_work) {
                    let f = self.fault(index);
                    let e = f.err("ph", ev.ph.map_or("", RawValue::get), "not a string");
                    self.lose(&ev, e);
                }
                return Ok(());
            }
        };
        if ph == "E" {
            return self.end(index, ev);
        }
        let (class, cat) = match ev.cat.map(raw_str) {
            None => {
                // No category: not known to be GPU work, but a complete or begin event that
                // names a device must not vanish (counted, and a warning says how many).
                if matches!(ph.as_ref(), "X" | "B") && names_a_device(&self.fault(index), &ev) {
                    self.skip(NO_CATEGORY_WITH_DEVICE);
                }
                (Class::Ignored, Cow::Borrowed(""))
            }
            Some(Err(_)) => {
                // Not a category gpumeter can read, so not known to be GPU work: counted.
                self.skip("unreadable_category");
                (Class::Ignored, Cow::Borrowed(""))
            }
            Some(Ok(cat)) => {
                let (class, known) = classify(&cat);
                if class == Class::Skipped {
                    // Once per event: an `E` (returned above) closes a counted `B`.
                    self.skip(known);
                }
                (class, cat)
            }
        };
        if ph == "B" {
            // Every B with a pid and tid is opened, whatever its category, so that its E closes
            // it and not an enclosing work B.
            if let (Some(pid), Some(tid)) = (ev.pid, ev.tid) {
                if class == Class::Api {
                    self.api(index, &ev);
                }
                let key = (pair_key(pid), pair_key(tid));
                self.open.entry(key).or_default().push(Open {
                    index,
                    class,
                    event: owned,
                });
                return Ok(());
            }
            if is_work(class) {
                let e = self.fault(index).err(
                    "ph",
                    "B",
                    "a B (begin) event without `pid` and `tid` cannot be paired with its E",
                );
                self.lose(&ev, e);
            }
            return Ok(());
        }
        match class {
            Class::Ignored | Class::Skipped => Ok(()),
            Class::Api => {
                if ph == "X" {
                    self.api(index, &ev);
                }
                Ok(())
            }
            _ if ph != "X" => {
                let e = self.fault(index).err(
                    "ph",
                    &ph,
                    format!(
                        "a `{}` event of phase `{ph}` has no duration: GPU work is a complete \
                         (X) event or a B/E pair",
                        cat.trim()
                    ),
                );
                self.lose(&ev, e);
                Ok(())
            }
            _ => {
                self.work(index, class, &ev, None);
                Ok(())
            }
        }
    }

    /// An `E` (end) event: closes the innermost open `B` of its `pid` and `tid`; a work `B`
    /// becomes one record from the `B`'s `ts` to the `E`'s.
    fn end(&mut self, index: usize, ev: Event<'_>) -> Result<(), ImportError> {
        let key = ev.pid.zip(ev.tid).map(|(p, t)| (pair_key(p), pair_key(t)));
        let begin = key.and_then(|k| self.open.get_mut(&k)).and_then(Vec::pop);
        match begin {
            Some(b) if is_work(b.class) => {
                self.work(b.index, b.class, &b.event.view(), Some(&ev));
            }
            Some(_) => {}
            None => {
                if class_of(&ev).is_some_and(is_work) {
                    let e = self.fault(index).err(
                        "ph",
                        "E",
                        "an E (end) event without a B (begin) event on its pid and tid",
                    );
                    self.lose(&ev, e);
                }
            }
        }
        Ok(())
    }

    /// A CPU-side CUDA API event: its correlation id → its OS process id.
    fn api(&mut self, index: usize, ev: &Event<'_>) {
        let f = self.fault(index);
        let args = match parse_args(&f, ev.args) {
            Ok(a) => a,
            Err(_) => {
                self.bad_api_events += 1;
                return;
            }
        };
        let corr = match f.u32_opt("args.correlation", args.correlation) {
            Ok(c) => c,
            Err(_) => {
                self.bad_api_events += 1;
                return;
            }
        };
        let pid = ev
            .pid
            .and_then(|p| integer_text(p.get()).ok())
            .and_then(|p| u32::try_from(p).ok());
        if let (Some(c), Some(p)) = (corr, pid) {
            self.pid_of_correlation.insert(c, p);
        }
    }

    /// A GPU work event (`ev`, closed by `end` for a B/E pair) to a pending record, or a lost
    /// record when a field cannot be represented.
    fn work(&mut self, index: usize, class: Class, ev: &Event<'_>, end: Option<&Event<'_>>) {
        let f = Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        };
        let args = match parse_args(&f, ev.args) {
            Ok(a) => a,
            Err(e) => {
                // `args.device` is unknown: the event's `pid` may still tell the device.
                self.invalid.push((device_hint(ev, &Args::default()), e));
                return;
            }
        };
        let result = match ev.duplicate.or(end.and_then(|e| e.duplicate)) {
            Some(d) => Err(d.fault(
                &f,
                "given twice in the event, so which value holds is unknown".to_string(),
            )),
            None => work_event(
                &f,
                ev,
                end,
                &args,
                class,
                &mut self.names,
                &mut self.bad_names,
            ),
        };
        match result {
            Ok(p) => self.pending.push(p.into_owned()),
            Err(e) => self.invalid.push((device_hint(ev, &args), e)),
        }
    }

    /// Loses a work event that cannot be read at all, on the device it names if it does.
    fn lose(&mut self, ev: &Event<'_>, fault: ImportError) {
        let f = Fault {
            path: self.path,
            record: RecordLocation::TopLevel,
        };
        let args = parse_args(&f, ev.args).unwrap_or_default();
        self.invalid.push((device_hint(ev, &args), fault));
    }
}

/// The `records.skipped` category of complete and begin events without a `cat` whose `args`
/// name a device: not known to be GPU work, so not metered, but counted and warned about.
const NO_CATEGORY_WITH_DEVICE: &str = "no_category_with_device";

/// The `records.skipped` category of elements of `traceEvents` that are not JSON objects.
const NOT_AN_EVENT_OBJECT: &str = "not_an_event_object";

/// Whether events of this class are GPU work.
fn is_work(class: Class) -> bool {
    matches!(class, Class::Kernel | Class::Memcpy | Class::Memset)
}

/// An event's `args` (an object, `null` or absent). Only a JSON object: serde would read an
/// array into the struct's fields by position. A key gpumeter reads given twice is a fault of
/// that field (`args.device`), naming both values.
fn parse_args<'a>(f: &Fault<'_>, raw: Option<&'a RawValue>) -> Result<Args<'a>, ImportError> {
    let args = read_args(f, raw)?;
    match args.duplicate {
        Some(d) => Err(d.fault(
            f,
            format!(
                "the key `{}` is given twice in args, so which value holds is unknown",
                d.field.strip_prefix("args.").unwrap_or(d.field)
            ),
        )),
        None => Ok(args),
    }
}

/// [`parse_args`] without refusing a key given twice (the first value is kept).
fn read_args<'a>(f: &Fault<'_>, raw: Option<&'a RawValue>) -> Result<Args<'a>, ImportError> {
    match raw {
        None => Ok(Args::default()),
        Some(raw) if raw.get() == "null" => Ok(Args::default()),
        Some(raw) if !raw.get().starts_with('{') => {
            Err(f.err("args", raw.get(), "not an args object"))
        }
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| f.err("args", raw.get(), format!("not an args object: {e}"))),
    }
}

/// Whether an event's `args` has a `device` (not `null`).
fn names_a_device(f: &Fault<'_>, ev: &Event<'_>) -> bool {
    read_args(f, ev.args).is_ok_and(|a| a.device.is_some_and(|d| d.get() != "null"))
}

/// The device a work event names, as far as it can be told: `args.device` when it is a
/// device id, else (no `args.device`) the event's `pid`. `None` when neither tells it.
fn device_hint(ev: &Event<'_>, args: &Args<'_>) -> Option<u32> {
    let id = |raw: &RawValue| {
        integer_text(raw.get())
            .ok()
            .and_then(|v| u32::try_from(v).ok())
    };
    match args.device {
        Some(d) if d.get() != "null" => id(d),
        _ => ev.pid.and_then(id),
    }
}

struct TopSeed<'c, 'p>(&'c mut Collector<'p>);

impl<'de> DeserializeSeed<'de> for TopSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with a `traceEvents` array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let c = self.0;
        c.stage = Stage::InObject;
        while let Some(key) = map.next_key::<JStr<'de>>()? {
            if !c.top_keys.insert(key.0.to_string()) {
                c.failure = Some(ImportError::DuplicateKey {
                    path: c.path.to_path_buf(),
                    key: shorten(&key.0),
                });
                return Err(de::Error::custom("a top-level key given twice"));
            }
            match key.0.as_ref() {
                "traceEvents" => {
                    c.stage = Stage::EventsValue;
                    map.next_value_seed(EventsSeed(&mut *c))?;
                    c.stage = Stage::InObject;
                    c.saw_events = true;
                }
                "baseTimeNanoseconds" => c.base = Some(map.next_value()?),
                "deviceProperties" => c.device_properties = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

struct EventsSeed<'c, 'p>(&'c mut Collector<'p>);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let c = self.0;
        c.stage = Stage::InEvents;
        while let Some(element) = seq.next_element::<Element>()? {
            let index = c.next_index;
            c.next_index += 1;
            let ev = match element {
                Element::Event(ev) => ev,
                Element::NotAnObject(kind) => {
                    c.skip(NOT_AN_EVENT_OBJECT);
                    c.not_objects.get_or_insert((index, kind));
                    continue;
                }
            };
            if let Err(e) = c.event(index, ev) {
                c.failure = Some(e);
                return Err(de::Error::custom("aborted at a faulty trace event"));
            }
        }
        Ok(())
    }
}

/// The longest a JSON string of a Kineto trace is read: 65,536 bytes of its JSON text. A
/// longer string is cut at the first character boundary at or after this many bytes (never
/// inside an escape, nor between the two escapes of a surrogate pair), before the JSON parser
/// sees it, so that a string of any length costs at most this much memory; the rest of it is
/// not read (nor validated). Not 4 KiB: real C++ template kernel names pass it (one of 5,123
/// bytes in the HTA AlexNet trace of `shared/data`), and a kernel name is never cut in a real
/// trace. Each source with a cut string gets one warning saying how many.
pub const MAX_STRING_BYTES: usize = 64 * 1024;

/// Where [`StringCap`] is in the JSON text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lex {
    /// Outside any string.
    Out,
    /// Inside a string, after `len` bytes of its text; `high` when the last thing read was the
    /// escape of a high surrogate (its low half must follow, uncut).
    In { len: usize, high: bool },
    /// After a `\` inside a string.
    Escape { len: usize },
    /// Inside a `\u` escape: `left` hex digits to come, `value` of those read.
    Unicode { len: usize, left: u8, value: u32 },
    /// Inside a string being cut: its bytes are dropped up to its closing quote.
    Drop,
    /// After a `\` inside a string being cut.
    DropEscape,
}

/// A reader of JSON text that cuts every string longer than [`MAX_STRING_BYTES`] (counted in
/// `cut`): only a lexer of strings (quotes and escapes), the JSON parser above it validates
/// everything else. serde_json reads a string whole before handing it over (there is no
/// streaming string API), so without this a 1 GB kernel name would cost its size (three times,
/// measured).
struct StringCap<R> {
    inner: R,
    lex: Lex,
    cut: u64,
}

impl<R: Read> StringCap<R> {
    fn new(inner: R) -> Self {
        StringCap {
            inner,
            lex: Lex::Out,
            cut: 0,
        }
    }

    /// The next state after `b`, and whether `b` is kept.
    fn step(&mut self, b: u8) -> bool {
        let (next, keep) = match self.lex {
            Lex::Out => (
                if b == b'"' {
                    Lex::In {
                        len: 0,
                        high: false,
                    }
                } else {
                    Lex::Out
                },
                true,
            ),
            Lex::In { len, high } => match b {
                b'"' => (Lex::Out, true),
                // A continuation byte ends the character under way: never cut.
                0x80..=0xBF => (
                    Lex::In {
                        len: len + 1,
                        high: false,
                    },
                    true,
                ),
                b'\\' if high || len < MAX_STRING_BYTES => (Lex::Escape { len: len + 1 }, true),
                _ if len < MAX_STRING_BYTES => (
                    Lex::In {
                        len: len + 1,
                        high: false,
                    },
                    true,
                ),
                _ => {
                    self.cut += 1;
                    (
                        if b == b'\\' {
                            Lex::DropEscape
                        } else {
                            Lex::Drop
                        },
                        false,
                    )
                }
            },
            Lex::Escape { len } if b == b'u' => (
                Lex::Unicode {
                    len: len + 1,
                    left: 4,
                    value: 0,
                },
                true,
            ),
            Lex::Escape { len } => (
                Lex::In {
                    len: len + 1,
                    high: false,
                },
                true,
            ),
            Lex::Unicode { len, left, value } => {
                let value = value * 16 + char::from(b).to_digit(16).unwrap_or(0);
                let next = if left > 1 {
                    Lex::Unicode {
                        len: len + 1,
                        left: left - 1,
                        value,
                    }
                } else {
                    Lex::In {
                        len: len + 1,
                        high: (0xD800..0xDC00).contains(&value),
                    }
                };
                (next, true)
            }
            Lex::Drop => match b {
                b'"' => (Lex::Out, true),
                b'\\' => (Lex::DropEscape, false),
                _ => (Lex::Drop, false),
            },
            Lex::DropEscape => (Lex::Drop, false),
        };
        self.lex = next;
        keep
    }
}

impl<R: Read> StringCap<R> {
    /// Filters `buf` in place; returns how many bytes are kept (at its start). Runs of bytes
    /// that change nothing but a string's length are passed over whole; the rest goes through
    /// [`StringCap::step`] byte by byte.
    fn filter(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len();
        let (mut i, mut kept) = (0, 0);
        while i < n {
            let run = match self.lex {
                Lex::Out => buf[i..].iter().position(|&b| b == b'"').unwrap_or(n - i),
                Lex::In { len, .. } if len < MAX_STRING_BYTES => {
                    let lim = (n - i).min(MAX_STRING_BYTES - len);
                    let run = buf[i..i + lim]
                        .iter()
                        .position(|&b| b == b'"' || b == b'\\')
                        .unwrap_or(lim);
                    if run > 0 {
                        self.lex = Lex::In {
                            len: len + run,
                            high: false,
                        };
                    }
                    run
                }
                _ => 0,
            };
            if run > 0 {
                if kept != i {
                    buf.copy_within(i..i + run, kept);
                }
                i += run;
                kept += run;
                continue;
            }
            let b = buf[i];
            if self.step(b) {
                buf[kept] = b;
                kept += 1;
            }
            i += 1;
        }
        kept
    }
}

impl<R: Read> Read for StringCap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let n = self.inner.read(buf)?;
            if n == 0 {
                return Ok(0);
            }
            // All dropped (inside a string being cut): read on rather than report the end.
            let kept = self.filter(&mut buf[..n]);
            if kept > 0 {
                return Ok(kept);
            }
        }
    }
}

/// Reads the trace events of a Kineto trace (already decompressed) from a stream, without
/// touching any meter: memory holds the GPU work events kept (and open `B` events), not the
/// document. `path` names the file in errors. A UTF-8 byte-order mark is skipped.
///
/// `from_reader`, not `from_slice` over the text read into memory: measured on the shared
/// B200 trace repeated to 10× (24,656 × 10 events, 68 MB of JSON, 6.5 MB gzipped; release
/// `gpumeter usage`), it costs about twice the CPU time (0.48 s user against 0.22 s, gzip;
/// 0.40 s against 0.16 s plain), serde_json's reader going byte by byte, for memory flat in
/// the input's size (16 MB peak RSS against 86 MB; a gzip of 1 GiB of CPU-side events 9 MB
/// against 1.06 GB, a 1 GB kernel name 9 MB against 3.2 GB).
///
/// # Errors
/// A file-level [`ImportError`]: bad JSON (with line and column), not a trace, a top-level key
/// given twice, a file-level fault found in an event. A read error of `reader` is reported as
/// JSON error of category I/O: the caller, who knows what it reads, says what it was.
pub(crate) fn read_events<'p>(
    path: &'p Path,
    mut reader: impl Read,
) -> Result<Collector<'p>, ImportError> {
    // A UTF-8 byte-order mark is not JSON; skip it (positions then count from after it).
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
    let head = if head == b"\xEF\xBB\xBF" {
        &[][..]
    } else {
        head
    };
    let mut c = Collector {
        path,
        stage: Stage::Top,
        saw_events: false,
        base: None,
        device_properties: None,
        top_keys: HashSet::new(),
        failure: None,
        next_index: 0,
        pending: Vec::new(),
        invalid: Vec::new(),
        skipped: BTreeMap::new(),
        pid_of_correlation: HashMap::new(),
        names: HashMap::new(),
        open: HashMap::new(),
        bad_api_events: 0,
        bad_names: 0,
        not_objects: None,
        cut_strings: 0,
    };
    let mut cap = StringCap::new(head.chain(reader));
    // serde_json reads a reader byte by byte: a buffer under it is what makes it fast.
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 16, &mut cap));
    let result = TopSeed(&mut c).deserialize(&mut de).and_then(|()| de.end());
    drop(de);
    c.cut_strings = cap.cut;
    let not_a_trace = |reason: String| ImportError::NotATrace {
        path: path.to_path_buf(),
        reason,
    };
    if let Err(e) = result {
        if let Some(fault) = c.failure.take() {
            return Err(fault);
        }
        if e.classify() == serde_json::error::Category::Data {
            match c.stage {
                Stage::Top => {
                    return Err(not_a_trace(format!(
                        "the top level is not a JSON object ({e})"
                    )))
                }
                Stage::EventsValue => {
                    return Err(not_a_trace(format!("`traceEvents` is not an array ({e})")))
                }
                Stage::InObject | Stage::InEvents => {}
            }
        }
        return Err(json_error(path, e));
    }
    if !c.saw_events {
        return Err(not_a_trace("no `traceEvents` array".to_string()));
    }
    Ok(c)
}

/// Turns the events read by [`read_events`] into records, devices and warnings.
/// `key_label` is what keys of devices without a UUID are built from
/// ([`DeviceInfo::source_key`]).
///
/// # Errors
/// A file-level [`ImportError`] in `baseTimeNanoseconds` or `deviceProperties`.
pub(crate) fn finish(mut c: Collector<'_>, key_label: &str) -> Result<Parsed, ImportError> {
    let path = c.path;
    // B events never closed by their E.
    let mut unclosed: Vec<Open> = c.open.drain().flat_map(|(_, v)| v).collect();
    unclosed.sort_by_key(|o| o.index);
    for o in unclosed.into_iter().filter(|o| is_work(o.class)) {
        let e = c.fault(o.index).err(
            "ph",
            "B",
            "a B (begin) event whose E (end) never comes on its pid and tid",
        );
        c.lose(&o.event.view(), e);
    }

    let top = Fault {
        path,
        record: RecordLocation::TopLevel,
    };
    let base_ns: i128 = match top.int_opt("baseTimeNanoseconds", c.base.as_deref())? {
        None => 0,
        Some(v) if v < 0 => {
            return Err(top.err(
                "baseTimeNanoseconds",
                &v.to_string(),
                "negative: before the Unix epoch",
            ))
        }
        Some(v) if v > i128::from(u64::MAX) => {
            return Err(top.err(
                "baseTimeNanoseconds",
                &v.to_string(),
                "after 2554 (outside u64 ns since the Unix epoch)",
            ))
        }
        Some(v) => v,
    };
    let props = parse_device_properties(path, key_label, c.device_properties.as_deref())?;
    let pids = c.pid_of_correlation;

    // Devices in order of first activity; records carry local indices until committed.
    let mut parsed = Parsed::default();
    let mut local: HashMap<u32, u32> = HashMap::new();
    let mut slot_of = |id: u32, parsed: &mut Parsed| -> DeviceSlot {
        let s = *local.entry(id).or_insert_with(|| {
            let info = props
                .get(&id)
                .cloned()
                .unwrap_or_else(|| DeviceInfo::bare(DeviceInfo::source_key(key_label, id), id));
            parsed.devices.push(info);
            parsed.devices.len() as u32 - 1
        });
        DeviceSlot(s)
    };
    let mut records = Vec::with_capacity(c.pending.len());
    for p in c.pending {
        let f = Fault {
            path,
            record: RecordLocation::TraceEvent(p.index),
        };
        let slot = slot_of(p.device_id, &mut parsed);
        match absolute_times(&f, &p, base_ns) {
            Times::Valid(start_ns, end_ns) => {
                let mut rec = p.rec;
                rec.start_ns = start_ns;
                rec.end_ns = end_ns;
                rec.device = slot;
                rec.process_id = p.correlation.and_then(|k| pids.get(&k).copied());
                records.push(rec);
            }
            Times::Lost(reason) => parsed.losses.push((slot, reason)),
            Times::Invalid(e) => parsed.invalid(Some(slot), &e),
        }
    }
    for (device, e) in c.invalid {
        let slot = device.map(|id| slot_of(id, &mut parsed));
        parsed.invalid(slot, &e);
    }
    let name = crate::file_name(path);
    if c.bad_api_events > 0 {
        parsed.warnings.push(format!(
            "{name}: {} CPU-side CUDA API events have no readable `args.correlation` (or \
             `args`): the kernels they launched get no process id from them, so a tenant map's \
             [pid] rules cannot attribute those kernels",
            c.bad_api_events
        ));
    }
    if c.bad_names > 0 {
        parsed.warnings.push(format!(
            "{name}: {} kernel names are not valid Unicode (a lone surrogate escape): those \
             kernels are metered without a name",
            c.bad_names
        ));
    }
    if let Some((first, kind)) = c.not_objects {
        let n = c.skipped.get(NOT_AN_EVENT_OBJECT).copied().unwrap_or(0);
        parsed.warnings.push(format!(
            "{name}: {n} elements of `traceEvents` are not JSON objects, so not trace events \
             (the first: traceEvents[{first}], {kind}): counted in records.skipped as \
             `{NOT_AN_EVENT_OBJECT}`"
        ));
    }
    if c.cut_strings > 0 {
        parsed.warnings.push(format!(
            "{name}: {} strings are longer than {MAX_STRING_BYTES} bytes of JSON text: each was \
             cut there (at a character boundary) and the rest of it not read, so a kernel or \
             device name among them is kept cut",
            c.cut_strings
        ));
    }
    if let Some(n) = c.skipped.get(NO_CATEGORY_WITH_DEVICE) {
        parsed.warnings.push(format!(
            "{name}: {n} complete or begin events have no `cat` but an `args.device`: not known \
             to be GPU work, they are not metered (counted in records.skipped as \
             `{NO_CATEGORY_WITH_DEVICE}`)"
        ));
    }
    records.sort_by_key(|r| (r.start_ns, r.end_ns));
    parsed.records = records;
    parsed.skipped = c.skipped;
    Ok(parsed)
}

/// What a pending record's times make of it.
enum Times {
    /// Absolute (start, end) in ns since the epoch.
    Valid(u64, u64),
    /// A record the policy loses: a negative duration (`end_before_start`), one over 7 days
    /// (`too_long`).
    Lost(LossReason),
    /// A time outside `u64` ns since the epoch (`invalid_field`, naming the field).
    Invalid(ImportError),
}

/// The record's absolute times (DESIGN §3): start = base + `ts`, end = start + duration. A raw
/// `ts` of 0 means "not recorded": (0, 0), which the meter counts as `zero_timestamp`. A
/// negative duration is `end_before_start` and one over 7 days `too_long` whatever its end
/// would be (a 540-year `dur` need not fit `u64` ns to be too long); a start or end outside
/// `u64` ns since the epoch is `invalid_field` on the field that puts it there.
fn absolute_times(f: &Fault<'_>, p: &Pending<'_>, base_ns: i128) -> Times {
    if text_is_zero(&p.ts_text) {
        return Times::Valid(0, 0);
    }
    let start = match to_epoch_ns(base_ns.checked_add(p.ts_ns)) {
        Ok(s) => s,
        Err(r) => {
            let why = if base_ns > 0 {
                format!("{r} (with baseTimeNanoseconds = {base_ns})")
            } else {
                r.to_string()
            };
            return Times::Invalid(f.err(p.ts_field, &p.ts_text, why));
        }
    };
    if p.dur_ns < 0 {
        return Times::Lost(LossReason::EndBeforeStart);
    }
    if p.dur_ns > i128::from(MAX_RECORD_NS) {
        return Times::Lost(LossReason::TooLong);
    }
    match to_epoch_ns(i128::from(start).checked_add(p.dur_ns)) {
        Ok(end) => Times::Valid(start, end),
        Err(r) => Times::Invalid(f.err(p.dur_field, &p.dur_text, r)),
    }
}

/// A time in ns since the epoch (`None`: the sum overflowed) as `u64`, or why it is not one.
fn to_epoch_ns(t: Option<i128>) -> Result<u64, &'static str> {
    match t {
        Some(t) if t < 0 => Err("the time lies before 1970 (outside u64 ns since the epoch)"),
        Some(t) => u64::try_from(t)
            .map_err(|_| "the time overflows: it lies after 2554 (outside u64 ns since the epoch)"),
        None => Err("the time overflows: it lies after 2554 (outside u64 ns since the epoch)"),
    }
}

/// A required time field of `ev` as (text, ns relative to the trace's base).
fn time_field<'de>(
    f: &Fault<'_>,
    field: &'static str,
    raw: Option<&'de RawValue>,
) -> Result<(Cow<'de, str>, i128), ImportError> {
    let text = raw
        .map(|r| f.number_text(field, r))
        .transpose()?
        .flatten()
        .ok_or_else(|| f.err(field, "", "missing"))?;
    let ns = micros_text_to_ns(&text).map_err(|e| f.err(field, &text, e))?;
    Ok((text, ns))
}

/// One GPU work event (kernel, memcpy, memset) to a pending record: a complete (`X`) event, or
/// a `B` event `ev` closed by the `E` event `end` (duration = the `E`'s `ts` − the `B`'s).
///
/// # Errors
/// [`ImportError::BadField`] naming the field that cannot be represented; the caller books the
/// record as lost (`invalid_field`).
#[allow(clippy::too_many_arguments)]
fn work_event<'de>(
    f: &Fault<'_>,
    ev: &Event<'de>,
    end: Option<&Event<'de>>,
    args: &Args<'_>,
    class: Class,
    names: &mut HashMap<String, Arc<str>>,
    bad_names: &mut u64,
) -> Result<Pending<'de>, ImportError> {
    let index = match &f.record {
        RecordLocation::TraceEvent(i) => *i,
        _ => 0,
    };
    let device_id = match f.u32_opt("args.device", args.device)? {
        Some(d) => d,
        None => {
            let pid = ev.pid.map(RawValue::get).unwrap_or("");
            integer_text(pid)
                .ok()
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| {
                    f.err(
                        "args.device",
                        "",
                        format!(
                            "missing, and `pid` ({}) is not a device index",
                            shorten(pid)
                        ),
                    )
                })?
        }
    };
    let (ts_text, ts_ns) = time_field(f, "ts", ev.ts)?;
    let (dur_field, dur_text, dur_ns) = match end {
        None => {
            let (t, n) = time_field(f, "dur", ev.dur)?;
            ("dur", t, n)
        }
        Some(e) => {
            let (t, n) = time_field(f, "ts", e.ts).map_err(|_| {
                f.err(
                    "E.ts",
                    e.ts.map_or("", RawValue::get),
                    "the E (end) event's `ts` is not a time",
                )
            })?;
            let text = Cow::Owned(format!("{t} - {ts_text}"));
            ("E.ts", text, n - ts_ns)
        }
    };
    let correlation = f.u32_opt("args.correlation", args.correlation)?;

    let work = match class {
        Class::Kernel => {
            let name = match ev.name.map(raw_str) {
                Some(Ok(n)) => Some(match names.get(n.as_ref()) {
                    Some(known) => known.clone(),
                    None => names
                        .entry(n.into_owned())
                        .or_insert_with_key(|k| Arc::from(k.as_str()))
                        .clone(),
                }),
                // A name is informational, never metered: a kernel whose name is not valid
                // Unicode is metered without one (and counted in a warning).
                Some(Err(_)) if ev.name.is_some_and(|r| r.get().starts_with('"')) => {
                    *bad_names += 1;
                    None
                }
                Some(Err(why)) => {
                    return Err(f.err("name", ev.name.map_or("", RawValue::get), why));
                }
                None => None,
            };
            Work::Kernel(KernelLaunch {
                grid: f.dim3_opt("args.grid", args.grid)?,
                block: f.dim3_opt("args.block", args.block)?,
                registers_per_thread: f
                    .u32_opt("args.registers per thread", args.registers_per_thread)?,
                shared_mem_bytes: f.u64_opt("args.shared memory", args.shared_memory)?,
                name,
                warp_instructions: None,
            })
        }
        Class::Memcpy => {
            let name = f.string_opt("name", ev.name)?.unwrap_or_default();
            Work::Memcpy {
                bytes: f
                    .u64_opt("args.bytes", args.bytes)?
                    .ok_or_else(|| f.err("args.bytes", "", "missing"))?,
                direction: direction_from_name(&name),
            }
        }
        _ => Work::Memset {
            bytes: f
                .u64_opt("args.bytes", args.bytes)?
                .ok_or_else(|| f.err("args.bytes", "", "missing"))?,
        },
    };
    let out_of_range = |field: &'static str, v: i128| {
        f.err(
            field,
            &v.to_string(),
            "not a CUDA stream id (0 to 4294967295, or -1)",
        )
    };
    let stream_id = match f.int_opt("args.stream", args.stream)? {
        Some(s) => stream_from(s).ok_or_else(|| out_of_range("args.stream", s))?,
        None => match ev.tid.map(stream_from_tid) {
            Some(Ok(s)) => s.unwrap_or(0),
            Some(Err(v)) => return Err(out_of_range("tid", v)),
            None => 0,
        },
    };
    let mut rec = ActivityRecord::new(DeviceSlot(0), 0, 0, work);
    rec.stream_id = stream_id;
    rec.context_id = f.u32_opt("args.context", args.context)?.unwrap_or(0);
    rec.correlation_id = correlation.unwrap_or(0);
    // `args."External id"` is PyTorch's operator id, not an external correlation id for
    // attribution (module docs): `external_id` stays `None`.
    Ok(Pending {
        index,
        device_id,
        correlation,
        ts_field: "ts",
        ts_text,
        ts_ns,
        dur_field,
        dur_text,
        dur_ns,
        rec,
    })
}

/// `deviceProperties` → device id → device info (key: `GPU-<uuid>` when the entry has a UUID,
/// else `<key_label>#<id>`). A device id listed twice is one device when both entries give the
/// same values for every field gpumeter reads, and a file-level error otherwise: which entry
/// describes the device is unknown, and the choice would change the bill (SM count, UUID).
fn parse_device_properties(
    path: &Path,
    key_label: &str,
    raw: Option<&RawValue>,
) -> Result<HashMap<u32, DeviceInfo>, ImportError> {
    let mut out: HashMap<u32, (usize, DeviceInfo)> = HashMap::new();
    let Some(raw) = raw else {
        return Ok(HashMap::new());
    };
    if raw.get() == "null" {
        return Ok(HashMap::new());
    }
    let top = Fault {
        path,
        record: RecordLocation::TopLevel,
    };
    let entries: Vec<&RawValue> = serde_json::from_str(raw.get())
        .map_err(|_| top.err("deviceProperties", raw.get(), "expected an array"))?;
    for (i, entry) in entries.into_iter().enumerate() {
        let f = Fault {
            path,
            record: RecordLocation::DeviceProperties(i),
        };
        if !entry.get().starts_with('{') {
            return Err(f.err("deviceProperties", entry.get(), "expected an object"));
        }
        let p: DeviceProps<'_> = serde_json::from_str(entry.get()).map_err(|e| {
            f.err(
                "deviceProperties",
                entry.get(),
                format!("expected an object: {e}"),
            )
        })?;
        let id = f
            .u32_opt("id", p.id)?
            .ok_or_else(|| f.err("id", "", "missing"))?;
        let uuid = f
            .string_opt("uuid", p.uuid)?
            .filter(|u| !u.trim().is_empty());
        let key = match &uuid {
            Some(u) => DeviceInfo::uuid_key(u),
            None => DeviceInfo::source_key(key_label, id),
        };
        let major = f.u32_opt("computeMajor", p.compute_major)?;
        let minor = f.u32_opt("computeMinor", p.compute_minor)?;
        // A zero is "unknown", never a value to meter with.
        let nz32 = |v: Option<u32>| v.filter(|&x| x > 0);
        let nz64 = |v: Option<u64>| v.filter(|&x| x > 0);
        let info = DeviceInfo {
            key,
            id,
            name: f.string_opt("name", p.name)?,
            sm_count: nz32(f.u32_opt("numSms", p.num_sms)?),
            compute_capability: match (major, minor) {
                (Some(major), Some(minor)) if major > 0 => Some(ComputeCapability { major, minor }),
                _ => None,
            },
            uuid,
            limits: SmLimits {
                max_threads_per_sm: nz32(
                    f.u32_opt("maxThreadsPerMultiprocessor", p.max_threads_per_sm)?,
                ),
                max_blocks_per_sm: nz32(
                    f.u32_opt("maxBlocksPerMultiProcessor", p.max_blocks_per_sm)?,
                ),
                max_warps_per_sm: None,
                registers_per_sm: nz32(f.u32_opt("regsPerMultiprocessor", p.regs_per_sm)?),
                registers_per_block: nz32(f.u32_opt("regsPerBlock", p.regs_per_block)?),
                shared_mem_per_sm_bytes: nz64(
                    f.u64_opt("sharedMemPerMultiprocessor", p.shared_mem_per_sm)?,
                ),
                shared_mem_per_block_bytes: nz64(
                    f.u64_opt("sharedMemPerBlock", p.shared_mem_per_block)?,
                ),
                shared_mem_per_block_optin_bytes: nz64(
                    f.u64_opt("sharedMemPerBlockOptin", p.shared_mem_per_block_optin)?,
                ),
                warp_size: nz32(f.u32_opt("warpSize", p.warp_size)?),
            },
        };
        match out.get(&id) {
            Some((_, first)) if *first == info => {}
            Some((first, _)) => {
                return Err(f.err(
                    "id",
                    &id.to_string(),
                    format!(
                        "deviceProperties[{i}].id and deviceProperties[{first}].id are both \
                         {id}, with different values: which entry describes device {id} is \
                         unknown"
                    ),
                ))
            }
            None => {
                out.insert(id, (i, info));
            }
        }
    }
    Ok(out.into_iter().map(|(id, (_, info))| (id, info)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(v, ["a".repeat(M), "b".repeat(M), "z".to_string()]);
        // Never inside a character: 2-byte `é`s cut at M bytes (M is even)...
        let text = format!(r#"["x{}"]"#, "é".repeat(M));
        let v = decoded(&capped(text.as_bytes()).0);
        assert_eq!(v[0].len(), M + 1, "the character under way is finished");
        // ... nor inside an escape, nor between the halves of a surrogate pair.
        for prefix in [M - 1, M - 6, M - 7] {
            let text = format!(r#"["{}\ud83d\ude00\n\"rest"]"#, "a".repeat(prefix));
            let (out, cut) = capped(text.as_bytes());
            assert_eq!(cut, 1);
            let v = decoded(&out);
            assert!(v[0].starts_with(&"a".repeat(prefix)), "{prefix}");
            assert!(v[0].ends_with('😀') || v[0].ends_with('\n'), "{prefix}");
        }
        // The dropped part's escapes are followed: an escaped quote does not end the string.
        let text = format!(r#"["{}\"], [\"", "after"]"#, "a".repeat(M + 3));
        let v = decoded(&capped(text.as_bytes()).0);
        assert_eq!(v, ["a".repeat(M), "after".to_string()]);
    }

    /// The fields of an event settled as ignorable are dropped, not kept, but still checked:
    /// a string that is not UTF-8 in one is a JSON error, as when it was kept raw.
    #[test]
    fn settled_events_are_still_checked() {
        let path = Path::new("t.json");
        let ok = br#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "args": {"k": ["b"]}}]}"#;
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

    #[test]
    fn zero_text() {
        assert!(text_is_zero("0"));
        assert!(text_is_zero("0.000"));
        assert!(text_is_zero("-0e7"));
        assert!(!text_is_zero("0.001"));
        assert!(!text_is_zero("10"));
    }
}
