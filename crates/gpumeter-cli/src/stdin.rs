//! `-` as an input: standard input, spooled to a temporary file.
//!
//! The readers stream a file in two passes (validate, hash and join; then meter) and detect
//! its format from its first bytes, so standard input is copied once, as it arrives, to a file
//! named [`STDIN_NAME`] in a private temporary directory (removed at the end of the run), and
//! that file is read like any other: its format detected from its bytes (`--format auto`), its
//! SHA-256 that of the bytes read. A source is named by its file name, so the report names
//! this one `<stdin>` (its device keys too: `<stdin>@1a2b3c4d#0`), never the temporary path;
//! errors that quote the temporary path name `<stdin>` instead. Standard input can be read
//! once: `-` given twice is a bad command line (exit 2). A file whose name is `-` is `./-`.
//!
//! The copy is removed when the run ends, and also when SIGINT, SIGTERM or SIGHUP ends it
//! (Ctrl-C while a large input is copied or metered): a handler removes the file and its
//! directory, then lets the signal end the process as it would have.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::term::Progress;
use crate::{usage_error, Failure};

/// How a report and its errors name standard input.
pub(crate) const STDIN_NAME: &str = "<stdin>";

/// Whether an input argument is `-` (standard input).
pub(crate) fn is_stdin(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// Refuses `-` given more than once (exit 2): standard input can be read only once.
pub(crate) fn check(inputs: &[PathBuf]) -> Result<(), Failure> {
    if inputs.iter().filter(|p| is_stdin(p)).count() > 1 {
        return Err(usage_error(
            "`-` (standard input) is given more than once: standard input can be read only \
             once"
                .to_string(),
        ));
    }
    Ok(())
}

/// The inputs with `-` replaced by the spooled copy of standard input, which lives as long as
/// this value.
pub(crate) struct Inputs {
    paths: Vec<PathBuf>,
    spool: Option<(tempfile::TempDir, PathBuf)>,
}

impl Inputs {
    /// Spools standard input when `-` is among `inputs` (after [`check`]); a progress spinner
    /// counts the bytes read when it takes over a second on a terminal.
    ///
    /// # Errors
    /// Exit 1 when standard input cannot be read or the temporary file cannot be written.
    pub(crate) fn resolve(inputs: &[PathBuf]) -> Result<Self, Failure> {
        check(inputs)?;
        if !inputs.iter().any(|p| is_stdin(p)) {
            return Ok(Inputs {
                paths: inputs.to_vec(),
                spool: None,
            });
        }
        let fail = |what: &str, e: std::io::Error| Failure {
            code: 1,
            message: format!("{what}: {e}"),
        };
        let dir = tempfile::Builder::new()
            .prefix("gpumeter-stdin-")
            .tempdir()
            .map_err(|e| fail("cannot make a temporary directory for standard input", e))?;
        let path = dir.path().join(STDIN_NAME);
        remove_on_signal(dir.path(), &path);
        let file = std::fs::File::create(&path)
            .map_err(|e| fail("cannot make a temporary file for standard input", e))?;
        {
            use std::io::{Read as _, Write as _};
            let progress = Progress::bytes("reading standard input".to_string());
            let mut reader = progress.bar().wrap_read(std::io::stdin().lock());
            let mut writer = std::io::BufWriter::new(file);
            let mut buf = vec![0u8; 1 << 16];
            let copy = |e| fail("cannot copy standard input to a temporary file", e);
            let mut total = 0u64;
            loop {
                let n = match reader.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(fail("cannot read standard input", e)),
                };
                total += n as u64;
                writer
                    .write_all(buf.get(..n).unwrap_or_default())
                    .map_err(copy)?;
            }
            writer.flush().map_err(copy)?;
            if total == 0 {
                // Said plainly, rather than as an input of no known format.
                return Err(Failure {
                    code: 1,
                    message: format!(
                        "{STDIN_NAME}: standard input is empty (`-` reads the input from a \
                         pipe or a redirected file)"
                    ),
                });
            }
        }
        let paths = inputs
            .iter()
            .map(|p| if is_stdin(p) { path.clone() } else { p.clone() })
            .collect();
        Ok(Inputs {
            paths,
            spool: Some((dir, path)),
        })
    }

    /// The inputs to read.
    pub(crate) fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// `f` with the temporary file's path written as [`STDIN_NAME`].
    pub(crate) fn rename(&self, mut f: Failure) -> Failure {
        if let Some((_, path)) = &self.spool {
            f.message = f.message.replace(&path.display().to_string(), STDIN_NAME);
        }
        f
    }
}

/// The spooled file and its directory, for [`on_signal`] (set once: `-` is read once).
static SPOOL: OnceLock<(CString, CString)> = OnceLock::new();

/// Removes the spool (`file` in `dir`) when SIGINT, SIGTERM or SIGHUP ends the process, which
/// skips the destructors that remove it otherwise. Best effort: a path with a NUL byte (none
/// that tempfile makes) or a handler that cannot be installed leaves the old behaviour.
fn remove_on_signal(dir: &Path, file: &Path) {
    use std::os::unix::ffi::OsStrExt as _;
    let (Ok(d), Ok(f)) = (
        CString::new(dir.as_os_str().as_bytes()),
        CString::new(file.as_os_str().as_bytes()),
    ) else {
        return;
    };
    if SPOOL.set((f, d)).is_err() {
        return;
    }
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        install(sig);
    }
}

/// `signal(2)`: [`on_signal`] for `sig`, unless the signal is ignored (as `nohup` and a
/// background job's SIGINT leave it), which stays ignored.
#[allow(unsafe_code)]
fn install(sig: libc::c_int) {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: signal(2) with a valid signal number and a handler that only calls
    // async-signal-safe functions (unlink, rmdir, signal, raise).
    let old = unsafe { libc::signal(sig, handler) };
    if old == libc::SIG_IGN {
        // SAFETY: as above; restores the ignored disposition.
        unsafe { libc::signal(sig, libc::SIG_IGN) };
    }
}

/// The signal handler: removes the spool, then re-raises `sig` with its default action, so
/// the process ends as the signal asked (a shell sees 128 + `sig`).
#[allow(unsafe_code)]
extern "C" fn on_signal(sig: libc::c_int) {
    if let Some((file, dir)) = SPOOL.get() {
        // SAFETY: NUL-terminated paths that live for the whole process; unlink(2) and rmdir(2)
        // are async-signal-safe.
        unsafe {
            libc::unlink(file.as_ptr());
            libc::rmdir(dir.as_ptr());
        }
    }
    // SAFETY: signal(2) and raise(3) are async-signal-safe.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}
