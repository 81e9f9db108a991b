//! The production [`Meter`] against the reference meter (the meter before issue 13's
//! rewrite, `tests/reference/meter.rs`): the same random inputs — kernels of every launch
//! shape on devices with and without SM counts, compute capabilities and green-context
//! partitions; copies and sets; memory allocations, releases and process exits; opening state;
//! energy samples; records out of order within (and beyond) the reordering horizon, duplicates,
//! several devices, tenants by external id, process id and source tenant, windows small enough
//! that records straddle their edges — must give equal reports, from `finish` and from every
//! `drain` and `snapshot` along the way.

use proptest::prelude::*;

use crate::device::{ComputeCapability, DeviceInfo};
use crate::meter::{Meter, MeterConfig, SourceInfo, TenantMap};
use crate::record::{
    ActivityRecord, CopyDirection, DeviceSlot, KernelLaunch, LossReason, MemoryEvent, MemoryOp,
    PartitionId, Work,
};
use crate::report::{OpenAllocation, Quantity};
use crate::tenant::TenantName;
use crate::time::{rfc3339_ns, WindowSize};

use super::reference;

/// A day boundary: a window edge for every window size.
const BASE: u64 = 1_700_000_000_000_000_000 - 1_700_000_000_000_000_000 % 86_400_000_000_000;
/// One time step: 50 ms (windows are 1 or 2 s: 20 or 40 steps).
const STEP: u64 = 50_000_000;

#[derive(Debug, Clone)]
struct Dev {
    sms: Option<u32>,
    cc: Option<(u32, u32)>,
    partitions: Vec<u32>,
}

#[derive(Debug, Clone)]
enum Op {
    Kernel {
        dev: usize,
        start: u64,
        len: u64,
        jitter: u64,
        grid: Option<[u32; 3]>,
        block: Option<[u32; 3]>,
        regs: Option<u32>,
        smem: Option<u64>,
        pid: Option<u32>,
        ext: Option<u64>,
        part: Option<u32>,
        instr: Option<u64>,
        corr: u32,
    },
    Copy {
        dev: usize,
        start: u64,
        len: u64,
        bytes: u64,
        dir: u8,
        pid: Option<u32>,
        ext: Option<u64>,
    },
    Mem {
        dev: usize,
        at: u64,
        op: u8,
        addr: u64,
        bytes: u64,
        pid: Option<u32>,
        ext: Option<u64>,
    },
    Energy {
        dev: usize,
        at: u64,
        mj: u64,
    },
    /// Pushes the `n`-th earlier work or memory op again (a duplicate, or late), with its
    /// joined facts (process id, external id, kernel name, instruction count) changed when
    /// given: `Joined::agrees` tells a duplicate from another process's identical record.
    Again(usize, Option<Alter>),
    Loss {
        dev: usize,
        n: u64,
    },
    Drain(u64),
    Snapshot,
}

/// New joined facts for a record pushed again: process id, external id, kernel name (index),
/// instruction count.
type Alter = (Option<u32>, Option<u64>, Option<u8>, Option<u64>);

#[derive(Debug, Clone)]
struct Case {
    window_s: u64,
    horizon_steps: u64,
    max_cells: u64,
    source_tenant: bool,
    devs: Vec<Dev>,
    /// Opening state: (device, pid, address, bytes, billed_to step, tenant index).
    opening: Vec<(usize, Option<u32>, u64, u64, u64, usize)>,
    ops: Vec<Op>,
    /// pid → tenant index, external id → tenant index.
    pid_rules: Vec<(u32, usize)>,
    ext_rules: Vec<(u64, usize)>,
    /// Whether the tenant map is set before the records (else at the end).
    map_first: bool,
}

const TENANTS: [&str; 4] = ["alice", "bob", "carol", "dave"];

fn arb_dev() -> impl Strategy<Value = Dev> {
    (
        prop_oneof![3 => (2u32..20).prop_map(Some), 1 => Just(None)],
        prop_oneof![
            2 => Just(Some((8, 0))),
            2 => Just(Some((9, 0))),
            1 => Just(Some((7, 5))),
            1 => Just(Some((1, 0))),
            1 => Just(None)
        ],
        proptest::collection::vec(1u32..12, 0..3),
    )
        .prop_map(|(sms, cc, partitions)| Dev {
            sms,
            cc,
            partitions,
        })
}

fn arb_op(devs: usize) -> impl Strategy<Value = Op> {
    let pid = prop_oneof![3 => (1u32..6).prop_map(Some), 1 => Just(None)];
    let ext = prop_oneof![1 => (1u64..5).prop_map(Some), 2 => Just(None)];
    let kernel = (
        (0..devs, 0u64..120, 0u64..40, 0u64..3),
        prop_oneof![
            6 => (1u32..40, 1u32..3, 1u32..2).prop_map(|(a, b, c)| Some([a, b, c])),
            1 => Just(None)
        ],
        prop_oneof![
            6 => (1u32..9).prop_map(|w| Some([32 * w, 1, 1])),
            1 => Just(Some([33, 2, 1])),
            1 => Just(None)
        ],
        prop_oneof![4 => (16u32..128).prop_map(Some), 1 => Just(None)],
        prop_oneof![4 => (0u64..64 * 1024).prop_map(Some), 1 => Just(None)],
        (pid.clone(), ext.clone()),
        prop_oneof![3 => Just(None), 1 => (0u32..4).prop_map(Some)],
        prop_oneof![1 => (0u64..1_000_000).prop_map(Some), 1 => Just(None)],
        0u32..3,
    )
        .prop_map(
            |(
                (dev, start, len, jitter),
                grid,
                block,
                regs,
                smem,
                (pid, ext),
                part,
                instr,
                corr,
            )| Op::Kernel {
                dev,
                start,
                len,
                jitter,
                grid,
                block,
                regs,
                smem,
                pid,
                ext,
                part,
                instr,
                corr,
            },
        );
    let copy = (
        0..devs,
        0u64..120,
        0u64..10,
        1u64..1 << 30,
        0u8..7,
        pid.clone(),
        ext.clone(),
    )
        .prop_map(|(dev, start, len, bytes, dir, pid, ext)| Op::Copy {
            dev,
            start,
            len,
            bytes,
            dir,
            pid,
            ext,
        });
    let mem = (
        0..devs,
        0u64..120,
        prop_oneof![3 => Just(0u8), 2 => Just(1u8), 1 => Just(2u8)],
        0u64..4,
        1u64..1 << 34,
        pid,
        ext,
    )
        .prop_map(|(dev, at, op, addr, bytes, pid, ext)| Op::Mem {
            dev,
            at,
            op,
            addr,
            bytes,
            pid,
            ext,
        });
    prop_oneof![
        12 => kernel,
        3 => copy,
        4 => mem,
        1 => (0..devs, 0u64..160, 0u64..400_000).prop_map(|(dev, at, mj)| Op::Energy { dev, at, mj }),
        2 => (0usize..1000).prop_map(|i| Op::Again(i, None)),
        1 => (
            0usize..1000,
            proptest::option::of(1u32..6),
            proptest::option::of(1u64..5),
            proptest::option::of(0u8..2),
            proptest::option::of(0u64..3),
        )
            .prop_map(|(i, p, e, n, w)| Op::Again(i, Some((p, e, n, w)))),
        1 => (0..devs, 1u64..3).prop_map(|(dev, n)| Op::Loss { dev, n }),
        1 => (0u64..160).prop_map(Op::Drain),
        1 => Just(Op::Snapshot),
    ]
}

fn arb_case() -> impl Strategy<Value = Case> {
    (1usize..4)
        .prop_flat_map(|n| {
            (
                (
                    prop_oneof![Just(1u64), Just(2u64)],
                    0u64..30,
                    prop_oneof![4 => Just(200_000u64), 1 => 3u64..12],
                    any::<bool>(),
                ),
                proptest::collection::vec(arb_dev(), n),
                proptest::collection::vec(
                    (
                        0..n,
                        proptest::option::of(1u32..6),
                        0u64..4,
                        1u64..1 << 20,
                        0u64..10,
                        0usize..5,
                    ),
                    0..3,
                ),
                proptest::collection::vec(arb_op(n), 0..60),
                proptest::collection::vec((1u32..6, 0usize..4), 0..4),
                proptest::collection::vec((1u64..5, 0usize..4), 0..3),
                any::<bool>(),
            )
        })
        .prop_map(
            |(
                (window_s, horizon_steps, max_cells, source_tenant),
                devs,
                opening,
                ops,
                pid_rules,
                ext_rules,
                map_first,
            )| Case {
                window_s,
                horizon_steps,
                max_cells,
                source_tenant,
                devs,
                opening,
                ops,
                pid_rules,
                ext_rules,
                map_first,
            },
        )
}

fn tenant(i: usize) -> TenantName {
    TenantName::parse(TENANTS[i % TENANTS.len()]).expect("a valid tenant name")
}

fn tenant_map(c: &Case) -> TenantMap {
    let mut m = TenantMap::default();
    for &(pid, t) in &c.pid_rules {
        m.pid.insert(pid, tenant(t));
    }
    for &(e, t) in &c.ext_rules {
        m.external.insert(e, tenant(t));
    }
    m
}

fn device_info(i: usize, d: &Dev) -> DeviceInfo {
    let mut info = DeviceInfo::bare(format!("GPU-{i}"), i as u32);
    info.sm_count = d.sms;
    info.compute_capability =
        d.cc.map(|(major, minor)| ComputeCapability { major, minor });
    info.name = Some("NVIDIA Test".into());
    info
}

fn opening(c: &Case) -> Vec<OpenAllocation> {
    c.opening
        .iter()
        .enumerate()
        .map(|(i, &(dev, pid, addr, bytes, billed, t))| OpenAllocation {
            device: dev as u32,
            device_key: format!("GPU-{dev}"),
            // Distinct per entry unless the generator repeats one (then refused by both).
            address: format!("{:#x}", 0x1000 * (addr + 1) + (i as u64 % 2)),
            bytes: Quantity(u128::from(bytes)),
            tenant: if t == 4 {
                "unattributed".to_string()
            } else {
                TENANTS[t].to_string()
            },
            process_id: pid,
            external_id: None,
            allocated_at: rfc3339_ns(BASE),
            billed_to: rfc3339_ns(BASE + billed * STEP + 1),
        })
        .collect()
}

/// One step of a run, in the form both meters take.
#[derive(Debug, Clone)]
enum Input {
    Work(ActivityRecord),
    Memory(MemoryEvent),
    Energy(DeviceSlot, u64, u64),
    Loss(DeviceSlot, u64),
    Drain(u64),
    Snapshot,
}

fn inputs(c: &Case, slots: &[DeviceSlot], parts: &[Vec<PartitionId>]) -> Vec<Input> {
    let mut out: Vec<Input> = Vec::new();
    let mut pushed: Vec<Input> = Vec::new();
    for op in &c.ops {
        let input = match op {
            Op::Kernel {
                dev,
                start,
                len,
                jitter,
                grid,
                block,
                regs,
                smem,
                pid,
                ext,
                part,
                instr,
                corr,
            } => {
                let s = BASE + start * STEP + jitter;
                let work = Work::Kernel(KernelLaunch {
                    grid: *grid,
                    block: *block,
                    registers_per_thread: *regs,
                    shared_mem_bytes: *smem,
                    name: None,
                    warp_instructions: *instr,
                    ops: Default::default(),
                });
                let mut r = ActivityRecord::new(slots[*dev], s, s + len * STEP + jitter, work);
                r.process_id = *pid;
                r.external_id = *ext;
                r.correlation_id = *corr;
                r.partition = part.and_then(|p| {
                    // Ids past the device's partitions stay (the meter treats them as the device).
                    parts[*dev]
                        .get(p as usize)
                        .copied()
                        .or(Some(PartitionId(p)))
                });
                Input::Work(r)
            }
            Op::Copy {
                dev,
                start,
                len,
                bytes,
                dir,
                pid,
                ext,
            } => {
                let s = BASE + start * STEP;
                let work = match dir {
                    0 => Work::Memcpy {
                        bytes: *bytes,
                        direction: CopyDirection::HostToDevice,
                    },
                    1 => Work::Memcpy {
                        bytes: *bytes,
                        direction: CopyDirection::DeviceToHost,
                    },
                    2 => Work::Memcpy {
                        bytes: *bytes,
                        direction: CopyDirection::DeviceToDevice,
                    },
                    3 => Work::Memcpy {
                        bytes: *bytes,
                        direction: CopyDirection::Peer,
                    },
                    4 => Work::Memcpy {
                        bytes: *bytes,
                        direction: CopyDirection::Other,
                    },
                    5 => Work::Memset { bytes: *bytes },
                    _ => Work::GraphLaunch,
                };
                let mut r = ActivityRecord::new(slots[*dev], s, s + len * STEP, work);
                r.process_id = *pid;
                r.external_id = *ext;
                Input::Work(r)
            }
            Op::Mem {
                dev,
                at,
                op,
                addr,
                bytes,
                pid,
                ext,
            } => {
                let op = match op {
                    0 => MemoryOp::Allocation,
                    1 => MemoryOp::Release,
                    _ => MemoryOp::ProcessExit,
                };
                let mut m = MemoryEvent::new(
                    slots[*dev],
                    BASE + at * STEP,
                    0x1000 * (addr + 1),
                    *bytes,
                    op,
                );
                m.process_id = *pid;
                m.external_id = *ext;
                Input::Memory(m)
            }
            Op::Energy { dev, at, mj } => Input::Energy(slots[*dev], BASE + at * STEP, *mj),
            Op::Again(i, alter) => {
                if pushed.is_empty() {
                    continue;
                }
                let mut again = pushed[i % pushed.len()].clone();
                if let Some((pid, ext, name, instr)) = alter {
                    match &mut again {
                        Input::Work(r) => {
                            r.process_id = *pid;
                            r.external_id = *ext;
                            if let Work::Kernel(k) = &mut r.work {
                                k.name = name.map(|n| if n == 0 { "a".into() } else { "b".into() });
                                k.warp_instructions = *instr;
                            }
                        }
                        Input::Memory(m) => {
                            m.process_id = *pid;
                            m.external_id = *ext;
                        }
                        _ => {}
                    }
                }
                again
            }
            Op::Loss { dev, n } => Input::Loss(slots[*dev], *n),
            Op::Drain(at) => Input::Drain(BASE + at * STEP),
            Op::Snapshot => Input::Snapshot,
        };
        if matches!(input, Input::Work(_) | Input::Memory(_)) {
            pushed.push(input.clone());
        }
        out.push(input);
    }
    out
}

/// Runs one case on a meter type (both have the same API); every report or error in order.
macro_rules! run {
    ($meter:ty, $c:expr) => {{
        let c: &Case = $c;
        let mut results = Vec::new();
        let mut m = <$meter>::new(MeterConfig {
            window: WindowSize::from_seconds(c.window_s).expect("a window size"),
            tenant: c.source_tenant.then(|| tenant(3)),
            reorder_horizon_ns: c.horizon_steps * STEP,
            max_cells: c.max_cells,
        });
        if c.map_first {
            m.set_tenant_map(tenant_map(c));
        }
        m.begin_source(SourceInfo {
            name: "a".into(),
            format: "test".into(),
            sha256: "00".repeat(32),
        });
        results.push(format!("{:?}", m.set_opening(&opening(c))));
        let mut slots = Vec::new();
        let mut parts = Vec::new();
        for (i, d) in c.devs.iter().enumerate() {
            let slot = m.register_device(device_info(i, d));
            let ps: Vec<PartitionId> = d
                .partitions
                .iter()
                .filter_map(|&n| m.register_partition(slot, n))
                .collect();
            slots.push(slot);
            parts.push(ps);
        }
        for input in inputs(c, &slots, &parts) {
            match input {
                Input::Work(r) => m.push(r),
                Input::Memory(e) => m.push_memory(e),
                Input::Energy(d, t, e) => m.push_energy(d, t, e),
                Input::Loss(d, n) => m.record_loss(d, LossReason::Duplicate, n),
                Input::Drain(t) => results.push(format!("{:?}", m.drain(t))),
                Input::Snapshot => results.push(format!("{:?}", m.snapshot())),
            }
            results.push(format!(
                "{} {} {}",
                m.watermark_ns(),
                m.cells(),
                m.buffered_records()
            ));
        }
        if !c.map_first {
            m.set_tenant_map(tenant_map(c));
        }
        results.push(format!("{:?}", m.finish()));
        results
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("REFERENCE_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(400)
    ))]

    /// Every report and error of the production meter equals the reference meter's.
    #[test]
    fn meter_matches_reference(c in arb_case()) {
        let got = run!(Meter, &c);
        let want = run!(reference::Meter, &c);
        prop_assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g, w, "result {} differs", i);
        }
    }
}
