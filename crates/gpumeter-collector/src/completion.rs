//! What happens to a buffer CUPTI hands back, as plain Rust (testable without CUPTI).
//!
//! [`Core`] owns the [`BufferPool`] and the current [`Session`] (a [`CompletionSink`] and what
//! the collector learned so far). The C callbacks of the collector are thin wrappers around
//! [`Core::request`] and [`Core::complete`]:
//!
//! * **request**: lend a pooled, zeroed buffer. A panic is caught, reported, and the request
//!   is served anyway: CUPTI is never handed a NULL buffer.
//! * **complete**: book the dropped-record delta the callback read (outside every lock of
//!   this module), take the buffer back from the pool (a pointer the pool did not lend, or a
//!   second completion of the same buffer, is reported and neither read nor freed), walk its
//!   records with the producer's layouts to copy the kernel and device names they point to
//!   *while the buffer is live*, then hand the names and the raw bytes to the sink, and give
//!   the buffer back to the pool whatever happened. A panic or sink error is caught, counted
//!   and reported at stop; the buffer still goes back to the pool.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::pool::{lock, BufferPool, Lent, PoolStats};
use super::sink::CompletionSink;
use gpumeter_cupti::decode::{DeviceRecord, Record, Walk};
use gpumeter_cupti::layout::ApiVersion;
use gpumeter_recording::gmr::{
    AttributionEvent, DroppedRecords, EnergySample, GmrDevice, GmrError, GmrHeader, StringTable,
};

/// Reads the NUL-terminated string a producer pointer points to, in this process.
pub(crate) trait NameReader {
    /// The string at `ptr`, copied; `None` when it cannot be read (NULL).
    fn read(&self, ptr: u64) -> Option<String>;
}

/// Panic and error messages kept for the stop report (at most this many of each).
const KEEP_MESSAGES: usize = 32;

/// One recording: the sink and what the collector learned about the producer so far.
pub(crate) struct Session {
    /// Layouts of the buffers (the producer's `cuptiGetVersion()`).
    pub(crate) api: ApiVersion,
    /// The header given to the sink at the start.
    pub(crate) header: GmrHeader,
    /// Where buffers go.
    pub(crate) sink: Box<dyn CompletionSink>,
    /// The text last written for each name pointer (a pointer may be reused for another name
    /// once CUPTI freed the first, so a changed text is written again).
    names: HashMap<u64, String>,
    /// Devices from DEVICE records, by CUDA ordinal (the latest record wins).
    devices: BTreeMap<u32, GmrDevice>,
}

impl Session {
    /// A session writing to `sink`, whose buffers are laid out by `api`.
    pub(crate) fn new(api: ApiVersion, header: GmrHeader, sink: Box<dyn CompletionSink>) -> Self {
        Session {
            api,
            header,
            sink,
            names: HashMap::new(),
            devices: BTreeMap::new(),
        }
    }

    /// Devices seen in DEVICE records, by CUDA ordinal.
    pub(crate) fn devices(&self) -> &BTreeMap<u32, GmrDevice> {
        &self.devices
    }
}

#[derive(Default)]
struct Counters {
    completed: AtomicU64,
    written: AtomicU64,
    bytes: AtomicU64,
    records: AtomicU64,
    kernels: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    discarded: AtomicU64,
    unknown: AtomicU64,
    decode_errors: AtomicU64,
}

#[derive(Default)]
struct Problems {
    panics: Vec<String>,
    errors: Vec<String>,
    more_panics: u64,
    more_errors: u64,
}

/// A snapshot of a session's counters and problems (see [`Core::tally`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Buffers CUPTI completed (including unknown and discarded ones).
    pub(crate) completed: u64,
    /// Buffers the sink accepted.
    pub(crate) written: u64,
    /// Valid bytes of the buffers the sink accepted.
    pub(crate) bytes: u64,
    /// Records in the buffers the sink accepted.
    pub(crate) records: u64,
    /// KERNEL and CONCURRENT_KERNEL records among them.
    pub(crate) kernels: u64,
    /// Dropped records CUPTI reported (sum of the deltas).
    pub(crate) dropped: u64,
    /// Buffers whose delivery failed (a panic or a sink error): their records are missing.
    pub(crate) failed: u64,
    /// Buffers completed while no session was open: not recorded.
    pub(crate) discarded: u64,
    /// Completions of pointers the pool had not lent, or had already got back: ignored.
    pub(crate) unknown: u64,
    /// Buffers that did not walk to their end with the session's layouts (still recorded
    /// whole; names after the fault were not copied).
    pub(crate) decode_errors: u64,
    /// The pool's counters.
    pub(crate) pool: PoolStats,
    /// Messages of panics caught in callbacks (at most 32, then a count).
    pub(crate) panics: Vec<String>,
    /// Other problems (at most 32, then a count).
    pub(crate) errors: Vec<String>,
}

/// The pool, the current session and the counters behind the collector's callbacks.
pub(crate) struct Core {
    pool: BufferPool,
    session: Mutex<Option<Session>>,
    counters: Counters,
    problems: Mutex<Problems>,
    /// Test hook: this many next requests panic before lending.
    #[cfg(test)]
    pub(crate) panic_requests: std::sync::atomic::AtomicU32,
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

impl Core {
    /// A core lending buffers of `buffer_bytes` and keeping at most `keep` free ones.
    pub(crate) fn new(buffer_bytes: usize, keep: usize) -> Core {
        Core {
            pool: BufferPool::new(buffer_bytes, keep),
            session: Mutex::new(None),
            counters: Counters::default(),
            problems: Mutex::new(Problems::default()),
            #[cfg(test)]
            panic_requests: std::sync::atomic::AtomicU32::new(0),
        }
    }

    /// The buffer pool.
    pub(crate) fn pool(&self) -> &BufferPool {
        &self.pool
    }

    /// Starts a session: the sink writes the header, then completions go to it. Counters and
    /// problems start from zero.
    ///
    /// # Errors
    /// The sink's error when it cannot begin (its [`CompletionSink::abort`] is called and the
    /// session dropped), or when a session is already open.
    pub(crate) fn begin(&self, mut session: Session) -> Result<(), GmrError> {
        if lock(&self.session).is_some() {
            return Err(GmrError::Write(
                "a recording session is already open".to_string(),
            ));
        }
        if let Err(e) = session.sink.begin(&session.header) {
            session.sink.abort();
            return Err(e);
        }
        let c = &self.counters;
        for a in [
            &c.completed,
            &c.written,
            &c.bytes,
            &c.records,
            &c.kernels,
            &c.dropped,
            &c.failed,
            &c.discarded,
            &c.unknown,
            &c.decode_errors,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        *lock(&self.problems) = Problems::default();
        *lock(&self.session) = Some(session);
        Ok(())
    }

    /// Ends the session: later completions are discarded (and counted).
    pub(crate) fn end(&self) -> Option<Session> {
        lock(&self.session).take()
    }

    /// Records a caught panic.
    pub(crate) fn panicked(&self, during: &str, payload: &(dyn Any + Send)) {
        let msg = format!("panic during {during}: {}", panic_message(payload));
        let mut p = lock(&self.problems);
        if p.panics.len() < KEEP_MESSAGES {
            p.panics.push(msg);
        } else {
            p.more_panics += 1;
        }
    }

    /// Records a problem for the stop report.
    pub(crate) fn error(&self, msg: String) {
        let mut p = lock(&self.problems);
        if p.errors.len() < KEEP_MESSAGES {
            p.errors.push(msg);
        } else {
            p.more_errors += 1;
        }
    }

    /// Serves CUPTI's request for a buffer: never NULL, even after a panic.
    pub(crate) fn request(&self) -> Lent {
        let first = catch_unwind(AssertUnwindSafe(|| {
            #[cfg(test)]
            self.test_fault();
            self.pool.lend()
        }));
        match first {
            Ok(lent) => lent,
            Err(p) => {
                self.panicked("an activity-buffer request", p.as_ref());
                self.pool.lend()
            }
        }
    }

    #[cfg(test)]
    fn test_fault(&self) {
        let n = &self.panic_requests;
        if n.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1))
            .is_ok()
        {
            panic!("injected request panic");
        }
    }

    /// Handles a completed buffer (see the module docs). `dropped` is the delta the callback
    /// read from CUPTI before calling this (outside every lock here), or why it could not.
    pub(crate) fn complete(
        &self,
        ptr: *mut u8,
        valid: usize,
        dropped: Result<Option<DroppedRecords>, String>,
        names: &dyn NameReader,
    ) {
        self.counters.completed.fetch_add(1, Ordering::Relaxed);
        match dropped {
            Ok(Some(d)) if d.count > 0 => self.dropped(d),
            Ok(_) => {}
            Err(e) => self.error(e),
        }
        let Some(owned) = self.pool.reclaim(ptr) else {
            self.counters.unknown.fetch_add(1, Ordering::Relaxed);
            self.error(format!(
                "CUPTI completed a buffer gpumeter did not lend or already got back \
                 ({valid} valid bytes): ignored, not freed"
            ));
            return;
        };
        let len = owned.len_bytes();
        if valid > len {
            self.error(format!(
                "CUPTI reported {valid} valid bytes in a buffer of {len}: the first {len} are \
                 recorded"
            ));
        }
        let bytes = owned.bytes().get(..valid.min(len)).unwrap_or(&[]);
        let delivered = catch_unwind(AssertUnwindSafe(|| self.deliver(bytes, names)));
        if let Err(p) = delivered {
            self.counters.failed.fetch_add(1, Ordering::Relaxed);
            self.panicked("an activity-buffer completion", p.as_ref());
        }
        // Whatever happened, the buffer goes back (a panic in `recycle` would only leak it).
        let _ = catch_unwind(AssertUnwindSafe(|| self.pool.recycle(owned)));
    }

    /// Books a dropped-record delta: counted, and written to the sink.
    pub(crate) fn dropped(&self, d: DroppedRecords) {
        self.counters.dropped.fetch_add(d.count, Ordering::Relaxed);
        self.with_sink("a dropped-records count", |s| s.dropped(&d));
    }

    /// Writes an attribution event to the sink.
    pub(crate) fn attribution(&self, e: &AttributionEvent) {
        self.with_sink("an attribution event", |s| s.attribution(e));
    }

    /// Writes the instruction counts of one launch to the sink (instrumented mode).
    pub(crate) fn instructions(&self, c: &gpumeter_recording::gmr::InstructionCounts) {
        let _ = self.with_sink("instruction counts", |s| s.instructions(c));
    }

    /// Writes an energy sample to the sink; `true` when the sink took it (else the problem
    /// is recorded for the stop report).
    pub(crate) fn energy(&self, s: &EnergySample) -> bool {
        self.with_sink("an energy sample", |sink| sink.energy(s))
    }

    /// Writes a frame of PM samples to the sink; `true` when the sink took it (else the
    /// problem is recorded for the stop report).
    pub(crate) fn pm_samples(&self, s: &gpumeter_recording::gmr::PmSamples) -> bool {
        self.with_sink("PM samples", |sink| sink.pm_samples(s))
    }

    /// Writes a frame of operation counters to the sink; `true` when the sink took it (else
    /// the problem is recorded for the stop report).
    pub(crate) fn op_counts(&self, c: &gpumeter_recording::gmr::OpCounters) -> bool {
        self.with_sink("operation counters", |sink| sink.op_counts(c))
    }

    /// Runs `f` on the open session's sink, catching panics and reporting errors; `true` when
    /// `f` succeeded.
    fn with_sink(
        &self,
        what: &str,
        f: impl FnOnce(&mut dyn CompletionSink) -> Result<(), GmrError>,
    ) -> bool {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut guard = lock(&self.session);
            match guard.as_mut() {
                Some(s) => f(s.sink.as_mut()).map_err(|e| e.to_string()),
                None => Err("no recording is open".to_string()),
            }
        }));
        match r {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                self.error(format!("could not record {what}: {e}"));
                false
            }
            Err(p) => {
                self.panicked(&format!("recording {what}"), p.as_ref());
                false
            }
        }
    }

    fn deliver(&self, bytes: &[u8], names: &dyn NameReader) {
        if bytes.is_empty() {
            // CUPTI hands back unused buffers at a flush: nothing to record.
            return;
        }
        let api = match lock(&self.session).as_ref() {
            Some(s) => s.api,
            None => {
                self.counters.discarded.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        // Walk and copy names without holding the session lock.
        let scan = scan(bytes, api, names);
        if let Some(e) = &scan.decode_error {
            self.counters.decode_errors.fetch_add(1, Ordering::Relaxed);
            self.error(format!(
                "an activity buffer of {} bytes does not walk with {api}: {e}; recorded whole, \
                 names after that point not copied",
                bytes.len()
            ));
        }
        let mut guard = lock(&self.session);
        let Some(session) = guard.as_mut() else {
            self.counters.discarded.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut table = StringTable::new();
        for (ptr, text) in &scan.names {
            if session.names.get(ptr) != Some(text) {
                table.insert(*ptr, text.clone());
            }
        }
        for d in scan.devices {
            session.devices.insert(d.id, d);
        }
        match session.sink.buffer(&table, bytes) {
            Ok(()) => {
                // Only names that reached the sink count as written.
                session.names.extend(table.entries);
                let c = &self.counters;
                c.written.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                c.records.fetch_add(scan.records, Ordering::Relaxed);
                c.kernels.fetch_add(scan.kernels, Ordering::Relaxed);
            }
            Err(e) => {
                drop(guard);
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                self.error(format!(
                    "could not record an activity buffer ({} bytes, {} records): {e}",
                    bytes.len(),
                    scan.records
                ));
            }
        }
    }

    /// The counters and problems of the current (or last) session.
    pub(crate) fn tally(&self) -> Tally {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let p = lock(&self.problems);
        let mut panics = p.panics.clone();
        if p.more_panics > 0 {
            panics.push(format!("… and {} more panics", p.more_panics));
        }
        let mut errors = p.errors.clone();
        if p.more_errors > 0 {
            errors.push(format!("… and {} more problems", p.more_errors));
        }
        Tally {
            completed: get(&c.completed),
            written: get(&c.written),
            bytes: get(&c.bytes),
            records: get(&c.records),
            kernels: get(&c.kernels),
            dropped: get(&c.dropped),
            failed: get(&c.failed),
            discarded: get(&c.discarded),
            unknown: get(&c.unknown),
            decode_errors: get(&c.decode_errors),
            pool: self.pool.stats(),
            panics,
            errors,
        }
    }
}

/// What walking one buffer found.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) records: u64,
    pub(crate) kernels: u64,
    /// Name pointer → text, for kernel and device names.
    pub(crate) names: BTreeMap<u64, String>,
    pub(crate) devices: Vec<GmrDevice>,
    pub(crate) decode_error: Option<gpumeter_cupti::decode::DecodeError>,
}

/// Walks `bytes` with the layouts of `api`: counts records and kernels, copies the names
/// kernel and device records point to (each distinct pointer read once), and collects
/// devices. Stops at the first fault (reported in [`Scan::decode_error`]).
pub(crate) fn scan(bytes: &[u8], api: ApiVersion, names: &dyn NameReader) -> Scan {
    let mut out = Scan::default();
    let mut ptrs = BTreeSet::new();
    let mut devices: Vec<DeviceRecord> = Vec::new();
    for r in Walk::new(bytes, api) {
        let rec = match r {
            Ok(rec) => rec,
            Err(e) => {
                out.decode_error = Some(e);
                break;
            }
        };
        out.records += 1;
        match rec.record {
            Record::Kernel(k) => {
                out.kernels += 1;
                if k.name_ptr != 0 {
                    ptrs.insert(k.name_ptr);
                }
            }
            Record::Device(d) => {
                if d.name_ptr != 0 {
                    ptrs.insert(d.name_ptr);
                }
                devices.push(*d);
            }
            _ => {}
        }
    }
    for p in ptrs {
        if let Some(text) = names.read(p) {
            out.names.insert(p, text);
        }
    }
    out.devices = devices
        .iter()
        .map(|d| gmr_device(d, out.names.get(&d.name_ptr).cloned()))
        .collect();
    out
}

/// A DEVICE record as an inventory entry: zero values are unknown.
pub(crate) fn gmr_device(d: &DeviceRecord, name: Option<String>) -> GmrDevice {
    GmrDevice {
        id: d.id,
        name: name.filter(|n| !n.is_empty()),
        uuid: d.uuid_key(),
        sm_count: (d.multiprocessors != 0).then_some(d.multiprocessors),
        compute_capability: (d.compute_capability_major != 0).then(|| {
            format!(
                "{}.{}",
                d.compute_capability_major, d.compute_capability_minor
            )
        }),
    }
}
