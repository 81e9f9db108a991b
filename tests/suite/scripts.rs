//! `scripts/test`, the README's test command: what it hands to cargo, and the PostgreSQL
//! cluster it runs the tests against. Run against a copy of the script in a temporary tree
//! with a stand-in `fetch-wheels.sh` (no download), a stand-in `scripts/pg-cluster` and a
//! stand-in `cargo` on `PATH` that write down each call, so nothing is built or started.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, ExitStatus};

/// Writes an executable file.
fn script(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The stand-in `scripts/pg-cluster`: `bindir` succeeds when `PG_BINARIES` is `yes`, `start
/// DIR` prints a URL naming DIR (or fails when `PG_START` is `fail`), `stop DIR` removes the
/// (empty) DIR that scripts/test made; each call is written to `$EVENTS`.
const PG_CLUSTER: &str = r#"#!/bin/sh
echo "pg-cluster $*" >> "$EVENTS"
case "$1" in
bindir) [ "$PG_BINARIES" = yes ] && echo /stand-in/bin ;;
start) [ "$PG_START" != fail ] && echo "postgresql:///postgres?host=$2/sock" ;;
stop) rmdir "$2" ;;
esac
"#;

/// What a run of `scripts/test` did.
struct Run {
    status: ExitStatus,
    stderr: String,
    /// Each cargo call: its arguments, then `|` and the `GPUMETER_CUPTI_LIB` it saw.
    cargo: Vec<String>,
    /// The stand-in pg-cluster's calls and cargo's, in order; cargo's as
    /// `cargo ARGS GPUMETER_TEST_POSTGRES=VALUE`.
    events: Vec<String>,
}

/// Runs a copy of `scripts/test ARGS` with `env` (and neither `CI` nor
/// `GPUMETER_TEST_POSTGRES` from this process's environment); the stand-in `cargo test` exits
/// with `CARGO_STATUS` (0 when unset).
fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tree = dir.path();
    let text = std::fs::read_to_string(root.join("scripts/test")).expect("read scripts/test");
    script(&tree.join("scripts/test"), &text);
    script(&tree.join("scripts/pg-cluster"), PG_CLUSTER);
    script(
        &tree.join("bindings/cupti/fetch-wheels.sh"),
        "#!/bin/sh\nexit 0\n",
    );
    std::fs::create_dir_all(tree.join("bindings/cupti/.wheels")).expect("mkdir");
    std::fs::write(
        tree.join("bindings/cupti/.wheels/env.sh"),
        "export CUPTI12_LIB=/w/cu12\nexport CUPTI13_LIB=/w/cu13\n",
    )
    .expect("write env.sh");
    let calls = tree.join("calls");
    let events = tree.join("events");
    script(
        &tree.join("bin/cargo"),
        "#!/bin/sh\nprintf '%s|%s\\n' \"$*\" \"$GPUMETER_CUPTI_LIB\" >> \"$CALLS\"\n\
         echo \"cargo $* GPUMETER_TEST_POSTGRES=$GPUMETER_TEST_POSTGRES\" >> \"$EVENTS\"\n\
         if [ \"$1\" = test ]; then exit \"${CARGO_STATUS:-0}\"; fi\n",
    );
    let path = format!(
        "{}:{}",
        tree.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(tree.join("scripts/test"))
        .args(args)
        .env_remove("CI")
        .env_remove("GPUMETER_TEST_POSTGRES")
        .env("PATH", path)
        .env("CALLS", &calls)
        .env("EVENTS", &events)
        .envs(env.iter().copied())
        .output()
        .expect("run scripts/test");
    let lines = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    };
    Run {
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        cargo: lines(&calls),
        events: lines(&events),
    }
}

/// The cargo calls of `scripts/test ARGS` (a PostgreSQL server given), one line each: the
/// arguments, then `|` and the `GPUMETER_CUPTI_LIB` the call saw.
fn cargo_calls(args: &[&str]) -> Vec<String> {
    let run = run(args, &[("GPUMETER_TEST_POSTGRES", "postgresql:///given")]);
    assert!(
        run.status.success(),
        "scripts/test {args:?}: {}",
        run.stderr
    );
    assert!(
        !run.cargo.is_empty(),
        "cargo was not called: {}",
        run.stderr
    );
    run.cargo
}

#[test]
fn arguments_pass_through_to_cargo_test() {
    assert_eq!(
        cargo_calls(&["--locked", "golden", "--", "--nocapture", "--offline"]),
        [
            "build -p gpumeter-inject --locked|/w/cu12/libcupti.so.12",
            "test --workspace --locked golden -- --nocapture --offline|/w/cu12/libcupti.so.12",
        ]
    );
    assert_eq!(
        cargo_calls(&[]),
        [
            "build -p gpumeter-inject|/w/cu12/libcupti.so.12",
            "test --workspace|/w/cu12/libcupti.so.12",
        ]
    );
}

#[test]
fn a_package_selection_replaces_the_workspace() {
    // `cargo test --workspace -p X` tests every crate; the caller asked for X.
    for (args, test) in [
        (vec!["-p", "gpumeter-core"], "test -p gpumeter-core"),
        (vec!["-pgpumeter-core"], "test -pgpumeter-core"),
        (
            vec!["--package=gpumeter-core", "x"],
            "test --package=gpumeter-core x",
        ),
        (
            vec!["--workspace", "--exclude", "gpumeter-ffi"],
            "test --workspace --exclude gpumeter-ffi",
        ),
    ] {
        let calls = cargo_calls(&args);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(
            calls[1],
            format!("{test}|/w/cu12/libcupti.so.12"),
            "{args:?}"
        );
    }
    // After `--`, `-p` is the test binary's, not cargo's.
    assert_eq!(
        cargo_calls(&["--", "-p"])[1],
        "test --workspace -- -p|/w/cu12/libcupti.so.12"
    );
}

/// The temporary directory of the stand-in cluster's start call.
fn started_dir(events: &[String]) -> String {
    let start = events
        .iter()
        .find_map(|e| e.strip_prefix("pg-cluster start "))
        .unwrap_or_else(|| panic!("no start: {events:?}"));
    assert!(start.starts_with("/tmp/gpumeter-pg."), "{start}");
    start.to_owned()
}

/// The last line of standard error.
fn last_line(stderr: &str) -> &str {
    stderr.lines().last().unwrap_or("")
}

#[test]
fn a_cluster_started_for_the_run_is_handed_to_the_tests_and_stopped_after_them() {
    // Stopped whether the tests pass or not, and the script exits with cargo's status.
    for (cargo_status, code) in [("0", 0), ("101", 101)] {
        let run = run(
            &[],
            &[("PG_BINARIES", "yes"), ("CARGO_STATUS", cargo_status)],
        );
        let dir = started_dir(&run.events);
        assert_eq!(
            run.events,
            [
                "cargo build -p gpumeter-inject GPUMETER_TEST_POSTGRES=".to_owned(),
                "pg-cluster bindir".to_owned(),
                format!("pg-cluster start {dir}"),
                format!(
                    "cargo test --workspace GPUMETER_TEST_POSTGRES=postgresql:///postgres?host={dir}/sock"
                ),
                format!("pg-cluster stop {dir}"),
            ],
            "cargo status {cargo_status}: {}",
            run.stderr
        );
        assert_eq!(run.status.code(), Some(code), "{}", run.stderr);
        assert!(!run.stderr.contains("summary:"), "{}", run.stderr);
        assert!(!Path::new(&dir).exists(), "{dir} left behind");
    }
}

#[test]
fn a_given_server_is_used_as_it_is() {
    let run = run(
        &[],
        &[
            ("PG_BINARIES", "yes"),
            ("GPUMETER_TEST_POSTGRES", "postgres://u@db.example/t"),
            ("CI", "true"),
        ],
    );
    assert!(run.status.success(), "{}", run.stderr);
    assert_eq!(
        run.events,
        [
            "cargo build -p gpumeter-inject GPUMETER_TEST_POSTGRES=postgres://u@db.example/t",
            "cargo test --workspace GPUMETER_TEST_POSTGRES=postgres://u@db.example/t",
        ]
    );
}

#[test]
fn without_a_server_the_tests_run_and_the_last_line_says_the_postgresql_ones_were_skipped() {
    for (env, why) in [
        (vec![("PG_BINARIES", "no")], "no PostgreSQL server"),
        (
            vec![("PG_BINARIES", "yes"), ("PG_START", "fail")],
            "the PostgreSQL server did not start",
        ),
    ] {
        for (cargo_status, code) in [("0", 0), ("101", 101)] {
            let mut env = env.clone();
            env.push(("CARGO_STATUS", cargo_status));
            let run = run(&[], &env);
            assert_eq!(run.status.code(), Some(code), "{env:?}: {}", run.stderr);
            assert_eq!(
                run.cargo.last().map(String::as_str),
                Some("test --workspace|/w/cu12/libcupti.so.12"),
                "{env:?}"
            );
            assert!(
                run.events
                    .iter()
                    .any(|e| e == "cargo test --workspace GPUMETER_TEST_POSTGRES="),
                "{env:?}: {:?}",
                run.events
            );
            let last = last_line(&run.stderr);
            assert!(
                last.starts_with("summary: the PostgreSQL tests were skipped (")
                    && last.contains(why),
                "{env:?}: {last}"
            );
            // A cluster that did not start leaves no directory behind.
            if let Some(e) = run
                .events
                .iter()
                .find(|e| e.starts_with("pg-cluster start "))
            {
                let dir = started_dir(&run.events);
                assert!(
                    run.events.contains(&format!("pg-cluster stop {dir}")),
                    "{e}"
                );
                assert!(!Path::new(&dir).exists(), "{dir} left behind");
            }
        }
    }
}

#[test]
fn under_ci_no_server_fails_before_any_test_runs() {
    for env in [
        vec![("PG_BINARIES", "no"), ("CI", "true")],
        vec![("PG_BINARIES", "yes"), ("PG_START", "fail"), ("CI", "true")],
    ] {
        let run = run(&[], &env);
        assert!(!run.status.success(), "{env:?}: {}", run.stderr);
        assert!(
            !run.cargo.iter().any(|c| c.starts_with("test ")),
            "{env:?}: {:?}",
            run.cargo
        );
        assert!(
            run.stderr.contains("CI=true") && run.stderr.contains("PostgreSQL"),
            "{env:?}: {}",
            run.stderr
        );
    }
}
