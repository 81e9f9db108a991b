//! Criterion bench `decode_cupti` (DESIGN §12): decode and meter a buffer of 1 M CUPTI 12.8
//! CONCURRENT_KERNEL records, side by side with a bare `cuptiActivityGetNextRecord` walk of the
//! same buffer by the real libcupti 12.8 (through `cupti-sys`). Results and the command are in
//! docs/PERFORMANCE.md.
//!
//! Run: `bindings/cupti/fetch-wheels.sh && . bindings/cupti/.wheels/env.sh &&
//! GPUMETER_CUPTI_LIB=$CUPTI12_LIB/libcupti.so.12 cargo bench --bench decode_cupti`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumeter::cupti::{decode, meter_buffer, ActivityKind, ApiVersion, CuptiOptions, Walk};
use gpumeter::{Meter, MeterConfig};

const RECORDS: usize = 1_000_000;

/// 1 M kernel records on 4 streams, 1 µs apart, 3 µs long, grids of 1..=300 blocks.
fn buffer() -> Vec<u8> {
    let api = ApiVersion::Cupti12_8;
    let layout = api
        .layouts()
        .into_iter()
        .find(|l| l.kind == ActivityKind::CONCURRENT_KERNEL)
        .expect("kernel layout");
    let field = |name: &str| {
        layout
            .fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| (f.offset, f.width))
            .expect("field")
    };
    let fields = [
        "start",
        "end",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "correlationId",
        "streamId",
        "contextId",
    ]
    .map(field);
    let mut buf = vec![0u8; RECORDS * layout.size];
    let t0: u64 = 1_793_606_160_000_000_000;
    for (i, rec) in buf.chunks_exact_mut(layout.size).enumerate() {
        rec[..4].copy_from_slice(&ActivityKind::CONCURRENT_KERNEL.0.to_le_bytes());
        let start = t0 + i as u64 * 1_000;
        let values: [u64; 9] = [
            start,
            start + 3_000,
            1 + (i as u64 % 300),
            1,
            1,
            128,
            i as u64 + 1,
            7 + (i as u64 % 4),
            1,
        ];
        for ((off, width), v) in fields.iter().zip(values) {
            rec[*off..off + width].copy_from_slice(&v.to_le_bytes()[..*width]);
        }
    }
    buf
}

fn libcupti() -> Option<cupti_sys::Cupti> {
    let path = std::env::var_os("GPUMETER_CUPTI_LIB")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("bindings/cupti/.wheels/cu12/nvidia/cuda_cupti/lib/libcupti.so.12")
        });
    cupti_sys::Cupti::load_from(&path).ok()
}

fn bench(c: &mut Criterion) {
    let buf = buffer();
    let mut g = c.benchmark_group("decode_cupti");
    g.sample_size(10);
    g.throughput(Throughput::Elements(RECORDS as u64));
    match libcupti() {
        Some(cupti) => {
            let mut copy = buf.clone();
            let len = copy.len();
            g.bench_function("libcupti_get_next_record_walk", |b| {
                b.iter(|| {
                    let walk = cupti.walk_activity_buffer(black_box(&mut copy), len);
                    walk.map(|w| w.records.len()).unwrap_or(0)
                })
            });
        }
        None => eprintln!("libcupti 12.8 not found: set GPUMETER_CUPTI_LIB (see the file header)"),
    }
    g.bench_function("walk", |b| {
        b.iter(|| {
            Walk::new(black_box(&buf), ApiVersion::Cupti12_8)
                .filter(Result::is_ok)
                .count()
        })
    });
    g.bench_function("decode", |b| {
        b.iter(|| decode(black_box(&buf), ApiVersion::Cupti12_8).map(|d| d.records.len()))
    });
    g.bench_function("decode_and_meter", |b| {
        b.iter(|| {
            let mut meter = Meter::new(MeterConfig::default());
            let s = meter_buffer(
                &mut meter,
                "bench.cupti",
                black_box(&buf),
                &CuptiOptions::default(),
            );
            assert!(s.is_ok());
            meter.finish().map(|r| r.usage.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
