//! Finding a recording's process on a fake `/proc` (namespace links, `NSpid:` lines and
//! cgroup files laid out in a temporary folder) and on the real one (this test process).

use super::*;

const UID: &str = "4a7ec3f2-5d1b-4c8e-9f3a-0b2c6d8e1f47";
const ID: &str = "8f3e2d1c0b9a8f7e6d5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281706";
/// The fake host's own pid namespace (the agent's).
const HOST_NS: u64 = 4_026_531_836;

/// A fake `/proc` with `self` in [`HOST_NS`] and processes `(host pid, NSpid text, pid
/// namespace, cgroup text)`.
fn fake_proc(processes: &[(u32, &str, u64, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut all = vec![(1, "1", HOST_NS, "0::/init.scope\n")];
    all.extend_from_slice(processes);
    for (pid, nspid, ns, cgroup) in all {
        let p = dir.path().join(pid.to_string());
        std::fs::create_dir_all(p.join("ns")).expect("mkdir");
        std::fs::write(
            p.join("status"),
            format!("Name:\tx\nPid:\t{pid}\nNSpid:\t{nspid}\n"),
        )
        .expect("status");
        std::fs::write(p.join("cgroup"), cgroup).expect("cgroup");
        std::os::unix::fs::symlink(format!("pid:[{ns}]"), p.join("ns/pid")).expect("link");
    }
    std::os::unix::fs::symlink("1", dir.path().join("self")).expect("self");
    // Not a process.
    std::fs::create_dir_all(dir.path().join("sys")).expect("sys");
    dir
}

fn header(host: &str, pid: u32, pid_ns: Option<u64>) -> GmrHeader {
    let mut h = GmrHeader {
        process_id: pid,
        host: host.into(),
        ..GmrHeader::default()
    };
    h.labels.insert("cgroup".into(), "/".into());
    if let Some(ns) = pid_ns {
        h.labels.insert(PID_NS_LABEL.into(), ns.to_string());
    }
    h
}

#[test]
fn namespace_links_give_their_inode() {
    assert_eq!(namespace_inode("pid:[4026531836]"), Some(HOST_NS));
    for bad in ["", "pid:[]", "pid:[12", "4026531836", "pid:[x]"] {
        assert_eq!(namespace_inode(bad), None, "{bad}");
    }
    let mut h = header("n", 1, None);
    assert_eq!(pid_ns_of(&h), None);
    h.labels.insert(PID_NS_LABEL.into(), "junk".into());
    assert_eq!(
        pid_ns_of(&h),
        None,
        "a label that does not parse is no namespace"
    );
}

#[test]
fn containers_with_the_same_pid_are_told_apart_by_their_namespace() {
    let u = UID.replace('-', "_");
    // Pod A's process and pod B's, both pid 1 in their own namespaces; seen from an agent in
    // a cgroup namespace of its own (relative paths).
    let a = format!("0::/../../kubepods-besteffort-pod{u}.slice/cri-containerd-{ID}.scope\n");
    let other_uid = "0b2c6d8e-1f47-4c8e-9f3a-4a7ec3f25d1b";
    let b = format!(
        "0::/kubepods/burstable/pod{other_uid}/{}\n",
        ID.replace('8', "9")
    );
    let root = fake_proc(&[(4242, "4242\t1", 111, &a), (5353, "5353\t1", 222, &b)]);
    let mut r = Resolver::new(root.path(), None).with_rescan(Duration::ZERO);
    assert_eq!(r.own_ns, Some(HOST_NS));
    let Lookup::Found(pa) = r.resolve("a", &header("pod-a", 1, Some(111)), "node") else {
        panic!("pod A's process");
    };
    assert_eq!(pa.host_pid, 4242);
    assert_eq!(pa.pod_uid.as_deref(), Some(UID));
    assert_eq!(pa.container_id.as_deref(), Some(ID));
    let Lookup::Found(pb) = r.resolve("b", &header("pod-b", 1, Some(222)), "node") else {
        panic!("pod B's process");
    };
    assert_eq!(
        (pb.host_pid, pb.pod_uid.as_deref()),
        (5353, Some(other_uid))
    );
    // pid 2 of A's namespace is no process: not yet (A's namespace is on this host).
    assert_eq!(
        r.resolve("a2", &header("pod-a", 2, Some(111)), "node"),
        Lookup::NotYet
    );
    assert!(r.wanted("a2"));
    // A namespace not on this host, from a recording of another host: never.
    assert_eq!(
        r.resolve("x", &header("elsewhere", 1, Some(999)), "node"),
        Lookup::Never
    );
    assert!(!r.wanted("x"));
    // Forgotten once it has left the spool.
    r.retain_given_up(|id| id != "x");
    assert!(r.wanted("x"));
    // An older recording without pid_ns: never looked up.
    assert_eq!(
        r.resolve("old", &header("node", 1, None), "node"),
        Lookup::Never
    );
}

#[test]
fn a_process_of_the_agents_own_namespace_is_its_header_pid() {
    let root = fake_proc(&[
        (77, "77", HOST_NS, "0::/user.slice/u.scope\n"),
        (88, "88\t1", 111, "0::/\n"),
    ]);
    let mut r = Resolver::new(root.path(), None);
    let found = r.resolve("h", &header("node", 77, Some(HOST_NS)), "node");
    assert_eq!(
        found,
        Lookup::Found(HostProcess {
            host_pid: 77,
            cgroup: Some("/user.slice/u.scope".into()),
            pod_uid: None,
            container_id: None,
        })
    );
    // Host pid 88 is pid 1 of another namespace: not the agent's namespace's 88.
    assert_eq!(
        r.resolve("c", &header("node", 88, Some(HOST_NS)), "node"),
        Lookup::NotYet
    );
    // Gone (or not yet there): retried later, no scan.
    assert_eq!(
        r.resolve("g", &header("node", 78, Some(HOST_NS)), "node"),
        Lookup::NotYet
    );
    assert!(
        r.scanned.is_none(),
        "the agent's own namespace needs no scan"
    );
}

#[test]
fn scans_are_spaced_and_their_namespaces_kept() {
    let root = fake_proc(&[(4242, "4242\t1", 111, "0::/\n")]);
    let mut r = Resolver::new(root.path(), None);
    // The first scan finds pid 1 of namespace 111; pid 5 of it is found from the kept pids
    // after it starts, without another scan (none is due: RESCAN has not passed).
    assert!(matches!(
        r.resolve("a", &header("pod", 1, Some(111)), "node"),
        Lookup::Found(_)
    ));
    let first = r.scanned.expect("scanned");
    assert_eq!(
        r.resolve("b", &header("pod", 5, Some(111)), "node"),
        Lookup::NotYet
    );
    assert_eq!(r.scanned, Some(first), "no scan before RESCAN");
    // A process of a namespace not seen at the scan waits for the next one.
    let p = root.path().join("6000");
    std::fs::create_dir_all(p.join("ns")).expect("mkdir");
    std::fs::write(p.join("status"), "NSpid:\t6000\t1\n").expect("status");
    std::os::unix::fs::symlink("pid:[333]", p.join("ns/pid")).expect("link");
    assert_eq!(
        r.resolve("c", &header("node", 1, Some(333)), "node"),
        Lookup::NotYet
    );
    let mut r = r.with_rescan(Duration::ZERO);
    assert!(matches!(
        r.resolve("c", &header("node", 1, Some(333)), "node"),
        Lookup::Found(HostProcess { host_pid: 6000, .. })
    ));
}

#[test]
fn this_test_process_is_found_on_the_real_proc() {
    let proc = Path::new("/proc");
    let me = std::process::id();
    let ns = read_pid_ns(proc, me).expect("/proc/<pid>/ns/pid of this test");
    let mut r = Resolver::new(proc, None);
    assert_eq!(r.own_ns, Some(ns));
    let inner = *nspid(proc, me).expect("NSpid").last().expect("a pid");
    let mut h = header("node", inner, Some(ns));
    h.labels.clear();
    h.labels.insert(PID_NS_LABEL.into(), ns.to_string());
    let Lookup::Found(p) = r.resolve("me", &h, "node") else {
        panic!("this process");
    };
    assert_eq!(p.host_pid, me);
    let text = std::fs::read_to_string("/proc/self/cgroup").expect("cgroup");
    assert_eq!(p.cgroup, crate::unmetered::cgroup_path(&text));
}

#[test]
fn the_tenant_rule_uses_what_was_found_where_the_header_says_nothing() {
    let rule = crate::tenant::TenantRule::parse(&["pod-{cgroup_pod_uid}".into()]).expect("rule");
    let h = header("pod-a", 1, Some(111));
    let found = HostProcess {
        host_pid: 4242,
        cgroup: None,
        pod_uid: Some(UID.into()),
        container_id: Some(ID.into()),
    };
    let tenant = |host: Option<&HostProcess>| {
        let labels = crate::spool::labels_on_host(&h, host);
        rule.tenant(&labels).map(|(t, _)| t.as_str().to_string())
    };
    assert_eq!(tenant(None), None, "cgroup = / names no pod");
    assert_eq!(tenant(Some(&found)), Some(format!("pod-{UID}")));
    // The header's own cgroup label, when it names a pod, comes first.
    let mut named = h.clone();
    let other = "0b2c6d8e-1f47-4c8e-9f3a-4a7ec3f25d1b";
    named
        .labels
        .insert("cgroup".into(), format!("/kubepods/pod{other}"));
    let labels = crate::spool::labels_on_host(&named, Some(&found));
    assert_eq!(
        labels.get("cgroup_pod_uid").map(String::as_str),
        Some(other)
    );
    assert_eq!(
        labels.get("cgroup_container_id").map(String::as_str),
        Some(ID)
    );
}
