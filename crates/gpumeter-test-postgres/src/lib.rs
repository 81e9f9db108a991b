//! The PostgreSQL server of gpumeter's tests, and throwaway schemas on it.
//!
//! A test that needs PostgreSQL asks for a fresh schema:
//!
//! ```no_run
//! let Some(schema) = gpumeter_test_postgres::Schema::fresh("ledger_verify") else {
//!     return; // no server: a `skipped:` line went to standard error (a failure under CI=true)
//! };
//! // `schema.url` connects with the schema as its search_path: unqualified tables land there.
//! gpumeter_test_postgres::batch(&schema.url, "CREATE TABLE t (x int)").expect("the test server");
//! // Dropping `schema` drops the schema and everything in it.
//! ```
//!
//! The server is the URL in the environment variable `GPUMETER_TEST_POSTGRES` ([`ENV`]): a
//! role there must be able to create schemas. `scripts/test` starts a throwaway cluster
//! (`scripts/pg-cluster`: trust authentication, a Unix socket in a temporary directory) when the
//! PostgreSQL server binaries are installed and the variable is unset, and sets it. Without it,
//! each test that asks says `skipped:` on standard error, written to [`std::io::stderr`]
//! directly so the test harness does not capture it, and returns; when `CI` is `true` it panics
//! instead, so CI cannot pass without the PostgreSQL tests.
//!
//! Connections use no TLS ([`postgres::NoTls`]): the test server is a Unix socket, or a URL with
//! `sslmode=disable` or the default `prefer`.
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The environment variable that holds the test server's URL, e.g.
/// `postgresql:///postgres?host=/tmp/tmp.x/sock&user=postgres` (what `scripts/pg-cluster start`
/// prints) or `postgres://user:secret@db.example:5432/gpumeter_tests?sslmode=disable`.
pub const ENV: &str = "GPUMETER_TEST_POSTGRES";

/// The test server's URL from [`ENV`], or `None` after writing
/// `skipped: no PostgreSQL server (GPUMETER_TEST_POSTGRES unset); scripts/test starts one` to
/// standard error. An empty value counts as unset.
///
/// # Panics
/// When there is no server and the environment variable `CI` is `true`.
pub fn server() -> Option<String> {
    server_for("")
}

/// [`server`] for the test named `test`: the `skipped:` line names it
/// (`skipped: TEST: no PostgreSQL server …`).
///
/// # Panics
/// When there is no server and the environment variable `CI` is `true`.
pub fn server_for(test: &str) -> Option<String> {
    match std::env::var(ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let who = if test.is_empty() {
                String::new()
            } else {
                format!("{test}: ")
            };
            let reason = format!("no PostgreSQL server ({ENV} unset); scripts/test starts one");
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{who}{reason}: CI=true requires the PostgreSQL tests to run");
            }
            // Past the harness's capture (println!/eprintln! would be captured): the person
            // running the tests sees which ones did not run.
            // One write, so the line stays whole between the harness's own lines.
            let line = format!("skipped: {who}{reason}\n");
            let _ = std::io::stderr().write_all(line.as_bytes());
            None
        }
    }
}

/// A schema of its own on the test server, dropped (with everything in it) when this value is
/// dropped.
#[derive(Debug)]
pub struct Schema {
    /// The server's URL with the schema as the connection's `search_path` (the `options`
    /// parameter, `options=-csearch_path%3D<name>`): tables created without a schema name
    /// land in this schema, and a ledger opened at this URL keeps its tables here.
    pub url: String,
    /// The schema's name: `gmtest_`, the label (lowercase ASCII letters, digits and `_`), the
    /// process id, a per-process counter and the time, at most 63 bytes (PostgreSQL's limit).
    pub name: String,
    /// The server's URL as given, to drop the schema from.
    admin: String,
}

/// Schemas made by this process so far: with the process id, a unique name per schema.
static COUNTER: AtomicU64 = AtomicU64::new(0);

impl Schema {
    /// Creates a uniquely named schema on the test server ([`server_for`] with `label`) and
    /// returns it, or `None` when there is no server (a `skipped:` line on standard error).
    /// `label` (any text; letters and digits are kept) makes the name readable in the
    /// server's catalog, e.g. the test's name.
    ///
    /// # Panics
    /// When there is no server and `CI` is `true`; when the server's URL does not parse or the
    /// schema cannot be created (the server is down, the role may not create schemas): a
    /// configured server that does not work fails the test rather than skipping it.
    pub fn fresh(label: &str) -> Option<Schema> {
        let admin = server_for(label)?;
        let name = schema_name(label);
        let url = with_search_path(&admin, &name).unwrap_or_else(|e| {
            panic!("{ENV}={}: {e}", redacted(&admin));
        });
        if let Err(e) = batch(&admin, &format!("CREATE SCHEMA \"{name}\"")) {
            panic!(
                "creating the test schema {name} on {ENV}={}: {}",
                redacted(&admin),
                with_causes(&e)
            );
        }
        Some(Schema { url, name, admin })
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // A server gone by now leaves the schema behind: its name (label, process, time) says
        // whose it was; nothing to report to a test that has finished.
        let _ = batch(
            &self.admin,
            &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name),
        );
    }
}

/// `gmtest_<label>_<pid>_<counter>_<time>`: ASCII lowercase, digits and `_` only (no quoting
/// needed anywhere), at most 63 bytes, the label shortened to fit.
fn schema_name(label: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // Seconds and microseconds: a process id reused later (a killed run's schema left behind)
    // still gives a new name.
    let tail = format!(
        "_{}_{n}_{}{:06}",
        std::process::id(),
        now.as_secs(),
        now.subsec_micros()
    );
    let room = 63usize.saturating_sub("gmtest_".len() + tail.len());
    let label: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .take(room)
        .collect();
    format!("gmtest_{label}{tail}")
}

/// What the `options` value's bytes other than letters, digits, `-`, `.` and `_` become:
/// percent-encoded, which rust-postgres and libpq both decode.
const OPTION_VALUE: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_');

/// `server` with `-csearch_path=<schema>` in its `options` query parameter: appended after
/// the options the URL already has (the last setting wins on the server), or a new
/// parameter after `?` or `&`. The rest of the URL is kept as written.
///
/// `schema` must be a plain identifier (letters, digits, `_`), as [`Schema`] names are.
///
/// # Errors
/// The URL does not parse, or its `options` value is not UTF-8 once percent-decoded.
pub fn with_search_path(server: &str, schema: &str) -> Result<String, String> {
    let mut url = url::Url::parse(server).map_err(|e| format!("not a URL: {e}"))?;
    let setting = format!("-csearch_path={schema}");
    // The query's pairs as rust-postgres reads them: split at `&`, then at the first `=`,
    // each part percent-decoded (no `+` for space). Pairs other than `options` stay as
    // written.
    let mut pairs = Vec::new();
    let mut merged = false;
    for pair in url
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("options", value)) if !merged => {
                let old = percent_decode_str(value)
                    .decode_utf8()
                    .map_err(|e| format!("its options parameter is not UTF-8: {e}"))?;
                let new = format!("{old} {setting}");
                pairs.push(format!(
                    "options={}",
                    utf8_percent_encode(&new, OPTION_VALUE)
                ));
                merged = true;
            }
            _ => pairs.push(pair.to_owned()),
        }
    }
    if !merged {
        pairs.push(format!(
            "options={}",
            utf8_percent_encode(&setting, OPTION_VALUE)
        ));
    }
    url.set_query(Some(&pairs.join("&")));
    Ok(url.into())
}

/// `url` with its password (if any) replaced by `***`, for messages.
pub fn redacted(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.into()
        }
        Ok(u) => u.into(),
        Err(_) => "(a URL that does not parse)".to_owned(),
    }
}

/// `e` and its causes, `: `-separated: rust-postgres's own message for a connection that
/// fails is only "error connecting to server", the reason (no such socket, authentication)
/// being its source.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// A connection to `url` (any form rust-postgres reads), without TLS.
///
/// # Errors
/// The URL does not parse, or the server refuses or cannot be reached.
pub fn connect(url: &str) -> Result<postgres::Client, postgres::Error> {
    postgres::Client::connect(url, postgres::NoTls)
}

/// Runs one SQL statement on `url` and returns the number of rows it changed (0 for a
/// statement that changes none), e.g. a tamper test's `UPDATE postings SET amount = …`.
///
/// # Errors
/// The connection fails, or the statement does (several statements in `sql` are an error:
/// use [`batch`]).
pub fn execute(url: &str, sql: &str) -> Result<u64, postgres::Error> {
    connect(url)?.execute(sql, &[])
}

/// Runs `sql` on `url`: any number of statements separated by `;`, in one implicit
/// transaction unless `sql` says otherwise.
///
/// # Errors
/// The connection fails, or a statement does (those after it do not run).
pub fn batch(url: &str, sql: &str) -> Result<(), postgres::Error> {
    connect(url)?.batch_execute(sql)
}

/// The single `bigint` value of a query on `url` that returns exactly one row, e.g.
/// `SELECT count(*) FROM transactions`.
///
/// # Errors
/// The connection or the query fails, it returns no row or several, or its first column is
/// not a `bigint` (cast it: `::bigint`) or is NULL.
pub fn query_i64(url: &str, sql: &str) -> Result<i64, postgres::Error> {
    connect(url)?.query_one(sql, &[])?.try_get(0)
}

/// The single `text` value of a query on `url` that returns exactly one row, e.g.
/// `SHOW search_path` or `SELECT amount::text FROM balances WHERE …`.
///
/// # Errors
/// The connection or the query fails, it returns no row or several, or its first column is
/// not text-like (cast it: `::text`) or is NULL.
pub fn query_text(url: &str, sql: &str) -> Result<String, postgres::Error> {
    connect(url)?.query_one(sql, &[])?.try_get(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres::config::Host;
    use postgres::Config;
    use std::path::Path;

    fn parsed(url: &str) -> Config {
        url.parse::<Config>()
            .unwrap_or_else(|e| panic!("rust-postgres does not read {url}: {e}"))
    }

    #[test]
    fn the_url_scripts_pg_cluster_prints_is_a_unix_socket_for_rust_postgres() {
        // The form scripts/pg-cluster prints, with a space in the directory (percent-encoded).
        let c = parsed("postgresql:///postgres?host=/tmp/a%20b/sock&user=postgres");
        assert_eq!(
            c.get_hosts(),
            [Host::Unix(Path::new("/tmp/a b/sock").into())]
        );
        assert_eq!(c.get_user(), Some("postgres"));
        assert_eq!(c.get_dbname(), Some("postgres"));
    }

    #[test]
    fn a_search_path_is_a_new_query_parameter_after_question_mark_or_ampersand() {
        let with = with_search_path("postgres://u@db.example/x", "gmtest_a_1").expect("a URL");
        assert_eq!(
            with,
            "postgres://u@db.example/x?options=-csearch_path%3Dgmtest_a_1"
        );
        assert_eq!(
            parsed(&with).get_options(),
            Some("-csearch_path=gmtest_a_1")
        );

        let server = "postgresql:///postgres?host=/tmp/a%20b/sock&user=postgres";
        let with = with_search_path(server, "s").expect("a URL");
        assert_eq!(with, format!("{server}&options=-csearch_path%3Ds"));
        let c = parsed(&with);
        assert_eq!(c.get_options(), Some("-csearch_path=s"));
        assert_eq!(
            c.get_hosts(),
            [Host::Unix(Path::new("/tmp/a b/sock").into())]
        );
        assert_eq!(c.get_user(), Some("postgres"));
    }

    #[test]
    fn a_search_path_joins_the_options_a_url_already_has() {
        let server = "postgres://u@h/d?options=-c%20statement_timeout%3D5s&sslmode=disable";
        let with = with_search_path(server, "s").expect("a URL");
        let c = parsed(&with);
        assert_eq!(
            c.get_options(),
            Some("-c statement_timeout=5s -csearch_path=s")
        );
        assert_eq!(c.get_ssl_mode(), postgres::config::SslMode::Disable);
        assert!(with.starts_with("postgres://u@h/d?"), "{with}");
    }

    #[test]
    fn a_url_that_does_not_parse_is_an_error_not_a_panic() {
        assert!(with_search_path("host=/tmp user=postgres", "s").is_err());
    }

    #[test]
    fn schema_names_are_plain_identifiers_within_63_bytes_and_unique() {
        let long = "Ledger: verify / ÉTÉ ".repeat(10);
        let a = schema_name(&long);
        let b = schema_name(&long);
        assert_ne!(a, b);
        for n in [&a, &b] {
            assert!(n.len() <= 63, "{n}");
            assert!(n.starts_with("gmtest_ledger__verify"), "{n}");
            assert!(
                n.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'),
                "{n}"
            );
        }
        assert!(schema_name("x").starts_with(&format!("gmtest_x_{}_", std::process::id())));
    }

    #[test]
    fn a_password_does_not_show_in_messages() {
        let r = redacted("postgres://u:secret@h/d");
        assert!(!r.contains("secret"), "{r}");
        assert!(r.contains("u:***@h"), "{r}");
        assert_eq!(redacted("postgres://u@h/d"), "postgres://u@h/d");
    }
}
