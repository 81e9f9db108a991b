//! SIGKILL at any instant, then a restart: the same reports and events as an uninterrupted
//! run (`gpumeter usage` of the recordings, which the uninterrupted agent equals: `e2e`), and
//! no event id ever arrives with two payloads.

use std::time::{Duration, Instant};

use super::e2e::{events_sink, expected_events, received, receiver};
use super::*;

/// A small xorshift generator: the kill instants, reproducible from the seed printed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn kill9(agent: &mut Child) {
    let _ = agent.kill();
    let _ = agent.wait();
}

/// Runs the workload while the agent is killed with SIGKILL `kills` times at random instants
/// and restarted at once, then lets a last agent finish; checks the result.
fn killed_run(seed: u64, kills: usize, crash_at: &[&str]) {
    let Some(node) = Node::new() else { return };
    let r = receiver::Receiver::start(receiver::Faults {
        fail_every: 7,
        drop_every: 11,
        ..receiver::Faults::default()
    });
    let config = node.config(&events_sink(&r));
    let mut rng = Rng(seed | 1);
    eprintln!("crash test seed {seed}");
    let processes: Vec<Process> = workload()
        .into_iter()
        .chain(workload().into_iter().map(|mut p| {
            p.delay_ms += 1500;
            p
        }))
        .collect();
    let n = processes.len();
    let t0 = Instant::now();
    let mut fired = Vec::new();
    let workers = std::thread::scope(|s| {
        let w = s.spawn(|| node.run_processes(&processes));
        let mut killed = 0;
        let mut armed = crash_at.iter();
        // Kill at random instants while the processes run and after, until enough kills.
        while killed < kills || !w.is_finished() {
            let mut cmd = gpumeter();
            cmd.args(["agent", "--config"]).arg(&config);
            cmd.stdout(Stdio::null()).stderr(Stdio::null());
            let point = armed.next();
            if let Some(point) = point {
                cmd.env("GPUMETER_AGENT_CRASH_AT", point);
            }
            let mut agent = cmd.spawn().expect("agent");
            if let Some(point) = point {
                // An armed agent runs until it reaches its point (it aborts there) or a while.
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(5) {
                    if let Ok(Some(status)) = agent.try_wait() {
                        use std::os::unix::process::ExitStatusExt as _;
                        if status.signal() == Some(6) {
                            fired.push(point.split(':').next().unwrap_or("").to_string());
                        }
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            } else {
                std::thread::sleep(Duration::from_millis(20 + rng.below(230)));
            }
            kill9(&mut agent);
            killed += 1;
            assert!(
                t0.elapsed() < Duration::from_secs(180),
                "the crash run takes too long"
            );
        }
        killed
    });
    for p in crash_at {
        let name = p.split(':').next().unwrap_or("");
        assert!(
            fired.iter().any(|f| f == name),
            "the crash point {name} was never reached: {fired:?}"
        );
    }
    assert!(workers >= kills);
    // The last agent runs undisturbed until every recording is retired.
    let agent = node.agent(&config);
    wait_for(
        "the agent to retire every recording after the kills",
        Duration::from_secs(60),
        || std::fs::read_dir(node.path("spool/done")).map_or(0, |d| d.count()) == n,
    );
    let (code, stderr) = terminate(agent);
    assert_eq!(code, Some(0), "{stderr}");
    let merged = node.merged();
    let oracle = node.oracle();
    assert_eq!(
        rows(&merged),
        rows(&oracle),
        "seed {seed}: the killed agent's reports, merged"
    );
    assert_eq!(merged["records"], oracle["records"], "seed {seed}");
    // The usage counters (docs/AGENT.md, "Metrics") count every set once, however often a set
    // was closed again after a kill.
    assert_eq!(
        super::prometheus::checkpoint_usage(&node),
        super::prometheus::report_usage(&node),
        "seed {seed}: the checkpoint's usage totals (left) are the reports' (right)"
    );
    assert!(
        merged["loss"].as_array().is_none_or(|l| l.is_empty()),
        "seed {seed}: {}",
        merged["loss"]
    );
    r.wait_idle();
    assert!(
        r.violations().is_empty(),
        "seed {seed}: {:?}",
        r.violations()
    );
    assert_eq!(received(&r), expected_events(&node), "seed {seed}");
}

#[test]
fn fifty_sigkills_at_random_instants_change_nothing() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64);
    killed_run(seed, 50, &[]);
}

#[test]
fn a_crash_between_any_two_durable_steps_changes_nothing() {
    // Each named instant, twice, on the first agents of the run; random kills after.
    let points = [
        "pending-saved:1",
        "report-written:1",
        "events-stored:1",
        "checkpoint-temp:2",
        "request-acknowledged:1",
        "retire-saved:1",
        "pending-saved:3",
        "report-written:2",
        "events-stored:2",
        "checkpoint-temp:5",
        "request-acknowledged:3",
        "retire-saved:2",
    ];
    killed_run(99, points.len(), &points);
}
