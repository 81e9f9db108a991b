//! Finalizations per second with several worker processes on one ledger (issue 15 item 4).
//!
//! ```sh
//! cargo run --release -p gpumeter-bank --features postgres --example bank-throughput -- \
//!     --location /tmp/bench-dir --location 'postgresql:///postgres?host=/tmp/x/sock&user=postgres' \
//!     --workers 1,2,4,8 --invoices 400 --tenants distinct,shared --rounds 2
//! ```
//!
//! Each run starts from a fresh ledger: an SQLite file in the directory given as a location,
//! or a new schema on the PostgreSQL server given by a `postgres://` URL (its role must be
//! able to create schemas; the schema is dropped after the run). The ledger gets a grant per
//! tenant (and, with `--history N`, N finalized invoices of other tenants first); then `k`
//! worker processes (this program again) each finalize every k-th invoice, all starting
//! together; the run's rate is invoices ÷ the time from the start to the last worker's end.
//! After each run `verify` must pass and every invoice must be finalized once.
//!
//! The runs are interleaved (every configuration once per round), and the table at the end
//! gives each configuration's median rate and its ratio to one worker's: the scaling ratio is
//! the figure, the absolute rate depends on the machine.

mod driver;

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use driver::{Job, Measured, Sessions, Tenants};

/// Command line.
#[derive(Parser, Debug)]
#[command(about = "Finalizations per second with 1..k worker processes on one ledger")]
struct Args {
    /// A directory for SQLite ledgers, or a PostgreSQL server's URL (repeat for both).
    #[arg(long, required = true)]
    location: Vec<String>,
    /// Worker process counts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    workers: Vec<usize>,
    /// Invoices finalized per run.
    #[arg(long, default_value_t = 400)]
    invoices: usize,
    /// `distinct` (a tenant per invoice), `shared` (one tenant), or both, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "distinct,shared")]
    tenants: Vec<Tenants>,
    /// Finalized invoices already in the ledger when a run starts, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    history: Vec<usize>,
    /// Do not sample the PostgreSQL sessions during the runs (the sampling query, every 2 ms,
    /// takes some of the server's CPU).
    #[arg(long)]
    no_sessions: bool,
    /// How many times to run every configuration (interleaved).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
}

fn main() {
    if let Ok(role) = std::env::var(driver::WORKER_ENV) {
        if let Err(e) = driver::worker(&role) {
            eprintln!("bank-throughput worker: {e}");
            std::process::exit(1);
        }
        return;
    }
    let args = Args::parse();
    if let Err(e) = measure(&args) {
        eprintln!("bank-throughput: {e}");
        std::process::exit(1);
    }
}

/// A fresh, empty ledger for run `n` at `location`, and what removes it.
struct Fresh {
    location: String,
    sqlite: Option<PathBuf>,
    schema: Option<(String, String)>,
}

impl Fresh {
    fn new(location: &str, n: usize) -> Result<Fresh, driver::Error> {
        if gpumeter_bank::is_postgres(location) {
            let name = format!("gmbench_{}_{n}", std::process::id());
            gpumeter_test_postgres::batch(location, &format!("CREATE SCHEMA \"{name}\""))?;
            let url = gpumeter_test_postgres::with_search_path(location, &name)?;
            Ok(Fresh {
                location: url,
                sqlite: None,
                schema: Some((location.to_string(), name)),
            })
        } else {
            std::fs::create_dir_all(location)
                .map_err(|e| format!("{location}: cannot create the directory: {e}"))?;
            let path = Path::new(location).join(format!("bench-{}-{n}.sqlite", std::process::id()));
            let text = path
                .to_str()
                .ok_or_else(|| format!("{}: not UTF-8", path.display()))?
                .to_string();
            Ok(Fresh {
                location: text,
                sqlite: Some(path),
                schema: None,
            })
        }
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        if let Some(p) = &self.sqlite {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut s = p.clone().into_os_string();
                s.push(suffix);
                let _ = std::fs::remove_file(s);
            }
        }
        if let Some((server, name)) = &self.schema {
            let _ =
                gpumeter_test_postgres::batch(server, &format!("DROP SCHEMA \"{name}\" CASCADE"));
        }
    }
}

fn backend(location: &str) -> &'static str {
    if gpumeter_bank::is_postgres(location) {
        "PostgreSQL"
    } else {
        "SQLite"
    }
}

fn measure(args: &Args) -> Result<(), driver::Error> {
    let exe = std::env::current_exe()?;
    let spawn = move |role: String| {
        let mut c = Command::new(&exe);
        c.env(driver::WORKER_ENV, role);
        c
    };
    // (location index, tenants, history, workers) -> rates of each round.
    type Key = (usize, Tenants, usize, usize);
    let mut results: Vec<(Key, Vec<Measured>)> = Vec::new();
    let mut n = 0;
    for round in 0..args.rounds {
        for (li, location) in args.location.iter().enumerate() {
            for &tenants in &args.tenants {
                for &history in &args.history {
                    for &workers in &args.workers {
                        let job = Job {
                            workers,
                            invoices: args.invoices,
                            tenants,
                            history,
                        };
                        n += 1;
                        let fresh = Fresh::new(location, n)?;
                        let dir = std::env::temp_dir();
                        let m = driver::run(&fresh.location, &dir, &job, !args.no_sessions, &spawn)
                            .map_err(|e| {
                                format!("{} {tenants} k={workers}: {e}", backend(location))
                            })?;
                        println!(
                            "round {} {:<10} {:<8} history {:>5} workers {} : {:>7.1} /s \
                             ({:.2} s, worker CPU {:.1} ms/finalization, machine busy {:.2} of {:.2} s × cores; {} transactions verified, {} carries)",
                            round + 1,
                            backend(location),
                            tenants,
                            history,
                            workers,
                            m.rate,
                            m.seconds,
                            m.worker_cpu * 1e3 / args.invoices as f64,
                            m.machine_cpu,
                            m.seconds,
                            m.transactions,
                            m.carries,
                        );
                        if let Some(x) = &m.sessions {
                            println!(
                                "    sessions (mean of {}): chain held {:.2}, running {:.2}, waiting for the chain {:.2}, \
                                 for a tenant or the bank {:.2}, for WAL/IO/other {:.2}, \
                                 worker computing in a transaction {:.2}, outside one {:.2}",
                                x.samples, x.chain_held, x.running, x.chain, x.other_lock, x.other_wait,
                                x.in_transaction, x.idle
                            );
                        }
                        let key = (li, tenants, history, workers);
                        match results.iter_mut().find(|(k, _)| *k == key) {
                            Some((_, v)) => v.push(m),
                            None => results.push((key, vec![m])),
                        }
                    }
                }
            }
        }
    }
    println!();
    println!(
        "| backend | tenants | history | workers | finalizations/s (each round) | median | × 1 worker | worker CPU ms/finalization | machine CPU busy / wall |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for ((li, tenants, history, workers), ms) in &results {
        let med = median(ms.iter().map(|m| m.rate).collect());
        let one = results
            .iter()
            .find(|((l, t, h, w), _)| l == li && t == tenants && h == history && *w == 1)
            .map(|(_, v)| median(v.iter().map(|m| m.rate).collect()));
        let rates: Vec<String> = ms.iter().map(|m| format!("{:.1}", m.rate)).collect();
        let cpu = median(
            ms.iter()
                .map(|m| m.worker_cpu * 1e3 / args.invoices as f64)
                .collect(),
        );
        let busy = median(ms.iter().map(|m| m.machine_cpu / m.seconds).collect());
        println!(
            "| {} | {tenants} | {history} | {workers} | {} | {med:.1} | {} | {cpu:.1} | {busy:.2} |",
            backend(&args.location[*li]),
            rates.join(", "),
            one.map_or("–".to_string(), |o| format!("{:.2}", med / o)),
        );
    }
    if results
        .iter()
        .any(|(_, ms)| ms.iter().any(|m| m.sessions.is_some()))
    {
        println!();
        println!(
            "| backend | tenants | history | workers | chain held | running | waiting: chain | waiting: tenant/bank | waiting: WAL/IO/other | worker computing in a transaction | worker outside one |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for ((li, tenants, history, workers), ms) in &results {
            let all: Vec<Sessions> = ms.iter().filter_map(|m| m.sessions).collect();
            if all.is_empty() {
                continue;
            }
            let mean = |f: fn(&Sessions) -> f64| all.iter().map(f).sum::<f64>() / all.len() as f64;
            println!(
                "| {} | {tenants} | {history} | {workers} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                backend(&args.location[*li]),
                mean(|x| x.chain_held),
                mean(|x| x.running),
                mean(|x| x.chain),
                mean(|x| x.other_lock),
                mean(|x| x.other_wait),
                mean(|x| x.in_transaction),
                mean(|x| x.idle),
            );
        }
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
