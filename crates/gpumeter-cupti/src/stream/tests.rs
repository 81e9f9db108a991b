//! The columnar path of a stream books what the typed path books: the same summaries, the
//! same reports (snapshots and drained pieces), on generated buffers of every family, with
//! invalid kernels, duplicates, equal starts across families, joins across buffers and
//! buffers that hold a kind without columns.

use proptest::prelude::*;

use gpumeter_core::{ComputeCapability, DeviceInfo, Meter, MeterConfig, UsageReport};

use super::*;
use crate::kind::ActivityKind;

/// One generated record: a kind and its fields by header member name.
type Spec = (ActivityKind, Vec<(&'static str, u64)>);

fn encode(api: ApiVersion, (kind, fields): &Spec) -> Vec<u8> {
    api.layouts()
        .into_iter()
        .find(|l| l.kind == *kind)
        .unwrap_or_else(|| panic!("{api} has no {kind}"))
        .encode(fields)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A value that is sometimes negative as the `i32` member it goes to (an invalid kernel).
fn dim(n: i32) -> u64 {
    u64::from(n as u32)
}

/// Work fields shared by kernels, copies and memsets: small ranges, so that starts, streams
/// and correlation ids repeat (duplicates, equal starts across families).
fn work_fields() -> impl Strategy<Value = Vec<(&'static str, u64)>> {
    (
        0..400u64,
        0..30u64,
        0..3u64,
        0..2u64,
        0..3u64,
        0..12u64,
        0..2u64,
    )
        .prop_map(|(s, d, dev, ctx, stream, corr, node)| {
            let start = 1_000_000 + s * 1_000;
            vec![
                ("start", start),
                ("end", start + d * 700),
                ("deviceId", dev),
                ("contextId", ctx),
                ("streamId", stream),
                ("correlationId", corr),
                ("graphNodeId", node),
            ]
        })
}

fn kernel() -> impl Strategy<Value = Spec> {
    let launch = (
        prop_oneof![9 => 1..300i32, 1 => -2..0i32],
        1..4i32,
        prop_oneof![9 => Just(128i32), 1 => -1..1i32],
        0..255u64,
        0..50_000i32,
        prop_oneof![9 => 0..4_096i32, 1 => -5..0i32],
    );
    (work_fields(), launch, any::<bool>()).prop_map(|(mut f, (gx, gy, bx, regs, s, d), c)| {
        f.extend([
            ("gridX", dim(gx)),
            ("gridY", dim(gy)),
            ("gridZ", 1),
            ("blockX", dim(bx)),
            ("blockY", 1),
            ("blockZ", 1),
            ("registersPerThread", regs),
            ("staticSharedMemory", dim(s)),
            ("dynamicSharedMemory", dim(d)),
        ]);
        let kind = if c {
            ActivityKind::CONCURRENT_KERNEL
        } else {
            ActivityKind::KERNEL
        };
        (kind, f)
    })
}

fn record() -> impl Strategy<Value = Spec> {
    let copy = (work_fields(), 0..12u64, 0..1u64 << 20, any::<bool>()).prop_map(
        |(mut f, k, bytes, peer)| {
            f.extend([("copyKind", k), ("bytes", bytes)]);
            let kind = if peer {
                ActivityKind::MEMCPY2
            } else {
                ActivityKind::MEMCPY
            };
            (kind, f)
        },
    );
    let set = (work_fields(), 0..1u64 << 20).prop_map(|(mut f, bytes)| {
        f.push(("bytes", bytes));
        (ActivityKind::MEMSET, f)
    });
    let api = (0..12u64, 1..4u64, any::<bool>()).prop_map(|(corr, pid, rt)| {
        let kind = if rt {
            ActivityKind::RUNTIME
        } else {
            ActivityKind::DRIVER
        };
        (kind, vec![("correlationId", corr), ("processId", pid)])
    });
    let ext = (0..12u64, 0..7u64, 0..4u64).prop_map(|(corr, k, id)| {
        let f = vec![
            ("correlationId", corr),
            ("externalKind", k),
            ("externalId", id),
        ];
        (ActivityKind::EXTERNAL_CORRELATION, f)
    });
    prop_oneof![
        6 => kernel(),
        2 => copy,
        1 => set,
        3 => api,
        3 => ext,
        // A kind without columns: its buffer takes the typed path.
        1 => Just((ActivityKind::OVERHEAD, vec![])),
    ]
}

/// A device with an SM count and compute capability, so SM and warp meters are booked.
fn described(id: u32) -> DeviceInfo {
    let mut info = DeviceInfo::bare("", id);
    info.sm_count = Some(132);
    info.compute_capability = Some(ComputeCapability { major: 9, minor: 0 });
    info
}

/// How a stream is given its buffers.
#[derive(Clone, Copy, Debug)]
enum Path {
    /// [`CuptiStream::ingest`]: columns kept by the stream.
    Ingest,
    /// [`CuptiStream::prepare`] then [`CuptiStream::apply`].
    Prepared,
    /// The typed path for every buffer.
    Typed,
}

/// A report as text with the stream's random identity (its SHA-256 and the key label of its
/// devices without a UUID) replaced, so two streams' reports compare.
fn text(stream: &CuptiStream, report: &UsageReport) -> String {
    let sha = stream.sha256();
    let mut report = report.clone();
    // The report's own digest covers the stream's identity.
    report.sha256.clear();
    format!("{report:?}")
        .replace(&sha, "SHA")
        .replace(&sha[..16], "LABEL")
}

/// Books `buffers` through a new stream on `path`: the summaries, then a drain at
/// `drain_at` and a snapshot, as text.
fn book(
    api: ApiVersion,
    buffers: &[Vec<u8>],
    path: Path,
    config: &MeterConfig,
    drain_at: u64,
) -> (Vec<BufferSummary>, String, String) {
    let mut meter = Meter::new(config.clone());
    // A tenant per process id and external id: a join missed moves usage between tenants.
    let mut map = gpumeter_core::TenantMap::default();
    let name = |s: String| gpumeter_core::TenantName::parse(&s).expect("a tenant name");
    for n in 0..8 {
        map.pid.insert(n, name(format!("p{n}")));
        map.external.insert(u64::from(n), name(format!("x{n}")));
    }
    meter.set_tenant_map(map);
    let mut stream = CuptiStream::new("s", api);
    stream
        .register_device(&mut meter, described(1))
        .expect("one UUID per device");
    let summaries = buffers
        .iter()
        .map(|b| match path {
            Path::Ingest => stream.ingest(&mut meter, b),
            Path::Prepared => CuptiStream::prepare(api, b).map(|p| stream.apply(&mut meter, p)),
            Path::Typed => CuptiStream::prepare_typed(api, b).map(|p| stream.apply(&mut meter, p)),
        })
        .map(|r| r.expect("generated buffers decode"))
        .collect();
    let drained = stream.drain(&mut meter, drain_at).expect("drain");
    let snapshot = stream.snapshot(&mut meter).expect("snapshot");
    (summaries, text(&stream, &drained), text(&stream, &snapshot))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Records of every family cut into buffers (some holding a kind without columns): the
    /// three ways in book the same summaries, drained piece and snapshot.
    #[test]
    fn columnar_and_typed_paths_book_alike(
        specs in prop::collection::vec(record(), 0..120),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        drain_at in 0..1_500_000u64,
        horizon in prop_oneof![Just(60_000_000_000u64), 0..50_000u64],
        v in 0..ApiVersion::ALL.len(),
    ) {
        let api = ApiVersion::ALL[v];
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(specs.len() + 1)).collect();
        at.extend([0, specs.len()]);
        at.sort_unstable();
        let buffers: Vec<Vec<u8>> = at
            .windows(2)
            .map(|w| specs[w[0]..w[1]].iter().flat_map(|s| encode(api, s)).collect())
            .collect();
        let config = MeterConfig {
            reorder_horizon_ns: horizon,
            ..MeterConfig::default()
        };
        let typed = book(api, &buffers, Path::Typed, &config, drain_at);
        prop_assert_eq!(&book(api, &buffers, Path::Ingest, &config, drain_at), &typed);
        prop_assert_eq!(&book(api, &buffers, Path::Prepared, &config, drain_at), &typed);
    }
}

/// A buffer given twice is booked once on the columnar path too: its records are duplicates.
#[test]
fn a_buffer_given_twice_is_booked_once() {
    let api = ApiVersion::Cupti12_8;
    let k: Spec = (
        ActivityKind::CONCURRENT_KERNEL,
        vec![
            ("start", 5_000),
            ("end", 9_000),
            ("correlationId", 3),
            ("gridX", 4),
            ("gridY", 1),
            ("gridZ", 1),
            ("blockX", 128),
            ("blockY", 1),
            ("blockZ", 1),
        ],
    );
    let buf = encode(api, &k);
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("s", api);
    let first = stream.ingest(&mut meter, &buf).expect("decodes");
    let again = stream.ingest(&mut meter, &buf).expect("decodes");
    assert_eq!((first.work_records, again.work_records), (1, 1));
    let report = stream.snapshot(&mut meter).expect("snapshot");
    let launches: u128 = report
        .usage
        .iter()
        .filter(|r| r.meter.as_str() == "kernel_launches")
        .map(|r| r.quantity.0)
        .sum();
    assert_eq!(launches, 1, "the repeat was booked");
    let dups: u64 = report
        .loss
        .iter()
        .filter(|l| l.reason == "duplicate")
        .map(|l| l.records)
        .sum();
    assert_eq!(dups, 1, "{:?}", report.loss);
}
