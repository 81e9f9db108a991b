//! A source gathered (its decoded buffers and a `.gmr`'s frames) and planned: decoded,
//! joined and validated, with devices, losses and memory events, before a meter sees it.

use super::*;

/// One decoded buffer with the names its pointers resolve to at its place in the source.
pub(super) struct Buffer {
    pub(super) decoded: Decoded,
    pub(super) frame: Option<FrameRef>,
    pub(super) names: FxHashMap<u64, Arc<str>>,
}

/// A source being gathered before planning.
pub(super) struct Input<'n> {
    pub(super) name: &'n str,
    /// Label for device keys without a UUID: the first 16 hex digits of the content's SHA-256
    /// ([`gpumeter_core::source_label`]; a `.gmr`'s from its header identity), so two different
    /// files never share a device and a renamed copy keeps its keys (as in `gpumeter-import`).
    pub(super) key_label: String,
    /// SHA-256 of the source's bytes, lowercase hex.
    pub(super) sha256: String,
    pub(super) format: CuptiFormat,
    pub(super) api: ApiVersion,
    pub(super) buffers: Vec<Buffer>,
    pub(super) inventory: Vec<GmrDevice>,
    pub(super) default_pid: Option<u32>,
    pub(super) dropped: Vec<crate::gmr::DroppedRecords>,
    pub(super) unknown_frames: u64,
    pub(super) energy_samples: u64,
    pub(super) pm_samples: u64,
    /// `.gmr` PM-sample frames, in file order.
    pub(super) pm: Vec<crate::gmr::PmSamples>,
    /// `.gmr` energy samples, in file order.
    pub(super) energy: Vec<crate::gmr::EnergySample>,
    /// `.gmr` SASS-metrics instruction counts per correlation id: (function name, warp
    /// instructions), as the frames list them.
    pub(super) sass_of: FxHashMap<u32, Vec<(String, u64)>>,
    /// The `.gmr` header says the run was instrumented (SASS metrics).
    pub(super) instrumented: bool,
    /// `.gmr` operation counters per correlation id (the first frame's entry of an id).
    pub(super) ops_of: FxHashMap<u32, Vec<OpCounterValue>>,
    /// `.gmr` operation-counters frames read.
    pub(super) op_frames: u64,
    /// Their pass counts (`OpCounters::passes`), for the instrumented-run warning.
    pub(super) op_passes: BTreeSet<u32>,
    /// Entries of a correlation id an earlier operation-counters frame gave: not metered.
    pub(super) op_repeats: u64,
    pub(super) attribution_events: u64,
    pub(super) torn: Option<TornFrame>,
    /// `.gmr` frames that could not be used (torn or corrupt): their records are loss.
    pub(super) damaged: Vec<DamagedFrame>,
    /// `.gmr` buffers whose checksum is right but that stop decoding at a fault: the records
    /// before it are metered, what follows is loss of unknown count.
    pub(super) undecodable: Vec<(FrameRef, DecodeError)>,
    /// The `.gmr` recording's identity (`Batch::recording`).
    pub(super) recording: Option<String>,
    pub(super) finished: bool,
}

/// A source decoded, joined and validated, not yet given to a meter. Device slots in
/// `records` and `losses` index `devices`.
pub(super) struct Plan {
    pub(super) summary: CuptiSummary,
    pub(super) devices: Vec<DeviceInfo>,
    pub(super) records: Vec<ActivityRecord>,
    /// Records lost per device: (device, reason, count, lower bound) — dropped counts
    /// (summed, saturating), records with fields that cannot be represented, records of torn
    /// or corrupt `.gmr` frames.
    pub(super) losses: Vec<(DeviceSlot, LossReason, u64, bool)>,
    /// Records lost whose device is unknown: (reason, count, lower bound).
    pub(super) source_losses: Vec<(LossReason, u64, bool)>,
    /// The `.gmr` recording's identity.
    pub(super) recording: Option<String>,
    /// Green contexts: (device, context id, SMs).
    pub(super) partitions: Vec<(DeviceSlot, u32, u32)>,
    /// Device-memory allocations and releases, sorted by timestamp.
    pub(super) memory: Vec<MemoryEvent>,
    /// Energy samples: (device, ns, cumulative mJ).
    pub(super) energy: Vec<(DeviceSlot, u64, u64)>,
    /// PM samples of the devices the source describes, in file order.
    pub(super) pm: Vec<(DeviceSlot, PmSample)>,
    pub(super) skipped: BTreeMap<&'static str, u64>,
    pub(super) warnings: Vec<gpumeter_core::Warning>,
}

/// What pass 2 of [`Input::plan`] makes of the buffers' records.
#[derive(Default)]
pub(super) struct Read {
    /// Work records, on the source's device slots.
    pub(super) records: Vec<ActivityRecord>,
    /// Device-memory allocations and releases.
    pub(super) memory: Vec<MemoryEvent>,
    /// Records not work, by category.
    pub(super) skipped: BTreeMap<&'static str, u64>,
    /// Records with a field that cannot be represented, per CUDA device ordinal.
    pub(super) invalid: BTreeMap<u32, u64>,
    /// Per field, how many such records and the first one's description.
    pub(super) faults: BTreeMap<&'static str, (u64, String)>,
}

impl<'n> Input<'n> {
    pub(super) fn new(name: &'n str, bytes: &[u8], format: CuptiFormat, api: ApiVersion) -> Self {
        let sha256 = hex::encode(Sha256::digest(bytes));
        Input {
            name,
            key_label: gpumeter_core::source_label(&sha256),
            sha256,
            format,
            api,
            buffers: Vec::new(),
            inventory: Vec::new(),
            default_pid: None,
            dropped: Vec::new(),
            unknown_frames: 0,
            energy_samples: 0,
            pm_samples: 0,
            pm: Vec::new(),
            energy: Vec::new(),
            sass_of: FxHashMap::default(),
            instrumented: false,
            ops_of: FxHashMap::default(),
            op_frames: 0,
            op_passes: BTreeSet::new(),
            op_repeats: 0,
            attribution_events: 0,
            torn: None,
            damaged: Vec::new(),
            undecodable: Vec::new(),
            recording: None,
            finished: true,
        }
    }

    pub(super) fn add_buffer(
        &mut self,
        decoded: Decoded,
        frame: Option<FrameRef>,
        strings: &StringTable,
    ) {
        let mut names: FxHashMap<u64, Arc<str>> = FxHashMap::default();
        for r in &decoded.records {
            intern_name(&r.record, strings, &mut names);
        }
        self.buffers.push(Buffer {
            decoded,
            frame,
            names,
        });
    }

    /// The summary before the records are read: what the source says of itself.
    fn summary(&self) -> CuptiSummary {
        CuptiSummary {
            source_name: self.name.to_string(),
            format: self.format,
            api: self.api,
            records: 0,
            skipped: 0,
            duplicate_source: false,
            sha256: self.sha256.clone(),
            device_keys: Vec::new(),
            process_ids_joined: 0,
            external_ids_joined: 0,
            dropped: 0,
            buffers: self.buffers.len() as u64,
            energy_samples: self.energy_samples,
            pm_samples: self.pm_samples,
            memory_events: 0,
            green_contexts: 0,
            kernels_with_instructions: 0,
            kernels_with_op_counts: 0,
            allocations_closed_at_end: 0,
            attribution_events: self.attribution_events,
            unknown_frames: self.unknown_frames,
            torn: self.torn,
            finished: self.finished,
        }
    }

    /// Books the records of damaged `.gmr` frames as loss (`torn_frame`, `corrupt_frame`) on
    /// the devices they name, with one warning per frame.
    fn book_damaged(
        &self,
        devs: &mut Devices<'_>,
        warnings: &mut Vec<gpumeter_core::Warning>,
        losses: &mut Vec<(DeviceSlot, LossReason, u64, bool)>,
        source_losses: &mut Vec<(LossReason, u64, bool)>,
    ) {
        for d in &self.damaged {
            let known = |id: u32| devs.describes(id);
            let (per_device, exact, what, unit) = damaged_records(d, self.api, &known);
            let reason = match d.damage {
                Damage::Torn(_) => LossReason::TornFrame,
                Damage::Corrupt | Damage::FramingLost | Damage::Malformed => {
                    LossReason::CorruptFrame
                }
            };
            let lower = !exact;
            let mut placed = 0u64;
            for (id, n) in &per_device {
                match id {
                    Some(id) => losses.push((devs.slot(*id), reason, *n, lower)),
                    None => source_losses.push((reason, *n, lower)),
                }
                placed += n;
            }
            if per_device.is_empty() && lower {
                // Nothing readable, and the frame may have held records: say so.
                source_losses.push((reason, 0, true));
            }
            let kept = match d.damage {
                Damage::FramingLost => "the frames before it were metered",
                Damage::Torn(_) => "the frames before it were metered",
                Damage::Corrupt | Damage::Malformed => {
                    "the frames before and after it were metered"
                }
            };
            let count = if exact {
                format!("{placed} {unit}")
            } else {
                format!("at least {placed} {unit} (how many more is unknown)")
            };
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::DamagedFrame,
                format!(
                    "{}: {d}; {what}: {count} lost as {}; {kept}",
                    self.name,
                    reason.as_str()
                ),
            ));
        }
    }

    /// The end of a finished recording (its latest valid work record or memory event) closes
    /// what its processes still hold ([`close_at_end`]); returns the allocations it closed.
    fn close_recording(
        &self,
        records: &[ActivityRecord],
        memory: &mut Vec<MemoryEvent>,
        devices: usize,
    ) -> u64 {
        // The recording's end: its latest valid work record or memory event (a record the
        // meter will refuse, or an energy sample, must not stretch it).
        let valid = |r: &ActivityRecord| {
            r.start_ns != 0
                && r.end_ns >= r.start_ns
                && r.end_ns - r.start_ns <= gpumeter_core::time::MAX_RECORD_NS
        };
        let end = records
            .iter()
            .filter(|r| valid(r))
            .map(|r| r.end_ns)
            .chain(memory.iter().map(|m| m.timestamp_ns))
            .max()
            .unwrap_or(0);
        let pids: Vec<Option<u32>> = memory
            .iter()
            .map(|m| m.process_id)
            .chain(std::iter::once(self.default_pid))
            .collect();
        close_at_end(memory, end, &pids, devices)
    }

    /// Gives kernels their instruction counts ([`assign_instructions`]), with a warning for
    /// launch calls whose counts pass 64 bits; returns how many kernels got one.
    fn give_instructions(
        &self,
        records: &mut [ActivityRecord],
        instructions_of: &FxHashMap<u32, Option<u64>>,
        warnings: &mut Vec<gpumeter_core::Warning>,
    ) -> u64 {
        let (given, overflowed) = assign_instructions(records, &self.sass_of, instructions_of);
        if overflowed > 0 {
            warnings.push(gpumeter_core::Warning::new(
                gpumeter_core::WarningCode::InstructionCountOverflow,
                format!(
                    "{}: the instruction counts of {overflowed} launch calls pass 64 bits: their \
                 kernels have no count, so warp_instructions is not meterable on their device \
                 (never a clamped count)",
                    self.name
                ),
            ));
        }
        given
    }

    /// Pass 2 over the buffers' records: each converted with the joins and placed on its
    /// device, or counted as skipped or invalid.
    fn read_records(
        &self,
        joins: &JoinsRef<'_>,
        devs: &mut Devices<'_>,
        summary: &mut CuptiSummary,
    ) -> Read {
        let mut out = Read::default();
        for b in &self.buffers {
            for (cat, n) in &b.decoded.skipped {
                *out.skipped.entry(cat).or_insert(0) += n;
            }
            for r in &b.decoded.records {
                match convert(r, &b.names, joins) {
                    Converted::Work {
                        device_id,
                        mut rec,
                        pid_joined,
                        ext_joined,
                    } => {
                        rec.device = devs.slot(device_id);
                        summary.process_ids_joined += u64::from(pid_joined);
                        summary.external_ids_joined += u64::from(ext_joined);
                        out.records.push(rec);
                    }
                    Converted::Memory { device_id, mut ev } => {
                        ev.device = devs.slot(device_id);
                        out.memory.push(ev);
                    }
                    Converted::Skipped(cat) => *out.skipped.entry(cat).or_insert(0) += 1,
                    Converted::Invalid(bad) => {
                        note_invalid(
                            &mut out.invalid,
                            &mut out.faults,
                            self.name,
                            b.frame,
                            r,
                            bad,
                        );
                        // Registered so that its loss has a device entry.
                        devs.slot(bad.device_id);
                    }
                    Converted::Consumed => {}
                }
            }
        }
        out
    }

    /// The recording's warnings (undecodable buffers, an unfinished recording, instrumentation,
    /// unknown frames) and their source losses; `instruction_records` when the source has
    /// INSTRUCTION_EXECUTION records.
    fn warn_recording(
        &self,
        instruction_records: bool,
        warnings: &mut Vec<gpumeter_core::Warning>,
        source_losses: &mut Vec<(LossReason, u64, bool)>,
    ) {
        recording_warnings(
            self.name,
            &self.undecodable,
            !self.finished && self.format == CuptiFormat::Gmr,
            instrumented_by(
                if self.instrumented {
                    Some("SASS metrics")
                } else if instruction_records {
                    Some("INSTRUCTION_EXECUTION records")
                } else {
                    None
                },
                (self.op_frames > 0).then_some(&self.op_passes),
            )
            .as_deref()
            .map(|by| Instrumented {
                by,
                pm_sampled: self.pm_samples > 0,
            }),
            self.unknown_frames,
            warnings,
            source_losses,
        );
    }

    pub(super) fn plan(self) -> Result<Plan, CuptiSourceError> {
        // Pass 1: joins, devices and contexts over the whole source.
        let mut joins = Joins::default();
        for b in &self.buffers {
            joins.learn(&b.decoded.records, &b.names);
        }
        let Joins {
            pid_of,
            ext_of,
            device_recs,
            device_of_context,
            green,
            instructions_of,
        } = joins;
        let mut devs = Devices {
            source: &self.key_label,
            inventory: &self.inventory,
            device_recs: &device_recs,
            devices: Vec::new(),
            index: FxHashMap::default(),
        };
        let mut summary = self.summary();

        // Pass 2: work records. A record with a field that cannot be represented is lost
        // (`invalid_field`), counted on its device and named in one warning per field.
        let joins = JoinsRef {
            pid_of: &pid_of,
            ext_of: &ext_of,
            default_pid: self.default_pid,
        };
        let Read {
            mut records,
            mut memory,
            skipped,
            invalid,
            faults,
        } = self.read_records(&joins, &mut devs, &mut summary);
        let mut warnings: Vec<gpumeter_core::Warning> = faults
            .into_values()
            .map(|(n, first)| gpumeter_core::invalid_field_warning(&first, n))
            .collect();
        let invalid_records: u64 = invalid.values().sum();
        let mut losses: Vec<(DeviceSlot, LossReason, u64, bool)> = invalid
            .into_iter()
            .map(|(id, n)| (devs.slot(id), LossReason::InvalidField, n, false))
            .collect();
        let mut source_losses: Vec<(LossReason, u64, bool)> = Vec::new();
        summary.dropped = devs.book_dropped(
            &self.dropped,
            &device_of_context,
            self.name,
            &mut warnings,
            &mut losses,
            &mut source_losses,
        );
        self.book_damaged(&mut devs, &mut warnings, &mut losses, &mut source_losses);
        self.warn_recording(
            !instructions_of.is_empty(),
            &mut warnings,
            &mut source_losses,
        );
        // Sorted by start so that a file's own records are never late (docs/METERING.md, "Common rules" (order)), and
        // so that a shared instruction count's remainder goes to the earliest kernels.
        records.sort_by_key(|r| r.start_ns);
        summary.kernels_with_instructions =
            self.give_instructions(&mut records, &instructions_of, &mut warnings);
        let ops = assign_op_counts(&mut records, &self.ops_of);
        summary.kernels_with_op_counts = ops.given;
        ops.warn(self.name, self.op_repeats, &mut warnings);
        if self.finished && self.format == CuptiFormat::Gmr {
            summary.allocations_closed_at_end =
                self.close_recording(&records, &mut memory, devs.devices.len());
        }
        // Energy: samples of a device CUPTI or the inventory knows (by CUDA ordinal).
        let energy = devs.place_energy(
            self.energy
                .iter()
                .map(|e| (e.device_id, e.timestamp_ns, e.energy_mj)),
            self.name,
            &mut warnings,
        );
        let pm = devs.place_pm(&self.pm, self.name, &mut warnings);
        let partitions = devs.partitions(&green);
        summary.green_contexts = partitions.len() as u64;
        summary.memory_events = memory.len() as u64;
        summary.records = records.len() as u64 + invalid_records;
        summary.skipped = skipped.values().sum();
        summary.device_keys = devs.devices.iter().map(|d| d.key.clone()).collect();
        memory.sort_by_key(|m| m.timestamp_ns);
        Ok(Plan {
            summary,
            devices: devs.devices,
            records,
            losses,
            source_losses,
            recording: self.recording.clone(),
            partitions,
            memory,
            energy,
            pm,
            skipped,
            warnings,
        })
    }
}

/// The end of a finished recording: one process-exit event at `end` per device of the source
/// (`devices` local slots) and process id of `pids` (those of its memory events and its
/// header's), which ends every allocation that process still holds there, also allocations
/// carried in by `--opening`. Returns how many of the source's own allocations it ends.
pub(super) fn close_at_end(
    memory: &mut Vec<MemoryEvent>,
    end: u64,
    pids: &[Option<u32>],
    devices: usize,
) -> u64 {
    memory.sort_by_key(|m| m.timestamp_ns);
    let mut held: BTreeMap<(u32, Option<u32>, u64), ()> = BTreeMap::new();
    for m in memory.iter() {
        let key = (m.device.0, m.process_id, m.address);
        match m.op {
            MemoryOp::Allocation => {
                held.insert(key, ());
            }
            MemoryOp::Release => {
                held.remove(&key);
            }
            MemoryOp::ProcessExit => held.retain(|k, ()| !(k.0 == key.0 && k.1 == key.1)),
        }
    }
    if end == 0 {
        return held.len() as u64;
    }
    let mut procs: Vec<Option<u32>> = pids.to_vec();
    procs.sort_unstable();
    procs.dedup();
    for device in 0..devices {
        for &pid in &procs {
            let mut exit =
                MemoryEvent::new(DeviceSlot(device as u32), end, 0, 0, MemoryOp::ProcessExit);
            exit.process_id = pid;
            memory.push(exit);
        }
    }
    memory.sort_by_key(|m| m.timestamp_ns);
    held.len() as u64
}
