//! The SQLite [`Ledger`]: one file, WAL, one database transaction per ledger
//! transaction (`BEGIN IMMEDIATE`, so writers in several processes are serialized and wait for
//! each other up to [`BUSY_TIMEOUT`]), `synchronous = FULL` so a committed ledger transaction
//! survives a crash or power loss.
//!
//! # Schema (version [`SCHEMA_VERSION`])
//! - `meta(name TEXT PRIMARY KEY, value TEXT)`: `application = 'gpumeter-ledger'` and
//!   `schema_version` (a decimal integer). A file without them is not a ledger.
//! - `transactions(seq INTEGER PRIMARY KEY, key TEXT UNIQUE, kind, at, tenant, memo, prev_hash,
//!   hash)`: `memo` is JSON text; `tenant` is NULL when none; `seq` counts from 1.
//! - `postings(seq REFERENCES transactions, idx, account, commodity, amount, PRIMARY KEY(seq,
//!   idx))`: `idx` is the posting's position in its transaction, from 0.
//! - `balances(account, commodity, amount, PRIMARY KEY(account, commodity))`: Σ postings per
//!   account and commodity, updated in the same database transaction as the postings.
//!
//! Amounts are exact decimal strings (`Decimal`'s `Display`, read back with
//! [`Decimal::from_str_exact`](rust_decimal::Decimal::from_str_exact)), never REAL, so a
//! stored amount keeps its scale and a transaction read back hashes to what was written.
//!
//! # Versions
//! [`SqliteLedger::open`] applies the migrations from the file's `schema_version` up to
//! [`SCHEMA_VERSION`] in one database transaction, and refuses a file of a newer version.
//!
//! # Readers
//! Work that does not commit (`verify`, `balance`, `history`, `export`, a preview) runs in a
//! deferred (read) transaction: WAL gives it one snapshot, it waits for no writer, and what it
//! appends stays in memory (an overlay). [`SqliteLedger::open_read_only`] opens a bank
//! for such work only, without migrating it, on a read-only file or in a read-only
//! directory:
//! - a file this process may write is opened read-write with `PRAGMA query_only`, as a writer
//!   opens it (WAL's `-wal` and `-shm` files are made and removed as for any connection);
//! - a file it may not write, with a `-wal` file beside it (a writer has it open, or left
//!   transactions to checkpoint), is opened `SQLITE_OPEN_READONLY`: SQLite reads the WAL
//!   through the `-shm` file, read-only if it must;
//! - otherwise (a read-only file without a `-wal`, or a writable one in a directory where no
//!   `-wal` can be made) it is opened `immutable=1`: SQLite reads the file without locks and
//!   makes no file beside it. The trade-off: a writer that starts during the read and
//!   checkpoints into the file would go unseen by SQLite, so the file's size, times and
//!   inode, and the absence of a `-wal`, are compared before and after each read, and a read
//!   across a change is run again (at most [`IMMUTABLE_ATTEMPTS`] times).

mod error;
mod file;
mod immutable;
mod migrate;
mod tx;

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::ledger::{BankError, Ledger, LedgerTx};
pub use crate::tables::{APPLICATION, SCHEMA_VERSION};
use error::storage;
use file::{check_existing, check_header, check_regular, not_a_uri, sibling};
use immutable::Stamp;
use migrate::{contents, readable_version, Contents};
use tx::SqliteTx;

/// How long a writer waits for another process's write transaction before failing with
/// [`BankError::Storage`] (`database is locked`).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// How many times a read of an `immutable=1` bank ([`SqliteLedger::open_read_only`]) runs
/// when the file changes under it, before it fails.
pub const IMMUTABLE_ATTEMPTS: u32 = 5;

/// A ledger in an SQLite file. Several processes may open the same file: writes are
/// serialized (`BEGIN IMMEDIATE`, waiting up to [`BUSY_TIMEOUT`]).
#[derive(Debug)]
pub struct SqliteLedger {
    conn: Connection,
    file: String,
    access: Access,
}

/// How a ledger was opened.
#[derive(Debug)]
enum Access {
    /// [`SqliteLedger::open`]: reads and writes.
    Write,
    /// [`SqliteLedger::open_read_only`] through SQLite's locks (a read-write connection with
    /// `query_only`, or `SQLITE_OPEN_READONLY`): reads only.
    Read,
    /// [`SqliteLedger::open_read_only`] with `immutable=1`: reads only, without locks; `stamp`
    /// is the file as it was when the connection read it last.
    Immutable {
        path: std::path::PathBuf,
        stamp: Stamp,
    },
}

impl SqliteLedger {
    /// Opens the ledger in `path`, creating it when the file does not exist or is empty, and
    /// migrating it to [`SCHEMA_VERSION`] when it is older (one database transaction).
    ///
    /// A file that is not an SQLite database, or one without the `meta` table of a gpumeter
    /// ledger, is refused before anything is written to it.
    ///
    /// # Errors
    /// - [`BankError::NotALedger`] naming the file: not an SQLite database, another
    ///   application's database, or a ledger of a newer schema version than this build knows.
    /// - [`BankError::Storage`]: the file cannot be opened, read or written.
    pub fn open(path: &Path) -> Result<SqliteLedger, BankError> {
        let file = path.display().to_string();
        check_regular(path, &file)?;
        check_header(path, &file)?;
        let conn =
            Connection::open(not_a_uri(path)).map_err(|e| storage(&file, "cannot open it", &e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| storage(&file, "cannot set the busy timeout", &e))?;
        // Look before writing anything: WAL mode changes the file's header.
        let found = contents(&conn, &file)?;
        let mut ledger = SqliteLedger {
            conn,
            file,
            access: Access::Write,
        };
        ledger.configure()?;
        // A ledger of this version needs no migration, nor the write lock one takes: a writer
        // that opens a bank another is writing waits for its own work only.
        if !matches!(found, Contents::Ledger(SCHEMA_VERSION)) {
            ledger.migrate()?;
        }
        Ok(ledger)
    }

    /// Opens the ledger in `path` like [`SqliteLedger::open`], but never creates one: for the
    /// commands that only read a bank or change an existing one (`balance`, `history`,
    /// `verify`, `expire`, `close`, `preview --bank`), where a mistyped path must not pass as
    /// an empty ledger.
    ///
    /// # Errors
    /// [`BankError::NotALedger`] naming the file when it does not exist or is empty, and every
    /// error of [`SqliteLedger::open`].
    pub fn open_existing(path: &Path) -> Result<SqliteLedger, BankError> {
        check_existing(path, &path.display().to_string())?;
        Self::open(path)
    }

    /// Opens the ledger in `path` for work that does not commit only (`verify`, `balance`,
    /// `history`, `export`, a preview): never created, never migrated, never written, and
    /// readable when the file or its directory is read-only (the module's "Readers" says
    /// how). [`Ledger::atomically`] with `commit` fails with [`BankError::ReadOnly`].
    ///
    /// # Errors
    /// - [`BankError::NotALedger`] naming the file: none there, an empty file, not a regular
    ///   file, not a ledger, a ledger of a newer schema version, or one of an older version
    ///   (a reader does not migrate: open it once with a writer).
    /// - [`BankError::Storage`]: it cannot be opened or read.
    pub fn open_read_only(path: &Path) -> Result<SqliteLedger, BankError> {
        use rusqlite::OpenFlags;
        let file = path.display().to_string();
        check_existing(path, &file)?;
        check_header(path, &file)?;
        let writable = std::fs::OpenOptions::new().write(true).open(path).is_ok();
        let wal = sibling(path, "-wal").symlink_metadata().is_ok();
        let locked = |flags: OpenFlags| -> Result<SqliteLedger, BankError> {
            let conn = Connection::open_with_flags(
                not_a_uri(path),
                flags | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|e| storage(&file, "cannot open it", &e))?;
            conn.busy_timeout(BUSY_TIMEOUT)
                .map_err(|e| storage(&file, "cannot set the busy timeout", &e))?;
            if flags.contains(OpenFlags::SQLITE_OPEN_READ_WRITE) {
                conn.execute_batch("PRAGMA query_only = ON")
                    .map_err(|e| storage(&file, "cannot configure the connection", &e))?;
            }
            Ok(SqliteLedger {
                conn,
                file: file.clone(),
                access: Access::Read,
            })
        };
        let opened = if writable {
            Some(locked(OpenFlags::SQLITE_OPEN_READ_WRITE)?)
        } else if wal {
            Some(locked(OpenFlags::SQLITE_OPEN_READ_ONLY)?)
        } else {
            None
        };
        let mut ledger = match opened {
            Some(l) => match contents(&l.conn, &file) {
                Ok(found) => {
                    readable_version(&file, &found)?;
                    return Ok(l);
                }
                // A writable file in a directory where its `-wal` cannot be made: read it
                // without locks, as a read-only one.
                Err(e) if !wal && cannot_make_wal(&e) => Self::open_immutable(path, &file)?,
                Err(e) => return Err(e),
            },
            None => Self::open_immutable(path, &file)?,
        };
        let found = ledger.immutable_read(|conn| contents(conn, &file))?;
        readable_version(&file, &found)?;
        Ok(ledger)
    }
    /// The file this ledger lives in, as given to [`SqliteLedger::open`].
    pub fn file(&self) -> &str {
        &self.file
    }
}

/// Whether a read failed because SQLite could not make the `-wal` (or `-shm`) file it needs
/// to read a WAL database: a read-only directory.
fn cannot_make_wal(e: &BankError) -> bool {
    // `contents` reports these as Storage errors with SQLite's message.
    matches!(e, BankError::Storage { message, .. }
        if message.contains("readonly database") || message.contains("unable to open"))
}

impl Ledger for SqliteLedger {
    /// Work that commits runs in a `BEGIN IMMEDIATE` transaction (one writer at a time);
    /// work that does not runs in a deferred one, a snapshot that waits for no writer, with
    /// its appends kept in memory (an overlay).
    fn atomically<T>(
        &mut self,
        commit: bool,
        mut f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        let file = self.file.clone();
        if !commit {
            return self.immutable_read(|conn| {
                let tx = conn
                    .unchecked_transaction()
                    .map_err(|e| storage(&file, "cannot begin a transaction", &e))?;
                let base = SqliteTx {
                    conn: &tx,
                    file: &file,
                };
                let out = f(&mut crate::overlay::Overlay::new(&base));
                // Nothing was written; a failed rollback is undone when the connection
                // closes.
                let _ = tx.rollback();
                out
            });
        }
        if !matches!(self.access, Access::Write) {
            return Err(BankError::ReadOnly { file });
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| storage(&file, "cannot begin a transaction", &e))?;
        let out = {
            let mut work = SqliteTx {
                conn: &tx,
                file: &file,
            };
            f(&mut work)
        };
        match out {
            Ok(v) => {
                tx.commit()
                    .map_err(|e| storage(&file, "cannot commit", &e))?;
                Ok(v)
            }
            Err(e) => {
                // The error of `f` is what the caller needs; a failed rollback is undone by
                // SQLite when the connection closes.
                let _ = tx.rollback();
                Err(e)
            }
        }
    }
}
