//! # gpumeter
//!
//! Fine-grained GPU usage metering for billing: NVIDIA CUPTI activity records (replayed from
//! `.gmr` recordings, raw CUPTI activity buffers, PyTorch/Kineto traces and Nsight Systems
//! SQLite exports) become integer usage per
//! tenant, device, window and meter ([`UsageReport`], `gpumeter.usage/v1`), and a price book
//! rates that usage into exact invoices ([`InvoiceDocument`], `gpumeter.invoice/v1`).
//!
//! This facade re-exports the stable API of the workspace's crates and owns the one code path
//! that turns inputs into usage ([`meter_inputs`]) and usage into invoices ([`preview`]); the
//! CLI and, later, the C ABI both call it. Usage reports that node agents wrote merge into one
//! ([`merge_usage_reports`], `--format usage`), so a central biller rates them.
//!
//! The text the command line prints is here too ([`render::usage_text`],
//! [`render::invoice_text`]), as are billing periods built from RFC 3339 times ([`Period`])
//! and typed warnings ([`core::Warning`]: a [`core::WarningCode`] and a message).
//!
//! ```no_run
//! use std::path::PathBuf;
//! use gpumeter::{meter_inputs, preview, PriceBook, UsageOptions};
//!
//! let inputs = [PathBuf::from("examples/data/finetune-2xh100.json.gz")];
//! let usage = meter_inputs(&inputs, &UsageOptions::default())?;
//! let book = PriceBook::from_path("examples/pricebook.toml".as_ref())?;
//! let invoices = preview(&usage, &book, None)?;
//! println!("{}", gpumeter::render::invoice_text(&invoices));
//! # Ok::<(), gpumeter::Error>(())
//! ```
//!
//! # Cargo features
//!
//! The default set is a billing pipeline's: it reads every input format that node agents and
//! trace tools write, merges agents' usage reports, rates, and keeps the credit bank, and it
//! pulls no CUDA or NVIDIA crate (those load libraries a billing server does not have).
//! Usage reports (`gpumeter.usage/v1`), rating ([`preview`], [`rating`]), the device catalog
//! and tenant maps are always there.
//!
//! * `kineto` (default): PyTorch-profiler / Kineto trace JSON, plain or gzip. Pure Rust.
//! * `nsys` (default): Nsight Systems SQLite exports, through rusqlite with SQLite compiled in
//!   (a C compiler at build time).
//! * `cupti` (default): raw CUPTI activity buffers and `.gmr` recordings (the `cupti` module,
//!   [`UsageOptions`]'s `cupti_api`): a decoder in safe Rust that loads no CUDA library.
//! * `bank` (default): the credit bank (the `bank` module, `bill`): a ledger in SQLite,
//!   through rusqlite (SQLite compiled in). `bank::open(location)` opens a ledger by its
//!   location: a file path is SQLite.
//! * `postgres`: the credit bank's ledger in a PostgreSQL database shared by many billing
//!   workers as well: `bank::open` and `bank::open_existing` take `postgres://` and
//!   `postgresql://` URLs (the `postgres` crate; TLS through rustls as the URL's `sslmode`
//!   asks); implies `bank`. Without it such a URL is refused with
//!   `bank::BankError::BackendNotEnabled`, which names the feature.
//! * `collector`: live collection inside this process (`cupti::collector`), which loads
//!   libcupti and NVML at run time (cupti-sys, libloading, nvml-wrapper); implies `cupti` and
//!   `nvml`. For node agents written in Rust; the injection library uses it.
//! * `nvml`: the host's GPUs and their energy counters through NVML (the `nvml` module,
//!   nvml-wrapper; `libnvidia-ml.so.1` loaded at run time).
//!
//! `default-features = false, features = ["kineto"]` builds with no CUDA or SQLite crate in
//! the graph (`cargo tree -e normal`). An input whose format's feature is off is refused by
//! [`meter_inputs`] with [`Error::FormatNotEnabled`], which names the feature to enable; it
//! is never a build failure. Every feature adds to the API and changes nothing in it: the
//! types and fields that are there without a feature are the same with it ([`UsageOptions`]
//! has the same fields in every build), so a crate that asks for `kineto` alone still builds
//! when another crate of the same build turns on the default set.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

pub mod events;
pub mod render;

#[cfg(feature = "bank")]
pub use gpumeter_bank as bank;
pub use gpumeter_core as core;
pub use gpumeter_core::{
    merge_reports, ActivityRecord, DeviceInfo, MergeError, Meter, MeterConfig, MeterKind, Period,
    PeriodBound, PeriodError, UsageReport, WindowSize,
};
#[cfg(feature = "cupti")]
pub mod cupti;
#[cfg(feature = "cupti")]
pub use cupti::{ApiVersion, CuptiSourceError};
pub use gpumeter_import as import;
pub use gpumeter_import::{DeviceCatalog, ImportError, ImportOptions, TenantMapFile};
#[cfg(feature = "nvml")]
pub use gpumeter_nvml as nvml;
pub use gpumeter_rating as rating;
pub use gpumeter_rating::{InvoiceDocument, PriceBook, PriceBookError, RatingError};

/// Everything that can go wrong between input files and an invoice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input file or the device catalog could not be read (names the file).
    #[error(transparent)]
    Import(#[from] ImportError),
    /// A `.gmr` recording or raw CUPTI buffer could not be read (names the file, frame and byte
    /// offset). Only with the Cargo feature `cupti`.
    #[cfg(feature = "cupti")]
    #[error(transparent)]
    Cupti(#[from] CuptiSourceError),
    /// The price book is invalid (names the file, table and field).
    #[error(transparent)]
    PriceBook(#[from] PriceBookError),
    /// Rating failed.
    #[error(transparent)]
    Rating(#[from] RatingError),
    /// The credit bank failed or refused (names the bank's location, the transaction or the
    /// account): among others, a location this build has no backend for
    /// ([`gpumeter_bank::BankError::BackendNotEnabled`], naming the Cargo feature `postgres`) and
    /// concurrent writers that kept conflicting after every retry
    /// ([`gpumeter_bank::BankError::Contended`]). A PostgreSQL location is shown without its
    /// password. Only with the Cargo feature `bank`.
    #[cfg(feature = "bank")]
    #[error(transparent)]
    Bank(gpumeter_bank::BankError),
    /// The report cannot be built: a quantity beyond `u128` (never clamped), memory held over
    /// more windows than a report holds, or a digest failure (names the device and meter).
    #[error(transparent)]
    Meter(Box<gpumeter_core::MeterError>),
    /// The opening state (`--opening FILE`, a `gpumeter.usage/v1` report) cannot be read or
    /// one of its `open_allocations` is invalid (names the file, entry and field).
    #[error("{}: {reason}", path.display())]
    Opening {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the entry and field.
        reason: String,
    },
    /// A usage report given as an input (`--format usage`, or detected) cannot be read: not
    /// readable, not JSON, not a `gpumeter.usage/v1` document (names the file and, from
    /// serde_json, the line and column).
    #[error("{}: {reason}", path.display())]
    Report {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Usage reports cannot be merged (names the report by its file name, and the field or
    /// source): an edited report, another window size or metering policy, a source metered by
    /// two reports, a device described two ways, a report that fails the checks of every
    /// reader ([`MergeError::Check`]).
    #[error(transparent)]
    Merge(#[from] MergeError),
    /// A usage report fails the checks every reader makes before trusting it
    /// ([`gpumeter_core::check_report`]): its digest, one row per (tenant, device,
    /// window, meter), no zero rows, rows on window edges, totals equal to the rows,
    /// quantities a device can do in a window, tenant names none of which look alike.
    /// `report` names the report (its file name, `usage_json` for one handed over in memory,
    /// `the usage report` for one the caller built), the error the row.
    #[error("{report}: {error}")]
    Check {
        /// The report.
        report: String,
        /// What is wrong, naming the row or field.
        #[source]
        error: Box<gpumeter_core::ReportCheckError>,
    },
    /// A finalization was asked of an incomplete report (`"complete": false`: a snapshot of a
    /// meter still running, or a `.gmr` recording without its end frame, whose last windows
    /// may still grow) without allowing it ([`BillOptions::allow_incomplete`],
    /// `--allow-incomplete`).
    #[error(
        "the usage report is incomplete (\"complete\": false: {why}): its last windows may \
         still grow, so finalized invoices would bill part of them as if it were all; finalize \
         a complete report (a drained or finished one), or allow it with --allow-incomplete"
    )]
    Incomplete {
        /// Why it is incomplete ([`UsageReport::incomplete_because`]).
        why: &'static str,
    },
    /// Usage reports and inputs to meter (traces, recordings, buffers) in one call: reports
    /// merge and inputs are metered, never both at once. Every file may be good: the call is
    /// at fault (the CLI exits 2).
    #[error(
        "{} is a gpumeter.usage/v1 report and {} is a {format} input: reports are merged and \
         inputs are metered, not both in one call; meter the inputs into a report first \
         (`gpumeter usage --json`) and merge the reports",
        report.display(),
        input.display()
    )]
    MixedInputs {
        /// The usage report.
        report: PathBuf,
        /// The input to meter.
        input: PathBuf,
        /// That input's format (`kineto`, `nsys`, `gmr`, `cupti`).
        format: &'static str,
    },
    /// `--format usage` was given an input of another format (the call is at fault; the CLI
    /// exits 2).
    #[error(
        "{}: --format usage reads gpumeter.usage/v1 reports, but this is a {format} input; \
         meter it with --format auto (or {format}) and merge the reports",
        path.display()
    )]
    NotAReport {
        /// The file.
        path: PathBuf,
        /// What it is (`kineto`, `nsys`, `gmr`).
        format: &'static str,
    },
    /// `--format auto` could not tell what an input is: its first bytes are not a `.gmr`
    /// recording's magic, an Nsight Systems SQLite export's header, JSON or gzip (a Kineto
    /// trace or a usage report), nor a record of a raw CUPTI buffer in the layouts of `api`
    /// (the first four bytes, a `CUpti_ActivityKind`, name no kind that version defines).
    ///
    /// Without the Cargo feature `cupti` no raw buffer is tried and the variant has no `api`.
    #[cfg_attr(
        feature = "cupti",
        error(
            "{}: unknown input format: not a .gmr recording, an Nsight Systems SQLite export, a \
             Kineto trace or usage report (JSON or gzip), nor a raw CUPTI buffer in the {api} \
             layouts (its first 4 bytes are no activity kind of that version); pass --format \
             (and --cupti-api-version for a buffer of another CUPTI version)",
            path.display()
        )
    )]
    #[cfg_attr(
        not(feature = "cupti"),
        error(
            "{}: unknown input format: not a .gmr recording, an Nsight Systems SQLite export, \
             a Kineto trace or usage report (JSON or gzip); a raw CUPTI buffer needs the Cargo \
             feature `cupti`",
            path.display()
        )
    )]
    #[non_exhaustive]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// The CUPTI version whose layouts a raw buffer was tried in (only with the Cargo
        /// feature `cupti`; the variant is `#[non_exhaustive]`, so a pattern names the fields
        /// it reads and `..`, and compiles whichever features are on).
        #[cfg(feature = "cupti")]
        api: cupti::ApiVersion,
    },
    /// The input is in a format this build of gpumeter leaves out (its Cargo feature is off):
    /// detected from its bytes or named by [`UsageOptions::format`]. The file may be good; the
    /// build cannot read it (the CLI, built with every format, never returns it).
    #[error(
        "{}: this is a {format} input, which this build of gpumeter does not read: build the \
         gpumeter crate with its Cargo feature `{feature}`",
        path.display()
    )]
    FormatNotEnabled {
        /// The file.
        path: PathBuf,
        /// The format (`kineto`, `nsys`, `gmr`, `cupti`).
        format: &'static str,
        /// The Cargo feature of the gpumeter crate that reads it (`kineto`, `nsys`, `cupti`).
        feature: &'static str,
    },
    /// [`UsageOptions::cupti_api`] is a `CUPTI_API_VERSION` whose record layouts this build
    /// does not know (the CLI refuses such a `--cupti-api-version` before reading anything).
    /// Only with the Cargo feature `cupti`, when a raw CUPTI buffer is tried or read.
    #[error("UsageOptions::cupti_api: {reason}")]
    CuptiApiVersion {
        /// The number given.
        version: u32,
        /// What is wrong, naming the versions that are supported.
        reason: String,
    },
    /// An option that only metering uses (`--tenant`, `--tenant-map`, `--devices`,
    /// `--opening`) was given with usage reports, which are metered already (the CLI checks
    /// these before reading and exits 2).
    #[error(
        "{option} applies when metering inputs, not to usage reports (they are metered \
         already and merge as they are)"
    )]
    MeteringOption {
        /// The option, as on the command line.
        option: &'static str,
    },
}

impl From<gpumeter_core::MeterError> for Error {
    fn from(e: gpumeter_core::MeterError) -> Self {
        Error::Meter(Box::new(e))
    }
}

/// The format of an input (`--format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// Detect per file from its first bytes: the `.gmr` magic, SQLite's magic, gzip's magic
    /// (Kineto) or `{`, else a raw CUPTI buffer when its first 4 bytes are an activity kind of
    /// the selected CUPTI API version. A `{` file is a usage report when its top-level
    /// `schema` is `gpumeter.usage/v1`, found by reading its keys in order and skipping their
    /// values up to `schema` (a report, whatever its key order) or `traceEvents` (a Kineto
    /// trace, read no further); else it is Kineto.
    #[default]
    Auto,
    /// PyTorch profiler / Kineto trace JSON, plain or gzip.
    Kineto,
    /// Nsight Systems SQLite export.
    Nsys,
    /// A gpumeter `.gmr` recording.
    Gmr,
    /// One raw CUPTI activity buffer, laid out by `UsageOptions::cupti_api` (Cargo feature `cupti`).
    Cupti,
    /// A `gpumeter.usage/v1` report that an agent metered; several merge
    /// ([`merge_usage_reports`]).
    Usage,
}

/// Whether a JSON file is a usage report: its top-level keys are read in order (values
/// skipped, nothing kept) until `schema`, whose value decides, or `traceEvents` (a Kineto
/// trace: no), so a trace is not read past its first keys and a report whose keys were
/// reordered (`jq -S`) is still recognised. Anything unreadable is "no" (the importer that
/// reads the file then names the fault).
fn is_usage_report_json(path: &Path) -> bool {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Sniff<'a>(&'a std::cell::Cell<bool>);
    impl<'de> Visitor<'de> for Sniff<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "schema" => {
                        let v: serde_json::Value = map.next_value()?;
                        self.0.set(v.as_str() == Some(gpumeter_core::USAGE_SCHEMA));
                        return Ok(());
                    }
                    "traceEvents" => return Ok(()),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let found = std::cell::Cell::new(false);
    let mut reader = std::io::BufReader::new(file);
    // A gzipped report is read through the decompressor, as far as its `schema`.
    let gzip = {
        use std::io::BufRead as _;
        reader.fill_buf().is_ok_and(|b| b.starts_with(&GZIP_MAGIC))
    };
    let mut reader: Box<dyn std::io::BufRead> = if gzip {
        Box::new(std::io::BufReader::new(
            flate2::bufread::MultiGzDecoder::new(reader),
        ))
    } else {
        Box::new(reader)
    };
    let mut bom = [0u8; 3];
    {
        use std::io::{BufRead as _, Read as _};
        if reader
            .fill_buf()
            .is_ok_and(|b| b.starts_with(b"\xEF\xBB\xBF"))
        {
            let _ = reader.read_exact(&mut bom);
        }
    }
    let mut de = serde_json::Deserializer::from_reader(reader);
    // Returning early leaves the object unfinished, which serde_json reports as an error after
    // the visitor ran: the answer is in `found`, the error says nothing more.
    let _ = de.deserialize_map(Sniff(&found));
    found.get()
}

/// The first bytes of a gzip file (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The 16 bytes a `.gmr` recording starts with (`cupti::gmr::GMR_MAGIC`), so a
/// build without the Cargo feature `cupti` still tells a recording from an unknown file.
#[cfg_attr(feature = "cupti", allow(dead_code))]
const GMR_MAGIC: [u8; 16] = *b"GPUMETER-GMR\0\r\n\x1a";

/// Whether bytes start like a `.gmr` recording.
fn is_gmr(head: &[u8]) -> bool {
    #[cfg(feature = "cupti")]
    return cupti::gmr::is_gmr(head);
    #[cfg(not(feature = "cupti"))]
    return head.starts_with(&GMR_MAGIC);
}

/// `Ok` when this build reads inputs of `format`; else [`Error::FormatNotEnabled`] naming the
/// Cargo feature that does.
fn format_enabled(path: &Path, format: Format) -> Result<(), Error> {
    let (name, feature, on) = match format {
        Format::Auto | Format::Usage => return Ok(()),
        Format::Kineto => ("kineto", "kineto", cfg!(feature = "kineto")),
        Format::Nsys => ("nsys", "nsys", cfg!(feature = "nsys")),
        Format::Gmr => ("gmr", "cupti", cfg!(feature = "cupti")),
        Format::Cupti => ("cupti", "cupti", cfg!(feature = "cupti")),
    };
    if on {
        Ok(())
    } else {
        Err(Error::FormatNotEnabled {
            path: path.to_path_buf(),
            format: name,
            feature,
        })
    }
}

/// What a file that is not a usage report is, when its bytes tell it (`.gmr`, SQLite, gzip,
/// a JSON object with `traceEvents`), for [`Error::NotAReport`].
fn looks_like(bytes: &[u8]) -> Option<&'static str> {
    let head = &bytes[..bytes.len().min(256)];
    if is_gmr(head) {
        return Some("gmr");
    }
    if head.starts_with(b"SQLite format 3\0") {
        return Some("nsys");
    }
    if head.starts_with(&GZIP_MAGIC) {
        return Some("gzip file that is not a usage report");
    }
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(m)) if m.contains_key("traceEvents") => Some("kineto"),
        _ => None,
    }
}

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
/// ([`gpumeter_core::check_report`]); `report` names it in the error. [`preview`],
/// `bill` (feature `bank`), [`merge_usage_reports`], [`read_usage_report`], [`parse_usage_report`] and
/// [`events::usage_events`] call it; a caller that rates or sends a report it got elsewhere
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
fn parse_unchecked(bytes: &[u8], path: &Path) -> Result<UsageReport, Error> {
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

/// Whether `inputs` are usage reports to merge (`true`: every one, by `--format usage` or
/// detected by [`Format::Auto`]) or inputs to meter (`false`: none is a report). Reads the
/// first 256 bytes of each file under [`Format::Auto`].
///
/// # Errors
/// [`Error::MixedInputs`] naming a report and an input to meter when both are given;
/// [`Error::Import`] for a file that cannot be read, [`Error::UnknownFormat`] for one whose
/// format is unknown ([`Error::CuptiApiVersion`] when its bytes are tried as a raw buffer in
/// the layouts of an unsupported `options.cupti_api`).
pub fn inputs_are_reports(inputs: &[PathBuf], options: &UsageOptions) -> Result<bool, Error> {
    if options.format == Format::Usage {
        return Ok(true);
    }
    let mut report = None;
    let mut other = None;
    for input in inputs {
        match resolve(input, options)? {
            Format::Usage => report = report.or(Some(input)),
            f => other = other.or(Some((input, f))),
        }
    }
    match (report, other) {
        (Some(report), Some((input, f))) => Err(Error::MixedInputs {
            report: report.clone(),
            input: input.clone(),
            format: match f {
                Format::Gmr => "gmr",
                Format::Cupti => "cupti",
                Format::Nsys => "nsys",
                _ => "kineto",
            },
        }),
        (Some(_), None) => Ok(true),
        _ => Ok(false),
    }
}

/// How inputs are read and metered (the options of `gpumeter usage`).
#[derive(Debug, Clone, Default)]
pub struct UsageOptions {
    /// Input format; `Auto` detects it per file.
    pub format: Format,
    /// Meter configuration: window, `--tenant`, reordering horizon.
    pub meter: MeterConfig,
    /// Device catalog (`--devices FILE`), overriding sources field by field.
    pub devices: Option<PathBuf>,
    /// Tenant map (`--tenant-map FILE`, TOML `[external]` / `[pid]`): rules that attribute
    /// usage by external correlation id, then process id, before [`MeterConfig::tenant`].
    pub tenant_map: Option<PathBuf>,
    /// The producer's CUPTI API version for raw CUPTI buffers (`--cupti-api-version`): its
    /// `CUPTI_API_VERSION` number, 26 (CUDA 12.8), 130000 or 130001 (CUDA 13.0) or 130401
    /// (CUDA 13.4), as `ApiVersion::cupti_api_version` gives it; `None` is 26. A `.gmr` names
    /// its own.
    ///
    /// A number, and there whatever the Cargo features, so that the struct has the same fields
    /// in every build: a literal that names every field still compiles when another crate of
    /// the build turns on `cupti` (features add, never change, the API). It is read only with
    /// the feature `cupti`, where a number whose record layouts the decoder does not know is
    /// [`Error::CuptiApiVersion`] once a raw buffer is tried.
    pub cupti_api: Option<u32>,
    /// Opening state (`--opening FILE`): an earlier `gpumeter.usage/v1` report whose
    /// `open_allocations` are still held at its end; they are billed on from there.
    pub opening: Option<PathBuf>,
}

/// Reads an earlier usage report and continues it ([`Meter::continue_from`]): its
/// `open_allocations` are held on the devices of their `device_key` from that report's end on,
/// and what it billed (its sources, and its period on its devices) is not billed again.
fn apply_opening(meter: &mut Meter, path: &Path) -> Result<(), Error> {
    let fail = |reason: String| Error::Opening {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let report = match parse_unchecked(&bytes, path) {
        Ok(r) => r,
        Err(Error::Report { reason, .. }) => return Err(fail(reason)),
        Err(Error::NotAReport { format, .. }) => {
            return Err(fail(format!(
                "not a gpumeter.usage/v1 report: its bytes are a {format} input"
            )))
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    // Checked as every reader checks a report (its digest first).
    gpumeter_core::check_report(&report).map_err(|e| fail(e.to_string()))?;
    meter.continue_from(&report).map_err(fail)
}

/// Refuses a tenant map that names a tenant which looks like `--tenant` but is another name
/// (the same UTS #39 skeleton, `TenantName::skeleton`): their usage would be two tenants that
/// read alike on an invoice. The map is the file at fault (exit 1).
fn look_alike_of_tenant(
    map: &gpumeter_core::TenantMap,
    path: &Path,
    tenant: &gpumeter_core::TenantName,
) -> Result<(), Error> {
    let skeleton = tenant.skeleton();
    let named = map.external.values().chain(map.pid.values());
    if let Some(other) = named
        .into_iter()
        .find(|t| *t != tenant && t.skeleton() == skeleton)
    {
        return Err(ImportError::TenantMap {
            path: path.to_path_buf(),
            reason: format!(
                "the tenant `{}` looks like --tenant `{}` but is another name: their usage \
                 would be two tenants that read alike on an invoice",
                other.escaped(),
                tenant.escaped()
            ),
        }
        .into());
    }
    Ok(())
}

/// The record layouts of [`UsageOptions::cupti_api`] (`None`: CUDA 12.8's, 26).
#[cfg(feature = "cupti")]
fn cupti_api(options: &UsageOptions) -> Result<ApiVersion, Error> {
    match options.cupti_api {
        None => Ok(ApiVersion::default()),
        Some(version) => ApiVersion::from_cupti(version).map_err(|e| Error::CuptiApiVersion {
            version,
            reason: e.to_string(),
        }),
    }
}

/// The format of one input, `Auto` resolved from its first bytes.
fn resolve(path: &Path, options: &UsageOptions) -> Result<Format, Error> {
    if options.format != Format::Auto {
        return Ok(options.format);
    }
    let mut head = Vec::with_capacity(256);
    let read = std::fs::File::open(path).and_then(|f| {
        use std::io::Read as _;
        f.take(256).read_to_end(&mut head)
    });
    if let Err(source) = read {
        return Err(ImportError::Io {
            path: path.to_path_buf(),
            source,
        }
        .into());
    }
    if is_gmr(&head) {
        return Ok(Format::Gmr);
    }
    match gpumeter_import::detect_format(path, &head) {
        Some(gpumeter_import::Format::Nsys) => return Ok(Format::Nsys),
        // A JSON object or a gzip file: a usage report when its `schema` says so (read
        // through the decompressor for gzip), else a Kineto trace.
        Some(_) if is_usage_report_json(path) => return Ok(Format::Usage),
        Some(_) => return Ok(Format::Kineto),
        None => {}
    }
    #[cfg(feature = "cupti")]
    {
        let first_kind = head
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_le_bytes);
        let api = cupti_api(options)?;
        match first_kind {
            Some(k) if api.record_size(cupti::ActivityKind(k)).is_some() => Ok(Format::Cupti),
            _ => Err(Error::UnknownFormat {
                path: path.to_path_buf(),
                api,
            }),
        }
    }
    #[cfg(not(feature = "cupti"))]
    Err(Error::UnknownFormat {
        path: path.to_path_buf(),
    })
}

/// Meters every input into one usage report (several inputs merge; a file given twice, or two
/// files with the same bytes, is metered once with a warning).
///
/// Usage reports (`Format::Usage`, or all inputs detected as reports) are not metered again:
/// they are merged ([`merge_usage_reports`]); `options.meter` and `options.cupti_api` are not
/// used then (a report keeps its window: callers that were given a window compare it with
/// `window_seconds`, re-windowing is not supported).
///
/// Every input is read and validated first (traces, then recordings and raw CUPTI buffers),
/// announced, and then all their records and memory events are metered as one stream in time
/// order ([`gpumeter_core::push_batches`]), so neither the order of the files nor a mix of
/// formats for one GPU makes records `late`. Raw buffers and recordings without traces are
/// not held whole: one is streamed (`cupti::meter_buffer_file`,
/// `cupti::meter_gmr_file`), several are streamed and merged in `push_batches`'
/// order (`cupti::meter_files`), with the same report. An opening state (`--opening`) is taken before
/// any input.
///
/// # Errors
/// [`Error::Import`] / `Error::Cupti` for an input (or the catalog, the tenant map or the
/// opening state) that cannot be read: a missing or truncated file, a file that is not a
/// trace, a buffer that does not decode. Traces are checked before recordings, each kind in
/// argument order, so with several bad inputs the first bad trace is named.
/// [`Error::CuptiApiVersion`] when `options.cupti_api` has no known layouts and a raw buffer
/// is tried or read. Record-level faults are loss, not errors. For reports: [`Error::MixedInputs`] when reports
/// and inputs to meter are mixed, [`Error::MeteringOption`] when `tenant`, `tenant_map`,
/// `devices` or `opening` is set, and the errors of [`merge_usage_reports`].
pub fn meter_inputs(inputs: &[PathBuf], options: &UsageOptions) -> Result<UsageReport, Error> {
    if inputs_are_reports(inputs, options)? {
        let given = [
            ("--tenant", options.meter.tenant.is_some()),
            ("--tenant-map", options.tenant_map.is_some()),
            ("--devices", options.devices.is_some()),
            ("--opening", options.opening.is_some()),
        ];
        if let Some((option, _)) = given.into_iter().find(|(_, set)| *set) {
            return Err(Error::MeteringOption { option });
        }
        return merge_usage_reports(inputs);
    }
    let catalog = match &options.devices {
        Some(p) => Some(DeviceCatalog::from_path(p)?),
        None => None,
    };
    let tenant_map = match &options.tenant_map {
        Some(p) => Some(gpumeter_core::TenantMap::from_path(p)?),
        None => None,
    };
    if let (Some(map), Some(path), Some(tenant)) =
        (&tenant_map, &options.tenant_map, &options.meter.tenant)
    {
        look_alike_of_tenant(map, path, tenant)?;
    }
    let mut traces = Vec::new();
    let mut recordings = Vec::new();
    for input in inputs {
        let format = resolve(input, options)?;
        // A format whose Cargo feature is off: a typed error, before anything is metered.
        format_enabled(input, format)?;
        match format {
            f @ (Format::Gmr | Format::Cupti) => recordings.push((input, f)),
            _ => traces.push(input),
        }
    }
    let mut meter = Meter::new(options.meter.clone());
    if let Some(map) = tenant_map {
        meter.set_tenant_map(map);
    }
    if let Some(path) = &options.opening {
        apply_opening(&mut meter, path)?;
    }
    #[cfg(feature = "cupti")]
    let hook_catalog = catalog.clone();
    let opts = ImportOptions {
        format: match options.format {
            Format::Kineto => gpumeter_import::Format::Kineto,
            Format::Nsys => gpumeter_import::Format::Nsys,
            _ => gpumeter_import::Format::Auto,
        },
        catalog,
    };
    #[cfg_attr(not(feature = "cupti"), allow(unused_mut))]
    let (_, mut batches) = gpumeter_import::announce_paths(&mut meter, &traces, &opts)?;
    #[cfg(feature = "cupti")]
    if meter_recordings(
        &mut meter,
        options,
        hook_catalog,
        &traces,
        recordings,
        &mut batches,
    )? {
        return Ok(meter.finish()?);
    }
    #[cfg(not(feature = "cupti"))]
    debug_assert!(recordings.is_empty(), "format_enabled refuses recordings");
    gpumeter_core::push_batches(&mut meter, batches);
    Ok(meter.finish()?)
}

/// The recordings and raw CUPTI buffers of [`meter_inputs`]. When they are the only inputs
/// they are streamed into `meter` and the answer is `true` (finish the report; `batches`, the
/// traces', is empty). Else they are read, validated and announced, their batches added to
/// `batches`, and the answer is `false`.
#[cfg(feature = "cupti")]
fn meter_recordings(
    meter: &mut Meter,
    options: &UsageOptions,
    hook_catalog: Option<DeviceCatalog>,
    traces: &[&PathBuf],
    recordings: Vec<(&PathBuf, Format)>,
    batches: &mut Vec<gpumeter_core::Batch>,
) -> Result<bool, Error> {
    let hook = |m: &mut Meter, slot: gpumeter_core::DeviceSlot| {
        if let Some(c) = &hook_catalog {
            c.apply_to(m, slot);
        }
    };
    let copts = cupti::CuptiOptions {
        api: cupti_api(options)?,
        strings: None,
        on_device: Some(&hook),
    };
    // One raw buffer or recording alone: streamed, read in chunks twice (validate, hash and
    // join; then push in order), never held whole (issue 13; `meter_buffer_file`,
    // `meter_gmr_file`).
    match (traces, recordings.as_slice()) {
        ([], [(input, Format::Cupti)]) => {
            cupti::meter_buffer_file(meter, input, &copts)?;
            return Ok(true);
        }
        ([], [(input, Format::Gmr)]) => {
            cupti::meter_gmr_file(meter, input, &copts)?;
            return Ok(true);
        }
        ([], [_, _, ..]) => {
            // Several: streamed too, merged in time order exactly as `push_batches` merges
            // them (`meter_files`), unless a file must be read whole or the files may repeat
            // one another's work; then, and with traces, as below.
            let paths: Vec<(&Path, cupti::CuptiFormat)> = recordings
                .iter()
                .map(|(input, format)| (input.as_path(), cupti_format(*format)))
                .collect();
            if cupti::meter_files(meter, &paths, &copts)?.is_some() {
                return Ok(true);
            }
        }
        _ => {}
    }
    // Recordings and raw buffers: all read and validated, then announced; their batches are
    // pushed with the traces' as one stream in time order, so no input, of any format, makes
    // another's records late.
    let mut files = Vec::with_capacity(recordings.len());
    for (input, format) in recordings {
        let (name, bytes) = cupti::read_source(input)?;
        files.push((name, bytes, cupti_format(format)));
    }
    let sources: Vec<cupti::CuptiInput<'_>> = files
        .iter()
        .map(|(name, bytes, format)| cupti::CuptiInput {
            name,
            bytes,
            format: *format,
        })
        .collect();
    let (_, recorded) = cupti::announce_sources(meter, &sources, &copts)?;
    // The batches own what they push: the recordings' bytes can go first.
    drop(sources);
    drop(files);
    batches.extend(recorded);
    Ok(false)
}

/// The CUPTI crate's format of a raw buffer or a recording.
#[cfg(feature = "cupti")]
fn cupti_format(format: Format) -> cupti::CuptiFormat {
    if format == Format::Gmr {
        cupti::CuptiFormat::Gmr
    } else {
        cupti::CuptiFormat::Cupti
    }
}

/// Rates a usage report with a price book: one invoice per tenant with usage in the period
/// (`None` = the usage's span rounded out to whole windows). The report is checked first as
/// every reader checks it ([`check_usage_report`]). An incomplete report
/// ([`UsageReport::is_complete`]) is rated, and each invoice says so in a warning
/// (`incomplete_usage`).
///
/// # Errors
/// [`Error::Check`] for a report that fails the checks; [`Error::Rating`] when the book
/// cannot rate this usage (e.g. a given period whose ends are not edges of the report's
/// windows, a rate's validity edge inside a window, an amount beyond `Decimal`'s range).
pub fn preview(
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<Period>,
) -> Result<InvoiceDocument, Error> {
    check_usage_report(usage, "the usage report")?;
    Ok(gpumeter_rating::rate(
        usage,
        book,
        period.map(Period::as_ns),
        &gpumeter_rating::CarriedFragments::new(),
    )?)
}

#[cfg(feature = "bank")]
impl From<gpumeter_bank::BankError> for Error {
    /// A rating failure inside the bank is a rating error, so it maps as one.
    fn from(e: gpumeter_bank::BankError) -> Self {
        match e {
            gpumeter_bank::BankError::Rating(r) => Error::Rating(r),
            other => Error::Bank(other),
        }
    }
}

/// Rates a usage report with a price book against the credit bank: preview and
/// finalization are this one function ([`gpumeter_bank::finalize_with`]). With `commit = false`
/// (`preview --bank`) everything is rolled back and the invoices show the credits that would
/// apply; with `commit = true` (`invoice finalize`) each invoice is applied once, keyed by
/// (tenant, period, usage SHA-256, price-book SHA-256), and a retry changes nothing. A later
/// report of a finalized (tenant, period) is a supplement; a report without sources, usage
/// billed before and a period not yet ended by the system clock are refused when committing
/// ([`bill_with`] takes the clock, or none, from the caller).
///
/// The report is checked first as every reader checks it ([`check_usage_report`]), and a
/// finalization (`commit = true`) of an incomplete report is refused ([`Error::Incomplete`]);
/// [`bill_with`] can allow it.
///
/// # Errors
/// [`Error::Check`] for a report that fails the checks; [`Error::Incomplete`];
/// [`Error::Rating`] when the usage cannot be rated; [`Error::Bank`] when the ledger cannot be
/// read or written, or refuses the finalization ([`gpumeter_bank::BankError::Finalize`]).
#[cfg(feature = "bank")]
pub fn bill<L: gpumeter_bank::Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<Period>,
    commit: bool,
) -> Result<gpumeter_bank::Finalized, Error> {
    bill_with(ledger, usage, book, period, &BillOptions::new(commit))
}

/// How `bill_with` bills (feature `bank`; a plain value, so it is there without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BillOptions {
    /// Commit (`invoice finalize`) or roll back (`preview --bank`), as `bill`'s `commit`.
    pub commit: bool,
    /// Finalize an incomplete report too (`--allow-incomplete`): each invoice then carries
    /// the warning `incomplete_usage`. Without it, finalizing one is [`Error::Incomplete`]
    /// (a snapshot's half-window would be billed as the whole).
    pub allow_incomplete: bool,
    /// The current time (ns since the Unix epoch) a committed period must have ended by, or
    /// `None` to finalize a period that has not ended (`invoice finalize
    /// --allow-open-period`). [`BillOptions::new`] reads the system clock.
    pub now: Option<u64>,
}

impl BillOptions {
    /// Options that commit (`commit = true`) or roll back, refusing incomplete reports and
    /// periods that have not ended by the system clock.
    pub fn new(commit: bool) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        BillOptions {
            commit,
            allow_incomplete: false,
            now: Some(now),
        }
    }

    /// The same options, allowing (or not) an incomplete report.
    pub fn allow_incomplete(self, allow: bool) -> Self {
        BillOptions {
            allow_incomplete: allow,
            ..self
        }
    }

    /// The same options, allowing (or not) a period that has not ended: allowing forgets the
    /// clock; not allowing reads the system clock again.
    pub fn allow_open_period(self, allow: bool) -> Self {
        if allow {
            BillOptions { now: None, ..self }
        } else {
            BillOptions {
                now: BillOptions::new(self.commit).now,
                ..self
            }
        }
    }

    /// The same options with `now` (ns since the Unix epoch) as the current time.
    pub fn at(self, now_ns: u64) -> Self {
        BillOptions {
            now: Some(now_ns),
            ..self
        }
    }
}

/// [`bill`] with options ([`BillOptions`]): whether to commit, whether to finalize an
/// incomplete report, and the clock a committed period must have ended by (none: a period
/// not yet ended is finalized too).
///
/// # Errors
/// As [`bill`].
#[cfg(feature = "bank")]
pub fn bill_with<L: gpumeter_bank::Ledger>(
    ledger: &mut L,
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<Period>,
    options: &BillOptions,
) -> Result<gpumeter_bank::Finalized, Error> {
    let commit = options.commit;
    check_usage_report(usage, "the usage report")?;
    if let Some(why) = usage.incomplete_because() {
        if commit && !options.allow_incomplete {
            return Err(Error::Incomplete { why });
        }
    }
    Ok(gpumeter_bank::finalize_with(
        ledger,
        usage,
        book,
        period.map(Period::as_ns),
        gpumeter_bank::FinalizeOptions {
            commit,
            now: options.now,
        },
    )?)
}

/// Reads a price book from a file.
///
/// # Errors
/// [`Error::PriceBook`] naming the file, table and field.
pub fn load_price_book(path: &Path) -> Result<PriceBook, Error> {
    Ok(PriceBook::from_path(path)?)
}

#[cfg(test)]
mod feature_tests {
    //! The typed error for a format whose Cargo feature is off. Written for any feature set:
    //! `.ci/run` also runs these with `--no-default-features -F kineto`.
    use super::*;

    /// Meters one file holding `bytes`.
    fn meter_bytes(name: &str, bytes: &[u8]) -> Result<UsageReport, Error> {
        let dir = std::env::temp_dir().join(format!("gpumeter-features-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| Error::Report {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(|e| Error::Report {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let r = meter_inputs(std::slice::from_ref(&path), &UsageOptions::default());
        let _ = std::fs::remove_file(&path);
        r
    }

    /// `Some(feature)` when `r` is [`Error::FormatNotEnabled`] for `format`.
    fn not_enabled(r: &Result<UsageReport, Error>, format: &str) -> Option<&'static str> {
        match r {
            Err(Error::FormatNotEnabled {
                format: f, feature, ..
            }) if *f == format => Some(feature),
            _ => None,
        }
    }

    #[test]
    fn an_nsys_export_needs_the_nsys_feature() {
        let r = meter_bytes("a.sqlite", b"SQLite format 3\0 and then no database");
        if cfg!(feature = "nsys") {
            assert_eq!(not_enabled(&r, "nsys"), None, "{r:?}");
            assert!(matches!(r, Err(Error::Import(_))), "{r:?}");
        } else {
            assert_eq!(not_enabled(&r, "nsys"), Some("nsys"), "{r:?}");
            let message = r.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains("Cargo feature `nsys`"), "{message}");
        }
    }

    #[test]
    fn a_gmr_recording_needs_the_cupti_feature() {
        let mut bytes = GMR_MAGIC.to_vec();
        bytes.extend_from_slice(&[0; 16]);
        let r = meter_bytes("a.gmr", &bytes);
        if cfg!(feature = "cupti") {
            assert_eq!(not_enabled(&r, "gmr"), None, "{r:?}");
            assert!(r.is_err(), "a bare magic is no recording");
        } else {
            assert_eq!(not_enabled(&r, "gmr"), Some("cupti"), "{r:?}");
        }
    }

    #[test]
    fn a_kineto_trace_is_read_with_the_kineto_feature() {
        let trace = br#"{"traceEvents": []}"#;
        let r = meter_bytes("t.json", trace);
        if cfg!(feature = "kineto") {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert_eq!(not_enabled(&r, "kineto"), Some("kineto"), "{r:?}");
        }
    }

    /// Features add to the API and change nothing in it: a literal naming every field of
    /// [`UsageOptions`] compiles with every feature set (`.ci/run` builds these tests with
    /// `-F kineto` and the workspace's with every format), so a crate that asks for `kineto`
    /// alone still builds when another crate of its build turns on `cupti`.
    #[test]
    fn usage_options_have_the_same_fields_whatever_the_features() {
        let options = UsageOptions {
            format: Format::Auto,
            meter: MeterConfig::default(),
            devices: None,
            tenant_map: None,
            cupti_api: Some(130_401),
            opening: None,
        };
        // An unknown file: the raw-buffer layouts tried are those of the number given (with
        // `cupti`), and a pattern that names `path` and `..` matches in every build.
        let dir = std::env::temp_dir().join(format!("gpumeter-options-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("unknown.bin");
        std::fs::write(&path, [0xffu8; 64]).expect("write");
        let r = meter_inputs(std::slice::from_ref(&path), &options);
        assert!(
            matches!(&r, Err(Error::UnknownFormat { path: p, .. }) if *p == path),
            "{r:?}"
        );
        #[cfg(feature = "cupti")]
        assert!(
            matches!(&r, Err(Error::UnknownFormat { api, .. }) if *api == ApiVersion::Cupti13_4),
            "{r:?}"
        );
        // A number whose layouts are unknown: a typed error with the `cupti` feature; without
        // it no raw buffer is tried and the number is not read.
        let r = meter_inputs(
            std::slice::from_ref(&path),
            &UsageOptions {
                cupti_api: Some(12_345),
                ..options
            },
        );
        let _ = std::fs::remove_file(&path);
        if cfg!(feature = "cupti") {
            assert!(
                matches!(
                    &r,
                    Err(Error::CuptiApiVersion {
                        version: 12_345,
                        ..
                    })
                ),
                "{r:?}"
            );
            let message = r.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                message.contains("12345") && message.contains("130401"),
                "{message}"
            );
        } else {
            assert!(matches!(&r, Err(Error::UnknownFormat { .. })), "{r:?}");
        }
    }

    #[test]
    fn the_gmr_magic_is_the_recordings() {
        #[cfg(feature = "cupti")]
        assert_eq!(GMR_MAGIC, cupti::gmr::GMR_MAGIC);
        assert!(is_gmr(&GMR_MAGIC));
    }

    /// A `postgres://` bank needs the `postgres` feature: without it a typed refusal naming
    /// the feature, with it an attempt to connect (refused: nothing listens on port 1); the
    /// password shows in neither message. `.ci/run` checks `-F bank` and `-F postgres`.
    #[cfg(feature = "bank")]
    #[test]
    fn a_postgres_bank_needs_the_postgres_feature_and_never_shows_its_password() {
        let location = "postgres://billing:s3cret-pw@127.0.0.1:1/ledger?connect_timeout=5";
        let e = match gpumeter_bank::open_existing(location) {
            Ok(_) => panic!("nothing listens on 127.0.0.1:1"),
            Err(e) => Error::from(e),
        };
        let message = e.to_string();
        assert!(!message.contains("s3cret-pw"), "{message}");
        assert!(message.contains("billing:***@127.0.0.1:1"), "{message}");
        if cfg!(feature = "postgres") {
            assert!(
                matches!(
                    &e,
                    Error::Bank(gpumeter_bank::BankError::Storage { file, .. }) if file.contains("***")
                ),
                "{e:?}"
            );
        } else {
            assert!(
                matches!(
                    &e,
                    Error::Bank(gpumeter_bank::BankError::BackendNotEnabled {
                        feature: "postgres",
                        ..
                    })
                ),
                "{e:?}"
            );
            assert!(message.contains("`postgres` feature"), "{message}");
        }
    }
}
