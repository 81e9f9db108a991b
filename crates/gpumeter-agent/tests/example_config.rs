//! `examples/agent.toml` (docs/AGENT.md, "Configuration"): it reads, every value it sets is
//! read back and differs from the default (so the example shows each key doing something), it
//! names every key the configuration accepts (a key added to `src/config.rs` without the
//! example fails here), and the files it names are usable, as `gpumeter agent --check` reads
//! them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpumeter_agent::config::{
    EventsSinkConfig, Finished, LogFormat, NvmlConfig, SinkConfig, SinkFormat, DEFAULT_MAX_TENANTS,
    DEFAULT_OUTBOX_LIMIT_BYTES,
};
use gpumeter_agent::tenant::TenantRule;
use gpumeter_agent::AgentConfig;
use gpumeter_core::WindowSize;

const SECOND_NS: u64 = 1_000_000_000;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn example_path() -> PathBuf {
    root().join("examples/agent.toml")
}

fn example() -> AgentConfig {
    AgentConfig::from_path(&example_path()).unwrap_or_else(|e| panic!("examples/agent.toml: {e}"))
}

/// A configuration with only the required keys (and each sink's), to read the defaults from.
fn defaults() -> AgentConfig {
    let text = "spool = \"s\"\nstate_dir = \"d\"\n\n[[sink]]\nkind = \"reports\"\ndir = \"r\"\n\n\
                [[sink]]\nkind = \"events\"\nformat = \"cloudevents\"\nurl = \"http://h/\"\n";
    AgentConfig::from_toml_str(&example_path(), text).expect("the minimal configuration")
}

fn events(c: &AgentConfig) -> &EventsSinkConfig {
    c.sinks
        .iter()
        .find_map(|s| match s {
            SinkConfig::Events(e) => Some(e),
            SinkConfig::Reports { .. } => None,
        })
        .expect("an events sink")
}

fn reports_dir(c: &AgentConfig) -> &Path {
    c.sinks
        .iter()
        .find_map(|s| match s {
            SinkConfig::Reports { dir } => Some(dir.as_path()),
            SinkConfig::Events(_) => None,
        })
        .expect("a reports sink")
}

#[test]
fn every_value_of_the_example_is_read_back_and_differs_from_the_default() {
    let c = example();
    let d = defaults();
    let examples = example_path().parent().expect("examples/").to_path_buf();

    assert_eq!(c.spool, Path::new("/var/lib/gpumeter/spool"));
    assert_eq!(c.state_dir, Path::new("/var/lib/gpumeter/agent"));
    assert_eq!(c.window, WindowSize::parse("15m").expect("15m"));
    assert_eq!(c.horizon_ns, 120 * SECOND_NS);
    assert_eq!(c.grace_ns, 45 * SECOND_NS);
    assert_eq!(c.poll, Duration::from_secs(2));
    assert_eq!(c.finished, Finished::Compress);
    assert_eq!(c.log, LogFormat::Json);
    let rule =
        TenantRule::parse(&["{GPUMETER_TENANT}".into(), "{POD_NAMESPACE}".into()]).expect("rule");
    assert_eq!(c.tenant, rule);
    assert_eq!(c.tenant_map, Some(examples.join("tenants.toml")));
    assert_eq!(reports_dir(&c), Path::new("/var/lib/gpumeter/reports"));
    assert_eq!(c.sinks.len(), 2);
    assert_eq!(
        c.metrics.listen,
        Some("127.0.0.1:9464".parse().expect("address"))
    );
    assert_eq!(c.metrics.max_tenants, 200);
    assert_eq!(
        c.nvml,
        NvmlConfig {
            processes: true,
            interval: Duration::from_secs(30),
        }
    );

    let e = events(&c);
    assert_eq!(e.name, "openmeter");
    assert_eq!(e.format, SinkFormat::CloudEvents);
    assert_eq!(e.url, "https://openmeter.example/api/v1/events");
    assert_eq!(e.mapping, Some(examples.join("events-map.toml")));
    assert_eq!(e.token_env.as_deref(), Some("OPENMETER_TOKEN"));
    assert_eq!(e.token_file, None, "one token source only");
    assert_eq!(e.outbox_limit_bytes, 64 << 20);
    assert_eq!(e.timeout, Duration::from_secs(20));
    assert_eq!(e.retry_initial, Duration::from_secs(2));
    assert_eq!(e.retry_max, Duration::from_secs(600));

    // Each optional key of the example sets something other than its default.
    assert_ne!(c.window, d.window, "window");
    assert_ne!(c.horizon_ns, d.horizon_ns, "horizon");
    assert_ne!(c.grace_ns, d.grace_ns, "grace");
    assert_ne!(c.poll, d.poll, "poll");
    assert_ne!(c.finished, d.finished, "finished");
    assert_ne!(c.log, d.log, "log");
    assert_ne!(c.tenant, d.tenant, "[tenant] rule");
    assert_ne!(c.tenant_map, d.tenant_map, "[tenant] map");
    assert_ne!(c.metrics.listen, d.metrics.listen, "[metrics] listen");
    assert_eq!(d.metrics.max_tenants, DEFAULT_MAX_TENANTS);
    assert_ne!(c.metrics.max_tenants, d.metrics.max_tenants, "max_tenants");
    assert_ne!(c.nvml.processes, d.nvml.processes, "[nvml] processes");
    assert_ne!(c.nvml.interval, d.nvml.interval, "[nvml] interval");
    let de = events(&d);
    assert_eq!(de.outbox_limit_bytes, DEFAULT_OUTBOX_LIMIT_BYTES);
    assert_ne!(e.name, de.name, "name");
    assert_ne!(e.mapping, de.mapping, "mapping");
    assert_ne!(e.token_env, de.token_env, "token_env");
    assert_ne!(
        e.outbox_limit_bytes, de.outbox_limit_bytes,
        "outbox_limit_bytes"
    );
    assert_ne!(e.timeout, de.timeout, "timeout");
    assert_ne!(e.retry_initial, de.retry_initial, "retry_initial");
    assert_ne!(e.retry_max, de.retry_max, "retry_max");
}

/// The field names of `struct NAME { … }` in `source`: the keys serde reads for it.
fn fields(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("src/config.rs has no `struct {name}`"));
    let body = &source[start..];
    let body = &body[..body.find("\n}").expect("the struct's end")];
    body.lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.starts_with("#[") && !l.starts_with("//"))
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.trim().to_string()))
        .collect()
}

/// Whether `text` assigns `key` on some line (`key = …`, also in a comment: an alternative to
/// another key, such as `token_file` to `token_env`).
fn assigns(text: &str, key: &str) -> bool {
    text.lines().any(|l| {
        l.match_indices(&format!("{key} = ")).any(|(i, _)| {
            l[..i]
                .chars()
                .next_back()
                .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
        })
    })
}

#[test]
fn the_example_names_every_key_the_configuration_accepts() {
    let source =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config.rs"))
            .expect("src/config.rs");
    let text = std::fs::read_to_string(example_path()).expect("examples/agent.toml");
    let top = fields(&source, "Raw");
    let tenant = fields(&source, "RawTenant");
    let sink = fields(&source, "RawSink");
    let metrics = fields(&source, "RawMetrics");
    let nvml = fields(&source, "RawNvml");
    assert!(
        top.len() >= 11
            && tenant.len() >= 2
            && sink.len() >= 12
            && metrics.len() >= 2
            && nvml.len() >= 2,
        "the key scan found too few keys: {top:?} {tenant:?} {sink:?} {metrics:?} {nvml:?}"
    );
    let mut missing = Vec::new();
    for key in top
        .iter()
        .chain(&tenant)
        .chain(&sink)
        .chain(&metrics)
        .chain(&nvml)
    {
        let named = match key.as_str() {
            "tenant" => text.lines().any(|l| l.trim() == "[tenant]"),
            "nvml" => text.lines().any(|l| l.trim() == "[nvml]"),
            "sink" => text.lines().any(|l| l.trim() == "[[sink]]"),
            "metrics" => text.lines().any(|l| l.trim() == "[metrics]"),
            k => assigns(&text, k),
        };
        if !named {
            missing.push(key.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "examples/agent.toml does not show these keys of src/config.rs: {missing:?}"
    );
    // Both sink kinds appear.
    assert!(text.contains("kind = \"reports\"") && text.contains("kind = \"events\""));
}

#[test]
fn the_files_the_example_names_are_usable() {
    // As `gpumeter agent --check` reads them: the tenant map, the events mapping, the token
    // from its environment variable (and the system's roots for the https:// URL).
    // The other tests of this binary read no environment variable.
    std::env::set_var("OPENMETER_TOKEN", "example-token");
    let c = example();
    match (c.check_files(), cfg!(feature = "nvml")) {
        (Ok(()), true) => {}
        // The files are read first: this error says they are usable, and that this build
        // (without the `nvml` feature) cannot list GPU processes.
        (Err(gpumeter_agent::AgentError::NvmlNotBuilt { .. }), false) => {}
        (Err(e), _) => {
            panic!("examples/agent.toml names a file or token that cannot be used: {e}")
        }
        (Ok(()), false) => panic!("[nvml] processes = true needs the nvml feature"),
    }
}
