//! # gpumeter-import
//!
//! Importers for traces other tools recorded through CUPTI (DESIGN §3):
//!
//! * **Kineto / PyTorch-profiler** Chrome-trace JSON, plain or gzip-compressed (detected by the
//!   gzip magic bytes, not the file name): both the modern schema (fractional µs relative to
//!   `baseTimeNanoseconds`) and the older one (integer absolute µs, 2021 category names);
//! * **Nsight Systems SQLite exports** (schema 2.x and 3.x).
//!
//! An import reads and validates the whole file first, then announces it to the [`Meter`]
//! ([`Meter::begin_source`] with the file name, the format name and the SHA-256 of the bytes),
//! registers the devices that have activity, and pushes the records sorted by start. A file
//! that fails leaves the meter untouched; a file already metered (same SHA-256) is not pushed
//! again.
//!
//! Only file-level faults are errors ([`ImportError`]); record-level faults are loss in the
//! report: a negative Kineto `dur` is `end_before_start`, a `ts` of 0 is `zero_timestamp`.
//!
//! ```no_run
//! use gpumeter_core::{Meter, MeterConfig, MeterKind};
//! use gpumeter_import::{import_path, ImportOptions};
//! let mut meter = Meter::new(MeterConfig::default());
//! let summary = import_path(&mut meter, "trace.json.gz".as_ref(), &ImportOptions::default())?;
//! let report = meter.finish().expect("report");
//! println!("{} records, busy {} ns", summary.records,
//!          report.device_total(&summary.device_keys[0], MeterKind::GpuBusyNs));
//! # Ok::<(), gpumeter_import::ImportError>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod catalog;
mod error;
mod kineto;
mod nsys;
pub mod units;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use gpumeter_core::{ActivityRecord, DeviceInfo, DeviceSlot, LossReason, Meter, SourceInfo};
use sha2::{Digest, Sha256};

pub use catalog::{CatalogDevice, DeviceCatalog};
pub use error::{ImportError, RecordLocation};

/// An input format (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// Detect from the file's first bytes ([`detect_format`]).
    #[default]
    Auto,
    /// Kineto / PyTorch-profiler Chrome-trace JSON, plain or gzip.
    Kineto,
    /// Nsight Systems SQLite export.
    Nsys,
}

impl Format {
    /// Parses `auto`, `kineto` or `nsys`; `None` for anything else.
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "auto" => Some(Format::Auto),
            "kineto" => Some(Format::Kineto),
            "nsys" => Some(Format::Nsys),
            _ => None,
        }
    }

    /// The name as [`Format::parse`] takes it and usage reports write it (`sources[].format`).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Auto => "auto",
            Format::Kineto => "kineto",
            Format::Nsys => "nsys",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    /// As [`Format::parse`]; the error names the text and the accepted names.
    fn from_str(s: &str) -> Result<Self, String> {
        Format::parse(s)
            .ok_or_else(|| format!("unknown format `{s}` (expected auto, kineto or nsys)"))
    }
}

/// How to import.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// The input format; [`Format::Auto`] (default) detects it.
    pub format: Format,
    /// A device catalog (`--devices FILE`) applied to each device as it is registered, before
    /// any of its records is pushed (the meter fixes a kernel's SMs held at push time).
    pub catalog: Option<DeviceCatalog>,
}

/// What one import did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportSummary {
    /// The source's name in the report: the file name without directories.
    pub source_name: String,
    /// The format read (never [`Format::Auto`]).
    pub format: Format,
    /// GPU work records found (kernels, memcpys, memsets), including those the meter counts as
    /// loss (zero timestamp, end before start, …); 0 for a duplicate source.
    pub records: u64,
    /// Events that are not work (DESIGN §3) and were counted as skipped; 0 for a duplicate
    /// source.
    pub skipped: u64,
    /// `true` when a source with the same SHA-256 was already metered by this meter: nothing
    /// was pushed (DESIGN §4 "Idempotency").
    pub duplicate_source: bool,
    /// Lowercase hex SHA-256 of the file's bytes (as stored, i.e. compressed when gzip).
    pub sha256: String,
    /// Keys of the devices with activity in this file, in order of first activity: `GPU-<uuid>`
    /// when the source gives a UUID, else `<source name>#<device id>`.
    pub device_keys: Vec<String>,
}

/// A file parsed and validated, not yet given to a meter. Device slots in `records` and
/// `losses` are indices into `devices`.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) records: Vec<ActivityRecord>,
    pub(crate) losses: Vec<(DeviceSlot, LossReason)>,
    pub(crate) skipped: BTreeMap<String, u64>,
    pub(crate) warnings: Vec<String>,
}

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// Tells the format from a file's first bytes (`head`, 16 bytes suffice), else from its name:
///
/// * `SQLite format 3\0` → [`Format::Nsys`];
/// * gzip magic `1f 8b`, or `{` as the first non-blank character (after an optional UTF-8
///   byte-order mark) → [`Format::Kineto`];
/// * otherwise by extension: `.json`, `.json.gz`, `.gz` → Kineto; `.sqlite`, `.sqlite3`,
///   `.db` → Nsys; else `None`.
pub fn detect_format(path: &Path, head: &[u8]) -> Option<Format> {
    if head.starts_with(SQLITE_MAGIC) {
        return Some(Format::Nsys);
    }
    if head.starts_with(GZIP_MAGIC) {
        return Some(Format::Kineto);
    }
    let body = head.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(head);
    if let Some(&c) = body.iter().find(|c| !c.is_ascii_whitespace()) {
        if c == b'{' {
            return Some(Format::Kineto);
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    if name.ends_with(".json") || name.ends_with(".gz") {
        Some(Format::Kineto)
    } else if name.ends_with(".sqlite") || name.ends_with(".sqlite3") || name.ends_with(".db") {
        Some(Format::Nsys)
    } else {
        None
    }
}

/// The file name of `path` (no directories), as sources are named in reports (DESIGN §7).
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

fn resolve_format(path: &Path, head: &[u8], requested: Format) -> Result<Format, ImportError> {
    match requested {
        Format::Auto => detect_format(path, head).ok_or_else(|| ImportError::UnknownFormat {
            path: path.to_path_buf(),
        }),
        f => Ok(f),
    }
}

/// Imports one file into `meter`.
///
/// Kineto files are read into memory (and decompressed); Nsight SQLite files are opened
/// read-only in place and hashed by streaming.
///
/// # Errors
/// [`ImportError`] for a file-level fault (unreadable, truncated, not a trace, a field that
/// cannot be valid); the meter is then untouched.
pub fn import_path(
    meter: &mut Meter,
    path: &Path,
    opts: &ImportOptions,
) -> Result<ImportSummary, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io_err)?;
    let mut head = Vec::with_capacity(16);
    (&mut file)
        .take(16)
        .read_to_end(&mut head)
        .map_err(io_err)?;
    let format = resolve_format(path, &head, opts.format)?;
    let name = file_name(path);
    match format {
        Format::Nsys => {
            drop(file);
            let sha256 = sha256_of_file(path)?;
            let conn = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .map_err(|source| ImportError::Sqlite {
                path: path.to_path_buf(),
                context: "opening".to_string(),
                source,
            })?;
            let parsed = nsys::parse(path, &name, &conn)?;
            Ok(commit(meter, parsed, name, Format::Nsys, sha256, opts))
        }
        _ => {
            let mut bytes = head;
            file.read_to_end(&mut bytes).map_err(io_err)?;
            import_kineto(meter, path, name, &bytes, opts)
        }
    }
}

/// Imports a file already in memory; `name` is the file name to report and to name in errors.
///
/// Nsight SQLite bytes are opened as an in-memory, read-only database (up to 2 GiB; larger
/// exports must go through [`import_path`]).
///
/// # Errors
/// As [`import_path`]; [`ImportError::TooLarge`] for SQLite bytes over 2 GiB.
pub fn import_bytes(
    meter: &mut Meter,
    name: &str,
    bytes: &[u8],
    opts: &ImportOptions,
) -> Result<ImportSummary, ImportError> {
    let path = Path::new(name);
    let format = resolve_format(path, bytes, opts.format)?;
    let name = file_name(path);
    match format {
        Format::Nsys => {
            let sha256 = hex::encode(Sha256::digest(bytes));
            let conn = open_sqlite_bytes(path, bytes)?;
            let parsed = nsys::parse(path, &name, &conn)?;
            Ok(commit(meter, parsed, name, Format::Nsys, sha256, opts))
        }
        _ => import_kineto(meter, path, name, bytes, opts),
    }
}

fn import_kineto(
    meter: &mut Meter,
    path: &Path,
    name: String,
    bytes: &[u8],
    opts: &ImportOptions,
) -> Result<ImportSummary, ImportError> {
    let sha256 = hex::encode(Sha256::digest(bytes));
    let parsed = if bytes.starts_with(GZIP_MAGIC) {
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(bytes)
            .read_to_end(&mut text)
            .map_err(|source| ImportError::Gzip {
                path: path.to_path_buf(),
                source,
            })?;
        kineto::parse(path, &name, &text)?
    } else {
        kineto::parse(path, &name, bytes)?
    };
    Ok(commit(meter, parsed, name, Format::Kineto, sha256, opts))
}

fn sha256_of_file(path: &Path) -> Result<String, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io_err)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io_err)?;
    Ok(hex::encode(hasher.finalize()))
}

fn open_sqlite_bytes(path: &Path, bytes: &[u8]) -> Result<rusqlite::Connection, ImportError> {
    // sqlite3_deserialize sizes are C ints.
    if i32::try_from(bytes.len()).is_err() {
        return Err(ImportError::TooLarge {
            path: path.to_path_buf(),
            len: bytes.len(),
        });
    }
    let sql_err = |context: &str| {
        let context = context.to_string();
        move |source| ImportError::Sqlite {
            path: path.to_path_buf(),
            context,
            source,
        }
    };
    let mut conn =
        rusqlite::Connection::open_in_memory().map_err(sql_err("opening an in-memory database"))?;
    conn.deserialize_read_exact(rusqlite::MAIN_DB, bytes, bytes.len(), true)
        .map_err(sql_err("loading the database from memory"))?;
    Ok(conn)
}

/// Hands a parsed file to the meter: source, devices (catalog applied), losses, records.
fn commit(
    meter: &mut Meter,
    parsed: Parsed,
    name: String,
    format: Format,
    sha256: String,
    opts: &ImportOptions,
) -> ImportSummary {
    let device_keys: Vec<String> = parsed.devices.iter().map(|d| d.key.clone()).collect();
    let fresh = meter.begin_source(SourceInfo {
        name: name.clone(),
        format: format.as_str().to_string(),
        sha256: sha256.clone(),
    });
    let mut summary = ImportSummary {
        source_name: name,
        format,
        records: 0,
        skipped: 0,
        duplicate_source: !fresh,
        sha256,
        device_keys,
    };
    if !fresh {
        return summary;
    }
    let slots: Vec<DeviceSlot> = parsed
        .devices
        .into_iter()
        .map(|info| {
            let slot = meter.register_device(info);
            if let Some(catalog) = &opts.catalog {
                catalog.apply_to(meter, slot);
            }
            slot
        })
        .collect();
    let slot_of = |local: DeviceSlot| slots.get(local.0 as usize).copied();
    for w in parsed.warnings {
        meter.warn(w);
    }
    for (category, n) in parsed.skipped {
        summary.skipped += n;
        meter.record_skipped(&category, n);
    }
    for (local, reason) in parsed.losses {
        if let Some(slot) = slot_of(local) {
            summary.records += 1;
            meter.record_loss(slot, reason, 1);
        }
    }
    for mut rec in parsed.records {
        if let Some(slot) = slot_of(rec.device) {
            rec.device = slot;
            summary.records += 1;
            meter.push(rec);
        }
    }
    summary
}
