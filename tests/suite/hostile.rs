//! One test per class of defect of issue 9, on the corpus of `tests/hostile/` (see its
//! README.md) and on binary cases generated here.

use std::io::Read as _;
use std::path::PathBuf;

use gpumeter::core::{
    ActivityRecord, DeviceInfo, KernelLaunch, MemoryEvent, MemoryOp, Meter, MeterConfig,
    MeterError, MeterKind, UsageReport, WindowSize, Work,
};
use gpumeter::cupti::gmr::{read_gmr, Damage, Frame, GmrWriter};
use gpumeter::cupti::{decode, ActivityKind, ApiVersion, Record};
use gpumeter::{meter_inputs, Format, ImportError, UsageOptions};

use crate::{corpus, data_dir, example, lost, meter, ok, total, validate, warning};

/// 2025-12-02T08:00:00Z in ns.
const T0: u64 = 1_764_662_400_000_000_000;
const DAY: u64 = 86_400_000_000_000;

fn tmp() -> tempfile::TempDir {
    ok(tempfile::tempdir())
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.path().join(name);
    ok(std::fs::write(&p, bytes));
    p
}

// 1. The same work in new bytes is billed once.

#[test]
fn a_reserialized_trace_beside_the_original_is_metered_once() {
    let one = meter(&[corpus("twin-a.json")]);
    let both = meter(&[corpus("twin-a.json"), corpus("twin-b.json")]);
    let swapped = meter(&[corpus("twin-b.json"), corpus("twin-a.json")]);
    assert!(total(&one, MeterKind::KernelLaunches) > 0);
    for m in MeterKind::ALL {
        assert_eq!(total(&both, m), total(&one, m), "{m}");
    }
    // Either order keeps the source whose SHA-256 sorts first: the same usage.
    assert_eq!(both.usage, swapped.usage);
    let w = warning(&both, "repeats the GPU work of");
    assert!(
        w.contains("twin-a.json") && w.contains("twin-b.json"),
        "{w}"
    );
    assert!(w.contains("the same 7 records"), "{w}");
    assert_eq!(both.devices.len(), 1, "{:?}", both.devices);
    assert!(both.loss.is_empty(), "{:?}", both.loss);
}

#[test]
fn a_partial_overlap_is_metered_and_said() {
    let r = meter(&[corpus("twin-a.json"), corpus("twin-part.json")]);
    let w = warning(&r, "records in common");
    assert!(w.contains("have 3 records in common"), "{w}");
    assert!(
        w.contains("twin-a.json") && w.contains("twin-part.json"),
        "{w}"
    );
    // Both are metered: nothing is dropped on a guess.
    assert_eq!(total(&r, MeterKind::KernelLaunches), 6 + 4);
}

#[test]
fn a_real_trace_reserialized_is_metered_once() {
    let Some(dir) = data_dir() else { return };
    let src = dir.join("tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz");
    let mut text = Vec::new();
    ok(flate2::read::GzDecoder::new(ok(std::fs::File::open(&src))).read_to_end(&mut text));
    // Other whitespace and other key order, numbers as written (RawValue keeps their text).
    let v: std::collections::BTreeMap<String, Box<serde_json::value::RawValue>> =
        ok(serde_json::from_slice(&text));
    let mut out = String::from("{\n");
    for (i, (k, raw)) in v.iter().rev().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        out.push_str(&format!(
            "  {}: {}",
            ok(serde_json::to_string(k)),
            raw.get()
        ));
    }
    out.push_str("\n}\n");
    let d = tmp();
    let twin = write(&d, "bert-reserialized.json", out.as_bytes());
    let one = meter(std::slice::from_ref(&src));
    let both = meter(&[src, twin]);
    for m in MeterKind::ALL {
        assert_eq!(total(&both, m), total(&one, m), "{m}");
    }
    assert!(warning(&both, "repeats the GPU work of").contains("bert-reserialized.json"));
}

// 2. Whole buffers never vanish without a loss entry.

/// A real recording (4 activity buffers) rewritten to end with its last activity buffer, torn: without its
/// 4-byte checksum (and without an end frame). Returns the bytes and the records (work and
/// device memory, per device id) of that buffer.
fn torn_crc_only() -> (Vec<u8>, u64) {
    let bytes = ok(std::fs::read(example(
        "h200-cuda13-instructions-2threads.gmr",
    )));
    let file = ok(read_gmr(&bytes));
    let api = ok(ApiVersion::from_cupti(file.header.cupti_api_version));
    let work = |buf: &[u8]| {
        ok(decode(buf, api))
            .records
            .iter()
            .filter(|r| {
                matches!(
                    r.record,
                    Record::Kernel(_)
                        | Record::Memcpy(_)
                        | Record::PeerCopy(_)
                        | Record::Memset(_)
                        | Record::GraphTrace(_)
                        | Record::Memory(_)
                )
            })
            .count() as u64
    };
    // The last activity buffer that holds work, and the frames before it.
    let (last, n) = file
        .frames
        .iter()
        .enumerate()
        .rev()
        .find_map(|(i, f)| match &f.frame {
            Frame::ActivityBuffer(b) if work(b) > 0 => Some((i, work(b))),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no activity buffer with work in the recording"));
    assert!(last > 0, "frames before the torn one are kept and metered");
    let mut w = ok(GmrWriter::new(Vec::new(), &file.header));
    for f in &file.frames[..=last] {
        ok(w.write_frame(&f.frame));
    }
    let mut out = ok(w.finish());
    // Drop the end frame (16 bytes) and the buffer's checksum (4).
    out.truncate(out.len() - 16 - 4);
    (out, n)
}

#[test]
fn a_frame_without_only_its_checksum_is_counted_exactly_as_torn_frame() {
    let (bytes, in_buffer) = torn_crc_only();
    assert!(in_buffer > 0);
    let d = tmp();
    let p = write(&d, "torn.gmr", &bytes);
    let r = meter(&[p]);
    assert_eq!(lost(&r, "torn_frame"), in_buffer);
    let l = r.loss.iter().find(|l| l.reason == "torn_frame");
    assert!(
        l.is_some_and(|l| !l.lower_bound && l.device.is_some()),
        "{l:?}"
    );
    let w = warning(&r, "torn last frame");
    assert!(
        w.contains(&format!("{in_buffer} records lost as torn_frame")),
        "{w}"
    );
    // The records before it are metered.
    assert!(total(&r, MeterKind::KernelLaunches) > 0);
}

#[test]
fn a_corrupt_frame_in_the_middle_is_lost_and_the_rest_metered() {
    let bytes = ok(std::fs::read(example(
        "h200-cuda13-instructions-2threads.gmr",
    )));
    let file = ok(read_gmr(&bytes));
    let first = file
        .frames
        .iter()
        .find(|f| matches!(f.frame, Frame::ActivityBuffer(_)))
        .map(|f| f.offset as usize)
        .unwrap_or(0);
    let whole = meter(&[example("h200-cuda13-instructions-2threads.gmr")]);
    let mut bad = bytes.clone();
    bad[first + 12 + 100] ^= 0x55;
    let d = tmp();
    let p = write(&d, "corrupt.gmr", &bad);
    let damaged = ok(read_gmr(&bad)).damaged;
    assert_eq!(damaged.len(), 1);
    assert_eq!(damaged[0].damage, Damage::Corrupt);
    let r = meter(&[p]);
    let l: Vec<_> = r
        .loss
        .iter()
        .filter(|l| l.reason == "corrupt_frame")
        .collect();
    assert!(
        !l.is_empty() && l.iter().all(|l| l.lower_bound && l.records > 0),
        "{l:?}"
    );
    warning(&r, "corrupt: its checksum does not match");
    validate("gpumeter.usage.v1.schema.json", &r);
    // What the frame held is no longer metered; everything else is.
    let launches = total(&r, MeterKind::KernelLaunches);
    assert!(launches > 0 && launches < total(&whole, MeterKind::KernelLaunches));
}

// 3. Totals never clamp.

#[test]
fn a_total_past_u128_is_a_typed_error_naming_device_and_meter() {
    let mut m = Meter::new(MeterConfig {
        window: ok(WindowSize::parse("1d")),
        ..MeterConfig::default()
    });
    let dev = m.register_device(DeviceInfo::bare("GPU-big", 0));
    // Eight allocations of 2^64 − 1 bytes held for 200 years: each ≈ 1.2e38 byte·ns, their
    // sum past u128::MAX ≈ 3.4e38; no window alone overflows.
    for a in 0..8u64 {
        let mut e = MemoryEvent::new(dev, T0, 0x1000 * (a + 1), u64::MAX, MemoryOp::Allocation);
        e.process_id = Some(1);
        m.push_memory(e);
    }
    let end = T0 + 200 * 365 * DAY;
    m.push(ActivityRecord::new(
        dev,
        end - 1,
        end,
        Work::Kernel(KernelLaunch::default()),
    ));
    match m.finish() {
        Err(e @ MeterError::QuantityOverflow { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("GPU-big")
                    && msg.contains("memory_byte_ns")
                    && msg.contains("in total"),
                "{msg}"
            );
        }
        other => panic!("expected QuantityOverflow, got {other:?}"),
    }
}

#[test]
fn memory_held_over_more_windows_than_a_report_holds_fails_fast() {
    let mut m = Meter::new(MeterConfig::default());
    let dev = m.register_device(DeviceInfo::bare("GPU-far", 0));
    m.push_memory(MemoryEvent::new(
        dev,
        T0,
        0x10,
        1 << 30,
        MemoryOp::Allocation,
    ));
    // A kernel dated in 2500: the allocation would be billed to it, hour by hour.
    let far = 16_725_225_600_000_000_000;
    m.push(ActivityRecord::new(
        dev,
        far,
        far + 1,
        Work::Kernel(KernelLaunch::default()),
    ));
    match m.finish() {
        Err(e @ MeterError::TooManyCells { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("GPU-far")
                    && msg.contains("memory held")
                    && msg.contains("200000 (device, window) cells"),
                "{msg}"
            );
        }
        other => panic!("expected TooManyCells, got {other:?}"),
    }
}

// 4. Long-held memory is billed for as long as it is held, across chained reports.

#[test]
fn an_allocation_held_for_months_is_billed_across_chained_reports() {
    const GIB: u128 = 1 << 30;
    let d = tmp();
    // Report 1: allocated at T0, the last work 30 days later.
    let mut m = Meter::new(MeterConfig::default());
    let mut gpu = DeviceInfo::bare("GPU-held", 0);
    gpu.uuid = Some("held".into());
    let dev = m.register_device(gpu);
    let mut alloc = MemoryEvent::new(dev, T0, 0x7000, 1 << 30, MemoryOp::Allocation);
    alloc.process_id = Some(77);
    m.push_memory(alloc);
    m.push(ActivityRecord::new(
        dev,
        T0 + 30 * DAY - 10,
        T0 + 30 * DAY,
        Work::Kernel(KernelLaunch::default()),
    ));
    let r1 = ok(m.finish());
    assert_eq!(
        r1.device_total("GPU-held", MeterKind::MemoryByteNs),
        GIB * u128::from(30 * DAY)
    );
    assert!(r1.loss.is_empty(), "{:?}", r1.loss);
    assert_eq!(r1.open_allocations.len(), 1);
    // Reports 2 and 3: a trace of the same GPU (by UUID) 30 and 60 days later.
    let mut opening = write(&d, "r1.json", ok(serde_json::to_string(&r1)).as_bytes());
    let mut billed = r1.device_total("GPU-held", MeterKind::MemoryByteNs);
    let mut end = T0 + 30 * DAY;
    for k in 2..=3u64 {
        let at_us = (T0 + 30 * k * DAY) / 1000;
        let trace = format!(
            r#"{{"deviceProperties": [{{"id": 0, "uuid": "held", "name": "G"}}],
            "traceEvents": [{{"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": 7,
            "ts": {at_us}, "dur": 1, "args": {{"device": 0}}}}]}}"#
        );
        let input = write(&d, &format!("day{k}.json"), trace.as_bytes());
        let r = ok(meter_inputs(
            &[input],
            &UsageOptions {
                opening: Some(opening.clone()),
                ..UsageOptions::default()
            },
        ));
        assert!(r.loss.is_empty(), "{:?}", r.loss);
        assert_eq!(r.open_allocations.len(), 1, "still held, still carried");
        let new_end = at_us * 1000 + 1000;
        let part = r.device_total("GPU-held", MeterKind::MemoryByteNs);
        assert_eq!(part, GIB * u128::from(new_end - end), "report {k}");
        billed += part;
        end = new_end;
        opening = write(
            &d,
            &format!("r{k}.json"),
            ok(serde_json::to_string(&r)).as_bytes(),
        );
    }
    // Every ns from the allocation to the last report's end, once.
    assert_eq!(billed, GIB * u128::from(end - T0));
    assert_eq!(end - T0, 90 * DAY + 1000);
}

// 5. One bad record never refuses the whole file.

#[test]
fn bad_records_are_lost_one_by_one_and_the_rest_is_metered() {
    let r = meter(&[corpus("bad-records.json")]);
    assert_eq!(r.records.kernel, 2);
    assert_eq!(r.records.memcpy, 1);
    assert_eq!(total(&r, MeterKind::MemcpyHtodBytes), 4096);
    let key = &r.devices[0].device_key;
    assert_eq!(r.lost(key, "invalid_field"), 7);
    // The record whose device id is -1 is lost on the source, not on device 0.
    let unplaced: Vec<_> = r.loss.iter().filter(|l| l.device.is_none()).collect();
    assert_eq!(unplaced.len(), 1, "{:?}", r.loss);
    assert_eq!(
        (unplaced[0].records, unplaced[0].reason.as_str()),
        (1, "invalid_field")
    );
    // Named by the source's label: its identity's first 16 hex digits, not its file name.
    assert_eq!(unplaced[0].device_key, r.sources[0].sha256[..16]);
    validate("gpumeter.usage.v1.schema.json", &r);
    // One warning per field, naming the first record, the field and its value.
    for (field, value) in [
        ("ts", "abc"),
        ("dur", ""),
        ("args.bytes", "many"),
        ("args.grid", "-4"),
        ("args.stream", "-2"),
        ("args", "[1,2]"),
        ("args.correlation", "-1"),
        ("args.device", "-1"),
    ] {
        let w = warning(&r, &format!("field `{field}` = `{value}`"));
        assert!(w.starts_with("bad-records.json: traceEvents["), "{w}");
    }
}

#[test]
fn a_key_given_twice_in_an_event_loses_that_event() {
    let r = meter(&[corpus("duplicate-key-in-event.json")]);
    assert_eq!(r.records.kernel, 1);
    assert_eq!(lost(&r, "invalid_field"), 1);
    warning(
        &r,
        "field `ts` = `1764662400000010` and `1764662400000020`: given twice in the event",
    );
}

#[test]
fn a_540_year_duration_is_too_long() {
    let r = meter(&[corpus("dur-540-years-2021.json")]);
    assert_eq!(r.records.kernel, 1);
    assert_eq!(lost(&r, "too_long"), 1);
}

/// A raw CUPTI 12.8 buffer of CONCURRENT_KERNEL records, one per `(start, grid x)`.
fn kernel_buffer(kernels: &[(u64, i32)]) -> Vec<u8> {
    let api = ApiVersion::Cupti12_8;
    let layout = api
        .layouts()
        .into_iter()
        .find(|l| l.kind == ActivityKind::CONCURRENT_KERNEL)
        .unwrap_or_else(|| panic!("no kernel layout"));
    let at = |name: &str| {
        layout
            .fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.offset)
            .unwrap_or_else(|| panic!("no field {name}"))
    };
    let mut out = Vec::new();
    for (i, &(start, grid_x)) in kernels.iter().enumerate() {
        let mut k = vec![0u8; layout.size];
        k[0..4].copy_from_slice(&ActivityKind::CONCURRENT_KERNEL.0.to_le_bytes());
        k[at("start")..at("start") + 8].copy_from_slice(&start.to_le_bytes());
        k[at("end")..at("end") + 8].copy_from_slice(&(start + 1000).to_le_bytes());
        k[at("gridX")..at("gridX") + 4].copy_from_slice(&grid_x.to_le_bytes());
        for f in ["gridY", "gridZ", "blockX", "blockY", "blockZ"] {
            k[at(f)..at(f) + 4].copy_from_slice(&1i32.to_le_bytes());
        }
        let corr = i as u32 + 1;
        k[at("correlationId")..at("correlationId") + 4].copy_from_slice(&corr.to_le_bytes());
        out.extend(k);
    }
    out
}

#[test]
fn a_cupti_kernel_with_a_negative_grid_is_one_lost_record() {
    let d = tmp();
    let buf = kernel_buffer(&[(T0, 4), (T0 + 5000, -4), (T0 + 9000, 8)]);
    let p = write(&d, "neg.bin", &buf);
    let r = ok(meter_inputs(
        &[p],
        &UsageOptions {
            format: Format::Cupti,
            ..UsageOptions::default()
        },
    ));
    assert_eq!(r.records.kernel, 2);
    assert_eq!(lost(&r, "invalid_field"), 1);
    warning(&r, "field `gridX` = -4");
}

// 6. Distinct kernels are never collapsed as duplicates.

#[test]
fn the_kernels_of_one_graph_launch_are_distinct_and_a_true_copy_is_a_duplicate() {
    let r = meter(&[corpus("graph-launch-2021.json")]);
    assert_eq!(total(&r, MeterKind::KernelLaunches), 4);
    assert_eq!(lost(&r, "duplicate"), 1, "the one exact copy");
    // kernel_ns of the 4: 5 + 6 + 7 + 8 µs.
    assert_eq!(total(&r, MeterKind::KernelNs), 26_000);
}

#[test]
fn a_stream_id_outside_u32_is_not_wrapped_onto_another() {
    let r = meter(&[corpus("stream-wrap.json")]);
    assert_eq!(total(&r, MeterKind::KernelLaunches), 1);
    assert_eq!(lost(&r, "duplicate"), 0);
    assert_eq!(lost(&r, "invalid_field"), 1);
    warning(&r, "field `args.stream` = `4294967303`");
}

#[test]
fn no_real_trace_loses_a_record_to_deduplication() {
    let Some(dir) = data_dir() else { return };
    let mut all = Vec::new();
    for e in ok(std::fs::read_dir(&dir)) {
        let p = ok(e).path();
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.ends_with(".json.gz") || n.ends_with(".sqlite")) {
            all.push(p);
        }
    }
    assert!(all.len() >= 6, "{all:?}");
    for p in &all {
        let r = meter(std::slice::from_ref(p));
        assert_eq!(lost(&r, "duplicate"), 0, "{}", p.display());
        assert!(
            !r.warnings
                .iter()
                .any(|w| w.contains("repeats the GPU work")),
            "{}",
            p.display()
        );
    }
    // All at once: different GPUs, none repeats another, nothing lost to deduplication.
    let r = meter(&all);
    assert_eq!(lost(&r, "duplicate"), 0);
    assert!(
        !r.warnings
            .iter()
            .any(|w| w.contains("repeats the GPU work") || w.contains("records in common")),
        "{:?}",
        r.warnings
    );
}

// 7. Kineto: no silent drops, no double reads.

#[test]
fn begin_end_pairs_are_work_and_unpaired_events_are_counted() {
    let r = meter(&[corpus("begin-end.json")]);
    assert_eq!(total(&r, MeterKind::KernelLaunches), 1);
    assert_eq!(total(&r, MeterKind::KernelNs), 12_500);
    // A B without E, an E without B, an instant kernel.
    assert_eq!(lost(&r, "invalid_field"), 3);
    assert_eq!(r.records.skipped.get("gpu_user_annotation"), Some(&1));
    let w = warning(&r, "field `ph`");
    assert!(
        w.starts_with("begin-end.json: traceEvents[") && w.contains("and 2 more records"),
        "{w}"
    );
}

#[test]
fn a_second_trace_events_key_is_refused() {
    match meter_inputs(&[corpus("two-trace-events.json")], &UsageOptions::default()) {
        Err(gpumeter::Error::Import(e @ ImportError::DuplicateKey { .. })) => {
            let msg = e.to_string();
            assert!(
                msg.contains("two-trace-events.json") && msg.contains("`traceEvents`"),
                "{msg}"
            );
        }
        other => panic!("expected DuplicateKey, got {other:?}"),
    }
}

// 11. Messages name the real field and value.

#[test]
fn a_lone_surrogate_in_a_device_name_is_named_as_such() {
    let e = match meter_inputs(
        &[corpus("lone-surrogate-device-name.json")],
        &UsageOptions::default(),
    ) {
        Err(e) => e.to_string(),
        Ok(r) => panic!("metered: {r:?}"),
    };
    assert!(
        e.contains("deviceProperties[0]")
            && e.contains("field `name`")
            && e.contains("not valid Unicode")
            && !e.contains("expected a string"),
        "{e}"
    );
}

#[test]
fn a_kernel_name_that_is_not_unicode_is_metered_without_it() {
    let r = meter(&[corpus("lone-surrogate-kernel-name.json")]);
    assert_eq!(r.records.kernel, 1);
    warning(&r, "1 kernel names are not valid Unicode");
}

#[test]
fn a_base_beyond_2554_blames_base_time_nanoseconds() {
    let e = match meter_inputs(&[corpus("base-beyond-2554.json")], &UsageOptions::default()) {
        Err(e) => e.to_string(),
        Ok(r) => panic!("metered: {r:?}"),
    };
    assert!(
        e.contains("field `baseTimeNanoseconds`") && e.contains("after 2554"),
        "{e}"
    );
}

#[test]
fn an_unknown_compute_capability_is_named_not_the_launch_configuration() {
    let r = ok(meter_inputs(
        &[corpus("twin-a.json")],
        &UsageOptions {
            devices: Some(corpus("catalog-cc-99.toml")),
            ..UsageOptions::default()
        },
    ));
    let nm = &r.devices[0].not_meterable;
    let warp = nm.iter().find(|n| n.meter == MeterKind::WarpNs);
    let reason = warp.map(|n| n.reason.clone()).unwrap_or_default();
    assert!(
        reason.contains("compute_capability = 99.9") && !reason.contains("launch configuration"),
        "{reason}"
    );
}

#[test]
fn a_kernel_in_2554_is_metered() {
    let r = meter(&[corpus("kernel-in-2554.json")]);
    assert_eq!(total(&r, MeterKind::KernelLaunches), 1);
    assert!(
        r.usage[0].window_start.starts_with("2554-"),
        "{:?}",
        r.usage
    );
}

/// Control characters reach the JSON report escaped by serde; the text renderings are the
/// CLI's (its tests check them).
#[test]
fn control_characters_survive_json_intact() {
    let r: UsageReport = meter(&[corpus("control-characters.json")]);
    let json = ok(serde_json::to_string(&r));
    assert!(
        !json.contains('\u{1b}') && json.contains("\\u001b[2J"),
        "{json}"
    );
}

#[test]
fn tenant_names_are_checked_once_for_every_entry_point() {
    // The same rule, through the meter's opening state: a name that is not in the safe form
    // is refused, naming the entry.
    let mut r = meter(&[corpus("twin-a.json")]);
    r.open_allocations.push(gpumeter::core::OpenAllocation {
        device: 0,
        device_key: "GPU-x".into(),
        address: "0x10".into(),
        bytes: gpumeter::core::Quantity(1),
        tenant: "IDLE".into(),
        process_id: None,
        external_id: None,
        allocated_at: "2025-12-02T08:00:00Z".into(),
        billed_to: "2025-12-02T09:00:00Z".into(),
    });
    let mut m = Meter::new(MeterConfig::default());
    match m.set_opening(&r.open_allocations) {
        Err(e) => assert!(
            e.contains("open_allocations[0].tenant") && e.contains("reserved"),
            "{e}"
        ),
        Ok(()) => panic!("accepted a reserved tenant"),
    }
    // MeterConfig takes a TenantName: an unchecked string cannot reach it.
    let _ = MeterConfig {
        tenant: Some(crate::tn("alice")),
        ..MeterConfig::default()
    };
}

/// Every loss reason the meter can write is one the schema lists, and no other.
#[test]
fn the_schema_lists_exactly_the_loss_reasons() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas/gpumeter.usage.v1.schema.json");
    let schema: serde_json::Value = ok(serde_json::from_str(&ok(std::fs::read_to_string(path))));
    let listed: Vec<&str> = schema["properties"]["loss"]["items"]["properties"]["reason"]["enum"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let ours: Vec<&str> = gpumeter::core::LossReason::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    assert_eq!(listed, ours);
}

/// `twin-a.json` changed by `f` (its document as JSON values), written to `dir`.
fn variant(dir: &tempfile::TempDir, name: &str, f: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let mut v: serde_json::Value = ok(serde_json::from_slice(&ok(std::fs::read(corpus(
        "twin-a.json",
    )))));
    f(&mut v);
    write(dir, name, ok(serde_json::to_string_pretty(&v)).as_bytes())
}

fn events(v: &mut serde_json::Value) -> &mut Vec<serde_json::Value> {
    match v.get_mut("traceEvents").and_then(|e| e.as_array_mut()) {
        Some(e) => e,
        None => panic!("no traceEvents"),
    }
}

#[test]
fn a_copy_that_differs_only_in_joined_facts_or_the_device_table_is_metered_once() {
    let d = tmp();
    let one = meter(&[corpus("twin-a.json")]);
    // The same GPU events with CPU-side launch events: the kernels get a process id.
    let with_cpu = variant(&d, "with-cpu.json", |v| {
        let mut cpu = Vec::new();
        for e in events(v).iter() {
            if let Some(c) = e["args"]["correlation"].as_u64() {
                cpu.push(serde_json::json!({"ph": "X", "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, "ts": 1.0,
                    "dur": 1.0, "args": {"correlation": c}}));
            }
        }
        events(v).extend(cpu);
    });
    // The same events without the device table: no name, no SM count.
    let no_props = variant(&d, "no-props.json", |v| {
        if let Some(o) = v.as_object_mut() {
            o.remove("deviceProperties");
        }
    });
    for copy in [&with_cpu, &no_props] {
        let both = meter(&[corpus("twin-a.json"), copy.clone()]);
        for m in [
            MeterKind::KernelLaunches,
            MeterKind::KernelNs,
            MeterKind::MemcpyHtodBytes,
        ] {
            assert_eq!(total(&both, m), total(&one, m), "{} {m}", copy.display());
        }
        warning(&both, "repeats the GPU work of");
        // The device kept is the one with a name (it prices the work).
        assert_eq!(both.devices.len(), 1, "{:?}", both.devices);
        assert!(both.devices[0].name.is_some());
    }
}

#[test]
fn a_copy_with_one_record_more_or_less_is_the_same_gpu() {
    let d = tmp();
    let one = meter(&[corpus("twin-a.json")]);
    let fewer = variant(&d, "fewer.json", |v| {
        events(v).pop();
    });
    let more = variant(&d, "more.json", |v| {
        let mut k = events(v)[1].clone();
        k["ts"] = serde_json::json!(9000.5);
        k["args"]["correlation"] = serde_json::json!(999);
        events(v).push(k);
    });
    let launches = |r: &UsageReport| total(r, MeterKind::KernelLaunches);
    let r = meter(&[corpus("twin-a.json"), fewer]);
    assert_eq!(launches(&r), launches(&one));
    warning(&r, "are also in device");
    let r = meter(&[more, corpus("twin-a.json")]);
    assert_eq!(launches(&r), launches(&one) + 1);
    let w = warning(&r, "are also in device");
    assert!(w.contains("twin-a.json") && w.contains("more.json"), "{w}");
    assert!(r.loss.is_empty(), "{:?}", r.loss);
}

#[test]
fn a_raw_buffer_beside_the_recording_it_came_from_is_metered_once() {
    let rec = example("h200-cuda13-smoke.gmr");
    let file = ok(read_gmr(&ok(std::fs::read(&rec))));
    let Some(buf) = file.frames.iter().find_map(|f| match &f.frame {
        Frame::ActivityBuffer(b) => Some(b.clone()),
        _ => None,
    }) else {
        panic!("no buffer");
    };
    let d = tmp();
    let raw = write(&d, "smoke-buffer.bin", &buf);
    let opts = UsageOptions {
        cupti_api: Some(
            ok(ApiVersion::from_cupti(file.header.cupti_api_version)).cupti_api_version(),
        ),
        ..UsageOptions::default()
    };
    let alone = ok(meter_inputs(std::slice::from_ref(&rec), &opts));
    let both = ok(meter_inputs(&[raw, rec], &opts));
    for m in [
        MeterKind::KernelLaunches,
        MeterKind::KernelNs,
        MeterKind::SmNs,
    ] {
        assert_eq!(total(&both, m), total(&alone, m), "{m}");
    }
    // The recording holds the buffer's records and one more event (its process's exit).
    let w = warning(&both, "are also in device");
    assert!(
        w.contains("smoke-buffer.bin") && w.contains("metered once, from h200-cuda13-smoke.gmr"),
        "{w}"
    );
}

/// Reports chained with `--opening` bill every record and every byte·ns of a recording that
/// grew between them exactly once, and an input the earlier report metered is not metered
/// again.
#[test]
fn a_chain_of_reports_over_a_growing_recording_bills_everything_once() {
    let d = tmp();
    let full_path = example("h200-cuda13-green-context.gmr");
    let full = ok(std::fs::read(&full_path));
    let file = ok(read_gmr(&full));
    // Day 1: the recording up to the end of its first activity buffer (a clean frame edge;
    // the producer had not finished it yet).
    let i = file
        .frames
        .iter()
        .position(|f| matches!(f.frame, Frame::ActivityBuffer(_)))
        .unwrap_or_else(|| panic!("no buffer"));
    let cut = file
        .frames
        .get(i + 1)
        .map_or(full.len() - 16, |f| f.offset as usize);
    let day1 = write(&d, "day1.gmr", &full[..cut]);
    let r1 = meter(&[day1]);
    assert!(total(&r1, MeterKind::KernelLaunches) > 0);
    assert!(!r1.extensions.recordings.is_empty());
    let opening = write(&d, "r1.json", ok(serde_json::to_string(&r1)).as_bytes());
    let with_opening = |inputs: &[PathBuf]| {
        ok(meter_inputs(
            inputs,
            &UsageOptions {
                opening: Some(opening.clone()),
                ..UsageOptions::default()
            },
        ))
    };
    // Day 2: the whole recording, continuing day 1.
    let r2 = with_opening(std::slice::from_ref(&full_path));
    let alone = meter(std::slice::from_ref(&full_path));
    for m in [
        MeterKind::KernelLaunches,
        MeterKind::KernelNs,
        MeterKind::SmNs,
        MeterKind::MemoryByteNs,
    ] {
        assert_eq!(total(&r1, m) + total(&r2, m), total(&alone, m), "{m}");
    }
    assert!(r2
        .records
        .skipped
        .get("billed_by_opening_report")
        .is_some_and(|&n| n > 0));
    warning(&r2, "read up to a later time");
    validate("gpumeter.usage.v1.schema.json", &r2);
    // The very input of day 1 again: not metered again.
    let again = with_opening(&[d.path().join("day1.gmr")]);
    assert!(
        again
            .usage
            .iter()
            .all(|u| u.meter == MeterKind::MemoryByteNs),
        "{:?}",
        again.usage
    );
    warning(
        &again,
        "which an earlier report of the chain (--opening) already metered",
    );
}

/// The cell budget is the report's, not each device's: opening allocations of 1970 on several
/// devices, each under a per-device limit, cannot together exhaust memory.
#[test]
fn opening_state_of_1970_on_many_devices_fails_fast() {
    let mut r = meter(&[corpus("twin-a.json")]);
    for k in 0..3u32 {
        r.open_allocations.push(gpumeter::core::OpenAllocation {
            device: k,
            device_key: format!("GPU-old-{k}"),
            address: "0x10".into(),
            bytes: gpumeter::core::Quantity(1),
            tenant: "unattributed".into(),
            process_id: Some(1),
            external_id: None,
            allocated_at: "1970-01-01T00:00:00.000000001Z".into(),
            billed_to: "1970-01-01T00:00:00.000000001Z".into(),
        });
    }
    // Forged to carry only the old allocations (no sources, devices or ends of its own).
    r.sources.clear();
    r.devices.clear();
    r.usage.clear();
    r.totals.clear();
    r.extensions = Default::default();
    ok(r.seal());
    let d = tmp();
    let opening = write(&d, "old.json", ok(serde_json::to_string(&r)).as_bytes());
    match meter_inputs(
        &[corpus("twin-a.json")],
        &UsageOptions {
            opening: Some(opening),
            ..UsageOptions::default()
        },
    ) {
        Err(gpumeter::Error::Meter(e)) if matches!(*e, MeterError::TooManyCells { .. }) => {
            assert!(e.to_string().contains("GPU-old-"), "{e}");
        }
        other => panic!("expected TooManyCells, got {other:?}"),
    }
}

/// Energy samples a week apart, metered in 60 s windows: refused before the windows are made.
#[test]
fn energy_over_more_cells_than_a_report_holds_fails_fast() {
    let mut m = Meter::new(MeterConfig {
        window: ok(WindowSize::parse("60s")),
        ..MeterConfig::default()
    });
    let dev = m.register_device(DeviceInfo::bare("GPU-energy", 0));
    for i in 0..120u64 {
        m.push_energy(dev, T0 + i * 7 * DAY - i, i * 10_080);
    }
    match m.finish() {
        Err(e @ MeterError::TooManyCells { .. }) => {
            assert!(e.to_string().contains("energy samples"), "{e}");
        }
        other => panic!("expected TooManyCells, got {other:?}"),
    }
}

/// Offsets of the frames of a `.gmr` (after its 20-byte preamble): (offset, type, length).
fn frame_table(bytes: &[u8]) -> Vec<(usize, u32, u64)> {
    let mut out = Vec::new();
    let mut at = 20;
    while at + 12 <= bytes.len() {
        let t = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let mut l = [0u8; 8];
        l.copy_from_slice(&bytes[at + 4..at + 12]);
        let len = u64::from_le_bytes(l);
        out.push((at, t, len));
        at += 16 + len as usize;
    }
    out
}

/// A corrupt frame's type and length are not trusted: a buffer whose type field was flipped to
/// "energy" is still counted as lost records, and an energy frame whose length was made to
/// swallow the buffers after it loses only itself.
#[test]
fn a_corrupt_type_or_length_field_never_hides_buffers() {
    let d = tmp();
    let smoke = ok(std::fs::read(example("h200-cuda13-smoke.gmr")));
    let whole = meter(&[example("h200-cuda13-smoke.gmr")]);
    let buffer = frame_table(&smoke)
        .into_iter()
        .find(|f| f.1 == 2)
        .unwrap_or_else(|| panic!("no buffer"));
    let mut retyped = smoke.clone();
    retyped[buffer.0] ^= 0b100; // type 2 → 6
    let r = meter(&[write(&d, "retyped.gmr", &retyped)]);
    assert_eq!(total(&r, MeterKind::KernelLaunches), 0);
    let l = r
        .loss
        .iter()
        .find(|l| l.reason == "corrupt_frame")
        .unwrap_or_else(|| panic!("no corrupt_frame loss: {:?}", r.loss));
    assert!(l.lower_bound && l.device.is_some(), "{l:?}");
    assert_eq!(
        u128::from(l.records),
        total(&whole, MeterKind::KernelLaunches) + 2 + 4,
        "every kernel, memcpy and memory event of the buffer is counted"
    );

    let green = ok(std::fs::read(example("h200-cuda13-green-context.gmr")));
    let table = frame_table(&green);
    let energy = table
        .iter()
        .find(|f| f.1 == 6)
        .copied()
        .unwrap_or_else(|| panic!("no energy frame"));
    let mut swallow = green.clone();
    let len = (green.len() - energy.0 - 16 - 40) as u64;
    swallow[energy.0 + 4..energy.0 + 12].copy_from_slice(&len.to_le_bytes());
    let r = meter(&[write(&d, "swallow.gmr", &swallow)]);
    let alone = meter(&[example("h200-cuda13-green-context.gmr")]);
    for m in [
        MeterKind::KernelLaunches,
        MeterKind::KernelNs,
        MeterKind::MemoryByteNs,
    ] {
        assert_eq!(total(&r, m), total(&alone, m), "{m}");
    }
    warning(&r, "corrupt: its checksum does not match");
}

/// Instruction counts past 64 bits are never clamped: the launch's kernels get no count, and
/// `warp_instructions` is not meterable on their device.
#[test]
fn instruction_counts_past_64_bits_are_not_clamped() {
    use gpumeter::cupti::gmr::{FunctionInstructions, InstructionCounts};
    let file = ok(read_gmr(&ok(std::fs::read(example(
        "h200-cuda13-instructions.gmr",
    )))));
    let Some(first) = file.frames.iter().find_map(|f| match &f.frame {
        Frame::Instructions(c) => Some(c.clone()),
        _ => None,
    }) else {
        panic!("no instruction counts");
    };
    let mut w = ok(GmrWriter::new(Vec::new(), &file.header));
    for f in &file.frames {
        ok(w.write_frame(&f.frame));
    }
    // The same launch's first function once more, with a count that overflows its sum.
    let name = first.functions[0].name.clone();
    ok(w.write_instructions(&InstructionCounts {
        functions: vec![FunctionInstructions {
            name,
            warp_instructions: u64::MAX,
        }],
        ..first
    }));
    let d = tmp();
    let r = meter(&[write(&d, "overflow.gmr", &ok(w.finish()))]);
    assert_eq!(total(&r, MeterKind::WarpInstructions), 0);
    assert!(
        r.devices[0]
            .not_meterable
            .iter()
            .any(|n| n.meter == MeterKind::WarpInstructions),
        "{:?}",
        r.devices
    );
    warning(&r, "pass 64 bits");
}

/// Dropped counts past 64 bits are a lower bound, said; a device the recording describes
/// nowhere is not made up for them.
#[test]
fn dropped_counts_are_never_clamped_silently_nor_put_on_a_made_up_device() {
    use gpumeter::cupti::gmr::DroppedRecords;
    let file = ok(read_gmr(&ok(std::fs::read(example(
        "h200-cuda13-smoke.gmr",
    )))));
    let mut w = ok(GmrWriter::new(Vec::new(), &file.header));
    for f in &file.frames {
        ok(w.write_frame(&f.frame));
    }
    for (device, count) in [(Some(0), u64::MAX), (Some(0), 5), (Some(7), 3)] {
        ok(w.write_dropped(&DroppedRecords {
            device_id: device,
            context_id: 1,
            stream_id: 0,
            count,
        }));
    }
    let d = tmp();
    let r = meter(&[write(&d, "dropped.gmr", &ok(w.finish()))]);
    let dropped: Vec<_> = r.loss.iter().filter(|l| l.reason == "dropped").collect();
    assert_eq!(dropped.len(), 2, "{dropped:?}");
    assert!(dropped
        .iter()
        .any(|l| l.device == Some(0) && l.records == u64::MAX && l.lower_bound));
    assert!(dropped
        .iter()
        .any(|l| l.device.is_none() && l.records == 3 && !l.lower_bound));
    assert_eq!(r.devices.len(), 1, "no device 7: {:?}", r.devices);
}

/// The same trace gzipped and plain is metered once, from the same file whatever the argument
/// order: the report's devices and usage do not depend on it.
#[test]
fn gzipped_and_plain_in_either_order_give_the_same_usage() {
    let d = tmp();
    let gz = corpus("twin-a.json");
    let mut plain_text = Vec::new();
    {
        use std::io::Write as _;
        let mut e = flate2::write::GzEncoder::new(&mut plain_text, flate2::Compression::default());
        ok(e.write_all(&ok(std::fs::read(&gz))));
        ok(e.finish());
    }
    let zipped = write(&d, "twin-a.json.gz", &plain_text);
    let a = meter(&[gz.clone(), zipped.clone()]);
    let b = meter(&[zipped, gz]);
    assert_eq!(a.usage, b.usage);
    assert_eq!(a.devices, b.devices);
    warning(&a, "same content as");
    warning(&b, "same content as");
}

fn with_opening(inputs: &[PathBuf], opening: &std::path::Path) -> UsageReport {
    ok(meter_inputs(
        inputs,
        &UsageOptions {
            opening: Some(opening.to_path_buf()),
            ..UsageOptions::default()
        },
    ))
}

fn save(d: &tempfile::TempDir, name: &str, r: &UsageReport) -> PathBuf {
    write(d, name, ok(serde_json::to_string(r)).as_bytes())
}

/// `--opening` holds back only what the chain read of the *same* recording: another
/// process's recording of the same GPU is billed whole, and the protection carries across a
/// report in which the first recording is absent.
#[test]
fn a_chain_holds_back_only_its_own_recordings_and_remembers_them() {
    let d = tmp();
    let (green, instr, smoke) = (
        example("h200-cuda13-green-context.gmr"),
        example("h200-cuda13-instructions.gmr"),
        example("h200-cuda13-smoke.gmr"),
    );
    let alone = meter(std::slice::from_ref(&instr));
    // Another process's recording, after a report of the first one.
    let r1 = save(&d, "r1.json", &meter(std::slice::from_ref(&green)));
    let r2 = with_opening(std::slice::from_ref(&instr), &r1);
    for m in [
        MeterKind::KernelLaunches,
        MeterKind::KernelNs,
        MeterKind::MemoryByteNs,
    ] {
        assert_eq!(total(&r2, m), total(&alone, m), "{m}");
    }
    assert!(!r2.records.skipped.contains_key("billed_by_opening_report"));
    // c1 meters a recording, c2 (another GPU) continues c1, c3 continues c2 with c1's input
    // again: it was metered by the chain, so it is not metered again.
    let c1 = save(&d, "c1.json", &alone);
    let c2 = save(
        &d,
        "c2.json",
        &with_opening(std::slice::from_ref(&smoke), &c1),
    );
    let c3 = with_opening(std::slice::from_ref(&instr), &c2);
    assert_eq!(total(&c3, MeterKind::KernelLaunches), 0);
    warning(
        &c3,
        "which an earlier report of the chain (--opening) already metered",
    );
}

/// `twin-a.json` as a trace with CPU-side launch events of process `pid` for its kernels.
fn with_pid(d: &tempfile::TempDir, name: &str, pid: Option<u32>) -> PathBuf {
    variant(d, name, |v| {
        let Some(pid) = pid else { return };
        let mut cpu = Vec::new();
        for e in events(v).iter() {
            if let Some(c) = e["args"]["correlation"].as_u64() {
                cpu.push(serde_json::json!({"ph": "X", "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel", "pid": pid, "tid": pid, "ts": 1.0,
                    "dur": 1.0, "args": {"correlation": c}}));
            }
        }
        events(v).extend(cpu);
    })
}

/// Of copies of the same work, the one that knows more (process ids, so tenants) is kept, and
/// two processes' work is never merged through a copy that knows neither.
#[test]
fn copies_keep_what_they_know_about_tenants() {
    let d = tmp();
    let map = write(&d, "map.toml", b"[pid]\n100 = \"alice\"\n200 = \"bob\"\n");
    let opts = UsageOptions {
        tenant_map: Some(map),
        ..UsageOptions::default()
    };
    let a = with_pid(&d, "a.json", Some(100));
    let c = with_pid(&d, "c.json", Some(200));
    let b = with_pid(&d, "b.json", None);
    let per_tenant = |r: &UsageReport| -> std::collections::BTreeMap<String, u128> {
        let mut m = std::collections::BTreeMap::new();
        for t in r
            .totals
            .iter()
            .filter(|t| t.meter == MeterKind::KernelLaunches)
        {
            *m.entry(t.tenant.clone()).or_insert(0) += t.quantity.0;
        }
        m
    };
    let kernels = total(&meter(&[corpus("twin-a.json")]), MeterKind::KernelLaunches);
    // A copy without process ids beside the one with them: alice keeps her usage.
    for inputs in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
        let r = ok(meter_inputs(&inputs, &opts));
        assert_eq!(per_tenant(&r), [("alice".to_string(), kernels)].into());
    }
    // Two processes' equal kernels (different process ids) and a copy that knows neither:
    // both processes are billed, whatever the order.
    for inputs in [
        vec![a.clone(), c.clone(), b.clone()],
        vec![b.clone(), c.clone(), a.clone()],
        vec![c, b, a],
    ] {
        let r = ok(meter_inputs(&inputs, &opts));
        assert_eq!(
            per_tenant(&r),
            [("alice".to_string(), kernels), ("bob".to_string(), kernels)].into()
        );
    }
}

/// A copy without a device table that holds more records than the named copy keeps the
/// name, SM count and the rest from it: the work stays priced and sm_ns meterable.
#[test]
fn the_copy_kept_takes_the_device_description_of_the_copy_dropped() {
    let d = tmp();
    let named_less = variant(&d, "named-less.json", |v| {
        events(v).pop();
    });
    let unnamed_all = variant(&d, "unnamed-all.json", |v| {
        if let Some(o) = v.as_object_mut() {
            o.remove("deviceProperties");
        }
    });
    let one = meter(&[corpus("twin-a.json")]);
    let r = meter(&[unnamed_all, named_less]);
    assert_eq!(r.devices.len(), 1, "{:?}", r.devices);
    assert_eq!(r.devices[0].name, one.devices[0].name);
    assert_eq!(r.devices[0].sm_count, one.devices[0].sm_count);
    for m in [
        MeterKind::KernelLaunches,
        MeterKind::SmNs,
        MeterKind::WarpNs,
    ] {
        assert_eq!(total(&r, m), total(&one, m), "{m}");
    }
}

/// Many traces of one time span (data-parallel ranks) and a copy of one of them: the copy is
/// found whatever the argument order, and no rank is taken for another.
#[test]
fn a_copy_among_many_ranks_is_found_in_any_order() {
    let d = tmp();
    let mut files = Vec::new();
    for rank in 0..12u64 {
        files.push(variant(&d, &format!("rank{rank}.json"), |v| {
            for e in events(v).iter_mut() {
                e["args"]["correlation"] =
                    serde_json::json!(1000 * rank + e["args"]["correlation"].as_u64().unwrap_or(0));
            }
        }));
    }
    let copy = {
        let text = ok(std::fs::read_to_string(&files[7]));
        let v: serde_json::Value = ok(serde_json::from_str(&text));
        write(
            &d,
            "copy-of-rank7.json",
            ok(serde_json::to_string(&v)).as_bytes(),
        )
    };
    let ranks = meter(&files);
    let mut with_copy = files.clone();
    with_copy.push(copy.clone());
    let a = meter(&with_copy);
    with_copy.rotate_right(1);
    let b = meter(&with_copy);
    for r in [&a, &b] {
        assert_eq!(
            total(r, MeterKind::KernelLaunches),
            total(&ranks, MeterKind::KernelLaunches)
        );
        assert!(!r.warnings.iter().any(|w| w.contains("too many to compare")));
    }
    assert_eq!(a.usage, b.usage);
}

/// A source whose work another holds keeps the counts that are its own: its loss on no device
/// and its skipped events.
#[test]
fn a_dropped_copy_keeps_its_own_losses_and_skipped_counts() {
    let d = tmp();
    let b = variant(&d, "b.json", |v| {
        let mut bad = events(v)[1].clone();
        bad["args"]["device"] = serde_json::json!(-1);
        bad["pid"] = serde_json::json!(-1);
        events(v).push(bad);
        events(v).push(serde_json::json!({"ph": "X", "cat": "gpu_user_annotation",
            "name": "step", "pid": 0, "tid": 7, "ts": 50.0, "dur": 1.0}));
    });
    let r = meter(&[corpus("twin-a.json"), b]);
    assert_eq!(
        total(&r, MeterKind::KernelLaunches),
        total(&meter(&[corpus("twin-a.json")]), MeterKind::KernelLaunches)
    );
    assert!(
        r.loss
            .iter()
            .any(|l| l.device.is_none() && l.reason == "invalid_field"),
        "{:?}",
        r.loss
    );
    assert_eq!(r.records.skipped.get("gpu_user_annotation"), Some(&1));
}

/// A tenant map naming a look-alike of `--tenant` is refused.
#[test]
fn a_map_tenant_that_looks_like_the_command_line_tenant_is_refused() {
    let d = tmp();
    let map = write(
        &d,
        "map.toml",
        "[pid]\n4242 = \"\u{0430}lice\"\n".as_bytes(),
    );
    match meter_inputs(
        &[corpus("twin-a.json")],
        &UsageOptions {
            tenant_map: Some(map),
            meter: MeterConfig {
                tenant: Some(crate::tn("alice")),
                ..MeterConfig::default()
            },
            ..UsageOptions::default()
        },
    ) {
        Err(e) => assert!(e.to_string().contains("looks like --tenant"), "{e}"),
        Ok(r) => panic!("accepted: {:?}", r.totals),
    }
}

/// A fuzzer's input (a 1.5 KB raw buffer whose allocation is dated 1 ns after the epoch and
/// held to work of 2025: 487 000 hourly windows) fails fast within the report's cell budget
/// instead of building a 1.6 GB report.
#[test]
fn an_allocation_of_1970_in_a_small_buffer_fails_fast() {
    let data = ok(std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("crates/gpumeter-cupti/tests/data/fuzz/decode_buffer-timeout-df317a55.bin"),
    ));
    let d = tmp();
    let p = write(&d, "timeout.bin", &data[1..]);
    match meter_inputs(
        &[p],
        &UsageOptions {
            format: Format::Cupti,
            ..UsageOptions::default()
        },
    ) {
        Err(gpumeter::Error::Meter(e)) if matches!(*e, MeterError::TooManyCells { .. }) => {
            assert!(e.to_string().contains("memory held from 1970-01-01"), "{e}");
        }
        other => panic!("expected TooManyCells, got {other:?}"),
    }
}
