//! `gpumeter agent` end to end, without a GPU: real processes run under the real injection
//! library with the fake libcupti in its streaming mode (`crates/gpumeter-inject/tests/c`), so
//! their recordings grow in a spool while the agent runs; the agent's reports, merged, must
//! equal `gpumeter usage` of the finished recordings metered together, row for row (`e2e`), also
//! when the agent is killed at any instant (`crash`). Recordings deleted, truncated, replaced or
//! copied under the agent are `crates/gpumeter-agent/tests/spool.rs`. A real Prometheus
//! scrapes the agent's metrics and its usage counters equal the reports (`prometheus`); the
//! deployment files pass `scripts/check-deploy` (`deploy`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../common/mod.rs"]
mod common;

mod crash;
mod deploy;
mod e2e;
mod fd_limit;
mod prometheus;

use common::fakes::{build_fakes, inject_lib};

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn gpumeter() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpumeter"))
}

/// A node: a spool, the agent's state and report folders, the fakes, and the agent's config.
pub(crate) struct Node {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) lib: PathBuf,
    pub(crate) app: PathBuf,
}

/// One fake CUDA process: its tenant labels, when it starts (after the first) and how long it
/// runs.
#[derive(Debug, Clone)]
pub(crate) struct Process {
    pub(crate) labels: Vec<(&'static str, &'static str)>,
    pub(crate) delay_ms: u64,
    pub(crate) run_ms: u64,
}

impl Node {
    /// `None` outside CI when the CUPTI headers are missing (the fakes cannot be built).
    pub(crate) fn new() -> Option<Node> {
        let dir = tempfile::tempdir().expect("tempdir");
        let (lib, app) = build_fakes(dir.path())?;
        for d in ["spool", "state", "reports"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("dir");
        }
        Some(Node { dir, lib, app })
    }

    pub(crate) fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// Writes `agent.toml` with 1 s windows, `extra` appended.
    pub(crate) fn config(&self, extra: &str) -> PathBuf {
        let path = self.path("agent.toml");
        std::fs::write(
            &path,
            format!(
                "spool = \"spool\"\nstate_dir = \"state\"\nwindow = \"1s\"\nhorizon = \"300ms\"\n\
                 grace = \"3s\"\npoll = \"100ms\"\n\n[tenant]\nrule = [\"{{GPUMETER_TENANT}}\", \
                 \"ns-{{POD_NAMESPACE}}\"]\n\n[[sink]]\nkind = \"reports\"\ndir = \"reports\"\n{extra}"
            ),
        )
        .expect("config");
        path
    }

    /// Starts `gpumeter agent --config agent.toml` and waits until it says it started (its
    /// signal handlers are in place).
    pub(crate) fn agent(&self, config: &Path) -> Agent {
        let mut child = gpumeter()
            .args(["agent", "--config"])
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the agent");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = {
            let log = std::sync::Arc::clone(&log);
            std::thread::spawn(move || {
                use std::io::BufRead as _;
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    let mut l = log
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    l.push_str(&line);
                    l.push('\n');
                }
            })
        };
        let agent = Agent { child, log, reader };
        wait_for("the agent to start", Duration::from_secs(30), || {
            agent.log().contains("agent started")
        });
        agent
    }

    /// Starts a fake CUDA process writing into the spool.
    pub(crate) fn process(&self, p: &Process) -> Child {
        let mut cmd = Command::new(&self.app);
        cmd.env("CUDA_INJECTION64_PATH", inject_lib())
            .env("GPUMETER_CUPTI_LIB", &self.lib)
            .env("GPUMETER_OUT", self.path("spool/%h-%p.gmr"))
            .env("GPUMETER_FLUSH_PERIOD_MS", "50")
            .env("GPUMETER_BUFFER_SIZE", "65536")
            .env("GPUMETER_ENERGY", "0")
            .env("FAKE_CUPTI_STREAM_MS", "40")
            .env("FAKE_CUPTI_STREAM_KERNELS", "5")
            .env("FAKE_CUPTI_KERNEL_NS", "30000")
            .env("FAKE_APP_RUN_MS", p.run_ms.to_string())
            .env_remove("GPUMETER_TENANT")
            .env_remove("POD_NAMESPACE")
            .env_remove("POD_NAME")
            .env_remove("POD_UID")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in &p.labels {
            cmd.env(k, v);
        }
        cmd.spawn().expect("start a fake CUDA process")
    }

    /// Runs `processes`, each started `delay_ms` after the first, and waits for them all.
    pub(crate) fn run_processes(&self, processes: &[Process]) {
        let t0 = Instant::now();
        let mut order: Vec<&Process> = processes.iter().collect();
        order.sort_by_key(|p| p.delay_ms);
        let mut children = Vec::new();
        for p in order {
            let at = t0 + Duration::from_millis(p.delay_ms);
            if let Some(wait) = at.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            children.push(self.process(p));
        }
        for mut c in children {
            let s = c.wait().expect("wait");
            assert!(s.success(), "a fake process failed: {s}");
        }
    }

    /// The recordings, in the spool or retired to `spool/done`.
    pub(crate) fn recordings(&self) -> Vec<PathBuf> {
        let mut v = Vec::new();
        for d in ["spool", "spool/done"] {
            if let Ok(rd) = std::fs::read_dir(self.path(d)) {
                for e in rd.flatten() {
                    let p = e.path();
                    if p.extension().is_some_and(|x| x == "gmr") {
                        v.push(p);
                    }
                }
            }
        }
        v.sort();
        v
    }

    /// The report files the agent wrote.
    pub(crate) fn reports(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.path("reports"))
            .expect("reports")
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".usage.json"))
            .collect();
        v.sort();
        v
    }

    /// A tenant map giving each recording's process the tenant its labels give under the
    /// rule of [`Node::config`].
    pub(crate) fn tenant_map(&self) -> PathBuf {
        let mut text = String::from("[pid]\n");
        for r in self.recordings() {
            let bytes = std::fs::read(&r).expect("recording");
            let h = gpumeter_recording::gmr::read_gmr(&bytes)
                .expect("gmr")
                .header;
            let tenant = h
                .labels
                .get("GPUMETER_TENANT")
                .cloned()
                .or_else(|| h.labels.get("POD_NAMESPACE").map(|n| format!("ns-{n}")));
            if let Some(t) = tenant {
                text.push_str(&format!("{} = \"{t}\"\n", h.process_id));
            }
        }
        let path = self.path("tenants.toml");
        std::fs::write(&path, text).expect("map");
        path
    }

    /// `gpumeter usage --json` of the finished recordings metered together.
    pub(crate) fn oracle(&self) -> serde_json::Value {
        let map = self.tenant_map();
        let mut cmd = gpumeter();
        cmd.args(["usage", "--json", "--window", "1s", "--tenant-map"])
            .arg(&map);
        cmd.args(self.recordings());
        json(&run(cmd))
    }

    /// The agent's reports merged by `gpumeter usage --format usage`.
    pub(crate) fn merged(&self) -> serde_json::Value {
        let mut cmd = gpumeter();
        cmd.args(["usage", "--json", "--format", "usage"]);
        cmd.args(self.reports());
        json(&run(cmd))
    }
}

pub(crate) fn run(mut cmd: Command) -> Output {
    let o = cmd.output().expect("run gpumeter");
    assert!(o.status.success(), "{cmd:?}: {}", text(&o.stderr));
    o
}

pub(crate) fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).expect("JSON")
}

/// A report's usage rows as sorted lines: tenant, device, window, meter, quantity.
pub(crate) fn rows(report: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = report["usage"]
        .as_array()
        .expect("usage")
        .iter()
        .map(|u| {
            format!(
                "{} {} {} {} {}",
                u["tenant"], u["device_key"], u["window_start"], u["meter"], u["quantity"]
            )
        })
        .collect();
    v.sort();
    v
}

/// Waits until `done` holds (a hang fails the test after `limit`, with `what`).
impl Node {
    /// Waits until the agent retired `n` recordings into `spool/done` (60 s at most).
    pub(crate) fn wait_retired(&self, n: usize) {
        wait_for(
            "the agent to retire every recording",
            Duration::from_secs(60),
            || std::fs::read_dir(self.path("spool/done")).map_or(0, |d| d.count()) == n,
        );
    }
}

pub(crate) fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !done() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running agent and what it has logged so far.
pub(crate) struct Agent {
    child: Child,
    log: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Agent {
    /// Its standard error so far.
    pub(crate) fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Stops the agent with SIGTERM and returns its exit status and standard error.
pub(crate) fn terminate(mut agent: Agent) -> (Option<i32>, String) {
    let pid = agent.child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = agent.child.wait().expect("wait for the agent");
    let log = std::sync::Arc::clone(&agent.log);
    let _ = agent.reader.join();
    let text = log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    (status.code(), text)
}

/// Four processes on one GPU, overlapping, starting and ending at different times, two
/// tenants by label (one by `GPUMETER_TENANT`, one by namespace).
pub(crate) fn workload() -> Vec<Process> {
    vec![
        Process {
            labels: vec![("GPUMETER_TENANT", "alice"), ("POD_NAMESPACE", "ml")],
            delay_ms: 0,
            run_ms: 1800,
        },
        Process {
            labels: vec![("POD_NAMESPACE", "team-b")],
            delay_ms: 300,
            run_ms: 900,
        },
        Process {
            labels: vec![("POD_NAMESPACE", "team-b")],
            delay_ms: 1400,
            run_ms: 1200,
        },
        Process {
            labels: vec![("GPUMETER_TENANT", "alice")],
            delay_ms: 2100,
            run_ms: 500,
        },
    ]
}
