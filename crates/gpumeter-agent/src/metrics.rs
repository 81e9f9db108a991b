//! The agent's metrics (docs/AGENT.md, "Metrics"): the usage of closed window sets
//! (`gpumeter_usage_total{tenant, device, meter}`) and the agent's own health, encoded with
//! `prometheus-client` in the Prometheus text format (version 0.0.4) or OpenMetrics 1.0, and
//! served at `GET /metrics` by [`MetricsServer`] with `/healthz` and `/readyz`.
//!
//! [`Metrics`] is shared (`Arc`) between the agent's step, the events senders and the HTTP
//! server's threads: the step only stores numbers (atomics, and a mutex held for a copy), and
//! a scrape reads them, so a scrape never holds the step up. What is computed at scrape time
//! (lag, checkpoint age, outbox depth) is read then.
//!
//! ```
//! use gpumeter_agent::metrics::{Format, Metrics};
//! let m = Metrics::new(1000, std::path::Path::new("/nonexistent"));
//! m.set_unmetered("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88", 2);
//! let text = m.encode(Format::Prometheus);
//! assert!(text.contains("gpumeter_agent_unmetered_processes{device=\"GPU-74e128b2"));
//! ```

mod accept;
mod server;
#[cfg(test)]
mod tests;
mod usage;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use gpumeter_core::UsageReport;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::outbox::Outbox;
use crate::state::Checkpoint;

pub use server::{Limits, MetricsServer, Readiness};
pub use usage::{device_label, UsageTotals, OTHER_TENANT, UNKNOWN_DEVICE};

/// The `Content-Type` of the Prometheus text format, version 0.0.4 (what Prometheus 2 and
/// `promtool check metrics` read).
pub const PROMETHEUS_CONTENT_TYPE: &str =
    prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `Content-Type` of OpenMetrics 1.0 text.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4: the default.
    Prometheus,
    /// OpenMetrics 1.0 text (ends with `# EOF`).
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for, by the rule of Prometheus's Go client: the
    /// acceptable media range (quality above 0; `q` read case-insensitively) with the highest
    /// quality wins, a specific type before a wildcard at equal quality, else the header's
    /// order; `application/openmetrics-text` gives OpenMetrics, `text/plain`, `text/*` and
    /// `*/*` the Prometheus text format, which is also the answer when nothing served is
    /// acceptable (or no header).
    pub fn from_accept(accept: Option<&str>) -> Format {
        accept::negotiate(accept)
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => PROMETHEUS_CONTENT_TYPE,
            Format::OpenMetrics => OPENMETRICS_CONTENT_TYPE,
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkStatusLabels {
    sink: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkOutcomeLabels {
    sink: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

/// A recording in the spool, as [`Metrics::observe_spool`] counts it.
#[derive(Debug, Clone, Copy)]
pub struct SpoolView<'a> {
    /// Its identity (`crate::spool::identity`).
    pub identity: &'a str,
    /// Bytes of complete frames from the start of the file.
    pub complete_len: u64,
    /// Whether it is finished (ended, or its process gone and the file quiet).
    pub finished: bool,
}

/// Where an events sender counts its requests: each one in
/// `gpumeter_agent_sends_total{sink, outcome}` (`ok` or `failed`, both shown from the start at
/// 0), and the failed ones by status in `gpumeter_agent_send_failures_total{sink, status}`.
#[derive(Debug, Clone)]
pub struct SendFailures {
    family: Family<SinkStatusLabels, Counter>,
    sends: Family<SinkOutcomeLabels, Counter>,
    sink: String,
}

impl SendFailures {
    /// Counts one failed request; `status` is the HTTP status code (`"503"`) or the transport
    /// failure (`timeout`, `connect`, `dns`, `tls`, `io`, `protocol`, `other`).
    pub fn record(&self, status: &str) {
        self.family
            .get_or_create(&SinkStatusLabels {
                sink: self.sink.clone(),
                status: status.to_string(),
            })
            .inc();
        self.outcome("failed").inc();
    }

    /// Counts one acknowledged request.
    pub fn acknowledged(&self) {
        self.outcome("ok").inc();
    }

    fn outcome(&self, outcome: &'static str) -> Counter {
        self.sends
            .get_or_create(&SinkOutcomeLabels {
                sink: self.sink.clone(),
                outcome,
            })
            .clone()
    }
}

/// What a closed set adds to the counters that are not kept in the checkpoint, held from
/// [`Metrics::set_closing`] until the checkpoint that records the set closed is written.
#[derive(Debug, Clone, Default)]
struct SetCounts {
    /// Records by kind: kernel, memcpy, memset.
    records: [u64; 3],
    /// Records lost, by reason.
    loss: Vec<(String, u64)>,
}

/// What is computed at scrape time, and the usage totals (a copy of the checkpoint's).
#[derive(Debug)]
struct Shared {
    usage: Mutex<UsageTotals>,
    /// The closed edge, ns since the epoch (0: nothing closed yet).
    watermark_ns: AtomicU64,
    /// When the last step finished without error, ns since the epoch (0: none yet).
    last_step_ns: AtomicU64,
    /// `gpumeter_agent_gpu_listing_up`: 1, 0, or -1 (not shown: no answer yet, or no listing).
    gpu_listing_up: AtomicI64,
    /// When these metrics were made (the agent's start), ns since the epoch.
    start_ns: u64,
    outboxes: Mutex<Vec<(String, Arc<Outbox>)>>,
    checkpoint: PathBuf,
}

/// The agent's metrics ([module docs](self)). Cheap to keep when no server runs.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    shared: Arc<Shared>,
    max_tenants: usize,
    recordings: Family<StateLabels, Gauge>,
    read_bytes: Counter,
    records: Family<KindLabels, Counter>,
    loss: Family<ReasonLabels, Counter>,
    sets_closed: Counter,
    step_failures: Counter,
    send_failures: Family<SinkStatusLabels, Counter>,
    sends: Family<SinkOutcomeLabels, Counter>,
    unmetered: Family<DeviceLabels, Gauge>,
    /// `[window, horizon, grace]` of the configuration, seconds (alert rules scale with them).
    settings: [Gauge<f64, AtomicU64>; 3],
    /// The device labels `gpumeter_agent_unmetered_processes` has shown.
    unmetered_devices: Mutex<BTreeSet<String>>,
    /// Per recording identity, its complete bytes at the last step (bytes read).
    seen: Mutex<HashMap<String, u64>>,
    /// Sets closed whose checkpoint write has not succeeded yet.
    closing: Mutex<Vec<SetCounts>>,
}

/// The record kinds of `gpumeter_agent_records_total`, in the order of [`SetCounts::records`].
const KINDS: [&str; 3] = ["kernel", "memcpy", "memset"];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unix_ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl Metrics {
    /// Metrics of an agent whose state folder is `state_dir` (its `checkpoint.json` gives the
    /// checkpoint's age), with at most `max_tenants` tenant label values.
    pub fn new(max_tenants: usize, state_dir: &Path) -> Metrics {
        let shared = Arc::new(Shared {
            usage: Mutex::new(UsageTotals::default()),
            watermark_ns: AtomicU64::new(0),
            last_step_ns: AtomicU64::new(0),
            gpu_listing_up: AtomicI64::new(-1),
            start_ns: unix_ns(SystemTime::now()),
            outboxes: Mutex::new(Vec::new()),
            checkpoint: Checkpoint::path(state_dir),
        });
        let mut m = Metrics {
            registry: Registry::default(),
            shared,
            max_tenants,
            recordings: Family::default(),
            read_bytes: Counter::default(),
            records: Family::default(),
            loss: Family::default(),
            sets_closed: Counter::default(),
            step_failures: Counter::default(),
            send_failures: Family::default(),
            sends: Family::default(),
            unmetered: Family::default(),
            settings: Default::default(),
            unmetered_devices: Mutex::new(BTreeSet::new()),
            seen: Mutex::new(HashMap::new()),
            closing: Mutex::new(Vec::new()),
        };
        m.register();
        m
    }

    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "gpumeter_agent_recordings",
            "Recordings the agent follows in the spool (not retired), by state: open (still written) or finished (ended, or its process gone and the file quiet for the grace period)",
            self.recordings.clone(),
        );
        r.register(
            "gpumeter_agent_read_bytes",
            "Bytes of complete frames read from recordings in the spool since the agent started",
            self.read_bytes.clone(),
        );
        r.register(
            "gpumeter_agent_records",
            "Records metered in closed window sets since the agent started, by kind (kernel, memcpy, memset)",
            self.records.clone(),
        );
        r.register(
            "gpumeter_agent_loss_records",
            "Records lost in closed window sets since the agent started, by reason (late, torn_frame, ...; docs/AGENT.md)",
            self.loss.clone(),
        );
        r.register(
            "gpumeter_agent_window_sets_closed",
            "Window sets closed and handed to the sinks since the agent started",
            self.sets_closed.clone(),
        );
        r.register(
            "gpumeter_agent_step_failures",
            "Steps that failed (logged and tried again after the poll period) since the agent started",
            self.step_failures.clone(),
        );
        r.register(
            "gpumeter_agent_send_failures",
            "Event requests an events sink did not acknowledge, by sink and status (an HTTP status code, or timeout, connect, dns, tls, io, protocol, other)",
            self.send_failures.clone(),
        );
        r.register(
            "gpumeter_agent_sends",
            "Event requests an events sink sent, by sink and outcome (ok: acknowledged; failed: see gpumeter_agent_send_failures_total); both at 0 from the sink's start",
            self.sends.clone(),
        );
        r.register(
            "gpumeter_agent_unmetered_processes",
            "Processes holding a GPU with no recording in the spool for longer than the grace period, by device",
            self.unmetered.clone(),
        );
        for (gauge, (name, help)) in self.settings.iter().zip([
            (
                "gpumeter_agent_window_seconds",
                "The configuration's window size, seconds (alert rules scale with it)",
            ),
            (
                "gpumeter_agent_horizon_seconds",
                "The configuration's reordering horizon, seconds",
            ),
            (
                "gpumeter_agent_grace_seconds",
                "The configuration's grace period, seconds",
            ),
        ]) {
            r.register(name, help, gauge.clone());
        }
        r.register_collector(Box::new(Arc::clone(&self.shared)));
        for state in ["open", "finished"] {
            self.recordings.get_or_create(&StateLabels { state }).set(0);
        }
        for kind in KINDS {
            let _ = self.records.get_or_create(&KindLabels { kind });
        }
        // Every reason at 0 from the start, so that `increase()` sees the first loss.
        for reason in gpumeter_core::LossReason::ALL {
            let _ = self.loss.get_or_create(&ReasonLabels {
                reason: reason.as_str().to_string(),
            });
        }
    }

    /// The cap on tenant label values.
    pub fn max_tenants(&self) -> usize {
        self.max_tenants
    }

    /// Takes the checkpoint's usage totals and closed edge at start. A checkpoint without
    /// totals — none at all (`fresh`), or one written by an agent without metrics — gets empty
    /// ones, logged: `gpumeter_usage_total` starts at 0.
    pub fn start_from(&self, checkpoint: &mut Checkpoint, fresh: bool) {
        match &checkpoint.usage_totals {
            Some(t) => {
                tracing::info!(tenants = t.admitted(), "usage counters resumed from the checkpoint")
            }
            None if fresh => tracing::info!(
                "no checkpoint (a fresh start): the usage counters start at 0"
            ),
            None => tracing::warn!(
                "the checkpoint has no usage totals (written by an agent without metrics): the usage counters start at 0"
            ),
        }
        checkpoint.usage_totals.get_or_insert_default();
        self.publish(checkpoint);
    }

    /// Adds a closed set's report to the checkpoint's usage totals (before the checkpoint is
    /// written: docs/AGENT.md, "Metrics"). [`Metrics::closed_set`] shows them once written.
    pub fn count_usage(&self, checkpoint: &mut Checkpoint, report: &UsageReport) {
        checkpoint
            .usage_totals
            .get_or_insert_default()
            .add(report, self.max_tenants);
    }

    /// A set is closed, with `report`, and its checkpoint is about to be written: its
    /// records, losses and the set are counted once a write succeeds
    /// ([`Metrics::checkpoint_written`]; a failed write is followed by others, one of which
    /// records the set closed).
    pub fn set_closing(&self, report: &UsageReport) {
        let r = &report.records;
        let counts = SetCounts {
            records: [r.kernel, r.memcpy, r.memset],
            loss: report
                .loss
                .iter()
                .map(|l| (l.reason.clone(), l.records))
                .collect(),
        };
        lock(&self.closing).push(counts);
    }

    /// After a checkpoint write succeeded: shows its usage totals and closed edge, and counts
    /// the sets closed since the last write ([`Metrics::set_closing`]).
    pub fn checkpoint_written(&self, checkpoint: &Checkpoint) {
        self.publish(checkpoint);
        let closed = std::mem::take(&mut *lock(&self.closing));
        for set in closed {
            self.sets_closed.inc();
            for (kind, n) in KINDS.into_iter().zip(set.records) {
                self.records.get_or_create(&KindLabels { kind }).inc_by(n);
            }
            for (reason, n) in set.loss {
                self.loss.get_or_create(&ReasonLabels { reason }).inc_by(n);
            }
        }
    }

    /// [`Metrics::set_closing`] then [`Metrics::checkpoint_written`]: after a closed set's
    /// checkpoint was written.
    pub fn closed_set(&self, checkpoint: &Checkpoint, report: &UsageReport) {
        self.set_closing(report);
        self.checkpoint_written(checkpoint);
    }

    /// Shows the checkpoint's usage totals and closed edge.
    fn publish(&self, checkpoint: &Checkpoint) {
        self.shared
            .watermark_ns
            .store(checkpoint.closed_to_ns, Ordering::Relaxed);
        let totals = checkpoint.usage_totals.clone().unwrap_or_default();
        *lock(&self.shared.usage) = totals;
    }

    /// After a poll of the spool: the recordings followed by state, and the bytes read since
    /// the last poll (a recording new to the agent counts whole).
    pub fn observe_spool<'a>(&self, recordings: impl IntoIterator<Item = SpoolView<'a>>) {
        let (mut open, mut finished, mut read) = (0i64, 0i64, 0u64);
        let mut seen = lock(&self.seen);
        let mut now = HashMap::with_capacity(seen.len());
        for r in recordings {
            if r.finished {
                finished += 1;
            } else {
                open += 1;
            }
            let before = seen.get(r.identity).copied().unwrap_or(0);
            read += r.complete_len.saturating_sub(before);
            now.insert(r.identity.to_string(), r.complete_len.max(before));
        }
        *seen = now;
        drop(seen);
        self.read_bytes.inc_by(read);
        self.recordings
            .get_or_create(&StateLabels { state: "open" })
            .set(open);
        self.recordings
            .get_or_create(&StateLabels { state: "finished" })
            .set(finished);
    }

    /// A step finished without error, now.
    pub fn step_finished(&self) {
        self.shared
            .last_step_ns
            .store(unix_ns(SystemTime::now()), Ordering::Relaxed);
    }

    /// A step failed.
    pub fn step_failed(&self) {
        self.step_failures.inc();
    }

    /// When the last step finished without error; `None` before the first.
    pub fn last_step(&self) -> Option<SystemTime> {
        match self.shared.last_step_ns.load(Ordering::Relaxed) {
            0 => None,
            ns => Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)),
        }
    }

    /// Shows `outbox`'s depth (batches and bytes pending) as sink `sink`'s, read at scrape.
    pub fn watch_outbox(&self, sink: &str, outbox: Arc<Outbox>) {
        lock(&self.shared.outboxes).push((sink.to_string(), outbox));
    }

    /// The handle sink `sink`'s sender counts its requests with; shows
    /// `gpumeter_agent_sends_total{sink, outcome}` at 0 for both outcomes from now.
    pub fn send_failures(&self, sink: &str) -> SendFailures {
        let handle = SendFailures {
            family: self.send_failures.clone(),
            sends: self.sends.clone(),
            sink: sink.to_string(),
        };
        for outcome in ["ok", "failed"] {
            let _ = handle.outcome(outcome);
        }
        handle
    }

    /// Shows the configuration's window size, horizon and grace period (ns) as
    /// `gpumeter_agent_window_seconds`, `gpumeter_agent_horizon_seconds` and
    /// `gpumeter_agent_grace_seconds`, so that alert rules can scale with them.
    pub fn show_settings(&self, window_ns: u64, horizon_ns: u64, grace_ns: u64) {
        for (gauge, ns) in self.settings.iter().zip([window_ns, horizon_ns, grace_ns]) {
            gauge.set(seconds(ns));
        }
    }

    /// Sets `gpumeter_agent_unmetered_processes{device}`: processes on `device` (its
    /// `GPU-<uuid>` key, as the reports name it) holding the GPU with no recording in the
    /// spool for longer than the grace period (count).
    pub fn set_unmetered(&self, device: &str, count: u64) {
        self.unmetered
            .get_or_create(&DeviceLabels {
                device: device.to_string(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Sets `gpumeter_agent_unmetered_processes` from `counts` (device label → processes):
    /// a device shown before and absent from `counts` is set to 0, so the gauge falls when a
    /// process goes away instead of keeping its last value.
    pub fn set_unmetered_counts(&self, counts: &BTreeMap<String, u64>) {
        let mut shown = lock(&self.unmetered_devices);
        shown.extend(counts.keys().cloned());
        for device in shown.iter() {
            self.set_unmetered(device, counts.get(device).copied().unwrap_or(0));
        }
    }

    /// Sets `gpumeter_agent_gpu_listing_up`: 1 when the last try to list GPU processes
    /// through NVML gave a listing, 0 when NVML could not be loaded or the GPUs could not be
    /// listed; `None` (no listing configured, or no answer yet) leaves it as it was (absent
    /// until the first answer).
    pub fn set_gpu_listing_up(&self, up: Option<bool>) {
        if let Some(up) = up {
            self.shared
                .gpu_listing_up
                .store(i64::from(up), Ordering::Relaxed);
        }
    }

    /// The exposition in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut out = String::new();
        let done = match format {
            Format::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
        };
        // Writing to a String cannot fail; an encoder error would be a bug of the encoder.
        if let Err(e) = done {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }
}

impl Collector for Shared {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        {
            let usage = lock(&self.usage).clone();
            let mut e = encoder.encode_descriptor(
                "gpumeter_usage",
                "Usage of the closed window sets the agent handed over, in each meter's canonical unit (the meter's name ends with it: _ns, _bytes, ...), by tenant (at most [metrics] max_tenants values, then other), device (GPU-<uuid>, or unknown) and meter; kept in the checkpoint across restarts.",
                None,
                MetricType::Counter,
            )?;
            for (tenant, device, meter, q) in usage.series() {
                let labels = [("tenant", tenant), ("device", device), ("meter", meter)];
                ConstCounter::new(q as f64).encode(e.encode_family(&labels)?)?;
            }
            let e = encoder.encode_descriptor(
                "gpumeter_usage_folded_rows",
                "Usage rows (tenant, device, window, meter) counted under tenant=\"other\" because max_tenants tenants already had a label value; kept in the checkpoint.",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(usage.folded_rows).encode(e)?;
            let e = encoder.encode_descriptor(
                "gpumeter_usage_tenants",
                "Tenants with a tenant label value of their own in gpumeter_usage_total (at most max_tenants).",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(usage.admitted() as u64).encode(e)?;
        }
        self.encode_times(&mut encoder)?;
        self.encode_outboxes(&mut encoder)
    }
}

impl Shared {
    /// The watermark, the lag, the last step and the checkpoint's age.
    fn encode_times(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let now = unix_ns(SystemTime::now());
        let watermark = self.watermark_ns.load(Ordering::Relaxed);
        let e = encoder.encode_descriptor(
            "gpumeter_agent_watermark_timestamp_seconds",
            "The closed edge: every window ending at or before it is closed and handed to the sinks (Unix time, seconds, on the recordings' CUPTI clock; 0 before the first set).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(seconds(watermark)).encode(e)?;
        if watermark > 0 {
            let e = encoder.encode_descriptor(
                "gpumeter_agent_lag_seconds",
                "Now minus the end of the newest closed window, seconds (at scrape; absent before the first set).",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new((now as f64 - watermark as f64) / 1e9).encode(e)?;
        }
        let last = self.last_step_ns.load(Ordering::Relaxed);
        let e = encoder.encode_descriptor(
            "gpumeter_agent_last_step_timestamp_seconds",
            "When the last step finished without error (Unix time, seconds; 0 before the first, so that time() - it grows from the start of an agent whose steps all fail).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(seconds(last)).encode(e)?;
        let e = encoder.encode_descriptor(
            "gpumeter_agent_start_timestamp_seconds",
            "When the agent started (Unix time, seconds).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(seconds(self.start_ns)).encode(e)?;
        let up = self.gpu_listing_up.load(Ordering::Relaxed);
        if up >= 0 {
            let e = encoder.encode_descriptor(
                "gpumeter_agent_gpu_listing_up",
                "1 when the last try to list GPU processes through NVML gave a listing, 0 when NVML could not be loaded or the GPUs could not be listed (absent without [nvml] processes = true, and before the first try).",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(up).encode(e)?;
        }
        let written = std::fs::metadata(&self.checkpoint)
            .and_then(|m| m.modified())
            .ok();
        if let Some(t) = written {
            let e = encoder.encode_descriptor(
                "gpumeter_agent_checkpoint_age_seconds",
                "Seconds since the checkpoint was last written (at scrape; absent before the first write).",
                None,
                MetricType::Gauge,
            )?;
            let age = SystemTime::now().duration_since(t).unwrap_or_default();
            ConstGauge::new(age.as_secs_f64()).encode(e)?;
        }
        Ok(())
    }

    /// Each events sink's outbox: batches and bytes pending.
    fn encode_outboxes(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let depth: Vec<(String, u64, u64, u64)> = lock(&self.outboxes)
            .iter()
            .map(|(s, o)| {
                (
                    s.clone(),
                    o.pending_count() as u64,
                    o.bytes(),
                    o.limit_bytes(),
                )
            })
            .collect();
        let mut e = encoder.encode_descriptor(
            "gpumeter_agent_outbox_batches",
            "Batches of events waiting in an events sink's outbox, by sink.",
            None,
            MetricType::Gauge,
        )?;
        for (sink, batches, _, _) in &depth {
            ConstGauge::new(*batches).encode(e.encode_family(&[("sink", sink.as_str())])?)?;
        }
        let mut e = encoder.encode_descriptor(
            "gpumeter_agent_outbox_bytes",
            "Bytes of the batches waiting in an events sink's outbox, by sink (bounded by its outbox_limit_bytes).",
            None,
            MetricType::Gauge,
        )?;
        for (sink, _, bytes, _) in &depth {
            ConstGauge::new(*bytes).encode(e.encode_family(&[("sink", sink.as_str())])?)?;
        }
        let mut e = encoder.encode_descriptor(
            "gpumeter_agent_outbox_limit_bytes",
            "The most bytes an events sink's outbox holds (its outbox_limit_bytes), by sink.",
            None,
            MetricType::Gauge,
        )?;
        for (sink, _, _, limit) in &depth {
            ConstGauge::new(*limit).encode(e.encode_family(&[("sink", sink.as_str())])?)?;
        }
        Ok(())
    }
}
