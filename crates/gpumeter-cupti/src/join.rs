//! What one CUPTI activity record becomes for the meter, and the facts records are joined by (process
//! ids and external correlation ids, which attribute usage to tenants): shared by whole sources ([`crate::source`]) and buffer streams
//! ([`crate::stream`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use gpumeter_core::{
    ActivityRecord, CopyDirection, DeviceSlot, KernelLaunch, MemoryEvent, MemoryOp, Work,
};

use crate::decode::{
    DeviceRecord, KernelRecord, LocatedRecord, MemoryOperation, Record, EXTERNAL_KIND_CUSTOM0,
    EXTERNAL_KIND_CUSTOM2,
};
use crate::gmr::StringTable;

/// Interns the name a kernel or device record points to (its `name_ptr`, looked up in
/// `strings`) into `names`, once per pointer; a record of another kind, a null pointer or one
/// the table does not hold adds nothing.
pub(crate) fn intern_name(
    record: &Record,
    strings: &StringTable,
    names: &mut FxHashMap<u64, Arc<str>>,
) {
    let ptr = match record {
        Record::Kernel(k) => k.name_ptr,
        Record::Device(d) => d.name_ptr,
        _ => return,
    };
    if ptr != 0 && !names.contains_key(&ptr) {
        if let Some(s) = strings.get(ptr) {
            names.insert(ptr, Arc::from(s));
        }
    }
}

/// Why a kernel record with a negative dimension or shared-memory size is lost.
pub(crate) const INVALID_KERNEL_FIELD: &str =
    "a kernel dimension or shared-memory size is negative";

/// `CUpti_ActivityMemoryKind` values of GPU memory, metered as `memory_byte_ns`: DEVICE (3),
/// ARRAY (4), MANAGED (5), DEVICE_STATIC (6), MANAGED_STATIC (7). PAGEABLE (1) and PINNED (2)
/// are host memory and UNKNOWN (0) is not known to be the GPU's: counted as skipped
/// (`memory2_host`).
pub const DEVICE_MEMORY_KINDS: [u32; 5] = [3, 4, 5, 6, 7];

/// Facts learned from records that are not work: process ids of API records and external ids
/// of EXTERNAL_CORRELATION records (by correlation id), DEVICE records, the device of each
/// context, green contexts and INSTRUCTION_EXECUTION counts.
#[derive(Debug, Default, Clone)]
pub(crate) struct Joins {
    /// Correlation id → process id (RUNTIME, DRIVER, INTERNAL_LAUNCH_API records).
    pub(crate) pid_of: FxHashMap<u32, u32>,
    /// Correlation id → (external kind, external id); CUSTOM0 before CUSTOM1 before CUSTOM2.
    pub(crate) ext_of: FxHashMap<u32, (u32, u64)>,
    /// Device id → DEVICE record and its name.
    pub(crate) device_recs: BTreeMap<u32, (DeviceRecord, Option<Arc<str>>)>,
    /// Context id → device id (CONTEXT records).
    pub(crate) device_of_context: FxHashMap<u32, u32>,
    /// (device id, context id) → SMs of a green context.
    pub(crate) green: BTreeMap<(u32, u32), u32>,
    /// Correlation id → Σ INSTRUCTION_EXECUTION `executed` (`None` past 64 bits).
    pub(crate) instructions_of: FxHashMap<u32, Option<u64>>,
}

impl Joins {
    /// The joins [`convert`] reads: these process and external ids, and `default_pid` for
    /// records no API record names.
    pub(crate) fn joins_ref(&self, default_pid: Option<u32>) -> JoinsRef<'_> {
        JoinsRef {
            pid_of: &self.pid_of,
            ext_of: &self.ext_of,
            default_pid,
        }
    }

    /// Learns the facts of `records` (the first fact for a key is kept, except that a lower
    /// external kind replaces a higher one).
    pub(crate) fn learn(&mut self, records: &[LocatedRecord], names: &FxHashMap<u64, Arc<str>>) {
        for r in records {
            match &r.record {
                Record::Api(a) if a.correlation_id != 0 => {
                    self.pid_of.entry(a.correlation_id).or_insert(a.process_id);
                }
                Record::ExternalCorrelation(e)
                    if e.correlation_id != 0
                        && (EXTERNAL_KIND_CUSTOM0..=EXTERNAL_KIND_CUSTOM2)
                            .contains(&e.external_kind) =>
                {
                    let slot = self
                        .ext_of
                        .entry(e.correlation_id)
                        .or_insert((e.external_kind, e.external_id));
                    if e.external_kind < slot.0 {
                        *slot = (e.external_kind, e.external_id);
                    }
                }
                Record::Device(d) => {
                    let name = names.get(&d.name_ptr).cloned();
                    self.device_recs
                        .entry(d.id)
                        .or_insert(((**d).clone(), name));
                }
                Record::Context(c) => {
                    self.device_of_context
                        .entry(c.context_id)
                        .or_insert(c.device_id);
                    if c.is_green_context && c.num_multiprocessors > 0 {
                        self.green.insert(
                            (c.device_id, c.context_id),
                            u32::from(c.num_multiprocessors),
                        );
                    }
                }
                Record::InstructionExecution(i) if i.correlation_id != 0 => {
                    // `None` once the sum passes 64 bits: never a clamped count.
                    let n = self
                        .instructions_of
                        .entry(i.correlation_id)
                        .or_insert(Some(0));
                    *n = n.and_then(|n| n.checked_add(u64::from(i.executed)));
                }
                _ => {}
            }
        }
    }
}

/// The correlation id a record names for the process-id and external-id joins, and whether it
/// is one [`Joins::learn`] learns from (`true`: an API record, or an EXTERNAL_CORRELATION
/// record of kind CUSTOM0..=CUSTOM2) rather than one [`convert`] looks up (`false`: a work
/// record or a memory event); `None` for any other record and for correlation id 0, which no
/// join holds. The bounded joins of a streamed file ([`crate::lookahead`]) measure and keep
/// what these name.
pub(crate) fn correlation_named(record: &Record) -> Option<(u32, bool)> {
    let (id, learner) = match record {
        Record::Api(a) => (a.correlation_id, true),
        Record::ExternalCorrelation(e)
            if (EXTERNAL_KIND_CUSTOM0..=EXTERNAL_KIND_CUSTOM2).contains(&e.external_kind) =>
        {
            (e.correlation_id, true)
        }
        Record::Kernel(k) => (k.correlation_id, false),
        Record::Memcpy(m) => (m.correlation_id, false),
        Record::PeerCopy(p) => (p.correlation_id, false),
        Record::Memset(m) => (m.correlation_id, false),
        Record::GraphTrace(g) => (g.correlation_id, false),
        Record::Memory(m) => (m.correlation_id, false),
        _ => return None,
    };
    (id != 0).then_some((id, learner))
}

/// The joins a conversion reads.
pub(crate) struct JoinsRef<'a> {
    pub(crate) pid_of: &'a FxHashMap<u32, u32>,
    pub(crate) ext_of: &'a FxHashMap<u32, (u32, u64)>,
    /// The process id of records no API record names (a `.gmr` header's).
    pub(crate) default_pid: Option<u32>,
}

/// A kernel record [`convert`] refuses: its device, the field that cannot be represented and
/// its value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InvalidField {
    /// The record's CUDA device ordinal.
    pub(crate) device_id: u32,
    /// The field's name.
    pub(crate) field: &'static str,
    /// Its value.
    pub(crate) value: i64,
}

/// What one record becomes. Device slots are left at `DeviceSlot(u32::MAX)`: the caller
/// places the record by `device_id`.
pub(crate) enum Converted {
    /// A work record (kernel, copy, memset, graph launch).
    Work {
        device_id: u32,
        rec: ActivityRecord,
        /// Its process id came from an API record.
        pid_joined: bool,
        /// Its external id came from an EXTERNAL_CORRELATION record.
        ext_joined: bool,
    },
    /// A device-memory allocation or release.
    Memory { device_id: u32, ev: MemoryEvent },
    /// Not work: counted as skipped in this category.
    Skipped(&'static str),
    /// A kernel with a field that cannot be represented: lost (`invalid_field`).
    Invalid(InvalidField),
    /// Consumed by the joins (API, DEVICE, CONTEXT, …) or stepped over.
    Consumed,
}

/// Converts one record: work with its joined process and external ids, device
/// memory events, skipped categories.
pub(crate) fn convert(
    r: &LocatedRecord,
    names: &FxHashMap<u64, Arc<str>>,
    joins: &JoinsRef<'_>,
) -> Converted {
    let (device_id, start, end, ctx, stream, corr, node, work) = match &r.record {
        Record::Kernel(k) => {
            let mut launch = match kernel_launch(k, names) {
                Ok(l) => l,
                Err((field, value)) => {
                    return Converted::Invalid(InvalidField {
                        device_id: k.device_id,
                        field,
                        value,
                    })
                }
            };
            launch.warp_instructions = None;
            (
                k.device_id,
                k.start,
                k.end,
                k.context_id,
                k.stream_id,
                k.correlation_id,
                k.graph_node_id,
                Work::Kernel(launch),
            )
        }
        Record::Memcpy(m) => (
            m.device_id,
            m.start,
            m.end,
            m.context_id,
            m.stream_id,
            m.correlation_id,
            m.graph_node_id,
            Work::Memcpy {
                bytes: m.bytes,
                direction: direction(m.copy_kind),
            },
        ),
        Record::PeerCopy(p) => (
            p.device_id,
            p.start,
            p.end,
            p.context_id,
            p.stream_id,
            p.correlation_id,
            p.graph_node_id,
            Work::Memcpy {
                bytes: p.bytes,
                direction: CopyDirection::Peer,
            },
        ),
        Record::Memset(m) => (
            m.device_id,
            m.start,
            m.end,
            m.context_id,
            m.stream_id,
            m.correlation_id,
            m.graph_node_id,
            Work::Memset { bytes: m.bytes },
        ),
        Record::GraphTrace(g) => (
            g.device_id,
            g.start,
            g.end,
            g.context_id,
            g.stream_id,
            g.correlation_id,
            0,
            Work::GraphLaunch,
        ),
        Record::Overhead(_) => return Converted::Skipped("overhead"),
        Record::Memory(m) => {
            let op = match m.operation {
                MemoryOperation::Allocation => MemoryOp::Allocation,
                MemoryOperation::Release => MemoryOp::Release,
                MemoryOperation::Other(_) => return Converted::Skipped("memory2_other_operation"),
            };
            if !DEVICE_MEMORY_KINDS.contains(&m.memory_kind) {
                return Converted::Skipped("memory2_host");
            }
            let mut ev =
                MemoryEvent::new(DeviceSlot(u32::MAX), m.timestamp, m.address, m.bytes, op);
            ev.context_id = m.context_id;
            ev.correlation_id = m.correlation_id;
            ev.process_id = nonzero(m.process_id)
                .or_else(|| joins.pid_of.get(&m.correlation_id).copied())
                .or(joins.default_pid);
            if m.correlation_id != 0 {
                ev.external_id = joins.ext_of.get(&m.correlation_id).map(|&(_, e)| e);
            }
            return Converted::Memory {
                device_id: m.device_id,
                ev,
            };
        }
        _ => return Converted::Consumed,
    };
    let mut rec = ActivityRecord::new(DeviceSlot(u32::MAX), start, end, work);
    rec.context_id = ctx;
    rec.stream_id = stream;
    rec.correlation_id = corr;
    rec.graph_node_id = node;
    let (pid_joined, ext_joined) = join_work(&mut rec, joins);
    Converted::Work {
        device_id,
        rec,
        pid_joined,
        ext_joined,
    }
}

/// Gives work record `rec` the process id and external id `joins` hold for its correlation
/// id (a process id from an API record, else `joins.default_pid`); whether each was joined.
pub(crate) fn join_work(rec: &mut ActivityRecord, joins: &JoinsRef<'_>) -> (bool, bool) {
    let corr = rec.correlation_id;
    let (mut pid_joined, mut ext_joined) = (false, false);
    if corr != 0 {
        if let Some(&pid) = joins.pid_of.get(&corr) {
            rec.process_id = Some(pid);
            pid_joined = true;
        }
        if let Some(&(_, ext)) = joins.ext_of.get(&corr) {
            rec.external_id = Some(ext);
            ext_joined = true;
        }
    }
    if rec.process_id.is_none() {
        rec.process_id = joins.default_pid;
    }
    (pid_joined, ext_joined)
}

pub(crate) fn nonzero(v: u32) -> Option<u32> {
    (v != 0).then_some(v)
}

/// `CUpti_ActivityMemcpyKind` to a billing direction: 1 HTOD, 2 DTOH, 8 DTOD, 10
/// PTOP; array copies, host-to-host and unknown values are "other".
pub(crate) fn direction(copy_kind: u8) -> CopyDirection {
    match copy_kind {
        1 => CopyDirection::HostToDevice,
        2 => CopyDirection::DeviceToHost,
        8 => CopyDirection::DeviceToDevice,
        10 => CopyDirection::Peer,
        _ => CopyDirection::Other,
    }
}

/// A kernel record's launch configuration; `Err((field, value))` for a negative dimension or
/// shared-memory size.
pub(crate) fn kernel_launch(
    k: &KernelRecord,
    names: &FxHashMap<u64, Arc<str>>,
) -> Result<KernelLaunch, (&'static str, i64)> {
    fn dims(v: [i32; 3], names: [&'static str; 3]) -> Result<[u32; 3], (&'static str, i64)> {
        let mut out = [0u32; 3];
        for ((o, x), n) in out.iter_mut().zip(v).zip(names) {
            *o = u32::try_from(x).map_err(|_| (n, i64::from(x)))?;
        }
        Ok(out)
    }
    let grid = dims(k.grid, ["gridX", "gridY", "gridZ"])?;
    let block = dims(k.block, ["blockX", "blockY", "blockZ"])?;
    let s = u64::try_from(k.static_shared_memory)
        .map_err(|_| ("staticSharedMemory", i64::from(k.static_shared_memory)))?;
    let d = u64::try_from(k.dynamic_shared_memory)
        .map_err(|_| ("dynamicSharedMemory", i64::from(k.dynamic_shared_memory)))?;
    Ok(KernelLaunch {
        grid: Some(grid),
        block: Some(block),
        registers_per_thread: Some(u32::from(k.registers_per_thread)),
        shared_mem_bytes: Some(s + d),
        name: names.get(&k.name_ptr).cloned(),
        warp_instructions: None,
        ops: Default::default(),
    })
}
