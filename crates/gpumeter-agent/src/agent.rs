//! The agent's step: read the spool, close the windows the node's watermark allows, hand the
//! set to every sink, checkpoint, retire what is finished and shipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use gpumeter_core::{MeterConfig, TenantMap};

use crate::close::{close_set, SetInput};
use crate::config::{AgentConfig, Finished};
use crate::metrics::{Metrics, SpoolView};
use crate::sinks::Sinks;
use crate::spool::{Spool, SpoolEvent};
use crate::state::{Checkpoint, PendingSet};
use crate::AgentError;

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// Window sets closed and handed to the sinks.
    pub sets_closed: u64,
    /// Recordings retired (moved, deleted or compressed).
    pub retired: u64,
    /// Records counted as loss `late` in the sets closed.
    pub late: u64,
}

/// The node agent ([crate docs](crate)).
pub struct Agent {
    config: AgentConfig,
    spool: Spool,
    checkpoint: Checkpoint,
    sinks: Sinks,
    tenant_map: TenantMap,
    /// Per recording identity, what its bytes up to `read_to` (the map's number) hold, as the
    /// last set found it: the next set need not decode them again.
    known: std::collections::HashMap<String, (u64, crate::close::OldCounts)>,
    /// The agent's metrics (docs/AGENT.md, "Metrics"), also read by the HTTP endpoint.
    metrics: Arc<Metrics>,
    /// GPU processes listed through NVML, to find unmetered ones (`crate::unmetered`).
    unmetered: crate::unmetered::Watch,
    /// Finds recordings' processes on the host (`crate::hostproc`).
    host: crate::hostproc::Resolver,
    /// `<state_dir>/lock`, locked while the agent lives (the kernel drops the lock when the
    /// process ends, SIGKILL included).
    _lock: std::fs::File,
}

/// Takes `<state_dir>/lock` (an advisory `flock`): one agent per state folder
/// (docs/AGENT.md, "Limits": two agents on one spool would each bill it).
///
/// # Errors
/// [`AgentError::Locked`] when another process holds it; [`AgentError::Io`] when the file
/// cannot be opened or locked.
fn lock(state_dir: &Path) -> Result<std::fs::File, AgentError> {
    let path = state_dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|error| AgentError::Io {
            path: path.clone(),
            error,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(AgentError::Locked { path }),
        Err(std::fs::TryLockError::Error(error)) => Err(AgentError::Io { path, error }),
    }
}

/// Refuses a fresh start (no checkpoint) where this node already handed sets over: its report
/// files in a reports sink, or batches in an events sink's outbox. Started afresh, the agent
/// would close those windows again (docs/AGENT.md, "Checkpoint and restart").
///
/// # Errors
/// [`AgentError::LostCheckpoint`] naming what was found.
fn refuse_lost_checkpoint(config: &AgentConfig, node: &str) -> Result<(), AgentError> {
    let prefix = format!("{node}-");
    let mut found = None;
    for s in &config.sinks {
        if let crate::config::SinkConfig::Reports { dir } = s {
            let ours = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .find(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.starts_with(&prefix) && n.ends_with(".usage.json")
                });
            if let Some(e) = ours {
                found = Some(e.path());
            }
        }
    }
    let outboxes = config.state_dir.join("outbox");
    for sink in std::fs::read_dir(&outboxes).into_iter().flatten().flatten() {
        for part in ["pending", "delivered"] {
            let dir = sink.path().join(part);
            if let Some(e) = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .next()
            {
                found = Some(e.path());
            }
        }
    }
    match found {
        Some(path) => Err(AgentError::LostCheckpoint { path }),
        None => Ok(()),
    }
}

/// The identities of the recordings followed in `spool`.
fn identities(spool: &Spool) -> std::collections::BTreeSet<&str> {
    spool
        .recordings
        .values()
        .map(|r| r.identity.as_str())
        .collect()
}

/// A recording of the set being closed: its bytes and where the set's old and new bytes end.
struct SetFile {
    name: String,
    id: String,
    bytes: Vec<u8>,
    old: u64,
    new: u64,
    /// `new`, counted after the header frame (the checkpoint's `read_to`).
    read_to: u64,
    tenant: Option<gpumeter_core::TenantName>,
    /// `old`, counted after the header frame.
    old_read_to: u64,
}

impl Agent {
    /// Opens the agent: creates the state folder, reads the checkpoint and the tenant map, and
    /// opens every sink (its outbox). With `[nvml] processes = true`, a thread loads NVML and lists
    /// GPU processes (NVML that cannot be used yet is logged and tried again with back-off; the
    /// agent meters on meanwhile).
    ///
    /// # Errors
    /// [`AgentError`] when a folder cannot be made, the checkpoint or the tenant map cannot be
    /// read, or a sink cannot be opened; [`AgentError::NvmlNotBuilt`] for `[nvml] processes =
    /// true` without the `nvml` feature.
    pub fn open(config: AgentConfig) -> Result<Agent, AgentError> {
        let telemetry = crate::unmetered::live_telemetry(&config)?;
        Agent::open_with(config, telemetry)
    }

    /// As [`Agent::open`], listing GPU processes through `telemetry` instead of NVML (when
    /// `[nvml] processes = true`; with `false` it is not used): a
    /// [`gpumeter_nvml::Recorded`] in tests, or a `gpumeter_nvml::Nvml` the caller made.
    /// Needs no `nvml` feature.
    ///
    /// # Errors
    /// As [`Agent::open`], but never [`AgentError::NvmlNotBuilt`].
    pub fn open_with_telemetry(
        config: AgentConfig,
        telemetry: std::sync::Arc<dyn gpumeter_nvml::Telemetry>,
    ) -> Result<Agent, AgentError> {
        let connect: Option<crate::unmetered::Connect> = config
            .nvml
            .processes
            .then(|| Box::new(move || Ok(std::sync::Arc::clone(&telemetry))) as _);
        Agent::open_with(config, connect)
    }

    fn open_with(
        config: AgentConfig,
        telemetry: Option<crate::unmetered::Connect>,
    ) -> Result<Agent, AgentError> {
        let dir = |p: &Path| {
            std::fs::create_dir_all(p).map_err(|error| AgentError::Io {
                path: p.to_path_buf(),
                error,
            })
        };
        dir(&config.state_dir)?;
        let lock = lock(&config.state_dir)?;
        dir(&config.spool)?;
        let fresh = !Checkpoint::path(&config.state_dir).exists();
        let mut checkpoint = Checkpoint::load(&config.state_dir)?;
        let tenant_map = match &config.tenant_map {
            Some(p) => {
                use gpumeter::TenantMapFile as _;
                TenantMap::from_path(p).map_err(|e| AgentError::TenantMap(e.to_string()))?
            }
            None => TenantMap::default(),
        };
        let sinks = Sinks::open(&config)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| {
                !s.is_empty()
                    && s.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            })
            .unwrap_or_else(|| "node".to_string());
        // The node's name in set names, fixed at the first start: a host name that changes
        // later (a replaced pod) must not rename a set being closed again.
        if checkpoint.node.is_empty() {
            checkpoint.node = host;
        }
        if fresh {
            refuse_lost_checkpoint(&config, &checkpoint.node)?;
        }
        let metrics = Arc::new(Metrics::new(config.metrics.max_tenants, &config.state_dir));
        metrics.start_from(&mut checkpoint, fresh);
        metrics.show_settings(config.window.ns(), config.horizon_ns, config.grace_ns);
        sinks.attach_metrics(&metrics);
        let mut unmetered = crate::unmetered::Watch::new(telemetry, &config.nvml, config.grace_ns);
        unmetered.restore(&checkpoint.unmetered_found);
        Ok(Agent {
            config,
            spool: Spool::default(),
            checkpoint,
            sinks,
            tenant_map,
            known: std::collections::HashMap::new(),
            metrics,
            unmetered,
            host: crate::hostproc::Resolver::new(Path::new("/proc"), None),
            _lock: lock,
        })
    }

    /// The GPU processes found unmetered (no recording for longer than the grace period) that
    /// NVML still listed at the last listing and that still have no recording, by (NVML
    /// index, host pid); empty without `[nvml] processes` (`crate::unmetered`).
    pub fn unmetered_processes(&self) -> Vec<crate::unmetered::UnmeteredProcess> {
        self.unmetered.running()
    }

    /// Whether nothing is left to do: no set pending and no recording in the spool.
    pub fn is_idle(&self) -> bool {
        self.checkpoint.pending.is_none() && self.spool.recordings.is_empty()
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The checkpoint as it stands.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The sinks (the events senders run from them).
    pub fn sinks(&self) -> &Sinks {
        &self.sinks
    }

    /// The agent's metrics (docs/AGENT.md, "Metrics").
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// One step: finishes a set a stopped agent left pending, reads the spool, closes every
    /// window the watermark allows (`once`: every window, every recording finished), and
    /// retires finished recordings whose windows every sink has acknowledged.
    ///
    /// # Errors
    /// [`AgentError`]: the spool cannot be read, a set cannot be metered or written, the
    /// checkpoint cannot be written. Nothing is then marked done: the next step does it again.
    pub fn step(&mut self, once: bool) -> Result<StepOutcome, AgentError> {
        let mut out = StepOutcome::default();
        // A spool folder removed under the agent is made again (the injection library makes
        // missing folders too).
        if !self.config.spool.is_dir() {
            std::fs::create_dir_all(&self.config.spool).map_err(|error| AgentError::Io {
                path: self.config.spool.clone(),
                error,
            })?;
        }
        let events = self
            .spool
            .poll(
                &self.config.spool,
                self.config.grace_ns,
                once,
                &self.checkpoint.host_processes,
            )
            .map_err(|error| AgentError::Io {
                path: self.config.spool.clone(),
                error,
            })?;
        self.report_spool_events(&events);
        self.metrics
            .observe_spool(self.live().iter().map(|r| SpoolView {
                identity: &r.identity,
                complete_len: r.complete_len,
                finished: r.finished,
            }));
        self.watch_gpu_processes()?;
        self.show_unmetered();
        if let Some(p) = self.checkpoint.pending.clone() {
            out.late += self.close(&p)?;
            out.sets_closed += 1;
        }
        // After the pending set (closed again with the processes found when it was made),
        // before the next (which uses what is found now).
        self.find_host_processes()?;
        let to = self.edge(once);
        if to > self.checkpoint.closed_to_ns {
            let mut pending = self.pending(to);
            // The unmetered processes waiting move into the set in the same checkpoint write.
            let waiting = std::mem::take(&mut self.checkpoint.unmetered);
            pending.unmetered = self.unmetered.refreshed(waiting);
            self.checkpoint.pending = Some(pending.clone());
            self.save_checkpoint()?;
            crate::crash::point("pending-saved");
            out.late += self.close(&pending)?;
            out.sets_closed += 1;
        }
        self.sinks.settle_owed()?;
        out.retired = self.retire()?;
        // A retired recording moved out of the spool need not be remembered: a copy put back
        // would be read again, and its records, all in closed windows, are `late`.
        let before = self.checkpoint.retired.len();
        let present = identities(&self.spool);
        self.checkpoint
            .retired
            .retain(|id, _| present.contains(id.as_str()));
        if self.checkpoint.retired.len() != before {
            self.save_checkpoint()?;
        }
        self.metrics.step_finished();
        Ok(out)
    }

    /// Takes in the GPU process listings made since the last step (a thread lists them every
    /// `[nvml] interval`), against the recordings in the spool without their end frame, and
    /// checkpoints what changed: processes found unmetered wait for the next set
    /// (`crate::unmetered`).
    ///
    /// # Errors
    /// [`AgentError::State`] when the checkpoint cannot be written.
    /// Looks up the host processes of the recordings followed and not found yet
    /// (`crate::hostproc`: once when first followed, again at later steps while unfinished),
    /// and checkpoints what is found.
    ///
    /// # Errors
    /// [`AgentError::State`] when the checkpoint cannot be written.
    fn find_host_processes(&mut self) -> Result<(), AgentError> {
        let mut found = false;
        for r in self.spool.recordings.values() {
            let id = &r.identity;
            if self.checkpoint.retired.contains_key(id)
                || self.checkpoint.host_processes.contains_key(id)
                || !self.host.wanted(id)
            {
                continue;
            }
            match self.host.resolve(id, &r.header, &self.checkpoint.node) {
                crate::hostproc::Lookup::Found(p) => {
                    tracing::debug!(file = %r.name, host_pid = p.host_pid, cgroup = p.cgroup.as_deref().unwrap_or(""), "found a recording's process on the host");
                    self.checkpoint.host_processes.insert(id.clone(), p);
                    found = true;
                }
                _ if r.finished => self.host.give_up(id),
                _ => {}
            }
        }
        let present = identities(&self.spool);
        self.host.retain_given_up(|id| present.contains(id));
        if found {
            self.checkpoint.save(&self.config.state_dir)?;
        }
        Ok(())
    }

    /// `gpumeter_agent_unmetered_processes`, per device, from the processes found unmetered
    /// and still running.
    fn show_unmetered(&self) {
        // Every GPU of the last listing shows, at 0 when none of its processes is unmetered.
        let mut counts: std::collections::BTreeMap<String, u64> = self
            .unmetered
            .gpu_labels()
            .into_iter()
            .map(|g| (g, 0))
            .collect();
        for p in self.unmetered.running() {
            *counts.entry(p.device_label()).or_insert(0u64) += 1;
        }
        self.metrics.set_unmetered_counts(&counts);
        self.metrics.set_gpu_listing_up(self.unmetered.listing_up());
    }

    fn watch_gpu_processes(&mut self) -> Result<(), AgentError> {
        let headers: Vec<&gpumeter_recording::gmr::GmrHeader> = self
            .spool
            .recordings
            .values()
            .filter(|r| !r.ended && !self.checkpoint.retired.contains_key(&r.identity))
            .map(|r| &r.header)
            .collect();
        let Some(change) = self.unmetered.poll(&headers) else {
            return Ok(());
        };
        if change.is_empty() {
            return Ok(());
        }
        self.checkpoint.unmetered.extend(change.found);
        self.checkpoint.unmetered_found = self.unmetered.found();
        self.save_checkpoint()?;
        Ok(())
    }

    /// The edge up to which windows can close now: `u64::MAX` for `once`; else the node's
    /// watermark — the least, over unfinished recordings, of the latest record start (or, for
    /// a recording quiet for the grace period, the wall clock minus the grace, if later) minus
    /// the horizon, and the wall clock (on CUPTI's clock) minus the horizon, for processes
    /// whose recordings are not in the spool yet — rounded down to a window boundary
    /// (docs/AGENT.md, "When a window closes").
    fn edge(&self, once: bool) -> u64 {
        if once {
            // Everything, when there is anything to close: a live recording with bytes the
            // last set did not read, or records it read past the closed edge. Not again while
            // `--once` waits for its events sinks (docs/AGENT.md: "one set, up to the end of
            // time").
            let closed = self.checkpoint.closed_to_ns;
            let open = self.live().iter().any(|r| {
                self.checkpoint
                    .recordings
                    .get(&r.identity)
                    .is_none_or(|s| s.read_to != r.complete_len - r.head_len() || s.end_ns > closed)
            });
            return if !open {
                self.checkpoint.closed_to_ns
            } else {
                u64::MAX
            };
        }
        let h = self.config.horizon_ns;
        let live = self.live();
        let now = self.now_cupti();
        let mut w = now.saturating_sub(h);
        let grace = self.config.grace_ns;
        let wall = SystemTime::now();
        for r in live.iter().filter(|r| !r.finished) {
            // A live producer flushes at least every GPUMETER_FLUSH_PERIOD_MS (well under the
            // grace): a recording quiet for the grace has nothing pending that ended before
            // then, so an idle process does not hold the node's windows open.
            let quiet = wall.duration_since(r.changed_at).unwrap_or_default();
            let mut progress = r.progress_ns;
            if quiet.as_nanos() >= u128::from(grace) {
                progress = progress.max(now.saturating_sub(grace));
            }
            w = w.min(progress.saturating_sub(h));
        }
        let window = self.config.window.ns();
        w / window * window
    }

    /// The wall clock on CUPTI's clock: moved by the smallest (CUPTI clock − wall clock) of the
    /// live recordings' headers (0 when there is none), ns.
    fn now_cupti(&self) -> u64 {
        let now_unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let offset = self
            .live()
            .iter()
            .map(|r| r.clock_offset_ns)
            .min()
            .unwrap_or(0);
        u64::try_from((now_unix as i128 + offset).max(0)).unwrap_or(u64::MAX)
    }

    /// Recordings being followed: in the spool and not retired.
    fn live(&self) -> Vec<&crate::spool::Recording> {
        self.spool
            .recordings
            .values()
            .filter(|r| !self.checkpoint.retired.contains_key(&r.identity))
            .collect()
    }

    /// The next set: from the closed edge to `to`, over every live recording's complete bytes
    /// (counted after the header frame: the injection library may rewrite a finished
    /// recording with a longer header, `docs/AGENT.md`).
    fn pending(&self, to: u64) -> PendingSet {
        PendingSet {
            from_ns: self.checkpoint.closed_to_ns,
            to_ns: to,
            read_to: self
                .live()
                .iter()
                .map(|r| (r.identity.clone(), r.complete_len - r.head_len()))
                .collect(),
            unmetered: Vec::new(),
        }
    }

    /// Closes `set`, hands it to the sinks and checkpoints. Returns the late records.
    /// The recordings of `set`, read whole, with where the set's old and new bytes end; a
    /// recording gone or unreadable is left out with a warning (its usage in the set is not
    /// billed).
    fn set_files(&self, set: &PendingSet) -> Vec<SetFile> {
        let mut files: Vec<SetFile> = Vec::new();
        for (id, &read_to) in &set.read_to {
            let Some(r) = self.spool.recordings.values().find(|r| &r.identity == id) else {
                tracing::warn!(recording = %id, "a recording of the set being closed is gone: its usage in the set is not billed");
                continue;
            };
            let bytes = match std::fs::read(&r.path) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(file = %r.path.display(), error = %e, "cannot read a recording of the set being closed: its usage in the set is not billed");
                    continue;
                }
            };
            let head = crate::spool::head_len(&bytes) as u64;
            let len = bytes.len() as u64;
            let new = head.saturating_add(read_to).min(len);
            if new < head.saturating_add(read_to) {
                tracing::warn!(file = %r.path.display(), was = read_to, now = len, "a recording shrank while its set was closed: what it lost is not billed");
            }
            let old = match self.checkpoint.recordings.get(id).map_or(0, |s| s.read_to) {
                0 => 0,
                old => head.saturating_add(old).min(new),
            };
            let tenant = self.tenant_of(r);
            let old_read_to = self.checkpoint.recordings.get(id).map_or(0, |s| s.read_to);
            files.push(SetFile {
                name: r.name.clone(),
                id: id.clone(),
                bytes,
                old,
                new,
                read_to,
                tenant,
                old_read_to,
            });
        }
        files
    }

    /// Writes the checkpoint; once written, the metrics show it and count the sets it records
    /// closed (a set whose own write failed is counted at the next write that succeeds).
    ///
    /// # Errors
    /// [`AgentError::State`] when it cannot be written.
    fn save_checkpoint(&mut self) -> Result<(), AgentError> {
        self.checkpoint.save(&self.config.state_dir)?;
        self.metrics.checkpoint_written(&self.checkpoint);
        Ok(())
    }

    fn close(&mut self, set: &PendingSet) -> Result<u64, AgentError> {
        let files = self.set_files(set);
        let inputs: Vec<SetInput<'_>> = files
            .iter()
            .map(|f| SetInput {
                name: &f.name,
                identity: &f.id,
                old: &f.bytes[..f.old as usize],
                new: &f.bytes[..f.new as usize],
                tenant: f.tenant.as_ref(),
                known: self
                    .known
                    .get(&f.id)
                    .filter(|(at, _)| *at == f.old_read_to && f.old_read_to > 0)
                    .map(|(_, k)| k),
            })
            .collect();
        let config = MeterConfig {
            window: self.config.window,
            reorder_horizon_ns: self.config.horizon_ns,
            ..MeterConfig::default()
        };
        let mut closed = close_set(&inputs, set.from_ns, set.to_ns, &config, &self.tenant_map)?;
        crate::unmetered::add_to_report(&mut closed.report, &set.unmetered)
            .map_err(crate::close::CloseError::from)?;
        if closed.late > 0 {
            tracing::warn!(late = closed.late, "records arrived after their windows were closed: counted as loss `late`, never sent");
        }
        let set_id = format!(
            "{}-{:020}-{:020}",
            self.checkpoint.node, set.from_ns, set.to_ns
        );
        self.known = closed
            .next
            .iter()
            .filter_map(|(id, k)| {
                let f = files.iter().find(|f| &f.id == id)?;
                Some((id.clone(), (f.read_to, k.clone())))
            })
            .collect();
        // A set without any recording (an idle node) has nothing to report, unless it warns
        // of unmetered GPU processes.
        if !files.is_empty() || !set.unmetered.is_empty() {
            self.sinks.hand_over(&set_id, &closed.report)?;
        }
        crate::crash::point("events-stored");
        for f in &files {
            let s = self.checkpoint.recordings.entry(f.id.clone()).or_default();
            s.file.clone_from(&f.name);
            s.read_to = f.read_to;
            if let Some(&end) = closed.ends.get(&f.id) {
                s.end_ns = s.end_ns.max(end);
            }
        }
        // Recordings that left the spool (vanished, replaced) are no longer followed.
        self.checkpoint
            .recordings
            .retain(|id, _| set.read_to.contains_key(id));
        self.checkpoint
            .host_processes
            .retain(|id, _| set.read_to.contains_key(id));
        self.checkpoint.closed_to_ns = match set.to_ns {
            // Everything (`--once`) is closed up to the end of the last window anything
            // reached: a later run goes on from there.
            u64::MAX => {
                // Not past the wall clock (plus the horizon): a recording with a clock far in
                // the future must not make every later recording's records `late`.
                let w = self.config.window.ns();
                let end = closed.ends.values().copied().max().unwrap_or(0);
                let end = end.min(self.now_cupti().saturating_add(self.config.horizon_ns));
                set.from_ns.max(end.div_ceil(w).saturating_mul(w))
            }
            to => to,
        };
        self.checkpoint.sets += 1;
        self.checkpoint.pending = None;
        // The set's usage goes into the totals in the write that records it closed: a set
        // closed again after a crash (still `pending` on disk) is counted once.
        if !files.is_empty() {
            self.metrics
                .count_usage(&mut self.checkpoint, &closed.report);
        }
        self.metrics.set_closing(&closed.report);
        self.save_checkpoint()?;
        self.sinks.forget_before(&set_id);
        self.sinks.wake_senders();
        tracing::info!(set = %set_id, rows = closed.report.usage.len(), "closed a window set");
        Ok(closed.late)
    }

    /// The tenant the rule gives recording `r` by its header's labels, unless the tenant map
    /// names its process (the map comes first).
    fn tenant_of(&self, r: &crate::spool::Recording) -> Option<gpumeter_core::TenantName> {
        if self.tenant_map.pid.contains_key(&r.header.process_id) {
            return None;
        }
        let host = self.checkpoint.host_processes.get(&r.identity);
        let labels = crate::spool::labels_on_host(&r.header, host);
        self.config.tenant.tenant(&labels).map(|(t, _)| t)
    }

    /// Retires finished recordings whose every record lies in shipped windows and whose sets
    /// every sink has acknowledged: recorded in the checkpoint first, then moved, deleted or
    /// compressed (a restart between the two finishes the move).
    fn retire(&mut self) -> Result<u64, AgentError> {
        if !self.sinks.all_acknowledged()? {
            return Ok(0);
        }
        let mut n = 0;
        let candidates: Vec<(String, String, PathBuf)> = self
            .spool
            .recordings
            .values()
            .filter(|r| r.finished)
            .filter(|r| {
                self.checkpoint.retired.contains_key(&r.identity)
                    || self
                        .checkpoint
                        .recordings
                        .get(&r.identity)
                        .is_some_and(|s| {
                            s.read_to >= r.complete_len - r.head_len()
                                && s.end_ns <= self.checkpoint.closed_to_ns
                        })
            })
            .map(|r| (r.name.clone(), r.identity.clone(), r.path.clone()))
            .collect();
        // Every candidate is recorded in one checkpoint write before any is put away: a write
        // per recording rewrote the whole checkpoint (with fsyncs) once per recording, so a
        // spool of thousands of finished recordings took minutes in one step.
        let mut marked = false;
        for (name, id, _) in &candidates {
            if !self.checkpoint.retired.contains_key(id) {
                self.checkpoint.recordings.remove(id);
                self.checkpoint.host_processes.remove(id);
                self.checkpoint.retired.insert(id.clone(), name.clone());
                marked = true;
            }
        }
        if marked {
            self.save_checkpoint()?;
            crate::crash::point("retire-saved");
        }
        for (name, _, path) in candidates {
            self.put_away(&path)?;
            self.spool.forget(&name);
            tracing::info!(file = %name, "retired a finished, shipped recording");
            n += 1;
        }
        Ok(n)
    }

    fn put_away(&self, path: &Path) -> Result<(), AgentError> {
        let io = |error| AgentError::Io {
            path: path.to_path_buf(),
            error,
        };
        let done = self.config.spool.join("done");
        let name = path.file_name().unwrap_or_default();
        match self.config.finished {
            Finished::Delete => std::fs::remove_file(path).map_err(io),
            Finished::Move => {
                std::fs::create_dir_all(&done).map_err(io)?;
                std::fs::rename(path, done.join(name)).map_err(io)
            }
            Finished::Compress => {
                std::fs::create_dir_all(&done).map_err(io)?;
                let mut gz = name.to_os_string();
                gz.push(".gz");
                let bytes = std::fs::read(path).map_err(io)?;
                let mut enc =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                std::io::Write::write_all(&mut enc, &bytes).map_err(io)?;
                let packed = enc.finish().map_err(io)?;
                crate::state::write_atomic(&done.join(gz), &packed).map_err(io)?;
                std::fs::remove_file(path).map_err(io)
            }
        }
    }

    fn report_spool_events(&self, events: &[SpoolEvent]) {
        for e in events {
            match e {
                SpoolEvent::New(name) => tracing::info!(file = %name, "following a new recording"),
                SpoolEvent::Truncated { name, was, now } => {
                    tracing::warn!(file = %name, was, now, "a recording shrank below what was read of it: what it lost in open windows is not billed")
                }
                SpoolEvent::Replaced { name, was } => {
                    tracing::warn!(file = %name, was = %was, "a recording was replaced by another under the same name: the first one's usage in open windows is not billed; the new one is followed, and its records in closed windows are loss `late`")
                }
                SpoolEvent::Vanished(name) => {
                    tracing::warn!(file = %name, "a recording disappeared before it finished: its usage in open windows is not billed")
                }
                SpoolEvent::Copy { name, of } => {
                    tracing::warn!(file = %name, of = %of, "a copy of a followed recording (the same header identity): only the fuller file is followed and billed")
                }
                SpoolEvent::Unreadable { name, reason } => {
                    tracing::warn!(file = %name, reason = %reason, "a file in the spool is not a readable recording")
                }
            }
        }
    }
}
