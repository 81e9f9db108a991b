//! The metrics endpoint (docs/AGENT.md, "Metrics"): `tiny_http` on threads of its own.
//!
//! - `GET /metrics`: the exposition, in the Prometheus text format (version 0.0.4) unless the
//!   `Accept` header asks for `application/openmetrics-text` ([`Format::from_accept`]).
//! - `GET /healthz`: 200 while the process serves requests.
//! - `GET /readyz`: 200 when [`Readiness::check`] passes, else 503 with the reason (plain
//!   text).
//! - anything else: 404.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use super::{Format, Metrics};
use crate::AgentConfig;

/// Threads answering requests: a slow client holds one up, not the endpoint.
const WORKERS: usize = 2;

/// How often a waiting worker looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);

/// The shortest step age after which the agent is not ready (docs/AGENT.md, "Metrics").
pub const MIN_STEP_AGE: Duration = Duration::from_secs(30);

const TEXT: &str = "text/plain; charset=utf-8";

/// What `/readyz` checks: the spool folder can be listed, the state folder takes a new file
/// (a probe file created and removed), and a step finished without error within
/// `max_step_age` (max(3 × `poll`, 30 s) for a configuration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The spool folder.
    pub spool: PathBuf,
    /// The state folder (checkpoint, outboxes).
    pub state_dir: PathBuf,
    /// The longest time since the last step that finished without error.
    pub max_step_age: Duration,
}

/// Probe files of concurrent checks get names of their own.
static PROBE: AtomicU64 = AtomicU64::new(0);

impl Readiness {
    /// The checks for `config`: its spool and state folder, max(3 × `poll`, 30 s).
    pub fn for_config(config: &AgentConfig) -> Readiness {
        Readiness {
            spool: config.spool.clone(),
            state_dir: config.state_dir.clone(),
            max_step_age: (config.poll.saturating_mul(3)).max(MIN_STEP_AGE),
        }
    }

    /// Whether the agent is ready.
    ///
    /// # Errors
    /// The first check that fails, as a sentence for the `/readyz` body.
    pub fn check(&self, metrics: &Metrics) -> Result<(), String> {
        std::fs::read_dir(&self.spool)
            .map_err(|e| format!("the spool {} cannot be read: {e}", self.spool.display()))?;
        let n = PROBE.fetch_add(1, Ordering::Relaxed);
        let probe = self
            .state_dir
            .join(format!(".readyz-{}-{n}.probe", std::process::id()));
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| {
                format!(
                    "the state folder {} cannot be written: {e}",
                    self.state_dir.display()
                )
            })?;
        let Some(last) = metrics.last_step() else {
            return Err("no step has finished yet".to_string());
        };
        let age = SystemTime::now().duration_since(last).unwrap_or_default();
        if age > self.max_step_age {
            return Err(format!(
                "the last step that finished without error was {:.1} s ago (more than {} s)",
                age.as_secs_f64(),
                self.max_step_age.as_secs_f64()
            ));
        }
        Ok(())
    }
}

/// A running metrics endpoint; stopped by [`MetricsServer::stop`] or when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl MetricsServer {
    /// Binds `listen` and answers requests on threads of their own until stopped. Logs
    /// `metrics listening` with the bound address (`addr`: port 0 becomes the port given).
    ///
    /// # Errors
    /// The address cannot be bound (in use, not local, not permitted), or a thread cannot be
    /// started.
    pub fn start(
        listen: SocketAddr,
        metrics: Arc<Metrics>,
        readiness: Readiness,
    ) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let server = tiny_http::Server::from_listener(listener, None)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let server = Arc::new(server);
        let stop = Arc::new(AtomicBool::new(false));
        let readiness = Arc::new(readiness);
        let mut workers = Vec::new();
        for i in 0..WORKERS {
            let (server, halt) = (Arc::clone(&server), Arc::clone(&stop));
            let (metrics, readiness) = (Arc::clone(&metrics), Arc::clone(&readiness));
            let spawned = std::thread::Builder::new()
                .name(format!("metrics-{i}"))
                .spawn(move || serve(&server, &halt, &metrics, &readiness));
            match spawned {
                Ok(t) => workers.push(t),
                Err(e) => {
                    stop.store(true, Ordering::SeqCst);
                    for t in workers {
                        let _ = t.join();
                    }
                    return Err(e);
                }
            }
        }
        tracing::info!(addr = %addr, "metrics listening");
        Ok(MetricsServer {
            addr,
            stop,
            workers,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops answering and waits for the threads (a request being answered is finished).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.workers.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A worker: answers requests until `stop` is set (the last worker to leave drops the server,
/// which closes the listening socket).
fn serve(server: &tiny_http::Server, stop: &AtomicBool, metrics: &Metrics, ready: &Readiness) {
    while !stop.load(Ordering::SeqCst) {
        match server.recv_timeout(STOP_POLL) {
            Ok(Some(request)) => answer(request, metrics, ready),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "metrics endpoint: cannot accept a request");
                std::thread::sleep(STOP_POLL);
            }
        }
    }
}

/// Answers one request (a client gone before the answer is not an error of ours).
fn answer(request: tiny_http::Request, metrics: &Metrics, ready: &Readiness) {
    let path = request.url().split('?').next().unwrap_or("");
    let get = *request.method() == tiny_http::Method::Get;
    let (status, content_type, body) = match (get, path) {
        (true, "/metrics") => {
            let accept = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Accept"))
                .map(|h| h.value.as_str());
            let format = Format::from_accept(accept);
            (200, format.content_type(), metrics.encode(format))
        }
        (true, "/healthz") => (200, TEXT, "ok\n".to_string()),
        (true, "/readyz") => match ready.check(metrics) {
            Ok(()) => (200, TEXT, "ready\n".to_string()),
            Err(reason) => (503, TEXT, format!("not ready: {reason}\n")),
        },
        _ => (
            404,
            TEXT,
            "not found: GET /metrics, /healthz or /readyz\n".to_string(),
        ),
    };
    let mut response = tiny_http::Response::from_string(body).with_status_code(status);
    if let Ok(h) = tiny_http::Header::from_bytes("Content-Type", content_type) {
        response = response.with_header(h);
    }
    let _ = request.respond(response);
}
