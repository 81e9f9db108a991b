//! TLS to PostgreSQL follows the URL's `sslmode`: against a server that refuses TCP without
//! TLS (`scripts/pg-cluster start-tls`), a ledger opens when the client trusts the server's CA
//! (`SSL_CERT_FILE`), and is refused, with a message naming the location, when it does not or
//! when the URL turns TLS off. Each client is a child process (this test binary again), since
//! the trusted roots come from its environment.
#![cfg(feature = "postgres")]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpumeter_bank::{Ledger, NewTransaction, Posting, CREDITS};
use rust_decimal::Decimal;

/// The URL of the ledger a child opens; set only in children.
const CHILD_ENV: &str = "GPUMETER_BANK_TLS_CHILD";

/// What a child prints when it opened the ledger, appended and verified.
const OPENED: &str = "gpumeter-tls-child: opened";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A throwaway cluster with TLS on 127.0.0.1; stopped (and its directory removed) on drop.
struct Cluster {
    dir: PathBuf,
    url: String,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/pg-cluster"))
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

/// Starts the cluster, or says `skipped:` (a failure under `CI=true`) when this machine has
/// no PostgreSQL server binaries.
fn cluster() -> Option<Cluster> {
    // Short and under /tmp: the server's user must reach it, and socket paths are short.
    let dir = PathBuf::from(format!(
        "/tmp/gm-tls.{}.{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    ));
    let out = Command::new(repo().join("scripts/pg-cluster"))
        .arg("start-tls")
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("running scripts/pg-cluster");
    let no_openssl = String::from_utf8_lossy(&out.stderr).contains("needs openssl");
    if out.status.code() == Some(3) || no_openssl {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: no PostgreSQL server binaries or openssl for the TLS test: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = writeln!(
            std::io::stderr(),
            "skipped: TLS to PostgreSQL not tested: no PostgreSQL server binaries or no openssl \
             (install Debian's postgresql and openssl)"
        );
        return None;
    }
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let cluster = Cluster { dir, url };
    assert!(
        out.status.success(),
        "scripts/pg-cluster start-tls failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(cluster)
}

/// Runs a child that opens `url` with `SSL_CERT_FILE` set to `roots` (or unset), returning
/// its standard output.
fn child(url: &str, roots: Option<&Path>) -> String {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        "child_process",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, url)
    .env_remove("SSL_CERT_DIR")
    .stdin(Stdio::null());
    match roots {
        Some(r) => cmd.env("SSL_CERT_FILE", r),
        None => cmd.env_remove("SSL_CERT_FILE"),
    };
    let out = cmd.output().expect("running a child");
    assert!(
        out.status.success(),
        "the child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Does nothing in a normal run; with [`CHILD_ENV`] set, opens that ledger, appends a grant,
/// verifies, and prints [`OPENED`] or the error.
#[test]
fn child_process() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    println!();
    match gpumeter_bank::open(&url) {
        Ok(mut l) => {
            let tx = NewTransaction {
                key: "tls-grant".into(),
                kind: "grant".into(),
                at: "2027-01-01T00:00:00Z".into(),
                tenant: Some("acme".into()),
                postings: vec![
                    Posting::new("tenant:acme:credits:g-1", CREDITS, Decimal::new(5, 0)),
                    Posting::new("provider:credit_sales", CREDITS, Decimal::new(-5, 0)),
                ],
                memo: serde_json::json!({}),
            };
            l.atomically(true, |t| t.append(tx.clone()))
                .expect("appending over TLS");
            let report = l
                .atomically(false, |t| gpumeter_bank::verify(&*t))
                .expect("verifying over TLS");
            assert!(report.transactions >= 1);
            println!("{OPENED}");
        }
        Err(e) => println!("error: {e}"),
    }
}

#[test]
fn tls_follows_the_urls_sslmode() {
    let Some(c) = cluster() else {
        return;
    };
    let ca = c.dir.join("tls/ca.crt");
    assert!(c.url.contains("sslmode=require"), "{}", c.url);

    // The server refuses TCP without TLS: opening at all means the connection was TLS.
    let trusted = child(&c.url, Some(&ca));
    assert!(trusted.contains(OPENED), "trusting the CA: {trusted}");

    // Not trusting the server's CA (only the system's roots, or none): refused, naming the
    // location, before anything is written.
    let untrusted = child(&c.url, None);
    assert!(!untrusted.contains(OPENED), "{untrusted}");
    assert!(
        untrusted.contains("error: postgresql://postgres@localhost:"),
        "{untrusted}"
    );
    assert!(untrusted.contains("certificate"), "{untrusted}");
    // What to do about it, not only rustls's `UnknownIssuer`.
    assert!(
        untrusted.contains("point SSL_CERT_FILE at its CA's certificate"),
        "{untrusted}"
    );

    // No trusted root at all (an empty SSL_CERT_FILE): `require` says so; `prefer` (the
    // default) goes without TLS, as libpq does when it cannot have it, and this server
    // refuses that.
    let empty = c.dir.join("no-roots.pem");
    std::fs::write(&empty, b"").expect("an empty roots file");
    let no_roots = child(&c.url, Some(&empty));
    assert!(
        no_roots.contains("no trusted root certificate"),
        "{no_roots}"
    );
    let prefer = c.url.replace("sslmode=require", "sslmode=prefer");
    let fell_back = child(&prefer, Some(&empty));
    assert!(fell_back.contains("no encryption"), "{fell_back}");
    let trusted_prefer = child(&prefer, Some(&ca));
    assert!(trusted_prefer.contains(OPENED), "{trusted_prefer}");

    // TLS turned off by the URL: the server refuses the plain connection.
    let plain = c.url.replace("sslmode=require", "sslmode=disable");
    let refused = child(&plain, Some(&ca));
    assert!(!refused.contains(OPENED), "{refused}");
    assert!(refused.contains("no encryption"), "{refused}");
}

/// A URL rust-postgres does not accept is refused naming what is wrong with it (the option and
/// its value), not only as "invalid connection string".
#[test]
fn a_url_that_does_not_parse_says_why() {
    for (url, says) in [
        (
            "postgres://127.0.0.1:1/db?target_session_attrs=sometimes",
            "target_session_attrs",
        ),
        ("postgres://127.0.0.1:1/db?sslmode=always", "sslmode"),
        (
            "postgres://127.0.0.1:1/db?no_such_option=1",
            "no_such_option",
        ),
    ] {
        let message = match gpumeter_bank::open(url) {
            Err(gpumeter_bank::BankError::Storage { message, .. }) => message,
            other => panic!("{url}: {other:?}"),
        };
        assert!(
            message.contains("not a PostgreSQL connection URL") && message.contains(says),
            "{url}: {message}"
        );
    }
}
