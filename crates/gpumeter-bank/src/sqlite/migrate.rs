//! The ledger's tables in an SQLite file: the migrations that make them, the connection's
//! configuration (WAL, `synchronous = FULL`), what a file holds before it is used as a ledger,
//! and what a reader refuses.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::error::storage;
use super::{SqliteLedger, BUSY_TIMEOUT};
use crate::ledger::BankError;
use crate::tables::{ledger_version, SCHEMA_VERSION};

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

/// What a file holds, before it is used as a ledger.
pub(super) enum Contents {
    /// No table at all (a new or empty file): version 0.
    Empty,
    /// A gpumeter ledger of this schema version.
    Ledger(u32),
}
/// What the database holds: nothing, a ledger of some version, or (an error) something else.
pub(super) fn contents(conn: &Connection, file: &str) -> Result<Contents, BankError> {
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
    pub(super) fn configure(&self) -> Result<(), BankError> {
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
    pub(super) fn migrate(&mut self) -> Result<(), BankError> {
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

/// Refuses what a reader cannot use: a file without a ledger's tables, or a ledger older than
/// [`SCHEMA_VERSION`], which only a writer migrates.
pub(super) fn readable_version(file: &str, found: &Contents) -> Result<(), BankError> {
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
}
