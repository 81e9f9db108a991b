//! What the agent reads of other processes in `/proc` (or a folder laid out like it, in tests):
//! `status`'s `NSpid:`, `cgroup`, and the `ns/pid` link. Used to find a recording's host process
//! ([`crate::hostproc`]) and to match GPU processes to recordings ([`crate::unmetered`]); it
//! names nothing else of the crate.

use std::path::Path;

/// What `/proc/<pid>` says of a host process, for matching it to recordings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcFacts {
    /// `NSpid:` of `/proc/<pid>/status`: its pid in each pid namespace, from the reader's (the
    /// agent's) to the innermost (the process's own).
    pub nspid: Vec<u32>,
    /// Its cgroup path ([`cgroup_path`] of `/proc/<pid>/cgroup`), when readable.
    pub cgroup: Option<String>,
    /// Its pid namespace (the inode `/proc/<pid>/ns/pid` names), when readable
    /// ([`read_pid_ns`]).
    pub pid_ns: Option<u64>,
}

/// The pids of the `NSpid:` line of a `/proc/<pid>/status` text (`NSpid:\t4242\t7`), outermost
/// first; `None` when there is no such line (a kernel before 4.1) or a number does not parse.
pub fn parse_nspid(status: &str) -> Option<Vec<u32>> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    let pids = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<Vec<u32>, _>>()
        .ok()?;
    (!pids.is_empty()).then_some(pids)
}

/// The cgroup path of a `/proc/<pid>/cgroup` text as the injection library reads its own: the
/// path of the `0::` line (cgroup v2), else of the first line; `None` when there is none.
pub fn cgroup_path(text: &str) -> Option<String> {
    let path = |l: &str| l.splitn(3, ':').nth(2).map(str::to_string);
    text.lines()
        .find(|l| l.starts_with("0::"))
        .or_else(|| text.lines().next())
        .and_then(path)
        .filter(|p| !p.is_empty())
}

/// Reads [`ProcFacts`] of host process `pid` under `proc_root` (`/proc`); `None` when its
/// status cannot be read or has no `NSpid:`.
pub fn read_proc(proc_root: &Path, pid: u32) -> Option<ProcFacts> {
    let dir = proc_root.join(pid.to_string());
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    Some(ProcFacts {
        nspid: parse_nspid(&status)?,
        cgroup: std::fs::read_to_string(dir.join("cgroup"))
            .ok()
            .and_then(|t| cgroup_path(&t)),
        pid_ns: read_pid_ns(proc_root, pid),
    })
}

/// The inode number of a namespace link's target (`pid:[4026531836]` → 4026531836).
pub fn namespace_inode(target: &str) -> Option<u64> {
    let (_, rest) = target.split_once(":[")?;
    rest.strip_suffix(']')?.parse().ok()
}

/// The pid namespace of process `pid` under `proc_root` (`/proc`): the target of
/// `<proc_root>/<pid>/ns/pid`; `None` when it cannot be read (no such process, or no
/// permission: reading another process's namespace links needs ptrace access, as root has).
pub fn read_pid_ns(proc_root: &Path, pid: u32) -> Option<u64> {
    pid_ns_link(proc_root, pid).ok().flatten()
}

/// [`read_pid_ns`], with the error of reading the link (`PermissionDenied` without ptrace
/// access); `Ok(None)` for a target of another shape.
pub(crate) fn pid_ns_link(proc_root: &Path, pid: u32) -> std::io::Result<Option<u64>> {
    let target = std::fs::read_link(proc_root.join(pid.to_string()).join("ns/pid"))?;
    Ok(target.to_str().and_then(namespace_inode))
}
