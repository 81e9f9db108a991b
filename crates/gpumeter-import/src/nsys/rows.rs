//! Activity rows: each row of the kernel, memcpy and memset tables read into a record
//! ([`Activity`]), or, with a field that cannot be a valid record field, a lost record
//! ([`Bad`]); kernel names resolved through `StringIds` ([`name_kernels`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use gpumeter_core::{ActivityRecord, CopyDirection, DeviceSlot, KernelLaunch, Work};
use rusqlite::types::ValueRef;

use super::db::{ident, select, Columns, Db, RowReader, Schema, STRINGS};
use super::devices::vm_of;
use crate::cut::cut_string;
use crate::error::ImportError;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Kernel,
    Memcpy,
    Memset,
}

/// The activity rows of an export before their devices are resolved.
#[derive(Default)]
pub(super) struct Rows {
    pub(super) good: Vec<Good>,
    /// Rows lost to a record-level fault, in table and row order.
    pub(super) bad: Vec<Bad>,
}

/// A valid activity row.
pub(super) struct Good {
    pub(super) device_id: u32,
    /// Bits 48..63 of the row's `globalPid` (0 without one).
    pub(super) vm: i64,
    /// A kernel's name: an id into `StringIds`.
    pub(super) name_id: Option<i64>,
    pub(super) rec: ActivityRecord,
}

/// A row with a field that cannot be a valid record field.
pub(super) struct Bad {
    /// Its `deviceId` and VM when the row tells them (the VM is `None` when `globalPid` is
    /// unreadable); `None` when `deviceId` itself is the fault.
    pub(super) device: Option<(u32, Option<i64>)>,
    /// The first faulty field ([`ImportError::BadField`]).
    pub(super) fault: ImportError,
}

/// Common columns, result columns 1..=8 (0 is rowid).
const COMMON: [&str; 8] = [
    "start",
    "end",
    "deviceId",
    "contextId",
    "streamId",
    "correlationId",
    "globalPid",
    "graphNodeId",
];

/// How to read one activity table.
pub(super) struct Activity {
    pub(super) table: &'static str,
    pub(super) kind: Kind,
    /// Whether the export has a `StringIds` table (kernel names are ids into it).
    pub(super) strings: bool,
    /// `utcEpochNs`, added to `start` and `end`.
    pub(super) offset: i64,
}

impl Activity {
    /// Reads every row of the table into `out`: valid rows to `out.good`, rows with a
    /// record-level fault to `out.bad`. File-level faults (a missing required column, SQLite
    /// errors) are errors.
    pub(super) fn rows(
        &self,
        db: &Db<'_>,
        schema: &Schema,
        out: &mut Rows,
    ) -> Result<(), ImportError> {
        let table = self.table;
        let have = schema.columns(db, table)?;
        for required in ["start", "end", "deviceId"] {
            if !have.has(required) {
                return Err(ImportError::MissingColumn {
                    path: db.path.to_path_buf(),
                    table: table.to_string(),
                    column: required.to_string(),
                });
            }
        }
        let (wanted, name_col) = self.wanted(&have);
        // One scan in table order: no ORDER BY (the rows are sorted in Rust; SQLite would sort
        // the unindexed `start` in temporary storage) and no join.
        let rowid = schema.rowid(db, table, &have)?;
        let sql = select(&have, rowid, &wanted, &ident(table));
        let ctx = format!("reading {table}");
        let mut stmt = db.conn().prepare(&sql).map_err(db.err(ctx.clone()))?;
        let mut q = stmt.query([]).map_err(db.err(ctx.clone()))?;
        while let Some(row) = q.next().map_err(db.err(ctx.clone()))? {
            let rowid: i64 = row.get(0).map_err(db.err(ctx.clone()))?;
            let r = RowReader {
                row,
                db,
                table,
                rowid,
            };
            self.row(&r, name_col, out)?;
        }
        Ok(())
    }

    /// The columns to read from a table with columns `have`, in result-column order (after the
    /// rowid): [`COMMON`], the kind's own, and for kernels the name column, which is also
    /// returned (kernel names are ids into `StringIds(id, value)`, resolved by
    /// [`name_kernels`]).
    fn wanted(&self, have: &Columns) -> (Vec<&'static str>, Option<&'static str>) {
        let mut wanted: Vec<&'static str> = COMMON.to_vec();
        let name_col = ["demangledName", "shortName", "mangledName"]
            .into_iter()
            .find(|c| have.has(c));
        let mut name_col = name_col.filter(|_| self.strings);
        match self.kind {
            Kind::Kernel => wanted.extend([
                "gridX",
                "gridY",
                "gridZ",
                "blockX",
                "blockY",
                "blockZ",
                "registersPerThread",
                "staticSharedMemory",
                "dynamicSharedMemory",
            ]),
            Kind::Memcpy => {
                name_col = None;
                wanted.extend(["bytes", "copyKind"]);
            }
            Kind::Memset => {
                name_col = None;
                wanted.extend(["bytes"]);
            }
        }
        if let Some(c) = name_col {
            wanted.push(c);
        }
        (wanted, name_col)
    }

    /// Reads one row into `out` (a valid row to `out.good`, a row with a record-level fault to
    /// `out.bad`); an SQLite error is an error.
    fn row(
        &self,
        r: &RowReader<'_, '_>,
        name_col: Option<&'static str>,
        out: &mut Rows,
    ) -> Result<(), ImportError> {
        let device_id = match r.int(3, "deviceId") {
            Ok(Some(id)) => u32::try_from(id).map_err(|_| {
                r.bad(
                    "deviceId",
                    &id.to_string(),
                    "out of range for a device id (0 to 4294967295)",
                )
            }),
            Ok(None) => Err(r.bad(
                "deviceId",
                "",
                "missing (NULL): the record's device cannot be told",
            )),
            Err(e) => Err(e),
        };
        let device_id = match device_id {
            Ok(id) => id,
            Err(e @ ImportError::Sqlite { .. }) => return Err(e),
            Err(fault) => {
                out.bad.push(Bad {
                    device: None,
                    fault,
                });
                return Ok(());
            }
        };
        match self.record(r) {
            Ok((rec, vm)) => {
                // Any value but an integer refers to no StringIds row.
                let name_id = match name_col.map(|c| r.value(18, c)).transpose()? {
                    Some(ValueRef::Integer(id)) => Some(id),
                    _ => None,
                };
                out.good.push(Good {
                    device_id,
                    vm,
                    name_id,
                    rec,
                })
            }
            Err(e @ ImportError::Sqlite { .. }) => return Err(e),
            Err(fault) => {
                // The VM is unknown when `globalPid` is the fault.
                let vm = r.int(7, "globalPid").ok().map(|g| g.map_or(0, vm_of));
                out.bad.push(Bad {
                    device: Some((device_id, vm)),
                    fault,
                });
            }
        }
        Ok(())
    }

    /// The record of a row (its device still unresolved) and the VM of its `globalPid`, or the
    /// first faulty field in column order.
    fn record(&self, r: &RowReader<'_, '_>) -> Result<(ActivityRecord, i64), ImportError> {
        let start_ns = self.time(r, 1, "start")?;
        let end_ns = self.time(r, 2, "end")?;
        let context_id = r.u32(4, "contextId")?.unwrap_or(0);
        // CUPTI stream ids are u32; nsys stores them as integers that may be negative i32s.
        let stream_id = match r.int(5, "streamId")? {
            None => 0,
            Some(s) => u32::try_from(s)
                .ok()
                .or_else(|| i32::try_from(s).ok().map(|s| s as u32))
                .ok_or_else(|| {
                    r.bad(
                        "streamId",
                        &s.to_string(),
                        "out of range for a stream id (-2147483648 to 4294967295)",
                    )
                })?,
        };
        let correlation_id = r.u32(6, "correlationId")?.unwrap_or(0);
        let global_pid = r.int(7, "globalPid")?;
        let graph_node_id = r.u64(8, "graphNodeId")?.unwrap_or(0);
        let work = match self.kind {
            Kind::Kernel => {
                let dim = |i: usize, names: [&'static str; 3]| -> Result<_, ImportError> {
                    let x = r.u32(i, names[0])?;
                    let y = r.u32(i + 1, names[1])?;
                    let z = r.u32(i + 2, names[2])?;
                    Ok(match (x, y, z) {
                        (Some(x), Some(y), Some(z)) => Some([x, y, z]),
                        _ => None,
                    })
                };
                let grid = dim(9, ["gridX", "gridY", "gridZ"])?;
                let block = dim(12, ["blockX", "blockY", "blockZ"])?;
                let registers_per_thread = r.u32(15, "registersPerThread")?;
                let stat = r.u64(16, "staticSharedMemory")?;
                let dynm = r.u64(17, "dynamicSharedMemory")?;
                // Two u64s read from i64s cannot sum past u64::MAX.
                let shared_mem_bytes = match (stat, dynm) {
                    (None, None) => None,
                    (a, b) => a.unwrap_or(0).checked_add(b.unwrap_or(0)),
                };
                Work::Kernel(KernelLaunch {
                    grid,
                    block,
                    registers_per_thread,
                    shared_mem_bytes,
                    name: None,
                    warp_instructions: None,
                    ops: Default::default(),
                })
            }
            Kind::Memcpy => Work::Memcpy {
                bytes: r
                    .u64(9, "bytes")?
                    .ok_or_else(|| r.bad("bytes", "", "missing (NULL)"))?,
                direction: match r.int(10, "copyKind")? {
                    Some(1) => CopyDirection::HostToDevice,
                    Some(2) => CopyDirection::DeviceToHost,
                    Some(8) => CopyDirection::DeviceToDevice,
                    Some(10) => CopyDirection::Peer,
                    _ => CopyDirection::Other,
                },
            },
            Kind::Memset => Work::Memset {
                bytes: r
                    .u64(9, "bytes")?
                    .ok_or_else(|| r.bad("bytes", "", "missing (NULL)"))?,
            },
        };
        let mut rec = ActivityRecord::new(DeviceSlot(0), start_ns, end_ns, work);
        rec.context_id = context_id;
        rec.stream_id = stream_id;
        rec.correlation_id = correlation_id;
        rec.graph_node_id = graph_node_id;
        rec.process_id = global_pid.map(|g| ((g >> 24) & 0xFF_FFFF) as u32);
        Ok((rec, global_pid.map_or(0, vm_of)))
    }

    /// `utcEpochNs` + the time in column `i`, as ns since the epoch; NULL reads as 0 (not
    /// recorded: a `zero_timestamp` loss in the meter).
    fn time(
        &self,
        r: &RowReader<'_, '_>,
        i: usize,
        field: &'static str,
    ) -> Result<u64, ImportError> {
        let Some(v) = r.int(i, field)? else {
            return Ok(0);
        };
        // In i128: no overflow, and times after 2262 (past i64) but before 2554 (u64) stay
        // valid.
        let t = i128::from(self.offset) + i128::from(v);
        u64::try_from(t).map_err(|_| {
            r.bad(
                field,
                &v.to_string(),
                format!(
                    "utcEpochNs {} + {field} {v} = {t} ns lies {} (outside u64 ns since the \
                     Unix epoch)",
                    self.offset,
                    if t < 0 { "before 1970" } else { "after 2554" }
                ),
            )
        })
    }
}

/// Gives kernels their names: one pass over `StringIds(id, value)` keeps the values of the ids
/// the kernels refer to (no SQL join: its cost would depend on SQLite's plan, quadratic where
/// `id` is not indexed). Names are informational (never metered): an id that `StringIds` lacks
/// leaves the name unknown, and a value that is not text is read as text (lossily). A name
/// longer than [`crate::MAX_STRING_BYTES`] is kept cut there (so that many distinct huge names cannot
/// add up): returns how many were.
pub(super) fn name_kernels(
    db: &Db<'_>,
    cols: &Columns,
    good: &mut [Good],
) -> Result<u64, ImportError> {
    let wanted: HashSet<i64> = good.iter().filter_map(|g| g.name_id).collect();
    if wanted.is_empty() {
        return Ok(0);
    }
    let mut cut = 0;
    let ctx = format!("reading {STRINGS}");
    // By their declared names (checked by `parse`): a double-quoted name that matches no
    // column would be read by SQLite as a string literal.
    let sql = format!(
        "SELECT {}, {} FROM {}",
        ident(cols.get("id").unwrap_or("id")),
        ident(cols.get("value").unwrap_or("value")),
        ident(STRINGS)
    );
    let mut stmt = db.conn().prepare(&sql).map_err(db.err(ctx.clone()))?;
    let mut q = stmt.query([]).map_err(db.err(ctx.clone()))?;
    let mut names: HashMap<i64, Arc<str>> = HashMap::new();
    while let Some(row) = q.next().map_err(db.err(ctx.clone()))? {
        let ValueRef::Integer(id) = row.get_ref(0).map_err(db.err(ctx.clone()))? else {
            continue;
        };
        if !wanted.contains(&id) || names.contains_key(&id) {
            continue;
        }
        let mut name = match row.get_ref(1).map_err(db.err(ctx.clone()))? {
            ValueRef::Null => continue,
            ValueRef::Text(b) | ValueRef::Blob(b) => String::from_utf8_lossy(b).into_owned(),
            v => RowReader::shown(v),
        };
        cut += u64::from(cut_string(&mut name));
        names.insert(id, Arc::from(name.as_str()));
    }
    for g in good {
        if let (Some(id), Work::Kernel(k)) = (g.name_id, &mut g.rec.work) {
            k.name = names.get(&id).cloned();
        }
    }
    Ok(cut)
}
