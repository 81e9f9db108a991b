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
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod catalog;
mod cut;
mod error;
mod kineto;
#[cfg(feature = "nsys")]
mod nsys;
mod parsed;
mod tenant_map;
pub mod units;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use gpumeter_core::{
    push_batches, ActivityRecord, Batch, DeviceSlot, LossReason, Meter, SourceInfo,
};
use gpumeter_core::{Warning, WarningCode};
use sha2::{Digest, Sha256};

pub use catalog::{CatalogDevice, DeviceCatalog};
pub use cut::{CUT_MARK, CUT_SUFFIX_BYTES, MAX_STRING_BYTES};
pub use error::{ImportError, RecordLocation};
pub use tenant_map::TenantMapFile;

use parsed::{file_name, Parsed};

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

fn resolve_format(path: &Path, head: &[u8], requested: Format) -> Result<Format, ImportError> {
    match requested {
        Format::Auto => detect_format(path, head).ok_or_else(|| ImportError::UnknownFormat {
            path: path.to_path_buf(),
        }),
        f => Ok(f),
    }
}

/// The largest decompressed size of a gzip-compressed Kineto input: 8 GiB. A file that
/// decompresses to more is refused with [`ImportError::DecompressedTooLarge`]. Memory does not
/// need it (the text is parsed as a stream, never held): it bounds the time a small "gzip bomb"
/// can cost (a 9.7 MB gzip of 9 GiB of whitespace is refused after 34 s, at 8 MB peak RSS, in
/// a release build); real traces are far smaller.
pub const MAX_DECOMPRESSED_BYTES: u64 = 8 << 30;

/// One input read, hashed, parsed and validated, not yet given to a meter.
struct Loaded {
    name: String,
    format: Format,
    /// The source's identity: SHA-256 of the content as parsed (of the decompressed text for a
    /// gzip file, else of the bytes). The same trace given gzipped and plain has one identity.
    sha256: String,
    /// SHA-256 of the file's bytes as stored: which of several files of one content names
    /// the source (the one whose bytes' SHA-256 sorts first).
    file_sha256: String,
    parsed: Parsed,
}

/// Reads, hashes and parses one file without touching any meter.
fn load_path(path: &Path, opts: &ImportOptions) -> Result<Loaded, ImportError> {
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
        #[cfg(not(feature = "nsys"))]
        Format::Nsys => Err(ImportError::FormatNotEnabled {
            path: path.to_path_buf(),
            format: "nsys",
            feature: "nsys",
        }),
        #[cfg(feature = "nsys")]
        Format::Nsys => {
            drop(file);
            let sha256 = sha256_of_file(path)?;
            // Read-only, immutable and guarded against hostile files (nsys module docs).
            let export = nsys::Export::open_path(path)?;
            let label = gpumeter_core::source_label(&sha256);
            let parsed = nsys::parse(path, &name, &label, &export)?;
            Ok(Loaded {
                name,
                format: Format::Nsys,
                file_sha256: sha256.clone(),
                sha256,
                parsed,
            })
        }
        _ => load_kineto(
            path,
            name,
            head.as_slice().chain(file),
            MAX_DECOMPRESSED_BYTES,
        ),
    }
}

/// As [`load_path`] for bytes in memory; `name` names the file in errors and reports.
fn load_bytes(name: &str, bytes: &[u8], opts: &ImportOptions) -> Result<Loaded, ImportError> {
    let path = Path::new(name);
    let format = resolve_format(path, bytes, opts.format)?;
    let name = file_name(path);
    match format {
        #[cfg(not(feature = "nsys"))]
        Format::Nsys => Err(ImportError::FormatNotEnabled {
            path: path.to_path_buf(),
            format: "nsys",
            feature: "nsys",
        }),
        #[cfg(feature = "nsys")]
        Format::Nsys => {
            let sha256 = hex::encode(Sha256::digest(bytes));
            let conn = open_sqlite_bytes(path, bytes)?;
            let label = gpumeter_core::source_label(&sha256);
            let parsed = nsys::parse(path, &name, &label, &conn)?;
            Ok(Loaded {
                name,
                format: Format::Nsys,
                file_sha256: sha256.clone(),
                sha256,
                parsed,
            })
        }
        _ => load_kineto(path, name, bytes, MAX_DECOMPRESSED_BYTES),
    }
}

/// Hashes, decompresses (at most `limit` bytes) and parses a Kineto file, all in one pass
/// over `input` as a stream: memory holds what the trace keeps (its GPU work events), not the
/// file nor its decompressed text, so a gzip bomb of whitespace or of CPU-side events streams
/// through in bounded memory.
fn load_kineto(
    path: &Path,
    name: String,
    input: impl Read,
    limit: u64,
) -> Result<Loaded, ImportError> {
    let io_err = |source| ImportError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Both digests (of the file, and of the decompressed text) on one worker thread, off the
    // parse's path; inline when no thread can be started.
    let worker = HashWorker::start();
    let sink = |which| match &worker {
        Some(w) => Sink::Worker(w, which),
        None => Sink::Inline(Sha256::new()),
    };
    let mut file = Tally::new(input, u64::MAX, sink(0));
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(e)),
        }
    }
    let magic = &magic[..got];
    let (collected, content_sha256) = if magic == GZIP_MAGIC {
        let (result, gzip_error, over, hasher) = {
            let gz = flate2::read::MultiGzDecoder::new(magic.chain(&mut file));
            let mut text = Tally::new(gz, limit, sink(1));
            let result = kineto::read_events(path, &mut text);
            if result.is_err() {
                // As if the whole file had been decompressed first: a gzip fault or the size
                // limit anywhere in it outranks a JSON fault (the rest is read, not kept).
                let _ = std::io::copy(&mut text, &mut std::io::sink());
            }
            (result, text.error, text.over, text.sink)
        };
        if let Some(source) = file.error.take() {
            return Err(io_err(source));
        }
        if let Some(source) = gzip_error {
            return Err(ImportError::Gzip {
                path: path.to_path_buf(),
                source,
            });
        }
        if over {
            return Err(ImportError::DecompressedTooLarge {
                path: path.to_path_buf(),
                limit,
            });
        }
        (result?, Some(hasher.detach()))
    } else {
        let result = kineto::read_events(path, magic.chain(&mut file));
        if let Some(source) = file.error.take() {
            return Err(io_err(source));
        }
        (result?, None)
    };
    // Whatever follows the end of the JSON or of the last gzip member (nothing, in a file that
    // parsed), hashed too.
    std::io::copy(&mut file, &mut std::io::sink()).map_err(io_err)?;
    let file_sink = file.sink.detach();
    let worker_digests = match worker {
        Some(w) => Some(
            w.finish()
                .ok_or_else(|| io_err(std::io::Error::other("the SHA-256 worker thread failed")))?,
        ),
        None => None,
    };
    let digest = |sink: Result<Sha256, usize>| match (sink, &worker_digests) {
        (Ok(h), _) => hex::encode(h.finalize()),
        (Err(which), Some(d)) => hex::encode(d[which % 2].clone().finalize()),
        // Not met: a worker sink exists only with a worker.
        (Err(_), None) => String::new(),
    };
    let content_sha256 = content_sha256.map(digest);
    let file_sha256 = digest(file_sink);
    // The source's identity is its content: a gzip file's decompressed text (DESIGN §4).
    let sha256 = content_sha256.unwrap_or_else(|| file_sha256.clone());
    let label = gpumeter_core::source_label(&sha256);
    let parsed = kineto::finish(collected, &label)?;
    Ok(Loaded {
        name,
        format: Format::Kineto,
        sha256,
        file_sha256,
        parsed,
    })
}

/// A thread that computes SHA-256 digests of two streams (0: a file's bytes, 1: its
/// decompressed text) from chunks handed to it, so that hashing (a sixth of a Kineto import's
/// CPU time) runs beside the parse instead of on its path. At most 4 chunks (each at most the
/// reader's buffer, 1 MiB) wait for it; their buffers come back to be reused.
struct HashWorker {
    tx: Option<std::sync::mpsc::SyncSender<(usize, Vec<u8>)>>,
    back: std::sync::mpsc::Receiver<Vec<u8>>,
    thread: Option<std::thread::JoinHandle<[Sha256; 2]>>,
    /// Set when a chunk could not be handed over (the thread is gone).
    lost: std::cell::Cell<bool>,
}

impl HashWorker {
    /// The worker, or `None` when no thread can be started.
    fn start() -> Option<Self> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<u8>)>(4);
        let (back_tx, back) = std::sync::mpsc::sync_channel::<Vec<u8>>(6);
        let thread = std::thread::Builder::new()
            .name("gpumeter-sha256".into())
            .stack_size(64 << 10)
            .spawn(move || {
                let mut h = [Sha256::new(), Sha256::new()];
                for (which, buf) in rx {
                    if let Some(h) = h.get_mut(which) {
                        h.update(&buf);
                    }
                    let _ = back_tx.try_send(buf);
                }
                h
            })
            .ok()?;
        Some(HashWorker {
            tx: Some(tx),
            back,
            thread: Some(thread),
            lost: std::cell::Cell::new(false),
        })
    }

    /// Hands a copy of `bytes` to the digest of stream `which`.
    fn feed(&self, which: usize, bytes: &[u8]) {
        let mut buf = self.back.try_recv().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(bytes);
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send((which, buf)).is_ok());
        if !sent {
            self.lost.set(true);
        }
    }

    /// Both digests once every chunk is hashed; `None` when a chunk was lost.
    fn finish(mut self) -> Option<[Sha256; 2]> {
        drop(self.tx.take());
        let digests = self.thread.take()?.join().ok()?;
        (!self.lost.get()).then_some(digests)
    }
}

/// Where a [`Tally`] sends what it reads to be hashed.
enum Sink<'w> {
    /// Hashed on the reading thread.
    Inline(Sha256),
    /// Hashed by the worker, as its stream 0 or 1.
    Worker(&'w HashWorker, usize),
}

impl Sink<'_> {
    /// The digest so far when hashed inline, else the worker's stream to ask for it.
    fn detach(self) -> Result<Sha256, usize> {
        match self {
            Sink::Inline(h) => Ok(h),
            Sink::Worker(_, which) => Err(which),
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            Sink::Inline(h) => h.update(bytes),
            Sink::Worker(w, which) => w.feed(*which, bytes),
        }
    }
}

/// A reader that hashes (SHA-256, through its [`Sink`]) and counts what is read through it,
/// refuses to read more than `limit` bytes (`over` is then set), and keeps the first I/O error
/// of the reader under it (handing up a copy), so that the caller can tell a read or gzip
/// fault from a JSON one.
struct Tally<'w, R> {
    inner: R,
    read: u64,
    limit: u64,
    over: bool,
    sink: Sink<'w>,
    error: Option<std::io::Error>,
}

impl<'w, R: Read> Tally<'w, R> {
    fn new(inner: R, limit: u64, sink: Sink<'w>) -> Self {
        Tally {
            inner,
            read: 0,
            limit,
            over: false,
            sink,
            error: None,
        }
    }
}

impl<R: Read> Read for Tally<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.over {
            return Err(std::io::Error::other("over the decompressed size limit"));
        }
        // At most one byte over the limit, to tell "exactly at the limit" from "over".
        let room = self.limit.saturating_add(1).saturating_sub(self.read);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        match self.inner.read(&mut buf[..want]) {
            Ok(n) => {
                self.read += n as u64;
                if self.read > self.limit {
                    self.over = true;
                    return Err(std::io::Error::other("over the decompressed size limit"));
                }
                self.sink.update(&buf[..n]);
                Ok(n)
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                let copy = std::io::Error::new(e.kind(), e.to_string());
                self.error.get_or_insert(e);
                Err(copy)
            }
        }
    }
}

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

#[cfg(feature = "nsys")]
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

/// Opens SQLite bytes as a read-only in-memory database with the guards of a file (nsys module
/// docs).
#[cfg(feature = "nsys")]
fn open_sqlite_bytes(path: &Path, bytes: &[u8]) -> Result<nsys::Export, ImportError> {
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
    // An in-memory database cannot be in WAL mode (header bytes 18 and 19 = 2: SQLite answers
    // "unable to open"), but a WAL-mode file read alone holds all its content, as `import_path`
    // reads it (immutable): the copy SQLite makes is marked rollback-mode (1, 1) instead.
    let wal = bytes.starts_with(SQLITE_MAGIC) && bytes.get(18..20) == Some(&[2, 2][..]);
    let (head, tail) = if wal {
        (&bytes[..18], &bytes[20..])
    } else {
        (bytes, &[][..])
    };
    let mode: &[u8] = if wal { &[1, 1] } else { &[] };
    conn.deserialize_read_exact(
        rusqlite::MAIN_DB,
        head.chain(mode).chain(tail),
        bytes.len(),
        true,
    )
    .map_err(sql_err("loading the database from memory"))?;
    nsys::Export::guard(path, conn, bytes.len() as u64)
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpumeter_core::DeviceInfo;
    use std::io::Write;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let _ = e.write_all(data);
        e.finish().unwrap_or_default()
    }

    #[test]
    fn decompressed_size_is_capped() {
        let text = br#"{"traceEvents": []}"#;
        let len = text.len() as u64;
        let path = Path::new("dir/bomb.json.gz");
        // Exactly at the limit: read whole.
        match load_kineto(path, "bomb.json.gz".into(), gz(text).as_slice(), len) {
            Ok(l) => assert_eq!(l.sha256, hex::encode(Sha256::digest(text))),
            Err(e) => panic!("unexpected error: {e}"),
        }
        // One byte over, also across gzip members: refused, naming the file and the limit.
        let mut two = gz(text);
        two.extend(gz(text));
        for (bytes, limit) in [(gz(text), len - 1), (two, 2 * len - 1)] {
            match load_kineto(path, "bomb.json.gz".into(), bytes.as_slice(), limit) {
                Err(e @ ImportError::DecompressedTooLarge { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains("dir/bomb.json.gz") && msg.contains(&limit.to_string()),
                        "{msg}"
                    );
                }
                Err(e) => panic!("expected DecompressedTooLarge, got {e}"),
                Ok(_) => panic!("expected DecompressedTooLarge, got a parse"),
            }
        }
        // A megabyte of zeros compresses to about a kilobyte.
        let zeros = gz(&vec![0u8; 1 << 20]);
        assert!(zeros.len() < 4096);
        assert!(matches!(
            load_kineto(path, "bomb.json.gz".into(), zeros.as_slice(), 1 << 16),
            Err(ImportError::DecompressedTooLarge { limit: 65_536, .. })
        ));
        assert_eq!(MAX_DECOMPRESSED_BYTES, 8 * 1024 * 1024 * 1024);
    }

    /// Item 3 of issue 30: a trace gzipped, gunzipped or re-gzipped (another compression
    /// level, several members) is one source: one identity, the SHA-256 of the text, and one
    /// device key, which names no file. (Before, the identity and the key were the file's
    /// bytes' and name's: `t.json.gz@<8 hex>#0`.)
    #[test]
    fn recompressed_copies_are_one_source_with_one_device_key() {
        let text = br#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0,
            "tid": 7, "ts": 1700000000000000, "dur": 5, "args": {"device": 0, "stream": 7,
            "correlation": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}}]}"#;
        let mut fast = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let _ = fast.write_all(text);
        let fast = fast.finish().unwrap_or_default();
        let mut members = gz(&text[..10]);
        members.extend(gz(&text[10..]));
        let want = hex::encode(Sha256::digest(text));
        let mut keys = Vec::new();
        for (name, bytes) in [
            ("t.json", text.to_vec()),
            ("t.json.gz", gz(text)),
            ("other-name.gz", fast),
            ("two-members.json.gz", members),
        ] {
            let l = load_bytes(name, &bytes, &ImportOptions::default()).expect("a trace");
            assert_eq!(l.sha256, want, "{name}: the identity is the content's");
            assert_eq!(
                l.file_sha256,
                hex::encode(Sha256::digest(&bytes)),
                "{name}: the bytes' digest is kept apart"
            );
            let key: Vec<String> = l.parsed.devices.iter().map(|d| d.key.clone()).collect();
            keys.push(key);
        }
        assert_eq!(keys[0], vec![format!("{}#0", &want[..16])]);
        assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
        assert_eq!(
            DeviceInfo::source_key(&gpumeter_core::source_label(&want), 0),
            keys[0][0]
        );
    }
}
