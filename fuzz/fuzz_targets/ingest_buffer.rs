//! Fuzzes the C ABI's hot path, `gm_meter_ingest_cupti_buffer` (gpumeter-ffi), with arbitrary
//! bytes, as a node agent calls it: a meter made with `gm_meter_new`, the bytes handed over in
//! one or more buffers (at any alignment), snapshots (`gm_meter_usage_json`) and drains at the
//! watermark (`gm_meter_drain_usage_json`) between them, everything freed. Besides "no crash",
//! it asserts the C ABI's own promises: no call returns `GM_ERR_PANIC` or `GM_ERR_POISONED`
//! (the panic boundary would hide a panic from libFuzzer otherwise), a buffer either meters or
//! fails with `GM_ERR_DECODE`, a failed call writes no output, and every string returned is
//! JSON.
//!
//! Input layout: byte 0 picks the API version (`[26, 130001, 130401][b0 % 3]`, then
//! `(b0 / 3) % 8` bytes are skipped so the buffers start at any alignment); byte 1 is flags:
//! bit 0 a snapshot after every buffer, bit 1 a drain at the watermark after every buffer,
//! bit 2 registers device 0 (an H200: 132 SMs, 9.0) first, bit 3 a tenant rule for pid 1 and
//! external id 1, bits 4–6 cut the rest into 1–8 buffers of equal size (the last takes the
//! remainder), bit 7 ingests the whole rest once more at the end (duplicates). The rest is the
//! bytes. Windows are one day, so that a timestamp anywhere in u64 keeps a report under the
//! meter's cell budget (the C ABI has no `max_cells` key).
#![no_main]

use std::ffi::{c_char, CStr};
use std::ptr::null_mut;

use gpumeter_ffi::*;
use libfuzzer_sys::fuzz_target;

const APIS: [u32; 3] = [26, 130_001, 130_401];
const OK: gm_status = gm_status_code::GM_OK as gm_status;
const DECODE: gm_status = gm_status_code::GM_ERR_DECODE as gm_status;
const METER: gm_status = gm_status_code::GM_ERR_METER as gm_status;

/// Takes a returned string (checks it is JSON) and frees it.
fn take(status: gm_status, p: *mut c_char, what: &str) {
    if status == OK {
        assert!(!p.is_null(), "{what}: GM_OK without a string");
        // SAFETY: a NUL-terminated string from the library, freed once just below.
        let s = unsafe { CStr::from_ptr(p) };
        let text = s.to_str().expect("the library's strings are UTF-8");
        serde_json::from_str::<serde_json::Value>(text).expect("usage is JSON");
        // SAFETY: as above.
        unsafe { gm_string_free(p) };
    } else {
        assert_eq!(status, METER, "{what}: unexpected status {status}");
        assert!(p.is_null(), "{what}: an output written on failure");
    }
}

fn snapshot(m: *mut gm_meter) {
    let mut out = null_mut();
    // SAFETY: a live meter and a writable out-pointer.
    let s = unsafe { gm_meter_usage_json(m, &mut out) };
    take(s, out, "gm_meter_usage_json");
}

fn drain(m: *mut gm_meter, before_ns: Option<u64>) {
    let before_ns = before_ns.unwrap_or_else(|| {
        let mut w = 0;
        // SAFETY: a live meter and a writable u64.
        assert_eq!(unsafe { gm_meter_watermark_ns(m, &mut w) }, OK);
        w
    });
    let mut out = null_mut();
    // SAFETY: a live meter and a writable out-pointer.
    let s = unsafe { gm_meter_drain_usage_json(m, before_ns, &mut out) };
    take(s, out, "gm_meter_drain_usage_json");
}

fn ingest(m: *mut gm_meter, buf: &[u8]) {
    // SAFETY: a live meter and `buf.len()` readable bytes.
    let s = unsafe { gm_meter_ingest_cupti_buffer(m, buf.as_ptr(), buf.len()) };
    assert!(s == OK || s == DECODE, "ingest: unexpected status {s}");
}

fuzz_target!(|data: &[u8]| {
    let [sel, flags, rest @ ..] = data else {
        return;
    };
    let api = APIS[usize::from(*sel) % 3];
    let skip = (usize::from(*sel) / 3 % 8).min(rest.len());
    let rest = &rest[skip..];
    let config = format!("{{\"cupti_api_version\": {api}, \"window_seconds\": 86400}}\0");
    let mut m = null_mut();
    // SAFETY: a NUL-terminated config and a writable out-pointer.
    let s = unsafe { gm_meter_new(config.as_ptr().cast(), &mut m) };
    assert_eq!(s, OK, "gm_meter_new");
    if flags & 4 != 0 {
        let info = gm_device_info {
            name: c"NVIDIA H200".as_ptr(),
            sm_count: 132,
            cc_major: 9,
            cc_minor: 0,
            ..gm_device_info::new(0)
        };
        // SAFETY: a live meter and a description whose strings are static.
        assert_eq!(unsafe { gm_meter_register_device(m, &info) }, OK);
    }
    if flags & 8 != 0 {
        // SAFETY: a live meter and static NUL-terminated tenants.
        unsafe {
            assert_eq!(gm_meter_set_tenant_for_pid(m, 1, c"alice".as_ptr()), OK);
            assert_eq!(
                gm_meter_set_tenant_for_external_id(m, 1, c"bob".as_ptr()),
                OK
            );
        }
    }
    let pieces = 1 + usize::from((flags >> 4) & 7);
    let size = rest.len() / pieces;
    for i in 0..pieces {
        let end = if i + 1 == pieces {
            rest.len()
        } else {
            (i + 1) * size
        };
        ingest(m, &rest[i * size..end]);
        if flags & 1 != 0 {
            snapshot(m);
        }
        if flags & 2 != 0 {
            drain(m, None);
        }
    }
    if flags & 128 != 0 {
        ingest(m, rest);
    }
    snapshot(m);
    drain(m, Some(u64::MAX));
    // SAFETY: the meter from `gm_meter_new`, freed once.
    unsafe { gm_meter_free(m) };
});
