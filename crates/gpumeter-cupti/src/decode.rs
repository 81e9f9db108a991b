//! The decoder: a pure-Rust walk of a CUPTI activity buffer.
//!
//! A buffer is what CUPTI hands to its buffer-completed callback: `validSize` bytes of records
//! back to back. Each record starts with its 4-byte little-endian `CUpti_ActivityKind`; its size
//! is fixed per kind by the producer's API version ([`ApiVersion`], [`crate::layout`]). The walk:
//!
//! * reads every field with `from_le_bytes` on a copied sub-slice, so a buffer may start at any
//!   address (no alignment is assumed, nothing is cast);
//! * never dereferences a pointer read from the bytes: pointer fields (`name`, `source`,
//!   `overheadData`) are kept as `u64` values, to be looked up in a `.gmr` string table;
//! * decodes the kinds gpumeter uses into [`Record`]s, and steps over every other kind the
//!   version defines (its size is known) as [`Record::Other`], counted in
//!   [`Decoded::skipped`] by kind name;
//! * stops with [`DecodeError::UnknownKind`] at a kind value the version does not define: its
//!   size is unknown, so the walk cannot go on (libcupti's own `cuptiActivityGetNextRecord`
//!   answers `CUPTI_ERROR_INVALID_KIND` there too);
//! * treats a kind of 0 (`CUPTI_ACTIVITY_KIND_INVALID`) followed only by zero bytes as the
//!   unused, zeroed tail of a buffer saved whole rather than at `validSize`
//!   ([`Decoded::trailing_zero_bytes`]); a kind of 0 with anything else after it is
//!   [`DecodeError::InvalidKind`];
//! * reports a record that does not fit in the bytes left as [`DecodeError::Truncated`] with
//!   its byte offset.
//!
//! The decoder never panics, whatever the bytes (fuzzed: `fuzz/`).

use std::collections::BTreeMap;
use std::fmt;

use crate::kind::ActivityKind;
use crate::layout::ApiVersion;

mod read;
mod records;

use self::read::decode_record;
pub(crate) use self::read::Rec;
pub use self::records::*;

/// A buffer that cannot be walked. Offsets are bytes from the start of the buffer given to
/// [`decode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The producer's `CUPTI_API_VERSION` has no layout tables here (supported: 26 for CUDA
    /// 12.8, 130001 for CUDA 13.0 and 130401 for CUDA 13.4).
    #[error(
        "CUPTI API version {0} is not supported (supported: 26 = CUDA 12.8, 130001 = CUDA 13.0, \
         130401 = CUDA 13.4)"
    )]
    UnsupportedApiVersion(u32),
    /// A record runs past the end of the buffer.
    #[error(
        "truncated record at byte {offset}: {} needs {needed} bytes, {available} left",
        match kind { Some(k) => k.to_string(), None => "the kind field".to_string() }
    )]
    Truncated {
        /// Offset of the record's first byte.
        offset: usize,
        /// The record's kind, `None` when not even the 4-byte kind fits.
        kind: Option<ActivityKind>,
        /// Bytes the record needs (its size, or 4 for the kind).
        needed: usize,
        /// Bytes left in the buffer from `offset`.
        available: usize,
    },
    /// A kind value the producer's CUPTI version does not define: its size is unknown, so the
    /// walk cannot continue.
    #[error("unknown activity kind {kind} at byte {offset} for {api}")]
    UnknownKind {
        /// Offset of the record's first byte.
        offset: usize,
        /// The kind value read.
        kind: u32,
        /// The API version whose tables were used.
        api: ApiVersion,
    },
    /// A record of kind 0 (`CUPTI_ACTIVITY_KIND_INVALID`) followed by non-zero bytes.
    #[error("invalid activity kind 0 at byte {offset}, followed by non-zero bytes")]
    InvalidKind {
        /// Offset of the record's first byte.
        offset: usize,
    },
    /// A field holds a value no real record can have (e.g. a negative grid dimension).
    #[error("{kind} record at byte {offset}: field `{field}` = {value}: {reason}")]
    BadField {
        /// Offset of the record's first byte.
        offset: usize,
        /// The record's kind.
        kind: ActivityKind,
        /// The field's name in the CUPTI header struct (`gridX`).
        field: &'static str,
        /// The value read.
        value: i64,
        /// Why it was refused.
        reason: &'static str,
    },
}

impl ApiVersion {
    /// The version for a producer's `CUPTI_API_VERSION` (`cuptiGetVersion()`).
    ///
    /// CUDA 13.0's first release (API 130000, `nvidia-cuda-cupti` 13.0.48) emits the same record
    /// structs as its Update 1 (130001): checked against both headers and libcupti's own record
    /// sizes, so both map to [`ApiVersion::Cupti13_0`].
    ///
    /// # Errors
    /// [`DecodeError::UnsupportedApiVersion`] for anything but 26, 130000, 130001 and 130401.
    pub fn from_cupti(version: u32) -> Result<Self, DecodeError> {
        match version {
            26 => Ok(ApiVersion::Cupti12_8),
            130_000 | 130_001 => Ok(ApiVersion::Cupti13_0),
            130_401 => Ok(ApiVersion::Cupti13_4),
            other => Err(DecodeError::UnsupportedApiVersion(other)),
        }
    }
}

/// A walked buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The version whose layouts were used.
    pub api: ApiVersion,
    /// Every record, in buffer order.
    pub records: Vec<LocatedRecord>,
    /// Records of kinds stepped over ([`Record::Other`]), by lower-case kind name
    /// (`marker`, `synchronization`).
    pub skipped: BTreeMap<&'static str, u64>,
    /// Zero bytes after the last record (a buffer saved whole rather than at `validSize`).
    pub trailing_zero_bytes: usize,
}

impl fmt::Display for Decoded {
    /// `N records (CUPTI 12.8 (API 26))`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} records ({})", self.records.len(), self.api)
    }
}

/// Walks a buffer of CUPTI activity records laid out by the producer's API version `api`.
///
/// `buf` holds the `validSize` bytes CUPTI handed over, at any alignment.
///
/// ```
/// use gpumeter_cupti::{decode, ActivityKind, ApiVersion, Record};
/// // A 12.8 RUNTIME record (`CUpti_ActivityAPI`, 40 bytes): kind 5, processId 4242 at 24.
/// let mut rec = [0u8; 40];
/// rec[0..4].copy_from_slice(&5u32.to_le_bytes());
/// rec[24..28].copy_from_slice(&4242u32.to_le_bytes());
/// let d = decode(&rec, ApiVersion::Cupti12_8)?;
/// assert_eq!(d.records[0].kind, ActivityKind::RUNTIME);
/// assert!(matches!(&d.records[0].record, Record::Api(a) if a.process_id == 4242));
/// # Ok::<(), gpumeter_cupti::DecodeError>(())
/// ```
///
/// # Errors
/// [`DecodeError::Truncated`] for a record that runs past the end, [`DecodeError::UnknownKind`]
/// for a kind the version does not define, [`DecodeError::InvalidKind`] for a kind-0 record
/// that is not a zeroed tail. Everything up to the fault is discarded: a buffer decodes whole or
/// not at all.
pub fn decode(buf: &[u8], api: ApiVersion) -> Result<Decoded, DecodeError> {
    match decode_prefix(buf, api) {
        (d, None) => Ok(d),
        (_, Some(e)) => Err(e),
    }
}

/// Counts `record` under its category in `skipped` when it is of a kind the meter steps over
/// ([`ActivityKind::category`]); any other record counts nothing.
pub fn count_skipped(record: &Record, skipped: &mut BTreeMap<&'static str, u64>) {
    if let Record::Other(k) = record {
        if let Some(cat) = k.category() {
            *skipped.entry(cat).or_insert(0) += 1;
        }
    }
}

/// As [`decode`], but keeps what decodes before a fault: the records up to it, and the fault
/// (`None` when the whole buffer decodes). For a buffer whose bytes are known to be what the
/// producer wrote (a `.gmr` frame whose checksum is right), the records before the fault are
/// sound; the fault ends the walk because the size of what follows is unknown.
pub fn decode_prefix(buf: &[u8], api: ApiVersion) -> (Decoded, Option<DecodeError>) {
    let mut walk = Walk::new(buf, api);
    let mut out = Decoded {
        api,
        records: Vec::new(),
        skipped: BTreeMap::new(),
        trailing_zero_bytes: 0,
    };
    for rec in walk.by_ref() {
        let rec = match rec {
            Ok(r) => r,
            Err(e) => return (out, Some(e)),
        };
        count_skipped(&rec.record, &mut out.skipped);
        out.records.push(rec);
    }
    out.trailing_zero_bytes = walk.trailing_zero_bytes();
    (out, None)
}

/// The walk behind [`decode`] as an iterator: one record at a time, without collecting (for
/// streaming consumers). Yields `Err` once at the first fault, then ends.
///
/// ```
/// use gpumeter_cupti::{ApiVersion, Walk};
/// let mut rec = [0u8; 40];
/// rec[0..4].copy_from_slice(&5u32.to_le_bytes()); // RUNTIME, `CUpti_ActivityAPI`
/// let mut walk = Walk::new(&rec, ApiVersion::Cupti12_8);
/// assert_eq!(walk.next().map(|r| r.map(|r| r.offset)), Some(Ok(0)));
/// assert!(walk.next().is_none());
/// ```
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    buf: &'a [u8],
    api: ApiVersion,
    offset: usize,
    trailing_zero_bytes: usize,
    done: bool,
}

impl<'a> Walk<'a> {
    /// A walk of `buf` (any alignment) with the layouts of `api`.
    pub fn new(buf: &'a [u8], api: ApiVersion) -> Self {
        Walk {
            buf,
            api,
            offset: 0,
            trailing_zero_bytes: 0,
            done: false,
        }
    }

    /// Zero bytes found after the last record (valid once the walk has ended without error).
    pub fn trailing_zero_bytes(&self) -> usize {
        self.trailing_zero_bytes
    }

    fn step(&mut self) -> Option<Result<LocatedRecord, DecodeError>> {
        let offset = self.offset;
        match locate(self.buf, offset, self.api) {
            Ok(Step::End {
                trailing_zero_bytes,
            }) => {
                self.trailing_zero_bytes = trailing_zero_bytes;
                None
            }
            Ok(Step::Record { kind, bytes }) => {
                let size = bytes.len();
                self.offset = offset + size;
                Some(Ok(LocatedRecord {
                    offset,
                    kind,
                    size,
                    record: decode_record(Rec(bytes), kind, self.api),
                }))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

/// What lies at one offset of a buffer: the end of the records, or the next record.
pub(crate) enum Step<'a> {
    /// No record left; the rest of the buffer (possibly nothing) is this many zero bytes.
    End {
        /// Zero bytes from the offset to the end of the buffer.
        trailing_zero_bytes: usize,
    },
    /// A record of `kind`; `bytes` are exactly its size in the producer's version.
    Record {
        /// The record's kind.
        kind: ActivityKind,
        /// The record's bytes.
        bytes: &'a [u8],
    },
}

/// The record boundary at `offset` of `buf` with the layouts of `api`: every walk of a buffer
/// ([`Walk`], [`crate::columns`]) steps by this one function, so they find the same records
/// and fail with the same [`DecodeError`] at the same byte.
#[inline]
pub(crate) fn locate(buf: &[u8], offset: usize, api: ApiVersion) -> Result<Step<'_>, DecodeError> {
    let rest = buf.get(offset..).unwrap_or(&[]);
    let available = rest.len();
    let Some(head) = rest.get(0..4) else {
        if rest.iter().all(|&b| b == 0) {
            return Ok(Step::End {
                trailing_zero_bytes: available,
            });
        }
        return Err(DecodeError::Truncated {
            offset,
            kind: None,
            needed: 4,
            available,
        });
    };
    let raw_kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    if raw_kind == 0 {
        if rest.iter().all(|&b| b == 0) {
            return Ok(Step::End {
                trailing_zero_bytes: available,
            });
        }
        return Err(DecodeError::InvalidKind { offset });
    }
    let kind = ActivityKind(raw_kind);
    let Some(size) = api.record_size(kind) else {
        return Err(DecodeError::UnknownKind {
            offset,
            kind: raw_kind,
            api,
        });
    };
    match rest.get(..size) {
        Some(bytes) => Ok(Step::Record { kind, bytes }),
        None => Err(DecodeError::Truncated {
            offset,
            kind: Some(kind),
            needed: size,
            available,
        }),
    }
}

impl Iterator for Walk<'_> {
    type Item = Result<LocatedRecord, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_lies_inside_its_record() {
        for api in ApiVersion::ALL {
            for kl in api.layouts() {
                assert_eq!(kl.size % 8, 0, "{api} {}", kl.struct_name);
                for f in &kl.fields {
                    assert!(
                        f.offset + f.width <= kl.size,
                        "{api} {}.{}",
                        kl.struct_name,
                        f.name
                    );
                }
                if !kl.fields.is_empty() {
                    assert_eq!(kl.fields[0].name, "kind");
                    assert_eq!((kl.fields[0].offset, kl.fields[0].width), (0, 4));
                }
            }
        }
    }

    #[test]
    fn uuid_format() {
        let u = [
            0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09, 0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff,
            0x6f, 0x88,
        ];
        assert_eq!(format_uuid(&u), "74e128b2-90b6-b409-07c8-33bee5ff6f88");
    }
}
