//! `gm_meter`: a streaming meter fed CUPTI activity buffers one by one.

use std::ffi::c_char;
use std::sync::{Mutex, MutexGuard};

use gpumeter::core::{ComputeCapability, DeviceInfo, MeterConfig, TenantMap, TenantName};
use gpumeter::cupti::stream::CuptiStream;
use gpumeter::{ApiVersion, Meter, UsageReport, WindowSize};
use serde::Deserialize;

use crate::ffi::{
    boundary, bytes_arg, c_string, free_handle, handle, infallible, into_handle, opt_str_arg,
    out_arg, sized_arg, str_arg, unwind_safe, Handle, Origin, SizedStruct,
};
use crate::json;
use crate::status::{gm_status, gm_status_code, Failure};

/// `device_id` of `gm_meter_report_dropped` when CUPTI does not say which device dropped
/// the records: the loss is booked on the meter's stream as a whole.
pub const GM_UNKNOWN_DEVICE: u32 = u32::MAX;

/// The source name of a meter whose `config_json` gives no `source_name`.
pub const GM_DEFAULT_SOURCE_NAME: &str = "gm_meter";

/// A streaming meter: one CUPTI subscription's activity buffers, metered into usage per
/// tenant, device, window and meter. Opaque; made by `gm_meter_new`, freed by
/// `gm_meter_free`. Every function may be called from any thread, also at once: calls on
/// one meter take turns (decoding a buffer happens before the turn, side by side).
#[allow(non_camel_case_types)]
pub struct gm_meter {
    api: ApiVersion,
    state: Mutex<State>,
    origin: Origin,
}

impl Handle for gm_meter {
    const WHAT: &'static str = "meter";
    fn origin(&self) -> &Origin {
        &self.origin
    }
}

struct State {
    meter: Meter,
    stream: CuptiStream,
}

impl gm_meter {
    fn lock(&self) -> Result<MutexGuard<'_, State>, Failure> {
        self.state.lock().map_err(|_| {
            Failure::new(
                gm_status_code::GM_ERR_POISONED,
                "this meter was left unusable by an earlier internal error (GM_ERR_PANIC): free \
                 it with gm_meter_free",
            )
        })
    }

    /// Runs `f` on the meter and its stream, holding the lock (calls on one meter take turns).
    fn with<T>(&self, f: impl FnOnce(&mut Meter, &mut CuptiStream) -> T) -> Result<T, Failure> {
        let mut s = self.lock()?;
        let State { meter, stream } = &mut *s;
        Ok(f(meter, stream))
    }
}

/// A CUDA device described by the agent, for buffers that carry no DEVICE record
/// (`gm_meter_register_device`). Strings are borrowed for the call.
///
/// The caller sets `struct_size` to `sizeof(gm_device_info)`, after zeroing the struct
/// (`= {0}` in C, `{}` in C++, or `memset`), so that a later library can add fields at the
/// end: a library reads the fields the size covers (a field an older program does not have is
/// zero) and refuses a larger struct whose extra bytes are set.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct gm_device_info {
    /// `sizeof(gm_device_info)` as the caller's header declares it; less than the first
    /// version's size (0: not set), or more than 4096, is `GM_ERR_INVALID_ARGUMENT`.
    pub struct_size: usize,
    /// CUPTI's `deviceId` (the CUDA device ordinal) of the device's records.
    pub device_id: u32,
    /// Streaming multiprocessors; 0 = unknown (then `sm_ns` and `warp_ns` are not
    /// meterable).
    pub sm_count: u32,
    /// Compute capability, major (9 for Hopper); 0 = unknown.
    pub cc_major: u32,
    /// Compute capability, minor.
    pub cc_minor: u32,
    /// Marketing name (`NVIDIA H100 80GB HBM3`), NUL-terminated UTF-8; NULL = unknown.
    pub name: *const c_char,
    /// UUID, `GPU-…`/`MIG-…` or bare hex with dashes (NVML's or CUDA's), NUL-terminated
    /// UTF-8; NULL = unknown (then the device is keyed
    /// `<first 16 hex digits of the meter's instance id>#<device_id>`, unique to the meter).
    /// One UUID is one device: a second device id with the UUID of one the meter knows is
    /// refused.
    pub uuid: *const c_char,
}

// SAFETY: `#[repr(C)]`, `struct_size` first, integers and pointers only (all-zero is valid).
unsafe impl SizedStruct for gm_device_info {
    // The first version ends with `uuid`.
    const MIN_SIZE: usize =
        std::mem::offset_of!(gm_device_info, uuid) + std::mem::size_of::<*const c_char>();
    const C_NAME: &'static str = "gm_device_info";
}

impl gm_device_info {
    /// A description with this library's `struct_size` and nothing known but the id (for
    /// Rust callers; C zeroes the struct and sets `struct_size`).
    pub fn new(device_id: u32) -> Self {
        gm_device_info {
            struct_size: std::mem::size_of::<Self>(),
            device_id,
            sm_count: 0,
            cc_major: 0,
            cc_minor: 0,
            name: std::ptr::null(),
            uuid: std::ptr::null(),
        }
    }
}

/// `config_json` of `gm_meter_new`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default, deserialize_with = "json::opt_int")]
    window_seconds: Option<u64>,
    tenant: Option<String>,
    #[serde(default, deserialize_with = "json::opt_int")]
    cupti_api_version: Option<u32>,
    #[serde(default, deserialize_with = "json::opt_int")]
    reorder_horizon_ns: Option<u64>,
    source_name: Option<String>,
}

fn config_error(message: String) -> Failure {
    Failure::new(
        gm_status_code::GM_ERR_INVALID_CONFIG,
        format!("config_json: {message}"),
    )
}

fn parse_config(text: Option<&str>) -> Result<(MeterConfig, ApiVersion, String), Failure> {
    let c: Config = match text {
        None => Config::default(),
        Some(t) => json::object(t).map_err(config_error)?,
    };
    let mut config = MeterConfig::default();
    if let Some(s) = c.window_seconds {
        config.window = WindowSize::from_seconds(s)
            .map_err(|e| config_error(format!("window_seconds: {e}")))?;
    }
    if let Some(t) = c.tenant {
        config.tenant =
            Some(TenantName::parse(&t).map_err(|e| config_error(format!("tenant: {e}")))?);
    }
    if let Some(h) = c.reorder_horizon_ns {
        config.reorder_horizon_ns = h;
    }
    let api = match c.cupti_api_version {
        None => ApiVersion::default(),
        Some(v) => ApiVersion::from_cupti(v)
            .map_err(|e| config_error(format!("cupti_api_version: {e}")))?,
    };
    let name = c
        .source_name
        .unwrap_or_else(|| GM_DEFAULT_SOURCE_NAME.to_string());
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(config_error(
            "source_name: 1 to 255 bytes without control characters".to_string(),
        ));
    }
    Ok((config, api, name))
}

fn tenant_arg(text: &str) -> Result<TenantName, Failure> {
    TenantName::parse(text).map_err(|e| {
        Failure::new(
            gm_status_code::GM_ERR_INVALID_ARGUMENT,
            format!("tenant: {e}"),
        )
    })
}

/// Adds one attribution rule to the meter's tenant map: the body of both `set_tenant_for_*`.
///
/// # Safety
/// `meter` is NULL or a live meter; `tenant` is NULL or NUL-terminated.
unsafe fn set_tenant_rule(
    meter: *mut gm_meter,
    tenant: *const c_char,
    add: impl FnOnce(&mut TenantMap, TenantName),
) -> gm_status {
    boundary(unwind_safe(|| {
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let t = tenant_arg(unsafe { str_arg(tenant, "tenant") }?)?;
        meter.with(|meter, _| add(meter.tenant_map_mut(), t))?;
        Ok(())
    }))
}

fn report_json(report: Result<UsageReport, gpumeter::core::MeterError>) -> Result<String, Failure> {
    let report = report.map_err(|e| Failure::new(gm_status_code::GM_ERR_METER, e.to_string()))?;
    serde_json::to_string(&report).map_err(|e| {
        Failure::new(
            gm_status_code::GM_ERR_METER,
            format!("cannot write the usage report: {e}"),
        )
    })
}

/// The version of the C ABI this library implements: `GM_ABI_VERSION`.
/// An agent compiled against another version should refuse to run. Never fails; any thread.
#[no_mangle]
pub extern "C" fn gm_abi_version() -> u32 {
    crate::GM_ABI_VERSION
}

/// Makes a meter.
///
/// `config_json`: NULL for the defaults, else a JSON object (an array or any other value is
/// refused) with any of
/// `window_seconds` (window size in s, dividing one day; default 3600),
/// `tenant` (the tenant of work no tenant rule matches; default none: `unattributed`),
/// `cupti_api_version` (the producer's `CUPTI_API_VERSION`, which picks record layouts: 26
/// for CUDA 12.8, 130001 for 13.0, 130401 for 13.4; default 26),
/// `reorder_horizon_ns` (how far records may arrive out of order; default 60 s) and
/// `source_name` (the meter's source in reports and the label of devices without a UUID;
/// default `gm_meter`). Unknown keys are refused; integers are JSON integers in their range
/// (`cupti_api_version` 32 bits, the others 64: past it is "too large").
///
/// On success `*out` is a new meter the caller owns and frees with `gm_meter_free`; on
/// failure `*out` is not written.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT` (`out` NULL), `GM_ERR_INVALID_UTF8` (`config_json`),
/// `GM_ERR_INVALID_CONFIG` (not a JSON object, an unknown key, a value out of range),
/// `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `config_json` is NULL or a NUL-terminated string; `out` points to writable storage for a
/// pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_new(
    config_json: *const c_char,
    out: *mut *mut gm_meter,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out, "out")?;
        // SAFETY: NULL or a NUL-terminated string (the contract above).
        let text = unsafe { opt_str_arg(config_json, "config_json") }?;
        let (config, api, name) = parse_config(text)?;
        let meter = gm_meter {
            api,
            state: Mutex::new(State {
                meter: Meter::new(config),
                stream: CuptiStream::new(&name, api),
            }),
            origin: Origin::here(),
        };
        // SAFETY: `out` is writable storage for a pointer (the contract above).
        unsafe { out.write(into_handle(meter)) };
        Ok(())
    }))
}

/// Frees a meter and everything it holds. NULL is fine. No other call may use the meter
/// during or after this one. In a child after `fork()`, a meter the parent made is left alone
/// (not freed: a thread of the parent may have been changing it).
///
/// # Safety
/// `meter` is NULL or a meter from `gm_meter_new` not freed before.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_free(meter: *mut gm_meter) {
    // SAFETY: NULL or a live meter from `gm_meter_new`, freed once (the contract above).
    infallible((), || unsafe { free_handle(meter) })
}

/// Describes a device for buffers without a DEVICE record, or adds what its DEVICE record
/// lacks (name, UUID). Without a DEVICE record the device is keyed `GPU-<uuid>` when `uuid`
/// is given (in any spelling: the prefix in any case or none, the hex written in lower case),
/// else `<first 16 hex digits of the meter's instance id>#<device_id>` (unique to this meter,
/// so give the UUID for a key that is stable across agent restarts and nodes). Where a DEVICE
/// record (in the same buffer as the device's first record, or earlier) and this description
/// both know a field, the record wins. Register before the device's first buffer: a device is
/// placed, and its key fixed, when its first record arrives; afterwards a description only
/// fills what is still unknown. `info`'s strings are copied.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT` (`meter` or `info` NULL), `GM_ERR_INVALID_UTF8` (`name` or `uuid`),
/// `GM_ERR_INVALID_ARGUMENT` (`info->struct_size` not set or too small, or a larger struct with
/// fields this library does not know set; an empty `uuid`; a `uuid` another device id of the
/// meter has, from a description or a DEVICE record: nothing is registered), `GM_ERR_FORKED` (a
/// meter made before a `fork()`, in the child), `GM_ERR_POISONED` (the meter was left unusable
/// by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter; `info` is NULL or points to a `gm_device_info` of
/// `info->struct_size` readable bytes whose strings are NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_register_device(
    meter: *mut gm_meter,
    info: *const gm_device_info,
) -> gm_status {
    boundary(unwind_safe(|| {
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        // SAFETY: NULL or a `gm_device_info` of `struct_size` readable bytes (the contract
        // above).
        let info = unsafe { sized_arg(info, "info") }?;
        // SAFETY: NULL or NUL-terminated strings (the contract above).
        let name = unsafe { opt_str_arg(info.name, "info->name") }?;
        // SAFETY: as for `name`.
        let uuid = unsafe { opt_str_arg(info.uuid, "info->uuid") }?;
        if uuid.is_some_and(|u| u.trim().is_empty()) {
            return Err(Failure::new(
                gm_status_code::GM_ERR_INVALID_ARGUMENT,
                "info->uuid is empty (pass NULL when the UUID is unknown)",
            ));
        }
        let mut d = DeviceInfo::bare(String::new(), info.device_id);
        d.name = name.map(str::to_string);
        d.uuid = uuid.map(|u| u.trim().to_string());
        d.sm_count = (info.sm_count > 0).then_some(info.sm_count);
        d.compute_capability = (info.cc_major > 0).then_some(ComputeCapability {
            major: info.cc_major,
            minor: info.cc_minor,
        });
        meter
            .with(|meter, stream| stream.register_device(meter, d))?
            .map_err(|e| {
                Failure::new(
                    gm_status_code::GM_ERR_INVALID_ARGUMENT,
                    format!("info: {e}"),
                )
            })
    }))
}

/// Meters one completed CUPTI activity buffer: the `valid_size` bytes CUPTI's buffer-completed
/// callback reports, laid out by the meter's `cupti_api_version`. The bytes are read during
/// the call only (copy-free; any alignment; the caller may reuse the buffer afterwards).
/// `(NULL, 0)` is an empty buffer. Records are joined to the API, EXTERNAL_CORRELATION and
/// DEVICE records of this buffer and earlier ones; records that arrive later than the
/// reordering horizon, or before a drained edge, are counted as loss `late`.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT` (`meter` NULL, or `buffer` NULL with a size),
/// `GM_ERR_INVALID_ARGUMENT` (`valid_size` past `PTRDIFF_MAX`), `GM_ERR_DECODE` (the buffer
/// does not decode: a truncated record, an impossible size; nothing of it is metered),
/// `GM_ERR_FORKED` (a meter made before a `fork()`, in the child), `GM_ERR_POISONED` (the meter
/// was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter; `buffer` is NULL or points to `valid_size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_ingest_cupti_buffer(
    meter: *mut gm_meter,
    buffer: *const u8,
    valid_size: usize,
) -> gm_status {
    boundary(unwind_safe(|| {
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        // SAFETY: NULL or `valid_size` readable bytes (the contract above).
        let bytes = unsafe { bytes_arg(buffer, valid_size, "buffer") }?;
        let prepared = CuptiStream::prepare(meter.api, bytes)
            .map_err(|e| Failure::new(gm_status_code::GM_ERR_DECODE, format!("buffer: {e}")))?;
        meter.with(|meter, stream| {
            #[cfg(test)]
            test_hooks::maybe_panic();
            stream.apply(meter, prepared);
        })
    }))
}

/// Attributes work whose external correlation id (CUPTI EXTERNAL_CORRELATION, kinds
/// CUSTOM0..2) is `external_id` to `tenant` (this rule first, then
/// process ids, then the config's tenant). Applies when a report is built, so it may come
/// after the records; a later call for the same id replaces the tenant. `tenant` is copied.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_INVALID_ARGUMENT` (a tenant name that
/// the tenant rules refuse: empty, control characters, look-alikes of `idle`), `GM_ERR_FORKED`
/// (a meter made before a `fork()`, in the child), `GM_ERR_POISONED` (the meter was left
/// unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter; `tenant` is NULL or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_set_tenant_for_external_id(
    meter: *mut gm_meter,
    external_id: u64,
    tenant: *const c_char,
) -> gm_status {
    // SAFETY: the contract above is `set_tenant_rule`'s.
    unsafe {
        set_tenant_rule(meter, tenant, |map, t| {
            map.external.insert(external_id, t);
        })
    }
}

/// Attributes work of process `pid` to `tenant` (after external-id rules). As
/// `gm_meter_set_tenant_for_external_id` otherwise.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_INVALID_ARGUMENT` (a tenant name that
/// the tenant rules refuse), `GM_ERR_FORKED` (a meter made before a `fork()`, in the child),
/// `GM_ERR_POISONED` (the meter was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC`
/// (an internal error, caught).
///
/// # Safety
/// As `gm_meter_set_tenant_for_external_id`.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_set_tenant_for_pid(
    meter: *mut gm_meter,
    pid: u32,
    tenant: *const c_char,
) -> gm_status {
    // SAFETY: the contract above is `set_tenant_rule`'s.
    unsafe {
        set_tenant_rule(meter, tenant, |map, t| {
            map.pid.insert(pid, t);
        })
    }
}

/// Books records CUPTI dropped as loss `dropped` on `device_id` (a delta since the last call:
/// what `cuptiActivityGetNumDroppedRecords` returned). `GM_UNKNOWN_DEVICE`, or a device the
/// meter has never heard of, books it on the meter's source as a whole. 0 does nothing.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_FORKED` (a meter made before a `fork()`, in the child),
/// `GM_ERR_POISONED` (the meter was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC`
/// (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_report_dropped(
    meter: *mut gm_meter,
    device_id: u32,
    dropped_delta: u64,
) -> gm_status {
    boundary(unwind_safe(|| {
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        meter.with(|meter, stream| {
            let device = (device_id != GM_UNKNOWN_DEVICE).then_some(device_id);
            stream.report_dropped(meter, device, dropped_delta);
        })
    }))
}

/// Says that process `pid` ended at `timestamp_ns` (ns since the epoch, CUPTI's clock): the
/// driver frees its device memory, so the allocations it still holds on the meter's devices
/// are billed up to there (`memory_byte_ns`).
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_FORKED` (a meter made before a `fork()`, in the child),
/// `GM_ERR_POISONED` (the meter was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC`
/// (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_process_exited(
    meter: *mut gm_meter,
    pid: u32,
    timestamp_ns: u64,
) -> gm_status {
    boundary(unwind_safe(|| {
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        meter.with(|meter, stream| {
            stream.process_exited(meter, pid, timestamp_ns);
        })
    }))
}

/// Writes to `*out_ns` the time (ns since the epoch) before which the meter has booked every
/// record: each device's latest record start minus the reordering horizon, the earliest of
/// them (or the last drained edge, if later); 0 before any record. A drain at or before it
/// loses nothing the horizon would have kept; a record starting before it is `late`.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_FORKED` (a meter made before a `fork()`, in the child),
/// `GM_ERR_POISONED` (the meter was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC`
/// (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter; `out_ns` points to writable storage for a `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_watermark_ns(
    meter: *const gm_meter,
    out_ns: *mut u64,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_ns, "out_ns")?;
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        let w = meter.with(|meter, _| meter.watermark_ns())?;
        // SAFETY: writable storage for a u64 (the contract above).
        unsafe { out.write(w) };
        Ok(())
    }))
}

/// A snapshot of the usage so far as a `gpumeter.usage/v1` report (JSON, UTF-8): every window
/// not drained yet, with the records still inside the reordering horizon booked in a copy
/// and allocations still held billed to the latest work. The meter goes on unchanged. Its
/// source has format `cupti-stream-snapshot`: a preview, never merged with the meter's other
/// reports; bill drained reports (the bank bills a window of the meter once in any case).
///
/// On success `*out_json` is a new string the caller owns and frees with `gm_string_free`;
/// on failure it is not written.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_METER` (a quantity beyond 128 bits, too many windows),
/// `GM_ERR_FORKED` (a meter made before a `fork()`, in the child), `GM_ERR_POISONED` (the meter
/// was left unusable by an earlier `GM_ERR_PANIC`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter; `out_json` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_usage_json(
    meter: *const gm_meter,
    out_json: *mut *mut c_char,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_json, "out_json")?;
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        let json = { meter.with(|meter, stream| report_json(stream.snapshot(meter)))?? };
        let c = c_string(json, "the usage report")?;
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(c) };
        Ok(())
    }))
}

/// Hands over and forgets the windows that end at or before `before_ns` (ns since the epoch,
/// rounded down to a window edge), as a `gpumeter.usage/v1` report: their usage, and the
/// loss, record counts and warnings gathered since the last drain. Drained reports never
/// repeat a quantity: together with a final drain (`UINT64_MAX`) they sum to the report the
/// meter would have built without draining. Afterwards a record starting before the edge is
/// `late`; drain at or before `gm_meter_watermark_ns` to lose nothing. Allocations still
/// held are billed up to the edge and stay held; with `UINT64_MAX` they are billed up to the
/// latest work and listed in `open_allocations` (the next report's opening state). A live
/// agent drains at `min(watermark, now)`: one record dated far ahead moves the watermark. The
/// report's source (`source_name`, format `cupti-stream`) has the meter's one identity, so a
/// biller merges a meter's drained reports (`gpumeter usage --format usage`) and the bank
/// bills each window of the meter once.
///
/// On success `*out_json` is a new string the caller owns and frees with `gm_string_free`;
/// on failure it is not written and the meter is left exactly as it was.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_METER` (a quantity beyond 128 bits, held memory billed to an
/// edge past the meter's cell budget), `GM_ERR_FORKED` (a meter made before a `fork()`, in the
/// child), `GM_ERR_POISONED` (the meter was left unusable by an earlier `GM_ERR_PANIC`),
/// `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `meter` is a live meter; `out_json` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_meter_drain_usage_json(
    meter: *mut gm_meter,
    before_ns: u64,
    out_json: *mut *mut c_char,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out_json, "out_json")?;
        // SAFETY: a live meter or NULL (the contract above).
        let meter = unsafe { handle(meter, "meter") }?;
        let json = { meter.with(|meter, stream| report_json(stream.drain(meter, before_ns)))?? };
        let c = c_string(json, "the usage report")?;
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(c) };
        Ok(())
    }))
}

/// Frees a string the library returned (usage, invoices, bank answers). NULL is fine.
///
/// # Safety
/// `s` is NULL or a string a `gm_*` function returned, not freed before.
#[no_mangle]
pub unsafe extern "C" fn gm_string_free(s: *mut c_char) {
    // SAFETY: NULL or a library string, freed once (the contract above).
    infallible((), || unsafe { crate::ffi::free_c_string(s) })
}

/// Copies this thread's last failure message into `buf` and returns its full length in bytes
/// without the NUL. At most `len - 1` bytes are copied (cut on a UTF-8 character boundary),
/// then a NUL, whenever `len > 0`; `(NULL, 0)` only asks for the length. A successful call
/// leaves the message unchanged; each thread has its own. Never fails.
///
/// # Safety
/// `buf` is NULL (with `len` 0) or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_last_error_message(buf: *mut c_char, len: usize) -> usize {
    infallible(0, || {
        let out = if buf.is_null() || len == 0 {
            None
        } else {
            // SAFETY: `len` writable bytes (the contract above); c_char and u8 have the same
            // size and alignment.
            Some(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) })
        };
        crate::status::copy_last_error(out)
    })
}

/// Test-only: makes the inside of an exported function panic on purpose, to show that the
/// panic boundary turns it into a status (issue 12). Compiled into this crate's unit tests
/// only (`#[cfg(test)]`): the library that C links, and the integration tests, have no way to
/// reach it.
#[cfg(test)]
pub(crate) mod test_hooks {
    use std::cell::Cell;

    thread_local! {
        static PANIC_IN_INGEST: Cell<bool> = const { Cell::new(false) };
    }

    /// The next `gm_meter_ingest_cupti_buffer` on this thread panics while it holds the
    /// meter's lock (once).
    pub(crate) fn panic_in_next_ingest() {
        PANIC_IN_INGEST.with(|p| p.set(true));
    }

    pub(super) fn maybe_panic() {
        if PANIC_IN_INGEST.with(|p| p.replace(false)) {
            panic!("a panic the test asked for");
        }
    }
}
