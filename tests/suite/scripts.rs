//! `scripts/test`, the README's test command: what it hands to cargo. Run against a copy of
//! the script in a temporary tree with a stand-in `fetch-wheels.sh` (no download) and a
//! stand-in `cargo` on `PATH` that writes down each call, so nothing is built.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

/// Writes an executable file.
fn script(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The cargo calls of `scripts/test ARGS`, one line each: the arguments, then `|` and the
/// `GPUMETER_CUPTI_LIB` the call saw.
fn cargo_calls(args: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tree = dir.path();
    let text = std::fs::read_to_string(root.join("scripts/test")).expect("read scripts/test");
    script(&tree.join("scripts/test"), &text);
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
    script(
        &tree.join("bin/cargo"),
        "#!/bin/sh\nprintf '%s|%s\\n' \"$*\" \"$GPUMETER_CUPTI_LIB\" >> \"$CALLS\"\n",
    );
    let path = format!(
        "{}:{}",
        tree.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(tree.join("scripts/test"))
        .args(args)
        .env("PATH", path)
        .env("CALLS", &calls)
        .output()
        .expect("run scripts/test");
    assert!(
        out.status.success(),
        "scripts/test {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&calls)
        .expect("cargo was called")
        .lines()
        .map(str::to_string)
        .collect()
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
