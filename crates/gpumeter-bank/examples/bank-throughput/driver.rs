//! The throughput measurement of `bank-throughput`, shared with its smoke test
//! (`tests/throughput.rs` includes this file): prepare a fresh ledger, start worker
//! processes that each finalize their share of the invoices, time them from a common start to
//! the last one's end, and check the ledger afterwards.
//!
//! A worker is a process told what to do by the environment variable [`WORKER_ENV`]: the
//! example re-executes itself, the test re-executes the test binary.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpumeter_bank::{finalize, grant, verify, GrantKind, GrantRequest, Ledger, Outcome};
use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{DeviceEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow};
use gpumeter_rating::PriceBook;
use rust_decimal::Decimal;

/// Errors of the measurement, as text naming what failed.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Set in a worker process: `ID WORKERS INVOICES TENANTS HISTORY GO LOCATION` (see
/// [`Job::role`]).
pub const WORKER_ENV: &str = "GPUMETER_BANK_THROUGHPUT_WORKER";

/// Whose invoices the workers finalize.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tenants {
    /// Every invoice a tenant of its own: finalizers never wait for each other's tenant.
    Distinct,
    /// Every invoice one tenant's (hour after hour): finalizers of that tenant take turns.
    Shared,
}

impl FromStr for Tenants {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "distinct" => Ok(Tenants::Distinct),
            "shared" => Ok(Tenants::Shared),
            _ => Err(format!("{s}: `distinct` or `shared`")),
        }
    }
}

impl std::fmt::Display for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tenants::Distinct => "distinct",
            Tenants::Shared => "shared",
        })
    }
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct Job {
    /// Worker processes.
    pub workers: usize,
    /// Invoices finalized in the run (worker `w` takes those with `i % workers == w`).
    pub invoices: usize,
    /// Whose invoices.
    pub tenants: Tenants,
    /// Invoices finalized (one process, before the run) of other tenants and earlier hours:
    /// the ledger's size when the run starts, which every finalization reads.
    pub history: usize,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Seconds from the common start to the last worker's end.
    pub seconds: f64,
    /// Finalizations per second: invoices ÷ seconds.
    pub rate: f64,
    /// CPU seconds the worker processes used in their finalizations (their own, not the
    /// database server's).
    pub worker_cpu: f64,
    /// CPU seconds the whole machine was busy meanwhile (every process: server, workers, and
    /// whatever else runs), from /proc/stat.
    pub machine_cpu: f64,
    /// Transactions in the ledger afterwards (`verify` passed over them).
    pub transactions: u64,
    /// Of them, `carry` transactions: the fragments of a shared tenant's hours finalized out
    /// of order, booked at the latest business time of its fragment postings.
    pub carries: u64,
    /// PostgreSQL only: what the workers' connections were doing, sampled during the run.
    pub sessions: Option<Sessions>,
}

/// What the workers' PostgreSQL sessions were doing during a run: the mean number of sessions
/// in each state over samples taken every 2 ms from `pg_stat_activity` and `pg_locks`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sessions {
    /// Samples taken.
    pub samples: u64,
    /// Running a statement, not waiting (the server's CPU).
    pub running: f64,
    /// Holding the hash chain's advisory lock (0 to 1: the share of the time the chain is
    /// held by some transaction, from its first append to its commit).
    pub chain_held: f64,
    /// Waiting for the hash chain's advisory lock.
    pub chain: f64,
    /// Waiting for another advisory lock (a tenant's, or the whole bank's).
    pub other_lock: f64,
    /// Waiting for anything else (WAL flush at commit, I/O, internal locks).
    pub other_wait: f64,
    /// Idle inside a transaction: the worker itself is computing (rating, hashing, JSON)
    /// while its transaction holds its locks.
    pub in_transaction: f64,
    /// Idle outside a transaction: the worker is computing between ledger transactions.
    pub idle: f64,
}

/// The hash chain's advisory lock key for the ledger in `schema`, as `(classid, objid)` in
/// `pg_locks`: the PostgreSQL ledger derives it (`LockKeys::chain`) from SHA-256 of
/// `gpumeter-ledger\0<schema>\0chain\0`, its first 8 bytes big-endian.
fn chain_lock(schema: &str) -> (i64, i64) {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("gpumeter-ledger\0{schema}\0chain\0").as_bytes());
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    let key = u64::from_be_bytes(b);
    (i64::from((key >> 32) as u32), i64::from(key as u32))
}

/// Samples the sessions of the database at `url` (all but its own) until `stop` is set.
fn sample_sessions(url: &str, stop: &AtomicBool) -> Result<Sessions, Error> {
    let mut c = gpumeter_test_postgres::connect(url)?;
    let schema: String = c
        .query_one("SELECT current_schema()::text", &[])?
        .try_get(0)?;
    let (classid, objid) = chain_lock(&schema);
    let sql = "SELECT
           count(*) FILTER (WHERE a.state = 'active' AND a.wait_event_type IS NULL),
           count(*) FILTER (WHERE a.wait_event = 'advisory' AND EXISTS (
               SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted
               AND l.locktype = 'advisory' AND l.classid::bigint = $1 AND l.objid::bigint = $2)),
           count(*) FILTER (WHERE a.wait_event = 'advisory'),
           count(*) FILTER (WHERE a.state = 'active' AND a.wait_event_type IS NOT NULL
                            AND a.wait_event IS DISTINCT FROM 'advisory'),
           count(*) FILTER (WHERE a.state LIKE 'idle in transaction%'),
           count(*) FILTER (WHERE a.state = 'idle'),
           count(*) FILTER (WHERE EXISTS (
               SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted
               AND l.locktype = 'advisory' AND l.classid::bigint = $1 AND l.objid::bigint = $2))
         FROM pg_stat_activity a
         WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()
           AND a.datname = current_database()";
    let mut sums = [0i64; 7];
    let mut samples = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let row = c.query_one(sql, &[&classid, &objid])?;
        for (i, sum) in sums.iter_mut().enumerate() {
            *sum += row.try_get::<_, i64>(i)?;
        }
        samples += 1;
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let mean = |x: i64| x as f64 / samples.max(1) as f64;
    Ok(Sessions {
        samples,
        running: mean(sums[0]),
        chain_held: mean(sums[6]),
        chain: mean(sums[1]),
        other_lock: mean(sums[2] - sums[1]),
        other_wait: mean(sums[3]),
        in_transaction: mean(sums[4]),
        idle: mean(sums[5]),
    })
}

fn t(s: &str) -> Result<u64, Error> {
    Ok(parse_rfc3339(s).map_err(|e| format!("{s}: {e}"))?)
}

/// 0.50 USD per 1000 kernel launches on H100s, billed in whole thousands.
pub fn book() -> Result<PriceBook, Error> {
    Ok(PriceBook::from_toml_str(
        "throughput.toml",
        "schema = \"gpumeter.pricebook/v1\"\nversion = \"throughput\"\ncurrency = \"USD\"\n\
         [[sku]]\nid = \"h100\"\nmatch = [\"NVIDIA H100*\"]\n\
         [[rate]]\nsku = \"h100\"\nmeter = \"kernel_launches\"\nunit = \"1K\"\nunit_price = \"0.50\"\nincrement = \"1\"\n",
    )?)
}

/// Hour `h` after 2026-12-01T00:00Z, as a period.
fn hour(h: usize) -> Result<(u64, u64), Error> {
    let from = t("2026-12-01T00:00:00Z")? + h as u64 * 3_600_000_000_000;
    Ok((from, from + 3_600_000_000_000))
}

/// A sealed report of `launches` by `tenant` in hour `h`, from a source named `source`.
fn report(tenant: &str, h: usize, launches: u128, source: &str) -> Result<UsageReport, Error> {
    let mut r = UsageReport {
        schema: "gpumeter.usage/v1".into(),
        metering_policy: "v1".into(),
        window_seconds: 3600,
        complete: Some(true),
        sources: vec![gpumeter_core::SourceEntry {
            name: format!("{source}.json"),
            format: "kineto".into(),
            sha256: hex_of(source),
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
            window_start: rfc3339(hour(h)?.0),
            meter: MeterKind::KernelLaunches,
            quantity: Quantity(launches),
        }],
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: vec![],
        sha256: String::new(),
    };
    r.seal()?;
    Ok(r)
}

/// A made-up source digest: 64 hex digits from `name`'s bytes.
fn hex_of(name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex:0>64}")
}

/// The run's invoice `i`: its tenant, hour and report.
fn invoice(job: &Job, i: usize) -> Result<(String, usize, UsageReport), Error> {
    let tenant = match job.tenants {
        Tenants::Distinct => format!("d{i:05}"),
        Tenants::Shared => "shared".to_string(),
    };
    // After the history's hours, so a shared tenant's invoices follow each other.
    let h = job.history + i;
    let launches = 1_000 * (1 + (i * 7) % 13) as u128 + ((i * 379) % 1000) as u128;
    let r = report(&tenant, h, launches, &format!("run-{i}"))?;
    Ok((tenant, h, r))
}

/// A grant of 1 000 000 credits (never runs out here) for `tenant`.
fn grant_for(tenant: &str) -> Result<GrantRequest, Error> {
    Ok(GrantRequest {
        tenant: tenant.to_string(),
        credits: Decimal::from(1_000_000),
        rate: Decimal::from_str("0.10")?,
        priority: 1,
        effective: Some(t("2026-11-01T00:00:00Z")?),
        expires: None,
        kind: GrantKind::Purchased,
        skus: vec![],
        meters: vec![],
        key: Some(format!("bench-{tenant}")),
        at: t("2026-11-01T00:00:00Z")?,
    })
}

/// Fills the fresh ledger at `location`: the history (a grant and a finalized invoice for each
/// of `history` other tenants) and a grant for each tenant of the run.
fn prepare(location: &str, job: &Job) -> Result<(), Error> {
    let b = book()?;
    let mut l = gpumeter_bank::open(location)?;
    for j in 0..job.history {
        let tenant = format!("h{j:05}");
        grant(&mut l, &grant_for(&tenant)?)?;
        let r = report(&tenant, j, 2_500, &format!("history-{j}"))?;
        finalize(&mut l, &r, &b, Some(hour(j)?), true)?;
    }
    match job.tenants {
        Tenants::Distinct => {
            for i in 0..job.invoices {
                grant(&mut l, &grant_for(&format!("d{i:05}"))?)?;
            }
        }
        Tenants::Shared => {
            grant(&mut l, &grant_for("shared")?)?;
        }
    }
    Ok(())
}

impl Job {
    /// The value of [`WORKER_ENV`] for worker `id`.
    pub fn role(&self, id: usize, go: &Path, location: &str) -> String {
        format!(
            "{id} {} {} {} {} {} {location}",
            self.workers,
            self.invoices,
            self.tenants,
            self.history,
            go.display()
        )
    }
}

/// The worker whose role is `role` ([`Job::role`]): builds its reports, opens the ledger,
/// prints `ready`, waits for the file GO, finalizes its invoices in order, and prints
/// `done APPLIED CPU_NS` (CPU nanoseconds it spent after the start).
///
/// # Errors
/// A role that does not parse, a ledger that does not open, a finalization that fails or finds
/// its invoice finalized already (each invoice has one worker).
pub fn worker(role: &str) -> Result<(), Error> {
    let words: Vec<&str> = role.splitn(7, ' ').collect();
    let [id, workers, invoices, tenants, history, go, location] = words.as_slice() else {
        return Err(format!("{WORKER_ENV}={role:?}: not a worker's role").into());
    };
    let id: usize = id.parse()?;
    let job = Job {
        workers: workers.parse()?,
        invoices: invoices.parse()?,
        tenants: tenants.parse()?,
        history: history.parse()?,
    };
    let b = book()?;
    let mine: Vec<(usize, usize, UsageReport)> = (0..job.invoices)
        .filter(|i| i % job.workers == id)
        .map(|i| invoice(&job, i).map(|(_, h, r)| (i, h, r)))
        .collect::<Result<_, _>>()?;
    let mut l = gpumeter_bank::open(location)?;
    let mut out = std::io::stdout();
    // On a line of its own: a test harness may have written part of a line.
    writeln!(out, "\nready")?;
    out.flush()?;
    let go = Path::new(go);
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    while !go.exists() {
        if Instant::now() > deadline {
            return Err(format!("worker {id}: {} did not appear in 120 s", go.display()).into());
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    let cpu0 = cpu_ns()?;
    let mut applied = 0;
    for (i, h, r) in mine {
        let done = finalize(&mut l, &r, &b, Some(hour(h)?), true)
            .map_err(|e| format!("worker {id}, invoice {i}: {e}"))?;
        if done.outcomes != [Outcome::Applied] {
            return Err(format!("worker {id}, invoice {i}: {:?}", done.outcomes).into());
        }
        applied += 1;
    }
    writeln!(out, "done {applied} {}", cpu_ns()? - cpu0)?;
    out.flush()?;
    Ok(())
}

/// CPU time this process has run, ns (Linux: the first field of /proc/self/schedstat).
fn cpu_ns() -> Result<u64, Error> {
    let s = std::fs::read_to_string("/proc/self/schedstat")?;
    Ok(s.split_whitespace()
        .next()
        .ok_or("/proc/self/schedstat is empty")?
        .parse()?)
}

/// CPU time the whole machine has been busy (not idle nor waiting for I/O), s: /proc/stat.
fn machine_busy() -> Result<f64, Error> {
    let s = std::fs::read_to_string("/proc/stat")?;
    let line = s.lines().next().ok_or("/proc/stat is empty")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal …, in USER_HZ (100 on Linux).
    let busy: u64 = v.iter().take(8).sum::<u64>()
        - v.get(3).copied().unwrap_or(0)
        - v.get(4).copied().unwrap_or(0);
    Ok(busy as f64 / 100.0)
}

/// Runs `job` on the fresh, empty ledger at `location`: prepares it, starts the workers
/// (`spawn(role)` gives the command of one, [`WORKER_ENV`] set to `role`), waits until every
/// one is ready, creates the file `dir/go`, and times them to the last one's end. Then checks
/// the ledger: `verify` passes, and it holds the history's and the run's finalizations. With
/// `sample`, a PostgreSQL ledger's sessions are sampled meanwhile ([`Sessions`]), which costs
/// the server some CPU.
///
/// # Errors
/// A failed preparation, worker or check.
pub fn run(
    location: &str,
    dir: &Path,
    job: &Job,
    sample: bool,
    spawn: &dyn Fn(String) -> Command,
) -> Result<Measured, Error> {
    prepare(location, job)?;
    let go: PathBuf = dir.join(format!("go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    let mut children: Vec<(Child, BufReader<std::process::ChildStdout>)> = Vec::new();
    for id in 0..job.workers {
        let mut c = spawn(job.role(id, &go, location))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let out = BufReader::new(c.stdout.take().ok_or("a worker's stdout")?);
        children.push((c, out));
    }
    for (id, (_, out)) in children.iter_mut().enumerate() {
        let mut line = String::new();
        while line.trim() != "ready" {
            line.clear();
            if out.read_line(&mut line)? == 0 {
                return Err(format!("worker {id} ended before it was ready").into());
            }
        }
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = (sample && gpumeter_bank::is_postgres(location))
            .then(|| scope.spawn(|| sample_sessions(location, &stop)));
        let out = timed(location, job, &go, children);
        stop.store(true, Ordering::Relaxed);
        let sessions = match sampler {
            Some(s) => Some(s.join().map_err(|_| "the session sampler panicked")??),
            None => None,
        };
        out.map(|mut m| {
            m.sessions = sessions;
            m
        })
    })
}

/// Starts the ready workers (creates `go`), waits for them all, and checks the ledger.
fn timed(
    location: &str,
    job: &Job,
    go: &Path,
    children: Vec<(Child, BufReader<std::process::ChildStdout>)>,
) -> Result<Measured, Error> {
    let busy0 = machine_busy()?;
    let t0 = Instant::now();
    std::fs::write(go, b"")?;
    let mut applied = 0usize;
    let mut worker_cpu = 0.0;
    for (id, (mut c, mut out)) in children.into_iter().enumerate() {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest)?;
        let status = c.wait()?;
        if !status.success() {
            return Err(format!("worker {id} failed ({status})").into());
        }
        let done = rest
            .lines()
            .find_map(|l| l.strip_prefix("done "))
            .ok_or_else(|| format!("worker {id} did not say it was done"))?;
        let mut words = done.split(' ');
        applied += words.next().ok_or("done: no count")?.parse::<usize>()?;
        worker_cpu += words.next().ok_or("done: no CPU time")?.parse::<f64>()? / 1e9;
    }
    let seconds = t0.elapsed().as_secs_f64();
    let machine_cpu = machine_busy()? - busy0;
    let _ = std::fs::remove_file(go);
    if applied != job.invoices {
        return Err(format!("the workers applied {applied} of {} invoices", job.invoices).into());
    }
    let mut l = gpumeter_bank::open_existing(location)?;
    let report = l.atomically(false, |t| verify(&*t))?;
    let finalized = l.atomically(false, |t| t.transactions(Some("finalize")))?;
    if finalized.len() != job.history + job.invoices {
        return Err(format!(
            "{} finalizations in the ledger, {} expected",
            finalized.len(),
            job.history + job.invoices
        )
        .into());
    }
    let carries = l
        .atomically(false, |t| t.transactions(Some("carry")))?
        .len() as u64;
    Ok(Measured {
        seconds,
        rate: job.invoices as f64 / seconds,
        worker_cpu,
        machine_cpu,
        transactions: report.transactions,
        carries,
        sessions: None,
    })
}
