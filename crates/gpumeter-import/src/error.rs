//! The one error type of the importers (typed errors name the file, the record and
//! the field).

use std::fmt;
use std::path::PathBuf;

/// Where in a source a faulty value sits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordLocation {
    /// A top-level key of a Kineto JSON file (e.g. `baseTimeNanoseconds`).
    TopLevel,
    /// The event at this 0-based index of a Kineto file's `traceEvents` array.
    TraceEvent(usize),
    /// The entry at this 0-based index of a Kineto file's `deviceProperties` array.
    DeviceProperties(usize),
    /// A row of an Nsight Systems SQLite table, by SQLite `rowid`.
    Row {
        /// Table name, e.g. `CUPTI_ACTIVITY_KIND_KERNEL`.
        table: String,
        /// The row's SQLite `rowid`.
        rowid: i64,
    },
}

impl fmt::Display for RecordLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordLocation::TopLevel => write!(f, "top level"),
            RecordLocation::TraceEvent(i) => write!(f, "traceEvents[{i}]"),
            RecordLocation::DeviceProperties(i) => write!(f, "deviceProperties[{i}]"),
            RecordLocation::Row { table, rowid } => write!(f, "{table} rowid {rowid}"),
        }
    }
}

/// A file-level fault: the file is unreadable, truncated, not a trace, or holds a value that
/// cannot be a valid record field. Record-level faults (a negative duration, a zero timestamp)
/// are not errors: they are counted as loss in the meter.
///
/// Every variant names the file (`path`: the path given to [`crate::import_path`], or the
/// name given to [`crate::import_bytes`]). When an import returns an error, the meter it was
/// given is untouched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file starts with the gzip magic bytes but does not decompress: truncated or corrupt.
    #[error("{}: truncated or corrupt gzip: {source}", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// The decompressor's error.
        #[source]
        source: std::io::Error,
    },
    /// A gzip input decompresses to more than `limit` bytes
    /// ([`crate::MAX_DECOMPRESSED_BYTES`]): refused before it can exhaust memory (a "gzip
    /// bomb").
    #[error(
        "{}: gzip content decompresses to more than {limit} bytes (the import limit)",
        path.display()
    )]
    DecompressedTooLarge {
        /// The file.
        path: PathBuf,
        /// The limit, in decompressed bytes.
        limit: u64,
    },
    /// The file is valid JSON but not a Kineto trace (no `traceEvents` array, top level not an
    /// object).
    #[error("{}: not a Kineto / PyTorch-profiler trace: {reason}", path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What is missing or wrong.
        reason: String,
    },
    /// The file (after gzip decompression, if compressed) is not valid JSON, or a trace event
    /// is not a JSON object of the expected shape.
    #[error("{}:{line}:{column}: invalid JSON: {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line in the (decompressed) JSON text.
        line: usize,
        /// 1-based column (byte) in that line.
        column: usize,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A field of a GPU record, device entry or session table has a value that cannot be
    /// right: not a number, out of range, missing where required, or a time before 1970 or
    /// after 2554 (outside `u64` ns since the Unix epoch).
    #[error("{}: {record}: field `{field}` = `{value}`: {reason}", path.display())]
    BadField {
        /// The file.
        path: PathBuf,
        /// Which record.
        record: RecordLocation,
        /// The field's name as the source spells it (`ts`, `args.bytes`, `gridX`, …).
        field: &'static str,
        /// The value's text (shortened to 80 characters), empty when the field is missing.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A top-level key of a Kineto trace is given twice (`traceEvents`, say): which one holds
    /// is ambiguous, and reading both would meter the events twice.
    #[error("{}: the top-level key `{key}` is given twice", path.display())]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// The key (shortened to 80 characters).
        key: String,
    },
    /// SQLite could not open or read the file (not a database, corrupt, unreadable table).
    /// Only with the Cargo feature `nsys`.
    #[cfg(feature = "nsys")]
    #[error("{}: SQLite error while {context}: {source}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// What the importer was doing (`opening`, `reading CUPTI_ACTIVITY_KIND_KERNEL`, …).
        context: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// An Nsight Systems table lacks a column the importer needs (e.g. `start`).
    #[error("{}: table {table} has no column `{column}`", path.display())]
    MissingColumn {
        /// The file.
        path: PathBuf,
        /// The table.
        table: String,
        /// The missing column.
        column: String,
    },
    /// A SQLite file with none of the CUPTI activity tables (`CUPTI_ACTIVITY_KIND_KERNEL`,
    /// `_MEMCPY`, `_MEMSET`) and no `TARGET_INFO_*` table: not an Nsight Systems export.
    #[error(
        "{}: not an Nsight Systems export: no CUPTI_ACTIVITY_KIND_KERNEL/MEMCPY/MEMSET \
         and no TARGET_INFO_* tables",
        path.display()
    )]
    NoActivityTables {
        /// The file.
        path: PathBuf,
    },
    /// The input is in a format this build leaves out: an Nsight Systems export (`nsys`)
    /// without the Cargo feature `nsys`. The file may be good; the build cannot read it.
    #[error(
        "{}: this is a {format} input, which this build does not read: build with the Cargo \
         feature `{feature}`",
        path.display()
    )]
    FormatNotEnabled {
        /// The file.
        path: PathBuf,
        /// The format the file was detected or named as (`nsys`).
        format: &'static str,
        /// The Cargo feature that reads it (`nsys`, of gpumeter-import and of gpumeter).
        feature: &'static str,
    },
    /// `--format auto` could not tell the format from the file's first bytes or its name.
    #[error(
        "{}: unknown input format (neither gzip, JSON nor SQLite); pass --format",
        path.display()
    )]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The input is too large to import from memory (SQLite in-memory databases are limited
    /// to 2 GiB); import it from a path instead.
    #[error("{}: {len} bytes is too large to import from memory", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        len: usize,
    },
    /// A device catalog (`--devices FILE`) is not valid: TOML syntax, unknown keys, bad values
    /// or duplicate entries.
    #[error("{}: device catalog: {reason}", path.display())]
    Catalog {
        /// The catalog file.
        path: PathBuf,
        /// What is wrong, naming the entry.
        reason: String,
    },
    /// A tenant map (`--tenant-map FILE`) is not valid: TOML syntax, an unknown table, a key
    /// that is not a decimal id, or a value that is not a tenant name.
    #[error("{}: tenant map: {reason}", path.display())]
    TenantMap {
        /// The tenant-map file.
        path: PathBuf,
        /// What is wrong, naming the table and key.
        reason: String,
    },
}

/// Shortens a value's text for an error message.
pub(crate) fn shorten(text: &str) -> String {
    const MAX: usize = 80;
    if text.chars().count() <= MAX {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(MAX).collect();
        s.push('…');
        s
    }
}
