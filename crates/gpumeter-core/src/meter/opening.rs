//! Opening state and chains of reports (`--opening`): open allocations taken over, sources and recordings already metered.

use super::*;

use std::collections::{BTreeMap, BTreeSet};

use crate::record::DeviceSlot;
use crate::report::{OpenAllocation, UsageReport};
use crate::tenant::{TenantName, UNATTRIBUTED};
use crate::time::{parse_rfc3339, rfc3339_ns};

/// What the reports continued by [`Meter::continue_from`] had already metered.
#[derive(Debug, Clone, Default)]
pub(super) struct Earlier {
    /// SHA-256 → file name of every source of the chain.
    pub(super) sources: BTreeMap<String, String>,
    /// Per recording, per device key, how far the chain read it.
    pub(super) recordings: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Reads an `open_allocations` address: `0x`-prefixed hex or decimal.
pub(super) fn parse_address(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("address: `{text}` is not a 64-bit address (0x… hex or decimal)"))
}

impl Meter {
    /// Takes the allocations an earlier report left open as opening state (`--opening`):
    /// each is held from that report's `billed_to` on, on the device with
    /// its `device_key` (registered now if no input names it by [`Meter::finish`]), paired with
    /// a later release by process id and address, attributed by its external id and process id
    /// through this meter's tenant map first, then to the tenant the earlier report gave it.
    /// Call it before pushing records: opening state is not subject to the reordering horizon.
    ///
    /// # Errors
    /// A message naming the entry (`open_allocations[i]`) and field, and nothing is taken, when
    /// an address, time or byte count cannot be read, `billed_to` is 0 or before
    /// `allocated_at`, the tenant is empty, or two entries hold the same address of one
    /// process on one device.
    pub fn set_opening(&mut self, entries: &[OpenAllocation]) -> Result<(), String> {
        // (device key, device id, where held, bytes, billed_to, allocated_at, attribution)
        pub(super) type Entry = (String, u32, HeldAt, u64, u64, u64, AttrKey);
        let mut parsed: Vec<Entry> = Vec::with_capacity(entries.len());
        let mut seen = BTreeSet::new();
        for (i, open) in entries.iter().enumerate() {
            let at = |field: &str, e: String| format!("open_allocations[{i}].{field}: {e}");
            let address = parse_address(&open.address).map_err(|e| at("address", e))?;
            let billed_to = parse_rfc3339(&open.billed_to).map_err(|e| at("billed_to", e))?;
            let allocated_at =
                parse_rfc3339(&open.allocated_at).map_err(|e| at("allocated_at", e))?;
            if billed_to == 0 {
                return Err(at(
                    "billed_to",
                    "the Unix epoch is not a report's end".into(),
                ));
            }
            if allocated_at > billed_to {
                return Err(at(
                    "allocated_at",
                    format!(
                        "{} is after billed_to {}",
                        open.allocated_at, open.billed_to
                    ),
                ));
            }
            let bytes = u64::try_from(open.bytes.0)
                .map_err(|_| at("bytes", format!("{} exceeds 64 bits", open.bytes.0)))?;
            // `unattributed` is what a meter writes itself for memory no rule attributed; any
            // other name must be a tenant name (`idle` never holds memory).
            let tenant = if open.tenant == UNATTRIBUTED {
                None
            } else {
                Some(
                    TenantName::parse(&open.tenant)
                        .map_err(|e| at("tenant", format!("{:?}: {e}", open.tenant)))?,
                )
            };
            if open.device_key.trim().is_empty() {
                return Err(at("device_key", "empty".into()));
            }
            let key = (open.process_id, address);
            if !seen.insert((open.device_key.clone(), key)) {
                return Err(at(
                    "address",
                    format!(
                        "{} of process {:?} on {} is held by an earlier entry too",
                        open.address, open.process_id, open.device_key
                    ),
                ));
            }
            let attr = AttrKey {
                external_id: open.external_id,
                process_id: open.process_id,
                source_tenant: tenant,
            };
            parsed.push((
                open.device_key.clone(),
                open.device,
                key,
                bytes,
                billed_to,
                allocated_at,
                attr,
            ));
        }
        for (device_key, id, key, bytes, billed_to, allocated_at, attr) in parsed {
            let k = self.intern(attr);
            let a = OpenAlloc {
                since: billed_to,
                allocated_at,
                bytes,
                key: k,
            };
            if let Some(&slot) = self.device_index.get(&device_key) {
                let d = &mut self.devices[slot.0 as usize];
                d.last_ns = d.last_ns.max(billed_to);
                d.memory_events += 1;
                d.open.insert(key, a);
            } else {
                self.opening_ids.entry(device_key.clone()).or_insert(id);
                self.opening.entry(device_key).or_default().push((key, a));
            }
        }
        Ok(())
    }

    /// Continues an earlier report (`--opening`): takes its
    /// `open_allocations` as opening state ([`Meter::set_opening`]) and, so that nothing the
    /// chain of reports metered is metered again, remembers
    ///
    /// * the SHA-256 of its sources and of the sources of the reports it continued
    ///   (`extensions.earlier_sources`): an input with one of them is not metered again
    ///   ([`Meter::begin_source`] returns `false`, with a warning);
    /// * how far the chain read each `.gmr` recording, per device (`extensions.recordings`):
    ///   what the same recording holds at or before that time (a recording that grew since,
    ///   given again) is not metered again ([`Meter::recording_read_to`]; `push_batches`
    ///   leaves it out and counts it as skipped `billed_by_opening_report`).
    ///
    /// Both are carried into this report's `extensions`, so a chain stays protected across a
    /// day on which a GPU or a recording is idle. Call it before announcing sources.
    ///
    /// # Errors
    /// As [`Meter::set_opening`], and a message naming `extensions.recordings[i]` when a time
    /// is not an RFC 3339 time.
    pub fn continue_from(&mut self, report: &UsageReport) -> Result<(), String> {
        let mut recordings: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for (i, r) in report.extensions.recordings.iter().enumerate() {
            for (j, e) in r.device_ends.iter().enumerate() {
                let t = parse_rfc3339(&e.end).map_err(|why| {
                    format!("extensions.recordings[{i}].device_ends[{j}].end: {why}")
                })?;
                let v = recordings
                    .entry(r.recording.clone())
                    .or_default()
                    .entry(e.device_key.clone())
                    .or_insert(t);
                *v = (*v).max(t);
            }
        }
        self.set_opening(&report.open_allocations)?;
        for s in &report.sources {
            self.earlier
                .sources
                .insert(s.sha256.clone(), s.name.clone());
        }
        for sha in &report.extensions.earlier_sources {
            self.earlier
                .sources
                .entry(sha.clone())
                .or_insert_with(|| "a source of an earlier report".to_string());
        }
        for (rec, ends) in recordings {
            let mine = self.earlier.recordings.entry(rec).or_default();
            for (k, t) in ends {
                let v = mine.entry(k).or_insert(t);
                *v = (*v).max(t);
            }
        }
        Ok(())
    }

    /// How far the reports this one continues read `recording` on `device`: what the recording
    /// holds there at or before this time was metered by them ([`Meter::continue_from`]).
    pub fn recording_read_to(&self, recording: &str, device: DeviceSlot) -> Option<u64> {
        let d = self.devices.get(device.0 as usize)?;
        self.earlier
            .recordings
            .get(recording)?
            .get(&d.info.key)
            .copied()
    }

    /// Whether an earlier report of the chain (`--opening`) read `recording` (a `.gmr`
    /// recording's identity, [`crate::Batch::recording`]) on any device: then this report
    /// continues it and leaves out what that report read ([`Meter::recording_read_to`]).
    pub fn continues_recording(&self, recording: &str) -> bool {
        self.earlier.recordings.contains_key(recording)
    }

    /// Notes that this report read `recording` on `device` up to `end` (the latest time of
    /// anything it holds there), for the report's `extensions.recordings`.
    pub fn note_recording(&mut self, recording: &str, device: DeviceSlot, end: u64) {
        let Some(d) = self.devices.get(device.0 as usize) else {
            return;
        };
        let v = self
            .recording_ends
            .entry(recording.to_string())
            .or_default()
            .entry(d.info.key.clone())
            .or_insert(end);
        *v = (*v).max(end);
    }

    /// Counts work records and memory events left out because an earlier report of the chain
    /// metered them ([`Meter::recording_read_to`]).
    pub fn record_billed_earlier(&mut self, records: u64, memory_events: u64) {
        self.before_earlier_end.0 += records;
        self.before_earlier_end.1 += memory_events;
    }

    /// Counts PM samples left out because an earlier report of the chain read them (a
    /// recording's samples are noted apart from its records: they end at or before the time
    /// that report read the device's samples to). Counted with the records and memory events
    /// of [`Meter::record_billed_earlier`]: skipped `billed_by_opening_report`, and named in
    /// its warning.
    pub fn record_pm_billed_earlier(&mut self, samples: u64) {
        self.before_earlier_end.2 += samples;
    }

    /// The report's `extensions`: the recordings read by this report and the reports it
    /// continues, and the sources those metered.
    pub(super) fn extensions(&self) -> crate::report::Extensions {
        let mut ends = self.earlier.recordings.clone();
        for (rec, per) in &self.recording_ends {
            let mine = ends.entry(rec.clone()).or_default();
            for (k, &t) in per {
                let v = mine.entry(k.clone()).or_insert(t);
                *v = (*v).max(t);
            }
        }
        crate::report::Extensions {
            recordings: ends
                .into_iter()
                .map(|(recording, per)| crate::report::RecordingEnds {
                    recording,
                    device_ends: per
                        .into_iter()
                        .map(|(device_key, t)| crate::report::DeviceEnd {
                            device_key,
                            end: rfc3339_ns(t),
                        })
                        .collect(),
                })
                .collect(),
            earlier_sources: self.earlier.sources.keys().cloned().collect(),
            other: serde_json::Map::new(),
        }
    }
}
