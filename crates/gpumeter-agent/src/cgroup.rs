//! The pod and container of a process from its cgroup path (the `cgroup` label the injection
//! library records): Kubernetes attribution for pods whose spec does not set `POD_UID`.
//!
//! The kubelet puts each pod's containers under a cgroup named by the pod's UID, and each
//! container runtime names the container's own cgroup by the container id. Both cgroup drivers
//! and both cgroup versions give one of two shapes (the kubelet's `cm` package and the
//! runtimes' documentation):
//!
//! | driver | pod | container |
//! |---|---|---|
//! | `systemd` | `kubepods[-<qos>]-pod<uid with _ for ->.slice` | `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope` |
//! | `cgroupfs` | `pod<uid>` under `/kubepods[/<qos>]` | `<id>` (containerd, Docker), `crio-<id>` (CRI-O) |
//!
//! with `<id>` 64 lowercase hexadecimal digits. A cgroup v1 line of `/proc/self/cgroup`
//! (`12:memory:/kubepods/…`) or a v2 line (`0::/kubepods.slice/…`) is read by its path part.
//!
//! A reader in a cgroup namespace of its own (the agent in a container) sees another
//! process's cgroup relative to its own root: `/../../kubepods-burstable-pod<uid>.slice/…` or
//! `/../../burstable/pod<uid>/<id>` (cgroup_namespaces(7)), the `kubepods` part possibly cut
//! off. A path that starts with `..` is read as if inside `kubepods`: a part still has to have
//! the pod's shape for a pod UID to be taken, and a container id is only taken below one.

/// The container runtime a container id comes from, when its cgroup says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// containerd (`cri-containerd-<id>.scope`).
    Containerd,
    /// CRI-O (`crio-<id>`).
    CriO,
    /// Docker (`docker-<id>.scope`).
    Docker,
}

/// What a cgroup path says about its process's pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRef {
    /// The pod's UID, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase.
    pub pod_uid: Option<String>,
    /// The container id, 64 lowercase hexadecimal digits.
    pub container_id: Option<String>,
    /// The runtime, when the cgroup's name tells it (a bare id under `cgroupfs` does not).
    pub runtime: Option<Runtime>,
}

/// Reads a cgroup path, or a whole `/proc/<pid>/cgroup` line (`hierarchy:controllers:path`).
/// Parts that do not have the shapes of the [module docs](self) are left `None`.
pub fn parse_cgroup(text: &str) -> PodRef {
    let path = match text.splitn(3, ':').collect::<Vec<_>>().as_slice() {
        [_, _, path] => *path,
        _ => text,
    };
    let mut out = PodRef::default();
    let mut parts = path.split('/').filter(|p| !p.is_empty()).peekable();
    let mut in_kubepods = parts.peek() == Some(&"..");
    for part in parts {
        if part.starts_with("kubepods") {
            in_kubepods = true;
        }
        if !in_kubepods {
            continue;
        }
        if let Some(uid) = pod_uid(part) {
            out.pod_uid = Some(uid);
        } else if out.pod_uid.is_some() {
            if let Some((id, runtime)) = container(part) {
                out.container_id = Some(id);
                out.runtime = runtime;
            }
        }
    }
    out
}

/// `pod<uid>` (cgroupfs) or `kubepods[-<qos>]-pod<uid_with_underscores>.slice` (systemd).
fn pod_uid(part: &str) -> Option<String> {
    let name = part.strip_suffix(".slice").unwrap_or(part);
    let at = name.rfind("pod")?;
    if at > 0 && !name[..at].ends_with('-') {
        return None;
    }
    let uid = name[at + 3..].replace('_', "-").to_ascii_lowercase();
    let groups: Vec<&str> = uid.split('-').collect();
    let shape = [8, 4, 4, 4, 12];
    let ok = groups.len() == 5
        && groups
            .iter()
            .zip(shape)
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()));
    ok.then_some(uid)
}

/// A container's cgroup name: its id and, when the name says, its runtime.
fn container(part: &str) -> Option<(String, Option<Runtime>)> {
    let name = part.strip_suffix(".scope").unwrap_or(part);
    let (id, runtime) = if let Some(id) = name.strip_prefix("cri-containerd-") {
        (id, Some(Runtime::Containerd))
    } else if let Some(id) = name.strip_prefix("crio-") {
        (id, Some(Runtime::CriO))
    } else if let Some(id) = name.strip_prefix("docker-") {
        (id, Some(Runtime::Docker))
    } else {
        (name, None)
    };
    let hex = id.len() == 64
        && id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
    hex.then(|| (id.to_string(), runtime))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "4a7ec3f2-5d1b-4c8e-9f3a-0b2c6d8e1f47";
    const ID: &str = "8f3e2d1c0b9a8f7e6d5c4b3a29180716f5e4d3c2b1a09f8e7d6c5b4a39281706";

    fn pod(runtime: Option<Runtime>) -> PodRef {
        PodRef {
            pod_uid: Some(UID.to_string()),
            container_id: Some(ID.to_string()),
            runtime,
        }
    }

    #[test]
    fn systemd_driver_paths_of_the_three_runtimes_v2_and_v1() {
        let u = UID.replace('-', "_");
        let cases = [
            (
                format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"),
                Some(Runtime::Containerd),
            ),
            (
                format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"),
                Some(Runtime::CriO),
            ),
            (
                format!("0::/kubepods.slice/kubepods-pod{u}.slice/docker-{ID}.scope"),
                Some(Runtime::Docker),
            ),
            (
                format!("11:memory:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"),
                Some(Runtime::Containerd),
            ),
        ];
        for (line, runtime) in cases {
            assert_eq!(parse_cgroup(&line), pod(runtime), "{line}");
        }
    }

    #[test]
    fn cgroupfs_driver_paths_v1_and_v2() {
        let cases = [
            (
                format!("4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{ID}"),
                None,
            ),
            (format!("0::/kubepods/besteffort/pod{UID}/{ID}"), None),
            (
                format!("0::/kubepods/pod{UID}/crio-{ID}"),
                Some(Runtime::CriO),
            ),
            (
                format!("9:pids:/kubepods/burstable/pod{UID}/docker-{ID}.scope"),
                Some(Runtime::Docker),
            ),
        ];
        for (line, runtime) in cases {
            assert_eq!(parse_cgroup(&line), pod(runtime), "{line}");
        }
    }

    #[test]
    fn paths_seen_from_another_cgroup_namespace_start_with_dot_dot() {
        let u = UID.replace('-', "_");
        let cases = [
            // The agent's cgroup namespace is rooted at its own container's cgroup (systemd
            // driver, another QoS class): the `kubepods.slice` part is cut off.
            (
                format!("0::/../../../kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"),
                Some(Runtime::Containerd),
            ),
            (
                format!("0::/../../kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"),
                Some(Runtime::CriO),
            ),
            // cgroupfs driver: nothing named `kubepods` is left.
            (format!("0::/../../burstable/pod{UID}/{ID}"), None),
            (format!("/../pod{UID}/docker-{ID}.scope"), Some(Runtime::Docker)),
        ];
        for (line, runtime) in cases {
            assert_eq!(parse_cgroup(&line), pod(runtime), "{line}");
        }
        // Outside a pod, `..` alone names nothing.
        for line in [
            format!("0::/../../system.slice/docker-{ID}.scope"),
            format!("0::/../{ID}"),
            "0::/..".to_string(),
        ] {
            assert_eq!(parse_cgroup(&line), PodRef::default(), "{line}");
        }
    }

    #[test]
    fn paths_outside_kubernetes_or_of_other_shapes_say_nothing() {
        for line in [
            "0::/user.slice/user-1000.slice/session-3.scope".to_string(),
            "0::/system.slice/docker-abc.scope".to_string(),
            format!("0::/kubepods/burstable/podnot-a-uid/{ID}"),
            format!("0::/kubepods/burstable/pod{UID}/short"),
            "0::/".to_string(),
            String::new(),
        ] {
            let p = parse_cgroup(&line);
            assert!(p.container_id.is_none(), "{line}: {p:?}");
        }
        // The pod without a container cgroup (the pod's own cgroup, a pause process).
        let p = parse_cgroup(&format!("0::/kubepods/burstable/pod{UID}"));
        assert_eq!(p.pod_uid.as_deref(), Some(UID));
        assert_eq!(p.container_id, None);
    }

    #[test]
    fn the_tenant_rule_can_name_a_pod_by_its_cgroup() {
        let mut h = gpumeter_recording::gmr::GmrHeader::default();
        h.labels.insert(
            "cgroup".into(),
            format!("/kubepods/burstable/pod{UID}/{ID}"),
        );
        let rule = crate::tenant::TenantRule::parse(&[
            "{POD_NAMESPACE}".into(),
            "pod-{cgroup_pod_uid}".into(),
        ])
        .expect("rule");
        let labels = crate::spool::labels(&h);
        assert_eq!(
            labels.get("cgroup_container_id").map(String::as_str),
            Some(ID)
        );
        let tenant = rule.tenant(&labels).map(|(t, _)| t.as_str().to_string());
        assert_eq!(tenant, Some(format!("pod-{UID}")));
    }
}
