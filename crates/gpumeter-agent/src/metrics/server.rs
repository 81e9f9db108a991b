//! The metrics endpoint (docs/AGENT.md, "Metrics"): a small bounded HTTP/1.1 server on
//! `std::net::TcpListener`, with request heads read by `httparse`.
//!
//! - `GET /metrics`: the exposition, in the Prometheus text format (version 0.0.4) unless the
//!   `Accept` header prefers `application/openmetrics-text` ([`Format::from_accept`]).
//! - `GET /healthz`: 200 while the process serves requests.
//! - `GET /readyz`: 200 when [`Readiness::check`] passes, else 503 with the reason (plain
//!   text).
//! - `HEAD` of these: the same status and headers, no body; any other method on them: 405
//!   with `Allow: GET, HEAD`; any other path: 404.
//!
//! Bounded by [`Limits`], so that whoever reaches the port cannot use up the agent's threads,
//! file descriptors or the endpoint itself: one accept thread hands each connection to a fixed
//! pool of workers through a bounded queue; a connection that finds the queue full is answered
//! 503 at once and closed. A worker reads one request head (at most `max_head_bytes`, within
//! `read_timeout` in all: a client that sends nothing or trickles is closed), writes the answer
//! (within `write_timeout`) with `Connection: close`, and closes. An accept error (EMFILE,
//! ENFILE, ECONNABORTED, ...) is logged at most once a minute and the loop goes on after a
//! short sleep: it never ends but by [`MetricsServer::stop`]. Should a thread end anyway (a
//! bug), [`MetricsServer::is_alive`] says so and the agent's loop starts a new server
//! (`crate::run`).

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::{Format, Metrics};
use crate::AgentConfig;

#[cfg(test)]
mod tests;

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

/// The bounds of a [`MetricsServer`] (docs/AGENT.md, "Metrics").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Worker threads answering requests (at least 1): at most this many connections are read
    /// or answered at once.
    pub workers: usize,
    /// Accepted connections waiting for a worker; one more is answered 503 and closed.
    pub queue: usize,
    /// The longest time a client has to send its whole request head.
    pub read_timeout: Duration,
    /// The longest time a client has to take the answer (each write).
    pub write_timeout: Duration,
    /// The largest request head (request line and headers), bytes; a larger one is answered
    /// 431.
    pub max_head_bytes: usize,
}

impl Default for Limits {
    /// 4 workers, a queue of 16, 5 s to send the head and 5 s per write, 16 KiB of head.
    fn default() -> Limits {
        Limits {
            workers: 4,
            queue: 16,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
            max_head_bytes: 16 * 1024,
        }
    }
}

/// How long the accept loop sleeps after an accept error (the fds may come back).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// How often an accept error is logged at most (the others are counted in the next line).
const LOG_EVERY: Duration = Duration::from_secs(60);

/// How often a waiting worker looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(200);

/// The most headers a request may have (more: 431).
const MAX_HEADERS: usize = 64;

/// The threads of a server and what they share.
#[derive(Debug)]
struct Threads {
    accept: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// A running metrics endpoint (docs/AGENT.md, "Metrics"); stopped by [`MetricsServer::stop`] or
/// when dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Threads running: the accept thread and the workers.
    running: Arc<AtomicUsize>,
    expected: usize,
    threads: Threads,
}

/// Counts a thread as running until it ends, however it ends (a panic included).
struct Running(Arc<AtomicUsize>);

impl Running {
    fn new(count: &Arc<AtomicUsize>) -> Running {
        count.fetch_add(1, Ordering::SeqCst);
        Running(Arc::clone(count))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a worker needs to answer.
struct Context {
    metrics: Arc<Metrics>,
    ready: Readiness,
    limits: Limits,
    stop: Arc<AtomicBool>,
}

impl MetricsServer {
    /// [`MetricsServer::start_with`] the default [`Limits`].
    ///
    /// # Errors
    /// As [`MetricsServer::start_with`].
    pub fn start(
        listen: SocketAddr,
        metrics: Arc<Metrics>,
        readiness: Readiness,
    ) -> std::io::Result<MetricsServer> {
        MetricsServer::start_with(listen, metrics, readiness, Limits::default())
    }

    /// Binds `listen` and answers requests on threads of its own, within `limits`, until
    /// stopped. Logs `metrics listening` with the bound address (`addr`: port 0 becomes the
    /// port given).
    ///
    /// # Errors
    /// The address cannot be bound (in use, not local, not permitted), or a thread cannot be
    /// started.
    pub fn start_with(
        listen: SocketAddr,
        metrics: Arc<Metrics>,
        readiness: Readiness,
        limits: Limits,
    ) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(listen)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let running = Arc::new(AtomicUsize::new(0));
        let workers = limits.workers.max(1);
        let mut server = MetricsServer {
            addr,
            stop: Arc::clone(&stop),
            running: Arc::clone(&running),
            expected: workers + 1,
            threads: Threads {
                accept: None,
                workers: Vec::new(),
            },
        };
        let (tx, rx) = mpsc::sync_channel::<TcpStream>(limits.queue);
        let rx = Arc::new(Mutex::new(rx));
        let context = Arc::new(Context {
            metrics,
            ready: readiness,
            limits,
            stop: Arc::clone(&stop),
        });
        for i in 0..workers {
            let (rx, context, alive) = (
                Arc::clone(&rx),
                Arc::clone(&context),
                Running::new(&running),
            );
            let t = std::thread::Builder::new()
                .name(format!("metrics-{i}"))
                .spawn(move || {
                    let _alive = alive;
                    work(&rx, &context);
                })?;
            server.threads.workers.push(t);
        }
        let alive = Running::new(&running);
        let t = std::thread::Builder::new()
            .name("metrics-accept".to_string())
            .spawn(move || {
                let _alive = alive;
                accept_loop(&listener, &tx, &stop);
            })?;
        server.threads.accept = Some(t);
        tracing::info!(addr = %addr, workers, queue = limits.queue, "metrics listening");
        Ok(server)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the accept thread and every worker still run (they end only when stopped; a
    /// server that is not alive cannot answer `/healthz`, and should be replaced).
    pub fn is_alive(&self) -> bool {
        self.running.load(Ordering::SeqCst) == self.expected
    }

    /// Ends the threads as a bug would, without waiting for them: tests of what notices.
    #[cfg(test)]
    pub(crate) fn end_threads(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&wake_address(self.addr), Duration::from_secs(1));
    }

    /// Stops answering and waits for the threads (a request being answered is finished;
    /// connections still queued are closed unanswered).
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accept) = self.threads.accept.take() {
            // The accept thread waits in accept(): a connection of our own wakes it. If none
            // can be made (no fd left), it is left to end at its next connection, holding the
            // port until then.
            if TcpStream::connect_timeout(&wake_address(self.addr), Duration::from_secs(1)).is_ok()
                || accept.is_finished()
            {
                let _ = accept.join();
            } else {
                tracing::warn!(addr = %self.addr, "metrics endpoint: cannot wake the accept thread; it ends at its next connection");
            }
        }
        // The workers see `stop` within STOP_POLL (or the queue's sender dropped).
        for t in self.threads.workers.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Where a connection reaches a listener on `addr` (a wildcard address: the loopback one).
fn wake_address(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Logs one kind of event at most once per [`LOG_EVERY`], counting the ones left unsaid.
#[derive(Debug, Default)]
struct RateLimited {
    last: Option<Instant>,
    unsaid: u64,
}

impl RateLimited {
    /// Whether to log now, and how many were not logged since the last time.
    fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.unsaid += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unsaid))
    }
}

/// The accept thread: hands each connection to the workers, answers 503 when their queue is
/// full, and goes on after any accept error, until `stop`.
fn accept_loop(listener: &TcpListener, tx: &SyncSender<TcpStream>, stop: &AtomicBool) {
    let (mut errors, mut busy) = (RateLimited::default(), RateLimited::default());
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match tx.try_send(stream) {
                    Ok(()) => {}
                    Err(TrySendError::Full(stream)) => {
                        if let Some(unsaid) = busy.due() {
                            tracing::warn!(peer = %peer, more = unsaid, "metrics endpoint busy: a connection was answered 503 (every worker busy, the queue full)");
                        }
                        refuse_busy(stream);
                    }
                    Err(TrySendError::Disconnected(_)) => break,
                }
            }
            Err(e) => {
                if let Some(unsaid) = errors.due() {
                    tracing::warn!(error = %e, more = unsaid, "metrics endpoint: cannot accept a connection (out of file descriptors?); going on");
                }
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// Answers 503 to a connection no worker can take, without waiting on it.
fn refuse_busy(stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let body = "busy: try again\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: {TEXT}\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = (&stream).write(head.as_bytes());
    let _ = stream.shutdown(Shutdown::Both);
}

/// A worker: answers the connections of the queue until `stop` is set (closing those left) or
/// the accept thread ends.
fn work(rx: &Mutex<Receiver<TcpStream>>, context: &Context) {
    while !context.stop.load(Ordering::SeqCst) {
        let next = rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv_timeout(STOP_POLL);
        let stream = match next {
            Ok(stream) => stream,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if context.stop.load(Ordering::SeqCst) {
            return;
        }
        // A bug answering one request must not take the worker with it.
        let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            serve_connection(stream, context);
        }));
        if answered.is_err() {
            tracing::error!(
                "metrics endpoint: a request handler panicked; the connection was closed"
            );
        }
    }
}

/// What went wrong reading a request head.
#[derive(Debug, PartialEq, Eq)]
enum HeadError {
    /// The client closed, or said nothing within the read timeout: closed unanswered.
    Gone,
    /// Larger than allowed, or too many headers: 431.
    TooLarge,
    /// Not HTTP: 400.
    Malformed,
}

/// A request head: method, path (without the query), `Accept`.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    method: String,
    path: String,
    accept: Option<String>,
}

/// Reads one request head from `stream` within `limits` (the read timeout is for the whole
/// head, not each read: a client trickling bytes is cut off too).
fn read_head(stream: &mut TcpStream, limits: &Limits) -> Result<Head, HeadError> {
    let deadline = Instant::now() + limits.read_timeout;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    // Never more than `max_head_bytes` are read.
    while buf.len() < limits.max_head_bytes {
        let room = (limits.max_head_bytes - buf.len()).min(chunk.len());
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(HeadError::Gone)?;
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| HeadError::Gone)?;
        let n = match stream.read(&mut chunk[..room]) {
            Ok(0) | Err(_) => return Err(HeadError::Gone),
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = parse_head(&buf)? {
            return Ok(head);
        }
    }
    Err(HeadError::TooLarge)
}

/// The head in `buf` if complete (`None`: more bytes are needed).
fn parse_head(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    }
    let target = request.path.unwrap_or("");
    let path = target.split('?').next().unwrap_or("").to_string();
    let accept = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("accept"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned());
    Ok(Some(Head {
        method: request.method.unwrap_or("").to_string(),
        path,
        accept,
    }))
}

/// An answer: status, Content-Type, body, and whether to list the methods (405).
struct Answer {
    status: u16,
    content_type: &'static str,
    body: String,
    allow: bool,
}

impl Answer {
    fn text(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            content_type: TEXT,
            body: body.into(),
            allow: false,
        }
    }
}

/// Reads one request from `stream`, answers it, and closes.
fn serve_connection(mut stream: TcpStream, context: &Context) {
    let limits = &context.limits;
    let _ = stream.set_write_timeout(Some(limits.write_timeout));
    let (answer, head_only) = match read_head(&mut stream, limits) {
        Ok(head) => (route(&head, context), head.method == "HEAD"),
        Err(HeadError::Gone) => return,
        Err(HeadError::TooLarge) => (Answer::text(431, "request head too large\n"), false),
        Err(HeadError::Malformed) => (Answer::text(400, "bad request\n"), false),
    };
    let _ = write_answer(&mut stream, &answer, head_only);
    let _ = stream.shutdown(Shutdown::Write);
}

/// The answer to `head` (module docs).
fn route(head: &Head, context: &Context) -> Answer {
    let known = matches!(head.path.as_str(), "/metrics" | "/healthz" | "/readyz");
    if !known {
        return Answer::text(404, "not found: GET /metrics, /healthz or /readyz\n");
    }
    if head.method != "GET" && head.method != "HEAD" {
        return Answer {
            allow: true,
            ..Answer::text(405, "method not allowed: GET or HEAD\n")
        };
    }
    let metrics = &context.metrics;
    match head.path.as_str() {
        "/metrics" => {
            let format = Format::from_accept(head.accept.as_deref());
            Answer {
                content_type: format.content_type(),
                ..Answer::text(200, metrics.encode(format))
            }
        }
        "/healthz" => Answer::text(200, "ok\n"),
        _ => match context.ready.check(metrics) {
            Ok(()) => Answer::text(200, "ready\n"),
            Err(reason) => Answer::text(503, format!("not ready: {reason}\n")),
        },
    }
}

fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Writes `answer` (without its body for `HEAD`, `Content-Length` still the body's).
fn write_answer(stream: &mut TcpStream, answer: &Answer, head_only: bool) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        answer.status,
        reason_phrase(answer.status),
        answer.content_type,
        answer.body.len()
    );
    if answer.allow {
        out.push_str("Allow: GET, HEAD\r\n");
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(&answer.body);
    }
    stream.write_all(out.as_bytes())?;
    stream.flush()
}
