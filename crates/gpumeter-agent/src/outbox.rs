//! The durable on-disk outbox of event batches (docs/AGENT.md, "The outbox").
//!
//! One outbox per events sink, in a directory of its own:
//!
//! ```text
//! <dir>/pending/<id>.batch      a batch waiting to be sent (JSON; its requests' bodies are
//!                               sent byte for byte on every try); counted against the limit
//! <dir>/pending/<id>.progress   how many of the batch's requests were acknowledged, and the
//!                               requests the receiver refused (a batch sent in parts: Stripe)
//! <dir>/delivered/<id>          an empty marker: the batch was acknowledged whole
//! <dir>/rejected/<id>.batch     a batch the receiver refused (a 4xx other than 408 and 429)
//! <dir>/rejected/<id>.reason    why (status, response, the events' ids)
//! <dir>/*/.tmp-*                a write cut short (removed by [`Outbox::open`])
//! ```
//!
//! Every write is a temporary file, fsync, rename, fsync of the directory, so after a crash at
//! any instant each file is whole or absent. Ids sort in sending order. One process owns an
//! outbox directory at a time.

mod batch;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpumeter::events::EventFormat;
use serde::{Deserialize, Serialize};

pub use batch::{
    Batch, Request, CLOUDEVENTS_BATCH_CONTENT_TYPE, CLOUDEVENTS_PER_REQUEST, LAGO_CONTENT_TYPE,
    LAGO_PER_REQUEST, STRIPE_CONTENT_TYPE,
};

/// The longest batch id, in bytes.
pub const MAX_ID_LEN: usize = 200;

const PENDING: &str = "pending";
const DELIVERED: &str = "delivered";
const REJECTED: &str = "rejected";
const TMP_PREFIX: &str = ".tmp-";
const BATCH_EXT: &str = ".batch";
const PROGRESS_EXT: &str = ".progress";
const REASON_EXT: &str = ".reason";

/// Everything that can go wrong with an outbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// A file-system operation failed.
    #[error("outbox: cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done (`create`, `write`, `rename`, `read`, `remove`, `sync`).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A batch id that is not a file-safe name.
    #[error("outbox: batch id `{id}` is not usable: {reason}")]
    BadId {
        /// The id.
        id: String,
        /// Why.
        reason: &'static str,
    },
    /// The outbox is full: the batch was NOT stored; store it again later.
    #[error(
        "OUTBOX FULL: {} holds {used_bytes} bytes of unsent batches and batch `{id}` \
         ({batch_bytes} bytes) would pass its limit of {limit_bytes} bytes; the batch is NOT \
         stored (metering goes on; it is stored once the receiver takes the older batches)",
        dir.display()
    )]
    Full {
        /// The outbox directory.
        dir: PathBuf,
        /// The batch refused.
        id: String,
        /// Its size, bytes.
        batch_bytes: u64,
        /// The bytes of the batches waiting.
        used_bytes: u64,
        /// The limit, bytes.
        limit_bytes: u64,
    },
    /// A batch larger than the whole outbox: it can never be stored.
    #[error(
        "outbox {}: batch `{id}` is {batch_bytes} bytes, more than the outbox's whole limit of \
         {limit_bytes} bytes; raise the limit",
        dir.display()
    )]
    TooLarge {
        /// The outbox directory.
        dir: PathBuf,
        /// The batch refused.
        id: String,
        /// Its size, bytes.
        batch_bytes: u64,
        /// The limit, bytes.
        limit_bytes: u64,
    },
    /// A stored file that cannot be read back.
    #[error("outbox: {} cannot be read: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An event of another format than its batch's.
    #[error("outbox: event `{event_id}` is a {event_format} event in a {format} batch")]
    MixedFormat {
        /// The batch's format.
        format: EventFormat,
        /// The event's id.
        event_id: String,
        /// The event's format.
        event_format: EventFormat,
    },
    /// A batch id that is not pending.
    #[error("outbox: batch `{id}` is not pending")]
    NotPending {
        /// The id.
        id: String,
    },
    /// Serialization failed (not expected).
    #[error("outbox: JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// What [`Outbox::put`] did. In every case but `Stored` nothing changed (the first stored bytes
/// win).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// The batch was stored.
    Stored {
        /// Its stored size, bytes.
        bytes: u64,
    },
    /// The id is already pending; `same_bytes` says whether its stored bytes equal this
    /// batch's (they always should: a window set's events are computed once).
    AlreadyPending {
        /// Whether the stored batch equals this one.
        same_bytes: bool,
    },
    /// The id was already delivered.
    AlreadyDelivered,
    /// The id was already refused by the receiver (`rejected/`).
    AlreadyRejected,
}

/// The receiver's refusal of one request of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// The request's index in the batch.
    pub request: usize,
    /// The HTTP status.
    pub status: u16,
    /// The start of the response body.
    pub response: String,
}

/// How far a batch's delivery went (`pending/<id>.progress`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// The index of the next request to send (those before it were acknowledged or refused).
    pub next: usize,
    /// The requests the receiver refused.
    pub rejected: Vec<Rejection>,
}

/// A durable outbox of event batches in a directory, bounded in bytes. Shared between the
/// thread that stores batches and the sender's thread (`&self` methods; `Sync`).
#[derive(Debug)]
pub struct Outbox {
    dir: PathBuf,
    limit_bytes: u64,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Pending ids and their stored sizes, bytes.
    pending: BTreeMap<String, u64>,
    /// Their sum.
    bytes: u64,
    /// Bumped by every put and [`Outbox::wake`].
    generation: u64,
}

impl Outbox {
    /// Opens (creating) the outbox in `dir`, bounded at `limit_bytes` of pending batches; removes
    /// the temporary files of interrupted writes and finishes an interrupted
    /// [`mark_delivered`](Self::mark_delivered) or [`reject`](Self::reject).
    ///
    /// # Errors
    /// [`OutboxError::Io`] when a directory cannot be created or read.
    pub fn open(dir: &Path, limit_bytes: u64) -> Result<Outbox, OutboxError> {
        for sub in [PENDING, DELIVERED, REJECTED] {
            let d = dir.join(sub);
            fs::create_dir_all(&d).map_err(io("create", &d))?;
            remove_temporaries(&d)?;
        }
        sync_dir(dir)?;
        let outbox = Outbox {
            dir: dir.to_path_buf(),
            limit_bytes,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        };
        outbox.scan()?;
        Ok(outbox)
    }

    /// Reads `pending/` into the state.
    fn scan(&self) -> Result<(), OutboxError> {
        let pending_dir = self.dir.join(PENDING);
        let mut state = self.lock();
        let mut progress_files = Vec::new();
        for name in list(&pending_dir)? {
            if let Some(id) = name.strip_suffix(BATCH_EXT) {
                let path = pending_dir.join(&name);
                if self.delivered_path(id).exists() || self.rejected_path(id).exists() {
                    // A mark_delivered or reject cut short after its marker was written.
                    self.remove_pending_files(id)?;
                    continue;
                }
                let len = fs::metadata(&path).map_err(io("read", &path))?.len();
                state.pending.insert(id.to_string(), len);
                state.bytes += len;
            } else if let Some(id) = name.strip_suffix(PROGRESS_EXT) {
                progress_files.push(id.to_string());
            } else {
                tracing::warn!(file = %pending_dir.join(&name).display(), "outbox: unknown file left alone");
            }
        }
        for id in progress_files {
            if !state.pending.contains_key(&id) {
                remove_file(&pending_dir.join(format!("{id}{PROGRESS_EXT}")))?;
            }
        }
        Ok(())
    }

    /// The outbox directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The limit of pending batches, bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.limit_bytes
    }

    /// Stores `batch` under `id` (a file-safe name: ASCII letters, digits, `.`, `_`, `-`, not
    /// starting with `.`, at most [`MAX_ID_LEN`] bytes; ids sort in sending order) atomically.
    /// Idempotent: an id already pending, delivered or rejected is left as it is.
    ///
    /// # Errors
    /// [`OutboxError::Full`] (logged at error level here) when the pending bytes plus this batch
    /// would pass the limit: nothing is stored, store it again later;
    /// [`OutboxError::TooLarge`] when the batch alone passes it; [`OutboxError::BadId`];
    /// [`OutboxError::Io`].
    pub fn put(&self, id: &str, batch: &Batch) -> Result<Put, OutboxError> {
        check_id(id)?;
        let bytes = batch.to_stored()?;
        let mut state = self.lock();
        if self.delivered_path(id).exists() {
            return Ok(Put::AlreadyDelivered);
        }
        if self.rejected_path(id).exists() {
            return Ok(Put::AlreadyRejected);
        }
        if state.pending.contains_key(id) {
            let path = self.pending_path(id);
            let stored = fs::read(&path).map_err(io("read", &path))?;
            let same_bytes = stored == bytes;
            if !same_bytes {
                tracing::error!(id, outbox = %self.dir.display(), "outbox: batch stored again with other bytes; the first stored bytes are kept");
            }
            return Ok(Put::AlreadyPending { same_bytes });
        }
        let len = bytes.len() as u64;
        if len > self.limit_bytes {
            let e = OutboxError::TooLarge {
                dir: self.dir.clone(),
                id: id.to_string(),
                batch_bytes: len,
                limit_bytes: self.limit_bytes,
            };
            tracing::error!("{e}");
            return Err(e);
        }
        if state.bytes + len > self.limit_bytes {
            let e = OutboxError::Full {
                dir: self.dir.clone(),
                id: id.to_string(),
                batch_bytes: len,
                used_bytes: state.bytes,
                limit_bytes: self.limit_bytes,
            };
            tracing::error!("{e}");
            return Err(e);
        }
        write_atomic(&self.dir.join(PENDING), &format!("{id}{BATCH_EXT}"), &bytes)?;
        state.pending.insert(id.to_string(), len);
        state.bytes += len;
        state.generation += 1;
        drop(state);
        self.changed.notify_all();
        Ok(Put::Stored { bytes: len })
    }

    /// The pending ids, in sending order.
    pub fn pending(&self) -> Vec<String> {
        self.lock().pending.keys().cloned().collect()
    }

    /// How many batches are pending.
    pub fn pending_count(&self) -> usize {
        self.lock().pending.len()
    }

    /// The bytes of the pending batches.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Whether no batch is pending.
    pub fn is_empty(&self) -> bool {
        self.lock().pending.is_empty()
    }

    /// Whether `id` was delivered (and its marker not forgotten).
    pub fn is_delivered(&self, id: &str) -> bool {
        check_id(id).is_ok() && self.delivered_path(id).exists()
    }

    /// Whether `id` was refused by the receiver (`rejected/`).
    pub fn is_rejected(&self, id: &str) -> bool {
        check_id(id).is_ok() && self.rejected_path(id).exists()
    }

    /// The ids in `rejected/`, sorted.
    ///
    /// # Errors
    /// [`OutboxError::Io`].
    pub fn rejected(&self) -> Result<Vec<String>, OutboxError> {
        let mut ids: Vec<String> = list(&self.dir.join(REJECTED))?
            .into_iter()
            .filter_map(|n| n.strip_suffix(BATCH_EXT).map(str::to_string))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The pending batch `id` and its delivery progress.
    ///
    /// # Errors
    /// [`OutboxError::NotPending`]; [`OutboxError::Corrupt`] when its file cannot be read back
    /// (the sender moves it to `rejected/`); [`OutboxError::Io`].
    pub fn load(&self, id: &str) -> Result<(Batch, Progress), OutboxError> {
        let _state = self.pending_guard(id)?;
        let path = self.pending_path(id);
        let bytes = fs::read(&path).map_err(io("read", &path))?;
        let batch = Batch::from_stored(&bytes).map_err(|reason| OutboxError::Corrupt {
            path: path.clone(),
            reason,
        })?;
        let ppath = self.dir.join(PENDING).join(format!("{id}{PROGRESS_EXT}"));
        let progress = match fs::read(&ppath) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| OutboxError::Corrupt {
                path: ppath.clone(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Progress::default(),
            Err(e) => return Err(io("read", &ppath)(e)),
        };
        Ok((batch, progress))
    }

    /// Records how far the delivery of pending batch `id` went, atomically.
    ///
    /// # Errors
    /// [`OutboxError::NotPending`]; [`OutboxError::Io`].
    pub fn record_progress(&self, id: &str, progress: &Progress) -> Result<(), OutboxError> {
        let _state = self.pending_guard(id)?;
        let bytes = serde_json::to_vec(progress)?;
        write_atomic(
            &self.dir.join(PENDING),
            &format!("{id}{PROGRESS_EXT}"),
            &bytes,
        )
    }

    /// Marks pending batch `id` delivered: writes its marker in `delivered/`, then removes the
    /// batch and its progress (a crash in between is finished by [`open`](Self::open)).
    ///
    /// # Errors
    /// [`OutboxError::NotPending`]; [`OutboxError::Io`].
    pub fn mark_delivered(&self, id: &str) -> Result<(), OutboxError> {
        let mut state = self.pending_guard(id)?;
        write_atomic(&self.dir.join(DELIVERED), id, b"")?;
        self.remove_pending_files(id)?;
        forget(&mut state, id);
        Ok(())
    }

    /// Moves pending batch `id` to `rejected/` with `reason` beside it (`<id>.reason`), logged at
    /// error level: the receiver refused it, and it is never sent again unless an operator
    /// moves it back to `pending/`.
    ///
    /// # Errors
    /// [`OutboxError::NotPending`]; [`OutboxError::Io`].
    pub fn reject(&self, id: &str, reason: &str) -> Result<(), OutboxError> {
        let mut state = self.pending_guard(id)?;
        let rejected = self.dir.join(REJECTED);
        tracing::error!(id, outbox = %self.dir.display(), "outbox: batch REJECTED by the receiver, moved to rejected/: {reason}");
        write_atomic(&rejected, &format!("{id}{REASON_EXT}"), reason.as_bytes())?;
        let from = self.pending_path(id);
        let to = self.rejected_path(id);
        fs::rename(&from, &to).map_err(io("rename", &from))?;
        sync_dir(&rejected)?;
        self.remove_pending_files(id)?;
        forget(&mut state, id);
        Ok(())
    }

    /// Forgets the delivered markers of ids sorting before `id` (they are needed only while
    /// the agent might store those batches again, that is until its checkpoint is past them).
    ///
    /// # Errors
    /// [`OutboxError::Io`].
    pub fn forget_delivered_before(&self, id: &str) -> Result<usize, OutboxError> {
        let _state = self.lock();
        let dir = self.dir.join(DELIVERED);
        let mut n = 0;
        for name in list(&dir)? {
            if name.as_str() < id {
                remove_file(&dir.join(&name))?;
                n += 1;
            }
        }
        if n > 0 {
            sync_dir(&dir)?;
        }
        Ok(n)
    }

    /// A number that changes with every stored batch and [`wake`](Self::wake).
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Wakes the threads in [`wait_for_change`](Self::wait_for_change) (after setting a stop
    /// flag, say).
    pub fn wake(&self) {
        self.lock().generation += 1;
        self.changed.notify_all();
    }

    /// Waits until [`generation`](Self::generation) differs from `seen`, `stop` is set (checked
    /// on every wake-up), or `timeout` passed; returns the generation.
    pub fn wait_for_change(&self, seen: u64, timeout: Duration, stop: &AtomicBool) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        while state.generation == seen && !stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = match self.changed.wait_timeout(state, deadline - now) {
                Ok((s, _)) => s,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        state.generation
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as consistent as the files.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending_guard(&self, id: &str) -> Result<MutexGuard<'_, State>, OutboxError> {
        let state = self.lock();
        if !state.pending.contains_key(id) {
            return Err(OutboxError::NotPending { id: id.to_string() });
        }
        Ok(state)
    }

    fn pending_path(&self, id: &str) -> PathBuf {
        self.dir.join(PENDING).join(format!("{id}{BATCH_EXT}"))
    }

    fn delivered_path(&self, id: &str) -> PathBuf {
        self.dir.join(DELIVERED).join(id)
    }

    fn rejected_path(&self, id: &str) -> PathBuf {
        self.dir.join(REJECTED).join(format!("{id}{BATCH_EXT}"))
    }

    /// Removes `pending/<id>.batch` and `pending/<id>.progress` where present.
    fn remove_pending_files(&self, id: &str) -> Result<(), OutboxError> {
        let dir = self.dir.join(PENDING);
        for name in [format!("{id}{BATCH_EXT}"), format!("{id}{PROGRESS_EXT}")] {
            let path = dir.join(name);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("remove", &path)(e)),
            }
        }
        sync_dir(&dir)
    }
}

/// Drops `id` from the pending state.
fn forget(state: &mut State, id: &str) {
    if let Some(len) = state.pending.remove(id) {
        state.bytes -= len;
    }
}

/// Refuses an id that is not a file-safe name.
fn check_id(id: &str) -> Result<(), OutboxError> {
    let bad = |reason| {
        Err(OutboxError::BadId {
            id: id.to_string(),
            reason,
        })
    };
    if id.is_empty() {
        return bad("it is empty");
    }
    if id.len() > MAX_ID_LEN {
        return bad("it is longer than 200 bytes");
    }
    if id.starts_with('.') {
        return bad("it starts with `.`");
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("only ASCII letters, digits, `.`, `_` and `-` are allowed");
    }
    Ok(())
}

/// A closure turning an I/O error into [`OutboxError::Io`].
fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> OutboxError {
    let path = path.to_path_buf();
    move |source| OutboxError::Io { op, path, source }
}

/// Writes `dir/name` atomically: a temporary file, fsync, rename, fsync of `dir`.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), OutboxError> {
    let tmp = dir.join(format!("{TMP_PREFIX}{name}"));
    let mut f = File::create(&tmp).map_err(io("create", &tmp))?;
    f.write_all(bytes).map_err(io("write", &tmp))?;
    f.sync_all().map_err(io("sync", &tmp))?;
    drop(f);
    let path = dir.join(name);
    fs::rename(&tmp, &path).map_err(io("rename", &tmp))?;
    sync_dir(dir)
}

/// Fsyncs a directory (its entries).
fn sync_dir(dir: &Path) -> Result<(), OutboxError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))
}

/// The names of the files in `dir` (names that are not UTF-8 are skipped with a warning).
fn list(dir: &Path) -> Result<Vec<String>, OutboxError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io("read", dir))? {
        let entry = entry.map_err(io("read", dir))?;
        match entry.file_name().into_string() {
            Ok(n) => names.push(n),
            Err(n) => {
                tracing::warn!(dir = %dir.display(), name = ?n, "outbox: file name not UTF-8 left alone")
            }
        }
    }
    Ok(names)
}

fn remove_file(path: &Path) -> Result<(), OutboxError> {
    fs::remove_file(path).map_err(io("remove", path))
}

/// Removes the temporary files of interrupted writes in `dir`.
fn remove_temporaries(dir: &Path) -> Result<(), OutboxError> {
    let mut removed = false;
    for name in list(dir)? {
        if name.starts_with(TMP_PREFIX) {
            remove_file(&dir.join(&name))?;
            removed = true;
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
