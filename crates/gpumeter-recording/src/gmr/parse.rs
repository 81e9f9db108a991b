//! Parsing one frame's payload by its type (the bytes after the frame's type and length,
//! checksum already checked or not wanted).

use super::*;

/// Little-endian field reader over a payload; `None` past its end.
pub(super) struct Fields<'a> {
    pub(super) b: &'a [u8],
    pub(super) at: usize,
}

impl<'a> Fields<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
    }
    pub(super) fn done(&self) -> bool {
        self.at >= self.b.len()
    }
}

fn parse_strings(p: &[u8]) -> Result<StringTable, String> {
    let mut f = Fields { b: p, at: 0 };
    let mut t = StringTable::new();
    while !f.done() {
        let at = f.at;
        let ptr = f
            .u64()
            .ok_or_else(|| format!("string entry at payload byte {at} is cut short"))?;
        let len = f
            .u32()
            .ok_or_else(|| format!("string entry at payload byte {at} is cut short"))?;
        let bytes = f.take(len as usize).ok_or_else(|| {
            format!("string entry at payload byte {at} ({len} bytes) runs past the payload")
        })?;
        let text = std::str::from_utf8(bytes)
            .map_err(|e| format!("string entry at payload byte {at} is not UTF-8: {e}"))?;
        t.insert(ptr, text);
    }
    Ok(t)
}

pub(crate) fn parse_payload(frame_type: u32, p: &[u8]) -> Result<Option<Frame>, String> {
    let short = |what: &str| format!("{what} payload of {} bytes is too short", p.len());
    let mut f = Fields { b: p, at: 0 };
    Ok(Some(match frame_type {
        T_BUFFER => Frame::ActivityBuffer(p.to_vec()),
        T_STRINGS => Frame::StringTable(parse_strings(p)?),
        T_DROPPED => {
            let (Some(device), Some(context_id), Some(stream_id), Some(_), Some(count)) =
                (f.u32(), f.u32(), f.u32(), f.u32(), f.u64())
            else {
                return Err(short("dropped-records"));
            };
            Frame::Dropped(DroppedRecords {
                device_id: (device != UNKNOWN_DEVICE).then_some(device),
                context_id,
                stream_id,
                count,
            })
        }
        T_ATTRIBUTION => {
            let (Some(kind), Some(process_id), Some(external_id), Some(timestamp_ns), Some(len)) =
                (f.u32(), f.u32(), f.u64(), f.u64(), f.u32())
            else {
                return Err(short("attribution"));
            };
            let label = f
                .take(len as usize)
                .ok_or_else(|| format!("attribution label of {len} bytes runs past the payload"))?;
            let label = std::str::from_utf8(label)
                .map_err(|e| format!("attribution label is not UTF-8: {e}"))?;
            Frame::Attribution(AttributionEvent {
                kind: AttributionKind::from_raw(kind),
                process_id,
                external_id,
                timestamp_ns,
                label: label.to_string(),
            })
        }
        T_ENERGY => {
            let (Some(device_id), Some(_), Some(timestamp_ns), Some(energy_mj)) =
                (f.u32(), f.u32(), f.u64(), f.u64())
            else {
                return Err(short("energy"));
            };
            Frame::Energy(EnergySample {
                device_id,
                timestamp_ns,
                energy_mj,
            })
        }
        T_INSTRUCTIONS => Frame::Instructions(parse_instructions(p)?),
        T_PM_SAMPLES => Frame::PmSamples(parse_pm_samples(p)?),
        T_OP_COUNTS => Frame::OpCounts(parse_op_counts(p)?),
        _ => return Ok(None),
    }))
}

fn parse_instructions(p: &[u8]) -> Result<InstructionCounts, String> {
    let mut f = Fields { b: p, at: 0 };
    let (Some(correlation_id), Some(device_id), Some(context_id), Some(count)) =
        (f.u32(), f.u32(), f.u32(), f.u32())
    else {
        return Err(format!(
            "instruction-counts payload of {} bytes is too short",
            p.len()
        ));
    };
    // No allocation from `count` before the entries are there: each takes 12 bytes or more.
    let mut functions = Vec::with_capacity((count as usize).min(p.len() / 12));
    for i in 0..count {
        let at = f.at;
        let cut = || format!("function {i} of {count} at payload byte {at} is cut short");
        let (Some(warp_instructions), Some(len)) = (f.u64(), f.u32()) else {
            return Err(cut());
        };
        let name = f.take(len as usize).ok_or_else(|| {
            format!("function {i} name of {len} bytes at payload byte {at} runs past the payload")
        })?;
        let name = std::str::from_utf8(name)
            .map_err(|e| format!("function {i} name at payload byte {at} is not UTF-8: {e}"))?;
        functions.push(FunctionInstructions {
            name: name.to_string(),
            warp_instructions,
        });
    }
    Ok(InstructionCounts {
        correlation_id,
        device_id,
        context_id,
        functions,
    })
}

fn parse_op_counts(p: &[u8]) -> Result<OpCounters, String> {
    let mut f = Fields { b: p, at: 0 };
    let (Some(device_id), Some(context_id), Some(passes), Some(count)) =
        (f.u32(), f.u32(), f.u32(), f.u32())
    else {
        return Err(format!(
            "operation-counters payload of {} bytes is too short",
            p.len()
        ));
    };
    // Kernels and metrics are numbered from #0, as frames are.
    let mut seen = BTreeMap::new();
    // No allocation from `count` before the entries are there: each takes 8 bytes or more.
    let mut kernels = Vec::with_capacity((count as usize).min(p.len() / 8));
    for i in 0..count {
        let at = f.at;
        let kernel = || format!("kernel #{i} of {count} (at payload byte {at})");
        let (Some(correlation_id), Some(metrics)) = (f.u32(), f.u32()) else {
            return Err(format!("{} is cut short", kernel()));
        };
        if correlation_id == 0 {
            return Err(format!("{} has correlation id 0", kernel()));
        }
        if let Some(first) = seen.insert(correlation_id, i) {
            return Err(format!(
                "{} repeats correlation id {correlation_id} of kernel #{first}",
                kernel()
            ));
        }
        let mut counters: Vec<OpCounterValue> =
            Vec::with_capacity((metrics as usize).min(p.len() / 12));
        for j in 0..metrics {
            let at = f.at;
            let metric = || format!("{} metric #{j} (at payload byte {at})", kernel());
            let (Some(value), Some(len)) = (f.u64(), f.u32()) else {
                return Err(format!("{} is cut short", metric()));
            };
            let name = f.take(len as usize).ok_or_else(|| {
                format!("{}'s name of {len} bytes runs past the payload", metric())
            })?;
            let name = std::str::from_utf8(name)
                .map_err(|e| format!("{}'s name is not UTF-8: {e}", metric()))?;
            if name.is_empty() {
                return Err(format!("{} has an empty name", metric()));
            }
            if counters.iter().any(|c| c.metric == name) {
                return Err(format!("{} repeats the metric {name}", metric()));
            }
            counters.push(OpCounterValue {
                metric: name.to_string(),
                value,
            });
        }
        kernels.push(KernelOpCounters {
            correlation_id,
            counters,
        });
    }
    if !f.done() {
        return Err(format!(
            "operation-counters payload of {} bytes has {} bytes after its {count} kernels",
            p.len(),
            p.len() - f.at
        ));
    }
    Ok(OpCounters {
        device_id,
        context_id,
        passes,
        kernels,
    })
}

fn parse_pm_samples(p: &[u8]) -> Result<PmSamples, String> {
    let mut f = Fields { b: p, at: 0 };
    let (Some(device_id), Some(count)) = (f.u32(), f.u32()) else {
        return Err(format!(
            "PM-samples payload of {} bytes is too short",
            p.len()
        ));
    };
    let want = (count as u64) * PM_SAMPLE_LEN as u64 + 8;
    if p.len() as u64 != want {
        return Err(format!(
            "PM-samples payload of {} bytes does not hold its {count} samples ({want} bytes)",
            p.len()
        ));
    }
    let mut samples = Vec::with_capacity(count as usize);
    for i in 0..count {
        // Samples are numbered from #0, as frames are; the byte offset removes any doubt.
        let name = || {
            format!(
                "PM sample #{i} of {count} (numbered from #0, at payload byte {})",
                8 + u64::from(i) * PM_SAMPLE_LEN as u64
            )
        };
        let (
            Some(flags),
            Some(reserved),
            Some(start_ns),
            Some(end_ns),
            Some(active),
            Some(elapsed),
            Some(read),
            Some(write),
        ) = (
            f.u32(),
            f.u32(),
            f.u64(),
            f.u64(),
            f.u64(),
            f.u64(),
            f.u64(),
            f.u64(),
        )
        else {
            return Err(format!("{} is cut short", name()));
        };
        if flags & !PM_FLAGS_KNOWN != 0 {
            return Err(format!(
                "{} has unknown flag bits {:#x}",
                name(),
                flags & !PM_FLAGS_KNOWN
            ));
        }
        // Both are written 0: anything else is not this format's (a newer producer's field,
        // or bytes that only look like a sample).
        if reserved != 0 {
            return Err(format!(
                "{} has a nonzero reserved field {reserved:#x} (written 0)",
                name()
            ));
        }
        for (bit, field, v) in [
            (PM_FLAG_SM_ACTIVE, "sm_active_cycles", active),
            (PM_FLAG_SM_ELAPSED, "sm_elapsed_cycles", elapsed),
            (PM_FLAG_DRAM_READ, "dram_read_bytes", read),
            (PM_FLAG_DRAM_WRITE, "dram_write_bytes", write),
        ] {
            if flags & bit == 0 && v != 0 {
                return Err(format!(
                    "{} has {field} {v} with its presence flag {bit:#x} clear (an absent \
                     counter is written 0)",
                    name()
                ));
            }
        }
        let has = |bit: u32, v: u64| (flags & bit != 0).then_some(v);
        samples.push(gpumeter_core::PmSample {
            start_ns,
            end_ns,
            sm_active_cycles: has(PM_FLAG_SM_ACTIVE, active),
            sm_elapsed_cycles: has(PM_FLAG_SM_ELAPSED, elapsed),
            dram_read_bytes: has(PM_FLAG_DRAM_READ, read),
            dram_write_bytes: has(PM_FLAG_DRAM_WRITE, write),
            overflow: flags & PM_FLAG_OVERFLOW != 0,
        });
    }
    Ok(PmSamples { device_id, samples })
}
