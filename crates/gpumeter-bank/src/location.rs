//! Bank locations as text: whether one is a PostgreSQL URL, how messages show it (its
//! password removed), and which locations no backend takes. Choosing and opening the
//! ledger a location names is `backend`'s; the PostgreSQL ledger names itself by [`redact`].

use crate::ledger::BankError;

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
/// part or a `password` parameter); a file path as given. libpq's forms that are not WHATWG
/// URLs (a user without a host, `postgres://billing:pw@/ledger?host=/run/postgresql`; several
/// hosts, `postgres://h1:5432,h2:5432/ledger`) are shown with the password replaced too. A
/// location where the password's end cannot be told (an `@` after the host part) is shown as
/// its scheme only.
pub fn redact(location: &str) -> String {
    if !is_postgres(location) && other_scheme(location).is_none() {
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
        return redact_libpq_url(location).unwrap_or_else(|| {
            let scheme = location.split("://").next().unwrap_or("postgres");
            format!("{scheme}://… (not shown: where its password ends cannot be told)")
        });
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

/// The scheme of a location that is a URL but not a PostgreSQL one (`postgress://…`,
/// `mysql://…`): at least two characters (so that `C://…` stays a path), a letter first, then
/// letters, digits, `+`, `-` or `.`, before `://`.
pub(crate) fn other_scheme(location: &str) -> Option<&str> {
    let (scheme, _) = location.split_once("://")?;
    let mut chars = scheme.chars();
    let url_like = scheme.len() >= 2
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (url_like && !is_postgres(location)).then_some(scheme)
}

/// Refuses a location that can be neither backend's: an empty one (SQLite would open a
/// temporary database), a URL of another scheme (a mistyped `postgres://`, which as an SQLite
/// path would be created or named in messages with its password), or an SQLite URI
/// (`file:…`), whose parameters would bypass what a bank's path is checked for (`mode`,
/// `vfs`, `immutable`) and which names another file than the path the CLI checks its outputs
/// against; a file whose name begins with `file:` is `./file:…`.
pub(crate) fn check_location(location: &str) -> Result<(), BankError> {
    if location.is_empty() {
        return Err(BankError::NotALedger {
            file: "\"\"".to_string(),
            reason: "an empty location: a bank is the path of an SQLite file or a postgres:// URL"
                .to_string(),
        });
    }
    if location.starts_with("file:") {
        return Err(BankError::NotALedger {
            file: location.to_string(),
            reason: "an SQLite URI, which gpumeter does not open: a bank is the path of an \
                     SQLite file (`./file:…` for a file whose name begins with `file:`) or a \
                     postgres:// URL"
                .to_string(),
        });
    }
    if let Some(scheme) = other_scheme(location) {
        return Err(BankError::NotALedger {
            file: redact(location),
            reason: format!(
                "a URL of scheme `{scheme}`, which no bank has: a PostgreSQL bank's URL begins \
                 with postgres:// or postgresql://, anything else is the path of an SQLite file"
            ),
        });
    }
    Ok(())
}

/// [`redact`] for a URL the `url` crate refuses but libpq and the `postgres` crate accept: the
/// authority (up to the first `/`, `?` or `#`) is `[user[:password]@]hosts`, the password
/// running to its last `@`; `None` when an `@` follows the authority, since the password may
/// then hold one of those characters unencoded and its end cannot be told.
fn redact_libpq_url(location: &str) -> Option<String> {
    let (scheme, rest) = location.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if tail.contains('@') {
        return None;
    }
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    let mut shown = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let pairs = url::form_urlencoded::parse(query.as_bytes());
        shown.push('?');
        if pairs.clone().any(|(k, _)| k == "password") {
            let mut out = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in pairs {
                out.append_pair(&k, if k == "password" { "***" } else { &v });
            }
            shown.push_str(&out.finish());
        } else {
            shown.push_str(query);
        }
    }
    Some(shown)
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
    fn libpq_urls_that_are_not_whatwg_urls_show_all_but_the_password() {
        // A user without a host (the socket in `host=`): libpq's and the postgres crate's form.
        assert_eq!(
            redact("postgresql://billing:s3cret@/ledger?host=/run/postgresql"),
            "postgresql://billing:***@/ledger?host=/run/postgresql"
        );
        // Several hosts with ports; a password in a parameter as well.
        assert_eq!(
            redact("postgres://b:s3cret@h1:5432,h2:5433/ledger?password=s3cret&sslmode=require"),
            "postgres://b:***@h1:5432,h2:5433/ledger?password=***&sslmode=require"
        );
        // A password holding an unencoded `@` runs to the last `@` of the authority.
        assert_eq!(
            redact("postgres://b:s3@cret@/ledger"),
            "postgres://b:***@/ledger"
        );
        // An `@` after the host part: the password's end cannot be told.
        for odd in [
            "postgres://b:s3/cret@/ledger",
            "postgres://b:s3?cret@/ledger",
            "postgres://b:s3#cret@/ledger",
        ] {
            let r = redact(odd);
            assert!(!r.contains("s3") && !r.contains("cret"), "{odd} -> {r}");
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
