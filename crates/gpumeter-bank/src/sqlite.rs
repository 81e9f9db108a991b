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
//! [`Decimal::from_str_exact`]), never REAL, so a stored amount keeps its scale and a
//! transaction read back hashes to what was written.
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

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use rust_decimal::Decimal;

use crate::ledger::{
    chain_hash, Appended, BankError, Ledger, LedgerTx, NewTransaction, StoredTransaction,
};
use crate::tables::{ledger_version, Assembler, PostingRow, TransactionRow};
pub use crate::tables::{APPLICATION, SCHEMA_VERSION};

/// How long a writer waits for another process's write transaction before failing with
/// [`BankError::Storage`] (`database is locked`).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The migrations, in order: `MIGRATIONS[n]` takes a file from schema version `n` to `n + 1`
/// (version 0 is an empty file). Never edit a released entry; append a new one and raise
/// [`SCHEMA_VERSION`].
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the ledger.
    "CREATE TABLE meta (
         name  TEXT PRIMARY KEY NOT NULL,
         value TEXT NOT NULL
     );
     INSERT INTO meta (name, value) VALUES ('application', 'gpumeter-ledger');
     CREATE TABLE transactions (
         seq       INTEGER PRIMARY KEY,
         key       TEXT NOT NULL UNIQUE,
         kind      TEXT NOT NULL,
         at        TEXT NOT NULL,
         tenant    TEXT,
         memo      TEXT NOT NULL,
         prev_hash TEXT NOT NULL,
         hash      TEXT NOT NULL
     );
     CREATE INDEX transactions_kind ON transactions (kind, seq);
     CREATE TABLE postings (
         seq       INTEGER NOT NULL REFERENCES transactions (seq),
         idx       INTEGER NOT NULL,
         account   TEXT NOT NULL,
         commodity TEXT NOT NULL,
         amount    TEXT NOT NULL CHECK (typeof(amount) = 'text'),
         PRIMARY KEY (seq, idx)
     );
     CREATE INDEX postings_account ON postings (account, commodity);
     CREATE TABLE balances (
         account   TEXT NOT NULL,
         commodity TEXT NOT NULL,
         amount    TEXT NOT NULL CHECK (typeof(amount) = 'text'),
         PRIMARY KEY (account, commodity)
     );",
];

/// How many times a read of an `immutable=1` bank ([`SqliteLedger::open_read_only`]) runs
/// when the file changes under it, before it fails.
pub const IMMUTABLE_ATTEMPTS: u32 = 5;

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

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

/// What shows that a file changed: its inode, size and times, and whether a `-wal` file is
/// beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
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

/// `path` with `suffix` added to its file name (`bank.db` → `bank.db-wal`).
fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    std::path::PathBuf::from(name)
}

/// What a file holds, before it is used as a ledger.
enum Contents {
    /// No table at all (a new or empty file): version 0.
    Empty,
    /// A gpumeter ledger of this schema version.
    Ledger(u32),
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

    /// `path` opened `immutable=1` (read-only, no locks, no file made beside it).
    fn open_immutable(path: &Path, file: &str) -> Result<SqliteLedger, BankError> {
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
    fn immutable_read<T>(
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

    /// The file this ledger lives in, as given to [`SqliteLedger::open`].
    pub fn file(&self) -> &str {
        &self.file
    }
}

/// What the database holds: nothing, a ledger of some version, or (an error) something else.
fn contents(conn: &Connection, file: &str) -> Result<Contents, BankError> {
    let not_a_ledger = |reason: String| BankError::NotALedger {
        file: file.to_string(),
        reason,
    };
    let tables = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table'")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => {
                not_a_ledger("not a gpumeter ledger: not an SQLite database".to_string())
            }
            _ => storage(file, "cannot read its schema", &e),
        })?;
    if tables.is_empty() {
        return Ok(Contents::Empty);
    }
    if !tables.iter().any(|t| t == "meta") {
        return Err(not_a_ledger(format!(
            "not a gpumeter ledger: an SQLite database without a `meta` table (tables: {})",
            tables.join(", ")
        )));
    }
    let meta = |name: &str| -> Result<Option<String>, BankError> {
        conn.query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| {
            r.get::<_, String>(0)
        })
        .optional()
        .map_err(|e| {
            not_a_ledger(format!(
                "not a gpumeter ledger: its `meta` table cannot be read ({e})"
            ))
        })
    };
    let version = ledger_version(file, SCHEMA_VERSION, meta)?;
    Ok(Contents::Ledger(version))
}

impl SqliteLedger {
    /// WAL, `synchronous = FULL`, foreign keys.
    ///
    /// Switching a new file to WAL takes an exclusive lock for which SQLite does not call the
    /// busy handler: a process that finds another one switching the same new file at that
    /// instant gets `database is locked` at once. It waits and retries instead, as a writer
    /// waits for another (up to [`BUSY_TIMEOUT`]).
    fn configure(&self) -> Result<(), BankError> {
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mode: String = loop {
            match self
                .conn
                .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            {
                Ok(mode) => break mode,
                Err(e)
                    if matches!(
                        e.sqlite_error_code(),
                        Some(
                            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                        )
                    ) && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(storage(&self.file, "cannot switch to WAL", &e)),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(BankError::Storage {
                file: self.file.clone(),
                message: format!("cannot switch to WAL: the journal mode stays `{mode}`"),
            });
        }
        self.conn
            .execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")
            .map_err(|e| storage(&self.file, "cannot configure the connection", &e))
    }

    /// Applies the migrations the file lacks, in one database transaction (which also
    /// serializes two processes creating the same new file).
    fn migrate(&mut self) -> Result<(), BankError> {
        let file = self.file.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| storage(&file, "cannot begin the migration", &e))?;
        // Again under the write lock: another process may have created or migrated it.
        let from = match contents(&tx, &file)? {
            Contents::Empty => 0,
            Contents::Ledger(v) => v,
        };
        if from == SCHEMA_VERSION {
            return tx
                .commit()
                .map_err(|e| storage(&file, "cannot end the migration", &e));
        }
        for (n, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
            tx.execute_batch(sql).map_err(|e| {
                storage(
                    &file,
                    &format!("cannot migrate from schema version {n} to {}", n + 1),
                    &e,
                )
            })?;
        }
        tx.execute(
            "INSERT INTO meta (name, value) VALUES ('schema_version', ?1)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [SCHEMA_VERSION.to_string()],
        )
        .map_err(|e| storage(&file, "cannot record the schema version", &e))?;
        tx.commit()
            .map_err(|e| storage(&file, "cannot commit the migration", &e))
    }
}

/// `path` as SQLite must be given it to open that file: SQLite (built with `SQLITE_USE_URI`)
/// takes every name that begins with `file:` as a URI, whatever the open's flags, so such a
/// relative path is given as `./file:…`. A path is never a URI: the only URIs this module
/// opens are its own (`immutable=1`, [`SqliteLedger::open_read_only`]).
fn not_a_uri(path: &Path) -> std::borrow::Cow<'_, Path> {
    use std::os::unix::ffi::OsStrExt as _;
    if path.as_os_str().as_bytes().starts_with(b"file:") {
        std::borrow::Cow::Owned(Path::new(".").join(path))
    } else {
        std::borrow::Cow::Borrowed(path)
    }
}

/// Refuses a location that exists and is not a regular file (a directory, `/dev/null`, a
/// FIFO), before SQLite opens it: SQLite would make a `-journal` or `-wal` file beside it
/// (`/dev/null-journal`). A symbolic link to a regular file is one.
fn check_regular(path: &Path, file: &str) -> Result<(), BankError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            let what = if m.is_dir() {
                "a directory"
            } else {
                "not a regular file (a device, a FIFO or a socket)"
            };
            Err(BankError::NotALedger {
                file: file.to_string(),
                reason: format!("{what}, not a bank; a bank is an SQLite file"),
            })
        }
        _ => Ok(()),
    }
}

/// Refuses a location where no bank is: nothing there, an empty file, or not a regular file.
fn check_existing(path: &Path, file: &str) -> Result<(), BankError> {
    const CREATE: &str =
        "`bank grant`, `bank reserve`, `bank import` and `invoice finalize` create one";
    let len = std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| BankError::NotALedger {
            file: file.to_string(),
            reason: format!("there is no bank here ({e}); {CREATE}"),
        })?;
    check_regular(path, file)?;
    if len == 0 {
        return Err(BankError::NotALedger {
            file: file.to_string(),
            reason: format!("the file is empty, not a bank; {CREATE}"),
        });
    }
    Ok(())
}

/// Refuses what a reader cannot use: a file without a ledger's tables, or a ledger older than
/// [`SCHEMA_VERSION`], which only a writer migrates.
fn readable_version(file: &str, found: &Contents) -> Result<(), BankError> {
    match found {
        Contents::Ledger(SCHEMA_VERSION) => Ok(()),
        Contents::Ledger(v) => Err(BankError::NotALedger {
            file: file.to_string(),
            reason: format!(
                "a gpumeter ledger of schema version {v}, older than this gpumeter's \
                 ({SCHEMA_VERSION}): it needs a migration, which a command that only reads \
                 does not make; run a command that writes to it once (`bank expire` with a \
                 past --at, or any grant or finalization) with write access, then read it"
            ),
        }),
        Contents::Empty => Err(BankError::NotALedger {
            file: file.to_string(),
            reason: "an SQLite database without tables, not a bank; `bank grant`, `bank \
                     reserve`, `bank import` and `invoice finalize` create one"
                .to_string(),
        }),
    }
}

/// Whether a read failed because SQLite could not make the `-wal` (or `-shm`) file it needs
/// to read a WAL database: a read-only directory.
fn cannot_make_wal(e: &BankError) -> bool {
    // `contents` reports these as Storage errors with SQLite's message.
    matches!(e, BankError::Storage { message, .. }
        if message.contains("readonly database") || message.contains("unable to open"))
}

/// `path` as the path part of an SQLite URI filename: percent-encoded but for unreserved
/// characters and `/`, so that `?`, `#` and `%` in a name stay part of it.
fn uri_path(path: &Path) -> String {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt as _;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Refuses a non-empty file that does not start with SQLite's header, before SQLite sees it.
fn check_header(path: &Path, file: &str) -> Result<(), BankError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(BankError::Storage {
                file: file.to_string(),
                message: format!("cannot read it: {e}"),
            })
        }
    };
    let mut head = Vec::with_capacity(SQLITE_HEADER.len());
    f.by_ref()
        .take(SQLITE_HEADER.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| BankError::Storage {
            file: file.to_string(),
            message: format!("cannot read it: {e}"),
        })?;
    if head.is_empty() || head.as_slice() == SQLITE_HEADER {
        Ok(())
    } else {
        Err(BankError::NotALedger {
            file: file.to_string(),
            reason: "not a gpumeter ledger: not an SQLite database".to_string(),
        })
    }
}

/// A storage error on one line: SQLite's message, without the SQL of a statement that failed
/// (rusqlite quotes the whole statement, a migration's dozens of lines).
fn storage(file: &str, what: &str, e: &rusqlite::Error) -> BankError {
    let message = match e {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        e => e.to_string(),
    };
    BankError::Storage {
        file: file.to_string(),
        message: format!(
            "{what}: {}",
            message.split_whitespace().collect::<Vec<_>>().join(" ")
        ),
    }
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

/// [`LedgerTx`] on an open database transaction.
struct SqliteTx<'c> {
    conn: &'c Connection,
    file: &'c str,
}

impl SqliteTx<'_> {
    fn err(&self, what: &str, e: &rusqlite::Error) -> BankError {
        storage(self.file, what, e)
    }

    /// The transactions `WHERE <filter>` with their postings, in ledger order.
    fn load(&self, filter: &str, args: &[&str]) -> Result<Vec<StoredTransaction>, BankError> {
        let sql = format!(
            "SELECT seq, key, kind, at, tenant, memo, prev_hash, hash FROM transactions
             WHERE {filter} ORDER BY seq"
        );
        let mut st = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.err("cannot read transactions", &e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok(TransactionRow {
                    seq: r.get(0)?,
                    key: r.get(1)?,
                    kind: r.get(2)?,
                    at: r.get(3)?,
                    tenant: r.get(4)?,
                    memo: r.get(5)?,
                    prev_hash: r.get(6)?,
                    hash: r.get(7)?,
                })
            })
            .map_err(|e| self.err("cannot read transactions", &e))?;
        let mut out = Assembler::default();
        for row in rows {
            out.transaction(row.map_err(|e| self.err("cannot read transactions", &e))?)?;
        }
        if out.is_empty() {
            return Ok(out.finish());
        }
        let sql = format!(
            "SELECT seq, idx, account, commodity, amount FROM postings
             WHERE seq IN (SELECT seq FROM transactions WHERE {filter}) ORDER BY seq, idx"
        );
        let mut st = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.err("cannot read postings", &e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok(PostingRow {
                    seq: r.get(0)?,
                    idx: r.get(1)?,
                    account: r.get(2)?,
                    commodity: r.get(3)?,
                    amount: r.get(4)?,
                })
            })
            .map_err(|e| self.err("cannot read postings", &e))?;
        for row in rows {
            out.posting(row.map_err(|e| self.err("cannot read postings", &e))?)?;
        }
        Ok(out.finish())
    }

    fn stored_balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        let text: Option<String> = self
            .conn
            .prepare_cached("SELECT amount FROM balances WHERE account = ?1 AND commodity = ?2")
            .and_then(|mut st| {
                st.query_row(params![account, commodity], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.err("cannot read a balance", &e))?;
        text.map_or(Ok(Decimal::ZERO), |t| {
            self.parse_balance(account, commodity, &t)
        })
    }

    fn parse_balance(
        &self,
        account: &str,
        commodity: &str,
        text: &str,
    ) -> Result<Decimal, BankError> {
        Decimal::from_str_exact(text).map_err(|e| BankError::Storage {
            file: self.file.to_string(),
            message: format!(
                "the balance of {account} in {commodity} is `{text}`, not a decimal ({e})"
            ),
        })
    }
}

impl LedgerTx for SqliteTx<'_> {
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self.load("key = ?1", &[key])?.into_iter().next())
    }

    fn append(&mut self, mut tx: NewTransaction) -> Result<Appended, BankError> {
        if let Some(t) = self.find(&tx.key)? {
            return Ok(Appended::AlreadyApplied(t));
        }
        tx.canonicalize();
        tx.check_balanced()?;
        let last: Option<(i64, String)> = self
            .conn
            .prepare_cached("SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.err("cannot read the chain head", &e))?;
        let (last_seq, prev_hash) = last.unwrap_or((0, String::new()));
        let seq = u64::try_from(last_seq)
            .ok()
            .and_then(|s| s.checked_add(1))
            .ok_or_else(|| BankError::Storage {
                file: self.file.to_string(),
                message: format!("the last sequence number {last_seq} cannot be followed"),
            })?;
        let seq_i = i64::try_from(seq).map_err(|_| BankError::Storage {
            file: self.file.to_string(),
            message: format!("sequence number {seq} exceeds what SQLite holds"),
        })?;
        let hash = chain_hash(seq, &tx, &prev_hash)?;
        let memo = serde_json::to_string(&tx.memo)
            .map_err(|e| BankError::Refused(format!("transaction `{}`: memo: {e}", tx.key)))?;
        self.conn
            .prepare_cached(
                "INSERT INTO transactions (seq, key, kind, at, tenant, memo, prev_hash, hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    seq_i, tx.key, tx.kind, tx.at, tx.tenant, memo, prev_hash, hash
                ])
            })
            .map_err(|e| self.err("cannot append a transaction", &e))?;
        for (idx, p) in tx.postings.iter().enumerate() {
            let idx = i64::try_from(idx).map_err(|_| {
                BankError::Refused(format!("transaction `{}` has too many postings", tx.key))
            })?;
            self.conn
                .prepare_cached(
                    "INSERT INTO postings (seq, idx, account, commodity, amount)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        seq_i,
                        idx,
                        p.account,
                        p.commodity,
                        p.amount.to_string()
                    ])
                })
                .map_err(|e| self.err("cannot append a posting", &e))?;
            let balance =
                crate::ledger::exact_add(self.stored_balance(&p.account, &p.commodity)?, p.amount)
                    .ok_or_else(|| {
                        BankError::Refused(format!(
                            "the balance of {} in {} exceeds what a decimal holds",
                            p.account, p.commodity
                        ))
                    })?;
            self.conn
                .prepare_cached(
                    "INSERT INTO balances (account, commodity, amount) VALUES (?1, ?2, ?3)
                     ON CONFLICT (account, commodity) DO UPDATE SET amount = excluded.amount",
                )
                .and_then(|mut st| st.execute(params![p.account, p.commodity, balance.to_string()]))
                .map_err(|e| self.err("cannot update a balance", &e))?;
        }
        Ok(Appended::Applied(StoredTransaction {
            seq,
            tx,
            prev_hash,
            hash,
        }))
    }

    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        self.stored_balance(account, commodity)
    }

    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT account, commodity, amount FROM balances
                 WHERE substr(account, 1, length(?1)) = ?1 ORDER BY account, commodity",
            )
            .map_err(|e| self.err("cannot read balances", &e))?;
        let rows = st
            .query_map([prefix], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.err("cannot read balances", &e))?;
        let mut out = Vec::new();
        for row in rows {
            let (account, commodity, text) =
                row.map_err(|e| self.err("cannot read balances", &e))?;
            let amount = self.parse_balance(&account, &commodity, &text)?;
            if !amount.is_zero() {
                out.push((account, commodity, amount));
            }
        }
        Ok(out)
    }

    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError> {
        match kind {
            Some(k) => self.load("kind = ?1", &[k]),
            None => self.load("1", &[]),
        }
    }

    fn tenant_transactions(
        &self,
        kind: &str,
        tenant: &str,
    ) -> Result<Vec<StoredTransaction>, BankError> {
        self.load("kind = ?1 AND tenant = ?2", &[kind, tenant])
    }

    fn first_transaction(&self, kind: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self
            .load(
                "seq = (SELECT min(seq) FROM transactions WHERE kind = ?1)",
                &[kind],
            )?
            .into_iter()
            .next())
    }

    fn head(&self) -> Result<Option<String>, BankError> {
        self.conn
            .prepare_cached("SELECT hash FROM transactions ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
            .map_err(|e| self.err("cannot read the chain head", &e))
    }

    fn last(&self) -> Result<Option<(u64, String)>, BankError> {
        let last: Option<(i64, String)> = self
            .conn
            .prepare_cached("SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.err("cannot read the chain head", &e))?;
        last.map(|(seq, hash)| {
            u64::try_from(seq)
                .map(|s| (s, hash))
                .map_err(|_| BankError::Storage {
                    file: self.file.to_string(),
                    message: format!("the last sequence number {seq} is negative"),
                })
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::{MIGRATIONS, SCHEMA_VERSION};

    #[test]
    fn one_migration_per_schema_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }

    /// A reader refuses a ledger older than this build's schema (no reader migrates), saying
    /// that a writer must open it once; today's version is read.
    #[test]
    fn readers_refuse_a_ledger_that_needs_a_migration() {
        use super::{readable_version, Contents};
        let older = readable_version("bank.db", &Contents::Ledger(SCHEMA_VERSION - 1))
            .expect_err("an older version");
        let text = older.to_string();
        assert!(text.contains("needs a migration"), "{text}");
        assert!(text.contains("a command that writes"), "{text}");
        assert!(readable_version("bank.db", &Contents::Ledger(SCHEMA_VERSION)).is_ok());
        assert!(readable_version("bank.db", &Contents::Empty).is_err());
    }

    /// A path in an SQLite URI keeps `?`, `#` and `%` as part of the name.
    #[test]
    fn a_path_beginning_with_file_is_given_as_a_path() {
        use std::path::Path;
        assert_eq!(
            super::not_a_uri(Path::new("file:x.db?mode=ro")),
            Path::new("./file:x.db?mode=ro")
        );
        assert_eq!(
            super::not_a_uri(Path::new("/a/file:x")),
            Path::new("/a/file:x")
        );
        assert_eq!(super::not_a_uri(Path::new("x.db")), Path::new("x.db"));
    }

    #[test]
    fn uri_paths_escape_what_a_uri_reads() {
        assert_eq!(
            super::uri_path(std::path::Path::new("/a b/x?y#z%.db")),
            "/a%20b/x%3Fy%23z%25.db"
        );
    }
}
