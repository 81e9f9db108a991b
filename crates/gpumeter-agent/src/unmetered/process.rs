//! A GPU process found unmetered, as the agent keeps it (in the checkpoint) and reports it
//! (a warning `unmetered_process`): docs/AGENT.md, "Unmetered processes".

use std::time::{Duration, UNIX_EPOCH};

use gpumeter_core::{DigestError, UsageReport, Warning, WarningCode};
use serde::{Deserialize, Serialize};

/// A GPU process found unmetered: it held a GPU with no recording in the spool for longer than
/// the grace period ([module docs](super)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmeteredProcess {
    /// The GPU's NVML index (PCI bus order; not necessarily the CUDA ordinal).
    pub device_index: u32,
    /// The GPU's UUID (`GPU-…`), when NVML gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_uuid: Option<String>,
    /// The process id on the host (NVML's).
    pub pid: u32,
    /// The pid the process sees for itself, when it runs in a pid namespace of its own (a
    /// container): the innermost of `/proc/<pid>/status`'s `NSpid:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_pid: Option<u32>,
    /// When it was first listed on the GPU, ns since the Unix epoch (wall clock).
    pub first_seen_ns: u64,
    /// When it was last listed on the GPU, ns since the Unix epoch (wall clock); in a report,
    /// the last listing before its window set was made.
    pub last_seen_ns: u64,
    /// The most GPU memory it was listed with on this GPU, bytes; `None` when NVML never said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_memory_bytes: Option<u64>,
}

/// `ns` since the Unix epoch as RFC 3339 in UTC, to the millisecond (`…T…Z`).
pub(super) fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

impl UnmeteredProcess {
    /// The `device` label of `gpumeter_agent_unmetered_processes` (docs/AGENT.md, "Metrics"):
    /// the GPU's UUID (`GPU-…`, the spelling the reports' device keys use), else
    /// `nvml-<index>`.
    pub fn device_label(&self) -> String {
        self.device_uuid
            .clone()
            .unwrap_or_else(|| format!("nvml-{}", self.device_index))
    }

    /// The warning's message: `GPU process 4242 (pid 7 in its pid namespace) held GPU 0
    /// (GPU-…) with no recording in the spool: first seen <RFC 3339>, last seen <RFC 3339>,
    /// used memory 1048576 bytes at most; its GPU work is not metered (started without the
    /// injection library?)`. The parenthesis after the pid is left out when the process runs
    /// in the host's pid namespace; the UUID reads `UUID unknown` and the memory `used memory
    /// unknown` when NVML did not give them.
    pub fn message(&self) -> String {
        let ns = self
            .namespace_pid
            .map_or_else(String::new, |p| format!(" (pid {p} in its pid namespace)"));
        let uuid = self.device_uuid.as_deref().unwrap_or("UUID unknown");
        let memory = self.used_memory_bytes.map_or_else(
            || "used memory unknown".to_string(),
            |b| format!("used memory {b} bytes at most"),
        );
        format!(
            "GPU process {}{ns} held GPU {} ({uuid}) with no recording in the spool: first \
             seen {}, last seen {}, {memory}; its GPU work is not metered (started without \
             the injection library?)",
            self.pid,
            self.device_index,
            rfc3339(self.first_seen_ns),
            rfc3339(self.last_seen_ns),
        )
    }

    /// The report's warning: [`WarningCode::UnmeteredProcess`] with [`Self::message`].
    pub fn warning(&self) -> Warning {
        Warning::new(WarningCode::UnmeteredProcess, self.message())
    }
}

/// Adds a warning for each of `found` to `report` and seals it again (its `sha256`).
///
/// # Errors
/// [`DigestError`] when the report cannot be sealed.
pub fn add_to_report(
    report: &mut UsageReport,
    found: &[UnmeteredProcess],
) -> Result<(), DigestError> {
    if found.is_empty() {
        return Ok(());
    }
    report
        .warnings
        .extend(found.iter().map(UnmeteredProcess::warning));
    report.seal()
}
