//! [`BufferColumns`] against the typed decoder: crafted buffers of every kind in every version
//! with every decoded field set, every truncation, random records and corrupted bytes. Real
//! buffers are compared in gpumeter-recording's `tests/columns.rs`, synthetic workloads in
//! gpumeter-synth's.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::columns::KernelRow;
use crate::decode::{decode, Record};

/// Every family's rows in order, the other records by kind, the trailing zero bytes.
#[derive(Debug, Default, PartialEq, Eq)]
struct Reduced {
    kernels: Vec<KernelRow>,
    copies: Vec<CopyRow>,
    sets: Vec<SetRow>,
    api: Vec<ApiRow>,
    external: Vec<ExternalRow>,
    other: BTreeMap<u32, u64>,
    tail: usize,
}

fn typed(buf: &[u8], api: ApiVersion) -> Result<Reduced, DecodeError> {
    let d = decode(buf, api)?;
    let mut out = Reduced {
        tail: d.trailing_zero_bytes,
        ..Reduced::default()
    };
    for r in &d.records {
        match &r.record {
            Record::Kernel(k) => out.kernels.push(k.into()),
            Record::Memcpy(m) => out.copies.push(m.into()),
            Record::PeerCopy(p) => out.copies.push(p.into()),
            Record::Memset(m) => out.sets.push(m.into()),
            Record::Api(a) => out.api.push(a.into()),
            Record::ExternalCorrelation(e) => out.external.push(e.into()),
            _ => *out.other.entry(r.kind.0).or_insert(0) += 1,
        }
    }
    Ok(out)
}

fn columnar(buf: &[u8], api: ApiVersion, cols: &mut BufferColumns) -> Result<Reduced, DecodeError> {
    let c = decode_buffer_columns(buf, api, cols)?;
    let rows = [c.kernels, c.copies, c.sets, c.api_records, c.external];
    let lengths = cols.lengths().map(|n| n as u64);
    assert_eq!(rows, lengths, "{api}: counts and rows differ");
    Ok(Reduced {
        kernels: cols.kernels.rows().collect(),
        copies: cols.copies.rows().collect(),
        sets: cols.sets.rows().collect(),
        api: cols.api.rows().collect(),
        external: cols.external.rows().collect(),
        other: c.skipped.iter().map(|(k, n)| (k.0, n)).collect(),
        tail: c.trailing_zero_bytes,
    })
}

/// Both decoders give the same rows and counts, or the same error (and then no row).
fn agree(buf: &[u8], api: ApiVersion) -> Result<Reduced, DecodeError> {
    let mut cols = BufferColumns::new();
    let got = columnar(buf, api, &mut cols);
    assert_eq!(got, typed(buf, api), "{api}, {} bytes", buf.len());
    if got.is_err() {
        assert!(cols.is_empty(), "{api}: rows left after an error");
    }
    got
}

/// A record of `kind` whose every decoded field holds a distinct byte pattern.
fn patterned(api: ApiVersion, kind: ActivityKind, seed: u8) -> Vec<u8> {
    let l = api
        .layouts()
        .into_iter()
        .find(|l| l.kind == kind)
        .unwrap_or_else(|| panic!("{api} has no {kind}"));
    let mut rec = vec![0xa5u8; l.size];
    for (i, f) in l.fields.iter().enumerate() {
        for j in 0..f.width {
            rec[f.offset + j] = seed.wrapping_mul(31).wrapping_add((17 * i + j + 1) as u8);
        }
    }
    rec[..4].copy_from_slice(&kind.0.to_le_bytes());
    rec
}

/// The kinds with columns.
const FAMILIES: [ActivityKind; 8] = [
    ActivityKind::KERNEL,
    ActivityKind::CONCURRENT_KERNEL,
    ActivityKind::MEMCPY,
    ActivityKind::MEMCPY2,
    ActivityKind::MEMSET,
    ActivityKind::DRIVER,
    ActivityKind::RUNTIME,
    ActivityKind::INTERNAL_LAUNCH_API,
];

/// Two patterned records of every kind each version defines, then a zeroed tail: every
/// family holds its rows, distinct, and every other record is counted by kind.
#[test]
fn every_kind_of_every_version_walks_alike() {
    for api in ApiVersion::ALL {
        let mut buf = Vec::new();
        for seed in [1u8, 2] {
            for l in api.layouts() {
                buf.extend(patterned(api, l.kind, seed.wrapping_add(l.kind.0 as u8)));
            }
        }
        buf.extend([0u8; 16]);
        let got = agree(&buf, api).expect("the buffer walks");
        assert_eq!(got.kernels.len(), 4, "{api}");
        assert_eq!(got.copies.len(), 4, "{api}");
        assert_eq!(got.sets.len(), 2, "{api}");
        assert_eq!(got.api.len(), 6, "{api}");
        assert_eq!(got.external.len(), 2, "{api}");
        assert_ne!(got.copies[0], got.copies[2], "{api}: the patterns differ");
        assert_ne!(got.api[0], got.api[3], "{api}: the patterns differ");
        assert_ne!(
            got.external[0], got.external[1],
            "{api}: the patterns differ"
        );
        let others = api.layouts().len() - FAMILIES.len() - 1;
        assert_eq!(
            got.other.values().sum::<u64>() as usize,
            2 * others,
            "{api}"
        );
        assert_eq!(got.tail, 16, "{api}");
    }
}

/// A buffer of every family cut at every byte gives the same error from both, or the same
/// rows; every cut but the record boundaries fails.
#[test]
fn every_truncation_fails_alike() {
    for api in ApiVersion::ALL {
        let mut buf = Vec::new();
        let kinds = FAMILIES.iter().chain([&ActivityKind::EXTERNAL_CORRELATION]);
        for (i, &k) in kinds.enumerate() {
            buf.extend(patterned(api, k, i as u8));
        }
        let mut errors = 0;
        for cut in 0..=buf.len() {
            errors += usize::from(agree(&buf[..cut], api).is_err());
        }
        assert_eq!(errors, buf.len() + 1 - (FAMILIES.len() + 2), "{api}");
    }
}

/// A failed buffer leaves every family's rows as they were; clearing keeps the capacity.
#[test]
fn an_error_adds_nothing_and_columns_are_reused() {
    let api = ApiVersion::Cupti13_4;
    let mut buf = Vec::new();
    for i in 0..20 {
        for k in FAMILIES.iter().chain([&ActivityKind::EXTERNAL_CORRELATION]) {
            buf.extend(patterned(api, *k, i));
        }
    }
    let mut cols = BufferColumns::new();
    decode_buffer_columns(&buf, api, &mut cols).expect("walks");
    let first = cols.clone();
    let at = (cols.api.start_ns.as_ptr(), cols.copies.bytes.as_ptr());
    decode_buffer_columns(&buf, api, &mut cols).expect("walks");
    assert_eq!(cols, first);
    let again = (cols.api.start_ns.as_ptr(), cols.copies.bytes.as_ptr());
    assert_eq!(again, at, "the columns were allocated again");

    let cut = &buf[..buf.len() - 1];
    let err = cols.extend_from_buffer(cut, api);
    assert!(matches!(err, Err(DecodeError::Truncated { .. })), "{err:?}");
    assert_eq!(cols, first, "a failed buffer changed the rows");
    assert_eq!(decode_buffer_columns(cut, api, &mut cols), err);
    assert!(cols.is_empty());
}

/// Random records: a kind of the version (the families most often) with random bytes after it.
fn records() -> impl Strategy<Value = (ApiVersion, Vec<u8>)> {
    (0..ApiVersion::ALL.len(), any::<u64>(), 0..40usize).prop_flat_map(|(v, seed, n)| {
        let api = ApiVersion::ALL[v];
        let kinds: Vec<ActivityKind> = api.layouts().iter().map(|l| l.kind).collect();
        let mut families = FAMILIES.to_vec();
        families.push(ActivityKind::EXTERNAL_CORRELATION);
        let pick = prop_oneof![
            3 => proptest::sample::select(families),
            1 => proptest::sample::select(kinds),
        ];
        prop::collection::vec(pick, n)
            .prop_map(move |ks| (api, crate::columns::tests::random_records(api, &ks, seed)))
    })
}

proptest! {
    /// Random records, cut anywhere, with a zeroed tail or a byte overwritten: the same rows
    /// and counts, or the same error.
    #[test]
    fn random_buffers_decode_alike(
        (api, buf) in records(),
        cut in any::<prop::sample::Index>(),
        tail in 0..20usize,
        poke in any::<Option<(prop::sample::Index, u8)>>(),
    ) {
        agree(&buf, api).expect("whole random records walk");
        agree(&buf[..cut.index(buf.len() + 1)], api).ok();
        let mut b = buf.clone();
        b.extend(vec![0; tail]);
        agree(&b, api).expect("a zeroed tail walks");
        if let Some((at, v)) = poke {
            if !b.is_empty() {
                let i = at.index(b.len());
                b[i] = v;
            }
            agree(&b, api).ok();
        }
    }
}
