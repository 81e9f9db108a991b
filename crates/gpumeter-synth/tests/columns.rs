//! gpumeter-cupti's columnar kernel decoder ([`decode_kernel_columns`], issue 34) against its
//! typed decoder over random synthetic workloads (kernels with their RUNTIME and
//! EXTERNAL_CORRELATION records, several devices and streams, CUPTI 12.8): the same kernel rows
//! field by field and in order, the same counts of the other kinds, and the same error for a
//! buffer cut at any byte.

use std::collections::BTreeMap;

use gpumeter_cupti::{
    decode, decode_kernel_columns, DecodeError, KernelColumns, KernelRow, Record,
};
use gpumeter_synth::{SynthConfig, API};
use proptest::prelude::*;

type Reduced = (Vec<KernelRow>, BTreeMap<u32, u64>, usize);

fn typed(buf: &[u8]) -> Result<Reduced, DecodeError> {
    let d = decode(buf, API)?;
    let mut rows = Vec::new();
    let mut other = BTreeMap::new();
    for r in &d.records {
        match &r.record {
            Record::Kernel(k) => rows.push(KernelRow::from(k)),
            _ => *other.entry(r.kind.0).or_insert(0) += 1,
        }
    }
    Ok((rows, other, d.trailing_zero_bytes))
}

/// The columns of `buf`, decoded into `cols` (reused across calls, as on the hot path).
fn columnar(buf: &[u8], cols: &mut KernelColumns) -> Result<Reduced, DecodeError> {
    let c = decode_kernel_columns(buf, API, cols)?;
    assert_eq!(c.kernels, cols.len() as u64);
    let other = c.skipped.iter().map(|(k, n)| (k.0, n)).collect();
    Ok((cols.rows().collect(), other, c.trailing_zero_bytes))
}

fn workload() -> impl Strategy<Value = SynthConfig> {
    (
        1..400u64,
        1..4u32,
        1..6u32,
        1..5u32,
        any::<u64>(),
        1..200u64,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(kernels, devices, streams, tenants, seed, per_buffer, ext, api)| SynthConfig {
                kernels,
                devices,
                streams,
                tenants,
                processes: tenants,
                seed,
                kernels_per_buffer: per_buffer,
                external_correlation: ext,
                api_records: api,
                ..SynthConfig::default()
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every buffer of a random workload, whole and cut at random bytes.
    #[test]
    fn synthetic_buffers_decode_alike(
        cfg in workload(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 1..8),
    ) {
        let buffers = gpumeter_synth::buffers(&cfg).expect("the workload generates");
        let mut cols = KernelColumns::new();
        let mut kernels = 0u64;
        for buf in &buffers {
            let got = columnar(buf, &mut cols);
            prop_assert_eq!(&got, &typed(buf));
            kernels += got.expect("a synthetic buffer walks").0.len() as u64;
            for cut in &cuts {
                let b = &buf[..cut.index(buf.len() + 1)];
                prop_assert_eq!(columnar(b, &mut cols), typed(b));
            }
        }
        prop_assert_eq!(kernels, cfg.kernels);
    }
}

/// One small workload cut at every byte: the same error (or records) from both decoders.
#[test]
fn a_synthetic_buffer_cut_at_every_byte_fails_alike() {
    let cfg = SynthConfig {
        kernels: 6,
        devices: 2,
        ..SynthConfig::default()
    };
    let buf = gpumeter_synth::buffer(&cfg).expect("the workload generates");
    let mut cols = KernelColumns::new();
    let mut errors = 0;
    for cut in 0..=buf.len() {
        let got = columnar(&buf[..cut], &mut cols);
        assert_eq!(got, typed(&buf[..cut]), "cut at {cut}");
        errors += usize::from(got.is_err());
    }
    // Only the cuts at record boundaries walk: 2 DEVICE records and 3 per launch, plus 0.
    let records = cfg.records() as usize;
    assert_eq!(errors, buf.len() + 1 - (records + 1));
}
