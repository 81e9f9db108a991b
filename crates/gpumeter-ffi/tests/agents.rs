//! The example agents of `examples/` (examples/README.md, "Agents"), run on committed
//! inputs against the libraries as they are installed (`scripts/build-c-abi`): the C agent
//! compiled with `gcc -std=c11 -Wall -Wextra -Werror` against the shared library, once
//! against the static one and once under AddressSanitizer (leaks included) and
//! UndefinedBehaviorSanitizer; the Go agent through `go run ./examples/go`; the Python agent
//! with `python3`.
//!
//! Every agent prints, one JSON document per line, each drained usage report and then its
//! invoice. Summed over the drained reports, the usage rows (and totals, record counts, loss
//! and devices) equal `gpumeter usage --json` on the same recording, and the invoices equal
//! `gpumeter preview --json`'s, except the digests: the agents' source is a stream, so their
//! reports' `sources` and `sha256` differ, and with them each invoice's `usage_sha256` and
//! `sha256`.
//!
//! A tool that is missing (gcc, go, python3) fails the test under `CI=true` and skips its
//! agent with a notice otherwise.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{built, compile_c, have, root, run, sanitizer_env, SANITIZE};
use serde_json::Value;

const RECORDING: &str = "examples/data/h200-cuda13-smoke.gmr";
const PRICES: &str = "examples/pricebook.toml";

/// One run: an input and options, as agent flags and as the CLI's.
#[derive(Clone, Copy)]
struct Case {
    input: &'static str,
    /// The CUPTI API version of a raw buffer file (a `.gmr` says its own).
    raw_cupti_api_version: Option<u32>,
    window_seconds: u64,
    tenant: Option<&'static str>,
    /// Whether the price book prices the input's GPU (a raw buffer names none).
    priced: bool,
}

const CASES: [Case; 4] = [
    Case {
        input: RECORDING,
        raw_cupti_api_version: None,
        window_seconds: 3600,
        tenant: None,
        priced: true,
    },
    Case {
        input: RECORDING,
        raw_cupti_api_version: None,
        window_seconds: 1,
        tenant: None,
        priced: true,
    },
    Case {
        input: RECORDING,
        raw_cupti_api_version: None,
        window_seconds: 60,
        tenant: Some("acme"),
        priced: true,
    },
    // One raw activity buffer of CUPTI 13.0 (a live capture on the same H200).
    Case {
        input: "crates/gpumeter-cupti/tests/c/live/h200_r580_cupti_130001.bin",
        raw_cupti_api_version: Some(130001),
        window_seconds: 3600,
        tenant: None,
        priced: false,
    },
];

impl Case {
    fn agent_args(&self) -> Vec<String> {
        let mut args = vec![
            "--window-seconds".to_string(),
            self.window_seconds.to_string(),
            "--prices".to_string(),
            PRICES.to_string(),
        ];
        if let Some(t) = self.tenant {
            args.extend(["--tenant".to_string(), t.to_string()]);
        }
        if let Some(v) = self.raw_cupti_api_version {
            args.extend(["--raw-cupti-api-version".to_string(), v.to_string()]);
        }
        args.push(self.input.to_string());
        args
    }

    fn cli_args(&self) -> Vec<String> {
        let mut args = vec![
            self.input.to_string(),
            "--json".to_string(),
            "--window".to_string(),
            format!("{}s", self.window_seconds),
        ];
        if let Some(t) = self.tenant {
            args.extend(["--tenant".to_string(), t.to_string()]);
        }
        if let Some(v) = self.raw_cupti_api_version {
            args.extend(["--cupti-api-version".to_string(), v.to_string()]);
        }
        args
    }

    fn name(&self, agent: &str) -> String {
        format!(
            "{agent} on {} (window {} s, tenant {})",
            self.input,
            self.window_seconds,
            self.tenant.unwrap_or("-")
        )
    }
}

/// What `gpumeter usage --json` and `gpumeter preview --json` say about a case.
struct Expected {
    usage: Value,
    invoice: Value,
}

fn expected(cli: &Path, case: Case) -> Expected {
    let json = |args: Vec<String>| -> Value {
        let out = run(Command::new(cli).args(args).current_dir(root()));
        serde_json::from_slice(&out.stdout).expect("the CLI's JSON")
    };
    let mut usage = vec!["usage".to_string()];
    usage.extend(case.cli_args());
    let mut preview = vec!["preview".to_string()];
    preview.extend(case.cli_args());
    preview.extend(["--prices".to_string(), PRICES.to_string()]);
    Expected {
        usage: json(usage),
        invoice: json(preview),
    }
}

/// Quantities (decimal strings) summed per key.
fn add(map: &mut BTreeMap<String, u128>, key: String, quantity: &Value) {
    let q: u128 = quantity
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a quantity: {quantity}"));
    *map.entry(key).or_insert(0) += q;
}

/// The rows of `field` (`usage` or `totals`) of reports, summed per their other fields.
fn rows(reports: &[&Value], field: &str) -> BTreeMap<String, u128> {
    let mut sum = BTreeMap::new();
    for r in reports {
        for row in r[field].as_array().expect("rows") {
            let mut key = row.clone();
            let q = key
                .as_object_mut()
                .and_then(|o| o.remove("quantity"))
                .expect("a row's quantity");
            add(&mut sum, key.to_string(), &q);
        }
    }
    sum
}

/// Record counts of reports, summed per kind (`skipped` per reason).
fn records(reports: &[&Value]) -> BTreeMap<String, u128> {
    let mut sum = BTreeMap::new();
    for r in reports {
        for (kind, n) in r["records"].as_object().expect("records") {
            if let Some(skipped) = n.as_object() {
                for (why, n) in skipped {
                    add(
                        &mut sum,
                        format!("skipped.{why}"),
                        &Value::String(n.to_string()),
                    );
                }
            } else {
                add(&mut sum, kind.clone(), &Value::String(n.to_string()));
            }
        }
    }
    sum
}

/// Every element of the arrays `field` of `docs`, as sorted JSON text (`dedup`: once each).
fn elements(docs: &[&Value], field: &str, dedup: bool) -> Vec<String> {
    let mut all: Vec<String> = docs
        .iter()
        .flat_map(|d| d[field].as_array().expect("an array").iter())
        .map(Value::to_string)
        .collect();
    all.sort();
    if dedup {
        all.dedup();
    }
    all
}

/// An invoice without what depends on the usage report's bytes (its digest, and so its own).
fn without_digests(invoice: &Value) -> Value {
    let mut v = invoice.clone();
    let o = v.as_object_mut().expect("an invoice");
    o.remove("usage_sha256");
    o.remove("sha256");
    v
}

/// Checks an agent's stdout against the CLI's answers for the same case.
fn compare(agent: &str, stdout: &[u8], want: &Expected, priced: bool) {
    let text = std::str::from_utf8(stdout).expect("UTF-8 output");
    let docs: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{agent}: a JSON line: {e}")))
        .collect();
    assert!(
        !docs.is_empty() && docs.len().is_multiple_of(2),
        "{agent}: pairs of usage report and invoice, got {} documents",
        docs.len()
    );
    let usage: Vec<&Value> = docs.iter().step_by(2).collect();
    let invoices: Vec<&Value> = docs.iter().skip(1).step_by(2).collect();
    for u in &usage {
        assert_eq!(u["schema"], "gpumeter.usage/v1", "{agent}");
        assert_eq!(u["window_seconds"], want.usage["window_seconds"], "{agent}");
    }
    for i in &invoices {
        assert_eq!(i["schema"], "gpumeter.invoice/v1", "{agent}");
    }

    let cli = [&want.usage];
    assert!(
        !rows(&cli, "usage").is_empty(),
        "{agent}: the input has usage"
    );
    assert_eq!(
        rows(&usage, "usage"),
        rows(&cli, "usage"),
        "{agent}: usage rows"
    );
    assert_eq!(
        rows(&usage, "totals"),
        rows(&cli, "totals"),
        "{agent}: totals"
    );
    assert_eq!(records(&usage), records(&cli), "{agent}: record counts");
    assert_eq!(
        elements(&usage, "loss", false),
        elements(&cli, "loss", false),
        "{agent}: loss"
    );
    assert_eq!(
        elements(&usage, "devices", true),
        elements(&cli, "devices", true),
        "{agent}: devices"
    );

    // One invoice per tenant with usage: the drained reports' invoices, together, are the
    // CLI's (these inputs' usage falls in one drained report; the others rate to none).
    let got: Vec<Value> = invoices
        .iter()
        .flat_map(|d| d["invoices"].as_array().expect("invoices").iter())
        .map(without_digests)
        .collect();
    let cli_invoices: Vec<Value> = want.invoice["invoices"]
        .as_array()
        .expect("the CLI's invoices")
        .iter()
        .map(without_digests)
        .collect();
    assert_eq!(got, cli_invoices, "{agent}: invoices");
    // The price book prices the recording's GPU: the comparison covers priced lines.
    if priced {
        let lines = cli_invoices
            .iter()
            .flat_map(|inv| inv["lines"].as_array().expect("lines"));
        assert!(
            lines
                .filter(|l| l["kind"] == "usage" && l["sku"] == "h200")
                .count()
                > 0,
            "{PRICES} prices the recording's H200"
        );
    }
}

/// Runs an agent command for every case and compares.
fn check_agent(agent: &str, cli: &Path, command: impl Fn() -> Command) {
    for case in CASES {
        let want = expected(cli, case);
        let mut cmd = command();
        cmd.args(case.agent_args()).current_dir(root());
        let out = run(&mut cmd);
        compare(&case.name(agent), &out.stdout, &want, case.priced);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("runtime error") && !stderr.contains("Sanitizer"),
            "{agent}: {stderr}"
        );
    }
    eprintln!("{agent}: matches `gpumeter usage --json` and `gpumeter preview --json`");
}

/// Compiles examples/c/agent.c with `extra` flags (and after the source, `libs`).
fn compile_agent(out: &Path, extra: &[&str], libs: &[String]) {
    compile_c(out, &[root().join("examples/c/agent.c")], extra, libs);
}

#[test]
fn c_agent() {
    if !have("gcc", "--version", "the C agent was not run") {
        return;
    }
    let b = built();
    let cli = b.cli();
    let tmp = tempfile::tempdir().expect("temp dir");

    let shared = tmp.path().join("agent");
    compile_agent(&shared, &[], &b.dynamic_args());
    check_agent("C agent (shared library)", &cli, || Command::new(&shared));

    let linked = tmp.path().join("agent-static");
    compile_agent(&linked, &[], &b.static_args());
    check_agent("C agent (static library)", &cli, || Command::new(&linked));

    let sanitized = tmp.path().join("agent-sanitized");
    compile_agent(&sanitized, &SANITIZE, &b.dynamic_args());
    check_agent("C agent (ASan, UBSan)", &cli, || {
        let mut c = Command::new(&sanitized);
        sanitizer_env(&mut c);
        c
    });
}

#[test]
fn python_agent() {
    if !have("python3", "--version", "the Python agent was not run") {
        return;
    }
    let b = built();
    check_agent("Python agent", &b.cli(), || {
        let mut c = Command::new("python3");
        c.arg("examples/python/agent.py")
            .env("GPUMETER_FFI_LIB", b.shared());
        c
    });
}

/// The Go agent, built once per test binary with `go build` (`go run` would turn the agent's
/// exit status into its own) against the shared library, Go's caches in the target directory
/// (HOME may be read-only, and nothing is downloaded: the module has no dependencies).
fn go_agent() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let b = built();
        let l = b.lib();
        let l = l.to_str().expect("UTF-8 target path");
        let target = b.profile_dir.parent().expect("the target directory");
        let binary = b.profile_dir.join("go-agent");
        run(Command::new("go")
            .args(["build", "-o"])
            .arg(&binary)
            .arg("./examples/go")
            .env("CGO_ENABLED", "1")
            .env("CGO_LDFLAGS", format!("-L{l} -Wl,-rpath,{l}"))
            .env("GOCACHE", target.join("go-build"))
            .env("GOPATH", target.join("go-path"))
            .env("GOPROXY", "off")
            .current_dir(root()));
        binary
    })
}

#[test]
fn go_agent_equals_the_cli() {
    if !have("go", "version", "the Go agent was not run") {
        return;
    }
    check_agent("Go agent", &built().cli(), || Command::new(go_agent()));
}

/// The C agent against the shared library, built once per test binary.
fn c_agent_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let binary = built().profile_dir.join("c-agent");
        compile_agent(&binary, &[], &built().dynamic_args());
        binary
    })
}

/// Makes a command that runs one agent.
type AgentCommand = Box<dyn Fn() -> Command>;

/// Issue 30 item 19: the three agents refuse the same out-of-range arguments (exit 2, before
/// anything is read) and report a file they cannot read in one line (exit 1), never with a
/// traceback; the ends of the ranges are accepted.
#[test]
fn agents_refuse_bad_arguments_alike() {
    let mut agents: Vec<(&str, AgentCommand)> = Vec::new();
    if have("gcc", "--version", "the C agent was not run") {
        agents.push(("C", Box::new(|| Command::new(c_agent_binary()))));
    }
    if have("python3", "--version", "the Python agent was not run") {
        agents.push((
            "Python",
            Box::new(|| {
                let mut c = Command::new("python3");
                c.arg("examples/python/agent.py")
                    .env("GPUMETER_FFI_LIB", built().shared());
                c
            }),
        ));
    }
    if have("go", "version", "the Go agent was not run") {
        agents.push(("Go", Box::new(|| Command::new(go_agent()))));
    }
    let long_tenant = "a".repeat(129);
    let refused: Vec<Vec<&str>> = vec![
        vec![],
        vec!["--window-seconds", "0", RECORDING],
        vec!["--window-seconds", "86401", RECORDING],
        vec!["--window-seconds", "-60", RECORDING],
        vec!["--window-seconds", "sixty", RECORDING],
        vec!["--window-seconds", "18446744073709551616", RECORDING],
        vec!["--reorder-horizon-ns", "-1", RECORDING],
        // Decimal digits only, in every agent (Go's flag package read 0x3c, 6_0 and 060 as
        // octal 48; C's strtoull took a sign and leading spaces, " -1" wrapping to 2^64 - 1).
        vec!["--window-seconds", "0x3c", RECORDING],
        vec!["--window-seconds", "6_0", RECORDING],
        vec!["--window-seconds", "+60", RECORDING],
        vec!["--window-seconds", " 60", RECORDING],
        vec!["--reorder-horizon-ns", " -1", RECORDING],
        vec!["--reorder-horizon-ns", "18446744073709551616", RECORDING],
        vec!["--raw-cupti-api-version", "4294967296", RECORDING],
        vec!["--raw-cupti-api-version", "-26", RECORDING],
        vec!["--tenant", &long_tenant, RECORDING],
        vec!["--no-such-flag", "1", RECORDING],
    ];
    let accepted: Vec<Vec<&str>> = vec![
        vec!["--window-seconds", "86400", RECORDING],
        vec!["--reorder-horizon-ns", "18446744073709551615", RECORDING],
        vec![
            "--reorder-horizon-ns",
            "0",
            "--tenant",
            &long_tenant[..128],
            RECORDING,
        ],
    ];
    // (arguments, what the message names)
    let unreadable: [(Vec<&str>, &str); 3] = [
        (
            vec!["--prices", "/nonexistent/book.toml", RECORDING],
            "/nonexistent/book.toml",
        ),
        (vec!["--prices", "examples", RECORDING], "examples"),
        (vec!["/nonexistent/recording.gmr"], "recording.gmr"),
    ];
    for (agent, command) in &agents {
        let go = |args: &[&str]| {
            let mut c = command();
            c.args(args).current_dir(root());
            c.output().unwrap_or_else(|e| panic!("{agent}: {e}"))
        };
        for args in &refused {
            let out = go(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{agent} {args:?}: {stderr}");
            assert!(
                out.stdout.is_empty(),
                "{agent} {args:?}: nothing is printed"
            );
            assert!(!stderr.contains("Traceback"), "{agent} {args:?}: {stderr}");
        }
        for args in &accepted {
            let out = go(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{agent} {args:?}: {stderr}");
        }
        // `060` is sixty seconds in every agent (each report says its window size).
        let leading_zero = go(&["--window-seconds", "060", RECORDING]);
        let text = String::from_utf8_lossy(&leading_zero.stdout);
        assert!(leading_zero.status.success(), "{agent}");
        assert!(
            text.contains("\"window_seconds\":60,") && !text.contains("\"window_seconds\":48,"),
            "{agent}: 060 is not 60 seconds"
        );
        // A recording path that is not UTF-8: one line naming the failure, no traceback.
        {
            use std::os::unix::ffi::OsStrExt;
            let mut c = command();
            c.arg(std::ffi::OsStr::from_bytes(b"/nonexistent/\xff.gmr"))
                .current_dir(root());
            let out = c.output().unwrap_or_else(|e| panic!("{agent}: {e}"));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{agent}: {stderr}");
            assert_eq!(stderr.trim_end().lines().count(), 1, "{agent}: {stderr}");
        }
        for (args, named) in &unreadable {
            let out = go(args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{agent} {args:?}: {stderr}");
            assert_eq!(
                stderr.trim_end().lines().count(),
                1,
                "{agent} {args:?}: {stderr}"
            );
            assert!(stderr.contains(named), "{agent} {args:?}: {stderr}");
        }
    }
}
