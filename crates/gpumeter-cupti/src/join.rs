//! What one CUPTI activity record becomes for the meter, and the facts records are joined by (process
//! ids and external correlation ids, which attribute usage to tenants): shared by whole sources (`gpumeter_recording`'s `source`) and buffer streams
//! ([`crate::stream`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use gpumeter_core::{
    ActivityRecord, ComputeCapability, CopyDirection, DeviceInfo, DeviceSlot, KernelLaunch,
    MemoryEvent, MemoryOp, SmLimits, Work,
};

use crate::corrmap::CorrelationMap;
use crate::decode::{
    DeviceRecord, KernelRecord, LocatedRecord, MemoryOperation, Record, EXTERNAL_KIND_CUSTOM0,
    EXTERNAL_KIND_CUSTOM2,
};
use crate::strings::StringTable;

/// Interns the name a kernel or device record points to (its `name_ptr`, looked up in
/// `strings`) into `names`, once per pointer; a record of another kind, a null pointer or one
/// the table does not hold adds nothing.
pub fn intern_name(record: &Record, strings: &StringTable, names: &mut FxHashMap<u64, Arc<str>>) {
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
pub const INVALID_KERNEL_FIELD: &str = "a kernel dimension or shared-memory size is negative";

/// `CUpti_ActivityMemoryKind` values of GPU memory, metered as `memory_byte_ns`: DEVICE (3),
/// ARRAY (4), MANAGED (5), DEVICE_STATIC (6), MANAGED_STATIC (7). PAGEABLE (1) and PINNED (2)
/// are host memory and UNKNOWN (0) is not known to be the GPU's: counted as skipped
/// (`memory2_host`).
pub const DEVICE_MEMORY_KINDS: [u32; 5] = [3, 4, 5, 6, 7];

/// Facts learned from records that are not work: process ids of API records and external ids
/// of EXTERNAL_CORRELATION records (by correlation id), DEVICE records, the device of each
/// context, green contexts and INSTRUCTION_EXECUTION counts.
#[derive(Debug, Default, Clone)]
pub struct Joins {
    /// Correlation id → process id (RUNTIME, DRIVER, INTERNAL_LAUNCH_API records).
    pub pid_of: CorrelationMap<u32>,
    /// Correlation id → (external kind, external id); CUSTOM0 before CUSTOM1 before CUSTOM2.
    pub ext_of: CorrelationMap<(u32, u64)>,
    /// Device id → DEVICE record and its name.
    pub device_recs: BTreeMap<u32, (DeviceRecord, Option<Arc<str>>)>,
    /// Context id → device id (CONTEXT records).
    pub device_of_context: FxHashMap<u32, u32>,
    /// (device id, context id) → SMs of a green context.
    pub green: BTreeMap<(u32, u32), u32>,
    /// Correlation id → Σ INSTRUCTION_EXECUTION `executed` (`None` past 64 bits).
    pub instructions_of: FxHashMap<u32, Option<u64>>,
}

impl Joins {
    /// The joins [`convert`] reads: these process and external ids, and `default_pid` for
    /// records no API record names.
    pub fn joins_ref(&self, default_pid: Option<u32>) -> JoinsRef<'_> {
        JoinsRef {
            pid_of: &self.pid_of,
            ext_of: &self.ext_of,
            default_pid,
        }
    }

    /// Learns an API record's process id for its correlation id (the first one kept; id 0,
    /// which no work record names, is not learned).
    pub fn learn_api(&mut self, correlation_id: u32, process_id: u32) {
        if correlation_id != 0 {
            self.pid_of.entry_or_insert(correlation_id, process_id);
        }
    }

    /// Learns an EXTERNAL_CORRELATION record's external id for its correlation id: kinds
    /// CUSTOM0..=CUSTOM2 only, the lowest kind wins, the first id of a kind is kept; id 0 is
    /// not learned.
    pub fn learn_external(&mut self, correlation_id: u32, external_kind: u32, external_id: u64) {
        if correlation_id == 0
            || !(EXTERNAL_KIND_CUSTOM0..=EXTERNAL_KIND_CUSTOM2).contains(&external_kind)
        {
            return;
        }
        let slot = self
            .ext_of
            .entry_or_insert(correlation_id, (external_kind, external_id));
        if external_kind < slot.0 {
            *slot = (external_kind, external_id);
        }
    }

    /// Learns the facts of `records` (the first fact for a key is kept, except that a lower
    /// external kind replaces a higher one).
    pub fn learn(&mut self, records: &[LocatedRecord], names: &FxHashMap<u64, Arc<str>>) {
        for r in records {
            match &r.record {
                Record::Api(a) => self.learn_api(a.correlation_id, a.process_id),
                Record::ExternalCorrelation(e) => {
                    self.learn_external(e.correlation_id, e.external_kind, e.external_id)
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
/// join holds. The bounded joins of a streamed file (`gpumeter_recording`'s `lookahead`) measure and keep
/// what these name.
pub fn correlation_named(record: &Record) -> Option<(u32, bool)> {
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
pub struct JoinsRef<'a> {
    /// Process id per correlation id (from API records).
    pub pid_of: &'a CorrelationMap<u32>,
    /// External correlation (kind, id) per correlation id (from EXTERNAL_CORRELATION records).
    pub ext_of: &'a CorrelationMap<(u32, u64)>,
    /// The process id of records no API record names (a `.gmr` header's).
    pub default_pid: Option<u32>,
}

/// A kernel record [`convert`] refuses: its device, the field that cannot be represented and
/// its value.
#[derive(Debug, Clone, Copy)]
pub struct InvalidField {
    /// The record's CUDA device ordinal.
    pub device_id: u32,
    /// The field's name.
    pub field: &'static str,
    /// Its value.
    pub value: i64,
}

/// What one record becomes. Device slots are left at `DeviceSlot(u32::MAX)`: the caller
/// places the record by `device_id`.
pub enum Converted {
    /// A work record (kernel, copy, memset, graph launch).
    Work {
        /// The record's CUDA device ordinal.
        device_id: u32,
        /// The record for the meter.
        rec: ActivityRecord,
        /// Its process id came from an API record.
        pid_joined: bool,
        /// Its external id came from an EXTERNAL_CORRELATION record.
        ext_joined: bool,
    },
    /// A device-memory allocation or release.
    Memory {
        /// The record's CUDA device ordinal.
        device_id: u32,
        /// The event for the meter.
        ev: MemoryEvent,
    },
    /// Not work: counted as skipped in this category.
    Skipped(&'static str),
    /// A kernel with a field that cannot be represented: lost (`invalid_field`).
    Invalid(InvalidField),
    /// Consumed by the joins (API, DEVICE, CONTEXT, …) or stepped over.
    Consumed,
}

/// Converts one record: work with its joined process and external ids, device
/// memory events, skipped categories.
pub fn convert(
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
pub fn join_work(rec: &mut ActivityRecord, joins: &JoinsRef<'_>) -> (bool, bool) {
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

/// `v` when it is not 0: CUPTI's zero for "unknown".
pub fn nonzero(v: u32) -> Option<u32> {
    (v != 0).then_some(v)
}

/// `CUpti_ActivityMemcpyKind` to a billing direction: 1 HTOD, 2 DTOH, 8 DTOD, 10
/// PTOP; array copies, host-to-host and unknown values are "other".
pub fn direction(copy_kind: u8) -> CopyDirection {
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
pub fn kernel_launch(
    k: &KernelRecord,
    names: &FxHashMap<u64, Arc<str>>,
) -> Result<KernelLaunch, (&'static str, i64)> {
    let mut launch = launch_of(
        k.grid,
        k.block,
        k.registers_per_thread,
        k.static_shared_memory,
        k.dynamic_shared_memory,
    )?;
    launch.name = names.get(&k.name_ptr).cloned();
    Ok(launch)
}

/// A kernel's launch configuration from its record's fields (`gridX..Z`, `blockX..Z`,
/// `registersPerThread`, `staticSharedMemory`, `dynamicSharedMemory` in bytes), with no name;
/// `Err((field, value))` for a negative dimension or shared-memory size: [`kernel_launch`]
/// without the typed record, for the columnar path ([`crate::columns`]).
pub fn launch_of(
    grid: [i32; 3],
    block: [i32; 3],
    registers_per_thread: u16,
    static_shared_memory: i32,
    dynamic_shared_memory: i32,
) -> Result<KernelLaunch, (&'static str, i64)> {
    fn dims(v: [i32; 3], names: [&'static str; 3]) -> Result<[u32; 3], (&'static str, i64)> {
        let mut out = [0u32; 3];
        for ((o, x), n) in out.iter_mut().zip(v).zip(names) {
            *o = u32::try_from(x).map_err(|_| (n, i64::from(x)))?;
        }
        Ok(out)
    }
    let grid = dims(grid, ["gridX", "gridY", "gridZ"])?;
    let block = dims(block, ["blockX", "blockY", "blockZ"])?;
    let s = u64::try_from(static_shared_memory)
        .map_err(|_| ("staticSharedMemory", i64::from(static_shared_memory)))?;
    let d = u64::try_from(dynamic_shared_memory)
        .map_err(|_| ("dynamicSharedMemory", i64::from(dynamic_shared_memory)))?;
    Ok(KernelLaunch {
        grid: Some(grid),
        block: Some(block),
        registers_per_thread: Some(u32::from(registers_per_thread)),
        shared_mem_bytes: Some(s + d),
        name: None,
        warp_instructions: None,
        ops: Default::default(),
    })
}

/// A DEVICE record as a [`DeviceInfo`]: zero values are "unknown".
pub fn device_info(source: &str, d: &DeviceRecord, name: Option<&str>) -> DeviceInfo {
    let uuid = d.uuid_key();
    let key = uuid
        .clone()
        .unwrap_or_else(|| DeviceInfo::source_key(source, d.id));
    let warp = nonzero(d.threads_per_warp);
    DeviceInfo {
        key,
        id: d.id,
        name: name.map(str::to_string),
        sm_count: nonzero(d.multiprocessors),
        compute_capability: (d.compute_capability_major != 0).then_some(ComputeCapability {
            major: d.compute_capability_major,
            minor: d.compute_capability_minor,
        }),
        uuid,
        limits: SmLimits {
            max_threads_per_sm: nonzero(d.max_warps_per_sm)
                .zip(warp)
                .and_then(|(w, t)| w.checked_mul(t)),
            max_blocks_per_sm: nonzero(d.max_blocks_per_sm),
            max_warps_per_sm: nonzero(d.max_warps_per_sm),
            registers_per_sm: nonzero(d.max_registers_per_sm),
            registers_per_block: nonzero(d.max_registers_per_block),
            shared_mem_per_sm_bytes: nonzero(d.max_shared_memory_per_sm).map(u64::from),
            shared_mem_per_block_bytes: nonzero(d.max_shared_memory_per_block).map(u64::from),
            shared_mem_per_block_optin_bytes: None,
            warp_size: warp,
        },
    }
}

/// Gives kernels their `warp_instructions` from the counts of their correlation id:
/// a launch call's SASS-metrics counts per function go to its kernel records of
/// that function's name (to all of the call's kernels when no name matches), else the call's
/// Σ INSTRUCTION_EXECUTION `executed` to all of its kernels; a count shared by several kernels
/// (a graph launch runs many under one correlation id) is split equally, the remainder one by
/// one to the earliest, so the call's total is given exactly once. Every kernel of a counted
/// call gets a count (possibly 0), unless a kernel's count would pass 64 bits (or the call's
/// INSTRUCTION_EXECUTION sum did): then none of the call's kernels gets one. Returns how many
/// kernels got one and how many calls' counts passed 64 bits.
pub fn assign_instructions(
    records: &mut [ActivityRecord],
    sass_of: &FxHashMap<u32, Vec<(String, u64)>>,
    instructions_of: &FxHashMap<u32, Option<u64>>,
) -> (u64, u64) {
    let mut by_corr: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        if let Work::Kernel(_) = r.work {
            if r.correlation_id != 0
                && (sass_of.contains_key(&r.correlation_id)
                    || instructions_of.contains_key(&r.correlation_id))
            {
                by_corr.entry(r.correlation_id).or_default().push(i);
            }
        }
    }
    let mut given = 0;
    let mut overflowed = 0;
    for (corr, idx) in by_corr {
        let mut counts: Vec<Option<u64>> = vec![Some(0); idx.len()];
        let mut split = |n: Option<u64>, among: &[usize]| {
            let k = among.len() as u64;
            if k == 0 {
                return;
            }
            for (j, &pos) in among.iter().enumerate() {
                let part = n.map(|n| n / k + u64::from((j as u64) < n % k));
                counts[pos] = counts[pos].zip(part).and_then(|(a, b)| a.checked_add(b));
            }
        };
        let all: Vec<usize> = (0..idx.len()).collect();
        if let Some(functions) = sass_of.get(&corr) {
            for (name, n) in functions {
                let named: Vec<usize> = all
                    .iter()
                    .copied()
                    .filter(|&p| match &records[idx[p]].work {
                        Work::Kernel(k) => k.name.as_deref() == Some(name.as_str()),
                        _ => false,
                    })
                    .collect();
                split(Some(*n), if named.is_empty() { &all } else { &named });
            }
        } else if let Some(&n) = instructions_of.get(&corr) {
            split(n, &all);
        }
        if counts.iter().any(Option::is_none) {
            overflowed += 1;
            continue;
        }
        for (pos, &i) in idx.iter().enumerate() {
            if let Work::Kernel(k) = &mut records[i].work {
                k.warp_instructions = counts[pos];
                given += 1;
            }
        }
    }
    (given, overflowed)
}

/// What an `instrumented_run` warning says after naming the instrumentation: the meters the
/// patched kernels inflate. When the recording holds PM samples (`pm_sampled`), `sm_active_ns`
/// is named too: it is measured, but the patched kernels run longer, so the hardware sees their
/// SMs active longer. Recordings without PM samples keep the text they had before issue 16.
pub fn instrumented_meters(pm_sampled: bool) -> String {
    let base = "kernels ran slower than they would uninstrumented, so this report's time meters \
                (gpu_busy_ns, kernel_ns, sm_ns, warp_ns, memory_byte_ns) overstate the work";
    if pm_sampled {
        format!(
            "{base}, and so does sm_active_ns (measured, but the patched kernels run longer, so \
             the hardware sees them active longer)"
        )
    } else {
        base.to_string()
    }
}

#[cfg(test)]
mod instrumented_text {
    /// PM-sampled recordings name `sm_active_ns` among what instrumentation inflates; others
    /// keep the text they had before issue 16.
    #[test]
    fn sm_active_ns_is_named_only_when_pm_sampled() {
        let with = super::instrumented_meters(true);
        let without = super::instrumented_meters(false);
        assert!(with.starts_with(&without), "{with}");
        assert!(with.contains("and so does sm_active_ns"), "{with}");
        assert!(!without.contains("sm_active_ns"), "{without}");
        assert!(without.ends_with(
            "(gpu_busy_ns, kernel_ns, sm_ns, warp_ns, memory_byte_ns) overstate the work"
        ));
    }
}
