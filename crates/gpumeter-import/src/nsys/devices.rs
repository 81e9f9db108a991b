//! Devices: the GPUs of `TARGET_INFO_GPU` ([`read_gpus`]), the session's start
//! ([`session_start`]), and activity rows' devices resolved to slots in order of first
//! activity ([`Devices`]), keyed by UUID, else by the source and id (and VM, when the rows
//! come from several).

use std::collections::HashMap;

use gpumeter_core::{ComputeCapability, DeviceInfo, DeviceSlot, SmLimits};

use super::db::{ident, select, Db, RowReader, Schema, GPU, SESSION};
use crate::error::ImportError;
use crate::parsed::Parsed;

/// Bits 48..63 of a `globalPid`/`vmId`: hardware and VM ids.
const VM_MASK: i64 = !0xFFFF_FFFF_FFFF;

/// A GPU of `TARGET_INFO_GPU`.
pub(super) struct Gpu {
    pub(super) id: Option<i64>,
    pub(super) cu_device: Option<i64>,
    pub(super) vm: Option<i64>,
    pub(super) info: DeviceInfo,
}

pub(super) fn session_start(db: &Db<'_>, schema: &Schema) -> Result<Option<i64>, ImportError> {
    let have = schema.columns(db, SESSION)?;
    if !have.has("utcEpochNs") {
        return Ok(None);
    }
    let rowid = schema.rowid(db, SESSION, &have)?;
    let sql = select(
        &have,
        rowid,
        &["utcEpochNs"],
        &format!("{} LIMIT 1", ident(SESSION)),
    );
    let ctx = format!("reading {SESSION}");
    let mut stmt = db.conn().prepare(&sql).map_err(db.err(ctx.clone()))?;
    let mut q = stmt.query([]).map_err(db.err(ctx.clone()))?;
    let Some(row) = q.next().map_err(db.err(ctx.clone()))? else {
        return Ok(None);
    };
    let rowid: i64 = row.get(0).map_err(db.err(ctx))?;
    let r = RowReader {
        row,
        db,
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

pub(super) fn read_gpus(db: &Db<'_>, schema: &Schema) -> Result<Vec<Gpu>, ImportError> {
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
    let have = schema.columns(db, GPU)?;
    let rowid = schema.rowid(db, GPU, &have)?;
    // Table order is rowid order: no sort.
    let sql = select(
        &have,
        rowid,
        &COLS,
        &format!("{} ORDER BY {rowid}", ident(GPU)),
    );
    let ctx = format!("reading {GPU}");
    let mut stmt = db.conn().prepare(&sql).map_err(db.err(ctx.clone()))?;
    let mut q = stmt.query([]).map_err(db.err(ctx.clone()))?;
    let mut out = Vec::new();
    while let Some(row) = q.next().map_err(db.err(ctx.clone()))? {
        let rowid: i64 = row.get(0).map_err(db.err(ctx.clone()))?;
        let r = RowReader {
            row,
            db,
            table: GPU,
            rowid,
        };
        out.push(gpu_of_row(&r)?);
    }
    Ok(out)
}

/// The GPU a `TARGET_INFO_GPU` row describes (its columns in the order of `read_gpus`'s
/// query): a zero is "unknown", never a value to meter with; the threads an SM holds are its
/// warps times the warp size.
fn gpu_of_row(r: &RowReader<'_, '_>) -> Result<Gpu, ImportError> {
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
    Ok(Gpu {
        id,
        cu_device,
        vm: r.int(3, "vmId")?,
        info,
    })
}

/// Resolves activity rows' devices to slots of [`Parsed::devices`], registering each device at
/// its first row.
pub(super) struct Devices<'a> {
    pub(super) key_label: &'a str,
    pub(super) gpus: &'a [Gpu],
    /// By (`deviceId`, VM of the row's `globalPid`; `None`: unknown).
    pub(super) local: HashMap<(u32, Option<i64>), u32>,
    pub(super) by_key: HashMap<String, u32>,
    /// The export's rows come from several VMs: keys of devices without a UUID name the VM.
    pub(super) qualify_vm: bool,
}

impl Devices<'_> {
    pub(super) fn slot(
        &mut self,
        parsed: &mut Parsed,
        device_id: u32,
        vm: Option<i64>,
    ) -> DeviceSlot {
        if let Some(&s) = self.local.get(&(device_id, vm)) {
            return DeviceSlot(s);
        }
        let mut info = device_info(self.key_label, self.gpus, device_id, vm);
        if self.qualify_vm && info.uuid.is_none() {
            let vm = vm.map_or_else(|| "?".to_string(), |v| ((v as u64) >> 48).to_string());
            info.key = format!(
                "{}@vm{vm}",
                DeviceInfo::source_key(self.key_label, device_id)
            );
        }
        let s = match self.by_key.get(&info.key) {
            Some(&s) => s,
            None => {
                let s = parsed.devices.len() as u32;
                self.by_key.insert(info.key.clone(), s);
                parsed.devices.push(info);
                s
            }
        };
        self.local.insert((device_id, vm), s);
        DeviceSlot(s)
    }
}

/// The device of activity rows with `device_id` from the VM `vm` (bits 48..63 of their
/// `globalPid`; `None` when the row's `globalPid` is unreadable): the `TARGET_INFO_GPU` row with
/// that `id` (on that VM when the table and the row say), else with that `cuDevice`; a bare
/// device when none matches.
fn device_info(key_label: &str, gpus: &[Gpu], device_id: u32, vm: Option<i64>) -> DeviceInfo {
    let wanted = i64::from(device_id);
    let on_vm = |g: &&Gpu| match (g.vm, vm) {
        (Some(v), Some(vm)) => v & VM_MASK == vm,
        _ => true,
    };
    let found = gpus
        .iter()
        .filter(|g| g.id == Some(wanted))
        .find(on_vm)
        .or_else(|| gpus.iter().find(|g| g.id == Some(wanted)))
        .or_else(|| {
            gpus.iter()
                .filter(|g| g.cu_device == Some(wanted))
                .find(on_vm)
        });
    let mut info = match found {
        Some(g) => g.info.clone(),
        None => DeviceInfo::bare(String::new(), device_id),
    };
    info.id = device_id;
    if info.key.is_empty() {
        info.key = DeviceInfo::source_key(key_label, device_id);
    }
    info
}

/// Bits 48..63 of a `globalPid`: the VM of the row.
pub(super) fn vm_of(global_pid: i64) -> i64 {
    global_pid & VM_MASK
}
