//! # gpumeter
//!
//! Fine-grained GPU usage metering for billing: NVIDIA CUPTI activity records (here: replayed
//! from PyTorch/Kineto traces and Nsight Systems SQLite exports) become integer usage per
//! tenant, device, window and meter ([`UsageReport`], `gpumeter.usage/v1`), and a price book
//! rates that usage into exact invoices ([`InvoiceDocument`], `gpumeter.invoice/v1`).
//!
//! This facade re-exports the stable API of the workspace's crates and owns the one code path
//! that turns inputs into usage ([`meter_inputs`]) and usage into invoices ([`preview`]); the
//! CLI and, later, the C ABI both call it.
//!
//! ```no_run
//! use std::path::PathBuf;
//! use gpumeter::{meter_inputs, preview, PriceBook, UsageOptions};
//!
//! let inputs = [PathBuf::from("examples/data/finetune-2xh100.json.gz")];
//! let usage = meter_inputs(&inputs, &UsageOptions::default())?;
//! let book = PriceBook::from_path("examples/pricebook.toml".as_ref())?;
//! let invoices = preview(&usage, &book, None)?;
//! println!("{}", invoices.to_text_table());
//! # Ok::<(), gpumeter::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::path::{Path, PathBuf};

pub use gpumeter_core as core;
pub use gpumeter_core::{
    ActivityRecord, DeviceInfo, Meter, MeterConfig, MeterKind, UsageReport, WindowSize,
};
pub use gpumeter_import as import;
pub use gpumeter_import::{DeviceCatalog, Format, ImportError, ImportOptions};
pub use gpumeter_rating as rating;
pub use gpumeter_rating::{InvoiceDocument, PriceBook, PriceBookError, RatingError};

/// Everything that can go wrong between input files and an invoice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input file or the device catalog could not be read (names the file).
    #[error(transparent)]
    Import(#[from] ImportError),
    /// The price book is invalid (names the file, table and field).
    #[error(transparent)]
    PriceBook(#[from] PriceBookError),
    /// Rating failed.
    #[error(transparent)]
    Rating(#[from] RatingError),
    /// The report could not be serialized for its digest.
    #[error(transparent)]
    Digest(#[from] gpumeter_core::DigestError),
}

/// How inputs are read and metered (the `usage` options of DESIGN §8).
#[derive(Debug, Clone, Default)]
pub struct UsageOptions {
    /// Input format; `Auto` detects it per file.
    pub format: Format,
    /// Meter configuration: window, `--tenant`, reordering horizon.
    pub meter: MeterConfig,
    /// Device catalog (`--devices FILE`), overriding sources field by field.
    pub devices: Option<PathBuf>,
}

/// Meters every input into one usage report (several inputs merge; a file given twice, or two
/// files with the same bytes, is metered once with a warning). Every input is read and
/// validated before any is metered, and the report does not depend on the order of the inputs
/// but for the order of its `sources` ([`gpumeter_import::import_paths`]).
///
/// # Errors
/// [`Error::Import`] for the first input (or the catalog) that cannot be read: a missing or
/// truncated file, a file that is not a trace. Record-level faults are loss, not errors.
pub fn meter_inputs(inputs: &[PathBuf], options: &UsageOptions) -> Result<UsageReport, Error> {
    let catalog = match &options.devices {
        Some(p) => Some(DeviceCatalog::from_path(p)?),
        None => None,
    };
    let mut meter = Meter::new(options.meter.clone());
    let opts = ImportOptions {
        format: options.format,
        catalog,
    };
    // One batch: every input is read and validated before any is metered, and their records
    // are merged by start, so the report does not depend on the order of the inputs.
    gpumeter_import::import_paths(&mut meter, inputs, &opts)?;
    Ok(meter.finish()?)
}

/// Rates a usage report with a price book: one invoice per tenant with usage in the period
/// (`period` = `(from_ns, to_ns)`, half-open; `None` = the usage's span rounded out to whole
/// windows).
///
/// # Errors
/// [`Error::Rating`] when the book cannot rate this usage (e.g. a rate's validity edge inside a
/// window, an amount beyond `Decimal`'s range).
pub fn preview(
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
) -> Result<InvoiceDocument, Error> {
    Ok(gpumeter_rating::rate(usage, book, period)?)
}

/// Reads a price book from a file.
///
/// # Errors
/// [`Error::PriceBook`] naming the file, table and field.
pub fn load_price_book(path: &Path) -> Result<PriceBook, Error> {
    Ok(PriceBook::from_path(path)?)
}
