//! Criterion bench `decode_cupti` (docs/PERFORMANCE.md, "Targets"): decode and meter a buffer of 1 M CUPTI 12.8
//! CONCURRENT_KERNEL records (made by `gpumeter-synth`, kernels only), side by side with a bare `cuptiActivityGetNextRecord` walk of the
//! same buffer by the real libcupti 12.8 (through `cupti-sys`), the typed `decode` and the
//! columnar `decode_kernel_columns` (issue 34: the kernel records straight into reused columns);
//! then the full mix (the same kernels, each with its RUNTIME and EXTERNAL_CORRELATION record,
//! 3 M records) by the typed `decode` and by `decode_buffer_columns` (every family the meter
//! reads into reused columns), per record. Results and the command are in docs/PERFORMANCE.md.
//!
//! Run: `bindings/cupti/fetch-wheels.sh && . bindings/cupti/.wheels/env.sh &&
//! GPUMETER_CUPTI_LIB=$CUPTI12_LIB/libcupti.so.12 cargo bench --bench decode_cupti`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumeter::cupti::{
    decode, decode_buffer_columns, decode_kernel_columns, meter_buffer, ApiVersion, BufferColumns,
    CuptiOptions, KernelColumns, Walk,
};
use gpumeter::{Meter, MeterConfig};
use gpumeter_synth::SynthConfig;

const RECORDS: usize = 1_000_000;

/// 1 M kernel records (kernels only) of `gpumeter-synth` on one device's 4 streams, 10 000
/// launches/s, overlapping; 1 in 500 large.
fn buffer() -> Vec<u8> {
    gpumeter_synth::buffer(&SynthConfig {
        kernels: RECORDS as u64,
        devices: 1,
        external_correlation: false,
        api_records: false,
        ..SynthConfig::default()
    })
    .expect("the workload generates")
}

/// The same 1 M kernels as [`buffer`], each with its RUNTIME and EXTERNAL_CORRELATION record
/// (the full mix of the `pipeline` bench), and the records it holds.
fn full_mix() -> (Vec<u8>, u64) {
    let cfg = SynthConfig {
        kernels: RECORDS as u64,
        devices: 1,
        external_correlation: true,
        api_records: true,
        ..SynthConfig::default()
    };
    let buf = gpumeter_synth::buffer(&cfg).expect("the workload generates");
    (buf, cfg.records())
}

fn libcupti() -> Option<cupti_sys::Cupti> {
    cupti_sys::Cupti::load_from(gpumeter_synth::libcupti12_path()).ok()
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
    // The columns are reused across iterations, as across buffers on the hot path: only the
    // first iteration allocates them.
    let mut cols = KernelColumns::new();
    g.bench_function("columns_kernels", |b| {
        b.iter(|| {
            decode_kernel_columns(black_box(&buf), ApiVersion::Cupti12_8, &mut cols)
                .map(|c| c.kernels)
        })
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
    // The full mix, per record (kernels, RUNTIME and EXTERNAL_CORRELATION records together).
    drop(buf);
    let (mix, records) = full_mix();
    g.throughput(Throughput::Elements(records));
    g.bench_function("decode_full_mix", |b| {
        b.iter(|| decode(black_box(&mix), ApiVersion::Cupti12_8).map(|d| d.records.len()))
    });
    let mut all = BufferColumns::new();
    g.bench_function("columns_full_mix", |b| {
        b.iter(|| {
            decode_buffer_columns(black_box(&mix), ApiVersion::Cupti12_8, &mut all)
                .map(|c| c.records())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
