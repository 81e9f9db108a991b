//! Usage reports as inputs: reading one (plain or gzip) and checking it as every reader
//! does, and merging several that node agents wrote.

use std::path::{Path, PathBuf};

use gpumeter_core::{merge_reports, UsageReport};

use crate::detect::{looks_like, GZIP_MAGIC};
use crate::Error;

/// Reads one `gpumeter.usage/v1` report from a file, plain or gzip-compressed, and checks it
/// as every reader does ([`check_usage_report`]).
///
/// # Errors
/// [`Error::Report`] naming the file when it cannot be read, decompressed or is not a usage
/// report (serde's message gives line and column); [`Error::NotAReport`] when its bytes are
/// another input format (a `.gmr`, an Nsight export, a Kineto trace); [`Error::Check`] when
/// it fails the checks.
pub fn read_usage_report(path: &Path) -> Result<UsageReport, Error> {
    let report = read_unchecked(path)?;
    check_usage_report(&report, &report_name(path))?;
    Ok(report)
}

/// Reads a report as [`read_usage_report`] does, without the checks (for a reader that makes
/// them itself: [`merge_reports`]).
fn read_unchecked(path: &Path) -> Result<UsageReport, Error> {
    let bytes = std::fs::read(path).map_err(|e| Error::Report {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })?;
    parse_unchecked(&bytes, path)
}

/// A report's name in errors: its file name, no directories.
fn report_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Checks a usage report as every reader must before trusting it
/// ([`gpumeter_core::check_report`]); `report` names it in the error. [`preview`](crate::preview),
/// `bill` (feature `bank`), [`merge_usage_reports`], [`read_usage_report`], [`parse_usage_report`] and
/// [`events::usage_events`](crate::events::usage_events) call it; a caller that rates or sends a report it got elsewhere
/// may call it first to tell a bad report from a bad price book.
///
/// # Errors
/// [`Error::Check`] naming the report and the row.
pub fn check_usage_report(usage: &UsageReport, report: &str) -> Result<(), Error> {
    gpumeter_core::check_report(usage).map_err(|error| Error::Check {
        report: report.to_string(),
        error: Box::new(error),
    })
}

/// Parses one `gpumeter.usage/v1` report from its bytes, plain or gzip-compressed; `path`
/// names it in errors (a file name, or a label such as `usage_json` for a report handed over
/// in memory). Checks it as every reader does ([`check_usage_report`]: schema, digest, rows,
/// totals, bounds, tenant names).
///
/// # Errors
/// As [`read_usage_report`].
pub fn parse_usage_report(bytes: &[u8], path: &Path) -> Result<UsageReport, Error> {
    let report = parse_unchecked(bytes, path)?;
    check_usage_report(&report, &report_name(path))?;
    Ok(report)
}

/// [`parse_usage_report`] without the checks but the schema's.
pub(crate) fn parse_unchecked(bytes: &[u8], path: &Path) -> Result<UsageReport, Error> {
    let fail = |reason: String| Error::Report {
        path: path.to_path_buf(),
        reason,
    };
    let decompressed;
    let bytes = if bytes.starts_with(&GZIP_MAGIC) {
        decompressed = gunzip(bytes).map_err(&fail)?;
        decompressed.as_slice()
    } else {
        bytes
    };
    let report: UsageReport = match serde_json::from_slice(bytes) {
        Ok(r) => r,
        Err(e) => {
            if let Some(format) = looks_like(bytes) {
                return Err(Error::NotAReport {
                    path: path.to_path_buf(),
                    format,
                });
            }
            return Err(fail(format!("not a gpumeter.usage/v1 report: {e}")));
        }
    };
    if report.schema != gpumeter_core::USAGE_SCHEMA {
        return Err(fail(format!(
            "schema `{}` is not {}",
            gpumeter_core::text::printable(&report.schema),
            gpumeter_core::USAGE_SCHEMA
        )));
    }
    Ok(report)
}

/// The decompressed bytes of a gzip file (every member), at most
/// [`gpumeter_import::MAX_DECOMPRESSED_BYTES`]: a usage report compressed by hand
/// (`gzip usage.json`) or by an agent's log rotation.
fn gunzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let limit = gpumeter_import::MAX_DECOMPRESSED_BYTES;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(bytes)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot decompress (gzip): {e}"))?;
    if out.len() as u64 > limit {
        return Err(format!(
            "decompresses to more than {limit} bytes, more than a usage report is read from"
        ));
    }
    Ok(out)
}

/// Reads usage reports from files and merges them into one sealed report
/// ([`merge_reports`]: each report's digest verified, the same report twice counted once with
/// a warning, sources, devices, usage and loss unioned and summed exactly, rows in the
/// meter's order whatever the order of `inputs`). Each report is named by its file name (no
/// directories) in errors, warnings and `extensions.merged_reports`.
///
/// # Errors
/// [`Error::Report`] / [`Error::NotAReport`] for a file that is not a usage report (the first
/// in argument order); [`Error::Merge`] when the reports cannot be merged.
pub fn merge_usage_reports(inputs: &[PathBuf]) -> Result<UsageReport, Error> {
    let mut reports = Vec::with_capacity(inputs.len());
    for input in inputs {
        // `merge_reports` checks each report (and what it writes) as every reader does.
        let report = read_unchecked(input)?;
        reports.push((report_name(input), report));
    }
    Ok(merge_reports(&reports)?)
}
