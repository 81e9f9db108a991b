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
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::PathBuf;

mod billing;
mod detect;
pub mod events;
mod metering;
mod options;
pub mod render;
mod usage_report;

#[cfg(feature = "bank")]
pub use billing::{bill, bill_with};
pub use billing::{load_price_book, preview, BillOptions};
pub use detect::inputs_are_reports;
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
pub use metering::meter_inputs;
pub use options::{Format, UsageOptions};
pub use usage_report::{
    check_usage_report, merge_usage_reports, parse_usage_report, read_usage_report,
};

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
        api: crate::cupti::ApiVersion,
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

#[cfg(test)]
mod feature_tests {
    //! The typed error for a format whose Cargo feature is off. Written for any feature set:
    //! `.ci/run` also runs these with `--no-default-features -F kineto`.
    use super::*;
    use crate::detect::{is_gmr, GMR_MAGIC};

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
        assert_eq!(GMR_MAGIC, crate::cupti::gmr::GMR_MAGIC);
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
