//! A recording that is deleted, truncated, replaced, rewritten with another header, copied,
//! torn, or not a recording at all, while the agent reads the spool: counted loss (`late`) or
//! a clear warning, never a crash or a double count; the other recordings are metered on.
//!
//! The agent runs as a library, one `step` at a time, over synthetic recordings written frame
//! by frame. Each recording's header names the host `synth` (not this machine), so the agent
//! treats its process as running and the recording as unfinished until its end frame; the
//! grace is an hour, so a torn tail never counts as loss here. Timestamps lie days in the
//! past: the wall clock never holds windows back, only the recordings' progress does.
//! Recordings of different seeds run on different devices, so the rows of each recording's
//! expected usage are told apart by device.

use std::io::Write as _;
use std::path::PathBuf;

use gpumeter_agent::{Agent, AgentConfig};
use gpumeter_core::{merge_reports, LossReason, Meter, MeterConfig, UsageReport, WindowSize};
use gpumeter_recording::gmr::read_gmr;
use gpumeter_recording::{announce_sources, CuptiFormat, CuptiInput, CuptiOptions};
use gpumeter_synth::SynthConfig;

#[path = "support/logs.rs"]
mod logs;
#[path = "support/recording.rs"]
mod recording_support;
use logs::Logs;
use recording_support::Synthetic;

const SECOND: u64 = 1_000_000_000;
/// 2026-12-01T00:00:00Z, ns.
const T0: u64 = 1_796_083_200 * SECOND;

/// A synthetic recording: its whole bytes (with the end frame) and where each frame ends.
struct Rec {
    bytes: Vec<u8>,
    /// `ends[i]`: the end of frame `i` (frame 0 is the string table after the header); the
    /// last is the end of the file.
    ends: Vec<usize>,
}

impl Rec {
    fn new(seed: u64, pid: u32, start_ns: u64, kernels: u64, per_second: u64) -> Rec {
        let per_buffer = 250;
        let cfg = SynthConfig {
            kernels,
            devices: 1,
            streams: 2,
            tenants: 2,
            processes: 1,
            kernels_per_second: per_second,
            seed,
            start_ns,
            kernels_per_buffer: per_buffer,
            external_correlation: true,
            api_records: true,
        };
        let Synthetic { bytes, ends } = Synthetic::new(&cfg, pid, None);
        let rec = Rec { bytes, ends };
        assert!(
            !read_gmr(rec.open(usize::MAX)).expect("prefix").finished,
            "the longest open prefix has no end frame"
        );
        rec
    }

    /// The first `k + 1` frames (at most every frame but the end frame): a recording its
    /// process is still writing.
    fn open(&self, k: usize) -> &[u8] {
        &self.bytes[..self.ends[k.min(self.ends.len() - 2)]]
    }

    /// Open prefixes before the whole file.
    fn steps(&self) -> usize {
        self.ends.len() - 1
    }

    fn identity(&self) -> String {
        gpumeter_agent::spool::identity(&read_gmr(&self.bytes).expect("read").header)
    }
}

/// The meter's configuration the agent's `agent.toml` below gives.
fn meter_config() -> MeterConfig {
    MeterConfig {
        window: WindowSize::from_seconds(1).expect("window"),
        reorder_horizon_ns: 100_000_000,
        ..MeterConfig::default()
    }
}

/// `bytes` metered alone: the usage of windows in `[from, to)` (`to`: `None` for every
/// later window), as `gpumeter usage` of those bytes would give it for those windows.
fn part(bytes: &[u8], from: u64, to: Option<u64>) -> UsageReport {
    let mut meter = Meter::new(meter_config());
    let sources = [CuptiInput {
        name: "r.gmr",
        bytes,
        format: CuptiFormat::Gmr,
    }];
    let (_, batches) =
        announce_sources(&mut meter, &sources, &CuptiOptions::default()).expect("announce");
    gpumeter_core::push_batches(&mut meter, batches);
    if from > 0 {
        meter.drain(from).expect("drain");
    }
    match to {
        Some(to) => meter.drain(to).expect("drain"),
        None => meter.finish().expect("report"),
    }
}

fn whole(bytes: &[u8]) -> UsageReport {
    part(bytes, 0, None)
}

/// The usage rows, as sorted text (tenant, device, window, meter, quantity).
fn rows(reports: &[&UsageReport]) -> Vec<String> {
    let mut v: Vec<String> = reports
        .iter()
        .flat_map(|r| r.usage.iter())
        .map(|u| {
            format!(
                "{} {} {} {:?} {:?}",
                u.tenant, u.device_key, u.window_start, u.meter, u.quantity
            )
        })
        .collect();
    v.sort();
    v
}

fn late(r: &UsageReport) -> u64 {
    r.loss
        .iter()
        .filter(|l| l.reason == LossReason::Late.as_str())
        .map(|l| l.records)
        .sum()
}

/// Records and memory events a recording's bytes hold (what the agent counts as `late` when
/// all of them lie in closed windows).
fn units(bytes: &[u8]) -> u64 {
    let mut meter = Meter::new(meter_config());
    let sources = [CuptiInput {
        name: "r.gmr",
        bytes,
        format: CuptiFormat::Gmr,
    }];
    let (_, batches) =
        announce_sources(&mut meter, &sources, &CuptiOptions::default()).expect("announce");
    batches
        .iter()
        .map(|b| (b.records.len() + b.memory.len()) as u64)
        .sum()
}

/// Work records (kernels, copies, sets) a report meters.
fn work(r: &UsageReport) -> u64 {
    r.records.kernel + r.records.memcpy + r.records.memset
}

/// A node: a spool, a state folder and a reports sink in a temporary folder.
struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    config: AgentConfig,
}

impl Node {
    fn new() -> Node {
        Node::with_grace("1h")
    }

    fn with_grace(grace: &str) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().to_path_buf();
        let text = format!(
            "spool = \"spool\"\nstate_dir = \"state\"\nwindow = \"1s\"\n\
             horizon = \"100ms\"\ngrace = \"{grace}\"\n\n[[sink]]\nkind = \"reports\"\n\
             dir = \"reports\"\n"
        );
        let config =
            AgentConfig::from_toml_str(&root.join("agent.toml"), &text).expect("agent.toml");
        Node {
            _dir: dir,
            root,
            config,
        }
    }

    fn open(&self) -> Agent {
        Agent::open(self.config.clone()).expect("open the agent")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join("spool").join(name)
    }

    /// Writes a spool file whole (create or truncate, then write).
    fn write(&self, name: &str, bytes: &[u8]) {
        std::fs::write(self.path(name), bytes).expect("write a spool file");
    }

    /// Writes `bytes` over the start of a spool file, in place: same file, no truncation.
    fn overwrite(&self, name: &str, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.path(name))
            .expect("open a spool file");
        f.write_all(bytes).expect("overwrite");
    }

    /// The reports the sink holds, by file name.
    fn reports(&self) -> Vec<(String, UsageReport)> {
        let dir = self.root.join("reports");
        let mut out = Vec::new();
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return out;
        };
        for e in entries {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".usage.json") {
                continue;
            }
            let bytes = std::fs::read(e.path()).expect("read a report");
            let r: UsageReport = serde_json::from_slice(&bytes).expect("parse a report");
            out.push((name, r));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every report merged (`gpumeter usage --format usage` of the sink's folder).
    fn merged(&self) -> UsageReport {
        let reports = self.reports();
        assert!(!reports.is_empty(), "the agent wrote reports");
        merge_reports(&reports).expect("the agent's reports merge")
    }

    fn done(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.root.join("spool").join("done"))
            .map(|d| {
                d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn step(agent: &mut Agent) -> gpumeter_agent::StepOutcome {
    agent
        .step(false)
        .expect("a step goes on whatever the spool holds")
}

/// Writes the next open prefix of each recording and steps, `n` times from prefix `k`.
fn grow(node: &Node, agent: &mut Agent, recs: &[(&str, &Rec)], k: usize, n: usize) {
    for i in k..k + n {
        for (name, rec) in recs {
            node.write(name, rec.open(i));
        }
        step(agent);
    }
}

/// Writes every recording whole (with its end frame) and steps until the agent is idle.
fn finish(node: &Node, agent: &mut Agent, recs: &[(&str, &Rec)]) {
    for (name, rec) in recs {
        node.write(name, &rec.bytes);
    }
    settle(agent);
}

fn settle(agent: &mut Agent) {
    for _ in 0..4 {
        step(agent);
    }
}

fn closed_to(agent: &Agent) -> u64 {
    agent.checkpoint().closed_to_ns
}

fn read_to(agent: &Agent, rec: &Rec) -> usize {
    agent
        .checkpoint()
        .recordings
        .get(&rec.identity())
        .map_or(0, |s| s.read_to as usize)
}

fn two() -> (Rec, Rec) {
    (
        Rec::new(7, 100, T0 + 300_000_000, 8_000, 2_000),
        Rec::new(8, 200, T0 + 700_000_000, 8_000, 2_000),
    )
}

fn assert_no_late(r: &UsageReport) {
    assert_eq!(late(r), 0, "no record is late: {:?}", r.loss);
}

#[test]
fn the_uninterrupted_run_and_a_restarted_one_bill_every_record_once() {
    let (a, b) = two();
    let expected = [whole(&a.bytes), whole(&b.bytes)];
    let recs = [("a.gmr", &a), ("b.gmr", &b)];
    let node = Node::new();
    let mut agent = node.open();
    grow(&node, &mut agent, &recs, 0, a.steps());
    assert!(
        closed_to(&agent) > T0 + 2 * SECOND,
        "windows closed while growing"
    );
    finish(&node, &mut agent, &recs);
    assert!(agent.is_idle(), "both recordings are retired");
    assert_eq!(node.done(), vec!["a.gmr", "b.gmr"]);
    let merged = node.merged();
    assert_eq!(rows(&[&merged]), rows(&[&expected[0], &expected[1]]));
    assert_eq!(work(&merged), work(&expected[0]) + work(&expected[1]));
    assert_no_late(&merged);

    // The same run, the agent dropped and opened again from its state every third step.
    let node2 = Node::new();
    let mut agent = node2.open();
    for i in 0..a.steps() {
        if i % 3 == 2 {
            drop(agent);
            agent = node2.open();
        }
        grow(&node2, &mut agent, &recs, i, 1);
    }
    drop(agent);
    let mut agent = node2.open();
    finish(&node2, &mut agent, &recs);
    assert!(agent.is_idle());
    let merged2 = node2.merged();
    assert_eq!(rows(&[&merged2]), rows(&[&merged]));
    assert_eq!(work(&merged2), work(&merged));
    assert_no_late(&merged2);
    // The same window sets over the recordings' time (the last ones end on the wall clock).
    let names = |n: &Node| {
        let mut v: Vec<String> = n.reports().into_iter().map(|r| r.0).collect();
        v.truncate(5);
        v
    };
    assert_eq!(names(&node2), names(&node), "the same window sets");
    assert!(names(&node)[4].ends_with("-01796083204000000000.usage.json"));
}

#[test]
fn a_recording_deleted_mid_run_keeps_its_closed_windows_and_the_others_go_on() {
    let (logs, _guard) = Logs::start();
    let (a, b) = two();
    let node = Node::new();
    let mut agent = node.open();
    let half = a.steps() / 2;
    grow(&node, &mut agent, &[("a.gmr", &a), ("b.gmr", &b)], 0, half);
    let cut = closed_to(&agent);
    let a_read = read_to(&agent, &a);
    assert!(cut > T0 && a_read > 0, "windows closed before the deletion");
    std::fs::remove_file(node.path("a.gmr")).expect("delete");
    grow(&node, &mut agent, &[("b.gmr", &b)], half, b.steps() - half);
    assert_eq!(logs.warned("a.gmr", "disappeared"), 1, "{}", logs.text());
    assert!(
        closed_to(&agent) > cut + SECOND,
        "b's windows close without a"
    );
    finish(&node, &mut agent, &[("b.gmr", &b)]);
    assert!(agent.is_idle());
    let merged = node.merged();
    let a_before = part(&a.bytes[..a_read], 0, Some(cut));
    let b_all = whole(&b.bytes);
    assert_eq!(rows(&[&merged]), rows(&[&a_before, &b_all]));
    assert!(work(&merged) <= work(&whole(&a.bytes)) + work(&b_all));
    assert_no_late(&merged);
}

#[test]
fn a_recording_truncated_below_what_was_read_is_not_billed_twice() {
    let (logs, _guard) = Logs::start();
    let (a, b) = two();
    let node = Node::new();
    let mut agent = node.open();
    let half = a.steps() / 2;
    grow(&node, &mut agent, &[("a.gmr", &a), ("b.gmr", &b)], 0, half);
    let cut = closed_to(&agent);
    let a_read = read_to(&agent, &a);
    assert!(cut > T0 + SECOND && a_read > a.ends[2]);
    // Back to its first three frames: what it held past them, read or not, is gone.
    let short = a.open(2).to_vec();
    assert!(short.len() < a_read);
    node.write("a.gmr", &short);
    grow(&node, &mut agent, &[("b.gmr", &b)], half, b.steps() - half);
    assert!(logs.warned("a.gmr", "shrank") >= 1, "{}", logs.text());
    // `a` never ends: `--once` closes the rest.
    node.write("b.gmr", &b.bytes);
    agent.step(true).expect("once");
    settle(&mut agent);
    let merged = node.merged();
    // Billed: a's windows before the cut as read; a's first frames' later windows (they were
    // never billed); all of b.
    let a_before = part(&a.bytes[..a_read], 0, Some(cut));
    let a_after = part(&short, cut, None);
    let b_all = whole(&b.bytes);
    assert_eq!(rows(&[&merged]), rows(&[&a_before, &a_after, &b_all]));
    assert!(work(&merged) <= work(&whole(&a.bytes)) + work(&b_all));
    assert_no_late(&merged);
}

#[test]
fn a_recording_truncated_into_its_header_is_dropped_with_a_warning() {
    let (logs, _guard) = Logs::start();
    let (a, b) = two();
    let node = Node::new();
    let mut agent = node.open();
    let half = a.steps() / 2;
    grow(&node, &mut agent, &[("a.gmr", &a), ("b.gmr", &b)], 0, half);
    let cut = closed_to(&agent);
    let a_read = read_to(&agent, &a);
    node.write("a.gmr", &a.bytes[..10]);
    for i in half..b.steps() {
        node.write("b.gmr", b.open(i));
        agent.step(false).expect("a torn header stops nothing");
    }
    assert!(logs.warned("a.gmr", "") >= 1, "{}", logs.text());
    assert!(closed_to(&agent) > cut + SECOND, "b's windows close");
    finish(&node, &mut agent, &[("b.gmr", &b)]);
    let merged = node.merged();
    let a_before = part(&a.bytes[..a_read], 0, Some(cut));
    let b_all = whole(&b.bytes);
    assert_eq!(rows(&[&merged]), rows(&[&a_before, &b_all]));
}

/// `a` is replaced by `c` (another process, another header) whose records all lie in windows
/// already closed: they are loss `late` in the next set, never billed.
fn replaced(in_place: bool) {
    let (logs, _guard) = Logs::start();
    let (a, b) = two();
    // 6 000 kernels in 0.3 s: longer than `a` was, all in closed windows.
    let c = Rec::new(9, 300, T0 + 100_000_000, 6_000, 20_000);
    let node = Node::new();
    let mut agent = node.open();
    let half = a.steps() / 2;
    grow(&node, &mut agent, &[("a.gmr", &a), ("b.gmr", &b)], 0, half);
    let cut = closed_to(&agent);
    let a_read = read_to(&agent, &a);
    assert!(cut > T0 + SECOND, "c's windows are closed");
    if in_place {
        // First as long as `a` was, over it: c's header and a torn tail of c's frames.
        let len = std::fs::metadata(node.path("a.gmr")).expect("meta").len() as usize;
        assert!(len < c.bytes.len());
        node.overwrite("a.gmr", &c.bytes[..len]);
        step(&mut agent);
        assert_eq!(closed_to(&agent), cut, "c, unfinished, holds the windows");
        // Then growing to its end.
        node.overwrite("a.gmr", &c.bytes);
    } else {
        let tmp = node.root.join("c.tmp");
        std::fs::write(&tmp, &c.bytes).expect("write");
        std::fs::rename(&tmp, node.path("a.gmr")).expect("replace");
    }
    let sets_before = node.reports().len();
    grow(&node, &mut agent, &[("b.gmr", &b)], half, b.steps() - half);
    assert_eq!(logs.warned("a.gmr", "replaced"), 1, "{}", logs.text());
    finish(&node, &mut agent, &[("b.gmr", &b)]);
    assert!(agent.is_idle(), "c and b are retired");
    let reports = node.reports();
    let next = &reports[sets_before].1;
    let c_all = whole(&c.bytes);
    assert!(work(&c_all) > 0);
    let c_units = units(&c.bytes);
    assert!(c_units >= work(&c_all));
    assert_eq!(late(next), c_units, "c's records are late in the next set");
    let merged = node.merged();
    assert_eq!(late(&merged), c_units, "and in no other set");
    let a_before = part(&a.bytes[..a_read], 0, Some(cut));
    let b_all = whole(&b.bytes);
    assert_eq!(
        rows(&[&merged]),
        rows(&[&a_before, &b_all]),
        "c is not billed"
    );
}

#[test]
fn a_recording_replaced_under_its_name_is_late_not_billed() {
    replaced(false);
}

#[test]
fn a_recording_rewritten_in_place_with_another_header_is_late_not_billed() {
    replaced(true);
}

#[test]
fn files_that_are_not_recordings_are_warned_about_and_ignored() {
    let (logs, _guard) = Logs::start();
    let (a, b) = two();
    let node = Node::new();
    let mut agent = node.open();
    std::fs::create_dir_all(node.root.join("spool")).expect("spool");
    let junk: Vec<u8> = (0..10_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    node.write("junk.gmr", &junk);
    // A recording's header torn past the first 4 KiB: damaged, not being written.
    let mut torn = a.bytes[..64].to_vec();
    torn.extend(std::iter::repeat_n(0u8, 8_192));
    node.write("torn.gmr", &torn);
    node.write("notes.txt", b"not a recording");
    std::fs::create_dir_all(node.path("dir.gmr")).expect("a folder");
    let recs = [("a.gmr", &a), ("b.gmr", &b)];
    grow(&node, &mut agent, &recs, 0, a.steps());
    finish(&node, &mut agent, &recs);
    assert!(
        logs.warned("junk.gmr", "not a readable recording") >= 1,
        "{}",
        logs.text()
    );
    assert!(
        logs.warned("torn.gmr", "not a readable recording") >= 1,
        "{}",
        logs.text()
    );
    assert_eq!(logs.warned("notes.txt", ""), 0);
    let merged = node.merged();
    let (wa, wb) = (whole(&a.bytes), whole(&b.bytes));
    assert_eq!(rows(&[&merged]), rows(&[&wa, &wb]));
    assert_no_late(&merged);
    assert!(
        node.path("junk.gmr").exists(),
        "a foreign file is left alone"
    );
}

#[test]
fn a_torn_tail_waits_and_is_metered_once_when_it_completes() {
    let (a, b) = two();
    let node = Node::new();
    let mut agent = node.open();
    let recs = [("a.gmr", &a), ("b.gmr", &b)];
    let half = a.steps() / 2;
    grow(&node, &mut agent, &recs, 0, half);
    // a stops inside its next frame, for several steps, while b goes on.
    let torn = &a.bytes[..(a.ends[half] + a.ends[half + 1]) / 2];
    node.write("a.gmr", torn);
    let held = closed_to(&agent);
    for i in half..b.steps() {
        node.write("b.gmr", b.open(i));
        step(&mut agent);
    }
    assert!(
        closed_to(&agent) <= held + SECOND,
        "a's complete frames hold the windows"
    );
    assert!(
        read_to(&agent, &a) <= a.ends[half],
        "the torn frame is not read"
    );
    assert!(
        node.merged().records.kernel < 8_000,
        "a's torn frame is not metered yet"
    );
    finish(&node, &mut agent, &recs);
    assert!(agent.is_idle());
    let merged = node.merged();
    let (wa, wb) = (whole(&a.bytes), whole(&b.bytes));
    assert_eq!(rows(&[&merged]), rows(&[&wa, &wb]));
    assert_eq!(work(&merged), work(&wa) + work(&wb));
    assert!(merged.loss.is_empty(), "{:?}", merged.loss);
}

/// `a` copied under a second name mid-run (the same header, the same identity): billed once.
fn copied(copy_name: &str, restart: bool) {
    let (logs, _guard) = Logs::start();
    let (a, b) = two();
    let node = Node::new();
    let mut agent = node.open();
    let recs = [("a.gmr", &a), ("b.gmr", &b)];
    let half = a.steps() / 2;
    grow(&node, &mut agent, &recs, 0, half);
    std::fs::copy(node.path("a.gmr"), node.path(copy_name)).expect("copy");
    if restart {
        drop(agent);
        agent = node.open();
    }
    grow(&node, &mut agent, &recs, half, a.steps() - half);
    finish(&node, &mut agent, &recs);
    let merged = node.merged();
    let (wa, wb) = (whole(&a.bytes), whole(&b.bytes));
    assert_eq!(rows(&[&merged]), rows(&[&wa, &wb]));
    assert_eq!(work(&merged), work(&wa) + work(&wb));
    assert_no_late(&merged);
    assert!(logs.warned(copy_name, "copy") >= 1, "{}", logs.text());
    assert!(node.path(copy_name).exists(), "the copy is left alone");
}

#[test]
fn a_copy_named_after_the_recording_is_not_billed_twice() {
    copied("z-copy.gmr", false);
}

#[test]
fn a_copy_named_before_the_recording_is_not_billed_twice() {
    copied("0-copy.gmr", false);
}

#[test]
fn a_copy_found_by_a_restarted_agent_is_not_billed_twice() {
    copied("0-copy.gmr", true);
}

/// An idle process (its recording stops growing, its process runs on) does not hold the
/// node's windows open past the grace period: once its file is quiet that long, its windows
/// close, while a recording that is still growing holds them as before.
#[test]
fn a_quiet_recording_of_a_running_process_lets_its_windows_close_after_the_grace() {
    let node = Node::with_grace("300ms");
    let mut agent = node.open();
    let (a, _) = two();
    // Half of `a`, unfinished (its host is `synth`: the process counts as running).
    let half = a.steps() / 2;
    node.write("a.gmr", a.open(half));
    step(&mut agent);
    let held = closed_to(&agent);
    let last_start = {
        let cut = read_gmr(a.open(half)).expect("prefix");
        let mut p = 0;
        for f in &cut.frames {
            if let gpumeter_recording::gmr::Frame::ActivityBuffer(b) = &f.frame {
                let (d, _) =
                    gpumeter_cupti::decode_prefix(b, gpumeter_cupti::ApiVersion::Cupti12_8);
                for r in &d.records {
                    if let gpumeter_cupti::Record::Kernel(k) = &r.record {
                        p = p.max(k.start);
                    }
                }
            }
        }
        p
    };
    assert!(
        held <= last_start,
        "a growing recording holds its last windows open"
    );
    // Quiet for longer than the grace: the windows up to the wall clock close.
    std::thread::sleep(std::time::Duration::from_millis(400));
    step(&mut agent);
    assert!(
        closed_to(&agent) > last_start + SECOND,
        "the quiet recording's windows closed: {} vs {last_start}",
        closed_to(&agent)
    );
    assert_eq!(rows(&[&node.merged()]), rows(&[&whole(a.open(half))]));
}
