//! Usage events (issue 14, item 1): the shared BERT trace's events validate against each
//! format's schema, emitting twice gives the same bytes and ids, the CloudEvents batch is
//! accepted by a local HTTP endpoint that checks OpenMeter's required fields (and a malformed
//! event is refused by it), a Stripe quantity past 15 digits is refused naming the row, and
//! only closed windows are sent.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gpumeter::core::report::Quantity;
use gpumeter::core::{MeterKind, UsageReport};
use gpumeter::events::{
    idempotency_key, to_json_lines, usage_events, EventFormat, EventMap, EventOptions, EventsError,
    UsageEvent, STRIPE_MAX_VALUE,
};

use crate::{data_dir, example, meter, ok};

const BERT: &str = "tracelens_h100_gaunernst_bert-small-uncased__1016001.json.gz";

const FORMATS: [(EventFormat, &str); 3] = [
    (
        EventFormat::CloudEvents,
        "gpumeter.events.cloudevents.v1.schema.json",
    ),
    (EventFormat::Stripe, "gpumeter.events.stripe.v1.schema.json"),
    (EventFormat::Lago, "gpumeter.events.lago.v1.schema.json"),
];

fn schema(file: &str) -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(file);
    let schema: serde_json::Value = ok(serde_json::from_str(&ok(std::fs::read_to_string(path))));
    ok(jsonschema::validator_for(&schema))
}

/// Every line of `lines` is a JSON object valid against `schema_file`; returns them.
fn validate_lines(schema_file: &str, lines: &str) -> Vec<serde_json::Value> {
    let v = schema(schema_file);
    let mut out = Vec::new();
    for (i, line) in lines.lines().enumerate() {
        let doc: serde_json::Value = ok(serde_json::from_str(line));
        let errors: Vec<String> = v
            .iter_errors(&doc)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "{schema_file} line {}: {errors:#?}",
            i + 1
        );
        out.push(doc);
    }
    out
}

fn bert() -> Option<UsageReport> {
    let dir = data_dir()?;
    Some(meter(&[dir.join(BERT)]))
}

#[test]
fn bert_events_validate_against_each_schema_and_are_deterministic() {
    let Some(report) = bert() else { return };
    // The same trace metered again: an independent report, not a clone.
    let Some(again) = bert() else { return };
    assert!(!report.usage.is_empty());
    for (format, schema_file) in FORMATS {
        let opts = EventOptions::new(format);
        let a = ok(usage_events(&report, &opts));
        let b = ok(usage_events(&again, &opts));
        assert_eq!(a.events.len(), report.usage.len(), "{format}: one per row");
        assert_eq!((a.open_rows, a.unmapped_meter_rows), (0, 0));
        let (la, lb) = (ok(to_json_lines(&a.events)), ok(to_json_lines(&b.events)));
        assert_eq!(la, lb, "{format}: emitting twice gives the same bytes");
        let ids: Vec<&str> = a.events.iter().map(UsageEvent::id).collect();
        let ids_b: Vec<&str> = b.events.iter().map(UsageEvent::id).collect();
        assert_eq!(ids, ids_b, "{format}: the same ids");
        let unique: std::collections::BTreeSet<&str> = ids.iter().copied().collect();
        assert_eq!(unique.len(), ids.len(), "{format}: one id per row");
        let docs = validate_lines(schema_file, &la);
        assert_eq!(docs.len(), report.usage.len());
        // Each event carries its row's exact quantity and the key of its row.
        for (row, (doc, event)) in report.usage.iter().zip(docs.iter().zip(&a.events)) {
            let quantity = match format {
                EventFormat::CloudEvents => &doc["data"]["quantity"],
                EventFormat::Stripe => &doc["payload"]["value"],
                EventFormat::Lago => &doc["properties"]["quantity"],
            };
            assert_eq!(quantity.as_str(), Some(row.quantity.0.to_string().as_str()));
            let key = ok(idempotency_key(
                &row.tenant,
                &row.device_key,
                &row.window_start,
                report.window_seconds,
                row.meter.as_str(),
                "v1",
            ));
            assert_eq!(event.id(), key);
        }
    }
    // The key docs/INTEGRATIONS.md recomputes in Python for the BERT trace's kernel_ns row.
    let kernel = report
        .usage
        .iter()
        .position(|r| r.meter == MeterKind::KernelNs)
        .expect("a kernel_ns row");
    let events = ok(usage_events(
        &report,
        &EventOptions::new(EventFormat::CloudEvents),
    ));
    assert_eq!(
        events.events[kernel].id(),
        "d8cfcb13fe0f78bfd4e9cec14461ec1ef21307fcc16528f0e9296610a19a5d7a"
    );
    // The ids are the same whatever the format: one key per row.
    let ids = |f| -> Vec<String> {
        ok(usage_events(&report, &EventOptions::new(f)))
            .events
            .iter()
            .map(|e| e.id().to_string())
            .collect()
    };
    assert_eq!(ids(EventFormat::CloudEvents), ids(EventFormat::Stripe));
    assert_eq!(ids(EventFormat::CloudEvents), ids(EventFormat::Lago));
}

/// What the local OpenMeter stand-in received: the (source, id) pairs it stored, deduplicated
/// as OpenMeter deduplicates, and the status of each request.
#[derive(Default)]
struct Received {
    stored: std::collections::BTreeSet<(String, String)>,
    statuses: Vec<u16>,
    refusals: Vec<String>,
}

/// Why an event is not one OpenMeter ingests, or `None`: the CloudEvents attributes it
/// requires (specversion 1.0; id, source, type and subject non-empty strings; time RFC 3339).
fn openmeter_refusal(event: &serde_json::Value) -> Option<String> {
    if event["specversion"] != "1.0" {
        return Some("specversion is not 1.0".into());
    }
    for field in ["id", "source", "type", "subject"] {
        if event[field].as_str().is_none_or(str::is_empty) {
            return Some(format!("{field} is missing or empty"));
        }
    }
    match event["time"]
        .as_str()
        .map(gpumeter::core::time::parse_rfc3339)
    {
        None => Some("time is missing".into()),
        Some(Err(e)) => Some(format!("time: {e}")),
        Some(Ok(_)) => None,
    }
}

/// Serves `requests` requests on 127.0.0.1 (a free port) as OpenMeter's `POST /api/v1/events`
/// with `application/cloudevents-batch+json`: 204 when every event of the array has the
/// required fields, else 400 and nothing stored. Returns the URL and the shared record.
fn openmeter_stand_in(
    requests: usize,
) -> (String, Arc<Mutex<Received>>, std::thread::JoinHandle<()>) {
    let server = ok(tiny_http::Server::http("127.0.0.1:0"));
    let port = server
        .server_addr()
        .to_ip()
        .map(|a| a.port())
        .expect("an IP address");
    let received = Arc::new(Mutex::new(Received::default()));
    let shared = Arc::clone(&received);
    let handle = std::thread::spawn(move || {
        for _ in 0..requests {
            let Ok(mut request) = server.recv() else {
                return;
            };
            let content_type = request
                .headers()
                .iter()
                .find(|h| h.field.equiv("Content-Type"))
                .map(|h| h.value.as_str().to_string());
            let mut body = String::new();
            let read = std::io::Read::read_to_string(request.as_reader(), &mut body);
            let verdict: Result<Vec<serde_json::Value>, String> = if request.method()
                != &tiny_http::Method::Post
                || request.url() != "/api/v1/events"
            {
                Err("not POST /api/v1/events".into())
            } else if content_type.as_deref() != Some("application/cloudevents-batch+json") {
                Err(format!("content type {content_type:?}"))
            } else if read.is_err() {
                Err("unreadable body".into())
            } else {
                match serde_json::from_str::<Vec<serde_json::Value>>(&body) {
                    Err(e) => Err(format!("not a JSON array: {e}")),
                    Ok(events) => match events.iter().find_map(openmeter_refusal) {
                        Some(why) => Err(why),
                        None => Ok(events),
                    },
                }
            };
            let status = {
                let mut r = shared.lock().expect("lock");
                match verdict {
                    Ok(events) => {
                        for e in events {
                            let source = e["source"].as_str().unwrap_or_default().to_string();
                            let id = e["id"].as_str().unwrap_or_default().to_string();
                            r.stored.insert((source, id));
                        }
                        r.statuses.push(204);
                        204
                    }
                    Err(why) => {
                        r.refusals.push(why);
                        r.statuses.push(400);
                        400
                    }
                }
            };
            let _ = request.respond(tiny_http::Response::empty(status));
        }
    });
    (
        format!("http://127.0.0.1:{port}/api/v1/events"),
        received,
        handle,
    )
}

/// POSTs `body` as a CloudEvents batch; the HTTP status.
fn post_batch(url: &str, body: &str) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let response = ok(agent
        .post(url)
        .header("Content-Type", "application/cloudevents-batch+json")
        .send(body));
    response.status().as_u16()
}

#[test]
fn the_cloudevents_batch_is_accepted_by_an_openmeter_stand_in_and_a_replay_adds_nothing() {
    let Some(report) = bert() else { return };
    let events = ok(usage_events(
        &report,
        &EventOptions::new(EventFormat::CloudEvents),
    ));
    let batch = ok(serde_json::to_string(&events.events));
    // A malformed event: the same batch with one event's time unparseable.
    let mut bad: Vec<serde_json::Value> = ok(serde_json::from_str(&batch));
    bad[0]["time"] = "yesterday".into();
    let bad = ok(serde_json::to_string(&bad));
    let (url, received, server) = openmeter_stand_in(3);
    assert_eq!(post_batch(&url, &batch), 204);
    // Re-sent (a retry): the same (source, id) pairs, so nothing new is stored.
    assert_eq!(post_batch(&url, &batch), 204);
    assert_eq!(post_batch(&url, &bad), 400, "the check can refuse");
    server.join().expect("server thread");
    let r = received.lock().expect("lock");
    assert_eq!(r.statuses, [204, 204, 400]);
    assert_eq!(r.stored.len(), events.events.len());
    assert!(r.refusals[0].starts_with("time:"), "{:?}", r.refusals);
}

/// A small report: one row per quantity, tenant `alice`, hour windows from 2026-12-01T00.
fn report_with(rows: &[(u64, MeterKind, u128)]) -> UsageReport {
    let mut report = meter(&[example("finetune-2xh100.json.gz")]);
    let template = report.usage[0].clone();
    report.usage = rows
        .iter()
        .map(|&(hour, meter, quantity)| {
            let mut row = template.clone();
            row.tenant = "alice".into();
            row.window_start = format!("2026-12-01T{hour:02}:00:00Z");
            row.meter = meter;
            row.quantity = Quantity(quantity);
            row
        })
        .collect();
    ok(report.seal_with_totals());
    report
}

#[test]
fn a_stripe_value_past_15_digits_is_refused_naming_the_row_never_rounded() {
    // warp_ns: a meter without a physical bound in the checks (sm_ns this high is more than an
    // H100 can do in an hour, and is refused before any event).
    let fits = report_with(&[(0, MeterKind::WarpNs, STRIPE_MAX_VALUE)]);
    let events = ok(usage_events(&fits, &EventOptions::new(EventFormat::Stripe)));
    let line = ok(to_json_lines(&events.events));
    assert!(line.contains(r#""value":"999999999999999""#), "{line}");
    validate_lines("gpumeter.events.stripe.v1.schema.json", &line);

    let past = report_with(&[
        (0, MeterKind::KernelNs, 5),
        (1, MeterKind::WarpNs, STRIPE_MAX_VALUE + 1),
    ]);
    match usage_events(&past, &EventOptions::new(EventFormat::Stripe)) {
        Err(e @ EventsError::ValueTooLarge { row: 1, .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with("usage[1] (tenant `alice`"), "{msg}");
            assert!(msg.contains("warp_ns): quantity 1000000000000000"), "{msg}");
        }
        other => panic!("expected ValueTooLarge for usage[1], got {other:?}"),
    }
    // CloudEvents and Lago carry the decimal string as it is, whatever its size.
    let huge = report_with(&[(0, MeterKind::MemoryByteNs, u128::MAX)]);
    for format in [EventFormat::CloudEvents, EventFormat::Lago] {
        let e = ok(usage_events(&huge, &EventOptions::new(format)));
        let line = ok(to_json_lines(&e.events));
        assert!(line.contains(&format!("\"{}\"", u128::MAX)), "{line}");
    }
    // Leaving the meter out of the mapping sends the rest.
    let map = ok(EventMap::from_toml_str(
        "m.toml",
        "only_mapped_meters = true\n[meters.kernel_ns]\n",
    ));
    let opts = EventOptions {
        map: Some(&map),
        ..EventOptions::new(EventFormat::Stripe)
    };
    let e = ok(usage_events(&past, &opts));
    assert_eq!((e.events.len(), e.unmapped_meter_rows), (1, 1));
}

#[test]
fn only_windows_closed_before_the_cut_are_sent() {
    let report = report_with(&[
        (0, MeterKind::KernelNs, 1),
        (1, MeterKind::KernelNs, 2),
        (2, MeterKind::KernelNs, 3),
    ]);
    let cut = gpumeter::core::time::parse_rfc3339("2026-12-01T02:00:00Z").expect("time");
    for (closed_before, sent) in [(cut, 2), (cut - 1, 1), (cut + 3_600_000_000_000, 3)] {
        let opts = EventOptions {
            closed_before_ns: Some(closed_before),
            ..EventOptions::new(EventFormat::Lago)
        };
        let e = ok(usage_events(&report, &opts));
        assert_eq!(
            (e.events.len(), e.open_rows),
            (sent, 3 - sent),
            "{closed_before}"
        );
    }
}

#[test]
fn the_mapping_names_ids_and_can_refuse_unmapped_tenants() {
    let report = report_with(&[(0, MeterKind::SmNs, 7)]);
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/events-map.toml");
    let map = ok(EventMap::from_path(&path));
    let opts = |format| EventOptions {
        map: Some(&map),
        ..EventOptions::new(format)
    };
    let ce = ok(usage_events(&report, &opts(EventFormat::CloudEvents)));
    let UsageEvent::CloudEvents(e) = &ce.events[0] else {
        panic!("a CloudEvent")
    };
    assert_eq!(
        (e.subject.as_str(), e.event_type.as_str(), e.source.as_str()),
        ("customer-alice", "gpu_sm_ns", "gpumeter/cluster-a")
    );
    let stripe = ok(usage_events(&report, &opts(EventFormat::Stripe)));
    let UsageEvent::Stripe(e) = &stripe.events[0] else {
        panic!("a Stripe event")
    };
    assert_eq!(
        (e.payload.stripe_customer_id.as_str(), e.event_name.as_str()),
        ("cus_NciAYcXfLnqBoz", "gpu_sm_ns")
    );
    // The example refuses tenants it does not map: `bob` has no Stripe customer.
    let mut bob = report.clone();
    bob.usage[0].tenant = "bob".into();
    ok(bob.seal_with_totals());
    match usage_events(&bob, &opts(EventFormat::Stripe)) {
        Err(e @ EventsError::UnmappedTenant { row: 0, .. }) => {
            assert!(e
                .to_string()
                .contains("tenant `bob` has no stripe_customer_id"));
        }
        other => panic!("expected UnmappedTenant, got {other:?}"),
    }
    // Without a mapping the tenant's own name is sent.
    let plain = ok(usage_events(&bob, &EventOptions::new(EventFormat::Lago)));
    let UsageEvent::Lago(e) = &plain.events[0] else {
        panic!("a Lago event")
    };
    assert_eq!(
        (e.external_subscription_id.as_str(), e.code.as_str()),
        ("bob", "sm_ns")
    );
}
