//! `.gmr`: gpumeter's recording of a CUPTI session.
//!
//! # Format (version 1)
//!
//! All integers are little-endian.
//!
//! ```text
//! file    = magic version frame*
//! magic   = "GPUMETER-GMR" 00 0D 0A 1A        (16 bytes; the last three catch text-mode
//!                                             line-ending conversions, as PNG's do)
//! version = u32                               (GMR_FORMAT_VERSION = 1)
//! frame   = type:u32 len:u64 payload:[len bytes] crc:u32
//!           crc = CRC-32 (IEEE, as zlib) of type ‖ len ‖ payload
//! ```
//!
//! The first frame is the [header](GmrHeader) (type 1, a JSON object). The others, in the order
//! they were written:
//!
//! | type | frame | payload |
//! |---|---|---|
//! | 1 | header | JSON [`GmrHeader`] |
//! | 2 | activity buffer | the raw bytes CUPTI handed over (`validSize` bytes) |
//! | 3 | string table | entries `ptr:u64 len:u32 utf8:[len]`: the producer's pointer values and the strings they pointed to, copied while the buffer was live |
//! | 4 | dropped records | `device:u32 context:u32 stream:u32 reserved:u32 count:u64` (device `u32::MAX` = unknown; count is a delta) |
//! | 5 | attribution event | `kind:u32 pid:u32 external_id:u64 timestamp_ns:u64 label_len:u32 label:[label_len]` |
//! | 6 | energy sample | `device:u32 reserved:u32 timestamp_ns:u64 energy_mj:u64` (cumulative counter) |
//! | 7 | end | empty: the producer closed the file cleanly |
//! | 8 | instruction counts | `correlation_id:u32 device:u32 context:u32 count:u32`, then `count` × (`warp_instructions:u64 name_len:u32 name:[name_len]`, UTF-8): the warp-level SASS instructions each function executed in one kernel-launch API call (instrumented mode, [`InstructionCounts`]) |
//! | 9 | PM samples | `device:u32 count:u32`, then `count` × 56 bytes: `flags:u32 reserved:u32 start_ns:u64 end_ns:u64 sm_active_cycles:u64 sm_elapsed_cycles:u64 dram_read_bytes:u64 dram_write_bytes:u64`; flags bit 0 overflow, bits 1–4 say which of the four counters are present (absent ones written 0, else malformed), other bits 0, `reserved` 0; the payload is exactly `8 + 56 × count` bytes ([`PmSamples`]) |
//! | 10 | operation counters | `device:u32 context:u32 passes:u32 count:u32`, then `count` × (`correlation_id:u32 metrics:u32`, then `metrics` × (`value:u64 name_len:u32 name:[name_len]`, UTF-8)): the raw values of CUPTI range-profiler metrics (`smsp__sass_thread_inst_executed_op_*`, `sm__ops_path_tensor_*`) of one context's kernel launches, each by its launch's correlation id; `passes` the replay passes the configuration needed (0: not known); correlation ids nonzero and not repeated in a frame, metric names nonempty and not repeated in an entry; the payload ends with the last entry ([`OpCounters`]) |
//!
//! Fixed-size payloads may grow in later versions: a reader takes the fields it knows from the
//! front and ignores the rest (for type 8, bytes after the `count` functions; type 9 is the
//! exception: its length must match its count, and its unknown flag bits must be 0, so that a
//! later version adds fields with a new frame type rather than silently; so is type 10). Frame types it does
//! not know are skipped and counted when their checksum is right (forward compatibility: a
//! reader older than type 9 counts PM-sample frames in [`GmrFile::unknown_frames`] and reads
//! the rest of the recording as before).
//!
//! # Damage
//!
//! A producer killed mid-write leaves a *torn* last frame: a header, payload or checksum cut
//! short by the end of the file, or a final frame whose checksum does not match. The reader
//! keeps every frame before it and reports the tear ([`GmrFile::torn`]); a file without an end
//! frame is reported as unfinished ([`GmrFile::finished`]). A checksum mismatch with more bytes
//! after the frame is corruption: none of its fields can be trusted, its length included, so
//! reading resumes at the first frame whose checksum is right after it (found by scanning, with
//! a bound on the work), and everything between is one damaged region; when no such frame
//! follows, the rest of the file is damaged. A frame whose checksum is right but whose payload
//! does not parse (a string that is not UTF-8, a payload too short for its type) is malformed:
//! it is lost and reading goes on. Every such frame or region is listed in
//! [`GmrFile::damaged`] with its bytes, so that a reader can count the records it held
//! (records in a torn or corrupt frame are loss, counted; never silence). A damaged
//! header frame is always an error: nothing after it can be trusted.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use serde::{Deserialize, Serialize};

pub use gpumeter_cupti::strings::StringTable;

/// The 16 bytes every `.gmr` file starts with.
pub const GMR_MAGIC: [u8; 16] = *b"GPUMETER-GMR\0\r\n\x1a";
/// The format version this crate writes and reads.
pub const GMR_FORMAT_VERSION: u32 = 1;
/// Bytes before the first frame: magic and version.
pub const GMR_PREAMBLE_LEN: usize = 20;
/// Bytes of a frame besides its payload: type (4), length (8), checksum (4).
pub const FRAME_OVERHEAD: usize = 16;
/// `device` value of a [`DroppedRecords`] frame whose device is unknown.
pub const UNKNOWN_DEVICE: u32 = u32::MAX;

pub(crate) const T_HEADER: u32 = 1;
pub(crate) const T_BUFFER: u32 = 2;
pub(crate) const T_STRINGS: u32 = 3;
pub(crate) const T_DROPPED: u32 = 4;
pub(crate) const T_ATTRIBUTION: u32 = 5;
pub(crate) const T_ENERGY: u32 = 6;
pub(crate) const T_END: u32 = 7;
pub(crate) const T_INSTRUCTIONS: u32 = 8;
pub(crate) const T_PM_SAMPLES: u32 = 9;
pub(crate) const T_OP_COUNTS: u32 = 10;
/// The last frame type this crate knows (resynchronization after corruption accepts
/// `T_BUFFER..=T_LAST`).
pub(crate) const T_LAST: u32 = T_OP_COUNTS;

/// Bytes of one sample in a PM-samples frame (type 9).
pub const PM_SAMPLE_LEN: usize = 56;
/// PM-sample flag: CUPTI reported a hardware-buffer overflow before this sample.
pub const PM_FLAG_OVERFLOW: u32 = 1 << 0;
/// PM-sample flag: `sm_active_cycles` is present.
pub const PM_FLAG_SM_ACTIVE: u32 = 1 << 1;
/// PM-sample flag: `sm_elapsed_cycles` is present.
pub const PM_FLAG_SM_ELAPSED: u32 = 1 << 2;
/// PM-sample flag: `dram_read_bytes` is present.
pub const PM_FLAG_DRAM_READ: u32 = 1 << 3;
/// PM-sample flag: `dram_write_bytes` is present.
pub const PM_FLAG_DRAM_WRITE: u32 = 1 << 4;
/// Every flag bit a version-1 reader knows; any other set bit makes the frame malformed.
pub const PM_FLAGS_KNOWN: u32 = PM_FLAG_OVERFLOW
    | PM_FLAG_SM_ACTIVE
    | PM_FLAG_SM_ELAPSED
    | PM_FLAG_DRAM_READ
    | PM_FLAG_DRAM_WRITE;

/// A `.gmr` that cannot be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GmrError {
    /// Writing failed, or reading from a `Read` failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with [`GMR_MAGIC`] (or is shorter than the 20-byte preamble).
    #[error("not a .gmr recording (no GPUMETER-GMR magic)")]
    NotGmr,
    /// The format version is not one this crate reads.
    #[error(".gmr format version {0} is not supported (this build reads version 1)")]
    UnsupportedFormatVersion(u32),
    /// The header frame is missing, torn, fails its checksum, or is not a valid header.
    #[error(".gmr header at byte {offset}: {reason}")]
    BadHeader {
        /// Byte offset of the header frame.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A frame before the last fails its checksum, or a frame follows the end frame.
    #[error(".gmr frame #{index} (type {frame_type}) at byte {offset}: {reason}")]
    CorruptFrame {
        /// Byte offset of the frame.
        offset: u64,
        /// 0-based index of the frame (the header is #0).
        index: usize,
        /// The frame's type field as read.
        frame_type: u32,
        /// What is wrong.
        reason: String,
    },
    /// A frame's checksum is right but its payload does not parse (e.g. a string-table entry
    /// that runs past the payload, or is not UTF-8).
    #[error(".gmr frame #{index} (type {frame_type}) at byte {offset}: bad payload: {reason}")]
    BadPayload {
        /// Byte offset of the frame.
        offset: u64,
        /// 0-based index of the frame.
        index: usize,
        /// The frame's type.
        frame_type: u32,
        /// What is wrong.
        reason: String,
    },
    /// The header could not be serialized, or a string is too long for its length field.
    #[error("cannot write .gmr: {0}")]
    Write(String),
}

mod frames;
mod parse;
mod reader;
mod writer;

pub use self::frames::*;
pub(crate) use self::parse::parse_payload;
pub(crate) use self::reader::{cut, Cut};
pub use self::reader::{
    read_gmr, read_gmr_from, Damage, DamagedFrame, GmrFile, TornFrame, TornReason,
};
pub use self::writer::GmrWriter;

/// Tells whether bytes start like a `.gmr` (the 16-byte magic).
pub fn is_gmr(head: &[u8]) -> bool {
    head.starts_with(&GMR_MAGIC)
}

fn frame_crc(frame_type: u32, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&frame_type.to_le_bytes());
    h.update(&(payload.len() as u64).to_le_bytes());
    h.update(payload);
    h.finalize()
}

#[cfg(test)]
mod tests;
