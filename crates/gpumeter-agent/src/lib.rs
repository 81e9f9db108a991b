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

pub mod close;
pub mod config;
pub mod http;
pub mod outbox;
pub mod spool;
pub mod state;
pub mod tenant;
