//! The command-line habits of issue 14 item 3: `-` as standard input, shell completions, the
//! man page, progress on a terminal only, `--color` and `NO_COLOR`, `--quiet`, `recording
//! show`'s text, and `record`'s build hint for a missing injection library.
//!
//! A terminal is a pty made by util-linux `script` (Debian's essential `bsdutils`); the
//! progress test holds standard input open (a FIFO) until the spinner is on the terminal, so
//! it waits for an event, never for a time.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::*;

/// Every subcommand of `gpumeter`, as `--help` lists them.
const SUBCOMMANDS: [&str; 11] = [
    "usage",
    "preview",
    "invoice",
    "bank",
    "record",
    "agent",
    "recording",
    "prices",
    "completions",
    "man",
    "help",
];

/// Runs `gpumeter args…` with `input` on standard input.
fn with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpumeter");
    let mut stdin = child.stdin.take().expect("stdin");
    let bytes = input.to_vec();
    // A writer thread: a command that stops reading early must not block the test.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().expect("writer");
    out
}

/// A report's JSON with its own digest removed and `name` written as `<stdin>` everywhere
/// (the source name and the device keys made from it).
fn as_if_from_stdin(report: &Value, name: &str) -> Value {
    let mut v: Value =
        serde_json::from_str(&report.to_string().replace(name, "<stdin>")).expect("JSON");
    v.as_object_mut().expect("object").remove("sha256");
    v
}

fn without_digest(report: &Value) -> Value {
    let mut v = report.clone();
    v.as_object_mut().expect("object").remove("sha256");
    v
}

/// `-` reads standard input: the shipped example (gzip Kineto) and a raw CUPTI buffer give the
/// report of the same file but for its name, `<stdin>` (the source's SHA-256 is that of the
/// bytes), for `usage`, `preview` and `invoice finalize`.
#[test]
fn a_dash_reads_standard_input_with_the_format_detected_from_the_bytes() {
    let example = example();
    let bytes = std::fs::read(&example).expect("example");
    let from_file = json(&gpumeter(&["usage", "--json", s(&example)]));
    let from_stdin = json(&with_stdin(&["usage", "--json", "-"], &bytes));
    validate("gpumeter.usage.v1.schema.json", &from_stdin);
    assert_eq!(from_stdin["sources"][0]["name"], "<stdin>");
    assert_eq!(from_stdin["sources"][0]["format"], "kineto");
    assert_eq!(
        from_stdin["sources"][0]["sha256"],
        from_file["sources"][0]["sha256"]
    );
    assert_eq!(
        without_digest(&from_stdin),
        as_if_from_stdin(&from_file, "finetune-2xh100.json.gz")
    );
    // The text report names it too.
    let text = stdout(&with_stdin(&["usage", "-"], &bytes));
    assert!(text.contains("<stdin>  kineto"), "{text}");

    // A raw CUPTI buffer: detected from its first record's kind.
    let buffer = super::kernel_and_memory_buffer(0x0123_4567, 1_793_606_160_000_000_000, &[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("one.cupti");
    std::fs::write(&file, &buffer).expect("write");
    let from_file = json(&gpumeter(&["usage", "--json", s(&file)]));
    let from_stdin = json(&with_stdin(&["usage", "--json", "-"], &buffer));
    assert_eq!(from_stdin["sources"][0]["format"], "cupti");
    assert_eq!(super::meter_total(&from_stdin, "kernel_launches"), 1);
    assert_eq!(
        without_digest(&from_stdin),
        as_if_from_stdin(&from_file, "one.cupti")
    );

    // With a file: both metered, standard input named <stdin>.
    let both = json(&with_stdin(&["usage", "--json", s(&example), "-"], &buffer));
    let names: Vec<&str> = both["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert!(
        names.contains(&"<stdin>") && names.contains(&"finetune-2xh100.json.gz"),
        "{names:?}"
    );

    // preview and invoice finalize: the same lines as from the file.
    let book = book();
    let lines = |doc: &Value| doc["invoices"][0]["lines"].clone();
    let preview_file = json(&gpumeter(&[
        "preview",
        s(&example),
        "--prices",
        s(&book),
        "--json",
    ]));
    let preview_stdin = json(&with_stdin(
        &["preview", "-", "--prices", s(&book), "--json"],
        &bytes,
    ));
    validate("gpumeter.invoice.v1.schema.json", &preview_stdin);
    assert!(lines(&preview_file)
        .as_array()
        .is_some_and(|l| !l.is_empty()));
    assert_eq!(lines(&preview_stdin), lines(&preview_file));
    let bank = dir.path().join("bank.db");
    let finalized = json(&with_stdin(
        &[
            "invoice",
            "finalize",
            "-",
            "--prices",
            s(&book),
            "--bank",
            s(&bank),
            "--json",
        ],
        &bytes,
    ));
    assert_eq!(lines(&finalized), lines(&preview_file));
}

/// A usage report on standard input is detected as one and merged like a report file.
#[test]
fn a_usage_report_on_standard_input_is_merged_as_a_report() {
    let report = gpumeter(&["usage", "--json", s(&example())]);
    let alone = json(&report);
    let merged = json(&with_stdin(&["usage", "--json", "-"], &report.stdout));
    assert_eq!(merged["usage"], alone["usage"]);
    assert_eq!(merged["sources"], alone["sources"]);
}

/// `-` twice is a bad command line; errors about standard input name `<stdin>`, never the
/// temporary file it was copied to.
#[test]
fn standard_input_twice_is_refused_and_its_errors_name_it() {
    let o = with_stdin(&["usage", "-", "-"], b"");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("more than once"), "{}", stderr(&o));
    let o = with_stdin(&["preview", "-", "-", "--prices", s(&book())], b"not read");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    let o = with_stdin(&["usage", "-"], b"neither a trace nor a buffer\n");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: <stdin>: unknown input format"),
        "{err}"
    );
    assert!(!err.contains("gpumeter-stdin-"), "{err}");
    // Empty standard input says so, not "unknown input format".
    for args in [
        &["usage", "-"][..],
        &["preview", "-", "--prices", s(&book())][..],
    ] {
        let o = with_stdin(args, b"");
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).starts_with("error: <stdin>: standard input is empty"),
            "{}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty());
    }
    let o = with_stdin(&["usage", "--format", "gmr", "-"], b"GMR? no\n");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.contains("<stdin>") && !err.contains("gpumeter-stdin-"),
        "{err}"
    );
}

/// Ctrl-C while standard input is being copied removes the temporary copy (the destructors
/// that remove it at a normal exit do not run on a signal), and the process still ends by
/// SIGINT. The test waits for the copy to exist (an event), then signals.
#[test]
#[allow(unsafe_code)]
fn an_interrupted_run_leaves_no_copy_of_standard_input() {
    use std::os::unix::process::ExitStatusExt as _;
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = bin()
        .args(["usage", "-"])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn gpumeter");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"{\"traceEvents\": [").expect("write");
    // The copy's file is made after the handler is installed, its directory before.
    let copied = || {
        std::fs::read_dir(tmp.path())
            .expect("tmp")
            .any(|d| d.expect("entry").path().join("<stdin>").exists())
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    while !copied() {
        assert!(
            Instant::now() < deadline,
            "the copy of standard input never appeared"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = libc::pid_t::try_from(child.id()).expect("pid");
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = child.wait().expect("wait");
    drop(stdin);
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .expect("tmp")
        .map(|e| e.expect("entry").path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An argument with SGR sequences that clap quotes in its error (an unknown subcommand or
/// option) never reaches the terminal as styles, even with `--color always` (`\e[8m` would
/// hide the rest of the message): clap's styles cannot be told from the argument's there, so
/// the message has none.
#[test]
fn escape_sequences_in_arguments_never_reach_the_terminal() {
    for (args, quoted) in [
        (
            &["--color", "always", "\u{1b}[8mhidden\u{1b}[0m"][..],
            "unrecognized subcommand 'hidden'",
        ),
        (
            &[
                "--color",
                "always",
                "usage",
                "x",
                "--no-such-\u{1b}[31mflag",
            ][..],
            "unexpected argument '--no-such-flag'",
        ),
    ] {
        let o = gpumeter(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert!(!err.contains('\u{1b}'), "{args:?}: {err:?}");
        assert!(
            err.starts_with("error: ") && err.contains(quoted),
            "{args:?}: {err:?}"
        );
    }
}

/// The subcommands `--help` lists (the first word of each line of its Commands section).
fn listed_subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn help_lists_every_subcommand_and_the_global_flags() {
    let o = gpumeter(&["--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    assert_eq!(listed_subcommands(&help), SUBCOMMANDS, "{help}");
    for flag in ["--color <WHEN>", "-q, --quiet", "NO_COLOR"] {
        assert!(help.contains(flag), "{flag} in {help}");
    }
    // The global flags are accepted after the subcommand too.
    let o = gpumeter(&["prices", "check", s(&book()), "--color", "never", "-q"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `gpumeter completions SHELL` for every shell clap_complete knows; bash's script names every
/// subcommand and parses (`bash -n`).
#[test]
fn completions_for_every_shell_and_bash_accepts_its_script() {
    let o = gpumeter(&["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let script = stdout(&o);
    for cmd in SUBCOMMANDS {
        assert!(
            script.contains(&format!("gpumeter,{cmd})")),
            "{cmd} in the bash script"
        );
    }
    let top = script
        .lines()
        .find(|l| l.trim_start().starts_with("opts=\"-q -h"))
        .expect("the words completed after `gpumeter`");
    for cmd in SUBCOMMANDS.iter().chain(&["--color", "--quiet"]) {
        assert!(top.split(['"', ' ']).any(|w| w == *cmd), "{cmd} in {top}");
    }
    assert!(
        script.contains("--cupti-api-version"),
        "options are completed too"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gpumeter.bash");
    std::fs::write(&path, &o.stdout).expect("write");
    let check = Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash (an essential package) runs");
    assert!(check.status.success(), "bash -n: {}", stderr(&check));
    // `complete -F` registers the function for `gpumeter`.
    assert!(script.contains("complete -F _gpumeter"), "{script}");
    for (shell, marker) in [
        ("zsh", "#compdef gpumeter"),
        ("fish", "complete -c gpumeter"),
        ("elvish", "edit:completion:arg-completer[gpumeter]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let o = gpumeter(&["completions", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        assert!(stdout(&o).contains(marker), "{shell}: {}", stdout(&o));
    }
    let o = gpumeter(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `gpumeter man` is roff that names every subcommand; `--dir` writes a page per command;
/// groff renders the page without a warning.
#[test]
fn the_man_page_is_roff_naming_every_subcommand_and_renders() {
    let o = gpumeter(&["man"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let page = stdout(&o);
    assert!(page.contains(".TH gpumeter 1"), "{page}");
    assert!(
        page.contains(".SH NAME") && page.contains(".SH SYNOPSIS"),
        "{page}"
    );
    assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
    for cmd in SUBCOMMANDS.iter().filter(|c| **c != "help") {
        assert!(
            page.contains(&format!("gpumeter\\-{cmd}(1)")),
            "{cmd} in the SUBCOMMANDS section"
        );
    }
    assert!(
        page.contains("\\-\\-color") && page.contains("\\-\\-quiet"),
        "{page}"
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("man1");
    let o = gpumeter(&["man", "--dir", s(&dir)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut listed: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    let mut written: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").path().display().to_string())
        .collect();
    listed.sort();
    written.sort();
    assert_eq!(listed, written, "the paths written, one a line");
    assert!(
        !written.iter().any(|p| p.ends_with("-help.1")),
        "{written:?}"
    );
    for name in [
        "gpumeter.1",
        "gpumeter-usage.1",
        "gpumeter-recording-show.1",
        "gpumeter-invoice-finalize.1",
        "gpumeter-completions.1",
    ] {
        let p = dir.join(name);
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        assert!(text.starts_with(".ie"), "{name}: {text}");
    }
    let file = dir.join("gpumeter.1");
    let o = gpumeter(&["man", "--dir", s(&file.join("sub"))]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot write the man pages"),
        "{}",
        stderr(&o)
    );

    // Rendering needs groff (groff-base, which man-db depends on).
    let groff = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let Ok(mut groff) = groff else {
        assert!(
            !in_ci(),
            "CI=true but groff is missing: the man page is not rendered"
        );
        // Straight to stderr, past the test harness's capture: a skip is never silent.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: groff is missing; the man page was not rendered (apt-get install \
             groff-base; CI=true makes this a failure)"
        );
        return;
    };
    groff
        .stdin
        .take()
        .expect("stdin")
        .write_all(page.as_bytes())
        .expect("write the page");
    let out = groff.wait_with_output().expect("groff");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "groff warnings: {}", stderr(&out));
    let rendered = Command::new("groff")
        .args(["-man", "-Tutf8", "-P-c", "-P-b", "-P-u"])
        .arg(dir.join("gpumeter.1"))
        .output()
        .expect("groff");
    let text = stdout(&rendered);
    assert!(text.contains("SUBCOMMANDS"), "{text}");
    assert!(text.contains("gpumeter-recording(1)"), "{text}");
}

/// Output of a shell command run under `script`, whose standard output and error are then a
/// terminal: the child and a receiver of what the terminal shows, chunk by chunk.
fn on_a_terminal(sh_command: &str, envs: &[(&str, Option<&str>)]) -> (Child, Receiver<Vec<u8>>) {
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-f", "-e", "-c", sh_command, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in envs {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd
        .spawn()
        .expect("util-linux `script` (Debian's essential bsdutils) makes the terminal");
    let mut out = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// Reads the terminal until `needle` shows (true) or the output ends (false). The 300 s
/// guard only keeps a broken build from hanging the test run.
fn shows(rx: &Receiver<Vec<u8>>, seen: &mut Vec<u8>, needle: &str) -> bool {
    let guard = Instant::now() + Duration::from_secs(300);
    while !String::from_utf8_lossy(seen).contains(needle) {
        let left = guard.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.extend(chunk),
            Err(_) => return false,
        }
    }
    true
}

/// Everything a finished terminal session showed.
fn finish(child: Child, rx: &Receiver<Vec<u8>>, seen: &mut Vec<u8>) -> i32 {
    let out = child.wait_with_output().expect("script");
    while let Ok(chunk) = rx.recv() {
        seen.extend(chunk);
    }
    out.status.code().unwrap_or(-1)
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display())
}

fn gpumeter_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpumeter"))
}

fn make_fifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(made.success());
}

/// Progress on a terminal: standard input that has not arrived after a second shows a spinner
/// counting its bytes (the test writes the input only once the spinner is on the terminal),
/// and the spinner is cleared before the report.
#[test]
fn progress_shows_on_a_terminal_for_a_slow_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("input");
    make_fifo(&fifo);
    let (child, rx) = on_a_terminal(
        &format!("{} usage - < {}", quote(&gpumeter_bin()), quote(&fifo)),
        &[],
    );
    // Opening blocks until the command's shell opens the FIFO to read.
    let mut input = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open the FIFO");
    let mut seen = Vec::new();
    assert!(
        shows(&rx, &mut seen, "reading standard input"),
        "no progress on the terminal: {}",
        String::from_utf8_lossy(&seen)
    );
    input
        .write_all(&std::fs::read(example()).expect("example"))
        .expect("write");
    drop(input);
    let code = finish(child, &rx, &mut seen);
    let shown = String::from_utf8_lossy(&seen);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("gpumeter usage report"), "{shown}");
    // Cleared: the line is erased (ESC [2K) before the report is written.
    let report_at = shown.find("gpumeter usage report").expect("report");
    assert!(shown[..report_at].ends_with("\r\u{1b}[2K"), "{shown:?}");
}

/// Standard error that is not a terminal never gets progress, nor does standard output (the
/// report, here JSON): the input arrives after 1.5 s, past the spinner's delay.
#[test]
fn no_progress_when_standard_error_is_not_a_terminal() {
    let bytes = std::fs::read(example()).expect("example");
    let mut child = bin()
        .args(["usage", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let _ = stdin.write_all(&bytes);
    });
    let out = child.wait_with_output().expect("wait");
    writer.join().expect("writer");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{:?}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["sources"][0]["name"], "<stdin>");
}

/// `--quiet` on a terminal: no progress even for input that arrives after 2 s.
#[test]
fn quiet_keeps_progress_off_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("input");
    make_fifo(&fifo);
    let (child, rx) = on_a_terminal(
        &format!("{} -q usage - < {}", quote(&gpumeter_bin()), quote(&fifo)),
        &[],
    );
    let mut input = std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .expect("open the FIFO");
    std::thread::sleep(Duration::from_secs(2));
    input
        .write_all(&std::fs::read(example()).expect("example"))
        .expect("write");
    drop(input);
    let mut seen = Vec::new();
    let code = finish(child, &rx, &mut seen);
    let shown = String::from_utf8_lossy(&seen);
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("gpumeter usage report"), "{shown}");
    assert!(!shown.contains("reading standard input"), "{shown}");
}

/// Every ESC in `text` starts an SGR sequence (`ESC [ digits ; … m`).
fn only_sgr(text: &str) -> bool {
    text.match_indices('\u{1b}').all(|(i, _)| {
        let rest = &text[i + 1..];
        rest.strip_prefix('[').is_some_and(|r| {
            let end = r.find(|c: char| !(c.is_ascii_digit() || c == ';'));
            end.is_some_and(|e| r[e..].starts_with('m'))
        })
    })
}

/// `--color always` colours gpumeter's and clap's errors and the help; `never` does not; under
/// `auto` on a terminal, `NO_COLOR` with a non-empty value turns colour off, an empty one does
/// not. Values from the command line stay escaped in a coloured error.
#[test]
fn color_follows_the_flag_and_no_color() {
    let missing = "/nonexistent/trace.json";
    let o = gpumeter(&["--color", "always", "usage", missing]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.starts_with("\u{1b}["), "{err:?}");
    assert!(err.contains("error:") && err.contains(missing), "{err:?}");
    let o = gpumeter(&["usage", missing, "--color=always"]);
    assert!(stderr(&o).contains('\u{1b}'), "{:?}", stderr(&o));
    for args in [
        &["--color", "never", "usage", missing][..],
        &["usage", missing][..],
    ] {
        let o = gpumeter(args);
        assert!(!stderr(&o).contains('\u{1b}'), "{args:?}: {:?}", stderr(&o));
        assert!(stderr(&o).starts_with("error: "), "{:?}", stderr(&o));
    }
    // clap's own errors and help.
    let o = gpumeter(&["--color", "always", "usag"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains('\u{1b}'), "{:?}", stderr(&o));
    let o = gpumeter(&["--color", "never", "usag"]);
    assert!(!stderr(&o).contains('\u{1b}'), "{:?}", stderr(&o));
    let o = gpumeter(&["--color", "always", "--help"]);
    assert!(stdout(&o).contains('\u{1b}'), "{:?}", stdout(&o));
    let o = gpumeter(&["--help"]);
    assert!(!stdout(&o).contains('\u{1b}'));
    // A refused value with control characters: quoted escaped, among clap's styles.
    let o = gpumeter(&[
        "--color",
        "always",
        "usage",
        "x",
        "--window",
        "1\u{1b}[2J\n",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains('\u{1b}') && only_sgr(&err), "{err:?}");
    assert!(err.contains("\\u{1b}[2J\\n"), "{err:?}");
    let o = gpumeter(&["--color", "always", "usage", "x", "--window", "\u{1b}[2J"]);
    assert!(only_sgr(&stderr(&o)), "{:?}", stderr(&o));
    // clap quotes an unknown subcommand as given: a control character in it is escaped.
    for color in ["always", "never"] {
        let o = gpumeter(&["--color", color, "us\u{7}age"]);
        assert_eq!(o.status.code(), Some(2));
        let err = stderr(&o);
        assert!(
            err.contains("us\\u{7}age") && !err.contains('\u{7}'),
            "{err:?}"
        );
    }

    // On a terminal (TERM set, as anstream's `auto` asks).
    let run = |no_color: Option<&str>| {
        let (child, rx) = on_a_terminal(
            &format!("{} usage {missing}", quote(&gpumeter_bin())),
            &[
                ("TERM", Some("xterm")),
                ("NO_COLOR", no_color),
                ("CLICOLOR_FORCE", None),
            ],
        );
        let mut seen = Vec::new();
        let code = finish(child, &rx, &mut seen);
        assert_eq!(code, 1, "{}", String::from_utf8_lossy(&seen));
        String::from_utf8_lossy(&seen).into_owned()
    };
    let shown = run(None);
    assert!(
        shown.contains('\u{1b}') && shown.contains("error:"),
        "{shown:?}"
    );
    let shown = run(Some("1"));
    assert!(
        !shown.contains('\u{1b}') && shown.contains("error:"),
        "{shown:?}"
    );
    let shown = run(Some(""));
    assert!(
        shown.contains('\u{1b}'),
        "an empty NO_COLOR does not disable: {shown:?}"
    );
}

/// `--quiet` (`-q`, anywhere on the line) drops notices, never errors.
#[test]
fn quiet_drops_notices_but_not_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("all-lost.json");
    std::fs::write(&p, r#"{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":0,"dur":4,"args":{"device":0,"stream":7,"correlation":3,"grid":[1,1,1],"block":[32,1,1]}}]}"#).expect("write");
    let book = book();
    let loud = gpumeter(&["preview", s(&p), "--prices", s(&book)]);
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    assert!(
        stderr(&loud).contains("notice: no usage to invoice"),
        "{}",
        stderr(&loud)
    );
    for args in [
        &["-q", "preview", s(&p), "--prices", s(&book)][..],
        &["preview", s(&p), "--prices", s(&book), "--quiet"][..],
    ] {
        let quiet = gpumeter(args);
        assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
        assert!(quiet.stderr.is_empty(), "{args:?}: {}", stderr(&quiet));
        assert_eq!(quiet.stdout, loud.stdout, "standard output is unchanged");
    }
    let o = gpumeter(&["-q", "usage", "/nonexistent/trace.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("error: /nonexistent/trace.json"),
        "{}",
        stderr(&o)
    );
    let o = gpumeter(&["-q", "usage", "x", "--window", "0s"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("error:"), "{}", stderr(&o));
}

/// The value column of `recording show`'s `key  value` lines.
const VALUE_AT: usize = 14;

/// Device ids repeat across sources (every recording has a device 0): the totals and the
/// per-window tables then show each row's device key, or rows of two GPUs would read alike.
/// One source keeps the five columns.
#[test]
fn quantity_tables_name_the_device_key_when_ids_repeat() {
    let data = root().join("examples/data");
    let green = data.join("h200-cuda13-green-context.gmr");
    let smoke = data.join("h200-cuda13-smoke.gmr");
    let text = stdout(&gpumeter(&["usage", s(&green), s(&smoke), "--by-window"]));
    let header = "  TENANT        DEVICE  KEY                                       METER";
    let tables: Vec<&str> = text.split("\n\n").filter(|t| t.contains(header)).collect();
    // Two windows and the totals.
    assert_eq!(tables.len(), 3, "{text}");
    for t in tables {
        for row in t.lines().skip(2) {
            assert!(
                row.contains("  0  GPU-5e7955ae-2727-75c0-d5b0-5b2ea03fc696  ")
                    || row.contains("  0  GPU-7548bd17-4a00-b913-655a-708a00c68182  "),
                "{row:?} in\n{text}"
            );
        }
    }
    // Counts on the Records line have thousands separators, as the tables' do.
    assert!(
        text.contains("\nRecords  2,121 kernel, 2 memcpy, 1 memset metered;"),
        "{text}"
    );
    let alone = stdout(&gpumeter(&["usage", s(&green), "--by-window"]));
    assert!(
        alone.contains("\nTotals\n  TENANT        DEVICE  METER "),
        "{alone}"
    );
    let after_devices = alone.split("\nRecords").nth(1).expect("records line");
    assert!(!after_devices.contains("KEY"), "{alone}");
}

/// `recording show -` reads the recording from standard input and names it `<stdin>`; it
/// shows what the file shows.
#[test]
fn recording_show_reads_standard_input() {
    let file = root().join("examples/data/h200-cuda13-green-context.gmr");
    let bytes = std::fs::read(&file).expect("recording");
    let from_file = stdout(&gpumeter(&["recording", "show", s(&file)]));
    let o = with_stdin(&["recording", "show", "-"], &bytes);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        from_file.replacen(s(&file), "<stdin>", 1),
        "{}",
        stderr(&o)
    );
    let o = with_stdin(&["recording", "show", "-"], b"not a recording");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: <stdin>: not a .gmr recording"),
        "{}",
        stderr(&o)
    );
}

/// `recording show` on the committed H200 recordings: nouns agree with their counts, clock
/// times read as RFC 3339 UTC beside the raw ns, keys and table columns align.
#[test]
fn recording_show_reads_well() {
    let data = root().join("examples/data");
    let o = gpumeter(&[
        "recording",
        "show",
        s(&data.join("h200-cuda13-green-context.gmr")),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "\nclock         CUPTI 2026-11-30T00:18:52.011846105Z (1795997932011846105 ns), wall \
         clock 2026-11-30T00:18:52.011846692Z (1795997932011846692 ns)\n",
        "\nframes        2 activity buffers (12,272 bytes), 1 string table, 0 dropped-count \
         frames, 0 attribution events, 3 energy samples,",
        "\ndevice        0: NVIDIA H200, 132 SMs, compute capability 9.0, GPU-",
        "\nenergy        device 0: 3 samples over 0.326414778 s, \
         2026-11-30T00:18:52.052506571Z to 2026-11-30T00:18:52.378921349Z; 39,068 mJ (counter \
         2,857,460 to 2,896,528 mJ)\n",
        "\ndropped       no records dropped by CUPTI\n",
        "\nkernels       20 kernel records, 1 name, 0 without a name\n",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    for line in text.lines().filter(|l| !l.starts_with(' ')) {
        let (key, value) = line.split_at(VALUE_AT);
        assert!(
            key.ends_with("  ") && !value.starts_with(' '),
            "value not at column {VALUE_AT}: {line:?}"
        );
    }

    let o = gpumeter(&[
        "recording",
        "show",
        s(&data.join("h200-cuda13-instructions.gmr")),
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("kernels       106 kernel records, 3 names, 0 without a name"),
        "{text}"
    );
    assert!(
        text.contains("instructions  106 instruction-count frames (instrumented"),
        "{text}"
    );
    // Tables: each column's cells end where its header ends (right-aligned numbers).
    let table = |header: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| l.trim_start() != header)
            .take_while(|l| l.starts_with(' '))
            .map(str::to_string)
            .collect()
    };
    let kernels = table("RECORDS  KERNEL");
    assert_eq!(kernels.len(), 4, "{text}");
    let end = kernels[0].find("RECORDS").expect("header") + "RECORDS".len();
    for (row, (n, name)) in kernels[1..].iter().zip([
        ("50", "gm_smoke_add"),
        ("50", "gm_smoke_scale"),
        ("6", "gm_smoke_fill"),
    ]) {
        assert_eq!(&row[end - n.len()..end], n, "{row:?}");
        assert_eq!(&row[end + 2..], name, "{row:?}");
    }
    let instructions = table("WARP INSTRUCTIONS  LAUNCHES  FUNCTION");
    assert_eq!(instructions.len(), 4, "{text}");
    let h = &instructions[0];
    let warp_end = h.find("WARP INSTRUCTIONS").expect("header") + "WARP INSTRUCTIONS".len();
    let launches_end = h.find("LAUNCHES").expect("header") + "LAUNCHES".len();
    let row = &instructions[1];
    assert_eq!(
        &row[warp_end - "29,491,200".len()..warp_end],
        "29,491,200",
        "{row:?}"
    );
    assert_eq!(&row[launches_end - 2..launches_end], "50", "{row:?}");
    assert!(row.ends_with("  gm_smoke_add"), "{row:?}");
}

/// A `gpumeter` hard link (a copy where links fail) at `dir/rel`.
fn place_binary(dir: &Path, rel: &str) -> PathBuf {
    let to = dir.join(rel);
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    if std::fs::hard_link(gpumeter_bin(), &to).is_err() {
        std::fs::copy(gpumeter_bin(), &to).expect("copy gpumeter");
    }
    to
}

/// `record` without an injection library: the error gives the cargo command that builds it
/// beside the binary (its profile, target triple and target directory), or where to install it
/// for a binary outside a cargo target directory; the command is not run.
#[test]
fn a_missing_injection_library_names_the_command_that_builds_it() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let target = tmp.path().join("target");
    std::fs::create_dir_all(&target).expect("mkdir");
    std::fs::write(
        target.join("CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .expect("tag");
    let shown_target = target
        .canonicalize()
        .expect("canonical")
        .display()
        .to_string();
    for (rel, want) in [
        (
            "target/release/gpumeter",
            format!("`CARGO_TARGET_DIR={shown_target} cargo build --release -p gpumeter-inject`"),
        ),
        (
            "target/debug/gpumeter",
            format!("`CARGO_TARGET_DIR={shown_target} cargo build -p gpumeter-inject`"),
        ),
        (
            "target/x86_64-unknown-linux-gnu/profiling/gpumeter",
            format!(
                "`CARGO_TARGET_DIR={shown_target} cargo build --profile profiling --target \
                 x86_64-unknown-linux-gnu -p gpumeter-inject`"
            ),
        ),
        (
            "opt/bin/gpumeter",
            "install libgpumeter_inject.so beside this executable or in ../lib".to_string(),
        ),
    ] {
        let exe = place_binary(tmp.path(), rel);
        let marker = tmp.path().join("ran");
        let o = Command::new(&exe)
            .args(["record", "--out"])
            .arg(tmp.path().join("x.gmr"))
            .arg("--")
            .arg("touch")
            .arg(&marker)
            .env_remove("GPUMETER_INJECT_LIB")
            .output()
            .expect("run");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{rel}: {err}");
        assert!(err.contains(&want), "{rel}: {want} not in {err}");
        assert!(
            err.contains("GPUMETER_INJECT_LIB") && err.contains("--inject-lib"),
            "{err}"
        );
        assert!(!marker.exists(), "the command was not run");
    }
    // A target directory with a space: the command is still one that can be pasted.
    let spaced = tmp.path().join("my target");
    std::fs::create_dir_all(&spaced).expect("mkdir");
    std::fs::write(
        spaced.join("CACHEDIR.TAG"),
        "Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .expect("tag");
    let exe = place_binary(tmp.path(), "my target/debug/gpumeter");
    let o = Command::new(&exe)
        .args(["record", "--out"])
        .arg(tmp.path().join("x.gmr"))
        .args(["--", "true"])
        .env_remove("GPUMETER_INJECT_LIB")
        .output()
        .expect("run");
    let shown = spaced.canonicalize().expect("canonical");
    let want = format!(
        "`CARGO_TARGET_DIR='{}' cargo build -p gpumeter-inject`",
        shown.display()
    );
    assert!(stderr(&o).contains(&want), "{want} not in {}", stderr(&o));
}
