//! Bench `agent` (issue 32, "Performance"; docs/PERFORMANCE.md, "The node agent"): the node
//! agent's costs side by side with the in-memory decode + meter path, in one run. It prints
//! one table (no criterion: each row is one scenario, timed as the agent runs it):
//!
//! 1. **CPU per million kernel records.** `GPUMETER_AGENT_BENCH_RECORDINGS` recordings of
//!    `GPUMETER_AGENT_BENCH_KERNELS` launches each (`gpumeter-synth`, the pipeline bench's
//!    full mix: each kernel with its EXTERNAL_CORRELATION and RUNTIME records; kernels only
//!    with `GPUMETER_BENCH_KERNELS_ONLY=1`), metered
//!    - in memory: `meter_gmr` of every recording's bytes into one `Meter`, then its report
//!      (the reference), and `announce_sources` + `push_batches` (the merge of several
//!      recordings as streams, the engine the agent's `close_set` drives);
//!    - `--once`: the recordings written to a spool, one `Agent::step(true)` (reads the spool,
//!      closes and writes every window's report, checkpoints, retires the files);
//!    - live: the same recordings written frame by frame into the spool, with an
//!      `Agent::step(false)` every few frames (`GPUMETER_AGENT_BENCH_SETS` steps in all, the
//!      last after the end frames).
//!
//!    CPU time is the process's user + system time (`getrusage(RUSAGE_SELF)`) around the
//!    metering or the steps only (not the writing of the spool); wall time beside it. Each
//!    scenario runs `GPUMETER_AGENT_BENCH_RUNS` times, alternated; the medians are printed.
//!    `GPUMETER_AGENT_BENCH_SCENARIOS` picks some of `memory merged once live` (to profile one).
//! 2. **Peak RSS with many concurrent recordings** (`GPUMETER_AGENT_BENCH_RSS_RECORDINGS`,
//!    default 1 000): each measured in a child process of this binary, so that its peak RSS
//!    (`VmHWM`) is its own: the bare process, the recordings metered in memory, and the agent (a spool of
//!    unfinished recordings, a step, a few more frames each, another step).
//! 3. **From a window's closing instant to its events at a receiver**: the agent's loop
//!    (`gpumeter_agent::run`, window 1 s, horizon 200 ms, poll 100 ms) and an events sink
//!    posting to a loopback receiver, a recording appended every 50 ms with records on the
//!    wall clock; for each of `GPUMETER_AGENT_BENCH_WINDOWS` windows, the first arrival of its
//!    events minus the instant the window could close (its end plus the horizon), and minus
//!    the write of the frame that let it close.
//!
//! Run: `cargo bench -p gpumeter-agent --bench agent`. Without `--bench` (`cargo test --bench
//! agent`, as CI runs the benches) every size defaults to a small one (2 recordings of 5 000
//! launches, 3 sets, one run, 20 recordings for the RSS, 2 windows): a check that it runs.

#![allow(missing_docs)]

#[path = "../tests/support/receiver.rs"]
mod receiver;
#[path = "../tests/support/recording.rs"]
mod recording_support;
use recording_support::Synthetic;

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use gpumeter_agent::{Agent, AgentConfig};
use gpumeter_core::{push_batches, Meter, MeterConfig, WindowSize};
use gpumeter_cupti::{decode_prefix, ApiVersion, Record};
use gpumeter_recording::gmr::GmrWriter;
use gpumeter_recording::{announce_sources, meter_gmr, CuptiFormat, CuptiInput, CuptiOptions};
use gpumeter_synth::{Generator, SynthConfig};

const SECOND: u64 = 1_000_000_000;
const HORIZON_NS: u64 = 200_000_000;

/// Set when the binary runs without `--bench` (`cargo test --bench agent`, CI's benches in
/// test mode): every size defaults to a small one.
static QUICK: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// `name` from the environment, else `full` (`cargo bench`) or `quick` (test mode).
fn size(name: &str, full: u64, quick: u64) -> u64 {
    env_u64(
        name,
        if *QUICK.get().unwrap_or(&false) {
            quick
        } else {
            full
        },
    )
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn kernels_only() -> bool {
    std::env::var("GPUMETER_BENCH_KERNELS_ONLY").as_deref() == Ok("1")
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// This process's user + system CPU time, ns (`getrusage`).
#[allow(unsafe_code)]
fn cpu_ns() -> u64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a `struct rusage` to the pointer, which points to one,
    // zero-initialised; RUSAGE_SELF is a valid `who`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: zero-initialised, then written by getrusage: every field is an integer.
    let u = unsafe { u.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as u64 * SECOND + t.tv_usec as u64 * 1_000;
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// This process's peak RSS, KiB: `VmHWM` of `/proc/self/status`. Not `ru_maxrss`: after a
/// fork and an exec, Linux keeps the parent's peak at the fork in the child's `ru_maxrss`.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .expect("VmHWM in /proc/self/status")
}

/// CPU and wall time of `f`, ns.
fn timed<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let c0 = cpu_ns();
    let t0 = Instant::now();
    let out = f();
    let wall = t0.elapsed().as_nanos() as u64;
    let c1 = cpu_ns();
    (out, c1 - c0, wall)
}

/// A synthetic recording: its file name, bytes, and the end offset of each frame after the
/// header (the string table, one per activity buffer, the end frame).
struct Rec {
    name: String,
    bytes: Vec<u8>,
    ends: Vec<usize>,
    kernels: u64,
}

/// One process's recording (`cfg` with `pid` in its header; its identity differs by `pid`).
fn recording(cfg: &SynthConfig, pid: u32) -> Rec {
    let Synthetic { bytes, ends } = Synthetic::new(cfg, pid, Some(cfg.start_ns + u64::from(pid)));
    Rec {
        name: format!("synth-{pid}.gmr"),
        bytes,
        ends,
        kernels: cfg.kernels,
    }
}

fn meter_config() -> MeterConfig {
    MeterConfig {
        window: WindowSize::from_seconds(1).expect("1 s divides a day"),
        reorder_horizon_ns: HORIZON_NS,
        ..MeterConfig::default()
    }
}

/// `agent.toml` for a spool under `root`: window 1 s, horizon 200 ms, poll 100 ms, a reports
/// sink, and `extra` (more sinks).
fn agent_config(root: &Path, extra: &str) -> AgentConfig {
    let p = |s: &str| root.join(s).display().to_string();
    let text = format!(
        "spool = \"{}\"\nstate_dir = \"{}\"\nwindow = \"1s\"\nhorizon = \"200ms\"\n\
         grace = \"30s\"\npoll = \"100ms\"\nfinished = \"move\"\n\n\
         [[sink]]\nkind = \"reports\"\ndir = \"{}\"\n{extra}",
        p("spool"),
        p("state"),
        p("reports"),
    );
    AgentConfig::from_toml_str(&root.join("agent.toml"), &text).expect("the bench's config")
}

/// The reference: every recording's bytes metered in memory with `meter_gmr`, then the report.
fn in_memory(recs: &[Rec]) -> usize {
    let mut meter = Meter::new(meter_config());
    for r in recs {
        meter_gmr(&mut meter, &r.name, &r.bytes, &CuptiOptions::default()).expect("meters");
    }
    meter.finish().expect("report").usage.len()
}

/// The recordings merged as streams in memory (`announce_sources` + `push_batches`).
fn in_memory_merged(recs: &[Rec]) -> usize {
    let mut meter = Meter::new(meter_config());
    let inputs: Vec<CuptiInput<'_>> = recs
        .iter()
        .map(|r| CuptiInput {
            name: &r.name,
            bytes: &r.bytes,
            format: CuptiFormat::Gmr,
        })
        .collect();
    let (_, batches) =
        announce_sources(&mut meter, &inputs, &CuptiOptions::default()).expect("announces");
    push_batches(&mut meter, batches);
    meter.finish().expect("report").usage.len()
}

/// `--once`: the recordings written whole to a fresh spool, then one `step(true)`, timed.
/// Returns (CPU ns, wall ns, sets closed).
fn agent_once(recs: &[Rec]) -> (u64, u64, u64) {
    let root = tempfile::tempdir().expect("a temp dir");
    let config = agent_config(root.path(), "");
    std::fs::create_dir_all(&config.spool).expect("spool");
    for r in recs {
        std::fs::write(config.spool.join(&r.name), &r.bytes).expect("writes the spool");
    }
    let mut agent = Agent::open(config).expect("opens");
    let (out, cpu, wall) = timed(|| agent.step(true).expect("a step"));
    assert_eq!(out.late, 0, "nothing is late in --once");
    (cpu, wall, out.sets_closed)
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("opens a recording");
    f.write_all(bytes).expect("appends");
}

/// Live: every recording grows by one frame at a time, with a `step(false)` every
/// `frames / sets` frames and one after the end frames. Only the steps are timed.
/// Returns (CPU ns, wall ns, sets closed, steps).
fn agent_live(recs: &[Rec], sets: u64) -> (u64, u64, u64, u64) {
    let root = tempfile::tempdir().expect("a temp dir");
    let config = agent_config(root.path(), "");
    let spool = config.spool.clone();
    std::fs::create_dir_all(&spool).expect("spool");
    let frames = recs.iter().map(|r| r.ends.len()).max().unwrap_or(1);
    let every = frames.div_ceil(sets.max(1) as usize).max(1);
    let mut agent = Agent::open(config).expect("opens");
    let (mut cpu, mut wall, mut closed, mut steps) = (0, 0, 0, 0);
    for k in 0..frames {
        for r in recs {
            let from = if k == 0 {
                0
            } else {
                r.ends[(k - 1).min(r.ends.len() - 1)]
            };
            let to = r.ends[k.min(r.ends.len() - 1)];
            append(&spool.join(&r.name), &r.bytes[from..to]);
        }
        if (k + 1) % every == 0 || k + 1 == frames {
            let (out, c, w) = timed(|| agent.step(false).expect("a step"));
            assert_eq!(
                out.late, 0,
                "nothing is late when sets follow the watermark"
            );
            cpu += c;
            wall += w;
            closed += out.sets_closed;
            steps += 1;
        }
    }
    (cpu, wall, closed, steps)
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

fn ms(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1e6)
}

/// Part 1: CPU per million kernel records, the agent against the in-memory path.
fn cpu_part() {
    let n = size("GPUMETER_AGENT_BENCH_RECORDINGS", 4, 2) as u32;
    let kernels = size("GPUMETER_AGENT_BENCH_KERNELS", 250_000, 5_000);
    let sets = size("GPUMETER_AGENT_BENCH_SETS", 10, 3);
    let runs = size("GPUMETER_AGENT_BENCH_RUNS", 3, 1).max(1);
    let only = kernels_only();
    // An hour ago, on a second: every window can close on the wall clock.
    let start_ns = (unix_ns() / SECOND - 3_600) * SECOND;
    let recs: Vec<Rec> = (0..n)
        .map(|i| {
            let cfg = SynthConfig {
                kernels,
                devices: 2,
                streams: 4,
                tenants: 4,
                processes: 1,
                kernels_per_second: 10_000,
                seed: 100 + u64::from(i),
                start_ns,
                kernels_per_buffer: (kernels / (10 * sets)).max(1),
                external_correlation: !only,
                api_records: !only,
            };
            recording(&cfg, 20_000 + i)
        })
        .collect();
    let total: u64 = recs.iter().map(|r| r.kernels).sum();
    let bytes: usize = recs.iter().map(|r| r.bytes.len()).sum();
    let frames = recs.iter().map(|r| r.ends.len()).max().unwrap_or(0);
    eprintln!(
        "cpu: {n} recordings x {kernels} launches ({}), {bytes} bytes, {frames} frames each, \
         window 1 s, horizon 200 ms, {runs} runs",
        if only {
            "kernel records only"
        } else {
            "full mix"
        }
    );
    let mut rows: BTreeMap<&str, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
    let mut push = |k, c, w| {
        let e: &mut (Vec<u64>, Vec<u64>) = rows.entry(k).or_default();
        e.0.push(c);
        e.1.push(w);
    };
    // `GPUMETER_AGENT_BENCH_SCENARIOS`: a subset of `memory merged once live` (profiling one).
    let only = std::env::var("GPUMETER_AGENT_BENCH_SCENARIOS")
        .unwrap_or_else(|_| "memory merged once live".into());
    let on = |k: &str| only.split_whitespace().any(|w| w == k);
    let mut notes = Vec::new();
    for run in 0..runs {
        if on("memory") {
            let (_, c, w) = timed(|| in_memory(&recs));
            push("memory", c, w);
        }
        if on("merged") {
            let (_, c, w) = timed(|| in_memory_merged(&recs));
            push("merged", c, w);
        }
        if on("once") {
            let (c, w, s) = agent_once(&recs);
            push("once", c, w);
            if run == 0 {
                notes.push(format!("once: {s} set closed"));
            }
        }
        if on("live") {
            let (c, w, s, steps) = agent_live(&recs, sets);
            push("live", c, w);
            if run == 0 {
                notes.push(format!("live: {s} sets closed in {steps} steps"));
            }
        }
    }
    let per_m = |ns: u64| ns as f64 / (total as f64 / 1e6);
    let mut med: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (k, (c, w)) in rows.iter_mut() {
        med.insert(k, (median(c), median(w)));
    }
    let base = med.get("memory").map(|m| m.0 as f64);
    println!("\n| scenario ({total} kernel launches in {n} recordings) | CPU ms | wall ms | CPU ms per 1 M kernel records | ÷ in-memory `meter_gmr` (CPU) |");
    println!("|---|---:|---:|---:|---:|");
    for (k, label) in [
        (
            "memory",
            "in memory: `meter_gmr` of each recording into one meter, report",
        ),
        (
            "merged",
            "in memory: `announce_sources` + `push_batches` (merged as streams)",
        ),
        ("once", "agent `--once`: one `step(true)` over the spool"),
        (
            "live",
            "agent live: frame by frame, `step(false)` every few frames",
        ),
    ] {
        let Some(&(c, w)) = med.get(k) else {
            continue;
        };
        println!(
            "| {label} | {} | {} | {:.1} | {} |",
            ms(c),
            ms(w),
            per_m(c) / 1e6,
            base.map_or("—".to_string(), |b| format!("{:.2}×", c as f64 / b))
        );
    }
    println!("\n({})", notes.join("; "));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-child") {
        rss_child(&args[i + 1], Path::new(&args[i + 2]));
        return;
    }
    let _ = QUICK.set(!args.iter().any(|a| a == "--bench"));
    let parts = std::env::var("GPUMETER_AGENT_BENCH_PARTS").unwrap_or("cpu rss latency".into());
    println!(
        "agent bench: {} cores, {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| s
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string()))
            .unwrap_or_default()
    );
    if parts.contains("cpu") {
        cpu_part();
    }
    if parts.contains("rss") {
        rss_part();
    }
    if parts.contains("latency") {
        latency_part();
    }
}

// ---- Part 2: peak RSS with many concurrent recordings (a child process each) ----

/// Frames written before the first step, and after it.
const RSS_FIRST_FRAMES: usize = 3;

/// Writes the spool of `n` small recordings under `root`: `spool/<name>` holds the header and
/// the first frames, `rest/<name>` the next frames (no end frame: they stay unfinished).
fn rss_spool(root: &Path, n: u32) -> u64 {
    let start_ns = (unix_ns() / SECOND - 3_600) * SECOND;
    let (spool, rest) = (root.join("spool"), root.join("rest"));
    std::fs::create_dir_all(&spool).expect("spool");
    std::fs::create_dir_all(&rest).expect("rest");
    let mut bytes = 0;
    for i in 0..n {
        // One node's 8 GPUs shared by every process (one seed: the same devices), each
        // process's records shifted by 1 ms from the previous one's.
        let cfg = SynthConfig {
            kernels: 400,
            devices: 8,
            streams: 1,
            tenants: 2,
            processes: 1,
            kernels_per_second: 100,
            seed: 7,
            start_ns: start_ns + u64::from(i) * 1_000_000,
            kernels_per_buffer: 80,
            external_correlation: !kernels_only(),
            api_records: !kernels_only(),
        };
        let r = recording(&cfg, 30_000 + i);
        // ends: the strings, 5 buffers, the end frame: the end frame is left out.
        let first = r.ends[RSS_FIRST_FRAMES];
        let last = r.ends[r.ends.len() - 2];
        std::fs::write(spool.join(&r.name), &r.bytes[..first]).expect("writes");
        std::fs::write(rest.join(&r.name), &r.bytes[first..last]).expect("writes");
        bytes += last as u64;
    }
    bytes
}

/// In a child: `mode` is `bare`, `memory` or `agent`; prints `peak_rss_kib=N ...`.
fn rss_child(mode: &str, root: &Path) {
    let names: Vec<String> = {
        let mut v: Vec<String> = std::fs::read_dir(root.join("spool"))
            .expect("the spool")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".gmr"))
            .collect();
        v.sort();
        v
    };
    let mut info = String::new();
    match mode {
        "bare" => {}
        "memory" => {
            let recs: Vec<(String, Vec<u8>)> = names
                .iter()
                .map(|n| {
                    let mut b = std::fs::read(root.join("spool").join(n)).expect("reads");
                    b.extend(std::fs::read(root.join("rest").join(n)).expect("reads"));
                    (n.clone(), b)
                })
                .collect();
            let mut meter = Meter::new(meter_config());
            for (n, b) in &recs {
                meter_gmr(&mut meter, n, b, &CuptiOptions::default()).expect("meters");
            }
            let report = meter.finish().expect("report");
            info = format!("rows={}", report.usage.len());
        }
        "agent" => {
            let config = agent_config(root, "");
            let spool = config.spool.clone();
            let mut agent = Agent::open(config).expect("opens");
            let a = agent.step(false).expect("a step");
            for n in &names {
                let rest = std::fs::read(root.join("rest").join(n)).expect("reads");
                append(&spool.join(n), &rest);
            }
            let b = agent.step(false).expect("a step");
            info = format!(
                "sets={} late={} windows_closed_to={}",
                a.sets_closed + b.sets_closed,
                a.late + b.late,
                agent.checkpoint().closed_to_ns
            );
        }
        other => panic!("unknown --rss-child mode {other}"),
    }
    println!("peak_rss_kib={} {info}", peak_rss_kib());
}

fn rss_part() {
    let n = size("GPUMETER_AGENT_BENCH_RSS_RECORDINGS", 1_000, 20) as u32;
    let root = tempfile::tempdir().expect("a temp dir");
    let bytes = rss_spool(root.path(), n);
    let exe = std::env::current_exe().expect("this bench's path");
    let mut out = Vec::new();
    for mode in ["bare", "memory", "agent"] {
        let o = std::process::Command::new(&exe)
            .arg("--rss-child")
            .arg(mode)
            .arg(root.path())
            .output()
            .expect("runs the child");
        assert!(
            o.status.success(),
            "child {mode}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let line = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let kib: u64 = line
            .split_whitespace()
            .next()
            .and_then(|w| w.strip_prefix("peak_rss_kib="))
            .and_then(|v| v.parse().ok())
            .expect("the child's peak RSS");
        out.push((mode, kib, line));
    }
    let mib = |k: u64| k as f64 / 1024.0;
    let bare = out[0].1;
    println!(
        "\n| peak RSS, {n} concurrent recordings (400 launches each in 5 frames, 100 a second, {:.1} MiB of files) | peak RSS MiB | over the bare process MiB | detail |",
        bytes as f64 / (1 << 20) as f64
    );
    println!("|---|---:|---:|---|");
    for (mode, kib, line) in &out {
        let label = match *mode {
            "bare" => "the bench process, nothing metered",
            "memory" => "every recording read whole and metered in memory (`meter_gmr`, one meter)",
            _ => "agent: `step(false)` over 3 frames each, 2 more frames each, `step(false)`",
        };
        println!(
            "| {label} | {:.1} | {:.1} | `{}` |",
            mib(*kib),
            mib(kib.saturating_sub(bare)),
            line.split_once(' ').map_or("", |x| x.1)
        );
    }
}

// ---- Part 3: from a window's closing instant to its events at the receiver ----

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (the events' `window_end`) to ns since the epoch.
fn rfc3339_ns(s: &str) -> Option<u64> {
    let t = humantime::parse_rfc3339(s).ok()?;
    Some(t.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_nanos() as u64)
}

/// Watches the receiver: the first instant (unix ns) each `window_end` arrived.
fn watch_receiver(rx: &receiver::Receiver, stop: &AtomicBool, seen: &Mutex<BTreeMap<u64, u64>>) {
    let mut done = 0;
    while !stop.load(Ordering::SeqCst) {
        let reqs = rx.requests();
        let now = unix_ns();
        for r in reqs.iter().skip(done) {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r.body) else {
                continue;
            };
            for e in v.as_array().into_iter().flatten() {
                if let Some(end) = e["data"]["window_end"].as_str().and_then(rfc3339_ns) {
                    seen.lock().expect("lock").entry(end).or_insert(now);
                }
            }
        }
        done = reqs.len();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Appends launches to one recording every `flush` until `until_ns` (unix): each frame holds
/// the launches whose kernels ended by now. Returns (write instant, latest kernel start) of
/// each frame.
fn produce(path: &Path, start_ns: u64, until_ns: u64, flush: Duration) -> Vec<(u64, u64)> {
    let cfg = SynthConfig {
        kernels: 1_000_000_000,
        devices: 1,
        streams: 2,
        tenants: 2,
        processes: 1,
        kernels_per_second: 1_000,
        seed: 3,
        start_ns,
        kernels_per_buffer: 1,
        external_correlation: true,
        api_records: true,
    };
    let mut g = Generator::new(&cfg).expect("generator");
    let mut header = g.gmr_header();
    header.process_id = std::process::id();
    let file = std::fs::File::create(path).expect("a recording");
    let mut w = GmrWriter::new(file, &header).expect("writer");
    w.write_strings(&g.string_table()).expect("strings");
    let mut buf = Vec::new();
    g.device_records(&mut buf);
    let mut frames = Vec::new();
    while unix_ns() < until_ns {
        let now = unix_ns();
        // Launches whose kernels have ended by now (a CUPTI buffer holds completed kernels).
        while g.summary().last_end_ns < now && g.next_launch(&mut buf) {}
        if !buf.is_empty() {
            let (decoded, _) = decode_prefix(&buf, ApiVersion::Cupti12_8);
            let latest = decoded
                .records
                .iter()
                .filter_map(|r| match &r.record {
                    Record::Kernel(k) => Some(k.start),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            w.write_buffer(&buf).expect("appends a frame");
            frames.push((unix_ns(), latest));
            buf.clear();
        }
        std::thread::sleep(flush);
    }
    frames
}

fn latency_part() {
    let windows = size("GPUMETER_AGENT_BENCH_WINDOWS", 10, 2);
    let flush = Duration::from_millis(env_u64("GPUMETER_AGENT_BENCH_FLUSH_MS", 50));
    let rx = receiver::Receiver::start(receiver::Faults::default());
    let root = tempfile::tempdir().expect("a temp dir");
    let sink = format!(
        "\n[[sink]]\nkind = \"events\"\nformat = \"cloudevents\"\nurl = \"{}\"\n\
         retry_initial = \"100ms\"\n",
        rx.url("/api/v1/events")
    );
    let config = agent_config(root.path(), &sink);
    std::fs::create_dir_all(&config.spool).expect("spool");
    let path = config.spool.join("live.gmr");
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    // The first window starts on the next whole second but one.
    let t0 = (unix_ns() / SECOND + 2) * SECOND;
    let until = t0 + (windows + 1) * SECOND + HORIZON_NS + 300_000_000;
    std::thread::scope(|s| {
        let agent_stop = Arc::clone(&stop);
        let agent = s.spawn(move || gpumeter_agent::run(config, false, agent_stop));
        let watch_stop = Arc::new(AtomicBool::new(false));
        let (ws, sn) = (Arc::clone(&watch_stop), Arc::clone(&seen));
        let rxr = &rx;
        let watcher = s.spawn(move || watch_receiver(rxr, &ws, &sn));
        while unix_ns() < t0 - 100_000_000 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let frames = produce(&path, t0, until, flush);
        // Let the last windows arrive.
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline
            && seen
                .lock()
                .expect("lock")
                .range(..=t0 + windows * SECOND)
                .count()
                < windows as usize
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::SeqCst);
        watch_stop.store(true, Ordering::SeqCst);
        let summary = agent
            .join()
            .expect("the agent's thread")
            .expect("the agent runs");
        watcher.join().expect("the watcher");
        latency_table(
            &seen.lock().expect("lock"),
            &frames,
            t0,
            windows,
            flush,
            &summary,
        );
    });
    assert!(rx.violations().is_empty(), "{:?}", rx.violations());
}

fn latency_table(
    seen: &BTreeMap<u64, u64>,
    frames: &[(u64, u64)],
    t0: u64,
    windows: u64,
    flush: Duration,
    summary: &gpumeter_agent::RunSummary,
) {
    let mut close = Vec::new();
    let mut frame = Vec::new();
    let mut missing = 0;
    for k in 1..=windows {
        let end = t0 + k * SECOND;
        let Some(&at) = seen.get(&end) else {
            missing += 1;
            continue;
        };
        close.push(at.saturating_sub(end + HORIZON_NS));
        // The first frame whose latest start reached the window's end plus the horizon.
        if let Some(&(written, _)) = frames.iter().find(|f| f.1 >= end + HORIZON_NS) {
            frame.push(at.saturating_sub(written));
        }
    }
    let stat = |v: &mut Vec<u64>| {
        if v.is_empty() {
            return ("—".to_string(), "—".to_string());
        }
        let m = median(v);
        (ms(m), ms(*v.iter().max().unwrap_or(&0)))
    };
    let (cm, cx) = stat(&mut close);
    let (fm, fx) = stat(&mut frame);
    println!(
        "\n| latency to the receiver, {windows} windows of 1 s (horizon 200 ms, poll 100 ms, a frame every {} ms; {} windows missing; agent: {} steps, {} sets) | median ms | max ms |",
        flush.as_millis(),
        missing,
        summary.steps,
        summary.sets_closed
    );
    println!("|---|---:|---:|");
    println!("| events at the receiver − (window end + horizon) | {cm} | {cx} |");
    println!("| events at the receiver − the write of the frame that let the window close | {fm} | {fx} |");
}
