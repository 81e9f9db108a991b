//! Pass 2 of a streamed `.gmr` recording: [`GmrStream::replay`] reads the file again and hands
//! its work records, memory events and PM samples to the meter in the whole-file path's order,
//! then the process exits of a finished recording's end.

use std::collections::BTreeSet;
use std::fs::File;
use std::sync::Arc;

use gpumeter_core::{DeviceSlot, MemoryEvent, MemoryOp};
use rustc_hash::{FxHashMap, FxHashSet};

use super::{frames, GmrStream};
use crate::chunks::{with_chunks, FileStamp};
use crate::gmr::{
    parse_payload, Frame, StringTable, T_BUFFER, T_PM_SAMPLES, T_STRINGS, UNKNOWN_DEVICE,
};
use crate::lookahead::Lookahead;
use crate::reorder::{replay_item, Reorder};
use crate::scanned::{Replayed, SourceItem};
use crate::source::CuptiSourceError;
use gpumeter_cupti::decode::Walk;
use gpumeter_cupti::join::{convert, intern_name, Joins, JoinsRef};

/// The memory events handed on, and the allocations they leave held (which a finished
/// recording closes at its end).
#[derive(Default)]
struct MemoryTally {
    events: u64,
    held: FxHashSet<(u32, Option<u32>, u64)>,
}

impl MemoryTally {
    /// Counts `item` if it is a memory event.
    fn count(&mut self, item: &SourceItem) {
        if let SourceItem::Memory(ev) = item {
            self.events += 1;
            let key = (ev.device.0, ev.process_id, ev.address);
            match ev.op {
                MemoryOp::Allocation => {
                    self.held.insert(key);
                }
                MemoryOp::Release => {
                    self.held.remove(&key);
                }
                MemoryOp::ProcessExit => {}
            }
        }
    }
}

impl GmrStream {
    /// Pass 2: reads the recording again (only the length pass 1 read) and hands every work
    /// record and memory event, on the source's slots, to `sink` in the whole-file path's
    /// order, then the process exits of a finished recording's end.
    pub(crate) fn replay(
        &self,
        sink: &mut dyn FnMut(SourceItem),
    ) -> Result<Replayed, CuptiSourceError> {
        let s = &self.s;
        let io = |error| CuptiSourceError::Io {
            name: s.name.clone(),
            error,
        };
        let file = File::open(&self.path).map_err(io)?;
        s.stamp.check_prefix(FileStamp::of(&file)).map_err(io)?;
        let len = s.stamp.len();
        let joins = s.joins.joins_ref(self.default_pid);
        let none = Joins::default();
        let no_joins = none.joins_ref(None);
        // Converted as read, joined `distance` records later; or, past the cap, joined as
        // read with every join known (at a distance of 0 no work names a join: as read too).
        let mut window = s
            .join_distance
            .filter(|&d| d > 0)
            .map(|d| Lookahead::new(d, self.default_pid));
        let mut strings = self.strings.clone();
        let mut names: FxHashMap<u64, Arc<str>> = FxHashMap::default();
        let mut reorder = Reorder::new(if self.exit_devices > 0 {
            s.displacement.max(s.latest.saturating_sub(s.end))
        } else {
            s.displacement
        });
        let mut pids: BTreeSet<Option<u32>> = BTreeSet::new();
        let (mut pid_joined_n, mut ext_joined_n) = (0u64, 0u64);
        let mut tally = MemoryTally::default();
        let mut counted = |item: SourceItem| {
            tally.count(&item);
            sink(item);
        };
        let mut emit = |t: u64, item: SourceItem, pid_joined: bool, ext_joined: bool| {
            pid_joined_n += u64::from(pid_joined);
            ext_joined_n += u64::from(ext_joined);
            if let SourceItem::Memory(ev) = &item {
                pids.insert(ev.process_id);
            }
            reorder.push(t, item, &mut counted);
        };
        let (framed, _) = with_chunks(std::io::Read::take(file, len), false, |chunks| {
            frames(chunks, len, |_, _, frame_type, payload| {
                match frame_type {
                    T_BUFFER => {
                        let joins = (&joins, &no_joins);
                        self.replay_buffer(
                            payload,
                            &strings,
                            &mut names,
                            joins,
                            &mut window,
                            &mut emit,
                        );
                    }
                    T_STRINGS => {
                        if let Ok(Some(Frame::StringTable(t))) = parse_payload(frame_type, payload)
                        {
                            strings.extend_from(&t);
                        }
                    }
                    T_PM_SAMPLES => self.replay_pm(payload, &mut window, &mut emit),
                    _ => {}
                }
                true
            })
        });
        if let Some(w) = window.as_mut() {
            w.finish(&mut emit);
        }
        let complete = framed.map_err(io)?.is_some();
        if self.exit_devices > 0 {
            pids.insert(self.default_pid);
            self.push_exits(&pids, &mut reorder, &mut counted);
        }
        reorder.drain(&mut counted);
        s.stamp
            .check_prefix(FileStamp::at(&self.path))
            .map_err(io)?;
        if !complete {
            return Err(io(std::io::Error::other(
                "the file changed while it was metered",
            )));
        }
        Ok(Replayed {
            pids: pid_joined_n,
            exts: ext_joined_n,
            memory_events: Some(tally.events),
            closed_at_end: Some(if s.finished {
                tally.held.len() as u64
            } else {
                0
            }),
        })
    }

    /// Replays one buffer frame's records: converted as read and joined `distance` records
    /// later through `window`, or converted with every join known (`joins.0`) and handed to
    /// `emit` at once when there is no window.
    fn replay_buffer(
        &self,
        payload: &[u8],
        strings: &StringTable,
        names: &mut FxHashMap<u64, Arc<str>>,
        (joins, no_joins): (&JoinsRef<'_>, &JoinsRef<'_>),
        window: &mut Option<Lookahead>,
        emit: &mut impl FnMut(u64, SourceItem, bool, bool),
    ) {
        names.clear();
        for r in Walk::new(payload, self.s.api) {
            let Ok(r) = r else { break };
            intern_name(&r.record, strings, names);
            match window.as_mut() {
                Some(w) => {
                    let converted = convert(&r, names, no_joins);
                    let item = replay_item(converted, &self.index).map(|(t, item, ..)| (t, item));
                    w.push(&r, item, emit);
                }
                None => {
                    let converted = convert(&r, names, joins);
                    if let Some((t, item, pid_joined, ext_joined)) =
                        replay_item(converted, &self.index)
                    {
                        emit(t, item, pid_joined, ext_joined);
                    }
                }
            }
        }
    }

    /// Replays one PM-samples frame's samples on their device's slot (none for an unknown
    /// device or a payload that does not parse).
    fn replay_pm(
        &self,
        payload: &[u8],
        window: &mut Option<Lookahead>,
        emit: &mut impl FnMut(u64, SourceItem, bool, bool),
    ) {
        let Ok(Some(Frame::PmSamples(p))) = parse_payload(T_PM_SAMPLES, payload) else {
            return;
        };
        let id = p.device_id;
        let Some(&slot) = self.index.get(&id).filter(|_| id != UNKNOWN_DEVICE) else {
            return;
        };
        for x in p.samples {
            let item = SourceItem::Pm(slot, x);
            match window.as_mut() {
                // Behind the records read before it, as in the file.
                Some(w) => w.push_unjoined(x.start_ns, item),
                None => emit(x.start_ns, item, false, false),
            }
        }
    }

    /// Pushes a finished recording's process exits at its end: one per process id seen
    /// (`pids`) on each device that gets them.
    fn push_exits(
        &self,
        pids: &BTreeSet<Option<u32>>,
        reorder: &mut Reorder,
        counted: &mut impl FnMut(SourceItem),
    ) {
        let s = &self.s;
        for device in 0..self.exit_devices {
            for &pid in pids {
                let mut exit = MemoryEvent::new(
                    DeviceSlot(device as u32),
                    s.end,
                    0,
                    0,
                    MemoryOp::ProcessExit,
                );
                exit.process_id = pid;
                reorder.push(s.end, SourceItem::Memory(exit), counted);
            }
        }
    }
}
