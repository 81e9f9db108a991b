//! # gpumeter-agent
//!
//! The node agent (`gpumeter agent --config agent.toml`): the one owner of a node's metering.
//! It tails the spool directory where the injection library writes `.gmr` recordings, meters
//! them together, closes a window when every recording that could still add to it has passed
//! the window's end plus the reordering horizon (or finished), and ships each closed window set
//! to its sinks: usage reports (files) and usage events over HTTP through a durable outbox.
//! Its checkpoint is written atomically after each closed window set, so a restart after a
//! SIGKILL reaches the same reports and events as an uninterrupted run.
//!
//! The window-closing rule and its proof, the outbox and what a restart does:
//! `docs/AGENT.md` in the repository. Where this crate sits in the flow from sources to the
//! bank: `docs/ARCHITECTURE.md`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod agent;
pub mod cgroup;
pub mod close;
pub mod config;
pub mod crash;
pub mod hostproc;
pub mod http;
pub mod metrics;
pub mod outbox;
mod proc_files;
mod run;
pub mod sinks;
pub mod spool;
pub mod state;
pub mod tenant;
pub mod unmetered;

pub use agent::{Agent, StepOutcome};
pub use config::{AgentConfig, ConfigError};
pub use run::{run, RunSummary};
pub use unmetered::UnmeteredProcess;

/// Why the agent cannot go on (each names the file or sink at fault).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file or folder of the agent's.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or folder.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// Another agent holds the state folder's lock (`<state_dir>/lock`): two agents on one
    /// state folder would overwrite each other's checkpoint and close overlapping window sets.
    #[error("{}: another agent runs on this state folder (it holds this lock): one agent per state folder and spool", path.display())]
    Locked {
        /// The lock file.
        path: std::path::PathBuf,
    },
    /// The checkpoint is missing but this node already handed window sets over (`path` is
    /// one of them): started afresh, the agent would close their windows again.
    #[error("{}: this node handed window sets over, but its checkpoint is missing: started afresh the agent would report their windows again; restore <state_dir>/checkpoint.json, or move this node's reports and the outbox away first", path.display())]
    LostCheckpoint {
        /// A report file or outbox batch of this node.
        path: std::path::PathBuf,
    },
    /// The checkpoint.
    #[error(transparent)]
    State(#[from] state::StateError),
    /// The tenant map.
    #[error("tenant map: {0}")]
    TenantMap(String),
    /// A window set that cannot be metered.
    #[error("closing a window set: {0}")]
    Close(#[from] close::CloseError),
    /// A report or event that cannot be encoded.
    #[error("encoding: {0}")]
    Encode(String),
    /// The metrics endpoint's address cannot be bound (`[metrics] listen`).
    #[error("metrics endpoint {addr}: {error}")]
    Metrics {
        /// The address.
        addr: std::net::SocketAddr,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// `[nvml] processes = true` in an agent built without the `nvml` feature: it cannot
    /// list GPU processes (the `gpumeter` CLI has the feature).
    #[error("{}: [nvml] processes = true, but this agent was built without NVML (the `nvml` feature of gpumeter-agent; the gpumeter CLI has it): use such a build, or set processes = false", file.display())]
    NvmlNotBuilt {
        /// The configuration file.
        file: std::path::PathBuf,
    },
    /// An events sink.
    #[error("events sink `{sink}`: {reason}")]
    Sink {
        /// The sink's name.
        sink: String,
        /// What went wrong.
        reason: String,
    },
}
