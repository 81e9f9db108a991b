//! Reading a bank (issue 30 item 15, docs/BANK.md, "Reading a bank"): work that does not commit
//! waits for no writer and writes nothing, on SQLite and PostgreSQL; `open_read_only` never
//! creates, migrates or writes a ledger, and serves a PostgreSQL role that may only read; a
//! file, directory or FIFO that is not a bank is refused without a `-journal` beside it; a bad
//! schema version is one line; a memo that gives a key twice fails `verify`; an SQLite bank in
//! a read-only directory is read without locks (`immutable=1`) and still sees later commits.
//!
//! The tests of both backends have one body taking a [`Backend`]; the PostgreSQL ones need the
//! `postgres` feature (ignored without it) and the test server (`GPUMETER_TEST_POSTGRES`;
//! `skipped:` without it, a failure under `CI=true`). Permissions do not bind root, so the
//! read-only-directory test runs its reader as this test binary again ([`child_process`])
//! under the user `nobody` (uid and gid 65534) when the tests run as root, as CI's container
//! does.

mod support;

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use gpumeter_bank::{
    finalize, grant, verify, Appended, BankError, GrantKind, Ledger, NewTransaction, Posting,
    CREDITS,
};
use support::{book, d, grant_req, report_of, t, Backend, Place};

/// Set in a re-executed test binary: `read LOCATION` (read the count of transactions whenever
/// a line arrives on standard input, print it).
const CHILD_ENV: &str = "GPUMETER_BANK_TEST_READER";

fn transfer(key: &str) -> NewTransaction {
    NewTransaction {
        key: key.to_string(),
        kind: "grant".to_string(),
        at: "2026-12-01T00:00:00Z".to_string(),
        tenant: Some("acme".to_string()),
        postings: vec![
            Posting::new("tenant:acme:credits:g-1", CREDITS, d("1.5")),
            Posting::new("provider:promotions", CREDITS, d("-1.5")),
        ],
        memo: serde_json::json!({ "key": key, "credits": "1.5" }),
    }
}

/// Whether this process runs as root (whom file permissions do not bind): the owner of a file
/// it makes.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let f = tempfile::NamedTempFile::new().expect("a temporary file");
    f.as_file().metadata().expect("its metadata").uid() == 0
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

// ---------------------------------------------------------------------------------------
// Readers and writers.

/// While a writer holds the whole bank and the chain (its append not committed), a reader
/// opens the bank read-only, verifies it, reads balances and previews a finalization, all
/// without waiting: the writer waits for the reader to finish before it commits, so a reader
/// that waited for the writer would fail the test (on SQLite, issue 30 found `verify` waiting
/// 30 s for the write lock and then blaming "the migration").
fn readers_do_not_wait_for_a_writer(backend: Backend) {
    let Some(place) = Place::new(backend, "reader_writer") else {
        return;
    };
    let mut writer = place.open();
    grant(
        &mut writer,
        &grant_req("acme", "100", 0, GrantKind::Purchased, None, "g"),
    )
    .expect("a grant");
    let report = report_of(&[("acme", "2026-12-01T00:00:00Z", 3000)], "trace");
    let period = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
    let (held_tx, held) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<()>();
    let read = std::thread::scope(|s| {
        let w = s.spawn(move || {
            writer.atomically(true, |t| {
                t.lock_all()?;
                t.append(transfer("written"))?;
                held_tx.send(()).expect("the test");
                done.recv_timeout(Duration::from_secs(20))
                    .map_err(|e| BankError::Refused(format!("the reader waited: {e}")))
            })
        });
        held.recv().expect("the writer holds the bank");
        let read = (|| {
            let mut reader = gpumeter_bank::open_read_only(&place.location)?;
            let report_v = reader.atomically(false, |t| verify(t))?;
            let balances = reader.atomically(false, |t| t.balances("tenant:acme:"))?;
            let preview = finalize(&mut reader, &report, &book(), period, false)?;
            Ok::<_, BankError>((report_v, balances, preview))
        })();
        done_tx.send(()).expect("the writer");
        w.join().expect("the writer").expect("the writer's work");
        read
    });
    let (report_v, balances, preview) = read.expect("reading beside the writer");
    assert_eq!(
        report_v.transactions, 1,
        "the grant only, not the writer's work"
    );
    assert_eq!(balances.len(), 1, "{balances:?}");
    assert_eq!(preview.document.invoices.len(), 1);
    // A preview's append is rolled back: the grant and the writer's transfer are stored.
    assert_eq!(place.count("transactions"), 2);
    assert_eq!(place.count("transactions WHERE kind = 'finalize'"), 0);
}

#[test]
fn readers_of_an_sqlite_bank_do_not_wait_for_a_writer() {
    readers_do_not_wait_for_a_writer(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn readers_of_a_postgres_bank_do_not_wait_for_a_writer() {
    readers_do_not_wait_for_a_writer(Backend::Postgres);
}

/// A bank opened read-only refuses work that commits ([`BankError::ReadOnly`], nothing
/// written); work that does not commit may append, in memory only, with the sequence number
/// and hash a commit would give, and its balances read back with the append.
fn a_read_only_bank_writes_nothing(backend: Backend) {
    let Some(place) = Place::new(backend, "read_only_writes") else {
        return;
    };
    let stored = place
        .open()
        .atomically(true, |t| t.append(transfer("first")))
        .expect("a first transaction")
        .stored()
        .clone();
    let mut reader = gpumeter_bank::open_read_only(&place.location).expect("open read-only");
    match reader.atomically(true, |t| t.append(transfer("second"))) {
        Err(BankError::ReadOnly { file }) => {
            assert_eq!(file, gpumeter_bank::redact(&place.location));
        }
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    let (appended, balance, head) = reader
        .atomically(false, |t| {
            let a = t.append(transfer("second"))?;
            let again = t.append(transfer("second"))?;
            assert!(matches!(again, Appended::AlreadyApplied(_)), "{again:?}");
            Ok((a, t.balance("tenant:acme:credits:g-1", CREDITS)?, t.head()?))
        })
        .expect("a preview");
    let appended = appended.stored().clone();
    assert_eq!(
        (appended.seq, appended.prev_hash.as_str()),
        (2, stored.hash.as_str())
    );
    assert_eq!(head.as_deref(), Some(appended.hash.as_str()));
    assert_eq!(balance, d("3.0"));
    assert_eq!(place.count("transactions"), 1);
    // The same append committed by a writer stores what the preview showed.
    let committed = place
        .open()
        .atomically(true, |t| t.append(transfer("second")))
        .expect("the append");
    assert_eq!(committed.stored(), &appended);
}

#[test]
fn a_read_only_sqlite_bank_writes_nothing() {
    a_read_only_bank_writes_nothing(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_read_only_postgres_bank_writes_nothing() {
    a_read_only_bank_writes_nothing(Backend::Postgres);
}

/// `open_read_only` where there is no bank creates none: a missing file, an empty one, an
/// empty schema.
fn nothing_is_created_by_a_reader(backend: Backend) {
    let Some(place) = Place::new(backend, "read_only_nothing") else {
        return;
    };
    let refused = |location: &str| match gpumeter_bank::open_read_only(location) {
        Err(BankError::NotALedger { reason, .. }) => reason,
        other => panic!("{location}: expected NotALedger, got {other:?}"),
    };
    let reason = refused(&place.location);
    assert!(reason.contains("create one"), "{reason}");
    match backend {
        Backend::Sqlite => {
            assert!(!Path::new(&place.location).exists());
            std::fs::write(&place.location, b"").expect("an empty file");
            let reason = refused(&place.location);
            assert!(reason.contains("empty"), "{reason}");
            assert_eq!(std::fs::read(&place.location).expect("the file"), b"");
            let names: Vec<_> = std::fs::read_dir(place.dir())
                .expect("the directory")
                .map(|e| e.expect("an entry").file_name())
                .collect();
            assert_eq!(names.len(), 1, "{names:?}");
        }
        Backend::Postgres => {
            assert_eq!(
                place.count("pg_tables WHERE schemaname = current_schema()"),
                0
            );
        }
    }
}

#[test]
fn an_sqlite_reader_creates_no_bank() {
    nothing_is_created_by_a_reader(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_postgres_reader_creates_no_bank() {
    nothing_is_created_by_a_reader(Backend::Postgres);
}

/// A role that may only read the ledger's tables, in read-only transactions by default (as a
/// hot standby serves them), reads the bank through `open_read_only`: verify, a balance, a
/// preview. A write as that role fails, and nothing was written.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_postgres_role_that_may_only_read_reads_the_bank() {
    let Some(place) = Place::new(Backend::Postgres, "read_only_role") else {
        return;
    };
    grant(
        &mut place.open(),
        &grant_req("acme", "100", 0, GrantKind::Purchased, None, "g"),
    )
    .expect("a grant");
    let schema = place
        .location
        .rsplit("search_path%3D")
        .next()
        .expect("the schema's name")
        .to_string();
    let role = format!("{schema}_ro");
    place.execute(&format!("CREATE ROLE \"{role}\" LOGIN"));
    place.execute(&format!(
        "ALTER ROLE \"{role}\" SET default_transaction_read_only = on"
    ));
    place.execute(&format!("GRANT USAGE ON SCHEMA \"{schema}\" TO \"{role}\""));
    place.execute(&format!(
        "GRANT SELECT ON ALL TABLES IN SCHEMA \"{schema}\" TO \"{role}\""
    ));
    let as_role = format!("{}&user={role}", place.location);
    let outcome = (|| {
        let mut reader = gpumeter_bank::open_read_only(&as_role)?;
        let v = reader.atomically(false, |t| verify(t))?;
        let b = gpumeter_bank::balance(&mut reader, "acme", t("2026-12-15T00:00:00Z"))?;
        let report = report_of(&[("acme", "2026-12-01T00:00:00Z", 3000)], "trace");
        let period = Some((t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z")));
        let p = finalize(&mut reader, &report, &book(), period, false)?;
        Ok::<_, BankError>((v, b, p))
    })();
    let writer = gpumeter_bank::open(&as_role)
        .and_then(|mut l| l.atomically(true, |t| t.append(transfer("refused"))));
    place.execute(&format!("DROP OWNED BY \"{role}\""));
    place.execute(&format!("DROP ROLE \"{role}\""));
    let (v, b, p) = outcome.expect("reading as a read-only role");
    assert_eq!(v.transactions, 1);
    assert_eq!(b.credits.len(), 1);
    assert_eq!(p.document.invoices.len(), 1);
    assert!(writer.is_err(), "a write as a read-only role: {writer:?}");
    assert_eq!(place.count("transactions"), 1);
}

// ---------------------------------------------------------------------------------------
// Locations that are not banks, and damaged ones.

/// `/dev/null`, a directory and a FIFO are refused by every open, before SQLite makes a
/// `-journal`, `-wal` or `-shm` file beside them (as root, `/dev/null-journal` was made).
#[test]
fn locations_that_are_not_files_are_refused_without_a_journal() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let sub = dir.path().join("a-directory");
    std::fs::create_dir(&sub).expect("a directory");
    let fifo = dir.path().join("a-fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("running mkfifo");
    assert!(made.success(), "mkfifo {}", fifo.display());
    for path in [Path::new("/dev/null"), &sub, &fifo] {
        let location = path.to_str().expect("a UTF-8 path");
        for (how, opened) in [
            ("open", gpumeter_bank::open(location)),
            ("open_existing", gpumeter_bank::open_existing(location)),
            ("open_read_only", gpumeter_bank::open_read_only(location)),
        ] {
            match opened {
                Err(BankError::NotALedger { reason, .. }) => {
                    assert!(reason.contains("not a bank"), "{how} {location}: {reason}");
                }
                other => panic!("{how} {location}: expected NotALedger, got {other:?}"),
            }
            for suffix in ["-journal", "-wal", "-shm"] {
                let beside = format!("{location}{suffix}");
                assert!(
                    !Path::new(&beside).exists(),
                    "{how} {location} left {beside}"
                );
            }
        }
    }
}

/// A location beginning with `file:` is never opened as an SQLite URI (SQLite is built with
/// `SQLITE_USE_URI`, so it would be whatever the open's flags): every open refuses it, and
/// `file:/dev/null` makes no `/dev/null-journal`, nor `file:BANK?mode=rwc` a bank.
#[test]
fn file_uris_are_no_bank_location() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bank = dir.path().join("uri.sqlite");
    let null_journal = Path::new("/dev/null-journal").exists();
    for location in [
        "file:/dev/null".to_string(),
        format!("file:{}?mode=rwc", bank.display()),
        format!("file:{}", bank.display()),
    ] {
        for (how, opened) in [
            ("open", gpumeter_bank::open(&location)),
            ("open_existing", gpumeter_bank::open_existing(&location)),
            ("open_read_only", gpumeter_bank::open_read_only(&location)),
        ] {
            match opened {
                Err(BankError::NotALedger { reason, .. }) => {
                    assert!(reason.contains("SQLite URI"), "{how} {location}: {reason}");
                }
                other => panic!("{how} {location}: expected NotALedger, got {other:?}"),
            }
        }
        assert!(!bank.exists(), "{location} made {}", bank.display());
        assert_eq!(
            Path::new("/dev/null-journal").exists(),
            null_journal,
            "{location}"
        );
    }
}

/// A `schema_version` a ledger never has (0, which would run the first migration again over
/// the tables, or a number written otherwise than a ledger writes it) is one line naming the
/// value, from every open, and the file is left as it was.
fn bad_schema_versions(backend: Backend) {
    for (value, says) in [
        ("0", "is 0, which no ledger has"),
        ("+1", "`+1` is not a version number"),
        ("01", "`01` is not a version number"),
        ("one", "`one` is not a version number"),
    ] {
        let Some(place) = Place::new(backend, "bad_version") else {
            return;
        };
        place
            .open()
            .atomically(true, |t| t.append(transfer("first")))
            .expect("a transaction");
        place.execute(&format!(
            "UPDATE meta SET value = '{value}' WHERE name = 'schema_version'"
        ));
        for (how, opened) in [
            ("open", gpumeter_bank::open(&place.location)),
            (
                "open_existing",
                gpumeter_bank::open_existing(&place.location),
            ),
            (
                "open_read_only",
                gpumeter_bank::open_read_only(&place.location),
            ),
        ] {
            let message = match opened {
                Err(e @ BankError::NotALedger { .. }) => e.to_string(),
                other => panic!("{how} with version {value}: expected NotALedger, got {other:?}"),
            };
            assert!(message.contains(says), "{how}: {message}");
            assert!(!message.contains('\n'), "{how}: {message}");
            assert!(!message.contains("CREATE"), "{how}: {message}");
        }
        assert_eq!(place.count("transactions"), 1);
        assert_eq!(
            place.count(&format!(
                "meta WHERE name = 'schema_version' AND value = '{value}'"
            )),
            1
        );
    }
}

#[test]
fn a_bad_sqlite_schema_version_is_one_line() {
    bad_schema_versions(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_bad_postgres_schema_version_is_one_line() {
    bad_schema_versions(Backend::Postgres);
}

/// A memo edited to give a key twice, the second value being the one the transaction was
/// hashed with (so that serde_json, which keeps the last, reads back the hashed memo and the
/// chain holds), fails `verify` naming the transaction and the key: a person or another
/// reader keeping the first value sees 500 credits where the bank hashed 1.5.
fn duplicate_memo_keys(backend: Backend) {
    let Some(place) = Place::new(backend, "duplicate_memo") else {
        return;
    };
    let stored = place
        .open()
        .atomically(true, |t| {
            t.append(transfer("first"))?;
            t.append(transfer("second"))
        })
        .expect("two transactions")
        .stored()
        .clone();
    let memo = serde_json::to_string(&stored.tx.memo).expect("the memo");
    let doubled = memo.replacen(
        "\"credits\":\"1.5\"",
        "\"credits\":\"500\",\"credits\":\"1.5\"",
        1,
    );
    assert_ne!(memo, doubled);
    let doubled: serde_json::Value = {
        let v: serde_json::Value = serde_json::from_str(&doubled).expect("JSON");
        assert_eq!(v, stored.tx.memo, "serde_json keeps the last value");
        serde_json::Value::String(doubled)
    };
    let text = doubled.as_str().expect("text").replace('\'', "''");
    assert_eq!(
        place.execute(&format!(
            "UPDATE transactions SET memo = '{text}' WHERE seq = 2"
        )),
        1
    );
    let err = gpumeter_bank::open_read_only(&place.location)
        .and_then(|mut l| l.atomically(false, |t| verify(t)))
        .expect_err("verify must refuse the memo");
    match &err {
        BankError::Corrupt { seq, key, reason } => {
            assert_eq!((*seq, key.as_str()), (2, "second"), "{err}");
            assert!(reason.contains("the key `credits` twice"), "{err}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

#[test]
fn a_memo_with_a_duplicate_key_fails_verify_on_sqlite() {
    duplicate_memo_keys(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_memo_with_a_duplicate_key_fails_verify_on_postgres() {
    duplicate_memo_keys(Backend::Postgres);
}

// ---------------------------------------------------------------------------------------
// An SQLite bank in a read-only directory.

/// Does nothing in a normal run. With [`CHILD_ENV`] `read LOCATION`: opens the bank
/// read-only, then for each line on standard input prints `answer: ` and the number of
/// transactions (or `error: …`; the harness may have begun the line).
#[test]
fn child_process() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    let location = role.strip_prefix("read ").expect("read LOCATION");
    let mut out = std::io::stdout().lock();
    let mut ledger = match gpumeter_bank::open_read_only(location) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(out, "answer: error: {e}");
            return;
        }
    };
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        match ledger.atomically(false, |t| t.transactions(None)) {
            Ok(all) => writeln!(out, "answer: {}", all.len()),
            Err(e) => writeln!(out, "answer: error: {e}"),
        }
        .expect("writing to the test");
        out.flush().expect("writing to the test");
    }
}

/// A bank in a directory its reader may not write (so SQLite can make no `-wal` or `-shm`
/// file there), the file read-only too: the reader opens it, reads it, makes no file beside
/// it, and sees a transaction committed after it opened (SQLite reads such a file without
/// locks, `immutable=1`, and would keep its cached pages; the ledger notices the file
/// changed and opens it again).
#[test]
fn a_bank_in_a_read_only_directory_is_read_and_sees_later_commits() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bank = dir.path().join("bank.sqlite");
    let location = bank.to_str().expect("a UTF-8 path").to_string();
    gpumeter_bank::open(&location)
        .and_then(|mut l| l.atomically(true, |t| t.append(transfer("first"))))
        .expect("a bank");
    chmod(&bank, 0o444);
    chmod(dir.path(), 0o555);
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, format!("read {location}"))
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if running_as_root() {
        use std::os::unix::process::CommandExt as _;
        cmd.uid(65534).gid(65534);
    }
    let mut child = cmd.spawn().expect("the reader");
    let mut to_child = child.stdin.take().expect("its stdin");
    let mut from_child = BufReader::new(child.stdout.take().expect("its stdout"));
    let mut ask = |what: &str| -> String {
        writeln!(to_child, "{what}").expect("asking the reader");
        to_child.flush().expect("asking the reader");
        loop {
            let mut line = String::new();
            let n = from_child
                .read_line(&mut line)
                .expect("the reader's answer");
            assert!(n > 0, "the reader ended before answering {what}");
            // The test harness's own text (`running 1 test`, `test child_process ... `) is
            // not an answer.
            if let Some((_, answer)) = line.split_once("answer: ") {
                return answer.trim().to_string();
            }
        }
    };
    assert_eq!(ask("count"), "1");
    let beside: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the directory")
        .map(|e| e.expect("an entry").file_name())
        .collect();
    assert_eq!(beside.len(), 1, "files beside the bank: {beside:?}");
    // A writer (with the rights back for a moment) commits a second transaction.
    chmod(dir.path(), 0o755);
    chmod(&bank, 0o644);
    gpumeter_bank::open(&location)
        .and_then(|mut l| l.atomically(true, |t| t.append(transfer("second"))))
        .expect("a second transaction");
    chmod(&bank, 0o444);
    chmod(dir.path(), 0o555);
    assert_eq!(ask("count again"), "2");
    drop(to_child);
    let status = child.wait().expect("the reader's end");
    assert!(status.success(), "the reader: {status}");
    chmod(dir.path(), 0o755);
}
