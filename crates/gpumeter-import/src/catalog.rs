//! The device catalog (`--devices FILE`): what an operator knows about the GPUs of
//! a node, overriding what a source says field by field.
//!
//! ```toml
//! [[device]]
//! id = 0                                   # CUDA device ordinal in the source
//! name = "NVIDIA A100-SXM4-80GB"
//! sm_count = 108
//! compute_capability = "8.0"
//! uuid = "GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88"   # optional
//! # optional per-SM limits (occupancy calculator): max_threads_per_sm, max_blocks_per_sm,
//! # max_warps_per_sm, registers_per_sm, registers_per_block, shared_mem_per_sm_bytes,
//! # shared_mem_per_block_bytes, shared_mem_per_block_optin_bytes, warp_size
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use gpumeter_core::{ComputeCapability, DeviceInfo, DeviceSlot, Meter, SmLimits};
use serde::Deserialize;

use crate::error::ImportError;

/// One `[[device]]` table of a device catalog. Every field but `id` is optional; a field that
/// is present replaces the source's value for the matched device(s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogDevice {
    /// Device id (CUDA device ordinal) as the sources number it: Kineto `args.device`, nsys
    /// `deviceId`, CUPTI `deviceId`.
    pub id: u32,
    /// The device's UUID (`GPU-…`, normalized with [`DeviceInfo::uuid_key`]); when present the
    /// entry applies only to devices with that UUID or with no known UUID.
    pub uuid: Option<String>,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3` (price-book SKUs match on it).
    pub name: Option<String>,
    /// Streaming multiprocessors; makes `sm_ns` meterable where the source lacks it.
    pub sm_count: Option<u32>,
    /// Compute capability, from `"MAJOR.MINOR"` text.
    pub compute_capability: Option<ComputeCapability>,
    /// Per-SM and per-block limits (each optional).
    pub limits: SmLimits,
}

impl CatalogDevice {
    /// The override this entry stands for, as [`Meter::override_device`] takes it: the entry's
    /// fields set, the rest `None`. `key` is empty and `id` is the entry's (both are ignored by
    /// `override_device`).
    pub fn as_override(&self) -> DeviceInfo {
        DeviceInfo {
            key: String::new(),
            id: self.id,
            name: self.name.clone(),
            sm_count: self.sm_count,
            compute_capability: self.compute_capability,
            uuid: self.uuid.clone(),
            limits: self.limits.clone(),
        }
    }
}

/// A parsed device catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceCatalog {
    /// The entries, in file order.
    pub devices: Vec<CatalogDevice>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalog {
    #[serde(default)]
    device: Vec<RawDevice>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDevice {
    id: u32,
    uuid: Option<String>,
    name: Option<String>,
    sm_count: Option<u32>,
    compute_capability: Option<String>,
    max_threads_per_sm: Option<u32>,
    max_blocks_per_sm: Option<u32>,
    max_warps_per_sm: Option<u32>,
    registers_per_sm: Option<u32>,
    registers_per_block: Option<u32>,
    shared_mem_per_sm_bytes: Option<u64>,
    shared_mem_per_block_bytes: Option<u64>,
    shared_mem_per_block_optin_bytes: Option<u64>,
    warp_size: Option<u32>,
}

impl DeviceCatalog {
    /// Reads and parses a catalog file.
    ///
    /// # Errors
    /// [`ImportError::Io`] when the file cannot be read; [`ImportError::Catalog`] as for
    /// [`DeviceCatalog::from_toml_str`].
    pub fn from_path(path: &Path) -> Result<Self, ImportError> {
        let text = std::fs::read_to_string(path).map_err(|source| ImportError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&path.display().to_string(), &text)
    }

    /// Parses catalog text; `name` names the file in errors.
    ///
    /// # Errors
    /// [`ImportError::Catalog`] naming the entry when the TOML is invalid, has unknown keys
    /// (a misspelt key is refused, not ignored), a `compute_capability` that is not
    /// `MAJOR.MINOR`, an `sm_count` or `warp_size` of 0, an empty `uuid`, or two entries for the
    /// same (id, uuid).
    pub fn from_toml_str(name: &str, text: &str) -> Result<Self, ImportError> {
        let err = |reason: String| ImportError::Catalog {
            path: PathBuf::from(name),
            reason,
        };
        let raw: RawCatalog = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let mut seen = HashSet::new();
        let mut devices = Vec::with_capacity(raw.device.len());
        for (i, d) in raw.device.into_iter().enumerate() {
            let at = format!("[[device]] #{} (id {})", i + 1, d.id);
            let uuid = match d.uuid.as_deref().map(str::trim) {
                Some("") => return Err(err(format!("{at}: `uuid` is empty"))),
                Some(u) => Some(DeviceInfo::uuid_key(u)),
                None => None,
            };
            if d.sm_count == Some(0) {
                return Err(err(format!("{at}: `sm_count` must be at least 1")));
            }
            if d.warp_size == Some(0) {
                return Err(err(format!("{at}: `warp_size` must be at least 1")));
            }
            let compute_capability = d
                .compute_capability
                .as_deref()
                .map(str::parse::<ComputeCapability>)
                .transpose()
                .map_err(|e| err(format!("{at}: {e}")))?;
            if !seen.insert((d.id, uuid.clone())) {
                return Err(err(format!("{at}: a second entry for the same device")));
            }
            devices.push(CatalogDevice {
                id: d.id,
                uuid,
                name: d.name,
                sm_count: d.sm_count,
                compute_capability,
                limits: SmLimits {
                    max_threads_per_sm: d.max_threads_per_sm,
                    max_blocks_per_sm: d.max_blocks_per_sm,
                    max_warps_per_sm: d.max_warps_per_sm,
                    registers_per_sm: d.registers_per_sm,
                    registers_per_block: d.registers_per_block,
                    shared_mem_per_sm_bytes: d.shared_mem_per_sm_bytes,
                    shared_mem_per_block_bytes: d.shared_mem_per_block_bytes,
                    shared_mem_per_block_optin_bytes: d.shared_mem_per_block_optin_bytes,
                    warp_size: d.warp_size,
                },
            });
        }
        Ok(DeviceCatalog { devices })
    }

    /// The entry that applies to `device`, if any:
    ///
    /// 1. an entry whose `uuid` equals the device's UUID (or whose `GPU-<uuid>` equals the
    ///    device's key);
    /// 2. else, for a device without a known UUID, the entry with the device's id and no
    ///    `uuid`; else the single entry with the device's id (several entries with that id and
    ///    different UUIDs are ambiguous: none applies);
    /// 3. for a device whose UUID is known, an entry with its id and no `uuid`.
    ///
    /// An entry never applies to a device known to have a different UUID.
    pub fn entry_for(&self, device: &DeviceInfo) -> Option<&CatalogDevice> {
        let dev_uuid = device
            .uuid
            .as_deref()
            .map(DeviceInfo::uuid_key)
            .or_else(|| {
                (device.key.starts_with("GPU-") || device.key.starts_with("MIG-"))
                    .then(|| device.key.clone())
            });
        if let Some(u) = &dev_uuid {
            if let Some(e) = self.devices.iter().find(|e| e.uuid.as_ref() == Some(u)) {
                return Some(e);
            }
        }
        let same_id = || self.devices.iter().filter(|e| e.id == device.id);
        if let Some(e) = same_id().find(|e| e.uuid.is_none()) {
            return Some(e);
        }
        if dev_uuid.is_none() {
            let mut it = same_id();
            if let (Some(e), None) = (it.next(), it.next()) {
                return Some(e);
            }
        }
        None
    }

    /// Applies the catalog to every device already registered with `meter`
    /// ([`DeviceCatalog::entry_for`] chooses the entry); returns how many devices were
    /// overridden.
    ///
    /// Apply a catalog **before** records are pushed: the meter fixes a kernel's SMs held when
    /// the kernel is pushed, so an `sm_count` that arrives later does not meter kernels already
    /// pushed. The importers do this for you when the catalog is passed in
    /// [`crate::ImportOptions::catalog`].
    pub fn apply(&self, meter: &mut Meter) -> usize {
        let mut targets = Vec::new();
        for i in 0..=u32::MAX {
            let Some(info) = meter.device(DeviceSlot(i)) else {
                break;
            };
            if let Some(e) = self.entry_for(info) {
                targets.push((info.key.clone(), e.as_override()));
            }
        }
        let mut n = 0;
        for (key, over) in targets {
            if meter.override_device(&key, &over) {
                n += 1;
            }
        }
        n
    }

    /// Applies the catalog entry for the device registered under `slot`, if any; returns
    /// whether one applied.
    pub fn apply_to(&self, meter: &mut Meter, slot: DeviceSlot) -> bool {
        let Some(info) = meter.device(slot) else {
            return false;
        };
        let Some(e) = self.entry_for(info) else {
            return false;
        };
        let key = info.key.clone();
        meter.override_device(&key, &e.as_override())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(key: &str, id: u32, uuid: Option<&str>) -> DeviceInfo {
        let mut d = DeviceInfo::bare(key, id);
        d.uuid = uuid.map(str::to_string);
        d
    }

    #[test]
    fn parse_and_match() {
        let c = DeviceCatalog::from_toml_str(
            "c.toml",
            r#"
            [[device]]
            id = 0
            sm_count = 108
            compute_capability = "8.0"
            [[device]]
            id = 1
            uuid = "abc"
            name = "X"
            "#,
        );
        let c = match c {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(c.devices.len(), 2);
        assert_eq!(c.devices[1].uuid.as_deref(), Some("GPU-abc"));
        assert_eq!(
            c.devices[0].compute_capability,
            Some(ComputeCapability { major: 8, minor: 0 })
        );
        assert_eq!(c.entry_for(&dev("f#0", 0, None)).map(|e| e.id), Some(0));
        assert_eq!(c.entry_for(&dev("f#1", 1, None)).map(|e| e.id), Some(1));
        assert_eq!(
            c.entry_for(&dev("GPU-abc", 7, Some("abc"))).map(|e| e.id),
            Some(1)
        );
        assert!(c.entry_for(&dev("GPU-zzz", 1, Some("zzz"))).is_none());
        assert_eq!(
            c.entry_for(&dev("GPU-zzz", 0, Some("zzz"))).map(|e| e.id),
            Some(0)
        );
    }

    #[test]
    fn refuses_typos_and_bad_values() {
        for text in [
            "[[device]]\nid = 0\nsm_cont = 1\n",
            "[[devices]]\nid = 0\n",
            "[[device]]\nid = 0\nsm_count = 0\n",
            "[[device]]\nid = 0\ncompute_capability = \"9\"\n",
            "[[device]]\nid = -1\n",
            "[[device]]\nid = 0\n[[device]]\nid = 0\n",
            "[[device]\n",
        ] {
            match DeviceCatalog::from_toml_str("c.toml", text) {
                Err(ImportError::Catalog { path, .. }) => assert_eq!(path, PathBuf::from("c.toml")),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
