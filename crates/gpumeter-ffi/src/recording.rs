//! `gm_recording`: a `.gmr` recording or raw buffer file replayed as the events a CUPTI
//! subscription gives an agent, so agents (and their tests) can drive the hot path exactly as
//! a live subscription would.

use std::ffi::{c_char, CString};
use std::path::Path;

use gpumeter::cupti::replay::{Replay, ReplayItem};
use gpumeter::ApiVersion;

use crate::ffi::{
    boundary, free_handle, handle, handle_mut, infallible, into_handle, out_arg, sized_out,
    str_arg, unwind_safe, Handle, Origin, SizedStruct,
};
use crate::meter::{gm_device_info, GM_UNKNOWN_DEVICE};
use crate::status::{gm_status, gm_status_code, set_last_error, Failure};

/// What a `gm_recording_item` is.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gm_recording_item_kind {
    /// No more items.
    GM_ITEM_END = 0,
    /// `device`: a device of the recording's inventory; give it to `gm_meter_register_device`.
    GM_ITEM_DEVICE = 1,
    /// `buffer`, `buffer_size`: a completed activity buffer; give it to
    /// `gm_meter_ingest_cupti_buffer`.
    GM_ITEM_BUFFER = 2,
    /// `device_id`, `dropped`: records CUPTI dropped (a delta); give them to
    /// `gm_meter_report_dropped`.
    GM_ITEM_DROPPED = 3,
    /// `pid`, `timestamp_ns`: the recorded process ended; give it to `gm_meter_process_exited`.
    GM_ITEM_PROCESS_EXIT = 4,
}

/// One replayed event. Only the fields of its `kind` are set; the others are zero/NULL.
/// Pointers stay valid until the next `gm_recording_next` or `gm_recording_free`.
///
/// The caller sets `struct_size` to `sizeof(gm_recording_item)` before the first
/// `gm_recording_next` (the library keeps it), so that a later library can add fields at the
/// end: a library writes the fields the size covers, and zeroes the bytes of a larger struct
/// past its own (fields it does not know).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct gm_recording_item {
    /// `sizeof(gm_recording_item)` as the caller's header declares it; less than the first
    /// version's size (0: not set), or more than 4096, is `GM_ERR_INVALID_ARGUMENT`.
    pub struct_size: usize,
    /// A `gm_recording_item_kind` number.
    pub kind: u32,
    /// `GM_ITEM_DROPPED`: the device, or `GM_UNKNOWN_DEVICE`.
    pub device_id: u32,
    /// `GM_ITEM_PROCESS_EXIT`: the process.
    pub pid: u32,
    /// `GM_ITEM_DEVICE`: the device, a `gm_device_info` owned by the recording (its
    /// `struct_size` this library's); pass it to `gm_meter_register_device` as it is.
    pub device: *const gm_device_info,
    /// `GM_ITEM_BUFFER`: the buffer's bytes (owned by the recording).
    pub buffer: *const u8,
    /// `GM_ITEM_BUFFER`: its size in bytes.
    pub buffer_size: usize,
    /// `GM_ITEM_DROPPED`: records dropped since the last count.
    pub dropped: u64,
    /// `GM_ITEM_PROCESS_EXIT`: when it ended, ns since the epoch.
    pub timestamp_ns: u64,
}

// SAFETY: `#[repr(C)]`, `struct_size` first, integers and pointers only (all-zero is valid).
unsafe impl SizedStruct for gm_recording_item {
    // The first version ends with `timestamp_ns`.
    const MIN_SIZE: usize =
        std::mem::offset_of!(gm_recording_item, timestamp_ns) + std::mem::size_of::<u64>();
    const C_NAME: &'static str = "gm_recording_item";
}

/// A recording being replayed. Opaque; made by `gm_recording_open`, freed by
/// `gm_recording_free`; one thread at a time.
#[allow(non_camel_case_types)]
pub struct gm_recording {
    replay: Replay,
    next: usize,
    /// Per item, the device strings it points to.
    strings: Vec<Option<(Option<CString>, Option<CString>)>>,
    /// The device the last `GM_ITEM_DEVICE` item points to.
    device: gm_device_info,
    origin: Origin,
}

impl Handle for gm_recording {
    const WHAT: &'static str = "recording";
    fn origin(&self) -> &Origin {
        &self.origin
    }
}

impl gm_recording_item {
    /// An item with this library's `struct_size`, kind `GM_ITEM_END` (for Rust callers; C
    /// zeroes the struct and sets `struct_size`).
    pub fn new() -> Self {
        item_default()
    }
}

impl Default for gm_recording_item {
    fn default() -> Self {
        item_default()
    }
}

fn item_default() -> gm_recording_item {
    gm_recording_item {
        struct_size: std::mem::size_of::<gm_recording_item>(),
        kind: gm_recording_item_kind::GM_ITEM_END as u32,
        device_id: 0,
        pid: 0,
        device: std::ptr::null(),
        buffer: std::ptr::null(),
        buffer_size: 0,
        dropped: 0,
        timestamp_ns: 0,
    }
}

/// Opens a recording: a `.gmr` (recognized by its magic; its header gives the API version),
/// or else a raw activity buffer file laid out by `raw_cupti_api_version` (0 = 26, CUDA
/// 12.8's), replayed as one buffer. The whole file is read now.
///
/// On success `*out` is a new recording the caller owns and frees with
/// `gm_recording_free`; on failure it is not written.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_UTF8`, `GM_ERR_INVALID_ARGUMENT` (an unknown
/// `raw_cupti_api_version`), `GM_ERR_IO` (the file cannot be read; a `.gmr` that cannot be
/// read, that has damaged frames — their records are loss the events cannot carry — or SASS
/// instruction-count frames, or a device string holding a NUL byte: meter those whole with
/// `gpumeter usage`), `GM_ERR_PANIC` (an internal error, caught).
///
/// # Safety
/// `path` is NULL or NUL-terminated; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn gm_recording_open(
    path: *const c_char,
    raw_cupti_api_version: u32,
    out: *mut *mut gm_recording,
) -> gm_status {
    boundary(unwind_safe(|| {
        let out = out_arg(out, "out")?;
        // SAFETY: NULL or NUL-terminated (the contract above).
        let path = Path::new(unsafe { str_arg(path, "path") }?);
        let api = match raw_cupti_api_version {
            0 => ApiVersion::default(),
            v => ApiVersion::from_cupti(v).map_err(|e| {
                Failure::new(
                    gm_status_code::GM_ERR_INVALID_ARGUMENT,
                    format!("raw_cupti_api_version: {e}"),
                )
            })?,
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let bytes = std::fs::read(path).map_err(|e| {
            Failure::new(
                gm_status_code::GM_ERR_IO,
                format!("{name}: cannot read: {e}"),
            )
        })?;
        let replay = Replay::from_bytes(&name, &bytes, api)
            .map_err(|e| Failure::new(gm_status_code::GM_ERR_IO, e.to_string()))?;
        // A name or UUID holding a NUL byte cannot be a C string: refused, never cut or
        // dropped (the device's key would change).
        let c = |s: &Option<String>, what: &str, id: u32| -> Result<Option<CString>, Failure> {
            s.as_deref()
                .map(|s| {
                    CString::new(s).map_err(|_| {
                        Failure::new(
                            gm_status_code::GM_ERR_IO,
                            format!("{name}: device {id}'s {what} holds a NUL byte"),
                        )
                    })
                })
                .transpose()
        };
        let mut strings = Vec::with_capacity(replay.items.len());
        for i in &replay.items {
            strings.push(match i {
                ReplayItem::Device(d) => {
                    Some((c(&d.name, "name", d.id)?, c(&d.uuid, "uuid", d.id)?))
                }
                _ => None,
            });
        }
        let rec = gm_recording {
            replay,
            next: 0,
            strings,
            device: gm_device_info::new(0),
            origin: Origin::here(),
        };
        // SAFETY: writable storage for a pointer (the contract above).
        unsafe { out.write(into_handle(rec)) };
        Ok(())
    }))
}

/// The CUPTI API version the recording's buffers are laid out by (the `.gmr` header's, or
/// the one given for a raw buffer): pass it as `cupti_api_version` in `gm_meter_new`'s
/// configuration. 0 when `recording` is NULL or was opened in another process (a child after
/// `fork()`), and then the last error message says which.
///
/// # Safety
/// `recording` is NULL or a live recording.
#[no_mangle]
pub unsafe extern "C" fn gm_recording_cupti_api_version(recording: *const gm_recording) -> u32 {
    infallible(0, || {
        // SAFETY: NULL or a live recording (the contract above).
        match unsafe { handle(recording, "recording") } {
            Ok(r) => r.replay.api.cupti_api_version(),
            Err(f) => {
                set_last_error(f.message);
                0
            }
        }
    })
}

/// Writes the next event into `*item` (kind `GM_ITEM_END` when there are no more, and again
/// on every later call). `item->struct_size` must be set (`sizeof(gm_recording_item)`); it is
/// kept. On failure `*item` is not written.
///
/// # Errors
/// `GM_ERR_NULL_ARGUMENT`, `GM_ERR_INVALID_ARGUMENT` (`item->struct_size` not set or too
/// small), `GM_ERR_FORKED` (a recording made before a `fork()`, in the child), `GM_ERR_PANIC`
/// (an internal error, caught).
///
/// # Safety
/// `recording` is a live recording used by no other thread; `item` points to a
/// `gm_recording_item` of `item->struct_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gm_recording_next(
    recording: *mut gm_recording,
    item: *mut gm_recording_item,
) -> gm_status {
    boundary(unwind_safe(|| {
        // SAFETY: NULL or `struct_size` writable bytes (the contract above).
        let out = unsafe { sized_out(item, "item") }?;
        // SAFETY: NULL or a live recording, used by this thread only (the contract above).
        let rec = unsafe { handle_mut(recording, "recording") }?;
        let mut it = item_default();
        if let Some(i) = rec.replay.items.get(rec.next) {
            match i {
                ReplayItem::Device(d) => {
                    it.kind = gm_recording_item_kind::GM_ITEM_DEVICE as u32;
                    let (name, uuid) = rec
                        .strings
                        .get(rec.next)
                        .and_then(Option::as_ref)
                        .map(|(n, u)| {
                            (
                                n.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                                u.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                            )
                        })
                        .unwrap_or((std::ptr::null(), std::ptr::null()));
                    let (cc_major, cc_minor) = d
                        .compute_capability
                        .as_deref()
                        .and_then(|c| c.split_once('.'))
                        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                        .unwrap_or((0, 0));
                    rec.device = gm_device_info {
                        name,
                        uuid,
                        sm_count: d.sm_count.unwrap_or(0),
                        cc_major,
                        cc_minor,
                        ..gm_device_info::new(d.id)
                    };
                    it.device = &raw const rec.device;
                }
                ReplayItem::Buffer(b) => {
                    it.kind = gm_recording_item_kind::GM_ITEM_BUFFER as u32;
                    it.buffer = b.as_ptr();
                    it.buffer_size = b.len();
                }
                ReplayItem::Dropped { device_id, count } => {
                    it.kind = gm_recording_item_kind::GM_ITEM_DROPPED as u32;
                    it.device_id = device_id.unwrap_or(GM_UNKNOWN_DEVICE);
                    it.dropped = *count;
                }
                ReplayItem::ProcessExit { pid, timestamp_ns } => {
                    it.kind = gm_recording_item_kind::GM_ITEM_PROCESS_EXIT as u32;
                    it.pid = *pid;
                    it.timestamp_ns = *timestamp_ns;
                }
            }
            rec.next += 1;
        }
        // SAFETY: `struct_size` writable bytes (the contract above).
        unsafe { out.write(it) };
        Ok(())
    }))
}

/// Frees a recording (and the buffers and strings its items pointed to). NULL is fine. In a
/// child after `fork()`, a recording the parent opened is left alone.
///
/// # Safety
/// `recording` is NULL or a recording from `gm_recording_open` not freed before.
#[no_mangle]
pub unsafe extern "C" fn gm_recording_free(recording: *mut gm_recording) {
    // SAFETY: NULL or a live recording, freed once (the contract above).
    infallible((), || unsafe { free_handle(recording) })
}
