//! The files a command writes: checked against its inputs before anything is read
//! ([`Files::check`]), and each written whole or not at all ([`write_atomically`]).
//!
//! **Outputs never name inputs.** An output file that is an input (a usage input, the price
//! book, the bank and its `-wal`/`-shm`/`-journal` files, a tenant map, a device catalog, an
//! opening report, an events map, standard input's file), another output of the same
//! command, or standard output (where the command writes its report: `--events /dev/stdout`)
//! is a bad command line, exit 2, before any file is read or written. Files are compared by
//! identity: the device and inode of a file that exists (so a hard link or a symbolic link to
//! an input is that input), else the canonical directory and the name of the file to be
//! made, a symbolic link followed to the end first ([`resolve_links`]: a link to a file not
//! made yet is that file). The bank's `-wal`, `-shm` and `-journal` are those beside the file
//! its links lead to, where SQLite keeps them. `-` as an output is standard output: where an
//! option says so it replaces the report there (`usage --events -`, `bank export -o -`);
//! elsewhere (`preview --csv/--html`, `record --out`) standard output already carries the
//! command's own output, so `-` is exit 2 as `/dev/stdout` is, and a file named `-` is `./-`.
//! An input that is standard output's own file (`gpumeter usage a.json > a.json`, which
//! the shell emptied before gpumeter ran) is refused too. Standard output and error are
//! compared as the files they are; a terminal or `/dev/null` named twice is no conflict, nor
//! is `/dev/null` as an output when standard output goes there too.
//!
//! **Outputs are written whole.** [`write_atomically`] writes a temporary file beside the
//! output (`.NAME.XXXXXX.tmp`, same directory, so the rename stays on one file system),
//! flushes it to disk, and renames it over the output, then flushes the directory: a full
//! disk, a file-size limit, a signal or a crash leaves the old file or none, never a part of
//! one. The new file keeps an old file's permissions (a new one gets `0666` less the umask, as
//! any file), and a symbolic link stays one: its target, found by [`resolve_links`], is
//! replaced, or made when the link dangles. A SIGKILL can leave
//! the temporary file behind, never at the output's name. An output that exists and is not a
//! regular file (a FIFO, a terminal, `/dev/null`) is written directly, as standard output
//! (`-`) is: those are streams, and renaming over them would replace the device.

use std::fs::{File, Metadata};
use std::io::Write;
use std::os::fd::AsFd as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::{usage_error, Failure};

/// What a file is, to compare an output with the inputs and other outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    /// A file that exists: device and inode, and whether it is a character device (a
    /// terminal, `/dev/null`), which two outputs may share.
    File { dev: u64, ino: u64, chardev: bool },
    /// A file to be made: its directory, canonical, and its name.
    New(PathBuf),
}

impl Identity {
    fn of_metadata(m: &Metadata) -> Identity {
        Identity::File {
            dev: m.dev(),
            ino: m.ino(),
            chardev: m.file_type().is_char_device(),
        }
    }

    /// `path`'s identity: the file it names (through symbolic links), or, when there is none,
    /// the canonical directory and name of the file its links lead to ([`resolve_links`]).
    fn of(path: &Path) -> Identity {
        if let Ok(m) = std::fs::metadata(path) {
            return Identity::of_metadata(&m);
        }
        let path = resolve_links(path);
        let name = path.file_name().map(PathBuf::from).unwrap_or_default();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let dir = std::fs::canonicalize(dir)
            .or_else(|_| std::path::absolute(dir))
            .unwrap_or_else(|_| dir.to_path_buf());
        Identity::New(dir.join(name))
    }

    /// The identity of an open standard stream (fd 0, 1 or 2), and whether it is a regular
    /// file; `None` when it is closed.
    fn of_stream(fd: std::os::fd::BorrowedFd<'_>) -> Option<(Identity, bool)> {
        let file = File::from(fd.try_clone_to_owned().ok()?);
        let m = file.metadata().ok()?;
        Some((Identity::of_metadata(&m), m.is_file()))
    }

    fn is_chardev(&self) -> bool {
        matches!(self, Identity::File { chardev: true, .. })
    }
}

/// A file a command names: what it is to the command (`--prices`, `the input`) and its path.
struct Named {
    what: String,
    path: PathBuf,
    identity: Identity,
}

impl Named {
    fn new(what: &str, path: &Path) -> Named {
        Named {
            what: what.to_string(),
            path: path.to_path_buf(),
            identity: Identity::of(path),
        }
    }
}

/// `path` with its symbolic links followed to the end, as the kernel follows them when the
/// file is opened: each link's target ([`std::fs::read_link`]), a relative one taken from the
/// link's directory, until a name that is no link, or nothing (a dangling link's target, the
/// file an open would make). `path` itself when it is no link, and after 40 links (a loop,
/// which opening fails on too).
pub(crate) fn resolve_links(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        let is_link = std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return p;
        }
        let Ok(target) = std::fs::read_link(&p) else {
            return p;
        };
        p = match p.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    path.to_path_buf()
}

/// The files of one command, to check before it reads or writes any.
#[derive(Default)]
pub(crate) struct Files {
    inputs: Vec<Named>,
    outputs: Vec<Named>,
    /// Outputs given as `-` (standard output): their option, and whether standard output is
    /// theirs alone (`usage --events -`, `bank export -o -`: the report is not written there).
    to_stdout: Vec<(String, bool)>,
    /// Standard input is an input (`-` among the inputs).
    stdin: bool,
}

impl Files {
    pub(crate) fn new() -> Files {
        Files::default()
    }

    /// An input file (`what`: how messages name it, e.g. `--prices`); `-` is standard input.
    pub(crate) fn input(mut self, what: &str, path: Option<&Path>) -> Files {
        match path {
            Some(p) if crate::stdin::is_stdin(p) => self.stdin = true,
            Some(p) => self.inputs.push(Named::new(what, p)),
            None => {}
        }
        self
    }

    /// Several inputs named alike (`INPUT`).
    pub(crate) fn inputs(mut self, what: &str, paths: &[PathBuf]) -> Files {
        for p in paths {
            self = self.input(what, Some(p));
        }
        self
    }

    /// A bank read or written by the command: an SQLite file and the files SQLite keeps
    /// beside it; a PostgreSQL URL is no file. `output`: the command writes it (`invoice
    /// finalize`, `bank import`), so it may not be an input either.
    pub(crate) fn bank(mut self, location: Option<&str>, output: bool) -> Files {
        let Some(location) = location.filter(|l| !gpumeter::bank::is_postgres(l)) else {
            return self;
        };
        if location.is_empty() {
            return self;
        }
        let path = Path::new(location);
        // SQLite keeps its files beside the file the links lead to.
        let resolved = resolve_links(path);
        if output {
            self.outputs.push(Named::new("--bank", path));
        } else {
            self.inputs.push(Named::new("--bank", path));
        }
        for suffix in ["-wal", "-shm", "-journal"] {
            let mut name = resolved.as_os_str().to_os_string();
            name.push(suffix);
            let what = format!("the bank's {suffix} file");
            self.inputs.push(Named::new(&what, Path::new(&name)));
        }
        self
    }

    /// An output file (`what`: its option, e.g. `--csv`). `-` is standard output, where the
    /// command writes its own output (its report, or the output of the command `record`
    /// runs): [`Files::check`] refuses it; a file named `-` is `./-`.
    pub(crate) fn output(self, what: &str, path: Option<&Path>) -> Files {
        self.output_to(what, path, false)
    }

    /// An output whose `-` is standard output instead of the command's report (`usage
    /// --events -`, `bank export -o -`), which the command writes there and nowhere else.
    pub(crate) fn output_or_stdout(self, what: &str, path: Option<&Path>) -> Files {
        self.output_to(what, path, true)
    }

    fn output_to(mut self, what: &str, path: Option<&Path>, stdout_alone: bool) -> Files {
        match path {
            Some(p) if crate::stdin::is_stdin(p) => {
                self.to_stdout.push((what.to_string(), stdout_alone));
            }
            Some(p) => self.outputs.push(Named::new(what, p)),
            None => {}
        }
        self
    }

    /// Refuses (exit 2) an output that is an input, another output, standard output or
    /// standard error's file, and an input that is standard output's file.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        if let Some((what, _)) = self.to_stdout.iter().find(|(_, alone)| !alone) {
            return Err(usage_error(format!(
                "{what} - is standard output, where this command writes its own output: name a \
                 file (`./-` for a file named `-`)"
            )));
        }
        if let [(first, _), (second, _), ..] = self.to_stdout.as_slice() {
            return Err(usage_error(format!(
                "{first} - and {second} - both name standard output: each output needs a file \
                 of its own"
            )));
        }
        let stdout = Identity::of_stream(std::io::stdout().as_fd());
        let stderr = Identity::of_stream(std::io::stderr().as_fd());
        let stdin = if self.stdin {
            Identity::of_stream(std::io::stdin().as_fd()).filter(|(_, regular)| *regular)
        } else {
            None
        };
        for (i, out) in self.outputs.iter().enumerate() {
            let shown = out.path.display();
            if let Some(input) = self.inputs.iter().find(|i| i.identity == out.identity) {
                return Err(usage_error(format!(
                    "{} {shown} is {} ({}): an output never replaces an input; name another \
                     file",
                    out.what,
                    describe(&input.what),
                    input.path.display()
                )));
            }
            if stdin.as_ref().is_some_and(|(id, _)| *id == out.identity) {
                return Err(usage_error(format!(
                    "{} {shown} is the file read as standard input (`-`): an output never \
                     replaces an input; name another file",
                    out.what
                )));
            }
            if let Some(other) = self.outputs[..i]
                .iter()
                .find(|o| o.identity == out.identity && !o.identity.is_chardev())
            {
                return Err(usage_error(format!(
                    "{} and {} name the same file ({shown}): each output needs a file of its \
                     own",
                    other.what, out.what
                )));
            }
            if stdout.as_ref().is_some_and(|(id, _)| *id == out.identity)
                && out.identity != Identity::of(Path::new("/dev/null"))
            {
                return Err(usage_error(format!(
                    "{} {shown} is standard output, where this command writes its own \
                     output: name another file{}",
                    out.what,
                    if out.what == "--events" {
                        ", or `--events -` for the events alone on standard output"
                    } else {
                        ""
                    }
                )));
            }
            if stderr
                .as_ref()
                .is_some_and(|(id, regular)| *regular && *id == out.identity)
            {
                return Err(usage_error(format!(
                    "{} {shown} is standard error's file, where gpumeter writes its messages: \
                     name another file",
                    out.what
                )));
            }
        }
        if let Some((id, true)) = &stdout {
            if let Some(input) = self.inputs.iter().find(|i| i.identity == *id) {
                return Err(usage_error(format!(
                    "standard output is {} ({}): an output never replaces an input (a shell \
                     redirection `>` empties the file before gpumeter runs); write to another \
                     file",
                    describe(&input.what),
                    input.path.display()
                )));
            }
        }
        Ok(())
    }
}

/// How a message names an input: `the input`, `the file given to --prices`.
fn describe(what: &str) -> String {
    if what.starts_with("--") {
        format!("the file given to {what}")
    } else {
        what.to_string()
    }
}

/// The failure of writing `path` (exit 1).
pub(crate) fn cannot_write(path: &Path) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure {
        code: 1,
        message: format!("cannot write {}: {e}", path.display()),
    }
}

/// Writes the output file `path` whole or not at all (the module's docs): `write` writes the
/// contents to a temporary file beside it, which is flushed to disk and renamed over `path`.
/// An output that is not a regular file (a FIFO, a terminal) is written directly.
///
/// # Errors
/// What `write` returns, and exit 1 naming `path` when the temporary file cannot be made,
/// written, flushed or renamed; `path` is then as it was.
pub(crate) fn write_atomically<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> Result<T, Failure>,
) -> Result<T, Failure> {
    let fail = cannot_write(path);
    let existing = std::fs::metadata(path).ok();
    if existing
        .as_ref()
        .is_some_and(|m| !m.is_file() && !m.is_dir())
    {
        // A stream: written as it comes, as standard output is.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(&fail)?;
        let mut w = std::io::BufWriter::new(file);
        let out = write(&mut w)?;
        w.flush().map_err(&fail)?;
        return Ok(out);
    }
    // A symbolic link stays one: the file it leads to is what is replaced, or made.
    let target = resolve_links(path);
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(&dir)
        .map_err(|e| {
            let mut f = fail(e);
            if f.message.contains("Permission denied") {
                f.message.push_str(&format!(
                    " (the file is written to a temporary file in {} and renamed, so that \
                     directory must be writable)",
                    dir.display()
                ));
            }
            f
        })?;
    if let Some(m) = &existing {
        // The old file's mode, exactly (the umask applied to the one made above).
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))
            .map_err(&fail)?;
    }
    let out = {
        let mut w = std::io::BufWriter::new(tmp.as_file_mut());
        let out = write(&mut w)?;
        w.flush().map_err(&fail)?;
        out
    };
    tmp.as_file().sync_all().map_err(&fail)?;
    tmp.persist(&target).map_err(|e| fail(e.error))?;
    // The rename on disk too; a directory that cannot be flushed (some file systems) is no
    // failure of the write, which is complete.
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(out)
}

/// Sets SIGXFSZ to be ignored, so that a write past a file-size limit (`ulimit -f`) fails
/// with `EFBIG`, which [`write_atomically`] reports (exit 1, the temporary file removed),
/// instead of killing the process with the temporary file left behind. Not for `record`,
/// whose command would inherit the ignored signal.
#[allow(unsafe_code)]
pub(crate) fn ignore_file_size_signal() {
    // SAFETY: signal(2) with a valid signal number and SIG_IGN, no handler to run.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}
