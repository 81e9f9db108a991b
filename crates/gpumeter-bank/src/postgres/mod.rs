//! The PostgreSQL [`Ledger`] (Cargo feature `postgres`): one book of accounts for many billing
//! workers, in a database their operators already run, back up and replicate.
//!
//! # Location
//! A `postgres://` or `postgresql://` URL, as libpq and the `postgres` crate read it
//! (`postgres://user:password@host:5432/db?sslmode=require`; a Unix socket directory as the
//! `host` parameter). The ledger's tables live in the connection's `search_path`: a URL
//! carrying `options=-csearch_path%3Dbilling` keeps them in schema `billing`. TLS follows the
//! URL's `sslmode`: `disable` never uses it; `prefer` (the default) and `require` use rustls with
//! the system's trusted roots (`SSL_CERT_FILE` and `SSL_CERT_DIR` name others), and check the
//! server's certificate and name, which libpq does only under `verify-full`.
//!
//! # Schema (version [`SCHEMA_VERSION`](crate::sqlite::SCHEMA_VERSION), the SQLite ledger's)
//! `meta`, `transactions`, `postings` and `balances`, as in [`crate::sqlite`]; amounts are
//! `numeric` (written from and read back as decimal text, so a stored amount keeps its scale
//! and hashes as written), text columns sort bytewise (`COLLATE "C"`, as SQLite's do). Created
//! and migrated by [`PostgresLedger::open`] in one database transaction under an advisory
//! lock; a newer schema is refused.
//!
//! # Concurrency
//! Database transactions run at READ COMMITTED with explicit, transaction-scoped advisory
//! locks (released at commit or rollback, or when a killed worker's connection ends):
//! - [`LedgerTx::lock_tenants`] holds the bank shared and each tenant exclusively, in one
//!   global order, so finalizations of different tenants proceed side by side, and two of one
//!   tenant take turns: credits cannot be spent twice;
//! - [`LedgerTx::lock_all`] holds the bank exclusively (expiry, the first finalization, which
//!   fixes the bank's currency, an import);
//! - [`LedgerTx::append`] holds the hash chain from its first append to the commit: one chain,
//!   whose head each append reads under that lock. The work before the first append (reading
//!   the ledger, rating) runs in parallel; appends and commits take turns.
//! - A transaction's key is unique by constraint (`INSERT … ON CONFLICT (key) DO NOTHING`),
//!   and balances are updated in place (`amount = balances.amount + excluded.amount`), never
//!   read and written back.
//!
//! Work without a commit (`balance`, `verify`, `history`, `export`, a preview) runs in a READ
//! ONLY transaction at REPEATABLE READ: one snapshot of the whole ledger, so `verify` never
//! sees half of a concurrent commit. It takes no lock (a snapshot does not change under it)
//! and writes nothing: what a preview appends stays in memory (an overlay), so it
//! never waits for a writer, nor a writer for it.
//! [`PostgresLedger::open_read_only`] opens a ledger for such work only, without the
//! migration's lock: a role with only `SELECT` on the tables, or a hot standby, serves.
//!
//! A serialization failure (SQLSTATE 40001) or a deadlock (40P01) rolls the work back and runs
//! it again, at most [`MAX_ATTEMPTS`] times, then fails with [`BankError::Contended`]. A lock
//! not granted within [`LOCK_TIMEOUT`] is [`BankError::Storage`], as SQLite's busy timeout is.

mod connect;
mod error;
mod locks;
mod migrate;
mod tx;

use std::cell::{Cell, RefCell};
use std::str::FromStr;
use std::time::Duration;

use postgres::{Client, Config, IsolationLevel};

use crate::ledger::{BankError, Ledger, LedgerTx};
use crate::location::redact;
use error::{describe, is_conflict, storage, storage_msg};
use locks::LockKeys;
use tx::PgTx;

/// How many times [`Ledger::atomically`] runs work that conflicts with concurrent writers
/// (serialization failures, deadlocks) before it gives up with [`BankError::Contended`].
pub const MAX_ATTEMPTS: u32 = 10;

/// How long a statement waits for a lock another writer holds before it fails
/// ([`BankError::Storage`]); the SQLite ledger's busy timeout.
pub const LOCK_TIMEOUT: Duration = crate::sqlite::BUSY_TIMEOUT;

/// A ledger in a PostgreSQL database, on one connection. Open one per worker (process or
/// thread); any number may share a database. The connection is never re-established: once
/// it breaks (a server restart or failover), every call fails with [`BankError::Storage`]
/// ("connection closed") and the ledger must be opened again.
pub struct PostgresLedger {
    client: Client,
    location: String,
    /// Opened by [`PostgresLedger::open_read_only`]: work that commits is refused.
    read_only: bool,
    /// The advisory lock keys of this ledger (they name its schema, so ledgers in two schemas
    /// of one database do not wait for each other).
    keys: LockKeys,
}

impl std::fmt::Debug for PostgresLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLedger")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl PostgresLedger {
    /// Connects to the database at `location` and opens the ledger in its `search_path`'s
    /// first schema, creating the tables when there are none and migrating older ones.
    ///
    /// # Errors
    /// - [`BankError::Storage`] naming the location (password removed): the URL does not
    ///   parse, the server cannot be reached or refuses the login, TLS fails, or a statement
    ///   fails.
    /// - [`BankError::NotALedger`]: the schema holds tables of the ledger's names without a
    ///   ledger's `meta`, another application's `meta`, or a ledger of a newer schema version.
    pub fn open(location: &str) -> Result<PostgresLedger, BankError> {
        Self::connect(location, How::Create)
    }

    /// Opens the ledger like [`PostgresLedger::open`], but never creates one.
    ///
    /// # Errors
    /// [`BankError::NotALedger`] when the schema holds no ledger, and every error of
    /// [`PostgresLedger::open`].
    pub fn open_existing(location: &str) -> Result<PostgresLedger, BankError> {
        Self::connect(location, How::Existing)
    }

    /// Opens the ledger for work that does not commit only, without the migration's lock and
    /// without migrating: it takes no lock and writes nothing, so a role with only `SELECT`
    /// on the ledger's tables, or a hot standby, serves. Work that commits fails with
    /// [`BankError::ReadOnly`].
    ///
    /// # Errors
    /// [`BankError::NotALedger`] when the schema holds no ledger or one of an older schema
    /// version (a writer must migrate it first), and every error of
    /// [`PostgresLedger::open`].
    pub fn open_read_only(location: &str) -> Result<PostgresLedger, BankError> {
        Self::connect(location, How::ReadOnly)
    }

    /// The location as error messages show it: the URL without its password.
    pub fn location(&self) -> &str {
        &self.location
    }

    fn connect(url: &str, how: How) -> Result<PostgresLedger, BankError> {
        let location = redact(url);
        // A scheme is case-insensitive (RFC 3986; `is_postgres` reads it so), but the client
        // knows only `postgres://` and `postgresql://`: it would read `POSTGRES://…` as
        // key=value text and quote it, password and all, in its error.
        let url = match url.split_once("://") {
            Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
            None => url.to_string(),
        };
        let config = Config::from_str(&url).map_err(|e| {
            storage_msg(
                &location,
                format!("not a PostgreSQL connection URL: {}", describe(&e)),
            )
        })?;
        let mut client = connect::connect(&config, &location)?;
        client
            .batch_execute(&format!(
                "SET lock_timeout = '{}ms'",
                LOCK_TIMEOUT.as_millis()
            ))
            .map_err(|e| storage(&location, "cannot set the lock timeout", &e))?;
        // current_schema() skips the schemas the role has no USAGE on, as well as missing ones.
        let (schema, search_path): (Option<String>, String) = client
            .query_one(
                "SELECT current_schema()::text, current_setting('search_path')",
                &[],
            )
            .and_then(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .map_err(|e| storage(&location, "cannot read its search_path", &e))?;
        let Some(schema) = schema else {
            return Err(BankError::NotALedger {
                file: location,
                reason: format!(
                    "the connection's search_path ({search_path}) names no schema that exists \
                     and the role may use; create the schema, grant the role USAGE on it, or \
                     name another with options=-csearch_path%3D<schema>"
                ),
            });
        };
        let keys = LockKeys { schema };
        let mut ledger = PostgresLedger {
            client,
            location,
            keys,
            read_only: matches!(how, How::ReadOnly),
        };
        match how {
            How::Create => ledger.migrate(true)?,
            How::Existing => ledger.migrate(false)?,
            How::ReadOnly => ledger.check_readable()?,
        }
        Ok(ledger)
    }
}

/// How [`PostgresLedger::connect`] opens a ledger.
#[derive(Clone, Copy)]
enum How {
    /// Creating or migrating it as needed.
    Create,
    /// Migrating it as needed, never creating one.
    Existing,
    /// Neither: for work that does not commit.
    ReadOnly,
}

impl Ledger for PostgresLedger {
    fn atomically<T>(
        &mut self,
        commit: bool,
        mut f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        let location = self.location.clone();
        if commit && self.read_only {
            return Err(BankError::ReadOnly { file: location });
        }
        let mut last_conflict = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            if attempt > 1 {
                // Back off before the next attempt, longer each time, so the writers that
                // conflicted do not meet again at once (1, 2, 4, … ms, at most 256 ms, and a
                // part that differs between processes).
                let base = 1u64 << (attempt - 2).min(8);
                let jitter = u64::from(std::process::id()) % (base + 1);
                std::thread::sleep(Duration::from_millis(base + jitter));
            }
            match self.attempt(commit, &mut f)? {
                Attempt::Done(v) => return Ok(v),
                Attempt::Conflict(message) => last_conflict = message,
            }
        }
        Err(BankError::Contended {
            file: location,
            attempts: MAX_ATTEMPTS,
            message: last_conflict,
        })
    }
}

/// How one run of a ledger transaction's work ended, if not with an error.
enum Attempt<T> {
    /// Committed (or, without a commit, rolled back) with this result.
    Done(T),
    /// Rolled back after a conflict with concurrent writers (the database's message).
    Conflict(String),
}

impl PostgresLedger {
    /// One run of `f` in one database transaction: at READ COMMITTED to commit; otherwise a
    /// READ ONLY snapshot (REPEATABLE READ) under an overlay that keeps its appends in memory.
    fn attempt<T>(
        &mut self,
        commit: bool,
        f: &mut impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<Attempt<T>, BankError> {
        let location = self.location.clone();
        let isolation = if commit {
            IsolationLevel::ReadCommitted
        } else {
            IsolationLevel::RepeatableRead
        };
        let tx = self
            .client
            .build_transaction()
            .isolation_level(isolation)
            .read_only(!commit)
            .start()
            .map_err(|e| storage(&location, "cannot begin a transaction", &e))?;
        let mut work = PgTx {
            tx: RefCell::new(tx),
            location: &location,
            keys: &self.keys,
            conflict: Cell::new(None),
            chain_held: false,
        };
        let out = if commit {
            f(&mut work)
        } else {
            f(&mut crate::overlay::Overlay::new(&work))
        };
        let conflict = work.conflict.take();
        let tx = work.tx.into_inner();
        match out {
            Ok(v) if commit => match tx.commit() {
                Ok(()) => Ok(Attempt::Done(v)),
                Err(e) if is_conflict(&e) => Ok(Attempt::Conflict(describe(&e))),
                Err(e) => Err(storage(&location, "cannot commit", &e)),
            },
            Ok(v) => {
                tx.rollback()
                    .map_err(|e| storage(&location, "cannot roll back", &e))?;
                Ok(Attempt::Done(v))
            }
            Err(e) => {
                // A failed rollback leaves the server to end the transaction when the
                // connection next speaks or closes; the error of `f` is what matters.
                let _ = tx.rollback();
                if let Some(message) = conflict {
                    Ok(Attempt::Conflict(message))
                } else {
                    Err(e)
                }
            }
        }
    }
}
