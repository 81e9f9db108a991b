//! The `bank-throughput` example's measurement works: two worker processes finalize a handful
//! of invoices on SQLite and on PostgreSQL (feature `postgres`), distinct tenants and a shared
//! one, and the ledger verifies after each run. No timing is asserted.
//!
//! The workers are this test binary re-executed running only [`throughput_worker`], told what
//! to do by [`driver::WORKER_ENV`].

#[path = "../examples/bank-throughput/driver.rs"]
#[allow(dead_code)]
mod driver;

use std::path::Path;
use std::process::Command;

use driver::{Job, Tenants};

/// Does nothing in a normal run; with [`driver::WORKER_ENV`] set, is one worker.
#[test]
fn throughput_worker() {
    if let Ok(role) = std::env::var(driver::WORKER_ENV) {
        driver::worker(&role).unwrap_or_else(|e| panic!("worker: {e}"));
    }
}

fn spawn(role: String) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("the test binary"));
    c.args([
        "--exact",
        "throughput_worker",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(driver::WORKER_ENV, role);
    c
}

/// Two workers, six invoices, each tenant mode, on the fresh ledger `fresh(n)` gives.
fn smoke(dir: &Path, fresh: &dyn Fn(usize) -> String) {
    for (n, tenants) in [Tenants::Distinct, Tenants::Shared].into_iter().enumerate() {
        let job = Job {
            workers: 2,
            invoices: 6,
            tenants,
            history: 2,
        };
        let m = driver::run(&fresh(n), dir, &job, true, &spawn)
            .unwrap_or_else(|e| panic!("{tenants} tenants: {e}"));
        // The history's grants and invoices, the run's grants and invoices (and the carries of
        // the shared tenant's hours finalized out of order).
        let grants = match tenants {
            Tenants::Distinct => 6,
            Tenants::Shared => 1,
        };
        assert_eq!(m.transactions, 2 + 2 + grants + 6 + m.carries, "{tenants}");
        if tenants == Tenants::Distinct {
            assert_eq!(m.carries, 0, "each distinct tenant has one hour");
        }
        assert!(m.rate > 0.0 && m.seconds > 0.0, "{tenants}: {m:?}");
    }
}

#[test]
fn two_workers_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let d = dir.path().to_path_buf();
    smoke(dir.path(), &|n| {
        d.join(format!("bank-{n}.sqlite"))
            .to_str()
            .expect("a UTF-8 path")
            .to_string()
    });
}

#[cfg(feature = "postgres")]
#[test]
fn two_workers_on_postgres() {
    if gpumeter_test_postgres::server_for("two_workers_on_postgres").is_none() {
        return;
    }
    let fresh = |label| gpumeter_test_postgres::Schema::fresh(label).expect("the test server");
    let (a, b) = (fresh("throughput_distinct"), fresh("throughput_shared"));
    let dir = tempfile::tempdir().expect("a temporary directory");
    smoke(dir.path(), &|n| [&a, &b][n].url.clone());
}
