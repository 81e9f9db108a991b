//! `.gmr` operation-counters frames (type 10, `gpumeter record --flops`): written by
//! `GmrWriter`, read strictly, joined to kernels by correlation id, metered as the FLOP meters.

use super::merged_recordings::{gmr, kernel, meter_all, API, GPU};
use super::*;
use gpumeter_core::{NotMeterableCode, WarningCode, OP_METERS};
use gpumeter_recording::gmr::{KernelOpCounters, OpCounterValue, OpCounters};

const DADD: &str = "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum";
const DMUL: &str = "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum";
const DFMA: &str = "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum";
const FADD: &str = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum";
const FMUL: &str = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum";
const FFMA: &str = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum";
const HADD: &str = "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum";
const HMUL: &str = "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum";
const HFMA: &str = "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum";
const TENSOR_F16: &str = "sm__ops_path_tensor_src_fp16_dst_fp32.sum";
const TENSOR_BF16: &str = "sm__ops_path_tensor_src_bf16_dst_fp32.sum";
const TENSOR_F16_SPARSE: &str = "sm__ops_path_tensor_src_fp16_dst_fp32_sparsity_on.sum";

fn entry(correlation_id: u32, counters: &[(&str, u64)]) -> KernelOpCounters {
    KernelOpCounters {
        correlation_id,
        counters: counters
            .iter()
            .map(|&(m, v)| OpCounterValue {
                metric: m.to_string(),
                value: v,
            })
            .collect(),
    }
}

fn frame(passes: u32, kernels: Vec<KernelOpCounters>) -> Frame {
    Frame::OpCounts(OpCounters {
        device_id: 0,
        context_id: 1,
        passes,
        kernels,
    })
}

/// Every counter of the collector's selection: the nine SASS op counters and two tensor-path
/// ones (and a sparsity part, which splits a counted total and must not add to it).
fn full(corr: u32, base: u64) -> KernelOpCounters {
    entry(
        corr,
        &[
            (DADD, base + 1),
            (DMUL, base + 2),
            (DFMA, base + 3),
            (FADD, base + 4),
            (FMUL, base + 5),
            (FFMA, base + 6),
            (HADD, base + 7),
            (HMUL, base + 8),
            (HFMA, base + 9),
            (TENSOR_F16, base * 100),
            (TENSOR_BF16, 7),
            (TENSOR_F16_SPARSE, 1_000_000),
        ],
    )
}

/// add + mul + 2 × fma of a precision in [`full`] (`i` 0 = fp64, 1 = fp32, 2 = fp16).
fn flops(base: u64, i: u64) -> u128 {
    let (a, m, f) = (base + 1 + 3 * i, base + 2 + 3 * i, base + 3 + 3 * i);
    u128::from(a + m + 2 * f)
}

/// Two kernels of alice's process, correlation ids 1 and 2.
fn two_kernels() -> Buf {
    let mut b = Buf::new(API);
    kernel(&mut b, T0, 200, 1, 1, 0);
    kernel(&mut b, T0 + 5_000, 200, 2, 1, 0);
    b
}

fn not_meterable(r: &UsageReport) -> Vec<(MeterKind, NotMeterableCode)> {
    r.devices
        .iter()
        .flat_map(|d| d.not_meterable.iter().map(|n| (n.meter, n.code.clone())))
        .collect()
}

fn codes(r: &UsageReport) -> Vec<WarningCode> {
    r.warnings.iter().map(|w| w.code().clone()).collect()
}

/// Each FLOP meter is add + mul + 2 × fma of its precision's SASS counters, `tensor_ops` the
/// sum of the tensor-path counters (their sparsity parts not added), per kernel, billed to
/// the kernel's tenant; the report says the run was instrumented by the range profiler.
#[test]
fn flops_are_metered_exactly_from_the_raw_counters() {
    let b = two_kernels();
    let bytes = gmr(
        1,
        &b,
        vec![frame(3, vec![full(1, 10), full(2, 1000)])],
        true,
    );
    let (r, s) = meter_all(&[("flops.gmr", &bytes)], &[(1, "alice")]);
    assert_eq!(s[0].kernels_with_op_counts, 2);
    for (i, meter) in [
        MeterKind::FlopsFp64,
        MeterKind::FlopsFp32,
        MeterKind::FlopsFp16,
    ]
    .into_iter()
    .enumerate()
    {
        let want = flops(10, i as u64) + flops(1000, i as u64);
        assert_eq!(r.device_total(GPU, meter), want, "{meter}");
        assert_eq!(super::merged_recordings::of(&r, "alice", meter), want);
    }
    assert_eq!(
        r.device_total(GPU, MeterKind::TensorOps),
        1000 + 7 + 100_000 + 7
    );
    assert!(not_meterable(&r).is_empty(), "{:?}", r.devices);
    assert!(r.loss.is_empty(), "{:?}", r.loss);
    let instrumented: Vec<_> = r
        .warnings
        .iter()
        .filter(|w| *w.code() == WarningCode::InstrumentedRun)
        .collect();
    assert_eq!(instrumented.len(), 1, "{:?}", r.warnings);
    assert!(
        instrumented[0].contains("CUPTI range profiler for the FLOP counters, kernel replay")
            && instrumented[0].contains("each replayed 3 times (3 counter passes)")
            && instrumented[0].contains("overstate the work"),
        "{}",
        instrumented[0].message()
    );
}

/// The frame round-trips through the writer and the reader, raw values and names kept (the
/// recording is re-derivable).
#[test]
fn the_frame_keeps_the_raw_counters() {
    let f = frame(2, vec![full(7, 5), entry(9, &[])]);
    let (bytes, _) = gmr_format::write(&gmr_format::header(26), std::slice::from_ref(&f), true);
    let file = ok(read_gmr(&bytes));
    assert!(file.damaged.is_empty(), "{:?}", file.damaged);
    assert_eq!(file.frames.len(), 1);
    assert_eq!(file.frames[0].frame, f);
}

/// A kernel without counts (its launch is in no frame) leaves the FLOP meters not meterable on
/// its device, with their code; the other meters are unaffected.
#[test]
fn a_kernel_without_counts_makes_the_meters_not_meterable_on_its_device() {
    let b = two_kernels();
    let bytes = gmr(1, &b, vec![frame(1, vec![full(1, 10)])], true);
    let (r, s) = meter_all(&[("flops.gmr", &bytes)], &[(1, "alice")]);
    assert_eq!(s[0].kernels_with_op_counts, 1);
    let nm = not_meterable(&r);
    for m in OP_METERS {
        assert!(
            nm.contains(&(m, NotMeterableCode::KernelsWithoutOpCounts)),
            "{m}: {nm:?}"
        );
        assert_eq!(r.device_total(GPU, m), 0, "{m}");
    }
    assert_eq!(r.device_total(GPU, MeterKind::KernelLaunches), 2);
}

/// A damaged operation-counters frame (checksum wrong, frames after it) is loss: a
/// `damaged_frame` warning names it, its kernels have no counts, so the FLOP meters are not
/// meterable on the device; the frames around it are read.
#[test]
fn a_damaged_frame_is_loss() {
    let b = two_kernels();
    let frames = vec![
        Frame::ActivityBuffer(b.bytes.clone()),
        frame(1, vec![full(1, 10)]),
        frame(1, vec![full(2, 10)]),
    ];
    let mut h = gmr_format::header(26);
    h.process_id = 1;
    let (good, offsets) = gmr_format::write(&h, &frames, true);
    // Corrupt: a byte of the second op frame's payload (past type and length), the end frame
    // after it; its type cannot be trusted, so it is read as a buffer that may have held
    // records. Torn: the file ends inside that frame; its type is trusted.
    let mut corrupt = good.clone();
    corrupt[offsets[2] + 12 + 20] ^= 0x40;
    let torn = good[..offsets[2] + 40].to_vec();
    for (what, bytes, says) in [
        ("corrupt", corrupt, "corrupt: its checksum does not match"),
        (
            "torn",
            torn,
            "an operation-counters frame (its kernels have no FLOP counts)",
        ),
    ] {
        let (r, s) = meter_all(&[("flops.gmr", &bytes)], &[(1, "alice")]);
        assert_eq!(s[0].kernels_with_op_counts, 1, "{what}");
        assert_warns(&r, says);
        assert!(codes(&r).contains(&WarningCode::DamagedFrame), "{what}");
        let nm = not_meterable(&r);
        for m in OP_METERS {
            assert!(
                nm.contains(&(m, NotMeterableCode::KernelsWithoutOpCounts)),
                "{what} {m}: {nm:?}"
            );
        }
    }
}

/// Payloads the reader refuses, each with a right checksum: malformed (lost, counted as
/// damage), never a panic, the frames around them read.
#[test]
fn malformed_payloads_are_damage() {
    let ok_entry = |corr: u32| {
        let mut e = corr.to_le_bytes().to_vec();
        e.extend_from_slice(&1u32.to_le_bytes());
        e.extend_from_slice(&5u64.to_le_bytes());
        e.extend_from_slice(&(FFMA.len() as u32).to_le_bytes());
        e.extend_from_slice(FFMA.as_bytes());
        e
    };
    let head = |count: u32| {
        let mut p = Vec::new();
        for v in [0u32, 1, 1, count] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        p
    };
    let mut trailing = head(1);
    trailing.extend(ok_entry(3));
    trailing.push(0);
    let mut zero_corr = head(1);
    zero_corr.extend(ok_entry(0));
    let mut repeated_corr = head(2);
    repeated_corr.extend(ok_entry(3));
    repeated_corr.extend(ok_entry(3));
    let mut repeated_metric = head(1);
    repeated_metric.extend(3u32.to_le_bytes());
    repeated_metric.extend(2u32.to_le_bytes());
    for _ in 0..2 {
        repeated_metric.extend(5u64.to_le_bytes());
        repeated_metric.extend((FFMA.len() as u32).to_le_bytes());
        repeated_metric.extend(FFMA.as_bytes());
    }
    let mut empty_name = head(1);
    empty_name.extend(3u32.to_le_bytes());
    empty_name.extend(1u32.to_le_bytes());
    empty_name.extend(5u64.to_le_bytes());
    empty_name.extend(0u32.to_le_bytes());
    let mut not_utf8 = head(1);
    not_utf8.extend(3u32.to_le_bytes());
    not_utf8.extend(1u32.to_le_bytes());
    not_utf8.extend(5u64.to_le_bytes());
    not_utf8.extend(2u32.to_le_bytes());
    not_utf8.extend([0xff, 0xfe]);
    let mut huge_count = head(u32::MAX);
    huge_count.extend(ok_entry(3));
    let cases: [(&str, Vec<u8>, &str); 8] = [
        ("short", vec![0; 12], "too short"),
        ("trailing", trailing, "1 bytes after its 1 kernels"),
        ("zero correlation id", zero_corr, "correlation id 0"),
        (
            "repeated correlation id",
            repeated_corr,
            "repeats correlation id 3",
        ),
        ("repeated metric", repeated_metric, "repeats the metric"),
        ("empty name", empty_name, "empty name"),
        ("not UTF-8", not_utf8, "not UTF-8"),
        ("count past the payload", huge_count, "cut short"),
    ];
    for (what, payload, detail) in cases {
        let (good, offsets) =
            gmr_format::write(&gmr_format::header(26), &[frame(1, vec![full(1, 1)])], true);
        let mut bytes = good[..offsets[0]].to_vec();
        bytes.extend(gmr_format::raw_frame(10, &payload));
        bytes.extend_from_slice(&good[offsets[0]..]);
        let file = ok(read_gmr(&bytes));
        assert_eq!(file.damaged.len(), 1, "{what}");
        assert_eq!(file.damaged[0].damage, Damage::Malformed, "{what}");
        assert!(
            file.damaged[0].detail.contains(detail),
            "{what}: {}",
            file.damaged[0].detail
        );
        assert_eq!(file.frames.len(), 1, "{what}");
        assert_eq!(file.unknown_frames, 0, "{what}");
    }
}

/// A FLOP meter with only some of its counters is not counted (`partial_op_counters`), the
/// others are; counts past 64 bits leave the kernel without counts
/// (`instruction_count_overflow`); counters of a launch no kernel record has are said
/// (`unmatched_profiler_ranges`), never metered.
#[test]
fn partial_overflowing_and_unmatched_counters_are_warned() {
    let b = two_kernels();
    let partial = entry(1, &[(FFMA, 10), (FMUL, 1), (DADD, 1), (DMUL, 1), (DFMA, 1)]);
    let overflow = entry(2, &[(DFMA, u64::MAX / 2 + 1), (DADD, 0), (DMUL, 0)]);
    let bytes = gmr(
        1,
        &b,
        vec![frame(1, vec![partial, overflow, entry(99, &[(FFMA, 1)])])],
        true,
    );
    let (r, s) = meter_all(&[("flops.gmr", &bytes)], &[(1, "alice")]);
    assert_eq!(s[0].kernels_with_op_counts, 1);
    let c = codes(&r);
    for want in [
        WarningCode::PartialOpCounters,
        WarningCode::InstructionCountOverflow,
        WarningCode::UnmatchedProfilerRanges,
    ] {
        assert!(c.contains(&want), "{want:?}: {:?}", r.warnings);
    }
    assert_warns(
        &r,
        "some but not all of flops_fp32's add, mul and fma counters",
    );
    assert_warns(&r, "correlation ids from 99");
    // Kernel 2 has no counts at all: flops_fp64 is not meterable (kernel 1 has it).
    let nm = not_meterable(&r);
    assert!(
        nm.contains(&(
            MeterKind::FlopsFp64,
            NotMeterableCode::KernelsWithoutOpCounts
        )),
        "{nm:?}"
    );
    // flops_fp32 is nowhere counted: absent, not billed from a partial count.
    assert_eq!(r.device_total(GPU, MeterKind::FlopsFp32), 0);
}

/// A recording with operation counters meters the same whole and streamed (the streamed path
/// hands it to the whole-file path: the join needs every frame), and the buffer-stream replay
/// refuses it rather than dropping its counts.
#[test]
fn whole_and_streamed_agree_and_replay_refuses() {
    let b = two_kernels();
    let bytes = gmr(1, &b, vec![frame(2, vec![full(1, 10), full(2, 20)])], true);
    let dir = ok(tempfile::tempdir());
    let path = dir.path().join("flops.gmr");
    ok(std::fs::write(&path, &bytes));
    let whole = {
        let mut m = meter();
        let s = ok(meter_gmr(
            &mut m,
            "flops.gmr",
            &bytes,
            &CuptiOptions::default(),
        ));
        (format!("{s:?}"), ok(serde_json::to_string(&finish(m))))
    };
    let streamed = {
        let mut m = meter();
        let s = ok(gpumeter_recording::meter_gmr_file(
            &mut m,
            &path,
            &CuptiOptions::default(),
        ));
        (format!("{s:?}"), ok(serde_json::to_string(&finish(m))))
    };
    assert_eq!(whole, streamed);
    assert!(whole.1.contains("flops_fp32"), "{}", whole.1);
    let e = gpumeter_recording::replay::Replay::from_bytes("flops.gmr", &bytes, API)
        .expect_err("not replayable");
    assert!(
        e.to_string()
            .contains("range-profiler operation-counters frames"),
        "{e}"
    );
}

/// Several kernel records of one correlation id (a graph launch) are one launch call: its
/// counts are given once (to the earliest kernel), never once per kernel.
#[test]
fn a_launch_with_several_kernels_is_counted_once() {
    let mut b = Buf::new(API);
    kernel(&mut b, T0, 200, 5, 1, 0);
    kernel(&mut b, T0 + 5_000, 200, 5, 1, 0);
    let bytes = gmr(1, &b, vec![frame(1, vec![full(5, 10)])], true);
    let (r, s) = meter_all(&[("flops.gmr", &bytes)], &[(1, "alice")]);
    assert_eq!(s[0].kernels_with_op_counts, 2);
    assert_eq!(r.device_total(GPU, MeterKind::FlopsFp32), flops(10, 1));
    assert!(not_meterable(&r).is_empty(), "{:?}", r.devices);
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    /// The bytes of a type-10 payload as GmrWriter writes it.
    fn payload_of(f: &Frame) -> Vec<u8> {
        let (bytes, offsets) =
            gmr_format::write(&gmr_format::header(26), std::slice::from_ref(f), true);
        let len = u64::from_le_bytes(ok(bytes[offsets[0] + 4..offsets[0] + 12].try_into()));
        bytes[offsets[0] + 12..offsets[0] + 12 + len as usize].to_vec()
    }

    /// A recording with one kernel and, after it, a type-10 frame around `payload`, metered.
    fn meter_with(payload: &[u8]) -> (gpumeter_recording::gmr::GmrFile, UsageReport) {
        let mut b = Buf::new(API);
        kernel(&mut b, T0, 200, 1, 1, 0);
        let (good, offsets) = gmr_format::write(
            &gmr_format::header(26),
            &[Frame::ActivityBuffer(b.bytes.clone())],
            true,
        );
        let end = offsets[0] + 16 + b.bytes.len();
        let mut bytes = good[..end].to_vec();
        bytes.extend(gmr_format::raw_frame(10, payload));
        bytes.extend_from_slice(&good[end..]);
        let file = ok(read_gmr(&bytes));
        let mut m = meter();
        ok(meter_gmr(&mut m, "p.gmr", &bytes, &CuptiOptions::default()));
        (file, finish(m))
    }

    proptest! {
        /// Arbitrary bytes as an operation-counters payload: read as a frame or as one
        /// malformed frame, metered either way, never a panic.
        #[test]
        fn arbitrary_payloads_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..200)) {
            let (file, _) = meter_with(&payload);
            let frames = file.frames.iter().filter(|f| matches!(f.frame, Frame::OpCounts(_))).count();
            prop_assert_eq!(frames + file.damaged.len(), 1);
            if let Some(d) = file.damaged.first() {
                prop_assert_eq!(d.damage, Damage::Malformed);
            }
        }

        /// Every proper prefix of a well-formed payload is malformed (never a short read taken
        /// for fewer kernels).
        #[test]
        fn cut_payloads_are_malformed(cut in 0usize..1000) {
            let p = payload_of(&frame(3, vec![full(1, 10), full(2, 20)]));
            let cut = cut % p.len();
            let (file, r) = meter_with(&p[..cut]);
            prop_assert_eq!(file.damaged.len(), 1);
            prop_assert_eq!(file.damaged[0].damage, Damage::Malformed);
            prop_assert!(r.warnings.iter().any(|w| *w.code() == WarningCode::DamagedFrame));
        }
    }
}
