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

use std::path::{Path, PathBuf};

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
