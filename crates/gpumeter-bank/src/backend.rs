//! Choosing the ledger by its location: a `postgres://` or `postgresql://` URL is a
//! PostgreSQL database (Cargo feature `postgres`), anything else is the path of an SQLite file,
//! except an empty location and a URL of another scheme (a mistyped `postgress://`), refused.
//! The CLI's `--bank`, the facade and the C ABI's `gm_bank_open` all go through [`open`] and
//! [`open_existing`], so a location means the same bank everywhere.

use std::path::Path;

use crate::ledger::{BankError, Ledger, LedgerTx};
use crate::location::check_location;
pub use crate::location::{is_postgres, redact, POSTGRES_SCHEMES};
#[cfg(feature = "postgres")]
use crate::postgres::PostgresLedger;
use crate::sqlite::SqliteLedger;

/// A ledger of either backend, chosen by [`open`] from its location.
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyLedger {
    /// An SQLite file.
    Sqlite(SqliteLedger),
    /// A PostgreSQL database (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(PostgresLedger),
}

impl AnyLedger {
    /// Where the ledger lives, as error messages name it: the file path, or the PostgreSQL URL
    /// with any password removed.
    pub fn location(&self) -> &str {
        match self {
            AnyLedger::Sqlite(l) => l.file(),
            #[cfg(feature = "postgres")]
            AnyLedger::Postgres(l) => l.location(),
        }
    }
}

impl Ledger for AnyLedger {
    fn atomically<T>(
        &mut self,
        commit: bool,
        f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        match self {
            AnyLedger::Sqlite(l) => l.atomically(commit, f),
            #[cfg(feature = "postgres")]
            AnyLedger::Postgres(l) => l.atomically(commit, f),
        }
    }
}

/// Opens the ledger at `location`, creating it when there is none (an absent or empty
/// SQLite file; a PostgreSQL schema without the ledger's tables) and migrating an older one.
///
/// # Errors
/// - [`BankError::BackendNotEnabled`]: a PostgreSQL URL in a build without the `postgres`
///   feature.
/// - [`BankError::NotALedger`]: the location holds something else, or a ledger of a newer
///   schema version; it is empty, or a URL of another scheme than `postgres` / `postgresql`
///   (`postgress://…`), which is no SQLite path either.
/// - [`BankError::Storage`]: the file or the server cannot be reached, read or written.
pub fn open(location: &str) -> Result<AnyLedger, BankError> {
    check_location(location)?;
    if is_postgres(location) {
        return open_postgres(location, Opening::Create);
    }
    SqliteLedger::open(Path::new(location)).map(AnyLedger::Sqlite)
}

/// Opens the ledger at `location` like [`open`], but never creates one: for the commands that
/// only read a bank or change an existing one, where a mistyped location must not pass as an
/// empty ledger.
///
/// # Errors
/// [`BankError::NotALedger`] when there is no ledger there, and every error of [`open`].
pub fn open_existing(location: &str) -> Result<AnyLedger, BankError> {
    check_location(location)?;
    if is_postgres(location) {
        return open_postgres(location, Opening::Existing);
    }
    SqliteLedger::open_existing(Path::new(location)).map(AnyLedger::Sqlite)
}

/// Opens the ledger at `location` for work that does not commit only (`verify`, `balance`,
/// `history`, `export`, a preview): never created, migrated or written, and it takes no lock
/// a writer holds, so it never waits for one. An SQLite file is
/// readable when it or its directory is read-only ([`SqliteLedger::open_read_only`]); a
/// PostgreSQL ledger is read in read-only transactions, so a role with only `SELECT` on the
/// tables, or a hot standby, serves. Work that commits fails with [`BankError::ReadOnly`].
///
/// # Errors
/// As [`open_existing`], and [`BankError::NotALedger`] for a ledger of an older schema
/// version (a reader does not migrate; a writer must open it once).
pub fn open_read_only(location: &str) -> Result<AnyLedger, BankError> {
    check_location(location)?;
    if is_postgres(location) {
        return open_postgres(location, Opening::ReadOnly);
    }
    SqliteLedger::open_read_only(Path::new(location)).map(AnyLedger::Sqlite)
}

/// How a PostgreSQL ledger is opened.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
enum Opening {
    Create,
    Existing,
    ReadOnly,
}

#[cfg(feature = "postgres")]
fn open_postgres(location: &str, how: Opening) -> Result<AnyLedger, BankError> {
    let l = match how {
        Opening::Create => PostgresLedger::open(location)?,
        Opening::Existing => PostgresLedger::open_existing(location)?,
        Opening::ReadOnly => PostgresLedger::open_read_only(location)?,
    };
    Ok(AnyLedger::Postgres(l))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(location: &str, _how: Opening) -> Result<AnyLedger, BankError> {
    Err(BankError::BackendNotEnabled {
        location: redact(location),
        feature: "postgres",
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_locations_and_urls_of_other_schemes_are_refused_before_any_file() {
        for location in [
            "postgress://u:s3cret@h/ledger",
            "mysql://u:s3cret@h/ledger",
            "",
        ] {
            for result in [
                super::open(location),
                super::open_existing(location),
                super::open_read_only(location),
            ] {
                match result {
                    Err(crate::ledger::BankError::NotALedger { file, reason }) => {
                        assert!(!file.contains("s3cret"), "{file}");
                        assert!(
                            reason.contains("postgres://"),
                            "{location}: {file}: {reason}"
                        );
                    }
                    other => panic!("{location}: {other:?}"),
                }
            }
        }
        // A one-letter scheme is a Windows drive, a path: not refused as a URL.
        assert!(crate::location::other_scheme("C://bank.db").is_none());
        assert_eq!(crate::location::other_scheme("pg://h/db"), Some("pg"));
        assert_eq!(crate::location::other_scheme("postgres://h/db"), None);
    }
}
