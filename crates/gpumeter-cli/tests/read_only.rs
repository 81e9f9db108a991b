//! A read-only bank is readable (issue 30 item 15, docs/BANK.md, "Reading a bank"): `bank verify`,
//! `balance`, `history`, `export` and `preview --bank` on a read-only file, in a read-only
//! directory, and beside a writer holding the write lock, each giving what it gives on a
//! writable bank and leaving no file beside it; `history --tenant` lists the tenant's
//! expiries; `/dev/null` and a bad schema version are one-line errors without a `-journal`.
//!
//! Permissions do not bind root, so when the tests run as root (CI's container) the readers
//! run as the user `nobody` (uid and gid 65534), for whom the modes below are what they say.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::*;

/// Whether this process runs as root: the owner of a file it makes.
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let f = tempfile::NamedTempFile::new().expect("a temporary file");
    f.as_file().metadata().expect("its metadata").uid() == 0
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", path.display()));
}

/// `gpumeter args` as a reader whom permissions bind: this user, or `nobody` under root.
fn as_reader(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpumeter"));
    cmd.args(args).current_dir("/");
    if running_as_root() {
        use std::os::unix::process::CommandExt as _;
        cmd.uid(65534).gid(65534);
    }
    cmd.output().expect("run gpumeter as a reader")
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("the directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

/// The reading commands on `bank`, their export written to `out` (a file in a directory the
/// reader may write), as (what, standard output).
fn read_all(bank: &Path, out: &Path, run: &dyn Fn(&[&str]) -> Output) -> Vec<(String, String)> {
    let (ex, bk) = (example(), book());
    let b = s(bank);
    let commands: Vec<Vec<&str>> = vec![
        vec!["bank", "verify", "--bank", b],
        vec![
            "bank",
            "balance",
            "--bank",
            b,
            "--tenant",
            "unattributed",
            "--at",
            "2027-01-01T00:00:00Z",
            "--json",
        ],
        vec!["bank", "history", "--bank", b, "--json"],
        vec!["bank", "history", "--bank", b, "--tenant", "unattributed"],
        vec!["bank", "export", "--bank", b],
        vec!["bank", "export", "--bank", b, "-o", s(out)],
        vec!["preview", s(&ex), "--prices", s(&bk), "--bank", b, "--json"],
    ];
    commands
        .iter()
        .map(|args| {
            let what = args.join(" ");
            let o = run(args);
            assert!(
                o.status.success(),
                "{what}: exit {:?}: {}",
                o.status.code(),
                stderr(&o)
            );
            let mut text = stdout(&o);
            if args.contains(&"-o") {
                text.push_str(&std::fs::read_to_string(out).expect("the export"));
                std::fs::remove_file(out).expect("removing the export");
            }
            (what, text)
        })
        .collect()
}

/// A bank with a grant to `unattributed`, the example's tenant (so a preview burns credits).
fn a_bank(dir: &Path) -> std::path::PathBuf {
    let bank = dir.join("bank.sqlite");
    ok(
        gpumeter(&[
            "bank",
            "grant",
            "--bank",
            s(&bank),
            "--tenant",
            "unattributed",
            "--credits",
            "20",
            "--rate",
            "0.5",
            "--from",
            "2025-01-01T00:00:00Z",
            "--key",
            "g1",
        ]),
        "bank grant",
    );
    bank
}

/// `gpumeter bank grant` of 1 credit at 1 to tenant `a` in the bank at `bank`.
fn grant_args(bank: &str) -> Vec<&str> {
    vec![
        "bank",
        "grant",
        "--bank",
        bank,
        "--tenant",
        "a",
        "--credits",
        "1",
        "--rate",
        "1",
    ]
}

#[test]
fn every_reader_works_on_a_read_only_bank_and_beside_a_writer() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    chmod(dir.path(), 0o755);
    let home = dir.path().join("bank");
    std::fs::create_dir(&home).expect("the bank's directory");
    let bank = a_bank(&home);
    let exports = dir.path().join("exports");
    std::fs::create_dir(&exports).expect("a directory for exports");
    chmod(&exports, 0o777);
    let out = exports.join("export.jsonl");
    let reference = read_all(&bank, &out, &|a| gpumeter(a));
    assert!(
        reference[0].1.starts_with("ok: 1 transactions"),
        "{reference:?}"
    );
    for (file_mode, dir_mode) in [(0o444, 0o555), (0o444, 0o777), (0o666, 0o555)] {
        let layout = format!("bank {file_mode:o} in a directory {dir_mode:o}");
        chmod(&bank, file_mode);
        chmod(&home, dir_mode);
        let before = names(&home);
        let read = read_all(&bank, &out, &as_reader);
        chmod(&home, 0o755);
        chmod(&bank, 0o644);
        assert_eq!(read, reference, "{layout}");
        assert_eq!(
            names(&home),
            before,
            "{layout}: a file was left beside the bank"
        );
    }
    // A writer holds the write lock with a change not committed: every reader reads the bank
    // as committed, without waiting for the writer (before issue 30 each waited 30 s and
    // failed, blaming "the migration").
    let writer = rusqlite::Connection::open(&bank).expect("a writer");
    writer
        .execute_batch(
            "BEGIN IMMEDIATE; INSERT INTO meta (name, value) VALUES ('held', 'by the test')",
        )
        .expect("holding the write lock");
    let read = read_all(&bank, &out, &as_reader);
    assert_eq!(read, reference, "beside a writer");
    writer.execute_batch("ROLLBACK").expect("rolling back");
}

/// `history --tenant` lists the tenant's expiries: an expiry names no tenant (it moves every
/// expired grant's credits at once) but posts to the tenant's credits account. A tenant with
/// no expired grant is not shown the expiry.
#[test]
fn history_of_a_tenant_lists_its_expiries() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bank = dir.path().join("bank.sqlite");
    let b = s(&bank);
    for (tenant, expires) in [
        ("acme", Some("2026-02-01T00:00:00Z")),
        ("bob", Some("2026-02-01T00:00:00Z")),
        ("carol", None),
    ] {
        let mut args = vec![
            "bank",
            "grant",
            "--bank",
            b,
            "--tenant",
            tenant,
            "--credits",
            "5",
            "--rate",
            "1",
            "--from",
            "2026-01-01T00:00:00Z",
        ];
        if let Some(e) = expires {
            args.extend(["--expires", e]);
        }
        ok(gpumeter(&args), "bank grant");
    }
    ok(
        gpumeter(&[
            "bank",
            "expire",
            "--bank",
            b,
            "--at",
            "2026-03-01T00:00:00Z",
        ]),
        "bank expire",
    );
    let kinds = |tenant: &str| -> Vec<String> {
        json(&gpumeter(&[
            "bank", "history", "--bank", b, "--tenant", tenant, "--json",
        ]))
        .as_array()
        .expect("an array")
        .iter()
        .map(|t| t["kind"].as_str().expect("a kind").to_string())
        .collect()
    };
    assert_eq!(kinds("acme"), ["grant", "expire"]);
    assert_eq!(kinds("bob"), ["grant", "expire"]);
    assert_eq!(kinds("carol"), ["grant"]);
    let text = stdout(&ok(
        gpumeter(&["bank", "history", "--bank", b, "--tenant", "acme"]),
        "bank history",
    ));
    assert!(text.contains(" expire - expire:"), "{text}");
    assert!(text.contains("tenant:acme:credits:"), "{text}");
}

/// `/dev/null` as a bank is refused in one line by readers and writers alike, leaving no
/// `/dev/null-journal` (root may write /dev); a bank whose schema version reads 0 is one line,
/// not the first migration's SQL.
#[test]
fn a_bank_that_is_no_file_or_of_version_0_is_one_line() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for args in [
        vec!["bank", "verify", "--bank", "/dev/null"],
        grant_args("/dev/null"),
    ] {
        let o = gpumeter(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
        for suffix in ["-journal", "-wal", "-shm"] {
            assert!(
                !Path::new(&format!("/dev/null{suffix}")).exists(),
                "{args:?}"
            );
        }
    }
    let bank = a_bank(dir.path());
    rusqlite::Connection::open(&bank)
        .and_then(|c| {
            c.execute(
                "UPDATE meta SET value = '0' WHERE name = 'schema_version'",
                [],
            )
        })
        .expect("editing the version");
    for args in [
        vec!["bank", "verify", "--bank", s(&bank)],
        grant_args(s(&bank)),
    ] {
        let o = gpumeter(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("`schema_version` is 0"), "{e}");
        assert!(!e.contains("CREATE"), "{e}");
    }
}

/// A `--bank` location that begins with `file:` is never taken as an SQLite URI (which SQLite
/// would open whatever the CLI checked: `file:/dev/null` made `/dev/null-journal`, and
/// `file:BANK` wrote BANK while the output check saw another file): it is refused, one line,
/// exit 1 as other locations no bank has, and nothing is written; `./file:…` is a file so named.
#[test]
fn a_file_uri_is_no_bank_location() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let bank = a_bank(dir.path());
    let before = std::fs::read(&bank).expect("the bank");
    let names_before = names(dir.path());
    let uri = format!("file:{}", s(&bank));
    let null_journal = Path::new("/dev/null-journal").exists();
    for args in [
        [grant_args(&uri), vec!["--from", "2025-01-01T00:00:00Z"]].concat(),
        vec!["bank", "verify", "--bank", &uri],
        [
            grant_args("file:/dev/null"),
            vec!["--from", "2025-01-01T00:00:00Z"],
        ]
        .concat(),
    ] {
        let o = gpumeter(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains("an SQLite URI"), "{e}");
        assert_eq!(std::fs::read(&bank).expect("the bank"), before, "{args:?}");
        assert_eq!(names(dir.path()), names_before, "{args:?}");
        assert_eq!(
            Path::new("/dev/null-journal").exists(),
            null_journal,
            "{args:?}"
        );
    }
    // `./file:x` is the file so named: a new bank there.
    let o = Command::new(env!("CARGO_BIN_EXE_gpumeter"))
        .current_dir(dir.path())
        .args([
            "bank",
            "grant",
            "--bank",
            "./file:x.sqlite",
            "--tenant",
            "a",
            "--credits",
            "1",
            "--rate",
            "1",
            "--from",
            "2025-01-01T00:00:00Z",
        ])
        .output()
        .expect("run gpumeter");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("file:x.sqlite").is_file());
}
