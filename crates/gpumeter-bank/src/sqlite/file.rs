//! The bank's file as the filesystem shows it, looked at before SQLite opens it: a regular
//! file, SQLite's header, and its path as SQLite must be given it (never a URI).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::ledger::BankError;

/// The first 16 bytes of every SQLite 3 database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";
/// `path` with `suffix` added to its file name (`bank.db` → `bank.db-wal`).
pub(super) fn sibling(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    std::path::PathBuf::from(name)
}

/// `path` as SQLite must be given it to open that file: SQLite (built with `SQLITE_USE_URI`)
/// takes every name that begins with `file:` as a URI, whatever the open's flags, so such a
/// relative path is given as `./file:…`. A path is never a URI: the only URIs this module
/// opens are its own (`immutable=1`, [`SqliteLedger::open_read_only`]).
pub(super) fn not_a_uri(path: &Path) -> std::borrow::Cow<'_, Path> {
    use std::os::unix::ffi::OsStrExt as _;
    if path.as_os_str().as_bytes().starts_with(b"file:") {
        std::borrow::Cow::Owned(Path::new(".").join(path))
    } else {
        std::borrow::Cow::Borrowed(path)
    }
}

/// Refuses a location that exists and is not a regular file (a directory, `/dev/null`, a
/// FIFO), before SQLite opens it: SQLite would make a `-journal` or `-wal` file beside it
/// (`/dev/null-journal`). A symbolic link to a regular file is one.
pub(super) fn check_regular(path: &Path, file: &str) -> Result<(), BankError> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => {
            let what = if m.is_dir() {
                "a directory"
            } else {
                "not a regular file (a device, a FIFO or a socket)"
            };
            Err(BankError::NotALedger {
                file: file.to_string(),
                reason: format!("{what}, not a bank; a bank is an SQLite file"),
            })
        }
        _ => Ok(()),
    }
}

/// Refuses a location where no bank is: nothing there, an empty file, or not a regular file.
pub(super) fn check_existing(path: &Path, file: &str) -> Result<(), BankError> {
    const CREATE: &str =
        "`bank grant`, `bank reserve`, `bank import` and `invoice finalize` create one";
    let len = std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| BankError::NotALedger {
            file: file.to_string(),
            reason: format!("there is no bank here ({e}); {CREATE}"),
        })?;
    check_regular(path, file)?;
    if len == 0 {
        return Err(BankError::NotALedger {
            file: file.to_string(),
            reason: format!("the file is empty, not a bank; {CREATE}"),
        });
    }
    Ok(())
}

/// `path` as the path part of an SQLite URI filename: percent-encoded but for unreserved
/// characters and `/`, so that `?`, `#` and `%` in a name stay part of it.
pub(super) fn uri_path(path: &Path) -> String {
    use std::fmt::Write as _;
    use std::os::unix::ffi::OsStrExt as _;
    let mut out = String::new();
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Refuses a non-empty file that does not start with SQLite's header, before SQLite sees it.
pub(super) fn check_header(path: &Path, file: &str) -> Result<(), BankError> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(BankError::Storage {
                file: file.to_string(),
                message: format!("cannot read it: {e}"),
            })
        }
    };
    let mut head = Vec::with_capacity(SQLITE_HEADER.len());
    f.by_ref()
        .take(SQLITE_HEADER.len() as u64)
        .read_to_end(&mut head)
        .map_err(|e| BankError::Storage {
            file: file.to_string(),
            message: format!("cannot read it: {e}"),
        })?;
    if head.is_empty() || head.as_slice() == SQLITE_HEADER {
        Ok(())
    } else {
        Err(BankError::NotALedger {
            file: file.to_string(),
            reason: "not a gpumeter ledger: not an SQLite database".to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    /// A path in an SQLite URI keeps `?`, `#` and `%` as part of the name.
    #[test]
    fn a_path_beginning_with_file_is_given_as_a_path() {
        use std::path::Path;
        assert_eq!(
            super::not_a_uri(Path::new("file:x.db?mode=ro")),
            Path::new("./file:x.db?mode=ro")
        );
        assert_eq!(
            super::not_a_uri(Path::new("/a/file:x")),
            Path::new("/a/file:x")
        );
        assert_eq!(super::not_a_uri(Path::new("x.db")), Path::new("x.db"));
    }

    #[test]
    fn uri_paths_escape_what_a_uri_reads() {
        assert_eq!(
            super::uri_path(std::path::Path::new("/a b/x?y#z%.db")),
            "/a%20b/x%3Fy%23z%25.db"
        );
    }
}
