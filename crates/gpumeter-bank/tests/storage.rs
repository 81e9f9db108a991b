//! The ledger's storage: the same behaviour from [`MemoryLedger`], [`SqliteLedger`] and the
//! PostgreSQL ledger, files that are not ledgers, tampering caught by `verify`, SIGKILL at
//! random instants, several processes writing at once, and a property test of the ledgers
//! side by side.
//!
//! The tests of both backends have one body taking a [`Backend`] and two `#[test]` wrappers;
//! the PostgreSQL one needs the `postgres` feature (ignored without it) and the test server
//! (`GPUMETER_TEST_POSTGRES`; without it, `skipped:` on standard error, or a failure under
//! `CI=true`).
//!
//! The crash and concurrency tests re-execute this test binary running only
//! [`child_process`], told what to do by the environment variable [`CHILD_ENV`].

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gpumeter_bank::{
    chain_hash, verify, Appended, BankError, Ledger, LedgerTx, MemoryLedger, NewTransaction,
    Posting, SqliteLedger, StoredTransaction, CREDITS,
};
use proptest::prelude::*;
use rust_decimal::Decimal;
use support::{Backend, Place};

/// Set in a re-executed test binary: `crash START LOCATION` (append transactions START,
/// START + 1, … forever) or `concurrent ID GO LOCATION` (GO: the file whose creation starts
/// the children).
const CHILD_ENV: &str = "GPUMETER_BANK_TEST_CHILD";

fn dec(s: &str) -> Decimal {
    Decimal::from_str_exact(s).expect("a decimal literal")
}

fn new_tx(key: &str, kind: &str, postings: &[(&str, &str, &str)]) -> NewTransaction {
    NewTransaction {
        key: key.to_string(),
        kind: kind.to_string(),
        at: "2025-01-01T00:00:00Z".to_string(),
        tenant: Some("alice".to_string()),
        postings: postings
            .iter()
            .map(|(a, c, x)| Posting::new(*a, *c, dec(x)))
            .collect(),
        memo: serde_json::json!({ "key": key, "nested": { "b": [1, 2.5, "x"], "a": null } }),
    }
}

fn append<L: Ledger>(l: &mut L, tx: NewTransaction) -> Result<Appended, BankError> {
    l.atomically(true, |t| t.append(tx.clone()))
}

fn read<L: Ledger, T>(l: &mut L, f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>) -> T {
    l.atomically(false, f).expect("reading the ledger")
}

type Balances = Vec<(String, String, Decimal)>;

fn balances<L: Ledger>(l: &mut L) -> Balances {
    read(l, |t| t.balances(""))
}

fn open(path: &Path) -> SqliteLedger {
    SqliteLedger::open(path).expect("opening the ledger file")
}

// ---------------------------------------------------------------------------------------
// The same behaviour from both ledgers.

fn behaviour<L: Ledger>(mut l: L) {
    // Empty.
    assert_eq!(read(&mut l, |t| t.head()), None);
    assert!(balances(&mut l).is_empty());
    let report = read(&mut l, |t| verify(&*t));
    assert_eq!((report.transactions, report.head), (0, None));

    // A grant.
    let grant = new_tx(
        "grant-1",
        "grant",
        &[
            ("tenant:alice:credits:g-1", CREDITS, "100.50"),
            ("provider:promotions", CREDITS, "-100.50"),
        ],
    );
    let first = match append(&mut l, grant.clone()).expect("appending a grant") {
        Appended::Applied(s) => s,
        other => panic!("a new key must be applied, got {other:?}"),
    };
    assert_eq!((first.seq, first.prev_hash.as_str()), (1, ""));
    assert_eq!(
        first.hash,
        chain_hash(1, &grant, "").expect("hashing the grant")
    );
    assert_eq!(first.tx, grant);
    assert_eq!(read(&mut l, |t| t.find("grant-1")), Some(first.clone()));
    assert_eq!(read(&mut l, |t| t.find("nope")), None);
    assert_eq!(
        read(&mut l, |t| t.balance("tenant:alice:credits:g-1", CREDITS)),
        dec("100.50")
    );
    assert_eq!(
        read(&mut l, |t| t.balance("tenant:alice:credits:g-1", "USD")),
        Decimal::ZERO
    );

    // The same key again, even with other postings: nothing changes.
    let before = balances(&mut l);
    let mut again = grant.clone();
    again.postings[0].amount = dec("7");
    again.postings[1].amount = dec("-7");
    assert_eq!(
        append(&mut l, again).expect("appending a known key"),
        Appended::AlreadyApplied(first.clone())
    );
    assert_eq!(balances(&mut l), before);

    // A second transaction chains to the first; tenant None and a multi-commodity memo.
    let mut fin = new_tx(
        "fin-1",
        "finalize",
        &[
            ("tenant:alice:credits:g-1", CREDITS, "-100.50"),
            ("provider:revenue", CREDITS, "60.25"),
            ("provider:breakage", CREDITS, "40.25"),
            ("tenant:alice:receivable", "USD", "12.30"),
            ("provider:revenue", "USD", "-12.30"),
            ("tenant:alice:fragments:h100:sm_ns", "sm_ns", "1234567"),
            ("provider:metered", "sm_ns", "-1234567"),
        ],
    );
    fin.tenant = None;
    let second = append(&mut l, fin.clone()).expect("appending a finalization");
    let second = second.stored().clone();
    assert_eq!((second.seq, &second.prev_hash), (2, &first.hash));
    assert_eq!(read(&mut l, |t| t.head()), Some(second.hash.clone()));
    // A balance back to zero is not listed, and reads as zero.
    assert_eq!(
        read(&mut l, |t| t.balance("tenant:alice:credits:g-1", CREDITS)),
        Decimal::ZERO
    );
    let want: Balances = vec![
        ("provider:breakage".into(), CREDITS.into(), dec("40.25")),
        ("provider:metered".into(), "sm_ns".into(), dec("-1234567")),
        ("provider:promotions".into(), CREDITS.into(), dec("-100.50")),
        ("provider:revenue".into(), "USD".into(), dec("-12.30")),
        ("provider:revenue".into(), CREDITS.into(), dec("60.25")),
        (
            "tenant:alice:fragments:h100:sm_ns".into(),
            "sm_ns".into(),
            dec("1234567"),
        ),
        ("tenant:alice:receivable".into(), "USD".into(), dec("12.30")),
    ];
    assert_eq!(balances(&mut l), want);
    assert_eq!(
        read(&mut l, |t| t.balances("tenant:alice:")),
        want[5..].to_vec()
    );
    assert_eq!(
        read(&mut l, |t| t.transactions(Some("finalize"))),
        vec![second.clone()]
    );
    assert_eq!(
        read(&mut l, |t| t.transactions(None)),
        vec![first.clone(), second.clone()]
    );

    // commit = false: the append is seen inside, gone afterwards.
    let preview = new_tx(
        "preview",
        "grant",
        &[("a", CREDITS, "1"), ("b", CREDITS, "-1")],
    );
    let inside = l
        .atomically(false, |t| {
            let a = t.append(preview.clone())?;
            Ok((a, t.find("preview")?, t.balance("a", CREDITS)?))
        })
        .expect("a preview");
    assert!(matches!(inside.0, Appended::Applied(ref s) if s.seq == 3));
    assert!(inside.1.is_some());
    assert_eq!(inside.2, dec("1"));
    assert_eq!(read(&mut l, |t| t.find("preview")), None);
    assert_eq!(read(&mut l, |t| t.head()), Some(second.hash.clone()));
    assert_eq!(balances(&mut l), want);

    // `f` fails after appending: rolled back, its error returned.
    let err = l
        .atomically(true, |t| {
            t.append(preview.clone())?;
            Err::<(), _>(BankError::Refused("stop".into()))
        })
        .expect_err("the closure's error");
    assert!(
        matches!(err, BankError::Refused(ref m) if m == "stop"),
        "{err}"
    );
    assert_eq!(read(&mut l, |t| t.find("preview")), None);
    assert_eq!(balances(&mut l), want);

    // Unbalanced: refused, nothing stored.
    let bad = new_tx(
        "bad",
        "grant",
        &[
            ("a", CREDITS, "1"),
            ("b", CREDITS, "-1"),
            ("a", "USD", "0.01"),
        ],
    );
    match append(&mut l, bad) {
        Err(BankError::Unbalanced {
            key,
            commodity,
            sum,
        }) => assert_eq!(
            (key.as_str(), commodity.as_str(), sum),
            ("bad", "USD", dec("0.01"))
        ),
        other => panic!("an unbalanced transaction must be refused, got {other:?}"),
    }
    assert_eq!(read(&mut l, |t| t.find("bad")), None);
    assert_eq!(balances(&mut l), want);

    // Several appends in one transaction chain to each other.
    let (a, b) = l
        .atomically(true, |t| {
            let a = t.append(preview.clone())?.stored().clone();
            let mut p2 = preview.clone();
            p2.key = "preview-2".into();
            let b = t.append(p2)?.stored().clone();
            Ok((a, b))
        })
        .expect("two appends at once");
    assert_eq!((a.seq, b.seq), (3, 4));
    assert_eq!(b.prev_hash, a.hash);

    let report = read(&mut l, |t| verify(&*t));
    assert_eq!(report.transactions, 4);
    assert_eq!(report.postings, 2 + 7 + 2 + 2);
    assert_eq!(report.accounts, 9);
    assert_eq!(report.head, Some(b.hash));
}

#[test]
fn memory_ledger_behaviour() {
    behaviour(MemoryLedger::new());
}

/// [`behaviour`] on a new ledger of `backend`, opened by its location.
fn ledger_behaviour(backend: Backend) {
    let Some(place) = Place::new(backend, "behaviour") else {
        return;
    };
    behaviour(place.open());
}

#[test]
fn sqlite_ledger_behaviour() {
    ledger_behaviour(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn postgres_ledger_behaviour() {
    ledger_behaviour(Backend::Postgres);
}

// ---------------------------------------------------------------------------------------
// Files.

#[test]
fn a_reopened_file_holds_everything() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("bank.sqlite");
    let (txs, bals) = {
        let mut l = open(&path);
        for i in 0..5 {
            append(&mut l, crash_tx(i)).expect("appending");
        }
        (read(&mut l, |t| t.transactions(None)), balances(&mut l))
    };
    let mut l = open(&path);
    assert_eq!(read(&mut l, |t| t.transactions(None)), txs);
    assert_eq!(balances(&mut l), bals);
    let report = read(&mut l, |t| verify(&*t));
    assert_eq!(report.transactions, 5);
    assert_eq!(report.head, txs.last().map(|t| t.hash.clone()));
    // An empty file is a new ledger.
    let empty = dir.path().join("empty.sqlite");
    std::fs::write(&empty, b"").expect("writing an empty file");
    let mut l = open(&empty);
    assert_eq!(read(&mut l, |t| t.head()), None);
}

fn expect_not_a_ledger(path: &Path, reason_has: &str) {
    let before = std::fs::read(path).expect("reading the file");
    match SqliteLedger::open(path) {
        Err(e @ BankError::NotALedger { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()) && msg.contains(reason_has),
                "{msg}"
            );
        }
        other => panic!("{} must be refused, got {other:?}", path.display()),
    }
    // Refused before anything was written to it.
    assert_eq!(
        std::fs::read(path).expect("reading the file"),
        before,
        "{} changed",
        path.display()
    );
}

#[test]
fn files_that_are_not_ledgers_are_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database\n").expect("writing a text file");
    expect_not_a_ledger(&text, "not an SQLite database");

    let short = dir.path().join("short");
    std::fs::write(&short, "SQLite").expect("writing a short file");
    expect_not_a_ledger(&short, "not an SQLite database");

    let other = dir.path().join("other.sqlite");
    {
        let c = rusqlite::Connection::open(&other).expect("creating another database");
        c.execute_batch("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
            .expect("creating a table");
    }
    expect_not_a_ledger(&other, "without a `meta` table");

    let other_meta = dir.path().join("other-meta.sqlite");
    {
        let c = rusqlite::Connection::open(&other_meta).expect("creating another database");
        c.execute_batch(
            "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT);
             INSERT INTO meta VALUES ('application', 'photo-album'), ('schema_version', '1');",
        )
        .expect("creating a table");
    }
    expect_not_a_ledger(&other_meta, "`photo-album`");
}

/// A ledger whose `schema_version` is above this gpumeter's is refused by `open` and by
/// `open_existing`, naming the location, and left as it was.
fn newer_schema_is_refused(backend: Backend) {
    let Some(place) = Place::new(backend, "newer_schema") else {
        return;
    };
    append(&mut place.open(), crash_tx(0)).expect("appending");
    let newer = gpumeter_bank::sqlite::SCHEMA_VERSION + 1;
    let changed = place.execute(&format!(
        "UPDATE meta SET value = '{newer}' WHERE name = 'schema_version'"
    ));
    assert_eq!(changed, 1, "raising the schema version");
    if backend == Backend::Sqlite {
        // Not a byte of the file written.
        expect_not_a_ledger(Path::new(&place.location), "newer than this gpumeter knows");
    }
    for (how, opened) in [
        ("open", gpumeter_bank::open(&place.location)),
        (
            "open_existing",
            gpumeter_bank::open_existing(&place.location),
        ),
    ] {
        match opened {
            Err(e @ BankError::NotALedger { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("newer than this gpumeter knows")
                        && msg.contains(&format!("schema version {newer}"))
                        && msg.contains(&gpumeter_bank::redact(&place.location)),
                    "{how}: {msg}"
                );
            }
            other => panic!("{how}: a newer schema must be refused, got {other:?}"),
        }
    }
    // Left as it was: not migrated down, nothing appended or removed.
    assert_eq!(
        place.count(&format!(
            "meta WHERE name = 'schema_version' AND value = '{newer}'"
        )),
        1
    );
    assert_eq!(place.count("transactions"), 1);
}

#[test]
fn a_ledger_of_a_newer_schema_is_refused() {
    newer_schema_is_refused(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_postgres_ledger_of_a_newer_schema_is_refused() {
    newer_schema_is_refused(Backend::Postgres);
}

/// Eight workers opening a new location at once all open the one ledger the first of them
/// creates. On PostgreSQL also when the server's default isolation is SERIALIZABLE or
/// REPEATABLE READ (a `default_transaction_isolation` some operators set): a migration that
/// read the schema on a snapshot taken before it waited for the migration lock would not see
/// the tables its predecessor created, and fail creating them again.
fn first_opens_at_once(backend: Backend) {
    let settings: &[Option<&str>] = match backend {
        Backend::Sqlite => &[None],
        Backend::Postgres => &[None, Some("serializable"), Some("repeatable%5C%20read")],
    };
    for isolation in settings {
        let Some(place) = Place::new(backend, "first_opens") else {
            return;
        };
        let location = match isolation {
            Some(level) => place.with_settings(&[("default_transaction_isolation", level)]),
            None => place.location.clone(),
        };
        let go = std::sync::Arc::new(std::sync::Barrier::new(8));
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let (location, go) = (location.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    let mut l = gpumeter_bank::open(&location)?;
                    append(&mut l, crash_tx(i)).map(|_| ())
                })
            })
            .collect();
        for w in workers {
            if let Err(e) = w.join().expect("a worker thread") {
                panic!("{backend:?}, default isolation {isolation:?}: a first open failed: {e}");
            }
        }
        assert_eq!(place.count("transactions"), 8, "{isolation:?}");
        assert_eq!(place.count("meta WHERE name = 'schema_version'"), 1);
    }
}

#[test]
fn first_opens_at_once_share_one_ledger() {
    first_opens_at_once(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn first_opens_at_once_share_one_postgres_ledger() {
    first_opens_at_once(Backend::Postgres);
}

/// Sums that a decimal cannot hold exactly are refused, never rounded: a transaction whose
/// postings sum to 0.00000001 is not balanced because adding them one by one rounds the
/// first sum (rust_decimal rounds what exceeds its 96-bit mantissa), and a balance that would
/// need more digits than a decimal has is refused rather than rounded (SQLite and the memory
/// ledger added with rounding while PostgreSQL's `numeric` stayed exact).
fn inexact_sums_are_refused<L: Ledger>(mut l: L, what: &str) {
    let big = "79228162514264337593543950335";
    let unbalanced = new_tx(
        "rounded-to-zero",
        "grant",
        &[
            ("a", "credits", big),
            ("b", "credits", "0.00000001"),
            ("c", "credits", &format!("-{big}")),
        ],
    );
    let got = append(&mut l, unbalanced);
    assert!(
        matches!(
            got,
            Err(BankError::Unbalanced { .. } | BankError::Refused(_))
        ),
        "{what}: postings summing to 0.00000001 must be refused, got {got:?}"
    );
    append(
        &mut l,
        new_tx(
            "large",
            "grant",
            &[
                ("a", "credits", "7922816251426433759354395033.5"),
                ("b", "credits", "-7922816251426433759354395033.5"),
            ],
        ),
    )
    .unwrap_or_else(|e| panic!("{what}: a large balanced transaction: {e}"));
    let got = append(
        &mut l,
        new_tx(
            "finer",
            "grant",
            &[("a", "credits", "0.01"), ("b", "credits", "-0.01")],
        ),
    );
    assert!(
        matches!(got, Err(BankError::Refused(_))),
        "{what}: a balance of 7922816251426433759354395033.51 is not a decimal and must be \
         refused, not rounded, got {got:?}"
    );
    let b = balances(&mut l);
    assert_eq!(
        b.iter()
            .map(|(a, _, x)| (a.as_str(), x.to_string()))
            .collect::<Vec<_>>(),
        [
            ("a", "7922816251426433759354395033.5".to_string()),
            ("b", "-7922816251426433759354395033.5".to_string())
        ],
        "{what}"
    );
    assert_eq!(read(&mut l, |t| verify(t)).transactions, 1, "{what}");
}

#[test]
fn inexact_sums_are_refused_by_every_ledger() {
    inexact_sums_are_refused(MemoryLedger::new(), "memory");
    let place = Place::new(Backend::Sqlite, "inexact_sums").expect("a temporary directory");
    inexact_sums_are_refused(place.open(), "sqlite");
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn inexact_sums_are_refused_by_postgres() {
    let Some(place) = Place::new(Backend::Postgres, "inexact_sums") else {
        return;
    };
    inexact_sums_are_refused(place.open(), "postgres");
}

/// A role that may use the ledger's schema but was not granted its tables (a billing worker's
/// role set up by hand, a grant forgotten) is told so: the tables are there, it may not read
/// them. It is not told that there is no bank, nor does `open` try to create a second one.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_role_without_privileges_on_the_ledger_is_told_so() {
    let Some(place) = Place::new(Backend::Postgres, "no_privileges") else {
        return;
    };
    append(&mut place.open(), crash_tx(0)).expect("appending");
    let schema = place
        .location
        .rsplit("search_path%3D")
        .next()
        .expect("the schema's name")
        .to_string();
    let role = format!("{schema}_r");
    place.execute(&format!("CREATE ROLE \"{role}\" LOGIN"));
    place.execute(&format!("GRANT USAGE ON SCHEMA \"{schema}\" TO \"{role}\""));
    let as_role = format!("{}&user={role}", place.location);
    for (how, opened) in [
        ("open_existing", gpumeter_bank::open_existing(&as_role)),
        ("open", gpumeter_bank::open(&as_role)),
    ] {
        let msg = match opened {
            Ok(_) => panic!("{how}: opened a ledger it may not read"),
            Err(e) => e.to_string(),
        };
        assert!(
            msg.contains("permission denied") && !msg.contains("not a gpumeter ledger"),
            "{how}: {msg}"
        );
        assert!(!msg.contains("there is no bank"), "{how}: {msg}");
    }
    assert_eq!(place.count("transactions"), 1);
    place.execute(&format!("DROP OWNED BY \"{role}\""));
    place.execute(&format!("DROP ROLE \"{role}\""));
}

// ---------------------------------------------------------------------------------------
// Tampering.

/// Runs `sql` on the file with the `sqlite3` command-line tool, as a person editing the bank
/// would. Under `CI=true` a missing tool fails; elsewhere the edit goes through rusqlite,
/// with a notice.
fn edit_with_sqlite3(path: &Path, sql: &str) {
    match Command::new("sqlite3").arg(path).arg(sql).output() {
        Ok(out) => assert!(
            out.status.success(),
            "sqlite3 {} {sql:?}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true: the `sqlite3` command-line tool is missing (.ci/run installs Debian's \
                 sqlite3 package); the tamper test must edit the file with it"
            );
            {
                // Straight to stderr, past the test harness's capture: a skip is never silent.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: the `sqlite3` command-line tool is not installed; the tamper test \
                     edits the ledger through rusqlite instead (apt-get install sqlite3; CI=true \
                     makes this a failure)"
                );
            }
            rusqlite::Connection::open(path)
                .and_then(|c| c.execute_batch(sql))
                .expect("editing the ledger through rusqlite");
        }
        Err(e) => panic!("running sqlite3: {e}"),
    }
}

/// A ledger of six transactions on `backend`, `edit` run on its database behind the bank's
/// back (with the `sqlite3` tool on SQLite, as a person editing the file would; through a
/// client connection on PostgreSQL), and the error `verify` gives then, with the fifth
/// transaction as it was before the edit. `None` without a PostgreSQL server.
fn tampered(backend: Backend, edit: &str) -> Option<(StoredTransaction, BankError)> {
    let place = Place::new(backend, "tamper")?;
    let victim = {
        let mut l = place.open();
        for i in 0..6 {
            append(&mut l, crash_tx(i)).expect("appending");
        }
        read(&mut l, |t| verify(&*t));
        read(&mut l, |t| t.find(&crash_key(4))).expect("transaction 5")
    };
    match backend {
        Backend::Sqlite => edit_with_sqlite3(Path::new(&place.location), edit),
        Backend::Postgres => assert_eq!(place.execute(edit), 1, "{edit}: one row changed"),
    }
    let mut l = place.open();
    let err = l
        .atomically(false, |t| verify(&*t))
        .expect_err("verify must catch the edit");
    Some((victim, err))
}

/// Another amount, the same amount at another scale, a moved posting, another memo: each
/// edit of transaction 5 makes `verify` fail naming it.
fn edited_postings_fail_verify(backend: Backend) {
    let rescaled = match backend {
        Backend::Sqlite => "UPDATE postings SET amount = amount || '.0' WHERE seq = 5 AND idx = 0",
        // `numeric` keeps the scale it is given: 12.34 becomes 12.340.
        Backend::Postgres => {
            "UPDATE postings SET amount = round(amount, scale(amount) + 1) \
             WHERE seq = 5 AND idx = 0"
        }
    };
    for edit in [
        "UPDATE postings SET amount = '1000000' WHERE seq = 5 AND idx = 2",
        rescaled,
        "UPDATE postings SET account = 'provider:elsewhere' WHERE seq = 5 AND idx = 1",
        "UPDATE transactions SET memo = '{}' WHERE seq = 5",
    ] {
        let Some((victim, err)) = tampered(backend, edit) else {
            return;
        };
        match err {
            BankError::Corrupt { seq, ref key, .. } => {
                assert_eq!((seq, key), (5, &victim.tx.key), "{edit}: {err}");
            }
            other => panic!("{edit}: expected Corrupt, got {other:?}"),
        }
    }
}

#[test]
fn an_edited_posting_fails_verify_naming_its_transaction() {
    edited_postings_fail_verify(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn an_edited_posting_on_postgres_fails_verify_naming_its_transaction() {
    edited_postings_fail_verify(Backend::Postgres);
}

/// A balance edited to another amount makes `verify` fail naming the last transaction that
/// posted to it.
fn edited_balance_fails_verify(backend: Backend) {
    let Some((_, err)) = tampered(
        backend,
        "UPDATE balances SET amount = '1' WHERE account = 'tenant:t1:receivable' \
         AND commodity = 'USD'",
    ) else {
        return;
    };
    // crash_tx(4) is the last to post to t1's receivable.
    match err {
        BankError::Corrupt { seq, ref key, .. } => {
            assert_eq!((seq, key.as_str()), (5, crash_key(4).as_str()), "{err}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn an_edited_balance_fails_verify_naming_its_last_poster() {
    edited_balance_fails_verify(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn an_edited_balance_on_postgres_fails_verify_naming_its_last_poster() {
    edited_balance_fails_verify(Backend::Postgres);
}

// ---------------------------------------------------------------------------------------
// Children: the crash and concurrency tests re-execute this binary running only this test.

/// Does nothing in a normal run. With [`CHILD_ENV`] set, acts as a child process of the crash
/// test (appends forever) or of the concurrency test (appends its keys and the shared ones,
/// printing what happened to each).
#[test]
fn child_process() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    // The location comes last: a file path may hold spaces.
    match role.splitn(3, ' ').collect::<Vec<_>>().as_slice() {
        ["crash", start, location] => crash_child(start.parse().expect("a start"), location),
        ["concurrent", rest @ ..] => match role.splitn(4, ' ').collect::<Vec<_>>().as_slice() {
            [_, id, go, location] => {
                concurrent_child(id.parse().expect("a child id"), Path::new(go), location)
            }
            _ => panic!("{CHILD_ENV}={role:?}: concurrent ID GO LOCATION ({rest:?})"),
        },
        _ => panic!("{CHILD_ENV}={role:?}: unknown role"),
    }
}

fn spawn_child(role: &str, stdout: Stdio) -> Child {
    let exe = std::env::current_exe().expect("the test binary");
    Command::new(exe)
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, role)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting a child process")
}

// ---------------------------------------------------------------------------------------
// Crash.

fn crash_key(i: u64) -> String {
    format!("crash-{i:06}")
}

/// The `i`-th transaction of the crash test: every third a grant, the others
/// finalization-like (16 postings over 4 commodities). A function of `i` only.
fn crash_tx(i: u64) -> NewTransaction {
    let tenant = format!("t{}", i % 3);
    let a = |name: &str| format!("tenant:{tenant}:{name}");
    let x = Decimal::new(i64::try_from(i % 997).unwrap_or(0) * 7 + 3, 2);
    let postings = if i.is_multiple_of(3) {
        vec![
            Posting::new(a(&format!("credits:g-{i}")), CREDITS, x),
            Posting::new("provider:promotions", CREDITS, -x),
        ]
    } else {
        let mut p = vec![
            Posting::new(a("receivable"), "USD", x + dec("1.01")),
            Posting::new("provider:revenue", "USD", -x),
            Posting::new("provider:revenue", "USD", dec("-1.01")),
            Posting::new(a(&format!("credits:g-{}", i - i % 3)), CREDITS, -dec("0.5")),
            Posting::new("provider:revenue", CREDITS, dec("0.5")),
        ];
        for (k, unit) in ["sm_ns", "byte_ns"].iter().enumerate() {
            let q = Decimal::from(i * 1_000_003 + k as u64);
            p.push(Posting::new(a(&format!("fragments:h100:{unit}")), *unit, q));
            p.push(Posting::new("provider:metered", *unit, -q));
            p.push(Posting::new(
                a(&format!("fragments:a100:{unit}")),
                *unit,
                dec("-1"),
            ));
            p.push(Posting::new("provider:metered", *unit, dec("0.5")));
            p.push(Posting::new("provider:metered", *unit, dec("0.5")));
        }
        p.push(Posting::new(a("receivable"), "USD", dec("0")));
        p
    };
    NewTransaction {
        key: crash_key(i),
        kind: if i.is_multiple_of(3) {
            "grant"
        } else {
            "finalize"
        }
        .to_string(),
        at: format!("2025-01-01T00:00:{:02}Z", i % 60),
        tenant: Some(tenant),
        postings,
        memo: serde_json::json!({ "i": i, "lines": [x.to_string()] }),
    }
}

/// What the crash child prints once it has opened the file and starts appending.
const READY: &str = "gpumeter-bank-crash-child-ready";

fn crash_child(start: u64, location: &str) {
    let mut l = gpumeter_bank::open(location).expect("opening the ledger in the crash child");
    // On a line of its own: libtest has written `test child_process ... ` without a newline.
    println!("\n{READY}");
    for i in start.. {
        append(&mut l, crash_tx(i)).expect("appending in the crash child");
    }
}

/// A small deterministic PRNG (SplitMix64), so a failing run can be repeated with its seed.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn balance_map(b: Balances) -> BTreeMap<(String, String), Decimal> {
    b.into_iter().map(|(a, c, x)| ((a, c), x)).collect()
}

fn plus(
    mut m: BTreeMap<(String, String), Decimal>,
    tx: &NewTransaction,
) -> BTreeMap<(String, String), Decimal> {
    for p in &tx.postings {
        *m.entry((p.account.clone(), p.commodity.clone()))
            .or_insert(Decimal::ZERO) += p.amount;
    }
    m.retain(|_, v| !v.is_zero());
    m
}

/// After a kill: the file opens, verify passes, every stored transaction is exactly what the
/// child meant to append (none half-applied), and appending the next one (the one the kill
/// may have interrupted) applies it exactly once. Returns the number of transactions.
fn check_after_kill(place: &Place) -> u64 {
    let mut l = place.open();
    let report = read(&mut l, |t| verify(&*t));
    let txs = read(&mut l, |t| t.transactions(None));
    for (i, t) in (0u64..).zip(&txs) {
        assert_eq!(
            t.tx,
            crash_tx(i),
            "transaction {} differs from what was appended",
            t.seq
        );
    }
    // Recomputed from the postings, independently of verify.
    let sums = txs.iter().fold(BTreeMap::new(), |m, t| plus(m, &t.tx));
    assert_eq!(balance_map(balances(&mut l)), sums);
    let n = txs.len() as u64;
    assert_eq!(report.transactions, n);
    if let Some(last) = txs.last() {
        // The last one the child committed: applied once already.
        assert_eq!(
            append(&mut l, crash_tx(n - 1)).expect("retrying the last"),
            Appended::AlreadyApplied(last.clone())
        );
    }
    // The one the kill may have interrupted: applied now, once.
    let next = crash_tx(n);
    assert!(matches!(
        append(&mut l, next.clone()).expect("retrying the interrupted append"),
        Appended::Applied(_)
    ));
    assert!(matches!(
        append(&mut l, next.clone()).expect("retrying it again"),
        Appended::AlreadyApplied(_)
    ));
    drop(l);
    // Counted by another client, under the ledger's unique key.
    let with_key = place.count(&format!("transactions WHERE key = '{}'", next.key));
    assert_eq!(with_key, 1);
    let mut l = place.open();
    assert_eq!(balance_map(balances(&mut l)), plus(sums, &next));
    n + 1
}

/// SIGKILL at random instants of a child appending to a ledger of `backend`, [`KILLS`] times:
/// after each, [`check_after_kill`].
fn sigkill_at_random_instants(backend: Backend) {
    let seed = std::env::var("GPUMETER_BANK_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6770_756d_6574_6572_u64);
    eprintln!("crash test seed {seed} (GPUMETER_BANK_CRASH_SEED repeats a run)");
    let mut rng = SplitMix(seed);
    let Some(place) = Place::new(backend, "sigkill") else {
        return;
    };
    let location = place.child_location("crash");
    let t0 = Instant::now();
    let mut during_writes = 0;
    let mut count = 0;
    for round in 0..KILLS {
        let mut child = spawn_child(&format!("crash {count} {location}"), Stdio::piped());
        // Most kills land while the child appends (after it says `ready`); every fourth
        // lands early, during start-up, opening or creating the file.
        let delay = if round % 4 == 3 {
            rng.below(15)
        } else {
            let stdout = child.stdout.take().expect("the child's stdout");
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines.any(|l| l.is_ok_and(|l| l.contains(READY)));
            assert!(ready, "the crash child ended before it was ready");
            child.stdout = None;
            during_writes += 1;
            // Keep the pipe open: the child never writes again.
            std::mem::forget(lines);
            2 + rng.below(99)
        };
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().expect("SIGKILL to the child");
        let status = child.wait().expect("waiting for the child");
        if status.signal() != Some(9) {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).ok();
            }
            panic!("round {round}: the child ended by itself ({status}): {err}");
        }
        place.wait_for_child("crash");
        let n = check_after_kill(&place);
        assert!(n > count, "round {round}: nothing appended");
        count = n;
    }
    let report = read(&mut place.open(), |t| verify(&*t));
    assert_eq!(report.transactions, count);
    eprintln!(
        "{backend:?}: {KILLS} kills ({during_writes} while appending), {count} transactions, \
         {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(during_writes >= 40);
    assert!(
        count > u64::from(KILLS) * 2,
        "the child appended too little ({count}) for the kills to land during writes"
    );
}

/// How many times the crash test kills its child.
const KILLS: u32 = 60;

#[test]
fn sigkill_at_random_instants_leaves_a_valid_ledger() {
    sigkill_at_random_instants(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn sigkill_at_random_instants_leaves_a_valid_postgres_ledger() {
    sigkill_at_random_instants(Backend::Postgres);
}

// ---------------------------------------------------------------------------------------
// Concurrency.

const CHILDREN: u32 = 4;
const PER_CHILD: u32 = 30;

fn shared_tx(j: u32) -> NewTransaction {
    new_tx(
        &format!("shared-{j:03}"),
        "finalize",
        &[
            ("tenant:shared:receivable", "USD", "1.25"),
            ("provider:revenue", "USD", "-1.25"),
            ("tenant:shared:fragments:h100:sm_ns", "sm_ns", "7"),
            ("provider:metered", "sm_ns", "-7"),
        ],
    )
}

fn own_tx(id: u32, j: u32) -> NewTransaction {
    let account = format!("tenant:c{id}:credits:g-{j}");
    new_tx(
        &format!("own-{id}-{j:03}"),
        "grant",
        &[
            (account.as_str(), CREDITS, "2.5"),
            ("provider:credit_sales", CREDITS, "-2.5"),
        ],
    )
}

fn concurrent_child(id: u32, go: &Path, location: &str) {
    // Every child opens (and may create) the ledger at the same time: once the parent has
    // started them all and created `go`.
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut l = gpumeter_bank::open(location).expect("opening the ledger in a concurrent child");
    // Its lines start on a line of their own: libtest wrote `test child_process ... `.
    println!();
    for j in 0..PER_CHILD {
        // Children walk the shared keys from different starting points.
        let shared = shared_tx((j + id * 5) % PER_CHILD);
        for tx in [shared, own_tx(id, j)] {
            let key = tx.key.clone();
            match append(&mut l, tx).expect("appending in a concurrent child") {
                Appended::Applied(_) => println!("applied {key}"),
                Appended::AlreadyApplied(_) => println!("already {key}"),
            }
            // Between two appends a finalizer rates usage: let the others take the lock.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// [`CHILDREN`] processes append their own keys and the same shared ones to one ledger of
/// `backend` at once: each key applied once, the chain verifies, the balances are the sums.
fn concurrent_processes(backend: Backend) {
    let Some(place) = Place::new(backend, "concurrent") else {
        return;
    };
    let go = place.dir().join("go");
    let t0 = Instant::now();
    let children: Vec<Child> = (0..CHILDREN)
        .map(|id| {
            spawn_child(
                &format!("concurrent {id} {} {}", go.display(), place.location),
                Stdio::piped(),
            )
        })
        .collect();
    std::fs::write(&go, b"").expect("starting the children");
    let mut applied: BTreeMap<String, u32> = BTreeMap::new();
    let mut shared_by_child = Vec::new();
    let mut seen = 0;
    for child in children {
        let out = child.wait_with_output().expect("waiting for a child");
        assert!(
            out.status.success(),
            "a concurrent child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        shared_by_child.push(stdout.matches("applied shared-").count());
        for line in stdout.lines() {
            if let Some(key) = line.strip_prefix("applied ") {
                *applied.entry(key.to_string()).or_insert(0) += 1;
                seen += 1;
            } else if line.starts_with("already ") {
                seen += 1;
            }
        }
    }
    assert_eq!(
        seen,
        CHILDREN * PER_CHILD * 2,
        "every child reports every append"
    );
    let mut expected: Vec<NewTransaction> = (0..PER_CHILD).map(shared_tx).collect();
    for id in 0..CHILDREN {
        expected.extend((0..PER_CHILD).map(|j| own_tx(id, j)));
    }
    for tx in &expected {
        assert_eq!(applied.get(&tx.key), Some(&1), "{} applied once", tx.key);
    }
    assert_eq!(applied.len(), expected.len());

    let mut l = place.open();
    let report = read(&mut l, |t| verify(&*t));
    assert_eq!(report.transactions, expected.len() as u64);
    let stored = read(&mut l, |t| t.transactions(None));
    let mut keys: Vec<&str> = stored.iter().map(|t| t.tx.key.as_str()).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), expected.len());
    let sums = expected.iter().fold(BTreeMap::new(), plus);
    assert_eq!(balance_map(balances(&mut l)), sums);
    eprintln!(
        "{backend:?}: {CHILDREN} processes, {seen} appends, shared keys applied per process \
         {shared_by_child:?}, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}

#[test]
fn concurrent_processes_apply_each_key_once() {
    concurrent_processes(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn concurrent_processes_apply_each_key_once_on_postgres() {
    concurrent_processes(Backend::Postgres);
}

// ---------------------------------------------------------------------------------------
// Both ledgers side by side.

/// Accounts of the steps; an upper-case and a non-ASCII name among them, since every ledger
/// must list balances in the same (bytewise) order.
const ACCOUNTS: [&str; 7] = [
    "tenant:a:credits:g-1",
    "tenant:a:receivable",
    "tenant:b:fragments:h100:sm_ns",
    "provider:revenue",
    "provider:promotions",
    "tenant:Zoë:receivable",
    "tenant:é:receivable",
];
const COMMODITIES: [&str; 3] = ["USD", CREDITS, "sm_ns"];

#[derive(Debug, Clone)]
struct Step {
    key: u8,
    commit: bool,
    balanced: bool,
    postings: Vec<(usize, usize, i64, u32)>,
    balancer: usize,
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..12,
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.9),
        prop::collection::vec(
            (
                0..ACCOUNTS.len(),
                0..COMMODITIES.len(),
                -100_000i64..100_000,
                0u32..4,
            ),
            1..7,
        ),
        0..ACCOUNTS.len(),
    )
        .prop_map(|(key, commit, balanced, postings, balancer)| Step {
            key,
            commit,
            balanced,
            postings,
            balancer,
        })
}

fn step_tx(s: &Step) -> NewTransaction {
    let mut postings: Vec<Posting> = s
        .postings
        .iter()
        .map(|&(a, c, v, scale)| Posting::new(ACCOUNTS[a], COMMODITIES[c], Decimal::new(v, scale)))
        .collect();
    if s.balanced {
        let mut sums: BTreeMap<&str, Decimal> = BTreeMap::new();
        for p in &postings {
            *sums
                .entry(
                    COMMODITIES
                        .iter()
                        .find(|c| **c == p.commodity)
                        .copied()
                        .unwrap_or(""),
                )
                .or_insert(Decimal::ZERO) += p.amount;
        }
        for (c, sum) in sums {
            if !sum.is_zero() {
                postings.push(Posting::new(ACCOUNTS[s.balancer], c, -sum));
            }
        }
    }
    NewTransaction {
        key: format!("k{}", s.key),
        kind: if s.key.is_multiple_of(2) {
            "grant"
        } else {
            "finalize"
        }
        .to_string(),
        at: "2025-02-01T00:00:00Z".to_string(),
        tenant: (!s.key.is_multiple_of(3)).then(|| format!("tenant-{}", s.key % 3)),
        postings,
        memo: serde_json::json!({ "n": s.postings.len(), "key": s.key }),
    }
}

/// One case: `steps` applied to a memory ledger and to a new ledger at `place` give the
/// same outcomes, balances, head, transactions and verify report.
fn ledgers_agree(place: &Place, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut mem = MemoryLedger::new();
    let mut other = place.open();
    let backend = place.backend;
    for s in steps {
        let tx = step_tx(s);
        let a = mem.atomically(s.commit, |t| t.append(tx.clone()));
        let b = other.atomically(s.commit, |t| t.append(tx.clone()));
        match (a, b) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(BankError::Unbalanced { .. }), Err(BankError::Unbalanced { .. })) => {
                prop_assert!(!s.balanced);
            }
            (a, b) => prop_assert!(false, "memory {:?} but {:?} {:?}", a, backend, b),
        }
    }
    prop_assert_eq!(balances(&mut mem), balances(&mut other));
    prop_assert_eq!(read(&mut mem, |t| t.head()), read(&mut other, |t| t.head()));
    let txs = read(&mut other, |t| t.transactions(None));
    prop_assert_eq!(&read(&mut mem, |t| t.transactions(None)), &txs);
    for t in &txs {
        prop_assert!(t.tx.check_balanced().is_ok(), "{} unbalanced", t.tx.key);
    }
    prop_assert_eq!(
        read(&mut mem, |t| verify(&*t)),
        read(&mut other, |t| verify(&*t))
    );
    Ok(())
}

#[test]
fn both_ledgers_agree() {
    let steps = prop::collection::vec(step(), 1..20);
    support::run_cases(
        Backend::Sqlite,
        "ledgers_agree",
        24,
        steps,
        |place, steps| ledgers_agree(place, &steps),
    );
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn memory_and_postgres_ledgers_agree() {
    // A fresh schema per case: 24 cases in a few seconds.
    let steps = prop::collection::vec(step(), 1..20);
    support::run_cases(
        Backend::Postgres,
        "ledgers_agree",
        24,
        steps,
        |place, steps| ledgers_agree(place, &steps),
    );
}
