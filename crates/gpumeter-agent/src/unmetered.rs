//! Unmetered GPU processes (`[nvml] processes = true`; docs/AGENT.md, "Unmetered GPU
//! processes"): GPU work that escaped the injection library (a process started without
//! `CUDA_INJECTION64_PATH`, a static binary) is seen from NVML's list of each GPU's compute
//! processes.
//!
//! Every `[nvml] interval` a thread of the agent (`gpumeter-nvml`) lists each GPU's compute
//! processes ([`Telemetry::processes`], NVML's `nvmlDeviceGetComputeRunningProcesses`); each
//! of the agent's steps takes in the listings made since the last step, so an NVML call that
//! hangs (a GPU fallen off the bus) holds back only the listing, never metering (a listing
//! late by more than three intervals and a minute is logged once). The agent follows each
//! (device, host pid) listed: when first and last seen (ns since the Unix epoch, wall clock,
//! read when the listing was made) and the most GPU memory it was listed with (bytes).
//!
//! # Matching a process to a recording
//!
//! NVML gives host pids; a recording's header gives the pid the process saw for itself, which
//! in a container is the pid in its own pid namespace. A listed process (host pid `P`) is
//! *metered* when a recording followed in the spool, without its end frame, is its own:
//!
//! 0. A recording with a `pid_ns` label (its pid namespace's inode, recorded by the injection
//!    library) is `P`'s exactly when `/proc/P/ns/pid` names that namespace and the innermost
//!    pid of `P`'s `NSpid:` line (below) is the header pid: exact, even for two containers
//!    whose processes have the same pid in their own namespaces (often 1), and whatever their
//!    cgroup namespaces show ([`crate::hostproc`]). When `/proc/P` or its `ns/pid` link
//!    cannot be read (it needs ptrace access to `P`: `CAP_SYS_PTRACE`, unless `P` is
//!    the agent's user's with no capability the agent lacks; logged once), rules 1 and 2
//!    apply.
//!
//! A recording without `pid_ns` (an older injection library) is `P`'s when it has
//!
//! 1. a header pid equal to `P`, or to `P`'s innermost pid (the last number of the `NSpid:`
//!    line of `/proc/P/status`: every pid namespace's pid of the process, the agent's own
//!    first), and
//! 2. labels that do not contradict `/proc/P/cgroup` (its cgroup path: the `0::` line's, else
//!    the first line's, as the injection library reads its own): the recording's `cgroup`
//!    label, unless it is `/` (the root of a cgroup namespace, which says nothing), equals
//!    `P`'s path or is its tail (`P`'s path ends with it); its pod UID (`POD_UID`, else the
//!    one its cgroup path names) and container id (its cgroup path's) equal those `P`'s path
//!    names, where both are known ([`crate::cgroup::parse_cgroup`]).
//!
//! Host names are not compared: a container's host name is its pod's, not the node's, and the
//! spool is the node's own (one agent per spool). When `/proc/P` cannot be read (the process
//! ended, or the agent does not run in the host's pid namespace: a DaemonSet needs `hostPID:
//! true`), only rule 1's host pid is compared, and a warning says so once.
//!
//! A process listed with no matching recording for longer than the agent's `grace` (counted
//! from the first listing without one, by the wall clock) is *unmetered*: a warning is logged
//! once, and the report of the next window set the agent closes carries a warning
//! `unmetered_process` ([`UnmeteredProcess::warning`]). A process is found once per sighting:
//! it is not reported again while it stays listed on that device, even if its recording comes
//! and goes; once it is no longer listed, a later listing of the same (device, pid) is a new
//! sighting.
//!
//! # When the warning reaches a report
//!
//! A process found unmetered waits in the checkpoint ([`crate::state::Checkpoint::unmetered`])
//! until the agent makes its next window set, which takes every waiting one
//! ([`crate::state::PendingSet::unmetered`], in the same checkpoint write) and hands its report
//! over even when no recording is in the set. A set is made when the node's watermark passes a
//! window's end (docs/AGENT.md, "When a window closes"). The watermark trails the wall clock by
//! at most `horizon + grace` plus a window, unless a recording keeps growing while its latest
//! record start stays behind; so the warning reaches a report at most `window + grace` (and a
//! step) after the process is found, on a node with no recording as on a busy one; such a
//! lagging recording holds it back as it holds back its own windows.
//!
//! # Restart
//!
//! The waiting processes are in the checkpoint, and a set made before a stop is closed again
//! with the same warnings, so none is lost or doubled. The processes already found that were
//! still listed are in the checkpoint too ([`crate::state::Checkpoint::unmetered_found`]):
//! after a restart they are not reported again while they stay listed. A process seen but not
//! yet past the grace when the agent stopped is seen afresh: its grace starts again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use gpumeter_nvml::{Gpu, GpuProcess, Telemetry, TelemetryError};
use gpumeter_recording::gmr::GmrHeader;

use crate::config::{AgentConfig, NvmlConfig};
use crate::AgentError;

mod process;

pub use crate::proc_files::{cgroup_path, parse_nspid, read_proc, ProcFacts};

use process::rfc3339;
pub use process::{add_to_report, UnmeteredProcess};

/// Whether the recording with header `h` belongs to host process `pid`, of which `/proc` says
/// `facts` (`None`: unreadable): the rule of the [module docs](self), "Matching".
pub fn belongs(h: &GmrHeader, pid: u32, facts: Option<&ProcFacts>) -> bool {
    let inner = facts.and_then(|f| f.nspid.last().copied());
    // Rule 0: the recording's pid namespace and pid name its process exactly.
    if let (Some(ns), Some(theirs)) = (crate::hostproc::pid_ns_of(h), facts.and_then(|f| f.pid_ns))
    {
        return ns == theirs && inner == Some(h.process_id);
    }
    if h.process_id != pid && Some(h.process_id) != inner {
        return false;
    }
    let Some(path) = facts.and_then(|f| f.cgroup.as_deref()) else {
        return true;
    };
    if let Some(label) = h.labels.get("cgroup").filter(|l| l.as_str() != "/") {
        let tail = label.starts_with('/') && path.ends_with(label.as_str());
        if path != label && !tail {
            return false;
        }
    }
    let ours = crate::cgroup::parse_cgroup(path);
    let theirs = crate::spool::labels(h);
    let pod = theirs
        .get("POD_UID")
        .map(|u| u.to_ascii_lowercase())
        .or_else(|| theirs.get("cgroup_pod_uid").cloned());
    let differ =
        |a: Option<&String>, b: Option<&String>| matches!((a, b), (Some(a), Some(b)) if a != b);
    !differ(pod.as_ref(), ours.pod_uid.as_ref())
        && !differ(
            theirs.get("cgroup_container_id"),
            ours.container_id.as_ref(),
        )
}

/// How the listing thread gets its telemetry: called at the thread's start, and again with
/// back-off while it fails (NVML not loaded yet: the GPU Operator labels a node before its
/// driver container is up), on the thread, so an `nvmlInit` that hangs holds back only the
/// listing.
pub(crate) type Connect = Box<dyn Fn() -> Result<Arc<dyn Telemetry>, TelemetryError> + Send>;

/// The longest wait between two tries to load NVML.
const CONNECT_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// How to load the telemetry `[nvml] processes` asks for: `None` when it is off (or this
/// build has no NVML, which [`AgentConfig::check_build`] refuses when it is on).
///
/// # Errors
/// [`AgentError::NvmlNotBuilt`] when it is on and this agent was built without the `nvml`
/// feature.
pub(crate) fn live_telemetry(config: &AgentConfig) -> Result<Option<Connect>, AgentError> {
    config.check_build()?;
    if !config.nvml.processes {
        return Ok(None);
    }
    #[cfg(feature = "nvml")]
    {
        let connect: Connect = Box::new(|| {
            gpumeter_nvml::Nvml::init().map(|nvml| Arc::new(nvml) as Arc<dyn Telemetry>)
        });
        Ok(Some(connect))
    }
    #[cfg(not(feature = "nvml"))]
    Ok(None)
}

/// One (device, pid) as listed.
#[derive(Debug, Clone)]
struct Sighting {
    uuid: Option<String>,
    namespace_pid: Option<u32>,
    first_seen_ns: u64,
    last_seen_ns: u64,
    /// Since when it has been listed with no recording (`None`: it has one now).
    unmatched_since_ns: Option<u64>,
    used_memory_bytes: Option<u64>,
    /// Found unmetered (once per sighting).
    found: bool,
}

impl Sighting {
    fn unmetered(&self, device_index: u32, pid: u32) -> UnmeteredProcess {
        UnmeteredProcess {
            device_index,
            device_uuid: self.uuid.clone(),
            pid,
            namespace_pid: self.namespace_pid,
            first_seen_ns: self.first_seen_ns,
            last_seen_ns: self.last_seen_ns,
            used_memory_bytes: self.used_memory_bytes,
        }
    }
}

/// What one listing changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Change {
    /// Processes found unmetered by this listing.
    pub found: Vec<UnmeteredProcess>,
    /// A process found earlier is no longer listed.
    pub gone: bool,
}

impl Change {
    /// Whether the checkpoint's lists change.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty() && !self.gone
    }
}

/// One listing: each GPU with its processes, or why they could not be listed.
pub(crate) type Listing = Vec<(Gpu, Result<Vec<GpuProcess>, TelemetryError>)>;

/// A listing, or why there is none (NVML cannot be loaded, or the GPUs cannot be listed).
type Answer = Result<Listing, String>;

/// The agent's watch of GPU processes ([module docs](self)).
pub(crate) struct Watch {
    lister: Option<Lister>,
    grace_ns: u64,
    seen: BTreeMap<(u32, u32), Sighting>,
    /// The GPUs of the last listing: NVML index → UUID.
    gpus: BTreeMap<u32, Option<String>>,
    /// Whether the last answer was a listing (`None`: no answer yet, or no listing).
    up: Option<bool>,
    proc_root: PathBuf,
    /// What was logged once.
    warned: BTreeSet<String>,
}

/// The listing thread, started at the first poll.
struct Lister {
    /// Taken by the thread when it starts.
    connect: Option<Connect>,
    interval: Duration,
    /// Answers (ns since the Unix epoch when made); `None` before the thread starts.
    listings: Option<mpsc::Receiver<(u64, Answer)>>,
    /// Set when the watch is dropped: the thread ends at its next turn.
    stop: Arc<AtomicBool>,
    /// When the last listing came in (or the thread started).
    last: Instant,
    /// A late listing was logged (until the next one comes).
    late: bool,
    /// The thread could not start, or ended: no more listings.
    ended: bool,
}

impl Drop for Lister {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Lister {
    /// Starts the thread: it loads the telemetry (again and again, with back-off, while that
    /// fails), then every `interval` makes one listing, handed over when the agent takes it
    /// (a bounded channel: it waits for the agent, so listings are never dropped nor heaped).
    /// Logs go where the starting thread's go.
    fn start(&mut self) -> std::io::Result<()> {
        let Some(connect) = self.connect.take() else {
            return Err(std::io::Error::other(
                "the listing thread was started before",
            ));
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let (interval, stop) = (self.interval, Arc::clone(&self.stop));
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        std::thread::Builder::new()
            .name("gpumeter-nvml".to_string())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    listing_loop(&connect, interval, &stop, &tx);
                });
            })?;
        self.listings = Some(rx);
        self.last = Instant::now();
        Ok(())
    }

    /// The listings made since the last call (starting the thread at the first); `None` when
    /// the thread cannot run (logged).
    fn take(&mut self) -> Option<Vec<(u64, Answer)>> {
        if self.ended {
            return None;
        }
        if self.listings.is_none() {
            if let Err(e) = self.start() {
                tracing::error!(error = %e, "cannot start the thread that lists GPU processes: unmetered ones are not found");
                self.ended = true;
                return None;
            }
        }
        let rx = self.listings.as_ref()?;
        let mut out = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(l) => out.push(l),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    tracing::error!("the thread that lists GPU processes ended (a panic in the NVML telemetry?): unmetered ones are no longer found");
                    self.ended = true;
                    break;
                }
            }
        }
        let waited = self.last.elapsed();
        if !out.is_empty() {
            self.last = Instant::now();
            self.late = false;
        } else if !self.late && waited > self.interval * 3 + Duration::from_secs(60) {
            self.late = true;
            tracing::warn!(waited_s = waited.as_secs(), "NVML has not answered a listing of GPU processes for a while (a GPU may have fallen off the bus): unmetered processes are not found meanwhile");
        }
        Some(out)
    }
}

/// The listing thread's work: load the telemetry through `connect` (tried again after
/// `interval`, then twice as long each time up to [`CONNECT_BACKOFF_MAX`], while it fails),
/// then list every `interval`, sending each answer on `tx` until `stop` is set or the agent
/// is gone.
fn listing_loop(
    connect: &Connect,
    interval: Duration,
    stop: &AtomicBool,
    tx: &mpsc::SyncSender<(u64, Answer)>,
) {
    let mut telemetry: Option<Arc<dyn Telemetry>> = None;
    let (mut warned, mut failures, mut backoff) = (BTreeSet::new(), 0u32, interval);
    while !stop.load(Ordering::SeqCst) {
        let answer = match telemetry.clone().map_or_else(connect, Ok) {
            Ok(t) => {
                if telemetry.is_none() && failures > 0 {
                    tracing::info!(
                        tries = failures + 1,
                        "NVML can be used now: GPU processes are listed"
                    );
                }
                telemetry = Some(Arc::clone(&t));
                list(t.as_ref(), &mut warned)
            }
            Err(e) => {
                failures += 1;
                if failures == 1 {
                    tracing::warn!(error = %e, retry_in_s = backoff.as_secs_f64(), "[nvml] processes = true, but NVML cannot be used (yet): GPU processes are not listed, so unmetered ones are not found; trying again");
                }
                Err(e.to_string())
            }
        };
        let wait = if telemetry.is_some() {
            interval
        } else {
            let w = backoff;
            backoff = (backoff * 2).min(CONNECT_BACKOFF_MAX);
            w
        };
        if tx.send((gpumeter_nvml::now_unix_ns(), answer)).is_err() {
            return;
        }
        std::thread::sleep(wait);
    }
}

/// Every GPU's processes; the error (logged once per error) when the GPUs cannot be listed.
fn list(telemetry: &dyn Telemetry, warned: &mut BTreeSet<String>) -> Answer {
    match telemetry.gpus() {
        Ok(gpus) => Ok(gpus
            .into_iter()
            .map(|g| {
                let listed = telemetry.processes(g.index);
                (g, listed)
            })
            .collect()),
        Err(e) => {
            if warned.insert(e.to_string()) {
                tracing::warn!(error = %e, "cannot list the GPUs through NVML: unmetered GPU processes are not found until it can");
            }
            Err(e.to_string())
        }
    }
}

impl Watch {
    /// A watch listing through the telemetry `connect` gives (`None`: no listing) every
    /// `nvml.interval`; a process is unmetered after `grace_ns` without a recording.
    pub fn new(connect: Option<Connect>, nvml: &NvmlConfig, grace_ns: u64) -> Watch {
        Watch {
            lister: connect.map(|connect| Lister {
                connect: Some(connect),
                interval: nvml.interval,
                listings: None,
                stop: Arc::new(AtomicBool::new(false)),
                last: Instant::now(),
                late: false,
                ended: false,
            }),
            grace_ns,
            seen: BTreeMap::new(),
            gpus: BTreeMap::new(),
            up: None,
            proc_root: PathBuf::from("/proc"),
            warned: BTreeSet::new(),
        }
    }

    /// Reads processes' facts under `root` instead of `/proc` (tests).
    #[cfg(test)]
    pub fn with_proc_root(mut self, root: &std::path::Path) -> Watch {
        self.proc_root = root.to_path_buf();
        self
    }

    /// Takes up the processes found before a restart that were still listed then: they are
    /// not found again while they stay listed. Nothing without listing.
    pub fn restore(&mut self, found: &[UnmeteredProcess]) {
        if self.lister.is_none() {
            return;
        }
        for p in found {
            self.seen.insert(
                (p.device_index, p.pid),
                Sighting {
                    uuid: p.device_uuid.clone(),
                    namespace_pid: p.namespace_pid,
                    first_seen_ns: p.first_seen_ns,
                    last_seen_ns: p.last_seen_ns,
                    unmatched_since_ns: Some(p.first_seen_ns),
                    used_memory_bytes: p.used_memory_bytes,
                    found: true,
                },
            );
        }
    }

    /// Takes in the listings made since the last call, against the recordings with headers
    /// `recordings`; `None` when none was made.
    pub fn poll(&mut self, recordings: &[&GmrHeader]) -> Option<Change> {
        let listings = self.lister.as_mut()?.take()?;
        if listings.is_empty() {
            return None;
        }
        let mut change = Change::default();
        for (at, answer) in &listings {
            let Ok(listing) = answer else {
                self.up = Some(false);
                continue;
            };
            self.up = Some(true);
            let c = self.observe(*at, listing, recordings);
            change.found.extend(c.found);
            change.gone |= c.gone;
        }
        Some(change)
    }

    /// Takes in one listing made at `now_ns` (ns since the Unix epoch) against the recordings
    /// with headers `recordings`. A GPU whose processes could not be listed keeps its
    /// sightings as they were (logged once per GPU and kind of error).
    pub fn observe(&mut self, now_ns: u64, listing: &Listing, recordings: &[&GmrHeader]) -> Change {
        let mut change = Change::default();
        // A GPU no longer listed (fallen off the bus, unbound) holds no process any more.
        self.gpus = listing
            .iter()
            .map(|(g, _)| (g.index, g.uuid.clone()))
            .collect();
        let gpus = &self.gpus;
        self.seen.retain(|(d, _), s| {
            let keep = gpus.contains_key(d);
            change.gone |= !keep && s.found;
            keep
        });
        for (gpu, listed) in listing {
            let processes = match listed {
                Ok(p) => p,
                Err(e) => {
                    self.warn_unlisted(gpu.index, e);
                    continue;
                }
            };
            let listed: BTreeSet<u32> = processes.iter().map(|p| p.pid).collect();
            let mut gone_found = false;
            self.seen.retain(|(d, pid), s| {
                let keep = *d != gpu.index || listed.contains(pid);
                gone_found |= !keep && s.found;
                keep
            });
            change.gone |= gone_found;
            for p in processes {
                if let Some(found) = self.sight(now_ns, gpu, p, recordings) {
                    change.found.push(found);
                }
            }
        }
        change
    }

    /// Takes in process `p` listed on `gpu` at `now_ns`; the process when this finds it
    /// unmetered.
    fn sight(
        &mut self,
        now_ns: u64,
        gpu: &Gpu,
        p: &GpuProcess,
        recordings: &[&GmrHeader],
    ) -> Option<UnmeteredProcess> {
        let facts = read_proc(&self.proc_root, p.pid);
        if facts.is_none() {
            self.warn_once("proc".to_string(), || {
                tracing::warn!(pid = p.pid, "cannot read /proc/<pid>/status of a GPU process NVML lists: it ended, or this agent does not see the host's processes (run it in the host's pid namespace, e.g. hostPID: true); it is matched to recordings by its host pid alone");
            });
        }
        if facts.as_ref().is_some_and(|f| f.pid_ns.is_none()) {
            self.warn_once("proc-ns".to_string(), || {
                tracing::warn!(pid = p.pid, "cannot read /proc/<pid>/ns/pid of a GPU process NVML lists (it needs CAP_SYS_PTRACE for another user's process): it is matched to recordings by pid and cgroup, not by pid namespace");
            });
        }
        let metered = recordings.iter().any(|h| belongs(h, p.pid, facts.as_ref()));
        let grace_ns = self.grace_ns;
        let s = self
            .seen
            .entry((gpu.index, p.pid))
            .or_insert_with(|| Sighting {
                uuid: None,
                namespace_pid: None,
                first_seen_ns: now_ns,
                last_seen_ns: now_ns,
                unmatched_since_ns: None,
                used_memory_bytes: None,
                found: false,
            });
        s.uuid = gpu.uuid.clone().or(s.uuid.take());
        if let Some(inner) = facts.as_ref().and_then(|f| f.nspid.last().copied()) {
            s.namespace_pid = (inner != p.pid).then_some(inner);
        }
        s.last_seen_ns = s.last_seen_ns.max(now_ns);
        s.used_memory_bytes = match (s.used_memory_bytes, p.used_memory_bytes) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        s.unmatched_since_ns = if metered {
            None
        } else {
            Some(s.unmatched_since_ns.unwrap_or(now_ns))
        };
        let due = s
            .unmatched_since_ns
            .is_some_and(|since| s.last_seen_ns.saturating_sub(since) >= grace_ns);
        if s.found || !due {
            return None;
        }
        s.found = true;
        let u = s.unmetered(gpu.index, p.pid);
        tracing::warn!(
            pid = u.pid,
            device = u.device_index,
            uuid = u.device_uuid.as_deref().unwrap_or(""),
            first_seen = %rfc3339(u.first_seen_ns),
            last_seen = %rfc3339(u.last_seen_ns),
            used_memory_bytes = u.used_memory_bytes,
            "a process held a GPU with no recording in the spool for longer than the grace period: its GPU work is not metered; the next report warns of it (unmetered_process)"
        );
        Some(u)
    }

    /// Logs once per GPU and kind of error that its processes cannot be listed.
    fn warn_unlisted(&mut self, index: u32, e: &TelemetryError) {
        let kind = match e {
            TelemetryError::NotSupported { .. } => "unsupported",
            TelemetryError::NoPermission { .. } => "permission",
            _ => "failed",
        };
        self.warn_once(format!("device {index} {kind}"), || {
            tracing::warn!(device = index, error = %e, "cannot list the processes of a GPU: its unmetered processes are not found while this lasts");
        });
    }

    fn warn_once(&mut self, key: String, log: impl FnOnce()) {
        if self.warned.insert(key) {
            log();
        }
    }

    /// The processes found unmetered that are still listed, as of the last listing.
    pub fn found(&self) -> Vec<UnmeteredProcess> {
        self.seen
            .iter()
            .filter(|(_, s)| s.found)
            .map(|(&(d, pid), s)| s.unmetered(d, pid))
            .collect()
    }

    /// The processes found unmetered that are still listed and still have no recording.
    /// Whether the last answer of the listing thread was a listing: `Some(false)` while NVML
    /// cannot be loaded or the GPUs cannot be listed, `None` before the first answer or
    /// without listing.
    pub fn listing_up(&self) -> Option<bool> {
        self.up
    }

    /// The device labels ([`UnmeteredProcess::device_label`]) of the GPUs of the last
    /// listing.
    pub fn gpu_labels(&self) -> Vec<String> {
        self.gpus
            .iter()
            .map(|(&index, uuid)| uuid.clone().unwrap_or_else(|| format!("nvml-{index}")))
            .collect()
    }

    pub fn running(&self) -> Vec<UnmeteredProcess> {
        self.seen
            .iter()
            .filter(|(_, s)| s.found && s.unmatched_since_ns.is_some())
            .map(|(&(d, pid), s)| s.unmetered(d, pid))
            .collect()
    }

    /// `waiting` with each process still listed brought up to date (last seen, most memory).
    pub fn refreshed(&self, mut waiting: Vec<UnmeteredProcess>) -> Vec<UnmeteredProcess> {
        for w in &mut waiting {
            if let Some(s) = self.seen.get(&(w.device_index, w.pid)) {
                if s.first_seen_ns == w.first_seen_ns {
                    *w = s.unmetered(w.device_index, w.pid);
                }
            }
        }
        waiting
    }
}

#[cfg(test)]
mod tests;
