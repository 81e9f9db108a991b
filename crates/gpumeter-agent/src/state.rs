//! The checkpoint: what the agent has closed and shipped, written atomically (a temporary
//! file, fsync, rename, fsync of the folder) after each closed window set, and read at start.
//!
//! It holds the edge before which every window is shipped, each recording's identity and how
//! far the last closed set read it, the recordings already retired, and the window set being
//! closed when the agent stopped (`pending`): a restart closes exactly that set again from the
//! same bytes, so its report and events are the ones an uninterrupted run would have made.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The checkpoint's format version.
pub const CHECKPOINT_VERSION: u32 = 1;

/// How far the agent read one recording.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordingState {
    /// The file name in the spool.
    pub file: String,
    /// Bytes of complete frames the last closed window set metered, counted after the header
    /// frame.
    pub read_to: u64,
    /// The latest instant its records and memory events reach, as far as read (ns).
    #[serde(default)]
    pub end_ns: u64,
}

/// A window set being closed: `[from_ns, to_ns)` from the recordings' first `read_to` bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSet {
    /// The set's first window start, ns.
    pub from_ns: u64,
    /// The set's end, ns (`u64::MAX`: everything, `--once`).
    pub to_ns: u64,
    /// Per recording identity, the bytes this set meters, counted after the header frame.
    pub read_to: BTreeMap<String, u64>,
    /// Unmetered GPU processes this set's report warns of (`unmetered_process`), moved here
    /// from [`Checkpoint::unmetered`] when the set was made, so that closing it again after a
    /// restart gives the same report ([`crate::unmetered`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmetered: Vec<crate::unmetered::UnmeteredProcess>,
}

/// The agent's checkpoint (`<state_dir>/checkpoint.json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// [`CHECKPOINT_VERSION`].
    pub version: u32,
    /// The node's name in set names: the host name at the agent's first start.
    #[serde(default)]
    pub node: String,
    /// Every window ending at or before this instant (ns since the epoch, on CUPTI's clock)
    /// is closed and handed to the sinks; 0 before the first set.
    pub closed_to_ns: u64,
    /// Closed window sets so far.
    pub sets: u64,
    /// Recordings being followed, by identity.
    pub recordings: BTreeMap<String, RecordingState>,
    /// Identities of recordings retired (finished, shipped, moved away): a file with one of
    /// them that shows up again is not metered again.
    pub retired: BTreeMap<String, String>,
    /// The set being closed, if the agent stopped inside a closing step.
    pub pending: Option<PendingSet>,
    /// The cumulative usage of the closed sets behind `gpumeter_usage_total`, updated in the
    /// write that records a set as closed (docs/AGENT.md, "Metrics"); `None` in a checkpoint
    /// of an agent without metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_totals: Option<crate::metrics::UsageTotals>,
    /// Unmetered GPU processes found and not yet in a window set: the next set's report warns
    /// of them ([`crate::unmetered`]). Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmetered: Vec<crate::unmetered::UnmeteredProcess>,
    /// Unmetered GPU processes already found (reported or waiting) that were still listed
    /// when this was written: after a restart they are not reported again while they run.
    /// Absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmetered_found: Vec<crate::unmetered::UnmeteredProcess>,
    /// Per recording identity, its process as found on the host (by its `pid_ns` label and
    /// pid, [`crate::hostproc`]), kept from the first time it was found so that its tenant
    /// does not change once the process is gone; dropped with the recording. Absent when
    /// empty (and in older checkpoints).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_processes: BTreeMap<String, crate::hostproc::HostProcess>,
}

/// A checkpoint that cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading or writing failed.
    #[error("checkpoint {}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// The file is not a checkpoint this version reads.
    #[error("checkpoint {}: {reason}", path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl Checkpoint {
    /// The checkpoint's path in `state_dir`.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("checkpoint.json")
    }

    /// Reads the checkpoint of `state_dir`; a fresh one when there is none.
    ///
    /// # Errors
    /// [`StateError`] when it exists and cannot be read or parsed, or has another version.
    pub fn load(state_dir: &Path) -> Result<Checkpoint, StateError> {
        let path = Checkpoint::path(state_dir);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Checkpoint {
                    version: CHECKPOINT_VERSION,
                    ..Checkpoint::default()
                })
            }
            Err(error) => return Err(StateError::Io { path, error }),
        };
        let c: Checkpoint = serde_json::from_slice(&bytes).map_err(|e| StateError::Bad {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if c.version != CHECKPOINT_VERSION {
            return Err(StateError::Bad {
                path,
                reason: format!(
                    "version {} (this agent reads {CHECKPOINT_VERSION})",
                    c.version
                ),
            });
        }
        Ok(c)
    }

    /// Writes the checkpoint atomically ([`write_atomic`]).
    ///
    /// # Errors
    /// [`StateError::Io`].
    pub fn save(&self, state_dir: &Path) -> Result<(), StateError> {
        let path = Checkpoint::path(state_dir);
        let mut bytes = serde_json::to_vec_pretty(self).map_err(|e| StateError::Bad {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        bytes.push(b'\n');
        write_atomic_then(&path, &bytes, || crate::crash::point("checkpoint-temp"))
            .map_err(|error| StateError::Io { path, error })
    }
}

/// Writes `bytes` to `path` so that a crash at any instant leaves either the old file or the
/// new one, whole: a temporary file beside it (`.<name>.tmp`), fsync, rename over `path`,
/// fsync of the folder (POSIX `rename(2)` is atomic; the folder's fsync makes the rename
/// durable).
///
/// # Errors
/// The I/O error of any step (the temporary file is then removed when possible).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_then(path, bytes, || ())
}

/// [`write_atomic`], calling `synced` between the temporary file's fsync and its rename.
fn write_atomic_then(path: &Path, bytes: &[u8], synced: impl FnOnce()) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        synced();
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_survives_a_round_trip_and_a_missing_one_is_fresh() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fresh = Checkpoint::load(dir.path()).expect("fresh");
        assert_eq!(fresh.version, CHECKPOINT_VERSION);
        assert_eq!(fresh.closed_to_ns, 0);
        let mut c = fresh.clone();
        c.closed_to_ns = 3_600_000_000_000;
        c.recordings.insert(
            "h/1/2/3".into(),
            RecordingState {
                file: "h-1.gmr".into(),
                read_to: 4096,
                end_ns: 7,
            },
        );
        c.pending = Some(PendingSet {
            from_ns: 1,
            to_ns: u64::MAX,
            read_to: BTreeMap::from([("h/1/2/3".to_string(), 8192)]),
            unmetered: Vec::new(),
        });
        c.save(dir.path()).expect("save");
        assert_eq!(Checkpoint::load(dir.path()).expect("load"), c);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("checkpoint.json")]);
    }

    #[test]
    fn host_processes_round_trip_and_older_checkpoints_have_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            Checkpoint::path(dir.path()),
            br#"{"version": 1, "closed_to_ns": 0, "sets": 0, "recordings": {}, "retired": {}, "pending": null}"#,
        )
        .expect("w");
        let mut c = Checkpoint::load(dir.path()).expect("an older checkpoint loads");
        assert!(c.host_processes.is_empty());
        c.host_processes.insert(
            "h/7/2/3".into(),
            crate::hostproc::HostProcess {
                host_pid: 4242,
                cgroup: Some("/kubepods/pod1/abc".into()),
                pod_uid: Some("4a7ec3f2-5d1b-4c8e-9f3a-0b2c6d8e1f47".into()),
                container_id: None,
            },
        );
        c.save(dir.path()).expect("save");
        assert_eq!(Checkpoint::load(dir.path()).expect("load"), c);
    }

    #[test]
    fn a_damaged_checkpoint_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(Checkpoint::path(dir.path()), b"{\"version\": 1, \"closed").expect("w");
        assert!(matches!(
            Checkpoint::load(dir.path()),
            Err(StateError::Bad { .. })
        ));
    }
}
