//! Nsight Systems SQLite exports (`nsys export --type sqlite`, schema 2.x and 3.x) to activity
//! records.
//!
//! * Tables: `CUPTI_ACTIVITY_KIND_KERNEL`, `CUPTI_ACTIVITY_KIND_MEMCPY`,
//!   `CUPTI_ACTIVITY_KIND_MEMSET`; any may be missing (nsys omits a table when the kind never
//!   occurred). Columns are read by name (`PRAGMA table_xinfo`), matched in any ASCII case as
//!   SQLite matches them (`START` is `start`) and selected by their declared names; optional
//!   ones may be missing.
//! * Rows are named by their rowid, read under the first of `rowid`, `_rowid_`, `oid` that the
//!   table does not declare as a column (a declared one hides the rowid under its name); a
//!   table that declares all three, or a `WITHOUT ROWID` table, is refused naming the table.
//! * Time: `start`/`end` are ns relative to `TARGET_INFO_SESSION_START_TIME.utcEpochNs`; without
//!   that table they are taken as absolute and the report gets a warning.
//! * Devices: `deviceId` matched to `TARGET_INFO_GPU.id` (else `cuDevice`), keyed by its `uuid`;
//!   without one, `<label>#<deviceId>`, the label being given by the caller (the first 16 hex digits of the SHA-256,
//!   see the crate docs). An export whose rows come from several VMs (bits 48..63 of
//!   `globalPid`) keys such devices `<label>#<deviceId>@vm<n>`: each VM has its own device 0.
//! * Process id: `(globalPid >> 24) & 0xFFFFFF`.
//! * Memcpy direction: `copyKind` 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, anything else other.
//!
//! # Hostile files
//!
//! An export is a database, and a database can hold code: a view is a stored query (a recursive
//! one never ends), a virtual table runs a module, a generated column computes its values on
//! read. The importer reads *data* only, so that the work of an import is bounded by the size
//! of the file (following SQLite's "Defense against the dark arts", sqlite.org/security.html):
//!
//! * every table it reads (the three activity tables, `TARGET_INFO_GPU`,
//!   `TARGET_INFO_SESSION_START_TIME`, `StringIds`) must be an ordinary table: one that exists
//!   as a view, as a virtual table, or with a generated column is refused with a
//!   [`ImportError::BadField`] on its `sqlite_master` row (field `type` or `sql`) that names the
//!   table. The kind is read from `sqlite_master` without preparing any view (SQLite checks
//!   that `type` agrees with the `CREATE` text; a virtual table is told by its text);
//! * the file is opened read-only and `immutable` (no locks, no `-journal`/`-wal` side files:
//!   exactly the bytes that were hashed are read), `query_only`, `trusted_schema` off, views
//!   and triggers disabled, defensive mode on, `cell_size_check` on, temporary storage in
//!   memory, and no string or blob over [`open::MAX_VALUE_BYTES`]. A WAL-mode file with a non-empty
//!   `-wal` file beside it is refused: the log's transactions are not in the hashed bytes
//!   (checkpoint it first; [`open::refuse_uncheckpointed_wal`]);
//! * a progress handler stops any statement once the import has run [`open::STEPS_PER_BYTE`] SQLite
//!   virtual-machine steps per byte of the file (plus [`open::MIN_STEPS`]); the error is an
//!   [`ImportError::Sqlite`] (`OperationInterrupted`) whose context names the table being read
//!   and the budget. Real exports need far fewer (the shared Perlmutter export: see the tests);
//! * no query sorts: rows are sorted in Rust.
//!
//! # Record-level faults
//!
//! A row of an activity table whose field cannot be a valid record field (a `deviceId` that is
//! NULL, not an integer or not a `u32`; a time that is not an integer or lies outside `u64` ns
//! since the epoch once the session offset is added; a negative or non-integer byte count, grid,
//! block, register or shared-memory size; a context or correlation id out of `u32`; a stream id
//! outside `i32::MIN..=u32::MAX`; a negative `graphNodeId`; a non-integer `globalPid` or
//! `copyKind`; a NULL memcpy/memset `bytes`) is a lost record (`invalid_field`): on
//! its device when its `deviceId` is valid (resolved through `TARGET_INFO_GPU` like any row;
//! with an unreadable `globalPid`, by id alone), else on the source; the report warns once per
//! field, naming the first such row (table, rowid, field, value). The other rows are metered.
//! A NULL `start` or `end` reads as 0, which the meter counts as `zero_timestamp`. Kernel names
//! are informational (never metered): a name id that `StringIds` lacks, or that is not an
//! integer, leaves the name unknown, and a value that is not text is read as text.
//!
//! What describes the file rather than a record stays an error: a missing required column
//! (`start`, `end`, `deviceId`; `StringIds.id`/`value`), a bad `utcEpochNs`, a bad
//! `TARGET_INFO_GPU` row, a table that is not a table or has no rowid the importer can read,
//! anything SQLite cannot read.

mod db;
mod devices;
mod open;
mod rows;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::Path;

use gpumeter_core::{Warning, WarningCode};

use self::db::{Columns, Db, Schema, GPU, KERNEL, MEMCPY, MEMSET, READ, SESSION, STRINGS};
use self::devices::{read_gpus, session_start, Devices, Gpu};
use self::rows::{name_kernels, Activity, Kind, Rows};
use crate::cut::{cut_string, CUT_MARK, MAX_STRING_BYTES};
use crate::error::ImportError;
use crate::parsed::Parsed;

pub(crate) use self::open::Export;

/// Reads one whole export without touching any meter. `path` names the file in errors,
/// `source_name` in warnings; `key_label` is what keys of devices without a UUID are built from
/// ([`gpumeter_core::DeviceInfo::source_key`]).
pub(crate) fn parse(
    path: &Path,
    source_name: &str,
    key_label: &str,
    export: &Export,
) -> Result<Parsed, ImportError> {
    let db = Db { ex: export, path };
    let schema = Schema::read(&db)?;
    let present = present_tables(&db, &schema)?;
    let has = |t: &str| present.contains(t);
    if !has(KERNEL) && !has(MEMCPY) && !has(MEMSET) && !schema.any_table_starting("TARGET_INFO") {
        return Err(ImportError::NoActivityTables {
            path: path.to_path_buf(),
        });
    }
    let mut parsed = Parsed::default();
    let offset = session_offset(&db, &schema, has(SESSION), source_name, &mut parsed)?;
    let mut gpus = if has(GPU) {
        read_gpus(&db, &schema)?
    } else {
        Vec::new()
    };
    // Names kept cut at MAX_STRING_BYTES (counted in one warning).
    let mut cut_names = 0u64;
    for name in gpus.iter_mut().filter_map(|g| g.info.name.as_mut()) {
        cut_names += u64::from(cut_string(name));
    }
    let strings = if has(STRINGS) {
        Some(strings_columns(&db, &schema)?)
    } else {
        None
    };
    let mut rows = Rows::default();
    for (table, kind) in [
        (KERNEL, Kind::Kernel),
        (MEMCPY, Kind::Memcpy),
        (MEMSET, Kind::Memset),
    ] {
        if has(table) {
            let read = Activity {
                table,
                kind,
                strings: strings.is_some(),
                offset,
            };
            read.rows(&db, &schema, &mut rows)?;
        }
    }
    if let Some(cols) = &strings {
        cut_names += name_kernels(&db, cols, &mut rows.good)?;
    }
    if cut_names > 0 {
        parsed.warnings.push(Warning::new(
            WarningCode::StringsCut,
            format!(
                "{source_name}: {cut_names} kernel or device names are longer than \
             {MAX_STRING_BYTES} bytes: each is cut there and ends in a digest of the part \
             dropped ({CUT_MARK}…])"
            ),
        ));
    }
    place_on_devices(rows, &gpus, key_label, &mut parsed);
    Ok(parsed)
}

/// The tables the importer reads that the export has; every one is checked to be an ordinary
/// table before any is read.
fn present_tables(db: &Db<'_>, schema: &Schema) -> Result<HashSet<&'static str>, ImportError> {
    let mut present = HashSet::new();
    for table in READ {
        if schema.table(db, table)? {
            present.insert(table);
        }
    }
    Ok(present)
}

/// `utcEpochNs` of the session start, added to every record's times; without it (no table,
/// `has_session` false, or no value) 0, with a warning that times are taken as absolute.
fn session_offset(
    db: &Db<'_>,
    schema: &Schema,
    has_session: bool,
    source_name: &str,
    parsed: &mut Parsed,
) -> Result<i64, ImportError> {
    let session_start = if has_session {
        session_start(db, schema)?
    } else {
        None
    };
    Ok(match session_start {
        Some(ns) => ns,
        None => {
            parsed.warnings.push(Warning::new(
                WarningCode::NoSessionStart,
                format!(
                    "{source_name}: no {SESSION}.utcEpochNs; record times taken as absolute ns"
                ),
            ));
            0
        }
    })
}

/// The columns of `StringIds`, which must have `id` and `value`.
fn strings_columns(db: &Db<'_>, schema: &Schema) -> Result<Columns, ImportError> {
    let cols = schema.columns(db, STRINGS)?;
    for column in ["id", "value"] {
        if !cols.has(column) {
            return Err(ImportError::MissingColumn {
                path: db.path.to_path_buf(),
                table: STRINGS.to_string(),
                column: column.to_string(),
            });
        }
    }
    Ok(cols)
}

/// Puts the rows on their devices in `parsed`: devices in order of first activity, then those
/// with lost records only; valid rows become records sorted by (start, end), the others lost
/// records.
fn place_on_devices(mut rows: Rows, gpus: &[Gpu], key_label: &str, parsed: &mut Parsed) {
    // Rows of several VMs (bits 48..63 of `globalPid`) may each have a device 0: without a
    // UUID, their keys carry the VM, or two GPUs would be metered as one.
    let vms: HashSet<i64> = rows
        .good
        .iter()
        .map(|g| g.vm)
        .chain(rows.bad.iter().filter_map(|b| b.device.and_then(|d| d.1)))
        .collect();
    let mut devices = Devices {
        key_label,
        gpus,
        local: HashMap::new(),
        by_key: HashMap::new(),
        qualify_vm: vms.len() > 1,
    };
    rows.good.sort_by_key(|g| (g.rec.start_ns, g.rec.end_ns));
    parsed.records.reserve(rows.good.len());
    for good in rows.good {
        let mut rec = good.rec;
        rec.device = devices.slot(parsed, good.device_id, Some(good.vm));
        parsed.records.push(rec);
    }
    for bad in rows.bad {
        let slot = bad.device.map(|(id, vm)| devices.slot(parsed, id, vm));
        parsed.invalid(slot, &bad.fault);
    }
}
