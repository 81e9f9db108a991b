//! The collector: receives the trace events in order as the document is read, dispatches
//! each by phase and category (GPU work, CPU-side API calls, profiler ranges, skipped), pairs
//! `B`/`E` events, and keeps what [`super::finish`] turns into records.

use std::borrow::{Borrow, Cow};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde_json::value::RawValue;

use super::cpu::CpuSide;
use super::event::{
    class_of, classify, device_hint, is_work, names_a_device, parse_args, Args, Class, Element,
    Event, OwnedEvent, RawEvent,
};
use super::fault::Fault;
use super::gpu::{work_event, KernelNames, Pending};
use super::json::raw_str;
use super::ranges::{read_range, Range};
use crate::error::{ImportError, RecordLocation};

/// The key a `B` and its `E` are paired on, from a `pid` or `tid`: a string's content and a
/// number's text are the same key (`"0"` and `0`), as Chrome trace viewers pair them; any
/// other value (`null`, an array, a string that is not valid Unicode) by its JSON text.
#[derive(Hash, PartialEq, Eq)]
pub(super) enum PairKey {
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

/// A `B` (begin) event waiting for its `E` on the same `pid` and `tid`.
pub(super) struct Open {
    pub(super) index: usize,
    pub(super) class: Class,
    pub(super) event: OwnedEvent,
}

/// Receives the trace events as the JSON parser meets them, so a trace is read in one pass, as
/// a stream, holding only the GPU work events it keeps (and open `B` events), and the
/// top-level values [`super::finish`] needs. Built by [`super::read_events`], turned into
/// records by [`super::finish`].
pub(crate) struct Collector<'p> {
    pub(super) path: &'p Path,
    pub(super) base: Option<Box<RawValue>>,
    pub(super) device_properties: Option<Box<RawValue>>,
    pub(super) next_index: usize,
    pub(super) pending: Vec<Pending<'static>>,
    /// GPU work events lost to a field that cannot be represented: (device id when the event
    /// tells it, the fault).
    pub(super) invalid: Vec<(Option<u32>, ImportError)>,
    pub(super) skipped: BTreeMap<String, u64>,
    /// Kernel names, and how many were not valid Unicode (metered without a name).
    pub(super) names: KernelNames,
    /// Open `B` events per (`pid`, `tid`) ([`pair_key`]), innermost last.
    pub(super) open: HashMap<(PairKey, PairKey), Vec<Open>>,
    /// The first element of `traceEvents` that is not an object: (index, its JSON type).
    pub(super) not_objects: Option<(usize, &'static str)>,
    /// Strings cut by the string cap (set once the stream is read).
    pub(super) cut_strings: u64,
    /// `cuda_profiler_range` events with metric arguments, in trace order.
    pub(super) ranges: Vec<Range>,
    /// The CPU-side CUDA API events: correlation → process id, launch calls.
    pub(super) cpu: CpuSide,
}

impl<'p> Collector<'p> {
    /// A collector of the events of the file `path`, none read yet.
    pub(super) fn new(path: &'p Path) -> Self {
        Collector {
            path,
            base: None,
            device_properties: None,
            next_index: 0,
            pending: Vec::new(),
            invalid: Vec::new(),
            skipped: BTreeMap::new(),
            names: KernelNames::default(),
            open: HashMap::new(),
            not_objects: None,
            cut_strings: 0,
            ranges: Vec::new(),
            cpu: CpuSide::default(),
        }
    }
}

impl Collector<'_> {
    pub(super) fn fault(&self, index: usize) -> Fault<'_> {
        Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        }
    }

    /// Counts one event in `records.skipped` under `category`.
    pub(super) fn skip(&mut self, category: &str) {
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
        let (class, cat) = self.category(index, &ph, &ev);
        if ph == "B" {
            self.begin(index, class, &ev, &owned);
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

    /// What the category of event `index` (of phase `ph`) makes of it, and the category as
    /// written; events skipped by their category are counted here.
    fn category<'e>(&mut self, index: usize, ph: &str, ev: &Event<'e>) -> (Class, Cow<'e, str>) {
        match ev.cat.map(raw_str) {
            None => {
                // No category: not known to be GPU work, but a complete or begin event that
                // names a device must not vanish (counted, and a warning says how many).
                if matches!(ph, "X" | "B") && names_a_device(&self.fault(index), ev) {
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
        }
    }

    /// A `B` (begin) event: opened on its `pid` and `tid` (whatever its category, so that its
    /// `E` closes it and not an enclosing work `B`), or, without them, a work event lost.
    fn begin<T: Borrow<RawValue>>(
        &mut self,
        index: usize,
        class: Class,
        ev: &Event<'_>,
        owned: &RawEvent<T>,
    ) {
        // Every B with a pid and tid is opened, whatever its category, so that its E closes
        // it and not an enclosing work B.
        if let (Some(pid), Some(tid)) = (ev.pid, ev.tid) {
            if class == Class::Api {
                self.api(index, ev);
            }
            let key = (pair_key(pid), pair_key(tid));
            self.open.entry(key).or_default().push(Open {
                index,
                class,
                event: owned.to_owned_event(),
            });
            return;
        }
        if is_work(class) {
            let e = self.fault(index).err(
                "ph",
                "B",
                "a B (begin) event without `pid` and `tid` cannot be paired with its E",
            );
            self.lose(ev, e);
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
        let f = Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        };
        self.cpu.api(&f, ev);
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
            None => work_event(&f, ev, end, &args, class, &mut self.names),
        };
        match result {
            Ok(p) => self.pending.push(p.into_owned()),
            Err(e) => self.invalid.push((device_hint(ev, &args), e)),
        }
    }

    /// A `cuda_profiler_range` complete event (or a `B` event `ev` closed by `end`): with
    /// CUPTI metric arguments a measured kernel range, kept for `finish` (which makes it a
    /// launch, or attaches its counts to its kernel); without, counted as skipped.
    fn range(&mut self, index: usize, ev: &Event<'_>, end: Option<&Event<'_>>) {
        let f = Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        };
        match read_range(&f, index, ev, end, &mut self.names) {
            Some(r) => self.ranges.push(r),
            None => self.skip("cuda_profiler_range"),
        }
    }

    /// Loses a work event that cannot be read at all, on the device it names if it does.
    pub(super) fn lose(&mut self, ev: &Event<'_>, fault: ImportError) {
        let f = Fault {
            path: self.path,
            record: RecordLocation::TopLevel,
        };
        let args = parse_args(&f, ev.args).unwrap_or_default();
        self.invalid.push((device_hint(ev, &args), fault));
    }

    /// One element of `traceEvents`, in order.
    pub(super) fn element<T: Borrow<RawValue>>(
        &mut self,
        el: Element<T>,
    ) -> Result<(), ImportError> {
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

/// The `records.skipped` category of complete and begin events without a `cat` whose `args`
/// name a device: not known to be GPU work, so not metered, but counted and warned about.
pub(super) const NO_CATEGORY_WITH_DEVICE: &str = "no_category_with_device";

/// The `records.skipped` category of elements of `traceEvents` that are not JSON objects.
pub(super) const NOT_AN_EVENT_OBJECT: &str = "not_an_event_object";
