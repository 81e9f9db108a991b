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

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use rust_decimal::Decimal;

use crate::ledger::{
    chain_hash, ledger_version, Appended, Assembler, BankError, Ledger, LedgerTx, NewTransaction,
    PostingRow, StoredTransaction, TransactionRow,
};

/// The `meta` row `application` of every gpumeter ledger.
pub const APPLICATION: &str = "gpumeter-ledger";

/// The schema version this build writes, and the newest it can open.
pub const SCHEMA_VERSION: u32 = 1;

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

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// A ledger in an SQLite file. Several processes may open the same file: writes are
/// serialized (`BEGIN IMMEDIATE`, waiting up to [`BUSY_TIMEOUT`]).
#[derive(Debug)]
pub struct SqliteLedger {
    conn: Connection,
    file: String,
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
        check_header(path, &file)?;
        let conn = Connection::open(path).map_err(|e| storage(&file, "cannot open it", &e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| storage(&file, "cannot set the busy timeout", &e))?;
        // Look before writing anything: WAL mode changes the file's header.
        contents(&conn, &file)?;
        let mut ledger = SqliteLedger { conn, file };
        ledger.configure()?;
        ledger.migrate()?;
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
        let file = path.display().to_string();
        let len = std::fs::metadata(path).map(|m| m.len()).map_err(|e| BankError::NotALedger {
            file: file.clone(),
            reason: format!("there is no bank here ({e}); `bank grant`, `bank reserve`, `bank import` and `invoice finalize` create one"),
        })?;
        if len == 0 {
            return Err(BankError::NotALedger {
                file,
                reason: "the file is empty, not a bank; `bank grant`, `bank reserve`, `bank import` and `invoice finalize` create one".into(),
            });
        }
        Self::open(path)
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

fn storage(file: &str, what: &str, e: &rusqlite::Error) -> BankError {
    BankError::Storage {
        file: file.to_string(),
        message: format!("{what}: {e}"),
    }
}

impl Ledger for SqliteLedger {
    fn atomically<T>(
        &mut self,
        commit: bool,
        mut f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        let file = self.file.clone();
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
            Ok(v) if commit => {
                tx.commit()
                    .map_err(|e| storage(&file, "cannot commit", &e))?;
                Ok(v)
            }
            Ok(v) => {
                tx.rollback()
                    .map_err(|e| storage(&file, "cannot roll back", &e))?;
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
}

#[cfg(test)]
mod tests {
    use super::{MIGRATIONS, SCHEMA_VERSION};

    #[test]
    fn one_migration_per_schema_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }
}
