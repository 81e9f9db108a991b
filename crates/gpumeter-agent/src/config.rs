//! `agent.toml`: what the agent watches, how it closes windows, where it ships them.
//!
//! ```toml
//! spool = "/var/lib/gpumeter/spool"      # where the injection library writes (GPUMETER_OUT)
//! state_dir = "/var/lib/gpumeter/agent"  # checkpoint and outboxes
//! window = "1h"                          # window size: divides one day (15m, 1h, 1d)
//! horizon = "60s"                        # reordering horizon of a recording's records
//! grace = "30s"                          # a torn tail / a quiet file of a gone process
//! poll = "1s"                            # how often the spool is read again
//! finished = "move"                      # move (to <spool>/done/) | delete | compress
//! log = "text"                           # text | json (JSON lines on standard error)
//!
//! [tenant]
//! rule = ["{GPUMETER_TENANT}", "{POD_NAMESPACE}"]   # first whose labels are all set
//! map = "tenants.toml"                               # optional, as `usage --tenant-map`
//!
//! [[sink]]
//! kind = "reports"
//! dir = "/var/lib/gpumeter/reports"
//!
//! [[sink]]
//! kind = "events"
//! name = "openmeter"
//! format = "cloudevents"                 # cloudevents | stripe | lago
//! url = "https://openmeter.example/api/v1/events"
//! mapping = "events.toml"
//! token_env = "OPENMETER_TOKEN"          # or token_file = "/etc/gpumeter/token"
//! outbox_limit_bytes = 268435456
//!
//! [metrics]                              # optional: no table, no server
//! listen = "127.0.0.1:9464"              # /metrics, /healthz, /readyz
//! max_tenants = 1000                     # more tenants are folded into tenant="other"
//!
//! [nvml]
//! processes = true                       # list GPU processes, report unmetered ones
//! interval = "10s"                       # how often
//! ```
//!
//! Relative paths are taken from the configuration file's folder. Every error names the file,
//! the line and the column of the value at fault ([`ConfigError`]).

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpumeter_core::WindowSize;
use serde::Deserialize;
use toml::Spanned;

use crate::tenant::TenantRule;

/// A configuration that cannot be used: the file, the place (1-based line and column, in
/// characters) and what is wrong. Displayed as `FILE:LINE:COLUMN: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}:{column}: {message}", file.display())]
pub struct ConfigError {
    /// The configuration file.
    pub file: PathBuf,
    /// 1-based line (0 when the file could not be read).
    pub line: usize,
    /// 1-based column, in characters (0 when the file could not be read).
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// What the agent does with a recording once it is finished and every sink has acknowledged
/// its windows (`finished`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Finished {
    /// Moved to `<spool>/done/`.
    Move,
    /// Deleted.
    Delete,
    /// Compressed to `<spool>/done/<name>.gz` (gzip), the original deleted.
    Compress,
}

/// How log lines are written on standard error (`log`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The event format of an events sink (`format`), as `gpumeter usage --events` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkFormat {
    /// CloudEvents 1.0 batches (OpenMeter's `/api/v1/events`).
    CloudEvents,
    /// Stripe meter events.
    Stripe,
    /// Lago events.
    Lago,
}

impl SinkFormat {
    /// The facade's event format.
    pub fn event_format(self) -> gpumeter::events::EventFormat {
        match self {
            SinkFormat::CloudEvents => gpumeter::events::EventFormat::CloudEvents,
            SinkFormat::Stripe => gpumeter::events::EventFormat::Stripe,
            SinkFormat::Lago => gpumeter::events::EventFormat::Lago,
        }
    }
}

/// A sink: where closed window sets go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkConfig {
    /// One `gpumeter.usage/v1` report file per closed window set in `dir`.
    Reports {
        /// The folder (created when missing).
        dir: PathBuf,
    },
    /// Usage events over HTTP through a durable outbox.
    Events(EventsSinkConfig),
}

/// An events sink (`kind = "events"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsSinkConfig {
    /// The sink's name: its outbox is `<state_dir>/outbox/<name>` (default: the format's name).
    pub name: String,
    /// The event format.
    pub format: SinkFormat,
    /// Where batches are POSTed.
    pub url: String,
    /// The events mapping file (`gpumeter usage --events-map`), if any.
    pub mapping: Option<PathBuf>,
    /// A file holding the bearer token (trailing white space removed).
    pub token_file: Option<PathBuf>,
    /// An environment variable holding the bearer token.
    pub token_env: Option<String>,
    /// The most bytes the outbox holds; a batch that would pass it is refused loudly and
    /// stored later (default 256 MiB).
    pub outbox_limit_bytes: u64,
    /// Connect and request timeout (default 10 s).
    pub timeout: Duration,
    /// First back-off after a failure (default 1 s).
    pub retry_initial: Duration,
    /// Longest back-off (default 5 min).
    pub retry_max: Duration,
}

/// `[nvml]`: the host's GPU compute processes, listed through NVML to find those that hold a
/// GPU with no recording in the spool (`crate::unmetered`, docs/AGENT.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlConfig {
    /// `processes`: whether to list them (default `false`). Needs an agent built with the
    /// `nvml` feature (the `gpumeter` CLI is): otherwise [`AgentConfig::check_files`] and
    /// `Agent::open` refuse the configuration ([`crate::AgentError::NvmlNotBuilt`]).
    pub processes: bool,
    /// `interval`: how often they are listed (default 10 s; over 0).
    pub interval: Duration,
}

impl Default for NvmlConfig {
    fn default() -> Self {
        NvmlConfig {
            processes: false,
            interval: Duration::from_secs(10),
        }
    }
}

/// A read, checked `agent.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// The file it was read from.
    pub file: PathBuf,
    /// The spool directory the injection library writes recordings to.
    pub spool: PathBuf,
    /// The agent's own state: the checkpoint and the outboxes.
    pub state_dir: PathBuf,
    /// Window size.
    pub window: WindowSize,
    /// Reordering horizon, ns: how far out of start order a recording's records may come.
    pub horizon_ns: u64,
    /// Grace, ns: how long a torn tail is "not yet written", and how long a recording whose
    /// process is gone must be quiet before it is finished.
    pub grace_ns: u64,
    /// How often the spool is read again (also when file events come).
    pub poll: Duration,
    /// What happens to a finished, fully shipped recording.
    pub finished: Finished,
    /// Log format.
    pub log: LogFormat,
    /// The tenant rule.
    pub tenant: TenantRule,
    /// A tenant map (external ids and process ids), applied before the rule.
    pub tenant_map: Option<PathBuf>,
    /// The sinks, in file order.
    pub sinks: Vec<SinkConfig>,
    /// `[nvml]`: GPU processes listed through NVML.
    pub nvml: NvmlConfig,
    /// The metrics endpoint and its cardinality cap (`[metrics]`).
    pub metrics: MetricsConfig,
}

/// The default cap on distinct `tenant` label values of `gpumeter_usage_total`.
pub const DEFAULT_MAX_TENANTS: usize = 1000;

/// `[metrics]`: where `/metrics`, `/healthz` and `/readyz` are served, and the cap on tenant
/// label values (docs/AGENT.md, "Metrics").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// The address the HTTP server binds (`listen`, an IP address and a port; port 0: any
    /// free port, logged as `metrics listening addr=…`); `None` without a `[metrics]` table:
    /// no server (the usage totals are still kept in the checkpoint).
    pub listen: Option<std::net::SocketAddr>,
    /// At most this many distinct tenants get a `tenant` label value of their own; the usage
    /// of later ones goes to `tenant="other"` (default [`DEFAULT_MAX_TENANTS`]).
    pub max_tenants: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: None,
            max_tenants: DEFAULT_MAX_TENANTS,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    spool: Spanned<String>,
    state_dir: Spanned<String>,
    window: Option<Spanned<String>>,
    horizon: Option<Spanned<String>>,
    grace: Option<Spanned<String>>,
    poll: Option<Spanned<String>>,
    finished: Option<Finished>,
    log: Option<LogFormat>,
    tenant: Option<RawTenant>,
    #[serde(default)]
    sink: Vec<Spanned<RawSink>>,
    metrics: Option<Spanned<RawMetrics>>,
    nvml: Option<RawNvml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<Spanned<String>>,
    max_tenants: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNvml {
    processes: Option<bool>,
    interval: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    rule: Option<Spanned<Rules>>,
    map: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Rules {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSink {
    kind: Spanned<String>,
    dir: Option<String>,
    name: Option<String>,
    format: Option<SinkFormat>,
    url: Option<Spanned<String>>,
    mapping: Option<String>,
    token_file: Option<String>,
    token_env: Option<String>,
    outbox_limit_bytes: Option<Spanned<u64>>,
    timeout: Option<Spanned<String>>,
    retry_initial: Option<Spanned<String>>,
    retry_max: Option<Spanned<String>>,
}

/// The default outbox limit: 256 MiB.
pub const DEFAULT_OUTBOX_LIMIT_BYTES: u64 = 256 << 20;

impl AgentConfig {
    /// Reads and checks `path`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the line and column of the first fault: TOML syntax, an unknown
    /// key, a missing key (`spool`, `state_dir`; a sink's `kind`, a reports sink's `dir`, an
    /// events sink's `format` and `url`), a duration that does not parse, a window that does
    /// not divide one day, a tenant rule that is not a template of known labels, an events
    /// sink with both or neither token source missing is allowed (no auth) but not both.
    pub fn from_path(path: &Path) -> Result<AgentConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            message: format!("cannot read: {e}"),
        })?;
        AgentConfig::from_toml_str(path, &text)
    }

    /// Parses and checks the text of `file` (relative paths are taken from `file`'s folder).
    ///
    /// # Errors
    /// As [`AgentConfig::from_path`].
    pub fn from_toml_str(file: &Path, text: &str) -> Result<AgentConfig, ConfigError> {
        let at = |span: Option<Range<usize>>, message: String| {
            let (line, column) = line_column(text, span.map_or(0, |s| s.start));
            ConfigError {
                file: file.to_path_buf(),
                line,
                column,
                message,
            }
        };
        let raw: Raw = toml::from_str(text).map_err(|e| at(e.span(), e.message().to_string()))?;
        let base = file.parent().unwrap_or(Path::new("")).to_path_buf();
        let rel = |p: &str| base.join(p);
        let duration = |v: &Option<Spanned<String>>, default: &str| -> Result<u64, ConfigError> {
            let (text, span) = match v {
                Some(s) => (s.get_ref().as_str(), Some(s.span())),
                None => (default, None),
            };
            parse_duration_ns(text).map_err(|m| at(span, m))
        };
        let window = match &raw.window {
            Some(w) => WindowSize::parse(w.get_ref()).map_err(|m| at(Some(w.span()), m))?,
            None => WindowSize::HOUR,
        };
        let poll_ns = duration(&raw.poll, "1s")?;
        if poll_ns == 0 {
            return Err(at(
                raw.poll.as_ref().map(Spanned::span),
                "poll must be over 0 s".into(),
            ));
        }
        let tenant = match raw.tenant.as_ref().and_then(|t| t.rule.as_ref()) {
            Some(r) => {
                let list = match r.get_ref() {
                    Rules::One(s) => vec![s.clone()],
                    Rules::Many(v) => v.clone(),
                };
                TenantRule::parse(&list).map_err(|m| at(Some(r.span()), m))?
            }
            None => TenantRule::default(),
        };
        let nvml = nvml(raw.nvml.as_ref(), &at)?;
        let mut sinks = Vec::new();
        for s in &raw.sink {
            sinks.push(sink(s, &at, &rel, &duration)?);
        }
        let mut names = std::collections::BTreeSet::new();
        for (s, raw_sink) in sinks.iter().zip(&raw.sink) {
            if let SinkConfig::Events(e) = s {
                if !names.insert(e.name.clone()) {
                    return Err(at(
                        Some(raw_sink.span()),
                        format!(
                            "two events sinks are named `{}`: each needs its own outbox (set \
                             `name`)",
                            e.name
                        ),
                    ));
                }
            }
        }
        Ok(AgentConfig {
            file: file.to_path_buf(),
            spool: rel(raw.spool.get_ref()),
            state_dir: rel(raw.state_dir.get_ref()),
            window,
            horizon_ns: duration(&raw.horizon, "60s")?,
            grace_ns: duration(&raw.grace, "30s")?,
            poll: Duration::from_nanos(poll_ns),
            finished: raw.finished.unwrap_or(Finished::Move),
            log: raw.log.unwrap_or(LogFormat::Text),
            tenant,
            tenant_map: raw.tenant.as_ref().and_then(|t| t.map.as_deref()).map(rel),
            sinks,
            metrics: metrics(raw.metrics.as_ref(), &at)?,
            nvml,
        })
    }
}

impl AgentConfig {
    /// Reads every file the configuration names, as the agent will: the tenant map, each
    /// events sink's mapping and bearer token (`gpumeter agent --check`); then checks that
    /// this build has what the configuration asks for (`[nvml] processes`: the `nvml`
    /// feature).
    ///
    /// # Errors
    /// [`crate::AgentError::TenantMap`] or [`crate::AgentError::Sink`], with the file's own
    /// message (a mapping's `FILE:LINE:COLUMN`); [`crate::AgentError::NvmlNotBuilt`] for
    /// `[nvml] processes = true` in an agent built without the `nvml` feature.
    pub fn check_files(&self) -> Result<(), crate::AgentError> {
        self.check_named_files()?;
        self.check_build()
    }

    /// [`crate::AgentError::NvmlNotBuilt`] when `[nvml] processes = true` and this agent was
    /// built without the `nvml` feature; else `Ok`.
    ///
    /// # Errors
    /// As said.
    pub fn check_build(&self) -> Result<(), crate::AgentError> {
        if self.nvml.processes && !cfg!(feature = "nvml") {
            return Err(crate::AgentError::NvmlNotBuilt {
                file: self.file.clone(),
            });
        }
        Ok(())
    }

    fn check_named_files(&self) -> Result<(), crate::AgentError> {
        if let Some(p) = &self.tenant_map {
            use gpumeter::TenantMapFile as _;
            gpumeter_core::TenantMap::from_path(p)
                .map_err(|e| crate::AgentError::TenantMap(e.to_string()))?;
        }
        for s in &self.sinks {
            if let SinkConfig::Events(e) = s {
                e.event_map()?;
                e.sender()?;
            }
        }
        Ok(())
    }
}

impl EventsSinkConfig {
    fn fail(&self, reason: String) -> crate::AgentError {
        crate::AgentError::Sink {
            sink: self.name.clone(),
            reason,
        }
    }

    /// The events mapping, read.
    ///
    /// # Errors
    /// [`crate::AgentError::Sink`] with the mapping's error.
    pub fn event_map(&self) -> Result<Option<gpumeter::events::EventMap>, crate::AgentError> {
        self.mapping
            .as_deref()
            .map(gpumeter::events::EventMap::from_path)
            .transpose()
            .map_err(|e| self.fail(e.to_string()))
    }

    /// The sender's configuration: URL, format, token source, timeouts and back-off.
    pub fn sender_config(&self) -> crate::http::SenderConfig {
        let mut c = crate::http::SenderConfig::new(self.url.clone(), self.format.event_format());
        c.token = match (&self.token_file, &self.token_env) {
            (Some(p), _) => crate::http::TokenSource::File(p.clone()),
            (None, Some(v)) => crate::http::TokenSource::Env(v.clone()),
            (None, None) => crate::http::TokenSource::None,
        };
        c.connect_timeout = self.timeout;
        c.request_timeout = self.timeout;
        c.retry_initial = self.retry_initial;
        c.retry_max = self.retry_max;
        c
    }

    /// A sender for this sink: reads the bearer token now.
    ///
    /// # Errors
    /// [`crate::AgentError::Sink`] when the token cannot be read or the URL or back-off is
    /// refused.
    pub fn sender(&self) -> Result<crate::http::Sender, crate::AgentError> {
        crate::http::Sender::new(self.sender_config()).map_err(|e| self.fail(e.to_string()))
    }
}

fn sink(
    s: &Spanned<RawSink>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
    rel: &impl Fn(&str) -> PathBuf,
    duration: &impl Fn(&Option<Spanned<String>>, &str) -> Result<u64, ConfigError>,
) -> Result<SinkConfig, ConfigError> {
    let r = s.get_ref();
    let missing = |key: &str| at(Some(s.span()), format!("this sink has no `{key}`"));
    match r.kind.get_ref().as_str() {
        "reports" => {
            let dir = r.dir.as_deref().ok_or_else(|| missing("dir"))?;
            Ok(SinkConfig::Reports { dir: rel(dir) })
        }
        "events" => {
            let format = r.format.ok_or_else(|| missing("format"))?;
            let url = r.url.as_ref().ok_or_else(|| missing("url"))?;
            let u = url.get_ref();
            if !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(at(
                    Some(url.span()),
                    format!("url `{u}` is not an http:// or https:// URL"),
                ));
            }
            if r.token_file.is_some() && r.token_env.is_some() {
                return Err(at(
                    Some(s.span()),
                    "set one of `token_file` and `token_env`, not both".into(),
                ));
            }
            let limit = r
                .outbox_limit_bytes
                .as_ref()
                .map_or(DEFAULT_OUTBOX_LIMIT_BYTES, |l| *l.get_ref());
            if limit == 0 {
                let span = r.outbox_limit_bytes.as_ref().map(Spanned::span);
                return Err(at(span, "outbox_limit_bytes must be over 0".into()));
            }
            let name = r.name.clone().unwrap_or_else(|| match format {
                SinkFormat::CloudEvents => "cloudevents".into(),
                SinkFormat::Stripe => "stripe".into(),
                SinkFormat::Lago => "lago".into(),
            });
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(at(
                    Some(s.span()),
                    format!("sink name `{name}`: letters, digits, `-` and `_` only"),
                ));
            }
            Ok(SinkConfig::Events(EventsSinkConfig {
                name,
                format,
                url: u.clone(),
                mapping: r.mapping.as_deref().map(rel),
                token_file: r.token_file.as_deref().map(rel),
                token_env: r.token_env.clone(),
                outbox_limit_bytes: limit,
                timeout: Duration::from_nanos(duration(&r.timeout, "10s")?),
                retry_initial: Duration::from_nanos(duration(&r.retry_initial, "1s")?),
                retry_max: Duration::from_nanos(duration(&r.retry_max, "5m")?),
            }))
        }
        other => Err(at(
            Some(r.kind.span()),
            format!("sink kind `{other}`: expected `reports` or `events`"),
        )),
    }
}

/// The `[metrics]` table: `listen` is required in it, an IP address and a port.
fn metrics(
    raw: Option<&Spanned<RawMetrics>>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<MetricsConfig, ConfigError> {
    let Some(m) = raw else {
        return Ok(MetricsConfig::default());
    };
    let listen = m
        .get_ref()
        .listen
        .as_ref()
        .ok_or_else(|| at(Some(m.span()), "[metrics] has no `listen`".into()))?;
    let addr = listen.get_ref().parse().map_err(|_| {
        at(
            Some(listen.span()),
            format!(
                "listen `{}` is not an IP address and port (e.g. 127.0.0.1:9464, [::]:9464; port \
                 0: any free port)",
                listen.get_ref()
            ),
        )
    })?;
    Ok(MetricsConfig {
        listen: Some(addr),
        max_tenants: m.get_ref().max_tenants.unwrap_or(DEFAULT_MAX_TENANTS),
    })
}

/// `[nvml]`, checked: `interval` a duration over 0.
fn nvml(
    raw: Option<&RawNvml>,
    at: &impl Fn(Option<Range<usize>>, String) -> ConfigError,
) -> Result<NvmlConfig, ConfigError> {
    let mut out = NvmlConfig::default();
    let Some(raw) = raw else {
        return Ok(out);
    };
    out.processes = raw.processes.unwrap_or(out.processes);
    if let Some(i) = &raw.interval {
        let ns = parse_duration_ns(i.get_ref()).map_err(|m| at(Some(i.span()), m))?;
        if ns == 0 {
            return Err(at(
                Some(i.span()),
                "[nvml] interval must be over 0 s".into(),
            ));
        }
        out.interval = Duration::from_nanos(ns);
    }
    Ok(out)
}

/// A duration such as `60s`, `500ms`, `1h` (humantime's forms), in ns.
///
/// # Errors
/// A message naming the text.
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(text.trim())
        .map_err(|e| format!("duration `{text}`: {e} (e.g. 500ms, 60s, 5m, 1h)"))?;
    u64::try_from(d.as_nanos()).map_err(|_| format!("duration `{text}` is past 2^64 ns"))
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

#[cfg(test)]
mod tests;
