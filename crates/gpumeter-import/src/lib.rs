//! # gpumeter-import
//!
//! Importers for traces other tools recorded through CUPTI:
//!
//! * **Kineto / PyTorch-profiler** Chrome-trace JSON, plain or gzip-compressed (detected by the
//!   gzip magic bytes, not the file name): both the modern schema (fractional µs relative to
//!   `baseTimeNanoseconds`) and the older one (integer absolute µs, 2021 category names);
//! * **Nsight Systems SQLite exports** (schema 2.x and 3.x).
//!
//! An import reads and validates the whole file first, then announces it to the [`Meter`]
//! ([`Meter::begin_source`] with the file name, the format name and the source's identity: the
//! SHA-256 of its content, i.e. of the decompressed text of a gzip file),
//! registers the devices that have activity, and pushes the records sorted by start. A file
//! that fails leaves the meter untouched; a file already metered (same SHA-256) is not pushed
//! again. Several files go through [`import_paths`]: all are read and validated before any is
//! announced, and their records are pushed merged in one order by start, so the result does
//! not depend on the order of the files.
//!
//! Devices are keyed `GPU-<uuid>` when the source gives a UUID, else by the source and the
//! device id, where the source is told by its content identity, never by its name:
//! `<first 16 hex digits of the content's SHA-256>#<device id>`
//! ([`gpumeter_core::source_label`]), e.g. `309220b5c1d2e3f4#0`. A trace gzipped, gunzipped,
//! re-compressed or renamed is the same source with the same device keys.
//!
//! Only file-level faults are errors ([`ImportError`]); record-level faults are loss in the
//! report: a negative Kineto `dur` is `end_before_start`, a `ts` of 0 is `zero_timestamp`.
//!
//! The operator's TOML files are read here too: the device catalog ([`DeviceCatalog`]) and the
//! tenant map ([`TenantMapFile`]).
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
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod catalog;
mod cut;
mod error;
mod hash;
mod kineto;
mod load;
#[cfg(feature = "nsys")]
mod nsys;
mod parsed;
mod read_ahead;
mod tenant_map;
pub mod units;

use std::collections::BTreeMap;
use std::path::Path;

use gpumeter_core::{
    push_batches, ActivityRecord, Batch, DeviceSlot, LossReason, Meter, SourceInfo,
};
use gpumeter_core::{Warning, WarningCode};

pub use catalog::{CatalogDevice, DeviceCatalog};
pub use cut::{CUT_MARK, CUT_SUFFIX_BYTES, MAX_STRING_BYTES};
pub use error::{ImportError, RecordLocation};
pub use tenant_map::TenantMapFile;

use load::{load_bytes, load_path, Loaded};

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
    /// Events that are not work and were counted as skipped; 0 for a duplicate
    /// source.
    pub skipped: u64,
    /// `true` when a source with the same identity ([`ImportSummary::sha256`]) was already
    /// metered by this meter: nothing was pushed.
    pub duplicate_source: bool,
    /// The source's identity, lowercase hex: the SHA-256 of its content (of the decompressed
    /// text for a gzip file, else of its bytes), so a re-compressed copy is the same source.
    pub sha256: String,
    /// Keys of the devices with activity in this file, in order of first activity: `GPU-<uuid>`
    /// when the source gives a UUID, else `<label>#<device id>`, the label being the first 16
    /// hex digits of [`ImportSummary::sha256`] ([`gpumeter_core::source_label`], e.g.
    /// `309220b5c1d2e3f4#0`): different contents never share a device, and one content has
    /// the same keys under any file name or compression.
    pub device_keys: Vec<String>,
}

pub(crate) const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
pub(crate) const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

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

/// The largest decompressed size of a gzip-compressed Kineto input: 8 GiB. A file that
/// decompresses to more is refused with [`ImportError::DecompressedTooLarge`]. Memory does not
/// need it (the text is parsed as a stream, never held): it bounds the time a small "gzip bomb"
/// can cost (a 9.7 MB gzip of 9 GiB of whitespace is refused after 34 s, at 8 MB peak RSS, in
/// a release build); real traces are far smaller.
pub const MAX_DECOMPRESSED_BYTES: u64 = 8 << 30;

/// Imports one file into `meter`.
///
/// Kineto files are read as a stream (and decompressed as one, up to
/// [`MAX_DECOMPRESSED_BYTES`]), holding only the GPU work events they keep; Nsight SQLite files are opened read-only in place and hashed by streaming. To meter several
/// files into one meter, use [`import_paths`]: importing them one by one makes the result
/// depend on their order when they share a GPU (records of a later file that lie more than the
/// reordering horizon before an earlier file's are `late`).
///
/// # Errors
/// [`ImportError`] for a file-level fault (unreadable, truncated, not a trace, a field that
/// cannot be valid); the meter is then untouched.
pub fn import_path(
    meter: &mut Meter,
    path: &Path,
    opts: &ImportOptions,
) -> Result<ImportSummary, ImportError> {
    let loaded = load_path(path, opts)?;
    Ok(commit_one(meter, loaded, opts))
}

/// Imports several files into `meter` as one batch, so that the result does not depend on
/// their order (but for the order of the report's `sources`):
///
/// 1. every file is read, hashed, parsed and validated first: any error is returned and the
///    meter is untouched;
/// 2. the sources are announced in argument order ([`Meter::begin_source`]; a file with the
///    same SHA-256 as one already metered is not pushed again, [`ImportSummary::duplicate_source`]),
///    their devices registered (the catalog applied), their skipped events and losses counted;
/// 3. the records of all files are pushed merged in one time order
///    ([`gpumeter_core::push_batches`]: start, then the file whose SHA-256 sorts first), so
///    records of the same GPU from different files are never `late` for being in a later
///    file. A file whose decompressed content equals an earlier one's (the same trace gzipped
///    and plain) is metered once, with a warning.
///
/// All files' records are held in memory together until they are pushed.
///
/// Returns one summary per path, in argument order.
///
/// # Errors
/// The first [`ImportError`] in argument order (as [`import_path`]); the meter is then
/// untouched.
pub fn import_paths<P: AsRef<Path>>(
    meter: &mut Meter,
    paths: &[P],
    opts: &ImportOptions,
) -> Result<Vec<ImportSummary>, ImportError> {
    let (summaries, batches) = announce_paths(meter, paths, opts)?;
    push_batches(meter, batches);
    Ok(summaries)
}

/// [`import_paths`] without the pushing: every file is read and validated (an error leaves
/// the meter untouched), then announced, and its records are returned as [`Batch`]es for
/// [`push_batches`], to be merged with other formats' batches (the facade merges recordings
/// with traces this way). One summary per path, in argument order.
///
/// # Errors
/// As [`import_paths`].
pub fn announce_paths<P: AsRef<Path>>(
    meter: &mut Meter,
    paths: &[P],
    opts: &ImportOptions,
) -> Result<(Vec<ImportSummary>, Vec<Batch>), ImportError> {
    let loaded = paths
        .iter()
        .map(|p| load_path(p.as_ref(), opts))
        .collect::<Result<Vec<_>, _>>()?;
    let mut summaries = Vec::with_capacity(loaded.len());
    let mut batches = Vec::with_capacity(loaded.len());
    // The same trace compressed and not (or compressed twice differently) has different bytes
    // but one content, its identity: metered once, with a warning, from the file whose bytes'
    // SHA-256 sorts first (so that argument order never changes the report's source name).
    // (Identical bytes are left to the meter's own identity check.)
    let mut kept: std::collections::HashMap<String, (String, String)> =
        std::collections::HashMap::new();
    for l in &loaded {
        let e = kept
            .entry(l.sha256.clone())
            .or_insert_with(|| (l.file_sha256.clone(), l.name.clone()));
        if l.file_sha256 < e.0 {
            *e = (l.file_sha256.clone(), l.name.clone());
        }
    }
    for l in loaded {
        if let Some((first_sha, first)) = kept.get(&l.sha256) {
            if *first_sha != l.file_sha256 {
                meter.warn(Warning::new(
                    WarningCode::DuplicateSource,
                    format!(
                    "source {} has the same content as {} once decompressed and was metered once",
                    l.name, first
                ),
                ));
                summaries.push(ImportSummary {
                    source_name: l.name,
                    format: l.format,
                    records: 0,
                    skipped: 0,
                    duplicate_source: true,
                    sha256: l.sha256,
                    device_keys: Vec::new(),
                });
                continue;
            }
        }
        let (summary, batch) = announce(meter, l, opts);
        summaries.push(summary);
        batches.push(batch);
    }
    Ok((summaries, batches))
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
    let loaded = load_bytes(name, bytes, opts)?;
    Ok(commit_one(meter, loaded, opts))
}

/// Announces a single source and pushes its records.
fn commit_one(meter: &mut Meter, loaded: Loaded, opts: &ImportOptions) -> ImportSummary {
    let (summary, batch) = announce(meter, loaded, opts);
    push_batches(meter, vec![batch]);
    summary
}

/// Announces one source and registers what it brings but its records, which are returned
/// as a batch with their device slots mapped to the meter's and sorted (stably) by (start,
/// end); an empty batch for a duplicate source. The summary's `records` already counts the
/// returned records.
fn announce(meter: &mut Meter, loaded: Loaded, opts: &ImportOptions) -> (ImportSummary, Batch) {
    let Loaded {
        name,
        format,
        sha256,
        parsed,
        ..
    } = loaded;
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
        return (summary, Batch::default());
    }
    let slots = register_devices(meter, parsed.devices, opts);
    let slot_of = |local: DeviceSlot| slots.get(local.0 as usize).copied();
    for w in parsed.warnings.into_iter().chain(parsed.faults.warnings()) {
        meter.warn(w);
    }
    summary.skipped = parsed.skipped.values().sum();
    let mut losses: BTreeMap<(DeviceSlot, LossReason), u64> = BTreeMap::new();
    for (local, reason) in parsed.losses {
        if let Some(slot) = slot_of(local) {
            summary.records += 1;
            *losses.entry((slot, reason)).or_insert(0) += 1;
        }
    }
    let mut source_losses: BTreeMap<LossReason, u64> = BTreeMap::new();
    for reason in parsed.source_losses {
        summary.records += 1;
        *source_losses.entry(reason).or_insert(0) += 1;
    }
    let mut records: Vec<ActivityRecord> = parsed
        .records
        .into_iter()
        .filter_map(|mut rec| {
            let slot = slot_of(rec.device)?;
            rec.device = slot;
            Some(rec)
        })
        .collect();
    records.sort_by_key(|r| (r.start_ns, r.end_ns));
    summary.records += records.len() as u64;
    let batch = Batch {
        sha256: summary.sha256.clone(),
        name: summary.source_name.clone(),
        records,
        losses: losses
            .into_iter()
            .map(|((slot, reason), n)| (slot, reason, n, false))
            .collect(),
        source_losses: source_losses
            .into_iter()
            .map(|(reason, n)| (reason, n, false))
            .collect(),
        skipped: parsed.skipped,
        ..Batch::default()
    };
    (summary, batch)
}

/// Registers a source's devices with `meter`, the catalog applied to each before any of its
/// records is pushed; their slots, in the source's order.
fn register_devices(
    meter: &mut Meter,
    devices: Vec<gpumeter_core::DeviceInfo>,
    opts: &ImportOptions,
) -> Vec<DeviceSlot> {
    devices
        .into_iter()
        .map(|info| {
            let slot = meter.register_device(info);
            if let Some(catalog) = &opts.catalog {
                catalog.apply_to(meter, slot);
            }
            slot
        })
        .collect()
}
