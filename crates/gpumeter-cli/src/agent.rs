//! `gpumeter agent --config FILE [--once | --check]`: the node agent (docs/AGENT.md).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use gpumeter_agent::config::{LogFormat, SinkConfig};
use gpumeter_agent::AgentConfig;

use crate::Failure;

/// The agent's arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct AgentArgs {
    /// The agent's configuration (TOML; docs/AGENT.md, examples/agent.toml).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Process the spool as it stands: every recording is taken as finished, every window is
    /// closed and delivered, finished recordings are retired; then exit.
    #[arg(long)]
    once: bool,
    /// Check the configuration and the files it names (tenant map, events mappings, tokens),
    /// print what it sets up, and exit: 0 when usable, 1 with FILE:LINE:COLUMN at the first
    /// fault.
    #[arg(long, conflicts_with = "once")]
    check: bool,
}

fn failure(code: u8, message: String) -> Failure {
    Failure { code, message }
}

/// Runs `gpumeter agent`.
pub(crate) fn run(args: AgentArgs, quiet: bool) -> Result<String, Failure> {
    let config = AgentConfig::from_path(&args.config).map_err(|e| failure(1, e.to_string()))?;
    if args.check {
        return check(&config);
    }
    init_logs(config.log, quiet);
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| failure(1, format!("cannot handle signal {signal}: {e}")))?;
    }
    let summary =
        gpumeter_agent::run(config, args.once, stop).map_err(|e| failure(1, e.to_string()))?;
    Ok(format!(
        "{} window sets closed, {} recordings retired, {} records late",
        summary.sets_closed, summary.retired, summary.late
    ))
}

/// `--check`: the configuration and every file it names, read as the agent would.
fn check(config: &AgentConfig) -> Result<String, Failure> {
    config
        .check_files()
        .map_err(|e| failure(1, e.to_string()))?;
    let mut lines = vec![
        format!("{}: ok", config.file.display()),
        format!("spool: {}", config.spool.display()),
        format!("state: {}", config.state_dir.display()),
        format!(
            "windows: {} s, horizon {} ns, grace {} ns",
            config.window.seconds(),
            config.horizon_ns,
            config.grace_ns
        ),
    ];
    for s in &config.sinks {
        lines.push(match s {
            SinkConfig::Reports { dir } => format!("sink reports: {}", dir.display()),
            SinkConfig::Events(e) => format!(
                "sink events `{}`: {} to {} (outbox limit {} bytes)",
                e.name,
                e.format.event_format().as_str(),
                e.url,
                e.outbox_limit_bytes
            ),
        });
    }
    lines.push(match config.metrics.listen {
        Some(addr) => format!(
            "metrics: http://{addr}/metrics, /healthz, /readyz (at most {} tenants)",
            config.metrics.max_tenants
        ),
        None => "metrics: off (no [metrics] table)".to_string(),
    });
    lines.push(if config.nvml.processes {
        format!(
            "nvml: GPU processes listed every {} ms, unmetered ones reported",
            config.nvml.interval.as_millis()
        )
    } else {
        "nvml: off".to_string()
    });
    Ok(crate::text_out(&lines.join("\n")))
}

/// Logs on standard error, as text or JSON lines; `--quiet`: warnings and errors only.
fn init_logs(format: LogFormat, quiet: bool) {
    let level = if quiet {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
