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
//!   `Trace`. Everything else (CPU-side events, flows, metadata) is ignored and not counted.
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

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

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

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, default)]
    ph: Option<JStr<'a>>,
    #[serde(borrow, default)]
    cat: Option<JStr<'a>>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    dur: Option<&'a RawValue>,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Args<'a> {
    #[serde(borrow, default)]
    device: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    correlation: Option<&'a RawValue>,
    #[serde(borrow, default)]
    context: Option<&'a RawValue>,
    #[serde(borrow, default)]
    grid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    block: Option<&'a RawValue>,
    #[serde(rename = "registers per thread", borrow, default)]
    registers_per_thread: Option<&'a RawValue>,
    #[serde(rename = "shared memory", borrow, default)]
    shared_memory: Option<&'a RawValue>,
    #[serde(borrow, default)]
    bytes: Option<&'a RawValue>,
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

fn classify(cat: &str) -> Class {
    match cat {
        "kernel" | "Kernel" => Class::Kernel,
        "gpu_memcpy" | "Memcpy" => Class::Memcpy,
        "gpu_memset" | "Memset" => Class::Memset,
        "gpu_user_annotation" | "cuda_sync" | "cuda_profiler_range" | "Trace" => Class::Skipped,
        "cuda_runtime" | "cuda_driver" | "Runtime" | "Driver" => Class::Api,
        _ => Class::Ignored,
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

    fn string_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<String>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        if raw.get() == "null" {
            return Ok(None);
        }
        serde_json::from_str::<String>(raw.get())
            .map(Some)
            .map_err(|_| self.err(field, raw.get(), "expected a string"))
    }
}

/// A stream id from `args.stream` or `tid`: CUPTI stream ids are `u32`; a negative id (Kineto
/// writes −1 for device-wide syncs) is taken modulo 2³² so that it still tells records apart.
fn stream_from(v: i128) -> u32 {
    (v as i64) as u32
}

/// Parses the `tid` of a GPU event as a stream: `7`, `"7"` or `"stream 7"`.
fn stream_from_tid(raw: &RawValue) -> Option<u32> {
    let t = raw.get();
    if let Ok(v) = integer_text(t) {
        return Some(stream_from(v));
    }
    let s: String = serde_json::from_str(t).ok()?;
    let s = s.trim();
    let digits = s.strip_prefix("stream").map(str::trim).unwrap_or(s);
    integer_text(digits).ok().map(stream_from)
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
    /// `ts` as written, for messages.
    ts_text: Cow<'de, str>,
    /// `ts` in ns (relative to the base when there is one).
    ts_ns: i128,
    dur_text: Cow<'de, str>,
    dur_ns: i128,
    /// The record with `start_ns`/`end_ns` still 0 and a placeholder device.
    rec: ActivityRecord,
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

/// Receives the top-level keys and the trace events as the JSON parser meets them, so a trace
/// is read in one pass without holding its events.
struct Collector<'de, 'p> {
    path: &'p Path,
    stage: Stage,
    saw_events: bool,
    base: Option<&'de RawValue>,
    device_properties: Option<&'de RawValue>,
    /// The first fault met inside an event; the parse is then aborted.
    failure: Option<ImportError>,
    next_index: usize,
    pending: Vec<Pending<'de>>,
    skipped: BTreeMap<String, u64>,
    pid_of_correlation: HashMap<u32, u32>,
    names: HashMap<String, Arc<str>>,
}

impl<'de> Collector<'de, '_> {
    fn event(&mut self, index: usize, ev: Event<'de>) -> Result<(), ImportError> {
        let Some(cat) = ev.cat.as_ref() else {
            return Ok(());
        };
        let class = classify(&cat.0);
        if class == Class::Ignored || ev.ph.as_ref().is_some_and(|p| p.0 != "X") {
            return Ok(());
        }
        if class == Class::Skipped {
            *self.skipped.entry(cat.0.to_string()).or_insert(0) += 1;
            return Ok(());
        }
        let f = Fault {
            path: self.path,
            record: RecordLocation::TraceEvent(index),
        };
        let args: Args<'_> = match ev.args {
            None => Args::default(),
            Some(raw) if raw.get() == "null" => Args::default(),
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|e| f.err("args", raw.get(), format!("not an args object: {e}")))?,
        };
        if class == Class::Api {
            let corr = f.u32_opt("args.correlation", args.correlation)?;
            let pid = ev
                .pid
                .and_then(|p| integer_text(p.get()).ok())
                .and_then(|p| u32::try_from(p).ok());
            if let (Some(c), Some(p)) = (corr, pid) {
                self.pid_of_correlation.insert(c, p);
            }
            return Ok(());
        }
        let p = work_event(&f, index, &ev, &args, class, &mut self.names)?;
        self.pending.push(p);
        Ok(())
    }
}

struct TopSeed<'c, 'de, 'p>(&'c mut Collector<'de, 'p>);

impl<'de> DeserializeSeed<'de> for TopSeed<'_, 'de, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TopSeed<'_, 'de, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with a `traceEvents` array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let c = self.0;
        c.stage = Stage::InObject;
        while let Some(key) = map.next_key::<JStr<'de>>()? {
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

struct EventsSeed<'c, 'de, 'p>(&'c mut Collector<'de, 'p>);

impl<'de> DeserializeSeed<'de> for EventsSeed<'_, 'de, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for EventsSeed<'_, 'de, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let c = self.0;
        c.stage = Stage::InEvents;
        while let Some(ev) = seq.next_element::<Event<'de>>()? {
            let index = c.next_index;
            c.next_index += 1;
            if let Err(e) = c.event(index, ev) {
                c.failure = Some(e);
                return Err(de::Error::custom("aborted at a faulty trace event"));
            }
        }
        Ok(())
    }
}

/// Parses a whole Kineto trace (already decompressed) without touching any meter. `path`
/// names the file in errors; `key_label` is what keys of devices without a UUID are built
/// from ([`DeviceInfo::source_key`]).
pub(crate) fn parse(path: &Path, key_label: &str, text: &[u8]) -> Result<Parsed, ImportError> {
    // A UTF-8 byte-order mark is not JSON; skip it (positions then count from after it).
    let body = text.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(text);
    let mut c = Collector {
        path,
        stage: Stage::Top,
        saw_events: false,
        base: None,
        device_properties: None,
        failure: None,
        next_index: 0,
        pending: Vec::new(),
        skipped: BTreeMap::new(),
        pid_of_correlation: HashMap::new(),
        names: HashMap::new(),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let result = TopSeed(&mut c).deserialize(&mut de).and_then(|()| de.end());
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

    let top = Fault {
        path,
        record: RecordLocation::TopLevel,
    };
    let base_ns: i128 = match top.int_opt("baseTimeNanoseconds", c.base)? {
        None => 0,
        Some(v) if v >= 0 => v,
        Some(v) => {
            return Err(top.err(
                "baseTimeNanoseconds",
                &v.to_string(),
                "negative: before the Unix epoch",
            ))
        }
    };
    let props = parse_device_properties(path, key_label, c.device_properties)?;
    let pids = c.pid_of_correlation;

    // Devices in order of first activity; records carry local indices until committed.
    let mut parsed = Parsed::default();
    let mut local: HashMap<u32, u32> = HashMap::new();
    let mut records = Vec::with_capacity(c.pending.len());
    for p in c.pending {
        let f = Fault {
            path,
            record: RecordLocation::TraceEvent(p.index),
        };
        let outcome = absolute_times(&f, &p, base_ns)?;
        let slot = match local.get(&p.device_id) {
            Some(&s) => s,
            None => {
                let info = props.get(&p.device_id).cloned().unwrap_or_else(|| {
                    DeviceInfo::bare(DeviceInfo::source_key(key_label, p.device_id), p.device_id)
                });
                let s = parsed.devices.len() as u32;
                parsed.devices.push(info);
                local.insert(p.device_id, s);
                s
            }
        };
        match outcome {
            None => parsed
                .losses
                .push((DeviceSlot(slot), LossReason::EndBeforeStart)),
            Some((start_ns, end_ns)) => {
                let mut rec = p.rec;
                rec.start_ns = start_ns;
                rec.end_ns = end_ns;
                rec.device = DeviceSlot(slot);
                rec.process_id = p.correlation.and_then(|k| pids.get(&k).copied());
                records.push(rec);
            }
        }
    }
    records.sort_by_key(|r| (r.start_ns, r.end_ns));
    parsed.records = records;
    parsed.skipped = c.skipped;
    Ok(parsed)
}

/// The record's absolute (start, end) in ns, or `None` for a negative duration (loss
/// `end_before_start`). A raw `ts` of 0 means "not recorded" (DESIGN §3): (0, 0), which the
/// meter counts as `zero_timestamp`.
///
/// # Errors
/// [`ImportError::BadField`] when a time falls outside `u64` ns since the epoch.
fn absolute_times(
    f: &Fault<'_>,
    p: &Pending<'_>,
    base_ns: i128,
) -> Result<Option<(u64, u64)>, ImportError> {
    if text_is_zero(&p.ts_text) {
        return Ok(Some((0, 0)));
    }
    let start =
        to_epoch_ns(base_ns.checked_add(p.ts_ns)).map_err(|r| f.err("ts", &p.ts_text, r))?;
    if p.dur_ns < 0 {
        return Ok(None);
    }
    let end = to_epoch_ns(i128::from(start).checked_add(p.dur_ns))
        .map_err(|r| f.err("dur", &p.dur_text, r))?;
    Ok(Some((start, end)))
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

/// One GPU work event (kernel, memcpy, memset) to a pending record.
fn work_event<'de>(
    f: &Fault<'_>,
    index: usize,
    ev: &Event<'de>,
    args: &Args<'_>,
    class: Class,
    names: &mut HashMap<String, Arc<str>>,
) -> Result<Pending<'de>, ImportError> {
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
    let ts_text = ev
        .ts
        .map(|r| f.number_text("ts", r))
        .transpose()?
        .flatten()
        .ok_or_else(|| f.err("ts", "", "missing"))?;
    let dur_text = ev
        .dur
        .map(|r| f.number_text("dur", r))
        .transpose()?
        .flatten()
        .ok_or_else(|| f.err("dur", "", "missing"))?;
    let ts_ns = micros_text_to_ns(&ts_text).map_err(|e| f.err("ts", &ts_text, e))?;
    let dur_ns = micros_text_to_ns(&dur_text).map_err(|e| f.err("dur", &dur_text, e))?;
    let correlation = f.u32_opt("args.correlation", args.correlation)?;

    let work = match class {
        Class::Kernel => {
            let name = match ev.name {
                Some(raw) => f.string_opt("name", Some(raw))?.map(|n| {
                    names
                        .entry(n)
                        .or_insert_with_key(|k| Arc::from(k.as_str()))
                        .clone()
                }),
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
    let stream_id = match f.int_opt("args.stream", args.stream)? {
        Some(s) => stream_from(s),
        None => ev.tid.and_then(stream_from_tid).unwrap_or(0),
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
        ts_text,
        ts_ns,
        dur_text,
        dur_ns,
        rec,
    })
}

/// `deviceProperties` → device id → device info (key: `GPU-<uuid>` when the entry has a UUID,
/// else `<key_label>#<id>`). A device id listed twice keeps its first entry.
fn parse_device_properties(
    path: &Path,
    key_label: &str,
    raw: Option<&RawValue>,
) -> Result<HashMap<u32, DeviceInfo>, ImportError> {
    let mut out = HashMap::new();
    let Some(raw) = raw else { return Ok(out) };
    if raw.get() == "null" {
        return Ok(out);
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
        out.entry(id).or_insert(info);
    }
    Ok(out)
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
        let t = |s: &str| raw(s).and_then(|r| stream_from_tid(&r));
        assert_eq!(t("7"), Some(7));
        assert_eq!(t("\"stream 7\""), Some(7));
        assert_eq!(t("\"stream 7 \""), Some(7));
        assert_eq!(t("-1"), Some(u32::MAX));
        assert_eq!(t("\"PyTorch Profiler\""), None);
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
