//! Outputs never destroy inputs, and are written whole (issue 30 item 14, docs/ARCHITECTURE.md, "Documents"): an
//! output that names an input of any kind (a usage input, the price book, the bank and its
//! SQLite files, a tenant map, a device catalog, an opening report, an events map, standard
//! input's file), another output or standard output is exit 2 before anything is read or
//! written, compared by identity (hard and symbolic links too); a write cut short by a
//! file-size limit (`ulimit -f`, standing in for a full disk) leaves the old file or none, and
//! no temporary file; a symbolic link and a file's mode are kept; `/dev/null` is written, not
//! replaced.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
use common::*;

/// Garbage that no reader accepts: an input holding it is refused if it is read (exit 1),
/// so exit 2 shows the command line was refused before.
const GARBAGE: &[u8] = b"\x00\x01 not any input format \xff\xfe";

/// A directory of inputs: garbage under every input's name, and a bank.
struct Inputs {
    dir: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Inputs {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for name in [
            "trace.json.gz",
            "book.toml",
            "map.toml",
            "devices.toml",
            "opening.json",
            "events-map.toml",
            "export.jsonl",
            "old.csv",
            "bank.sqlite",
            "bank.sqlite-wal",
        ] {
            std::fs::write(dir.path().join(name), GARBAGE).expect("an input");
        }
        std::fs::hard_link(
            dir.path().join("trace.json.gz"),
            dir.path().join("hard-link.json.gz"),
        )
        .expect("a hard link");
        std::os::unix::fs::symlink("book.toml", dir.path().join("link.toml")).expect("a link");
        Inputs { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Every file here and its bytes.
    fn snapshot(&self) -> Vec<(String, Vec<u8>)> {
        let mut all: Vec<(String, Vec<u8>)> = std::fs::read_dir(self.dir.path())
            .expect("the directory")
            .map(|e| {
                let e = e.expect("an entry");
                let bytes = std::fs::read(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), bytes)
            })
            .collect();
        all.sort();
        all
    }
}

/// Runs `gpumeter args` in the inputs' directory (arguments are names there).
fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run gpumeter")
}

fn refused(o: &Output, what: &str, says: &str) {
    assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(o));
    assert!(stdout(o).is_empty(), "{what}: {}", stdout(o));
    let e = stderr(o);
    assert!(e.contains(says), "{what}: {e}");
    assert_eq!(e.lines().count(), 1, "{what}: {e}");
}

#[test]
fn outputs_naming_inputs_other_outputs_or_standard_output_are_refused_before_any_read() {
    let i = Inputs::new();
    let before = i.snapshot();
    let input = "the input (trace.json.gz)";
    let book = "the file given to --prices (book.toml)";
    let cases: &[(&[&str], &str)] = &[
        // Two outputs of one command.
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--csv",
                "x",
                "--html",
                "x",
            ],
            "--csv and --html name the same file (x)",
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--csv",
                "old.csv",
                "--html",
                "./old.csv",
            ],
            "--csv and --html name the same file",
        ),
        // Each kind of input.
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--csv",
                "book.toml",
            ],
            book,
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--html",
                "trace.json.gz",
            ],
            input,
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--html",
                "hard-link.json.gz",
            ],
            input,
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--csv",
                "link.toml",
            ],
            book,
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--bank",
                "bank.sqlite",
                "--csv",
                "bank.sqlite",
            ],
            "the file given to --bank (bank.sqlite)",
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--bank",
                "bank.sqlite",
                "--html",
                "bank.sqlite-wal",
            ],
            "the bank's -wal file (bank.sqlite-wal)",
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--tenant-map",
                "map.toml",
                "--csv",
                "map.toml",
            ],
            "the file given to --tenant-map (map.toml)",
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--devices",
                "devices.toml",
                "--html",
                "devices.toml",
            ],
            "the file given to --devices (devices.toml)",
        ),
        (
            &[
                "usage",
                "trace.json.gz",
                "--opening",
                "opening.json",
                "--events",
                "opening.json",
            ],
            "the file given to --opening (opening.json)",
        ),
        (
            &["usage", "trace.json.gz", "--events", "trace.json.gz"],
            input,
        ),
        (
            &[
                "usage",
                "trace.json.gz",
                "--events-map",
                "events-map.toml",
                "--events",
                "events-map.toml",
            ],
            "the file given to --events-map (events-map.toml)",
        ),
        // Standard output, where the report goes.
        (
            &["usage", "trace.json.gz", "--events", "/dev/stdout"],
            "--events /dev/stdout is standard output",
        ),
        (
            &[
                "preview",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--csv",
                "/dev/stdout",
            ],
            "--csv /dev/stdout is standard output",
        ),
        // The bank's commands.
        (
            &[
                "bank",
                "export",
                "--bank",
                "bank.sqlite",
                "-o",
                "bank.sqlite",
            ],
            "the file given to --bank (bank.sqlite)",
        ),
        (
            &[
                "bank",
                "export",
                "--bank",
                "bank.sqlite",
                "-o",
                "bank.sqlite-wal",
            ],
            "the bank's -wal file",
        ),
        (
            &["bank", "import", "--bank", "export.jsonl", "export.jsonl"],
            "--bank export.jsonl is the export to import (export.jsonl)",
        ),
        (
            &[
                "invoice",
                "finalize",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--bank",
                "trace.json.gz",
            ],
            input,
        ),
        (
            &[
                "invoice",
                "finalize",
                "trace.json.gz",
                "--prices",
                "book.toml",
                "--bank",
                "link.toml",
            ],
            book,
        ),
    ];
    for (args, says) in cases {
        let o = run_in(i.dir.path(), args);
        refused(&o, &args.join(" "), says);
        assert_eq!(i.snapshot(), before, "{}: a file changed", args.join(" "));
    }
}

/// Standard input read as an input (`-`) from a file, and standard output redirected to an
/// input: both are that input.
#[test]
fn standard_input_and_output_files_are_inputs_too() {
    let i = Inputs::new();
    let before = i.snapshot();
    let stdin = std::fs::File::open(i.path("trace.json.gz")).expect("the input");
    let o = bin()
        .current_dir(i.dir.path())
        .args(["usage", "-", "--events", "trace.json.gz"])
        .stdin(stdin)
        .output()
        .expect("run gpumeter");
    refused(
        &o,
        "usage - --events <stdin's file>",
        "the file read as standard input",
    );
    // `>>`: the shell keeps the file, which is then both the input and standard output.
    let out = std::fs::OpenOptions::new()
        .append(true)
        .open(i.path("trace.json.gz"))
        .expect("the input");
    let o = bin()
        .current_dir(i.dir.path())
        .args(["usage", "trace.json.gz", "--json"])
        .stdout(out)
        .stderr(Stdio::piped())
        .output()
        .expect("run gpumeter");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("standard output is the input (trace.json.gz)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(i.snapshot(), before);
}

/// `record --out` naming the injection library or the command's program (which `record`
/// would remove before running the command) is exit 2, and both stay.
#[test]
fn record_never_replaces_its_library_or_program() {
    let i = Inputs::new();
    let lib = i.path("libgpumeter_inject.so");
    std::fs::write(&lib, b"a library").expect("a library");
    let program = i.path("train.sh");
    std::fs::write(&program, b"#!/bin/sh\nexit 0\n").expect("a program");
    let o = gpumeter(&[
        "record",
        "--inject-lib",
        s(&lib),
        "--out",
        s(&lib),
        "--",
        "sh",
        "-c",
        "true",
    ]);
    refused(&o, "record --out LIB", "is the injection library");
    let o = gpumeter(&[
        "record",
        "--inject-lib",
        s(&lib),
        "--out",
        s(&program),
        "--",
        s(&program),
    ]);
    refused(&o, "record --out PROGRAM", "is the command's program");
    assert_eq!(std::fs::read(&lib).expect("the library"), b"a library");
    assert_eq!(
        std::fs::read(&program).expect("the program"),
        b"#!/bin/sh\nexit 0\n"
    );
}

/// `gpumeter ARGS` under a file-size limit of one block (`ulimit -f 1`: 512 or 1024 bytes by
/// the shell), as a full disk would cut a write short.
fn limited(dir: &Path, args: &[&str]) -> Output {
    Command::new("sh")
        .current_dir(dir)
        .arg("-c")
        .arg("ulimit -f 1 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_gpumeter"))
        .args(args)
        .output()
        .expect("run gpumeter under a file-size limit")
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

/// Each output, cut short by the limit, is exit 1 naming it, leaves an old file as it was and
/// makes no new one, nor a temporary file beside it. Before issue 30 the events file kept its
/// first lines and a torn one (SIGXFSZ ended the process mid-write).
#[test]
fn a_write_cut_short_leaves_the_old_file_or_none() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path();
    let (ex, bk) = (example(), book());
    // A bank whose export is over 1 KiB.
    let bank = d.join("bank.sqlite");
    for k in 0..3 {
        ok(
            gpumeter(&[
                "bank",
                "grant",
                "--bank",
                s(&bank),
                "--tenant",
                "acme",
                "--credits",
                "5",
                "--rate",
                "1",
                "--key",
                &format!("k{k}"),
            ]),
            "bank grant",
        );
    }
    // SQLite makes the bank's `-shm` file when it first opens it, which the limit forbids:
    // this connection keeps it made (and the export's read needs no larger one).
    let keep = rusqlite::Connection::open(&bank).expect("the bank");
    let _: i64 = keep
        .query_row("SELECT count(*) FROM transactions", [], |r| r.get(0))
        .expect("reading the bank");
    std::fs::create_dir(d.join("man")).expect("a directory for the pages");
    let outputs: Vec<(&str, Vec<String>)> = vec![
        (
            "events.jsonl",
            vec![
                "usage".into(),
                s(&ex).into(),
                "--events".into(),
                "events.jsonl".into(),
            ],
        ),
        (
            "invoices.csv",
            vec![
                "preview".into(),
                s(&ex).into(),
                "--prices".into(),
                s(&bk).into(),
                "--csv".into(),
                "invoices.csv".into(),
            ],
        ),
        (
            "invoices.html",
            vec![
                "preview".into(),
                s(&ex).into(),
                "--prices".into(),
                s(&bk).into(),
                "--html".into(),
                "invoices.html".into(),
            ],
        ),
        (
            "export.jsonl",
            vec![
                "bank".into(),
                "export".into(),
                "--bank".into(),
                s(&bank).into(),
                "-o".into(),
                "export.jsonl".into(),
            ],
        ),
        (
            "man/gpumeter.1",
            vec!["man".into(), "--dir".into(), "man".into()],
        ),
    ];
    for (file, args) in &outputs {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let path = d.join(file);
        // Whole without the limit, and over it.
        ok(run_in(d, &args), file);
        let whole = std::fs::read(&path).expect("the whole output");
        assert!(whole.len() > 1024, "{file}: {} bytes", whole.len());
        // An old file stays as it was.
        std::fs::write(&path, b"old\n").expect("an old file");
        let listed = names(d);
        let listed_man = names(&d.join("man"));
        let o = limited(d, &args);
        assert_eq!(o.status.code(), Some(1), "{file}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("cannot write"),
            "{file}: {}",
            stderr(&o)
        );
        assert!(
            stderr(&o).contains("File too large"),
            "{file}: {}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read(&path).expect("the old file"),
            b"old\n",
            "{file}"
        );
        assert_eq!(names(d), listed, "{file}: a temporary file was left");
        assert_eq!(
            names(&d.join("man")),
            listed_man,
            "{file}: a temporary file was left"
        );
        // No file makes none.
        std::fs::remove_file(&path).expect("removing the old file");
        let o = limited(d, &args);
        assert_eq!(o.status.code(), Some(1), "{file}: {}", stderr(&o));
        assert!(!path.exists(), "{file}: a part was written");
        let mut without: Vec<String> = listed.clone();
        if !file.contains('/') {
            without.retain(|n| n != file);
        }
        assert_eq!(names(d), without, "{file}: a temporary file was left");
        if file.contains('/') {
            assert!(
                names(&d.join("man")).iter().all(|n| !n.ends_with(".tmp")),
                "{:?}",
                names(&d.join("man"))
            );
        }
    }
}

/// A symbolic link output stays a link (its target is replaced), a file keeps its mode, and
/// `/dev/null` (twice, as both renderings, or with standard output there too) is written to,
/// not replaced.
#[test]
fn links_modes_and_devices_survive_an_output() {
    use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path();
    let (ex, bk) = (example(), book());
    let target = d.join("target.csv");
    std::fs::write(&target, b"old").expect("a target");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    std::os::unix::fs::symlink("target.csv", d.join("link.csv")).expect("a link");
    ok(
        run_in(
            d,
            &["preview", s(&ex), "--prices", s(&bk), "--csv", "link.csv"],
        ),
        "preview --csv link.csv",
    );
    let link = std::fs::symlink_metadata(d.join("link.csv")).expect("the link");
    assert!(link.file_type().is_symlink(), "the link was replaced");
    let m = std::fs::metadata(&target).expect("the target");
    assert_eq!(m.permissions().mode() & 0o777, 0o640);
    assert!(std::fs::read_to_string(&target)
        .expect("the csv")
        .contains(','));
    ok(
        gpumeter(&[
            "preview",
            s(&ex),
            "--prices",
            s(&bk),
            "--csv",
            "/dev/null",
            "--html",
            "/dev/null",
        ]),
        "preview to /dev/null",
    );
    // Standard output on /dev/null too: nothing to destroy, no conflict.
    let o = bin()
        .args(["preview", s(&ex), "--prices", s(&bk), "--csv", "/dev/null"])
        .stdout(Stdio::null())
        .output()
        .expect("run gpumeter");
    assert!(o.status.success(), "{}", stderr(&o));
    let null = std::fs::metadata("/dev/null").expect("/dev/null");
    assert!(null.file_type().is_char_device(), "/dev/null was replaced");
}

/// `-` as an output is standard output, as `--events -` and `bank export -o -` say. Where the
/// command writes its own output there (`preview`'s invoices, the command `record` runs), it
/// is exit 2 as `/dev/stdout` is, and a file named `-` (here an input, and the program
/// `record` would run) stays as it was; before, `--csv -`, `--html -` and `record --out -`
/// wrote or removed `./-`, unchecked.
#[test]
fn a_dash_output_is_standard_output_never_a_file_named_dash() {
    let i = Inputs::new();
    std::fs::write(i.path("-"), GARBAGE).expect("an input named -");
    let lib = i.path("libgpumeter_inject.so");
    std::fs::write(&lib, b"a library").expect("a library");
    let before = i.snapshot();
    let preview = ["preview", "./-", "--prices", "book.toml"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [&preview[..], &["--html", "-"]].concat(),
            "--html - is standard output",
        ),
        (
            [&preview[..], &["--csv", "-"]].concat(),
            "--csv - is standard output",
        ),
        (
            [&preview[..], &["--csv", "-", "--html", "-"]].concat(),
            "is standard output",
        ),
        // `./-` is the file named `-`: the input.
        (
            [&preview[..], &["--html", "./-"]].concat(),
            "is the input (./-)",
        ),
        (
            vec![
                "record",
                "--inject-lib",
                "libgpumeter_inject.so",
                "--out",
                "-",
                "--",
                "./-",
            ],
            "--out - is standard output",
        ),
        (
            vec![
                "record",
                "--inject-lib",
                "libgpumeter_inject.so",
                "--out",
                "./-",
                "--",
                "./-",
            ],
            "is the command's program",
        ),
    ];
    for (args, says) in &cases {
        let o = run_in(i.dir.path(), args);
        refused(&o, &args.join(" "), says);
        assert_eq!(i.snapshot(), before, "{}: a file changed", args.join(" "));
    }
}

/// An output that is a symbolic link to a file not made yet (a dangling link, or a chain of
/// relative links) is the file it leads to: the same file as another output, or as the bank's
/// `-journal`, is exit 2 (before, the check compared the link's own name and the second
/// write replaced the first, or the export went into the bank's journal).
#[test]
fn a_link_to_a_file_not_made_yet_is_that_file() {
    let i = Inputs::new();
    let d = i.dir.path();
    std::os::unix::fs::symlink("t.csv", d.join("l")).expect("a dangling link");
    std::fs::create_dir(d.join("sub")).expect("a directory");
    std::os::unix::fs::symlink("../l", d.join("sub/l2")).expect("a link to the link");
    std::os::unix::fs::symlink("bank.sqlite-journal", d.join("out.jsonl")).expect("a link");
    let before = i.snapshot();
    let preview = ["preview", "trace.json.gz", "--prices", "book.toml"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [&preview[..], &["--csv", "t.csv", "--html", "l"]].concat(),
            "--csv and --html name the same file (l)",
        ),
        (
            [&preview[..], &["--csv", "l", "--html", "sub/l2"]].concat(),
            "--csv and --html name the same file (sub/l2)",
        ),
        (
            vec!["bank", "export", "--bank", "bank.sqlite", "-o", "out.jsonl"],
            "the bank's -journal file (bank.sqlite-journal)",
        ),
    ];
    for (args, says) in &cases {
        let o = run_in(d, args);
        refused(&o, &args.join(" "), says);
        assert_eq!(i.snapshot(), before, "{}: a file changed", args.join(" "));
        assert!(!d.join("t.csv").exists(), "{}", args.join(" "));
    }
}

/// The bank given through a symbolic link keeps its `-wal`, `-shm` and `-journal` beside the
/// file the link leads to, where SQLite makes them: an output naming those is exit 2 (before,
/// only `<link>-wal` was protected and an export replaced the live WAL).
#[test]
fn a_linked_bank_protects_the_files_beside_its_target() {
    let i = Inputs::new();
    let d = i.dir.path();
    std::fs::create_dir(d.join("data")).expect("a directory");
    std::fs::write(d.join("data/real.sqlite"), GARBAGE).expect("a bank");
    std::fs::write(d.join("data/real.sqlite-wal"), GARBAGE).expect("its wal");
    std::os::unix::fs::symlink("data/real.sqlite", d.join("linked.sqlite")).expect("a link");
    let before = i.snapshot();
    let data_before = std::fs::read(d.join("data/real.sqlite-wal")).expect("the wal");
    for (out, says) in [
        (
            "data/real.sqlite-wal",
            "the bank's -wal file (data/real.sqlite-wal)",
        ),
        (
            "data/real.sqlite-shm",
            "the bank's -shm file (data/real.sqlite-shm)",
        ),
    ] {
        let args = ["bank", "export", "--bank", "linked.sqlite", "-o", out];
        let o = run_in(d, &args);
        refused(&o, &args.join(" "), says);
        assert_eq!(i.snapshot(), before, "{}: a file changed", args.join(" "));
        assert_eq!(
            std::fs::read(d.join("data/real.sqlite-wal")).expect("the wal"),
            data_before
        );
        assert!(!d.join("data/real.sqlite-shm").exists());
    }
}

/// An output through a dangling symbolic link makes the file the link leads to, and the link
/// stays a link (before, the link was replaced by a regular file).
#[test]
fn an_output_through_a_dangling_link_makes_its_target() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path();
    let (ex, bk) = (example(), book());
    std::fs::create_dir(d.join("out")).expect("a directory");
    std::os::unix::fs::symlink("out/made.csv", d.join("link.csv")).expect("a dangling link");
    ok(
        run_in(
            d,
            &["preview", s(&ex), "--prices", s(&bk), "--csv", "link.csv"],
        ),
        "preview --csv link.csv",
    );
    let link = std::fs::symlink_metadata(d.join("link.csv")).expect("the link");
    assert!(link.file_type().is_symlink(), "the link was replaced");
    assert!(std::fs::read_to_string(d.join("out/made.csv"))
        .expect("the csv made through the link")
        .contains(','));
}
