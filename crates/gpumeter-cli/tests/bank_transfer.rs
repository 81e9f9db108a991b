//! `gpumeter bank export` / `bank import` (issue 15): a bank with real activity (grants,
//! finalizations that burn credits and carry fragments, an expiry, a close) moved from an
//! SQLite file to another file and to PostgreSQL verifies there and gives the same balances,
//! history and export; a posting edited on PostgreSQL afterwards fails `bank verify` naming
//! its transaction; a refused import (a non-empty bank, an edited, reordered or missing line,
//! a line that is not JSON) imports nothing.
//!
//! The PostgreSQL tests use the server of `GPUMETER_TEST_POSTGRES` (`scripts/test` starts
//! one): without it they say `skipped:` on standard error, and fail under `CI=true`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde_json::Value;

mod common;
use common::*;

/// Exit 1, and what the command said on standard error.
fn fails(o: Output, what: &str) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{what}: stdout: {}\nstderr: {}",
        stdout(&o),
        stderr(&o)
    );
    assert!(o.stdout.is_empty(), "{what}: {}", stdout(&o));
    stderr(&o)
}

fn grant(bank: &Path, args: &[&str]) {
    let mut all = vec!["bank", "grant", "--bank", s(bank)];
    all.extend_from_slice(args);
    ok(gpumeter(&all), "bank grant");
}

/// A bank in `dir` after grants to two tenants, a finalization of each (credits burned,
/// fragments carried), an expiry and a contract close.
fn busy_bank(dir: &Path) -> PathBuf {
    let bank = dir.join("bank.db");
    for (tenant, credits, key, expires) in [
        ("acme", "3", "k1", None),
        ("gamma", "2", "k2", Some("2026-11-20T00:00:00Z")),
        ("beta", "40", "k3", None),
    ] {
        let mut args = vec![
            "--tenant",
            tenant,
            "--credits",
            credits,
            "--rate",
            "0.07",
            "--from",
            "2026-01-01T00:00:00Z",
            "--key",
            key,
        ];
        if let Some(e) = expires {
            args.extend(["--expires", e]);
        }
        grant(&bank, &args);
    }
    for (i, tenant) in ["acme", "beta"].into_iter().enumerate() {
        let i = i as u64;
        let trace = dir.join(format!("trace-{tenant}.json"));
        std::fs::write(
            &trace,
            kineto(&[
                (100 + i * 7, 40_000 + i * 1_111, 264),
                (90_000 + i * 13, 2_500 + i * 17, 100 + i),
                (1_000_000 + i * 3, 1_234_567 + i * 99_991, 132),
            ]),
        )
        .expect("write trace");
        let o = ok(
            bin()
                .args(["invoice", "finalize", s(&trace), "--tenant", tenant])
                .args(["--prices", s(&book()), "--bank", s(&bank), "--json"])
                .output()
                .expect("run"),
            "invoice finalize",
        );
        let inv = &json(&o)["invoices"][0];
        assert!(
            !inv["credits_applied"]
                .as_array()
                .expect("credits")
                .is_empty(),
            "{tenant}: credits burned"
        );
    }
    let o = ok(
        gpumeter(&[
            "bank",
            "expire",
            "--bank",
            s(&bank),
            "--at",
            "2026-11-21T00:00:00Z",
        ]),
        "bank expire",
    );
    assert!(stdout(&o).contains("to breakage"), "{}", stdout(&o));
    ok(
        gpumeter(&[
            "bank",
            "close",
            "--bank",
            s(&bank),
            "--tenant",
            "beta",
            "--prices",
            s(&book()),
        ]),
        "bank close",
    );
    bank
}

/// `bank export --bank LOCATION` on standard output.
fn export(location: &str) -> Vec<u8> {
    ok(
        gpumeter(&["bank", "export", "--bank", location]),
        "bank export",
    )
    .stdout
}

/// `bank import --bank LOCATION FILE`, its summary line.
fn import(location: &str, file: &Path) -> String {
    stdout(&ok(
        gpumeter(&["bank", "import", "--bank", location, s(file)]),
        "bank import",
    ))
}

/// `bank import --bank LOCATION -` with `input` on standard input.
fn import_stdin(location: &str, input: &[u8]) -> Output {
    let mut child = bin()
        .args(["bank", "import", "--bank", location, "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gpumeter");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("wait")
}

/// What must be the same on both sides: `bank verify`'s line, each tenant's balance (text
/// and JSON, at one instant), the history (JSON).
fn books(location: &str) -> Vec<String> {
    let mut out = vec![stdout(&ok(
        gpumeter(&["bank", "verify", "--bank", location]),
        "bank verify",
    ))];
    for tenant in ["acme", "beta", "gamma"] {
        for json in [false, true] {
            let mut args = vec![
                "bank",
                "balance",
                "--bank",
                location,
                "--tenant",
                tenant,
                "--at",
                "2027-01-01T00:00:00Z",
            ];
            if json {
                args.push("--json");
            }
            out.push(stdout(&ok(gpumeter(&args), "bank balance")));
        }
    }
    out.push(stdout(&ok(
        gpumeter(&["bank", "history", "--bank", location, "--json"]),
        "bank history",
    )));
    out
}

/// The export's lines as JSON.
fn lines(export: &[u8]) -> Vec<Value> {
    String::from_utf8(export.to_vec())
        .expect("UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Exports `source`, imports it at `target` from a file, and checks the books and the
/// export on both sides; returns the export.
fn moved(source: &Path, target: &str, dir: &Path) -> Vec<u8> {
    let bytes = export(s(source));
    let txs = lines(&bytes);
    assert!(txs.len() >= 7, "{} transactions", txs.len());
    let kinds: Vec<&str> = txs
        .iter()
        .map(|t| t["kind"].as_str().expect("kind"))
        .collect();
    for kind in ["grant", "finalize", "expire", "close"] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let file = dir.join("bank.jsonl");
    std::fs::write(&file, &bytes).expect("write the export");
    let head = txs.last().expect("a transaction")["hash"]
        .as_str()
        .expect("hash")
        .to_string();
    assert_eq!(
        import(target, &file),
        format!("imported {} transactions; head {head}\n", txs.len())
    );
    let before = books(s(source));
    assert!(before[0].contains(&format!("head {head}")), "{}", before[0]);
    assert_eq!(books(target), before, "the same books on both sides");
    assert_eq!(
        export(target),
        bytes,
        "the export of the import is the export"
    );
    bytes
}

// --- Round trips ----------------------------------------------------------------------------------

#[test]
fn a_bank_exported_from_sqlite_imports_into_sqlite_from_a_file_or_a_pipe() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = busy_bank(dir.path());
    let target = dir.path().join("copy.db");
    let bytes = moved(&source, s(&target), dir.path());

    // `-o FILE` writes the same bytes and says what it wrote; `-o -` is standard output.
    let file = dir.path().join("out.jsonl");
    let o = ok(
        gpumeter(&["bank", "export", "--bank", s(&source), "-o", s(&file)]),
        "export -o",
    );
    assert_eq!(std::fs::read(&file).expect("the export file"), bytes);
    let txs = lines(&bytes);
    assert_eq!(
        stdout(&o),
        format!(
            "exported {} transactions to {}; head {}\n",
            txs.len(),
            file.display(),
            txs.last().expect("a transaction")["hash"]
                .as_str()
                .expect("hash")
        )
    );
    assert_eq!(
        ok(
            gpumeter(&["bank", "export", "--bank", s(&source), "-o", "-"]),
            "export -o -"
        )
        .stdout,
        bytes
    );

    // From standard input.
    let piped = dir.path().join("piped.db");
    let o = ok(import_stdin(s(&piped), &bytes), "import -");
    assert!(
        stdout(&o).starts_with(&format!("imported {} transactions; head ", txs.len())),
        "{}",
        stdout(&o)
    );
    assert_eq!(books(s(&piped)), books(s(&source)));
}

#[test]
fn a_bank_exported_from_sqlite_imports_into_postgres_and_an_edited_posting_fails_verify() {
    let Some(schema) = gpumeter_test_postgres::Schema::fresh("cli_export_import") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let source = busy_bank(dir.path());
    let bytes = moved(&source, &schema.url, dir.path());

    // Editing any one posting on PostgreSQL: `bank verify` fails naming its transaction.
    let mut edited = 0;
    for t in lines(&bytes) {
        let seq = t["seq"].as_u64().expect("seq");
        let key = t["key"].as_str().expect("key");
        if t["postings"].as_array().is_none_or(Vec::is_empty) {
            continue;
        }
        let edit = |sign: &str| {
            let n = gpumeter_test_postgres::execute(
                &schema.url,
                &format!(
                    "UPDATE postings SET amount = amount {sign} 1 WHERE seq = {seq} AND idx = 0"
                ),
            )
            .expect("edit a posting on PostgreSQL");
            assert_eq!(n, 1, "posting {seq}/0");
        };
        edit("+");
        let e = fails(
            gpumeter(&["bank", "verify", "--bank", &schema.url]),
            &format!("verify after editing posting {seq}/0"),
        );
        assert!(
            e.contains(&format!("transaction {seq} (`{key}`)")),
            "posting {seq}/0: {e}"
        );
        edit("-");
        ok(
            gpumeter(&["bank", "verify", "--bank", &schema.url]),
            "verify after restoring",
        );
        edited += 1;
    }
    assert!(edited >= 6, "{edited} transactions edited");
}

// --- Refusals -------------------------------------------------------------------------------------

/// The export with line `n` (from 1) replaced by `f` of its JSON.
fn with_line(bytes: &[u8], n: usize, f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut txs = lines(bytes);
    f(&mut txs[n - 1]);
    txs.iter()
        .map(|t| format!("{t}\n"))
        .collect::<String>()
        .into_bytes()
}

/// Imports `input` (written to `name` in `dir`) into a new bank at `target`; expects exit 1
/// and returns the message. `target` then holds no transaction.
fn refused_into(target: &str, dir: &Path, name: &str, input: &[u8]) -> String {
    let file = dir.join(name);
    std::fs::write(&file, input).expect("write the input");
    let e = fails(
        gpumeter(&["bank", "import", "--bank", target, s(&file)]),
        name,
    );
    assert!(e.contains(&file.display().to_string()), "{name}: {e}");
    e
}

fn refusals(target: &dyn Fn(&str) -> (String, Option<gpumeter_test_postgres::Schema>)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = busy_bank(dir.path());
    let bytes = export(s(&source));
    let txs = lines(&bytes);
    let name = |n: usize| {
        format!(
            "transaction {} (`{}`)",
            txs[n - 1]["seq"],
            txs[n - 1]["key"].as_str().expect("key")
        )
    };

    // An amount edited: both postings of a grant moved by one, still balanced; the hash the
    // bank computes is not the line's.
    let edited = with_line(&bytes, 2, |t| {
        let p = t["postings"].as_array_mut().expect("postings");
        assert_eq!(p.len(), 2, "a grant's two postings");
        for (i, delta) in [(0, 1i64), (1, -1)] {
            let a: i64 = p[i]["amount"]
                .as_str()
                .expect("amount")
                .parse()
                .expect("whole credits");
            p[i]["amount"] = (a + delta).to_string().into();
        }
    });
    let (location, _schema) = target("amount");
    let e = refused_into(&location, dir.path(), "amount.jsonl", &edited);
    assert!(
        e.contains(&format!("amount.jsonl:2: {}", name(2))) && e.contains("edited"),
        "{e}"
    );
    // The bank was created (the input read well) but holds nothing.
    let v = stdout(&ok(
        gpumeter(&["bank", "verify", "--bank", &location]),
        "verify",
    ));
    assert!(v.starts_with("ok: 0 transactions"), "{v}");

    // A line moved, a line left out, a line that is not JSON: refused before the bank is
    // opened.
    let mut moved_line: Vec<&str> = std::str::from_utf8(&bytes)
        .expect("UTF-8")
        .lines()
        .collect();
    moved_line.swap(3, 4);
    let mut missing = moved_line.clone();
    missing.swap(3, 4);
    missing.remove(5);
    let mut garbage = missing.clone();
    garbage.insert(5, "{\"seq\": 6,");
    for (what, text, at) in [
        ("moved.jsonl", moved_line, format!(":4: {}", name(5))),
        ("missing.jsonl", missing, format!(":6: {}", name(7))),
        (
            "garbage.jsonl",
            garbage,
            ":6: not a transaction: ".to_string(),
        ),
    ] {
        let (location, _schema) = target(what);
        let input: String = text.iter().map(|l| format!("{l}\n")).collect();
        let e = refused_into(&location, dir.path(), what, input.as_bytes());
        assert!(e.contains(&format!("{what}{at}")), "{what}: {e}");
        if !location.starts_with("postgres") {
            assert!(!Path::new(&location).exists(), "{what}: no bank created");
        }
    }

    // A bank that holds transactions already: refused, unchanged.
    let (location, _schema) = target("busy");
    grant(
        Path::new(&location),
        &[
            "--tenant",
            "acme",
            "--credits",
            "1",
            "--rate",
            "1",
            "--key",
            "x",
        ],
    );
    let before = books_of(&location);
    let e = refused_into(&location, dir.path(), "busy.jsonl", &bytes);
    assert!(
        e.contains("the bank already holds 1 transactions") && e.contains("nothing was imported"),
        "{e}"
    );
    assert_eq!(books_of(&location), before);

    // The export itself imports: the refusals were the edits'.
    let (location, _schema) = target("fine");
    let file = dir.path().join("fine.jsonl");
    std::fs::write(&file, &bytes).expect("write");
    assert!(import(&location, &file).starts_with(&format!("imported {} ", txs.len())));
}

/// `bank history --json` and `bank verify` of `location`.
fn books_of(location: &str) -> (String, String) {
    (
        stdout(&ok(
            gpumeter(&["bank", "history", "--bank", location, "--json"]),
            "history",
        )),
        stdout(&ok(
            gpumeter(&["bank", "verify", "--bank", location]),
            "verify",
        )),
    )
}

#[test]
fn refused_imports_into_sqlite_import_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    refusals(&|label| {
        (
            dir.path()
                .join(format!("{label}.db"))
                .to_str()
                .expect("utf-8")
                .to_string(),
            None,
        )
    });
}

#[test]
fn refused_imports_into_postgres_import_nothing() {
    if gpumeter_test_postgres::server_for("cli_refusals").is_none() {
        return;
    }
    refusals(&|label| {
        let schema = gpumeter_test_postgres::Schema::fresh(&format!("cli_refusals_{label}"))
            .expect("the server");
        (schema.url.clone(), Some(schema))
    });
}

#[test]
fn a_missing_input_is_exit_1_and_creates_no_bank() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("new.db");
    let missing = dir.path().join("nope.jsonl");
    let e = fails(
        gpumeter(&["bank", "import", "--bank", s(&bank), s(&missing)]),
        "import of a missing file",
    );
    assert!(
        e.contains(&format!("{}: cannot open", missing.display())),
        "{e}"
    );
    assert!(!bank.exists());
    let e = fails(
        gpumeter(&["bank", "export", "--bank", s(&bank)]),
        "export of a missing bank",
    );
    assert!(e.contains(s(&bank)), "{e}");
    assert!(!bank.exists());
    assert_eq!(
        gpumeter(&["bank", "import", "--bank", s(&bank)])
            .status
            .code(),
        Some(2),
        "no FILE: a bad command line"
    );
}

#[test]
fn a_file_that_is_not_a_bank_is_refused_by_export_and_import_and_left_as_it_was() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a ledger\n").expect("write");
    let source = busy_bank(dir.path());
    let export_file = dir.path().join("bank.jsonl");
    std::fs::write(&export_file, export(s(&source))).expect("write the export");
    for args in [
        vec!["bank", "export", "--bank", s(&text)],
        vec!["bank", "import", "--bank", s(&text), s(&export_file)],
    ] {
        let e = fails(gpumeter(&args), &args.join(" "));
        assert!(e.contains(s(&text)), "{args:?}: {e}");
        assert_eq!(
            std::fs::read(&text).expect("read"),
            b"not a ledger\n",
            "{args:?}"
        );
    }
}
