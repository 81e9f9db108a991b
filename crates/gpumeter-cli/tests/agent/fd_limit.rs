//! The metrics endpoint outlives running out of file descriptors: the agent runs under
//! `ulimit -n 20` (it holds about 10 at rest, and its metrics server at most 4 + 16
//! connections), a client opens 100 connections to its metrics port (the agent's accept fails
//! with EMFILE once its descriptors are used up), closes them, and `/healthz` answers again
//! (docs/AGENT.md, "Metrics"). Needs no fakes: an empty spool.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait_for;

/// Kills the agent when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` on `addr`: the status code, or `None` when no answer comes.
fn get(addr: &str, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: agent\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).ok()?;
    answer.split(' ').nth(1)?.parse().ok()
}

#[test]
fn the_metrics_endpoint_answers_again_after_the_agent_ran_out_of_file_descriptors() {
    let dir = tempfile::tempdir().expect("tempdir");
    for d in ["spool", "state", "reports"] {
        std::fs::create_dir_all(dir.path().join(d)).expect("dir");
    }
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        "spool = \"spool\"\nstate_dir = \"state\"\npoll = \"100ms\"\n\n[[sink]]\nkind = \
         \"reports\"\ndir = \"reports\"\n\n[metrics]\nlisten = \"127.0.0.1:0\"\n",
    )
    .expect("config");
    let log = dir.path().join("agent.log");
    let child = Command::new("bash")
        .args(["-c", "ulimit -n 20 && exec \"$0\" agent --config \"$1\""])
        .arg(env!("CARGO_BIN_EXE_gpumeter"))
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("bash");
    let mut agent = Killed(child);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let addr = super::prometheus::metrics_addr_in(read_log);
    assert_eq!(get(&addr, "/healthz"), Some(200), "{}", read_log());

    // More connections than the agent has descriptors: those past its limit wait in the
    // listen backlog, its accept failing with EMFILE.
    let idle: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect(&addr).ok())
        .collect();
    assert!(idle.len() >= 20, "only {} connections", idle.len());
    wait_for("an accept error logged", Duration::from_secs(30), || {
        read_log().contains("cannot accept a connection")
    });
    drop(idle);
    wait_for("/healthz to answer again", Duration::from_secs(30), || {
        get(&addr, "/healthz") == Some(200)
    });
    assert_eq!(
        agent.0.try_wait().expect("the agent's status"),
        None,
        "the agent exited: {}",
        read_log()
    );
}
