//! Billing workers on one ledger at once (issue 15 item 2): finalizations of different tenants
//! and of one tenant from several processes, the same key appended by two writers at once, a
//! deadlock retried, and retries that run out.
//!
//! The bodies that make sense on both backends take a [`Backend`] and have an SQLite and a
//! PostgreSQL `#[test]`; the PostgreSQL ones need the `postgres` feature (ignored without it)
//! and the test server (`GPUMETER_TEST_POSTGRES`; `skipped:` without it, a failure under
//! `CI=true`). The tests of lock waits and deadlocks are PostgreSQL's alone: SQLite runs one
//! writer at a time (`BEGIN IMMEDIATE`), so its writers never hold locks against each other.
//!
//! The worker processes are this test binary run again with only [`child_process`], told
//! what to do by the environment variable [`CHILD_ENV`].

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{mpsc, Barrier};
use std::time::{Duration, Instant};

use gpumeter_bank::{
    finalize, grant, reserve, verify, Appended, BankError, GrantKind, Ledger, LedgerTx,
    NewTransaction, Outcome, Posting, CREDITS,
};
use gpumeter_core::UsageReport;
use rust_decimal::Decimal;
use support::{book, d, grant_req, report_of, reservation, t, Backend, Place};

/// Set in a re-executed test binary: `finalize WORKER GO LOCATION` (GO: the file whose
/// creation starts the workers).
const CHILD_ENV: &str = "GPUMETER_BANK_TEST_FINALIZER";

/// Worker processes finalizing at once.
const WORKERS: u32 = 4;
/// Reports per worker of its own tenant, and reports every worker finalizes.
const REPORTS: u32 = 4;

/// The tenant only worker `w`'s reports bill (shared reports add a little to it).
fn own_tenant(w: u32) -> String {
    format!("own-{w}")
}

/// The tenant every worker bills, from the same reports.
const SHARED: &str = "shared";

fn hour(h: u32) -> String {
    format!("2026-12-01T{h:02}:00:00Z")
}

/// Worker `w`'s `j`-th report: 1700 launches of its own tenant in hour `j`.
fn own_report(w: u32, j: u32) -> (String, UsageReport) {
    let name = format!("own{w}-{j}");
    let r = report_of(&[(&own_tenant(w), &hour(j), 1700)], &name);
    (name, r)
}

/// The `j`-th report every worker finalizes: the shared tenant and one own tenant, so that a
/// finalization holds two tenants (locked in one order by every worker).
fn shared_report(j: u32) -> (String, UsageReport) {
    let name = format!("shared-{j}");
    let r = report_of(
        &[
            (SHARED, &hour(10 + j), 1700 + u128::from(j) * 100),
            (&own_tenant(j % WORKERS), &hour(10 + j), 900),
        ],
        &name,
    );
    (name, r)
}

/// What worker `w` finalizes, in its order: its own reports, each followed by a shared one,
/// the shared ones from a starting point of its own (so workers meet on the same key at
/// different times).
fn worker_reports(w: u32) -> Vec<(String, UsageReport)> {
    (0..REPORTS)
        .flat_map(|k| [own_report(w, k), shared_report((k + w) % REPORTS)])
        .collect()
}

/// Every tenant and its grants: 3 credits at priority 1 and 5 at priority 2 (0.80 USD in
/// all), less than each tenant's usage is worth, so finalizations burn them to zero and
/// would overdraw them if two spent the same credits.
fn tenants() -> Vec<String> {
    let mut all: Vec<String> = (0..WORKERS).map(own_tenant).collect();
    all.push(SHARED.to_string());
    all
}

fn grant_all<L: Ledger>(l: &mut L) -> Decimal {
    let mut granted = Decimal::ZERO;
    for tenant in tenants() {
        for (credits, priority, key) in [("3", 1, "a"), ("5", 2, "b")] {
            let req = grant_req(
                &tenant,
                credits,
                priority,
                GrantKind::Purchased,
                None,
                &format!("{tenant}-{key}"),
            );
            grant(l, &req).expect("a grant");
            granted += d(credits);
        }
    }
    granted
}

/// The worker process: once `go` exists, finalizes [`worker_reports`], printing
/// `OUTCOME REPORT TENANT` per invoice.
fn finalize_worker(w: u32, go: &Path, location: &str) {
    while !go.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut l = gpumeter_bank::open(location).expect("opening the ledger in a worker");
    let b = book();
    // On a line of its own: libtest wrote `test child_process ... `.
    println!();
    for (name, report) in worker_reports(w) {
        let f = finalize(&mut l, &report, &b, None, true).expect("finalizing in a worker");
        for (inv, outcome) in f.document.invoices.iter().zip(&f.outcomes) {
            let what = match outcome {
                Outcome::Applied => "applied",
                Outcome::AlreadyFinalized => "already",
            };
            println!("{what} {name} {}", inv.tenant);
        }
    }
}

/// Does nothing in a normal run. With [`CHILD_ENV`] set, acts as a worker process.
#[test]
fn child_process() {
    let Ok(role) = std::env::var(CHILD_ENV) else {
        return;
    };
    // The location comes last: a file path may hold spaces.
    match role.splitn(4, ' ').collect::<Vec<_>>().as_slice() {
        ["finalize", w, go, location] => {
            finalize_worker(w.parse().expect("a worker id"), Path::new(go), location)
        }
        _ => panic!("{CHILD_ENV}={role:?}: unknown role"),
    }
}

fn spawn_worker(role: &str) -> Child {
    let exe = std::env::current_exe().expect("the test binary");
    Command::new(exe)
        .args([
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting a worker process")
}

type Balances = BTreeMap<(String, String), Decimal>;

fn balances<L: Ledger>(l: &mut L) -> Balances {
    l.atomically(false, |t| t.balances(""))
        .expect("reading the balances")
        .into_iter()
        .map(|(a, c, x)| ((a, c), x))
        .collect()
}

/// Credits burned by finalizations: what they took off tenants' credit accounts.
fn burned<L: Ledger>(l: &mut L) -> Decimal {
    l.atomically(false, |t| t.transactions(Some("finalize")))
        .expect("reading the finalizations")
        .iter()
        .flat_map(|t| &t.tx.postings)
        .filter(|p| p.commodity == CREDITS && p.account.starts_with("tenant:"))
        .map(|p| -p.amount)
        .sum()
}

/// [`WORKERS`] processes finalize their own tenant's reports and the same shared reports at
/// once on a ledger of `backend`: each (report, tenant) invoice applied once, no credit
/// account below zero, every credit burned once, `verify` passes, and the balances are those
/// of the same reports finalized one after another on a new ledger.
fn workers_finalize_once(backend: Backend) {
    let Some(place) = Place::new(backend, "workers") else {
        return;
    };
    let granted = grant_all(&mut place.open());
    let go = place.dir().join("go");
    let t0 = Instant::now();
    let workers: Vec<Child> = (0..WORKERS)
        .map(|w| spawn_worker(&format!("finalize {w} {} {}", go.display(), place.location)))
        .collect();
    std::fs::write(&go, b"").expect("starting the workers");
    // Meanwhile `verify` runs again and again beside them: each run checks one consistent
    // state of the ledger (a chain and balances of the same transactions).
    let done = AtomicBool::new(false);
    let (outputs, verified) = std::thread::scope(|s| {
        let verifier = s.spawn(|| {
            let mut l = place.open();
            let mut runs = 0u32;
            // At least once, however fast the workers are.
            loop {
                l.atomically(false, |t| verify(t))
                    .expect("verify while the workers finalize");
                runs += 1;
                if done.load(Ordering::SeqCst) {
                    break;
                }
                // A pause, as a monitor would take: on SQLite a read holds the one writer's
                // lock (`BEGIN IMMEDIATE`), and back-to-back reads would starve the workers.
                std::thread::sleep(Duration::from_millis(10));
            }
            runs
        });
        let outputs: Vec<std::process::Output> = workers
            .into_iter()
            .map(|w| w.wait_with_output().expect("waiting for a worker"))
            .collect();
        done.store(true, Ordering::SeqCst);
        (outputs, verifier.join().expect("the verifier"))
    });
    let mut applied: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut lines = 0;
    for out in outputs {
        assert!(
            out.status.success(),
            "a worker failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["applied", report, tenant] => {
                    *applied
                        .entry(((*report).to_string(), (*tenant).to_string()))
                        .or_insert(0) += 1;
                    lines += 1;
                }
                ["already", _, _] => lines += 1,
                _ => {}
            }
        }
    }
    let elapsed = t0.elapsed();
    // Own reports bill one tenant, shared ones two.
    let per_worker = REPORTS + 2 * REPORTS;
    assert_eq!(lines, WORKERS * per_worker, "every invoice reported");
    let mut expected: Vec<(String, String)> = Vec::new();
    for w in 0..WORKERS {
        for j in 0..REPORTS {
            expected.push((own_report(w, j).0, own_tenant(w)));
        }
    }
    for j in 0..REPORTS {
        expected.push((shared_report(j).0, SHARED.to_string()));
        expected.push((shared_report(j).0, own_tenant(j % WORKERS)));
    }
    for k in &expected {
        assert_eq!(applied.get(k), Some(&1), "{k:?} applied once");
    }
    assert_eq!(applied.len(), expected.len(), "{applied:?}");

    let mut l = place.open();
    let report = l.atomically(false, |t| verify(t)).expect("verify");
    let finalizations = l
        .atomically(false, |t| t.transactions(Some("finalize")))
        .expect("the finalizations");
    assert_eq!(finalizations.len(), expected.len());
    let grants = 2 * tenants().len();
    // A tenant's hours finalized out of order move their fragments in `carry` transactions
    // (booked at the latest business time of the tenant's fragment postings).
    let carries = l
        .atomically(false, |t| t.transactions(Some("carry")))
        .expect("the carries")
        .len();
    assert_eq!(
        report.transactions,
        (grants + expected.len() + carries) as u64
    );
    let concurrent = balances(&mut l);
    for ((account, commodity), amount) in &concurrent {
        if commodity == CREDITS && account.starts_with("tenant:") {
            assert!(*amount >= Decimal::ZERO, "{account} overdrawn: {amount}");
        }
    }
    // Usage is worth more than the credits: all burned, none twice.
    assert_eq!(burned(&mut l), granted);

    let Some(sequential) = Place::new(backend, "sequential") else {
        return;
    };
    let mut s = sequential.open();
    grant_all(&mut s);
    let b = book();
    let mut all: Vec<(String, UsageReport)> = (0..WORKERS)
        .flat_map(|w| (0..REPORTS).map(move |j| own_report(w, j)))
        .collect();
    all.extend((0..REPORTS).map(shared_report));
    for (_, r) in &all {
        finalize(&mut s, r, &b, None, true).expect("finalizing one after another");
    }
    assert_eq!(concurrent, balances(&mut s));
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "{backend:?}: {WORKERS} workers, {} finalizations ({} invoices) in {:.2} s, \
             verified {verified} times meanwhile\n",
            WORKERS * 2 * REPORTS,
            expected.len(),
            elapsed.as_secs_f64()
        ),
    );
}

#[test]
fn workers_finalizing_the_same_and_different_tenants_apply_each_invoice_once() {
    workers_finalize_once(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn workers_finalizing_the_same_and_different_tenants_apply_each_invoice_once_on_postgres() {
    workers_finalize_once(Backend::Postgres);
}

/// Finalizers of four tenants' reports for one period, at once, each on its own connection:
/// every report also owes a reserved tenant's monthly fee (a tenant the report has no usage
/// of, found from the ledger's reservations). The fee is billed once, by one of them; the
/// others see it billed once they hold that tenant.
fn a_reservation_fee_billed_once(backend: Backend) {
    let Some(place) = Place::new(backend, "reservation_fee") else {
        return;
    };
    reserve(&mut place.open(), &reservation("res", "2.00", None)).expect("a reservation");
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    let reports: Vec<UsageReport> = (0..WORKERS)
        .map(|i| report_of(&[(&own_tenant(i), &hour(i), 1000)], &format!("fee-{i}")))
        .collect();
    let ledgers: Vec<gpumeter_bank::AnyLedger> = reports.iter().map(|_| place.open()).collect();
    let start = Barrier::new(reports.len());
    let outcomes: Vec<Vec<(String, Outcome)>> = std::thread::scope(|s| {
        let handles: Vec<_> = ledgers
            .into_iter()
            .zip(&reports)
            .map(|(mut l, r)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    let f = finalize(&mut l, r, &book(), Some(dec), true).expect("finalizing");
                    f.document
                        .invoices
                        .iter()
                        .map(|i| i.tenant.clone())
                        .zip(f.outcomes)
                        .collect()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a finalizer"))
            .collect()
    });
    let fee_invoices: Vec<&(String, Outcome)> = outcomes
        .iter()
        .flatten()
        .filter(|(tenant, _)| tenant == "res")
        .collect();
    assert_eq!(fee_invoices.len(), 1, "{outcomes:?}");
    assert_eq!(fee_invoices[0].1, Outcome::Applied);
    let mut l = place.open();
    let fees = l
        .atomically(false, |t| t.transactions(Some("finalize")))
        .expect("the finalizations")
        .iter()
        .filter(|t| t.tx.tenant.as_deref() == Some("res"))
        .count();
    assert_eq!(fees, 1);
    let receivable = l
        .atomically(false, |t| {
            t.balance(&gpumeter_bank::accounts::receivable("res"), "USD")
        })
        .expect("a balance");
    assert_eq!(receivable, d("2.00"));
    l.atomically(false, |t| verify(t)).expect("verify");
}

#[test]
fn a_reservation_fee_owed_by_every_report_is_billed_once() {
    a_reservation_fee_billed_once(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_reservation_fee_owed_by_every_report_is_billed_once_on_postgres() {
    a_reservation_fee_billed_once(Backend::Postgres);
}

fn transfer(key: &str) -> NewTransaction {
    NewTransaction {
        key: key.to_string(),
        kind: "grant".to_string(),
        at: "2026-12-01T00:00:00Z".to_string(),
        tenant: Some("acme".to_string()),
        postings: vec![
            Posting::new("tenant:acme:credits:g-1", CREDITS, d("1.5")),
            Posting::new("provider:promotions", CREDITS, d("-1.5")),
        ],
        memo: serde_json::json!({ "key": key }),
    }
}

/// Two writers append one key at once: the first still holds its transaction open when the
/// second looks the key up (not there yet) and goes on to append it; the second finds it
/// taken when its turn comes (on PostgreSQL: its insert meets the unique key, after waiting
/// for the hash chain, which the test sees it wait for). One `Applied`, one `AlreadyApplied`
/// of the same stored transaction, the key stored once.
fn the_same_key_at_once(backend: Backend) {
    let Some(place) = Place::new(backend, "same_key") else {
        return;
    };
    let tx = transfer("same-key");
    // Both ledgers exist before either writes: the schema is made once.
    let mut first = place.open();
    let mut second = gpumeter_bank::open(&place.child_location("second"))
        .expect("opening the ledger a second time");
    let started = Barrier::new(2);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            first.atomically(true, |t| {
                let out = t.append(tx.clone())?;
                started.wait();
                // Hold the transaction open until the second writer waits for it.
                match backend {
                    Backend::Postgres => wait_until_waiting(&place, "second"),
                    Backend::Sqlite => std::thread::sleep(Duration::from_millis(200)),
                }
                Ok(out)
            })
        });
        let b = s.spawn(|| {
            started.wait();
            second.atomically(true, |t| t.append(tx.clone()))
        });
        (
            a.join().expect("the first writer"),
            b.join().expect("the second writer"),
        )
    });
    let a = a.expect("the first append");
    let b = b.expect("the second append");
    match (&a, &b) {
        (Appended::Applied(x), Appended::AlreadyApplied(y)) => assert_eq!(x, y),
        other => panic!("expected Applied then AlreadyApplied, got {other:?}"),
    }
    assert_eq!(place.count("transactions WHERE key = 'same-key'"), 1);
    let report = place
        .open()
        .atomically(false, |t| verify(t))
        .expect("verify");
    assert_eq!(report.transactions, 1);
}

/// Waits until the connection of `place.child_location(tag)` waits for a lock (PostgreSQL).
fn wait_until_waiting(place: &Place, tag: &str) {
    let t0 = Instant::now();
    while !place.waits_for_a_lock(tag) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{tag} never waited for a lock"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_same_key_appended_at_once_applies_once() {
    the_same_key_at_once(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn the_same_key_appended_at_once_applies_once_on_postgres() {
    the_same_key_at_once(Backend::Postgres);
}

/// A preview (`commit = false`, as `finalize` without committing runs) while a writer holds
/// its tenant and the chain, its append not yet committed, neither waits for the writer nor
/// sees its work (docs/BANK.md, "Reading a bank"): it reads the ledger as last committed, appends
/// after that head in memory, and stores nothing; the writer, which waits for the preview to
/// end before it commits, is not held up by it either. Before issue 30 a preview took the
/// tenant's lock and waited (the writer here would then wait for it for ever: the test fails
/// by its timeout).
fn a_preview_beside_a_writer(backend: Backend) {
    let Some(place) = Place::new(backend, "preview") else {
        return;
    };
    let mut writer = place.open();
    let committed = writer
        .atomically(true, |t| t.append(transfer("committed")))
        .expect("a first transaction");
    let committed = committed.stored().clone();
    let mut preview = gpumeter_bank::open(&place.child_location("preview"))
        .expect("opening the ledger a second time");
    let account = "tenant:acme:credits:g-1";
    let (held_tx, held) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel::<()>();
    let (written, previewed) = std::thread::scope(|s| {
        let w = s.spawn(move || {
            writer.atomically(true, |t| {
                t.lock_tenants(&["acme"])?;
                let out = t.append(transfer("written"))?;
                held_tx.send(()).expect("the test");
                done.recv_timeout(Duration::from_secs(20))
                    .map_err(|e| BankError::Refused(format!("the preview waited: {e}")))?;
                Ok(out)
            })
        });
        held.recv().expect("the writer holds acme and the chain");
        let previewed = preview.atomically(false, |t| {
            let before = t.balance(account, CREDITS)?;
            t.lock_tenants(&["acme"])?;
            t.lock_all()?;
            let appended = t.append(transfer("previewed"))?;
            let after = t.balance(account, CREDITS)?;
            let listed = t.balances("tenant:acme:")?;
            let head = t.head()?;
            Ok((before, appended, after, listed, head))
        });
        done_tx.send(()).expect("the writer");
        let written = w.join().expect("the writer").expect("the writer's append");
        (written, previewed)
    });
    let (before, appended, after, listed, head) = previewed.expect("the preview");
    assert_eq!(before, d("1.5"), "the committed transfer only");
    assert_eq!(
        after,
        d("3.0"),
        "the committed transfer and the preview's own"
    );
    assert_eq!(
        listed,
        vec![(account.to_string(), CREDITS.to_string(), d("3.0"))]
    );
    match appended {
        Appended::Applied(p) => {
            assert_eq!((p.seq, &p.prev_hash), (2, &committed.hash));
            assert_eq!(head.as_deref(), Some(p.hash.as_str()));
        }
        other => panic!("the preview's append: {other:?}"),
    }
    // The writer committed after the preview; the preview stored nothing.
    assert_eq!(written.stored().seq, 2);
    assert_eq!(place.count("transactions"), 2);
    assert_eq!(place.count("transactions WHERE key = 'previewed'"), 0);
    let report = place
        .open()
        .atomically(false, |t| verify(t))
        .expect("verify");
    assert_eq!(report.transactions, 2);
}

#[test]
fn a_preview_beside_a_writer_neither_waits_nor_sees_its_uncommitted_work() {
    a_preview_beside_a_writer(Backend::Sqlite);
}

#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_preview_beside_a_writer_neither_waits_nor_sees_its_uncommitted_work_on_postgres() {
    a_preview_beside_a_writer(Backend::Postgres);
}

/// PostgreSQL: tenant locks of different tenants are held at once; a second writer of a
/// held tenant waits for the first to commit.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn different_tenants_proceed_together_and_one_tenant_takes_turns() {
    let Some(place) = Place::new(Backend::Postgres, "tenant_locks") else {
        return;
    };
    let mut a = place.open();
    let mut b = gpumeter_bank::open(&place.child_location("b")).expect("a second connection");
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        let first = s.spawn(move || {
            a.atomically(true, |t| {
                t.lock_tenants(&["alice"])?;
                held_tx.send(()).expect("the test");
                // Alice stays held until the test is done with both checks.
                done_rx.recv().expect("the test");
                Ok(())
            })
        });
        held_rx.recv().expect("the first writer holds alice");
        // Another tenant: granted at once, while alice is held.
        b.atomically(true, |t| t.lock_tenants(&["bob"]))
            .expect("bob, while alice is held");
        // The same tenant: waits.
        let second = s.spawn(|| {
            let t0 = Instant::now();
            b.atomically(true, |t| t.lock_tenants(&["bob", "alice"]))
                .map(|()| t0.elapsed())
        });
        wait_until_waiting(&place, "b");
        std::thread::sleep(Duration::from_millis(100));
        assert!(!second.is_finished(), "alice was granted twice");
        done_tx.send(()).expect("the first writer");
        first.join().expect("the first writer").expect("alice");
        let waited = second
            .join()
            .expect("the second writer")
            .expect("alice, after the first writer");
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
    });
}

/// Writer `i`: holds `order[0]`, waits (on its first run only) until the other writer holds
/// its first tenant, asks for `order[1]`, and appends a transaction of its own.
fn lock_two(
    l: &mut gpumeter_bank::AnyLedger,
    i: usize,
    order: [&str; 2],
    both_hold_one: &Barrier,
    runs: &[AtomicU32; 2],
) -> Result<Appended, BankError> {
    l.atomically(true, |t| {
        let run = runs[i].fetch_add(1, Ordering::SeqCst) + 1;
        t.lock_tenants(&[order[0]])?;
        if run == 1 {
            both_hold_one.wait();
        }
        t.lock_tenants(&[order[1]])?;
        t.append(transfer(&format!("writer-{i}")))
    })
}

/// PostgreSQL: two writers lock two tenants in opposite orders (as two finalizations whose
/// tenant sets grew under them might): the server breaks the deadlock by failing one, whose
/// work the ledger runs again; both transactions are applied, the chain verifies.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_deadlock_is_retried_and_both_writers_finish() {
    let Some(place) = Place::new(Backend::Postgres, "deadlock") else {
        return;
    };
    // Deadlocks found after 100 ms rather than the server's default 1 s.
    let url = place.with_settings(&[("deadlock_timeout", "100ms")]);
    let mut one = gpumeter_bank::open(&url).expect("a ledger");
    let mut two = gpumeter_bank::open(&url).expect("a second ledger");
    let both_hold_one = Barrier::new(2);
    let runs = [AtomicU32::new(0), AtomicU32::new(0)];
    let (barrier, counts) = (&both_hold_one, &runs);
    let out = std::thread::scope(|s| {
        let a = s.spawn(move || lock_two(&mut one, 0, ["alice", "bob"], barrier, counts));
        let b = s.spawn(move || lock_two(&mut two, 1, ["bob", "alice"], barrier, counts));
        [a.join().expect("writer 0"), b.join().expect("writer 1")]
    });
    for (i, r) in out.iter().enumerate() {
        match r {
            Ok(Appended::Applied(_)) => {}
            other => panic!("writer {i}: {other:?}"),
        }
    }
    let runs = runs.map(|r| r.into_inner());
    let mut sorted = runs;
    sorted.sort_unstable();
    assert_eq!(sorted, [1, 2], "one writer ran its work again: {runs:?}");
    let report = place
        .open()
        .atomically(false, |t| verify(t))
        .expect("verify");
    assert_eq!(report.transactions, 2);
}

/// PostgreSQL: work that deadlocks on every attempt (another connection makes it so, each
/// time) gives up after the ledger's bound with `BankError::Contended`, which names the
/// location, the attempts and the server's last word; nothing of it is applied.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn retries_that_run_out_are_contended() {
    let Some(place) = Place::new(Backend::Postgres, "contended") else {
        return;
    };
    // Each time, the writer under test closes the cycle (it asks for bob once the other
    // connection is seen waiting for alice), so it finds the deadlock (after 50 ms) and is the
    // one failed; the other would look only after 60 s.
    let victim_url = place.with_settings(&[("deadlock_timeout", "50ms")]);
    let other_url = place.tagged(
        &place.with_settings(&[("deadlock_timeout", "60s")]),
        "other",
    );
    let mut victim = gpumeter_bank::open(&victim_url).expect("a ledger");
    let mut other = gpumeter_bank::open(&other_url).expect("a second ledger");
    let (holds_alice_tx, holds_alice) = mpsc::channel::<()>();
    let (holds_bob_tx, holds_bob) = mpsc::channel::<()>();
    let runs = AtomicU32::new(0);
    let t0 = Instant::now();
    let result = std::thread::scope(|s| {
        // The other connection: each round holds bob, then asks for alice once the victim
        // holds alice (and asks for bob): a deadlock. It ends when the victim's side closes.
        // (Its work commits, so that it takes locks: work without a commit takes none.)
        s.spawn(move || loop {
            let round = other.atomically(true, |t| {
                t.lock_tenants(&["bob"])?;
                let _ = holds_bob_tx.send(());
                holds_alice
                    .recv()
                    .map_err(|_| BankError::Refused("the victim is done".into()))?;
                t.lock_tenants(&["alice"])
            });
            if round.is_err() {
                break;
            }
        });
        let result = victim.atomically(true, |t| {
            runs.fetch_add(1, Ordering::SeqCst);
            t.lock_tenants(&["alice"])?;
            holds_alice_tx.send(()).expect("the other connection");
            holds_bob
                .recv_timeout(Duration::from_secs(20))
                .map_err(|e| BankError::Refused(format!("the other connection: {e}")))?;
            wait_until_waiting(&place, "other");
            t.lock_tenants(&["bob"])?;
            t.append(transfer("never"))
        });
        drop(holds_alice_tx);
        result
    });
    let runs = runs.into_inner();
    match result {
        Err(BankError::Contended {
            file,
            attempts,
            message,
        }) => {
            assert_eq!(attempts, runs, "the work ran once per attempt");
            #[cfg(feature = "postgres")]
            assert_eq!(attempts, gpumeter_bank::postgres::MAX_ATTEMPTS);
            assert!(attempts > 1);
            assert_eq!(file, gpumeter_bank::redact(&victim_url));
            assert!(message.contains("40P01"), "{message}");
        }
        other => panic!("expected Contended, got {other:?}"),
    }
    assert_eq!(place.count("transactions"), 0);
    let _ = std::io::Write::write_fmt(
        &mut std::io::stderr(),
        format_args!(
            "contended after {runs} attempts in {:.1} s\n",
            t0.elapsed().as_secs_f64()
        ),
    );
}

/// A [`Ledger`] that runs `on_reserve_read` before the `n`-th read of the reservations and
/// `on_lock` before the `m`-th [`LedgerTx::lock_tenants`] (each once), to put another
/// connection's work between a finalization's steps.
struct Hooked<'h, L> {
    inner: L,
    hooks: std::cell::RefCell<Hooks<'h>>,
}

struct Hooks<'h> {
    reserve_reads: u32,
    locks: u32,
    on_reserve_read: (u32, Option<Box<dyn FnOnce() + 'h>>),
    on_lock: (u32, Option<Box<dyn FnOnce() + 'h>>),
}

struct HookedTx<'a, 'h> {
    inner: &'a mut dyn LedgerTx,
    hooks: &'a std::cell::RefCell<Hooks<'h>>,
}

impl<L: Ledger> Ledger for Hooked<'_, L> {
    fn atomically<T>(
        &mut self,
        commit: bool,
        mut f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        let hooks = &self.hooks;
        self.inner.atomically(commit, |t| {
            let mut w = HookedTx { inner: t, hooks };
            f(&mut w)
        })
    }
}

impl LedgerTx for HookedTx<'_, '_> {
    fn find(&self, key: &str) -> Result<Option<gpumeter_bank::StoredTransaction>, BankError> {
        self.inner.find(key)
    }
    fn append(&mut self, tx: NewTransaction) -> Result<Appended, BankError> {
        self.inner.append(tx)
    }
    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        self.inner.balance(account, commodity)
    }
    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        self.inner.balances(prefix)
    }
    fn transactions(
        &self,
        kind: Option<&str>,
    ) -> Result<Vec<gpumeter_bank::StoredTransaction>, BankError> {
        if kind == Some("reserve") {
            let hook = {
                let mut h = self.hooks.borrow_mut();
                h.reserve_reads += 1;
                if h.reserve_reads == h.on_reserve_read.0 {
                    h.on_reserve_read.1.take()
                } else {
                    None
                }
            };
            if let Some(hook) = hook {
                hook();
            }
        }
        self.inner.transactions(kind)
    }
    fn head(&self) -> Result<Option<String>, BankError> {
        self.inner.head()
    }
    fn lock_tenants(&mut self, tenants: &[&str]) -> Result<(), BankError> {
        let hook = {
            let mut h = self.hooks.borrow_mut();
            h.locks += 1;
            if h.locks == h.on_lock.0 {
                h.on_lock.1.take()
            } else {
                None
            }
        };
        if let Some(hook) = hook {
            hook();
        }
        self.inner.lock_tenants(tenants)
    }
    fn lock_all(&mut self) -> Result<(), BankError> {
        self.inner.lock_all()
    }
}

/// A finalization finds the tenants it bills, locks them, and finds them again: a tenant
/// first found then (its reservation recorded in between) was found before its lock, and
/// another finalizer may bill its fee before the lock is granted. The finalization must look
/// again under that lock and leave the tenant out, not append a second finalization of it
/// (an invoice of no lines, "billed before"). On PostgreSQL, where the other finalizer runs
/// on another connection between the two steps; SQLite runs one writer at a time.
#[test]
#[cfg_attr(not(feature = "postgres"), ignore = "needs the `postgres` feature")]
fn a_tenant_found_owing_a_fee_late_is_found_again_under_its_lock() {
    let Some(place) = Place::new(Backend::Postgres, "late_newcomer") else {
        return;
    };
    let nov = (t("2026-11-01T00:00:00Z"), t("2026-12-01T00:00:00Z"));
    let dec = (t("2026-12-01T00:00:00Z"), t("2027-01-01T00:00:00Z"));
    // The bank's currency, fixed before (so no finalization here holds the whole bank).
    let seed = report_of(&[("seed", "2026-11-01T00:00:00Z", 1000)], "seed");
    finalize(&mut place.open(), &seed, &book(), Some(nov), true).expect("the first finalization");
    let late = report_of(&[("late", &hour(1), 1000)], "late");
    let mut l = Hooked {
        inner: place.open(),
        hooks: std::cell::RefCell::new(Hooks {
            reserve_reads: 0,
            locks: 0,
            // Before the second look: tenant `late` gets a reservation.
            on_reserve_read: (
                2,
                Some(Box::new(|| {
                    reserve(&mut place.open(), &reservation("late", "2.00", None))
                        .expect("a reservation");
                })),
            ),
            // Before `late` is locked: another worker bills its fee (its own usage).
            on_lock: (
                2,
                Some(Box::new(|| {
                    finalize(&mut place.open(), &late, &book(), Some(dec), true)
                        .expect("the other finalization");
                })),
            ),
        }),
    };
    let mine = report_of(&[("mine", &hour(0), 1000)], "mine");
    let f = finalize(&mut l, &mine, &book(), Some(dec), true).expect("finalizing");
    let tenants: Vec<&str> = f
        .document
        .invoices
        .iter()
        .map(|i| i.tenant.as_str())
        .collect();
    let mut check = place.open();
    let late_finalizations = check
        .atomically(false, |t| t.transactions(Some("finalize")))
        .expect("the finalizations")
        .iter()
        .filter(|t| t.tx.tenant.as_deref() == Some("late"))
        .count();
    assert_eq!(late_finalizations, 1, "invoices: {tenants:?}");
    assert_eq!(tenants, ["mine"]);
    check.atomically(false, |t| verify(t)).expect("verify");
}
