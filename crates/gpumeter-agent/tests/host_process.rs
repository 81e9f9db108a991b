//! A recording's process found on the host (docs/AGENT.md, "Tenants"; `gpumeter_agent::hostproc`):
//! the agent, a library stepping on a real spool and the real `/proc`, finds the process of a
//! recording by its `pid_ns` label and pid when it first follows it, keeps it in the
//! checkpoint, and still has it, unchanged, after the process ended and the agent restarted.
//!
//! The process is a `sleep` this test starts (so that it can end it); it shares this test's
//! pid namespace, as a process on the agent's host does.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpumeter_agent::hostproc::{read_pid_ns, HostProcess};
use gpumeter_agent::state::Checkpoint;
use gpumeter_agent::{Agent, AgentConfig};
use gpumeter_synth::SynthConfig;

#[path = "support/recording.rs"]
mod recording_support;
use recording_support::Synthetic;

const SECOND: u64 = 1_000_000_000;

fn config(root: &Path) -> AgentConfig {
    let text = "spool = \"spool\"\nstate_dir = \"state\"\nwindow = \"1s\"\n\
                horizon = \"100ms\"\ngrace = \"1s\"\npoll = \"20ms\"\n\n[[sink]]\n\
                kind = \"reports\"\ndir = \"reports\"\n";
    AgentConfig::from_toml_str(&root.join("agent.toml"), text).expect("agent.toml")
}

/// Puts a recording of process `pid` (still being written) with `labels` in the spool of
/// `root`; its identity.
fn record(root: &Path, pid: u32, labels: &[(&str, &str)]) -> String {
    let start_ns = gpumeter_nvml::now_unix_ns() - 5 * SECOND;
    let cfg = SynthConfig {
        kernels: 50,
        devices: 1,
        streams: 1,
        tenants: 1,
        processes: 1,
        kernels_per_second: 2_000,
        seed: 11,
        start_ns,
        kernels_per_buffer: 25,
        external_correlation: true,
        api_records: true,
    };
    let r = Synthetic::labelled(&cfg, pid, Some(start_ns), labels);
    let spool: PathBuf = root.join("spool");
    std::fs::create_dir_all(&spool).expect("spool");
    std::fs::write(spool.join(format!("synth-{pid}.gmr")), r.open(usize::MAX)).expect("write");
    r.identity()
}

/// What the checkpoint on disk keeps of recording `id`'s process.
fn on_disk(root: &Path, id: &str) -> Option<HostProcess> {
    let c = Checkpoint::load(&root.join("state")).expect("checkpoint");
    c.host_processes.get(id).cloned()
}

#[test]
fn a_recordings_process_is_found_kept_and_unchanged_after_it_ends_and_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let mut child = Command::new("sleep")
        .arg("600")
        .spawn()
        .expect("start sleep");
    let pid = child.id();
    let proc = Path::new("/proc");
    let ns = read_pid_ns(proc, pid).expect("/proc/<pid>/ns/pid of the child");
    let id = record(root, pid, &[("cgroup", "/"), ("pid_ns", &ns.to_string())]);
    // A recording of the same pid in another pid namespace (another container's pid) is not
    // this process.
    let other = record(
        root,
        pid + 1_000_000,
        &[("cgroup", "/"), ("pid_ns", &(ns + 1).to_string())],
    );

    let cgroup_text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let cgroup = gpumeter_agent::unmetered::cgroup_path(&cgroup_text);
    let pod = cgroup
        .as_deref()
        .map(gpumeter_agent::cgroup::parse_cgroup)
        .unwrap_or_default();
    let want = HostProcess {
        host_pid: pid,
        cgroup,
        pod_uid: pod.pod_uid,
        container_id: pod.container_id,
    };

    let mut agent = Agent::open(config(root)).expect("open");
    agent.step(false).expect("a step");
    assert_eq!(agent.checkpoint().host_processes.get(&id), Some(&want));
    assert_eq!(on_disk(root, &id), Some(want.clone()), "checkpointed");
    assert_eq!(agent.checkpoint().host_processes.get(&other), None);

    child.kill().expect("kill");
    child.wait().expect("wait");
    assert!(read_pid_ns(proc, pid).is_none(), "the process is gone");
    drop(agent);

    let mut agent = Agent::open(config(root)).expect("open again");
    agent.step(false).expect("a step");
    agent.step(false).expect("another step");
    assert_eq!(agent.checkpoint().host_processes.get(&id), Some(&want));
    assert_eq!(on_disk(root, &id), Some(want), "unchanged on disk");
}
