//! The metric names are a contract (docs/AGENT.md, "Metrics": dashboards and the alert rules of
//! deploy/prometheus rely on them): every name the agent exposes is documented, and every
//! `gpumeter_…` name the docs and the alert rules use is exposed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gpumeter_agent::metrics::{Format, Metrics, SpoolView};
use gpumeter_agent::outbox::Outbox;
use gpumeter_agent::state::Checkpoint;
use gpumeter_core::UsageReport;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `gpumeter_…` metric name in `text` (words of lower-case letters, digits and `_`).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("gpumeter_") {
        // Not part of a longer word (`libgpumeter_inject`, a path).
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let word_start = !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if word_start && (name.starts_with("gpumeter_usage") || name.starts_with("gpumeter_agent_"))
        {
            out.insert(name.trim_end_matches('_').to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// The sample names of an exposition with every family filled in: a set closed with usage
/// and loss, a recording followed, an outbox watched, an unmetered process, a send failure.
fn exposed() -> BTreeSet<String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let m = Metrics::new(10, dir.path());
    let mut c = Checkpoint::default();
    let report: UsageReport = serde_json::from_value(serde_json::json!({
        "schema": gpumeter_core::USAGE_SCHEMA,
        "metering_policy": gpumeter_core::METERING_POLICY,
        "window_seconds": 60,
        "sources": [], "devices": [],
        "records": {"kernel": 3, "memcpy": 1, "memset": 1, "skipped": {}},
        "loss": [{"device": 0, "device_key": "GPU-1", "reason": "late", "records": 2}],
        "usage": [{"tenant": "acme", "device": 0, "device_key": "GPU-1",
                   "window_start": "2026-01-01T00:00:00Z", "meter": "kernel_ns", "quantity": "5"}],
        "totals": [], "open_allocations": [], "warnings": [], "sha256": "",
    }))
    .expect("a report");
    m.count_usage(&mut c, &report);
    c.closed_to_ns = 60_000_000_000;
    c.save(dir.path()).expect("checkpoint");
    m.closed_set(&c, &report);
    m.observe_spool([SpoolView {
        identity: "node-1",
        complete_len: 100,
        finished: false,
    }]);
    m.step_finished();
    m.show_settings(60_000_000_000, 60_000_000_000, 30_000_000_000);
    let outbox = Outbox::open(&dir.path().join("outbox"), 1 << 20).expect("outbox");
    m.watch_outbox("openmeter", Arc::new(outbox));
    m.send_failures("openmeter").record("503");
    m.set_unmetered("GPU-1", 1);
    m.set_gpu_listing_up(Some(true));
    let text = m.encode(Format::Prometheus);
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let end = l.find(['{', ' ']).unwrap_or(l.len());
            l[..end].to_string()
        })
        .collect()
}

#[test]
fn every_exposed_metric_is_documented_and_every_documented_one_is_exposed() {
    let exposed = exposed();
    assert!(exposed.len() >= 20, "too few samples: {exposed:?}");
    let docs = std::fs::read_to_string(repo().join("docs/AGENT.md")).expect("docs/AGENT.md");
    let documented = names_in(&docs);
    let undocumented: Vec<&String> = exposed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "exposed but not in docs/AGENT.md: {undocumented:?}"
    );
    for file in [
        "docs/AGENT.md",
        "deploy/prometheus/gpumeter-agent.rules.yaml",
        "deploy/prometheus/gpumeter-agent.rules.test.yaml",
    ] {
        let text = std::fs::read_to_string(repo().join(file)).expect(file);
        let unknown: Vec<String> = names_in(&text)
            .into_iter()
            .filter(|n| !exposed.contains(n))
            .collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics the agent does not expose: {unknown:?}"
        );
    }
}
