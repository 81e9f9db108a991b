//! The metrics' own rules: counters that grow across sets and resume from the checkpoint, the
//! tenant cap, escaping (checked by Prometheus' `promtool` where installed), the endpoint's
//! answers, and the send failures the sender counts.

use std::io::Write as _;
use std::sync::atomic::AtomicBool;

use gpumeter_core::{MeterKind, Quantity, UsageReport, UsageRow};

use super::*;

const GPU: &str = "GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf";

/// A report with one usage row per `(tenant, device key, meter, quantity)`.
fn report(rows: &[(&str, &str, MeterKind, u128)]) -> UsageReport {
    let json = serde_json::json!({
        "schema": gpumeter_core::USAGE_SCHEMA,
        "metering_policy": gpumeter_core::METERING_POLICY,
        "window_seconds": 1,
        "sources": [],
        "devices": [],
        "records": {"kernel": 3, "memcpy": 1, "memset": 0, "skipped": {}},
        "loss": [{"device": 0, "device_key": GPU, "reason": "late", "records": 2}],
        "usage": [],
        "totals": [],
        "open_allocations": [],
        "warnings": [],
        "sha256": "",
    });
    let mut r: UsageReport = serde_json::from_value(json).expect("a report");
    r.usage = rows
        .iter()
        .map(|&(tenant, device_key, meter, q)| UsageRow {
            tenant: tenant.to_string(),
            device: 0,
            device_key: device_key.to_string(),
            window_start: "2026-01-01T00:00:00Z".to_string(),
            meter,
            quantity: Quantity(q),
        })
        .collect();
    r
}

/// The value of the sample `series` (name and labels as written) in a Prometheus text
/// exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(series)?.strip_prefix(' ')?;
        rest.parse().ok()
    })
}

fn usage(tenant: &str, meter: &str) -> String {
    format!("gpumeter_usage_total{{tenant=\"{tenant}\",device=\"{GPU}\",meter=\"{meter}\"}}")
}

/// Closes `report` as the agent does: counted into the checkpoint, written, shown.
fn close(m: &Metrics, c: &mut Checkpoint, dir: &Path, report: &UsageReport) {
    m.count_usage(c, report);
    c.closed_to_ns += 1_000_000_000;
    c.save(dir).expect("save");
    m.closed_set(c, report);
}

#[test]
fn usage_counters_grow_across_sets_and_other_counters_follow_the_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("fresh");
    m.start_from(&mut c, true);
    let text = m.encode(Format::Prometheus);
    assert!(
        text.contains("# TYPE gpumeter_usage_total counter"),
        "{text}"
    );
    assert_eq!(sample(&text, &usage("a", "kernel_ns")), None);
    close(
        &m,
        &mut c,
        dir.path(),
        &report(&[("a", GPU, MeterKind::KernelNs, 10)]),
    );
    close(
        &m,
        &mut c,
        dir.path(),
        &report(&[
            ("a", GPU, MeterKind::KernelNs, 5),
            ("b", GPU, MeterKind::MemsetBytes, 7),
            ("b", "cupti-stream:1f2e#0", MeterKind::MemsetBytes, 1),
        ]),
    );
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, &usage("a", "kernel_ns")),
        Some(15.0),
        "{text}"
    );
    assert_eq!(sample(&text, &usage("b", "memset_bytes")), Some(7.0));
    // A device without a UUID has one label value, not one per recording.
    let unknown = "gpumeter_usage_total{tenant=\"b\",device=\"unknown\",meter=\"memset_bytes\"}";
    assert_eq!(sample(&text, unknown), Some(1.0), "{text}");
    assert_eq!(
        sample(&text, "gpumeter_agent_window_sets_closed_total"),
        Some(2.0)
    );
    let kernels = "gpumeter_agent_records_total{kind=\"kernel\"}";
    assert_eq!(sample(&text, kernels), Some(6.0));
    let late = "gpumeter_agent_loss_records_total{reason=\"late\"}";
    assert_eq!(sample(&text, late), Some(4.0));
    assert_eq!(sample(&text, "gpumeter_usage_tenants"), Some(2.0));
    assert_eq!(
        sample(&text, "gpumeter_agent_watermark_timestamp_seconds"),
        Some(2.0)
    );
    assert!(sample(&text, "gpumeter_agent_lag_seconds").is_some_and(|s| s > 1e9));
    assert!(sample(&text, "gpumeter_agent_checkpoint_age_seconds").is_some());
    // OpenMetrics: the same samples, a descriptor without `_total`, and `# EOF`.
    let om = m.encode(Format::OpenMetrics);
    assert!(om.contains("# TYPE gpumeter_usage counter"), "{om}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        om.contains(&format!("{} 15", usage("a", "kernel_ns"))),
        "{om}"
    );
}

#[test]
fn a_restart_resumes_from_the_checkpoint_totals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("fresh");
    m.start_from(&mut c, true);
    let r = report(&[("a", GPU, MeterKind::GpuBusyNs, 1_000)]);
    close(&m, &mut c, dir.path(), &r);
    // The agent stops after it handed the next set over, before its checkpoint was written.
    let mut unwritten = c.clone();
    m.count_usage(&mut unwritten, &r);
    drop(m);

    let m = Metrics::new(1000, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("load");
    m.start_from(&mut c, false);
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, &usage("a", "gpu_busy_ns")),
        Some(1_000.0),
        "{text}"
    );
    // Closing that set again counts it once.
    close(&m, &mut c, dir.path(), &r);
    let text = m.encode(Format::Prometheus);
    assert_eq!(sample(&text, &usage("a", "gpu_busy_ns")), Some(2_000.0));
    assert_eq!(c.usage_totals, unwritten.usage_totals);

    // A checkpoint of an agent without metrics: the counters start at 0.
    let mut old = Checkpoint::load(dir.path()).expect("load");
    old.usage_totals = None;
    old.save(dir.path()).expect("save");
    let text = std::fs::read_to_string(Checkpoint::path(dir.path())).expect("read");
    assert!(!text.contains("usage_totals"), "{text}");
    let m = Metrics::new(1000, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("load");
    m.start_from(&mut c, false);
    assert_eq!(c.usage_totals, Some(UsageTotals::default()));
    assert_eq!(
        sample(&m.encode(Format::Prometheus), &usage("a", "gpu_busy_ns")),
        None
    );
}

#[test]
fn tenants_past_the_cap_are_folded_into_other_and_stay_so_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(2, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("fresh");
    m.start_from(&mut c, true);
    let k = MeterKind::KernelLaunches;
    close(
        &m,
        &mut c,
        dir.path(),
        &report(&[("a", GPU, k, 1), ("b", GPU, k, 2), ("c", GPU, k, 4)]),
    );
    // A tenant named `other` shares the folded series without taking a place or counting
    // as folded.
    close(
        &m,
        &mut c,
        dir.path(),
        &report(&[("d", GPU, k, 8), ("other", GPU, k, 16), ("a", GPU, k, 32)]),
    );
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, &usage("a", "kernel_launches")),
        Some(33.0),
        "{text}"
    );
    assert_eq!(sample(&text, &usage("b", "kernel_launches")), Some(2.0));
    assert_eq!(sample(&text, &usage("c", "kernel_launches")), None);
    assert_eq!(
        sample(&text, &usage("other", "kernel_launches")),
        Some(28.0)
    );
    assert_eq!(sample(&text, "gpumeter_usage_folded_rows_total"), Some(2.0));
    assert_eq!(sample(&text, "gpumeter_usage_tenants"), Some(2.0));

    // After a restart the same tenants keep their series. With a larger cap, the next tenant
    // seen takes the new place (`c`: its earlier usage stays in `other`, which never
    // decreases); the one after it is folded.
    let m = Metrics::new(3, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("load");
    m.start_from(&mut c, false);
    close(
        &m,
        &mut c,
        dir.path(),
        &report(&[("c", GPU, k, 64), ("e", GPU, k, 128), ("b", GPU, k, 256)]),
    );
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, &usage("b", "kernel_launches")),
        Some(258.0),
        "{text}"
    );
    assert_eq!(sample(&text, &usage("c", "kernel_launches")), Some(64.0));
    assert_eq!(sample(&text, &usage("e", "kernel_launches")), None);
    assert_eq!(
        sample(&text, &usage("other", "kernel_launches")),
        Some(156.0)
    );
    assert_eq!(sample(&text, "gpumeter_usage_folded_rows_total"), Some(3.0));
}

/// Runs `promtool check metrics` on `text`: `None` (said on standard error) when promtool is
/// not installed outside CI; under `CI=true` its absence fails.
fn promtool(text: &str) -> Option<(bool, String)> {
    let spawned = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but promtool (Debian's prometheus package) cannot run: {e}"
            );
            let _ = writeln!(
                std::io::stderr(),
                "skipped: promtool not installed; the exposition is not checked by Prometheus"
            );
            return None;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), said))
}

#[test]
fn label_values_are_escaped_and_prometheus_reads_the_exposition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("fresh");
    m.start_from(&mut c, true);
    let odd = "we\"ird\\ten\nant";
    close(
        &m,
        &mut c,
        dir.path(),
        &report(&[(odd, GPU, MeterKind::SmNs, 3)]),
    );
    m.set_unmetered(GPU, 1);
    m.send_failures("open\"meter").record("503");
    m.observe_spool([SpoolView {
        identity: "h/1/2/3",
        complete_len: 4096,
        finished: false,
    }]);
    m.step_finished();
    let text = m.encode(Format::Prometheus);
    let escaped = "gpumeter_usage_total{tenant=\"we\\\"ird\\\\ten\\nant\",device=\"";
    assert!(text.contains(escaped), "{text}");
    assert!(!text.contains(odd), "{text}");
    assert!(
        text.contains("sink=\"open\\\"meter\",status=\"503\"} 1"),
        "{text}"
    );
    if let Some((ok, said)) = promtool(&text) {
        assert!(
            ok,
            "promtool check metrics refused the exposition: {said}\n{text}"
        );
    }
}

#[test]
fn bytes_read_count_what_recordings_add_and_recordings_are_counted_by_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let view = |identity, complete_len, finished| SpoolView {
        identity,
        complete_len,
        finished,
    };
    m.observe_spool([view("a", 100, false), view("b", 50, true)]);
    m.observe_spool([view("a", 160, false), view("b", 50, true)]);
    // `b` retired; `a` finished; a new `c`.
    m.observe_spool([view("a", 160, true), view("c", 10, false)]);
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, "gpumeter_agent_read_bytes_total"),
        Some(220.0)
    );
    let open = "gpumeter_agent_recordings{state=\"open\"}";
    let finished = "gpumeter_agent_recordings{state=\"finished\"}";
    assert_eq!(sample(&text, open), Some(1.0), "{text}");
    assert_eq!(sample(&text, finished), Some(1.0));
}

#[test]
fn the_accept_header_chooses_the_format() {
    assert_eq!(Format::from_accept(None), Format::Prometheus);
    assert_eq!(Format::from_accept(Some("text/plain")), Format::Prometheus);
    let prometheus_2 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::from_accept(Some(prometheus_2)), Format::OpenMetrics);
    assert_eq!(
        Format::from_accept(Some("Application/OpenMetrics-Text; q=0")),
        Format::Prometheus
    );
    assert_eq!(
        Format::OpenMetrics.content_type(),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert_eq!(
        Format::Prometheus.content_type(),
        "text/plain; version=0.0.4; charset=utf-8"
    );
}

fn client() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// `GET url` with `accept`: status, Content-Type, body.
fn get(url: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut call = client().get(url);
    if let Some(a) = accept {
        call = call.header("Accept", a);
    }
    let mut r = call.call().expect("an answer");
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = r.body_mut().read_to_string().expect("body");
    (r.status().as_u16(), ct, body)
}

#[test]
fn the_endpoint_serves_metrics_health_and_readiness() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (spool, state) = (dir.path().join("spool"), dir.path().join("state"));
    std::fs::create_dir_all(&spool).expect("spool");
    std::fs::create_dir_all(&state).expect("state");
    let m = Arc::new(Metrics::new(1000, &state));
    let ready = Readiness {
        spool: spool.clone(),
        state_dir: state.clone(),
        max_step_age: Duration::from_secs(3600),
    };
    let server = MetricsServer::start("127.0.0.1:0".parse().expect("addr"), Arc::clone(&m), ready)
        .expect("bind");
    let base = format!("http://{}", server.addr());
    assert_ne!(server.addr().port(), 0);

    let (status, ct, body) = get(&format!("{base}/metrics"), None);
    assert_eq!(
        (status, ct.as_str()),
        (200, PROMETHEUS_CONTENT_TYPE),
        "{body}"
    );
    assert!(
        body.contains("# TYPE gpumeter_usage_total counter"),
        "{body}"
    );
    let (status, ct, body) = get(
        &format!("{base}/metrics"),
        Some("application/openmetrics-text;version=1.0.0,text/plain;q=0.5"),
    );
    assert_eq!((status, ct.as_str()), (200, OPENMETRICS_CONTENT_TYPE));
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert_eq!(get(&format!("{base}/healthz"), None).0, 200);
    // Not ready before a step; ready after one; not when the spool is gone.
    let (status, _, body) = get(&format!("{base}/readyz"), None);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no step"), "{body}");
    m.step_finished();
    let (status, _, body) = get(&format!("{base}/readyz"), None);
    assert_eq!(status, 200, "{body}");
    std::fs::remove_dir(&spool).expect("remove the spool");
    let (status, _, body) = get(&format!("{base}/readyz"), None);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("spool"), "{body}");
    assert_eq!(get(&format!("{base}/nothing"), None).0, 404);
    // No probe file is left in the state folder.
    assert_eq!(std::fs::read_dir(&state).expect("state").count(), 0);
    server.stop();
    assert!(client().get(&format!("{base}/healthz")).call().is_err());
}

#[test]
fn a_stale_step_makes_the_agent_unready() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let ready = Readiness {
        spool: dir.path().to_path_buf(),
        state_dir: dir.path().to_path_buf(),
        max_step_age: Duration::ZERO,
    };
    m.shared.last_step_ns.store(1, Ordering::Relaxed);
    let e = ready.check(&m).expect_err("stale");
    assert!(e.contains("last step"), "{e}");
    let ready = Readiness {
        state_dir: dir.path().join("missing"),
        ..ready
    };
    let e = ready.check(&m).expect_err("no state folder");
    assert!(e.contains("state folder"), "{e}");
}

#[test]
fn an_events_sender_counts_its_failures_by_status() {
    use gpumeter::events::{EventFormat, StripeMeterEvent, StripePayload, UsageEvent};
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let outbox = Arc::new(Outbox::open(&dir.path().join("outbox"), 1 << 20).expect("outbox"));
    m.watch_outbox("stripe", Arc::clone(&outbox));
    let event = UsageEvent::Stripe(StripeMeterEvent {
        event_name: "gpu_sm_ns".to_string(),
        payload: StripePayload {
            stripe_customer_id: "cus_1".to_string(),
            value: "7".to_string(),
        },
        identifier: "e1".to_string(),
        timestamp: 1_796_083_200,
    });
    let batch = crate::outbox::Batch::from_events(EventFormat::Stripe, &[event]).expect("batch");
    outbox.put("0001", &batch).expect("put");
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, "gpumeter_agent_outbox_batches{sink=\"stripe\"}"),
        Some(1.0),
        "{text}"
    );
    assert!(sample(&text, "gpumeter_agent_outbox_bytes{sink=\"stripe\"}").is_some_and(|b| b > 0.0));

    // A receiver that answers 503, then an address where nothing listens.
    let receiver = tiny_http::Server::http("127.0.0.1:0").expect("receiver");
    let port = receiver.server_addr().to_ip().expect("ip").port();
    let answering = std::thread::spawn(move || {
        if let Ok(r) = receiver.recv() {
            let _ = r.respond(tiny_http::Response::empty(503));
        }
    });
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed = nobody.local_addr().expect("addr").port();
    drop(nobody);
    let stop = AtomicBool::new(false);
    for port in [port, closed] {
        let url = format!("http://127.0.0.1:{port}/v1/billing/meter_events");
        let config = crate::http::SenderConfig::new(url, EventFormat::Stripe);
        let mut sender = crate::http::Sender::new(config).expect("sender");
        sender.count_failures(m.send_failures("stripe"));
        let done = sender.deliver(&outbox, &stop).expect("deliver");
        assert!(done.retry_in.is_some(), "{done:?}");
    }
    answering.join().expect("the receiver");
    let text = m.encode(Format::Prometheus);
    let failures = |status: &str| {
        sample(
            &text,
            &format!("gpumeter_agent_send_failures_total{{sink=\"stripe\",status=\"{status}\"}}"),
        )
    };
    assert_eq!(failures("503"), Some(1.0), "{text}");
    assert_eq!(failures("connect"), Some(1.0), "{text}");
    let sends = |outcome: &str| {
        sample(
            &text,
            &format!("gpumeter_agent_sends_total{{sink=\"stripe\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(sends("failed"), Some(2.0), "{text}");
    assert_eq!(sends("ok"), Some(0.0), "{text}");
}

#[test]
fn families_alerts_rely_on_are_shown_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let text = m.encode(Format::Prometheus);
    // Every loss reason at 0, so that `increase()` sees the first loss.
    for reason in gpumeter_core::LossReason::ALL {
        let series = format!(
            "gpumeter_agent_loss_records_total{{reason=\"{}\"}}",
            reason.as_str()
        );
        assert_eq!(sample(&text, &series), Some(0.0), "{series}\n{text}");
    }
    // No step yet: 0, so that `time() - it` is large for an agent failing from its start.
    assert_eq!(
        sample(&text, "gpumeter_agent_last_step_timestamp_seconds"),
        Some(0.0),
        "{text}"
    );
    let start = sample(&text, "gpumeter_agent_start_timestamp_seconds").expect("start");
    assert!(start > 1.7e9, "{text}");
    // A sink's sends at 0 for both outcomes once its sender is attached.
    assert!(!text.contains("gpumeter_agent_sends_total{"), "{text}");
    let handle = m.send_failures("openmeter");
    let text = m.encode(Format::Prometheus);
    let ok = "gpumeter_agent_sends_total{sink=\"openmeter\",outcome=\"ok\"}";
    let failed = "gpumeter_agent_sends_total{sink=\"openmeter\",outcome=\"failed\"}";
    assert_eq!(sample(&text, ok), Some(0.0), "{text}");
    assert_eq!(sample(&text, failed), Some(0.0), "{text}");
    handle.acknowledged();
    assert_eq!(sample(&m.encode(Format::Prometheus), ok), Some(1.0));
}

#[test]
fn a_set_is_counted_once_a_checkpoint_write_records_it_closed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = Metrics::new(1000, dir.path());
    let mut c = Checkpoint::load(dir.path()).expect("fresh");
    m.start_from(&mut c, true);
    let r = report(&[("a", GPU, MeterKind::KernelNs, 10)]);
    // The set's checkpoint write fails: nothing is counted yet.
    m.count_usage(&mut c, &r);
    m.set_closing(&r);
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, "gpumeter_agent_window_sets_closed_total"),
        Some(0.0)
    );
    assert_eq!(sample(&text, &usage("a", "kernel_ns")), None, "{text}");
    // The next write that succeeds records it closed: counted once, with the next set.
    let next = report(&[("a", GPU, MeterKind::KernelNs, 5)]);
    m.count_usage(&mut c, &next);
    m.set_closing(&next);
    c.save(dir.path()).expect("save");
    m.checkpoint_written(&c);
    m.checkpoint_written(&c);
    let text = m.encode(Format::Prometheus);
    assert_eq!(
        sample(&text, "gpumeter_agent_window_sets_closed_total"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "gpumeter_agent_records_total{kind=\"kernel\"}"),
        Some(6.0)
    );
    assert_eq!(
        sample(&text, "gpumeter_agent_loss_records_total{reason=\"late\"}"),
        Some(4.0)
    );
    assert_eq!(sample(&text, &usage("a", "kernel_ns")), Some(15.0));
}
