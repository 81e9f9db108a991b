//! Devices: `deviceProperties` read into device infos by id ([`parse_device_properties`]),
//! and the devices of a trace's records in order of first activity ([`Devices`]).

use std::collections::HashMap;
use std::path::Path;

use gpumeter_core::{ComputeCapability, DeviceInfo, DeviceSlot, SmLimits};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::fault::Fault;
use crate::error::{ImportError, RecordLocation};
use crate::parsed::Parsed;

#[derive(Deserialize)]
struct DeviceProps<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uuid: Option<&'a RawValue>,
    #[serde(rename = "numSms", borrow, default)]
    num_sms: Option<&'a RawValue>,
    #[serde(rename = "computeMajor", borrow, default)]
    compute_major: Option<&'a RawValue>,
    #[serde(rename = "computeMinor", borrow, default)]
    compute_minor: Option<&'a RawValue>,
    #[serde(rename = "maxThreadsPerMultiprocessor", borrow, default)]
    max_threads_per_sm: Option<&'a RawValue>,
    #[serde(rename = "maxBlocksPerMultiProcessor", borrow, default)]
    max_blocks_per_sm: Option<&'a RawValue>,
    #[serde(rename = "regsPerMultiprocessor", borrow, default)]
    regs_per_sm: Option<&'a RawValue>,
    #[serde(rename = "regsPerBlock", borrow, default)]
    regs_per_block: Option<&'a RawValue>,
    #[serde(rename = "sharedMemPerMultiprocessor", borrow, default)]
    shared_mem_per_sm: Option<&'a RawValue>,
    #[serde(rename = "sharedMemPerBlock", borrow, default)]
    shared_mem_per_block: Option<&'a RawValue>,
    #[serde(rename = "sharedMemPerBlockOptin", borrow, default)]
    shared_mem_per_block_optin: Option<&'a RawValue>,
    #[serde(rename = "warpSize", borrow, default)]
    warp_size: Option<&'a RawValue>,
}

/// `deviceProperties` → device id → device info (key: `GPU-<uuid>` when the entry has a UUID,
/// else `<key_label>#<id>`). A device id listed twice is one device when both entries give the
/// same values for every field gpumeter reads, and a file-level error otherwise: which entry
/// describes the device is unknown, and the choice would change the bill (SM count, UUID).
pub(super) fn parse_device_properties(
    path: &Path,
    key_label: &str,
    raw: Option<&RawValue>,
) -> Result<HashMap<u32, DeviceInfo>, ImportError> {
    let mut out: HashMap<u32, (usize, DeviceInfo)> = HashMap::new();
    let Some(raw) = raw else {
        return Ok(HashMap::new());
    };
    if raw.get() == "null" {
        return Ok(HashMap::new());
    }
    let top = Fault {
        path,
        record: RecordLocation::TopLevel,
    };
    let entries: Vec<&RawValue> = serde_json::from_str(raw.get())
        .map_err(|_| top.err("deviceProperties", raw.get(), "expected an array"))?;
    for (i, entry) in entries.into_iter().enumerate() {
        let f = Fault {
            path,
            record: RecordLocation::DeviceProperties(i),
        };
        if !entry.get().starts_with('{') {
            return Err(f.err("deviceProperties", entry.get(), "expected an object"));
        }
        let p: DeviceProps<'_> = serde_json::from_str(entry.get()).map_err(|e| {
            f.err(
                "deviceProperties",
                entry.get(),
                format!("expected an object: {e}"),
            )
        })?;
        let info = device_info(&f, key_label, &p)?;
        let id = info.id;
        match out.get(&id) {
            Some((_, first)) if *first == info => {}
            Some((first, _)) => {
                return Err(f.err(
                    "id",
                    &id.to_string(),
                    format!(
                        "deviceProperties[{i}].id and deviceProperties[{first}].id are both \
                         {id}, with different values: which entry describes device {id} is \
                         unknown"
                    ),
                ))
            }
            None => {
                out.insert(id, (i, info));
            }
        }
    }
    Ok(out.into_iter().map(|(id, (_, info))| (id, info)).collect())
}

/// The device a `deviceProperties` entry describes (`f` names the entry): keyed `GPU-<uuid>`
/// when it has a UUID, else `<key_label>#<id>`; a zero is "unknown", never a value to meter
/// with.
fn device_info(
    f: &Fault<'_>,
    key_label: &str,
    p: &DeviceProps<'_>,
) -> Result<DeviceInfo, ImportError> {
    let id = f
        .u32_opt("id", p.id)?
        .ok_or_else(|| f.err("id", "", "missing"))?;
    let uuid = f
        .string_opt("uuid", p.uuid)?
        .filter(|u| !u.trim().is_empty());
    let key = match &uuid {
        Some(u) => DeviceInfo::uuid_key(u),
        None => DeviceInfo::source_key(key_label, id),
    };
    let major = f.u32_opt("computeMajor", p.compute_major)?;
    let minor = f.u32_opt("computeMinor", p.compute_minor)?;
    // A zero is "unknown", never a value to meter with.
    let nz32 = |v: Option<u32>| v.filter(|&x| x > 0);
    let nz64 = |v: Option<u64>| v.filter(|&x| x > 0);
    Ok(DeviceInfo {
        key,
        id,
        name: f.string_opt("name", p.name)?,
        sm_count: nz32(f.u32_opt("numSms", p.num_sms)?),
        compute_capability: match (major, minor) {
            (Some(major), Some(minor)) if major > 0 => Some(ComputeCapability { major, minor }),
            _ => None,
        },
        uuid,
        limits: SmLimits {
            max_threads_per_sm: nz32(
                f.u32_opt("maxThreadsPerMultiprocessor", p.max_threads_per_sm)?,
            ),
            max_blocks_per_sm: nz32(f.u32_opt("maxBlocksPerMultiProcessor", p.max_blocks_per_sm)?),
            max_warps_per_sm: None,
            registers_per_sm: nz32(f.u32_opt("regsPerMultiprocessor", p.regs_per_sm)?),
            registers_per_block: nz32(f.u32_opt("regsPerBlock", p.regs_per_block)?),
            shared_mem_per_sm_bytes: nz64(
                f.u64_opt("sharedMemPerMultiprocessor", p.shared_mem_per_sm)?,
            ),
            shared_mem_per_block_bytes: nz64(
                f.u64_opt("sharedMemPerBlock", p.shared_mem_per_block)?,
            ),
            shared_mem_per_block_optin_bytes: nz64(
                f.u64_opt("sharedMemPerBlockOptin", p.shared_mem_per_block_optin)?,
            ),
            warp_size: nz32(f.u32_opt("warpSize", p.warp_size)?),
        },
    })
}

/// The devices of a trace's records, registered in [`Parsed::devices`] in order of first
/// activity (records carry these local slots until committed): described by
/// `deviceProperties` where it lists the id, else bare, keyed `<key_label>#<id>`.
pub(super) struct Devices<'a> {
    props: HashMap<u32, DeviceInfo>,
    key_label: &'a str,
    local: HashMap<u32, u32>,
}

impl<'a> Devices<'a> {
    pub(super) fn new(props: HashMap<u32, DeviceInfo>, key_label: &'a str) -> Self {
        Devices {
            props,
            key_label,
            local: HashMap::new(),
        }
    }

    /// The slot of device `id`, registered in `parsed` at its first record.
    pub(super) fn slot(&mut self, id: u32, parsed: &mut Parsed) -> DeviceSlot {
        let s = *self.local.entry(id).or_insert_with(|| {
            let info = self.props.get(&id).cloned().unwrap_or_else(|| {
                DeviceInfo::bare(DeviceInfo::source_key(self.key_label, id), id)
            });
            parsed.devices.push(info);
            parsed.devices.len() as u32 - 1
        });
        DeviceSlot(s)
    }
}
