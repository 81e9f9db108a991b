//! Integration tests of gpumeter-recording: buffers libcupti recorded on a GPU, metering, and
//! the `.gmr` format (moved from gpumeter-cupti, whose tests keep the crafted buffers and the
//! C cross-check; the recorded buffers stay in crates/gpumeter-cupti/tests/c/live).

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_core::{DeviceSlot, Meter, MeterConfig, MeterKind, PmSample, TenantMap, UsageReport};
use gpumeter_cupti::{decode, ActivityKind, ApiVersion, DecodeError, Record};
use gpumeter_recording::gmr::{
    read_gmr, AttributionEvent, AttributionKind, DroppedRecords, EnergySample, Frame, GmrDevice,
    GmrError, GmrHeader, GmrWriter, StringTable, TornReason, GMR_PREAMBLE_LEN,
};
use gpumeter_recording::gmr::{
    Damage, FunctionInstructions, InstructionCounts, LocatedFrame, PmSamples,
};
use gpumeter_recording::{meter_buffer, meter_gmr, CuptiOptions, CuptiSourceError};

include!("../../gpumeter-cupti/tests/support/buffers.rs");
include!("../../gpumeter-cupti/tests/support/lines.rs");

fn meter() -> Meter {
    Meter::new(MeterConfig::default())
}

fn finish(m: Meter) -> UsageReport {
    match m.finish() {
        Ok(r) => r,
        Err(e) => panic!("report: {e}"),
    }
}

/// Asserts that the report has a warning containing `needle`.
fn assert_warns(r: &UsageReport, needle: &str) {
    assert!(
        r.warnings.iter().any(|w| w.contains(needle)),
        "no warning with `{needle}`: {:?}",
        r.warnings
    );
}

// ------------------------------------------------------------------------------------------

mod recorded {
    //! Buffers libcupti itself recorded on a GPU machine: `tests/c/record_live.c` run with
    //! libcupti 12.8.90, 13.0.85 and 13.4.92 on an NVIDIA H200 with driver 580.159.04 (CUDA
    //! 13.0, the r580 machines gpumeter meets with PyTorch cu130), a known workload each time.
    //! `tests/c/live/h200_r580_cupti_<api>.bin` holds the completed buffers back to back, and
    //! the `.txt` beside it libcupti's own walk of them on that machine, with key fields read
    //! through the release's header structs. Our decoder must find the same records at the
    //! same offsets, step the same sizes and read the same values: a check of the tables
    //! against what libcupti emits, not only against what its headers declare.

    use super::*;

    /// `line` without its ` name_str=…` word (a C string the recorder printed, `"…"` quoted
    /// when it may hold spaces), returned separately.
    fn take_name_str(line: &str) -> (String, Option<String>) {
        let Some(at) = line.find(" name_str=") else {
            return (line.to_string(), None);
        };
        let rest = &line[at + " name_str=".len()..];
        let (value, len) = match rest.strip_prefix('"') {
            Some(q) => {
                let close = q.find('"').unwrap_or(q.len());
                (q[..close].to_string(), (close + 2).min(rest.len()))
            }
            None => {
                let end = rest.find(' ').unwrap_or(rest.len());
                (rest[..end].to_string(), end)
            }
        };
        let mut out = line[..at].to_string();
        out.push_str(&rest[len..]);
        (out, Some(value))
    }

    fn recording(api: ApiVersion) -> (Vec<u8>, String) {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpumeter-cupti/tests/c/live");
        let stem = format!("h200_r580_cupti_{}", api.cupti_api_version());
        (
            ok(std::fs::read(dir.join(format!("{stem}.bin")))),
            ok(std::fs::read_to_string(dir.join(format!("{stem}.txt")))),
        )
    }

    #[test]
    fn live_recordings_decode_as_libcupti_walked_them() {
        for api in ApiVersion::ALL {
            let (buf, log) = recording(api);
            let v = api.cupti_api_version();
            assert!(
                log.lines().any(|l| l.starts_with("# libcupti ")
                    && l.contains(&format!("cuptiGetVersion {v};"))),
                "{api}: the recording was not made by libcupti {v}"
            );
            let mut names = Vec::new();
            let text: String = log
                .lines()
                .map(|l| {
                    let (l, name) = take_name_str(l);
                    names.extend(name);
                    l + "\n"
                })
                .collect();
            let walked = parse_lines(&text, "live");
            let d = ok(decode(&buf, api));
            assert_eq!(d.trailing_zero_bytes, 0, "{api}");
            assert_eq!(d.records.len(), walked.len(), "{api}: record count");
            // libcupti's steps are our record sizes.
            let mut lines: Vec<Line> = Vec::new();
            for (rec, (kind, offset, fields)) in d.records.iter().zip(&walked) {
                let size = fields
                    .iter()
                    .find(|(n, _)| n == "size")
                    .map(|(_, s)| ok(s.parse::<usize>()));
                assert_eq!(
                    (rec.kind.0, rec.offset, Some(rec.size)),
                    (*kind, *offset, size),
                    "{api}: record at {offset}"
                );
                let fields = fields
                    .iter()
                    .filter(|(n, _)| n != "size")
                    .cloned()
                    .collect();
                lines.push((*kind, *offset, fields));
            }
            let n = agree(api, &buf, &lines, "live recording");
            assert!(n > 300, "{api}: only {n} fields compared");

            // The workload (record_live.c) as the decoder sees it.
            let recs: Vec<&Record> = d.records.iter().map(|r| &r.record).collect();
            let devices: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Device(d) => Some(d),
                    _ => None,
                })
                .collect();
            assert_eq!(devices.len(), 1, "{api}");
            let dev = devices[0];
            assert_eq!(
                (
                    dev.multiprocessors,
                    dev.compute_capability_major,
                    dev.compute_capability_minor,
                    dev.threads_per_warp
                ),
                (132, 9, 0, 32),
                "{api}: an H200"
            );
            assert!(dev.uuid_key().is_some(), "{api}");
            assert!(names.iter().any(|n| n == "NVIDIA H200"), "{api}: {names:?}");
            let kernels: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Kernel(k) => Some((k.kind, k.grid, k.block, k.is_device_launched)),
                    _ => None,
                })
                .collect();
            let launched = (api != ApiVersion::Cupti12_8).then_some(false);
            let k = ActivityKind::CONCURRENT_KERNEL;
            assert_eq!(
                kernels,
                [
                    (k, [264, 1, 1], [128, 1, 1], launched),
                    (k, [33, 1, 1], [256, 1, 1], launched)
                ],
                "{api}"
            );
            let copies: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Memcpy(m) => Some((m.copy_kind, m.bytes, m.is_device_launched)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                copies,
                [
                    (1, 1 << 20, launched),
                    (2, 65_536, launched),
                    (8, 4096, launched)
                ],
                "{api}: HTOD, DTOH, DTOD"
            );
            let sets: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Memset(m) => Some((m.value, m.bytes, m.is_device_launched)),
                    _ => None,
                })
                .collect();
            assert_eq!(sets, [(171, 12_289, launched)], "{api}");
            let memory: Vec<_> = recs
                .iter()
                .filter_map(|r| match r {
                    Record::Memory(m) => Some((m.operation.raw(), m.bytes, m.is_async)),
                    _ => None,
                })
                .collect();
            assert_eq!(
                memory,
                [
                    (1, 4 << 20, 0),
                    (1, 3 << 20, 1),
                    (2, 3 << 20, 1),
                    (2, 4 << 20, 0)
                ],
                "{api}: cuMemAlloc, cuMemAllocAsync, cuMemFreeAsync, cuMemFree"
            );
            assert!(
                recs.iter()
                    .any(|r| matches!(r, Record::ExternalCorrelation(e)
                    if e.external_kind == 3 && e.external_id == 4242)),
                "{api}: the pushed CUSTOM0 id"
            );
            let graphs = recs
                .iter()
                .filter(|r| matches!(r, Record::GraphTrace(_)))
                .count();
            assert_eq!(graphs, 1, "{api}");
            assert_eq!(
                d.skipped.get("jit"),
                Some(&1),
                "{api}: the PTX module's JIT"
            );
            // And metered: the device from its DEVICE record, both kernels on it.
            let mut m = meter();
            let opts = CuptiOptions {
                api,
                ..CuptiOptions::default()
            };
            let s = ok(meter_buffer(&mut m, "live.bin", &buf, &opts));
            assert_eq!(s.device_keys.len(), 1, "{api}");
            let r = finish(m);
            let key = &s.device_keys[0];
            assert_eq!(r.device_total(key, MeterKind::KernelLaunches), 2, "{api}");
            assert_eq!(r.device(key).and_then(|d| d.sm_count), Some(132), "{api}");
            eprintln!(
                "{api}: {} live records, {n} fields agree with libcupti's walk",
                d.records.len()
            );
        }
    }
}

// ------------------------------------------------------------------------------------------

mod metering {
    use super::*;

    const UUID: [u8; 16] = [
        0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09, 0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff, 0x6f,
        0x88,
    ];
    const KEY: &str = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";

    fn device(b: &mut Buf, sms: u32, name_ptr: u64) {
        b.rec(
            ActivityKind::DEVICE,
            &[
                ("id", 0),
                ("numMultiprocessors", sms.into()),
                ("computeCapabilityMajor", 9),
                ("computeCapabilityMinor", 0),
                ("numThreadsPerWarp", 32),
                ("maxWarpsPerMultiprocessor", 64),
                ("maxBlocksPerMultiprocessor", 32),
                ("maxSharedMemoryPerMultiprocessor", 233_472),
                ("maxRegistersPerMultiprocessor", 65_536),
                ("uuid", i128::from_le_bytes(UUID)),
                ("name", name_ptr.into()),
            ],
        );
    }

    /// The acceptance case: a raw buffer holding a DEVICE record and kernels meters `sm_ns`
    /// with that device's SM count, and a lost-timestamp kernel is loss.
    #[test]
    fn device_record_sm_count_and_zero_timestamp_loss() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            device(&mut b, 132, 0xdead_0000);
            b.kernel(T0, T0 + 1_000, 264, 1); // holds all 132 SMs: 132_000 SM·ns
            b.kernel(T0 + 2_000, T0 + 2_500, 10, 2); // 10 SMs × 500 ns
            b.kernel(0, T0 + 3_000, 10, 3); // start lost
            b.kernel(T0 + 4_000, 0, 10, 4); // end lost
            let mut names = StringTable::new();
            names.insert(0xdead_0000, "NVIDIA H100 80GB HBM3");
            let opts = CuptiOptions {
                api,
                strings: Some(&names),
                on_device: None,
            };
            let mut m = meter();
            let s = ok(meter_buffer(&mut m, "buf.bin", &b.bytes, &opts));
            assert_eq!(s.device_keys, [KEY]);
            assert_eq!((s.records, s.format.as_str()), (4, "cupti"));
            let r = finish(m);
            assert_eq!(
                r.device_total(KEY, MeterKind::SmNs),
                132_000 + 5_000,
                "{api}"
            );
            assert_eq!(r.device_total(KEY, MeterKind::KernelLaunches), 2);
            assert_eq!(r.device_total(KEY, MeterKind::KernelNs), 1_500);
            assert_eq!(r.lost(KEY, "zero_timestamp"), 2);
            let dev = r.device(KEY).unwrap_or_else(|| panic!("no device"));
            assert_eq!(dev.sm_count, Some(132));
            assert_eq!(dev.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
            assert_eq!(dev.compute_capability.as_deref(), Some("9.0"));
            assert!(dev.not_meterable.is_empty());
            assert_eq!(r.sources[0].format, "cupti");
        }
    }

    #[test]
    fn without_a_device_record_sm_ns_is_not_meterable_unless_a_hook_says() {
        let mut b = Buf::new(ApiVersion::Cupti12_8);
        b.kernel(T0, T0 + 1_000, 264, 1);
        let mut m = meter();
        let s = ok(meter_buffer(
            &mut m,
            "k.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        let k0 = format!("{}#0", &s.sha256[..16]);
        assert_eq!(s.device_keys, std::slice::from_ref(&k0));
        let r = finish(m);
        let dev = r.device(&k0).unwrap_or_else(|| panic!("no device"));
        // sm_ns and, building on it, warp_ns: both listed, as the warning says.
        let nm: Vec<MeterKind> = dev.not_meterable.iter().map(|n| n.meter).collect();
        assert_eq!(nm, [MeterKind::SmNs, MeterKind::WarpNs]);
        assert_eq!(r.device_total(&k0, MeterKind::SmNs), 0);

        // A catalog-like hook supplies the SM count before the records are pushed.
        let hook = |m: &mut Meter, slot: DeviceSlot| {
            let key = m.device(slot).map(|d| d.key.clone()).unwrap_or_default();
            let mut over = gpumeter_core::DeviceInfo::bare("", 0);
            over.sm_count = Some(100);
            m.override_device(&key, &over);
        };
        let mut m = meter();
        let opts = CuptiOptions {
            on_device: Some(&hook),
            ..CuptiOptions::default()
        };
        ok(meter_buffer(&mut m, "k.bin", &b.bytes, &opts));
        let r = finish(m);
        assert_eq!(r.device_total(&k0, MeterKind::SmNs), 100_000);
    }

    #[test]
    fn process_and_external_id_joins() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            // The kernels come first; their API records later in the buffer.
            b.kernel(T0, T0 + 100, 1, 100);
            b.kernel(T0 + 200, T0 + 300, 1, 101);
            b.kernel(T0 + 400, T0 + 500, 1, 102);
            b.kernel(T0 + 600, T0 + 700, 1, 0);
            let api_rec = |b: &mut Buf, kind, corr: u32, pid: u32| {
                b.rec(
                    kind,
                    &[("correlationId", corr.into()), ("processId", pid.into())],
                );
            };
            api_rec(&mut b, ActivityKind::RUNTIME, 100, 4242);
            api_rec(&mut b, ActivityKind::DRIVER, 101, 4243);
            api_rec(&mut b, ActivityKind::INTERNAL_LAUNCH_API, 102, 4244);
            let ext = |b: &mut Buf, kind: u32, id: u64, corr: u32| {
                b.rec(
                    ActivityKind::EXTERNAL_CORRELATION,
                    &[
                        ("externalKind", kind.into()),
                        ("externalId", id.into()),
                        ("correlationId", corr.into()),
                    ],
                );
            };
            ext(&mut b, 4, 7002, 100); // CUSTOM1
            ext(&mut b, 3, 1001, 100); // CUSTOM0 wins
            ext(&mut b, 2, 55, 101); // OPENACC: not an attribution id
            let mut m = meter();
            let mut map = TenantMap::default();
            map.external.insert(1001, tn("alice"));
            map.external.insert(55, tn("nobody"));
            map.pid.insert(4242, tn("carol"));
            map.pid.insert(4243, tn("dave"));
            m.set_tenant_map(map);
            let s = ok(meter_buffer(
                &mut m,
                "j.bin",
                &b.bytes,
                &CuptiOptions {
                    api,
                    ..CuptiOptions::default()
                },
            ));
            assert_eq!((s.process_ids_joined, s.external_ids_joined), (3, 1));
            let r = finish(m);
            let by_tenant: BTreeMap<&str, u128> = r
                .totals
                .iter()
                .filter(|t| t.meter == MeterKind::KernelNs)
                .map(|t| (t.tenant.as_str(), t.quantity.0))
                .collect();
            let want: BTreeMap<&str, u128> = [("alice", 100), ("dave", 100), ("unattributed", 200)]
                .into_iter()
                .collect();
            assert_eq!(by_tenant, want, "{api}");
        }
    }

    #[test]
    fn copies_memsets_graphs_and_skipped_kinds() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            let copy = |b: &mut Buf, kind: u8, bytes: u64, t: u64| {
                b.rec(
                    ActivityKind::MEMCPY,
                    &[
                        ("copyKind", kind.into()),
                        ("bytes", bytes.into()),
                        ("start", t.into()),
                        ("end", (t + 10).into()),
                    ],
                );
            };
            copy(&mut b, 1, 1000, T0);
            copy(&mut b, 2, 2000, T0 + 20);
            copy(&mut b, 8, 3000, T0 + 40);
            copy(&mut b, 10, 4000, T0 + 60);
            copy(&mut b, 9, 5000, T0 + 80); // HTOH: other
            copy(&mut b, 6, 6000, T0 + 100); // ATOD: other
            b.rec(
                ActivityKind::MEMCPY2,
                &[
                    ("copyKind", 10),
                    ("bytes", 7000),
                    ("start", (T0 + 120).into()),
                    ("end", (T0 + 130).into()),
                    ("deviceId", 1),
                    ("srcDeviceId", 1),
                    ("dstDeviceId", 0),
                ],
            );
            b.rec(
                ActivityKind::MEMSET,
                &[
                    ("bytes", 8000),
                    ("start", (T0 + 140).into()),
                    ("end", (T0 + 150).into()),
                ],
            );
            b.rec(
                ActivityKind::GRAPH_TRACE,
                &[("start", (T0 + 200).into()), ("end", (T0 + 300).into())],
            );
            b.rec(ActivityKind::OVERHEAD, &[("start", T0.into())]);
            b.rec(ActivityKind::MARKER, &[]);
            b.rec(ActivityKind::MEMORY2, &[("bytes", 1 << 20)]);
            b.rec(ActivityKind::INSTRUCTION_EXECUTION, &[]);
            b.rec(ActivityKind::CONTEXT, &[("contextId", 1)]);
            let mut m = meter();
            let s = ok(meter_buffer(
                &mut m,
                "c.bin",
                &b.bytes,
                &CuptiOptions {
                    api,
                    ..CuptiOptions::default()
                },
            ));
            // Skipped: OVERHEAD, MARKER, and the MEMORY2 record of operation 0 (neither
            // allocation nor release); INSTRUCTION_EXECUTION is consumed by the join.
            assert_eq!((s.records, s.skipped), (9, 3), "{api}");
            let label = s.sha256[..16].to_string();
            let (k0, k1) = (format!("{label}#0"), format!("{label}#1"));
            assert_eq!(s.device_keys, [k0.clone(), k1.clone()]);
            let r = finish(m);
            let k0 = k0.as_str();
            assert_eq!(r.device_total(k0, MeterKind::MemcpyHtodBytes), 1000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyDtohBytes), 2000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyDtodBytes), 3000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyPeerBytes), 4000);
            assert_eq!(r.device_total(k0, MeterKind::MemcpyOtherBytes), 11_000);
            assert_eq!(r.device_total(k0, MeterKind::MemsetBytes), 8000);
            // The peer copy is billed on the device of its record.
            assert_eq!(r.device_total(&k1, MeterKind::MemcpyPeerBytes), 7000);
            // 6 copies + memset of 10 ns, graph 100 ns, on device 0.
            assert_eq!(r.device_total(k0, MeterKind::GpuBusyNs), 70 + 100);
            for cat in ["overhead", "marker", "memory2_other_operation"] {
                assert_eq!(r.records.skipped.get(cat), Some(&1), "{cat}");
            }
        }
    }

    #[test]
    fn a_record_with_a_negative_grid_is_lost_and_the_rest_metered() {
        let api = ApiVersion::Cupti12_8;
        let mut b = Buf::new(api);
        b.kernel(T0, T0 + 100, 1, 1);
        let at = b.kernel(T0, T0 + 100, -3, 2);
        let mut m = meter();
        let s = ok(meter_buffer(
            &mut m,
            "neg.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        assert_eq!(s.records, 2);
        let key = format!("{}#0", &s.sha256[..16]);
        let r = finish(m);
        assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 1);
        assert_eq!(r.lost(&key, "invalid_field"), 1);
        let w = r
            .warnings
            .iter()
            .find(|w| w.contains("invalid_field"))
            .map(|w| w.to_string())
            .unwrap_or_default();
        assert!(
            w.contains("neg.bin")
                && w.contains(&format!("record at byte {at}"))
                && w.contains("`gridX` = -3"),
            "{w}"
        );
    }

    #[test]
    fn errors_leave_the_meter_untouched() {
        let api = ApiVersion::Cupti12_8;
        let mut b = Buf::new(api);
        b.kernel(T0, T0 + 100, 1, 1);
        b.kernel(T0, T0 + 100, 2, 2);
        let mut m = meter();
        let cut = &b.bytes[..b.bytes.len() - 8];
        let e = meter_buffer(&mut m, "cut.bin", cut, &CuptiOptions::default());
        let msg = match e {
            Err(e) => e.to_string(),
            Ok(_) => panic!("metered a truncated buffer"),
        };
        assert!(
            msg.starts_with("cut.bin: truncated record at byte 208"),
            "{msg}"
        );
        let r = finish(m);
        assert!(r.sources.is_empty() && r.devices.is_empty() && r.totals.is_empty());
    }

    #[test]
    fn the_same_source_twice_is_metered_once() {
        let mut b = Buf::new(ApiVersion::Cupti12_8);
        b.kernel(T0, T0 + 100, 1, 1);
        let mut m = meter();
        let first = ok(meter_buffer(
            &mut m,
            "a.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        let again = ok(meter_buffer(
            &mut m,
            "b.bin",
            &b.bytes,
            &CuptiOptions::default(),
        ));
        assert!(!first.duplicate_source && again.duplicate_source);
        assert_eq!(first.sha256, again.sha256);
        let r = finish(m);
        let key = format!("{}#0", &first.sha256[..16]);
        assert_eq!(r.device_total(&key, MeterKind::KernelNs), 100);
        assert_eq!(r.sources.len(), 1);
    }
}

// ------------------------------------------------------------------------------------------

mod gmr_format {
    use super::*;
    use proptest::prelude::*;

    pub(super) fn header(api: u32) -> GmrHeader {
        GmrHeader {
            cupti_api_version: api,
            host: "node-7".into(),
            clock: gpumeter_recording::gmr::ClockPair {
                cupti_timestamp_ns: T0,
                unix_time_ns: T0 + 17,
            },
            process_id: 4242,
            devices: vec![GmrDevice {
                id: 0,
                name: Some("NVIDIA H100 80GB HBM3".into()),
                uuid: Some("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88".into()),
                sm_count: Some(132),
                compute_capability: Some("9.0".into()),
            }],
            producer: gpumeter_recording::gmr::Producer {
                name: "test".into(),
                version: "0".into(),
            },
            instrumented: false,
            labels: Default::default(),
        }
    }

    pub(super) fn write(h: &GmrHeader, frames: &[Frame], finish: bool) -> (Vec<u8>, Vec<usize>) {
        let mut offsets = Vec::new();
        let mut w = ok(GmrWriter::new(Vec::new(), h));
        let mut len = GMR_PREAMBLE_LEN + 16 + ok(serde_json::to_vec(h)).len();
        for f in frames {
            offsets.push(len);
            ok(w.write_frame(f));
            len += 16 + payload_len(f);
        }
        if finish {
            (ok(w.finish()), offsets)
        } else {
            // Unfinished: take the bytes as they are (no end frame).
            let bytes = ok(w.finish());
            let end = bytes.len() - 16;
            (bytes[..end].to_vec(), offsets)
        }
    }

    /// A frame of type `kind` around `payload` (type, length, payload, CRC-32 of the three),
    /// as written, whatever the payload holds.
    pub(super) fn raw_frame(kind: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&kind.to_le_bytes());
        f.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        f.extend_from_slice(payload);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&f);
        f.extend_from_slice(&crc.finalize().to_le_bytes());
        f
    }

    fn payload_len(f: &Frame) -> usize {
        match f {
            Frame::ActivityBuffer(b) => b.len(),
            Frame::StringTable(t) => t.entries.values().map(|s| 12 + s.len()).sum(),
            Frame::Dropped(_) | Frame::Energy(_) => 24,
            Frame::Attribution(a) => 28 + a.label.len(),
            Frame::Instructions(c) => {
                16 + c.functions.iter().map(|f| 12 + f.name.len()).sum::<usize>()
            }
            Frame::PmSamples(s) => 8 + 56 * s.samples.len(),
            Frame::OpCounts(c) => {
                16 + c
                    .kernels
                    .iter()
                    .map(|k| {
                        8 + k
                            .counters
                            .iter()
                            .map(|v| 12 + v.metric.len())
                            .sum::<usize>()
                    })
                    .sum::<usize>()
            }
            _ => panic!(),
        }
    }

    fn frame_strategy() -> impl Strategy<Value = Frame> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(Frame::ActivityBuffer),
            proptest::collection::btree_map(any::<u64>(), ".{0,20}", 0..5)
                .prop_map(|entries| Frame::StringTable(StringTable { entries })),
            (
                any::<Option<u32>>(),
                any::<u32>(),
                any::<u32>(),
                any::<u64>()
            )
                .prop_map(|(d, c, s, n)| Frame::Dropped(DroppedRecords {
                    device_id: d.filter(|&d| d != u32::MAX),
                    context_id: c,
                    stream_id: s,
                    count: n,
                })),
            (1u32..6, any::<u32>(), any::<u64>(), any::<u64>(), ".{0,12}").prop_map(
                |(k, p, e, t, l)| Frame::Attribution(AttributionEvent {
                    kind: match k {
                        1 => AttributionKind::ExternalPush,
                        2 => AttributionKind::ExternalPop,
                        3 => AttributionKind::TenantHint,
                        o => AttributionKind::Other(o),
                    },
                    process_id: p,
                    external_id: e,
                    timestamp_ns: t,
                    label: l,
                })
            ),
            (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(d, t, e)| Frame::Energy(
                EnergySample {
                    device_id: d,
                    timestamp_ns: t,
                    energy_mj: e,
                }
            )),
            (
                any::<(u32, u32, u32)>(),
                proptest::collection::vec((".{0,16}", any::<u64>()), 0..4)
            )
                .prop_map(|((c, d, x), fs)| Frame::Instructions(InstructionCounts {
                    correlation_id: c,
                    device_id: d,
                    context_id: x,
                    functions: fs
                        .into_iter()
                        .map(|(name, warp_instructions)| FunctionInstructions {
                            name,
                            warp_instructions,
                        })
                        .collect(),
                })),
            (
                any::<u32>(),
                proptest::collection::vec(pm_sample_strategy(), 0..4)
            )
                .prop_map(|(device_id, samples)| Frame::PmSamples(PmSamples {
                    device_id,
                    samples
                })),
            (
                any::<(u32, u32, u32)>(),
                proptest::collection::btree_map(
                    1u32..,
                    proptest::collection::btree_map("[a-z_.]{1,16}", any::<u64>(), 0..4),
                    0..4
                )
            )
                .prop_map(|((device_id, context_id, passes), kernels)| {
                    Frame::OpCounts(gpumeter_recording::gmr::OpCounters {
                        device_id,
                        context_id,
                        passes,
                        kernels: kernels
                            .into_iter()
                            .map(|(correlation_id, counters)| {
                                gpumeter_recording::gmr::KernelOpCounters {
                                    correlation_id,
                                    counters: counters
                                        .into_iter()
                                        .map(|(metric, value)| {
                                            gpumeter_recording::gmr::OpCounterValue {
                                                metric,
                                                value,
                                            }
                                        })
                                        .collect(),
                                }
                            })
                            .collect(),
                    })
                }),
        ]
    }

    fn pm_sample_strategy() -> impl Strategy<Value = PmSample> {
        (
            any::<(u64, u64, bool)>(),
            any::<(Option<u64>, Option<u64>, Option<u64>, Option<u64>)>(),
        )
            .prop_map(|((start_ns, end_ns, overflow), (a, e, r, w))| PmSample {
                start_ns,
                end_ns,
                sm_active_cycles: a,
                sm_elapsed_cycles: e,
                dram_read_bytes: r,
                dram_write_bytes: w,
                overflow,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Random frames written and read back are equal, in order, at their offsets.
        #[test]
        fn round_trip(frames in proptest::collection::vec(frame_strategy(), 0..12),
                      api in any::<u32>(), host in ".{0,16}") {
            let mut h = header(api);
            h.host = host;
            let (bytes, offsets) = write(&h, &frames, true);
            let file = ok(read_gmr(&bytes));
            prop_assert_eq!(&file.header, &h);
            prop_assert!(file.finished && file.torn.is_none());
            prop_assert_eq!(file.unknown_frames, 0);
            let got: Vec<Frame> = file.frames.iter().map(|f| f.frame.clone()).collect();
            prop_assert_eq!(got, frames);
            let got_offsets: Vec<usize> = file.frames.iter().map(|f| f.offset as usize).collect();
            prop_assert_eq!(got_offsets, offsets);
        }

        /// The reader never panics, on any bytes after a valid preamble or on a damaged file.
        #[test]
        fn reader_never_panics(tail in proptest::collection::vec(any::<u8>(), 0..400),
                               flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
            let (mut bytes, _) = write(&header(26), &[Frame::ActivityBuffer(vec![1; 40])], true);
            let _ = read_gmr(&bytes);
            let len = bytes.len();
            for (at, x) in flips {
                bytes[at % len] ^= x;
            }
            bytes.extend_from_slice(&tail);
            let _ = read_gmr(&bytes);
            let _ = meter_gmr(&mut meter(), "x.gmr", &bytes, &CuptiOptions::default());
        }
    }

    fn sample_frames() -> Vec<Frame> {
        let mut t = StringTable::new();
        t.insert(0x1000, "k");
        vec![
            Frame::StringTable(t),
            Frame::ActivityBuffer(vec![0; 16]),
            Frame::Dropped(DroppedRecords {
                device_id: Some(0),
                context_id: 1,
                stream_id: 2,
                count: 3,
            }),
            Frame::Energy(EnergySample {
                device_id: 0,
                timestamp_ns: T0,
                energy_mj: 5,
            }),
            Frame::Instructions(instruction_counts()),
            Frame::PmSamples(pm_samples()),
        ]
    }

    fn instruction_counts() -> InstructionCounts {
        InstructionCounts {
            correlation_id: 77,
            device_id: 1,
            context_id: 3,
            functions: vec![
                FunctionInstructions {
                    name: "_Z6vecAddPKfS0_Pfi".into(),
                    warp_instructions: 4_000_000_000_123,
                },
                FunctionInstructions {
                    name: "k\u{e9}".into(),
                    warp_instructions: 0,
                },
            ],
        }
    }

    /// Instruction-count frames (type 8): the documented layout byte for byte, the header
    /// flag, and payloads that are cut short, overlong or not UTF-8 are typed errors.
    #[test]
    fn instruction_counts_frame_layout_and_bad_payloads() {
        let c = instruction_counts();
        assert_eq!(c.total(), 4_000_000_000_123);
        let mut h = header(26);
        let plain = ok(serde_json::to_string(&h));
        assert!(!plain.contains("instrumented"), "{plain}");
        h.instrumented = true;
        let (bytes, offsets) = write(&h, &[Frame::Instructions(c.clone())], true);
        let file = ok(read_gmr(&bytes));
        assert!(file.header.instrumented);
        assert_eq!(file.frames[0].frame, Frame::Instructions(c.clone()));
        let at = offsets[0];
        let mut payload = Vec::new();
        for v in [77u32, 1, 3, 2] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        payload.extend_from_slice(&4_000_000_000_123u64.to_le_bytes());
        payload.extend_from_slice(&18u32.to_le_bytes());
        payload.extend_from_slice(b"_Z6vecAddPKfS0_Pfi");
        payload.extend_from_slice(&0u64.to_le_bytes());
        payload.extend_from_slice(&3u32.to_le_bytes());
        payload.extend_from_slice("k\u{e9}".as_bytes());
        assert_eq!(&bytes[at..at + 4], &8u32.to_le_bytes());
        assert_eq!(
            &bytes[at + 4..at + 12],
            &(payload.len() as u64).to_le_bytes()
        );
        assert_eq!(&bytes[at + 12..at + 12 + payload.len()], &payload[..]);

        // Hand-made frames with a right checksum and a bad payload.
        let frame = |p: &[u8]| raw_frame(8, p);
        let (head, _) = write(&header(26), &[], false);
        let with = |p: &[u8]| {
            let mut b = head.clone();
            b.extend_from_slice(&frame(p));
            read_gmr(&b)
        };
        // Trailing bytes after the functions are ignored (forward compatibility).
        let mut longer = payload.clone();
        longer.extend_from_slice(&[9, 9, 9]);
        match with(&longer) {
            Ok(f) => assert_eq!(f.frames[0].frame, Frame::Instructions(c.clone())),
            Err(e) => panic!("{e}"),
        }
        // Too short for the fixed part; a count larger than the entries; a name past the end;
        // a name that is not UTF-8.
        let mut huge_count = payload.clone();
        huge_count[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut long_name = payload.clone();
        long_name[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut not_utf8 = payload.clone();
        let last = not_utf8.len() - 1;
        not_utf8[last] = 0xff;
        for (what, bad) in [
            ("short", &payload[..15]),
            ("count", &huge_count[..]),
            ("name length", &long_name[..]),
            ("utf-8", &not_utf8[..]),
            ("cut", &payload[..payload.len() - 1]),
        ] {
            // Its checksum is right, so its producer wrote it so: the frame is lost as
            // malformed, saying why, and the file is read on.
            match with(bad) {
                Ok(f)
                    if f.frames.is_empty()
                        && f.damaged.len() == 1
                        && f.damaged[0].damage == Damage::Malformed
                        && f.damaged[0].frame_type == Some(8)
                        && !f.damaged[0].detail.is_empty() => {}
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    fn pm_samples() -> PmSamples {
        PmSamples {
            device_id: 1,
            samples: vec![
                PmSample {
                    start_ns: T0,
                    end_ns: T0 + 100_000,
                    sm_active_cycles: Some(13_200_000),
                    sm_elapsed_cycles: Some(198_000),
                    dram_read_bytes: Some(4_000_000_000_001),
                    dram_write_bytes: Some(0),
                    overflow: false,
                },
                PmSample {
                    start_ns: T0 + 100_000,
                    end_ns: T0 + 200_000,
                    sm_active_cycles: None,
                    sm_elapsed_cycles: Some(7),
                    dram_read_bytes: None,
                    dram_write_bytes: Some(u64::MAX),
                    overflow: true,
                },
            ],
        }
    }

    /// PM-sample frames (type 9): the documented layout byte for byte (flags say which
    /// counters are there, absent ones are written 0), and payloads that are cut short,
    /// longer than their count, or carry unknown flag bits are malformed, naming the frame.
    #[test]
    fn pm_samples_frame_layout_and_bad_payloads() {
        let s = pm_samples();
        let (bytes, offsets) = write(&header(26), &[Frame::PmSamples(s.clone())], true);
        let file = ok(read_gmr(&bytes));
        assert_eq!(file.frames[0].frame, Frame::PmSamples(s.clone()));
        assert_eq!(file.unknown_frames, 0);
        let at = offsets[0];
        let mut payload = Vec::new();
        payload.extend_from_slice(&1u32.to_le_bytes());
        payload.extend_from_slice(&2u32.to_le_bytes());
        // Sample 0: all four counters (bits 1-4), no overflow.
        payload.extend_from_slice(&0b11110u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        for v in [T0, T0 + 100_000, 13_200_000, 198_000, 4_000_000_000_001, 0] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        // Sample 1: overflow (bit 0), elapsed (bit 2), write (bit 4); absent ones are 0.
        payload.extend_from_slice(&0b10101u32.to_le_bytes());
        payload.extend_from_slice(&0u32.to_le_bytes());
        for v in [T0 + 100_000, T0 + 200_000, 0, 7, 0, u64::MAX] {
            payload.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(payload.len(), 8 + 2 * 56);
        assert_eq!(&bytes[at..at + 4], &9u32.to_le_bytes());
        assert_eq!(
            &bytes[at + 4..at + 12],
            &(payload.len() as u64).to_le_bytes()
        );
        assert_eq!(&bytes[at + 12..at + 12 + payload.len()], &payload[..]);
        // An empty batch round-trips too.
        let empty = PmSamples {
            device_id: 3,
            samples: Vec::new(),
        };
        let (bytes, _) = write(&header(26), &[Frame::PmSamples(empty.clone())], true);
        assert_eq!(
            ok(read_gmr(&bytes)).frames[0].frame,
            Frame::PmSamples(empty)
        );

        let frame = |p: &[u8]| raw_frame(9, p);
        let (head, _) = write(&header(26), &[], false);
        let with = |p: &[u8]| {
            let mut b = head.clone();
            b.extend_from_slice(&frame(p));
            // A good frame after it: reading goes on past the malformed one.
            let mut w = ok(GmrWriter::new(Vec::new(), &header(26)));
            ok(w.write_pm_samples(&pm_samples()));
            let good = ok(w.finish());
            let (h, _) = write(&header(26), &[], false);
            b.extend_from_slice(&good[h.len()..]);
            read_gmr(&b)
        };
        let mut longer = payload.clone();
        longer.extend_from_slice(&[0; 56]);
        let mut fewer = payload.clone();
        fewer[4..8].copy_from_slice(&1u32.to_le_bytes());
        let mut huge_count = payload.clone();
        huge_count[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let mut bad_flag = payload.clone();
        bad_flag[8 + 56..8 + 56 + 4].copy_from_slice(&(0b10101u32 | 1 << 5).to_le_bytes());
        let mut high_flag = payload.clone();
        high_flag[8..12].copy_from_slice(&(1u32 << 31).to_le_bytes());
        // Sample 1's reserved field, and its sm_active_cycles with its flag (bit 1) clear.
        let mut reserved = payload.clone();
        reserved[8 + 56 + 4..8 + 56 + 8].copy_from_slice(&2u32.to_le_bytes());
        let mut stray = payload.clone();
        stray[8 + 56 + 24..8 + 56 + 32].copy_from_slice(&5u64.to_le_bytes());
        for (what, bad, needle) in [
            ("short", &payload[..7], "too short"),
            ("cut", &payload[..payload.len() - 1], "does not hold"),
            ("longer than its count", &longer[..], "does not hold"),
            ("count below the samples", &fewer[..], "does not hold"),
            ("huge count", &huge_count[..], "does not hold"),
            (
                "unknown flag bit 5",
                &bad_flag[..],
                "PM sample #1 of 2 (numbered from #0, at payload byte 64) has unknown flag bits 0x20",
            ),
            (
                "unknown flag bit 31",
                &high_flag[..],
                "PM sample #0 of 2 (numbered from #0, at payload byte 8) has unknown flag bits 0x80000000",
            ),
            (
                "nonzero reserved field",
                &reserved[..],
                "PM sample #1 of 2 (numbered from #0, at payload byte 64) has a nonzero reserved field 0x2",
            ),
            (
                "a counter with its flag clear",
                &stray[..],
                "PM sample #1 of 2 (numbered from #0, at payload byte 64) has sm_active_cycles 5 with its presence flag 0x2 clear",
            ),
        ] {
            match with(bad) {
                Ok(f)
                    if f.frames
                        == [LocatedFrame {
                            offset: f.frames[0].offset,
                            index: 2,
                            frame: Frame::PmSamples(pm_samples()),
                        }]
                        && f.damaged.len() == 1
                        && f.damaged[0].damage == Damage::Malformed
                        && f.damaged[0].frame_type == Some(9)
                        && f.damaged[0].holds_no_records()
                        && f.damaged[0].detail.contains(needle) =>
                {
                    let shown = f.damaged[0].to_string();
                    assert!(
                        shown.contains("frame #1") && shown.contains("(type 9)"),
                        "{shown}"
                    );
                }
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    /// A file cut at every byte of its last frame keeps the frames before it and reports the
    /// tear; cut exactly before it, it is merely unfinished.
    #[test]
    fn torn_last_frame_keeps_earlier_frames() {
        let frames = sample_frames();
        let (bytes, offsets) = write(&header(26), &frames, false);
        let last = offsets[offsets.len() - 1];
        for cut in last..bytes.len() {
            let file = ok(read_gmr(&bytes[..cut]));
            let got: Vec<Frame> = file.frames.iter().map(|f| f.frame.clone()).collect();
            assert_eq!(got, frames[..frames.len() - 1], "cut at {cut}");
            assert!(!file.finished);
            if cut == last {
                assert_eq!(file.torn, None);
            } else {
                let t = file.torn.unwrap_or_else(|| panic!("cut at {cut}: no tear"));
                assert_eq!(
                    (t.offset, t.bytes, t.reason),
                    (last as u64, (cut - last) as u64, TornReason::ShortRead)
                );
            }
        }
        // The complete file reads whole, without a tear.
        let file = ok(read_gmr(&bytes));
        assert_eq!(file.frames.len(), frames.len());
        assert_eq!(file.torn, None);
        // A complete last frame whose checksum is wrong is torn too.
        let mut bad = bytes.clone();
        let n = bad.len();
        bad[n - 1] ^= 0xff;
        let file = ok(read_gmr(&bad));
        assert_eq!(file.frames.len(), frames.len() - 1);
        assert_eq!(
            file.torn.map(|t| (t.offset, t.reason)),
            Some((last as u64, TornReason::BadChecksum))
        );
    }

    #[test]
    fn corruption_in_the_middle_loses_the_frame_or_the_rest_never_silently() {
        let frames = sample_frames();
        let (bytes, offsets) = write(&header(26), &frames, true);
        // Flip a payload byte of the second frame (the activity buffer): that frame is
        // listed as damaged and the frames after it are read.
        let mut bad = bytes.clone();
        bad[offsets[1] + 12] ^= 1;
        let file = ok(read_gmr(&bad));
        assert_eq!(file.frames.len(), frames.len() - 1);
        assert!(file.finished && file.torn.is_none());
        assert_eq!(file.damaged.len(), 1);
        let d = &file.damaged[0];
        assert_eq!(
            (d.offset, d.index, d.frame_type, d.damage),
            (offsets[1] as u64, 2, Some(2), Damage::Corrupt)
        );
        // Corrupt the length field too: it cannot be trusted, so reading resumes at the next
        // frame whose checksum is right.
        let mut long = bad.clone();
        long[offsets[1] + 4] ^= 0x40;
        let file = ok(read_gmr(&long));
        assert_eq!(file.frames.len(), frames.len() - 1);
        assert!(file.finished);
        assert_eq!(file.damaged.len(), 1);
        assert_eq!(file.damaged[0].damage, Damage::Corrupt);
        // With nothing readable after it, the framing is lost: the rest of the file cannot be
        // read, and the damage says so.
        let mut lost = bad[..offsets[2]].to_vec();
        lost.extend_from_slice(&[0xab; 64]);
        let file = ok(read_gmr(&lost));
        assert_eq!(file.frames.len(), 1, "only the frame before survives");
        assert!(!file.finished);
        assert_eq!(file.damaged.len(), 1);
        assert_eq!(file.damaged[0].damage, Damage::FramingLost);
        assert_eq!(file.damaged[0].payload.len(), lost.len() - offsets[1] - 12);
        // The header's checksum.
        let mut bad = bytes.clone();
        bad[GMR_PREAMBLE_LEN + 12] ^= 1;
        assert!(matches!(read_gmr(&bad), Err(GmrError::BadHeader { .. })));
        // Magic and version.
        assert!(matches!(read_gmr(&bytes[..10]), Err(GmrError::NotGmr)));
        assert!(matches!(
            read_gmr(b"GPUMETER-GMX\0\r\n\x1a\x01\0\0\0"),
            Err(GmrError::NotGmr)
        ));
        let mut v2 = bytes.clone();
        v2[16] = 2;
        assert!(matches!(
            read_gmr(&v2),
            Err(GmrError::UnsupportedFormatVersion(2))
        ));
        // Data after the end frame.
        let mut after = bytes.clone();
        after.extend_from_slice(&bytes[offsets[1]..offsets[2]]);
        assert!(matches!(
            read_gmr(&after),
            Err(GmrError::CorruptFrame { .. })
        ));
    }

    /// Dropped-count deltas are summed per device without overflow.
    #[test]
    fn dropped_counts_saturate() {
        let mut b = Buf::new(ApiVersion::Cupti12_8);
        b.kernel(T0, T0 + 10, 1, 1);
        let d = |count| {
            Frame::Dropped(DroppedRecords {
                device_id: Some(0),
                context_id: 1,
                stream_id: 0,
                count,
            })
        };
        let frames = [Frame::ActivityBuffer(b.bytes), d(u64::MAX - 1), d(5), d(0)];
        let (bytes, _) = write(&header(26), &frames, true);
        let mut m = meter();
        let s = ok(meter_gmr(&mut m, "d.gmr", &bytes, &CuptiOptions::default()));
        assert_eq!(s.dropped, u64::MAX);
        let r = finish(m);
        assert_eq!(r.lost(&s.device_keys[0], "dropped"), u64::MAX);
    }

    /// A frame type from a newer producer, with a good checksum, is skipped and counted.
    #[test]
    fn unknown_frame_types_are_skipped() {
        let (bytes, offsets) = write(&header(26), &sample_frames(), true);
        let mut with = bytes[..offsets[1]].to_vec();
        let payload = b"future";
        let mut h = crc32fast::Hasher::new();
        h.update(&99u32.to_le_bytes());
        h.update(&(payload.len() as u64).to_le_bytes());
        h.update(payload);
        with.extend_from_slice(&99u32.to_le_bytes());
        with.extend_from_slice(&(payload.len() as u64).to_le_bytes());
        with.extend_from_slice(payload);
        with.extend_from_slice(&h.finalize().to_le_bytes());
        with.extend_from_slice(&bytes[offsets[1]..]);
        let file = ok(read_gmr(&with));
        assert_eq!(
            (file.unknown_frames, file.frames.len()),
            (1, sample_frames().len())
        );
        assert!(file.finished);
    }

    /// A whole recording metered: header inventory and string tables name the device, API
    /// records and the header's pid attribute, dropped counts are loss, a torn tail is a
    /// warning and the frames before it count.
    #[test]
    fn meter_a_recording() {
        for api in ApiVersion::ALL {
            let mut b1 = Buf::new(api);
            b1.rec(
                ActivityKind::DEVICE,
                &[("id", 0), ("numMultiprocessors", 132), ("name", 0xd00)],
            );
            b1.rec(ActivityKind::CONTEXT, &[("contextId", 5), ("deviceId", 0)]);
            b1.kernel(T0, T0 + 1_000, 264, 100);
            b1.rec(
                ActivityKind::RUNTIME,
                &[("correlationId", 100), ("processId", 999)],
            );
            let mut b2 = Buf::new(api);
            b2.kernel(T0 + 2_000, T0 + 3_000, 66, 101);
            let mut names = StringTable::new();
            names.insert(0xd00, "NVIDIA H100 80GB HBM3 (from strings)");
            let frames = vec![
                Frame::StringTable(names),
                Frame::ActivityBuffer(b1.bytes.clone()),
                Frame::Dropped(DroppedRecords {
                    device_id: None,
                    context_id: 5,
                    stream_id: 0,
                    count: 7,
                }),
                Frame::Energy(EnergySample::default()),
                Frame::ActivityBuffer(b2.bytes.clone()),
            ];
            let (mut bytes, offsets) = write(&header(api.cupti_api_version()), &frames, true);
            // Tear the file inside its end frame.
            bytes.truncate(bytes.len() - 3);
            let mut m = meter();
            let mut map = TenantMap::default();
            map.pid.insert(999, tn("api-pid"));
            map.pid.insert(4242, tn("header-pid"));
            m.set_tenant_map(map);
            let s = ok(meter_gmr(
                &mut m,
                "run.gmr",
                &bytes,
                &CuptiOptions::default(),
            ));
            assert_eq!(s.device_keys, ["GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88"]);
            assert_eq!(
                (s.records, s.dropped, s.buffers, s.energy_samples),
                (2, 7, 2, 1)
            );
            assert!(s.torn.is_some() && !s.finished);
            assert_eq!(s.format.as_str(), "gmr");
            let r = finish(m);
            let key = &s.device_keys[0];
            let dev = r.device(key).unwrap_or_else(|| panic!("no device"));
            assert_eq!(
                dev.name.as_deref(),
                Some("NVIDIA H100 80GB HBM3 (from strings)")
            );
            assert_eq!(dev.sm_count, Some(132));
            assert_eq!(dev.compute_capability.as_deref(), Some("9.0"));
            assert_eq!(r.lost(key, "dropped"), 7);
            let sm: BTreeMap<&str, u128> = r
                .totals
                .iter()
                .filter(|t| t.meter == MeterKind::SmNs)
                .map(|t| (t.tenant.as_str(), t.quantity.0))
                .collect();
            let want: BTreeMap<&str, u128> = [("api-pid", 132_000), ("header-pid", 66_000)]
                .into_iter()
                .collect();
            assert_eq!(sm, want, "{api}");
            assert_warns(&r, "torn last frame");
            assert_eq!(r.sources[0].format, "gmr");

            // A buffer whose checksum is right but that does not decode: the records before
            // the fault are metered, the rest is loss of unknown count, and a warning names its
            // frame and the fault.
            let mut broken = frames.clone();
            broken[4] = Frame::ActivityBuffer(b2.bytes[..100].to_vec());
            let (bytes, offsets2) = write(&header(api.cupti_api_version()), &broken, true);
            assert_eq!(offsets2[..4], offsets[..4]);
            let mut m = meter();
            ok(meter_gmr(
                &mut m,
                "bad.gmr",
                &bytes,
                &CuptiOptions::default(),
            ));
            let r = finish(m);
            assert_eq!(r.sources.len(), 1);
            assert!(
                r.loss
                    .iter()
                    .any(|l| l.reason == "corrupt_frame" && l.lower_bound),
                "{:?}",
                r.loss
            );
            assert_warns(
                &r,
                &format!(
                    "frame #5 at byte {}: the activity buffer stops decoding (truncated record at byte 0",
                    offsets2[4]
                ),
            );
        }
        // An unsupported producer version is refused.
        let (bytes, _) = write(&header(27), &[], true);
        assert!(matches!(
            meter_gmr(&mut meter(), "v27.gmr", &bytes, &CuptiOptions::default()),
            Err(CuptiSourceError::Decode {
                error: DecodeError::UnsupportedApiVersion(27),
                ..
            })
        ));
    }
}

// ------------------------------------------------------------------------------------------

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    fn any_api() -> impl Strategy<Value = ApiVersion> {
        proptest::sample::select(ApiVersion::ALL.to_vec())
    }

    /// The version and start offset the `decode_buffer` fuzz target picks from an input's first
    /// byte (`fuzz/fuzz_targets/decode_buffer.rs`): bits 0–2 skip 0–7 bytes, bits 3–7 index
    /// [`ApiVersion::ALL`] (modulo its length).
    fn fuzz_selection(sel: u8) -> (ApiVersion, usize) {
        let api = ApiVersion::ALL[usize::from(sel >> 3) % ApiVersion::ALL.len()];
        (api, usize::from(sel & 7))
    }

    /// What the `decode_buffer` fuzz target does with `buf` under `api`.
    fn fuzz_decode_buffer(name: &str, buf: &[u8], api: ApiVersion) {
        if let Ok(d) = decode(buf, api) {
            let used: usize = d.records.iter().map(|r| r.size).sum();
            assert_eq!(used + d.trailing_zero_bytes, buf.len(), "{name} {api}");
        }
        let mut m = meter();
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        if meter_buffer(&mut m, "fuzz.bin", buf, &opts).is_ok() {
            let _ = m.finish();
        }
    }

    /// Inputs the fuzz targets saved (`tests/data/fuzz/<target>-<hash>.bin`), replayed the
    /// way the targets run them; `decode_buffer` inputs also with every version and start
    /// offset (the selector byte's meaning changed when 13.0 was added).
    #[test]
    fn fuzz_artifacts_replay() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../gpumeter-cupti/tests/data/fuzz");
        let mut n = 0;
        for entry in ok(std::fs::read_dir(&dir)) {
            let path = ok(entry).path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let data = ok(std::fs::read(&path));
            if name.starts_with("decode_buffer-") {
                let Some((&sel, rest)) = data.split_first() else {
                    continue;
                };
                let (api, skip) = fuzz_selection(sel);
                fuzz_decode_buffer(&name, &rest[skip.min(rest.len())..], api);
                for api in ApiVersion::ALL {
                    for skip in 0..8 {
                        fuzz_decode_buffer(&name, &rest[skip.min(rest.len())..], api);
                    }
                }
                n += 1;
            } else if name.starts_with("gmr_reader-") {
                let mut m = meter();
                if meter_gmr(&mut m, "fuzz.gmr", &data, &CuptiOptions::default()).is_ok() {
                    let _ = m.finish();
                }
                n += 1;
            }
        }
        assert!(n > 0, "no fuzz artifacts in {}", dir.display());
    }

    /// Every version is reachable from the fuzz target's selector byte, and each seed in
    /// `fuzz/seeds/decode_buffer/crafted_<api>.bin` selects the version it names and decodes.
    #[test]
    fn fuzz_selector_and_seeds() {
        let reachable: BTreeSet<ApiVersion> = (0..=u8::MAX).map(|s| fuzz_selection(s).0).collect();
        assert_eq!(reachable.len(), ApiVersion::ALL.len());
        let seeds =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/decode_buffer");
        for api in ApiVersion::ALL {
            let path = seeds.join(format!("crafted_{}.bin", api.cupti_api_version()));
            let data = ok(std::fs::read(&path));
            let Some((&sel, rest)) = data.split_first() else {
                panic!("{} is empty", path.display());
            };
            let (picked, skip) = fuzz_selection(sel);
            assert_eq!((picked, skip), (api, 0), "{}", path.display());
            let d = ok(decode(rest, api));
            assert!(d.records.len() > 20, "{}", path.display());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn decode_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048),
                                  api in any_api()) {
            let d = decode(&bytes, api);
            // The streaming walk yields the same records, or the same first error.
            let walked: Result<Vec<_>, _> = gpumeter_cupti::Walk::new(&bytes, api).collect();
            prop_assert_eq!(walked, d.map(|d| d.records));
            let _ = meter_buffer(&mut meter(), "f.bin", &bytes,
                                 &CuptiOptions { api, ..CuptiOptions::default() });
        }

        /// Valid kinds with random contents always walk, and meter without panicking.
        #[test]
        fn valid_kinds_random_contents(kinds in proptest::collection::vec((any::<u8>(), any::<u64>()), 0..40),
                                       api in any_api()) {
            let layouts = api.layouts();
            let mut b = Buf::new(api);
            for (k, seed) in &kinds {
                let l = &layouts[*k as usize % layouts.len()];
                let at = b.rec(l.kind, &[]);
                let mut x = *seed | 1;
                for byte in &mut b.bytes[at + 4..] {
                    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                    *byte = x as u8;
                }
            }
            let d = decode(&b.bytes, api);
            prop_assert!(d.is_ok());
            prop_assert_eq!(d.map(|d| d.records.len()).unwrap_or(0), kinds.len());
            let _ = meter_buffer(&mut meter(), "r.bin", &b.bytes,
                                 &CuptiOptions { api, ..CuptiOptions::default() });
        }
    }
}

/// MEMORY2 (`memory_byte_ns`), green contexts (the partition cap) and INSTRUCTION_EXECUTION
/// (`warp_instructions`) from a buffer, in every API version that has the kinds.
#[test]
fn memory_green_contexts_and_instruction_counts_are_metered() {
    for api in ApiVersion::ALL {
        let mut b = Buf::new(api);
        b.rec(
            ActivityKind::DEVICE,
            &[
                ("id", 0),
                ("numMultiprocessors", 100),
                ("computeCapabilityMajor", 9),
            ],
        );
        b.rec(
            ActivityKind::CONTEXT,
            &[
                ("contextId", 5),
                ("deviceId", 0),
                ("isGreenContext", 1),
                ("numMultiprocessors", 30),
            ],
        );
        for (corr, pid) in [(11, 1), (12, 2), (13, 1)] {
            b.rec(
                ActivityKind::RUNTIME,
                &[("correlationId", corr), ("processId", pid)],
            );
        }
        // alice (pid 1): 50 blocks in green context 5 (30 SMs) → holds 30; bob (pid 2): 90
        // blocks on the device. 30 + 90 = 120 > 100 SMs: alice 25, bob 75 SM per ns. Without
        // the partition alice would hold 50 and get 50·100/140.
        for (ctx, grid, corr) in [(5, 50, 11), (1, 90, 12)] {
            b.rec(
                ActivityKind::CONCURRENT_KERNEL,
                &[
                    ("start", T0.into()),
                    ("end", (T0 + 1000).into()),
                    ("gridX", grid),
                    ("gridY", 1),
                    ("gridZ", 1),
                    ("blockX", 128),
                    ("blockY", 1),
                    ("blockZ", 1),
                    ("correlationId", corr),
                    ("contextId", ctx),
                    ("deviceId", 0),
                ],
            );
        }
        let has_instructions = api
            .layouts()
            .into_iter()
            .any(|l| l.kind == ActivityKind::INSTRUCTION_EXECUTION);
        if has_instructions {
            for (corr, n) in [(11, 700), (11, 300), (12, 5)] {
                b.rec(
                    ActivityKind::INSTRUCTION_EXECUTION,
                    &[("correlationId", corr), ("executed", n)],
                );
            }
        }
        let mem = |op: i128, kind: i128, addr: i128, t: u64| {
            vec![
                ("memoryOperationType", op),
                ("memoryKind", kind),
                ("address", addr),
                ("bytes", 4096),
                ("timestamp", i128::from(t)),
                ("deviceId", 0),
                ("contextId", 5),
                ("correlationId", 13),
            ]
        };
        b.rec(ActivityKind::MEMORY2, &mem(1, 3, 0x100, T0 + 100));
        b.rec(ActivityKind::MEMORY2, &mem(2, 3, 0x100, T0 + 600));
        b.rec(ActivityKind::MEMORY2, &mem(1, 2, 0x900, T0 + 100)); // pinned host: skipped
        b.rec(ActivityKind::MEMORY2, &mem(2, 3, 0x200, T0 + 700)); // never allocated: loss
        let mut m = meter();
        let mut tm = TenantMap::default();
        tm.pid.insert(1, tn("alice"));
        tm.pid.insert(2, tn("bob"));
        m.set_tenant_map(tm);
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        let s = ok(meter_buffer(&mut m, "mem.bin", &b.bytes, &opts));
        assert_eq!((s.memory_events, s.green_contexts), (3, 1), "{api}");
        let r = finish(m);
        let key = format!("{}#0", &s.sha256[..16]);
        let of = |tenant: &str, meter: MeterKind| -> u128 {
            r.totals
                .iter()
                .filter(|t| t.tenant == tenant && t.meter == meter && t.device_key == key)
                .map(|t| t.quantity.0)
                .sum()
        };
        assert_eq!(of("alice", MeterKind::SmNs), 25_000, "{api}");
        assert_eq!(of("bob", MeterKind::SmNs), 75_000, "{api}");
        // Memory: the allocation's processId is 0, so the API record of correlation 13 gives
        // pid 1.
        assert_eq!(of("alice", MeterKind::MemoryByteNs), 4096 * 500, "{api}");
        assert_eq!(r.lost(&key, "release_without_allocation"), 1, "{api}");
        assert_eq!(r.records.skipped.get("memory2_host"), Some(&1), "{api}");
        if has_instructions {
            assert_eq!(s.kernels_with_instructions, 2, "{api}");
            assert_eq!(of("alice", MeterKind::WarpInstructions), 1000, "{api}");
            assert_eq!(of("bob", MeterKind::WarpInstructions), 5, "{api}");
            assert_warns(&r, "instrumented run");
        }
    }
}

/// The real H200 recording (`examples/data/h200-cuda13-smoke.gmr`, CUPTI 13.0): the CUDA C
/// workload's `cudaMalloc`/`cudaFree` MEMORY2 records, paired here independently of the meter,
/// give exactly the `memory_byte_ns` the meter reports, and nothing stays open.
#[test]
fn the_h200_recording_meters_memory_byte_ns_from_its_memory2_records() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data/h200-cuda13-smoke.gmr");
    let bytes = ok(std::fs::read(&path));
    let file = ok(read_gmr(&bytes));
    let api = ok(ApiVersion::from_cupti(file.header.cupti_api_version));
    let mut allocs: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    let mut expected: u128 = 0;
    let mut pairs = 0;
    for f in &file.frames {
        if let Frame::ActivityBuffer(b) = &f.frame {
            for r in ok(decode(b, api)).records {
                if let Record::Memory(m) = r.record {
                    match m.operation.raw() {
                        1 => {
                            allocs.insert(m.address, (m.timestamp, m.bytes));
                        }
                        2 => {
                            let (t, n) = allocs.remove(&m.address).expect("allocated before");
                            expected += u128::from(n) * u128::from(m.timestamp - t);
                            pairs += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    // The workload allocates x and y (4 MiB each) and frees both.
    assert_eq!((pairs, allocs.len()), (2, 0));
    let mut m = meter();
    ok(meter_gmr(
        &mut m,
        "h200.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert!(expected > 0);
    assert_eq!(r.device_total(&key, MeterKind::MemoryByteNs), expected);
    assert!(r.open_allocations.is_empty());
}

fn example(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/data")
        .join(name);
    ok(std::fs::read(path))
}

/// A real green-context recording (`scripts/gpu-smoke.sh`, H200, CUPTI 13.0): 20 kernels of
/// 16 384 blocks, one after another, in a green context of 16 of the H200's 132 SMs. The
/// CONTEXT record declares the partition, so each kernel holds 16 SMs: sm_ns = 16 × kernel_ns
/// exactly (the device cap alone would give 132 ×). Its energy frames give energy_mj = the
/// counter's last minus first sample, all of it to the one tenant with sm_ns or to idle.
#[test]
fn the_h200_green_context_recording_caps_sm_ns_at_the_partition() {
    let bytes = example("h200-cuda13-green-context.gmr");
    let mut m = meter();
    let s = ok(meter_gmr(
        &mut m,
        "green.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    assert_eq!(s.green_contexts, 1);
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert_eq!(r.devices[0].sm_count, Some(132));
    let kernel_ns = r.device_total(&key, MeterKind::KernelNs);
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 20);
    assert!(kernel_ns > 0);
    assert_eq!(r.device_total(&key, MeterKind::SmNs), 16 * kernel_ns);
    let file = ok(read_gmr(&bytes));
    let samples: Vec<(u64, u64)> = file
        .frames
        .iter()
        .filter_map(|f| match &f.frame {
            Frame::Energy(e) => Some((e.timestamp_ns, e.energy_mj)),
            _ => None,
        })
        .collect();
    assert!(samples.len() >= 2, "{samples:?}");
    // The recorded telemetry replays the same samples through the NVML trait.
    use gpumeter_nvml::Telemetry as _;
    let t = file.telemetry();
    let gpus = ok(t.gpus());
    assert_eq!(gpus.len(), 1);
    assert_eq!(gpus[0].name.as_deref(), Some("NVIDIA H200"));
    let mut replayed = Vec::new();
    while let Ok(r) = t.energy(gpus[0].index) {
        replayed.push((r.timestamp_ns, r.energy_mj));
    }
    assert_eq!(replayed, samples);
    let (first, last) = (samples[0].1, samples[samples.len() - 1].1);
    assert!(last > first);
    assert_eq!(
        r.device_total(&key, MeterKind::EnergyMj),
        u128::from(last - first)
    );
}

/// A real instrumented recording (`gpumeter record --instructions`, H200, CUPTI 13.0): the CUDA
/// C smoke workload with 50 iterations, 106 launches. Every launch has its SASS-metrics frame;
/// warp_instructions is their sum per kernel (gm_smoke_add 589 824 per launch: 4096 blocks ×
/// 8 warps × 18 instructions), and the report says the run was instrumented.
#[test]
fn the_h200_instrumented_recording_meters_warp_instructions_per_launch() {
    let bytes = example("h200-cuda13-instructions.gmr");
    let file = ok(read_gmr(&bytes));
    assert!(file.header.instrumented);
    let mut per_launch: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    let mut frames = 0;
    let mut total: u128 = 0;
    for f in &file.frames {
        if let Frame::Instructions(c) = &f.frame {
            frames += 1;
            total += u128::from(c.total());
            for func in &c.functions {
                per_launch
                    .entry(func.name.clone())
                    .or_default()
                    .insert(func.warp_instructions);
            }
        }
    }
    assert_eq!(frames, 106);
    assert_eq!(per_launch["gm_smoke_add"], BTreeSet::from([589_824]));
    assert_eq!(per_launch["gm_smoke_scale"], BTreeSet::from([524_288]));
    assert_eq!(per_launch["gm_smoke_fill"], BTreeSet::from([458_752]));
    let mut m = meter();
    let s = ok(meter_gmr(
        &mut m,
        "instr.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    assert_eq!(s.kernels_with_instructions, 106);
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 106);
    assert_eq!(r.device_total(&key, MeterKind::WarpInstructions), total);
    assert_eq!(total, 50 * 589_824 + 50 * 524_288 + 6 * 458_752);
    assert!(r.devices[0].not_meterable.is_empty(), "{:?}", r.devices[0]);
    assert_warns(&r, "instrumented run");
    // A recording without PM samples does not speak of sm_active_ns (its text is the one it
    // had before issue 16: the golden reports hold it).
    assert!(
        !r.warnings.iter().any(|w| w.contains("sm_active_ns")),
        "{:?}",
        r.warnings
    );
}

/// A MIG instance is its own device: its DEVICE record (`isMigEnabled`, `migUuid`,
/// `numMultiprocessors` = the instance's SMs) keys it `MIG-<uuid>` and caps `sm_ns` at the
/// instance's SMs, in every API version; two instances of one GPU are two devices.
#[test]
fn a_mig_instance_is_a_device_capped_at_its_own_sms() {
    for api in ApiVersion::ALL {
        let mut bufs = Vec::new();
        for (mig, sms) in [(0x11_i128, 16), (0x22, 32)] {
            let mut b = Buf::new(api);
            b.rec(
                ActivityKind::DEVICE,
                &[
                    ("id", 0),
                    ("numMultiprocessors", sms),
                    ("isMigEnabled", 1),
                    ("gpuInstanceId", mig >> 4),
                    ("computeInstanceId", 0),
                    ("uuid", 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef),
                    ("migUuid", mig),
                ],
            );
            b.kernel(T0, T0 + 1000, 100, 1);
            bufs.push(b.bytes);
        }
        let mut m = meter();
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        for (i, bytes) in bufs.iter().enumerate() {
            ok(meter_buffer(&mut m, &format!("mig{i}.bin"), bytes, &opts));
        }
        let r = finish(m);
        assert_eq!(r.devices.len(), 2, "{api}");
        let mut caps: Vec<(u32, u128)> = r
            .devices
            .iter()
            .map(|d| {
                assert!(d.device_key.starts_with("MIG-"), "{api}: {}", d.device_key);
                (
                    d.sm_count.unwrap_or(0),
                    r.device_total(&d.device_key, MeterKind::SmNs),
                )
            })
            .collect();
        caps.sort_unstable();
        assert_eq!(caps, vec![(16, 16 * 1000), (32, 32 * 1000)], "{api}");
    }
}

/// Issue 5 review cases: several recordings of one GPU, per-process contexts and addresses,
/// graph launches with instruction counts, allocations of a finished recording.
mod merged_recordings {
    use super::*;
    use gpumeter_recording::{meter_sources, CuptiFormat, CuptiInput};

    pub(super) const API: ApiVersion = ApiVersion::Cupti12_8;

    pub(super) fn kernel(b: &mut Buf, start: u64, grid: i32, corr: u32, ctx: u32, name_ptr: u64) {
        b.rec(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", start.into()),
                ("end", (start + 1000).into()),
                ("gridX", grid.into()),
                ("gridY", 1),
                ("gridZ", 1),
                ("blockX", 128),
                ("blockY", 1),
                ("blockZ", 1),
                ("correlationId", corr.into()),
                ("contextId", ctx.into()),
                ("name", name_ptr.into()),
                ("graphNodeId", i128::from(name_ptr)),
            ],
        );
    }

    /// A finished (or not) recording of process `pid` with one buffer and these frames after it.
    pub(super) fn gmr(pid: u32, b: &Buf, more: Vec<Frame>, finished: bool) -> Vec<u8> {
        let mut h = gmr_format::header(26);
        h.process_id = pid;
        let mut frames = vec![Frame::ActivityBuffer(b.bytes.clone())];
        frames.extend(more);
        gmr_format::write(&h, &frames, finished).0
    }

    pub(super) fn meter_all(
        files: &[(&str, &[u8])],
        map: &[(u32, &str)],
    ) -> (UsageReport, Vec<gpumeter_recording::CuptiSummary>) {
        let mut m = meter();
        let mut tm = TenantMap::default();
        for (p, t) in map {
            tm.pid.insert(*p, tn(t));
        }
        m.set_tenant_map(tm);
        let inputs: Vec<CuptiInput<'_>> = files
            .iter()
            .map(|(name, bytes)| CuptiInput {
                name,
                bytes,
                format: CuptiFormat::Gmr,
            })
            .collect();
        let s = ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
        (finish(m), s)
    }

    pub(super) const GPU: &str = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88";

    pub(super) fn of(r: &UsageReport, tenant: &str, meter: MeterKind) -> u128 {
        r.totals
            .iter()
            .filter(|t| t.tenant == tenant && t.meter == meter)
            .map(|t| t.quantity.0)
            .sum()
    }

    #[test]
    fn recordings_of_one_gpu_merge_in_time_order_whatever_their_order() {
        // A: kernels at T0 and T0 + 300 s; B: a kernel and an allocation at T0 + 10 s.
        let mut a = Buf::new(API);
        kernel(&mut a, T0, 1, 1, 1, 0);
        kernel(&mut a, T0 + 300_000_000_000, 1, 2, 1, 0);
        let mut b = Buf::new(API);
        kernel(&mut b, T0 + 10_000_000_000, 1, 1, 1, 0);
        let (ga, gb) = (gmr(1, &a, vec![], false), gmr(2, &b, vec![], false));
        let map = [(1, "alice"), (2, "bob")];
        let (r1, _) = meter_all(&[("a.gmr", &ga), ("b.gmr", &gb)], &map);
        let (r2, _) = meter_all(&[("b.gmr", &gb), ("a.gmr", &ga)], &map);
        for r in [&r1, &r2] {
            assert!(r.loss.is_empty(), "{:?}", r.loss);
            assert_eq!(of(r, "alice", MeterKind::KernelLaunches), 2);
            assert_eq!(of(r, "bob", MeterKind::KernelLaunches), 1);
        }
        assert_eq!(r1.usage, r2.usage);
    }

    #[test]
    fn a_green_context_of_one_process_does_not_cap_another_process_context_of_the_same_id() {
        let green = |b: &mut Buf| {
            b.rec(
                ActivityKind::CONTEXT,
                &[
                    ("contextId", 2),
                    ("deviceId", 0),
                    ("isGreenContext", 1),
                    ("numMultiprocessors", 16),
                ],
            );
        };
        let mut a = Buf::new(API);
        green(&mut a);
        kernel(&mut a, T0, 132, 1, 2, 0);
        let mut b = Buf::new(API);
        kernel(&mut b, T0 + 5000, 132, 1, 2, 0);
        let (ga, gb) = (gmr(1, &a, vec![], false), gmr(2, &b, vec![], false));
        let (r, _) = meter_all(
            &[("a.gmr", &ga), ("b.gmr", &gb)],
            &[(1, "alice"), (2, "bob")],
        );
        assert_eq!(of(&r, "alice", MeterKind::SmNs), 16 * 1000);
        assert_eq!(of(&r, "bob", MeterKind::SmNs), 132 * 1000);
    }

    #[test]
    fn a_graph_launch_gives_each_kernel_its_function_count_once() {
        // Correlation 5 launched a graph of two kernels (k1, k2); one frame lists both.
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 1, 5, 1, 0x10);
        kernel(&mut b, T0 + 2000, 1, 5, 1, 0x20);
        // Correlation 6: two kernels of the same function, INSTRUCTION_EXECUTION 7 in all.
        kernel(&mut b, T0 + 4000, 1, 6, 1, 0x10);
        kernel(&mut b, T0 + 6000, 1, 6, 1, 0x10);
        for n in [3, 4] {
            b.rec(
                ActivityKind::INSTRUCTION_EXECUTION,
                &[("correlationId", 6), ("executed", n)],
            );
        }
        let mut names = StringTable::new();
        names.insert(0x10, "k1");
        names.insert(0x20, "k2");
        let counts = InstructionCounts {
            correlation_id: 5,
            device_id: 0,
            context_id: 1,
            functions: vec![
                FunctionInstructions {
                    name: "k1".into(),
                    warp_instructions: 100,
                },
                FunctionInstructions {
                    name: "k2".into(),
                    warp_instructions: 200,
                },
            ],
        };
        let mut h = gmr_format::header(26);
        h.instrumented = true;
        let frames = vec![
            Frame::StringTable(names),
            Frame::ActivityBuffer(b.bytes.clone()),
            Frame::Instructions(counts),
        ];
        let bytes = gmr_format::write(&h, &frames, true).0;
        let (r, s) = meter_all(&[("graph.gmr", &bytes)], &[]);
        assert_eq!(s[0].kernels_with_instructions, 4);
        assert_eq!(r.device_total(GPU, MeterKind::WarpInstructions), 300 + 7);
    }

    #[test]
    fn a_finished_recording_closes_its_allocations_at_its_end() {
        let alloc = |b: &mut Buf, t: u64| {
            b.rec(
                ActivityKind::MEMORY2,
                &[
                    ("memoryOperationType", 1),
                    ("memoryKind", 3),
                    ("address", 0x7000),
                    ("bytes", 1000),
                    ("timestamp", t.into()),
                ],
            );
        };
        let mut b = Buf::new(API);
        alloc(&mut b, T0 + 100);
        kernel(&mut b, T0, 1, 1, 1, 0);
        // Finished: the process exited at the recording's end (T0 + 1000, the kernel's end).
        let done = gmr(1, &b, vec![], true);
        let (r, s) = meter_all(&[("done.gmr", &done)], &[]);
        assert_eq!(s[0].allocations_closed_at_end, 1);
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 900);
        assert!(r.open_allocations.is_empty());
        // A later recording of another process does not extend it.
        let mut later = Buf::new(API);
        kernel(&mut later, T0 + 3_600_000_000_000, 1, 1, 1, 0);
        let gl = gmr(2, &later, vec![], true);
        let (r, _) = meter_all(&[("done.gmr", &done), ("later.gmr", &gl)], &[]);
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 900);
        // Unfinished (the producer died): held to the report's end and listed.
        let torn = gmr(1, &b, vec![], false);
        let (r, s) = meter_all(&[("torn.gmr", &torn)], &[]);
        assert_eq!(s[0].allocations_closed_at_end, 0);
        assert_eq!(r.open_allocations.len(), 1);

        // A record the meter refuses (30 days long) does not move the recording's end.
        let mut bad = Buf::new(API);
        alloc(&mut bad, T0 + 100);
        kernel(&mut bad, T0, 1, 1, 1, 0);
        bad.rec(
            ActivityKind::CONCURRENT_KERNEL,
            &[
                ("start", (T0 + 1000).into()),
                ("end", (T0 + 30 * 86_400_000_000_000).into()),
                ("correlationId", 2),
            ],
        );
        let g = gmr(1, &bad, vec![], true);
        let (r, _) = meter_all(&[("bad.gmr", &g)], &[]);
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 900);
        assert_eq!(r.lost(GPU, "too_long"), 1);

        // The process's allocations carried in by --opening end with its finished recording.
        let open = r1_open(&torn);
        let mut later = Buf::new(API);
        kernel(&mut later, T0 + 5000, 1, 1, 1, 0);
        let gl = gmr(1, &later, vec![], true);
        let mut m = meter();
        ok(m.set_opening(&open).map_err(|e| e.to_string()));
        let inputs = [CuptiInput {
            name: "later.gmr",
            bytes: &gl,
            format: CuptiFormat::Gmr,
        }];
        ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
        let r = finish(m);
        assert!(r.open_allocations.is_empty(), "{:?}", r.open_allocations);
        // Held from the first report's end (T0 + 1000) to the later recording's (T0 + 6000).
        assert_eq!(r.device_total(GPU, MeterKind::MemoryByteNs), 1000 * 5000);
    }

    /// The open allocations of a report of `bytes` alone.
    fn r1_open(bytes: &[u8]) -> Vec<gpumeter_core::OpenAllocation> {
        let (r, _) = meter_all(&[("first.gmr", bytes)], &[]);
        r.open_allocations
    }

    #[test]
    fn raw_buffers_give_the_same_report_in_any_order_even_with_ties() {
        // c1 allocates 0x1000 at the ns c2 releases it, and the reverse for 0x2000.
        let buf = |ops: &[(i128, i128, u64)]| {
            let mut b = Buf::new(API);
            b.rec(
                ActivityKind::DEVICE,
                &[
                    ("id", 0),
                    ("numMultiprocessors", 132),
                    ("uuid", 0x74e1_28b2_90b6_b409_07c8_33be_e5ff_6f88),
                ],
            );
            kernel(&mut b, T0, 1, 1, 1, 0);
            for &(op, addr, t) in ops {
                b.rec(
                    ActivityKind::MEMORY2,
                    &[
                        ("memoryOperationType", op),
                        ("memoryKind", 3),
                        ("address", addr),
                        ("bytes", 10),
                        ("timestamp", t.into()),
                        ("processId", 7),
                    ],
                );
            }
            b.bytes
        };
        let c1 = buf(&[(1, 0x1000, T0 + 500), (2, 0x2000, T0 + 700)]);
        let c2 = buf(&[
            (1, 0x2000, T0 + 100),
            (2, 0x1000, T0 + 500),
            (1, 0x2000, T0 + 700),
        ]);
        let run = |order: [(&str, &[u8]); 2]| {
            let mut m = meter();
            let inputs: Vec<CuptiInput<'_>> = order
                .iter()
                .map(|(name, bytes)| CuptiInput {
                    name,
                    bytes,
                    format: CuptiFormat::Cupti,
                })
                .collect();
            ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
            finish(m)
        };
        let a = run([("c1.bin", &c1), ("c2.bin", &c2)]);
        let b = run([("c2.bin", &c2), ("c1.bin", &c1)]);
        assert_eq!(a.usage, b.usage);
        assert_eq!(a.loss, b.loss);
        assert_eq!(a.open_allocations, b.open_allocations);
    }
}

/// Two real recordings of one H200 made one after the other: metered together, the energy
/// between them (observed by neither) is not billed, so together they bill what each bills
/// alone; and the result does not depend on their order.
#[test]
fn energy_between_two_recordings_of_one_gpu_is_not_billed() {
    use gpumeter_recording::{meter_sources, CuptiFormat, CuptiInput};
    let green = example("h200-cuda13-green-context.gmr");
    let instr = example("h200-cuda13-instructions.gmr");
    let energy = |files: &[(&str, &[u8])]| -> (u128, UsageReport) {
        let mut m = meter();
        let inputs: Vec<CuptiInput<'_>> = files
            .iter()
            .map(|(name, bytes)| CuptiInput {
                name,
                bytes,
                format: CuptiFormat::Gmr,
            })
            .collect();
        ok(meter_sources(&mut m, &inputs, &CuptiOptions::default()));
        let r = finish(m);
        let e = r
            .totals
            .iter()
            .filter(|t| t.meter == MeterKind::EnergyMj)
            .map(|t| t.quantity.0)
            .sum();
        (e, r)
    };
    let (a, _) = energy(&[("green.gmr", &green)]);
    let (b, _) = energy(&[("instr.gmr", &instr)]);
    let (ab, r1) = energy(&[("green.gmr", &green), ("instr.gmr", &instr)]);
    let (ba, r2) = energy(&[("instr.gmr", &instr), ("green.gmr", &green)]);
    assert!(a > 0 && b > 0);
    assert_eq!((ab, ba), (a + b, a + b));
    assert_eq!(r1.usage, r2.usage);
    assert_warns(&r1, "between recordings");
}

/// A real instrumented recording of two host threads launching into one context at once
/// (`scripts/gpu-smoke.sh`, H200, CUPTI 13.0): every launch has its own frame and the same
/// count (491 520 = 32 768 warps × 15), and the report's warp_instructions is their sum.
#[test]
fn the_h200_two_thread_instrumented_recording_keeps_each_launch_count_apart() {
    let bytes = example("h200-cuda13-instructions-2threads.gmr");
    let file = ok(read_gmr(&bytes));
    let counts: Vec<u64> = file
        .frames
        .iter()
        .filter_map(|f| match &f.frame {
            Frame::Instructions(c) => Some(c.total()),
            _ => None,
        })
        .collect();
    assert_eq!(counts.len(), 100);
    assert!(counts.iter().all(|&c| c == 491_520), "{counts:?}");
    let mut m = meter();
    ok(meter_gmr(
        &mut m,
        "mt.gmr",
        &bytes,
        &CuptiOptions::default(),
    ));
    let r = finish(m);
    let key = r.devices[0].device_key.clone();
    assert_eq!(r.device_total(&key, MeterKind::KernelLaunches), 100);
    assert_eq!(
        r.device_total(&key, MeterKind::WarpInstructions),
        100 * 491_520
    );
}

/// A tenant name known to be valid (a test's fixed name).
fn tn(name: &str) -> gpumeter_core::TenantName {
    match gpumeter_core::TenantName::parse(name) {
        Ok(t) => t,
        Err(e) => panic!("{name:?}: {e}"),
    }
}

/// Issue 16: CUPTI PM-sampling frames (type 9) in a recording reach the meter.
mod op_frames;

mod pm_frames {
    use super::merged_recordings::{gmr, kernel, meter_all, of, API, GPU};
    use super::*;

    fn sample(start: u64, active: u64, read: u64, write: u64, overflow: bool) -> PmSample {
        PmSample {
            start_ns: start,
            end_ns: start + 1000,
            sm_active_cycles: Some(active),
            sm_elapsed_cycles: Some(1000),
            dram_read_bytes: Some(read),
            dram_write_bytes: Some(write),
            overflow,
        }
    }

    /// Device 0's samples: [T0, T0 + 1000) while alice's kernel holds all 132 SMs (99 000
    /// active SM cycles over 1 000 elapsed: 99 000 SM·ns; 10 000 DRAM bytes), then
    /// [T0 + 1000, T0 + 2000) with no kernel (13 200 SM·ns, 100 bytes) after an overflow.
    fn frames(device_id: u32) -> Frame {
        Frame::PmSamples(PmSamples {
            device_id,
            samples: vec![
                sample(T0, 99_000, 6_000, 4_000, false),
                sample(T0 + 1000, 13_200, 100, 0, true),
            ],
        })
    }

    /// Samples written after the records they overlap (the collector decodes them later) are
    /// metered, not `late`: each interval's measured quantity goes to the tenant whose kernel
    /// ran in it, an interval without a kernel to idle, and an overflow is loss. The frame's
    /// place in the file does not change the report.
    ///
    /// Needs the meter's PM-sample metering (`Meter::push_pm_sample`, issue 16 item 2).
    #[test]
    fn pm_samples_are_apportioned_to_the_tenants_with_kernels() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let after = gmr(1, &b, vec![frames(0)], true);
        let mut h = gmr_format::header(26);
        h.process_id = 1;
        let before = gmr_format::write(
            &h,
            &[frames(0), Frame::ActivityBuffer(b.bytes.clone())],
            true,
        )
        .0;
        for bytes in [&after, &before] {
            let (r, s) = meter_all(&[("pm.gmr", bytes)], &[(1, "alice")]);
            assert_eq!(s[0].pm_samples, 2);
            assert_eq!(r.device_total(GPU, MeterKind::SmNs), 132_000);
            assert_eq!(r.device_total(GPU, MeterKind::SmActiveNs), 99_000 + 13_200);
            assert_eq!(of(&r, "alice", MeterKind::SmActiveNs), 99_000);
            assert_eq!(of(&r, gpumeter_core::IDLE, MeterKind::SmActiveNs), 13_200);
            assert_eq!(r.device_total(GPU, MeterKind::DramBytes), 10_100);
            assert_eq!(of(&r, "alice", MeterKind::DramBytes), 10_000);
            assert_eq!(of(&r, gpumeter_core::IDLE, MeterKind::DramBytes), 100);
            assert_eq!(r.lost(GPU, "pm_sample_overflow"), 1);
            assert_eq!(r.lost(GPU, "late"), 0);
            assert_warns(&r, "overflow");
        }
    }

    /// PM samples of a device the recording does not describe are not metered: one warning
    /// counts them and names the ordinal; the summary counts every sample read.
    #[test]
    fn pm_samples_of_an_unknown_device_are_warned_not_metered() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let bytes = gmr(1, &b, vec![frames(0), frames(5)], true);
        let (r, s) = meter_all(&[("pm.gmr", &bytes)], &[(1, "alice")]);
        assert_eq!(s[0].pm_samples, 4);
        assert_eq!(s[0].device_keys, [GPU.to_string()]);
        assert_eq!(r.devices.len(), 1);
        assert_warns(
            &r,
            "2 PM samples name a device the recording does not describe (CUDA ordinal 5)",
        );
        // Their own code, not the energy samples' one.
        let codes: Vec<_> = r
            .warnings
            .iter()
            .filter(|w| w.message().contains("PM samples name a device"))
            .map(|w| w.code().clone())
            .collect();
        assert_eq!(codes, [gpumeter_core::WarningCode::UnplacedPmSamples]);
        // Device 0's samples are no reason for that warning.
        let only = gmr(1, &b, vec![frames(0)], true);
        let (r, _) = meter_all(&[("pm.gmr", &only)], &[(1, "alice")]);
        assert!(
            !r.warnings.iter().any(|w| w.contains("PM samples name")),
            "{:?}",
            r.warnings
        );
    }

    /// In a chain of reports (`--opening`), how far a report read a recording's PM samples is
    /// noted apart from how far it read its records (`<recording>#pm`): samples and buffers
    /// reach a growing file at different times, and one cut for both would leave out, in the
    /// next report, what was written after this one yet ends before the cut.
    #[test]
    fn pm_sample_ends_count_in_how_far_a_report_read_the_recording() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let (r, _) = meter_all(&[("pm.gmr", &gmr(1, &b, vec![frames(0)], false))], &[]);
        let ends = &r.extensions.recordings;
        assert_eq!(ends.len(), 2, "{ends:?}");
        let (pm, records): (Vec<_>, Vec<_>) =
            ends.iter().partition(|e| e.recording.ends_with("#pm"));
        assert_eq!((pm.len(), records.len()), (1, 1));
        assert_eq!(pm[0].recording, format!("{}#pm", records[0].recording));
        // The kernel ends at T0 + 1000; the second sample at T0 + 2000.
        assert!(
            records[0].device_ends[0].end.ends_with(":05.000001000Z"),
            "{:?}",
            records[0].device_ends
        );
        assert!(
            pm[0].device_ends[0].end.ends_with(":05.000002000Z"),
            "{:?}",
            pm[0].device_ends
        );
        let (r, _) = meter_all(&[("k.gmr", &gmr(1, &b, vec![], false))], &[]);
        assert_eq!(r.extensions.recordings.len(), 1);
        assert!(r.extensions.recordings[0].device_ends[0]
            .end
            .ends_with(":05.000001000Z"));
    }

    /// A report continuing a recording (`--opening` of a report that read it while it had
    /// only its first PM frame) leaves out the samples that report read and meters the rest.
    ///
    /// Needs the meter's PM-sample metering (`Meter::push_pm_sample`, issue 16 item 2).
    #[test]
    fn a_continued_recording_meters_only_the_pm_samples_not_read_before() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let first = Frame::PmSamples(PmSamples {
            device_id: 0,
            samples: vec![sample(T0, 99_000, 6_000, 4_000, false)],
        });
        let second = Frame::PmSamples(PmSamples {
            device_id: 0,
            samples: vec![sample(T0 + 1000, 13_200, 100, 0, false)],
        });
        let early = gmr(1, &b, vec![first.clone()], false);
        let whole = gmr(1, &b, vec![first, second], true);
        let mut m = meter();
        ok(meter_gmr(
            &mut m,
            "rec.gmr",
            &early,
            &CuptiOptions::default(),
        ));
        let opening = finish(m);
        assert_eq!(opening.device_total(GPU, MeterKind::SmActiveNs), 99_000);
        let mut m = meter();
        ok(m.continue_from(&opening));
        ok(meter_gmr(
            &mut m,
            "rec.gmr",
            &whole,
            &CuptiOptions::default(),
        ));
        let r = finish(m);
        assert_eq!(r.device_total(GPU, MeterKind::SmNs), 0);
        assert_eq!(r.device_total(GPU, MeterKind::SmActiveNs), 13_200);
        assert_eq!(r.device_total(GPU, MeterKind::DramBytes), 100);
        // The kernel (and its memory event) and the first sample are counted as billed by the
        // opening report.
        assert_eq!(
            r.records.skipped.get("billed_by_opening_report"),
            Some(&3),
            "{:?}",
            r.warnings
        );
        assert_warns(
            &r,
            "1 work records, 1 memory events and 1 PM samples of recordings",
        );
    }

    /// Loss of `reason` on no device (the source's), and whether it is a lower bound.
    fn source_lost(r: &UsageReport, reason: &str) -> Vec<(u64, bool)> {
        r.loss
            .iter()
            .filter(|l| l.device.is_none() && l.reason == reason)
            .map(|l| (l.records, l.lower_bound))
            .collect()
    }

    /// `bytes` with its frame #`frame` (numbered from the first after the header) changed by
    /// `change` at payload byte `at`, its checksum made right again: a malformed frame.
    fn malformed(bytes: &[u8], frame: usize, at: usize, change: u8) -> Vec<u8> {
        let file = ok(read_gmr(bytes));
        let start = file.frames[frame].offset as usize;
        let mut bad = bytes.to_vec();
        bad[start + 12 + at] |= change;
        let len = u64::from_le_bytes(ok(bad[start + 4..start + 12].try_into())) as usize;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bad[start..start + 12 + len]);
        bad[start + 12 + len..start + 16 + len].copy_from_slice(&crc.finalize().to_le_bytes());
        bad
    }

    /// A PM-sample frame cut by the end of the file, or malformed, is a damaged frame whose
    /// samples are loss: the count its header gives (exact when the bytes are the producer's
    /// and agree with it), on its device when the recording describes it, else on the source;
    /// at least one when no count can be read. The warning counts PM samples, and the frames
    /// before it are metered.
    #[test]
    fn a_damaged_pm_frame_counts_its_samples_as_loss() {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let whole = gmr(1, &b, vec![frames(0)], false);
        // Cut inside the samples: the header's count of 2 stands.
        let torn = &whole[..whole.len() - 30];
        let (r, s) = meter_all(&[("torn.gmr", torn)], &[(1, "alice")]);
        assert_eq!(s[0].pm_samples, 0);
        assert_eq!(r.device_total(GPU, MeterKind::SmNs), 132_000);
        assert_eq!(r.lost(GPU, "torn_frame"), 2);
        assert!(r.loss.iter().all(|l| !l.lower_bound), "{:?}", r.loss);
        assert_warns(&r, "(type 9): torn last frame");
        assert_warns(&r, "a PM-samples frame: 2 PM samples lost as torn_frame");

        // Cut inside the header (5 of its 8 bytes): no count, at least one sample of no device.
        let torn = &whole[..whole.len() - (4 + 2 * 56 + 3)];
        let (r, _) = meter_all(&[("torn.gmr", torn)], &[(1, "alice")]);
        assert_eq!(r.lost(GPU, "torn_frame"), 0);
        assert_eq!(source_lost(&r, "torn_frame"), [(1, true)]);
        assert_warns(
            &r,
            "at least 1 PM samples (how many more is unknown) lost as torn_frame",
        );

        // The same frame with an unknown flag bit (checksum right): malformed, its 2 samples
        // lost exactly.
        let bad = malformed(&whole, 1, 8, 1 << 6);
        let (r, s) = meter_all(&[("bad.gmr", &bad)], &[(1, "alice")]);
        assert_eq!(s[0].pm_samples, 0);
        assert_eq!(r.lost(GPU, "corrupt_frame"), 2);
        assert!(r.loss.iter().all(|l| !l.lower_bound), "{:?}", r.loss);
        assert_warns(&r, "unknown flag bits 0x40");
        assert_warns(&r, "2 PM samples lost as corrupt_frame");

        // Of a device the recording does not describe: the source's loss.
        let other = gmr(1, &b, vec![frames(5)], false);
        let bad = malformed(&other, 1, 8, 1 << 6);
        let (r, _) = meter_all(&[("bad.gmr", &bad)], &[(1, "alice")]);
        assert_eq!(r.lost(GPU, "corrupt_frame"), 0);
        assert_eq!(source_lost(&r, "corrupt_frame"), [(2, false)]);

        // A checksum that does not match: the header's plausible count, a lower bound.
        let file = ok(read_gmr(&whole));
        let at = file.frames[1].offset as usize;
        let mut corrupt = whole.clone();
        corrupt[at + 12 + 20] ^= 0xff;
        let (r, _) = meter_all(&[("corrupt.gmr", &corrupt)], &[(1, "alice")]);
        assert_eq!(r.lost(GPU, "torn_frame") + r.lost(GPU, "corrupt_frame"), 2);
        assert!(r.loss.iter().any(|l| l.lower_bound), "{:?}", r.loss);
    }
}
