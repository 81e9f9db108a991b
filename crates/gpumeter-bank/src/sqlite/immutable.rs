//! Reading a bank without SQLite's locks (`immutable=1`, for a file in a directory where
//! none can be had): what shows that the file changed, and the read that is run again across
//! a change.

use std::path::Path;

use rusqlite::Connection;

use super::error::storage;
use super::file::{sibling, uri_path};
use super::{Access, SqliteLedger, IMMUTABLE_ATTEMPTS};
use crate::ledger::BankError;

/// What shows that a file changed: its inode, size and times, and whether a `-wal` file is
/// beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    wal: bool,
}

impl Stamp {
    fn of(path: &Path, file: &str) -> Result<Stamp, BankError> {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(path).map_err(|e| BankError::Storage {
            file: file.to_string(),
            message: format!("cannot read it: {e}"),
        })?;
        Ok(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            wal: sibling(path, "-wal").symlink_metadata().is_ok(),
        })
    }
}

impl SqliteLedger {
    /// `path` opened `immutable=1` (read-only, no locks, no file made beside it).
    pub(super) fn open_immutable(path: &Path, file: &str) -> Result<SqliteLedger, BankError> {
        use rusqlite::OpenFlags;
        let absolute = std::path::absolute(path).map_err(|e| BankError::Storage {
            file: file.to_string(),
            message: format!("cannot open it: {e}"),
        })?;
        let stamp = Stamp::of(path, file)?;
        let conn = Connection::open_with_flags(
            format!("file:{}?immutable=1", uri_path(&absolute)),
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| storage(file, "cannot open it", &e))?;
        Ok(SqliteLedger {
            conn,
            file: file.to_string(),
            access: Access::Immutable {
                path: path.to_path_buf(),
                stamp,
            },
        })
    }

    /// Runs `read` on an `immutable=1` connection and keeps its result only if the file did
    /// not change meanwhile (nor since the connection last read it: SQLite may keep pages
    /// in its cache between reads of an immutable file); otherwise opens the file again and
    /// reads again, at most [`IMMUTABLE_ATTEMPTS`] times. On other connections, runs `read`.
    pub(super) fn immutable_read<T>(
        &mut self,
        mut read: impl FnMut(&Connection) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        let Access::Immutable { path, stamp } = &self.access else {
            return read(&self.conn);
        };
        let path = path.clone();
        let mut last = stamp.clone();
        for _ in 0..IMMUTABLE_ATTEMPTS {
            let before = Stamp::of(&path, &self.file)?;
            if before != last || before.wal {
                // Changed since the connection read it, or a writer is at work: a fresh
                // connection (no cached page), or a locked one now that a `-wal` exists.
                *self = Self::open_read_only(&path)?;
                if !matches!(self.access, Access::Immutable { .. }) {
                    return read(&self.conn);
                }
                last = Stamp::of(&path, &self.file)?;
                continue;
            }
            let out = read(&self.conn);
            let after = Stamp::of(&path, &self.file)?;
            if after == before {
                if let Access::Immutable { stamp, .. } = &mut self.access {
                    *stamp = after;
                }
                return out;
            }
            last = after;
        }
        Err(BankError::Storage {
            file: self.file.clone(),
            message: format!(
                "it changed during each of {IMMUTABLE_ATTEMPTS} reads without locks (its \
                 directory is read-only, so SQLite's locks cannot be had); try again when \
                 no writer is at work"
            ),
        })
    }
}
