//! What the first pass over a file (a raw buffer file, [`crate::buffer_file`]; a `.gmr`
//! recording, [`crate::recording_file`]) gives the second and the merge of several files
//! ([`crate::merge`]): the items a replay hands on ([`SourceItem`]), what the source announces
//! and books ([`Streamed`]), the sketch of its work per device, and what a replay counted.

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::{
    ActivityRecord, DeviceInfo, DeviceSlot, LossReason, MemoryEvent, PmSample, REPEAT_PROBES,
};

use crate::source::CuptiSummary;

/// One item of a replay, on the source's own device slots ([`BufferFile::devices`](crate::BufferFile::devices)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceItem {
    /// A work record (its `partition` unset; its `context_id` names a green context of
    /// [`BufferFile::partitions`](crate::BufferFile::partitions) if any).
    Work(ActivityRecord),
    /// A device-memory allocation or release.
    Memory(MemoryEvent),
    /// A CUPTI PM-sampling sample of a device (a `.gmr`'s type-9 frames), at its start in
    /// the replay's time order.
    Pm(DeviceSlot, PmSample),
}

/// How many of a device's smallest distinct identity digests a scan keeps (module docs):
/// 32 KiB per device of a source, whatever its records.
pub const SKETCH_DIGESTS: usize = 4096;

/// The smallest [`SKETCH_DIGESTS`] distinct identity digests of one source's work on one
/// device (a bottom-k sketch): every digest of the work at or below its largest is in it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Sketch {
    digests: BTreeSet<u64>,
}

impl Sketch {
    /// Takes one item's digest.
    pub(crate) fn add(&mut self, d: u64) {
        if self.digests.len() >= SKETCH_DIGESTS && self.digests.last().is_some_and(|&max| d >= max)
        {
            return;
        }
        if self.digests.insert(d) && self.digests.len() > SKETCH_DIGESTS {
            self.digests.pop_last();
        }
    }

    /// Takes another sketch's digests (the sketch of the union of the two works).
    pub(crate) fn merge(&mut self, other: &Sketch) {
        for &d in &other.digests {
            self.add(d);
        }
    }

    /// Whether the work holds digest `d`: `None` when the sketch cannot tell (it is full and
    /// `d` is above its largest digest).
    pub(crate) fn holds(&self, d: u64) -> Option<bool> {
        let full = self.digests.len() >= SKETCH_DIGESTS;
        match self.digests.last() {
            Some(&max) if full && d > max => None,
            _ => Some(self.digests.contains(&d)),
        }
    }

    /// The digests `push_batches` probes other devices with.
    pub(crate) fn probes(&self) -> impl Iterator<Item = u64> + '_ {
        self.digests.iter().copied().take(REPEAT_PROBES)
    }
}

/// What a replay counted (pass 2).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Replayed {
    /// Work records whose process id was joined.
    pub(crate) pids: u64,
    /// Work records whose external id was joined.
    pub(crate) exts: u64,
    /// For a recording: memory events handed on (process exits at its end included).
    pub(crate) memory_events: Option<u64>,
    /// For a finished recording: its own allocations its end closed.
    pub(crate) closed_at_end: Option<u64>,
}

/// A source scanned for streaming: what it announces and books, on its own device slots
/// (those of [`Streamed::devices`]), and how it replays its items.
#[derive(Debug)]
pub(crate) struct Streamed<R> {
    pub(crate) summary: CuptiSummary,
    pub(crate) devices: Vec<DeviceInfo>,
    pub(crate) warnings: Vec<gpumeter_core::Warning>,
    /// Green contexts: (slot, context id, SMs).
    pub(crate) partitions: Vec<(DeviceSlot, u32, u32)>,
    pub(crate) losses: Vec<(DeviceSlot, LossReason, u64, bool)>,
    pub(crate) source_losses: Vec<(LossReason, u64, bool)>,
    pub(crate) skipped: BTreeMap<&'static str, u64>,
    /// Energy samples: (slot, ns, cumulative mJ).
    pub(crate) energy: Vec<(DeviceSlot, u64, u64)>,
    /// A `.gmr`'s recording identity ([`gpumeter_core::Batch::recording`]).
    pub(crate) recording: Option<String>,
    /// For a recording: per slot, the latest time of its records and memory events (energy
    /// samples are added once on the meter's slots), for its [`Continuation`].
    pub(crate) ends: Vec<(DeviceSlot, u64)>,
    /// For a recording: per slot, the latest time of its PM samples, for the continuation of
    /// its PM samples ([`crate::source::pm_recording`]).
    pub(crate) pm_ends: Vec<(DeviceSlot, u64)>,
    /// Per slot, the sketch of its work (empty when the scan was not asked for sketches).
    pub(crate) sketches: Vec<Sketch>,
    /// How it replays its items (pass 2): the file's own replayer.
    pub(crate) replayer: R,
}

impl<R> Streamed<R> {
    /// The same source with its replayer turned into another (the merge's, over both kinds
    /// of file).
    pub(crate) fn with_replayer<S>(self, f: impl FnOnce(R) -> S) -> Streamed<S> {
        Streamed {
            summary: self.summary,
            devices: self.devices,
            warnings: self.warnings,
            partitions: self.partitions,
            losses: self.losses,
            source_losses: self.source_losses,
            skipped: self.skipped,
            energy: self.energy,
            recording: self.recording,
            ends: self.ends,
            pm_ends: self.pm_ends,
            sketches: self.sketches,
            replayer: f(self.replayer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sketch_knows_every_digest_up_to_its_largest_and_no_further() {
        let mut k = Sketch::default();
        // Not full: it holds every digest it took.
        for d in [50u64, 7, 7, 3] {
            k.add(d);
        }
        assert_eq!(k.holds(7), Some(true));
        assert_eq!(k.holds(8), Some(false));
        assert_eq!(k.holds(u64::MAX), Some(false));
        assert_eq!(k.probes().collect::<Vec<_>>(), [3, 7, 50]);
        // Full: the SKETCH_DIGESTS smallest, and no answer above the largest.
        let mut k = Sketch::default();
        for d in (0..2 * SKETCH_DIGESTS as u64).rev() {
            k.add(d * 2);
        }
        let max = (SKETCH_DIGESTS as u64 - 1) * 2;
        assert_eq!(k.holds(max), Some(true));
        assert_eq!(k.holds(max - 1), Some(false));
        assert_eq!(k.holds(max + 2), None);
        assert_eq!(k.probes().count(), REPEAT_PROBES);
        // The union of two works: the smallest of both.
        let mut a = Sketch::default();
        a.add(10);
        let mut b = Sketch::default();
        b.add(4);
        a.merge(&b);
        assert_eq!(a.probes().collect::<Vec<_>>(), [4, 10]);
    }
}
