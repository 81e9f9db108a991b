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
pub use gpumeter_cupti as cupti;
pub use gpumeter_cupti::{ApiVersion, CuptiSourceError};
pub use gpumeter_import as import;
pub use gpumeter_import::{DeviceCatalog, ImportError, ImportOptions, TenantMapFile};
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
    /// offset).
    #[error(transparent)]
    Cupti(#[from] CuptiSourceError),
    /// The price book is invalid (names the file, table and field).
    #[error(transparent)]
    PriceBook(#[from] PriceBookError),
    /// Rating failed.
    #[error(transparent)]
    Rating(#[from] RatingError),
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
}

impl From<gpumeter_core::MeterError> for Error {
    fn from(e: gpumeter_core::MeterError) -> Self {
        Error::Meter(Box::new(e))
    }
}

/// The format of an input (`--format`, DESIGN §8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// Detect per file from its first bytes: the `.gmr` magic, SQLite's magic, gzip's magic or
    /// `{` (Kineto), else a raw CUPTI buffer when its first 4 bytes are an activity kind of the
    /// selected CUPTI API version.
    #[default]
    Auto,
    /// PyTorch profiler / Kineto trace JSON, plain or gzip.
    Kineto,
    /// Nsight Systems SQLite export.
    Nsys,
    /// A gpumeter `.gmr` recording (DESIGN §10).
    Gmr,
    /// One raw CUPTI activity buffer, laid out by [`UsageOptions::cupti_api`].
    Cupti,
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
    /// Tenant map (`--tenant-map FILE`, TOML `[external]` / `[pid]`): rules that attribute
    /// usage by external correlation id, then process id, before [`MeterConfig::tenant`].
    pub tenant_map: Option<PathBuf>,
    /// The producer's CUPTI API version for raw CUPTI buffers (`--cupti-api-version`, default
    /// 12.8's 26); a `.gmr` names its own.
    pub cupti_api: ApiVersion,
    /// Opening state (`--opening FILE`): an earlier `gpumeter.usage/v1` report whose
    /// `open_allocations` are still held at its end; they are billed on from there
    /// (DESIGN §4 "Memory").
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
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    let report: UsageReport = serde_json::from_str(&text)
        .map_err(|e| fail(format!("not a gpumeter.usage/v1 report: {e}")))?;
    if report.schema != gpumeter_core::USAGE_SCHEMA {
        return Err(fail(format!(
            "schema `{}` is not {}",
            report.schema,
            gpumeter_core::USAGE_SCHEMA
        )));
    }
    if !report.verify_digest() {
        return Err(fail(
            "its sha256 does not match its content (the report was edited or damaged)".into(),
        ));
    }
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

/// The format of one input, `Auto` resolved from its first bytes.
fn resolve(path: &Path, options: &UsageOptions) -> Result<Format, Error> {
    if options.format != Format::Auto {
        return Ok(options.format);
    }
    let mut head = Vec::with_capacity(32);
    let read = std::fs::File::open(path).and_then(|f| {
        use std::io::Read as _;
        f.take(32).read_to_end(&mut head)
    });
    if let Err(source) = read {
        return Err(ImportError::Io {
            path: path.to_path_buf(),
            source,
        }
        .into());
    }
    if gpumeter_cupti::gmr::is_gmr(&head) {
        return Ok(Format::Gmr);
    }
    match gpumeter_import::detect_format(path, &head) {
        Some(gpumeter_import::Format::Nsys) => return Ok(Format::Nsys),
        Some(_) => return Ok(Format::Kineto),
        None => {}
    }
    let first_kind = head
        .get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes);
    match first_kind {
        Some(k)
            if options
                .cupti_api
                .record_size(gpumeter_cupti::ActivityKind(k))
                .is_some() =>
        {
            Ok(Format::Cupti)
        }
        _ => Err(ImportError::UnknownFormat {
            path: path.to_path_buf(),
        }
        .into()),
    }
}

/// Meters every input into one usage report (several inputs merge; a file given twice, or two
/// files with the same bytes, is metered once with a warning).
///
/// Every input is read and validated first (traces, then recordings and raw CUPTI buffers),
/// announced, and then all their records and memory events are metered as one stream in time
/// order ([`gpumeter_core::push_batches`]), so neither the order of the files nor a mix of
/// formats for one GPU makes records `late`. An opening state (`--opening`) is taken before
/// any input.
///
/// # Errors
/// [`Error::Import`] / [`Error::Cupti`] for an input (or the catalog, the tenant map or the
/// opening state) that cannot be read: a missing or truncated file, a file that is not a
/// trace, a buffer that does not decode. Traces are checked before recordings, each kind in
/// argument order, so with several bad inputs the first bad trace is named.
/// Record-level faults are loss, not errors.
pub fn meter_inputs(inputs: &[PathBuf], options: &UsageOptions) -> Result<UsageReport, Error> {
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
        match resolve(input, options)? {
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
    let hook_catalog = catalog.clone();
    let opts = ImportOptions {
        format: match options.format {
            Format::Kineto => gpumeter_import::Format::Kineto,
            Format::Nsys => gpumeter_import::Format::Nsys,
            _ => gpumeter_import::Format::Auto,
        },
        catalog,
    };
    let (_, mut batches) = gpumeter_import::announce_paths(&mut meter, &traces, &opts)?;
    let hook = |m: &mut Meter, slot: gpumeter_core::DeviceSlot| {
        if let Some(c) = &hook_catalog {
            c.apply_to(m, slot);
        }
    };
    let copts = gpumeter_cupti::CuptiOptions {
        api: options.cupti_api,
        strings: None,
        on_device: Some(&hook),
    };
    // Recordings and raw buffers: all read and validated, then announced; their batches are
    // pushed with the traces' as one stream in time order, so no input, of any format, makes
    // another's records late.
    let mut files = Vec::with_capacity(recordings.len());
    for (input, format) in recordings {
        let name = input
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| input.display().to_string());
        let bytes = std::fs::read(input).map_err(|error| CuptiSourceError::Io {
            name: name.clone(),
            error,
        })?;
        let format = if format == Format::Gmr {
            gpumeter_cupti::CuptiFormat::Gmr
        } else {
            gpumeter_cupti::CuptiFormat::Cupti
        };
        files.push((name, bytes, format));
    }
    let sources: Vec<gpumeter_cupti::CuptiInput<'_>> = files
        .iter()
        .map(|(name, bytes, format)| gpumeter_cupti::CuptiInput {
            name,
            bytes,
            format: *format,
        })
        .collect();
    let (_, recorded) = gpumeter_cupti::announce_sources(&mut meter, &sources, &copts)?;
    // The batches own what they push: the recordings' bytes can go first.
    drop(sources);
    drop(files);
    batches.extend(recorded);
    gpumeter_core::push_batches(&mut meter, batches);
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
    Ok(gpumeter_rating::rate(
        usage,
        book,
        period,
        &gpumeter_rating::CarriedFragments::new(),
    )?)
}

/// Reads a price book from a file.
///
/// # Errors
/// [`Error::PriceBook`] naming the file, table and field.
pub fn load_price_book(path: &Path) -> Result<PriceBook, Error> {
    Ok(PriceBook::from_path(path)?)
}
