//! Reading a file in chunks on another thread, hashed as it is read, for the two passes of a
//! streamed file source ([`crate::buffer_file`], [`crate::recording_file`]), and the stamp
//! that tells the second pass the file did not change since the first.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::mpsc;

use sha2::{Digest, Sha256};

/// Bytes read from the file at a time (a few such chunks are in flight at once).
pub const CHUNK_BYTES: usize = 1 << 20;

/// A file being read in chunks by another thread ([`with_chunks`]): `buf` holds the file's
/// bytes from offset `base`, read up to `pos`.
pub(crate) struct Chunks<'a> {
    rx: &'a mpsc::Receiver<io::Result<Vec<u8>>>,
    back: &'a mpsc::SyncSender<Vec<u8>>,
    buf: Vec<u8>,
    base: usize,
    pos: usize,
    eof: bool,
}

impl Chunks<'_> {
    /// The bytes read and not yet consumed.
    pub(crate) fn rest(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    /// The file offset of [`Chunks::rest`]'s first byte.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Consumes `n` bytes of [`Chunks::rest`].
    pub(crate) fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
    }

    /// Whether the whole file has been read into `buf`.
    pub(crate) fn at_eof(&self) -> bool {
        self.eof
    }

    /// Drops what was consumed and reads one more chunk; `false` at the end of the file.
    pub(crate) fn more(&mut self) -> io::Result<bool> {
        if self.eof {
            return Ok(false);
        }
        self.buf.drain(..self.pos);
        self.base += self.pos;
        self.pos = 0;
        match self.rx.recv() {
            Ok(Ok(chunk)) => {
                self.buf.extend_from_slice(&chunk);
                let _ = self.back.try_send(chunk);
                Ok(true)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => {
                self.eof = true;
                Ok(false)
            }
        }
    }

    /// Reads until [`Chunks::rest`] holds `n` bytes or the file ends; whether it does.
    pub(crate) fn ensure(&mut self, n: usize) -> io::Result<bool> {
        while self.rest().len() < n {
            if !self.more()? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Runs `f` over `file` read in chunks of [`CHUNK_BYTES`] by another thread, which also
/// computes the SHA-256 of every byte it reads when `hash` is set (the file is hashed in the
/// pass that reads it, while this thread decodes). Returns `f`'s result and the SHA-256 (when
/// asked and the whole file was read).
///
/// Memory: a few chunks (plus what `f` keeps in [`Chunks`]), whatever the file's size.
/// Allocations: a few chunks, recycled between the threads, not one per chunk.
pub(crate) fn with_chunks<T>(
    file: impl Read + Send,
    hash: bool,
    f: impl FnOnce(&mut Chunks<'_>) -> T,
) -> (T, Option<[u8; 32]>) {
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::sync_channel::<io::Result<Vec<u8>>>(2);
        let (back_tx, back_rx) = mpsc::sync_channel::<Vec<u8>>(4);
        let reader = s.spawn(move || {
            let mut file = file;
            let mut hasher = hash.then(Sha256::new);
            loop {
                let mut chunk = back_rx
                    .try_recv()
                    .unwrap_or_else(|_| Vec::with_capacity(CHUNK_BYTES));
                chunk.clear();
                match (&mut file).take(CHUNK_BYTES as u64).read_to_end(&mut chunk) {
                    Ok(0) => break,
                    Ok(_) => {
                        if let Some(h) = hasher.as_mut() {
                            h.update(&chunk);
                        }
                        if tx.send(Ok(chunk)).is_err() {
                            // The reader stopped early: the digest would not be the file's.
                            hasher = None;
                            break;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        hasher = None;
                        break;
                    }
                }
            }
            hasher.map(|h| <[u8; 32]>::from(h.finalize()))
        });
        let out = {
            let mut chunks = Chunks {
                rx: &rx,
                back: &back_tx,
                buf: Vec::with_capacity(2 * CHUNK_BYTES),
                base: 0,
                pos: 0,
                eof: false,
            };
            f(&mut chunks)
        };
        drop(rx);
        let digest = reader.join().unwrap_or(None);
        (out, digest)
    })
}

/// What identifies a file's contents between the two passes without reading it again: its
/// length and modification time, and on Unix its inode and inode change time (`st_ctime`,
/// which every write and every `utime` call moves and no call sets back, so a writer that
/// keeps the length and restores the modification time is still seen, as is a file replaced
/// by another). A file changed between the pass that hashed it and the pass that metered it
/// would give a report whose SHA-256 is not that of what was metered (the bank's idempotency
/// key), so the second pass compares the stamp at its start and at its end and refuses a
/// difference ("the file changed while it was metered").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    /// (device, inode, ctime seconds, ctime nanoseconds) on Unix; `None` elsewhere.
    inode: Option<(u64, u64, i64, i64)>,
}

impl FileStamp {
    fn from_metadata(m: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let inode = {
            use std::os::unix::fs::MetadataExt;
            Some((m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
        };
        #[cfg(not(unix))]
        let inode = None;
        FileStamp {
            len: m.len(),
            modified: m.modified().ok(),
            inode,
        }
    }

    /// The stamp of an open file.
    pub(crate) fn of(file: &File) -> io::Result<Self> {
        Ok(Self::from_metadata(&file.metadata()?))
    }

    /// The stamp of the file at `path` now.
    pub(crate) fn at(path: &Path) -> io::Result<Self> {
        Ok(Self::from_metadata(&std::fs::metadata(path)?))
    }

    /// `Ok` when `now` is the same stamp, else the error that the file changed.
    pub(crate) fn check(self, now: io::Result<Self>) -> io::Result<()> {
        match now {
            Ok(n) if n == self => Ok(()),
            Ok(_) => Err(changed()),
            Err(e) => Err(e),
        }
    }

    /// For a `.gmr`, which its collector only appends to (a recording may be metered while it
    /// is written): `Ok` when the file is the same or the same file (on Unix, the
    /// same device and inode) has grown (the passes read only the first [`FileStamp`] length
    /// bytes), else the error that the file changed: a longer file renamed over the recording
    /// is another file, not the recording grown.
    pub(crate) fn check_prefix(self, now: io::Result<Self>) -> io::Result<()> {
        let same_file = |n: &Self| {
            n.inode.map(|(dev, ino, ..)| (dev, ino)) == self.inode.map(|(dev, ino, ..)| (dev, ino))
        };
        match now {
            Ok(n) if n == self || (n.len > self.len && same_file(&n)) => Ok(()),
            Ok(_) => Err(changed()),
            Err(e) => Err(e),
        }
    }

    /// The length the stamp was taken at, in bytes.
    pub(crate) fn len(self) -> u64 {
        self.len
    }
}

/// The error of a file that changed between the two passes.
fn changed() -> io::Error {
    io::Error::other("the file changed while it was metered")
}

#[cfg(test)]
mod stamp_tests {
    use super::FileStamp;

    /// Review of the stamp's inode: a `.gmr` that grew is accepted (its collector appends),
    /// a longer file renamed over it is not (it is another recording: metering its first
    /// bytes under the first pass's SHA-256 would bill what was not hashed).
    #[test]
    fn a_longer_file_renamed_over_a_recording_is_a_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rec.gmr");
        std::fs::write(&path, b"recording").expect("write");
        let stamp = FileStamp::at(&path).expect("stamp");
        // Appended to: the same file, grown.
        let mut f = std::fs::File::options()
            .append(true)
            .open(&path)
            .expect("open");
        std::io::Write::write_all(&mut f, b" and more").expect("append");
        drop(f);
        assert!(stamp.check_prefix(FileStamp::at(&path)).is_ok(), "grown");
        // Replaced by a longer file.
        let next = dir.path().join("next.gmr");
        std::fs::write(&next, b"another, longer recording").expect("write");
        std::fs::rename(&next, &path).expect("rename");
        let got = stamp.check_prefix(FileStamp::at(&path));
        if cfg!(unix) {
            assert!(got.is_err(), "another file is not the recording grown");
        }
    }
}
