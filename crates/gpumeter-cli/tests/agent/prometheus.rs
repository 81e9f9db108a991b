//! The agent's metrics endpoint (docs/AGENT.md, "Metrics") read by Prometheus itself: a real
//! Prometheus server (Debian's `prometheus` package) scrapes an agent metering the streaming
//! fake workload every second, and its HTTP API gives, per tenant and meter, exactly the usage
//! of the agent's report files; `promtool check metrics` accepts the exposition. Without
//! `prometheus` and `promtool` the test says `skipped:`; under `CI=true` it fails.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use gpumeter::core::UsageReport;

use super::*;

/// Per (tenant, device label, meter), a quantity in the meter's canonical unit.
pub(crate) type Usage = BTreeMap<(String, String, String), u128>;

/// The usage of the agent's report files, summed per tenant, device label (as the metrics
/// name devices) and meter.
pub(crate) fn report_usage(node: &Node) -> Usage {
    let mut out = Usage::new();
    for path in node.reports() {
        let bytes = std::fs::read(&path).expect("a report");
        let report: UsageReport =
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for row in &report.usage {
            let device = gpumeter_agent::metrics::device_label(&row.device_key).to_string();
            let key = (row.tenant.clone(), device, row.meter.as_str().to_string());
            *out.entry(key).or_default() += row.quantity.0;
        }
    }
    out
}

/// The usage totals of the agent's checkpoint (what `gpumeter_usage_total` shows).
pub(crate) fn checkpoint_usage(node: &Node) -> Usage {
    let checkpoint = gpumeter_agent::state::Checkpoint::load(&node.path("state"))
        .expect("the agent's checkpoint");
    let totals = checkpoint
        .usage_totals
        .expect("the checkpoint has usage totals");
    totals
        .series()
        .map(|(t, d, m, q)| ((t.to_string(), d.to_string(), m.to_string()), q))
        .collect()
}

/// Whether `prometheus` and `promtool` run; under `CI=true` their absence fails.
fn prometheus_installed() -> bool {
    let runs = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs("prometheus") && runs("promtool") {
        return true;
    }
    assert!(
        !common::in_ci(),
        "CI=true but prometheus or promtool is missing (Debian's package `prometheus`)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "skipped: prometheus not installed (apt-get install prometheus); test body not run"
    );
    false
}

/// A child process killed when dropped (a failed assertion leaves nothing running).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An agent stopped (SIGKILL) when dropped, unless [`terminate`]d first.
struct AgentGuard(Option<super::Agent>);

impl Drop for AgentGuard {
    fn drop(&mut self) {
        if let Some(a) = self.0.as_mut() {
            let _ = a.child.kill();
            let _ = a.child.wait();
        }
    }
}

/// A loopback port free now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// The address the agent's log says its metrics endpoint listens on.
fn metrics_addr(agent: &super::Agent) -> String {
    metrics_addr_in(|| agent.log())
}

/// The address the log `read` gives says the metrics endpoint listens on (`metrics listening
/// addr=…`), once it says so (30 s at most).
pub(crate) fn metrics_addr_in(read: impl Fn() -> String) -> String {
    let mut addr = None;
    wait_for("the metrics endpoint", Duration::from_secs(30), || {
        addr = read()
            .lines()
            .filter(|l| l.contains("metrics listening"))
            .find_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("addr="))
                    .map(str::to_string)
            });
        addr.is_some()
    });
    addr.expect("an address")
}

fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into()
}

/// `GET url`: status and body; `None` when nothing answers.
fn get(url: &str) -> Option<(u16, String)> {
    let mut r = http().get(url).call().ok()?;
    let body = r.body_mut().read_to_string().ok()?;
    Some((r.status().as_u16(), body))
}

/// Starts Prometheus on `port`, scraping `target` every second, with its files in `dir`.
fn start_prometheus(dir: &Path, port: u16, target: &str) -> KillOnDrop {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: gpumeter-agent\n    static_configs:\n      \
             - targets: ['{target}']\n"
        ),
    )
    .expect("prometheus.yml");
    let log = std::fs::File::create(dir.join("prometheus.log")).expect("log");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    KillOnDrop(child)
}

/// `sum by (tenant, meter) (gpumeter_usage_total)` as Prometheus answers it now; `None`
/// while it cannot answer.
fn prometheus_usage(port: u16) -> Option<BTreeMap<(String, String), f64>> {
    let mut r = http()
        .get(format!("http://127.0.0.1:{port}/api/v1/query"))
        .query("query", "sum by (tenant, meter) (gpumeter_usage_total)")
        .call()
        .ok()?;
    let body: serde_json::Value =
        serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()?;
    let mut out = BTreeMap::new();
    for s in body["data"]["result"].as_array()? {
        let key = (
            s["metric"]["tenant"].as_str()?.to_string(),
            s["metric"]["meter"].as_str()?.to_string(),
        );
        out.insert(key, s["value"][1].as_str()?.parse().ok()?);
    }
    Some(out)
}

/// `promtool check metrics` of `text`: its exit status and what it said.
fn promtool(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let o = child.wait_with_output().expect("promtool");
    (
        o.status.success(),
        format!("{}{}", text_of(&o.stdout), text_of(&o.stderr)),
    )
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn prometheus_scrapes_the_agent_and_its_usage_equals_the_reports() {
    if !prometheus_installed() {
        return;
    }
    let Some(node) = Node::new() else { return };
    let config = node.config("\n[metrics]\nlisten = \"127.0.0.1:0\"\n");
    let mut agent = AgentGuard(Some(node.agent(&config)));
    let addr = metrics_addr(agent.0.as_ref().expect("the agent"));
    let port = free_port();
    let prometheus_dir = node.path("prometheus");
    std::fs::create_dir_all(&prometheus_dir).expect("prometheus dir");
    let _prometheus = start_prometheus(&prometheus_dir, port, &addr);

    let processes = workload();
    node.run_processes(&processes);
    // Every recording retired: every window with a record of them is closed and reported.
    node.wait_retired(processes.len());
    assert!(
        node.reports().len() >= 2,
        "several window sets: {:?}",
        node.reports()
    );
    let per_series = report_usage(&node);
    let mut expected: BTreeMap<(String, String), u128> = BTreeMap::new();
    for ((tenant, _, meter), q) in &per_series {
        *expected.entry((tenant.clone(), meter.clone())).or_default() += q;
    }
    assert!(expected.keys().any(|(t, _)| t == "alice"), "{expected:?}");
    assert!(
        expected.keys().any(|(t, _)| t == "ns-team-b"),
        "{expected:?}"
    );
    // Float64 samples are exact integers below 2^53: equality below is exact.
    assert!(expected.values().all(|&q| q < 1 << 53), "{expected:?}");
    assert_eq!(
        checkpoint_usage(&node),
        per_series,
        "the checkpoint's totals"
    );

    // Prometheus' answer, once it scraped the agent after the last set.
    let want: BTreeMap<(String, String), f64> = expected
        .iter()
        .map(|(k, &q)| (k.clone(), q as f64))
        .collect();
    let mut got = None;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(90) {
        got = prometheus_usage(port);
        if got.as_ref() == Some(&want) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let log = std::fs::read_to_string(prometheus_dir.join("prometheus.log")).unwrap_or_default();
    assert_eq!(
        got.as_ref(),
        Some(&want),
        "Prometheus' sum by (tenant, meter) (gpumeter_usage_total) (left) is the reports' \
         (right)\nprometheus log:\n{log}\nagent log:\n{}",
        agent.0.as_ref().map(|a| a.log()).unwrap_or_default()
    );

    // Prometheus' own parser accepts the exposition; the agent is up and ready.
    let (status, text) = get(&format!("http://{addr}/metrics")).expect("/metrics");
    assert_eq!(status, 200, "{text}");
    let (ok, said) = promtool(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    assert_eq!(
        get(&format!("http://{addr}/healthz")).map(|r| r.0),
        Some(200)
    );
    let mut ready = None;
    wait_for("/readyz", Duration::from_secs(30), || {
        ready = get(&format!("http://{addr}/readyz"));
        ready.as_ref().is_some_and(|r| r.0 == 200)
    });

    let (code, stderr) = terminate(agent.0.take().expect("the agent"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the usage counters start at 0"),
        "a fresh start says so: {stderr}"
    );
    assert!(
        get(&format!("http://{addr}/healthz")).is_none(),
        "the endpoint stopped with the agent"
    );
}

#[test]
fn a_set_closed_again_after_a_crash_is_counted_once() {
    // Between the set's hand-over and its checkpoint, the usage totals must not be written:
    // the restart closes the same set again (docs/AGENT.md, "Metrics").
    for point in ["report-written:1", "events-stored:1", "checkpoint-temp:2"] {
        let Some(node) = Node::new() else { return };
        node.run_processes(&workload()[..2]);
        let config = node.config("");
        let crashed = gpumeter()
            .args(["agent", "--once", "--config"])
            .arg(&config)
            .env("GPUMETER_AGENT_CRASH_AT", point)
            .output()
            .expect("run the agent");
        {
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(
                crashed.status.signal(),
                Some(6),
                "{point}: the agent aborts at its crash point\n{}",
                text_of(&crashed.stderr)
            );
        }
        let pending = gpumeter_agent::state::Checkpoint::load(&node.path("state"))
            .expect("checkpoint")
            .pending;
        assert!(pending.is_some(), "{point}: the set is still pending");
        run({
            let mut c = gpumeter();
            c.args(["agent", "--once", "--config"]).arg(&config);
            c
        });
        let reports = report_usage(&node);
        assert!(!reports.is_empty(), "{point}: the set has usage");
        assert_eq!(
            checkpoint_usage(&node),
            reports,
            "{point}: the checkpoint's usage totals (left) are the reports' (right)"
        );
    }
}
