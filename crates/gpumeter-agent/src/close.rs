//! Closing a window set `[from, to)`: the usage of the spool's recordings in those windows, as
//! the one report a `gpumeter usage` of the same recordings would give for them.
//!
//! Every closing meters the recordings' bytes afresh with a new meter, in two phases
//! (`docs/AGENT.md`, "Closing a window set"):
//!
//! 1. the records (and memory events) that start before `from` and reach past it, so that the
//!    meter holds at `from` what an uninterrupted meter would hold there (kernels running
//!    across `from`, allocations still held); then [`Meter::drain`] at `from` hands over the
//!    windows already shipped, and the result is dropped;
//! 2. the records that start in `[from, to)`, the losses and skipped counts the recordings'
//!    new bytes hold, and, as loss `late`, as many records as the new bytes add before `from`
//!    (their windows were shipped: they are never sent again); then [`Meter::drain`] at `to`
//!    gives the set's report. Records starting at or after `to` wait for a later set.
//!
//! "Already read" and "new" are told apart by each recording's `read_to` of the last closed
//! set: per device, the records before `from` in its first `read_to` bytes were there before;
//! those the whole bytes hold beyond that number are late. (A late record that runs past
//! `from` is counted late, and its part after `from` is metered in phase 1 all the same: the
//! counts do not say which record it was.) The report is a drained piece of each recording's stream: its sources
//! are named by the recording's identity and have format `cupti-stream`
//! ([`gpumeter_core::STREAM_FORMAT`]), so a central `gpumeter usage --format usage` merges the
//! sets of one node, which hold disjoint windows, and refuses two reports of one window.

use std::collections::{BTreeMap, HashMap};

use gpumeter_core::{
    push_batches, Batch, DeviceSlot, LossReason, Meter, MeterConfig, TenantMap, UsageReport,
    WarningCode, STREAM_FORMAT,
};
use gpumeter_recording::{announce_sources, CuptiFormat, CuptiInput, CuptiOptions};
use sha2::{Digest as _, Sha256};

/// One recording of a window set.
#[derive(Debug, Clone, Copy)]
pub struct SetInput<'a> {
    /// The file name (the source's name in the report).
    pub name: &'a str,
    /// The recording's identity (`crate::spool::identity`).
    pub identity: &'a str,
    /// The bytes earlier sets read (empty for a recording new to this set).
    pub old: &'a [u8],
    /// The bytes this set reads (complete frames), `old` and more.
    pub new: &'a [u8],
    /// The recording's tenant by the agent's tenant rule, if any: its work is attributed to
    /// it by a process id of the agent's own for the recording ([`agent_pid`]), so that two
    /// recordings with the same process id (two pods' process-id namespaces) keep their own
    /// tenants.
    pub tenant: Option<&'a gpumeter_core::TenantName>,
    /// What `old` holds, as the previous set found it ([`Closed::next`]); `None`: `old` is
    /// decoded again to know it (after a restart).
    pub known: Option<&'a OldCounts>,
}

/// The process id the agent gives a recording's work for its tenant: `0x8000_0000` or'd with
/// 31 bits of the SHA-256 of its identity (above any Linux process id, `pid_max` ≤ 2^22).
pub fn agent_pid(identity: &str) -> u32 {
    let d = Sha256::digest(identity.as_bytes());
    0x8000_0000 | (u32::from_le_bytes([d[0], d[1], d[2], d[3]]) & 0x7fff_ffff)
}

/// A closed window set.
#[derive(Debug, Clone)]
pub struct Closed {
    /// The report of windows `[from, to)`.
    pub report: UsageReport,
    /// Per recording identity, the latest instant any of its records or memory events reaches
    /// (ns): once the closed edge is past it, the recording has nothing in open windows.
    pub ends: BTreeMap<String, u64>,
    /// Records (and memory events) counted as loss `late`.
    pub late: u64,
    /// Per recording identity, what this set's `new` bytes hold before `to`: the next set's
    /// [`SetInput::known`] for the same bytes (empty when `to` is `u64::MAX`).
    pub next: BTreeMap<String, OldCounts>,
}

/// Why a window set cannot be closed.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    /// A recording does not decode.
    #[error(transparent)]
    Source(#[from] gpumeter_recording::CuptiSourceError),
    /// The meter cannot build the report.
    #[error(transparent)]
    Meter(#[from] gpumeter_core::MeterError),
    /// The report cannot be sealed.
    #[error(transparent)]
    Digest(#[from] gpumeter_core::DigestError),
}

/// Closes `[from, to)` over `inputs` ([module docs](self)). `config` and `tenants` are the
/// meter's (window, horizon; the tenant map with the rule's process ids).
///
/// # Errors
/// [`CloseError`].
pub fn close_set(
    inputs: &[SetInput<'_>],
    from: u64,
    to: u64,
    config: &MeterConfig,
    tenants: &TenantMap,
) -> Result<Closed, CloseError> {
    let opts = CuptiOptions::default();
    let mut meter = Meter::new(config.clone());
    let mut tenants = tenants.clone();
    let mut by_id: HashMap<&str, u32> = HashMap::new();
    for i in inputs {
        if let Some(t) = i.tenant {
            let pid = agent_pid(i.identity);
            tenants.pid.insert(pid, t.clone());
            by_id.insert(i.identity, pid);
        }
    }
    meter.set_tenant_map(tenants);
    let new_inputs: Vec<CuptiInput<'_>> = inputs
        .iter()
        .map(|i| CuptiInput {
            name: i.name,
            bytes: i.new,
            format: CuptiFormat::Gmr,
        })
        .collect();
    let (_, batches) = announce_sources(&mut meter, &new_inputs, &opts)?;
    // The old bytes, decoded apart only to know which records they hold.
    let mut scratch = Meter::new(config.clone());
    let old_inputs: Vec<CuptiInput<'_>> = inputs
        .iter()
        .filter(|i| !i.old.is_empty() && i.known.is_none())
        .map(|i| CuptiInput {
            name: i.name,
            bytes: i.old,
            format: CuptiFormat::Gmr,
        })
        .collect();
    let (_, old_batches) = announce_sources(&mut scratch, &old_inputs, &opts)?;
    let decoded: HashMap<String, OldCounts> = old_batches
        .iter()
        .filter_map(|b| Some((b.recording.clone()?, OldCounts::of(b, &scratch, from))))
        .collect();
    let mut old: HashMap<&str, &OldCounts> = decoded.iter().map(|(k, v)| (k.as_str(), v)).collect();
    for i in inputs {
        if let Some(k) = i.known {
            old.insert(i.identity, k);
        }
    }
    let mut next = BTreeMap::new();

    let mut ends = BTreeMap::new();
    let mut early = Vec::new();
    let mut current = Vec::new();
    let mut late: Vec<(DeviceSlot, u64)> = Vec::new();
    for mut b in batches {
        let id = b.recording.clone().unwrap_or_default();
        if let Some(&pid) = by_id.get(id.as_str()) {
            for r in &mut b.records {
                r.process_id = Some(pid);
            }
            for m in &mut b.memory {
                m.process_id = Some(pid);
            }
        }
        let end = b
            .records
            .iter()
            .map(|r| r.end_ns)
            .chain(b.memory.iter().map(|m| m.timestamp_ns))
            .max()
            .unwrap_or(0);
        ends.insert(id.clone(), end);
        if to != u64::MAX {
            next.insert(id.clone(), OldCounts::of(&b, &meter, to));
        }
        let split = split(b, &meter, old.get(id.as_str()).copied(), from, to);
        early.push(split.early);
        current.push(split.current);
        late.extend(split.late);
    }
    push_batches(&mut meter, early);
    if from > 0 {
        meter.drain(from)?;
    }
    push_batches(&mut meter, current);
    let mut late_total = 0;
    for (slot, n) in late {
        late_total += n;
        meter.record_loss(slot, LossReason::Late, n);
    }
    let mut report = meter.drain(to)?;
    as_stream_piece(&mut report, inputs)?;
    Ok(Closed {
        report,
        ends,
        late: late_total,
        next,
    })
}

/// What the old bytes of one recording hold: per device key, how many records and memory
/// events start before a set's start, and its losses and skipped counts. Opaque: a set makes
/// it for the next ([`Closed::next`]).
#[derive(Debug, Clone, Default)]
pub struct OldCounts {
    records: HashMap<String, u64>,
    memory: HashMap<String, u64>,
    losses: HashMap<(String, LossReason, bool), u64>,
    source_losses: HashMap<(LossReason, bool), u64>,
    skipped: BTreeMap<String, u64>,
}

fn key_of(meter: &Meter, slot: DeviceSlot) -> String {
    meter
        .device(slot)
        .map(|d| d.key.clone())
        .unwrap_or_default()
}

impl OldCounts {
    fn of(b: &Batch, meter: &Meter, from: u64) -> OldCounts {
        let mut c = OldCounts::default();
        let by_key = |slots: HashMap<DeviceSlot, u64>| -> HashMap<String, u64> {
            slots
                .into_iter()
                .map(|(slot, n)| (key_of(meter, slot), n))
                .collect()
        };
        c.records = by_key(before(&b.records, from, |r| (r.start_ns, r.device)));
        c.memory = by_key(before(&b.memory, from, |m| (m.timestamp_ns, m.device)));
        for (slot, reason, n, lower) in &b.losses {
            *c.losses
                .entry((key_of(meter, *slot), *reason, *lower))
                .or_default() += n;
        }
        for (reason, n, lower) in &b.source_losses {
            *c.source_losses.entry((*reason, *lower)).or_default() += n;
        }
        c.skipped = b.skipped.clone();
        c
    }
}

struct Split {
    early: Batch,
    current: Batch,
    late: Vec<(DeviceSlot, u64)>,
}

/// One recording's batch cut into the phases of [`close_set`].
fn split(mut b: Batch, meter: &Meter, old: Option<&OldCounts>, from: u64, to: u64) -> Split {
    let empty = OldCounts::default();
    let old = old.unwrap_or(&empty);
    let mut early = Batch {
        sha256: b.sha256.clone(),
        name: b.name.clone(),
        records: Vec::new(),
        memory: Vec::new(),
        energy: Vec::new(),
        energy_spans: Vec::new(),
        losses: Vec::new(),
        source_losses: Vec::new(),
        skipped: BTreeMap::new(),
        recording: b.recording.clone(),
    };
    let mut late: BTreeMap<DeviceSlot, u64> = BTreeMap::new();
    let old_of = |counts: &HashMap<String, u64>, slot: DeviceSlot| {
        counts.get(&key_of(meter, slot)).copied().unwrap_or(0)
    };
    for (slot, n) in before(&b.records, from, |r| (r.start_ns, r.device)) {
        let had = old_of(&old.records, slot);
        if n > had {
            *late.entry(slot).or_default() += n - had;
        }
    }
    for (slot, n) in before(&b.memory, from, |m| (m.timestamp_ns, m.device)) {
        let had = old_of(&old.memory, slot);
        if n > had {
            *late.entry(slot).or_default() += n - had;
        }
    }
    let records = std::mem::take(&mut b.records);
    b.records = partition(records, (from, to), &mut early.records, |r| {
        (r.start_ns, r.end_ns)
    });
    let memory = std::mem::take(&mut b.memory);
    b.memory = partition(memory, (from, to), &mut early.memory, |m| {
        (m.timestamp_ns, u64::MAX)
    });
    // Energy is apportioned over whole runs of samples and cannot be drained (docs/AGENT.md,
    // "Limits"): the agent meters no energy.
    b.energy.clear();
    b.energy_spans.clear();
    b.losses = b
        .losses
        .into_iter()
        .filter_map(|(slot, reason, n, lower)| {
            let had = old
                .losses
                .get(&(key_of(meter, slot), reason, lower))
                .copied()
                .unwrap_or(0);
            (n > had).then(|| (slot, reason, n - had, lower))
        })
        .collect();
    b.source_losses = b
        .source_losses
        .into_iter()
        .filter_map(|(reason, n, lower)| {
            let had = old
                .source_losses
                .get(&(reason, lower))
                .copied()
                .unwrap_or(0);
            (n > had).then(|| (reason, n - had, lower))
        })
        .collect();
    b.skipped = std::mem::take(&mut b.skipped)
        .into_iter()
        .filter_map(|(k, n)| {
            let had = old.skipped.get(&k).copied().unwrap_or(0);
            (n > had).then(|| (k, n - had))
        })
        .collect();
    Split {
        early,
        current: b,
        late: late.into_iter().collect(),
    }
}

/// How many of `items` start before `from`, per device (`key`: start, device).
fn before<T>(
    items: &[T],
    from: u64,
    key: impl Fn(&T) -> (u64, DeviceSlot),
) -> HashMap<DeviceSlot, u64> {
    let mut n: HashMap<DeviceSlot, u64> = HashMap::new();
    for item in items {
        let (start, device) = key(item);
        if start < from {
            *n.entry(device).or_default() += 1;
        }
    }
    n
}

/// Cuts `items` by start time: before `from`, those that reach past `from` go to `early` (the
/// others change no window from `from` on); from `from` to `to`, the items returned; from
/// `to` on, dropped (a later set takes them). `key` gives an item's start and end (ns).
fn partition<T>(
    items: Vec<T>,
    (from, to): (u64, u64),
    early: &mut Vec<T>,
    key: impl Fn(&T) -> (u64, u64),
) -> Vec<T> {
    let mut current = Vec::new();
    for item in items {
        let (start, end) = key(&item);
        if start >= to {
            continue;
        }
        if start >= from {
            current.push(item);
        } else if end > from {
            early.push(item);
        }
    }
    current
}

/// Names each source by its recording's identity, as a piece of a stream, marks the report
/// complete (its windows are closed by the node's watermark, `docs/AGENT.md`) and seals it.
fn as_stream_piece(report: &mut UsageReport, inputs: &[SetInput<'_>]) -> Result<(), CloseError> {
    let by_name: HashMap<&str, &str> = inputs.iter().map(|i| (i.name, i.identity)).collect();
    for s in &mut report.sources {
        if let Some(id) = by_name.get(s.name.as_str()) {
            s.sha256 = hex::encode(Sha256::digest(id.as_bytes()));
            s.format = STREAM_FORMAT.to_string();
        }
    }
    // A live recording has no end frame yet; its closed windows are final all the same.
    report
        .warnings
        .retain(|w| *w.code() != WarningCode::UnfinishedRecording);
    report.complete = Some(true);
    report.seal()?;
    Ok(())
}
