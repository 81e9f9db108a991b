//! A recording replayed buffer by buffer through a [`CuptiStream`] meters what the whole
//! file does (`meter_path`), meter by meter.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpumeter_core::{Meter, MeterConfig, UsageReport, WindowSize};
use gpumeter_cupti::stream::CuptiStream;
use gpumeter_cupti::ApiVersion;
use gpumeter_recording::replay::{Replay, ReplayItem};
use gpumeter_recording::{meter_path, CuptiOptions};

fn totals(r: &UsageReport) -> BTreeMap<String, u128> {
    let mut t = BTreeMap::new();
    for row in &r.usage {
        *t.entry(row.meter.as_str().to_string()).or_insert(0) += row.quantity.0;
    }
    t
}

fn replay_into(meter: &mut Meter, path: &PathBuf) -> CuptiStream {
    let bytes = std::fs::read(path).expect("read");
    let replay = Replay::from_bytes("rec", &bytes, ApiVersion::default()).expect("replay");
    let mut stream = CuptiStream::new("agent", replay.api);
    for item in replay.items {
        match item {
            ReplayItem::Device(d) => {
                let mut info = gpumeter_core::DeviceInfo::bare("", d.id);
                info.name = d.name;
                info.uuid = d.uuid;
                info.sm_count = d.sm_count;
                info.compute_capability = d.compute_capability.and_then(|c| c.parse().ok());
                stream
                    .register_device(meter, info)
                    .expect("one UUID per device");
            }
            ReplayItem::Buffer(b) => {
                stream.ingest(meter, &b).expect("buffer decodes");
            }
            ReplayItem::Dropped { device_id, count } => {
                stream.report_dropped(meter, device_id, count)
            }
            ReplayItem::ProcessExit { pid, timestamp_ns } => {
                stream.process_exited(meter, pid, timestamp_ns)
            }
        }
    }
    stream.seal(meter);
    stream
}

#[test]
fn replayed_recordings_meter_as_the_whole_file() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/data");
    for name in ["h200-cuda13-smoke.gmr", "h200-cuda13-green-context.gmr"] {
        let path = root.join(name);
        for window in [3600, 1] {
            let config = MeterConfig {
                window: WindowSize::from_seconds(window).expect("window"),
                ..MeterConfig::default()
            };
            let mut whole = Meter::new(config.clone());
            meter_path(&mut whole, &path, &CuptiOptions::default()).expect("meter");
            let whole = whole.finish().expect("report");
            let mut streamed = Meter::new(config.clone());
            replay_into(&mut streamed, &path);
            let snap = streamed.snapshot().expect("snapshot");
            let mut want = totals(&whole);
            // Energy frames are not part of the buffer stream.
            want.remove("energy_mj");
            assert_eq!(totals(&snap), want, "{name} at {window} s");
            // Drained in pieces, then the rest: the same rows.
            let mut drained = Meter::new(config);
            let mut stream = replay_into(&mut drained, &path);
            let mut sum: BTreeMap<(String, String, String), u128> = BTreeMap::new();
            let mut parts = Vec::new();
            let w = drained.watermark_ns();
            for edge in [w / 2, w, w + 1_000_000_000, u64::MAX] {
                let part = stream.drain(&mut drained, edge).expect("drain");
                parts.push((format!("drain-{edge}"), part.clone()));
                for r in &part.usage {
                    *sum.entry((
                        r.window_start.clone(),
                        r.device_key.clone(),
                        r.meter.as_str().to_string(),
                    ))
                    .or_insert(0) += r.quantity.0;
                }
            }
            let rest = drained.snapshot().expect("snapshot");
            assert!(rest.usage.is_empty(), "{name}: everything was drained");
            let mut want_rows: BTreeMap<(String, String, String), u128> = BTreeMap::new();
            for r in &snap.usage {
                *want_rows
                    .entry((
                        r.window_start.clone(),
                        r.device_key.clone(),
                        r.meter.as_str().to_string(),
                    ))
                    .or_insert(0) += r.quantity.0;
            }
            assert_eq!(sum, want_rows, "{name} at {window} s: drained rows");
            // The drained reports of one stream merge (each has a source identity of its own)
            // into the rows of the snapshot.
            let merged = gpumeter_core::merge_reports(&parts).expect("drained reports merge");
            let mut merged_rows: BTreeMap<(String, String, String), u128> = BTreeMap::new();
            for r in &merged.usage {
                *merged_rows
                    .entry((
                        r.window_start.clone(),
                        r.device_key.clone(),
                        r.meter.as_str().to_string(),
                    ))
                    .or_insert(0) += r.quantity.0;
            }
            assert_eq!(
                merged_rows, want_rows,
                "{name} at {window} s: merged drains"
            );
        }
    }
}

/// Appends a zeroed record of `kind` with `fields` (CUPTI header names) laid out by `api`.
fn put(
    buf: &mut Vec<u8>,
    api: ApiVersion,
    kind: gpumeter_cupti::ActivityKind,
    fields: &[(&str, u64)],
) {
    let layout = api
        .layouts()
        .into_iter()
        .find(|l| l.kind == kind)
        .expect("layout of the kind");
    let at = buf.len();
    buf.resize(at + layout.size, 0);
    buf[at..at + 4].copy_from_slice(&kind.0.to_le_bytes());
    for (name, value) in fields {
        let f = layout
            .fields
            .iter()
            .find(|f| f.name == *name)
            .expect("field of the layout");
        buf[at + f.offset..at + f.offset + f.width]
            .copy_from_slice(&value.to_le_bytes()[..f.width]);
    }
}

/// Ten minutes of kernels and copies on two devices from three processes, in 40 buffers whose
/// records overlap the next buffer's in time; each launch's RUNTIME record (its process id)
/// sits in the same buffer.
fn synthetic_buffers(api: ApiVersion) -> Vec<Vec<u8>> {
    use gpumeter_cupti::ActivityKind;
    let t0: u64 = 1_793_606_160_000_000_000; // 2026-11-02T09:16:00Z
    let mut buffers = Vec::new();
    let mut corr = 0u64;
    for b in 0..40u64 {
        let mut buf = Vec::new();
        for i in 0..25u64 {
            corr += 1;
            // 15 s per buffer; records reach 4 s into the next buffer's span.
            let start = t0 + b * 15_000_000_000 + i * 600_000_000 + (corr * 7_919 % 1_000) * 1_000;
            let end = start + 4_000_000_000 + (corr % 5) * 1_000_000;
            let device = corr % 2;
            put(
                &mut buf,
                api,
                ActivityKind::RUNTIME,
                &[
                    ("correlationId", corr),
                    ("processId", 4_000 + corr % 3),
                    ("start", start - 5_000),
                    ("end", start - 1_000),
                ],
            );
            if corr.is_multiple_of(4) {
                put(
                    &mut buf,
                    api,
                    ActivityKind::MEMCPY,
                    &[
                        ("copyKind", 1),
                        ("bytes", 1 << 20),
                        ("start", start),
                        ("end", start + 80_000),
                        ("deviceId", device),
                        ("contextId", 1),
                        ("streamId", 7),
                        ("correlationId", corr),
                    ],
                );
            } else {
                put(
                    &mut buf,
                    api,
                    ActivityKind::CONCURRENT_KERNEL,
                    &[
                        ("start", start),
                        ("end", end),
                        ("gridX", 1 + corr % 200),
                        ("gridY", 1),
                        ("gridZ", 1),
                        ("blockX", 128),
                        ("blockY", 1),
                        ("blockZ", 1),
                        ("deviceId", device),
                        ("contextId", 1),
                        ("streamId", 7 + corr % 3),
                        ("correlationId", corr),
                    ],
                );
            }
        }
        buffers.push(buf);
    }
    buffers
}

type Rows = BTreeMap<(String, u32, String, String), u128>;

fn rows(r: &UsageReport, into: &mut Rows) {
    for row in &r.usage {
        *into
            .entry((
                row.tenant.clone(),
                row.device,
                row.window_start.clone(),
                row.meter.as_str().to_string(),
            ))
            .or_insert(0) += row.quantity.0;
    }
}

#[test]
fn drains_mid_stream_hold_usage_and_sum_to_the_whole_source() {
    let api = ApiVersion::default();
    let buffers = synthetic_buffers(api);
    let config = MeterConfig {
        window: WindowSize::from_seconds(60).expect("window"),
        ..MeterConfig::default()
    };
    let mut tenants = gpumeter_core::TenantMap::default();
    tenants.pid.insert(
        4_000,
        gpumeter_core::TenantName::parse("alice").expect("tenant"),
    );
    tenants.pid.insert(
        4_001,
        gpumeter_core::TenantName::parse("bob").expect("tenant"),
    );
    // The whole source at once (the buffers concatenated: one raw buffer file).
    let mut whole = Meter::new(config.clone());
    whole.set_tenant_map(tenants.clone());
    let all: Vec<u8> = buffers.concat();
    gpumeter_recording::meter_buffer(&mut whole, "all.bin", &all, &CuptiOptions::default())
        .expect("meter");
    let whole = whole.finish().expect("report");
    let mut want = Rows::new();
    rows(&whole, &mut want);
    assert!(want.keys().any(|k| k.0 == "alice") && want.keys().any(|k| k.0 == "bob"));
    // The stream, drained at the watermark after every buffer.
    let mut meter = Meter::new(config);
    meter.set_tenant_map(tenants);
    let mut stream = CuptiStream::new("agent", api);
    let mut got = Rows::new();
    let mut drained_with_usage = 0;
    let mut seen: std::collections::BTreeSet<(String, u32, String, String)> = Default::default();
    for b in &buffers {
        stream.ingest(&mut meter, b).expect("buffer decodes");
        let w = meter.watermark_ns();
        let part = stream.drain(&mut meter, w).expect("drain");
        assert!(
            part.loss.is_empty(),
            "nothing is late when draining at the watermark"
        );
        if !part.usage.is_empty() {
            drained_with_usage += 1;
        }
        let mut r = Rows::new();
        rows(&part, &mut r);
        for k in r.keys() {
            assert!(seen.insert(k.clone()), "row {k:?} handed over twice");
        }
        for (k, v) in r {
            *got.entry(k).or_insert(0) += v;
        }
    }
    let last = stream.drain(&mut meter, u64::MAX).expect("drain");
    rows(&last, &mut got);
    assert!(
        drained_with_usage > 5,
        "windows were handed over while the stream ran"
    );
    assert_eq!(got, want);
    // Records counted once over all drains.
    assert_eq!(meter.snapshot().expect("snapshot").usage.len(), 0);
    // A record that starts before a drained edge is late, never billed again.
    let late = synthetic_buffers(api).remove(0);
    stream.ingest(&mut meter, &late).expect("decodes");
    let after = meter.snapshot().expect("snapshot");
    assert!(after.usage.is_empty());
    let lost: u64 = after
        .loss
        .iter()
        .filter(|l| l.reason == "late")
        .map(|l| l.records)
        .sum();
    assert_eq!(lost, 25);
}

/// A model loaded long before its first kernel, in one buffer: the allocation (T0), the
/// kernel (T0 + 90 s) and the release (T0 + 100 s) meter as the whole file does, with no
/// allocation lost as late (the stream pushes a buffer's work and memory in time order).
#[test]
fn an_allocation_long_before_the_first_kernel_of_its_buffer_is_metered() {
    use gpumeter_cupti::ActivityKind;
    let api = ApiVersion::default();
    let t0: u64 = 1_793_606_160_000_000_000;
    let mut buf = Vec::new();
    let mem = |op: u64, at: u64| {
        [
            ("memoryOperationType", op),
            ("memoryKind", 3),
            ("address", 0x7f00_0000_0000),
            ("bytes", 1 << 30),
            ("timestamp", at),
            ("processId", 77),
            ("deviceId", 0),
            ("contextId", 1),
        ]
    };
    put(&mut buf, api, ActivityKind::MEMORY2, &mem(1, t0));
    put(
        &mut buf,
        api,
        ActivityKind::CONCURRENT_KERNEL,
        &[
            ("start", t0 + 90_000_000_000),
            ("end", t0 + 91_000_000_000),
            ("gridX", 4),
            ("gridY", 1),
            ("gridZ", 1),
            ("blockX", 128),
            ("blockY", 1),
            ("blockZ", 1),
            ("deviceId", 0),
            ("contextId", 1),
            ("streamId", 7),
            ("correlationId", 1),
        ],
    );
    put(
        &mut buf,
        api,
        ActivityKind::MEMORY2,
        &mem(2, t0 + 100_000_000_000),
    );
    let mut whole = Meter::new(MeterConfig::default());
    gpumeter_recording::meter_buffer(&mut whole, "b.bin", &buf, &CuptiOptions::default())
        .expect("meter");
    let whole = whole.finish().expect("report");
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("agent", api);
    stream.ingest(&mut meter, &buf).expect("decodes");
    let streamed = meter.snapshot().expect("snapshot");
    assert!(streamed.loss.is_empty(), "{:?}", streamed.loss);
    assert_eq!(totals(&streamed), totals(&whole));
    assert_eq!(
        totals(&streamed).get("memory_byte_ns"),
        Some(&((1u128 << 30) * 100_000_000_000))
    );
}

/// Two streams of the same name (two idle nodes with the default source name): their drained
/// reports have sources of their own and merge; their devices without a UUID stay two.
#[test]
fn two_streams_never_share_a_source_or_a_device_without_uuid() {
    let api = ApiVersion::default();
    let buffers = synthetic_buffers(api);
    let mut parts = Vec::new();
    let mut keys = Vec::new();
    for node in 0..2 {
        let mut meter = Meter::new(MeterConfig::default());
        let mut stream = CuptiStream::new("gm_meter", api);
        // Idle, but for a dropped count of a device it cannot name: the same as the other's.
        stream.report_dropped(&mut meter, None, 5);
        parts.push((
            format!("idle-{node}"),
            stream.drain(&mut meter, 1_000).expect("drain"),
        ));
        stream.ingest(&mut meter, &buffers[0]).expect("decodes");
        let r = stream.drain(&mut meter, u64::MAX).expect("drain");
        keys.push(
            r.devices
                .iter()
                .map(|d| d.device_key.clone())
                .collect::<Vec<_>>(),
        );
        parts.push((format!("work-{node}"), r));
    }
    assert_ne!(parts[0].1.sources, parts[2].1.sources);
    assert_ne!(
        keys[0], keys[1],
        "devices without a UUID on two nodes are two devices"
    );
    let merged = gpumeter_core::merge_reports(&parts).expect("the pieces of two nodes merge");
    assert_eq!(merged.devices.len(), 4, "two devices per node");
}

/// A replay refuses what a buffer stream cannot carry instead of skipping it: damaged
/// frames (their records are loss) and instrumented recordings (SASS instruction frames).
#[test]
fn replay_refuses_damaged_and_instrumented_recordings() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/data");
    let smoke = std::fs::read(root.join("h200-cuda13-smoke.gmr")).expect("read");
    let torn = &smoke[..smoke.len() - 100];
    let e = Replay::from_bytes("torn.gmr", torn, ApiVersion::default()).expect_err("torn");
    assert!(e.to_string().contains("damaged frames"), "{e}");
    let mut corrupt = smoke.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0xff;
    let e =
        Replay::from_bytes("corrupt.gmr", &corrupt, ApiVersion::default()).expect_err("corrupt");
    assert!(e.to_string().contains("damaged frames"), "{e}");
    let instr = std::fs::read(root.join("h200-cuda13-instructions.gmr")).expect("read");
    let e = Replay::from_bytes("i.gmr", &instr, ApiVersion::default()).expect_err("instrumented");
    assert!(e.to_string().contains("instrumented"), "{e}");
    assert!(Replay::from_bytes("s.gmr", &smoke, ApiVersion::default()).is_ok());
}

/// A description the agent registers before a buffer whose DEVICE record says otherwise:
/// the record wins (key, SM count); the description fills only what the record lacks.
#[test]
fn a_device_record_wins_over_the_agents_description() {
    let live = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../gpumeter-cupti/tests/c/live/h200_r580_cupti_130001.bin");
    let buf = std::fs::read(live).expect("read");
    let api = ApiVersion::from_cupti(130_001).expect("api");
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("agent", api);
    let mut fake = gpumeter_core::DeviceInfo::bare("", 0);
    fake.name = Some("Fake GPU".to_string());
    fake.sm_count = Some(16);
    stream
        .register_device(&mut meter, fake)
        .expect("no UUID, no conflict");
    stream.ingest(&mut meter, &buf).expect("decodes");
    let r = meter.snapshot().expect("snapshot");
    let d = &r.devices[0];
    assert!(d.device_key.starts_with("GPU-7251c3cc"), "{}", d.device_key);
    assert_eq!(d.sm_count, Some(132));
    assert_eq!(
        d.name.as_deref(),
        Some("Fake GPU"),
        "the record has no name: the description's"
    );
}

/// Hostile review of issue 30, finding 6: a description of another device id with the UUID of
/// a DEVICE record, spelled in upper case or with a lower-case prefix, is that record's UUID
/// (`DuplicateUuid`, nothing registered); device 0 described so is the same device, and its
/// key stays the record's (`GPU-` and lower-case hex). Before, the other spellings were other
/// devices.
#[test]
fn a_uuid_in_another_spelling_is_the_device_records_uuid() {
    let live = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../gpumeter-cupti/tests/c/live/h200_r580_cupti_130001.bin");
    let buf = std::fs::read(live).expect("read");
    let api = ApiVersion::from_cupti(130_001).expect("api");
    let key = "GPU-7251c3cc-143b-27a0-9151-7bdbbf954522";
    for spelling in [
        "GPU-7251C3CC-143B-27A0-9151-7BDBBF954522",
        "gpu-7251c3cc-143b-27a0-9151-7bdbbf954522",
        "7251C3CC-143b-27a0-9151-7bdbbf954522",
    ] {
        let mut meter = Meter::new(MeterConfig::default());
        let mut stream = CuptiStream::new("agent", api);
        stream.ingest(&mut meter, &buf).expect("decodes");
        let mut other = gpumeter_core::DeviceInfo::bare("", 5);
        other.uuid = Some(spelling.to_string());
        let e = stream
            .register_device(&mut meter, other)
            .expect_err("device 0's UUID");
        assert!(e.to_string().contains(key), "{spelling}: {e}");
        let mut same = gpumeter_core::DeviceInfo::bare("", 0);
        same.uuid = Some(spelling.to_string());
        stream
            .register_device(&mut meter, same)
            .expect("device 0 itself");
        let r = meter.snapshot().expect("snapshot");
        let keys: Vec<&str> = r.devices.iter().map(|d| d.device_key.as_str()).collect();
        assert_eq!(keys, [key], "{spelling}");
    }
}

/// INSTRUCTION_EXECUTION counts: a count in the kernel's buffer is metered, a count that comes
/// a buffer after its kernel is said in a warning (never dropped silently), and every drained
/// report of an instrumented period carries the instrumented-run warning.
#[test]
fn instruction_counts_late_are_said_and_each_piece_is_marked_instrumented() {
    use gpumeter_cupti::ActivityKind;
    let api = ApiVersion::default();
    let t0: u64 = 1_793_606_160_000_000_000;
    let kernel = |buf: &mut Vec<u8>, corr: u64, at: u64| kernel_at(buf, api, corr, at);
    let count = |buf: &mut Vec<u8>, corr: u64| {
        put(
            buf,
            api,
            ActivityKind::INSTRUCTION_EXECUTION,
            &[("correlationId", corr), ("executed", 1234)],
        );
    };
    let config = MeterConfig {
        window: WindowSize::from_seconds(60).expect("window"),
        reorder_horizon_ns: 0,
        ..MeterConfig::default()
    };
    let mut meter = Meter::new(config);
    let mut stream = CuptiStream::new("agent", api);
    // Piece 1: kernel 1 with its count.
    let mut b1 = Vec::new();
    kernel(&mut b1, 1, t0);
    count(&mut b1, 1);
    stream.ingest(&mut meter, &b1).expect("decodes");
    let mut b2 = Vec::new();
    kernel(&mut b2, 2, t0 + 61_000_000_000);
    count(&mut b2, 2);
    stream.ingest(&mut meter, &b2).expect("decodes");
    let p1 = stream
        .drain(&mut meter, t0 + 60_000_000_000)
        .expect("drain");
    let instrumented = |r: &UsageReport| r.warnings.iter().any(|w| w.contains("instrumented run"));
    assert!(instrumented(&p1));
    // Piece 2: kernel 2's count was in its buffer; kernel 3's count comes a buffer later.
    let mut b3 = Vec::new();
    kernel(&mut b3, 3, t0 + 62_000_000_000);
    stream.ingest(&mut meter, &b3).expect("decodes");
    let mut b4 = Vec::new();
    count(&mut b4, 3);
    kernel(&mut b4, 4, t0 + 63_000_000_000);
    stream.ingest(&mut meter, &b4).expect("decodes");
    let p2 = stream.drain(&mut meter, u64::MAX).expect("drain");
    assert!(instrumented(&p2), "{:?}", p2.warnings);
    assert!(
        p2.warnings
            .iter()
            .any(|w| w.contains("1 INSTRUCTION_EXECUTION counts")
                && w.contains("after their kernels")),
        "{:?}",
        p2.warnings
    );
}

/// A stream's reports share one source identity: its drained pieces merge (disjoint
/// windows), a snapshot never merges with another report of the stream (its windows may be
/// handed over again), and two snapshots do not merge either.
#[test]
fn a_snapshot_never_merges_with_other_reports_of_its_stream() {
    let api = ApiVersion::default();
    let buffers = synthetic_buffers(api);
    let config = MeterConfig {
        window: WindowSize::from_seconds(60).expect("window"),
        ..MeterConfig::default()
    };
    let mut meter = Meter::new(config);
    let mut stream = CuptiStream::new("agent", api);
    for b in &buffers[..20] {
        stream.ingest(&mut meter, b).expect("decodes");
    }
    let snap1 = stream.snapshot(&mut meter).expect("snapshot");
    assert_eq!(
        snap1.sources[0].format,
        gpumeter_cupti::stream::STREAM_SNAPSHOT_FORMAT
    );
    let w = meter.watermark_ns();
    let piece1 = stream.drain(&mut meter, w).expect("drain");
    assert_eq!(
        piece1.sources[0].format,
        gpumeter_cupti::stream::STREAM_FORMAT
    );
    assert_eq!(
        piece1.sources[0].sha256, snap1.sources[0].sha256,
        "one identity"
    );
    for b in &buffers[20..] {
        stream.ingest(&mut meter, b).expect("decodes");
    }
    let snap2 = stream.snapshot(&mut meter).expect("snapshot");
    let piece2 = stream.drain(&mut meter, u64::MAX).expect("drain");
    let merge = |a: &UsageReport, b: &UsageReport| {
        gpumeter_core::merge_reports(&[
            ("a.json".to_string(), a.clone()),
            ("b.json".to_string(), b.clone()),
        ])
    };
    assert!(merge(&piece1, &piece2).is_ok(), "drained pieces merge");
    for (a, b) in [
        (&snap1, &piece1),
        (&snap1, &piece2),
        (&snap2, &piece2),
        (&snap1, &snap2),
    ] {
        let e = merge(a, b).expect_err("a snapshot does not merge with its stream's reports");
        assert!(
            matches!(e, gpumeter_core::MergeError::SharedSource { .. }),
            "{e}"
        );
    }
}

fn kernel_at(buf: &mut Vec<u8>, api: ApiVersion, corr: u64, at: u64) {
    put(
        buf,
        api,
        gpumeter_cupti::ActivityKind::CONCURRENT_KERNEL,
        &[
            ("start", at),
            ("end", at + 1_000),
            ("gridX", 4),
            ("gridY", 1),
            ("gridZ", 1),
            ("blockX", 128),
            ("blockY", 1),
            ("blockZ", 1),
            ("deviceId", 0),
            ("contextId", 1),
            ("streamId", 7),
            ("correlationId", corr),
        ],
    );
}

fn memory_at(buf: &mut Vec<u8>, api: ApiVersion, op: u64, at: u64, pid: u64) {
    put(
        buf,
        api,
        gpumeter_cupti::ActivityKind::MEMORY2,
        &[
            ("memoryOperationType", op),
            ("memoryKind", 3),
            ("address", 0x7f00_0000_0000 + pid),
            ("bytes", 1 << 30),
            ("timestamp", at),
            ("processId", pid),
            ("deviceId", 0),
            ("contextId", 1),
        ],
    );
}

/// One memory event dated ten years ahead moves the watermark; a drain there would hold an
/// allocation over more windows than the meter's budget: it fails, and leaves the meter as it
/// was (snapshots and a drain at a sane edge still work).
#[test]
fn a_failed_drain_leaves_the_meter_usable() {
    let api = ApiVersion::default();
    let t0: u64 = 1_793_606_160_000_000_000;
    let mut buf = Vec::new();
    memory_at(&mut buf, api, 1, t0, 77);
    kernel_at(&mut buf, api, 1, t0 + 1_000_000_000);
    memory_at(&mut buf, api, 1, t0 + 10 * 365 * 86_400_000_000_000, 78);
    let config = MeterConfig {
        max_cells: 1_000,
        ..MeterConfig::default()
    };
    let mut meter = Meter::new(config);
    let mut stream = CuptiStream::new("agent", api);
    stream.ingest(&mut meter, &buf).expect("decodes");
    let before = stream.snapshot(&mut meter).expect("snapshot");
    let w = meter.watermark_ns();
    assert!(
        stream.drain(&mut meter, w).is_err(),
        "ten years of 1 h windows pass 1 000 cells"
    );
    assert_eq!(meter.watermark_ns(), w, "nothing moved");
    let after = stream
        .snapshot(&mut meter)
        .expect("the meter still builds reports");
    assert_eq!(totals(&after), totals(&before));
    let piece = stream
        .drain(&mut meter, t0 + 7_200_000_000_000)
        .expect("a sane drain");
    assert!(totals(&piece).contains_key("kernel_ns"));
}

/// A count that comes before its kernel, in a buffer after a later launch's kernel (kernels
/// of concurrent streams complete out of launch order), waits for its kernel.
#[test]
fn a_count_before_its_kernel_waits_for_it() {
    let api = ApiVersion::default();
    let t0: u64 = 1_793_606_160_000_000_000;
    let count = |buf: &mut Vec<u8>, corr: u64| {
        put(
            buf,
            api,
            gpumeter_cupti::ActivityKind::INSTRUCTION_EXECUTION,
            &[("correlationId", corr), ("executed", 1234)],
        );
    };
    let mut b1 = Vec::new();
    kernel_at(&mut b1, api, 5, t0 + 2_000);
    count(&mut b1, 5);
    let mut b2 = Vec::new();
    count(&mut b2, 3);
    let mut b3 = Vec::new();
    kernel_at(&mut b3, api, 3, t0);
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("agent", api);
    for b in [&b1, &b2, &b3] {
        stream.ingest(&mut meter, b).expect("decodes");
    }
    let r = stream.snapshot(&mut meter).expect("snapshot");
    assert_eq!(
        totals(&r).get("warp_instructions"),
        Some(&2468),
        "{:?}",
        r.warnings
    );
    assert!(!r.warnings.iter().any(|w| w.contains("after their kernels")));
    assert!(r.warnings.iter().any(|w| w.contains("instrumented run")));
    // The C ABI's stream carries no PM samples: its warning does not speak of sm_active_ns.
    assert!(!r.warnings.iter().any(|w| w.contains("sm_active_ns")));
}

/// A process exit said before the stream has placed any device still closes the process's
/// allocations on devices placed later.
#[test]
fn an_exit_before_its_device_is_placed_still_closes_its_memory() {
    let api = ApiVersion::default();
    let t0: u64 = 1_793_606_160_000_000_000;
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("agent", api);
    stream.process_exited(&mut meter, 77, t0 + 9_000_000_000);
    let mut buf = Vec::new();
    memory_at(&mut buf, api, 1, t0, 77);
    kernel_at(&mut buf, api, 1, t0 + 19_000_000_000);
    stream.ingest(&mut meter, &buf).expect("decodes");
    let r = stream.snapshot(&mut meter).expect("snapshot");
    assert_eq!(
        totals(&r).get("memory_byte_ns"),
        Some(&((1u128 << 30) * 9_000_000_000))
    );
    assert!(r.open_allocations.is_empty());
}

/// The drain of everything lists the allocations still held (billed to the latest work) as
/// `open_allocations`, for the next report's opening state, and the meter forgets them.
#[test]
fn the_final_drain_hands_over_the_allocations_still_held() {
    let api = ApiVersion::default();
    let t0: u64 = 1_793_606_160_000_000_000;
    let mut buf = Vec::new();
    memory_at(&mut buf, api, 1, t0, 77);
    kernel_at(&mut buf, api, 1, t0 + 5_000_000_000);
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("agent", api);
    stream.ingest(&mut meter, &buf).expect("decodes");
    let last = stream.drain(&mut meter, u64::MAX).expect("drain");
    assert_eq!(last.open_allocations.len(), 1);
    assert_eq!(
        totals(&last).get("memory_byte_ns"),
        Some(&((1u128 << 30) * 5_000_001_000))
    );
    let after = stream.snapshot(&mut meter).expect("snapshot");
    assert!(after.open_allocations.is_empty() && after.usage.is_empty());
}
