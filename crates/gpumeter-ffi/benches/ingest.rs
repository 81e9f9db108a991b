//! Criterion bench `ingest` (issue 12, docs/C_ABI.md, "The hot path: gm_meter"; docs/PERFORMANCE.md, "Targets"): the C ABI's hot path,
//! `gm_meter_ingest_cupti_buffer`, against the Rust API it wraps (`CuptiStream::ingest` on a
//! `Meter`), on the same buffers, side by side in one run. Target: the C ABI within 5 % of the
//! Rust API. Each iteration makes a meter, ingests every buffer and frees the meter (no
//! report). Results and the command are in docs/PERFORMANCE.md.
//!
//! Run: `cargo bench -p gpumeter-ffi --bench ingest`

// criterion_group! generates an undocumented public function; the C ABI is called directly.
#![allow(missing_docs, unsafe_code)]

use std::ffi::CString;
use std::hint::black_box;
use std::path::PathBuf;
use std::ptr::null_mut;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gpumeter::core::{DeviceInfo, MeterConfig};
use gpumeter::cupti::replay::{Replay, ReplayItem};
use gpumeter::cupti::stream::CuptiStream;
use gpumeter::cupti::{decode, ApiVersion};
use gpumeter::Meter;
use gpumeter_ffi::{
    gm_device_info, gm_meter_free, gm_meter_ingest_cupti_buffer, gm_meter_new,
    gm_meter_register_device, gm_status_code,
};

/// Synthetic: 200 buffers of 1 000 CUPTI 12.8 kernel records (208 KB each) of `gpumeter-synth`
/// (kernels only, one device's 4 streams, overlapping; the first buffer opens with the DEVICE
/// record).
const SYN_BUFFERS: usize = 200;
const SYN_RECORDS: usize = 1_000;

fn synthetic() -> Vec<Vec<u8>> {
    let buffers = gpumeter_synth::buffers(&gpumeter_synth::SynthConfig {
        kernels: (SYN_BUFFERS * SYN_RECORDS) as u64,
        kernels_per_buffer: SYN_RECORDS as u64,
        devices: 1,
        external_correlation: false,
        api_records: false,
        ..gpumeter_synth::SynthConfig::default()
    })
    .expect("the workload generates");
    assert_eq!(buffers.len(), SYN_BUFFERS);
    buffers
}

/// The smoke recording's one buffer (628 KB, 13.0) cut at record boundaries into 48
/// buffers, and its device.
fn smoke() -> (ApiVersion, Vec<Vec<u8>>, DeviceInfo) {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/data/h200-cuda13-smoke.gmr");
    let bytes = std::fs::read(path).expect("the smoke recording");
    let replay = Replay::from_bytes("smoke", &bytes, ApiVersion::default()).expect("replay");
    let mut buffers = Vec::new();
    let mut device = None;
    for item in replay.items {
        match item {
            ReplayItem::Device(d) => {
                let mut info = DeviceInfo::bare("", d.id);
                info.name = d.name;
                info.uuid = d.uuid;
                info.sm_count = d.sm_count;
                info.compute_capability = d.compute_capability.and_then(|c| c.parse().ok());
                device = Some(info);
            }
            ReplayItem::Buffer(b) => {
                let d = decode(&b, replay.api).expect("decodes");
                let per = d.records.len().div_ceil(48);
                let mut from = 0;
                for chunk in d.records.chunks(per) {
                    let last = chunk.last().expect("a record");
                    let to = last.offset + last.size;
                    buffers.push(b[from..to].to_vec());
                    from = to;
                }
            }
            _ => {}
        }
    }
    (replay.api, buffers, device.expect("a device"))
}

fn via_rust(api: ApiVersion, buffers: &[Vec<u8>], device: Option<&DeviceInfo>) -> u64 {
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = CuptiStream::new("gm_meter", api);
    if let Some(d) = device {
        stream
            .register_device(&mut meter, d.clone())
            .expect("one device");
    }
    for b in buffers {
        stream
            .ingest(&mut meter, black_box(b))
            .expect("the buffer decodes");
    }
    stream.buffers()
}

fn via_c_abi(config: &CString, buffers: &[Vec<u8>], device: Option<&gm_device_info>) -> u64 {
    let mut m = null_mut();
    // SAFETY: a NUL-terminated config and a writable out-pointer.
    let s = unsafe { gm_meter_new(config.as_ptr(), &mut m) };
    assert_eq!(s, gm_status_code::GM_OK as u32);
    if let Some(d) = device {
        // SAFETY: a live meter and a description whose strings outlive the call.
        let s = unsafe { gm_meter_register_device(m, d) };
        assert_eq!(s, gm_status_code::GM_OK as u32);
    }
    for b in buffers {
        let b = black_box(b);
        // SAFETY: a live meter and `b.len()` readable bytes.
        let s = unsafe { gm_meter_ingest_cupti_buffer(m, b.as_ptr(), b.len()) };
        assert_eq!(s, gm_status_code::GM_OK as u32);
    }
    // SAFETY: the meter from `gm_meter_new`, freed once.
    unsafe { gm_meter_free(m) };
    buffers.len() as u64
}

fn bench(c: &mut Criterion) {
    let syn = synthetic();
    let mut g = c.benchmark_group("ingest_synthetic_12_8");
    g.sample_size(10);
    g.throughput(Throughput::Elements((SYN_BUFFERS * SYN_RECORDS) as u64));
    let config = CString::new(r#"{"cupti_api_version": 26}"#).expect("config");
    g.bench_function("rust_cupti_stream", |b| {
        b.iter(|| via_rust(ApiVersion::Cupti12_8, &syn, None))
    });
    g.bench_function("c_abi", |b| b.iter(|| via_c_abi(&config, &syn, None)));
    g.finish();

    let (api, buffers, device) = smoke();
    let records: usize = buffers
        .iter()
        .map(|b| decode(b, api).map_or(0, |d| d.records.len()))
        .sum();
    let name = CString::new(device.name.clone().unwrap_or_default()).expect("name");
    let uuid = CString::new(device.uuid.clone().unwrap_or_default()).expect("uuid");
    let (cc_major, cc_minor) = device
        .compute_capability
        .map_or((0, 0), |c| (c.major, c.minor));
    let info = gm_device_info {
        name: name.as_ptr(),
        uuid: uuid.as_ptr(),
        sm_count: device.sm_count.unwrap_or(0),
        cc_major,
        cc_minor,
        ..gm_device_info::new(device.id)
    };
    let config = CString::new(format!(
        r#"{{"cupti_api_version": {}}}"#,
        api.cupti_api_version()
    ))
    .expect("config");
    let mut g = c.benchmark_group("ingest_smoke_h200");
    g.sample_size(20);
    g.throughput(Throughput::Elements(records as u64));
    g.bench_function("rust_cupti_stream", |b| {
        b.iter(|| via_rust(api, &buffers, Some(&device)))
    });
    g.bench_function("c_abi", |b| {
        b.iter(|| via_c_abi(&config, &buffers, Some(&info)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
