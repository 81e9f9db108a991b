//! Choosing the ledger by its location: a `postgres://` or `postgresql://` URL is a
//! PostgreSQL database (Cargo feature `postgres`), anything else is the path of an SQLite file.
//! The CLI's `--bank`, the facade and the C ABI's `gm_bank_open` all go through [`open`] and
//! [`open_existing`], so a location means the same bank everywhere.

use std::path::Path;

use crate::ledger::{BankError, Ledger, LedgerTx};
#[cfg(feature = "postgres")]
use crate::postgres::PostgresLedger;
use crate::sqlite::SqliteLedger;

/// The URL schemes of a PostgreSQL location (libpq's: both spellings).
pub const POSTGRES_SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// Whether `location` names a PostgreSQL database (its scheme is one of
/// [`POSTGRES_SCHEMES`], in any case) rather than an SQLite file.
pub fn is_postgres(location: &str) -> bool {
    POSTGRES_SCHEMES.iter().any(|s| {
        location
            .get(..s.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(s))
    })
}

/// `location` as messages may show it: a PostgreSQL URL without its password (in the user
/// part or a `password` parameter); a file path as given. A URL that does not parse is shown
/// as its scheme only, since where its password would be cannot be told.
pub fn redact(location: &str) -> String {
    if !is_postgres(location) {
        return location.to_string();
    }
    // rust-postgres takes everything between `://` and the first `@` as `user:password`, even
    // when the password holds a `/`, `?` or `#` (where a URL parser ends the authority and
    // finds no password): mask it by that rule first.
    let masked;
    let location = match location.split_once("://") {
        Some((scheme, rest)) => match rest.split_once('@') {
            Some((credentials, after)) => match credentials.split_once(':') {
                Some((user, _password)) => {
                    masked = format!("{scheme}://{user}:***@{after}");
                    masked.as_str()
                }
                None => location,
            },
            None => location,
        },
        None => location,
    };
    let Ok(mut url) = url::Url::parse(location) else {
        let scheme = location.split("://").next().unwrap_or("postgres");
        return format!("{scheme}://… (a URL that does not parse)");
    };
    if url.password().is_some() {
        // A URL with a host accepts a password change; one without none to remove.
        let _ = url.set_password(Some("***"));
    }
    if url.query_pairs().any(|(k, _)| k == "password") {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k == "password" {
                    "***".to_string()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    mask_password_pairs(url.as_str())
}

/// `text` with the value of every `password=…` pair masked, wherever a URL parser put it: a
/// URL whose credentials end after a `?` (masked by rust-postgres's rule above) may leave a
/// `&password=…` in what the parser takes for its host. Pairs are the pieces between `?`,
/// `&` and `#`; a key is compared percent-decoded, as rust-postgres reads it.
fn mask_password_pairs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let end = rest.find(['?', '&', '#']).unwrap_or(rest.len());
        let (piece, tail) = rest.split_at(end);
        match piece.split_once('=') {
            Some((key, _))
                if url::form_urlencoded::parse(format!("{key}=").as_bytes())
                    .next()
                    .is_some_and(|(k, _)| k == "password") =>
            {
                out.push_str(key);
                out.push_str("=***");
            }
            _ => out.push_str(piece),
        }
        let Some(sep) = tail.chars().next() else {
            return out;
        };
        out.push(sep);
        rest = &tail[sep.len_utf8()..];
    }
}

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
///   schema version.
/// - [`BankError::Storage`]: the file or the server cannot be reached, read or written.
pub fn open(location: &str) -> Result<AnyLedger, BankError> {
    if is_postgres(location) {
        return open_postgres(location, false);
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
    if is_postgres(location) {
        return open_postgres(location, true);
    }
    SqliteLedger::open_existing(Path::new(location)).map(AnyLedger::Sqlite)
}

#[cfg(feature = "postgres")]
fn open_postgres(location: &str, existing: bool) -> Result<AnyLedger, BankError> {
    let l = if existing {
        PostgresLedger::open_existing(location)?
    } else {
        PostgresLedger::open(location)?
    };
    Ok(AnyLedger::Postgres(l))
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(location: &str, _existing: bool) -> Result<AnyLedger, BankError> {
    Err(BankError::BackendNotEnabled {
        location: redact(location),
        feature: "postgres",
    })
}

#[cfg(test)]
mod tests {
    use super::{is_postgres, redact};

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://billing:s3cret@db.example:5432/ledger"),
            "postgres://billing:***@db.example:5432/ledger"
        );
        let r = redact("postgresql://db.example/ledger?user=b&password=s3cret&sslmode=require");
        assert!(!r.contains("s3cret"), "{r}");
        assert!(r.contains("sslmode=require"), "{r}");
        assert_eq!(redact("bank.db"), "bank.db");
        assert!(!redact("postgres://u:s3cret@[bad/db").contains("s3cret"));
    }

    /// rust-postgres takes everything before the first `@` as the user and password, so a
    /// password holding a `/`, `?` or `#` (a base64 one, written without percent-encoding)
    /// connects; the redaction must hide all of it, though a general URL parser ends the
    /// authority at that character and finds no password.
    #[test]
    fn passwords_with_url_delimiters_never_show() {
        for (url, password) in [
            (
                "postgres://billing:12/s3cret+x@db.example/ledger",
                "12/s3cret+x",
            ),
            ("postgres://billing:/s3cret@db.example/ledger", "/s3cret"),
            (
                "postgres://billing:5432?s3cret@db.example/ledger",
                "5432?s3cret",
            ),
            (
                "postgresql://billing:1234#s3cret@db.example/ledger?sslmode=disable",
                "1234#s3cret",
            ),
            // rust-postgres: user `h`, password `5432/db?user=a`, host `b&password=s3cret`.
            (
                "postgresql://h:5432/db?user=a@b&password=s3cret",
                "5432/db?user=a",
            ),
            ("postgres://u@h/db?pass%77ord=s3cret", "s3cret"),
        ] {
            #[cfg(feature = "postgres")]
            {
                use std::str::FromStr;
                let config = postgres::Config::from_str(url).expect("rust-postgres reads it");
                assert_eq!(config.get_password(), Some(password.as_bytes()), "{url}");
            }
            let r = redact(url);
            assert!(!r.contains("s3cret"), "{url} -> {r}");
            assert!(r.contains("***"), "{url} -> {r}");
            let _ = password;
        }
    }

    #[test]
    fn postgres_locations_are_urls_of_either_scheme() {
        assert!(is_postgres("postgres://u@h/db"));
        assert!(is_postgres("PostgreSQL://u@h/db"));
        assert!(!is_postgres("postgres:/u@h/db"));
        assert!(!is_postgres("bank.db"));
        assert!(!is_postgres("./postgres://x"));
        assert!(!is_postgres(""));
    }
}
