//! What the bank's test binaries share: a ledger's location on either backend, so one test
//! body runs on SQLite and on PostgreSQL, and the usage reports and price book the bank-level
//! tests finalize.
//!
//! Each test binary uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use gpumeter_bank::{AnyLedger, GrantKind, GrantRequest, Reservation, ReserveRequest};
use gpumeter_core::{DeviceEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow};
use gpumeter_rating::PriceBook;
use proptest::strategy::Strategy;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rust_decimal::Decimal;

/// The backends a test body runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A file in a temporary directory.
    Sqlite,
    /// A fresh schema on the test server (`GPUMETER_TEST_POSTGRES`).
    Postgres,
}

/// A ledger's location for one test, and what keeps it alive: a temporary directory (the
/// SQLite file's, and for files a test puts beside the ledger) and, on PostgreSQL, the test's
/// own schema, dropped with this value.
pub struct Place {
    /// The backend.
    pub backend: Backend,
    /// What [`gpumeter_bank::open`] takes: the SQLite file's path, or the schema's URL.
    pub location: String,
    // Field order is drop order: the schema goes before the directory; ledgers opened here
    // must be dropped first (a test's locals are).
    schema: Option<gpumeter_test_postgres::Schema>,
    dir: tempfile::TempDir,
}

impl Place {
    /// A new, empty location on `backend`; `None` for PostgreSQL without a test server (a
    /// `skipped:` line naming `label` went to standard error; under `CI=true` a panic).
    pub fn new(backend: Backend, label: &str) -> Option<Place> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (location, schema) = match backend {
            Backend::Sqlite => (
                dir.path()
                    .join("bank.sqlite")
                    .to_str()
                    .expect("a UTF-8 temporary directory")
                    .to_owned(),
                None,
            ),
            Backend::Postgres => {
                let schema = gpumeter_test_postgres::Schema::fresh(label)?;
                (schema.url.clone(), Some(schema))
            }
        };
        Some(Place {
            backend,
            location,
            schema,
            dir,
        })
    }

    /// The ledger here, opened (created when new) through [`gpumeter_bank::open`].
    pub fn open(&self) -> AnyLedger {
        gpumeter_bank::open(&self.location)
            .unwrap_or_else(|e| panic!("opening the ledger at {}: {e}", self.location))
    }

    /// A directory of the test's own, beside the ledger.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The location a child process named `tag` opens: on PostgreSQL the URL with the
    /// connection's `application_name` set to the tag, so that [`Place::wait_for_child`] can
    /// tell when the server has ended its session; on SQLite the file as it is.
    pub fn child_location(&self, tag: &str) -> String {
        self.tagged(&self.location, tag)
    }

    /// `location` (this place's, or one from [`Place::with_settings`]) for a connection named
    /// `tag`, as [`Place::child_location`].
    pub fn tagged(&self, location: &str, tag: &str) -> String {
        match self.backend {
            Backend::Sqlite => location.to_string(),
            Backend::Postgres => {
                let sep = if location.contains('?') { '&' } else { '?' };
                format!("{location}{sep}application_name={}", self.tag(tag))
            }
        }
    }

    fn tag(&self, tag: &str) -> String {
        let schema = self.schema.as_ref().map_or("", |s| s.name.as_str());
        format!("{schema}_{tag}")
    }

    /// Waits until the session of a killed child named `tag` has ended on the server. A
    /// SIGKILLed client's transaction is not over when the process is: its server process
    /// rolls it back (or commits it, if the COMMIT was sent) when it notices the closed
    /// socket, and releases its locks then. An SQLite file's locks end with the process.
    pub fn wait_for_child(&self, tag: &str) {
        if self.backend == Backend::Sqlite {
            return;
        }
        let name = self.tag(tag);
        let t0 = Instant::now();
        loop {
            let left = self.count(&format!(
                "pg_stat_activity WHERE application_name = '{name}'"
            ));
            if left == 0 {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the session of the killed child {name} has not ended in 30 s"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether the connection of the location [`Place::child_location`] gave for `tag` is
    /// waiting for a lock now (PostgreSQL; always false on SQLite).
    pub fn waits_for_a_lock(&self, tag: &str) -> bool {
        self.backend == Backend::Postgres
            && self.count(&format!(
                "pg_stat_activity WHERE application_name = '{}' AND wait_event_type = 'Lock'",
                self.tag(tag)
            )) > 0
    }

    /// `SELECT count(*) FROM <from>` on the ledger's database, as another client would run
    /// it (SQL that both SQLite and PostgreSQL read, e.g.
    /// `transactions WHERE key = 'crash-000001'`).
    pub fn count(&self, from: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {from}");
        match self.backend {
            Backend::Sqlite => rusqlite::Connection::open(&self.location)
                .and_then(|c| c.query_row(&sql, [], |r| r.get(0)))
                .unwrap_or_else(|e| panic!("{sql} on {}: {e}", self.location)),
            Backend::Postgres => gpumeter_test_postgres::query_i64(&self.location, &sql)
                .unwrap_or_else(|e| {
                    panic!(
                        "{sql} on the test schema: {}",
                        gpumeter_test_postgres::with_causes(&e)
                    )
                }),
        }
    }

    /// Runs one statement on the ledger's database behind the bank's back (through rusqlite
    /// on SQLite), returning the rows it changed.
    pub fn execute(&self, sql: &str) -> u64 {
        match self.backend {
            Backend::Sqlite => rusqlite::Connection::open(&self.location)
                .and_then(|c| c.execute(sql, []))
                .map(|n| n as u64)
                .unwrap_or_else(|e| panic!("{sql} on {}: {e}", self.location)),
            Backend::Postgres => gpumeter_test_postgres::execute(&self.location, sql)
                .unwrap_or_else(|e| {
                    panic!(
                        "{sql} on the test schema: {}",
                        gpumeter_test_postgres::with_causes(&e)
                    )
                }),
        }
    }

    /// On PostgreSQL, the location with `-c NAME=VALUE` server settings added to the
    /// connection's options (e.g. `deadlock_timeout`, which the test server's superuser may
    /// set per session); on SQLite the file as it is.
    pub fn with_settings(&self, settings: &[(&str, &str)]) -> String {
        let Some(schema) = &self.schema else {
            return self.location.clone();
        };
        let server = gpumeter_test_postgres::server().expect("the test server");
        let options: Vec<String> = settings
            .iter()
            .map(|(k, v)| format!("-c{k}%3D{v}"))
            .collect();
        let sep = if server.contains('?') { '&' } else { '?' };
        let with = format!("{server}{sep}options={}", options.join("%20"));
        gpumeter_test_postgres::with_search_path(&with, &schema.name)
            .expect("the test server's URL")
    }
}

/// A property test on `backend`: `cases` values of `strategy`, each given to `case` with a new
/// location of its own (a fresh schema per case on PostgreSQL), shrunk and reported by panicking
/// when one fails. Without a PostgreSQL server, skipped once (`skipped:` naming `label`).
pub fn run_cases<S: Strategy>(
    backend: Backend,
    label: &str,
    cases: u32,
    strategy: S,
    case: impl Fn(&Place, S::Value) -> Result<(), TestCaseError>,
) {
    if backend == Backend::Postgres && gpumeter_test_postgres::server_for(label).is_none() {
        return;
    }
    let mut runner = TestRunner::new(Config {
        cases,
        // A failing case is printed, shrunk; there is no source file beside which to keep it.
        failure_persistence: None,
        ..Config::default()
    });
    let outcome = runner.run(&strategy, |value| {
        let place = Place::new(backend, label)
            .ok_or_else(|| TestCaseError::fail("the PostgreSQL test server went away"))?;
        case(&place, value)
    });
    if let Err(e) = outcome {
        panic!("{label} on {backend:?}: {e}");
    }
}

/// Seconds since the epoch of an RFC 3339 time.
pub fn t(s: &str) -> u64 {
    gpumeter_core::time::parse_rfc3339(s).expect("an RFC 3339 time")
}

/// A decimal literal.
pub fn d(s: &str) -> Decimal {
    Decimal::from_str(s).expect("a decimal")
}

/// A grant of `credits` at 0.10 USD each to `tenant`, in force from 2026-11-01 (until
/// `expires`), for any SKU and meter, under the idempotency key `key`.
pub fn grant_req(
    tenant: &str,
    credits: &str,
    priority: i64,
    kind: GrantKind,
    expires: Option<&str>,
    key: &str,
) -> GrantRequest {
    GrantRequest {
        tenant: tenant.into(),
        credits: d(credits),
        rate: d("0.10"),
        priority,
        effective: Some(t("2026-11-01T00:00:00Z")),
        expires: expires.map(t),
        kind,
        skus: vec![],
        meters: vec![],
        key: Some(key.into()),
        at: t("2026-11-01T00:00:00Z"),
    }
}

/// A reservation of 5000 H100 kernel launches a month for `fee` USD from 2026-12-01 to
/// 2027-02-01, unused capacity converting to credits at 0.10 USD (expiring at `expiry`).
pub fn reservation(tenant: &str, fee: &str, expiry: Option<&str>) -> ReserveRequest {
    ReserveRequest {
        terms: Reservation {
            reservation: String::new(),
            tenant: tenant.into(),
            sku: "h100".into(),
            meter: MeterKind::KernelLaunches,
            capacity: d("5"),
            unit: "1K".into(),
            fee: d(fee),
            rate: d("0.10"),
            from: "2026-12-01T00:00:00Z".into(),
            to: "2027-02-01T00:00:00Z".into(),
            credit_expiry: expiry.map(str::to_string),
        },
        at: t("2026-11-01T00:00:00Z"),
    }
}

/// 0.50 USD per 1000 kernel launches on H100s, billed in whole thousands.
pub fn book() -> PriceBook {
    PriceBook::from_toml_str(
        "bank.toml",
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"bank-example\"\ncurrency = \"USD\"\n\
         [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\nunit_price = \"0.50\"\nincrement = \"1\"\n",
    )
    .expect("the example book")
}

/// A sealed report of `launches` by `tenant` in the hour starting `window`.
pub fn usage(tenant: &str, window: &str, launches: u128) -> UsageReport {
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".into(),
        metering_policy: "v1".into(),
        window_seconds: 3600,
        complete: Some(true),
        sources: vec![gpumeter_core::SourceEntry {
            name: format!("{tenant}-{window}.json"),
            format: "kineto".into(),
            sha256: format!("{:0>64}", launches),
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
        loss: vec![],
        usage: vec![UsageRow {
            tenant: tenant.into(),
            device: 0,
            device_key: "GPU-0".into(),
            window_start: window.into(),
            meter: MeterKind::KernelLaunches,
            quantity: Quantity(launches),
        }],
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: vec![],
        sha256: String::new(),
    };
    r.seal().expect("seal");
    r
}

/// A sealed report of one source named `source` with the rows `(tenant, window, launches)`.
pub fn report_of(rows: &[(&str, &str, u128)], source: &str) -> UsageReport {
    let mut r = usage(rows[0].0, rows[0].1, rows[0].2);
    r.sources[0].name = format!("{source}.json");
    r.sources[0].sha256 = hex_of(source);
    r.usage = rows
        .iter()
        .map(|&(tenant, window, q)| UsageRow {
            tenant: tenant.into(),
            device: 0,
            device_key: "GPU-0".into(),
            window_start: window.into(),
            meter: MeterKind::KernelLaunches,
            quantity: Quantity(q),
        })
        .collect();
    r.seal().expect("seal");
    r
}

/// `s`'s bytes, zero-padded to 32, as 64 hex digits: a source digest of its own per name.
pub fn hex_of(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for b in s.bytes().chain(std::iter::repeat(0)).take(32) {
        let _ = write!(out, "{b:02x}");
    }
    out
}
