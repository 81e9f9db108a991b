//! Unmetered GPU processes (`[nvml] processes`, docs/AGENT.md): the agent lists each GPU's
//! compute processes through a recorded NVML (`gpumeter_nvml::Recorded`) and reports, in the
//! next window set's report, the one that holds a GPU with no recording in the spool for longer
//! than the grace period; never the one whose recording is there, never one gone before the
//! grace, once per sighting, also across a restart.
//!
//! The agent runs as a library, one `step` at a time, with real sleeps between steps: a short
//! grace (1 s), windows of 1 s, listings every 20 ms. Assertions compare the test's wall clock
//! with the agent's, never durations: the agent cannot find a process before its own clock is
//! a grace past the first listing, which is after the test read its clock.
//!
//! The metered process is this test process (its `/proc/<pid>/status` exists), with a
//! recording in the spool under its pid; the unmetered one is this test's parent (a real
//! process, with no recording).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpumeter_agent::state::Checkpoint;
use gpumeter_agent::{Agent, AgentConfig, UnmeteredProcess};
use gpumeter_core::{UsageReport, WarningCode};
use gpumeter_nvml::{now_unix_ns, Gpu, GpuProcess, Recorded, Telemetry, TelemetryError};
use gpumeter_synth::SynthConfig;

#[path = "support/logs.rs"]
mod logs;
#[path = "support/recording.rs"]
mod recording_support;
use logs::Logs;
use recording_support::Synthetic;

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000_000_000;
const GRACE_NS: u64 = SECOND;
const UUID: &str = "GPU-5c0ffee0-1234-5678-9abc-def012345678";
const MIB: u64 = 1 << 20;

/// How long a loop waits for what it expects before it fails (a bound, not a measurement).
const PATIENCE: Duration = Duration::from_secs(60);

/// A node: spool, state and reports in a temporary folder; grace 1 s, windows of 1 s.
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: AgentConfig,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let text = "spool = \"spool\"\nstate_dir = \"state\"\nwindow = \"1s\"\n\
                    horizon = \"100ms\"\ngrace = \"1s\"\npoll = \"20ms\"\n\n[[sink]]\n\
                    kind = \"reports\"\ndir = \"reports\"\n\n[nvml]\nprocesses = true\n\
                    interval = \"20ms\"\n";
        let config =
            AgentConfig::from_toml_str(&root.join("agent.toml"), text).expect("agent.toml");
        assert_eq!(config.grace_ns, GRACE_NS);
        Node {
            _dir: dir,
            root,
            config,
        }
    }

    fn open(&self, telemetry: &Arc<Recorded>) -> Agent {
        let t: Arc<dyn Telemetry> = telemetry.clone();
        Agent::open_with_telemetry(self.config.clone(), t).expect("open the agent")
    }

    /// Puts a recording of process `pid` in the spool, still being written (no end frame),
    /// with records a few seconds old.
    fn record(&self, pid: u32) {
        let start_ns = now_unix_ns() - 5 * SECOND;
        let cfg = SynthConfig {
            kernels: 100,
            devices: 1,
            streams: 1,
            tenants: 1,
            processes: 1,
            kernels_per_second: 2_000,
            seed: 7,
            start_ns,
            kernels_per_buffer: 50,
            external_correlation: true,
            api_records: true,
        };
        let r = Synthetic::new(&cfg, pid, Some(start_ns));
        std::fs::create_dir_all(self.root.join("spool")).expect("spool");
        std::fs::write(
            self.root.join("spool").join(format!("synth-{pid}.gmr")),
            r.open(usize::MAX),
        )
        .expect("write the recording");
    }

    /// The reports the sink holds, by file name.
    fn reports(&self) -> Vec<(String, UsageReport)> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(self.root.join("reports"))
            .into_iter()
            .flatten()
        {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".usage.json") {
                let bytes = std::fs::read(e.path()).expect("read a report");
                let r: UsageReport = serde_json::from_slice(&bytes).expect("a report");
                assert!(r.verify_digest(), "{name}: the report's sha256 verifies");
                out.push((name, r));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every `unmetered_process` warning of every report: (report, message).
    fn unmetered_warnings(&self) -> Vec<(String, String)> {
        self.reports()
            .into_iter()
            .flat_map(|(name, r)| {
                r.warnings
                    .iter()
                    .filter(|w| *w.code() == WarningCode::UnmeteredProcess)
                    .map(|w| (name.clone(), w.message().to_string()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

fn gpu0() -> Gpu {
    Gpu {
        index: 0,
        name: Some("NVIDIA Test".into()),
        uuid: Some(UUID.into()),
        mig: false,
    }
}

fn p(pid: u32, mib: u64) -> GpuProcess {
    GpuProcess {
        pid,
        used_memory_bytes: Some(mib * MIB),
    }
}

fn step(agent: &mut Agent) {
    agent.step(false).expect("a step");
    std::thread::sleep(Duration::from_millis(20));
}

/// Steps until `done` holds, failing after [`PATIENCE`].
fn step_until(agent: &mut Agent, what: &str, mut done: impl FnMut(&Agent) -> bool) {
    let start = Instant::now();
    while !done(agent) {
        assert!(start.elapsed() < PATIENCE, "waited too long for {what}");
        step(agent);
    }
}

/// Steps until the agent's closed edge has passed the wall clock's `t` (ns): every window
/// ending by then is in a report.
fn step_past(agent: &mut Agent, t: u64) {
    step_until(agent, "the watermark", |a| a.checkpoint().closed_to_ns > t);
}

fn us() -> u32 {
    std::process::id()
}

fn parent() -> u32 {
    let ppid = std::os::unix::process::parent_id();
    assert!(
        ppid > 1 && ppid != us(),
        "a parent process of our own: {ppid}"
    );
    ppid
}

#[test]
fn a_process_without_a_recording_is_reported_once_after_the_grace() {
    let node = Node::new();
    node.record(us());
    let (metered, unmetered) = (us(), parent());
    let nvml = Arc::new(Recorded::new(vec![gpu0()]).with_processes(
        0,
        [
            vec![p(metered, 100), p(unmetered, 2)],
            vec![p(metered, 100), p(unmetered, 3)],
            vec![p(metered, 100), p(unmetered, 1)],
        ],
    ));
    let start_ns = now_unix_ns();
    let mut agent = node.open(&nvml);
    // Nothing is found, and no report warns, until a grace after the first listing.
    let mut found_at = None;
    step_until(&mut agent, "the unmetered process", |a| {
        let now = now_unix_ns();
        if now < start_ns + GRACE_NS {
            assert!(a.unmetered_processes().is_empty(), "found before the grace");
            // The listed GPU shows at 0 (or not yet, before the first listing).
            let g = gauge(a);
            assert!(
                g.iter().all(|l| l.ends_with(" 0")),
                "{g:?} before the grace"
            );
            assert!(
                node.unmetered_warnings().is_empty(),
                "reported before the grace"
            );
        }
        if !a.unmetered_processes().is_empty() {
            found_at = Some(now);
        }
        found_at.is_some()
    });
    let found_at = found_at.expect("found");
    assert!(found_at >= start_ns + GRACE_NS);
    let running = agent.unmetered_processes();
    assert_eq!(running.len(), 1, "{running:?}");
    let u = &running[0];
    assert_eq!((u.pid, u.device_index), (unmetered, 0));
    assert_eq!(u.device_uuid.as_deref(), Some(UUID));
    assert_eq!(
        u.used_memory_bytes,
        Some(3 * MIB),
        "the most it was listed with"
    );
    assert!(start_ns <= u.first_seen_ns && u.first_seen_ns + GRACE_NS <= u.last_seen_ns);
    assert!(u.last_seen_ns <= found_at);
    assert_eq!(listing_up(&agent), Some(1.0));
    // One metric: the gauge of its GPU, and no other series.
    assert_eq!(
        gauge(&agent),
        vec![format!(
            "gpumeter_agent_unmetered_processes{{device=\"{UUID}\"}} 1"
        )]
    );

    // The next set's report warns of it, with its fields; nothing warns of the metered one.
    step_past(&mut agent, found_at);
    let warnings = node.unmetered_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let (_, message) = &warnings[0];
    assert!(
        message.starts_with(&format!("GPU process {unmetered}")),
        "{message}"
    );
    assert!(
        message.contains(&format!("held GPU 0 ({UUID})")),
        "{message}"
    );
    assert!(
        message.contains(&format!("used memory {} bytes at most", 3 * MIB)),
        "{message}"
    );
    let (first, last) = seen(message);
    assert_eq!(first, u.first_seen_ns / MS * MS, "{message}");
    assert!(
        last >= first + GRACE_NS - MS && last >= u.last_seen_ns / MS * MS,
        "{message}"
    );
    assert!(
        !message.contains(&format!("process {metered} ")),
        "{message}"
    );

    // Still listed: not reported again in later reports.
    let later = now_unix_ns() + 2 * SECOND;
    step_past(&mut agent, later);
    assert_eq!(node.unmetered_warnings(), warnings);
    let found: Vec<u32> = agent
        .checkpoint()
        .unmetered_found
        .iter()
        .map(|f| f.pid)
        .collect();
    assert_eq!(found, vec![unmetered]);

    // Nor after a restart while it runs.
    drop(agent);
    let mut agent = node.open(&nvml);
    let later = now_unix_ns() + GRACE_NS + 2 * SECOND;
    step_past(&mut agent, later);
    assert_eq!(node.unmetered_warnings(), warnings);
    assert_eq!(agent.unmetered_processes().len(), 1);
}

/// The samples of `gpumeter_agent_unmetered_processes` in the agent's exposition.
fn gauge(agent: &Agent) -> Vec<String> {
    agent
        .metrics()
        .encode(gpumeter_agent::metrics::Format::Prometheus)
        .lines()
        .filter(|l| l.starts_with("gpumeter_agent_unmetered_processes{"))
        .map(str::to_string)
        .collect()
}

/// The first and last seen times of a warning's message, ns (to the millisecond).
fn seen(message: &str) -> (u64, u64) {
    let at = |key: &str| {
        let from = message
            .find(key)
            .unwrap_or_else(|| panic!("{key} in {message}"))
            + key.len();
        let text = &message[from..];
        let end = text.find(',').unwrap_or(text.len());
        let t = humantime::parse_rfc3339(&text[..end]).expect("RFC 3339");
        let ns = t
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos();
        u64::try_from(ns).expect("u64")
    };
    (at("first seen "), at("last seen "))
}

#[test]
fn a_process_gone_before_the_grace_is_not_reported() {
    let node = Node::new();
    node.record(us());
    // The parent holds the GPU at the first listing only.
    let nvml = Arc::new(
        Recorded::new(vec![gpu0()])
            .with_processes(0, [vec![p(us(), 1), p(parent(), 1)], vec![p(us(), 1)]]),
    );
    let mut agent = node.open(&nvml);
    let later = now_unix_ns() + GRACE_NS + 2 * SECOND;
    step_past(&mut agent, later);
    assert!(!node.reports().is_empty(), "the agent wrote reports");
    assert_eq!(node.unmetered_warnings(), Vec::<(String, String)>::new());
    assert!(agent.unmetered_processes().is_empty());
    assert!(agent.checkpoint().unmetered_found.is_empty());
}

#[test]
fn a_node_with_only_unmetered_work_still_gets_the_report() {
    // No recording at all: a set has no source, but it carries the warning.
    let node = Node::new();
    let nvml = Arc::new(Recorded::new(vec![gpu0()]).with_processes(0, [vec![p(parent(), 4)]]));
    let mut agent = node.open(&nvml);
    step_until(&mut agent, "the unmetered process", |a| {
        !a.unmetered_processes().is_empty()
    });
    step_past(&mut agent, now_unix_ns());
    let reports = node.reports();
    let with: Vec<&UsageReport> = reports
        .iter()
        .map(|(_, r)| r)
        .filter(|r| {
            r.warnings
                .iter()
                .any(|w| *w.code() == WarningCode::UnmeteredProcess)
        })
        .collect();
    assert_eq!(with.len(), 1, "{reports:?}");
    assert!(with[0].sources.is_empty() && with[0].usage.is_empty());
    assert!(with[0].message_contains(&format!("GPU process {}", parent())));
    let one = format!("gpumeter_agent_unmetered_processes{{device=\"{UUID}\"}} 1");
    assert_eq!(gauge(&agent), vec![one]);

    // The process leaves the GPU: the gauge falls to 0 (the series stays, at 0).
    nvml.push_processes(0, Vec::new());
    step_until(&mut agent, "the process gone", |a| {
        a.unmetered_processes().is_empty()
    });
    let zero = format!("gpumeter_agent_unmetered_processes{{device=\"{UUID}\"}} 0");
    assert_eq!(gauge(&agent), vec![zero]);
}

/// What a report's warnings say.
trait Says {
    fn message_contains(&self, text: &str) -> bool;
}

impl Says for UsageReport {
    fn message_contains(&self, text: &str) -> bool {
        self.warnings.iter().any(|w| w.message().contains(text))
    }
}

#[test]
fn a_finding_waiting_in_the_checkpoint_reaches_the_first_report_after_a_restart() {
    let node = Node::new();
    let state = node.config.state_dir.clone();
    std::fs::create_dir_all(&state).expect("state");
    let waiting = UnmeteredProcess {
        device_index: 1,
        device_uuid: Some(UUID.into()),
        pid: 4_000_001,
        namespace_pid: Some(7),
        first_seen_ns: now_unix_ns() - 60 * SECOND,
        last_seen_ns: now_unix_ns() - 30 * SECOND,
        used_memory_bytes: Some(MIB),
    };
    // A checkpoint as an agent stopped between finding it and making the next set leaves it.
    let mut c = Checkpoint::load(&state).expect("fresh");
    c.node = "node-a".into();
    c.closed_to_ns = (now_unix_ns() - 10 * SECOND) / SECOND * SECOND;
    c.unmetered = vec![waiting.clone()];
    c.unmetered_found = vec![waiting.clone()];
    c.save(&state).expect("save");
    // The GPU is idle now.
    let nvml = Arc::new(Recorded::new(vec![gpu0()]));
    let mut agent = node.open(&nvml);
    step_past(&mut agent, now_unix_ns());
    let warnings = node.unmetered_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].1, waiting.message());
    assert!(agent.checkpoint().unmetered.is_empty());
    assert!(agent.checkpoint().pending.is_none());
}

#[test]
fn nvml_that_cannot_be_used_is_logged_once_and_metering_goes_on() {
    let (logs, _guard) = Logs::start();
    let node = Node::new();
    node.record(us());
    let nvml = Arc::new(Recorded::unavailable(TelemetryError::Unavailable {
        call: "nvmlInit_v2",
        detail: "NVIDIA driver is not loaded".into(),
    }));
    let mut agent = node.open(&nvml);
    let later = now_unix_ns() + 2 * SECOND;
    step_past(&mut agent, later);
    assert!(!node.reports().is_empty(), "metering went on");
    assert_eq!(logs.warned("", "cannot list the GPUs through NVML"), 1);
    assert!(agent.unmetered_processes().is_empty());
    // The metric says the listing is down, so an alert sees that nothing is watched.
    assert_eq!(listing_up(&agent), Some(0.0));
}

/// `gpumeter_agent_gpu_listing_up` in the agent's exposition.
fn listing_up(agent: &Agent) -> Option<f64> {
    let text = agent
        .metrics()
        .encode(gpumeter_agent::metrics::Format::Prometheus);
    text.lines()
        .find_map(|l| l.strip_prefix("gpumeter_agent_gpu_listing_up "))
        .map(|v| v.parse().expect("a number"))
}

#[test]
fn nvml_processes_in_a_build_without_nvml_is_refused_and_with_it_never_crashes() {
    let node = Node::new();
    match (Agent::open(node.config.clone()), cfg!(feature = "nvml")) {
        // With the feature: NVML is used, or (no driver here) logged and not used.
        (Ok(mut agent), true) => {
            agent.step(false).expect("a step");
        }
        (Err(e @ gpumeter_agent::AgentError::NvmlNotBuilt { .. }), false) => {
            assert!(e.to_string().contains("[nvml] processes = true"), "{e}");
            // Refused before the agent made anything.
            assert!(!node.config.state_dir.exists());
        }
        (Ok(_), false) => panic!("[nvml] processes = true opened without the nvml feature"),
        (Err(e), _) => panic!("{e}"),
    }
}
