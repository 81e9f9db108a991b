//! gpumeter-cupti's columnar decoders ([`decode_kernel_columns`]; [`decode_buffer_columns`], every
//! family; issue 34) against its typed decoder over random synthetic workloads (kernels with
//! their RUNTIME and EXTERNAL_CORRELATION records, the full mix, several devices and streams,
//! CUPTI 12.8): the same rows field by field and in order, the same counts of the other kinds,
//! and the same error for a buffer cut at any byte.

use std::collections::BTreeMap;

use gpumeter_cupti::{
    decode, decode_buffer_columns, decode_kernel_columns, ApiRow, BufferColumns, DecodeError,
    ExternalRow, KernelColumns, KernelRow, Record,
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

/// The kernel, API and external-correlation rows in order (the families a synthetic workload
/// makes), the other records by kind, the trailing zero bytes.
type Mix = (
    Vec<KernelRow>,
    Vec<ApiRow>,
    Vec<ExternalRow>,
    BTreeMap<u32, u64>,
    usize,
);

fn typed_mix(buf: &[u8]) -> Result<Mix, DecodeError> {
    let d = decode(buf, API)?;
    let mut mix = Mix::default();
    for r in &d.records {
        match &r.record {
            Record::Kernel(k) => mix.0.push(k.into()),
            Record::Api(a) => mix.1.push(a.into()),
            Record::ExternalCorrelation(e) => mix.2.push(e.into()),
            _ => *mix.3.entry(r.kind.0).or_insert(0) += 1,
        }
    }
    mix.4 = d.trailing_zero_bytes;
    Ok(mix)
}

/// Every family of `buf`, decoded into `cols` (reused across calls); a synthetic workload has
/// no copy or memset, so those families stay empty.
fn columnar_mix(buf: &[u8], cols: &mut BufferColumns) -> Result<Mix, DecodeError> {
    let got = decode_buffer_columns(buf, API, cols);
    let c = match got {
        Ok(c) => c,
        Err(e) => {
            assert!(cols.is_empty(), "rows left after an error");
            return Err(e);
        }
    };
    assert_eq!(
        (c.kernels, c.api_records, c.external),
        (
            cols.kernels.len() as u64,
            cols.api.len() as u64,
            cols.external.len() as u64
        )
    );
    assert!(cols.copies.is_empty() && cols.sets.is_empty());
    let other = c.skipped.iter().map(|(k, n)| (k.0, n)).collect();
    Ok((
        cols.kernels.rows().collect(),
        cols.api.rows().collect(),
        cols.external.rows().collect(),
        other,
        c.trailing_zero_bytes,
    ))
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

    /// The full mix (every kernel with its RUNTIME and EXTERNAL_CORRELATION records, as the
    /// `pipeline` bench's): every buffer, whole and cut at random bytes, into every family.
    #[test]
    fn synthetic_full_mix_decodes_alike_into_every_family(
        cfg in workload().prop_map(|c| SynthConfig { external_correlation: true, api_records: true, ..c }),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 1..8),
    ) {
        let buffers = gpumeter_synth::buffers(&cfg).expect("the workload generates");
        let mut cols = BufferColumns::new();
        let (mut kernels, mut api, mut external) = (0u64, 0u64, 0u64);
        for buf in &buffers {
            let got = columnar_mix(buf, &mut cols);
            prop_assert_eq!(&got, &typed_mix(buf));
            let (k, a, e, _, _) = got.expect("a synthetic buffer walks");
            kernels += k.len() as u64;
            api += a.len() as u64;
            external += e.len() as u64;
            for cut in &cuts {
                let b = &buf[..cut.index(buf.len() + 1)];
                prop_assert_eq!(columnar_mix(b, &mut cols), typed_mix(b));
            }
        }
        prop_assert_eq!((kernels, api, external), (cfg.kernels, cfg.kernels, cfg.kernels));
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
    let mut all = BufferColumns::new();
    let mut errors = 0;
    for cut in 0..=buf.len() {
        let got = columnar(&buf[..cut], &mut cols);
        assert_eq!(got, typed(&buf[..cut]), "cut at {cut}");
        let mix = columnar_mix(&buf[..cut], &mut all);
        assert_eq!(mix, typed_mix(&buf[..cut]), "cut at {cut}");
        assert_eq!(mix.is_err(), got.is_err(), "cut at {cut}");
        errors += usize::from(got.is_err());
    }
    // Only the cuts at record boundaries walk: 2 DEVICE records and 3 per launch, plus 0.
    let records = cfg.records() as usize;
    assert_eq!(errors, buf.len() + 1 - (records + 1));
}
