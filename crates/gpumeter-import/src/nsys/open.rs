//! Opening an export with its guards (module docs, "Hostile files"): read-only and immutable,
//! defensive settings, a budget of SQLite steps per byte ([`Export`]), and the refusal of a
//! WAL-mode file whose log holds transactions the hashed bytes lack.

use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rusqlite::config::DbConfig;
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};

use crate::error::ImportError;
use crate::SQLITE_MAGIC;

/// The longest string or blob SQLite may hold while importing (`SQLITE_LIMIT_LENGTH`): 16 MiB.
/// The longest values of an export are kernel names (kilobytes for the longest C++ template
/// names); a record that claims more is refused as an SQLite error ("string or blob too big").
pub(super) const MAX_VALUE_BYTES: i32 = 16 << 20;

/// SQLite virtual-machine steps an import may run per byte of the file. Every query is one scan
/// of one table, about one step per column read, and a stored row takes about a byte per
/// column at least, so an export needs a few steps per byte at most: the shared Perlmutter
/// export 5 498 steps for its 1 613 824 bytes (0.003 per byte: most of it is tables the importer
/// does not read), the densest synthetic rows (a NULL, a NULL and a 0) 2 per byte (tests). 64 is
/// 30 times that; a runaway query of a 1.6 MB file stops after its 113 M steps (0.7 s in a
/// release build).
pub(super) const STEPS_PER_BYTE: u64 = 64;

/// Steps every import may run whatever its size (for the schema and tiny files): 10 M.
pub(super) const MIN_STEPS: u64 = 10_000_000;

/// How often the progress handler runs, in virtual-machine steps of one statement (the steps
/// of a statement shorter than this are not counted).
pub(super) const STEP_GRAIN: u64 = 1_000;

/// What a path may keep unencoded in an SQLite `file:` URI: RFC 3986's unreserved characters
/// and `/`; everything else (`?`, `#`, `%`, blanks, non-UTF-8 bytes) is percent-encoded.
const URI_PATH: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// An export opened for reading, with its guards (module docs): the connection and the budget
/// of virtual-machine steps its queries may still run.
pub(crate) struct Export {
    pub(super) conn: Connection,
    /// The file's size in bytes.
    pub(super) len: u64,
    /// Steps the import may run ([`budget`] of `len`).
    pub(super) budget: u64,
    /// Steps run so far (in multiples of [`STEP_GRAIN`]), counted by the progress handler.
    pub(super) steps: Arc<AtomicU64>,
}

/// The step budget of a file of `len` bytes.
pub(super) fn budget(len: u64) -> u64 {
    MIN_STEPS.saturating_add(len.saturating_mul(STEPS_PER_BYTE))
}

/// The `file:` URI that opens `path` read-only and immutable.
pub(super) fn uri(path: &Path) -> Result<String, ImportError> {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path
        .to_str()
        .ok_or_else(|| ImportError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the path is not valid Unicode",
            ),
        })?
        .replace('\\', "/")
        .into_bytes();
    let encoded = percent_encode(&bytes, URI_PATH).to_string();
    // `file:///abs` (an empty authority) for absolute paths, so that a path starting with `//`
    // is not read as an authority; `file:rel` for relative ones.
    let prefix = if bytes.first() == Some(&b'/') {
        "file://"
    } else if cfg!(not(unix)) && path.is_absolute() {
        "file:///"
    } else {
        "file:"
    };
    Ok(format!("{prefix}{encoded}?immutable=1"))
}

impl Export {
    /// Opens the export at `path` read-only and immutable, with the guards of the module docs.
    /// A WAL-mode file with a non-empty `-wal` file beside it is refused
    /// ([`refuse_uncheckpointed_wal`]).
    pub(crate) fn open_path(path: &Path) -> Result<Export, ImportError> {
        let len = std::fs::metadata(path)
            .map_err(|source| ImportError::Io {
                path: path.to_path_buf(),
                source,
            })?
            .len();
        refuse_uncheckpointed_wal(path)?;
        let conn = Connection::open_with_flags(
            uri(path)?,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| ImportError::Sqlite {
            path: path.to_path_buf(),
            context: "opening".to_string(),
            source,
        })?;
        Export::guard(path, conn, len)
    }

    /// Opens SQLite bytes as a read-only in-memory database with the guards of a file (module
    /// docs).
    ///
    /// # Errors
    /// [`ImportError::TooLarge`] for bytes over 2 GiB; [`ImportError::Sqlite`] when SQLite
    /// cannot load them.
    pub(crate) fn open_bytes(path: &Path, bytes: &[u8]) -> Result<Export, ImportError> {
        // sqlite3_deserialize sizes are C ints.
        if i32::try_from(bytes.len()).is_err() {
            return Err(ImportError::TooLarge {
                path: path.to_path_buf(),
                len: bytes.len(),
            });
        }
        let sql_err = |context: &str| {
            let context = context.to_string();
            move |source| ImportError::Sqlite {
                path: path.to_path_buf(),
                context,
                source,
            }
        };
        let mut conn =
            Connection::open_in_memory().map_err(sql_err("opening an in-memory database"))?;
        // An in-memory database cannot be in WAL mode (header bytes 18 and 19 = 2: SQLite
        // answers "unable to open"), but a WAL-mode file read alone holds all its content, as
        // `import_path` reads it (immutable): the copy SQLite makes is marked rollback-mode
        // (1, 1) instead.
        let wal = bytes.starts_with(SQLITE_MAGIC) && bytes.get(18..20) == Some(&[2, 2][..]);
        let (head, tail) = if wal {
            (&bytes[..18], &bytes[20..])
        } else {
            (bytes, &[][..])
        };
        let mode: &[u8] = if wal { &[1, 1] } else { &[] };
        conn.deserialize_read_exact(
            rusqlite::MAIN_DB,
            head.chain(mode).chain(tail),
            bytes.len(),
            true,
        )
        .map_err(sql_err("loading the database from memory"))?;
        Export::guard(path, conn, bytes.len() as u64)
    }

    /// Puts the guards of the module docs on `conn`, a database of `len` bytes (a file opened
    /// read-only, or bytes deserialized read-only into memory).
    fn guard(path: &Path, conn: Connection, len: u64) -> Result<Export, ImportError> {
        Export::guard_with(path, conn, len, budget(len), STEP_GRAIN)
    }

    /// [`Export::guard`] with a given step budget, counted every `grain` steps of a statement.
    pub(super) fn guard_with(
        path: &Path,
        conn: Connection,
        len: u64,
        budget: u64,
        grain: u64,
    ) -> Result<Export, ImportError> {
        let err = |what: &str| {
            let context = format!("opening (setting {what})");
            move |source| ImportError::Sqlite {
                path: path.to_path_buf(),
                context,
                source,
            }
        };
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            .map_err(err("SQLITE_LIMIT_LENGTH"))?;
        // Views and triggers off: none is ever run, even one the checks of `parse` missed.
        for (config, on, name) in [
            (DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true, "DEFENSIVE"),
            (DbConfig::SQLITE_DBCONFIG_ENABLE_VIEW, false, "ENABLE_VIEW"),
            (
                DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER,
                false,
                "ENABLE_TRIGGER",
            ),
        ] {
            conn.set_db_config(config, on).map_err(err(name))?;
        }
        for (pragma, value) in [
            ("query_only", "ON"),
            ("trusted_schema", "OFF"),
            ("temp_store", "MEMORY"),
            ("cell_size_check", "ON"),
        ] {
            conn.pragma_update(None, pragma, value)
                .map_err(err(&format!("PRAGMA {pragma}")))?;
        }
        let steps = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&steps);
        conn.progress_handler(
            i32::try_from(grain).unwrap_or(i32::MAX),
            Some(move || counter.fetch_add(grain, Ordering::Relaxed) + grain > budget),
        );
        Ok(Export {
            conn,
            len,
            budget,
            steps,
        })
    }

    /// Virtual-machine steps run so far (to a multiple of [`STEP_GRAIN`]).
    pub(super) fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }
}

/// Refuses the database at `path` when it is in WAL mode (header byte 18 or 19 is 2) and a
/// non-empty `-wal` file lies beside it: beside the path as given, or beside the file it
/// resolves to (SQLite looks for the log beside the file a symbolic link points to).
///
/// The file is opened `immutable`, so that exactly the bytes whose SHA-256 identifies the source
/// are read, and SQLite then ignores the log. But transactions committed to the log and not yet
/// checkpointed are part of the database for every other reader (`sqlite3` shows their rows),
/// and not part of the hashed bytes: importing the file alone would silently leave them out,
/// and billing them under that SHA-256 would bill rows the source's bytes do not hold. So the
/// file must be checkpointed first (which writes the rows into it, giving it a new SHA-256).
/// An empty or absent `-wal` file holds nothing; a `-wal` file beside a rollback-mode database
/// is not read by SQLite either. A log whose frames were all checkpointed already (a copy
/// taken after a passive checkpoint) is refused too: telling it apart means comparing pages,
/// and the remedy is harmless. The error is [`ImportError::Io`] naming the file (kind
/// `InvalidData`), its message the log and the command that checkpoints it.
pub(super) fn refuse_uncheckpointed_wal(path: &Path) -> Result<(), ImportError> {
    let io_err = |p: &Path| {
        let p = p.to_path_buf();
        move |source| ImportError::Io { path: p, source }
    };
    let mut head = Vec::with_capacity(20);
    std::fs::File::open(path)
        .and_then(|f| f.take(20).read_to_end(&mut head))
        .map_err(io_err(path))?;
    let wal_mode = matches!(head.get(18..20), Some([a, b]) if *a == 2 || *b == 2);
    if !head.starts_with(b"SQLite format 3\0") || !wal_mode {
        return Ok(());
    }
    let mut logs = vec![sidecar(path, "-wal")];
    if let Ok(real) = std::fs::canonicalize(path) {
        let log = sidecar(&real, "-wal");
        if !logs.contains(&log) {
            logs.push(log);
        }
    }
    for log in logs {
        let len = match std::fs::metadata(&log) {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_err(&log)(e)),
        };
        if len == 0 {
            continue;
        }
        return Err(ImportError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "the database is in WAL mode and its write-ahead log {} holds {len} bytes: \
                     transactions committed there are not in this file, whose SHA-256 \
                     identifies the source, and would be left off the bill; checkpoint the \
                     log into the file first (sqlite3 {} 'PRAGMA wal_checkpoint(TRUNCATE)') \
                     and import it again",
                    log.display(),
                    shell_quoted(path)
                ),
            ),
        });
    }
    Ok(())
}

/// `path` with `suffix` appended to its file name (`x.sqlite` → `x.sqlite-wal`), as SQLite
/// names its side files.
fn sidecar(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    name.into()
}

/// `path` in single quotes for a POSIX shell (a `'` written `'\''`).
fn shell_quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}
