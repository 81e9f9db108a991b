use super::*;
use proptest::prelude::*;

/// Each sample's flags masked to `mask`; with `zeroed`, its reserved field and the counters
/// whose presence flag is clear written 0, as the format says.
fn shaped(samples: &[[u8; PM_SAMPLE_LEN]], mask: u32, zeroed: bool) -> Vec<[u8; PM_SAMPLE_LEN]> {
    samples
        .iter()
        .map(|s| {
            let mut s = *s;
            let flags = u32::from_le_bytes([s[0], s[1], s[2], s[3]]) & mask;
            s[..4].copy_from_slice(&flags.to_le_bytes());
            if zeroed {
                s[4..8].fill(0);
                for (i, bit) in PM_COUNTER_FLAGS.iter().enumerate() {
                    if flags & bit == 0 {
                        s[24 + 8 * i..32 + 8 * i].fill(0);
                    }
                }
            }
            s
        })
        .collect()
}

/// The presence flags of the four counters, in their order in a sample.
const PM_COUNTER_FLAGS: [u32; 4] = [
    PM_FLAG_SM_ACTIVE,
    PM_FLAG_SM_ELAPSED,
    PM_FLAG_DRAM_READ,
    PM_FLAG_DRAM_WRITE,
];

/// A PM-samples payload of `count` (as written) and the 56-byte `samples`.
fn payload(count: u32, samples: &[[u8; PM_SAMPLE_LEN]]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&3u32.to_le_bytes());
    p.extend_from_slice(&count.to_le_bytes());
    for s in samples {
        p.extend_from_slice(s);
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any bytes as a type-9 payload: an error or samples, never a panic, and never an
    /// allocation sized by a count the payload does not hold.
    #[test]
    fn pm_payload_of_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        match parse_payload(T_PM_SAMPLES, &bytes) {
            Ok(Some(Frame::PmSamples(p))) => {
                prop_assert_eq!(bytes.len(), 8 + PM_SAMPLE_LEN * p.samples.len());
            }
            Ok(other) => prop_assert!(false, "{:?}", other),
            Err(_) => {}
        }
    }

    /// Well-sized payloads: parsed exactly when the count matches, no unknown flag bit is
    /// set, the reserved field is 0 and so is every counter whose presence flag is clear;
    /// each field read from its place.
    #[test]
    fn pm_payload_parses_exactly_the_valid_ones(
        raw in proptest::collection::vec(any::<[u8; PM_SAMPLE_LEN]>(), 0..6),
        off_by in prop_oneof![Just(0i64), -2i64..3],
        known_only in any::<bool>(),
        zeroed in prop_oneof![3 => Just(true), 1 => Just(false)],
    ) {
        let mask = if known_only { PM_FLAGS_KNOWN } else { u32::MAX };
        let samples = shaped(&raw, mask, zeroed);
        let count = (samples.len() as i64 + off_by).max(0) as u32;
        let p = payload(count, &samples);
        let flags_of = |s: &[u8; PM_SAMPLE_LEN]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        let word = |s: &[u8; PM_SAMPLE_LEN], i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&s[8 + 8 * i..16 + 8 * i]);
            u64::from_le_bytes(b)
        };
        let unknown = samples.iter().any(|s| flags_of(s) & !PM_FLAGS_KNOWN != 0);
        let stray = samples.iter().any(|s| {
            s[4..8] != [0; 4]
                || PM_COUNTER_FLAGS
                    .iter()
                    .enumerate()
                    .any(|(i, bit)| flags_of(s) & bit == 0 && word(s, 2 + i) != 0)
        });
        let got = parse_payload(T_PM_SAMPLES, &p);
        let valid = count as usize == samples.len() && !unknown && !stray;
        prop_assert_eq!(got.is_ok(), valid, "{:?}", got);
        if let Ok(Some(Frame::PmSamples(pm))) = got {
            prop_assert_eq!(pm.device_id, 3);
            prop_assert_eq!(pm.samples.len(), samples.len());
            for (x, s) in pm.samples.iter().zip(&samples) {
                let flags = flags_of(s);
                prop_assert_eq!(x.overflow, flags & PM_FLAG_OVERFLOW != 0);
                prop_assert_eq!((x.start_ns, x.end_ns), (word(s, 0), word(s, 1)));
                let has = |bit: u32, i: usize| (flags & bit != 0).then(|| word(s, i));
                prop_assert_eq!(x.sm_active_cycles, has(PM_FLAG_SM_ACTIVE, 2));
                prop_assert_eq!(x.sm_elapsed_cycles, has(PM_FLAG_SM_ELAPSED, 3));
                prop_assert_eq!(x.dram_read_bytes, has(PM_FLAG_DRAM_READ, 4));
                prop_assert_eq!(x.dram_write_bytes, has(PM_FLAG_DRAM_WRITE, 5));
            }
        }
    }
}

/// The header's `labels`: absent from the JSON when empty (recordings without labels are
/// byte-identical to before), read back when present, and empty for a header without the key.
#[test]
fn header_labels_are_omitted_when_empty_and_round_trip() {
    let plain = GmrHeader {
        cupti_api_version: 26,
        process_id: 7,
        ..GmrHeader::default()
    };
    let json = serde_json::to_string(&plain).expect("serializes");
    assert!(!json.contains("labels"), "{json}");

    let mut labelled = plain.clone();
    labelled
        .labels
        .insert("POD_NAMESPACE".to_string(), "team-a".to_string());
    labelled
        .labels
        .insert("cgroup".to_string(), "/kubepods.slice/x".to_string());
    let mut bytes = Vec::new();
    GmrWriter::new(&mut bytes, &labelled)
        .and_then(GmrWriter::finish)
        .expect("writes");
    let back = read_gmr(&bytes).expect("reads");
    assert_eq!(back.header, labelled);

    let older: GmrHeader =
        serde_json::from_str(r#"{"cupti_api_version":26,"process_id":7}"#).expect("reads");
    assert!(older.labels.is_empty());
    assert_eq!(older, plain);
}
