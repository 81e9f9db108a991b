//! Reading a recording for `recording show`: its header, frames, record kinds, kernel names,
//! and the energy, PM-sample, instruction and operation-counter frames summed per device,
//! function or metric ([`Inspection`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gpumeter::cupti::gmr::{read_gmr, EnergySample, Frame, GmrFile, GmrHeader, LocatedFrame};
use gpumeter::cupti::{decode, ApiVersion, Record, StringTable};
use serde::Serialize;

/// A kernel name and how many kernel records carry it.
#[derive(Debug, Serialize)]
pub(super) struct KernelCount {
    pub(super) name: String,
    pub(super) count: u64,
}

/// A device's energy frames in a recording (`gpumeter recording show`): the counter's first
/// and last readings and what it grew by between them.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct EnergyDevice {
    /// CUDA ordinal (the frames' `device`).
    pub(super) device: u32,
    /// Energy frames of the device.
    pub(super) samples: u64,
    /// Earliest timestamp, ns on CUPTI's clock.
    pub(super) first_timestamp_ns: u64,
    /// Latest timestamp, ns on CUPTI's clock.
    pub(super) last_timestamp_ns: u64,
    /// The counter at the earliest reading, mJ.
    pub(super) first_mj: u64,
    /// The counter at the latest reading, mJ.
    pub(super) last_mj: u64,
    /// `last_mj − first_mj` (0 when the counter fell: a driver reload), mJ.
    pub(super) delta_mj: u64,
    /// Frames (in file order) whose timestamp is not after the previous frame's.
    pub(super) out_of_order: u64,
    /// Frames (in file order) whose counter is below the previous frame's.
    pub(super) decreases: u64,
}

/// Energy frames summarised per device, by ordinal.
fn energy_by_device(frames: &[LocatedFrame]) -> Vec<EnergyDevice> {
    let mut by: BTreeMap<u32, Vec<EnergySample>> = BTreeMap::new();
    for f in frames {
        if let Frame::Energy(e) = &f.frame {
            by.entry(e.device_id).or_default().push(*e);
        }
    }
    by.into_iter()
        .filter_map(|(device, samples)| {
            let first = samples.iter().min_by_key(|s| s.timestamp_ns)?;
            let last = samples.iter().max_by_key(|s| s.timestamp_ns)?;
            let steps = || samples.windows(2).filter_map(|w| w.first().zip(w.get(1)));
            Some(EnergyDevice {
                device,
                samples: samples.len() as u64,
                first_timestamp_ns: first.timestamp_ns,
                last_timestamp_ns: last.timestamp_ns,
                first_mj: first.energy_mj,
                last_mj: last.energy_mj,
                delta_mj: last.energy_mj.saturating_sub(first.energy_mj),
                out_of_order: steps()
                    .filter(|(a, b)| b.timestamp_ns <= a.timestamp_ns)
                    .count() as u64,
                decreases: steps().filter(|(a, b)| b.energy_mj < a.energy_mj).count() as u64,
            })
        })
        .collect()
}

/// One counter of a device's PM samples (`gpumeter recording show`): its sum over the samples
/// that carry it.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub(super) struct PmCounterTotal {
    /// Samples that carry the counter.
    pub(super) samples: u64,
    /// Σ of the counter over those samples (saturating at 2⁶⁴ − 1), in its unit (cycles or
    /// bytes).
    pub(super) sum: u64,
}

impl PmCounterTotal {
    fn add(&mut self, v: Option<u64>) {
        if let Some(v) = v {
            self.samples += 1;
            self.sum = self.sum.saturating_add(v);
        }
    }
}

/// A device's PM-sample frames in a recording (`gpumeter recording show`): how many samples,
/// the span they cover, each counter's sum, and how many overflows CUPTI reported.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct PmDevice {
    /// CUDA ordinal (the frames' `device`).
    pub(super) device: u32,
    /// PM-sample frames of the device.
    pub(super) frames: u64,
    /// Samples in those frames.
    pub(super) samples: u64,
    /// Earliest sample start, ns on CUPTI's clock.
    pub(super) first_start_ns: u64,
    /// Latest sample end, ns on CUPTI's clock.
    pub(super) last_end_ns: u64,
    /// Σ `sm__cycles_active.sum` (cycles).
    pub(super) sm_active_cycles: PmCounterTotal,
    /// Σ `sm__cycles_elapsed.max` (cycles).
    pub(super) sm_elapsed_cycles: PmCounterTotal,
    /// Σ bytes read from device memory.
    pub(super) dram_read_bytes: PmCounterTotal,
    /// Σ bytes written to device memory.
    pub(super) dram_write_bytes: PmCounterTotal,
    /// Samples flagged with a hardware-buffer overflow before them (samples were lost).
    pub(super) overflows: u64,
}

/// PM-sample frames summarised per device, by ordinal (devices without samples included when
/// a frame names them).
fn pm_by_device(frames: &[LocatedFrame]) -> Vec<PmDevice> {
    let mut by: BTreeMap<u32, PmDevice> = BTreeMap::new();
    for f in frames {
        let Frame::PmSamples(p) = &f.frame else {
            continue;
        };
        let d = by.entry(p.device_id).or_insert_with(|| PmDevice {
            device: p.device_id,
            frames: 0,
            samples: 0,
            first_start_ns: u64::MAX,
            last_end_ns: 0,
            sm_active_cycles: PmCounterTotal::default(),
            sm_elapsed_cycles: PmCounterTotal::default(),
            dram_read_bytes: PmCounterTotal::default(),
            dram_write_bytes: PmCounterTotal::default(),
            overflows: 0,
        });
        d.frames += 1;
        for x in &p.samples {
            d.samples += 1;
            d.first_start_ns = d.first_start_ns.min(x.start_ns);
            d.last_end_ns = d.last_end_ns.max(x.end_ns);
            d.sm_active_cycles.add(x.sm_active_cycles);
            d.sm_elapsed_cycles.add(x.sm_elapsed_cycles);
            d.dram_read_bytes.add(x.dram_read_bytes);
            d.dram_write_bytes.add(x.dram_write_bytes);
            d.overflows += u64::from(x.overflow);
        }
    }
    by.into_values()
        .map(|mut d| {
            if d.samples == 0 {
                d.first_start_ns = 0;
            }
            d
        })
        .collect()
}

/// A function's instruction counts over a recording's instruction-count frames.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct FunctionInstructionTotal {
    /// The function's (mangled) name.
    pub(super) name: String,
    /// Instruction-count frames (launches) that list it.
    pub(super) launches: u64,
    /// Σ warp instructions over those frames.
    pub(super) warp_instructions: u64,
    /// The smallest and largest count of one launch (equal when every launch executed the
    /// same instructions, e.g. the same kernel with the same configuration and data sizes).
    pub(super) min_per_launch: u64,
    pub(super) max_per_launch: u64,
}

/// Instruction-count frames summed per function, most instructions first.
fn instructions_by_function(frames: &[LocatedFrame]) -> (u64, Vec<FunctionInstructionTotal>) {
    let mut n = 0u64;
    let mut by: BTreeMap<&str, FunctionInstructionTotal> = BTreeMap::new();
    for f in frames {
        if let Frame::Instructions(c) = &f.frame {
            n += 1;
            for func in &c.functions {
                let v = func.warp_instructions;
                let e = by
                    .entry(func.name.as_str())
                    .or_insert_with(|| FunctionInstructionTotal {
                        name: func.name.clone(),
                        launches: 0,
                        warp_instructions: 0,
                        min_per_launch: v,
                        max_per_launch: v,
                    });
                e.launches += 1;
                e.warp_instructions = e.warp_instructions.saturating_add(v);
                e.min_per_launch = e.min_per_launch.min(v);
                e.max_per_launch = e.max_per_launch.max(v);
            }
        }
    }
    let mut out: Vec<FunctionInstructionTotal> = by.into_values().collect();
    out.sort_by(|a, b| {
        b.warp_instructions
            .cmp(&a.warp_instructions)
            .then_with(|| a.name.cmp(&b.name))
    });
    (n, out)
}

/// One range-profiler metric over a recording's operation-counters frames.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct OpMetricTotal {
    /// The metric's name (`smsp__sass_thread_inst_executed_op_ffma_pred_on.sum`).
    pub(super) metric: String,
    /// Kernel launches it was measured for.
    pub(super) launches: u64,
    /// Σ its values over those launches (saturating): thread instructions or tensor-path
    /// operations.
    pub(super) sum: u64,
}

/// Operation-counters frames (type 10): how many, their kernel launches, the pass counts the
/// range profiler needed, and each metric's sum, largest first.
fn op_counters_by_metric(frames: &[LocatedFrame]) -> (u64, u64, Vec<u32>, Vec<OpMetricTotal>) {
    let (mut n, mut launches) = (0u64, 0u64);
    let mut passes = BTreeSet::new();
    let mut by: BTreeMap<&str, OpMetricTotal> = BTreeMap::new();
    for f in frames {
        let Frame::OpCounts(c) = &f.frame else {
            continue;
        };
        n += 1;
        passes.insert(c.passes);
        for k in &c.kernels {
            launches += 1;
            for v in &k.counters {
                let e = by
                    .entry(v.metric.as_str())
                    .or_insert_with(|| OpMetricTotal {
                        metric: v.metric.clone(),
                        launches: 0,
                        sum: 0,
                    });
                e.launches += 1;
                e.sum = e.sum.saturating_add(v.value);
            }
        }
    }
    let mut out: Vec<OpMetricTotal> = by.into_values().collect();
    out.sort_by(|a, b| b.sum.cmp(&a.sum).then_with(|| a.metric.cmp(&b.metric)));
    (n, launches, passes.into_iter().collect(), out)
}

/// What a recording holds (`gpumeter recording show`).
#[derive(Debug, Serialize)]
pub(super) struct Inspection {
    pub(super) file: String,
    pub(super) header: GmrHeader,
    pub(super) finished: bool,
    pub(super) torn: Option<String>,
    /// Frames that could not be used (torn or failing their checksum), described.
    pub(super) damaged: Vec<String>,
    pub(super) buffers: u64,
    pub(super) buffer_bytes: u64,
    pub(super) string_tables: u64,
    pub(super) dropped_frames: u64,
    pub(super) dropped: u64,
    pub(super) attribution_events: u64,
    pub(super) energy_samples: u64,
    /// Energy frames per device.
    pub(super) energy: Vec<EnergyDevice>,
    pub(super) unknown_frames: u64,
    /// PM-sample frames (type 9) and the samples in them.
    pub(super) pm_frames: u64,
    pub(super) pm_samples: u64,
    /// PM-sample frames per device.
    pub(super) pm: Vec<PmDevice>,
    /// Instruction-count frames (instrumented mode): one per kernel-launch call.
    pub(super) instruction_frames: u64,
    /// Σ warp instructions per function over those frames.
    pub(super) instructions: Vec<FunctionInstructionTotal>,
    /// Operation-counters frames (type 10, `record --flops`); the keys below are left out
    /// of the JSON when there are none.
    #[serde(skip_serializing_if = "is_zero")]
    pub(super) op_frames: u64,
    /// Kernel launches those frames measured.
    #[serde(skip_serializing_if = "is_zero")]
    pub(super) op_launches: u64,
    /// The replay pass counts they record (0: not known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) op_passes: Vec<u32>,
    /// Σ per metric over those frames.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) op_counters: Vec<OpMetricTotal>,
    /// Records per kind name (`CONCURRENT_KERNEL`), all buffers.
    pub(super) records: BTreeMap<String, u64>,
    pub(super) kernels: u64,
    /// Kernel names with counts, most frequent first.
    pub(super) kernel_names: Vec<KernelCount>,
    /// Kernel records whose name is in no string table written before them.
    pub(super) unnamed_kernels: u64,
    /// Buffers that do not decode (with the header's API version).
    pub(super) decode_errors: Vec<String>,
}

pub(super) fn inspect(path: &Path) -> Result<Inspection, String> {
    let (name, bytes) = read_input(path)?;
    let file: GmrFile = read_gmr(&bytes).map_err(|e| format!("{name}: {e}"))?;
    let api = ApiVersion::from_cupti(file.header.cupti_api_version).map_err(|e| e.to_string());
    let (instruction_frames, instructions) = instructions_by_function(&file.frames);
    let (op_frames, op_launches, op_passes, op_counters) = op_counters_by_metric(&file.frames);
    let mut i = Inspection {
        file: name,
        header: file.header.clone(),
        finished: file.finished,
        torn: file.torn.map(|t| t.to_string()),
        damaged: file.damaged.iter().map(|d| d.to_string()).collect(),
        buffers: 0,
        buffer_bytes: 0,
        string_tables: 0,
        dropped_frames: 0,
        dropped: 0,
        attribution_events: 0,
        energy_samples: 0,
        energy: energy_by_device(&file.frames),
        unknown_frames: file.unknown_frames,
        pm_frames: 0,
        pm_samples: 0,
        pm: pm_by_device(&file.frames),
        instruction_frames,
        instructions,
        op_frames,
        op_launches,
        op_passes,
        op_counters,
        records: BTreeMap::new(),
        kernels: 0,
        kernel_names: Vec::new(),
        unnamed_kernels: 0,
        decode_errors: Vec::new(),
    };
    let mut names = StringTable::new();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for f in &file.frames {
        match &f.frame {
            Frame::ActivityBuffer(b) => count_buffer(&mut i, &mut counts, &names, f, b, &api),
            Frame::StringTable(t) => {
                i.string_tables += 1;
                names.extend_from(t);
            }
            Frame::Dropped(d) => {
                i.dropped_frames += 1;
                i.dropped = i.dropped.saturating_add(d.count);
            }
            Frame::Attribution(_) => i.attribution_events += 1,
            Frame::Energy(_) => i.energy_samples += 1,
            Frame::PmSamples(p) => {
                i.pm_frames += 1;
                i.pm_samples += p.samples.len() as u64;
            }
            _ => {}
        }
    }
    let mut by_count: Vec<KernelCount> = counts
        .into_iter()
        .map(|(name, count)| KernelCount { name, count })
        .collect();
    by_count.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    i.kernel_names = by_count;
    Ok(i)
}

/// The recording's name and bytes: a file, or standard input for `-` (named `<stdin>` as
/// `usage` names it).
fn read_input(path: &Path) -> Result<(String, Vec<u8>), String> {
    if crate::stdin::is_stdin(path) {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut bytes).map_err(|e| {
            format!(
                "{}: cannot read standard input: {e}",
                crate::stdin::STDIN_NAME
            )
        })?;
        Ok((crate::stdin::STDIN_NAME.to_string(), bytes))
    } else {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((path.display().to_string(), bytes))
    }
}

/// One activity buffer (frame `f`): its records counted by kind and its kernels by name
/// (`names`: the string tables written before it), or why it does not decode.
fn count_buffer(
    i: &mut Inspection,
    counts: &mut BTreeMap<String, u64>,
    names: &StringTable,
    f: &LocatedFrame,
    b: &[u8],
    api: &Result<ApiVersion, String>,
) {
    i.buffers += 1;
    i.buffer_bytes += b.len() as u64;
    let api = match api {
        Ok(a) => *a,
        Err(e) => {
            if i.decode_errors.is_empty() {
                i.decode_errors.push(e.clone());
            }
            return;
        }
    };
    match decode(b, api) {
        Ok(d) => {
            for r in &d.records {
                let kind = r
                    .kind
                    .name()
                    .map_or_else(|| r.kind.0.to_string(), str::to_string);
                *i.records.entry(kind).or_insert(0) += 1;
                if let Record::Kernel(k) = &r.record {
                    i.kernels += 1;
                    match names.get(k.name_ptr) {
                        Some(n) => *counts.entry(n.to_string()).or_insert(0) += 1,
                        None => i.unnamed_kernels += 1,
                    }
                }
            }
        }
        Err(e) => i
            .decode_errors
            .push(format!("frame #{} at byte {}: {e}", f.index, f.offset)),
    }
}

/// Whether a count is 0 (a JSON key left out when so).
fn is_zero(n: &u64) -> bool {
    *n == 0
}
