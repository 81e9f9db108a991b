//! The ledger's tables in a PostgreSQL schema: the migrations that make them, what a schema
//! holds before the ledger is used, and the check a reader makes without migrating.

use postgres::error::SqlState;
use postgres::{IsolationLevel, Transaction};

use super::error::{describe, storage};
use super::PostgresLedger;
use crate::ledger::BankError;
use crate::tables::{ledger_version, SCHEMA_VERSION};

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
impl PostgresLedger {
    /// For [`PostgresLedger::open_read_only`]: the schema holds a ledger of this version,
    /// read in a read-only transaction without any lock.
    pub(super) fn check_readable(&mut self) -> Result<(), BankError> {
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
    pub(super) fn migrate(&mut self, create: bool) -> Result<(), BankError> {
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

#[cfg(test)]
mod tests {
    use super::{MIGRATIONS, SCHEMA_VERSION};

    #[test]
    fn one_migration_per_schema_version() {
        assert_eq!(MIGRATIONS.len(), SCHEMA_VERSION as usize);
    }
}
