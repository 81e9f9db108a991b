//! The spool: the `.gmr` recordings the injection library writes, followed as they grow.
//!
//! Each poll reads every recording whose size or modification time changed, keeps its complete
//! frames (a torn tail is "not yet written": the writer is inside a frame) and walks the
//! activity buffers it has not walked yet for the latest record start, the recording's
//! *progress*. A recording is *finished* when it has its end frame, or when its process is gone
//! (no `/proc/<pid>` on this host) and the file has been quiet for the grace period; then a torn
//! tail stays torn and is counted as loss by the meter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use gpumeter_cupti::{decode_prefix, ApiVersion, Record};
use gpumeter_recording::gmr::{read_gmr, Frame, GmrHeader, FRAME_OVERHEAD, GMR_PREAMBLE_LEN};

/// A recording's identity: `<host>/<pid>/<CUPTI clock>/<wall clock>` of its header, the same
/// as the meter's (`gpumeter_core::Batch::recording`); it stays while the file grows.
pub fn identity(h: &GmrHeader) -> String {
    format!(
        "{}/{}/{}/{}",
        h.host, h.process_id, h.clock.cupti_timestamp_ns, h.clock.unix_time_ns
    )
}

/// The labels of a recording's header (the tenant rule's input), with the pod UID and the
/// container id its `cgroup` label names (`cgroup_pod_uid`, `cgroup_container_id`,
/// [`crate::cgroup::parse_cgroup`]).
pub fn labels(h: &GmrHeader) -> BTreeMap<String, String> {
    let mut labels = h.labels.clone();
    if let Some(path) = h.labels.get("cgroup") {
        let pod = crate::cgroup::parse_cgroup(path);
        if let Some(uid) = pod.pod_uid {
            labels.insert("cgroup_pod_uid".into(), uid);
        }
        if let Some(id) = pod.container_id {
            labels.insert("cgroup_container_id".into(), id);
        }
    }
    labels
}

/// [`labels`], with the pod UID and container id of the recording's process as the agent
/// found it on the host (`host`, [`crate::hostproc`]) where the header's own `cgroup` label
/// gave none (a container with a private cgroup namespace records `cgroup = "/"`).
pub fn labels_on_host(
    h: &GmrHeader,
    host: Option<&crate::hostproc::HostProcess>,
) -> BTreeMap<String, String> {
    let mut labels = labels(h);
    if let Some(p) = host {
        for (key, value) in [
            ("cgroup_pod_uid", &p.pod_uid),
            ("cgroup_container_id", &p.container_id),
        ] {
            if let (false, Some(v)) = (labels.contains_key(key), value) {
                labels.insert(key.to_string(), v.clone());
            }
        }
    }
    labels
}

/// One recording of the spool, as far as it is read.
#[derive(Debug, Clone)]
pub struct Recording {
    /// Its file.
    pub path: PathBuf,
    /// Its file name (the source's name in reports).
    pub name: String,
    /// The header.
    pub header: GmrHeader,
    /// [`identity`] of the header.
    pub identity: String,
    /// Bytes of complete frames from the start of the file.
    pub complete_len: u64,
    /// It has its end frame.
    pub ended: bool,
    /// Finished: ended, or its process gone and the file quiet for the grace period (or
    /// declared finished: `--once`).
    pub finished: bool,
    /// The latest start of a work record in its complete frames, ns on CUPTI's clock (the
    /// header's clock before any).
    pub progress_ns: u64,
    /// `header.clock.cupti_timestamp_ns − header.clock.unix_time_ns`: CUPTI's clock minus the
    /// wall clock, ns.
    pub clock_offset_ns: i128,
    /// The file's first bytes up to the end of its header frame: a change means another
    /// recording was written under the name.
    head: Vec<u8>,
    /// Size and modification time at the last read.
    seen: (u64, Option<SystemTime>),
    /// When the file last changed, as this agent saw it.
    pub changed_at: SystemTime,
}

impl Recording {
    /// Bytes of its magic, version and header frame.
    pub fn head_len(&self) -> u64 {
        self.head.len() as u64
    }
}

/// What a poll saw happen to a recording that the agent should tell an operator about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpoolEvent {
    /// A new recording appeared.
    New(String),
    /// A recording's file shrank below what was read of it.
    Truncated {
        /// The file.
        name: String,
        /// Bytes read before.
        was: u64,
        /// Bytes now.
        now: u64,
    },
    /// A recording's file now has another header (another recording under the same name).
    Replaced {
        /// The file.
        name: String,
        /// The identity it had.
        was: String,
    },
    /// A recording's file disappeared before it finished.
    Vanished(String),
    /// A second file holding the same recording (the same header identity, e.g. a copy):
    /// only the file with the most complete frames is followed, so the recording is billed
    /// once; `name` is the file no longer (or never) followed.
    Copy {
        /// The file not followed.
        name: String,
        /// The file followed.
        of: String,
    },
    /// A file that is not a readable recording (yet); a recording being followed whose file
    /// becomes unreadable is no longer followed.
    Unreadable {
        /// The file.
        name: String,
        /// Why.
        reason: String,
    },
}

/// Reads the spool: every `*.gmr` file directly in `dir`.
#[derive(Debug, Default)]
pub struct Spool {
    /// By file name.
    pub recordings: BTreeMap<String, Recording>,
    /// Files not followed (unreadable, or a copy of a followed recording), with their size
    /// and modification time when read: read again only when they change.
    ignored: BTreeMap<String, (u64, Option<SystemTime>)>,
}

impl Spool {
    /// Reads what changed. `grace_ns`: how long a gone process's file must be quiet;
    /// `all_finished`: treat every recording as finished (`--once`); `hosts`: the host
    /// processes found for recordings (by identity; [`crate::hostproc`]), whose liveness is
    /// theirs rather than the header's pid and host name.
    ///
    /// # Errors
    /// The spool directory cannot be listed.
    pub fn poll(
        &mut self,
        dir: &Path,
        grace_ns: u64,
        all_finished: bool,
        hosts: &BTreeMap<String, crate::hostproc::HostProcess>,
    ) -> std::io::Result<Vec<SpoolEvent>> {
        let mut events = Vec::new();
        let mut present = std::collections::BTreeSet::new();
        let now = SystemTime::now();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".gmr") || !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            present.insert(name.clone());
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            let seen = (meta.len(), meta.modified().ok());
            let grown = match self.recordings.get(&name) {
                Some(r) if r.seen == seen => continue,
                Some(r) if seen.0 >= r.complete_len && same_head(&path, &r.head) => {
                    Some(r.complete_len)
                }
                _ => None,
            };
            if grown.is_none() {
                if self.ignored.get(&name) == Some(&seen) {
                    continue;
                }
                self.ignored.remove(&name);
            }
            let read = match grown {
                Some(offset) => read_from(&path, offset).map(|b| (offset, b)),
                None => std::fs::read(&path).map(|b| (0, b)),
            };
            match read {
                Ok((0, bytes)) => self.read(&path, &name, &bytes, seen, now, &mut events),
                Ok((_, suffix)) => self.grow(&name, &suffix, seen, now, &mut events),
                Err(e) => events.push(SpoolEvent::Unreadable {
                    name: name.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        let gone: Vec<String> = self
            .recordings
            .keys()
            .filter(|n| !present.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            if let Some(r) = self.recordings.remove(&name) {
                if !r.finished {
                    events.push(SpoolEvent::Vanished(name));
                }
                // A copy of it, if any, is read again (and followed) at the next poll.
                self.ignored.clear();
            }
        }
        self.ignored.retain(|n, _| present.contains(n));
        for r in self.recordings.values_mut() {
            if all_finished {
                r.finished = true;
            } else if !r.finished && !process_alive(&r.header, hosts.get(&r.identity)) {
                let quiet = now.duration_since(r.changed_at).unwrap_or_default();
                r.finished = quiet.as_nanos() >= u128::from(grace_ns);
            }
            if r.finished && !r.ended {
                // Its producer is gone: a torn tail will never be completed. Metered with the
                // file, it is counted as loss (`torn_frame`), as `gpumeter usage` counts it.
                r.complete_len = r.complete_len.max(r.seen.0);
            }
        }
        Ok(events)
    }

    /// Forgets a recording (retired: moved, deleted or compressed).
    pub fn forget(&mut self, name: &str) {
        self.recordings.remove(name);
    }

    fn read(
        &mut self,
        path: &Path,
        name: &str,
        bytes: &[u8],
        seen: (u64, Option<SystemTime>),
        now: SystemTime,
        events: &mut Vec<SpoolEvent>,
    ) {
        let file = match read_gmr(bytes) {
            Ok(f) => f,
            Err(e) => {
                // A header still being written is not an error yet.
                if !self.recordings.contains_key(name) && bytes.len() < 4096 {
                    return;
                }
                // A followed recording whose header is gone (truncated, overwritten) is no
                // longer followed: kept, it would hold the node's watermark for ever.
                let reason = match self.recordings.remove(name) {
                    Some(_) => format!("no longer followed: {e}"),
                    None => e.to_string(),
                };
                self.ignored.insert(name.to_string(), seen);
                events.push(SpoolEvent::Unreadable {
                    name: name.to_string(),
                    reason,
                });
                return;
            }
        };
        let id = identity(&file.header);
        let complete_len = file.torn.map_or(bytes.len() as u64, |t| t.offset);
        let mut previous = self.recordings.remove(name);
        if self.is_copy(path, &id, complete_len, seen, &mut previous, events) {
            return;
        }
        let mut r = match previous {
            Some(p) if p.identity == id => {
                // Counted after the header frame: a finished recording rewritten with a
                // longer header (the injection library's last step) has not shrunk.
                let body = complete_len.saturating_sub(head_len(bytes) as u64);
                if body < p.complete_len.saturating_sub(p.head_len()) {
                    events.push(SpoolEvent::Truncated {
                        name: name.to_string(),
                        was: p.complete_len,
                        now: complete_len,
                    });
                }
                p
            }
            other => {
                if let Some(p) = other {
                    events.push(SpoolEvent::Replaced {
                        name: name.to_string(),
                        was: p.identity,
                    });
                } else {
                    events.push(SpoolEvent::New(name.to_string()));
                }
                let h = &file.header;
                Recording {
                    path: path.to_path_buf(),
                    name: name.to_string(),
                    identity: id,
                    complete_len: 0,
                    ended: false,
                    finished: false,
                    progress_ns: h.clock.cupti_timestamp_ns,
                    clock_offset_ns: i128::from(h.clock.cupti_timestamp_ns)
                        - i128::from(h.clock.unix_time_ns),
                    head: Vec::new(),
                    seen: (0, None),
                    changed_at: now,
                    header: file.header.clone(),
                }
            }
        };
        if complete_len != r.complete_len || seen.0 != r.seen.0 {
            r.changed_at = now;
        }
        if r.complete_len == 0 || complete_len < r.complete_len {
            r.progress_ns = r.header.clock.cupti_timestamp_ns;
        }
        r.progress_ns = r.progress_ns.max(progress(&file));
        r.head = bytes[..head_len(bytes).min(bytes.len())].to_vec();
        r.complete_len = complete_len;
        r.ended = file.finished;
        r.finished = r.finished || file.finished;
        r.seen = seen;
        self.recordings.insert(name.to_string(), r);
    }
    /// One file per recording: followed twice, a copy would be billed twice, or stall the
    /// watermark at the copy's progress. Whether the file at `path` (holding recording `id`, of
    /// `complete_len` complete bytes) is a copy of a followed file with as many complete
    /// bytes or more, and then not to be followed; when it holds more, it takes the other
    /// file's place (its state becomes `previous`) and the other is no longer followed.
    fn is_copy(
        &mut self,
        path: &Path,
        id: &str,
        complete_len: u64,
        seen: (u64, Option<SystemTime>),
        previous: &mut Option<Recording>,
        events: &mut Vec<SpoolEvent>,
    ) -> bool {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let twin = self
            .recordings
            .values()
            .find(|r| r.identity == id)
            .map(|r| (r.name.clone(), r.complete_len));
        if let Some((other, other_len)) = twin {
            // Identities are unique among followed files: this name held another one.
            if let Some(p) = previous.take() {
                events.push(SpoolEvent::Replaced {
                    name: name.to_string(),
                    was: p.identity,
                });
            }
            if complete_len <= other_len {
                self.ignored.insert(name.clone(), seen);
                events.push(SpoolEvent::Copy { name, of: other });
                return true;
            }
            // This file holds more of the recording: it is followed from now on.
            if let Some(mut o) = self.recordings.remove(&other) {
                self.ignored.insert(other.clone(), o.seen);
                events.push(SpoolEvent::Copy {
                    name: other,
                    of: name.to_string(),
                });
                o.path = path.to_path_buf();
                o.name = name.to_string();
                *previous = Some(o);
            }
        }
        false
    }
}

impl Spool {
    /// Reads what was appended to recording `name` since its complete bytes: the header
    /// again, then `suffix` (the bytes from there on), through the same reader.
    fn grow(
        &mut self,
        name: &str,
        suffix: &[u8],
        seen: (u64, Option<SystemTime>),
        now: SystemTime,
        events: &mut Vec<SpoolEvent>,
    ) {
        let Some(r) = self.recordings.get_mut(name) else {
            return;
        };
        let mut bytes = r.head.clone();
        bytes.extend_from_slice(suffix);
        let file = match read_gmr(&bytes) {
            Ok(f) => f,
            Err(e) => {
                events.push(SpoolEvent::Unreadable {
                    name: name.to_string(),
                    reason: format!("after byte {}: {e}", r.complete_len),
                });
                r.seen = seen;
                return;
            }
        };
        let head = r.head.len() as u64;
        let added = file.torn.map_or(bytes.len() as u64, |t| t.offset) - head;
        if added > 0 || seen.0 != r.seen.0 {
            r.changed_at = now;
        }
        r.progress_ns = r.progress_ns.max(progress(&file));
        r.complete_len += added;
        r.ended = r.ended || file.finished;
        r.finished = r.finished || file.finished;
        r.seen = seen;
    }
}

/// The bytes of a `.gmr`'s magic, version and header frame (`gpumeter_recording::gmr`: the
/// header is the first frame, `type:u32 len:u64 payload crc:u32`).
pub(crate) fn head_len(bytes: &[u8]) -> usize {
    let len = bytes
        .get(GMR_PREAMBLE_LEN + 4..GMR_PREAMBLE_LEN + 12)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    GMR_PREAMBLE_LEN
        .saturating_add(FRAME_OVERHEAD)
        .saturating_add(usize::try_from(len).unwrap_or(usize::MAX))
}

/// Whether the file at `path` still starts with `head`.
fn same_head(path: &Path, head: &[u8]) -> bool {
    use std::io::Read as _;
    let mut buf = vec![0u8; head.len()];
    !head.is_empty()
        && std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut buf))
            .is_ok()
        && buf == head
}

/// The bytes of the file at `path` from `offset` on.
fn read_from(path: &Path, offset: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read as _, Seek as _};
    let mut f = std::fs::File::open(path)?;
    f.seek(std::io::SeekFrom::Start(offset))?;
    let mut out = Vec::new();
    f.read_to_end(&mut out)?;
    Ok(out)
}

/// The latest start of a work record or memory event in `file`'s activity buffers, ns (0 when
/// none).
fn progress(file: &gpumeter_recording::gmr::GmrFile) -> u64 {
    let api = ApiVersion::from_cupti(file.header.cupti_api_version).unwrap_or_default();
    let mut latest = 0;
    for f in &file.frames {
        if let Frame::ActivityBuffer(b) = &f.frame {
            let (decoded, _) = decode_prefix(b, api);
            for rec in &decoded.records {
                if let Some(start) = work_start(&rec.record) {
                    latest = latest.max(start);
                }
            }
        }
    }
    latest
}

/// The start of a work record or memory event, ns.
fn work_start(r: &Record) -> Option<u64> {
    match r {
        Record::Kernel(k) => Some(k.start),
        Record::Memcpy(m) => Some(m.start),
        Record::PeerCopy(m) => Some(m.start),
        Record::Memset(m) => Some(m.start),
        Record::Memory(m) => Some(m.timestamp),
        _ => None,
    }
}

/// Whether the recording's process still runs. Its host process, when found by its pid
/// namespace (a container's: [`crate::hostproc`]), runs while `/proc/<host pid>` is a process
/// whose innermost pid is the header's (not a reused pid). Otherwise: its host is this host and
/// `/proc/<pid>` exists; a recording of another host name (a spool shared over the network, a
/// pod's own host name) counts as running until it ends or `--once`.
fn process_alive(h: &GmrHeader, host: Option<&crate::hostproc::HostProcess>) -> bool {
    if let Some(p) = host {
        return crate::proc_files::read_proc(Path::new("/proc"), p.host_pid)
            .is_some_and(|f| f.nspid.last() == Some(&h.process_id));
    }
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if !here.is_empty() && !h.host.is_empty() && h.host != here {
        return true;
    }
    Path::new(&format!("/proc/{}", h.process_id)).exists()
}
