//! The events' unit tests: idempotency keys, the mapping's checks, refused reports.

use super::*;
use gpumeter_core::{DeviceEntry, Quantity, TotalRow, UsageRow};

fn key(parts: [&str; 6]) -> String {
    let seconds: u64 = parts[3].parse().expect("seconds");
    idempotency_key(parts[0], parts[1], parts[2], seconds, parts[4], parts[5]).expect("key")
}

const BASE: [&str; 6] = [
    "alice",
    "GPU-1",
    "2026-12-01T00:00:00Z",
    "3600",
    "kernel_ns",
    "v1",
];

#[test]
fn the_key_is_sha256_of_the_canonical_array() {
    let k = key(BASE);
    let expected = hex::encode(Sha256::digest(
        br#"["alice","GPU-1","2026-12-01T00:00:00Z","3600","kernel_ns","v1"]"#,
    ));
    assert_eq!(k, expected);
    assert_eq!(k.len(), 64);
}

/// Item 13 of issue 30: the window size is part of the key, so a 1 h and a 30 min run of
/// one trace (whose first windows start at the same instant) never share an id; before,
/// the key was `[tenant, device, start, meter, policy]` and they did.
#[test]
fn each_part_changes_the_key_and_equal_parts_give_equal_keys() {
    let other = [
        "bob",
        "GPU-2",
        "2026-12-01T01:00:00Z",
        "1800",
        "sm_ns",
        "v2",
    ];
    let k = key(BASE);
    assert_eq!(k, key(BASE));
    for i in 0..6 {
        let mut p = BASE;
        p[i] = other[i];
        assert_ne!(key(p), k, "changing part {i}");
    }
    // Boundaries are part of the encoding: moving a character between parts changes it.
    assert_ne!(
        key(["ab", "c", "t", "60", "m", "v1"]),
        key(["a", "bc", "t", "60", "m", "v1"])
    );
    assert_ne!(
        key(["a\",\"b", "c", "t", "60", "m", "v1"]),
        key(["a", "b\",\"c", "t", "60", "m", "v1"])
    );
}

/// A sealed report of one row per `(tenant, window_start, meter, quantity)` on device
/// GPU-1 (132 SMs), windows of `window_seconds`, with its totals.
fn report_of(window_seconds: u64, rows: &[(&str, &str, MeterKind, u128)]) -> UsageReport {
    let device = DeviceEntry {
        device: 0,
        device_key: "GPU-1".into(),
        name: None,
        sm_count: Some(132),
        compute_capability: None,
        not_meterable: Vec::new(),
    };
    let usage: Vec<UsageRow> = rows
        .iter()
        .map(|&(tenant, window_start, meter, q)| UsageRow {
            tenant: tenant.into(),
            device: 0,
            device_key: "GPU-1".into(),
            window_start: window_start.into(),
            meter,
            quantity: Quantity(q),
        })
        .collect();
    let mut sums: BTreeMap<(String, MeterKind), u128> = BTreeMap::new();
    for u in &usage {
        *sums.entry((u.tenant.clone(), u.meter)).or_insert(0) += u.quantity.0;
    }
    let totals = sums
        .into_iter()
        .map(|((tenant, meter), q)| TotalRow {
            tenant,
            device: 0,
            device_key: "GPU-1".into(),
            meter,
            quantity: Quantity(q),
        })
        .collect();
    let mut r = UsageReport {
        schema: gpumeter_core::USAGE_SCHEMA.into(),
        metering_policy: "v1".into(),
        window_seconds,
        complete: Some(true),
        sources: Vec::new(),
        devices: vec![device],
        records: gpumeter_core::RecordCounts::default(),
        loss: Vec::new(),
        usage,
        totals,
        open_allocations: Vec::new(),
        warnings: Vec::new(),
        extensions: gpumeter_core::Extensions::default(),
        sha256: String::new(),
    };
    r.seal().expect("seal");
    r
}

fn report(window_seconds: u64, window_start: &str) -> UsageReport {
    report_of(
        window_seconds,
        &[("alice", window_start, MeterKind::KernelNs, 7)],
    )
}

#[test]
fn a_window_start_off_the_window_edges_is_refused_not_keyed() {
    let options = EventOptions::new(EventFormat::CloudEvents);
    // On an edge, written with an offset: the key of the `Z` form.
    let on_edge =
        usage_events(&report(3600, "2026-12-01T01:00:00+01:00"), &options).expect("an edge");
    assert_eq!(on_edge.events[0].id(), key(BASE));
    // Half past: a window of its own would get a key of its own.
    let msg = usage_events(&report(3600, "2026-12-01T00:30:00Z"), &options)
        .expect_err("off the edges")
        .to_string();
    assert!(
        msg.starts_with(
            "the usage report: usage[0].window_start: `2026-12-01T00:30:00Z` is not on an edge"
        ),
        "{msg}"
    );
    // A 60 s report's minute edges are edges.
    assert!(usage_events(&report(60, "2026-12-01T00:31:00Z"), &options).is_ok());
    // Zero-second windows: an error, not a division by zero.
    let msg = usage_events(&report(0, "2026-12-01T00:00:00Z"), &options)
        .expect_err("zero windows")
        .to_string();
    assert!(msg.contains("window_seconds"), "{msg}");
}

#[test]
fn two_rows_with_one_key_are_refused_not_sent_as_duplicates() {
    let r = report_of(
        3600,
        &[
            ("alice", "2026-12-01T00:00:00Z", MeterKind::KernelNs, 7),
            ("alice", "2026-12-01T01:00:00+01:00", MeterKind::KernelNs, 7),
        ],
    );
    let msg = usage_events(&r, &EventOptions::new(EventFormat::Lago))
        .expect_err("one key twice")
        .to_string();
    assert!(
        msg.starts_with(
            "the usage report: usage[1] has the tenant, device, window and meter of usage[0]"
        ),
        "{msg}"
    );
    // Another meter is another key.
    let r = report_of(
        3600,
        &[
            ("alice", "2026-12-01T00:00:00Z", MeterKind::KernelNs, 7),
            (
                "alice",
                "2026-12-01T01:00:00+01:00",
                MeterKind::GpuBusyNs,
                7,
            ),
        ],
    );
    assert_eq!(
        usage_events(&r, &EventOptions::new(EventFormat::Lago))
            .expect("two keys")
            .events
            .len(),
        2
    );
}

/// Item 13: a mapping that sends two meters under one name is refused, in the file (two
/// mapped names) and when the events are built (a mapped name equal to an unmapped
/// meter's own).
#[test]
fn two_meters_under_one_event_name_are_refused() {
    let text = "[meters.sm_ns]\ntype = \"gpu\"\n[meters.kernel_ns]\ntype = \"gpu\"\n";
    let msg = EventMap::from_toml_str("m.toml", text)
        .expect_err("one type twice")
        .to_string();
    // Meters are taken in report order: kernel_ns first, so sm_ns's line is named.
    assert!(msg.starts_with("m.toml:2:8: "), "{msg}");
    assert!(msg.contains("type `gpu` is also kernel_ns's"), "{msg}");
    // One name per receiver's field: the same name for Stripe and Lago is fine.
    let text = "[meters.sm_ns]\nstripe_event_name = \"gpu\"\nlago_code = \"gpu\"\n";
    assert!(EventMap::from_toml_str("m.toml", text).is_ok());
    // `sm_ns` sent as `kernel_ns`, beside kernel_ns's own rows.
    let map = EventMap::from_toml_str("m.toml", "[meters.sm_ns]\nlago_code = \"kernel_ns\"\n")
        .expect("valid");
    let r = report_of(
        3600,
        &[
            ("alice", "2026-12-01T00:00:00Z", MeterKind::KernelNs, 7),
            ("alice", "2026-12-01T00:00:00Z", MeterKind::SmNs, 9),
        ],
    );
    let options = EventOptions {
        map: Some(&map),
        ..EventOptions::new(EventFormat::Lago)
    };
    let e = usage_events(&r, &options).expect_err("two meters, one code");
    assert!(
        matches!(
            e,
            EventsError::SharedEventName {
                row: 1,
                first_row: 0,
                ..
            }
        ),
        "{e}"
    );
    // CloudEvents keeps the meters' own types: fine.
    let options = EventOptions {
        map: Some(&map),
        ..EventOptions::new(EventFormat::CloudEvents)
    };
    assert_eq!(
        usage_events(&r, &options).expect("two types").events.len(),
        2
    );
}

/// Item 13: mapping values are checked for the receivers: a CloudEvents `source` is a
/// URI-reference, and no value holds control or bidirectional formatting characters.
#[test]
fn mapping_values_are_checked_for_the_receivers() {
    for (text, at, says) in [
        ("source = \"a b\"\n", "m.toml:1:10: ", "URI-reference"),
        ("source = \"gpu%zz\"\n", "m.toml:1:10: ", "URI-reference"),
        (
            "[tenants.alice]\nsubject = \"cus\u{202e}tomer\"\n",
            "m.toml:2:11: ",
            "U+202E",
        ),
        (
            "[meters.sm_ns]\nlago_code = \"gpu\u{2028}sm\"\n",
            "m.toml:2:13: ",
            "U+2028",
        ),
        // Characters a person cannot see, refused in tenant names too (hostile review).
        (
            "[tenants.alice]\nsubject = \"cus\u{200b}tomer\"\n",
            "m.toml:2:11: ",
            "U+200B",
        ),
        (
            "[tenants.alice]\nsubject = \"\u{feff}customer\"\n",
            "m.toml:2:11: ",
            "U+FEFF",
        ),
        (
            "[meters.sm_ns]\nlago_code = \"gpu\u{3164}\"\n",
            "m.toml:2:13: ",
            "U+3164",
        ),
        (
            "[meters.sm_ns]\nlago_code = \"gpu\u{ad}sm\"\n",
            "m.toml:2:13: ",
            "U+00AD",
        ),
    ] {
        let msg = EventMap::from_toml_str("m.toml", text)
            .expect_err(text)
            .to_string();
        assert!(msg.starts_with(at) && msg.contains(says), "{text}: {msg}");
    }
    for ok in [
        "source = \"gpumeter/eu-west-1\"\n",
        "source = \"https://gpumeter.example/cluster-a\"\n",
        "source = \"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66\"\n",
    ] {
        assert!(EventMap::from_toml_str("m.toml", ok).is_ok(), "{ok}");
    }
}

/// Item 12: a report that is not complete (a snapshot) is refused unless allowed, and
/// then the events say why.
#[test]
fn an_incomplete_report_is_refused_unless_allowed() {
    let mut r = report(3600, "2026-12-01T00:00:00Z");
    r.complete = Some(false);
    r.seal().expect("seal");
    let e = usage_events(&r, &EventOptions::new(EventFormat::CloudEvents)).expect_err("incomplete");
    assert!(matches!(e, EventsError::Incomplete { .. }), "{e}");
    let allowed = EventOptions {
        allow_incomplete: true,
        ..EventOptions::new(EventFormat::CloudEvents)
    };
    let events = usage_events(&r, &allowed).expect("allowed");
    assert_eq!(events.events.len(), 1);
    assert!(events.incomplete.is_some());
    assert_eq!(
        usage_events(&report(3600, "2026-12-01T00:00:00Z"), &allowed)
            .expect("complete")
            .incomplete,
        None
    );
}

#[test]
fn mapping_errors_name_the_line_column_and_field() {
    let text = "source = \"s\"\n[tenants.alice]\nstripe_customer_id = \"\"\n";
    let e = EventMap::from_toml_str("m.toml", text).expect_err("empty id");
    let msg = e.to_string();
    assert!(
        msg.starts_with("m.toml:3:22: stripe_customer_id = \"\": "),
        "{msg}"
    );
    assert!(msg.contains("must not be empty"), "{msg}");

    let text = "[meters.sm_ns]\nstripe_event_nam = \"x\"\n";
    let msg = EventMap::from_toml_str("m.toml", text)
        .expect_err("typo")
        .to_string();
    assert!(msg.starts_with("m.toml:2:1: stripe_event_nam"), "{msg}");
    assert!(msg.contains("unknown field"), "{msg}");

    let text = "[meters.sm_nss]\ntype = \"x\"\n";
    let msg = EventMap::from_toml_str("m.toml", text)
        .expect_err("meter")
        .to_string();
    assert!(msg.starts_with("m.toml:1:9: [meters.sm_nss]"), "{msg}");
    assert!(msg.contains("is not a gpumeter meter"), "{msg}");

    let text = "[tenants.\"Idle\"]\nsubject = \"x\"\n";
    let msg = EventMap::from_toml_str("m.toml", text)
        .expect_err("reserved tenant")
        .to_string();
    assert!(msg.starts_with("m.toml:1:10: "), "{msg}");
    assert!(msg.contains("is not a tenant name"), "{msg}");

    let long = "x".repeat(101);
    let text = format!("[meters.sm_ns]\nstripe_event_name = \"{long}\"\n");
    let msg = EventMap::from_toml_str("m.toml", &text)
        .expect_err("long")
        .to_string();
    assert!(msg.starts_with("m.toml:2:21: "), "{msg}");
    assert!(
        msg.contains("at most 100 characters, this one 101"),
        "{msg}"
    );
}

#[test]
fn a_mapping_reads_every_field() {
    let text = "source = \"gpumeter/eu\"\nunmapped_tenants = \"refuse\"\n\
                    only_mapped_meters = true\n[tenants.\"alice smith\"]\nsubject = \"c-1\"\n\
                    stripe_customer_id = \"cus_1\"\nlago_external_subscription_id = \"sub_1\"\n\
                    [meters.sm_ns]\ntype = \"gpu.sm\"\nstripe_event_name = \"gpu_sm\"\n\
                    lago_code = \"gpu_sm_code\"\n";
    let m = EventMap::from_toml_str("m.toml", text).expect("valid");
    assert_eq!(m.source, "gpumeter/eu");
    assert_eq!(m.unmapped_tenants, UnmappedTenants::Refuse);
    assert!(m.only_mapped_meters);
    let t = &m.tenants["alice smith"];
    assert_eq!(t.subject.as_deref(), Some("c-1"));
    assert_eq!(t.stripe_customer_id.as_deref(), Some("cus_1"));
    assert_eq!(t.lago_external_subscription_id.as_deref(), Some("sub_1"));
    assert_eq!(
        m.meter_name(MeterKind::SmNs, EventFormat::CloudEvents),
        "gpu.sm"
    );
    assert_eq!(m.meter_name(MeterKind::SmNs, EventFormat::Stripe), "gpu_sm");
    assert_eq!(
        m.meter_name(MeterKind::SmNs, EventFormat::Lago),
        "gpu_sm_code"
    );
    assert_eq!(
        m.meter_name(MeterKind::KernelNs, EventFormat::Lago),
        "kernel_ns"
    );
    assert_eq!(
        EventMap::from_toml_str("e.toml", "").expect("empty"),
        EventMap::default()
    );
}
