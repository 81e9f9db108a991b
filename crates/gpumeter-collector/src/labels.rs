//! The metered process's labels ([`GmrHeader::labels`](gpumeter_recording::gmr::GmrHeader::labels)):
//! who the process works for, as its environment and cgroup say, for a tenant rule such as
//! the node agent's `tenant = "{POD_NAMESPACE}"` (docs/AGENT.md).

use std::collections::BTreeMap;

/// The environment variables recorded as labels, each under its own name, in this order.
pub const LABEL_ENV_VARS: [&str; 4] = ["GPUMETER_TENANT", "POD_NAMESPACE", "POD_NAME", "POD_UID"];

/// The label key of the process's cgroup path.
pub const CGROUP_LABEL: &str = "cgroup";

/// Where the process's cgroup membership is read from.
pub const PROC_SELF_CGROUP: &str = "/proc/self/cgroup";

/// The label key of the process's pid namespace: its inode number, in decimal
/// (`4026531836`). With the header's `process_id` (the pid in that namespace) it names the
/// process on its host exactly, for the node agent (docs/AGENT.md, "Tenants", "Unmetered
/// processes"): in a container with a private cgroup namespace the `cgroup` label is `/`.
pub const PID_NS_LABEL: &str = "pid_ns";

/// The link whose target names the process's pid namespace (`pid:[4026531836]`).
pub const PROC_SELF_NS_PID: &str = "/proc/self/ns/pid";

/// This process's labels: [`labels_from`] over the process environment, the text of
/// [`PROC_SELF_CGROUP`] and the target of [`PROC_SELF_NS_PID`] (each left out when it cannot
/// be read, e.g. off Linux).
pub fn process_labels() -> BTreeMap<String, String> {
    let cgroup = std::fs::read_to_string(PROC_SELF_CGROUP).ok();
    let pid_ns = std::fs::read_link(PROC_SELF_NS_PID)
        .ok()
        .and_then(|t| t.to_str().and_then(namespace_inode));
    let mut labels = labels_from(|key| std::env::var(key).ok(), cgroup.as_deref());
    if let Some(ns) = pid_ns {
        labels.insert(PID_NS_LABEL.to_string(), ns.to_string());
    }
    labels
}

/// The inode number of a namespace link's target (`pid:[4026531836]` → 4026531836, as
/// `readlink /proc/<pid>/ns/<kind>` gives it, namespaces(7)); `None` for another shape.
pub fn namespace_inode(target: &str) -> Option<u64> {
    let (_, rest) = target.split_once(":[")?;
    rest.strip_suffix(']')?.parse().ok()
}

/// Labels from an environment lookup (`env(name)`: the variable's value, `None` when unset or
/// not UTF-8) and the text of a `/proc/<pid>/cgroup` file (`None`: unreadable).
///
/// Each of [`LABEL_ENV_VARS`] is a label under its own name when its value is not empty (nor
/// only white space); the value is kept as given. [`CGROUP_LABEL`] is [`cgroup_path`] of the
/// text, when it has one. Never fails: what is missing is left out.
pub fn labels_from(
    env: impl Fn(&str) -> Option<String>,
    cgroup_text: Option<&str>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for key in LABEL_ENV_VARS {
        if let Some(v) = env(key).filter(|v| !v.trim().is_empty()) {
            labels.insert(key.to_string(), v);
        }
    }
    if let Some(path) = cgroup_text.and_then(cgroup_path) {
        labels.insert(CGROUP_LABEL.to_string(), path.to_string());
    }
    labels
}

/// The cgroup path of a `/proc/<pid>/cgroup` text (lines `hierarchy-id:controllers:path`):
/// the path of the cgroup v2 line (`0::/…`), else the first line's path (cgroup v1); `None`
/// when the text has no such line or the path is empty.
pub fn cgroup_path(text: &str) -> Option<&str> {
    let mut first = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            return Some(path).filter(|p| !p.is_empty());
        }
        if first.is_none() {
            first = Some(path);
        }
    }
    first.filter(|p| !p.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn cgroup_v2_line_wins() {
        let hybrid = "12:cpu,cpuacct:/kubepods/besteffort/pod1/abc\n\
                      1:name=systemd:/kubepods/pod1\n\
                      0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope\n";
        assert_eq!(
            cgroup_path(hybrid),
            Some("/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope")
        );
        assert_eq!(cgroup_path("0::/user.slice/a:b\n"), Some("/user.slice/a:b"));
    }

    #[test]
    fn cgroup_v1_takes_the_first_line() {
        let v1 = "11:memory:/docker/0123\n10:cpu,cpuacct:/docker/4567\n";
        assert_eq!(cgroup_path(v1), Some("/docker/0123"));
    }

    #[test]
    fn cgroup_without_a_path_is_none() {
        assert_eq!(cgroup_path(""), None);
        assert_eq!(cgroup_path("garbage\n"), None);
        assert_eq!(cgroup_path("0::\n"), None);
    }

    #[test]
    fn empty_variables_are_left_out() {
        let env = env_of(&[
            ("POD_NAMESPACE", "team-a"),
            ("POD_NAME", ""),
            ("POD_UID", "  "),
            ("GPUMETER_TENANT", "alice"),
            ("HOME", "/root"),
        ]);
        let labels = labels_from(env, Some("0::/pod\n"));
        let want: BTreeMap<String, String> = [
            ("GPUMETER_TENANT", "alice"),
            ("POD_NAMESPACE", "team-a"),
            ("cgroup", "/pod"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, want);
    }

    #[test]
    fn nothing_known_is_empty() {
        assert!(labels_from(|_| None, None).is_empty());
        assert!(labels_from(|_| None, Some("")).is_empty());
    }

    #[test]
    fn namespace_links_give_their_inode() {
        assert_eq!(namespace_inode("pid:[4026531836]"), Some(4_026_531_836));
        assert_eq!(namespace_inode("net:[1]"), Some(1));
        for bad in [
            "",
            "pid:",
            "pid:[]",
            "pid:[12",
            "pid:[x1]",
            "4026531836",
            "pid:[-1]",
        ] {
            assert_eq!(namespace_inode(bad), None, "{bad}");
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_has_its_pid_namespace_on_linux() {
        let labels = process_labels();
        let target = std::fs::read_link(PROC_SELF_NS_PID).expect("/proc/self/ns/pid");
        let want = namespace_inode(target.to_str().expect("utf-8")).expect("inode");
        assert_eq!(
            labels.get(PID_NS_LABEL).map(String::as_str),
            Some(want.to_string().as_str())
        );
    }

    #[test]
    fn this_process_has_its_cgroup_on_linux() {
        let labels = process_labels();
        if cfg!(target_os = "linux") && std::path::Path::new(PROC_SELF_CGROUP).exists() {
            assert!(labels.get(CGROUP_LABEL).is_some_and(|p| p.starts_with('/')));
        }
    }
}
