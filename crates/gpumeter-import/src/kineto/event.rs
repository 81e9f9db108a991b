//! One trace event as read: its fields kept as the JSON text written ([`Event`],
//! [`RawEvent`]), an element of `traceEvents` that is no object ([`Element`]), what its
//! category makes of it ([`Class`]), and the `args` gpumeter reads ([`Args`]).

use std::borrow::{Borrow, Cow};
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::fault::{Duplicate, Fault};
use super::json::{raw_str, Checked, JStr, KeyIndex};
use crate::error::ImportError;
use crate::units::integer_text;

/// One trace event's fields, each kept as the JSON value written, of any type: a value of the
/// wrong type is a fault of that record, found when the record is read, never a parse error of
/// the whole file. A key given twice is noted in `duplicate` with both values (the first is
/// kept): such an event is ambiguous, and a GPU work event that has one is lost
/// (`invalid_field`). A view of a [`RawEvent`].
pub(super) struct Event<'a> {
    pub(super) ph: Option<&'a RawValue>,
    pub(super) cat: Option<&'a RawValue>,
    pub(super) name: Option<&'a RawValue>,
    pub(super) pid: Option<&'a RawValue>,
    pub(super) tid: Option<&'a RawValue>,
    pub(super) ts: Option<&'a RawValue>,
    pub(super) dur: Option<&'a RawValue>,
    pub(super) args: Option<&'a RawValue>,
    pub(super) duplicate: Option<Duplicate<'a>>,
}

/// The keys of [`Event`], in the order of its fields.
const EVENT_KEYS: [&str; 8] = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"];

/// A trace event as read: each field the JSON text written, either borrowed from the chunk of
/// text it was read from (`T` = `&RawValue`, the usual case) or owned (`T` = `Box<RawValue>`:
/// an open `B` event, kept past its chunk, and the replay that finds a fault's position). A
/// key given twice is noted in `duplicate` (its index in [`EVENT_KEYS`] and the second value;
/// the first is kept).
pub(super) struct RawEvent<T> {
    pub(super) fields: [Option<T>; 8],
    pub(super) duplicate: Option<(usize, T)>,
}

/// A trace event that owns its fields.
pub(super) type OwnedEvent = RawEvent<Box<RawValue>>;

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
    pub(super) fn view(&self) -> Event<'_> {
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
    pub(super) fn to_owned_event(&self) -> OwnedEvent {
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
    pub(super) fn settled(&self) -> bool {
        let (Some(ph), Some(cat)) = (self.fields[0].as_ref(), self.fields[1].as_ref()) else {
            return false;
        };
        let ph_done = raw_str(ph.borrow()).is_ok_and(|p| p != "B" && p != "E");
        ph_done
            && raw_str(cat.borrow())
                .is_ok_and(|c| matches!(classify(&c).0, Class::Ignored | Class::Skipped))
    }
}

/// An element of `traceEvents`: a trace event (a JSON object), or some other JSON value,
/// which is no event (its kind is kept for the warning).
pub(super) enum Element<T> {
    Event(RawEvent<T>),
    NotAnObject(&'static str),
}

/// A field of an event as kept: borrowed from the text or owned.
pub(super) trait Field<'de>: Deserialize<'de> + Borrow<RawValue> {
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

/// The `args` of an event that gpumeter reads. A key given twice is noted in `duplicate`
/// (the first value is kept), as for [`Event`]: [`parse_args`] refuses such args.
#[derive(Default)]
pub(super) struct Args<'a> {
    pub(super) device: Option<&'a RawValue>,
    pub(super) stream: Option<&'a RawValue>,
    pub(super) correlation: Option<&'a RawValue>,
    pub(super) context: Option<&'a RawValue>,
    pub(super) grid: Option<&'a RawValue>,
    pub(super) block: Option<&'a RawValue>,
    pub(super) registers_per_thread: Option<&'a RawValue>,
    pub(super) shared_memory: Option<&'a RawValue>,
    pub(super) bytes: Option<&'a RawValue>,
    /// Keys that are CUPTI metric names (they contain `__`: `smsp__sass_…`, `sm__ops_…`),
    /// with their values, in the order written: the counters of a `cuda_profiler_range`.
    pub(super) metrics: Vec<(Cow<'a, str>, &'a RawValue)>,
    pub(super) duplicate: Option<Duplicate<'a>>,
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

/// What an event's category makes of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Kernel,
    Memcpy,
    Memset,
    /// GPU-side, not work: counted as skipped.
    Skipped,
    /// CPU-side CUDA API call: source of the correlation → process id join.
    Api,
    /// A CUPTI-profiler range (`cuda_profiler_range`): with metric arguments, a measured
    /// kernel (`ranges::read_range`); without, counted as skipped.
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
pub(super) fn classify(cat: &str) -> (Class, &'static str) {
    let cat = cat.trim();
    CATEGORIES
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(cat))
        .map_or((Class::Ignored, ""), |&(known, class)| (class, known))
}

/// The class of an event's category, when it has one that is a string.
pub(super) fn class_of(ev: &Event<'_>) -> Option<Class> {
    ev.cat.and_then(|c| raw_str(c).ok()).map(|c| classify(&c).0)
}

/// Whether events of this class are GPU work.
pub(super) fn is_work(class: Class) -> bool {
    matches!(class, Class::Kernel | Class::Memcpy | Class::Memset)
}

/// An event's `args` (an object, `null` or absent). Only a JSON object: serde would read an
/// array into the struct's fields by position. A key gpumeter reads given twice is a fault of
/// that field (`args.device`), naming both values.
pub(super) fn parse_args<'a>(
    f: &Fault<'_>,
    raw: Option<&'a RawValue>,
) -> Result<Args<'a>, ImportError> {
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
pub(super) fn read_args<'a>(
    f: &Fault<'_>,
    raw: Option<&'a RawValue>,
) -> Result<Args<'a>, ImportError> {
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
pub(super) fn names_a_device(f: &Fault<'_>, ev: &Event<'_>) -> bool {
    read_args(f, ev.args).is_ok_and(|a| a.device.is_some_and(|d| d.get() != "null"))
}

/// The device a work event names, as far as it can be told: `args.device` when it is a
/// device id, else (no `args.device`) the event's `pid`. `None` when neither tells it.
pub(super) fn device_hint(ev: &Event<'_>, args: &Args<'_>) -> Option<u32> {
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
