//! A Kineto file read, hashed and decompressed on a thread of its own ([`read_ahead`]), its
//! text handed to the parse in chunks, so that the parse (the main thread) does nothing but
//! parse: inflate and both SHA-256 digests run beside it on the second core.
//!
//! Before this, the main thread inflated and a hashing thread received a copy of every chunk
//! of the file and of the text ([`crate::hash::HashWorker`], still the path taken when no
//! thread can be started). docs/PERFORMANCE.md, section "Kineto import: settled events
//! skipped whole, inflate beside the parse", has the measurements.

use std::io::Read;
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender};

use sha2::{Digest, Sha256};

use crate::error::ImportError;
use crate::hash::{Sink, Tally};
use crate::kineto::{self, Collector};
use crate::GZIP_MAGIC;

/// Bytes of text in one chunk handed to the parse: small, so that the parse starts soon after
/// the first chunk is inflated.
const CHUNK_BYTES: usize = 256 << 10;

/// Chunks that may wait for the parse (memory: at most this many more, plus the one being
/// filled and the one being read, whatever the file's size).
const IN_FLIGHT: usize = 4;

/// What the reading thread found, once it read the whole file.
pub(crate) struct ReadOutcome {
    /// The first read error of the file, before the end of its text.
    pub(crate) file_error: Option<std::io::Error>,
    /// The first fault of the gzip stream.
    pub(crate) gzip_error: Option<std::io::Error>,
    /// Whether the text went over the decompressed size limit.
    pub(crate) over: bool,
    /// A read error of what follows the text (after the last gzip member or the JSON).
    pub(crate) tail_error: Option<std::io::Error>,
    /// SHA-256 of the file's bytes.
    pub(crate) file_sha256: Sha256,
    /// SHA-256 of the decompressed text (gzip only).
    pub(crate) text_sha256: Option<Sha256>,
}

/// Parses the Kineto file `input` (its text at most `limit` bytes when gzip) with its reading,
/// hashing and decompressing on a thread of its own; the events (or the parse's fault) and what
/// that thread found. `None` when no thread can be started: `input` is then untouched.
///
/// The thread reads the whole file whatever the parse does, as the single-threaded path does
/// (a gzip fault or the size limit anywhere outranks a JSON fault): once the parse is done it
/// drops its end of the channel and the thread reads on without handing chunks over.
pub(crate) fn read_ahead<'p, R: Read + Send>(
    path: &'p Path,
    input: &mut R,
    limit: u64,
) -> Option<(Result<Collector<'p>, ImportError>, ReadOutcome)> {
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel(IN_FLIGHT);
        let (back_tx, back_rx) = std::sync::mpsc::sync_channel(IN_FLIGHT + 2);
        let worker = std::thread::Builder::new()
            .name("gpumeter-read".into())
            .stack_size(256 << 10)
            .spawn_scoped(scope, move || produce(input, limit, &tx, &back_rx))
            .ok()?;
        let result = kineto::read_events(
            path,
            Chunks {
                rx,
                back: back_tx,
                buf: Vec::new(),
                at: 0,
            },
        );
        let outcome = worker.join().unwrap_or_else(|_| ReadOutcome {
            file_error: Some(std::io::Error::other("the reading thread failed")),
            gzip_error: None,
            over: false,
            tail_error: None,
            file_sha256: Sha256::new(),
            text_sha256: None,
        });
        Some((result, outcome))
    })
}

/// The reading thread: the file hashed, decompressed when gzip (its text hashed and capped at
/// `limit`), the text sent in chunks to `tx` (their buffers coming back on `back`) while the
/// parse takes them, then read to the end; what follows the text hashed too.
fn produce<R: Read>(
    input: &mut R,
    limit: u64,
    tx: &SyncSender<std::io::Result<Vec<u8>>>,
    back: &Receiver<Vec<u8>>,
) -> ReadOutcome {
    let mut file = Tally::new(input, u64::MAX, Sink::Inline(Sha256::new()));
    let mut magic = [0u8; 2];
    let got = read_full(&mut file, &mut magic);
    let magic = &magic[..got];
    let (gzip_error, over, text_sha256) = if magic == GZIP_MAGIC {
        let gz = flate2::read::MultiGzDecoder::new(magic.chain(&mut file));
        let mut text = Tally::new(gz, limit, Sink::Inline(Sha256::new()));
        pump(&mut text, tx, back);
        let sha = text.sink.detach().ok();
        (text.error, text.over, sha)
    } else {
        pump(&mut magic.chain(&mut file), tx, back);
        (None, false, None)
    };
    let file_error = file.error.take();
    let tail_error = std::io::copy(&mut file, &mut std::io::sink()).err();
    ReadOutcome {
        file_error,
        gzip_error,
        over,
        tail_error,
        file_sha256: file.sink.detach().unwrap_or_default(),
        text_sha256,
    }
}

/// Reads `r` to its end or first error in chunks, sending each to `tx` while the parse listens
/// (an error is sent too, as the parse would have met it); buffers come back on `back`.
fn pump(r: &mut impl Read, tx: &SyncSender<std::io::Result<Vec<u8>>>, back: &Receiver<Vec<u8>>) {
    let mut listening = true;
    let mut spare = Vec::new();
    loop {
        let mut buf = back
            .try_recv()
            .unwrap_or_else(|_| std::mem::take(&mut spare));
        buf.resize(CHUNK_BYTES, 0);
        let (n, error) = fill(r, &mut buf);
        buf.truncate(n);
        let done = n == 0 || error.is_some();
        if n > 0 && listening {
            listening = tx.send(Ok(buf)).is_ok();
        } else {
            spare = buf;
        }
        if let Some(e) = error {
            if listening {
                let _ = tx.send(Err(e));
            }
            return;
        }
        if done {
            return;
        }
    }
}

/// Fills `buf` from `r` as far as it goes: the bytes read, and the error that stopped it.
fn fill(r: &mut impl Read, buf: &mut [u8]) -> (usize, Option<std::io::Error>) {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

/// `buf.len()` bytes of `r` or up to its end (errors of the file are kept by its [`Tally`]).
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
    fill(r, buf).0
}

/// The text as the parse reads it: the chunks the reading thread sends.
struct Chunks {
    rx: Receiver<std::io::Result<Vec<u8>>>,
    back: SyncSender<Vec<u8>>,
    buf: Vec<u8>,
    at: usize,
}

impl Read for Chunks {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.buf.len() {
            match self.rx.recv() {
                Ok(Ok(next)) => {
                    let used = std::mem::replace(&mut self.buf, next);
                    let _ = self.back.try_send(used);
                    self.at = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}
