//! Criterion bench `import_and_meter`: read, decode and meter the largest shared traces
//! (../shared/data), end to end through the facade. Results and the command are in
//! docs/PERFORMANCE.md.
//!
//! Run: `cargo bench --bench import_and_meter`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumeter::{meter_inputs, UsageOptions};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(name)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("import_and_meter");
    g.sample_size(20);
    for name in [
        "tracelens_b200_eager_trace.json.gz",
        "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    ] {
        let path = data(name);
        let Ok(meta) = std::fs::metadata(&path) else {
            eprintln!("skipping {name}: ../shared/data is not beside the project");
            continue;
        };
        g.throughput(Throughput::Bytes(meta.len()));
        let inputs = [path];
        g.bench_function(name, |b| {
            b.iter(|| {
                let r = meter_inputs(&inputs, &UsageOptions::default());
                assert!(r.is_ok());
                r
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
