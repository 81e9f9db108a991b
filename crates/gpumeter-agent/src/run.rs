//! The agent's loop: a step whenever the spool changes (inotify through `notify`) or the poll
//! period passes, until the stop flag is set (SIGTERM, SIGINT) or, with `once`, until every
//! window is closed and delivered.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher as _;

use crate::{Agent, AgentConfig, AgentError};

/// How long the loop lets a burst of spool changes settle before a step.
const SETTLE: Duration = Duration::from_millis(20);

/// What a run did, for its last log line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Steps taken.
    pub steps: u64,
    /// Window sets closed.
    pub sets_closed: u64,
    /// Recordings retired.
    pub retired: u64,
    /// Records counted as loss `late`.
    pub late: u64,
}

/// Runs the agent of `config` until `stop` is set, or, with `once`, until the spool as it
/// stands is closed, shipped and retired. A step in progress when `stop` is set is finished
/// (its set handed over and checkpointed) before the run returns.
///
/// The spool is watched with inotify where the system offers it; else, and always as a
/// backstop, it is read every `poll`.
///
/// # Errors
/// [`AgentError`] of [`Agent::open`], or, with `once`, of a step that fails (the checkpoint
/// then still holds the last set handed over, and a restart goes on from there). Without
/// `once`, a failed step is logged and tried again after the poll period.
pub fn run(
    config: AgentConfig,
    once: bool,
    stop: Arc<AtomicBool>,
) -> Result<RunSummary, AgentError> {
    let poll = config.poll;
    let spool = config.spool.clone();
    let mut agent = Agent::open(config)?;
    let mut metrics_server = serve_metrics(&agent)?;
    let senders = agent.sinks().start_senders(Arc::clone(&stop));
    let (tx, rx) = mpsc::channel::<()>();
    let _watcher = watch(&spool, tx);
    tracing::info!(spool = %spool.display(), "agent started");
    let mut summary = RunSummary::default();
    let result = (|| {
        while !stop.load(Ordering::SeqCst) {
            keep_serving(&agent, &mut metrics_server)?;
            let out = match agent.step(once) {
                Ok(out) => out,
                // A service keeps going: the checkpoint holds the last set handed over, and
                // the next step does what this one could not (a full disk, a remounted
                // volume). `--once` reports the error and exits 1.
                Err(e) if !once => {
                    agent.metrics().step_failed();
                    tracing::error!(error = %e, "the step failed; trying again after the poll period");
                    std::thread::sleep(poll);
                    continue;
                }
                Err(e) => return Err(e),
            };
            summary.steps += 1;
            summary.sets_closed += out.sets_closed;
            summary.retired += out.retired;
            summary.late += out.late;
            if once && agent.sinks().all_acknowledged()? && agent.is_idle() {
                break;
            }
            // Wait for a change in the spool, the poll period, or the stop flag; then let a
            // burst of changes (a recording's frames) settle into one step.
            let _ = rx.recv_timeout(if once {
                Duration::from_millis(50)
            } else {
                poll
            });
            std::thread::sleep(SETTLE.min(poll));
            while rx.try_recv().is_ok() {}
        }
        Ok(summary.clone())
    })();
    stop.store(true, Ordering::SeqCst);
    agent.sinks().wake_senders();
    for s in senders {
        let _ = s.join();
    }
    if let Some(server) = metrics_server {
        server.stop();
    }
    tracing::info!(
        steps = summary.steps,
        sets = summary.sets_closed,
        retired = summary.retired,
        late = summary.late,
        "agent stopped"
    );
    result
}

/// Starts the metrics endpoint when the configuration has `[metrics]` (docs/AGENT.md,
/// "Metrics").
///
/// # Errors
/// [`AgentError::Metrics`] when its address cannot be bound.
fn serve_metrics(agent: &Agent) -> Result<Option<crate::metrics::MetricsServer>, AgentError> {
    let Some(addr) = agent.config().metrics.listen else {
        return Ok(None);
    };
    let readiness = crate::metrics::Readiness::for_config(agent.config());
    crate::metrics::MetricsServer::start(addr, Arc::clone(agent.metrics()), readiness)
        .map(Some)
        .map_err(|error| AgentError::Metrics { addr, error })
}

/// Replaces a metrics server whose threads ended (they end only when stopped; should one end
/// anyway, `/healthz` would not answer while the agent runs on). A new server in the same
/// process keeps the agent's state and its counters since the start, where exiting for the
/// supervisor to restart the agent would reset them and re-read the spool; when the address
/// cannot be bound again, the agent exits 1 and the supervisor (systemd's `Restart=`, the
/// DaemonSet) restarts it (docs/AGENT.md, "Metrics").
///
/// # Errors
/// [`AgentError::Metrics`] when the new server cannot bind the address.
fn keep_serving(
    agent: &Agent,
    server: &mut Option<crate::metrics::MetricsServer>,
) -> Result<(), AgentError> {
    if server.as_ref().is_none_or(|s| s.is_alive()) {
        return Ok(());
    }
    tracing::error!("the metrics endpoint stopped answering: starting it again");
    // The old one first: its listening socket holds the port.
    if let Some(old) = server.take() {
        old.stop();
    }
    *server = serve_metrics(agent)?;
    Ok(())
}

/// Watches `dir` for changes: each event sends `()` on `tx`. `None` (the loop polls) when the
/// system has no watcher for it.
fn watch(dir: &std::path::Path, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    // Only changes wake the loop: the agent's own reads of the spool are access events.
    let handler = move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(());
        }
    };
    match notify::recommended_watcher(handler) {
        Ok(mut w) => match w.watch(dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => Some(w),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch the spool: polling it");
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "no file watcher: polling the spool");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_metrics_server_whose_threads_ended_is_started_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["spool", "state", "reports"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("dir");
        }
        let text = "spool = \"spool\"\nstate_dir = \"state\"\n\n[[sink]]\nkind = \"reports\"\n\
                    dir = \"reports\"\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n";
        let config =
            AgentConfig::from_toml_str(&dir.path().join("agent.toml"), text).expect("config");
        let agent = Agent::open(config).expect("agent");
        let mut server = serve_metrics(&agent).expect("serve");
        let first = server.as_ref().expect("a server").addr();
        keep_serving(&agent, &mut server).expect("alive");
        assert_eq!(server.as_ref().expect("a server").addr(), first);

        server.as_ref().expect("a server").end_threads();
        let t0 = std::time::Instant::now();
        while server.as_ref().expect("a server").is_alive() {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the threads did not end"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        keep_serving(&agent, &mut server).expect("started again");
        let s = server.as_ref().expect("a new server");
        assert!(s.is_alive());
        let mut c = std::net::TcpStream::connect(s.addr()).expect("connect");
        use std::io::{Read as _, Write as _};
        c.write_all(b"GET /healthz HTTP/1.1\r\n\r\n")
            .expect("write");
        let mut answer = String::new();
        c.read_to_string(&mut answer).expect("read");
        assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    }
}
