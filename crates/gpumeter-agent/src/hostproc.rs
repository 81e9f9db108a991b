//! A recording's process on the host: found by its pid namespace (the `pid_ns` label the
//! injection library records) and the pid the header gives, for the pod and container its
//! host cgroup names (docs/AGENT.md, "Tenants").
//!
//! # Why
//!
//! On cgroup v2 containerd, CRI-O, Docker and Podman give a container a private cgroup
//! namespace by default: inside it `/proc/self/cgroup` reads `0::/`, so the header's `cgroup`
//! label names no pod. The agent runs in the host's pid namespace (`hostPID: true`,
//! deploy/k8s), where it can read the process's cgroup itself.
//!
//! # The rule
//!
//! The recording's process is the host process `P` with
//! 1. `/proc/P/ns/pid` naming the namespace `pid_ns` (`pid:[<pid_ns>]`), and
//! 2. the innermost pid of `/proc/P/status`'s `NSpid:` line equal to the header's pid.
//!
//! Both are exact: no two live processes share them. When `pid_ns` is the agent's own pid
//! namespace (a process on the host itself, the agent not in a container) `P` is the header's
//! pid, if its `NSpid:` line is that pid alone; otherwise `P` is looked up among the pids found
//! in that namespace by a scan of `/proc`.
//!
//! From `/proc/P/cgroup` (its path as the injection library reads its own; relative, `/../…`,
//! when the agent is in a cgroup namespace of its own) come the pod UID and the container id
//! ([`crate::cgroup::parse_cgroup`]): the labels `cgroup_pod_uid` and `cgroup_container_id`,
//! where the header's own `cgroup` label gave none ([`crate::spool::labels_on_host`]).
//!
//! `status` and `cgroup` of any process are world-readable, but `ns/pid` of another user's
//! process (or of one with capabilities the reader lacks) needs ptrace access
//! (`CAP_SYS_PTRACE`; ptrace(2), "Ptrace access mode checking"). Without it such processes in
//! other pid namespaces are not found (logged once), and their recordings' pods are what their
//! headers say; processes in the agent's own namespace are found all the same.
//!
//! # When, and what it costs
//!
//! A recording is looked up when the agent first follows it (its process is then usually
//! alive) and again at later steps while it is not found and not finished (its process may
//! still be alive). What is found is kept in the checkpoint
//! ([`crate::state::Checkpoint::host_processes`]) the first time, and used from then on: the
//! tenant of a recording's records does not change when the agent restarts after the process
//! ended, nor when a pending set is closed again. A recording without `pid_ns` (older ones),
//! or of another host (its header's host name is not the node's, and its namespace is not
//! among the host's) is not looked up again.
//!
//! A scan of `/proc` reads one link (`/proc/<pid>/ns/pid`) per host process, then the status
//! of the processes in the namespaces wanted; it is made only for recordings not yet found
//! whose namespace is not the agent's, and then at most once per [`RESCAN`]. The pids it finds
//! per namespace are kept until the next scan: a namespace's other recordings are found from
//! them without a scan.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpumeter_recording::gmr::GmrHeader;
use serde::{Deserialize, Serialize};

pub use crate::proc_files::{namespace_inode, read_pid_ns};

/// The header label of the process's pid namespace (its inode number, decimal).
pub const PID_NS_LABEL: &str = "pid_ns";

/// The least time between two scans of `/proc` ([module docs](self)).
pub const RESCAN: Duration = Duration::from_secs(10);

/// A recording's process as found on the host, kept in the checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostProcess {
    /// Its pid on the host (in the agent's pid namespace) when it was found.
    pub host_pid: u32,
    /// Its cgroup path as the agent read it (`/proc/<host_pid>/cgroup`), when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    /// The pod UID that path names (lowercase), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The container id that path names (64 lowercase hexadecimal digits), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

/// The pid namespace a header names (its [`PID_NS_LABEL`] label), when it has one that parses.
pub fn pid_ns_of(h: &GmrHeader) -> Option<u64> {
    h.labels.get(PID_NS_LABEL)?.trim().parse().ok()
}

/// The `NSpid:` line of process `pid`'s status under `proc_root`: its pid in each pid
/// namespace from the one of `proc_root`'s mount (the agent's) inwards
/// ([`crate::proc_files::parse_nspid`]). World-readable: no ptrace access needed.
fn nspid(proc_root: &Path, pid: u32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(proc_root.join(pid.to_string()).join("status")).ok()?;
    crate::proc_files::parse_nspid(&status)
}

/// What a look-up gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The process, found.
    Found(HostProcess),
    /// Not found now; it may be at a later step.
    NotYet,
    /// Never to be found: no `pid_ns`, or a recording of another host.
    Never,
}

/// Finds recordings' processes on the host ([module docs](self)).
#[derive(Debug)]
pub struct Resolver {
    proc_root: PathBuf,
    /// The agent's own pid namespace, when readable.
    own_ns: Option<u64>,
    /// Host pids per pid namespace, as of the last scan.
    by_ns: BTreeMap<u64, Vec<u32>>,
    /// When the last scan was made.
    scanned: Option<Instant>,
    /// The least time between scans.
    rescan: Duration,
    /// Recordings (identities) not to look up again.
    given_up: BTreeSet<String>,
    /// A scan was refused namespace links (logged once).
    denied: bool,
}

impl Resolver {
    /// A resolver reading `proc_root` (`/proc`), whose own pid namespace is `own_ns` (`None`:
    /// read `<proc_root>/self/ns/pid`).
    pub fn new(proc_root: &Path, own_ns: Option<u64>) -> Resolver {
        let own_ns = own_ns.or_else(|| {
            let target = std::fs::read_link(proc_root.join("self/ns/pid")).ok()?;
            namespace_inode(target.to_str()?)
        });
        Resolver {
            proc_root: proc_root.to_path_buf(),
            own_ns,
            by_ns: BTreeMap::new(),
            scanned: None,
            rescan: RESCAN,
            given_up: BTreeSet::new(),
            denied: false,
        }
    }

    /// Sets the least time between scans (tests: zero).
    pub fn with_rescan(mut self, rescan: Duration) -> Resolver {
        self.rescan = rescan;
        self
    }

    /// Whether recording `identity` is still to be looked up.
    pub fn wanted(&self, identity: &str) -> bool {
        !self.given_up.contains(identity)
    }

    /// Stops looking up recording `identity` (its process is gone).
    pub fn give_up(&mut self, identity: &str) {
        self.given_up.insert(identity.to_string());
    }

    /// Forgets the recordings given up for which `keep` is false (those no longer in the
    /// spool), so that what is remembered stays bounded by the spool.
    pub fn retain_given_up(&mut self, keep: impl Fn(&str) -> bool) {
        self.given_up.retain(|id| keep(id));
    }

    /// Looks up the process of the recording `identity` with header `h`, on the node named
    /// `node` (the checkpoint's node name). [`Lookup::Never`] is remembered: the recording is
    /// not looked up again.
    pub fn resolve(&mut self, identity: &str, h: &GmrHeader, node: &str) -> Lookup {
        let Some(ns) = pid_ns_of(h) else {
            self.give_up(identity);
            return Lookup::Never;
        };
        if let Some(p) = self.find(ns, h.process_id) {
            return Lookup::Found(self.host_process(p));
        }
        if self.own_ns == Some(ns) {
            return Lookup::NotYet;
        }
        let may_scan = self.scanned.is_none_or(|t| t.elapsed() >= self.rescan);
        if !may_scan {
            return Lookup::NotYet;
        }
        self.scan();
        if let Some(p) = self.find(ns, h.process_id) {
            return Lookup::Found(self.host_process(p));
        }
        if h.host != node && !self.by_ns.contains_key(&ns) {
            self.give_up(identity);
            return Lookup::Never;
        }
        Lookup::NotYet
    }

    /// The host pid in namespace `ns` whose innermost pid is `pid`, among the candidates
    /// known without a scan.
    fn find(&self, ns: u64, pid: u32) -> Option<u32> {
        if self.own_ns == Some(ns) {
            // In the agent's own namespace the process is the one whose `NSpid:` is that pid
            // alone (no deeper namespace): exact, and readable without ptrace access.
            return (nspid(&self.proc_root, pid)? == [pid]).then_some(pid);
        }
        let candidates = self.by_ns.get(&ns)?;
        candidates.iter().copied().find(|&p| {
            read_pid_ns(&self.proc_root, p) == Some(ns)
                && nspid(&self.proc_root, p).and_then(|n| n.last().copied()) == Some(pid)
        })
    }

    /// Reads every host process's pid namespace (one link per process), keeping those of
    /// namespaces other than the agent's.
    fn scan(&mut self) {
        self.scanned = Some(Instant::now());
        self.by_ns.clear();
        let Ok(dir) = std::fs::read_dir(&self.proc_root) else {
            return;
        };
        let mut denied = 0u64;
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            match crate::proc_files::pid_ns_link(&self.proc_root, pid) {
                Ok(Some(ns)) if Some(ns) != self.own_ns => {
                    self.by_ns.entry(ns).or_default().push(pid);
                }
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => denied += 1,
                _ => {}
            }
        }
        if denied > 0 && !self.denied {
            self.denied = true;
            tracing::warn!(processes = denied, "cannot read /proc/<pid>/ns/pid of other users' processes (Permission denied: it needs CAP_SYS_PTRACE): recordings of processes in other pid namespaces are not matched to their host processes, so their pods are named only by their headers' labels (docs/AGENT.md, \"Tenants\")");
        }
    }

    /// What `/proc/<pid>/cgroup` says of host process `pid`.
    fn host_process(&self, pid: u32) -> HostProcess {
        let cgroup = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("cgroup"))
            .ok()
            .and_then(|t| crate::proc_files::cgroup_path(&t));
        let pod = cgroup
            .as_deref()
            .map(crate::cgroup::parse_cgroup)
            .unwrap_or_default();
        HostProcess {
            host_pid: pid,
            cgroup,
            pod_uid: pod.pod_uid,
            container_id: pod.container_id,
        }
    }
}

#[cfg(test)]
mod tests;
