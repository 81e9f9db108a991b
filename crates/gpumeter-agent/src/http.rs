//! Usage events over HTTP: the sender that drains an events sink's outbox (docs/AGENT.md, "The
//! outbox").
//!
//! A [`Sender`] sends the pending batches of one [`Outbox`] in id order, each batch's requests
//! in order, every request's body exactly as stored. A 2xx acknowledges a request; a transport
//! error, a timeout, a dropped connection, a 408, a 429 or a 5xx (anything but a 2xx or a
//! permanent refusal) is retried after an exponential back-off with full jitter (a 429's or
//! 503's `Retry-After` in seconds is honoured); any other 4xx is a permanent refusal: the
//! request is not sent again, and its batch goes to `rejected/` once its other requests are
//! sent, logged at error level.

mod backoff;

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gpumeter::events::EventFormat;

pub use backoff::Backoff;

use crate::outbox::{Outbox, OutboxError, Progress, Rejection, Request};

/// The most bytes of a response body kept for logs and `rejected/<id>.reason`.
const RESPONSE_EXCERPT_BYTES: u64 = 4096;

/// From this many failed tries in a row, a failed try is logged as an error, not a warning.
pub const ESCALATE_AFTER: u32 = 5;

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How long [`Sender::run`] sleeps with nothing pending before looking again (a stored batch
/// wakes it sooner).
pub const IDLE_POLL: Duration = Duration::from_secs(60);

/// Where the bearer token comes from. It is read once, by [`Sender::new`]; surrounding white
/// space (a file's final newline) is removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// No `Authorization` header.
    None,
    /// The contents of a file (`token_file`).
    File(PathBuf),
    /// The value of an environment variable (`token_env`).
    Env(String),
}

/// What a [`Sender`] needs: one events sink's endpoint, auth, timeouts and back-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderConfig {
    /// The full URL batches are posted to (`http://` or `https://`): OpenMeter's
    /// `…/api/v1/events`, Stripe's `…/v1/billing/meter_events`, Lago's `…/api/v1/events/batch`.
    pub url: String,
    /// The events' format; a pending batch of another format is rejected.
    pub format: EventFormat,
    /// The bearer token.
    pub token: TokenSource,
    /// The most time to open a connection (TCP and TLS).
    pub connect_timeout: Duration,
    /// The most time for one whole request, response included.
    pub request_timeout: Duration,
    /// The shortest wait before a retry.
    pub retry_initial: Duration,
    /// The longest wait before a retry.
    pub retry_max: Duration,
}

impl SenderConfig {
    /// A configuration with no token, 10 s to connect, 30 s per request, and retries after 1 s
    /// doubling up to 5 min.
    pub fn new(url: impl Into<String>, format: EventFormat) -> SenderConfig {
        SenderConfig {
            url: url.into(),
            format,
            token: TokenSource::None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            retry_initial: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
        }
    }
}

/// What can stop a [`Sender`] from starting or sending.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// The token file cannot be read.
    #[error("events sink {url}: cannot read the token file {}: {source}", path.display())]
    TokenFile {
        /// The sink's URL.
        url: String,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The token's environment variable is not set (or not UTF-8).
    #[error("events sink {url}: the token's environment variable `{name}` is not set")]
    TokenEnv {
        /// The sink's URL.
        url: String,
        /// The variable.
        name: String,
    },
    /// The token is empty.
    #[error("events sink {url}: the token from {origin} is empty")]
    TokenEmpty {
        /// The sink's URL.
        url: String,
        /// `file PATH` or `environment variable NAME`.
        origin: String,
    },
    /// The URL is not an `http://` or `https://` URL.
    #[error("events sink: `{url}` is not a usable URL: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// An `https://` URL and no trusted root certificate on the system.
    #[error(
        "events sink {url}: no trusted root certificate could be loaded from the system: {reason}"
    )]
    NoRoots {
        /// The sink's URL.
        url: String,
        /// The loader's errors.
        reason: String,
    },
    /// Retry delays out of order.
    #[error("events sink {url}: retry_initial ({initial:?}) must be above zero and at most retry_max ({max:?})")]
    Retry {
        /// The sink's URL.
        url: String,
        /// `retry_initial`.
        initial: Duration,
        /// `retry_max`.
        max: Duration,
    },
    /// The outbox failed.
    #[error(transparent)]
    Outbox(#[from] OutboxError),
}

/// What one [`Sender::deliver`] pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Batches acknowledged whole.
    pub batches: usize,
    /// Requests acknowledged.
    pub requests: usize,
    /// Batches moved to `rejected/`.
    pub rejected_batches: usize,
    /// When the pass stopped at a failure to retry: the wait before the next try.
    pub retry_in: Option<Duration>,
    /// Whether the pass stopped because the stop flag was set.
    pub stopped: bool,
}

/// The sender of one events sink. Runs in a thread of its own ([`run`](Self::run)), or a pass
/// at a time ([`deliver`](Self::deliver)).
pub struct Sender {
    config: SenderConfig,
    agent: ureq::Agent,
    authorization: Option<String>,
    backoff: Backoff,
    /// Where failed requests are counted (`gpumeter_agent_send_failures_total`), if anywhere.
    failures: Option<crate::metrics::SendFailures>,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Sender")
            .field("config", &self.config)
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

/// The outcome of one request.
enum Outcome {
    Acknowledged,
    Retry {
        reason: String,
        retry_after: Option<Duration>,
    },
    Refused(Rejection),
}

impl Sender {
    /// A sender for `config`: checks the URL and the retry delays, reads the token, and, for
    /// `https://`, loads the system's trusted root certificates (rustls, ring).
    ///
    /// # Errors
    /// [`HttpError::Url`], [`HttpError::Retry`], [`HttpError::TokenFile`],
    /// [`HttpError::TokenEnv`], [`HttpError::TokenEmpty`], [`HttpError::NoRoots`].
    pub fn new(config: SenderConfig) -> Result<Sender, HttpError> {
        let url = url::Url::parse(&config.url).map_err(|e| HttpError::Url {
            url: config.url.clone(),
            reason: e.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
            return Err(HttpError::Url {
                url: config.url.clone(),
                reason: "an http:// or https:// URL with a host is needed".to_string(),
            });
        }
        if config.retry_initial.is_zero() || config.retry_initial > config.retry_max {
            return Err(HttpError::Retry {
                url: config.url.clone(),
                initial: config.retry_initial,
                max: config.retry_max,
            });
        }
        let authorization = read_token(&config)?.map(|t| format!("Bearer {t}"));
        let agent = build_agent(&config, url.scheme() == "https")?;
        let backoff = Backoff::new(config.retry_initial, config.retry_max);
        Ok(Sender {
            config,
            agent,
            authorization,
            backoff,
            failures: None,
        })
    }

    /// Counts every request in `failures`: acknowledged, or not, by HTTP status or transport
    /// failure ([`failure_status`]).
    pub fn count_failures(&mut self, failures: crate::metrics::SendFailures) {
        self.failures = Some(failures);
    }

    fn count_failure(&self, status: &str) {
        if let Some(f) = &self.failures {
            f.record(status);
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SenderConfig {
        &self.config
    }

    /// Sends `outbox`'s pending batches in order until it is empty, a request fails to be
    /// retried (`retry_in`: the back-off's next wait), or `stop` is set (checked between
    /// requests). Each acknowledged batch is marked delivered; a batch with a refused request
    /// goes to `rejected/` (logged at error level) once its other requests are sent.
    ///
    /// # Errors
    /// [`HttpError::Outbox`] when the outbox cannot be read or written.
    pub fn deliver(&mut self, outbox: &Outbox, stop: &AtomicBool) -> Result<Delivered, HttpError> {
        let mut done = Delivered::default();
        for id in outbox.pending() {
            if !self.deliver_batch(outbox, &id, stop, &mut done)? {
                break;
            }
        }
        Ok(done)
    }

    /// Sends what is left of pending batch `id`, counting in `done`; `false` when the pass
    /// stops here (a failure to retry, or `stop`).
    fn deliver_batch(
        &mut self,
        outbox: &Outbox,
        id: &str,
        stop: &AtomicBool,
        done: &mut Delivered,
    ) -> Result<bool, HttpError> {
        let (batch, mut progress) = match outbox.load(id) {
            Ok(loaded) => loaded,
            Err(OutboxError::Corrupt { path, reason }) => {
                let why = format!(
                    "the stored batch {} cannot be read: {reason}",
                    path.display()
                );
                outbox.reject(id, &why)?;
                done.rejected_batches += 1;
                return Ok(true);
            }
            Err(e) => return Err(e.into()),
        };
        if batch.format() != self.config.format {
            let why = format!(
                "a {} batch in the outbox of a {} sink",
                batch.format(),
                self.config.format
            );
            outbox.reject(id, &why)?;
            done.rejected_batches += 1;
            return Ok(true);
        }
        let requests = batch.requests();
        while progress.next < requests.len() {
            if stop.load(Ordering::SeqCst) {
                done.stopped = true;
                return Ok(false);
            }
            match self.send(&requests[progress.next]) {
                Outcome::Acknowledged => {
                    crate::crash::point("request-acknowledged");
                    if let Some(f) = &self.failures {
                        f.acknowledged();
                    }
                    done.requests += 1;
                }
                Outcome::Refused(mut r) => {
                    r.request = progress.next;
                    tracing::error!(url = %self.config.url, batch = %id, request = r.request, status = r.status, response = %r.response, "events REFUSED by the receiver; they will not be sent again");
                    progress.rejected.push(r);
                }
                Outcome::Retry {
                    reason,
                    retry_after,
                } => {
                    let wait = retry_after.unwrap_or_else(|| self.backoff.next_delay());
                    self.log_retry(outbox, id, progress.next, wait, &reason);
                    done.retry_in = Some(wait);
                    return Ok(false);
                }
            }
            self.backoff.reset();
            progress.next += 1;
            if progress.next < requests.len() {
                outbox.record_progress(id, &progress)?;
            }
        }
        if progress.rejected.is_empty() {
            outbox.mark_delivered(id)?;
            done.batches += 1;
        } else {
            outbox.reject(id, &rejection_reason(&self.config.url, requests, &progress))?;
            done.rejected_batches += 1;
        }
        Ok(true)
    }

    /// Logs a failed try: a warning, an error from the [`ESCALATE_AFTER`]th failure in a row.
    fn log_retry(&self, outbox: &Outbox, id: &str, request: usize, wait: Duration, reason: &str) {
        let failures = self.backoff.failures();
        let (batches, bytes, limit) =
            (outbox.pending_count(), outbox.bytes(), outbox.limit_bytes());
        if failures >= ESCALATE_AFTER {
            tracing::error!(url = %self.config.url, batch = %id, request, failures, retry_in = ?wait, pending_batches = batches, pending_bytes = bytes, limit_bytes = limit, "events sink UNREACHABLE, retrying: {reason}");
        } else {
            tracing::warn!(url = %self.config.url, batch = %id, request, failures, retry_in = ?wait, pending_batches = batches, pending_bytes = bytes, limit_bytes = limit, "events not delivered, retrying: {reason}");
        }
    }

    /// Delivers until `stop` is set: a [`deliver`](Self::deliver) pass, then a wait — the
    /// back-off's after a failure, else until a batch is stored (at most [`IDLE_POLL`]) — and
    /// again. An outbox error is logged and retried after the back-off. Set `stop`, then call
    /// [`Outbox::wake`], to end it; it returns after the request in flight, if any.
    pub fn run(&mut self, outbox: &Outbox, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            let seen = outbox.generation();
            let wait = match self.deliver(outbox, stop) {
                Ok(d) => d.retry_in,
                Err(e) => {
                    let wait = self.backoff.next_delay();
                    tracing::error!(url = %self.config.url, retry_in = ?wait, "events sender: {e}");
                    Some(wait)
                }
            };
            match wait {
                // A back-off runs its course whatever is stored meanwhile.
                Some(wait) => {
                    let deadline = std::time::Instant::now() + wait;
                    let mut seen = seen;
                    while !stop.load(Ordering::SeqCst) {
                        let left = deadline.saturating_duration_since(std::time::Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        seen = outbox.wait_for_change(seen, left, stop);
                    }
                }
                None => {
                    if outbox.is_empty() {
                        outbox.wait_for_change(seen, IDLE_POLL, stop);
                    }
                }
            }
        }
    }

    /// Sends one request and classifies the answer.
    fn send(&self, request: &Request) -> Outcome {
        let mut call = self
            .agent
            .post(&self.config.url)
            .header("Content-Type", &request.content_type);
        if let Some(auth) = &self.authorization {
            call = call.header("Authorization", auth);
        }
        let mut response = match call.send(request.body.as_bytes()) {
            Ok(r) => r,
            Err(e) => {
                self.count_failure(failure_status(&e));
                return Outcome::Retry {
                    reason: e.to_string(),
                    retry_after: None,
                };
            }
        };
        let status = response.status().as_u16();
        if !(200..=299).contains(&status) {
            self.count_failure(&status.to_string());
        }
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
        let mut excerpt = Vec::new();
        // A body that breaks off changes nothing: the status line is the answer.
        let _ = response
            .body_mut()
            .as_reader()
            .take(RESPONSE_EXCERPT_BYTES)
            .read_to_end(&mut excerpt);
        let text = String::from_utf8_lossy(&excerpt).into_owned();
        match status {
            200..=299 => Outcome::Acknowledged,
            400..=499 if status != 408 && status != 429 => Outcome::Refused(Rejection {
                request: 0,
                status,
                response: text,
            }),
            _ => Outcome::Retry {
                reason: format!("HTTP {status}: {text}"),
                // Retry-After as a number of seconds (an HTTP date is ignored: the back-off).
                retry_after: if matches!(status, 429 | 503) {
                    retry_after
                } else {
                    None
                },
            },
        }
    }
}

/// The `status` label of a request that got no HTTP answer: `timeout`, `connect` (refused,
/// reset, unreachable), `dns` (host not found), `tls`, `io` (another I/O error), `protocol`
/// (a malformed answer), or `other`.
pub fn failure_status(e: &ureq::Error) -> &'static str {
    use std::io::ErrorKind;
    match e {
        ureq::Error::Timeout(_) => "timeout",
        ureq::Error::ConnectionFailed => "connect",
        ureq::Error::HostNotFound => "dns",
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::Pem(_) => "tls",
        ureq::Error::Protocol(_) => "protocol",
        ureq::Error::Io(io) => match io.kind() {
            ErrorKind::TimedOut => "timeout",
            ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable => "connect",
            _ => "io",
        },
        _ => "other",
    }
}

/// The `rejected/<id>.reason` text of a batch with refused requests.
fn rejection_reason(url: &str, requests: &[Request], progress: &Progress) -> String {
    let mut out = format!(
        "{url} refused {} of the batch's {} requests (the others were acknowledged)\n",
        progress.rejected.len(),
        requests.len()
    );
    for r in &progress.rejected {
        let ids = requests
            .get(r.request)
            .map(|q| q.ids.join(" "))
            .unwrap_or_default();
        out.push_str(&format!(
            "request {}: HTTP {}; events: {ids}; response: {}\n",
            r.request, r.status, r.response
        ));
    }
    out
}

/// The token of `config`, read now.
fn read_token(config: &SenderConfig) -> Result<Option<String>, HttpError> {
    let url = || config.url.clone();
    let (token, origin) = match &config.token {
        TokenSource::None => return Ok(None),
        TokenSource::File(path) => (
            std::fs::read_to_string(path).map_err(|source| HttpError::TokenFile {
                url: url(),
                path: path.clone(),
                source,
            })?,
            format!("file {}", path.display()),
        ),
        TokenSource::Env(name) => (
            std::env::var(name).map_err(|_| HttpError::TokenEnv {
                url: url(),
                name: name.clone(),
            })?,
            format!("environment variable {name}"),
        ),
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(HttpError::TokenEmpty { url: url(), origin });
    }
    Ok(Some(token.to_string()))
}

/// The HTTP agent: timeouts, statuses as answers (not errors), no redirects, rustls with ring
/// and the system's roots.
fn build_agent(config: &SenderConfig, https: bool) -> Result<ureq::Agent, HttpError> {
    let mut tls = ureq::tls::TlsConfig::builder()
        .provider(ureq::tls::TlsProvider::Rustls)
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
    if https {
        let loaded = rustls_native_certs::load_native_certs();
        if loaded.certs.is_empty() {
            let reason = loaded
                .errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            return Err(HttpError::NoRoots {
                url: config.url.clone(),
                reason: if reason.is_empty() {
                    "none found".to_string()
                } else {
                    reason
                },
            });
        }
        let roots: Vec<ureq::tls::Certificate<'static>> = loaded
            .certs
            .iter()
            .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&roots));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(config.connect_timeout))
        .timeout_global(Some(config.request_timeout))
        .user_agent(concat!("gpumeter-agent/", env!("CARGO_PKG_VERSION")))
        .tls_config(tls.build())
        .build()
        .into();
    Ok(agent)
}
