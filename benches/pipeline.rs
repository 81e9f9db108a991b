//! Criterion bench `pipeline` (issue 13 "Deliver 3", docs/PERFORMANCE.md, "Targets"): every stage of metering a
//! CUPTI 12.8 workload, side by side in one group of one run, on the same bytes, so that their
//! ratios come from one run on one machine state:
//!
//! | function | what |
//! |---|---|
//! | `libcupti_walk` | libcupti 12.8's own `cuptiActivityGetNextRecord` loop over the buffer (through `cupti-sys`; it also pushes each record's kind and offset) |
//! | `walk` | our walk: [`Walk`], the decoder's record iteration, nothing collected (the lowest level the decoder offers: it builds each typed record) |
//! | `decode` | [`decode`]: every record built and collected |
//! | `decode_and_meter` | the in-memory path of the collector and the C ABI: a [`CuptiStream`] ingests the workload's activity buffers into a [`Meter`], then a snapshot report |
//! | `decode_and_meter_typed` | the same through the typed path ([`CuptiStream::prepare_typed`]: every record decoded, joined and converted one by one), the reference for the columnar path |
//! | `file_cupti` | the CLI's path, [`gpumeter::meter_inputs`] on the raw buffer written to a temp file (read, SHA-256, decode, meter, report) |
//! | `file_gmr` | the same on the workload as a `.gmr` recording |
//!
//! The workload is `gpumeter-synth`'s default: 1 M kernel launches (2 devices × 4 streams,
//! overlapping; 8 tenants through EXTERNAL_CORRELATION records, 4 processes through RUNTIME
//! records; 3 M records, 272 MB). Throughput is in *kernel records* per second
//! (`Throughput::Elements` = launches); each launch is 3 records.
//!
//! Environment: `GPUMETER_BENCH_KERNELS` (default 1000000; 10000000 for the 10 M figure),
//! `GPUMETER_BENCH_KERNELS_ONLY=1` (kernel records only, no EXTERNAL_CORRELATION or RUNTIME
//! records), `GPUMETER_CUPTI_LIB` (libcupti 12.8; else `$CUPTI12_LIB`, else the wheel of
//! `bindings/cupti/fetch-wheels.sh`). Without libcupti the `libcupti_walk` row is missing and a
//! notice says so.
//!
//! Run: `bindings/cupti/fetch-wheels.sh && . bindings/cupti/.wheels/env.sh &&
//! cargo bench --bench pipeline`. Results and their commands are in docs/PERFORMANCE.md.

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumeter::cupti::stream::CuptiStream;
use gpumeter::cupti::{decode, ApiVersion, Walk};
use gpumeter::{meter_inputs, Meter, MeterConfig, UsageOptions};
use gpumeter_synth::{buffer, buffers, libcupti12_path, write_gmr, write_raw, SynthConfig};

fn config() -> SynthConfig {
    let kernels = std::env::var("GPUMETER_BENCH_KERNELS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let only = std::env::var("GPUMETER_BENCH_KERNELS_ONLY").as_deref() == Ok("1");
    SynthConfig {
        kernels,
        external_correlation: !only,
        api_records: !only,
        ..SynthConfig::default()
    }
}

fn bench(c: &mut Criterion) {
    let cfg = config();
    let api = ApiVersion::Cupti12_8;
    let buf = buffer(&cfg).expect("the workload generates");
    let pieces = buffers(&cfg).expect("the workload generates");
    let dir = tempfile::tempdir().expect("a temp dir");
    let raw = dir.path().join("pipeline.cupti");
    let gmr = dir.path().join("pipeline.gmr");
    let file = |p: &std::path::Path| {
        std::io::BufWriter::new(std::fs::File::create(p).expect("a temp file"))
    };
    write_raw(&cfg, file(&raw)).expect("writes the raw buffer");
    write_gmr(&cfg, file(&gmr)).expect("writes the .gmr");
    eprintln!(
        "pipeline: {} kernels, {} records, {} bytes, {} buffers",
        cfg.kernels,
        cfg.records(),
        buf.len(),
        pieces.len()
    );

    let mut g = c.benchmark_group("pipeline");
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(cfg.kernels));

    let path = libcupti12_path();
    match cupti_sys::Cupti::load_from(&path) {
        Ok(cupti) => {
            let mut copy = buf.clone();
            let len = copy.len();
            g.bench_function("libcupti_walk", |b| {
                b.iter(|| {
                    let walk = cupti.walk_activity_buffer(black_box(&mut copy), len);
                    walk.map(|w| w.records.len()).unwrap_or(0)
                })
            });
        }
        Err(e) => eprintln!(
            "notice: libcupti 12.8 not loadable at {} ({e}): no libcupti_walk row; run \
             bindings/cupti/fetch-wheels.sh or set GPUMETER_CUPTI_LIB",
            path.display()
        ),
    }
    g.bench_function("walk", |b| {
        b.iter(|| {
            Walk::new(black_box(&buf), api)
                .filter(Result::is_ok)
                .count()
        })
    });
    g.bench_function("decode", |b| {
        b.iter(|| decode(black_box(&buf), api).map(|d| d.records.len()))
    });
    g.bench_function("decode_and_meter", |b| {
        b.iter(|| {
            let mut meter = Meter::new(MeterConfig::default());
            let mut stream = CuptiStream::new("pipeline", api);
            for p in &pieces {
                stream
                    .ingest(&mut meter, black_box(p))
                    .expect("the buffer decodes");
            }
            stream.snapshot(&mut meter).map(|r| r.usage.len())
        })
    });
    g.bench_function("decode_and_meter_typed", |b| {
        b.iter(|| {
            let mut meter = Meter::new(MeterConfig::default());
            let mut stream = CuptiStream::new("pipeline", api);
            for p in &pieces {
                let prepared =
                    CuptiStream::prepare_typed(api, black_box(p)).expect("the buffer decodes");
                stream.apply(&mut meter, prepared);
            }
            stream.snapshot(&mut meter).map(|r| r.usage.len())
        })
    });
    for (name, input) in [("file_cupti", &raw), ("file_gmr", &gmr)] {
        let inputs = [input.clone()];
        g.bench_function(name, |b| {
            b.iter(|| {
                meter_inputs(black_box(&inputs), &UsageOptions::default())
                    .map(|r| r.usage.len())
                    .expect("meters")
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
