//! Kernel records straight into columns: the batch decoder of the hot path (issue 34, item 1).
//!
//! [`decode()`](crate::decode()) builds one typed [`Record`](crate::Record) per record, which the
//! meter then converts again; this module walks the same buffer with the same boundaries
//! (the common case, a sized kind whose record is whole, inline; everything else through the
//! step [`Walk`](crate::Walk) uses, so the same records are found and the same
//! [`DecodeError`] is returned at the same byte) but writes only the KERNEL and
//! CONCURRENT_KERNEL records, and only the fields the meter reads, into a struct of arrays,
//! [`KernelColumns`]. Records of every other kind are stepped over by their size and counted
//! by kind ([`BufferCounts`]), so a caller can still account for every record.
//! [`BufferColumns`] is the same walk filling, besides the kernel columns, the copies, memsets,
//! API and external-correlation records the meter and its joins read ([`decode_buffer_columns`]).
//!
//! * The field offsets are the layout tables of [`crate::layout`] (`CUpti_ActivityKernel9` for
//!   12.8, `Kernel10` for 13.0, `Kernel13` for 13.4), read through the same bounds-checked
//!   little-endian reader as the typed decoder: any alignment, no pointer dereferenced.
//! * Nothing is allocated per record: the columns are reserved once per buffer for the most
//!   kernel records it could hold and keep their capacity across buffers ([`KernelColumns::clear`]
//!   then [`KernelColumns::extend_from_buffer`], or [`decode_kernel_columns`]).
//! * A buffer decodes whole or not at all: on an error the columns are cut back to the rows they
//!   had before the call.
//!
//! ```
//! use gpumeter_cupti::{decode_kernel_columns, ActivityKind, ApiVersion, KernelColumns};
//!
//! let api = ApiVersion::Cupti12_8;
//! let layout = |k| api.layouts().into_iter().find(|l| l.kind == k).expect("a layout");
//! let mut buf = layout(ActivityKind::CONCURRENT_KERNEL)
//!     .encode(&[("start", 1_000), ("end", 3_000), ("gridX", 264), ("streamId", 7)])
//!     .map_err(|e| e.to_string())?;
//! buf.extend(layout(ActivityKind::RUNTIME).encode(&[]).map_err(|e| e.to_string())?);
//!
//! let mut cols = KernelColumns::new();
//! let counts = decode_kernel_columns(&buf, api, &mut cols).map_err(|e| e.to_string())?;
//! assert_eq!((cols.len(), counts.kernels), (1, 1));
//! assert_eq!((cols.start_ns[0], cols.end_ns[0], cols.stream_id[0]), (1_000, 3_000, 7));
//! assert_eq!(cols.grid[0], [264, 0, 0]);
//! assert_eq!(counts.skipped.get(ActivityKind::RUNTIME), 1);
//! # Ok::<(), String>(())
//! ```

use crate::decode::{locate, DecodeError, KernelRecord, Rec, Step};
use crate::kind::ActivityKind;
use crate::layout::{ApiVersion, KernelLayout};

/// Kind values counted by [`KindCounts`]: every supported version defines kinds below 64 only
/// (13.4 ends at GREEN_CONTEXT, 59), and a kind without a size stops the walk before it is
/// counted.
const KIND_SLOTS: usize = 64;

/// The kernel records of one or more buffers as columns, one row per record in buffer order:
/// row `i` of every column is the same record. Times are ns on CUPTI's clock, as in
/// [`KernelRecord`]; each column is named after the header member it holds
/// (`CUpti_ActivityKernel9` … `13`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelColumns {
    /// `start`: execution start, ns.
    pub start_ns: Vec<u64>,
    /// `end`: execution end, ns.
    pub end_ns: Vec<u64>,
    /// `deviceId`: CUDA device ordinal.
    pub device_id: Vec<u32>,
    /// `contextId`.
    pub context_id: Vec<u32>,
    /// `streamId`.
    pub stream_id: Vec<u32>,
    /// `correlationId`: joins the API record that launched the kernel.
    pub correlation_id: Vec<u32>,
    /// `gridX`, `gridY`, `gridZ`: grid dimensions in blocks, signed as in the header (a
    /// negative value is the consumer's to refuse, as `join::kernel_launch` does).
    pub grid: Vec<[i32; 3]>,
    /// `blockX`, `blockY`, `blockZ`: block dimensions in threads, signed as in the header.
    pub block: Vec<[i32; 3]>,
    /// `registersPerThread`.
    pub registers_per_thread: Vec<u16>,
    /// `staticSharedMemory`: static shared memory per block, bytes (signed as in the header).
    pub static_shared_memory_bytes: Vec<i32>,
    /// `dynamicSharedMemory`: dynamic shared memory per block, bytes (signed as in the header).
    pub dynamic_shared_memory_bytes: Vec<i32>,
    /// `name`: the value of the producer's `const char *` (never dereferenced), the key the
    /// typed path looks up in the `.gmr` string table; 0 when absent.
    pub name_ptr: Vec<u64>,
    /// `graphNodeId`: 0 when not launched from a graph (part of a record's identity for the
    /// meter's duplicate rule).
    pub graph_node_id: Vec<u64>,
}

/// One row of [`KernelColumns`] as a value: what [`KernelColumns::row`] gives and what a
/// [`KernelRecord`] of the typed decoder reduces to ([`From`]), so the two can be compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelRow {
    /// `start`, ns.
    pub start_ns: u64,
    /// `end`, ns.
    pub end_ns: u64,
    /// `deviceId`.
    pub device_id: u32,
    /// `contextId`.
    pub context_id: u32,
    /// `streamId`.
    pub stream_id: u32,
    /// `correlationId`.
    pub correlation_id: u32,
    /// `gridX`, `gridY`, `gridZ`, blocks.
    pub grid: [i32; 3],
    /// `blockX`, `blockY`, `blockZ`, threads.
    pub block: [i32; 3],
    /// `registersPerThread`.
    pub registers_per_thread: u16,
    /// `staticSharedMemory`, bytes per block.
    pub static_shared_memory_bytes: i32,
    /// `dynamicSharedMemory`, bytes per block.
    pub dynamic_shared_memory_bytes: i32,
    /// `name` pointer value.
    pub name_ptr: u64,
    /// `graphNodeId`.
    pub graph_node_id: u64,
}

impl From<&KernelRecord> for KernelRow {
    /// The fields of a typed kernel record that [`KernelColumns`] keeps.
    fn from(k: &KernelRecord) -> Self {
        KernelRow {
            start_ns: k.start,
            end_ns: k.end,
            device_id: k.device_id,
            context_id: k.context_id,
            stream_id: k.stream_id,
            correlation_id: k.correlation_id,
            grid: k.grid,
            block: k.block,
            registers_per_thread: k.registers_per_thread,
            static_shared_memory_bytes: k.static_shared_memory,
            dynamic_shared_memory_bytes: k.dynamic_shared_memory,
            name_ptr: k.name_ptr,
            graph_node_id: k.graph_node_id,
        }
    }
}

/// Records counted by kind value (the kinds a walk stepped over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindCounts([u64; KIND_SLOTS]);

impl Default for KindCounts {
    fn default() -> Self {
        KindCounts([0; KIND_SLOTS])
    }
}

impl KindCounts {
    /// Records of `kind` counted (0 for a kind never seen).
    pub fn get(&self, kind: ActivityKind) -> u64 {
        self.0.get(kind.0 as usize).copied().unwrap_or(0)
    }

    /// Records counted, all kinds together.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `(kind, records)` for every kind counted at least once, in kind order.
    pub fn iter(&self) -> impl Iterator<Item = (ActivityKind, u64)> + '_ {
        self.0
            .iter()
            .enumerate()
            .filter(|&(_, &n)| n > 0)
            .map(|(k, &n)| (ActivityKind(k as u32), n))
    }

    fn add(&mut self, kind: ActivityKind) {
        // Every kind with a size is below KIND_SLOTS (checked by the tests for every version).
        if let Some(n) = self.0.get_mut(kind.0 as usize) {
            *n += 1;
        }
    }
}

/// What one buffer held: the rows it added to each family of columns, plus
/// [`BufferCounts::skipped`] records of the kinds with no columns; together every record of the
/// buffer ([`BufferCounts::records`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferCounts {
    /// KERNEL and CONCURRENT_KERNEL records: the rows added to the kernel columns.
    pub kernels: u64,
    /// MEMCPY and MEMCPY2 records: the rows added to [`BufferColumns::copies`] (always 0 from
    /// [`KernelColumns::extend_from_buffer`], which counts them in `skipped`).
    pub copies: u64,
    /// MEMSET records: the rows added to [`BufferColumns::sets`] (0 from [`KernelColumns`]).
    pub sets: u64,
    /// DRIVER, RUNTIME and INTERNAL_LAUNCH_API records: the rows added to
    /// [`BufferColumns::api`] (0 from [`KernelColumns`]).
    pub api_records: u64,
    /// EXTERNAL_CORRELATION records: the rows added to [`BufferColumns::external`] (0 from
    /// [`KernelColumns`]).
    pub external: u64,
    /// Records of every other kind, stepped over by their size, by kind.
    pub skipped: KindCounts,
    /// Zero bytes after the last record (a buffer saved whole rather than at `validSize`), as
    /// [`Decoded::trailing_zero_bytes`](crate::Decoded::trailing_zero_bytes).
    pub trailing_zero_bytes: usize,
}

impl BufferCounts {
    /// Every record of the buffer: the rows added and the records skipped.
    pub fn records(&self) -> u64 {
        self.kernels
            + self.copies
            + self.sets
            + self.api_records
            + self.external
            + self.skipped.total()
    }
}

impl KernelColumns {
    /// Empty columns.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows held (the length of every column).
    pub fn len(&self) -> usize {
        self.start_ns.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.start_ns.is_empty()
    }

    /// Drops every row, keeping the columns' capacity for the next buffer.
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Row `i` as a value, `None` past the end.
    pub fn row(&self, i: usize) -> Option<KernelRow> {
        Some(KernelRow {
            start_ns: *self.start_ns.get(i)?,
            end_ns: *self.end_ns.get(i)?,
            device_id: *self.device_id.get(i)?,
            context_id: *self.context_id.get(i)?,
            stream_id: *self.stream_id.get(i)?,
            correlation_id: *self.correlation_id.get(i)?,
            grid: *self.grid.get(i)?,
            block: *self.block.get(i)?,
            registers_per_thread: *self.registers_per_thread.get(i)?,
            static_shared_memory_bytes: *self.static_shared_memory_bytes.get(i)?,
            dynamic_shared_memory_bytes: *self.dynamic_shared_memory_bytes.get(i)?,
            name_ptr: *self.name_ptr.get(i)?,
            graph_node_id: *self.graph_node_id.get(i)?,
        })
    }

    /// Every row as a value, in order (for tests and diagnostics; the hot path reads the
    /// columns).
    pub fn rows(&self) -> impl Iterator<Item = KernelRow> + '_ {
        (0..self.len()).filter_map(|i| self.row(i))
    }

    /// Appends the kernel records of `buf` (the `validSize` bytes of one CUPTI activity
    /// buffer, any alignment, laid out by the producer's `api`) as rows, in buffer order;
    /// records of other kinds are stepped over and counted.
    ///
    /// # Errors
    /// The [`DecodeError`] [`decode()`](crate::decode()) returns for the same bytes
    /// ([`DecodeError::Truncated`], [`DecodeError::UnknownKind`], [`DecodeError::InvalidKind`]),
    /// at the same offset. The columns then hold exactly the rows they held before the call.
    pub fn extend_from_buffer(
        &mut self,
        buf: &[u8],
        api: ApiVersion,
    ) -> Result<BufferCounts, DecodeError> {
        let rows_before = self.len();
        let layout = api.tables().kernel;
        // At most one kernel per `layout.size` bytes: one reservation per buffer, none when the
        // columns already hold that capacity.
        self.reserve(buf.len() / layout.size.max(1));
        walk(buf, api, |kind, r, counts| {
            if kind == ActivityKind::CONCURRENT_KERNEL || kind == ActivityKind::KERNEL {
                self.push(r, &layout);
                counts.kernels += 1;
            } else {
                counts.skipped.add(kind);
            }
        })
        .inspect_err(|_| self.truncate(rows_before))
    }

    /// One kernel record's row, read at `l`'s offsets.
    #[inline]
    fn push(&mut self, r: Rec<'_>, l: &KernelLayout) {
        self.start_ns.push(r.u64(l.start));
        self.end_ns.push(r.u64(l.end));
        self.device_id.push(r.u32(l.device_id));
        self.context_id.push(r.u32(l.context_id));
        self.stream_id.push(r.u32(l.stream_id));
        self.correlation_id.push(r.u32(l.correlation_id));
        self.grid
            .push([r.i32(l.grid_x), r.i32(l.grid_y), r.i32(l.grid_z)]);
        self.block
            .push([r.i32(l.block_x), r.i32(l.block_y), r.i32(l.block_z)]);
        self.registers_per_thread
            .push(r.u16(l.registers_per_thread));
        self.static_shared_memory_bytes
            .push(r.i32(l.static_shared_memory));
        self.dynamic_shared_memory_bytes
            .push(r.i32(l.dynamic_shared_memory));
        self.name_ptr.push(r.u64(l.name_ptr));
        self.graph_node_id.push(r.u64(l.graph_node_id));
    }

    fn reserve(&mut self, rows: usize) {
        self.start_ns.reserve(rows);
        self.end_ns.reserve(rows);
        self.device_id.reserve(rows);
        self.context_id.reserve(rows);
        self.stream_id.reserve(rows);
        self.correlation_id.reserve(rows);
        self.grid.reserve(rows);
        self.block.reserve(rows);
        self.registers_per_thread.reserve(rows);
        self.static_shared_memory_bytes.reserve(rows);
        self.dynamic_shared_memory_bytes.reserve(rows);
        self.name_ptr.reserve(rows);
        self.graph_node_id.reserve(rows);
    }

    fn truncate(&mut self, rows: usize) {
        self.start_ns.truncate(rows);
        self.end_ns.truncate(rows);
        self.device_id.truncate(rows);
        self.context_id.truncate(rows);
        self.stream_id.truncate(rows);
        self.correlation_id.truncate(rows);
        self.grid.truncate(rows);
        self.block.truncate(rows);
        self.registers_per_thread.truncate(rows);
        self.static_shared_memory_bytes.truncate(rows);
        self.dynamic_shared_memory_bytes.truncate(rows);
        self.name_ptr.truncate(rows);
        self.graph_node_id.truncate(rows);
    }
}

/// The walk both decoders share: every record of `buf` handed to `take` with its kind and
/// bytes, in buffer order, with the counts it adds to; the counts, with the trailing zero
/// bytes, at the end. The common case (a kind the version sizes, its record whole in the
/// buffer) is read inline; anything else (the end, a zeroed tail, kind 0, an unknown kind, a
/// truncated record) is [`locate`]'s, for the typed walk's own answer.
///
/// # Errors
/// [`locate`]'s error at the first record it refuses; `take` has then seen the records before
/// it, which the caller must undo.
#[inline]
fn walk(
    buf: &[u8],
    api: ApiVersion,
    mut take: impl FnMut(ActivityKind, Rec<'_>, &mut BufferCounts),
) -> Result<BufferCounts, DecodeError> {
    let sizes = api.tables().kinds;
    let mut counts = BufferCounts::default();
    let mut offset = 0;
    loop {
        let head = buf
            .get(offset..offset + 4)
            .and_then(|h| <[u8; 4]>::try_from(h).ok());
        if let Some(head) = head {
            let raw = u32::from_le_bytes(head);
            let size = sizes.get(raw as usize).map_or(0, |&(s, _)| s);
            if let Some(bytes) = buf.get(offset..offset + size).filter(|_| size > 0) {
                offset += size;
                take(ActivityKind(raw), Rec(bytes), &mut counts);
                continue;
            }
        }
        match locate(buf, offset, api)? {
            Step::Record { kind, bytes } => {
                offset += bytes.len();
                take(kind, Rec(bytes), &mut counts);
            }
            Step::End {
                trailing_zero_bytes,
            } => {
                counts.trailing_zero_bytes = trailing_zero_bytes;
                return Ok(counts);
            }
        }
    }
}

/// Decodes the kernel records of one buffer into `cols`, replacing what they held (their
/// capacity is kept): [`KernelColumns::clear`] then [`KernelColumns::extend_from_buffer`].
///
/// # Errors
/// As [`KernelColumns::extend_from_buffer`]; `cols` is then empty.
pub fn decode_kernel_columns(
    buf: &[u8],
    api: ApiVersion,
    cols: &mut KernelColumns,
) -> Result<BufferCounts, DecodeError> {
    cols.clear();
    cols.extend_from_buffer(buf, api)
}

mod buffer;

pub use self::buffer::{
    decode_buffer_columns, ApiColumns, ApiRow, BufferColumns, CopyColumns, CopyRow,
    ExternalColumns, ExternalRow, SetColumns, SetRow,
};

#[cfg(test)]
mod tests;
