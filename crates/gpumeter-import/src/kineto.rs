//! Kineto / PyTorch-profiler Chrome-trace JSON (plain or gzip) to activity records.
//!
//! * Time: `ts`/`dur` are µs. With a top-level `baseTimeNanoseconds` (modern files), `ts` is
//!   relative to it: absolute ns = base + round(ts × 1000); without it (older files), `ts` is
//!   absolute µs. The decimal text is converted exactly ([`crate::units`]). A raw `ts` of 0
//!   means "not recorded" and gives a start of 0 whatever the base (loss `zero_timestamp`); a
//!   negative `dur` is loss `end_before_start`.
//! * Work: categories `kernel`/`Kernel`, `gpu_memcpy`/`Memcpy`, `gpu_memset`/`Memset`; and
//!   `cuda_profiler_range` complete events with CUPTI metric arguments (keys containing `__`:
//!   PyTorch's profiler in CUPTI-profiler mode), measured kernel ranges: on a device without
//!   kernel events each is a kernel launch timed by the range, else their operation counts
//!   ([`gpumeter_core::OpCounts`]) attach to the device's kernel events by name and launch
//!   order ([`resolve_ranges`]); CPU-side kernel launches with nothing GPU-side recorded are
//!   warned about (`launches_without_gpu_events`). Not work, counted as skipped by category:
//!   `gpu_user_annotation`, `cuda_sync`, `cuda_profiler_range` without metric arguments (or
//!   matching no kernel), `Trace`. Categories are matched ignoring ASCII case and surrounding whitespace (`KERNEL`,
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
//!   tenant tag (usage is attributed by CUPTI EXTERNAL_CORRELATION ids that an agent pushes):
//!   it is not read, so it neither matches a tenant map's `[external]` ids nor makes one
//!   attribution key per operator in the meter.
//! * Devices without a UUID are keyed `<label>#<id>`, the label being given by the caller
//!   (the first 16 hex digits of the content's SHA-256, see the crate docs).
//! * Reading: a stream ([`read_events`]; the caller decompresses gzip as a stream and hashes in
//!   the same pass), read in chunks of 1 MiB into one reused buffer ([`Source`]). The
//!   top-level object is read by serde's visitors through `serde_json::from_reader`; the
//!   `traceEvents` array by [`read_array`], which parses each element with serde_json from the
//!   chunk buffer, its fields borrowed from it (an element cut by the chunk's end is parsed
//!   again with the next chunk after it). Memory holds the GPU work events kept and open `B`
//!   events, never the document; an event whose `ph` and `cat` settle it as ignorable (most
//!   CPU-side events) has its other fields checked and dropped, not kept. Strings are cut at
//!   [`MAX_STRING_BYTES`] as the text is read ([`StringCap`]), since serde_json reads a string
//!   whole; a cut string ends in a digest of the text dropped, escapes decoded ([`CUT_MARK`]), and that text is
//!   validated as serde_json validates a string. Bad JSON is reported at the line and column of the text, with serde_json's message,
//!   as a parse of the whole text reports it ([`replay`]).

use std::borrow::{Borrow, Cow};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use gpumeter_core::time::MAX_RECORD_NS;
use gpumeter_core::{
    ActivityRecord, ComputeCapability, CopyDirection, DeviceInfo, DeviceSlot, KernelLaunch,
    LossReason, SmLimits, Work,
};
use gpumeter_core::{Warning, WarningCode};
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
/// (`invalid_field`). A view of a [`RawEvent`].
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

/// A trace event as read: each field the JSON text written, either borrowed from the chunk of
/// text it was read from (`T` = `&RawValue`, the usual case) or owned (`T` = `Box<RawValue>`:
/// an open `B` event, kept past its chunk, and the replay that finds a fault's position). A
/// key given twice is noted in `duplicate` (its index in [`EVENT_KEYS`] and the second value;
/// the first is kept).
struct RawEvent<T> {
    fields: [Option<T>; 8],
    duplicate: Option<(usize, T)>,
}

/// A trace event that owns its fields.
type OwnedEvent = RawEvent<Box<RawValue>>;

impl<T> Default for RawEvent<T> {
    fn default() -> Self {
        RawEvent {
            fields: Default::default(),
            duplicate: None,
        }
    }
}

impl<T: Borrow<RawValue>> RawEvent<T> {
    /// The event's fields, borrowed.
    fn view(&self) -> Event<'_> {
        let f = |i: usize| self.fields[i].as_ref().map(Borrow::borrow);
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
                    first: f(*i)?,
                    second: second.borrow(),
                })
            }),
        }
    }

    /// The same event owning its fields.
    fn to_owned_event(&self) -> OwnedEvent {
        let own = |v: &T| v.borrow().to_owned();
        RawEvent {
            fields: std::array::from_fn(|i| self.fields[i].as_ref().map(own)),
            duplicate: self.duplicate.as_ref().map(|(i, v)| (*i, own(v))),
        }
    }

    /// Whether nothing but `ph` and `cat` can matter any more: `ph` is a string other than `B`
    /// and `E`, and `cat` a string whose class is neither work nor a CUDA API call. Such an
    /// event (most CPU-side events) is only counted (or not) by its category, whatever its
    /// other fields hold, so they are checked ([`Checked`]) and dropped instead of kept.
    fn settled(&self) -> bool {
        let (Some(ph), Some(cat)) = (self.fields[0].as_ref(), self.fields[1].as_ref()) else {
            return false;
        };
        let ph_done = raw_str(ph.borrow()).is_ok_and(|p| p != "B" && p != "E");
        ph_done
            && raw_str(cat.borrow())
                .is_ok_and(|c| matches!(classify(&c).0, Class::Ignored | Class::Skipped))
    }
}

/// A JSON value read and dropped, as [`IgnoredAny`] but with every string in it decoded (into
/// serde_json's reused scratch buffer, nothing allocated), so that a string that is not valid
/// UTF-8 is still the JSON error it was when the field was kept as a raw value. Used where
/// fields are owned (an element read by the streaming reader): it also refuses an escape of a
/// lone surrogate, which a raw value (the usual, borrowed, case) lets pass.
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
enum Element<T> {
    Event(RawEvent<T>),
    NotAnObject(&'static str),
}

/// A field of an event as kept: borrowed from the text or owned.
trait Field<'de>: Deserialize<'de> + Borrow<RawValue> {
    /// Reads the next value of `map` and drops it, checked as a kept field would be.
    fn drop_value<A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error>;
}

impl<'de> Field<'de> for &'de RawValue {
    /// Borrowed: read as a raw value (its text checked as UTF-8), nothing allocated.
    fn drop_value<A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
        map.next_value::<&'de RawValue>().map(drop)
    }
}

impl<'de> Field<'de> for Box<RawValue> {
    /// Owned: read as [`Checked`], not copied into a box to be dropped.
    fn drop_value<A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
        map.next_value::<Checked>().map(drop)
    }
}

impl<'de, T: Field<'de>> Deserialize<'de> for Element<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Field<'de>> Visitor<'de> for V<T> {
            type Value = Element<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a trace event (a JSON object) or another JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Element<T>, A::Error> {
                let mut ev = RawEvent::default();
                let mut settled = false;
                while let Some(key) = map.next_key_seed(KeyIndex(&EVENT_KEYS))? {
                    let Some(i) = key else {
                        map.next_value::<IgnoredAny>()?;
                        continue;
                    };
                    if settled {
                        T::drop_value(&mut map)?;
                        continue;
                    }
                    let value: T = map.next_value()?;
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
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Element<T>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Element::NotAnObject("an array"))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Element<T>, E> {
                Ok(Element::NotAnObject("null"))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Element<T>, E> {
                Ok(Element::NotAnObject("a boolean"))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Element<T>, E> {
                Ok(Element::NotAnObject("a number"))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Element<T>, E> {
                Ok(Element::NotAnObject("a number"))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Element<T>, E> {
                Ok(Element::NotAnObject("a number"))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Element<T>, E> {
                Ok(Element::NotAnObject("a string"))
            }
        }
        // `deserialize_any`, not `deserialize_map`: a value of another type is read (and
        // counted), not a type error that refuses the whole file.
        d.deserialize_any(V(std::marker::PhantomData))
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
    /// Keys that are CUPTI metric names (they contain `__`: `smsp__sass_…`, `sm__ops_…`),
    /// with their values, in the order written: the counters of a `cuda_profiler_range`.
    metrics: Vec<(Cow<'a, str>, &'a RawValue)>,
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
                        if key.0.contains("__") {
                            args.metrics.push((key.0, map.next_value()?));
                        } else {
                            map.next_value::<IgnoredAny>()?;
                        }
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
    /// A CUPTI-profiler range (`cuda_profiler_range`): with metric arguments, a measured
    /// kernel ([`Collector::range`]); without, counted as skipped.
    ProfilerRange,
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
    ("cuda_profiler_range", Class::ProfilerRange),
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
    /// `cuda_profiler_range` events with metric arguments, in trace order.
    ranges: Vec<Range>,
    /// CPU-side kernel and graph launch calls ([`is_launch`]), for the warning when nothing
    /// GPU-side was recorded.
    launches: u64,
    /// The OS process ids of those launch calls (the processes a range-only trace's kernels
    /// can be of).
    launch_pids: BTreeSet<u32>,
    /// Launch call correlation id → its `ts` (ns relative to the base): the launch order that
    /// ranges are matched to kernels in.
    launch_ts: HashMap<u32, i128>,
}

/// A measured kernel range (`cuda_profiler_range` with CUPTI metric arguments), as read.
struct Range {
    index: usize,
    /// The device the event names (`args.device`, else `pid`), when it tells one.
    device_id: Option<u32>,
    /// The range as a kernel record (its counts in `KernelLaunch::ops`), or why it cannot be
    /// read.
    parsed: Result<Pending<'static>, ImportError>,
    /// A FLOP meter of which the range records some but not all counters (that meter left
    /// uncounted).
    partial: bool,
    /// A meter whose total overflows `u64` (that meter left uncounted).
    overflow: bool,
    /// A session-wide range ([`SESSION_NAME`]): its counters cover every kernel of the
    /// profiling session.
    session: bool,
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
    fn event<T: Borrow<RawValue>>(
        &mut self,
        index: usize,
        owned: RawEvent<T>,
    ) -> Result<(), ImportError> {
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
                // A range is read only as a complete event (Kineto writes no other): a B/E
                // range is counted as skipped, as before ranges were read.
                if class == Class::Skipped
                    || (class == Class::ProfilerRange && ph != "X" && ph != "B")
                {
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
                    event: owned.to_owned_event(),
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
            Class::ProfilerRange => {
                if ph == "X" {
                    self.range(index, &ev, None);
                }
                Ok(())
            }
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
            Some(b) if b.class == Class::ProfilerRange => {
                self.range(b.index, &b.event.view(), Some(&ev));
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
        let launch = ev
            .name
            .and_then(|n| raw_str(n).ok())
            .is_some_and(|n| is_launch(&n));
        if launch {
            self.launches += 1;
        }
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
        if launch {
            if let Some(p) = pid {
                self.launch_pids.insert(p);
            }
            let ts = ev
                .ts
                .and_then(|t| raw_str(t).ok().or(Some(Cow::Borrowed(t.get()))))
                .and_then(|t| micros_text_to_ns(&t).ok());
            if let (Some(c), Some(ts)) = (corr, ts) {
                self.launch_ts.insert(c, ts);
            }
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

    /// A `cuda_profiler_range` complete event (or a `B` event `ev` closed by `end`): with
    /// CUPTI metric arguments a measured kernel range, kept for [`finish`] (which makes it a
    /// launch, or attaches its counts to its kernel); without, counted as skipped.
    fn range(&mut self, index: usize, ev: &Event<'_>, end: Option<&Event<'_>>) {
        let f = Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        };
        let args = match parse_args(&f, ev.args) {
            Ok(a) if a.metrics.is_empty() => {
                self.skip("cuda_profiler_range");
                return;
            }
            Ok(a) => a,
            Err(e) => {
                // Args that cannot be read: whether the range is measured is unknown, and a
                // measured one must not vanish.
                self.ranges.push(Range {
                    index,
                    device_id: device_hint(ev, &Args::default()),
                    parsed: Err(e),
                    partial: false,
                    overflow: false,
                    session: false,
                });
                return;
            }
        };
        let mut partial = false;
        let mut overflow = false;
        let mut session = false;
        let parsed = match ev.duplicate.or(end.and_then(|e| e.duplicate)) {
            Some(d) => Err(d.fault(
                &f,
                "given twice in the event, so which value holds is unknown".to_string(),
            )),
            None => work_event(
                &f,
                ev,
                end,
                &args,
                Class::Kernel,
                &mut self.names,
                &mut self.bad_names,
            ),
        }
        .and_then(|mut p| {
            let (ops, part, over) = range_op_counts(&f, &args.metrics)?;
            (partial, overflow) = (part, over);
            if let Work::Kernel(k) = &mut p.rec.work {
                k.set_op_counts(ops);
                // Kineto names a range whose kernel name it did not get `__missing__`.
                if k.name.as_deref() == Some(MISSING_NAME) {
                    k.name = None;
                }
                session = k.name.as_deref() == Some(SESSION_NAME);
            }
            Ok(p.into_owned())
        });
        self.ranges.push(Range {
            index,
            device_id: device_hint(ev, &args),
            parsed,
            partial,
            overflow,
            session,
        });
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

/// The name Kineto gives a profiler range whose kernel name it did not get.
const MISSING_NAME: &str = "__missing__";

/// The name of the one range per device Kineto's range profiler writes when it does not
/// measure per kernel (PyTorch `profiler_measure_per_kernel=False`, the default): its
/// counters are the whole session's.
const SESSION_NAME: &str = "__profile__";

/// The message field of each SASS op counter ([`gpumeter_core::ops::SASS_OP_METRICS`], in its
/// order) as a range's `args` spell it.
const SASS_OP_FIELDS: [&str; 9] = [
    "args.smsp__sass_thread_inst_executed_op_dadd_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_dmul_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_dfma_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_hadd_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_hmul_pred_on.sum",
    "args.smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
];

/// The message field of a tensor-path op counter (the value names which one).
const TENSOR_OP_FIELD: &str = "args.sm__ops_path_tensor_src_*_dst_*.sum";

/// A profiler range's operation counts from its metric arguments
/// ([`gpumeter_core::OpCounter`]): add and multiply 1, FMA 2 per precision; tensor-path ops
/// summed. Metrics that feed no meter are left alone; a `null` counter is not given. Also
/// returns whether a FLOP meter had only some of its counters (that meter is left uncounted:
/// its count would under-bill) and whether a meter's total overflowed `u64` (left
/// uncounted).
///
/// # Errors
/// [`ImportError::BadField`] for a counter that is not a non-negative integer that fits `u64`,
/// or one given twice.
fn range_op_counts(
    f: &Fault<'_>,
    metrics: &[(Cow<'_, str>, &RawValue)],
) -> Result<(gpumeter_core::OpCounts, bool, bool), ImportError> {
    use gpumeter_core::ops::{is_tensor_op_metric, SASS_OP_METRICS};
    let mut counter = gpumeter_core::OpCounter::new();
    let mut overflowed = Vec::new();
    let mut seen = HashSet::new();
    for (name, raw) in metrics {
        let field = match SASS_OP_METRICS.iter().position(|m| m.name == name.as_ref()) {
            Some(i) => SASS_OP_FIELDS[i],
            None if is_tensor_op_metric(name) => TENSOR_OP_FIELD,
            None => continue,
        };
        if !seen.insert(name.as_ref()) {
            return Err(f.err(
                field,
                name,
                "the counter is given twice in args, so which value holds is unknown",
            ));
        }
        let value = f.u64_opt(field, Some(raw)).map_err(|e| match e {
            // Name the tensor counter, whose field is a pattern.
            ImportError::BadField {
                path,
                record,
                field,
                value,
                reason,
            } if field == TENSOR_OP_FIELD => ImportError::BadField {
                path,
                record,
                field,
                value: format!("{name}: {value}"),
                reason,
            },
            e => e,
        })?;
        let Some(value) = value else { continue };
        if let Err(gpumeter_core::OpCountError::Overflow { meter, .. }) =
            counter.add(name.as_ref(), value)
        {
            overflowed.push(meter);
        }
    }
    let mut ops = counter.finish();
    let partial = counter.partial();
    for m in partial.iter().chain(&overflowed) {
        match m {
            gpumeter_core::MeterKind::FlopsFp64 => ops.flops_fp64 = None,
            gpumeter_core::MeterKind::FlopsFp32 => ops.flops_fp32 = None,
            gpumeter_core::MeterKind::FlopsFp16 => ops.flops_fp16 = None,
            _ => ops.tensor_ops = None,
        }
    }
    Ok((ops, !partial.is_empty(), !overflowed.is_empty()))
}

/// Whether a CPU-side CUDA API call launches GPU work: the runtime's and driver's kernel
/// launches (`cudaLaunchKernel`, `cudaLaunchKernelExC`, `cudaLaunchCooperativeKernel`,
/// `cuLaunchKernel`, `cuLaunchKernelEx`, their `_ptsz` forms, …) and graph launches
/// (`cudaGraphLaunch`, `cuGraphLaunch`); not `cudaLaunchHostFunc` (CPU work).
fn is_launch(name: &str) -> bool {
    let name = name.trim();
    let base = name.strip_suffix("_ptsz").unwrap_or(name);
    ((base.starts_with("cudaLaunch") || base.starts_with("cuLaunch")) && !base.contains("HostFunc"))
        || matches!(base, "cudaGraphLaunch" | "cuGraphLaunch")
}

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

struct TopSeed<'c, 'p, 's, 'r>(&'c mut Collector<'p>, &'s RefCell<Source<'r>>);

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
                    path: c.path.to_path_buf(),
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

/// The value of `traceEvents`. When it is an array (the text's next byte that is not
/// whitespace is `[`), the array is read by [`read_array`] from the text itself, not by the
/// deserializer, which is then handed a stand-in `[]` (positions in its later errors are
/// mapped back, [`Remap`]). Anything else is left to the deserializer, whose type error says
/// what it is.
struct EventsSeed<'c, 'p, 's, 'r>(&'c mut Collector<'p>, &'s RefCell<Source<'r>>);

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
                c.failure = Some(json_error(c.path, serde_json::Error::io(e)));
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
        let read = read_array(c, &mut src.borrow_mut());
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

impl Collector<'_> {
    /// One element of `traceEvents`, in order.
    fn element<T: Borrow<RawValue>>(&mut self, el: Element<T>) -> Result<(), ImportError> {
        let index = self.next_index;
        self.next_index += 1;
        match el {
            Element::Event(ev) => self.event(index, ev),
            Element::NotAnObject(kind) => {
                self.skip(NOT_AN_EVENT_OBJECT);
                self.not_objects.get_or_insert((index, kind));
                Ok(())
            }
        }
    }
}

/// A position in the JSON text as serde_json counts it: the 1-based line, and how many bytes
/// of that line were read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Pos {
    line: usize,
    col: usize,
}

impl Pos {
    /// The position after `bytes` more.
    fn advance(&mut self, bytes: &[u8]) {
        match memchr::memrchr(b'\n', bytes) {
            None => self.col += bytes.len(),
            Some(last) => {
                self.line += memchr::memchr_iter(b'\n', bytes).count();
                self.col = bytes.len() - 1 - last;
            }
        }
    }
}

/// Where serde_json's count of lines and columns parted from the text's: at `serde` (its
/// count) the text was at `real`. Positions before are the same in both.
#[derive(Clone, Copy)]
struct Remap {
    serde: Pos,
    real: Pos,
}

impl Remap {
    fn map(&self, line: usize, col: usize) -> (usize, usize) {
        let s = self.serde;
        if line < s.line || (line == s.line && col < s.col) {
            (line, col)
        } else if line == s.line {
            (self.real.line, self.real.col + (col - s.col))
        } else {
            (line - s.line + self.real.line, col)
        }
    }
}

/// serde_json's error `e`, reported at `line`/`col` instead of where it says: the same message
/// with another position (its category is then `Data`; callers classify the original).
fn relocated(e: &serde_json::Error, line: usize, col: usize) -> serde_json::Error {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let msg = text.strip_suffix(&suffix).unwrap_or(&text);
    de::Error::custom(format_args!("{msg} at line {line} column {col}"))
}

/// Bytes of text read at a time (the buffer grows past it only for an element longer). Tiny
/// in unit tests, so that elements cross chunks everywhere.
const CHUNK_BYTES: usize = if cfg!(test) { 64 } else { 1 << 20 };

/// An element of `traceEvents` longer than this (whitespace and strings, each string cut at
/// [`MAX_STRING_BYTES`], can make one of any length) is read by the streaming deserializer
/// instead of being held whole ([`read_array`]); real trace events are a few hundred bytes.
/// Small in unit tests, so that their longer elements take that path.
const MAX_HELD_ELEMENT_BYTES: usize = if cfg!(test) { 1024 } else { 4 << 20 };

/// The decompressed text with strings cut ([`StringCap`]), read in chunks into one reused
/// buffer; `buf[pos..end]` is read and not consumed yet. Consumed by the deserializer through
/// [`SerdeSide`] (the top-level object) and by [`read_array`] (the `traceEvents` array).
struct Source<'r> {
    cap: StringCap<Box<dyn Read + 'r>>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    eof: bool,
    /// The position of `buf[mark]` in the text as serde_json counts positions (positions are
    /// counted a chunk at a time, when the buffer is refilled, or when asked).
    mark: usize,
    at_mark: Pos,
    /// Bytes handed to the deserializer before the text's (the stand-in for `traceEvents`).
    inject: &'static [u8],
    /// Set once the deserializer's positions part from the text's.
    remap: Option<Remap>,
}

impl<'r> Source<'r> {
    fn new(inner: Box<dyn Read + 'r>) -> Self {
        Source {
            cap: StringCap::new(inner),
            buf: vec![0; CHUNK_BYTES],
            pos: 0,
            end: 0,
            eof: false,
            mark: 0,
            at_mark: Pos { line: 1, col: 0 },
            inject: b"",
            remap: None,
        }
    }

    /// Consumes `n` bytes of what is held.
    fn consume(&mut self, n: usize) {
        self.pos += n;
    }

    /// The position of the next byte to consume.
    fn at(&self) -> Pos {
        let mut p = self.at_mark;
        p.advance(&self.buf[self.mark..self.pos]);
        p
    }

    /// Reads more text after what is held (moving what is held to the buffer's start, or
    /// growing the buffer when it is full); `false` at the end of the text.
    fn fill(&mut self) -> std::io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        if self.pos == self.end || (self.end == self.buf.len() && self.pos > 0) {
            self.at_mark = self.at();
            self.mark = 0;
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.cap.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Consumes whitespace; the next byte (not consumed), `None` at the end of the text.
    fn skip_ws(&mut self) -> std::io::Result<Option<u8>> {
        loop {
            let data = &self.buf[self.pos..self.end];
            match data
                .iter()
                .position(|b| !matches!(b, b' ' | b'\n' | b'\t' | b'\r'))
            {
                Some(k) => {
                    self.consume(k);
                    return Ok(Some(self.buf[self.pos]));
                }
                None => {
                    self.consume(data.len());
                    if !self.fill()? {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// The [`Source`] as the deserializer reads it (a byte at a time: only the top-level object
/// outside `traceEvents` is read so).
struct SerdeSide<'s, 'r>(&'s RefCell<Source<'r>>);

impl Read for SerdeSide<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        SourceReader(&mut self.0.borrow_mut()).read(out)
    }
}

/// Reads a [`Source`], consuming what it hands out.
struct SourceReader<'a, 'r>(&'a mut Source<'r>);

impl Read for SourceReader<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let s = &mut *self.0;
        if !s.inject.is_empty() {
            let n = out.len().min(s.inject.len());
            out[..n].copy_from_slice(&s.inject[..n]);
            s.inject = &s.inject[n..];
            return Ok(n);
        }
        if s.pos == s.end && !s.fill()? {
            return Ok(0);
        }
        let n = out.len().min(s.end - s.pos);
        out[..n].copy_from_slice(&s.buf[s.pos..s.pos + n]);
        s.consume(n);
        Ok(n)
    }
}

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
/// SIMD searches per chunk ([`StringCap`]'s fast path) and positions are counted a chunk at a
/// time ([`Source`]). The elements' ends are found by serde_json itself (one
/// `StreamDeserializer` step reports where the value ended), not by a scanner of brackets and
/// strings of our own: the first version of this had one, and it was a fifth of the profile.
///
/// # Errors
/// A fault of the collector, a read error (as a JSON error of category I/O), or bad JSON,
/// reported as a parse of the whole text would report it ([`replay`]).
fn read_array(c: &mut Collector<'_>, s: &mut Source<'_>) -> Result<(), ImportError> {
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

/// The longest a JSON string of a Kineto trace is read: 65,536 bytes of its JSON text. A
/// longer string is cut at the first character boundary at or after this many bytes of its
/// text, an escape counting as the bytes it stands for (never inside an escape, nor between
/// the two escapes of a surrogate pair), so a string is cut at the same character however it
/// is escaped, before the JSON parser
/// sees it, so that a string of any length costs at most this much memory. The rest of its
/// text is not kept but is still read: validated as serde_json validates a string, and
/// digested, so that the cut string ends in [`CUT_MARK`] and 32 hex digits (the first 16 bytes
/// of the SHA-256 of the text dropped, escapes decoded (the UTF-8 of what the string stands
/// for, from the first character not kept to its end), and `]`. Two strings that differ only
/// past the cut thus stay two strings, and equal strings (however escaped) stay equal. A cut
/// string keeps at most `MAX_STRING_BYTES + 3` bytes of text (the character or surrogate pair
/// under way is finished), then
/// [`CUT_SUFFIX_BYTES`] bytes of mark and digest. Not 4 KiB: real C++ template kernel names
/// pass it (one of 5,123 bytes in the HTA AlexNet trace of `shared/data`), and a kernel name is
/// never cut in a real trace. Each source with a cut string gets one warning saying how many.
pub const MAX_STRING_BYTES: usize = 64 * 1024;

/// What follows the kept part of a string cut at [`MAX_STRING_BYTES`], before the hex digest
/// of the part dropped: `...[cut sha256:`, then 32 lowercase hex digits and `]`.
pub const CUT_MARK: &str = "...[cut sha256:";

/// The bytes a cut string gains after its kept part: [`CUT_MARK`], 32 hex digits, `]` (48).
pub const CUT_SUFFIX_BYTES: usize = CUT_MARK.len() + 33;

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
    /// Inside a string being cut: its bytes are dropped (validated and digested) up to its
    /// closing quote.
    Drop(Tail),
}

/// Where [`StringCap`] is in the dropped part of a string being cut. The bytes of an unsettled
/// character or escape are held in [`StringCap::pend`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// At a character boundary.
    Char,
    /// Inside a UTF-8 sequence: `need` more bytes, the next in `lo..=hi`, the rest in
    /// `0x80..=0xBF` (the ranges of `std::str::from_utf8`).
    Utf8 { need: u8, lo: u8, hi: u8 },
    /// After a `\` (held after a high surrogate's escape when `pend` holds 7 bytes).
    Escape,
    /// Inside a `\u` escape: `left` hex digits to come, `value` of those read; `pair` when it
    /// follows a high surrogate's escape.
    Hex { left: u8, value: u16, pair: bool },
    /// After a high surrogate's escape: only a low one's escape settles it.
    AfterHigh,
}

/// Faults of a dropped part passed on to the parser ([`StringCap::fault`]): invalid UTF-8, a
/// lone surrogate (each refused or not by serde_json depending on where the string lies), and
/// faults serde_json always refuses (a control character, a bad escape), after which nothing
/// more is passed on.
const FAULT_UTF8: u8 = 1;
const FAULT_SURROGATE: u8 = 2;
const FAULT_FATAL: u8 = 4;

/// Bytes [`StringCap::step`] hands out for one byte read: at most a fault (12 bytes), another
/// (3) and the closing mark, digest and quote.
struct Emit {
    bytes: [u8; 80],
    n: usize,
}

impl Emit {
    fn new() -> Self {
        Emit {
            bytes: [0; 80],
            n: 0,
        }
    }

    fn push(&mut self, b: &[u8]) {
        let end = (self.n + b.len()).min(self.bytes.len());
        let k = end - self.n;
        self.bytes[self.n..end].copy_from_slice(&b[..k]);
        self.n = end;
    }

    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.n]
    }
}

/// A reader of JSON text that cuts every string longer than [`MAX_STRING_BYTES`] (counted in
/// `cut`): only a lexer of strings (quotes, escapes and, past a cut, UTF-8), the JSON parser
/// above it validates everything else. serde_json reads a string whole before handing it over
/// (there is no streaming string API), so without this a 1 GB kernel name would cost its size
/// (three times, measured).
///
/// The dropped part of a cut string is lexed as serde_json lexes a string and its faults are
/// passed on to the parser, so that the text is refused (or not) as serde_json would refuse
/// the whole string, with serde_json's own error for the field: a control character, a bad
/// escape or `\u` escape, invalid UTF-8 and a lone surrogate escape are handed out in place of
/// the bytes dropped (the first of each kind; nothing more after a control character or a bad
/// escape, which serde_json always refuses), and an unterminated string stays unterminated.
/// Their line is the text's; their column counts the text as read, without the bytes dropped
/// before them on that line.
struct StringCap<R> {
    inner: R,
    lex: Lex,
    cut: u64,
    /// The digest of the dropped part of the string being cut.
    hasher: sha2::Sha256,
    /// The kinds of fault already passed on in the string being cut.
    faults: u8,
    /// The bytes of an unsettled character or escape of the dropped part.
    pend: [u8; 12],
    pend_n: usize,
    /// Bytes to hand out before any more is read (what did not fit in place).
    queue: Vec<u8>,
    queue_pos: usize,
}

impl<R: Read> StringCap<R> {
    fn new(inner: R) -> Self {
        StringCap {
            inner,
            lex: Lex::Out,
            cut: 0,
            hasher: sha2::Sha256::default(),
            faults: 0,
            pend: [0; 12],
            pend_n: 0,
            queue: Vec::new(),
            queue_pos: 0,
        }
    }

    /// Reads `b` (the state moves on); what is handed out for it goes to `e`.
    fn step(&mut self, b: u8, e: &mut Emit) {
        let next = match self.lex {
            Lex::Out => {
                e.push(&[b]);
                if b == b'"' {
                    Lex::In {
                        len: 0,
                        high: false,
                    }
                } else {
                    Lex::Out
                }
            }
            Lex::In { len, high } => match b {
                b'"' => {
                    e.push(&[b]);
                    Lex::Out
                }
                // A continuation byte ends the character under way: never cut.
                0x80..=0xBF => {
                    e.push(&[b]);
                    Lex::In {
                        len: len + 1,
                        high: false,
                    }
                }
                // An escape counts as the bytes it stands for (added when it ends), so a
                // string is cut at the same place however it is escaped.
                b'\\' if high || len < MAX_STRING_BYTES => {
                    e.push(&[b]);
                    Lex::Escape { len }
                }
                _ if len < MAX_STRING_BYTES => {
                    e.push(&[b]);
                    Lex::In {
                        len: len + 1,
                        high: false,
                    }
                }
                _ => {
                    self.cut += 1;
                    self.faults = 0;
                    self.pend_n = 0;
                    self.lex = Lex::Drop(Tail::Char);
                    self.drop_step(b, e);
                    return;
                }
            },
            Lex::Escape { len } => {
                e.push(&[b]);
                if b == b'u' {
                    Lex::Unicode {
                        len,
                        left: 4,
                        value: 0,
                    }
                } else {
                    Lex::In {
                        len: len + 1,
                        high: false,
                    }
                }
            }
            Lex::Unicode { len, left, value } => {
                e.push(&[b]);
                let value = value * 16 + char::from(b).to_digit(16).unwrap_or(0);
                if left > 1 {
                    Lex::Unicode {
                        len,
                        left: left - 1,
                        value,
                    }
                } else {
                    // A surrogate pair stands for 4 bytes, 2 counted for each half.
                    let bytes = if (0xD800..0xE000).contains(&value) {
                        2
                    } else {
                        char::from_u32(value).map_or(3, char::len_utf8)
                    };
                    Lex::In {
                        len: len + bytes,
                        high: (0xD800..0xDC00).contains(&value),
                    }
                }
            }
            Lex::Drop(_) => {
                self.drop_step(b, e);
                return;
            }
        };
        self.lex = next;
    }

    /// Reads `b` of the dropped part of a string being cut: digested (unless it closes the
    /// string), lexed, and a fault found passed on to `e`.
    fn drop_step(&mut self, b: u8, e: &mut Emit) {
        let Lex::Drop(tail) = self.lex else {
            return;
        };
        // The digest is of the text the string stands for: plain bytes as they are, an
        // escape as what it decodes to (digested in `drop_lex` when it ends), so one string
        // escaped two ways has one digest.
        let plain = match tail {
            Tail::Char | Tail::AfterHigh => b != b'"' && b != b'\\',
            Tail::Utf8 { .. } => true,
            Tail::Escape | Tail::Hex { .. } => false,
        };
        if plain {
            sha2::Digest::update(&mut self.hasher, [b]);
        }
        self.drop_lex(tail, b, e);
    }

    fn hold(&mut self, b: u8) {
        if self.pend_n < self.pend.len() {
            self.pend[self.pend_n] = b;
            self.pend_n += 1;
        }
    }

    /// Passes on the bytes held (a fault of kind `kind`), unless one of that kind was, or a
    /// fatal one; then forgets them.
    fn fault(&mut self, kind: u8, e: &mut Emit) {
        if self.faults & (kind | FAULT_FATAL) == 0 {
            e.push(&self.pend[..self.pend_n]);
            self.faults |= kind;
        }
        self.pend_n = 0;
    }

    fn drop_lex(&mut self, tail: Tail, b: u8, e: &mut Emit) {
        let to = |s: &mut Self, t: Tail| s.lex = Lex::Drop(t);
        match tail {
            Tail::Char => {
                self.pend_n = 0;
                match b {
                    b'"' => {
                        let digest = sha2::Digest::finalize_reset(&mut self.hasher);
                        let mut hex = [0u8; 32];
                        // 16 bytes make 32 digits: never fails.
                        let _ = hex::encode_to_slice(&digest[..16], &mut hex);
                        e.push(CUT_MARK.as_bytes());
                        e.push(&hex);
                        e.push(b"]\"");
                        self.lex = Lex::Out;
                    }
                    b'\\' => {
                        self.hold(b);
                        to(self, Tail::Escape);
                    }
                    0..=0x1F => {
                        self.hold(b);
                        self.fault(FAULT_FATAL, e);
                    }
                    0x20..=0x7F => {}
                    _ => {
                        let (need, lo, hi) = match b {
                            0xC2..=0xDF => (1, 0x80, 0xBF),
                            0xE0 => (2, 0xA0, 0xBF),
                            0xE1..=0xEC | 0xEE | 0xEF => (2, 0x80, 0xBF),
                            0xED => (2, 0x80, 0x9F),
                            0xF0 => (3, 0x90, 0xBF),
                            0xF1..=0xF3 => (3, 0x80, 0xBF),
                            0xF4 => (3, 0x80, 0x8F),
                            _ => (0, 0, 0),
                        };
                        self.hold(b);
                        if need == 0 {
                            self.fault(FAULT_UTF8, e);
                        } else {
                            to(self, Tail::Utf8 { need, lo, hi });
                        }
                    }
                }
            }
            Tail::Utf8 { need, lo, hi } => {
                if (lo..=hi).contains(&b) {
                    self.hold(b);
                    if need > 1 {
                        to(
                            self,
                            Tail::Utf8 {
                                need: need - 1,
                                lo: 0x80,
                                hi: 0xBF,
                            },
                        );
                    } else {
                        self.pend_n = 0;
                        to(self, Tail::Char);
                    }
                } else {
                    self.fault(FAULT_UTF8, e);
                    self.drop_lex(Tail::Char, b, e);
                }
            }
            Tail::Escape => {
                let pair = self.pend_n == 7;
                self.hold(b);
                match b {
                    b'u' => to(
                        self,
                        Tail::Hex {
                            left: 4,
                            value: 0,
                            pair,
                        },
                    ),
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                        if pair {
                            self.fault(FAULT_SURROGATE, e);
                        }
                        let decoded = match b {
                            b'b' => 0x08,
                            b'f' => 0x0C,
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            other => other,
                        };
                        sha2::Digest::update(&mut self.hasher, [decoded]);
                        self.pend_n = 0;
                        to(self, Tail::Char);
                    }
                    _ => {
                        self.fault(FAULT_FATAL, e);
                        to(self, Tail::Char);
                    }
                }
            }
            Tail::Hex { left, value, pair } => {
                self.hold(b);
                let Some(d) = char::from(b).to_digit(16) else {
                    self.fault(FAULT_FATAL, e);
                    to(self, Tail::Char);
                    return;
                };
                // At most 4 digits: no overflow.
                let value = value.wrapping_mul(16).wrapping_add(d as u16);
                if left > 1 {
                    to(
                        self,
                        Tail::Hex {
                            left: left - 1,
                            value,
                            pair,
                        },
                    );
                    return;
                }
                let high = (0xD800..0xDC00).contains(&value);
                let low = (0xDC00..0xE000).contains(&value);
                if pair != low {
                    self.fault(FAULT_SURROGATE, e);
                } else if !pair && high {
                    to(self, Tail::AfterHigh);
                    return;
                } else {
                    // The character: the pair's (its high half's digits are held at 2..6).
                    let code = if pair {
                        let hi = std::str::from_utf8(&self.pend[2..6])
                            .ok()
                            .and_then(|h| u32::from_str_radix(h, 16).ok())
                            .unwrap_or(0xD800);
                        0x10000 + ((hi.saturating_sub(0xD800)) << 10) + (u32::from(value) - 0xDC00)
                    } else {
                        u32::from(value)
                    };
                    let mut utf8 = [0u8; 4];
                    let c = char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER);
                    sha2::Digest::update(&mut self.hasher, c.encode_utf8(&mut utf8).as_bytes());
                }
                self.pend_n = 0;
                to(self, Tail::Char);
            }
            Tail::AfterHigh => {
                if b == b'\\' {
                    self.hold(b);
                    to(self, Tail::Escape);
                } else {
                    self.fault(FAULT_SURROGATE, e);
                    self.drop_lex(Tail::Char, b, e);
                }
            }
        }
    }

    /// The length of the run at the start of `data` (in the dropped part, at a character
    /// boundary) that is plain text: no quote, backslash or control character, whole UTF-8.
    fn plain_run(data: &[u8]) -> usize {
        let lim = memchr::memchr2(b'"', b'\\', data).unwrap_or(data.len());
        let seg = &data[..lim];
        let seg = &seg[..seg.iter().position(|&b| b < 0x20).unwrap_or(lim)];
        match std::str::from_utf8(seg) {
            Ok(_) => seg.len(),
            Err(err) => err.valid_up_to(),
        }
    }

    /// Hands out `bytes` after the `kept` bytes of `buf` (in place when they fit before
    /// `free`, the end of what was read, and nothing is queued; else queued).
    fn put(&mut self, buf: &mut [u8], kept: &mut usize, free: usize, bytes: &[u8]) {
        if self.queue_pos < self.queue.len() || *kept + bytes.len() > free {
            self.queue.extend_from_slice(bytes);
        } else {
            buf[*kept..*kept + bytes.len()].copy_from_slice(bytes);
            *kept += bytes.len();
        }
    }

    /// Bytes queued and not handed out yet.
    fn queued(&self) -> &[u8] {
        &self.queue[self.queue_pos..]
    }
}

impl<R: Read> StringCap<R> {
    /// Filters `buf` in place; returns how many bytes are handed out at its start (what does
    /// not fit there, at most the few bytes a cut string gains and what follows them in
    /// `buf`, is queued: [`StringCap::queued`]). Runs of bytes that change nothing but a
    /// string's length, or that are plain text dropped, are passed over whole; the rest goes
    /// through [`StringCap::step`] byte by byte.
    fn filter(&mut self, buf: &mut [u8]) -> usize {
        if self.queue_pos == self.queue.len() {
            if let Some(next) = self.uncut(buf) {
                self.lex = next;
                return buf.len();
            }
        }
        let n = buf.len();
        let (mut i, mut kept) = (0, 0);
        while i < n {
            let run = match self.lex {
                Lex::Out => memchr::memchr(b'"', &buf[i..]).unwrap_or(n - i),
                Lex::In { len, .. } if len < MAX_STRING_BYTES => {
                    let lim = (n - i).min(MAX_STRING_BYTES - len);
                    let run = memchr::memchr2(b'"', b'\\', &buf[i..i + lim]).unwrap_or(lim);
                    if run > 0 {
                        self.lex = Lex::In {
                            len: len + run,
                            high: false,
                        };
                    }
                    run
                }
                Lex::Drop(Tail::Char) => {
                    let run = Self::plain_run(&buf[i..]);
                    sha2::Digest::update(&mut self.hasher, &buf[i..i + run]);
                    i += run;
                    if run > 0 {
                        continue;
                    }
                    0
                }
                _ => 0,
            };
            if run > 0 {
                if self.queue_pos < self.queue.len() {
                    self.queue.extend_from_slice(&buf[i..i + run]);
                } else if kept != i {
                    buf.copy_within(i..i + run, kept);
                    kept += run;
                } else {
                    kept += run;
                }
                i += run;
                continue;
            }
            let b = buf[i];
            i += 1;
            let mut e = Emit::new();
            self.step(b, &mut e);
            if e.n == 1 && self.queue_pos == self.queue.len() {
                buf[kept] = e.bytes[0];
                kept += 1;
            } else if e.n > 0 {
                self.put(buf, &mut kept, i, e.as_slice());
            }
        }
        kept
    }
}

impl<R: Read> StringCap<R> {
    /// The state after `buf` when no string in it can be cut, told without lexing it byte by
    /// byte (`None`: it must be): `buf` has no `\` (so each `"` opens or closes a string: real
    /// traces have none), the state before it is outside a string or inside one short of the
    /// cap by more than its bytes up to the first `"`, and each aligned block of
    /// `MAX_STRING_BYTES / 2` bytes of it holds a `"` (so no run of `MAX_STRING_BYTES - 1` bytes
    /// without one: a run that long holds a whole block). A few SIMD searches per chunk instead
    /// of two per string.
    fn uncut(&self, buf: &[u8]) -> Option<Lex> {
        const BLOCK: usize = MAX_STRING_BYTES / 2;
        let carried = match self.lex {
            Lex::Out => None,
            Lex::In { len, .. } => Some(len),
            _ => return None,
        };
        if memchr::memchr(b'\\', buf).is_some() {
            return None;
        }
        let blocks = buf.chunks_exact(BLOCK);
        if !blocks
            .into_iter()
            .all(|b| memchr::memchr(b'"', b).is_some())
        {
            return None;
        }
        if let Some(len) = carried {
            let run = memchr::memchr(b'"', buf).unwrap_or(buf.len());
            if len + run >= MAX_STRING_BYTES - 1 {
                return None;
            }
        }
        let Some(last) = memchr::memrchr(b'"', buf) else {
            return Some(match carried {
                None => Lex::Out,
                Some(len) => Lex::In {
                    len: len + buf.len(),
                    high: false,
                },
            });
        };
        let odd = memchr::memchr_iter(b'"', buf).count() % 2 == 1;
        Some(if carried.is_some() != odd {
            Lex::In {
                len: buf.len() - 1 - last,
                high: false,
            }
        } else {
            Lex::Out
        })
    }
}

impl<R: Read> Read for StringCap<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let queued = self.queued();
            if !queued.is_empty() {
                let n = queued.len().min(buf.len());
                buf[..n].copy_from_slice(&queued[..n]);
                self.queue_pos += n;
                if self.queue_pos == self.queue.len() {
                    self.queue.clear();
                    self.queue_pos = 0;
                }
                return Ok(n);
            }
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
        ranges: Vec::new(),
        launches: 0,
        launch_pids: BTreeSet::new(),
        launch_ts: HashMap::new(),
    };
    let src = RefCell::new(Source::new(Box::new(head.chain(reader))));
    let mut de = serde_json::Deserializer::from_reader(SerdeSide(&src));
    let result = TopSeed(&mut c, &src)
        .deserialize(&mut de)
        .and_then(|()| de.end());
    drop(de);
    let src = src.into_inner();
    c.cut_strings = src.cap.cut;
    let not_a_trace = |reason: String| ImportError::NotATrace {
        path: path.to_path_buf(),
        reason,
    };
    if let Err(e) = result {
        if let Some(fault) = c.failure.take() {
            return Err(fault);
        }
        let data = e.classify() == serde_json::error::Category::Data;
        let (line, column) = match src.remap {
            Some(r) if e.line() != 0 => r.map(e.line(), e.column()),
            _ => (e.line(), e.column()),
        };
        let e = if (line, column) == (e.line(), e.column()) {
            e
        } else {
            relocated(&e, line, column)
        };
        if data {
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
        return Err(ImportError::Json {
            path: path.to_path_buf(),
            line,
            column,
            source: e,
        });
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
    for o in unclosed.into_iter() {
        let e = c.fault(o.index).err(
            "ph",
            "B",
            "a B (begin) event whose E (end) never comes on its pid and tid",
        );
        if is_work(o.class) {
            c.lose(&o.event.view(), e);
        } else if o.class == Class::ProfilerRange {
            // A measured range must not vanish: lost (a range-only device) or unmatched.
            let ev = o.event.view();
            let measured =
                read_args(&c.fault(o.index), ev.args).map_or(true, |a| !a.metrics.is_empty());
            if measured {
                c.ranges.push(Range {
                    index: o.index,
                    device_id: device_hint(&ev, &Args::default()),
                    parsed: Err(e),
                    partial: false,
                    overflow: false,
                    session: false,
                });
            } else {
                c.skip("cuda_profiler_range");
            }
        }
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
    // Measured kernel ranges: on a device with kernel events their counts attach to those
    // kernels; on a device without, each range is a launch.
    let had_ranges = !c.ranges.is_empty();
    let first_range_launch = c.pending.len();
    let ranges = resolve_ranges(
        &mut c.pending,
        std::mem::take(&mut c.ranges),
        &mut c.invalid,
        &c.launch_ts,
    );
    let gpu_events = !c.pending.is_empty() || !c.invalid.is_empty() || had_ranges;
    // Kernels the trace records, read or not: for the launches-without-kernels warning.
    let kernels_recorded = c
        .pending
        .iter()
        .filter(|p| matches!(p.rec.work, Work::Kernel(_)))
        .count() as u64
        + c.invalid.len() as u64;
    // A range carries no correlation id: its launch is of the trace's one launching process
    // when there is exactly one.
    let range_pid = match (c.launch_pids.len(), c.launch_pids.first()) {
        (1, Some(&p)) => Some(p),
        _ => None,
    };
    let mut records = Vec::with_capacity(c.pending.len());
    for (i, p) in c.pending.into_iter().enumerate() {
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
                rec.process_id = if i >= first_range_launch {
                    range_pid
                } else {
                    p.correlation.and_then(|k| pids.get(&k).copied())
                };
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
        parsed.warnings.push(Warning::new(
            WarningCode::UncorrelatedApiEvents,
            format!(
                "{name}: {} CPU-side CUDA API events have no readable `args.correlation` (or \
             `args`): the kernels they launched get no process id from them, so a tenant map's \
             [pid] rules cannot attribute those kernels",
                c.bad_api_events
            ),
        ));
    }
    if c.bad_names > 0 {
        parsed.warnings.push(Warning::new(
            WarningCode::InvalidNames,
            format!(
                "{name}: {} kernel names are not valid Unicode (a lone surrogate escape): those \
             kernels are metered without a name",
                c.bad_names
            ),
        ));
    }
    if let Some((first, kind)) = c.not_objects {
        let n = c.skipped.get(NOT_AN_EVENT_OBJECT).copied().unwrap_or(0);
        parsed.warnings.push(Warning::new(
            WarningCode::NotEventObjects,
            format!(
                "{name}: {n} elements of `traceEvents` are not JSON objects, so not trace events \
             (the first: traceEvents[{first}], {kind}): counted in records.skipped as \
             `{NOT_AN_EVENT_OBJECT}`"
            ),
        ));
    }
    if c.cut_strings > 0 {
        parsed.warnings.push(Warning::new(
            WarningCode::StringsCut,
            format!(
            "{name}: {} strings are longer than {MAX_STRING_BYTES} bytes of JSON text: each was \
             cut there (at a character boundary) and the rest of it not read, so a kernel or \
             device name among them is kept cut",
            c.cut_strings
        ),
        ));
    }
    if let Some(n) = c.skipped.get(NO_CATEGORY_WITH_DEVICE) {
        parsed.warnings.push(Warning::new(
            WarningCode::UncategorizedDeviceEvents,
            format!(
            "{name}: {n} complete or begin events have no `cat` but an `args.device`: not known \
             to be GPU work, they are not metered (counted in records.skipped as \
             `{NO_CATEGORY_WITH_DEVICE}`)"
        ),
        ));
    }
    range_warnings(
        &name,
        &ranges,
        range_pid,
        c.launch_pids.len(),
        &mut parsed.warnings,
    );
    if ranges.unmatched > 0 {
        *c.skipped
            .entry("cuda_profiler_range".to_string())
            .or_insert(0) += ranges.unmatched;
    }
    if c.launches > 0 && !gpu_events {
        parsed.warnings.push(Warning::new(
            WarningCode::LaunchesWithoutGpuEvents,
            format!(
                "{name}: the CPU side launched GPU work {} times (cudaLaunchKernel and kin, \
                 graph launches) but the trace records nothing GPU-side (no kernel, memcpy, \
                 memset or measured profiler-range event): that work is not metered; record \
                 with CUDA activities on (PyTorch: ProfilerActivity.CUDA)",
                c.launches
            ),
        ));
    } else if c.launches > kernels_recorded {
        // Every launch call makes at least one kernel (a graph launch several): fewer
        // kernels than launches is launched work the trace did not record.
        parsed.warnings.push(Warning::new(
            WarningCode::LaunchesWithoutGpuEvents,
            format!(
                "{name}: the CPU side launched GPU work {} times (cudaLaunchKernel and kin, \
                 graph launches) but the trace records {kernels_recorded} kernels (kernel \
                 events and measured profiler ranges, read or lost): at least {} launched \
                 kernels are not metered (kernel events left out or dropped, or more kernels \
                 than the CUPTI profiler's range limit)",
                c.launches,
                c.launches - kernels_recorded
            ),
        ));
    }
    records.sort_by_key(|r| (r.start_ns, r.end_ns));
    parsed.records = records;
    parsed.skipped = c.skipped;
    Ok(parsed)
}

/// What [`resolve_ranges`] made of a trace's measured kernel ranges.
#[derive(Default)]
struct RangeOutcome {
    /// Ranges taken as kernel launches (devices without kernel events).
    launches: u64,
    /// Ranges whose counts attached to a kernel event.
    attached: u64,
    /// Ranges on a device with kernel events that matched none (or could not be read): the
    /// first one's event index and why.
    unmatched: u64,
    first_unmatched: Option<(usize, String)>,
    /// Ranges with a FLOP meter's counters only in part.
    partial: u64,
    /// Ranges with a meter's total past `u64`.
    overflow: u64,
    /// Session-wide ranges taken as launches, and the first one's event index.
    sessions: u64,
    first_session: Option<usize>,
}

/// Resolves measured kernel ranges against the kernel events (`pending`), per device: on a
/// device with kernel events, the k-th range of a kernel name (in start order) gives its
/// counts to the k-th kernel of that name (in start order: the launch order, the profiler
/// having serialized them), so no kernel is counted twice and none gets two ranges' counts; a
/// range left over (or one that cannot be read, or has no name) is unmatched. On a device
/// without kernel events each range is one kernel launch (added to `pending`; one that cannot
/// be read is lost, `invalid_field`).
fn resolve_ranges(
    pending: &mut Vec<Pending<'static>>,
    ranges: Vec<Range>,
    invalid: &mut Vec<(Option<u32>, ImportError)>,
    launch_ts: &HashMap<u32, i128>,
) -> RangeOutcome {
    let mut out = RangeOutcome::default();
    if ranges.is_empty() {
        return out;
    }
    let kernel_name = |p: &Pending<'_>| match &p.rec.work {
        Work::Kernel(k) => Some(k.name.clone()),
        _ => None,
    };
    let with_kernels: HashSet<u32> = pending
        .iter()
        .filter(|p| kernel_name(p).is_some())
        .map(|p| p.device_id)
        .collect();
    // (device, name) → kernel events in launch (start) order.
    let mut kernels: HashMap<(u32, Arc<str>), Vec<usize>> = HashMap::new();
    for (i, p) in pending.iter().enumerate() {
        if let Some(Some(name)) = kernel_name(p) {
            kernels.entry((p.device_id, name)).or_default().push(i);
        }
    }
    // Launch order: the launch call's time where the trace has it (kernels of several
    // streams start on the GPU in another order than they were launched in, and the
    // profiler replays them in launch order), else the kernel's start.
    let launched = |p: &Pending<'_>| {
        p.correlation
            .and_then(|c| launch_ts.get(&c).copied())
            .unwrap_or(p.ts_ns)
    };
    for list in kernels.values_mut() {
        list.sort_by_key(|&i| (launched(&pending[i]), pending[i].ts_ns, pending[i].index));
    }
    // Range launches of a device are numbered in trace order as their correlation id: two
    // ranges alike in every field (Kineto gives ranges equal shares of the session, which
    // can be 0 µs) are two launches, not one record twice.
    let mut ordinal: HashMap<u32, u32> = HashMap::new();
    let mut matched: HashMap<(u32, Arc<str>), Vec<Pending<'static>>> = HashMap::new();
    // The warning names the first unmatched range in the trace, whatever order the
    // (name-keyed, hash-ordered) matching meets them in.
    let unmatched = |out: &mut RangeOutcome, index: usize, why: String| {
        out.unmatched += 1;
        if out.first_unmatched.as_ref().is_none_or(|(i, _)| index < *i) {
            out.first_unmatched = Some((index, why));
        }
    };
    for r in ranges {
        out.partial += u64::from(r.partial);
        out.overflow += u64::from(r.overflow);
        // The device the range is metered on when it becomes a launch: the parsed record's
        // own (`args.device` read as every record's, a numeric string included), so a range
        // is never a second launch beside a kernel of that device.
        let device = match &r.parsed {
            Ok(p) => Some(p.device_id),
            Err(_) => r.device_id,
        };
        let on_kernel_device = device.is_some_and(|d| with_kernels.contains(&d));
        match (r.parsed, on_kernel_device) {
            (Ok(mut p), false) => {
                out.launches += 1;
                if r.session {
                    out.sessions += 1;
                    out.first_session.get_or_insert(r.index);
                }
                let n = ordinal.entry(p.device_id).or_insert(0);
                *n = n.saturating_add(1);
                p.rec.correlation_id = *n;
                pending.push(p);
            }
            (Err(e), false) => invalid.push((r.device_id, e)),
            (Err(e), true) => unmatched(&mut out, r.index, e.to_string()),
            (Ok(p), true) => match kernel_name(&p).flatten() {
                Some(name) => matched.entry((p.device_id, name)).or_default().push(p),
                None => unmatched(&mut out, r.index, "the range names no kernel".to_string()),
            },
        }
    }
    for (key, mut list) in matched {
        list.sort_by_key(|p| (p.ts_ns, p.index));
        let targets = kernels.get(&key).map_or(&[][..], Vec::as_slice);
        for (n, r) in list.into_iter().enumerate() {
            let ops = match &r.rec.work {
                Work::Kernel(k) => k.op_counts(),
                _ => gpumeter_core::OpCounts::default(),
            };
            match targets.get(n) {
                Some(&t) => {
                    if let Work::Kernel(k) = &mut pending[t].rec.work {
                        k.set_op_counts(ops);
                    }
                    out.attached += 1;
                }
                None => unmatched(
                    &mut out,
                    r.index,
                    format!(
                        "the trace has {} kernel events named `{}` on device {}, fewer than \
                         its ranges of that name",
                        targets.len(),
                        shorten(&key.1),
                        key.0
                    ),
                ),
            }
        }
    }
    out
}

/// The warnings of a trace's measured kernel ranges.
fn range_warnings(
    name: &str,
    r: &RangeOutcome,
    range_pid: Option<u32>,
    launch_pids: usize,
    warnings: &mut Vec<Warning>,
) {
    if r.launches + r.attached > 0 {
        let how = match (r.launches, r.attached) {
            (l, 0) => format!(
                "{l} kernel launches are CUPTI-profiler ranges (`cuda_profiler_range`, no \
                 kernel events on their devices): their times are the ranges', which Kineto \
                 does not measure (it gives each range an equal share of the profiling \
                 session's span)"
            ),
            (0, a) => format!("{a} kernels carry the counters of their CUPTI-profiler range"),
            (l, a) => format!(
                "{l} kernel launches are CUPTI-profiler ranges (their times are the ranges', \
                 which Kineto does not measure: it gives each range an equal share of the \
                 profiling session's span) and {a} kernels carry their range's counters"
            ),
        };
        let who = match (r.launches, range_pid) {
            (0, _) => String::new(),
            (_, Some(pid)) => format!(
                "; ranges carry no correlation id, so their launches are given the process id \
                 of the trace's one launching process ({pid})"
            ),
            (_, None) => format!(
                "; ranges carry no correlation id and the trace has {launch_pids} launching \
                 processes, so their launches have no process id and a tenant map's [pid] \
                 rules cannot attribute them"
            ),
        };
        warnings.push(Warning::new(
            WarningCode::InstrumentedRun,
            format!(
                "{name}: an instrumented run (PyTorch profiler in CUPTI-profiler mode): {how}; \
                 kernel_ns, gpu_busy_ns and the other time meters describe the profiled run, \
                 not an unprofiled one, while flops_fp64, flops_fp32, flops_fp16 and tensor_ops \
                 are the counters' own{who}"
            ),
        ));
    }
    if let Some(index) = r.first_session {
        warnings.push(Warning::new(
            WarningCode::InstrumentedRun,
            format!(
                "{name}: {} CUPTI-profiler ranges are session-wide (`{SESSION_NAME}`, the first \
                 traceEvents[{index}]: PyTorch's profiler_measure_per_kernel=False): each is \
                 metered as one kernel launch spanning the session, so its FLOP and tensor \
                 counts are the session's, right, but kernel_launches and the time meters do not \
                 describe its kernels",
                r.sessions
            ),
        ));
    }
    if let Some((index, why)) = &r.first_unmatched {
        warnings.push(Warning::new(
            WarningCode::UnmatchedProfilerRanges,
            format!(
                "{name}: {} CUPTI-profiler ranges match no kernel event of their device (by \
                 name and launch order; the first, traceEvents[{index}]: {why}): their \
                 counters are not metered (counted in records.skipped as \
                 `cuda_profiler_range`)",
                r.unmatched
            ),
        ));
    }
    if r.partial > 0 {
        warnings.push(Warning::new(
            WarningCode::PartialOpCounters,
            format!(
                "{name}: {} CUPTI-profiler ranges record some but not all of a FLOP meter's \
                 counters (add, mul and fma of one precision): their kernels have no count of \
                 that meter",
                r.partial
            ),
        ));
    }
    if r.overflow > 0 {
        warnings.push(Warning::new(
            WarningCode::InstructionCountOverflow,
            format!(
                "{name}: {} CUPTI-profiler ranges have an operation count past 64 bits: their \
                 kernels have no count of that meter",
                r.overflow
            ),
        ));
    }
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

/// The record's absolute times: start = base + `ts`, end = start + duration. A raw
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
                ops: Default::default(),
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
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../../../shared/data/hta_alexnet_benchmark_result_2869224_1695835535_trace.json.gz",
        );
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
}
