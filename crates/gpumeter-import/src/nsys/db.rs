//! The export's schema and queries: the tables the importer reads, each checked to be an
//! ordinary table ([`Schema`]), their columns matched in any ASCII case ([`Columns`]), one
//! `SELECT` per table ([`select`]), and a row's fields read as typed values ([`RowReader`]).

use std::collections::HashMap;
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, ErrorCode};

use super::open::{Export, MIN_STEPS, STEPS_PER_BYTE};
use crate::error::{shorten, ImportError, RecordLocation};

pub(super) const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
pub(super) const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
pub(super) const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
pub(super) const GPU: &str = "TARGET_INFO_GPU";
pub(super) const SESSION: &str = "TARGET_INFO_SESSION_START_TIME";
pub(super) const STRINGS: &str = "StringIds";
const SCHEMA: &str = "sqlite_master";

/// The tables the importer reads; each must be an ordinary table when present.
pub(super) const READ: [&str; 6] = [KERNEL, MEMCPY, MEMSET, GPU, SESSION, STRINGS];

/// An export being parsed: the guarded connection and the file's name for errors.
pub(super) struct Db<'a> {
    pub(super) ex: &'a Export,
    pub(super) path: &'a Path,
}

impl<'a> Db<'a> {
    pub(super) fn conn(&self) -> &'a Connection {
        &self.ex.conn
    }

    /// Maps an SQLite error met while doing `context`; an interruption by the step budget says
    /// so.
    pub(super) fn err(
        &self,
        context: impl Into<String>,
    ) -> impl FnOnce(rusqlite::Error) -> ImportError + 'a {
        let mut context = context.into();
        let (ex, path) = (self.ex, self.path);
        move |source| {
            let interrupted = matches!(
                &source,
                rusqlite::Error::SqliteFailure(e, _) if e.code == ErrorCode::OperationInterrupted
            );
            if interrupted && ex.steps() > ex.budget {
                context = format!(
                    "{context}: stopped after {} SQLite steps, over the budget of {} for a file \
                     of {} bytes ({STEPS_PER_BYTE} per byte + {MIN_STEPS}); a real export needs \
                     far fewer",
                    ex.steps(),
                    ex.budget,
                    ex.len
                );
            }
            ImportError::Sqlite {
                path: path.to_path_buf(),
                context,
                source,
            }
        }
    }

    /// A file-level fault of the `sqlite_master` row `rowid`.
    fn schema_fault(
        &self,
        rowid: i64,
        field: &'static str,
        value: &str,
        reason: String,
    ) -> ImportError {
        ImportError::BadField {
            path: self.path.to_path_buf(),
            record: RecordLocation::Row {
                table: SCHEMA.to_string(),
                rowid,
            },
            field,
            value: shorten(value),
            reason,
        }
    }
}

/// Quotes an SQL identifier.
pub(super) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A table or view as `sqlite_master` lists it.
struct Object {
    rowid: i64,
    /// `table` or `view`. SQLite checks, as it loads the schema, that this agrees with the
    /// `CREATE` statement in `sql` (the schema is then malformed, an error); virtual tables
    /// are `table`s.
    kind: String,
    sql: String,
}

/// The tables and views of an export, by name in ASCII upper case (SQLite's names are
/// case-insensitive).
pub(super) struct Schema {
    objects: HashMap<String, Object>,
}

impl Schema {
    pub(super) fn read(db: &Db<'_>) -> Result<Schema, ImportError> {
        let ctx = "listing tables";
        let mut stmt = db
            .conn()
            .prepare("SELECT rowid, type, name, sql FROM main.sqlite_master WHERE type IN ('table', 'view')")
            .map_err(db.err(ctx))?;
        let mut q = stmt.query([]).map_err(db.err(ctx))?;
        let mut objects = HashMap::new();
        while let Some(row) = q.next().map_err(db.err(ctx))? {
            let text = |i: usize| -> Result<String, ImportError> {
                Ok(match row.get_ref(i).map_err(db.err(ctx))? {
                    ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                    _ => String::new(),
                })
            };
            let object = Object {
                rowid: row.get(0).map_err(db.err(ctx))?,
                kind: text(1)?,
                sql: text(3)?,
            };
            objects
                .entry(text(2)?.to_ascii_uppercase())
                .or_insert(object);
        }
        Ok(Schema { objects })
    }

    /// Whether an ordinary table `name` exists, to be read: `Ok(false)` when nothing of that
    /// name exists, an error naming the table when it is a view or a virtual table.
    pub(super) fn table(&self, db: &Db<'_>, name: &str) -> Result<bool, ImportError> {
        let Some(object) = self.objects.get(&name.to_ascii_uppercase()) else {
            return Ok(false);
        };
        if object.kind != "table" {
            return Err(db.schema_fault(
                object.rowid,
                "type",
                &object.kind,
                format!(
                    "{name} is a {}, not a table: the importer reads only tables (a view is a \
                     query stored in the file and may run without end)",
                    object.kind
                ),
            ));
        }
        if declares_virtual_table(&object.sql) {
            return Err(db.schema_fault(
                object.rowid,
                "sql",
                &object.sql,
                format!(
                    "{name} is a virtual table, not a table: the importer reads only tables (a \
                     virtual table runs a module's code instead of reading the file)"
                ),
            ));
        }
        Ok(true)
    }

    /// The columns of table `name` (checked by [`Schema::table`]); a generated column is an
    /// error naming the table and the column.
    pub(super) fn columns(&self, db: &Db<'_>, name: &str) -> Result<Columns, ImportError> {
        let ctx = format!("reading the columns of {name}");
        let mut stmt = db
            .conn()
            .prepare(&format!("PRAGMA main.table_xinfo({})", ident(name)))
            .map_err(db.err(ctx.clone()))?;
        let mut q = stmt.query([]).map_err(db.err(ctx.clone()))?;
        let mut cols = Columns::default();
        while let Some(row) = q.next().map_err(db.err(ctx.clone()))? {
            let column: String = row.get(1).map_err(db.err(ctx.clone()))?;
            // 0: ordinary; 1: hidden column of a virtual table; 2, 3: generated (VIRTUAL,
            // STORED).
            let hidden: i64 = row.get(6).map_err(db.err(ctx.clone()))?;
            if hidden != 0 {
                let object = self.objects.get(&name.to_ascii_uppercase());
                let (rowid, sql) = object.map_or((0, ""), |o| (o.rowid, o.sql.as_str()));
                return Err(db.schema_fault(
                    rowid,
                    "sql",
                    sql,
                    format!(
                        "column `{column}` of {name} is a generated column: its values are \
                         computed on read, not recorded, and the importer reads only recorded \
                         values"
                    ),
                ));
            }
            // SQLite refuses two columns whose names differ only in ASCII case; should a
            // file have them anyway, SQLite resolves the name to the first, and so does this.
            cols.by_lower
                .entry(column.to_ascii_lowercase())
                .or_insert(column);
        }
        Ok(cols)
    }

    /// The name under which table `name`, with columns `cols`, gives its rowid: the first of
    /// `rowid`, `_rowid_` and `oid` that it does not declare as a column. A declared column of
    /// one of these names (in any case) hides the rowid under that name, and reading it as the
    /// rowid would name rows by a user value (or fail on text).
    ///
    /// A table that declares all three, or a `WITHOUT ROWID` table, has no rowid to read and
    /// is refused with a [`ImportError::BadField`] on its `sqlite_master` row (field `sql`)
    /// naming the table. Decided rather than naming its rows by position: every record-level
    /// warning and error names a row by its rowid ([`RecordLocation::Row`]), which
    /// `SELECT … WHERE rowid = N` finds; a position would look like a rowid and find another
    /// row, or none. Nsight writes no such table.
    pub(super) fn rowid(
        &self,
        db: &Db<'_>,
        name: &str,
        cols: &Columns,
    ) -> Result<&'static str, ImportError> {
        let object = self.objects.get(&name.to_ascii_uppercase());
        let (rowid, sql) = object.map_or((0, ""), |o| (o.rowid, o.sql.as_str()));
        let refuse = |why: &str| {
            db.schema_fault(
                rowid,
                "sql",
                sql,
                format!(
                    "{name} has no rowid the importer can read: {why} (the importer names rows \
                     by rowid, and Nsight writes no such table)"
                ),
            )
        };
        let ctx = format!("reading the kind of {name}");
        let mut stmt = db
            .conn()
            .prepare(&format!("PRAGMA main.table_list({})", ident(name)))
            .map_err(db.err(ctx.clone()))?;
        let mut q = stmt.query([]).map_err(db.err(ctx.clone()))?;
        // Columns: schema, name, type, ncol, wr (WITHOUT ROWID), strict.
        if let Some(row) = q.next().map_err(db.err(ctx.clone()))? {
            let without_rowid: i64 = row.get(4).map_err(db.err(ctx))?;
            if without_rowid != 0 {
                return Err(refuse("it is a WITHOUT ROWID table"));
            }
        }
        ["rowid", "_rowid_", "oid"]
            .into_iter()
            .find(|alias| !cols.has(alias))
            .ok_or_else(|| {
                refuse(
                    "it declares columns named rowid, _rowid_ and oid, which hide SQLite's \
                     rowid under all three names",
                )
            })
    }

    /// Whether any ordinary table's name starts with `prefix`.
    pub(super) fn any_table_starting(&self, prefix: &str) -> bool {
        self.objects
            .iter()
            .any(|(name, o)| name.starts_with(prefix) && o.kind == "table")
    }
}

/// The columns of a table, by name in ASCII lower case: SQLite's column names are
/// case-insensitive (in ASCII only), so a table's `START` is the importer's `start`.
#[derive(Default)]
pub(super) struct Columns {
    /// Each column's name as the table declares it, by its name in ASCII lower case.
    by_lower: HashMap<String, String>,
}

impl Columns {
    /// The declared name of the column `name`, matched without regard to ASCII case.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.by_lower
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// Whether the table has a column `name`, in any ASCII case.
    pub(super) fn has(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// Whether `sql`, a `sqlite_master.sql` text, declares a virtual table: its first two SQL
/// tokens, past blanks and comments, are `CREATE VIRTUAL` in any case (the grammar allows
/// nothing between them). SQLite builds the schema from this text, and a row of type `table`
/// may hold either `CREATE TABLE` or `CREATE VIRTUAL TABLE`.
pub(super) fn declares_virtual_table(sql: &str) -> bool {
    let mut rest = sql.as_bytes();
    let mut word = || {
        rest = skip_blanks(rest);
        let n = rest
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
        let (w, r) = rest.split_at(n);
        rest = r;
        w
    };
    word().eq_ignore_ascii_case(b"create") && word().eq_ignore_ascii_case(b"virtual")
}

/// `s` past SQL blanks and comments (`-- …` to the end of the line, `/* … */`, unterminated
/// ones to the end).
fn skip_blanks(mut s: &[u8]) -> &[u8] {
    loop {
        s = match s {
            [c, rest @ ..] if c.is_ascii_whitespace() || *c == 0x0b => rest,
            [b'-', b'-', rest @ ..] => rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(&[][..], |i| &rest[i + 1..]),
            [b'/', b'*', rest @ ..] => rest
                .windows(2)
                .position(|w| w == b"*/")
                .map_or(&[][..], |i| &rest[i + 2..]),
            _ => return s,
        };
    }
}

/// Builds `SELECT <rowid>, <col or NULL>… FROM <from>`, `rowid` being the name under which
/// the table gives its rowid ([`Schema::rowid`]): each wanted column that the table lacks
/// (`have`, matched in any case) reads as NULL, so column `i` of `wanted` is result column
/// `i + 1` whatever the schema version. Columns are selected by their declared names.
pub(super) fn select(have: &Columns, rowid: &str, wanted: &[&str], from: &str) -> String {
    let mut sql = format!("SELECT {rowid}");
    for c in wanted {
        sql.push_str(", ");
        match have.get(c) {
            Some(name) => sql.push_str(&ident(name)),
            None => sql.push_str("NULL"),
        }
    }
    sql.push_str(" FROM ");
    sql.push_str(from);
    sql
}

/// Reads the fields of one row: `None` for NULL, a [`ImportError::BadField`] naming the table,
/// rowid, field and value for a value of the wrong type or range.
pub(super) struct RowReader<'r, 's> {
    pub(super) row: &'r rusqlite::Row<'s>,
    pub(super) db: &'r Db<'r>,
    pub(super) table: &'r str,
    pub(super) rowid: i64,
}

impl RowReader<'_, '_> {
    pub(super) fn bad(
        &self,
        field: &'static str,
        value: &str,
        reason: impl Into<String>,
    ) -> ImportError {
        ImportError::BadField {
            path: self.db.path.to_path_buf(),
            record: RecordLocation::Row {
                table: self.table.to_string(),
                rowid: self.rowid,
            },
            field,
            value: shorten(value),
            reason: reason.into(),
        }
    }

    pub(super) fn value(&self, i: usize, field: &'static str) -> Result<ValueRef<'_>, ImportError> {
        self.row
            .get_ref(i)
            .map_err(self.db.err(format!("reading {}.{field}", self.table)))
    }

    /// The text of a value that is not what was expected.
    pub(super) fn shown(v: ValueRef<'_>) -> String {
        match v {
            ValueRef::Null => String::new(),
            ValueRef::Integer(n) => n.to_string(),
            ValueRef::Real(x) => x.to_string(),
            ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
            ValueRef::Blob(b) => format!("<blob of {} bytes>", b.len()),
        }
    }

    pub(super) fn int(&self, i: usize, field: &'static str) -> Result<Option<i64>, ImportError> {
        match self.value(i, field)? {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(n) => Ok(Some(n)),
            v => Err(self.bad(field, &Self::shown(v), "expected an integer")),
        }
    }

    pub(super) fn text(
        &self,
        i: usize,
        field: &'static str,
    ) -> Result<Option<String>, ImportError> {
        match self.value(i, field)? {
            ValueRef::Null => Ok(None),
            ValueRef::Blob(b) => {
                Err(self.bad(field, &Self::shown(ValueRef::Blob(b)), "expected text"))
            }
            v => Ok(Some(Self::shown(v))),
        }
    }

    pub(super) fn u32(&self, i: usize, field: &'static str) -> Result<Option<u32>, ImportError> {
        self.int(i, field)?
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    self.bad(
                        field,
                        &v.to_string(),
                        "out of range for an unsigned 32-bit value (0 to 4294967295)",
                    )
                })
            })
            .transpose()
    }

    pub(super) fn u64(&self, i: usize, field: &'static str) -> Result<Option<u64>, ImportError> {
        self.int(i, field)?
            .map(|v| u64::try_from(v).map_err(|_| self.bad(field, &v.to_string(), "negative")))
            .transpose()
    }
}
