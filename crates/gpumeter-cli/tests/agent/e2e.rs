//! The agent follows growing recordings and its reports and events equal the whole run's.

use std::collections::BTreeMap;

use super::*;

#[path = "../../../gpumeter-agent/tests/support/receiver.rs"]
pub(crate) mod receiver;

/// The events a report gives (`gpumeter usage --format usage --events -`), by id.
pub(crate) fn expected_events(node: &Node) -> BTreeMap<String, serde_json::Value> {
    let mut cmd = gpumeter();
    cmd.args(["usage", "--format", "usage", "--events", "-"]);
    cmd.args(node.reports());
    let o = run(cmd);
    text(&o.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("event");
            (v["id"].as_str().expect("id").to_string(), v)
        })
        .collect()
}

/// What the receiver kept, by id, parsed.
pub(crate) fn received(r: &receiver::Receiver) -> BTreeMap<String, serde_json::Value> {
    r.events()
        .into_iter()
        .map(|(id, body)| {
            (
                id,
                serde_json::from_str(&body).expect("a kept event is JSON"),
            )
        })
        .collect()
}

pub(crate) fn events_sink(r: &receiver::Receiver) -> String {
    format!(
        "\n[[sink]]\nkind = \"events\"\nformat = \"cloudevents\"\nurl = \"{}\"\n\
         outbox_limit_bytes = 1048576\ntimeout = \"500ms\"\nretry_initial = \"20ms\"\nretry_max = \"200ms\"\n",
        r.url("/api/v1/events")
    )
}

#[test]
fn the_agent_follows_a_node_and_its_reports_and_events_equal_the_whole_run() {
    let Some(node) = Node::new() else { return };
    let r = receiver::Receiver::start(receiver::Faults::default());
    let config = node.config(&events_sink(&r));
    let agent = node.agent(&config);
    let processes = workload();
    node.run_processes(&processes);
    // Every recording ends, every window closes and is delivered, and the recordings retire.
    node.wait_retired(processes.len());
    let (code, stderr) = terminate(agent);
    assert_eq!(
        code,
        Some(0),
        "SIGTERM: exit 0 after the current step\n{stderr}"
    );
    assert!(
        node.reports().len() >= 2,
        "several window sets were closed while the processes ran: {:?}",
        node.reports()
    );
    let oracle = node.oracle();
    let merged = node.merged();
    assert!(!rows(&oracle).is_empty());
    assert_eq!(
        rows(&merged),
        rows(&oracle),
        "agent reports merged = usage of the recordings\n{stderr}"
    );
    assert_eq!(merged["records"], oracle["records"]);
    // Two tenants by label, as the rule names them.
    let tenants: std::collections::BTreeSet<String> = oracle["usage"]
        .as_array()
        .expect("usage")
        .iter()
        .map(|u| u["tenant"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(
        tenants.contains("alice") && tenants.contains("ns-team-b"),
        "{tenants:?}"
    );
    assert!(stderr.contains("late=0"), "no record was late: {stderr}");
    // Events: the receiver's, deduplicated by id, are the report's.
    r.wait_idle();
    assert!(r.violations().is_empty(), "{:?}", r.violations());
    assert_eq!(received(&r), expected_events(&node));
}

#[test]
fn once_closes_the_spool_as_it_stands_and_exits() {
    let Some(node) = Node::new() else { return };
    node.run_processes(&workload()[..2]);
    let config = node.config("");
    let o = run({
        let mut c = gpumeter();
        c.args(["agent", "--once", "--config"]).arg(&config);
        c
    });
    assert!(
        text(&o.stdout).contains("window sets closed"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(node.reports().len(), 1, "one set: everything");
    assert_eq!(rows(&node.merged()), rows(&node.oracle()));
    assert_eq!(
        std::fs::read_dir(node.path("spool/done"))
            .expect("done")
            .count(),
        2
    );
    // Run again: nothing new, nothing sent twice.
    let again = run({
        let mut c = gpumeter();
        c.args(["agent", "--once", "--config"]).arg(&config);
        c
    });
    assert!(
        text(&again.stdout).starts_with("0 window sets closed"),
        "{}",
        text(&again.stdout)
    );
    assert_eq!(node.reports().len(), 1);
}

#[test]
fn check_names_the_line_and_column_of_a_fault() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("agent.toml");
    // `gpumeter agent --check` of `toml`: exit code, standard output and error.
    let check = |toml: &str| {
        std::fs::write(&config, toml).expect("w");
        let o = gpumeter()
            .args(["agent", "--check", "--config"])
            .arg(&config)
            .output()
            .expect("run");
        (o.status.code(), text(&o.stdout), text(&o.stderr))
    };
    let (code, _, e) = check("spool = \"s\"\nstate_dir = \"d\"\nwindow = \"7m\"\n");
    assert_eq!(code, Some(1));
    assert!(e.contains(&format!("{}:3:10: ", config.display())), "{e}");
    let (code, out, e) = check("spool = \"s\"\nstate_dir = \"d\"\n");
    assert_eq!(code, Some(0), "{e}");
    assert!(out.contains(": ok"), "{out}");
    assert!(out.contains("\nmetrics: off"), "{out}");
    assert!(out.contains("\nnvml: off"), "{out}");
    // What the metrics and NVML tables set up is said too.
    let (code, out, e) = check(
        "spool = \"s\"\nstate_dir = \"d\"\n[metrics]\nlisten = \"127.0.0.1:9464\"\n\
         max_tenants = 7\n[nvml]\nprocesses = true\ninterval = \"2s\"\n",
    );
    assert_eq!(code, Some(0), "{e}");
    assert!(
        out.contains(
            "\nmetrics: http://127.0.0.1:9464/metrics, /healthz, /readyz (at most 7 tenants)"
        ),
        "{out}"
    );
    assert!(
        out.contains("\nnvml: GPU processes listed every 2000 ms"),
        "{out}"
    );
}
