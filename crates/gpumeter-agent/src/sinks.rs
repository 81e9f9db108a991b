//! The sinks a closed window set goes to: report files, and events through each events sink's
//! outbox, which its sender thread delivers (`crate::http`).
//!
//! A set's events are computed once from its report. When an outbox refuses them (full), the
//! report is kept in `<state_dir>/owed/<sink>/` and its events are stored as soon as the
//! outbox has room: metering goes on, nothing is dropped, and the events are the same ones.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gpumeter::events::{usage_events, EventMap, EventOptions};
use gpumeter_core::UsageReport;

use crate::config::{AgentConfig, EventsSinkConfig, SinkConfig};
use crate::http::Sender;
use crate::outbox::{Batch, Outbox, OutboxError};
use crate::AgentError;

/// One events sink: its mapping, outbox, owed reports and (until started) its sender.
struct EventsSink {
    config: EventsSinkConfig,
    map: Option<EventMap>,
    outbox: Arc<Outbox>,
    owed: PathBuf,
    sender: Mutex<Option<Sender>>,
}

/// Every sink of the configuration.
pub struct Sinks {
    reports: Vec<PathBuf>,
    events: Vec<EventsSink>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |error| AgentError::Io {
        path: path.to_path_buf(),
        error,
    }
}

impl Sinks {
    /// Opens the sinks: creates report folders, opens each events sink's outbox
    /// (`<state_dir>/outbox/<name>`), reads its mapping and its bearer token.
    ///
    /// # Errors
    /// [`AgentError`] when a folder cannot be made, an outbox cannot be opened, or a mapping
    /// or token cannot be read.
    pub fn open(config: &AgentConfig) -> Result<Sinks, AgentError> {
        let mut reports = Vec::new();
        let mut events = Vec::new();
        for s in &config.sinks {
            match s {
                SinkConfig::Reports { dir } => {
                    std::fs::create_dir_all(dir).map_err(io(dir))?;
                    remove_temporaries(dir);
                    reports.push(dir.clone());
                }
                SinkConfig::Events(e) => {
                    let dir = config.state_dir.join("outbox").join(&e.name);
                    let outbox = Outbox::open(&dir, e.outbox_limit_bytes).map_err(|err| {
                        AgentError::Sink {
                            sink: e.name.clone(),
                            reason: err.to_string(),
                        }
                    })?;
                    let owed = config.state_dir.join("owed").join(&e.name);
                    std::fs::create_dir_all(&owed).map_err(io(&owed))?;
                    events.push(EventsSink {
                        map: e.event_map()?,
                        sender: Mutex::new(Some(e.sender()?)),
                        config: e.clone(),
                        outbox: Arc::new(outbox),
                        owed,
                    });
                }
            }
        }
        Ok(Sinks { reports, events })
    }

    /// Hands a closed set over: writes its report to every reports sink (`<set>.usage.json`,
    /// atomically; a file already there from an earlier try is kept: it is the same) and
    /// stores its events in every events sink's outbox, or, when the outbox is full, keeps the
    /// report as owed to that sink.
    ///
    /// # Errors
    /// [`AgentError`] when a file cannot be written or the events cannot be made.
    pub fn hand_over(&self, set: &str, report: &UsageReport) -> Result<(), AgentError> {
        let mut bytes =
            serde_json::to_vec_pretty(report).map_err(|e| AgentError::Encode(e.to_string()))?;
        bytes.push(b'\n');
        for dir in &self.reports {
            let path = dir.join(format!("{set}.usage.json"));
            if path.exists() {
                continue;
            }
            crate::state::write_atomic(&path, &bytes).map_err(io(&path))?;
        }
        crate::crash::point("report-written");
        for sink in &self.events {
            sink.settle_owed()?;
            let owed_before = sink.owed_sets()?;
            if !owed_before.is_empty() || !sink.put(set, report)? {
                let path = sink.owed.join(format!("{set}.usage.json"));
                crate::state::write_atomic(&path, &bytes).map_err(io(&path))?;
            }
        }
        Ok(())
    }

    /// Stores what each events sink is owed, oldest first, while its outbox has room.
    ///
    /// # Errors
    /// As [`Sinks::hand_over`].
    pub fn settle_owed(&self) -> Result<(), AgentError> {
        for sink in &self.events {
            sink.settle_owed()?;
        }
        Ok(())
    }

    /// Whether every events sink has delivered (or had refused for good) every set handed to
    /// it: nothing pending in its outbox and nothing owed.
    ///
    /// # Errors
    /// [`AgentError::Io`] when an owed folder cannot be read.
    pub fn all_acknowledged(&self) -> Result<bool, AgentError> {
        for sink in &self.events {
            if !sink.outbox.is_empty() || !sink.owed_sets()?.is_empty() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Starts one sender thread per events sink; each delivers its outbox until `stop` is set.
    pub fn start_senders(&self, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
        let mut threads = Vec::new();
        for sink in &self.events {
            let taken = sink
                .sender
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            if let Some(mut sender) = taken {
                let outbox = Arc::clone(&sink.outbox);
                let stop = Arc::clone(&stop);
                let name = format!("sender-{}", sink.config.name);
                let t = std::thread::Builder::new()
                    .name(name)
                    .spawn(move || sender.run(&outbox, &stop));
                match t {
                    Ok(t) => threads.push(t),
                    Err(e) => {
                        tracing::error!(sink = %sink.config.name, error = %e, "cannot start the events sender")
                    }
                }
            }
        }
        threads
    }

    /// Shows each events sink's outbox depth in `metrics`, and has its sender (until started)
    /// count its failed requests there.
    pub fn attach_metrics(&self, metrics: &crate::metrics::Metrics) {
        for sink in &self.events {
            metrics.watch_outbox(&sink.config.name, Arc::clone(&sink.outbox));
            let mut sender = sink
                .sender
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(sender) = sender.as_mut() {
                sender.count_failures(metrics.send_failures(&sink.config.name));
            }
        }
    }

    /// Wakes every sender (a new batch, or the stop flag).
    pub fn wake_senders(&self) {
        for sink in &self.events {
            sink.outbox.wake();
        }
    }

    /// Lets every outbox forget the delivered markers of sets before `set` (no set before it
    /// is handed over again).
    pub fn forget_before(&self, set: &str) {
        for sink in &self.events {
            if let Err(e) = sink.outbox.forget_delivered_before(set) {
                tracing::warn!(sink = %sink.config.name, error = %e, "cannot tidy the outbox");
            }
        }
    }
}

impl EventsSink {
    /// Stores `report`'s events as batch `set`. `false` when the outbox is full (it said so,
    /// loudly).
    fn put(&self, set: &str, report: &UsageReport) -> Result<bool, AgentError> {
        let fail = |reason: String| AgentError::Sink {
            sink: self.config.name.clone(),
            reason,
        };
        let mut opts = EventOptions::new(self.config.format.event_format());
        opts.map = self.map.as_ref();
        let events = usage_events(report, &opts).map_err(|e| fail(e.to_string()))?;
        if events.events.is_empty() {
            return Ok(true);
        }
        let batch = Batch::from_events(self.config.format.event_format(), &events.events)
            .map_err(|e| fail(e.to_string()))?;
        match self.outbox.put(set, &batch) {
            Ok(_) => Ok(true),
            // Logged loudly by the outbox; the set is owed and metering goes on (a batch
            // larger than the whole limit stays owed until the limit is raised).
            Err(OutboxError::Full { .. } | OutboxError::TooLarge { .. }) => Ok(false),
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// The sets owed to this sink (report files in its owed folder), oldest first.
    fn owed_sets(&self) -> Result<Vec<PathBuf>, AgentError> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.owed)
            .map_err(io(&self.owed))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".usage.json"))
            .collect();
        v.sort();
        Ok(v)
    }

    fn settle_owed(&self) -> Result<(), AgentError> {
        for path in self.owed_sets()? {
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            let report: UsageReport =
                serde_json::from_slice(&bytes).map_err(|e| AgentError::Encode(e.to_string()))?;
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let set = name.trim_end_matches(".usage.json");
            if !self.put(set, &report)? {
                return Ok(());
            }
            std::fs::remove_file(&path).map_err(io(&path))?;
            tracing::info!(sink = %self.config.name, set = %set, "stored a set's events that a full outbox had refused");
        }
        Ok(())
    }
}

/// Removes the temporary files a write cut short left in `dir` (`.<name>.tmp`,
/// `crate::state::write_atomic`).
fn remove_temporaries(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".tmp") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}
