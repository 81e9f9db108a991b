//! Moving a ledger between backends (`gpumeter_bank::transfer`): a ledger with real bank
//! activity (grants, a reservation, two finalizations with a carried fragment, an expiry, a
//! close) exported and imported SQLite → SQLite and SQLite → PostgreSQL gives the same
//! transactions, head, balances and export bytes, and verifies; a posting edited on the
//! target afterwards fails `verify` naming its transaction; an import that is refused
//! (a non-empty target, an edited, reordered or missing line, a line that is not JSON) leaves
//! the target empty.
//!
//! The PostgreSQL tests use the server of `GPUMETER_TEST_POSTGRES` (`scripts/test` starts
//! one): without it they say `skipped:` on standard error, and fail under `CI=true`.

use std::path::Path;

use gpumeter_bank::{
    close, expire, finalize, grant, reserve, verify, AnyLedger, BankError, GrantKind, GrantRequest,
    Ledger, Outcome, StoredTransaction, Transferred,
};
use rust_decimal::Decimal;

mod support;

use support::{book, d, t, usage};

// --- A ledger with bank activity ---------------------------------------------------------------

/// A grant of `credits` at priority 1 under the key `<tenant>-<credits>`.
fn grant_req(tenant: &str, credits: &str, kind: GrantKind, expires: Option<&str>) -> GrantRequest {
    support::grant_req(
        tenant,
        credits,
        1,
        kind,
        expires,
        &format!("{tenant}-{credits}"),
    )
}

/// Two tenants' grants, a reservation, two months of finalizations (credits burned, a
/// fragment carried, unused capacity converted), an expiry and a contract close.
fn activity<L: Ledger>(bank: &mut L) {
    let b = book();
    grant(bank, &grant_req("acme", "50", GrantKind::Purchased, None)).expect("grant");
    grant(
        bank,
        &grant_req(
            "acme",
            "15",
            GrantKind::Promotional,
            Some("2027-01-15T00:00:00Z"),
        ),
    )
    .expect("grant");
    grant(bank, &grant_req("zeta", "7", GrantKind::Purchased, None)).expect("grant");
    reserve(
        bank,
        &support::reservation("acme", "2.00", Some("2027-03-01T00:00:00Z")),
    )
    .expect("reserve");
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
    for (tenant, launches) in [("acme", 2500), ("zeta", 3700)] {
        let f = finalize(
            bank,
            &usage(tenant, "2026-12-01T00:00:00Z", launches),
            &b,
            Some(dec),
            true,
        )
        .expect("finalize December");
        assert_eq!(f.outcomes, vec![Outcome::Applied]);
    }
    expire(bank, t("2027-01-15T00:00:00Z")).expect("expire");
    let f = finalize(
        bank,
        &usage("acme", "2027-01-01T00:00:00Z", 1700),
        &b,
        Some(jan),
        true,
    )
    .expect("finalize January");
    assert_eq!(f.outcomes, vec![Outcome::Applied]);
    close(bank, "zeta", &b, t("2027-02-01T00:00:00Z")).expect("close");
}

// --- Helpers ------------------------------------------------------------------------------------

type Balances = Vec<(String, String, Decimal)>;

/// Everything an import must carry over: the transactions, the head and every balance.
fn state(l: &mut AnyLedger) -> (Vec<StoredTransaction>, Option<String>, Balances) {
    l.atomically(false, |t| {
        Ok((t.transactions(None)?, t.head()?, t.balances("")?))
    })
    .expect("reading the ledger")
}

fn export_bytes(l: &mut AnyLedger) -> (Vec<u8>, Transferred) {
    let mut out = Vec::new();
    let done = gpumeter_bank::export(l, &mut out, "export.jsonl").expect("export");
    (out, done)
}

fn open(location: &str) -> AnyLedger {
    gpumeter_bank::open(location).unwrap_or_else(|e| panic!("open {location}: {e}"))
}

/// An SQLite ledger with [`activity`], in `dir`.
fn source(dir: &Path) -> AnyLedger {
    let mut l = open(dir.join("source.db").to_str().expect("utf-8"));
    activity(&mut l);
    l
}

/// Where the target of a test lives: a new SQLite file in `dir`, or a fresh PostgreSQL schema
/// (`None`: no server, the test is skipped).
enum Backend {
    Sqlite,
    Postgres,
}

/// The target's location, and the PostgreSQL schema to keep alive while it is used.
fn target(
    backend: &Backend,
    dir: &Path,
    label: &str,
) -> Option<(String, Option<gpumeter_test_postgres::Schema>)> {
    match backend {
        Backend::Sqlite => Some((
            dir.join(format!("{label}.db"))
                .to_str()
                .expect("utf-8")
                .to_string(),
            None,
        )),
        Backend::Postgres => postgres_schema(label).map(|s| (s.url.clone(), Some(s))),
    }
}

#[cfg(feature = "postgres")]
fn postgres_schema(label: &str) -> Option<gpumeter_test_postgres::Schema> {
    gpumeter_test_postgres::Schema::fresh(label)
}

/// Without the `postgres` feature there is no PostgreSQL ledger to test: said on standard
/// error (a failure under `CI=true`, whose workspace build turns the feature on).
#[cfg(not(feature = "postgres"))]
fn postgres_schema(label: &str) -> Option<gpumeter_test_postgres::Schema> {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{label}: CI=true but gpumeter-bank was built without the `postgres` feature"
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: {label}: gpumeter-bank built without the `postgres` feature"
    );
    None
}

// --- Round trips ----------------------------------------------------------------------------------

/// Exports the activity ledger, imports it at `backend`, and checks that the target holds
/// the same chain; returns the target's location (and its schema, kept alive) and the
/// transactions, for the tamper test.
fn round_trip(
    backend: &Backend,
    dir: &Path,
    label: &str,
) -> Option<(
    String,
    Option<gpumeter_test_postgres::Schema>,
    Vec<StoredTransaction>,
)> {
    let (location, schema) = target(backend, dir, label)?;
    let mut src = source(dir);
    let (bytes, exported) = export_bytes(&mut src);
    let (txs, head, balances) = state(&mut src);
    assert_eq!(exported.transactions, txs.len() as u64);
    assert_eq!(exported.head, head);
    assert!(
        txs.iter().any(|t| t.tx.kind == "finalize") && txs.iter().any(|t| t.tx.kind == "close"),
        "real activity: {:?}",
        txs.iter().map(|t| &t.tx.kind).collect::<Vec<_>>()
    );
    assert_eq!(
        bytes.iter().filter(|&&b| b == b'\n').count(),
        txs.len(),
        "one line per transaction"
    );

    let mut dst = open(&location);
    let imported = gpumeter_bank::import(&mut dst, &bytes[..], "export.jsonl").expect("the import");
    assert_eq!(imported, exported);
    drop(dst);
    // Reopened: what was committed, not what one connection saw.
    let mut dst = gpumeter_bank::open_existing(&location).expect("the imported ledger");
    let report = dst
        .atomically(false, |t| verify(t))
        .expect("the import verifies");
    assert_eq!(report.transactions, txs.len() as u64);
    assert_eq!(report.head, head);
    let (txs2, head2, balances2) = state(&mut dst);
    assert_eq!(txs2, txs, "the same transactions");
    assert_eq!(head2, head, "the same head");
    assert_eq!(balances2, balances, "the same balances");
    assert!(!balances.is_empty());
    let (again, _) = export_bytes(&mut dst);
    assert_eq!(
        String::from_utf8_lossy(&again),
        String::from_utf8_lossy(&bytes),
        "the export of the import is the export"
    );
    assert_eq!(again, bytes);
    Some((location, schema, txs))
}

#[test]
fn sqlite_to_sqlite_keeps_the_chain_the_balances_and_the_export_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    round_trip(&Backend::Sqlite, dir.path(), "sqlite_round_trip").expect("SQLite is always there");
}

#[test]
fn sqlite_to_postgres_keeps_the_chain_the_balances_and_the_export_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    round_trip(&Backend::Postgres, dir.path(), "pg_round_trip");
}

#[test]
fn an_empty_ledger_exports_nothing_and_imports_as_an_empty_ledger() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut empty = open(dir.path().join("empty.db").to_str().expect("utf-8"));
    let (bytes, done) = export_bytes(&mut empty);
    assert!(bytes.is_empty());
    assert_eq!(
        done,
        Transferred {
            transactions: 0,
            head: None
        }
    );
    let mut dst = open(dir.path().join("dst.db").to_str().expect("utf-8"));
    let imported = gpumeter_bank::import(&mut dst, &b""[..], "empty.jsonl").expect("import");
    assert_eq!(imported, done);
    assert_eq!(state(&mut dst).1, None);
}

// --- Tampering on PostgreSQL after the import -----------------------------------------------------

#[test]
fn an_edited_posting_on_postgres_fails_verify_naming_its_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((url, _schema, txs)) = round_trip(&Backend::Postgres, dir.path(), "pg_tamper") else {
        return;
    };
    let mut edited = 0;
    for t in txs.iter().filter(|t| !t.tx.postings.is_empty()) {
        let seq = t.seq;
        let changed = gpumeter_test_postgres::execute(
            &url,
            &format!("UPDATE postings SET amount = amount + 1 WHERE seq = {seq} AND idx = 0"),
        )
        .expect("edit a posting");
        assert_eq!(changed, 1, "posting {seq}/0");
        let mut l = gpumeter_bank::open_existing(&url).expect("open");
        match l.atomically(false, |t| verify(t)) {
            Err(BankError::Corrupt { seq: s, key, .. }) => {
                assert_eq!((s, key.as_str()), (seq, t.tx.key.as_str()));
            }
            other => panic!("verify after editing posting {seq}/0: {other:?}"),
        }
        gpumeter_test_postgres::execute(
            &url,
            &format!("UPDATE postings SET amount = amount - 1 WHERE seq = {seq} AND idx = 0"),
        )
        .expect("restore the posting");
        l.atomically(false, |t| verify(t))
            .expect("restored, it verifies");
        edited += 1;
    }
    assert!(edited >= 8, "{edited} transactions edited");
}

// --- Refusals ---------------------------------------------------------------------------------------

/// The activity ledger's export, as lines (without their newlines).
fn export_lines(dir: &Path) -> Vec<String> {
    let mut src = source(dir);
    let (bytes, _) = export_bytes(&mut src);
    String::from_utf8(bytes)
        .expect("UTF-8")
        .lines()
        .map(str::to_string)
        .collect()
}

fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// Imports `input` into a new ledger at `backend`, expects a refusal, checks that the target
/// is still empty, and returns the error.
fn refused(backend: &Backend, dir: &Path, label: &str, input: &str) -> Option<BankError> {
    let (location, _schema) = target(backend, dir, label)?;
    let mut dst = open(&location);
    let e = gpumeter_bank::import(&mut dst, input.as_bytes(), "dump.jsonl")
        .expect_err("the import is refused");
    drop(dst);
    let mut dst = gpumeter_bank::open_existing(&location).expect("the target");
    let (txs, head, balances) = state(&mut dst);
    assert!(
        txs.is_empty() && head.is_none() && balances.is_empty(),
        "{label}: nothing imported after `{e}`"
    );
    Some(e)
}

/// The line and transaction an import error names.
fn named(e: &BankError) -> (u64, Option<(u64, String)>, String) {
    match e {
        BankError::Import {
            file,
            line,
            transaction,
            reason,
        } => {
            assert_eq!(file, "dump.jsonl");
            assert!(
                e.to_string().starts_with(&format!("dump.jsonl:{line}: ")),
                "{e}"
            );
            (*line, transaction.clone(), reason.clone())
        }
        other => panic!("not an import error: {other:?}"),
    }
}

fn posting_amount(line: &serde_json::Value, idx: usize) -> Decimal {
    d(line["postings"][idx]["amount"].as_str().expect("an amount"))
}

/// Line `n` (from 1) with postings `i` and `j` (same commodity) moved by +1 and −1: still
/// balanced, so only its hash tells.
fn shifted(lines: &[String], n: usize) -> (Vec<String>, u64, String) {
    let mut out = lines.to_vec();
    let mut v: serde_json::Value = serde_json::from_str(&lines[n - 1]).expect("JSON");
    let postings = v["postings"].as_array().expect("postings").clone();
    let (i, j) = (0..postings.len())
        .flat_map(|i| (0..postings.len()).map(move |j| (i, j)))
        .find(|&(i, j)| i < j && postings[i]["commodity"] == postings[j]["commodity"])
        .expect("two postings of one commodity");
    let (a, b) = (posting_amount(&v, i), posting_amount(&v, j));
    v["postings"][i]["amount"] = (a + Decimal::ONE).to_string().into();
    v["postings"][j]["amount"] = (b - Decimal::ONE).to_string().into();
    out[n - 1] = v.to_string();
    let seq = v["seq"].as_u64().expect("seq");
    let key = v["key"].as_str().expect("key").to_string();
    (out, seq, key)
}

fn refusals(backend: &Backend, label: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = export_lines(dir.path());
    assert!(lines.len() >= 8);

    // An edited amount (still balanced): the hash the target computes differs.
    let n = 5;
    let (edited, seq, key) = shifted(&lines, n);
    let Some(e) = refused(
        backend,
        dir.path(),
        &format!("{label}_amount"),
        &joined(&edited),
    ) else {
        return;
    };
    let (line, tx, reason) = named(&e);
    assert_eq!((line, tx), (n as u64, Some((seq, key.clone()))), "{e}");
    assert!(reason.contains("hash") && reason.contains("edited"), "{e}");
    assert!(
        e.to_string()
            .contains(&format!("dump.jsonl:{n}: transaction {seq} (`{key}`)")),
        "{e}"
    );

    // One amount edited alone: its postings no longer balance.
    let mut unbalanced = lines.clone();
    let mut v: serde_json::Value = serde_json::from_str(&lines[1]).expect("JSON");
    let a = posting_amount(&v, 0);
    v["postings"][0]["amount"] = (a + Decimal::ONE).to_string().into();
    unbalanced[1] = v.to_string();
    let e = refused(
        backend,
        dir.path(),
        &format!("{label}_unbalanced"),
        &joined(&unbalanced),
    )
    .expect("the backend is there");
    let (line, tx, reason) = named(&e);
    assert_eq!(line, 2, "{e}");
    assert_eq!(tx.map(|t| t.0), Some(2), "{e}");
    assert!(reason.contains("sum to"), "{e}");

    // Two lines swapped: line 3 holds transaction 4.
    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    let e = refused(
        backend,
        dir.path(),
        &format!("{label}_swapped"),
        &joined(&swapped),
    )
    .expect("the backend is there");
    let (line, tx, _) = named(&e);
    assert_eq!((line, tx.map(|t| t.0)), (3, Some(4)), "{e}");

    // A line left out: line 6 holds transaction 7.
    let mut missing = lines.clone();
    missing.remove(5);
    let e = refused(
        backend,
        dir.path(),
        &format!("{label}_missing"),
        &joined(&missing),
    )
    .expect("the backend is there");
    let (line, tx, _) = named(&e);
    assert_eq!((line, tx.map(|t| t.0)), (6, Some(7)), "{e}");

    // A line left out and the next one renumbered to hide the gap: its `prev_hash` is still
    // the hash of the line left out, so the chain breaks there.
    let mut renumbered = lines.clone();
    renumbered.remove(1);
    let mut v: serde_json::Value = serde_json::from_str(&renumbered[1]).expect("JSON");
    v["seq"] = 2.into();
    renumbered[1] = v.to_string();
    let e = refused(
        backend,
        dir.path(),
        &format!("{label}_renumbered"),
        &joined(&renumbered),
    )
    .expect("the backend is there");
    let (line, tx, reason) = named(&e);
    assert_eq!((line, tx.map(|t| t.0)), (2, Some(2)), "{e}");
    assert!(reason.contains("prev_hash"), "{e}");

    // Not JSON, and a blank line.
    for (what, bad) in [("garbage", "not json at all"), ("blank", "")] {
        let mut broken = lines.clone();
        broken.insert(3, bad.to_string());
        let e = refused(
            backend,
            dir.path(),
            &format!("{label}_{what}"),
            &joined(&broken),
        )
        .expect("the backend is there");
        let (line, tx, reason) = named(&e);
        assert_eq!((line, tx), (4, None), "{what}: {e}");
        assert!(reason.starts_with("not a transaction: "), "{what}: {e}");
        assert!(
            reason.contains("line 1 column"),
            "{what}: serde_json's message: {e}"
        );
    }

    // A target that holds a transaction already: refused, and left as it was.
    let (location, _schema) =
        target(backend, dir.path(), &format!("{label}_busy")).expect("the backend is there");
    let mut busy = open(&location);
    grant(
        &mut busy,
        &grant_req("acme", "50", GrantKind::Purchased, None),
    )
    .expect("grant");
    let before = state(&mut busy);
    let e = gpumeter_bank::import(&mut busy, joined(&lines).as_bytes(), "dump.jsonl")
        .expect_err("a non-empty target is refused");
    assert!(
        matches!(&e, BankError::NotEmpty { file, transactions: 1 } if file == "dump.jsonl"),
        "{e:?}"
    );
    assert!(e.to_string().contains("nothing was imported"), "{e}");
    drop(busy);
    let mut busy = gpumeter_bank::open_existing(&location).expect("reopen");
    assert_eq!(state(&mut busy), before, "the target is unchanged");

    // The export as it was still imports into a new ledger: the refusals were the edits.
    let (location, _schema) =
        target(backend, dir.path(), &format!("{label}_ok")).expect("the backend is there");
    let mut ok = open(&location);
    let done = gpumeter_bank::import(&mut ok, joined(&lines).as_bytes(), "dump.jsonl")
        .expect("the unedited export imports");
    assert_eq!(done.transactions, lines.len() as u64);
}

#[test]
fn imports_refused_into_sqlite_leave_nothing() {
    refusals(&Backend::Sqlite, "sqlite_refusals");
}

#[test]
fn imports_refused_into_postgres_leave_nothing() {
    refusals(&Backend::Postgres, "pg_refusals");
}

/// PostgreSQL's `text` cannot hold a NUL character, which an SQLite ledger can: an export
/// holding one (in a transaction's tenant, key or account) imported into PostgreSQL is refused
/// naming the line and its transaction, as any line the target cannot take, and nothing is
/// imported; appending such a transaction directly is refused naming its key, not a storage
/// failure of the server.
#[test]
fn a_nul_character_is_refused_by_postgres_naming_the_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (label, field) in [
        ("nul_tenant", "tenant"),
        ("nul_key", "key"),
        ("nul_account", "account"),
    ] {
        let mut src = open(
            dir.path()
                .join(format!("{label}.db"))
                .to_str()
                .expect("utf-8"),
        );
        let tx = |key: &str, tenant: &str, account: &str| gpumeter_bank::NewTransaction {
            key: key.into(),
            kind: "grant".into(),
            at: "2026-11-01T00:00:00Z".into(),
            tenant: Some(tenant.into()),
            postings: vec![
                gpumeter_bank::Posting::new(account, "credits", d("5")),
                gpumeter_bank::Posting::new("provider:promotions", "credits", d("-5")),
            ],
            memo: serde_json::json!({}),
        };
        let bad = match field {
            "tenant" => tx("k-2", "bo\0b", "tenant:bob:credits:g-1"),
            "key" => tx("k\u{0}2", "bob", "tenant:bob:credits:g-1"),
            _ => tx("k-2", "bob", "tenant:bo\0b:credits:g-1"),
        };
        let good = tx("k-1", "alice", "tenant:alice:credits:g-1");
        for t in [good, bad.clone()] {
            src.atomically(true, |l| l.append(t.clone()))
                .expect("SQLite holds a NUL");
        }
        let (bytes, _) = export_bytes(&mut src);
        let text = String::from_utf8(bytes).expect("UTF-8");
        let Some(e) = refused(&Backend::Postgres, dir.path(), label, &text) else {
            return;
        };
        let (line, transaction, reason) = named(&e);
        assert_eq!(line, 2, "{label}: {e}");
        assert_eq!(transaction, Some((2, bad.key.clone())), "{label}: {e}");
        assert!(reason.contains("NUL"), "{label}: {e}");

        let (location, _schema) = target(&Backend::Postgres, dir.path(), label).expect("a server");
        let mut pg = open(&location);
        match pg.atomically(true, |l| l.append(bad.clone())) {
            Err(e @ BankError::Refused(_)) => {
                let msg = e.to_string();
                assert!(msg.contains("NUL") && msg.contains(field), "{label}: {msg}");
            }
            other => panic!("{label}: a NUL must be refused, got {other:?}"),
        }
    }
}

/// A key longer than PostgreSQL's unique index can hold (about 2.7 kB once compressed; an
/// SQLite ledger takes any length): an export holding one, imported into PostgreSQL, is
/// refused naming the line and its transaction, as any line the target refuses; appending
/// it directly is refused naming its key, with the server's reason.
#[test]
fn a_key_too_long_for_postgres_is_refused_naming_the_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let long: String = (0..8000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(alphabet[(state % 64) as usize])
        })
        .collect();
    let tx = |key: &str| gpumeter_bank::NewTransaction {
        key: key.into(),
        kind: "grant".into(),
        at: "2026-11-01T00:00:00Z".into(),
        tenant: Some("alice".into()),
        postings: vec![
            gpumeter_bank::Posting::new("tenant:alice:credits:g-1", "credits", d("5")),
            gpumeter_bank::Posting::new("provider:promotions", "credits", d("-5")),
        ],
        memo: serde_json::json!({}),
    };
    let bad = tx(&format!("grant:{long}"));
    let mut src = open(dir.path().join("long.db").to_str().expect("utf-8"));
    for t in [tx("k-1"), bad.clone()] {
        src.atomically(true, |l| l.append(t.clone()))
            .expect("SQLite holds a long key");
    }
    let (bytes, _) = export_bytes(&mut src);
    let text = String::from_utf8(bytes).expect("UTF-8");
    let Some(e) = refused(&Backend::Postgres, dir.path(), "long_key", &text) else {
        return;
    };
    let (line, transaction, reason) = named(&e);
    assert_eq!(line, 2, "{e}");
    assert_eq!(transaction, Some((2, bad.key.clone())), "{e}");
    assert!(reason.contains("index row size"), "{e}");

    let (location, _schema) = target(&Backend::Postgres, dir.path(), "long_key").expect("a server");
    let mut pg = open(&location);
    match pg.atomically(true, |l| l.append(bad.clone())) {
        Err(e @ BankError::Refused(_)) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&bad.key[..40]) && msg.contains("index row size"),
                "{msg}"
            );
        }
        other => panic!("a key too long must be refused, got {other:?}"),
    }
    // Refused, not a failure of the connection: the ledger still works.
    pg.atomically(true, |l| l.append(tx("k-1")))
        .expect("appending after a refusal");
}
