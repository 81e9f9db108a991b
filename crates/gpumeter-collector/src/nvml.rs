//! NVML as the last source of the device inventory (live, same host).
//!
//! The header's inventory is assembled at [`super::Collector::stop`] in this order, each
//! source only filling fields the earlier ones left unknown:
//!
//! 1. CUPTI DEVICE records (what CUPTI itself reports, by CUDA ordinal);
//! 2. the CUDA driver already loaded by the process ([`super::CollectorConfig::driver_inventory`]);
//! 3. NVML (`libnvidia-ml.so.1`, loaded at run time when present;
//!    [`super::CollectorConfig::nvml_inventory`]): name and UUID only. NVML has no SM count
//!    or compute capability worth taking over the driver's.
//!
//! NVML never adds a device: it only fills `name` / `uuid` of entries the earlier sources
//! listed. The same matching tells which CUDA ordinal an NVML GPU's energy counter belongs to
//! ([`ordinals`], used by the energy sampler). An entry is matched to an NVML device by UUID (case-insensitive, `GPU-…`); an
//! entry without a UUID is matched by index only when NVML's index is known to be the CUDA
//! ordinal: `CUDA_VISIBLE_DEVICES` is unset, the NVML device is not in MIG mode (CUDA then
//! enumerates MIG instances, not the GPU), NVML's UUID is not already another entry's, and
//! either NVML lists a single GPU or `CUDA_DEVICE_ORDER=PCI_BUS_ID` (NVML's order; CUDA's
//! default order is fastest first). Otherwise the entry is left as it is.
//!
//! Any NVML failure (no driver, no library, no permission) is skipped: it becomes a warning of
//! the stop report only when `GPUMETER_VERBOSE` is set (and not `0`). NVML is queried on a
//! helper thread given [`NVML_TIMEOUT`], so a wedged driver cannot hang the stop.
//!
//! NVML itself is reached through `gpumeter_nvml` ([`Telemetry`]), never directly.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use gpumeter_nvml::{Gpu, Nvml, Telemetry};

use gpumeter_recording::gmr::GmrDevice;

/// How long [`Collector::stop`](super::Collector::stop) waits for NVML before going on
/// without it.
pub(crate) const NVML_TIMEOUT: Duration = Duration::from_secs(5);

/// One GPU as NVML lists it: NVML index (PCI bus order; the CUDA ordinal only under the
/// conditions of the module documentation), name, UUID (`GPU-…`), MIG mode.
pub(crate) type NvmlDevice = Gpu;

/// The GPUs `telemetry` lists, or why there are none (the message names NVML).
pub(crate) fn devices_of(telemetry: &dyn Telemetry) -> Result<Vec<NvmlDevice>, String> {
    telemetry.gpus().map_err(|e| e.to_string())
}

/// The GPUs NVML lists, or why there are none. Loads `libnvidia-ml.so.1` only if present;
/// never panics.
pub(crate) fn nvml_devices() -> Result<Vec<NvmlDevice>, String> {
    let nvml = Nvml::init().map_err(|e| e.to_string())?;
    devices_of(&nvml)
}

/// [`nvml_devices`] on a helper thread, waiting at most `timeout`; a panic or a timeout is an
/// `Err` like any other failure (a timed-out thread is left to finish on its own).
pub(crate) fn nvml_devices_within(timeout: Duration) -> Result<Vec<NvmlDevice>, String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("gpumeter-nvml".to_string())
        .spawn(move || {
            let found = std::panic::catch_unwind(nvml_devices)
                .unwrap_or_else(|_| Err("panic while querying NVML".to_string()));
            let _ = tx.send(found);
        })
        .map_err(|e| format!("NVML not queried (no thread): {e}"))?;
    rx.recv_timeout(timeout)
        .unwrap_or_else(|_| Err(format!("NVML did not answer within {timeout:?}")))
}

/// Whether NVML's index may stand for the CUDA ordinal, from the process environment (see the
/// module documentation); `single` is whether NVML lists exactly one GPU.
pub(crate) fn index_is_ordinal(single: bool) -> bool {
    std::env::var_os("CUDA_VISIBLE_DEVICES").is_none()
        && (single || std::env::var("CUDA_DEVICE_ORDER").is_ok_and(|v| v == "PCI_BUS_ID"))
}

/// Fills the `name` and `uuid` that `devices` lack from NVML's `found` (the rules of the module
/// documentation; `by_index`: [`index_is_ordinal`]). Known fields are never changed and no
/// device is added.
pub(crate) fn fill_from_nvml(devices: &mut [GmrDevice], found: &[NvmlDevice], by_index: bool) {
    let known: Vec<String> = devices.iter().filter_map(|d| d.uuid.clone()).collect();
    for d in devices.iter_mut() {
        let Some(n) = matching(d, found, by_index, &known) else {
            continue;
        };
        if d.name.is_none() {
            d.name.clone_from(&n.name);
        }
        if d.uuid.is_none() {
            d.uuid.clone_from(&n.uuid);
        }
    }
}

/// The NVML device that inventory entry `d` is (the rules of the module documentation;
/// `known`: the UUIDs of all entries).
fn matching<'a>(
    d: &GmrDevice,
    found: &'a [NvmlDevice],
    by_index: bool,
    known: &[String],
) -> Option<&'a NvmlDevice> {
    let same = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    match &d.uuid {
        Some(u) => found
            .iter()
            .find(|n| n.uuid.as_deref().is_some_and(|nu| same(nu, u))),
        None if by_index => found.iter().find(|n| {
            n.index == d.id
                && !n.mig
                && !n
                    .uuid
                    .as_deref()
                    .is_some_and(|nu| known.iter().any(|k| same(k, nu)))
        }),
        None => None,
    }
}

/// NVML index → CUDA ordinal for the NVML GPUs in `found` that are inventory entries of
/// `devices`, matched as [`fill_from_nvml`] matches them (by UUID; by index only when
/// `by_index`, see [`index_is_ordinal`]). An NVML GPU that is no entry (not a CUDA device of
/// this process, or a GPU in MIG mode, whose entries are its `MIG-…` instances) is absent;
/// one that two entries match keeps the lower ordinal.
pub(crate) fn ordinals(
    devices: &[GmrDevice],
    found: &[NvmlDevice],
    by_index: bool,
) -> BTreeMap<u32, u32> {
    let known: Vec<String> = devices.iter().filter_map(|d| d.uuid.clone()).collect();
    let mut out = BTreeMap::new();
    let mut sorted: Vec<&GmrDevice> = devices.iter().collect();
    sorted.sort_by_key(|d| d.id);
    for d in sorted {
        if let Some(n) = matching(d, found, by_index, &known) {
            out.entry(n.index).or_insert(d.id);
        }
    }
    out
}

/// The NVML step of the inventory at stop: fills `devices` and, when `verbose`, notes in
/// `warnings` why NVML gave nothing. Never panics, never waits longer than `timeout`.
pub(crate) fn nvml_inventory(
    devices: &mut [GmrDevice],
    warnings: &mut Vec<String>,
    verbose: bool,
    timeout: Duration,
) {
    match nvml_devices_within(timeout) {
        Ok(found) => fill_from_nvml(devices, &found, index_is_ordinal(found.len() == 1)),
        Err(e) if verbose => warnings.push(format!("no device inventory from NVML: {e}")),
        Err(_) => {}
    }
}

/// `GPUMETER_VERBOSE` set, non-empty and not `0`.
pub(crate) fn verbose() -> bool {
    std::env::var_os("GPUMETER_VERBOSE").is_some_and(|v| !v.is_empty() && v != "0")
}
