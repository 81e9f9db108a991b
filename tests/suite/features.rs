//! The facade's Cargo features (issue 14, "a lean crate"): the dependency graph of `gpumeter`
//! built with one feature set holds no CUDA or SQLite crate that set does not ask for.
//!
//! The graph is Cargo's own answer, `cargo tree -e normal -p gpumeter --no-default-features
//! -F <set> --prefix none` (offline, against the committed `Cargo.lock`). Not `cargo
//! metadata`: its `resolve` unifies features across the whole workspace, so `gpumeter` shows
//! the `cupti`, `nsys` and `bank` the CLI and the C ABI enable, whatever `--features` says;
//! `cargo tree -p` resolves features for the one package, as a dependent's build does.
//! The credit bank's PostgreSQL client comes with the `postgres` feature only.
//! `-e normal` leaves out build and dev dependencies (the tests' `cupti-sys` among them).

use std::collections::BTreeSet;
use std::process::Command;

/// Crates that load CUDA or NVIDIA libraries, or compile SQLite.
const HEAVY: [&str; 5] = [
    "cupti-sys",
    "nvml-wrapper",
    "libloading",
    "rusqlite",
    "libsqlite3-sys",
];

/// The crate names in `gpumeter`'s normal dependency graph with only `features` (a
/// comma-separated list), or with the default features for `"default"`.
fn graph(features: &str) -> BTreeSet<String> {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "tree",
        "--offline",
        "--locked",
        "-e",
        "normal",
        "-p",
        "gpumeter",
        "--prefix",
        "none",
    ]);
    if features != "default" {
        cmd.args(["--no-default-features", "--features", features]);
    }
    let out = cmd.output().expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -F {features} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    // Each line: `name vX.Y.Z [(path)] [(proc-macro)] [(*)]`.
    let names: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(
        names.contains("gpumeter") && names.contains("gpumeter-core"),
        "cargo tree -F {features} printed no graph of gpumeter:\n{text}"
    );
    names
}

fn present(names: &BTreeSet<String>, of: &[&str]) -> Vec<String> {
    of.iter()
        .filter(|c| names.contains(**c))
        .map(|c| c.to_string())
        .collect()
}

#[test]
fn kineto_alone_pulls_no_cuda_or_sqlite_crate() {
    let g = graph("kineto");
    assert_eq!(present(&g, &HEAVY), Vec::<String>::new());
    // Nor the CUPTI decoder or the bank: they come with their features.
    assert_eq!(
        present(&g, &["gpumeter-cupti", "gpumeter-bank", "gpumeter-nvml"]),
        Vec::<String>::new()
    );
}

#[test]
fn cupti_decoder_pulls_no_cuda_library_loader() {
    let g = graph("cupti");
    assert!(g.contains("gpumeter-cupti"));
    assert_eq!(present(&g, &HEAVY), Vec::<String>::new());
}

#[test]
fn the_features_that_need_them_do_pull_them() {
    // So the assertions above can fail: the same probe sees the crates when they are asked for.
    let collector = graph("collector");
    assert_eq!(
        present(&collector, &["cupti-sys", "nvml-wrapper", "libloading"]).len(),
        3,
        "{collector:?}"
    );
    for sqlite in ["nsys", "bank"] {
        let g = graph(sqlite);
        assert_eq!(
            present(&g, &["rusqlite", "libsqlite3-sys"]).len(),
            2,
            "-F {sqlite}: {g:?}"
        );
        assert!(!g.contains("cupti-sys"), "-F {sqlite}: {g:?}");
    }
    let nvml = graph("nvml");
    assert!(nvml.contains("nvml-wrapper") && !nvml.contains("cupti-sys"));
}

/// The PostgreSQL client of the credit bank.
const POSTGRES: [&str; 2] = ["postgres", "tokio-postgres"];

#[test]
fn the_postgres_client_comes_with_the_postgres_feature_only() {
    // The bank alone (and the default set) keeps its ledger in SQLite: no PostgreSQL client.
    for set in ["bank", "default"] {
        let g = graph(set);
        assert!(g.contains("gpumeter-bank"), "-F {set}: {g:?}");
        assert_eq!(present(&g, &POSTGRES), Vec::<String>::new(), "-F {set}");
    }
    // `postgres` brings the client and implies the bank (with its SQLite ledger), no CUDA.
    let g = graph("postgres");
    assert_eq!(present(&g, &POSTGRES).len(), 2, "-F postgres: {g:?}");
    assert!(
        g.contains("gpumeter-bank") && g.contains("rusqlite"),
        "-F postgres: {g:?}"
    );
    assert!(!g.contains("cupti-sys"), "-F postgres: {g:?}");
}

#[test]
fn the_default_set_is_a_billing_pipelines() {
    // Every input format and the credit bank (SQLite), no live collection or NVML.
    let g = graph("default");
    for c in [
        "gpumeter-cupti",
        "gpumeter-bank",
        "rusqlite",
        "libsqlite3-sys",
    ] {
        assert!(g.contains(c), "the default features lack {c}: {g:?}");
    }
    assert_eq!(
        present(&g, &["cupti-sys", "nvml-wrapper", "libloading"]),
        Vec::<String>::new()
    );
}
