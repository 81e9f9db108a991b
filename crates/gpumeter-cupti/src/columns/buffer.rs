//! Every kind the meter reads, into columns in one walk: [`BufferColumns`] (issue 34, item 1).
//!
//! Besides the kernel columns ([`KernelColumns`]), the work the meter books from copies and
//! memsets ([`CopyColumns`], [`SetColumns`]: what `join::convert` reads of MEMCPY, MEMCPY2 and
//! MEMSET) and the records the joins learn from ([`ApiColumns`]: DRIVER, RUNTIME and
//! INTERNAL_LAUNCH_API; [`ExternalColumns`]: EXTERNAL_CORRELATION, what `Joins::learn` reads),
//! each at its version's offsets of [`crate::layout`]. Every other kind is counted only. The
//! walk, the errors and the all-or-nothing rule are [`KernelColumns::extend_from_buffer`]'s.

use super::{walk, BufferCounts, KernelColumns};
use crate::decode::{
    ApiRecord, DecodeError, ExternalCorrelationRecord, MemcpyRecord, MemsetRecord, PeerCopyRecord,
    Rec,
};
use crate::kind::ActivityKind;
use crate::layout::ApiVersion;

/// Declares a struct of columns (one `Vec` per field, row `i` of each the same record) and its
/// row type (the same fields as values), with the length, row access, push and cut-back every
/// family shares. The first field gives the length.
macro_rules! columns {
    (
        $(#[$cdoc:meta])* $cols:ident,
        $(#[$rdoc:meta])* $row:ident {
            $first_doc:literal $first:ident: $first_ty:ty,
            $($doc:literal $f:ident: $t:ty,)*
        }
    ) => {
        $(#[$cdoc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        pub struct $cols {
            #[doc = $first_doc]
            pub $first: Vec<$first_ty>,
            $(#[doc = $doc] pub $f: Vec<$t>,)*
        }

        $(#[$rdoc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $row {
            #[doc = $first_doc]
            pub $first: $first_ty,
            $(#[doc = $doc] pub $f: $t,)*
        }

        impl $cols {
            /// Empty columns.
            pub fn new() -> Self {
                Self::default()
            }

            /// Rows held (the length of every column).
            pub fn len(&self) -> usize {
                self.$first.len()
            }

            /// Whether no row is held.
            pub fn is_empty(&self) -> bool {
                self.$first.is_empty()
            }

            /// Drops every row, keeping the columns' capacity for the next buffer.
            pub fn clear(&mut self) {
                self.truncate(0);
            }

            /// Row `i` as a value, `None` past the end.
            pub fn row(&self, i: usize) -> Option<$row> {
                Some($row {
                    $first: *self.$first.get(i)?,
                    $($f: *self.$f.get(i)?,)*
                })
            }

            /// Every row as a value, in order (for tests and diagnostics; the hot path reads
            /// the columns).
            pub fn rows(&self) -> impl Iterator<Item = $row> + '_ {
                (0..self.len()).filter_map(|i| self.row(i))
            }

            #[inline]
            fn push(&mut self, row: $row) {
                self.$first.push(row.$first);
                $(self.$f.push(row.$f);)*
            }

            fn truncate(&mut self, rows: usize) {
                self.$first.truncate(rows);
                $(self.$f.truncate(rows);)*
            }
        }
    };
}

columns! {
    /// The MEMCPY and MEMCPY2 (peer-to-peer) records of one or more buffers as columns, one row
    /// per record in buffer order: what `join::convert` books as copy work
    /// (`CUpti_ActivityMemcpy6`/`7`, `CUpti_ActivityMemcpyPtoP4`). Times are ns on CUPTI's clock.
    CopyColumns,
    /// One row of [`CopyColumns`]; a typed [`MemcpyRecord`] or [`PeerCopyRecord`] reduces to it.
    CopyRow {
        "The record's kind: MEMCPY, or MEMCPY2 (a peer copy, whatever its `copyKind`)."
        kind: ActivityKind,
        "`start`: copy start, ns." start_ns: u64,
        "`end`: copy end, ns." end_ns: u64,
        "`deviceId`." device_id: u32,
        "`contextId`." context_id: u32,
        "`streamId`." stream_id: u32,
        "`correlationId`: joins the API record that issued the copy." correlation_id: u32,
        "`bytes`: bytes copied." bytes: u64,
        "`copyKind` (`CUpti_ActivityMemcpyKind`: 1 HTOD, 2 DTOH, … 8 DTOD, 10 PTOP)."
        copy_kind: u8,
        "`graphNodeId`: 0 when not from a graph." graph_node_id: u64,
    }
}

columns! {
    /// The MEMSET records of one or more buffers as columns, one row per record in buffer
    /// order (`CUpti_ActivityMemset4`). Times are ns on CUPTI's clock.
    SetColumns,
    /// One row of [`SetColumns`]; a typed [`MemsetRecord`] reduces to it.
    SetRow {
        "`start`: memset start, ns." start_ns: u64,
        "`end`: memset end, ns." end_ns: u64,
        "`deviceId`." device_id: u32,
        "`contextId`." context_id: u32,
        "`streamId`." stream_id: u32,
        "`correlationId`: joins the API record that issued the memset." correlation_id: u32,
        "`bytes`: bytes set." bytes: u64,
        "`value`: the value written." value: u32,
        "`graphNodeId`: 0 when not from a graph." graph_node_id: u64,
    }
}

columns! {
    /// The DRIVER, RUNTIME and INTERNAL_LAUNCH_API records of one or more buffers as columns,
    /// one row per record in buffer order (`CUpti_ActivityAPI`): the API side of the
    /// process-id join. Times are ns on CUPTI's clock.
    ApiColumns,
    /// One row of [`ApiColumns`]; a typed [`ApiRecord`] reduces to it.
    ApiRow {
        "The record's kind: DRIVER, RUNTIME or INTERNAL_LAUNCH_API." kind: ActivityKind,
        "`correlationId`: the work records it launched carry the same id." correlation_id: u32,
        "`processId`: the calling process." process_id: u32,
        "`threadId`: the calling thread." thread_id: u32,
        "`start`: API entry, ns." start_ns: u64,
        "`end`: API exit, ns." end_ns: u64,
    }
}

columns! {
    /// The EXTERNAL_CORRELATION records of one or more buffers as columns, one row per record
    /// in buffer order (`CUpti_ActivityExternalCorrelation`): the external-id join's side.
    ExternalColumns,
    /// One row of [`ExternalColumns`]; a typed [`ExternalCorrelationRecord`] reduces to it.
    ExternalRow {
        "`correlationId`: the CUPTI correlation id it names." correlation_id: u32,
        "`externalKind` (`CUpti_ExternalCorrelationKind`: 1 UNKNOWN, 2 OPENACC, 3 CUSTOM0 …)."
        external_kind: u32,
        "`externalId`: the producer's id (a PyTorch op, a tenant tag)." external_id: u64,
    }
}

impl From<&MemcpyRecord> for CopyRow {
    /// The fields of a typed MEMCPY record that [`CopyColumns`] keeps.
    fn from(m: &MemcpyRecord) -> Self {
        CopyRow {
            kind: ActivityKind::MEMCPY,
            start_ns: m.start,
            end_ns: m.end,
            device_id: m.device_id,
            context_id: m.context_id,
            stream_id: m.stream_id,
            correlation_id: m.correlation_id,
            bytes: m.bytes,
            copy_kind: m.copy_kind,
            graph_node_id: m.graph_node_id,
        }
    }
}

impl From<&PeerCopyRecord> for CopyRow {
    /// The fields of a typed MEMCPY2 record that [`CopyColumns`] keeps.
    fn from(p: &PeerCopyRecord) -> Self {
        CopyRow {
            kind: ActivityKind::MEMCPY2,
            start_ns: p.start,
            end_ns: p.end,
            device_id: p.device_id,
            context_id: p.context_id,
            stream_id: p.stream_id,
            correlation_id: p.correlation_id,
            bytes: p.bytes,
            copy_kind: p.copy_kind,
            graph_node_id: p.graph_node_id,
        }
    }
}

impl From<&MemsetRecord> for SetRow {
    /// The fields of a typed MEMSET record that [`SetColumns`] keeps.
    fn from(m: &MemsetRecord) -> Self {
        SetRow {
            start_ns: m.start,
            end_ns: m.end,
            device_id: m.device_id,
            context_id: m.context_id,
            stream_id: m.stream_id,
            correlation_id: m.correlation_id,
            bytes: m.bytes,
            value: m.value,
            graph_node_id: m.graph_node_id,
        }
    }
}

impl From<&ApiRecord> for ApiRow {
    /// The fields of a typed API record that [`ApiColumns`] keeps.
    fn from(a: &ApiRecord) -> Self {
        ApiRow {
            kind: a.kind,
            correlation_id: a.correlation_id,
            process_id: a.process_id,
            thread_id: a.thread_id,
            start_ns: a.start,
            end_ns: a.end,
        }
    }
}

impl From<&ExternalCorrelationRecord> for ExternalRow {
    /// The fields of a typed EXTERNAL_CORRELATION record that [`ExternalColumns`] keeps.
    fn from(e: &ExternalCorrelationRecord) -> Self {
        ExternalRow {
            correlation_id: e.correlation_id,
            external_kind: e.external_kind,
            external_id: e.external_id,
        }
    }
}

/// Every family of columns the meter reads from a buffer, filled by one walk
/// ([`BufferColumns::extend_from_buffer`]). Each family keeps its records in buffer order;
/// the order across families is not kept (the correlation ids and times join them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferColumns {
    /// KERNEL and CONCURRENT_KERNEL records.
    pub kernels: KernelColumns,
    /// MEMCPY and MEMCPY2 records.
    pub copies: CopyColumns,
    /// MEMSET records.
    pub sets: SetColumns,
    /// DRIVER, RUNTIME and INTERNAL_LAUNCH_API records.
    pub api: ApiColumns,
    /// EXTERNAL_CORRELATION records.
    pub external: ExternalColumns,
}

/// The row counts of every family, to cut back to after a failed buffer.
type Lengths = [usize; 5];

impl BufferColumns {
    /// Empty columns.
    pub fn new() -> Self {
        Self::default()
    }

    /// Rows held, all families together.
    pub fn len(&self) -> usize {
        self.lengths().iter().sum()
    }

    /// Whether no family holds a row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every row of every family, keeping the columns' capacity for the next buffer.
    pub fn clear(&mut self) {
        self.truncate([0; 5]);
    }

    /// Appends the records of `buf` (the `validSize` bytes of one CUPTI activity buffer, any
    /// alignment, laid out by the producer's `api`) of the kinds with columns as rows of their
    /// family, in buffer order; records of every other kind are stepped over and counted
    /// ([`BufferCounts::skipped`]). The kernel columns are reserved for the most kernels the
    /// buffer could hold, as [`KernelColumns::extend_from_buffer`] does; the other families
    /// grow geometrically. All keep their capacity, so a steady stream of buffers allocates
    /// nothing per record, and nothing once the columns have grown to its largest buffer.
    ///
    /// # Errors
    /// The [`DecodeError`] [`decode()`](crate::decode()) returns for the same bytes, at the same
    /// offset. Every family then holds exactly the rows it held before the call.
    pub fn extend_from_buffer(
        &mut self,
        buf: &[u8],
        api: ApiVersion,
    ) -> Result<BufferCounts, DecodeError> {
        let before = self.lengths();
        let t = api.tables();
        self.kernels.reserve(buf.len() / t.kernel.size.max(1));
        walk(buf, api, |kind, r, counts| self.take(kind, r, t, counts))
            .inspect_err(|_| self.truncate(before))
    }

    /// One record found by the walk: a row of its family, or a count.
    #[inline]
    fn take(
        &mut self,
        kind: ActivityKind,
        r: Rec<'_>,
        t: &crate::layout::Layouts,
        counts: &mut BufferCounts,
    ) {
        match kind {
            ActivityKind::CONCURRENT_KERNEL | ActivityKind::KERNEL => {
                self.kernels.push(r, &t.kernel);
                counts.kernels += 1;
            }
            ActivityKind::RUNTIME | ActivityKind::DRIVER | ActivityKind::INTERNAL_LAUNCH_API => {
                let l = &t.api;
                self.api.push(ApiRow {
                    kind,
                    correlation_id: r.u32(l.correlation_id),
                    process_id: r.u32(l.process_id),
                    thread_id: r.u32(l.thread_id),
                    start_ns: r.u64(l.start),
                    end_ns: r.u64(l.end),
                });
                counts.api_records += 1;
            }
            ActivityKind::EXTERNAL_CORRELATION => {
                let l = &t.external_correlation;
                self.external.push(ExternalRow {
                    correlation_id: r.u32(l.correlation_id),
                    external_kind: r.u32(l.external_kind),
                    external_id: r.u64(l.external_id),
                });
                counts.external += 1;
            }
            ActivityKind::MEMCPY | ActivityKind::MEMCPY2 | ActivityKind::MEMSET => {
                self.take_work(kind, r, t, counts);
            }
            _ => counts.skipped.add(kind),
        }
    }

    /// A MEMCPY, MEMCPY2 or MEMSET record's row.
    #[inline]
    fn take_work(
        &mut self,
        kind: ActivityKind,
        r: Rec<'_>,
        t: &crate::layout::Layouts,
        counts: &mut BufferCounts,
    ) {
        if kind == ActivityKind::MEMSET {
            let l = &t.memset;
            self.sets.push(SetRow {
                start_ns: r.u64(l.start),
                end_ns: r.u64(l.end),
                device_id: r.u32(l.device_id),
                context_id: r.u32(l.context_id),
                stream_id: r.u32(l.stream_id),
                correlation_id: r.u32(l.correlation_id),
                bytes: r.u64(l.bytes),
                value: r.u32(l.value),
                graph_node_id: r.u64(l.graph_node_id),
            });
            counts.sets += 1;
            return;
        }
        // MEMCPY and MEMCPY2 (peer) layouts name the same fields; one row builder for both.
        macro_rules! copy_row {
            ($l:expr) => {{
                let l = $l;
                CopyRow {
                    kind,
                    start_ns: r.u64(l.start),
                    end_ns: r.u64(l.end),
                    device_id: r.u32(l.device_id),
                    context_id: r.u32(l.context_id),
                    stream_id: r.u32(l.stream_id),
                    correlation_id: r.u32(l.correlation_id),
                    bytes: r.u64(l.bytes),
                    copy_kind: r.u8(l.copy_kind),
                    graph_node_id: r.u64(l.graph_node_id),
                }
            }};
        }
        let row = if kind == ActivityKind::MEMCPY {
            copy_row!(&t.memcpy)
        } else {
            copy_row!(&t.peer_copy)
        };
        self.copies.push(row);
        counts.copies += 1;
    }

    fn lengths(&self) -> Lengths {
        [
            self.kernels.len(),
            self.copies.len(),
            self.sets.len(),
            self.api.len(),
            self.external.len(),
        ]
    }

    fn truncate(&mut self, [k, c, s, a, e]: Lengths) {
        self.kernels.truncate(k);
        self.copies.truncate(c);
        self.sets.truncate(s);
        self.api.truncate(a);
        self.external.truncate(e);
    }
}

/// Decodes one buffer into `cols`, replacing what they held (their capacity is kept):
/// [`BufferColumns::clear`] then [`BufferColumns::extend_from_buffer`].
///
/// ```
/// use gpumeter_cupti::{decode_buffer_columns, ActivityKind, ApiVersion, BufferColumns};
///
/// let api = ApiVersion::Cupti12_8;
/// let layout = |k| api.layouts().into_iter().find(|l| l.kind == k).expect("a layout");
/// let rec = |k, f: &[(&str, u64)]| layout(k).encode(f).map_err(|e| e.to_string());
/// let mut buf = rec(ActivityKind::RUNTIME, &[("correlationId", 9), ("processId", 42)])?;
/// buf.extend(rec(ActivityKind::EXTERNAL_CORRELATION, &[("correlationId", 9), ("externalId", 7)])?);
/// buf.extend(rec(ActivityKind::CONCURRENT_KERNEL, &[("correlationId", 9), ("start", 1_000)])?);
/// buf.extend(rec(ActivityKind::MEMSET, &[("correlationId", 10), ("bytes", 4096)])?);
///
/// let mut cols = BufferColumns::new();
/// let counts = decode_buffer_columns(&buf, api, &mut cols).map_err(|e| e.to_string())?;
/// assert_eq!((counts.kernels, counts.api_records, counts.external, counts.sets), (1, 1, 1, 1));
/// assert_eq!((cols.api.correlation_id[0], cols.api.process_id[0]), (9, 42));
/// assert_eq!(cols.external.external_id[0], 7);
/// assert_eq!((cols.kernels.start_ns[0], cols.sets.bytes[0]), (1_000, 4096));
/// # Ok::<(), String>(())
/// ```
///
/// # Errors
/// As [`BufferColumns::extend_from_buffer`]; `cols` is then empty.
pub fn decode_buffer_columns(
    buf: &[u8],
    api: ApiVersion,
    cols: &mut BufferColumns,
) -> Result<BufferCounts, DecodeError> {
    cols.clear();
    cols.extend_from_buffer(buf, api)
}

#[cfg(test)]
mod tests;
