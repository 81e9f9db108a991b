//! `fork()` while another thread is inside a call on a handle (docs/C_ABI.md, issue 30 item 18):
//! the child's calls on the parent's handles fail at once with `GM_ERR_FORKED` (before, its
//! first call waited forever for a lock that a thread of the parent held), handles made in the
//! child work, and the parent goes on. From C (`tests/c/fork.c`, also under ASan and UBSan)
//! and from Python (`tests/python/fork.py`, multiprocessing's fork start method), against the
//! installed shared library.
//!
//! To hold a handle's lock for certain, the program's thread makes a grant while this test
//! holds the ledger's write lock from its own process (rusqlite, `BEGIN IMMEDIATE`): the grant
//! waits inside the bank's lock for SQLite's busy timeout, and the program forks meanwhile.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{built, compile_c, have, root, sanitizer_env, SANITIZE};

/// Where the program makes its ledger (it opens the bank before it says "ready").
fn ledger(dir: &Path) -> PathBuf {
    dir.join("ledger.sqlite")
}

/// Runs a program that speaks the conversation of `tests/c/fork.c` and returns its output:
/// after "ready" the test takes the ledger's write lock, after the "child:" line it lets go.
fn converse(mut cmd: Command, ledger: &Path, what: &str) -> String {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let pid = child.id();
    // A watchdog: a program that hangs is killed, and the test fails on its output.
    let (done, wait) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if wait.recv_timeout(Duration::from_secs(120)).is_err() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    });
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut said = Vec::new();
    let mut next = |said: &mut Vec<String>| -> String {
        let l = lines
            .next()
            .unwrap_or_else(|| panic!("{what}: ended after {said:?}"))
            .expect("a line");
        said.push(l.clone());
        l
    };
    assert_eq!(next(&mut said), "ready", "{what}");
    let db = rusqlite::Connection::open(ledger).expect("open the ledger");
    db.execute_batch("BEGIN IMMEDIATE")
        .expect("the ledger's write lock");
    writeln!(stdin, "locked").expect("write");
    let verdict = next(&mut said);
    // The grant may go on.
    db.execute_batch("ROLLBACK").expect("rollback");
    drop(db);
    while let Some(Ok(l)) = lines.next() {
        said.push(l);
    }
    let status = child.wait().expect("wait");
    let _ = done.send(());
    watchdog.join().expect("watchdog");
    let out = said.join("\n");
    assert_eq!(verdict, "child: ok", "{what}: {out}");
    assert!(status.success(), "{what}: {status}: {out}");
    out
}

#[test]
fn a_child_after_fork_is_refused_at_once_from_c() {
    if !have("gcc", "--version", "the fork program was not built") {
        return;
    }
    let b = built();
    let tmp = tempfile::tempdir().expect("temp dir");
    let source = root().join("crates/gpumeter-ffi/tests/c/fork.c");
    let recording = root().join("examples/data/h200-cuda13-smoke.gmr");
    for (name, extra) in [("plain", &[][..]), ("ASan and UBSan", &SANITIZE[..])] {
        let program = tmp.path().join(format!("fork-{}", name.len()));
        let mut flags = vec!["-pthread"];
        flags.extend_from_slice(extra);
        compile_c(
            &program,
            std::slice::from_ref(&source),
            &flags,
            &b.dynamic_args(),
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let ledger = ledger(dir.path());
        let mut cmd = Command::new(&program);
        cmd.arg(&ledger).arg(&recording);
        sanitizer_env(&mut cmd);
        let out = converse(cmd, &ledger, &format!("fork.c ({name})"));
        assert!(
            out.contains("grant: 0") && out.ends_with("ok"),
            "{name}: {out}"
        );
    }
}

#[test]
fn a_child_after_fork_is_refused_at_once_from_python() {
    if !have("python3", "--version", "the Python fork script was not run") {
        return;
    }
    let b = built();
    let dir = tempfile::tempdir().expect("temp dir");
    let ledger = ledger(dir.path());
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("crates/gpumeter-ffi/tests/python/fork.py"))
        .arg(&ledger)
        .env("GPUMETER_FFI_LIB", b.shared());
    let out = converse(cmd, &ledger, "fork.py");
    assert!(out.contains("grant: 0") && out.ends_with("ok"), "{out}");
}
