//! The matching rule on real-format `/proc` texts, and the watch driven by an explicit clock
//! (no sleeps): the grace, one finding per sighting, a new sighting after a disappearance, a
//! restart.

use std::path::Path;

use gpumeter_core::WarningCode;

use super::*;

/// A telemetry that loads at once.
fn ready(t: Arc<dyn Telemetry>) -> Connect {
    Box::new(move || Ok(Arc::clone(&t)))
}

const UID: &str = "4a7ec3f2-5d1b-4c8e-9f3a-0b2c6d8e1f47";
const ID: &str = "8f3e2d1c0b9a8f7e6d5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281706";
const SECOND: u64 = 1_000_000_000;
/// 2026-12-01T00:00:00Z, ns.
const T0: u64 = 1_796_083_200 * SECOND;

/// `/proc/<pid>/status` of a process as Linux 6.x writes it, with `nspid` as its `NSpid:`.
fn status(nspid: &str) -> String {
    format!(
        "Name:\tpython3\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\n\
         Pid:\t4242\nPPid:\t4200\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n\
         Gid:\t1000\t1000\t1000\t1000\nFDSize:\t256\nGroups:\t4 24 27 \nNStgid:\t{nspid}\n\
         NSpid:\t{nspid}\nNSpgid:\t4200\nNSsid:\t4100\nKthread:\t0\nVmPeak:\t 2411836 kB\n\
         Threads:\t17\nSigQ:\t0/127387\n"
    )
}

#[test]
fn nspid_is_read_from_real_status_texts() {
    assert_eq!(parse_nspid(&status("4242")), Some(vec![4242]));
    // A container: the host's pid, then its own.
    assert_eq!(parse_nspid(&status("4242\t7")), Some(vec![4242, 7]));
    // Nested namespaces (a container in a container).
    assert_eq!(
        parse_nspid(&status("4242\t310\t1")),
        Some(vec![4242, 310, 1])
    );
    // A kernel before 4.1 has no NSpid; a damaged line is not guessed at.
    let old = status("4242").replace("NSpid:\t4242\n", "");
    assert_eq!(parse_nspid(&old), None);
    assert_eq!(parse_nspid(&status("4242\tx")), None);
    assert_eq!(parse_nspid("NSpid:\t\n"), None);
    // NStgid is another line, not taken for NSpid.
    assert_eq!(parse_nspid("NStgid:\t9\t1\n"), None);
}

#[test]
fn the_cgroup_path_is_the_v2_line_else_the_first() {
    let v2 = format!(
        "0::/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{ID}.scope\n",
        UID.replace('-', "_")
    );
    assert_eq!(
        cgroup_path(&v2).as_deref(),
        Some(v2.trim_end().trim_start_matches("0::"))
    );
    let v1 = format!(
        "12:memory:/kubepods/burstable/pod{UID}/{ID}\n11:pids:/kubepods/burstable/pod{UID}/{ID}\n"
    );
    let first = format!("/kubepods/burstable/pod{UID}/{ID}");
    assert_eq!(cgroup_path(&v1).as_deref(), Some(first.as_str()));
    // Hybrid: v1 controllers and the unified line; the unified one wins.
    let hybrid = "9:name=systemd:/\n4:memory:/process_api/99cd\n0::/user.slice/x.scope\n";
    assert_eq!(cgroup_path(hybrid).as_deref(), Some("/user.slice/x.scope"));
    assert_eq!(cgroup_path(""), None);
    assert_eq!(cgroup_path("garbage"), None);
}

fn header(pid: u32, labels: &[(&str, &str)]) -> GmrHeader {
    GmrHeader {
        process_id: pid,
        host: "pod-a".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..GmrHeader::default()
    }
}

fn facts(nspid: &[u32], cgroup: Option<&str>) -> ProcFacts {
    ProcFacts {
        nspid: nspid.to_vec(),
        cgroup: cgroup.map(str::to_string),
        pid_ns: None,
    }
}

#[test]
fn a_recording_belongs_by_host_or_innermost_pid_unless_its_labels_disagree() {
    let pod_path = format!("/kubepods/besteffort/pod{UID}/{ID}");
    let in_pod = facts(&[4242, 7], Some(&pod_path));
    // The host pid, or the pid the process sees for itself.
    assert!(belongs(&header(4242, &[]), 4242, Some(&in_pod)));
    assert!(belongs(&header(7, &[]), 4242, Some(&in_pod)));
    // Neither: another process.
    assert!(!belongs(&header(8, &[]), 4242, Some(&in_pod)));
    // /proc unreadable: the host pid alone.
    assert!(belongs(&header(4242, &[]), 4242, None));
    assert!(!belongs(&header(7, &[]), 4242, None));
    // A cgroup namespace's root says nothing; the whole path, or its tail, agrees.
    assert!(belongs(&header(7, &[("cgroup", "/")]), 4242, Some(&in_pod)));
    assert!(belongs(
        &header(7, &[("cgroup", &pod_path)]),
        4242,
        Some(&in_pod)
    ));
    assert!(belongs(
        &header(7, &[("cgroup", &format!("/{ID}"))]),
        4242,
        Some(&in_pod)
    ));
    // Another container's pid 7: its path, its pod UID or its container id differs.
    let other_pod = "0b2c6d8e-1f47-4c8e-9f3a-4a7ec3f25d1b";
    let other_id = ID.replace('8', "9");
    let other_path = format!("/kubepods/besteffort/pod{other_pod}/{other_id}");
    assert!(!belongs(
        &header(7, &[("cgroup", &other_path)]),
        4242,
        Some(&in_pod)
    ));
    assert!(!belongs(
        &header(7, &[("cgroup", "/x")]),
        4242,
        Some(&in_pod)
    ));
    assert!(!belongs(
        &header(7, &[("POD_UID", other_pod)]),
        4242,
        Some(&in_pod)
    ));
    // The same pod, in the spelling of the downward API (upper case is taken as lower).
    assert!(belongs(
        &header(7, &[("POD_UID", &UID.to_uppercase())]),
        4242,
        Some(&in_pod)
    ));
    // Labels are not held against a process whose cgroup cannot be read.
    assert!(belongs(
        &header(7, &[("POD_UID", other_pod)]),
        4242,
        Some(&facts(&[4242, 7], None))
    ));
}

/// A fake `/proc` with processes `(host pid, NSpid text, pid namespace, cgroup text)`: each
/// `ns/pid` a link to `pid:[<namespace>]`, as Linux shows it.
fn proc_with_ns(processes: &[(u32, &str, u64, &str)]) -> tempfile::TempDir {
    let dir = proc_root(
        &processes
            .iter()
            .map(|&(pid, nspid, _, cgroup)| (pid, nspid, cgroup))
            .collect::<Vec<_>>(),
    );
    for (pid, _, ns, _) in processes {
        let p = dir.path().join(pid.to_string()).join("ns");
        std::fs::create_dir_all(&p).expect("mkdir ns");
        std::os::unix::fs::symlink(format!("pid:[{ns}]"), p.join("pid")).expect("ns link");
    }
    dir
}

#[test]
fn a_recording_with_pid_ns_belongs_to_its_process_alone() {
    // Two containers' processes, both pid 1 in their own pid namespaces (111 and 222), both
    // in private cgroup namespaces (their recordings say `cgroup = "/"`).
    let root = proc_with_ns(&[
        (100, "100\t1", 111, "0::/kubepods/pod-a\n"),
        (200, "200\t1", 222, "0::/kubepods/pod-b\n"),
    ]);
    let ours = header(1, &[("cgroup", "/"), ("pid_ns", "111")]);
    let elsewhere = header(1, &[("cgroup", "/"), ("pid_ns", "333")]);
    let f100 = read_proc(root.path(), 100).expect("100");
    let f200 = read_proc(root.path(), 200).expect("200");
    assert_eq!(f100.pid_ns, Some(111));
    assert!(belongs(&ours, 100, Some(&f100)));
    assert!(
        !belongs(&ours, 200, Some(&f200)),
        "same pid, another namespace"
    );
    assert!(!belongs(&elsewhere, 100, Some(&f100)));
    assert!(!belongs(&elsewhere, 200, Some(&f200)));
    // Without pid_ns the old rule cannot tell them apart.
    let old = header(1, &[("cgroup", "/")]);
    assert!(belongs(&old, 100, Some(&f100)) && belongs(&old, 200, Some(&f200)));
    // The namespace matches but the pid is another process's of that namespace.
    assert!(!belongs(&header(2, &[("pid_ns", "111")]), 100, Some(&f100)));
    // A namespace link that cannot be read: the old rule.
    let unlinked = facts(&[100, 1], Some("/kubepods/pod-a"));
    assert!(belongs(&ours, 100, Some(&unlinked)));

    // Through the watch: 200 is found unmetered, 100 is not.
    let mut w = watch(root.path(), 30 * SECOND);
    let recs = [&ours, &elsewhere];
    let both = listed(0, &[(100, Some(5)), (200, Some(6))]);
    assert!(w.observe(T0, &both, &recs).found.is_empty());
    let c = w.observe(T0 + 30 * SECOND, &both, &recs);
    let pids: Vec<u32> = c.found.iter().map(|u| u.pid).collect();
    assert_eq!(pids, vec![200]);
    assert_eq!(c.found[0].namespace_pid, Some(1));
}

#[test]
fn this_test_process_is_matched_by_its_own_pid_namespace() {
    let proc = Path::new("/proc");
    let me = std::process::id();
    let ns = crate::hostproc::read_pid_ns(proc, me).expect("/proc/<pid>/ns/pid of this test");
    let facts = read_proc(proc, me).expect("/proc/<pid>/status of this test");
    assert_eq!(facts.pid_ns, Some(ns));
    let inner = *facts.nspid.last().expect("NSpid");
    let ours = header(inner, &[("pid_ns", &ns.to_string())]);
    let other = header(inner, &[("pid_ns", &(ns + 1).to_string())]);
    assert!(belongs(&ours, me, Some(&facts)));
    assert!(!belongs(&other, me, Some(&facts)));
}

/// A fake `/proc` with processes `(host pid, NSpid text, cgroup text)`.
fn proc_root(processes: &[(u32, &str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (pid, nspid, cgroup) in processes {
        let p = dir.path().join(pid.to_string());
        std::fs::create_dir_all(&p).expect("mkdir");
        std::fs::write(p.join("status"), status(nspid)).expect("status");
        std::fs::write(p.join("cgroup"), cgroup).expect("cgroup");
    }
    dir
}

fn gpu(index: u32) -> Gpu {
    Gpu {
        index,
        uuid: Some(format!("GPU-{index:08x}-0000-0000-0000-000000000000")),
        ..Gpu::default()
    }
}

fn listed(index: u32, processes: &[(u32, Option<u64>)]) -> Listing {
    vec![(
        gpu(index),
        Ok(processes
            .iter()
            .map(|&(pid, used_memory_bytes)| GpuProcess {
                pid,
                used_memory_bytes,
            })
            .collect()),
    )]
}

/// A watch fed by `observe` alone (its listing thread is never started: `poll` is not called).
fn watch(root: &Path, grace_ns: u64) -> Watch {
    let t: Arc<dyn Telemetry> = Arc::new(gpumeter_nvml::Recorded::new(Vec::new()));
    Watch::new(Some(ready(t)), &NvmlConfig::default(), grace_ns).with_proc_root(root)
}

#[test]
fn a_process_without_a_recording_is_found_once_after_the_grace() {
    let root = proc_root(&[(100, "100\t1", "0::/\n"), (200, "200", "0::/user.slice\n")]);
    let mut w = watch(root.path(), 30 * SECOND);
    // Process 100 has a recording under its namespace pid 1; 200 has none.
    let rec = header(1, &[]);
    let recs = [&rec];
    let both = |m200| listed(0, &[(100, Some(5)), (200, m200)]);
    assert_eq!(w.observe(T0, &both(Some(10)), &recs), Change::default());
    assert_eq!(
        w.observe(T0 + 29 * SECOND, &both(None), &recs),
        Change::default()
    );
    assert!(w.running().is_empty(), "not before the grace");
    let c = w.observe(T0 + 30 * SECOND, &both(Some(7)), &recs);
    let want = UnmeteredProcess {
        device_index: 0,
        device_uuid: Some("GPU-00000000-0000-0000-0000-000000000000".into()),
        pid: 200,
        namespace_pid: None,
        first_seen_ns: T0,
        last_seen_ns: T0 + 30 * SECOND,
        used_memory_bytes: Some(10),
    };
    assert_eq!(c.found, vec![want.clone()]);
    assert!(!c.gone);
    // Once per sighting, while it stays listed.
    let later = w.observe(T0 + 90 * SECOND, &both(Some(12)), &recs);
    assert!(later.is_empty(), "{later:?}");
    let running = w.running();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].last_seen_ns, T0 + 90 * SECOND);
    assert_eq!(running[0].used_memory_bytes, Some(12));
    // The waiting copy is brought up to date when a set takes it.
    assert_eq!(w.refreshed(vec![want]), running);
    // Gone: the finding is dropped, and a later sighting is a new one.
    let gone = w.observe(T0 + 100 * SECOND, &listed(0, &[(100, None)]), &recs);
    assert!(gone.gone && gone.found.is_empty());
    assert!(w.found().is_empty());
    assert!(w.observe(T0 + 110 * SECOND, &both(None), &recs).is_empty());
    let again = w.observe(T0 + 140 * SECOND, &both(None), &recs);
    assert_eq!(again.found.len(), 1);
    assert_eq!(again.found[0].first_seen_ns, T0 + 110 * SECOND);
    assert_eq!(again.found[0].used_memory_bytes, None);
}

#[test]
fn a_process_gone_before_the_grace_or_metered_is_never_found() {
    let root = proc_root(&[(300, "300\t42", "0::/\n")]);
    let mut w = watch(root.path(), 30 * SECOND);
    let rec = header(42, &[]);
    // Metered (its namespace pid has a recording) for minutes.
    for t in 0..10 {
        let c = w.observe(T0 + t * 60 * SECOND, &listed(1, &[(300, Some(1))]), &[&rec]);
        assert!(c.is_empty(), "{c:?}");
    }
    // Its recording gone (ended): the grace counts from then.
    let c = w.observe(T0 + 600 * SECOND, &listed(1, &[(300, None)]), &[]);
    assert!(c.is_empty());
    let c = w.observe(T0 + 629 * SECOND, &listed(1, &[(300, None)]), &[]);
    assert!(c.is_empty());
    // Another process on another GPU, gone before the grace.
    let mut w = watch(root.path(), 30 * SECOND);
    assert!(w
        .observe(T0, &listed(2, &[(999_999, None)]), &[])
        .is_empty());
    assert!(w.observe(T0 + 20 * SECOND, &listed(2, &[]), &[]).is_empty());
    assert!(w.observe(T0 + 60 * SECOND, &listed(2, &[]), &[]).is_empty());
    assert!(w.found().is_empty() && w.running().is_empty());
}

#[test]
fn a_gpu_that_cannot_be_listed_keeps_its_sightings() {
    let root = proc_root(&[]);
    let mut w = watch(root.path(), 30 * SECOND);
    assert!(w.observe(T0, &listed(0, &[(500, None)]), &[]).is_empty());
    let failed: Listing = vec![(
        gpu(0),
        Err(TelemetryError::Failed {
            call: "nvmlDeviceGetComputeRunningProcesses_v3",
            device: Some(0),
            detail: "GPU is lost".into(),
        }),
    )];
    assert!(w.observe(T0 + 10 * SECOND, &failed, &[]).is_empty());
    // Listed again: the first sighting stands, so the grace has passed.
    let c = w.observe(T0 + 31 * SECOND, &listed(0, &[(500, None)]), &[]);
    assert_eq!(c.found.len(), 1);
    assert_eq!(c.found[0].first_seen_ns, T0);
}

#[test]
fn found_processes_restored_after_a_restart_are_not_found_again() {
    let root = proc_root(&[]);
    let mut w = watch(root.path(), 30 * SECOND);
    assert!(w
        .observe(T0, &listed(0, &[(600, None), (601, None)]), &[])
        .is_empty());
    let c = w.observe(
        T0 + 30 * SECOND,
        &listed(0, &[(600, None), (601, None)]),
        &[],
    );
    assert_eq!(c.found.len(), 2);
    let found = w.found();
    // Without listing (`[nvml] processes = false`, or NVML gone) nothing is taken up.
    let mut off = Watch::new(None, &NvmlConfig::default(), 30 * SECOND);
    off.restore(&found);
    assert!(off.found().is_empty() && off.running().is_empty());
    assert_eq!(off.poll(&[]), None);
    // A new agent with what the checkpoint kept; 601 ended during the restart.
    let mut w = watch(root.path(), 30 * SECOND);
    w.restore(&found);
    let c = w.observe(T0 + 300 * SECOND, &listed(0, &[(600, None)]), &[]);
    assert!(c.found.is_empty());
    assert!(c.gone, "601 is no longer listed");
    assert_eq!(w.running().len(), 1);
    assert_eq!(w.running()[0].pid, 600);
}

#[test]
fn the_warning_names_pid_device_times_and_memory() {
    let p = UnmeteredProcess {
        device_index: 3,
        device_uuid: Some("GPU-5c0ffee0-1234-5678-9abc-def012345678".into()),
        pid: 4242,
        namespace_pid: Some(7),
        first_seen_ns: T0 + 1_500_000,
        last_seen_ns: T0 + 45 * SECOND,
        used_memory_bytes: Some(1 << 30),
    };
    let w = p.warning();
    assert_eq!(w.code(), &WarningCode::UnmeteredProcess);
    assert_eq!(
        w.message(),
        "GPU process 4242 (pid 7 in its pid namespace) held GPU 3 \
         (GPU-5c0ffee0-1234-5678-9abc-def012345678) with no recording in the spool: first seen \
         2026-12-01T00:00:00.001Z, last seen 2026-12-01T00:00:45.000Z, used memory 1073741824 \
         bytes at most; its GPU work is not metered (started without the injection library?)"
    );
    let bare = UnmeteredProcess {
        device_uuid: None,
        namespace_pid: None,
        used_memory_bytes: None,
        ..p
    };
    let m = bare.message();
    assert!(
        m.starts_with("GPU process 4242 held GPU 3 (UUID unknown)"),
        "{m}"
    );
    assert!(m.contains("used memory unknown"), "{m}");
    // The checkpoint's form leaves out what is unknown and reads back.
    let json = serde_json::to_string(&bare).expect("json");
    assert_eq!(
        json,
        format!(
            "{{\"device_index\":3,\"pid\":4242,\"first_seen_ns\":{},\"last_seen_ns\":{}}}",
            T0 + 1_500_000,
            T0 + 45 * SECOND
        )
    );
    assert_eq!(
        serde_json::from_str::<UnmeteredProcess>(&json).expect("reads"),
        bare
    );
}

#[test]
fn warnings_added_to_a_report_keep_it_sealed() {
    let mut report = gpumeter_core::Meter::new(gpumeter_core::MeterConfig::default())
        .finish()
        .expect("an empty report");
    report.seal().expect("seal");
    let before = report.sha256.clone();
    add_to_report(&mut report, &[]).expect("nothing to add");
    assert_eq!(report.sha256, before);
    let p = UnmeteredProcess {
        device_index: 0,
        device_uuid: None,
        pid: 1,
        namespace_pid: None,
        first_seen_ns: T0,
        last_seen_ns: T0,
        used_memory_bytes: None,
    };
    add_to_report(&mut report, &[p]).expect("sealed");
    assert_eq!(report.warnings.len(), 1);
    assert_ne!(report.sha256, before);
    assert!(report.verify_digest());
}

#[test]
fn listings_come_from_a_thread_and_a_wedged_driver_never_holds_a_step() {
    let root = proc_root(&[]);
    let nvml = gpumeter_nvml::Recorded::new(vec![gpu(0)]).with_processes(
        0,
        [vec![GpuProcess {
            pid: 700,
            used_memory_bytes: Some(9),
        }]],
    );
    let nvml: Arc<dyn Telemetry> = Arc::new(nvml);
    let config = NvmlConfig {
        processes: true,
        interval: Duration::from_millis(5),
    };
    // Grace 0: found at its first listing.
    let mut w = Watch::new(Some(ready(nvml)), &config, 0).with_proc_root(root.path());
    let start = Instant::now();
    let change = loop {
        if let Some(c) = w.poll(&[]) {
            break c;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no listing came");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(change.found.len(), 1, "{change:?}");
    assert_eq!(change.found[0].pid, 700);
    assert_eq!(change.found[0].used_memory_bytes, Some(9));

    // A driver that does not answer: the step goes on with nothing listed.
    let wedged: Arc<dyn Telemetry> =
        Arc::new(gpumeter_nvml::Recorded::new(vec![gpu(0)]).with_delay(Duration::from_secs(3600)));
    let mut w = Watch::new(Some(ready(wedged)), &config, 0).with_proc_root(root.path());
    for _ in 0..3 {
        assert_eq!(w.poll(&[]), None);
    }
}

#[test]
fn nvml_that_cannot_be_loaded_yet_is_tried_again_until_it_answers() {
    use std::sync::atomic::AtomicU32;
    let root = proc_root(&[]);
    let tries = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&tries);
    // Two failures (the driver container is not up yet), then NVML answers.
    let connect: Connect = Box::new(move || {
        if counted.fetch_add(1, Ordering::SeqCst) < 2 {
            return Err(TelemetryError::Unavailable {
                call: "nvmlInit_v2",
                detail: "NVIDIA driver is not loaded".into(),
            });
        }
        let nvml = gpumeter_nvml::Recorded::new(vec![gpu(0), gpu(1)]).with_processes(
            0,
            [vec![GpuProcess {
                pid: 700,
                used_memory_bytes: None,
            }]],
        );
        Ok(Arc::new(nvml) as Arc<dyn Telemetry>)
    });
    let config = NvmlConfig {
        processes: true,
        interval: Duration::from_millis(2),
    };
    let mut w = Watch::new(Some(connect), &config, 0).with_proc_root(root.path());
    assert_eq!(w.listing_up(), None, "no answer yet");
    let (mut saw_down, start) = (false, Instant::now());
    while w.listing_up() != Some(true) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "NVML was not tried again"
        );
        w.poll(&[]);
        saw_down |= w.listing_up() == Some(false);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(saw_down, "the failed loads were shown as down");
    assert_eq!(tries.load(Ordering::SeqCst), 3, "loaded once it answered");
    assert_eq!(w.gpu_labels().len(), 2, "{:?}", w.gpu_labels());
}

#[test]
fn a_gpu_no_longer_listed_holds_no_process() {
    let root = proc_root(&[]);
    let mut w = watch(root.path(), 0);
    let p = GpuProcess {
        pid: 700,
        used_memory_bytes: None,
    };
    let both: Listing = vec![(gpu(0), Ok(vec![p])), (gpu(1), Ok(Vec::new()))];
    let found = w.observe(T0, &both, &[]);
    assert_eq!(found.found.len(), 1);
    assert_eq!(w.running().len(), 1);
    // GPU 0 fell off the bus: only GPU 1 is listed.
    let change = w.observe(T0 + SECOND, &vec![(gpu(1), Ok(Vec::new()))], &[]);
    assert!(change.gone, "{change:?}");
    assert!(w.running().is_empty());
    assert_eq!(w.gpu_labels().len(), 1);
}
