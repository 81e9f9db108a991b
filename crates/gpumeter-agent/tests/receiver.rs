//! The outbox and the HTTP sender against a loopback receiver with faults (issue 32, "Receiver
//! faults"): every event arrives, once after deduplication by id and always with the same
//! bytes, and the outbox drains.

#[path = "support/receiver.rs"]
mod receiver;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gpumeter::events::{
    CloudEvent, CloudEventData, EventFormat, LagoEvent, LagoProperties, StripeMeterEvent,
    StripePayload, UsageEvent,
};
use gpumeter_agent::http::{Delivered, HttpError, Sender, SenderConfig, TokenSource};
use gpumeter_agent::outbox::{Batch, Outbox, OutboxError, Put};
use gpumeter_core::MeterKind;
use receiver::{Answer, Faults, Receiver};

const WINDOW_S: u64 = 1_796_083_200;

fn cloud(id: &str, quantity: u64) -> UsageEvent {
    UsageEvent::CloudEvents(CloudEvent {
        specversion: "1.0".to_string(),
        id: id.to_string(),
        source: "gpumeter".to_string(),
        event_type: "kernel_ns".to_string(),
        subject: "alice".to_string(),
        time: "2026-12-01T00:00:00Z".to_string(),
        datacontenttype: "application/json".to_string(),
        data: CloudEventData {
            meter: MeterKind::KernelNs,
            quantity: quantity.to_string(),
            unit: "ns".to_string(),
            tenant: "alice".to_string(),
            device: 0,
            device_key: "gpu-0".to_string(),
            window_end: "2026-12-01T01:00:00Z".to_string(),
            metering_policy: "v1".to_string(),
        },
    })
}

fn lago(id: &str, quantity: u64) -> UsageEvent {
    UsageEvent::Lago(LagoEvent {
        transaction_id: id.to_string(),
        external_subscription_id: "sub_alice".to_string(),
        code: "kernel_ns".to_string(),
        timestamp: WINDOW_S,
        properties: LagoProperties {
            quantity: quantity.to_string(),
            unit: "ns".to_string(),
            meter: MeterKind::KernelNs,
            tenant: "alice".to_string(),
            device_key: "gpu-0".to_string(),
            window_end: "2026-12-01T01:00:00Z".to_string(),
            metering_policy: "v1".to_string(),
        },
    })
}

fn stripe(id: &str, quantity: u64) -> UsageEvent {
    UsageEvent::Stripe(StripeMeterEvent {
        event_name: "kernel_ns".to_string(),
        payload: StripePayload {
            stripe_customer_id: "cus_alice".to_string(),
            value: quantity.to_string(),
        },
        identifier: id.to_string(),
        timestamp: WINDOW_S,
    })
}

/// `batches` window sets of `per_batch` events each in `format`: (outbox id, events).
fn window_sets(
    format: EventFormat,
    batches: usize,
    per_batch: usize,
) -> Vec<(String, Vec<UsageEvent>)> {
    let make = match format {
        EventFormat::CloudEvents => cloud,
        EventFormat::Lago => lago,
        EventFormat::Stripe => stripe,
    };
    (0..batches)
        .map(|b| {
            let id = format!(
                "{:017}-{:017}",
                WINDOW_S + 3600 * b as u64,
                WINDOW_S + 3600 * (b as u64 + 1)
            );
            let events = (0..per_batch)
                .map(|e| make(&format!("ev-{b}-{e}"), (b * 1000 + e) as u64 + 1))
                .collect();
            (id, events)
        })
        .collect()
}

/// The receiver's view of `events`: id → payload as it records it.
fn expected(sets: &[(String, Vec<UsageEvent>)]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (_, events) in sets {
        let batch = Batch::from_events(format_of(&events[0]), events).expect("encode");
        for request in batch.requests() {
            if request.content_type == "application/x-www-form-urlencoded" {
                out.insert(request.ids[0].clone(), request.body.clone());
            }
        }
        for e in events {
            if !matches!(e, UsageEvent::Stripe(_)) {
                let json = serde_json::to_value(e).expect("json");
                out.insert(e.id().to_string(), json.to_string());
            }
        }
    }
    out
}

fn format_of(e: &UsageEvent) -> EventFormat {
    match e {
        UsageEvent::CloudEvents(_) => EventFormat::CloudEvents,
        UsageEvent::Stripe(_) => EventFormat::Stripe,
        UsageEvent::Lago(_) => EventFormat::Lago,
    }
}

/// A short back-off for tests, and timeouts long enough that only the receiver's slow answers
/// pass them (a loaded machine must not turn an answered request into a re-send where a test
/// counts requests).
fn config(url: String, format: EventFormat) -> SenderConfig {
    SenderConfig {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        retry_initial: Duration::from_millis(2),
        retry_max: Duration::from_millis(20),
        ..SenderConfig::new(url, format)
    }
}

fn put_all(outbox: &Outbox, sets: &[(String, Vec<UsageEvent>)]) {
    for (id, events) in sets {
        let batch = Batch::from_events(format_of(&events[0]), events).expect("encode");
        assert!(
            matches!(outbox.put(id, &batch), Ok(Put::Stored { .. })),
            "{id}"
        );
    }
}

/// Delivers until the outbox is empty, sleeping the back-off between passes; the passes'
/// sum. A bound on passes keeps a broken sender from hanging the test.
fn drain(sender: &mut Sender, outbox: &Outbox) -> Delivered {
    let stop = AtomicBool::new(false);
    let mut sum = Delivered::default();
    for _ in 0..500 {
        let d = sender.deliver(outbox, &stop).expect("deliver");
        sum.batches += d.batches;
        sum.requests += d.requests;
        sum.rejected_batches += d.rejected_batches;
        if outbox.is_empty() {
            return sum;
        }
        std::thread::sleep(
            d.retry_in
                .expect("a pass that leaves batches says when to retry"),
        );
    }
    panic!("the outbox did not drain: {:?}", outbox.pending());
}

/// Every request body carrying an id, per id: all must be equal (byte for byte).
fn bodies_per_id(r: &Receiver) -> BTreeMap<String, BTreeSet<Vec<u8>>> {
    let mut out: BTreeMap<String, BTreeSet<Vec<u8>>> = BTreeMap::new();
    for q in r.requests() {
        for id in &q.ids {
            out.entry(id.clone()).or_default().insert(q.body.clone());
        }
    }
    out
}

#[test]
fn every_event_arrives_once_through_500s_slow_answers_drops_and_a_down_stretch() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = Receiver::start(Faults {
        fail_every: 3,
        slow_every: 5,
        slow_for: Duration::from_millis(600),
        drop_every: 7,
        ..Faults::default()
    });
    let sets = window_sets(EventFormat::CloudEvents, 12, 130);
    let outbox = Outbox::open(tmp.path(), 1 << 24).expect("open");
    put_all(&outbox, &sets);
    // A request timeout shorter than the slow answers: the client gives up and re-sends.
    let mut sender = Sender::new(SenderConfig {
        request_timeout: Duration::from_millis(200),
        ..config(r.url("/api/v1/events"), EventFormat::CloudEvents)
    })
    .expect("sender");

    // Down: nothing is delivered, nothing is lost.
    r.down();
    let stop = AtomicBool::new(false);
    let d = sender.deliver(&outbox, &stop).expect("deliver");
    assert_eq!((d.batches, d.requests), (0, 0));
    assert!(d.retry_in.is_some());
    assert_eq!(outbox.pending().len(), 12);
    r.up();

    let d = drain(&mut sender, &outbox);
    assert_eq!(d.batches, 12);
    assert_eq!(d.rejected_batches, 0);
    assert!(outbox.is_empty());
    assert_eq!(outbox.bytes(), 0);
    for (id, _) in &sets {
        assert!(outbox.is_delivered(id), "{id}");
    }
    assert_eq!(r.violations(), Vec::<String>::new());
    assert_eq!(r.events(), expected(&sets));
    let answers: BTreeSet<String> = r
        .requests()
        .iter()
        .map(|q| format!("{:?}", q.answer))
        .collect();
    for a in [Answer::Ok, Answer::Failed, Answer::Dropped] {
        assert!(
            answers.contains(&format!("{a:?}")),
            "{a:?} never happened: {answers:?}"
        );
    }
    // The slow answers come after the client gave up (and re-sent their events).
    r.wait_idle();
    assert!(r.requests().iter().any(|q| q.answer == Answer::Slow));
    // Kept but not acknowledged: each of those events was sent again.
    let arrivals = r.arrivals();
    for q in r.requests() {
        if matches!(q.answer, Answer::Slow | Answer::Dropped) {
            assert!(
                q.ids.iter().all(|id| arrivals[id] > 1),
                "request {} not re-sent",
                q.n
            );
        }
    }
    for (id, bodies) in bodies_per_id(&r) {
        assert_eq!(bodies.len(), 1, "{id} was sent with different bytes");
    }
    for q in r.requests() {
        assert_eq!(q.content_type, "application/cloudevents-batch+json");
        assert_eq!(q.path, "/api/v1/events");
    }
}

#[test]
fn a_restart_mid_batch_resumes_with_the_same_bytes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Stripe: one request per event; the 4th request fails, so three are acknowledged.
    let r = Receiver::start(Faults {
        fail_every: 4,
        ..Faults::default()
    });
    let sets = window_sets(EventFormat::Stripe, 2, 5);
    let url = r.url("/v1/billing/meter_events");
    {
        let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
        put_all(&outbox, &sets);
        let mut sender = Sender::new(config(url.clone(), EventFormat::Stripe)).expect("sender");
        let d = sender
            .deliver(&outbox, &AtomicBool::new(false))
            .expect("deliver");
        assert_eq!((d.batches, d.requests), (0, 3));
        assert!(d.retry_in.is_some());
    }
    // The agent was killed here; the receiver saw three events and one 500.
    r.set_faults(Faults::default());
    let outbox = Outbox::open(tmp.path(), 1 << 20).expect("reopen");
    let (_, progress) = outbox.load(&sets[0].0).expect("load");
    assert_eq!(progress.next, 3);
    // Storing the window sets again (a checkpoint behind the outbox) changes nothing.
    for (id, events) in &sets {
        let batch = Batch::from_events(EventFormat::Stripe, events).expect("encode");
        assert_eq!(
            outbox.put(id, &batch).expect("put"),
            Put::AlreadyPending { same_bytes: true }
        );
    }
    let mut sender = Sender::new(config(url, EventFormat::Stripe)).expect("sender");
    let d = drain(&mut sender, &outbox);
    assert_eq!((d.batches, d.requests), (2, 7));
    assert_eq!(r.violations(), Vec::<String>::new());
    assert_eq!(r.events(), expected(&sets));
    // The acknowledged ones were not sent again; the refused one was, with the same bytes.
    assert!(r.arrivals().values().all(|n| *n == 1), "{:?}", r.arrivals());
    for (id, bodies) in bodies_per_id(&r) {
        assert_eq!(bodies.len(), 1, "{id} was sent with different bytes");
    }
    assert_eq!(r.requests().len(), 11);
    for q in r.requests() {
        assert_eq!(q.content_type, "application/x-www-form-urlencoded");
    }
}

#[test]
fn a_refused_batch_goes_to_rejected_and_the_others_are_delivered() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = Receiver::start(Faults {
        reject_ids: BTreeSet::from(["ev-1-3".to_string()]),
        fail_every: 2,
        ..Faults::default()
    });
    // Lago: 150 events a batch, so two requests (100 and 50); batch 1's first is refused.
    let sets = window_sets(EventFormat::Lago, 3, 150);
    let outbox = Outbox::open(tmp.path(), 1 << 24).expect("open");
    put_all(&outbox, &sets);
    let mut sender =
        Sender::new(config(r.url("/api/v1/events/batch"), EventFormat::Lago)).expect("sender");
    let d = drain(&mut sender, &outbox);
    assert_eq!((d.batches, d.rejected_batches), (2, 1));
    assert_eq!(outbox.rejected().expect("rejected"), [sets[1].0.clone()]);
    assert!(outbox.is_delivered(&sets[0].0) && outbox.is_delivered(&sets[2].0));
    assert!(!outbox.is_delivered(&sets[1].0));
    let reason = std::fs::read_to_string(
        tmp.path()
            .join("rejected")
            .join(format!("{}.reason", sets[1].0)),
    )
    .expect("reason");
    assert!(
        reason.contains("HTTP 400") && reason.contains("ev-1-3"),
        "{reason}"
    );
    assert!(tmp
        .path()
        .join("rejected")
        .join(format!("{}.batch", sets[1].0))
        .exists());
    // The refused request's 100 events are missing; every other event arrived.
    let mut want = expected(&sets);
    want.retain(|id, _| {
        !(id.starts_with("ev-1-") && id["ev-1-".len()..].parse::<usize>().is_ok_and(|e| e < 100))
    });
    assert_eq!(r.events(), want);
    assert_eq!(r.violations(), Vec::<String>::new());
    assert_eq!(
        outbox
            .put(
                &sets[1].0,
                &Batch::from_events(EventFormat::Lago, &sets[1].1).expect("encode")
            )
            .expect("put"),
        Put::AlreadyRejected
    );
}

#[test]
fn a_full_outbox_refuses_loudly_and_nothing_is_lost() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = Receiver::start(Faults::default());
    let sets = window_sets(EventFormat::CloudEvents, 3, 10);
    let one = |i: usize| Batch::from_events(EventFormat::CloudEvents, &sets[i].1).expect("encode");
    let limit = {
        let probe = tempfile::tempdir().expect("tempdir");
        let o = Outbox::open(probe.path(), u64::MAX).expect("open");
        let Put::Stored { bytes } = o.put("x", &one(0)).expect("put") else {
            panic!("not stored")
        };
        bytes * 2 + bytes / 2
    };
    let outbox = Outbox::open(tmp.path(), limit).expect("open");
    outbox.put(&sets[0].0, &one(0)).expect("put 0");
    outbox.put(&sets[1].0, &one(1)).expect("put 1");
    let err = outbox.put(&sets[2].0, &one(2)).expect_err("full");
    assert!(matches!(err, OutboxError::Full { .. }), "{err}");
    assert!(err.to_string().contains("is NOT stored"), "{err}");
    assert_eq!(outbox.pending().len(), 2);

    let mut sender =
        Sender::new(config(r.url("/api/v1/events"), EventFormat::CloudEvents)).expect("sender");
    drain(&mut sender, &outbox);
    assert!(matches!(
        outbox.put(&sets[2].0, &one(2)),
        Ok(Put::Stored { .. })
    ));
    drain(&mut sender, &outbox);
    assert_eq!(r.events(), expected(&sets));
    assert_eq!(r.violations(), Vec::<String>::new());
}

#[test]
fn the_sender_thread_ships_batches_as_they_are_stored_and_stops_on_request() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let r = Receiver::start(Faults {
        fail_every: 2,
        ..Faults::default()
    });
    let token = tmp.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let sets = window_sets(EventFormat::Lago, 4, 3);
    let outbox = Outbox::open(&tmp.path().join("outbox"), 1 << 20).expect("open");
    let mut sender = Sender::new(SenderConfig {
        token: TokenSource::File(token),
        ..config(r.url("/api/v1/events/batch"), EventFormat::Lago)
    })
    .expect("sender");
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let worker = s.spawn(|| sender.run(&outbox, &stop));
        for (i, set) in sets.iter().enumerate() {
            put_all(&outbox, std::slice::from_ref(set));
            wait_until(|| outbox.is_delivered(&sets[i].0));
        }
        stop.store(true, Ordering::SeqCst);
        outbox.wake();
        worker.join().expect("sender thread");
    });
    assert!(outbox.is_empty());
    assert_eq!(r.events(), expected(&sets));
    assert_eq!(r.violations(), Vec::<String>::new());
    for q in r.requests() {
        assert_eq!(q.authorization.as_deref(), Some("Bearer s3cret"));
        assert_eq!(q.content_type, "application/json");
    }
}

/// Polls `done` until it holds (a bound of a minute keeps a broken sender from hanging the
/// test; nothing is asserted about the time taken).
fn wait_until(done: impl Fn() -> bool) {
    for _ in 0..6000 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("gave up waiting");
}

#[test]
fn a_missing_token_or_a_bad_url_stops_the_sender_from_starting() {
    let missing = Path::new("/nonexistent/gpumeter-token");
    let err = Sender::new(SenderConfig {
        token: TokenSource::File(missing.to_path_buf()),
        ..SenderConfig::new("http://127.0.0.1:9/", EventFormat::CloudEvents)
    })
    .expect_err("no token file");
    assert!(matches!(err, HttpError::TokenFile { .. }), "{err}");
    let err = Sender::new(SenderConfig {
        token: TokenSource::Env("GPUMETER_TEST_TOKEN_NEVER_SET".to_string()),
        ..SenderConfig::new("http://127.0.0.1:9/", EventFormat::CloudEvents)
    })
    .expect_err("no variable");
    assert!(matches!(err, HttpError::TokenEnv { .. }), "{err}");
    let tmp = tempfile::tempdir().expect("tempdir");
    let empty = tmp.path().join("token");
    std::fs::write(&empty, "\n").expect("write");
    let err = Sender::new(SenderConfig {
        token: TokenSource::File(empty),
        ..SenderConfig::new("http://127.0.0.1:9/", EventFormat::CloudEvents)
    })
    .expect_err("empty token");
    assert!(matches!(err, HttpError::TokenEmpty { .. }), "{err}");
    for url in ["ftp://x/", "not a url", "http://"] {
        let err = Sender::new(SenderConfig::new(url, EventFormat::Stripe)).expect_err(url);
        assert!(matches!(err, HttpError::Url { .. }), "{url}: {err}");
    }
}

#[test]
fn the_receiver_reports_an_id_sent_again_with_another_payload() {
    let r = Receiver::start(Faults::default());
    let stop = AtomicBool::new(false);
    for quantity in [1, 2] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
        let batch = Batch::from_events(EventFormat::CloudEvents, &[cloud("ev-x", quantity)])
            .expect("encode");
        outbox.put("1", &batch).expect("put");
        let mut sender =
            Sender::new(config(r.url("/api/v1/events"), EventFormat::CloudEvents)).expect("sender");
        let d = sender.deliver(&outbox, &stop).expect("deliver");
        assert_eq!(d.batches, 1);
    }
    let v = r.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].contains("ev-x again with another payload"), "{v:?}");
    assert_eq!(r.arrivals()["ev-x"], 2);
}
