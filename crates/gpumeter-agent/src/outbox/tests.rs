//! The outbox's own rules: atomic files, idempotent puts, the byte limit, restarts.

use std::sync::atomic::AtomicBool;

use gpumeter::events::{EventFormat, StripeMeterEvent, StripePayload, UsageEvent};

use super::*;

fn stripe(id: &str, value: u64) -> UsageEvent {
    UsageEvent::Stripe(StripeMeterEvent {
        event_name: "gpu_sm_ns".to_string(),
        payload: StripePayload {
            stripe_customer_id: "cus_1".to_string(),
            value: value.to_string(),
        },
        identifier: id.to_string(),
        timestamp: 1_796_083_200,
    })
}

fn batch(ids: &[&str]) -> Batch {
    let events: Vec<UsageEvent> = ids.iter().map(|i| stripe(i, 7)).collect();
    Batch::from_events(EventFormat::Stripe, &events).expect("encode")
}

#[test]
fn a_stored_batch_reads_back_byte_for_byte_and_a_second_put_changes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
    let b = batch(&["a", "b"]);
    let Put::Stored { bytes } = outbox.put("0001", &b).expect("put") else {
        panic!("not stored")
    };
    assert_eq!(outbox.bytes(), bytes);
    let other = Batch::from_events(EventFormat::Stripe, &[stripe("a", 8)]).expect("encode");
    assert_eq!(
        outbox.put("0001", &other).expect("put"),
        Put::AlreadyPending { same_bytes: false }
    );
    assert_eq!(
        outbox.put("0001", &b).expect("put"),
        Put::AlreadyPending { same_bytes: true }
    );
    let (loaded, progress) = outbox.load("0001").expect("load");
    assert_eq!(loaded, b);
    assert_eq!(progress, Progress::default());
    assert_eq!(
        loaded.requests()[0].body,
        "event_name=gpu_sm_ns&identifier=a&timestamp=1796083200&payload%5Bstripe_customer_id%5D=cus_1&payload%5Bvalue%5D=7"
    );
    outbox.mark_delivered("0001").expect("deliver");
    assert!(outbox.is_delivered("0001"));
    assert!(outbox.is_empty());
    assert_eq!(outbox.bytes(), 0);
    assert_eq!(outbox.put("0001", &b).expect("put"), Put::AlreadyDelivered);
    assert!(outbox.is_empty());
}

#[test]
fn the_limit_refuses_a_batch_whole_and_stores_it_once_room_is_made() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let b = batch(&["a"]);
    let one = b.to_stored().expect("bytes").len() as u64;
    let outbox = Outbox::open(tmp.path(), one * 2).expect("open");
    outbox.put("1", &b).expect("put 1");
    outbox.put("2", &b).expect("put 2");
    let err = outbox.put("3", &b).expect_err("full");
    assert!(matches!(err, OutboxError::Full { used_bytes, .. } if used_bytes == 2 * one));
    assert!(err.to_string().contains("OUTBOX FULL"), "{err}");
    assert_eq!(outbox.pending(), ["1", "2"]);
    outbox.mark_delivered("1").expect("deliver");
    assert!(matches!(outbox.put("3", &b), Ok(Put::Stored { .. })));
    assert_eq!(outbox.pending(), ["2", "3"]);
    let huge = batch(&["a", "b", "c"]);
    assert!(matches!(
        Outbox::open(tmp.path(), one).expect("open").put("4", &huge),
        Err(OutboxError::TooLarge { .. })
    ));
}

#[test]
fn a_reopened_outbox_has_the_same_batches_progress_and_no_temporaries() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let b = batch(&["a", "b", "c"]);
    {
        let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
        outbox.put("0002", &b).expect("put");
        outbox.put("0001", &b).expect("put");
        let p = Progress {
            next: 2,
            rejected: vec![],
        };
        outbox.record_progress("0002", &p).expect("progress");
    }
    // A write cut short, and a mark_delivered cut short after its marker.
    std::fs::write(tmp.path().join("pending/.tmp-0003.batch"), b"{").expect("write");
    std::fs::write(tmp.path().join("delivered/0001"), b"").expect("write");
    let outbox = Outbox::open(tmp.path(), 1 << 20).expect("reopen");
    assert_eq!(outbox.pending(), ["0002"]);
    assert!(!tmp.path().join("pending/.tmp-0003.batch").exists());
    assert!(!tmp.path().join("pending/0001.batch").exists());
    let (loaded, progress) = outbox.load("0002").expect("load");
    assert_eq!(loaded, b);
    assert_eq!(progress.next, 2);
}

#[test]
fn bad_ids_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
    for id in ["", ".x", "a/b", "a b", &"x".repeat(201)] {
        assert!(
            matches!(
                outbox.put(id, &batch(&["a"])),
                Err(OutboxError::BadId { .. })
            ),
            "{id}"
        );
    }
}

#[test]
fn a_rejected_batch_moves_with_its_reason_and_is_not_stored_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
    outbox.put("9", &batch(&["a"])).expect("put");
    outbox.reject("9", "HTTP 400").expect("reject");
    assert_eq!(outbox.rejected().expect("list"), ["9"]);
    assert!(outbox.is_empty());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("rejected/9.reason")).expect("reason"),
        "HTTP 400"
    );
    assert_eq!(
        outbox.put("9", &batch(&["a"])).expect("put"),
        Put::AlreadyRejected
    );
    assert!(matches!(
        outbox.mark_delivered("9"),
        Err(OutboxError::NotPending { .. })
    ));
}

#[test]
fn mixed_formats_are_refused_and_waits_end_on_a_put() {
    assert!(matches!(
        Batch::from_events(EventFormat::Lago, &[stripe("x", 1)]),
        Err(OutboxError::MixedFormat { .. })
    ));
    let tmp = tempfile::tempdir().expect("tempdir");
    let outbox = Outbox::open(tmp.path(), 1 << 20).expect("open");
    let seen = outbox.generation();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| outbox.put("1", &batch(&["a"])).expect("put"));
        let now = outbox.wait_for_change(seen, Duration::from_secs(30), &stop);
        // Either woken by the put or it had already happened: never a timeout here.
        assert_ne!(now, seen);
    });
}
