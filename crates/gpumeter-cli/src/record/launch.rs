//! Running the command under the injection library: finding the library, setting the
//! command's environment, waiting for it, and saying what it recorded.
// `signal(2)`: `record` ignores SIGINT and SIGQUIT while it waits (the terminal sends them to
// the command too), as `system(3)` does, so it can still finish the recording's summary.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use gpumeter::cupti::gmr::{ClockPair, GmrHeader, GmrWriter, Producer};
use gpumeter::cupti::ApiVersion;

use super::show::describe;
use super::{fail, RecordArgs, ENV_INJECT_LIB, INJECT_LIB_NAME};
use crate::{say, Failure};

/// The injection library: `--inject-lib`, `$GPUMETER_INJECT_LIB`, beside the executable, or
/// in `../lib` from it.
fn find_inject_lib(explicit: Option<PathBuf>) -> Result<PathBuf, Failure> {
    let named = explicit.map(|p| (p, "--inject-lib")).or_else(|| {
        std::env::var_os(ENV_INJECT_LIB)
            .filter(|v| !v.is_empty())
            .map(|v| (PathBuf::from(v), ENV_INJECT_LIB))
    });
    if let Some((p, from)) = named {
        return if p.is_file() {
            std::path::absolute(&p).map_err(|e| fail(125, format!("{}: {e}", p.display())))
        } else {
            Err(fail(
                125,
                format!(
                    "the injection library {} ({from}) does not exist",
                    p.display()
                ),
            ))
        };
    }
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .map_err(|e| fail(125, format!("cannot locate this executable: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(INJECT_LIB_NAME),
        dir.join("../lib").join(INJECT_LIB_NAME),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            fail(
                125,
                format!(
                    "no injection library: looked for {} and {}; {}, set {ENV_INJECT_LIB} or \
                     pass --inject-lib",
                    candidates[0].display(),
                    candidates[1].display(),
                    build_hint(&exe)
                ),
            )
        })
}

/// How to get the injection library where `exe` looks for it. An executable in a cargo
/// target directory (`<target>/[<triple>/]<profile>/gpumeter`, the target directory marked by
/// its `CACHEDIR.TAG`) gets the cargo command that builds the library beside it: that
/// profile (`--release`, `--profile NAME`, none for `debug`), that target triple, and that
/// target directory when it is not this workspace's `target/`. Any other place gets where to
/// install it.
fn build_hint(exe: &Path) -> String {
    let Some(command) = cargo_build_command(exe) else {
        return format!(
            "install {INJECT_LIB_NAME} beside this executable or in ../lib from it (it is built \
             in a gpumeter source tree by `cargo build --release -p gpumeter-inject`, into \
             target/release/)"
        );
    };
    format!("build it beside this executable with `{command}` in the gpumeter source tree")
}

/// The cargo command that builds the injection library into `exe`'s directory, when `exe` is
/// in a cargo target directory ([`build_hint`]).
fn cargo_build_command(exe: &Path) -> Option<String> {
    let profile_dir = exe.parent()?;
    let profile = profile_dir.file_name()?.to_str()?;
    let is_target = |d: &Path| d.join("CACHEDIR.TAG").is_file();
    let above = profile_dir.parent()?;
    let (target_dir, triple) = if is_target(above) {
        (above, None)
    } else {
        let triple = above.file_name()?.to_str()?;
        let target = above.parent().filter(|d| is_target(d))?;
        (target, Some(triple))
    };
    let mut command = String::new();
    // This workspace's own target directory (where `cargo build` puts it by default).
    let workspace_target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(target_dir, &workspace_target) {
        command.push_str(&format!(
            "CARGO_TARGET_DIR={} ",
            shell_word(&target_dir.display().to_string())
        ));
    }
    command.push_str("cargo build");
    match profile {
        "debug" => {}
        "release" => command.push_str(" --release"),
        other => command.push_str(&format!(" --profile {other}")),
    }
    if let Some(t) = triple {
        command.push_str(&format!(" --target {t}"));
    }
    command.push_str(" -p gpumeter-inject");
    Some(command)
}

/// `s` as one POSIX shell word, so the command can be pasted: as it is when it holds only
/// characters no shell treats specially, else in single quotes (a `'` written `'\''`).
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+=:@,%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Ignores SIGINT and SIGQUIT until dropped (then restores the previous dispositions).
struct IgnoreInterrupts {
    previous: Vec<(libc::c_int, libc::sighandler_t)>,
}

impl IgnoreInterrupts {
    fn new() -> Self {
        let mut previous = Vec::new();
        for sig in [libc::SIGINT, libc::SIGQUIT] {
            // SAFETY: SIG_IGN is a valid disposition for these signals; no handler code runs.
            let old = unsafe { libc::signal(sig, libc::SIG_IGN) };
            if old != libc::SIG_ERR {
                previous.push((sig, old));
            }
        }
        IgnoreInterrupts { previous }
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        for &(sig, old) in &self.previous {
            // SAFETY: restores the disposition `signal` returned for this signal.
            unsafe { libc::signal(sig, old) };
        }
    }
}

/// The exit code to pass on: the command's, or 128 + the signal that ended it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 1,
    }
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is 256 writable bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<libc::c_char>(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match (rc, buf.get(..end)) {
        (0, Some(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    }
}

/// The API version an empty recording names: nominal (it has no buffers to lay out), the
/// default of raw CUPTI buffers (12.8's 26), so every gpumeter reads it.
pub(crate) fn empty_recording_api() -> u32 {
    ApiVersion::default().cupti_api_version()
}

/// Writes a valid recording without buffers, for a command that never initialised CUDA.
fn write_empty(path: &Path, pid: u32) -> Result<(), String> {
    let unix_time_ns = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let header = GmrHeader {
        cupti_api_version: empty_recording_api(),
        host: host_name(),
        clock: ClockPair {
            cupti_timestamp_ns: 0,
            unix_time_ns,
        },
        process_id: pid,
        devices: Vec::new(),
        producer: Producer {
            name: "gpumeter record".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        instrumented: false,
        labels: Default::default(),
    };
    // Whole or not at all, as every file gpumeter writes (a temporary file beside it,
    // renamed); never over a recording the command's processes made meanwhile.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = tempfile::Builder::new()
        .prefix(".gpumeter-record.")
        .suffix(".tmp")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|e| e.to_string())?;
    let file = tmp.as_file().try_clone().map_err(|e| e.to_string())?;
    let w = GmrWriter::new(file, &header).map_err(|e| e.to_string())?;
    let f = w.finish().map_err(|e| e.to_string())?;
    f.sync_all().map_err(|e| e.to_string())?;
    tmp.persist_noclobber(path)
        .map(drop)
        .map_err(|e| e.error.to_string())
}

/// The file `program` runs: itself when it names a path (has a `/`), else the first
/// executable of its name on `PATH`; `None` when there is none (the spawn then says so).
fn program_path(program: &OsString) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let p = Path::new(program);
    if program.as_encoded_bytes().contains(&b'/') {
        return Some(p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(p))
        .find(|c| {
            std::fs::metadata(c).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Recordings other processes of the command wrote beside `out` (`<stem>.<pid>.gmr` or
/// `<stem>.<pid>.<n>.gmr`, modified since `since`), sorted.
fn sibling_recordings(out: &Path, since: SystemTime) -> Vec<PathBuf> {
    let (Some(dir), Some(stem)) = (out.parent(), out.file_stem()) else {
        return Vec::new();
    };
    let stem = stem.to_string_lossy();
    let ext = out
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let middle = name
                .strip_prefix(&format!("{stem}."))
                .and_then(|r| r.strip_suffix(&ext));
            let fresh = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since);
            // `<pid>`, or `<pid>.<n>` when that name was taken too (the injection library
            // never overwrites a recording).
            let numbers = |m: &str| {
                m.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            };
            fresh && middle.is_some_and(numbers)
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// `gpumeter record`: runs the command and exits with its code (see the module docs).
pub(crate) fn run(args: RecordArgs) -> Result<String, Failure> {
    let lib = find_inject_lib(args.inject_lib.clone())?;
    let out = prepare_out(&args, &lib)?;
    let Some((program, rest)) = args.command.split_first() else {
        return Err(fail(2, "no command to record".to_string()));
    };
    if let Some(prev) = std::env::var_os("CUDA_INJECTION64_PATH") {
        if prev != lib.as_os_str() {
            say(&format!(
                "notice: replacing CUDA_INJECTION64_PATH={} for the command",
                PathBuf::from(prev).display()
            ));
        }
    }
    let since = SystemTime::now()
        .checked_sub(std::time::Duration::from_secs(1))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut cmd = command(&args, program, rest, &lib, &out);
    let (pid, code) = run_to_end(&mut cmd, program)?;
    say_recorded(&out, pid, since);
    if code != 0 {
        say(&format!("notice: the command exited with status {code}"));
    }
    std::process::exit(code)
}

/// `--out`, made absolute and ready to be written: the links it is followed through, its
/// directory made, an old file removed (never the library or the program: checked first).
fn prepare_out(args: &RecordArgs, lib: &Path) -> Result<PathBuf, Failure> {
    // `--out` is replaced before the command runs: never the library or the program.
    let program = args.command.first().and_then(program_path);
    crate::output::Files::new()
        .input("the injection library", Some(lib))
        .input("the command's program", program.as_deref())
        .output("--out", Some(&args.out))
        .check()?;
    // A symbolic link stays one: the recording is written where it leads.
    let out = std::path::absolute(crate::output::resolve_links(&args.out))
        .map_err(|e| fail(125, format!("--out {}: {e}", args.out.display())))?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| fail(125, format!("cannot create {}: {e}", dir.display())))?;
    }
    match std::fs::remove_file(&out) {
        Ok(()) => say(&format!("notice: replacing {}", out.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(fail(125, format!("cannot replace {}: {e}", out.display()))),
    }
    Ok(out)
}

/// The command with the injection library and the recording's settings in its environment
/// (each setting removed when not asked for, so an inherited one does not apply).
fn command(
    args: &RecordArgs,
    program: &OsString,
    rest: &[OsString],
    lib: &Path,
    out: &Path,
) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("CUDA_INJECTION64_PATH", lib)
        .env("GPUMETER_OUT", out);
    if args.instructions {
        cmd.env("GPUMETER_INSTRUCTIONS", "1");
    } else {
        cmd.env_remove("GPUMETER_INSTRUCTIONS");
    }
    cmd.env_remove("GPUMETER_PM_INTERVAL_NS");
    if args.pm_sampling {
        cmd.env("GPUMETER_PM_SAMPLING", "1");
        if let Some(d) = args.pm_interval {
            cmd.env("GPUMETER_PM_INTERVAL_NS", d.as_nanos().to_string());
        }
    } else {
        cmd.env_remove("GPUMETER_PM_SAMPLING");
    }
    if args.flops {
        cmd.env("GPUMETER_FLOPS", "1");
    } else {
        cmd.env_remove("GPUMETER_FLOPS");
    }
    cmd
}

/// Runs the command to its end, interrupts ignored meanwhile: its process id and the exit
/// code to pass on ([`exit_code`]); 127, 126 or 125 when it could not be run.
fn run_to_end(cmd: &mut Command, program: &OsString) -> Result<(u32, i32), Failure> {
    let mut child = cmd.spawn().map_err(|e| {
        let code = match e.kind() {
            ErrorKind::NotFound => 127,
            ErrorKind::PermissionDenied => 126,
            _ => 125,
        };
        fail(
            code,
            format!("cannot run {}: {e}", PathBuf::from(program).display()),
        )
    })?;
    let pid = child.id();
    let status = {
        let _quiet = IgnoreInterrupts::new();
        child.wait()
    }
    .map_err(|e| fail(125, format!("lost the command: {e}")))?;
    Ok((pid, exit_code(status)))
}

/// Says what was recorded: `out` (an empty recording written when the command made none),
/// and the recordings its other processes wrote beside it, each with [`describe`].
fn say_recorded(out: &Path, pid: u32, since: SystemTime) {
    if !out.exists() {
        match write_empty(out, pid) {
            Ok(()) => say(
                "notice: the command made no CUDA call that loaded the injection library (no \
                 GPU work, or the collector could not start: see any gpumeter-inject message \
                 above); wrote an empty recording",
            ),
            Err(e) => say(&format!(
                "error: cannot write an empty recording to {}: {e}",
                out.display()
            )),
        }
    }
    let mut all = vec![out.to_path_buf()];
    all.extend(sibling_recordings(out, since));
    for p in &all {
        say(&format!(
            "recording written to {}{}",
            p.display(),
            describe(p)
        ));
    }
    if all.len() > 1 {
        let names: Vec<String> = all.iter().map(|p| p.display().to_string()).collect();
        say(&format!(
            "notice: {} processes recorded; meter them together: gpumeter usage {}",
            all.len(),
            names.join(" ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siblings_are_the_pid_and_numbered_names_beside_the_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let since = SystemTime::now() - std::time::Duration::from_secs(5);
        for name in [
            "run.gmr",
            "run.12.gmr",
            "run.12.1.gmr",
            "run.7.gmr",
            "run..gmr",
            "run.12.x.gmr",
            "run.12.gmr.gz",
            "other.12.gmr",
        ] {
            std::fs::write(dir.path().join(name), b"").expect("write");
        }
        let found = sibling_recordings(&dir.path().join("run.gmr"), since);
        let names: Vec<String> = found
            .iter()
            .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["run.12.1.gmr", "run.12.gmr", "run.7.gmr"]);
    }
}
