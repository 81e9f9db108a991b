//! Nsight Systems SQLite exports (`nsys export --type sqlite`, schema 2.x and 3.x) to activity
//! records (DESIGN §3).
//!
//! * Tables: `CUPTI_ACTIVITY_KIND_KERNEL`, `CUPTI_ACTIVITY_KIND_MEMCPY`,
//!   `CUPTI_ACTIVITY_KIND_MEMSET`; any may be missing (nsys omits a table when the kind never
//!   occurred). Columns are read by name (`PRAGMA table_info`); optional ones may be missing.
//! * Time: `start`/`end` are ns relative to `TARGET_INFO_SESSION_START_TIME.utcEpochNs`; without
//!   that table they are taken as absolute and the report gets a warning.
//! * Devices: `deviceId` matched to `TARGET_INFO_GPU.id` (else `cuDevice`), keyed by its `uuid`;
//!   without one, `<label>#<deviceId>`, the label being given by the caller (`<file name>@<sha8>`,
//!   see the crate docs).
//! * Process id: `(globalPid >> 24) & 0xFFFFFF`.
//! * Memcpy direction: `copyKind` 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, anything else other.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use gpumeter_core::{
    ActivityRecord, ComputeCapability, CopyDirection, DeviceInfo, DeviceSlot, KernelLaunch,
    SmLimits, Work,
};
use rusqlite::types::ValueRef;
use rusqlite::Connection;

use crate::error::{shorten, ImportError, RecordLocation};
use crate::Parsed;

const KERNEL: &str = "CUPTI_ACTIVITY_KIND_KERNEL";
const MEMCPY: &str = "CUPTI_ACTIVITY_KIND_MEMCPY";
const MEMSET: &str = "CUPTI_ACTIVITY_KIND_MEMSET";
const GPU: &str = "TARGET_INFO_GPU";
const SESSION: &str = "TARGET_INFO_SESSION_START_TIME";
const STRINGS: &str = "StringIds";

/// Bits 48..63 of a `globalPid`/`vmId`: hardware and VM ids.
const VM_MASK: i64 = !0xFFFF_FFFF_FFFF;

fn sqlite_err(
    path: &Path,
    context: impl Into<String>,
) -> impl FnOnce(rusqlite::Error) -> ImportError + '_ {
    let context = context.into();
    move |source| ImportError::Sqlite {
        path: path.to_path_buf(),
        context,
        source,
    }
}

/// Quotes an SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A GPU of `TARGET_INFO_GPU`.
struct Gpu {
    id: Option<i64>,
    cu_device: Option<i64>,
    vm: Option<i64>,
    info: DeviceInfo,
}

/// Reads one whole export without touching any meter. `path` names the file in errors,
/// `source_name` in warnings; `key_label` is what keys of devices without a UUID are built from
/// ([`DeviceInfo::source_key`]).
pub(crate) fn parse(
    path: &Path,
    source_name: &str,
    key_label: &str,
    conn: &Connection,
) -> Result<Parsed, ImportError> {
    let tables = table_names(path, conn)?;
    let has = |t: &str| tables.contains(t);
    let any_target_info = tables.iter().any(|t| t.starts_with("TARGET_INFO"));
    if !has(KERNEL) && !has(MEMCPY) && !has(MEMSET) && !any_target_info {
        return Err(ImportError::NoActivityTables {
            path: path.to_path_buf(),
        });
    }
    let mut parsed = Parsed::default();
    let session_start = if has(SESSION) {
        session_start(path, conn)?
    } else {
        None
    };
    let offset = match session_start {
        Some(ns) => ns,
        None => {
            parsed.warnings.push(format!(
                "{source_name}: no {SESSION}.utcEpochNs; record times taken as absolute ns"
            ));
            0
        }
    };
    let gpus = if has(GPU) {
        read_gpus(path, conn)?
    } else {
        Vec::new()
    };
    let strings = has(STRINGS);

    let mut rows: Vec<Row> = Vec::new();
    for (table, kind) in [
        (KERNEL, Kind::Kernel),
        (MEMCPY, Kind::Memcpy),
        (MEMSET, Kind::Memset),
    ] {
        if has(table) {
            read_activity(path, conn, table, kind, strings, offset, &mut rows)?;
        }
    }

    // Devices in order of first activity (rows are sorted by start below).
    rows.sort_by_key(|r| (r.rec.start_ns, r.rec.end_ns));
    let mut local: HashMap<(i64, i64), u32> = HashMap::new();
    let mut by_key: HashMap<String, u32> = HashMap::new();
    let mut records = Vec::with_capacity(rows.len());
    for row in rows {
        let vm = row.global_pid.map_or(0, |g| g & VM_MASK);
        let slot = match local.get(&(row.device_id, vm)) {
            Some(&s) => s,
            None => {
                let info = device_info(
                    key_label,
                    &gpus,
                    row.device_id,
                    vm,
                    row.table,
                    row.rowid,
                    path,
                )?;
                let s = match by_key.get(&info.key) {
                    Some(&s) => s,
                    None => {
                        let s = parsed.devices.len() as u32;
                        by_key.insert(info.key.clone(), s);
                        parsed.devices.push(info);
                        s
                    }
                };
                local.insert((row.device_id, vm), s);
                s
            }
        };
        let mut rec = row.rec;
        rec.device = DeviceSlot(slot);
        records.push(rec);
    }
    parsed.records = records;
    Ok(parsed)
}

fn table_names(path: &Path, conn: &Connection) -> Result<HashSet<String>, ImportError> {
    let ctx = "listing tables";
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        .map_err(sqlite_err(path, ctx))?;
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(sqlite_err(path, ctx))?
        .collect::<Result<HashSet<_>, _>>()
        .map_err(sqlite_err(path, ctx))?;
    Ok(names)
}

fn columns(path: &Path, conn: &Connection, table: &str) -> Result<HashSet<String>, ImportError> {
    let ctx = format!("reading the columns of {table}");
    let mut stmt = conn
        .prepare(&format!("PRAGMA table_info({})", ident(table)))
        .map_err(sqlite_err(path, ctx.clone()))?;
    let cols = stmt
        .query_map([], |r| r.get::<_, String>(1))
        .map_err(sqlite_err(path, ctx.clone()))?
        .collect::<Result<HashSet<_>, _>>()
        .map_err(sqlite_err(path, ctx))?;
    Ok(cols)
}

/// Builds `SELECT <prefix>rowid, <prefix><col or NULL>…<more> FROM <from>`: each wanted column
/// that the table lacks (`have`) reads as NULL, so column `i` of `wanted` is result column
/// `i + 1` whatever the schema version.
fn select(have: &HashSet<String>, wanted: &[&str], prefix: &str, more: &str, from: &str) -> String {
    let mut sql = format!("SELECT {prefix}rowid");
    for c in wanted {
        sql.push_str(", ");
        if have.contains(*c) {
            sql.push_str(prefix);
            sql.push_str(&ident(c));
        } else {
            sql.push_str("NULL");
        }
    }
    sql.push_str(more);
    sql.push_str(" FROM ");
    sql.push_str(from);
    sql
}

/// Reads integer column `i` of a row: `None` for NULL, a [`ImportError::BadField`] for text,
/// blobs and non-integral reals.
struct RowReader<'r, 's> {
    row: &'r rusqlite::Row<'s>,
    path: &'r Path,
    table: &'r str,
    rowid: i64,
}

impl RowReader<'_, '_> {
    fn bad(&self, field: &'static str, value: &str, reason: impl Into<String>) -> ImportError {
        ImportError::BadField {
            path: self.path.to_path_buf(),
            record: RecordLocation::Row {
                table: self.table.to_string(),
                rowid: self.rowid,
            },
            field,
            value: shorten(value),
            reason: reason.into(),
        }
    }

    fn int(&self, i: usize, field: &'static str) -> Result<Option<i64>, ImportError> {
        let v = self.row.get_ref(i).map_err(sqlite_err(
            self.path,
            format!("reading {}.{field}", self.table),
        ))?;
        match v {
            ValueRef::Null => Ok(None),
            ValueRef::Integer(n) => Ok(Some(n)),
            ValueRef::Real(x) => Err(self.bad(field, &x.to_string(), "expected an integer")),
            ValueRef::Text(t) => {
                Err(self.bad(field, &String::from_utf8_lossy(t), "expected an integer"))
            }
            ValueRef::Blob(_) => Err(self.bad(field, "<blob>", "expected an integer")),
        }
    }

    fn text(&self, i: usize, field: &'static str) -> Result<Option<String>, ImportError> {
        let v = self.row.get_ref(i).map_err(sqlite_err(
            self.path,
            format!("reading {}.{field}", self.table),
        ))?;
        match v {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => Ok(Some(String::from_utf8_lossy(t).into_owned())),
            ValueRef::Integer(n) => Ok(Some(n.to_string())),
            ValueRef::Real(x) => Ok(Some(x.to_string())),
            ValueRef::Blob(_) => Err(self.bad(field, "<blob>", "expected text")),
        }
    }

    fn u32(&self, i: usize, field: &'static str) -> Result<Option<u32>, ImportError> {
        self.int(i, field)?
            .map(|v| {
                u32::try_from(v).map_err(|_| {
                    self.bad(
                        field,
                        &v.to_string(),
                        "out of range for an unsigned 32-bit value",
                    )
                })
            })
            .transpose()
    }

    fn u64(&self, i: usize, field: &'static str) -> Result<Option<u64>, ImportError> {
        self.int(i, field)?
            .map(|v| u64::try_from(v).map_err(|_| self.bad(field, &v.to_string(), "negative")))
            .transpose()
    }
}

fn session_start(path: &Path, conn: &Connection) -> Result<Option<i64>, ImportError> {
    let have = columns(path, conn, SESSION)?;
    if !have.contains("utcEpochNs") {
        return Ok(None);
    }
    let sql = select(
        &have,
        &["utcEpochNs"],
        "",
        "",
        &format!("{} LIMIT 1", ident(SESSION)),
    );
    let ctx = format!("reading {SESSION}");
    let mut stmt = conn.prepare(&sql).map_err(sqlite_err(path, ctx.clone()))?;
    let mut q = stmt.query([]).map_err(sqlite_err(path, ctx.clone()))?;
    let Some(row) = q.next().map_err(sqlite_err(path, ctx))? else {
        return Ok(None);
    };
    let rowid: i64 = row.get(0).unwrap_or(0);
    let r = RowReader {
        row,
        path,
        table: SESSION,
        rowid,
    };
    match r.int(1, "utcEpochNs")? {
        Some(v) if v < 0 => Err(r.bad(
            "utcEpochNs",
            &v.to_string(),
            "negative: before the Unix epoch",
        )),
        v => Ok(v),
    }
}

fn read_gpus(path: &Path, conn: &Connection) -> Result<Vec<Gpu>, ImportError> {
    const COLS: [&str; 16] = [
        "id",
        "cuDevice",
        "vmId",
        "name",
        "uuid",
        "smCount",
        "computeMajor",
        "computeMinor",
        "maxShmemPerBlock",
        "maxShmemPerBlockOptin",
        "maxShmemPerSm",
        "maxRegistersPerSm",
        "maxRegistersPerBlock",
        "threadsPerWarp",
        "maxWarpsPerSm",
        "maxBlocksPerSm",
    ];
    let have = columns(path, conn, GPU)?;
    let sql = select(
        &have,
        &COLS,
        "",
        "",
        &format!("{} ORDER BY rowid", ident(GPU)),
    );
    let ctx = format!("reading {GPU}");
    let mut stmt = conn.prepare(&sql).map_err(sqlite_err(path, ctx.clone()))?;
    let mut q = stmt.query([]).map_err(sqlite_err(path, ctx.clone()))?;
    let mut out = Vec::new();
    while let Some(row) = q.next().map_err(sqlite_err(path, ctx.clone()))? {
        let rowid: i64 = row.get(0).map_err(sqlite_err(path, ctx.clone()))?;
        let r = RowReader {
            row,
            path,
            table: GPU,
            rowid,
        };
        let nz32 = |i: usize, f: &'static str| r.u32(i, f).map(|v| v.filter(|&x| x > 0));
        let nz64 = |i: usize, f: &'static str| r.u64(i, f).map(|v| v.filter(|&x| x > 0));
        let id = r.int(1, "id")?;
        let cu_device = r.int(2, "cuDevice")?;
        let uuid = r.text(5, "uuid")?.filter(|u| !u.trim().is_empty());
        let major = r.u32(7, "computeMajor")?;
        let minor = r.u32(8, "computeMinor")?;
        let dev_id = id
            .or(cu_device)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0);
        let info = DeviceInfo {
            // Replaced by the caller when the GPU has no UUID.
            key: uuid
                .as_deref()
                .map(DeviceInfo::uuid_key)
                .unwrap_or_default(),
            id: dev_id,
            name: r.text(4, "name")?,
            sm_count: nz32(6, "smCount")?,
            compute_capability: match (major, minor) {
                (Some(major), Some(minor)) if major > 0 => Some(ComputeCapability { major, minor }),
                _ => None,
            },
            uuid,
            limits: SmLimits {
                max_threads_per_sm: None,
                max_blocks_per_sm: nz32(16, "maxBlocksPerSm")?,
                max_warps_per_sm: nz32(15, "maxWarpsPerSm")?,
                registers_per_sm: nz32(12, "maxRegistersPerSm")?,
                registers_per_block: nz32(13, "maxRegistersPerBlock")?,
                shared_mem_per_sm_bytes: nz64(11, "maxShmemPerSm")?,
                shared_mem_per_block_bytes: nz64(9, "maxShmemPerBlock")?,
                shared_mem_per_block_optin_bytes: nz64(10, "maxShmemPerBlockOptin")?,
                warp_size: nz32(14, "threadsPerWarp")?,
            },
        };
        let mut info = info;
        if let (Some(w), Some(t)) = (info.limits.max_warps_per_sm, info.limits.warp_size) {
            info.limits.max_threads_per_sm = w.checked_mul(t);
        }
        out.push(Gpu {
            id,
            cu_device,
            vm: r.int(3, "vmId")?,
            info,
        });
    }
    Ok(out)
}

/// The device of activity rows with `device_id` from the VM `vm` (bits 48..63 of their
/// `globalPid`): the `TARGET_INFO_GPU` row with that `id` (on that VM when the table says),
/// else with that `cuDevice`; a bare device when none matches.
fn device_info(
    key_label: &str,
    gpus: &[Gpu],
    device_id: i64,
    vm: i64,
    table: &str,
    rowid: i64,
    path: &Path,
) -> Result<DeviceInfo, ImportError> {
    let id = u32::try_from(device_id).map_err(|_| ImportError::BadField {
        path: path.to_path_buf(),
        record: RecordLocation::Row {
            table: table.to_string(),
            rowid,
        },
        field: "deviceId",
        value: device_id.to_string(),
        reason: "out of range for a device id".to_string(),
    })?;
    let on_vm = |g: &&Gpu| g.vm.is_none_or(|v| v & VM_MASK == vm);
    let found = gpus
        .iter()
        .filter(|g| g.id == Some(device_id))
        .find(on_vm)
        .or_else(|| gpus.iter().find(|g| g.id == Some(device_id)))
        .or_else(|| {
            gpus.iter()
                .filter(|g| g.cu_device == Some(device_id))
                .find(on_vm)
        });
    let mut info = match found {
        Some(g) => g.info.clone(),
        None => DeviceInfo::bare(String::new(), id),
    };
    info.id = id;
    if info.key.is_empty() {
        info.key = DeviceInfo::source_key(key_label, id);
    }
    Ok(info)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Kernel,
    Memcpy,
    Memset,
}

/// One activity row before its device is resolved.
struct Row {
    table: &'static str,
    rowid: i64,
    device_id: i64,
    global_pid: Option<i64>,
    rec: ActivityRecord,
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

fn read_activity(
    path: &Path,
    conn: &Connection,
    table: &'static str,
    kind: Kind,
    strings: bool,
    offset: i64,
    out: &mut Vec<Row>,
) -> Result<(), ImportError> {
    let have = columns(path, conn, table)?;
    for required in ["start", "end", "deviceId"] {
        if !have.contains(required) {
            return Err(ImportError::MissingColumn {
                path: path.to_path_buf(),
                table: table.to_string(),
                column: required.to_string(),
            });
        }
    }
    let mut wanted: Vec<&str> = COMMON.to_vec();
    let name_col = ["demangledName", "shortName", "mangledName"]
        .into_iter()
        .find(|c| have.contains(*c));
    let mut joined = false;
    match kind {
        Kind::Kernel => {
            wanted.extend([
                "gridX",
                "gridY",
                "gridZ",
                "blockX",
                "blockY",
                "blockZ",
                "registersPerThread",
                "staticSharedMemory",
                "dynamicSharedMemory",
            ]);
            joined = strings && name_col.is_some();
        }
        Kind::Memcpy => wanted.extend(["bytes", "copyKind"]),
        Kind::Memset => wanted.extend(["bytes"]),
    }
    let sql = match name_col.filter(|_| joined) {
        // Kernel names are ids into StringIds(id, value).
        Some(c) => select(
            &have,
            &wanted,
            "a.",
            ", s.\"value\"",
            &format!(
                "{} a LEFT JOIN {} s ON s.\"id\" = a.{} ORDER BY a.\"start\"",
                ident(table),
                ident(STRINGS),
                ident(c)
            ),
        ),
        None => select(
            &have,
            &wanted,
            "a.",
            "",
            &format!("{} a ORDER BY a.\"start\"", ident(table)),
        ),
    };
    let ctx = format!("reading {table}");
    let mut stmt = conn.prepare(&sql).map_err(sqlite_err(path, ctx.clone()))?;
    let mut q = stmt.query([]).map_err(sqlite_err(path, ctx.clone()))?;
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    while let Some(row) = q.next().map_err(sqlite_err(path, ctx.clone()))? {
        let rowid: i64 = row.get(0).map_err(sqlite_err(path, ctx.clone()))?;
        let r = RowReader {
            row,
            path,
            table,
            rowid,
        };
        let time = |i: usize, field: &'static str| -> Result<u64, ImportError> {
            match r.int(i, field)? {
                // Not recorded: a zero timestamp, counted as loss by the meter.
                None => Ok(0),
                // utcEpochNs + v in i128: no overflow, and times after 2262 (past i64) but
                // before 2554 (u64) stay valid. Two i64s cannot sum past u64::MAX; the case
                // is told apart all the same.
                Some(v) => {
                    let t = i128::from(offset) + i128::from(v);
                    u64::try_from(t).map_err(|_| {
                        r.bad(
                            field,
                            &v.to_string(),
                            if t < 0 {
                                "the time lies before 1970 (outside u64 ns since the epoch)"
                            } else {
                                "the time overflows: it lies after 2554 \
                                 (outside u64 ns since the epoch)"
                            },
                        )
                    })
                }
            }
        };
        let start_ns = time(1, "start")?;
        let end_ns = time(2, "end")?;
        let device_id = r
            .int(3, "deviceId")?
            .ok_or_else(|| r.bad("deviceId", "", "missing"))?;
        let global_pid = r.int(7, "globalPid")?;
        let work = match kind {
            Kind::Kernel => {
                let dim =
                    |i: usize, names: [&'static str; 3]| -> Result<Option<[u32; 3]>, ImportError> {
                        let x = r.u32(i, names[0])?;
                        let y = r.u32(i + 1, names[1])?;
                        let z = r.u32(i + 2, names[2])?;
                        Ok(match (x, y, z) {
                            (Some(x), Some(y), Some(z)) => Some([x, y, z]),
                            _ => None,
                        })
                    };
                let stat = r.u64(16, "staticSharedMemory")?;
                let dynm = r.u64(17, "dynamicSharedMemory")?;
                let shared_mem_bytes = match (stat, dynm) {
                    (None, None) => None,
                    (a, b) => a.unwrap_or(0).checked_add(b.unwrap_or(0)),
                };
                let name = if joined {
                    r.text(18, "name")?.map(|n| {
                        names
                            .entry(n)
                            .or_insert_with_key(|k| Arc::from(k.as_str()))
                            .clone()
                    })
                } else {
                    None
                };
                Work::Kernel(KernelLaunch {
                    grid: dim(9, ["gridX", "gridY", "gridZ"])?,
                    block: dim(12, ["blockX", "blockY", "blockZ"])?,
                    registers_per_thread: r.u32(15, "registersPerThread")?,
                    shared_mem_bytes,
                    name,
                    warp_instructions: None,
                })
            }
            Kind::Memcpy => Work::Memcpy {
                bytes: r
                    .u64(9, "bytes")?
                    .ok_or_else(|| r.bad("bytes", "", "missing"))?,
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
                    .ok_or_else(|| r.bad("bytes", "", "missing"))?,
            },
        };
        let mut rec = ActivityRecord::new(DeviceSlot(0), start_ns, end_ns, work);
        rec.context_id = r.u32(4, "contextId")?.unwrap_or(0);
        // CUPTI stream ids are u32; nsys stores them as signed integers.
        rec.stream_id = r.int(5, "streamId")?.map_or(0, |s| s as u32);
        rec.correlation_id = r.u32(6, "correlationId")?.unwrap_or(0);
        rec.graph_node_id = r.u64(8, "graphNodeId")?.unwrap_or(0);
        rec.process_id = global_pid.map(|g| ((g >> 24) & 0xFF_FFFF) as u32);
        out.push(Row {
            table,
            rowid,
            device_id,
            global_pid,
            rec,
        });
    }
    Ok(())
}
