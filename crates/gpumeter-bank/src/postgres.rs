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
//! # Schema (version [`SCHEMA_VERSION`], the SQLite ledger's)
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

use std::cell::{Cell, RefCell};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use postgres::config::{Host, SslMode};
use postgres::error::SqlState;
use postgres::{Client, Config, IsolationLevel, NoTls, Transaction};
use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::ledger::{
    chain_hash, Appended, BankError, Ledger, LedgerTx, NewTransaction, StoredTransaction,
};
use crate::location::redact;
use crate::tables::{ledger_version, Assembler, PostingRow, TransactionRow, SCHEMA_VERSION};

/// How many times [`Ledger::atomically`] runs work that conflicts with concurrent writers
/// (serialization failures, deadlocks) before it gives up with [`BankError::Contended`].
pub const MAX_ATTEMPTS: u32 = 10;

/// How long a statement waits for a lock another writer holds before it fails
/// ([`BankError::Storage`]); the SQLite ledger's busy timeout.
pub const LOCK_TIMEOUT: Duration = crate::sqlite::BUSY_TIMEOUT;

/// The migrations, in order: `MIGRATIONS[n]` takes a schema from version `n` to `n + 1`
/// (version 0 has none of the tables). Never edit a released entry; append one and raise
/// [`SCHEMA_VERSION`] (shared with the SQLite ledger, whose schema it mirrors).
const MIGRATIONS: &[&str] = &[
    // 0 -> 1: the ledger.
    r#"CREATE TABLE meta (
         name  TEXT COLLATE "C" PRIMARY KEY,
         value TEXT NOT NULL
     );
     INSERT INTO meta (name, value) VALUES ('application', 'gpumeter-ledger');
     CREATE TABLE transactions (
         seq       BIGINT PRIMARY KEY CHECK (seq > 0),
         key       TEXT COLLATE "C" NOT NULL UNIQUE,
         kind      TEXT COLLATE "C" NOT NULL,
         at        TEXT COLLATE "C" NOT NULL,
         tenant    TEXT COLLATE "C",
         memo      TEXT NOT NULL,
         prev_hash TEXT COLLATE "C" NOT NULL,
         hash      TEXT COLLATE "C" NOT NULL
     );
     CREATE INDEX transactions_kind ON transactions (kind, seq);
     CREATE TABLE postings (
         seq       BIGINT NOT NULL REFERENCES transactions (seq),
         idx       INTEGER NOT NULL,
         account   TEXT COLLATE "C" NOT NULL,
         commodity TEXT COLLATE "C" NOT NULL,
         amount    NUMERIC NOT NULL,
         PRIMARY KEY (seq, idx)
     );
     CREATE INDEX postings_account ON postings (account, commodity);
     CREATE TABLE balances (
         account   TEXT COLLATE "C" NOT NULL,
         commodity TEXT COLLATE "C" NOT NULL,
         amount    NUMERIC NOT NULL,
         PRIMARY KEY (account, commodity)
     );"#,
];

/// The ledger's tables: a schema that has some of them but no `meta` is not taken over.
const TABLES: [&str; 4] = ["meta", "transactions", "postings", "balances"];

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

/// Advisory lock keys: 64-bit, from SHA-256 of the schema's name and the lock's name.
#[derive(Debug, Clone)]
struct LockKeys {
    schema: String,
}

impl LockKeys {
    fn key(&self, what: &str, name: &str) -> i64 {
        let mut h = Sha256::new();
        h.update(b"gpumeter-ledger\0");
        h.update(self.schema.as_bytes());
        h.update(b"\0");
        h.update(what.as_bytes());
        h.update(b"\0");
        h.update(name.as_bytes());
        let d = h.finalize();
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        i64::from_be_bytes(b)
    }

    /// The whole bank: shared by tenant work, exclusive for work across tenants.
    fn bank(&self) -> i64 {
        self.key("bank", "")
    }

    /// The hash chain's head.
    fn chain(&self) -> i64 {
        self.key("chain", "")
    }

    /// Schema creation and migration.
    fn migration(&self) -> i64 {
        self.key("migration", "")
    }

    fn tenant(&self, tenant: &str) -> i64 {
        self.key("tenant", tenant)
    }
}

fn storage_msg(file: &str, message: String) -> BankError {
    BankError::Storage {
        file: file.to_string(),
        message,
    }
}

fn storage(file: &str, what: &str, e: &postgres::Error) -> BankError {
    storage_msg(file, format!("{what}: {}", describe(e)))
}

/// The server's message and SQLSTATE when there is one, else the client's error with its
/// causes (`error performing TLS handshake: invalid peer certificate: UnknownIssuer`,
/// `error connecting to server: Connection refused (os error 111)`).
fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// Whether rolling back and running the work again may succeed.
fn is_conflict(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
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
        let mut client = connect(&config, &location)?;
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

    /// For [`PostgresLedger::open_read_only`]: the schema holds a ledger of this version,
    /// read in a read-only transaction without any lock.
    fn check_readable(&mut self) -> Result<(), BankError> {
        let location = self.location.clone();
        let schema = self.keys.schema.clone();
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(|e| storage(&location, "cannot begin a transaction", &e))?;
        let found = contents(&mut tx, &location, &schema)?;
        // A failed rollback shows at the next statement.
        let _ = tx.rollback();
        match found {
            Some(SCHEMA_VERSION) => Ok(()),
            Some(v) => Err(BankError::NotALedger {
                file: location,
                reason: format!(
                    "a gpumeter ledger of schema version {v}, older than this gpumeter's \
                     ({SCHEMA_VERSION}): it needs a migration, which a command that only \
                     reads does not make; run a command that writes to it once with a role \
                     that may migrate it (docs/BANK.md, Migrations), then read it"
                ),
            }),
            None => Err(BankError::NotALedger {
                file: location,
                reason: format!(
                    "there is no bank in schema `{schema}`; `bank grant`, `bank reserve`, \
                     `bank import` and `invoice finalize` create one"
                ),
            }),
        }
    }

    /// Looks at the schema under the migration lock, then creates or migrates the tables.
    fn migrate(&mut self, create: bool) -> Result<(), BankError> {
        let location = self.location.clone();
        let lock = self.keys.migration();
        let schema = self.keys.schema.clone();
        // READ COMMITTED whatever the server's default_transaction_isolation: the schema is
        // read by a statement after the lock, so it shows what a migration that held the lock
        // before committed (a snapshot would be taken before the wait, and miss its tables).
        let mut tx = self
            .client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .map_err(|e| storage(&location, "cannot begin the migration", &e))?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&lock])
            .map_err(|e| storage(&location, "cannot lock the schema for migration", &e))?;
        let from = match contents(&mut tx, &location, &schema)? {
            None if !create => {
                return Err(BankError::NotALedger {
                    file: location,
                    reason: format!(
                        "there is no bank in schema `{schema}`; `bank grant`, `bank reserve`, \
                         `bank import` and `invoice finalize` create one"
                    ),
                })
            }
            None => 0,
            Some(v) => v,
        };
        if from < SCHEMA_VERSION {
            for (n, sql) in MIGRATIONS.iter().enumerate().skip(from as usize) {
                tx.batch_execute(sql).map_err(|e| {
                    storage(
                        &location,
                        &format!("cannot migrate from schema version {n} to {}", n + 1),
                        &e,
                    )
                })?;
            }
            tx.execute(
                "INSERT INTO meta (name, value) VALUES ('schema_version', $1)
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                &[&SCHEMA_VERSION.to_string()],
            )
            .map_err(|e| storage(&location, "cannot record the schema version", &e))?;
        }
        tx.commit()
            .map_err(|e| storage(&location, "cannot commit the migration", &e))
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

/// Connects with TLS as the URL's `sslmode` asks. Under `prefer` (the default) a machine
/// without any trusted root connects without TLS, as libpq would when TLS cannot be had; a
/// server that offers TLS must still present a certificate the client trusts.
fn connect(config: &Config, location: &str) -> Result<Client, BankError> {
    let tcp = config.get_hosts().iter().any(|h| matches!(h, Host::Tcp(_)));
    let mode = config.get_ssl_mode();
    let out = if mode == SslMode::Disable || !tcp {
        // TLS is never used on a Unix socket.
        config.connect(NoTls)
    } else {
        match tls(location) {
            Ok(connector) => config.connect(connector),
            Err(_) if mode == SslMode::Prefer => config.connect(NoTls),
            Err(e) => return Err(e),
        }
    };
    out.map_err(|e| {
        let mut message = format!("cannot connect: {}", describe(&e));
        if message.contains("UnknownIssuer") {
            // rustls's name for it says nothing of what to do.
            message.push_str(
                " (no root this machine trusts signed the server's certificate: point \
                 SSL_CERT_FILE at its CA's certificate)",
            );
        }
        storage_msg(location, message)
    })
}

/// rustls with the system's trusted roots (`SSL_CERT_FILE`, `SSL_CERT_DIR` override them).
fn tls(location: &str) -> Result<tokio_postgres_rustls::MakeRustlsConnect, BankError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(storage_msg(
            location,
            format!(
                "TLS: no trusted root certificate could be loaded ({}); set SSL_CERT_FILE, or \
                 sslmode=disable for a server without TLS",
                if why.is_empty() {
                    "the system store is empty".to_string()
                } else {
                    why.join("; ")
                }
            ),
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| storage_msg(location, format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// What the connection's schema holds: `None` (none of the ledger's tables), a ledger of
/// some version, or (an error) something else.
fn contents(
    tx: &mut Transaction<'_>,
    location: &str,
    schema: &str,
) -> Result<Option<u32>, BankError> {
    let not_a_ledger = |reason: String| BankError::NotALedger {
        file: location.to_string(),
        reason,
    };
    // pg_catalog, not information_schema.tables, which lists only the tables the role has a
    // privilege on: a role without one would see no bank where there is one (and try to
    // create its tables).
    let tables: Vec<String> = tx
        .query(
            "SELECT c.relname::text FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relname = ANY($1)
               AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
             ORDER BY 1",
            &[&TABLES.to_vec()],
        )
        .and_then(|rows| rows.iter().map(|r| r.try_get(0)).collect())
        .map_err(|e| storage(location, "cannot read its tables", &e))?;
    if tables.is_empty() {
        return Ok(None);
    }
    if !tables.iter().any(|t| t == "meta") {
        return Err(not_a_ledger(format!(
            "not a gpumeter ledger: schema `{schema}` has tables named like the ledger's ({}) \
             but no `meta`; use another schema (options=-csearch_path%3D<schema>)",
            tables.join(", ")
        )));
    }
    let meta = |tx: &mut Transaction<'_>, name: &str| -> Result<Option<String>, BankError> {
        tx.query_opt("SELECT value FROM meta WHERE name = $1", &[&name])
            .and_then(|r| r.map(|r| r.try_get(0)).transpose())
            .map_err(|e| {
                if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
                    return storage(
                        location,
                        "the role may not read the bank (docs/BANK.md, Migrations: the \
                         privileges a worker needs)",
                        &e,
                    );
                }
                not_a_ledger(format!(
                    "not a gpumeter ledger: its `meta` table cannot be read ({})",
                    describe(&e)
                ))
            })
    };
    let version = ledger_version(location, SCHEMA_VERSION, |name| meta(tx, name))?;
    Ok(Some(version))
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

/// [`LedgerTx`] on an open PostgreSQL transaction.
struct PgTx<'a, 'c> {
    tx: RefCell<Transaction<'c>>,
    location: &'a str,
    keys: &'a LockKeys,
    /// The first conflict (serialization failure, deadlock) a statement met: the work is run
    /// again.
    conflict: Cell<Option<String>>,
    /// Whether this transaction holds the hash chain's lock.
    chain_held: bool,
}

impl PgTx<'_, '_> {
    fn err(&self, what: &str, e: &postgres::Error) -> BankError {
        if is_conflict(e) {
            let first = self.conflict.take();
            self.conflict
                .set(Some(first.unwrap_or_else(|| describe(e))));
        }
        storage(self.location, what, e)
    }

    fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, BankError> {
        self.tx
            .borrow_mut()
            .query(sql, params)
            .map_err(|e| self.err(what, &e))
    }

    fn get<'r, T: postgres::types::FromSql<'r>>(
        &self,
        what: &str,
        row: &'r postgres::Row,
        i: usize,
    ) -> Result<T, BankError> {
        row.try_get(i).map_err(|e| self.err(what, &e))
    }

    /// A statement of [`LedgerTx::append`] that writes transaction `key`'s data: an error the
    /// server blames on the data (SQLSTATE class 22, a data exception such as a character the
    /// database's encoding lacks; class 54, a limit such as a key too long for its index) is
    /// [`BankError::Refused`] naming the transaction, since the same transaction would fail
    /// again; any other is what [`PgTx::query`] returns.
    fn write(
        &self,
        what: &str,
        key: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, BankError> {
        let out = self.tx.borrow_mut().query(sql, params);
        out.map_err(|e| {
            let class = e.code().map(|c| &c.code()[..2]);
            if matches!(class, Some("22" | "54")) {
                let mut shown: String = key.chars().take(80).collect();
                if shown.len() < key.len() {
                    shown.push('…');
                }
                BankError::Refused(format!(
                    "transaction `{}`: PostgreSQL refuses it: {what}: {}",
                    shown.escape_debug(),
                    describe(&e)
                ))
            } else {
                self.err(what, &e)
            }
        })
    }

    /// Takes the advisory locks `keys`, sorted, exclusive (after the bank's, shared).
    fn lock(&self, mut keys: Vec<i64>) -> Result<(), BankError> {
        keys.sort_unstable();
        keys.dedup();
        self.query(
            "cannot lock the bank",
            "SELECT pg_advisory_xact_lock_shared($1)",
            &[&self.keys.bank()],
        )?;
        for k in keys {
            self.query(
                "cannot lock a tenant",
                "SELECT pg_advisory_xact_lock($1)",
                &[&k],
            )?;
        }
        Ok(())
    }

    /// The transactions `WHERE <filter>` with their postings, in ledger order.
    fn load(&self, filter: &str, args: &[&str]) -> Result<Vec<StoredTransaction>, BankError> {
        let what = "cannot read transactions";
        let args: Vec<&(dyn postgres::types::ToSql + Sync)> = args
            .iter()
            .map(|a| a as &(dyn postgres::types::ToSql + Sync))
            .collect();
        let rows = self.query(
            what,
            &format!(
                "SELECT seq, key, kind, at, tenant, memo, prev_hash, hash FROM transactions
                 WHERE {filter} ORDER BY seq"
            ),
            &args,
        )?;
        let mut out = Assembler::default();
        for r in &rows {
            out.transaction(TransactionRow {
                seq: self.get(what, r, 0)?,
                key: self.get(what, r, 1)?,
                kind: self.get(what, r, 2)?,
                at: self.get(what, r, 3)?,
                tenant: self.get(what, r, 4)?,
                memo: self.get(what, r, 5)?,
                prev_hash: self.get(what, r, 6)?,
                hash: self.get(what, r, 7)?,
            })?;
        }
        if out.is_empty() {
            return Ok(out.finish());
        }
        let what = "cannot read postings";
        let rows = self.query(
            what,
            &format!(
                "SELECT seq, idx, account, commodity, amount::text FROM postings
                 WHERE seq IN (SELECT seq FROM transactions WHERE {filter}) ORDER BY seq, idx"
            ),
            &args,
        )?;
        for r in &rows {
            out.posting(PostingRow {
                seq: self.get(what, r, 0)?,
                idx: i64::from(self.get::<i32>(what, r, 1)?),
                account: self.get(what, r, 2)?,
                commodity: self.get(what, r, 3)?,
                amount: self.get(what, r, 4)?,
            })?;
        }
        Ok(out.finish())
    }

    fn parse_balance(
        &self,
        account: &str,
        commodity: &str,
        text: &str,
    ) -> Result<Decimal, BankError> {
        Decimal::from_str_exact(text).map_err(|e| {
            storage_msg(
                self.location,
                format!("the balance of {account} in {commodity} is `{text}`, not a decimal ({e})"),
            )
        })
    }
}

/// Refuses a transaction with a NUL character in a text column (PostgreSQL's `text` cannot
/// hold one; an SQLite ledger can, so an export of one may carry it). The memo is JSON, whose
/// text escapes it.
fn refuse_nul(tx: &NewTransaction) -> Result<(), BankError> {
    let mut fields: Vec<(&str, &str)> = vec![("key", &tx.key), ("kind", &tx.kind), ("at", &tx.at)];
    if let Some(t) = &tx.tenant {
        fields.push(("tenant", t));
    }
    for p in &tx.postings {
        fields.push(("account", &p.account));
        fields.push(("commodity", &p.commodity));
    }
    match fields.iter().find(|(_, v)| v.contains('\0')) {
        Some((field, _)) => Err(BankError::Refused(format!(
            "transaction `{}`: its {field} holds a NUL character, which PostgreSQL text \
             cannot hold",
            tx.key.escape_debug()
        ))),
        None => Ok(()),
    }
}

impl LedgerTx for PgTx<'_, '_> {
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self.load("key = $1", &[key])?.into_iter().next())
    }

    fn append(&mut self, mut tx: NewTransaction) -> Result<Appended, BankError> {
        refuse_nul(&tx)?;
        if let Some(t) = self.find(&tx.key)? {
            return Ok(Appended::AlreadyApplied(t));
        }
        tx.canonicalize();
        tx.check_balanced()?;
        if !self.chain_held {
            self.query(
                "cannot lock the chain's head",
                "SELECT pg_advisory_xact_lock($1)",
                &[&self.keys.chain()],
            )?;
            self.chain_held = true;
        }
        let what = "cannot read the chain head";
        let last = self.query(
            what,
            "SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1",
            &[],
        )?;
        let (last_seq, prev_hash): (i64, String) = match last.first() {
            Some(r) => (self.get(what, r, 0)?, self.get(what, r, 1)?),
            None => (0, String::new()),
        };
        let seq = u64::try_from(last_seq)
            .ok()
            .and_then(|s| s.checked_add(1))
            .ok_or_else(|| {
                storage_msg(
                    self.location,
                    format!("the last sequence number {last_seq} cannot be followed"),
                )
            })?;
        let seq_i = i64::try_from(seq).map_err(|_| {
            storage_msg(
                self.location,
                format!("sequence number {seq} exceeds what PostgreSQL's bigint holds"),
            )
        })?;
        let hash = chain_hash(seq, &tx, &prev_hash)?;
        let memo = serde_json::to_string(&tx.memo)
            .map_err(|e| BankError::Refused(format!("transaction `{}`: memo: {e}", tx.key)))?;
        // The unique key decides: a concurrent writer that appended this key first (and has
        // committed: it held the chain) makes this insert do nothing.
        let inserted = self.write(
            "cannot append a transaction",
            &tx.key,
            "INSERT INTO transactions (seq, key, kind, at, tenant, memo, prev_hash, hash)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (key) DO NOTHING RETURNING seq",
            &[
                &seq_i, &tx.key, &tx.kind, &tx.at, &tx.tenant, &memo, &prev_hash, &hash,
            ],
        )?;
        if inserted.is_empty() {
            let earlier = self.find(&tx.key)?.ok_or_else(|| {
                storage_msg(
                    self.location,
                    format!(
                        "transaction `{}`: its key is taken, but no transaction has it",
                        tx.key
                    ),
                )
            })?;
            return Ok(Appended::AlreadyApplied(earlier));
        }
        // The postings and their balances in two statements, not two per posting: this runs
        // while the chain is held, and every round trip here is one every other writer waits
        // out. Balances are summed per account and commodity first (a statement's upsert may
        // touch a row once); a balance beyond a decimal is refused as on SQLite.
        if i32::try_from(tx.postings.len()).is_err() {
            return Err(BankError::Refused(format!(
                "transaction `{}` has too many postings",
                tx.key
            )));
        }
        let accounts: Vec<&str> = tx.postings.iter().map(|p| p.account.as_str()).collect();
        let commodities: Vec<&str> = tx.postings.iter().map(|p| p.commodity.as_str()).collect();
        let amounts: Vec<String> = tx.postings.iter().map(|p| p.amount.to_string()).collect();
        if !tx.postings.is_empty() {
            self.write(
                "cannot append the postings",
                &tx.key,
                "INSERT INTO postings (seq, idx, account, commodity, amount)
                 SELECT $1, (p.i - 1)::integer, p.a, p.c, p.m::numeric
                 FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS p(a, c, m, i)",
                &[&seq_i, &accounts, &commodities, &amounts],
            )?;
            let what = "cannot update the balances";
            let rows = self.write(
                what,
                &tx.key,
                "INSERT INTO balances (account, commodity, amount)
                 SELECT p.a, p.c, sum(p.m::numeric)
                 FROM unnest($1::text[], $2::text[], $3::text[]) AS p(a, c, m)
                 GROUP BY p.a, p.c
                 ON CONFLICT (account, commodity)
                 DO UPDATE SET amount = balances.amount + excluded.amount
                 RETURNING account, commodity, amount::text",
                &[&accounts, &commodities, &amounts],
            )?;
            for r in &rows {
                let account: String = self.get(what, r, 0)?;
                let commodity: String = self.get(what, r, 1)?;
                let text: String = self.get(what, r, 2)?;
                if Decimal::from_str_exact(&text).is_err() {
                    return Err(BankError::Refused(format!(
                        "the balance of {account} in {commodity} exceeds what a decimal holds"
                    )));
                }
            }
        }
        Ok(Appended::Applied(StoredTransaction {
            seq,
            tx,
            prev_hash,
            hash,
        }))
    }

    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        let what = "cannot read a balance";
        let rows = self.query(
            what,
            "SELECT amount::text FROM balances WHERE account = $1 AND commodity = $2",
            &[&account, &commodity],
        )?;
        match rows.first() {
            Some(r) => {
                let text: String = self.get(what, r, 0)?;
                self.parse_balance(account, commodity, &text)
            }
            None => Ok(Decimal::ZERO),
        }
    }

    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        let what = "cannot read balances";
        let rows = self.query(
            what,
            "SELECT account, commodity, amount::text FROM balances
             WHERE left(account, length($1)) = $1 ORDER BY account, commodity",
            &[&prefix],
        )?;
        let mut out = Vec::new();
        for r in &rows {
            let account: String = self.get(what, r, 0)?;
            let commodity: String = self.get(what, r, 1)?;
            let text: String = self.get(what, r, 2)?;
            let amount = self.parse_balance(&account, &commodity, &text)?;
            if !amount.is_zero() {
                out.push((account, commodity, amount));
            }
        }
        Ok(out)
    }

    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError> {
        match kind {
            Some(k) => self.load("kind = $1", &[k]),
            None => self.load("TRUE", &[]),
        }
    }

    fn tenant_transactions(
        &self,
        kind: &str,
        tenant: &str,
    ) -> Result<Vec<StoredTransaction>, BankError> {
        self.load("kind = $1 AND tenant = $2", &[kind, tenant])
    }

    fn first_transaction(&self, kind: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self
            .load(
                "seq = (SELECT min(seq) FROM transactions WHERE kind = $1)",
                &[kind],
            )?
            .into_iter()
            .next())
    }

    fn head(&self) -> Result<Option<String>, BankError> {
        let what = "cannot read the chain head";
        let rows = self.query(
            what,
            "SELECT hash FROM transactions ORDER BY seq DESC LIMIT 1",
            &[],
        )?;
        rows.first().map(|r| self.get(what, r, 0)).transpose()
    }

    fn last(&self) -> Result<Option<(u64, String)>, BankError> {
        let what = "cannot read the chain head";
        let rows = self.query(
            what,
            "SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1",
            &[],
        )?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let seq: i64 = self.get(what, r, 0)?;
        let seq = u64::try_from(seq).map_err(|_| {
            storage_msg(
                self.location,
                format!("the last sequence number {seq} is negative"),
            )
        })?;
        Ok(Some((seq, self.get(what, r, 1)?)))
    }

    fn lock_tenants(&mut self, tenants: &[&str]) -> Result<(), BankError> {
        let keys = tenants.iter().map(|t| self.keys.tenant(t)).collect();
        self.lock(keys)
    }

    fn lock_all(&mut self) -> Result<(), BankError> {
        self.query(
            "cannot lock the bank",
            "SELECT pg_advisory_xact_lock($1)",
            &[&self.keys.bank()],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{LockKeys, MIGRATIONS, SCHEMA_VERSION};

    #[test]
    fn one_migration_per_schema_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }

    #[test]
    fn lock_keys_name_the_schema_and_the_lock() {
        let a = LockKeys { schema: "a".into() };
        let b = LockKeys { schema: "b".into() };
        assert_ne!(a.tenant("x"), b.tenant("x"));
        assert_ne!(a.tenant("x"), a.tenant("y"));
        assert_ne!(a.bank(), a.chain());
        assert_eq!(a.tenant("x"), LockKeys { schema: "a".into() }.tenant("x"));
    }
}
