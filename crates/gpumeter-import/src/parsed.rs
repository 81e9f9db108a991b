//! A file parsed and validated, not yet given to a meter ([`Parsed`]): what every importer
//! produces, with its record-level faults summarized for the report ([`Faults`]).

use std::collections::BTreeMap;
use std::path::Path;

use gpumeter_core::{ActivityRecord, DeviceInfo, DeviceSlot, LossReason, Warning};

use crate::error::ImportError;

/// A file parsed and validated, not yet given to a meter. Device slots in `records` and
/// `losses` are indices into `devices`.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) records: Vec<ActivityRecord>,
    pub(crate) losses: Vec<(DeviceSlot, LossReason)>,
    /// Records lost whose device the file does not tell.
    pub(crate) source_losses: Vec<LossReason>,
    pub(crate) skipped: BTreeMap<String, u64>,
    pub(crate) warnings: Vec<Warning>,
    /// Record-level faults (`invalid_field`), for one warning per field.
    pub(crate) faults: Faults,
}

impl Parsed {
    /// Books a record lost to a field that cannot be represented (loss `invalid_field`):
    /// on its device when the file tells it, else on the source; `fault` (a
    /// [`ImportError::BadField`]) names the record and field in the report's warnings.
    pub(crate) fn invalid(&mut self, device: Option<DeviceSlot>, fault: &ImportError) {
        match device {
            Some(d) => self.losses.push((d, LossReason::InvalidField)),
            None => self.source_losses.push(LossReason::InvalidField),
        }
        self.faults.note(fault);
    }
}

/// Record-level faults of one file, summarized for the report's warnings: per field, how many
/// records were lost and the first one's full message (file, record, field, value, why).
#[derive(Debug, Default)]
pub(crate) struct Faults {
    by_field: BTreeMap<String, (u64, String)>,
}

impl Faults {
    /// Notes one lost record. The message names the file by its name only (reports are
    /// the same wherever the file lies).
    pub(crate) fn note(&mut self, fault: &ImportError) {
        let (field, text) = match fault {
            ImportError::BadField {
                path,
                record,
                field,
                value,
                reason,
            } => (
                (*field).to_string(),
                format!(
                    "{}: {record}: field `{field}` = `{value}`: {reason}",
                    file_name(path)
                ),
            ),
            other => (String::new(), other.to_string()),
        };
        let e = self.by_field.entry(field).or_insert_with(|| (0, text));
        e.0 += 1;
    }

    /// One warning per field, in field order.
    pub(crate) fn warnings(&self) -> Vec<Warning> {
        self.by_field
            .values()
            .map(|(n, first)| gpumeter_core::invalid_field_warning(first, *n))
            .collect()
    }
}

/// The file name of `path` (no directories), as sources are named in reports.
pub(crate) fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}
