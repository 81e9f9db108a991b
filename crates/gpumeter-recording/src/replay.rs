//! Replaying a recording as the events a live CUPTI subscription gives an agent: device
//! descriptions, completed activity buffers in the order they were completed, dropped-record
//! counts, and the end of the recorded process (the C ABI's `gm_recording_*`).
//!
//! An agent feeds these to a [`CuptiStream`](gpumeter_cupti::stream::CuptiStream) one by one, exactly
//! as it would feed CUPTI's callbacks, and gets the usage that `gpumeter usage` computes for
//! the whole file: the recording's device inventory becomes descriptions, its dropped counts
//! deltas, and a finished recording ends with a [`ReplayItem::ProcessExit`] per process at
//! the recording's end, where `gpumeter usage` closes the allocations still held.

use std::collections::{BTreeSet, HashMap};

use gpumeter_core::time::MAX_RECORD_NS;

use crate::gmr::{is_gmr, read_gmr, Frame, GmrDevice, GmrFile};
use crate::source::{CuptiSourceError, FrameRef};
use gpumeter_cupti::decode::{decode_prefix, Record};
use gpumeter_cupti::join::DEVICE_MEMORY_KINDS;
use gpumeter_cupti::layout::ApiVersion;

/// One event of a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayItem {
    /// A device of the recording's inventory (before any buffer).
    Device(GmrDevice),
    /// A completed activity buffer: its `validSize` bytes.
    Buffer(Vec<u8>),
    /// Records CUPTI dropped since the last count; `device_id` `None` when neither the frame
    /// nor the recording's CONTEXT records tell the device.
    Dropped {
        /// CUDA device ordinal.
        device_id: Option<u32>,
        /// Records dropped (a delta).
        count: u64,
    },
    /// The recorded process ended here (a finished recording's last event): its device
    /// memory is freed.
    ProcessExit {
        /// Process id.
        pid: u32,
        /// ns since the epoch: the recording's latest valid work end or memory event.
        timestamp_ns: u64,
    },
}

/// A recording read into replay events.
#[derive(Debug, Clone)]
pub struct Replay {
    /// The layouts of its buffers (the `.gmr` header's, or the one given for a raw buffer).
    pub api: ApiVersion,
    /// `gmr` or `cupti`.
    pub format: &'static str,
    /// The events, in order.
    pub items: Vec<ReplayItem>,
}

impl Replay {
    /// Reads a `.gmr` recording (by its magic) or a raw activity buffer laid out by `raw_api`
    /// (one buffer). `name` names the file in errors.
    ///
    /// String tables (kernel names), energy frames and PM-sample frames are not replayed:
    /// names are not usage, and the buffer stream takes no energy or PM samples (its usage
    /// lacks `energy_mj`, `sm_active_ns` and `dram_bytes`).
    ///
    /// # Errors
    /// [`CuptiSourceError::Gmr`] when the `.gmr` cannot be read, [`CuptiSourceError::Decode`]
    /// when its API version is not supported, [`CuptiSourceError::NotReplayable`] when it has
    /// damaged frames (their records are loss the events cannot carry) or is instrumented
    /// (SASS instruction-count frames, range-profiler operation-counters frames).
    pub fn from_bytes(
        name: &str,
        bytes: &[u8],
        raw_api: ApiVersion,
    ) -> Result<Replay, CuptiSourceError> {
        if !is_gmr(bytes) {
            return Ok(Replay {
                api: raw_api,
                format: "cupti",
                items: vec![ReplayItem::Buffer(bytes.to_vec())],
            });
        }
        let file = read_gmr(bytes).map_err(|error| CuptiSourceError::Gmr {
            name: name.to_string(),
            error,
        })?;
        refuse_unreplayable(name, &file)?;
        let api = ApiVersion::from_cupti(file.header.cupti_api_version).map_err(|error| {
            CuptiSourceError::Decode {
                name: name.to_string(),
                frame: None::<FrameRef>,
                error,
            }
        })?;
        let mut items: Vec<ReplayItem> = file
            .header
            .devices
            .iter()
            .cloned()
            .map(ReplayItem::Device)
            .collect();
        let (end, pids, device_of_context) = ends_and_contexts(&file, api);
        for f in &file.frames {
            match &f.frame {
                Frame::ActivityBuffer(b) => items.push(ReplayItem::Buffer(b.clone())),
                Frame::Dropped(d) if d.count > 0 => items.push(ReplayItem::Dropped {
                    device_id: d
                        .device_id
                        .or_else(|| device_of_context.get(&d.context_id).copied()),
                    count: d.count,
                }),
                _ => {}
            }
        }
        if file.finished && end > 0 {
            items.extend(pids.into_iter().map(|pid| ReplayItem::ProcessExit {
                pid,
                timestamp_ns: end,
            }));
        }
        Ok(Replay {
            api,
            format: "gmr",
            items,
        })
    }
}

/// Refuses, with [`CuptiSourceError::NotReplayable`], the recording `name` whose damaged or
/// instrumented frames a replay cannot carry.
fn refuse_unreplayable(name: &str, file: &GmrFile) -> Result<(), CuptiSourceError> {
    // What the events of a live subscription cannot carry is refused, never skipped: the
    // records of damaged frames are loss that `gpumeter usage` counts, and SASS
    // instruction counts come in frames of their own.
    let refuse = |reason: String| CuptiSourceError::NotReplayable {
        name: name.to_string(),
        reason,
    };
    if let Some(d) = file.damaged.first() {
        return Err(refuse(format!(
            "{} damaged frames (the first: {d}), whose records are loss",
            file.damaged.len()
        )));
    }
    if file.header.instrumented
        || file
            .frames
            .iter()
            .any(|f| matches!(f.frame, Frame::Instructions(_)))
    {
        return Err(refuse(
            "an instrumented recording (SASS instruction-count frames)".to_string(),
        ));
    }
    if file
        .frames
        .iter()
        .any(|f| matches!(f.frame, Frame::OpCounts(_)))
    {
        return Err(refuse(
            "an instrumented recording (range-profiler operation-counters frames)".to_string(),
        ));
    }
    Ok(())
}

/// The recording's end and processes, and the device of each context, as `gpumeter usage`
/// finds them.
fn ends_and_contexts(file: &GmrFile, api: ApiVersion) -> (u64, BTreeSet<u32>, HashMap<u32, u32>) {
    let mut end = 0u64;
    let mut pids: BTreeSet<u32> = BTreeSet::new();
    if file.header.process_id != 0 {
        pids.insert(file.header.process_id);
    }
    let mut device_of_context: HashMap<u32, u32> = HashMap::new();
    for f in &file.frames {
        let Frame::ActivityBuffer(b) = &f.frame else {
            continue;
        };
        let (decoded, _) = decode_prefix(b, api);
        for r in &decoded.records {
            let span = match &r.record {
                Record::Kernel(k) => Some((k.start, k.end)),
                Record::Memcpy(m) => Some((m.start, m.end)),
                Record::PeerCopy(p) => Some((p.start, p.end)),
                Record::Memset(m) => Some((m.start, m.end)),
                Record::GraphTrace(g) => Some((g.start, g.end)),
                Record::Memory(m) if DEVICE_MEMORY_KINDS.contains(&m.memory_kind) => {
                    end = end.max(m.timestamp);
                    if m.process_id != 0 {
                        pids.insert(m.process_id);
                    }
                    None
                }
                Record::Context(c) => {
                    device_of_context.entry(c.context_id).or_insert(c.device_id);
                    None
                }
                _ => None,
            };
            if let Some((s, e)) = span {
                if s != 0 && e >= s && e - s <= MAX_RECORD_NS {
                    end = end.max(e);
                }
            }
        }
    }
    (end, pids, device_of_context)
}
