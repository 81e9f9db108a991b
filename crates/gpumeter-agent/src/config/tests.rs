use super::*;

fn parse(text: &str) -> Result<AgentConfig, ConfigError> {
    AgentConfig::from_toml_str(Path::new("/etc/gpumeter/agent.toml"), text)
}

#[test]
fn a_minimal_config_takes_the_defaults_and_relative_paths_from_its_folder() {
    let c = parse("spool = \"spool\"\nstate_dir = \"/var/lib/a\"\n").expect("config");
    assert_eq!(c.spool, PathBuf::from("/etc/gpumeter/spool"));
    assert_eq!(c.state_dir, PathBuf::from("/var/lib/a"));
    assert_eq!(c.window, WindowSize::HOUR);
    assert_eq!(c.horizon_ns, 60_000_000_000);
    assert_eq!(c.finished, Finished::Move);
    assert!(c.sinks.is_empty());
}

#[test]
fn errors_name_the_line_and_column_of_the_value_at_fault() {
    let e = parse("spool = \"s\"\nstate_dir = \"d\"\nwindow = \"7m\"\n").expect_err("refused");
    assert_eq!((e.line, e.column), (3, 10), "{e}");
    assert!(
        e.to_string().starts_with("/etc/gpumeter/agent.toml:3:10: "),
        "{e}"
    );
    let e = parse("spool = \"s\"\nstate_dir = \"d\"\n[[sink]]\nkind = \"email\"\n")
        .expect_err("refused");
    assert_eq!((e.line, e.column), (4, 8), "{e}");
    let e = parse("spool = \"s\"\nstate_dir = \"d\"\nhorizon = \"soon\"\n").expect_err("refused");
    assert_eq!(e.line, 3, "{e}");
    let e = parse("spool = \"s\"\nstate_dir = \"d\"\nspeed = 1\n").expect_err("refused");
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("speed"), "{e}");
    let e = parse("spool = \"s\"\n[tenant]\nrule = \"{NAMESPACE}\"\n").expect_err("refused");
    assert!(e.line >= 1, "{e}");
    let e = parse("spool = \"s\"\nstate_dir = \"d\"\n[tenant]\nrule = \"{NAMESPACE}\"\n")
        .expect_err("refused");
    assert_eq!((e.line, e.column), (4, 8), "{e}");
}

#[test]
fn an_events_sink_needs_a_format_and_an_http_url() {
    let head = "spool = \"s\"\nstate_dir = \"d\"\n[[sink]]\nkind = \"events\"\n";
    let e = parse(&format!("{head}url = \"http://x\"\n")).expect_err("refused");
    assert!(e.message.contains("format"), "{e}");
    let e = parse(&format!("{head}format = \"lago\"\nurl = \"ftp://x\"\n")).expect_err("refused");
    assert_eq!(e.line, 6, "{e}");
    let c = parse(&format!(
        "{head}format = \"cloudevents\"\nurl = \"http://127.0.0.1:9/api/v1/events\"\n\
         token_env = \"T\"\noutbox_limit_bytes = 1024\n"
    ))
    .expect("config");
    let SinkConfig::Events(s) = &c.sinks[0] else {
        panic!("an events sink")
    };
    assert_eq!(s.name, "cloudevents");
    assert_eq!(s.outbox_limit_bytes, 1024);
    assert_eq!(s.token_env.as_deref(), Some("T"));
}

#[test]
fn metrics_are_off_without_a_table_and_listen_on_the_address_it_names() {
    let head = "spool = \"s\"\nstate_dir = \"d\"\n";
    let c = parse(head).expect("config");
    assert_eq!(c.metrics, MetricsConfig::default());
    assert_eq!(c.metrics.listen, None);
    assert_eq!(c.metrics.max_tenants, DEFAULT_MAX_TENANTS);
    let c = parse(&format!("{head}[metrics]\nlisten = \"127.0.0.1:0\"\n")).expect("config");
    assert_eq!(c.metrics.listen, Some("127.0.0.1:0".parse().expect("addr")));
    assert_eq!(c.metrics.max_tenants, 1000);
    let c = parse(&format!(
        "{head}[metrics]\nlisten = \"[::]:9464\"\nmax_tenants = 3\n"
    ))
    .expect("config");
    assert_eq!(c.metrics.listen, Some("[::]:9464".parse().expect("addr")));
    assert_eq!(c.metrics.max_tenants, 3);
    // A host name is not an address; the error points at the value.
    let e = parse(&format!("{head}[metrics]\nlisten = \"localhost:9464\"\n")).expect_err("no");
    assert_eq!((e.line, e.column), (4, 10), "{e}");
    let e = parse(&format!("{head}[metrics]\nmax_tenants = 3\n")).expect_err("no listen");
    assert!(e.message.contains("listen"), "{e}");
    let e = parse(&format!(
        "{head}[metrics]\nlisten = \"127.0.0.1:1\"\nport = 2\n"
    ))
    .expect_err("unknown key");
    assert!(e.message.contains("port"), "{e}");
    let e = parse(&format!(
        "{head}[metrics]\nlisten = \"127.0.0.1:1\"\nmax_tenants = -1\n"
    ))
    .expect_err("negative");
    assert_eq!(e.line, 5, "{e}");
}

#[test]
fn nvml_is_off_by_default_and_its_interval_is_a_duration_over_zero() {
    let head = "spool = \"s\"\nstate_dir = \"d\"\n";
    let c = parse(head).expect("config");
    assert_eq!(c.nvml, NvmlConfig::default());
    assert!(!c.nvml.processes);
    assert_eq!(c.nvml.interval, Duration::from_secs(10));
    let c = parse(&format!(
        "{head}[nvml]\nprocesses = true\ninterval = \"250ms\"\n"
    ))
    .expect("config");
    assert_eq!(
        c.nvml,
        NvmlConfig {
            processes: true,
            interval: Duration::from_millis(250),
        }
    );
    let e = parse(&format!("{head}[nvml]\ninterval = \"0s\"\n")).expect_err("refused");
    assert_eq!((e.line, e.column), (4, 12), "{e}");
    assert!(e.message.contains("over 0"), "{e}");
    let e = parse(&format!("{head}[nvml]\ninterval = \"often\"\n")).expect_err("refused");
    assert_eq!(e.line, 4, "{e}");
    let e = parse(&format!("{head}[nvml]\nprocesses = \"yes\"\n")).expect_err("refused");
    assert_eq!(e.line, 4, "{e}");
    let e = parse(&format!("{head}[nvml]\nenergy = true\n")).expect_err("refused");
    assert!(e.message.contains("energy"), "{e}");
}

#[test]
fn nvml_processes_needs_the_nvml_feature() {
    let text = "spool = \"s\"\nstate_dir = \"d\"\n[nvml]\nprocesses = true\n";
    let c = parse(text).expect("config");
    match (c.check_files(), cfg!(feature = "nvml")) {
        (Ok(()), true) => {}
        (Err(e @ crate::AgentError::NvmlNotBuilt { .. }), false) => {
            let m = e.to_string();
            assert!(
                m.starts_with("/etc/gpumeter/agent.toml: [nvml] processes = true"),
                "{m}"
            );
            assert!(m.contains("`nvml` feature"), "{m}");
        }
        (other, feature) => panic!("nvml feature {feature}: {other:?}"),
    }
    // Off, any build takes it.
    let off =
        parse("spool = \"s\"\nstate_dir = \"d\"\n[nvml]\nprocesses = false\n").expect("config");
    assert!(off.check_files().is_ok());
}
