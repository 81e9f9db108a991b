//! Hashing while reading: SHA-256 digests of a file's bytes and of its decompressed text,
//! computed beside the parse on a worker thread ([`HashWorker`]) from what a reader passes
//! through ([`Tally`], which also counts and caps what is read).

use std::io::Read;

use sha2::{Digest, Sha256};

/// A thread that computes SHA-256 digests of two streams (0: a file's bytes, 1: its
/// decompressed text) from chunks handed to it, so that hashing (a sixth of a Kineto import's
/// CPU time) runs beside the parse instead of on its path. At most 4 chunks (each at most the
/// reader's buffer, 1 MiB) wait for it; their buffers come back to be reused.
pub(crate) struct HashWorker {
    tx: Option<std::sync::mpsc::SyncSender<(usize, Vec<u8>)>>,
    back: std::sync::mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<[Sha256; 2]>>,
    /// Set when a chunk could not be handed over (the thread is gone).
    lost: std::cell::Cell<bool>,
}

impl HashWorker {
    /// The worker, or `None` when no thread can be started.
    pub(crate) fn start() -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>)>(4);
        let (back_tx, back) = std::sync::mpsc::sync_channel::<Vec<u8>>(6);
        let thread = std::thread::Builder::new()
            .name("gpumeter-sha256".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let mut h = [Sha256::new(), Sha256::new()];
                for (which, buf) in rx {
                    if let Some(h) = h.get_mut(which) {
                        h.update(&buf);
                    }
                    let _ = back_tx.try_send(buf);
                }
                h
            })
            .ok()?;
        Some(HashWorker {
            tx: Some(tx),
            back,
            thread: Some(thread),
            lost: std::cell::Cell::new(false),
        })
    }

    /// Hands a copy of `bytes` to the digest of stream `which`.
    pub(crate) fn feed(&self, which: usize, bytes: &[u8]) {
        let mut buf = self.back.try_recv().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send((which, buf)).is_ok());
        if !sent {
            self.lost.set(true);
        }
    }

    /// Both digests once every chunk is hashed; `None` when a chunk was lost.
    pub(crate) fn finish(mut self) -> Option<[Sha256; 2]> {
        drop(self.tx.take());
        let digests = self.thread.take()?.join().ok()?;
        (!self.lost.get()).then_some(digests)
    }
}

/// Where a [`Tally`] sends what it reads to be hashed.
pub(crate) enum Sink<'w> {
    /// Hashed on the reading thread.
    Inline(Sha256),
    /// Hashed by the worker, as its stream 0 or 1.
    Worker(&'w HashWorker, usize),
}

impl Sink<'_> {
    /// The digest so far when hashed inline, else the worker's stream to ask for it.
    pub(crate) fn detach(self) -> Result<Sha256, usize> {
        match self {
            Sink::Inline(h) => Ok(h),
            Sink::Worker(_, which) => Err(which),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Sink::Inline(h) => h.update(bytes),
            Sink::Worker(w, which) => w.feed(*which, bytes),
        }
    }
}

/// A reader that hashes (SHA-256, through its [`Sink`]) and counts what is read through it,
/// refuses to read more than `limit` bytes (`over` is then set), and keeps the first I/O error
/// of the reader under it (handing up a copy), so that the caller can tell a read or gzip
/// fault from a JSON one.
pub(crate) struct Tally<'w, R> {
    inner: R,
    read: u64,
    limit: u64,
    pub(crate) over: bool,
    pub(crate) sink: Sink<'w>,
    pub(crate) error: Option<std::io::Error>,
}

impl<'w, R: Read> Tally<'w, R> {
    pub(crate) fn new(inner: R, limit: u64, sink: Sink<'w>) -> Self {
        Tally {
            inner,
            read: 0,
            limit,
            over: false,
            sink,
            error: None,
        }
    }
}

impl<R: Read> Read for Tally<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.over {
            return Err(std::io::Error::other("over the decompressed size limit"));
        }
        // At most one byte over the limit, to tell "exactly at the limit" from "over".
        let room = self.limit.saturating_add(1).saturating_sub(self.read);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        match self.inner.read(&mut buf[..want]) {
            Ok(n) => {
                self.read += n as u64;
                if self.read > self.limit {
                    self.over = true;
                    return Err(std::io::Error::other("over the decompressed size limit"));
                }
                self.sink.update(&buf[..n]);
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                let copy = std::io::Error::new(e.kind(), e.to_string());
                self.error.get_or_insert(e);
                Err(copy)
            }
        }
    }
}
