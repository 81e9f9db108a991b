//! Issue 15's acceptance: eight worker processes finalizing 200 invoices for 20 tenants at
//! once, some invoices twice, on one ledger: each invoice applied once, no grant below zero,
//! `verify` passes, and the balances equal those of a sequential run. One test body
//! ([`eight_workers_finalize_200_invoices`]) runs on SQLite and on PostgreSQL (feature
//! `postgres`, the server of `gpumeter_test_postgres`).
//!
//! The workers are this test binary re-executed running only [`worker_process`], told what to
//! do by the environment variable [`WORKER_ENV`]; they rebuild the invoices from their numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use gpumeter_bank::{
    finalization_key, finalize, grant, verify, GrantKind, GrantRequest, Ledger, LedgerTx,
    MemoryLedger, Outcome, CREDITS,
};
use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::UsageReport;
use gpumeter_rating::PriceBook;
use rust_decimal::Decimal;

mod support;

/// Set in a re-executed test binary: `worker ID GO LOCATION` (wait for the file GO, then
/// finalize worker ID's invoices on the ledger at LOCATION, one line per invoice on stdout).
const WORKER_ENV: &str = "GPUMETER_BANK_TEST_WORKER";

const WORKERS: usize = 8;
const TENANTS: usize = 20;
const PERIODS: usize = 10;
const INVOICES: usize = TENANTS * PERIODS;

fn t(s: &str) -> u64 {
    parse_rfc3339(s).expect("an RFC 3339 time")
}

/// 0.50 USD per 1000 kernel launches on H100s, billed in whole thousands: the launches past a
/// whole thousand carry to the tenant's next finalization as a fragment.
fn book() -> PriceBook {
    PriceBook::from_toml_str(
        "workers.toml",
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"workers\"\ncurrency = \"USD\"\n\
         [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\nunit_price = \"0.50\"\nincrement = \"1\"\n",
    )
    .expect("the test's price book")
}

fn tenant(j: usize) -> String {
    format!("t{j:02}")
}

/// Invoice `i`: tenant `i % 20`, period `i / 20` (day `i / 20` of December 2026).
fn invoice_of(i: usize) -> (String, usize) {
    (tenant(i % TENANTS), i / TENANTS)
}

fn period(p: usize) -> (u64, u64) {
    let from = t("2026-12-01T00:00:00Z") + p as u64 * 86_400_000_000_000;
    (from, from + 86_400_000_000_000)
}

/// Invoice `i`'s usage: one sealed report of its tenant's launches in the first hour of its
/// period, 1 500 to 13 999 launches (so 0.50 to 6.50 USD, and a fragment left most times),
/// from a source of its own.
fn usage(i: usize) -> UsageReport {
    let (tenant, p) = invoice_of(i);
    let launches = 1_000 * (1 + (i * 7) % 13) as u128 + ((i * 379) % 1000) as u128;
    let window = rfc3339(period(p).0);
    support::report_of(&[(&tenant, &window, launches)], &format!("{tenant}-{p}"))
}

/// Invoice `i`'s finalization key, as the bank computes it.
fn key_of(i: usize, b: &PriceBook) -> String {
    let u = usage(i);
    let (from, to) = period(invoice_of(i).1);
    finalization_key(
        &invoice_of(i).0,
        (&rfc3339(from), &rfc3339(to)),
        &u.sha256,
        b.sha256(),
    )
    .expect("a finalization key")
}

/// The grants made before the run, 0.10 USD a credit (so one credit pays 10 cents, and every
/// burn is a whole number of tenths of a credit: no rounding). Tenants `j % 4 == 0` get 40
/// credits (4 USD), far less than their ~35 USD of invoices: they run out after one or two
/// invoices, so their finalizers contend for the last credits. Tenants `j % 4 == 1` get a
/// first grant of 30 credits (priority 1) and a second of 60 (priority 2): both run out.
/// The others get 1 000 credits, more than they use.
fn grants() -> Vec<GrantRequest> {
    let req = |j: usize, credits: &str, priority: i64, n: u32| GrantRequest {
        tenant: tenant(j),
        credits: Decimal::from_str(credits).expect("credits"),
        rate: Decimal::from_str("0.10").expect("a rate"),
        priority,
        effective: Some(t("2026-11-01T00:00:00Z")),
        expires: None,
        kind: GrantKind::Purchased,
        skus: vec![],
        meters: vec![],
        key: Some(format!("{}-{n}", tenant(j))),
        at: t("2026-11-01T00:00:00Z"),
    };
    let mut out = Vec::new();
    for j in 0..TENANTS {
        match j % 4 {
            0 => out.push(req(j, "40", 1, 1)),
            1 => {
                out.push(req(j, "30", 1, 1));
                out.push(req(j, "60", 2, 2));
            }
            _ => out.push(req(j, "1000", 1, 1)),
        }
    }
    out
}

/// Worker `w`'s invoices, in the order it finalizes them: its share (`i % 8 == w`), and
/// invoices of the next worker's share whose number is a multiple of 5, which that worker
/// finalizes too (40 invoices finalized twice). Both walk in invoice order, so the two
/// finalizations of a duplicated invoice happen at about the same time. Each tenant's
/// invoices fall to two workers' shares (`i % 20` and `i % 8` fix `i % 4`).
fn share(w: usize) -> Vec<usize> {
    (0..INVOICES)
        .filter(|i| i % WORKERS == w || (i % WORKERS == (w + 1) % WORKERS && i % 5 == 0))
        .collect()
}

fn read<L: Ledger, T>(
    l: &mut L,
    f: impl FnMut(&mut dyn LedgerTx) -> Result<T, gpumeter_bank::BankError>,
) -> T {
    l.atomically(false, f).expect("reading the ledger")
}

type Balances = BTreeMap<(String, String), Decimal>;

fn balances<L: Ledger>(l: &mut L) -> Balances {
    read(l, |t| t.balances(""))
        .into_iter()
        .map(|(a, c, x)| ((a, c), x))
        .collect()
}

/// The 200 finalizations one after the other on a fresh memory ledger, in `order`.
fn sequential(order: impl Iterator<Item = usize>) -> Balances {
    let b = book();
    let mut l = MemoryLedger::new();
    for g in grants() {
        grant(&mut l, &g).expect("a grant");
    }
    for i in order {
        let done = finalize(&mut l, &usage(i), &b, Some(period(invoice_of(i).1)), true)
            .expect("a sequential finalization");
        assert_eq!(done.outcomes, [Outcome::Applied], "invoice {i}");
    }
    balances(&mut l)
}

// ---------------------------------------------------------------------------------------
// The workers.

/// Does nothing in a normal run. With [`WORKER_ENV`] set, is one worker of
/// [`eight_workers_finalize_200_invoices`].
#[test]
fn worker_process() {
    let Ok(role) = std::env::var(WORKER_ENV) else {
        return;
    };
    let words: Vec<&str> = role.splitn(4, ' ').collect();
    let ["worker", id, go, location] = words.as_slice() else {
        panic!("{WORKER_ENV}={role:?}: unknown role");
    };
    let id: usize = id.parse().expect("a worker id");
    let b = book();
    // The invoices are built and the connection opened before the start, so that the workers
    // run their finalizations at the same time.
    let work: Vec<(usize, UsageReport)> = share(id).into_iter().map(|i| (i, usage(i))).collect();
    let mut l = gpumeter_bank::open(location).expect("opening the ledger in a worker");
    let go = Path::new(go);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !go.exists() {
        assert!(Instant::now() < deadline, "worker {id}: no start in 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    // On a line of its own: libtest has written `test worker_process ... ` without a newline.
    println!();
    for (i, u) in work {
        let done = finalize(&mut l, &u, &b, Some(period(invoice_of(i).1)), true)
            .unwrap_or_else(|e| panic!("worker {id}, invoice {i}: {e}"));
        let [outcome] = done.outcomes.as_slice() else {
            panic!("worker {id}, invoice {i}: {} outcomes", done.outcomes.len());
        };
        let word = match outcome {
            Outcome::Applied => "applied",
            Outcome::AlreadyFinalized => "already",
        };
        println!("{word} {i} {}", done.document.invoices[0].sha256);
    }
}

fn spawn_worker(id: usize, go: &Path, location: &str) -> Child {
    let exe = std::env::current_exe().expect("the test binary");
    Command::new(exe)
        .args([
            "--exact",
            "worker_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            WORKER_ENV,
            format!("worker {id} {} {location}", go.display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting a worker process")
}

// ---------------------------------------------------------------------------------------
// The test body, on a ledger at `location` (a file path or a PostgreSQL URL).

/// Why the balances can be compared with a sequential run's, whatever order the workers
/// finalized in: every quantity a finalization moves is a function of the tenant's totals,
/// not of the order of its invoices.
/// - Credits: each invoice burns `min(its amount, what the grants still pay)`, grant by grant
///   in burn order, at 10 cents a credit exactly. Over a tenant's invoices in any order that
///   sums to `min(Σ amounts, Σ grants)`, first grant first: the credits left, the credits
///   burned per grant and the USD they paid are the same in every order.
/// - Fragments: each finalization bills the whole thousands of (carried fragment + its
///   launches) and carries the rest, so after all of a tenant's invoices it has billed
///   `⌊Σ launches / 1000⌋` thousands at 0.50 (exact cents) and carries `Σ launches mod 1000`,
///   in any order.
/// - Receivable and revenue follow from those. What does depend on the order (which invoice
///   got the credits, the transactions' order and hashes) is not in the balances.
///
/// The test checks that premise too: two sequential runs in opposite orders give the same
/// balances.
fn eight_workers_finalize_200_invoices(location: &str, go_dir: &Path) {
    let b = book();
    let t0 = Instant::now();
    let forward = sequential(0..INVOICES);
    assert_eq!(
        forward,
        sequential((0..INVOICES).rev()),
        "the balances of a sequential run depend on its order: the comparison means nothing"
    );
    let sequential_s = t0.elapsed().as_secs_f64();
    // The grants that run out do: their tenants owe a part of their invoices.
    for j in (0..TENANTS).filter(|j| j % 4 < 2) {
        let owed = forward
            .get(&(
                format!("tenant:{}:receivable", tenant(j)),
                "USD".to_string(),
            ))
            .copied()
            .unwrap_or_default();
        assert!(
            owed > Decimal::ZERO,
            "tenant {j} owes nothing: its grants did not run out"
        );
    }

    {
        let mut l = gpumeter_bank::open(location).expect("creating the ledger");
        for g in grants() {
            grant(&mut l, &g).expect("a grant");
        }
    }
    let go = go_dir.join("go");
    let t1 = Instant::now();
    let workers: Vec<Child> = (0..WORKERS)
        .map(|w| spawn_worker(w, &go, location))
        .collect();
    std::fs::write(&go, b"").expect("starting the workers");
    // Per invoice: the workers that applied it, and the invoice digests every worker got back.
    let mut applied: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut already: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut digests: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for (w, child) in workers.into_iter().enumerate() {
        let out = child.wait_with_output().expect("waiting for a worker");
        assert!(
            out.status.success(),
            "worker {w} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut reported = Vec::new();
        for line in stdout.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            let (kind, i, digest) = match words.as_slice() {
                [kind @ ("applied" | "already"), i, digest] => (
                    *kind,
                    i.parse::<usize>().expect("an invoice number"),
                    *digest,
                ),
                _ => continue,
            };
            reported.push(i);
            digests.entry(i).or_default().insert(digest.to_string());
            let to = if kind == "applied" {
                &mut applied
            } else {
                &mut already
            };
            to.entry(i).or_default().push(w);
        }
        assert_eq!(
            reported,
            share(w),
            "worker {w} reports each of its invoices, in order"
        );
    }
    let concurrent_s = t1.elapsed().as_secs_f64();

    // Each invoice applied exactly once; a duplicated one found finalized by the other worker,
    // which got back the same invoice (same digest, so the same ledger head too).
    for i in 0..INVOICES {
        assert_eq!(
            applied.get(&i).map(Vec::len),
            Some(1),
            "invoice {i}: applied {applied:?}"
        );
        let twice = (0..WORKERS).filter(|&w| share(w).contains(&i)).count();
        assert_eq!(
            already.get(&i).map_or(0, Vec::len),
            twice - 1,
            "invoice {i}: finalized by {twice} workers"
        );
        assert_eq!(
            digests[&i].len(),
            1,
            "invoice {i}: both workers got the same invoice"
        );
    }
    assert_eq!(already.values().map(Vec::len).sum::<usize>(), 40);

    let mut l = gpumeter_bank::open_existing(location).expect("reopening the ledger");
    let report = read(&mut l, |t| verify(&*t));
    let grants_n = grants().len() as u64;
    // A tenant's days finalized out of order (its two workers race) move their fragments in
    // `carry` transactions, booked at the latest business time of the tenant's fragment
    // postings, so that no as-of balance is negative; the balances at the end are the same.
    let carries = read(&mut l, |t| t.transactions(Some("carry"))).len() as u64;
    assert_eq!(report.transactions, grants_n + INVOICES as u64 + carries);
    let keys: BTreeSet<String> = read(&mut l, |t| t.transactions(Some("finalize")))
        .into_iter()
        .map(|t| t.tx.key)
        .collect();
    let expected: BTreeSet<String> = (0..INVOICES)
        .map(|i| format!("finalize:{}", key_of(i, &b)))
        .collect();
    assert_eq!(
        keys, expected,
        "the ledger holds each invoice's finalization once"
    );

    // Every as-of balance answers (none negative), at each business time and just before it.
    let times: BTreeSet<u64> = read(&mut l, |t| t.transactions(None))
        .iter()
        .map(|t| parse_rfc3339(&t.tx.at).expect("a business time"))
        .collect();
    for tenant in (0..TENANTS).map(tenant) {
        for &at in times
            .iter()
            .flat_map(|a| [a.saturating_sub(1), *a])
            .collect::<Vec<_>>()
            .iter()
        {
            gpumeter_bank::balance(&mut l, &tenant, at)
                .unwrap_or_else(|e| panic!("{tenant}'s balance as of {}: {e}", rfc3339(at)));
        }
    }
    let got = balances(&mut l);
    for ((account, commodity), amount) in &got {
        if commodity == CREDITS && account.starts_with("tenant:") {
            assert!(*amount >= Decimal::ZERO, "{account}: {amount} credits");
        }
        if account.contains(":fragments:") {
            assert!(*amount >= Decimal::ZERO, "{account}: {amount} {commodity}");
        }
    }
    assert_eq!(got, forward, "the balances equal the sequential run's");
    eprintln!(
        "{WORKERS} workers on {}: {INVOICES} invoices ({} finalizations) in {concurrent_s:.1} s; \
         two sequential runs on memory ledgers {sequential_s:.1} s",
        gpumeter_bank::redact(location),
        INVOICES + 40
    );
}

#[test]
fn eight_workers_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("bank.sqlite");
    eight_workers_finalize_200_invoices(path.to_str().expect("a UTF-8 path"), dir.path());
}

#[cfg(feature = "postgres")]
#[test]
fn eight_workers_on_postgres() {
    let Some(schema) = gpumeter_test_postgres::Schema::fresh("eight_workers") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    eight_workers_finalize_200_invoices(&schema.url, dir.path());
}
