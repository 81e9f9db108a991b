//! The columns against the typed decoder: crafted buffers of every kind in every version, every
//! truncation, random records and corrupted bytes. Real buffers (the H200 recordings) are
//! compared in gpumeter-recording's tests (`tests/columns.rs`), synthetic workloads in
//! gpumeter-synth's.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;
use crate::decode::{decode, Record};

/// What the typed decoder says of `buf`, reduced to what the columns keep: the kernel rows in
/// order, the other records by kind, the trailing zero bytes.
type Reduced = (Vec<KernelRow>, BTreeMap<u32, u64>, usize);

fn typed(buf: &[u8], api: ApiVersion) -> Result<Reduced, DecodeError> {
    let d = decode(buf, api)?;
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

fn columnar(buf: &[u8], api: ApiVersion, cols: &mut KernelColumns) -> Result<Reduced, DecodeError> {
    let counts = decode_kernel_columns(buf, api, cols)?;
    assert_eq!(counts.kernels, cols.len() as u64);
    let other = counts.skipped.iter().map(|(k, n)| (k.0, n)).collect();
    Ok((cols.rows().collect(), other, counts.trailing_zero_bytes))
}

/// Both decoders give the same rows and counts, or the same error; returns the rows.
fn agree(buf: &[u8], api: ApiVersion) -> Result<Reduced, DecodeError> {
    let mut cols = KernelColumns::new();
    let got = columnar(buf, api, &mut cols);
    assert_eq!(got, typed(buf, api), "{api}, {} bytes", buf.len());
    if got.is_err() {
        assert!(cols.is_empty(), "{api}: rows left after an error");
    }
    got
}

fn layout(api: ApiVersion, kind: ActivityKind) -> crate::layout::KindLayout {
    api.layouts()
        .into_iter()
        .find(|l| l.kind == kind)
        .unwrap_or_else(|| panic!("{api} has no {kind}"))
}

/// A kernel record of `kind` whose every decoded field holds a distinct byte pattern.
fn patterned_kernel(api: ApiVersion, kind: ActivityKind, seed: u8) -> Vec<u8> {
    let l = layout(api, kind);
    let mut rec = vec![0u8; l.size];
    for (i, f) in l.fields.iter().enumerate().skip(1) {
        for j in 0..f.width {
            rec[f.offset + j] = seed.wrapping_mul(31).wrapping_add((17 * i + j + 1) as u8);
        }
    }
    rec[..4].copy_from_slice(&kind.0.to_le_bytes());
    rec
}

/// One record of every kind each version defines, kernels with every field set, then a zeroed
/// tail: the columns hold the two kernels, every other record is counted by its kind.
#[test]
fn every_kind_of_every_version_walks_alike() {
    for api in ApiVersion::ALL {
        let mut buf = Vec::new();
        for l in api.layouts() {
            match l.kind {
                ActivityKind::KERNEL | ActivityKind::CONCURRENT_KERNEL => {
                    buf.extend(patterned_kernel(api, l.kind, l.kind.0 as u8));
                }
                _ => buf.extend(vec![0xa5; l.size].iter().enumerate().map(|(i, &b)| {
                    // The kind, then non-zero filler.
                    l.kind.0.to_le_bytes().get(i).copied().unwrap_or(b)
                })),
            }
        }
        buf.extend([0u8; 24]);
        let (rows, other, tail) = agree(&buf, api).expect("the buffer walks");
        assert_eq!(rows.len(), 2, "{api}");
        assert_ne!(rows[0], rows[1], "{api}: the patterns differ");
        assert_eq!(
            other.values().sum::<u64>() as usize,
            api.layouts().len() - 2
        );
        assert_eq!(tail, 24, "{api}");
    }
}

/// Every kind that has a size fits [`KindCounts`].
#[test]
fn every_sized_kind_has_a_count_slot() {
    for api in ApiVersion::ALL {
        for k in (KIND_SLOTS as u32..=4096).chain([u32::MAX]) {
            assert_eq!(api.record_size(ActivityKind(k)), None, "{api} kind {k}");
        }
    }
}

/// A buffer cut at every byte gives the same error from both, or the same records.
#[test]
fn every_truncation_fails_alike() {
    for api in ApiVersion::ALL {
        let mut buf = patterned_kernel(api, ActivityKind::CONCURRENT_KERNEL, 1);
        buf.extend(
            layout(api, ActivityKind::RUNTIME)
                .encode(&[])
                .expect("RUNTIME"),
        );
        buf.extend(patterned_kernel(api, ActivityKind::KERNEL, 2));
        let mut errors = 0;
        for cut in 0..=buf.len() {
            errors += usize::from(agree(&buf[..cut], api).is_err());
        }
        // Every cut but the empty buffer and the three record boundaries is an error.
        assert_eq!(errors, buf.len() + 1 - 4, "{api}");
    }
}

/// The columns keep their capacity across buffers (no allocation for a buffer no larger than
/// one before), and a buffer that fails leaves the rows added before it.
#[test]
fn columns_are_reused_and_an_error_adds_nothing() {
    let api = ApiVersion::Cupti13_0;
    let buf: Vec<u8> = (0..50)
        .flat_map(|i| patterned_kernel(api, ActivityKind::CONCURRENT_KERNEL, i))
        .collect();
    let mut cols = KernelColumns::new();
    decode_kernel_columns(&buf, api, &mut cols).expect("walks");
    let first = cols.clone();
    let at = (
        cols.start_ns.as_ptr(),
        cols.grid.as_ptr(),
        cols.name_ptr.as_ptr(),
    );
    decode_kernel_columns(&buf, api, &mut cols).expect("walks");
    assert_eq!(cols, first);
    let again = (
        cols.start_ns.as_ptr(),
        cols.grid.as_ptr(),
        cols.name_ptr.as_ptr(),
    );
    assert_eq!(again, at, "the columns were allocated again");

    let cut = &buf[..buf.len() - 1];
    let err = cols.extend_from_buffer(cut, api);
    assert!(matches!(err, Err(DecodeError::Truncated { .. })), "{err:?}");
    assert_eq!(cols, first, "a failed buffer changed the rows");
    assert_eq!(decode_kernel_columns(cut, api, &mut cols), err);
    assert!(cols.is_empty());
}

/// Records of `kinds`, in order, each its version's size, filled after its kind with bytes of
/// a xorshift64 generator seeded with `seed` (cheap and deterministic).
pub(crate) fn random_records(api: ApiVersion, kinds: &[ActivityKind], seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut buf = Vec::new();
    for k in kinds {
        let size = api.record_size(*k).unwrap_or(0);
        buf.extend(k.0.to_le_bytes());
        buf.extend((4..size).map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        }));
    }
    buf
}

/// Random records: a kind of the version (kernels most often) with random bytes after it.
fn records() -> impl Strategy<Value = (ApiVersion, Vec<u8>)> {
    (0..ApiVersion::ALL.len(), any::<u64>(), 0..40usize).prop_flat_map(|(v, seed, n)| {
        let api = ApiVersion::ALL[v];
        let kinds: Vec<ActivityKind> = api.layouts().iter().map(|l| l.kind).collect();
        let pick = prop_oneof![
            3 => Just(ActivityKind::CONCURRENT_KERNEL),
            1 => Just(ActivityKind::KERNEL),
            2 => proptest::sample::select(kinds),
        ];
        prop::collection::vec(pick, n).prop_map(move |ks| (api, random_records(api, &ks, seed)))
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

    /// Arbitrary bytes: the same answer from both.
    #[test]
    fn arbitrary_bytes_decode_alike(
        v in 0..ApiVersion::ALL.len(),
        head in prop::sample::select(vec![0u32, 1, 3, 5, 10, 39, 55, 60, 1000]),
        bytes in prop::collection::vec(any::<u8>(), 0..700),
    ) {
        let mut b = head.to_le_bytes().to_vec();
        b.extend(bytes);
        agree(&b, ApiVersion::ALL[v]).ok();
    }
}
