//! Issue 30's rules through the `gpumeter` binary: a keyed retry with other parameters exits 1
//! naming the difference (item 8); a reservation's fee is positive (item 6); one grant cannot
//! lock the bank (item 10); `bank close` under a package rate (item 5); `idle` is listed apart
//! and never invoiced, granted or closed (item 7).

use std::path::{Path, PathBuf};

use gpumeter::core::{
    DeviceEntry, MeterKind, Quantity, RecordCounts, SourceEntry, UsageReport, UsageRow,
};
use serde_json::Value;

mod common;
use common::*;

/// A sealed usage report file of kernel launches `(tenant, window start, launches)` on one
/// H100, with a source of its own named `source`.
fn report_file(dir: &Path, source: &str, rows: &[(&str, &str, u128)]) -> PathBuf {
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".into(),
        metering_policy: "v1".into(),
        window_seconds: 3600,
        sources: vec![SourceEntry {
            name: format!("{source}.json"),
            format: "kineto".into(),
            sha256: format!("{:0>64}", hex(source)),
        }],
        devices: vec![DeviceEntry {
            device: 0,
            device_key: "GPU-0".into(),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            sm_count: Some(132),
            compute_capability: Some("9.0".into()),
            not_meterable: vec![],
        }],
        records: RecordCounts::default(),
        complete: Some(true),
        loss: vec![],
        usage: rows
            .iter()
            .map(|&(tenant, window, q)| UsageRow {
                tenant: tenant.into(),
                device: 0,
                device_key: "GPU-0".into(),
                window_start: window.into(),
                meter: MeterKind::KernelLaunches,
                quantity: Quantity(q),
            })
            .collect(),
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: vec![],
        sha256: String::new(),
    };
    r.seal_with_totals().expect("seal");
    let path = dir.join(format!("{source}.usage.json"));
    std::fs::write(&path, serde_json::to_string(&r).expect("json")).expect("write report");
    path
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn launches_book(dir: &Path, rate: &str) -> PathBuf {
    let path = dir.join("launches.toml");
    std::fs::write(
        &path,
        format!(
            "schema = \"gpumeter.pricebook/v1\"\nversion = \"rules\"\ncurrency = \"USD\"\n\
             [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
             [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1\"\n{rate}\n"
        ),
    )
    .expect("write book");
    path
}

fn bank_cmd(bank: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["bank", args[0], "--bank", s(bank)];
    all.extend_from_slice(&args[1..]);
    gpumeter(&all)
}

fn finalize(report: &Path, book: &Path, bank: &Path, from: &str, to: &str) -> Value {
    json(&ok(
        gpumeter(&[
            "invoice",
            "finalize",
            "--format",
            "usage",
            s(report),
            "--prices",
            s(book),
            "--bank",
            s(bank),
            "--from",
            from,
            "--to",
            to,
            "--json",
        ]),
        "finalize",
    ))
}

/// Stripe's rule at the command line: the same `--key` with other credits exits 1 naming the
/// key, the field and both values, and grants nothing; the same request again (without
/// `--from`, whose default is the first run's instant) is "already granted".
#[test]
fn a_keyed_grant_retried_with_other_parameters_exits_1_naming_the_difference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    let args = [
        "grant",
        "--tenant",
        "acme",
        "--credits",
        "5",
        "--rate",
        "0.10",
        "--key",
        "po-7",
    ];
    let o = ok(bank_cmd(&bank, &args), "grant");
    assert!(stdout(&o).starts_with("granted "), "{}", stdout(&o));
    let o = ok(bank_cmd(&bank, &args), "the same grant");
    assert!(
        stdout(&o).starts_with("already granted (same key), nothing changed"),
        "{}",
        stdout(&o)
    );
    let history = |bank: &Path| {
        json(&ok(bank_cmd(bank, &["history", "--json"]), "history"))
            .as_array()
            .expect("array")
            .len()
    };
    let n = history(&bank);
    for (flag, value, field) in [
        ("--credits", "6", "credits"),
        ("--rate", "0.20", "rate"),
        ("--tenant", "bob", "tenant"),
        ("--kind", "promotional", "kind"),
        ("--sku", "h100", "skus"),
        ("--expires", "2030-01-01T00:00:00Z", "expires"),
        ("--priority", "3", "priority"),
    ] {
        let mut other: Vec<&str> = args.to_vec();
        match other.iter().position(|a| *a == flag) {
            Some(i) => other[i + 1] = value,
            None => other.extend([flag, value]),
        }
        let o = bank_cmd(&bank, &other);
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("idempotency key `po-7`") && e.contains(&format!("its {field} was")),
            "{flag}: {e}"
        );
        assert!(!stdout(&o).contains("already granted"), "{flag}");
    }
    assert_eq!(history(&bank), n, "nothing granted");
}

/// `bank reserve` of 5K kernel launches on h100 per period for acme at 0.10 a credit, from
/// December 2022 to February 2023, with `fee`.
fn reserve_cmd(bank: &Path, fee: &str) -> std::process::Output {
    let fee = format!("--fee={fee}");
    bank_cmd(
        bank,
        &[
            "reserve",
            "--tenant",
            "acme",
            "--sku",
            "h100",
            "--meter",
            "kernel_launches",
            "--capacity",
            "5",
            "--unit",
            "1K",
            &fee,
            "--rate",
            "0.10",
            "--from",
            "2022-12-01T00:00:00Z",
            "--to",
            "2023-02-01T00:00:00Z",
        ],
    )
}

/// `--fee 0` would turn capacity into credits from nothing every period: refused (exit 2).
#[test]
fn a_reservation_of_fee_0_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    for fee in ["0", "-1.00"] {
        let o = reserve_cmd(&bank, fee);
        assert_eq!(o.status.code(), Some(2), "{fee}: {}", stderr(&o));
        assert!(stderr(&o).contains("must be positive"), "{}", stderr(&o));
    }
}

/// A grant or reservation the bank would refuse is refused before the bank is opened: no bank
/// file is created (hostile review of issue 30: a grant beyond the bounds left a new, empty
/// bank behind). A reservation retried with its fee spelled otherwise (`2` after `2.00`) is the
/// one recorded, not a second reservation.
#[test]
fn a_refused_request_creates_no_bank_and_a_respelled_reservation_is_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    let o = bank_cmd(
        &bank,
        &[
            "grant",
            "--tenant",
            "acme",
            "--credits",
            "1000000000001",
            "--rate",
            "0.10",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("1000000000000"), "{}", stderr(&o));
    assert!(!bank.exists(), "a refused grant created the bank");
    let reserve = |fee: &str| reserve_cmd(&bank, fee);
    let o = reserve("0");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!bank.exists(), "a refused reservation created the bank");
    let o = reserve("2.00");
    assert!(o.status.success(), "{}", stderr(&o));
    let first = stdout(&o);
    assert!(first.starts_with("reserved "), "{first}");
    let o = reserve("2");
    assert!(o.status.success(), "{}", stderr(&o));
    let again = stdout(&o);
    assert!(!again.starts_with("reserved "), "{again}");
    let id = |text: &str| {
        text.split_whitespace()
            .find(|w| w.starts_with("r-"))
            .map(|w| w.trim_end_matches(':').to_string())
    };
    assert_eq!(id(&again), id(&first), "{first} / {again}");
}

/// The grant of the largest decimal that used to lock every later purchased grant is refused
/// (exit 2, naming the bound); after a maximal grant another tenant's grant works.
#[test]
fn a_maximal_grant_leaves_room_for_every_other_tenant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    let o = bank_cmd(
        &bank,
        &[
            "grant",
            "--tenant",
            "whale",
            "--credits",
            "79228162514264337593543950335",
            "--rate",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("more than 1000000000000"),
        "{}",
        stderr(&o)
    );
    for (tenant, credits, rate) in [("whale", "1000000000000", "1000"), ("acme", "50", "0.10")] {
        ok(
            bank_cmd(
                &bank,
                &[
                    "grant",
                    "--tenant",
                    tenant,
                    "--credits",
                    credits,
                    "--rate",
                    rate,
                ],
            ),
            tenant,
        );
    }
    ok(bank_cmd(&bank, &["verify"]), "verify");
}

/// `bank close` under a package rate: 78 launches in packages of 25 with an increment of 10
/// bill 70 (3 packages, room for 75) and carry 8; 5 of them are held by the packages paid for,
/// and 3 are billed at 2.00 ÷ 25 each: 0.24 (it was 8 × 2.00 = 16.00).
#[test]
fn a_close_under_a_package_rate_bills_a_share_of_a_package() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    let book = launches_book(
        dir.path(),
        "model = \"package\"\npackage_size = \"25\"\nunit_price = \"2.00\"\nincrement = \"10\"",
    );
    let report = report_file(dir.path(), "dec", &[("acme", "2022-12-03T00:00:00Z", 78)]);
    let doc = finalize(
        &report,
        &book,
        &bank,
        "2022-12-01T00:00:00Z",
        "2023-01-01T00:00:00Z",
    );
    assert_eq!(doc["invoices"][0]["subtotal"], "6.00");
    let o = ok(
        bank_cmd(&bank, &["close", "--tenant", "acme", "--prices", s(&book)]),
        "close",
    );
    let text = stdout(&o);
    assert!(
        text.contains(
            "h100 kernel_launches: 8 1 at 2.00 per package of 25 1 (5 of them held by packages \
             paid for) = 0.24 USD"
        ),
        "{text}"
    );
    assert!(text.contains("total 0.24 USD"), "{text}");
}

/// A period finalized before it ended (`--allow-open-period`: its fragment is deposited at its
/// end, 2100), then `bank close` now (hostile review C1): the close draws that fragment, so it
/// is booked at the period's end and says so; `bank balance --at` an instant between and
/// `bank balance` answer (they exited 1, "fragment balance of -500"), and nothing is left.
#[test]
fn a_close_inside_an_open_period_is_booked_at_its_end_and_balances_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    let book = launches_book(dir.path(), "unit_price = \"0.0005\"\nincrement = \"1000\"");
    let report = report_file(
        dir.path(),
        "open",
        &[("acme", "2099-12-03T00:00:00Z", 2_500)],
    );
    ok(
        gpumeter(&[
            "invoice",
            "finalize",
            "--format",
            "usage",
            s(&report),
            "--prices",
            s(&book),
            "--bank",
            s(&bank),
            "--from",
            "2099-12-01T00:00:00Z",
            "--to",
            "2100-01-01T00:00:00Z",
            "--allow-open-period",
        ]),
        "finalize an open period",
    );
    let o = ok(
        bank_cmd(&bank, &["close", "--tenant", "acme", "--prices", s(&book)]),
        "close",
    );
    let text = stdout(&o);
    assert!(text.contains("h100 kernel_launches: 500 1"), "{text}");
    assert!(text.contains("booked at 2100-01-01T00:00:00Z"), "{text}");
    for at in [
        "2050-01-01T00:00:00Z",
        "2099-12-31T23:59:59Z",
        "2100-01-01T00:00:00Z",
    ] {
        let b = json(&ok(
            bank_cmd(
                &bank,
                &["balance", "--tenant", "acme", "--at", at, "--json"],
            ),
            "balance --at",
        ));
        assert_eq!(b["fragments"], Value::Array(vec![]), "{at}: {b}");
    }
    ok(
        bank_cmd(&bank, &["balance", "--tenant", "acme"]),
        "balance now",
    );
    ok(bank_cmd(&bank, &["verify"]), "verify");
}

/// A report with `idle` rows: `preview` and `invoice finalize` invoice the tenants only and
/// list `idle` apart (`extensions.idle`, valid against the schema, with a notice on stderr);
/// the bank holds nothing of `idle`, whose balance shows nothing; grant, reserve and close
/// refuse it (exit 2).
#[test]
fn idle_is_listed_apart_and_never_invoiced_granted_or_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bank = dir.path().join("bank.db");
    let book = launches_book(dir.path(), "unit_price = \"0.01\"");
    let report = report_file(
        dir.path(),
        "dec",
        &[
            ("acme", "2022-12-03T00:00:00Z", 100),
            ("idle", "2022-12-03T00:00:00Z", 40),
        ],
    );
    let o = ok(
        gpumeter(&[
            "preview",
            "--format",
            "usage",
            s(&report),
            "--prices",
            s(&book),
            "--json",
        ]),
        "preview",
    );
    assert!(
        stderr(&o).contains("notice: usage of `idle`"),
        "{}",
        stderr(&o)
    );
    let doc = json(&o);
    validate("gpumeter.invoice.v1.schema.json", &doc);
    let tenants: Vec<&str> = doc["invoices"]
        .as_array()
        .expect("invoices")
        .iter()
        .map(|i| i["tenant"].as_str().expect("tenant"))
        .collect();
    assert_eq!(tenants, ["acme"]);
    assert_eq!(doc["extensions"]["idle"]["usage"][0]["quantity"], "40");
    assert_eq!(
        doc["extensions"]["idle"]["warnings"][0]["code"],
        "idle_not_invoiced"
    );

    let done = finalize(
        &report,
        &book,
        &bank,
        "2022-12-01T00:00:00Z",
        "2023-01-01T00:00:00Z",
    );
    validate("gpumeter.invoice.v1.schema.json", &done);
    assert_eq!(done["invoices"].as_array().map(Vec::len), Some(1));
    assert_eq!(done["extensions"]["idle"]["usage"][0]["quantity"], "40");
    let history = json(&ok(bank_cmd(&bank, &["history", "--json"]), "history"));
    assert!(
        history
            .as_array()
            .expect("array")
            .iter()
            .all(|t| t["tenant"] != "idle"),
        "{history}"
    );
    let bal = json(&ok(
        bank_cmd(&bank, &["balance", "--tenant", "idle", "--json"]),
        "balance of idle",
    ));
    assert_eq!(bal["credits"], serde_json::json!([]));
    assert_eq!(bal["fragments"], serde_json::json!([]));
    assert_eq!(bal["receivable"], serde_json::json!({}));
    for args in [
        vec!["grant", "--tenant", "idle", "--credits", "5", "--rate", "1"],
        vec![
            "reserve",
            "--tenant",
            "idle",
            "--sku",
            "h100",
            "--meter",
            "kernel_launches",
            "--capacity",
            "5",
            "--unit",
            "1K",
            "--fee",
            "2",
            "--rate",
            "0.1",
            "--from",
            "2022-12-01T00:00:00Z",
            "--to",
            "2023-02-01T00:00:00Z",
        ],
        vec!["close", "--tenant", "idle", "--prices", s(&book)],
    ] {
        let o = bank_cmd(&bank, &args);
        assert_eq!(o.status.code(), Some(2), "{}: {}", args[0], stderr(&o));
        assert!(stderr(&o).contains("never invoiced"), "{}", stderr(&o));
    }
}
