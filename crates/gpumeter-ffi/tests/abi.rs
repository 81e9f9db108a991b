//! The C ABI called as C calls it, through the exported `gm_*` functions (docs/C_ABI.md, "Conventions",
//! issue 12): NULLs, bad UTF-8, bad configs, price books and usage, truncated
//! and unaligned buffers, the last-error rules, eight threads on one meter, drains against
//! snapshots, rating against `gpumeter::preview`, tenant rules.

// Calling the C ABI is the point: every call says why it holds (`// SAFETY:`).
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::path::PathBuf;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};

use gpumeter::cupti::{decode, ApiVersion, Record};
use gpumeter::UsageReport;
use gpumeter_ffi::*;

const OK: gm_status = gm_status_code::GM_OK as gm_status;

/// A recognizable value for output pointers that must stay untouched (never dereferenced).
const SENTINEL_ADDR: usize = 0x5eed_0008;

fn sentinel<T>() -> *mut T {
    SENTINEL_ADDR as *mut T
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn smoke_path() -> PathBuf {
    root().join("examples/data/h200-cuda13-smoke.gmr")
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// This thread's last error message, read as C would: the length first, then the text.
fn last_error() -> String {
    // SAFETY: (NULL, 0) only asks for the length.
    let n = unsafe { gm_last_error_message(null_mut(), 0) };
    let mut buf = vec![0xffu8; n + 1];
    // SAFETY: `buf` holds `n + 1` writable bytes.
    let m = unsafe { gm_last_error_message(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(m, n, "the full length both times");
    assert_eq!(buf[n], 0, "NUL-terminated");
    buf.truncate(n);
    String::from_utf8(buf).expect("the message is UTF-8")
}

/// `status` is `want` and the last error names `needle`.
#[track_caller]
fn expect_err(status: gm_status, want: gm_status_code, needle: &str) {
    let msg = last_error();
    assert_eq!(status, want as gm_status, "status (last error: {msg:?})");
    assert!(msg.contains(needle), "{msg:?} should name {needle:?}");
}

#[track_caller]
fn expect_ok(status: gm_status) {
    assert_eq!(status, OK, "status (last error: {:?})", last_error());
}

/// Takes a string the library returned, and frees it.
fn take(p: *mut c_char) -> String {
    assert!(!p.is_null());
    // SAFETY: a NUL-terminated string from the library, freed once right after.
    let s = unsafe { CStr::from_ptr(p) }
        .to_str()
        .expect("UTF-8")
        .to_owned();
    // SAFETY: as above.
    unsafe { gm_string_free(p) };
    s
}

/// A meter handle for the tests; freed on drop. The C ABI lets any thread call a meter, also
/// at once (docs/C_ABI.md), so the handle may be shared across threads.
struct M(*mut gm_meter);

// SAFETY: a `gm_meter` synchronizes inside (its state sits behind a mutex); the header says any
// thread may call it, also at once. The pointer is freed only by `Drop`, after every thread
// that borrowed `M` has been joined.
unsafe impl Send for M {}
// SAFETY: as for `Send`.
unsafe impl Sync for M {}

impl M {
    fn new(config: &str) -> M {
        let config = c(config);
        let mut m = null_mut();
        // SAFETY: a NUL-terminated config and a writable out-pointer.
        expect_ok(unsafe { gm_meter_new(config.as_ptr(), &mut m) });
        assert!(!m.is_null());
        M(m)
    }

    fn ingest(&self, buf: &[u8]) -> gm_status {
        // SAFETY: a live meter and `buf.len()` readable bytes.
        unsafe { gm_meter_ingest_cupti_buffer(self.0, buf.as_ptr(), buf.len()) }
    }

    fn usage(&self) -> String {
        let mut out = null_mut();
        // SAFETY: a live meter and a writable out-pointer.
        expect_ok(unsafe { gm_meter_usage_json(self.0, &mut out) });
        take(out)
    }

    fn drain(&self, before_ns: u64) -> String {
        let mut out = null_mut();
        // SAFETY: a live meter and a writable out-pointer.
        expect_ok(unsafe { gm_meter_drain_usage_json(self.0, before_ns, &mut out) });
        take(out)
    }

    fn watermark(&self) -> u64 {
        let mut w = u64::MAX;
        // SAFETY: a live meter and a writable u64.
        expect_ok(unsafe { gm_meter_watermark_ns(self.0, &mut w) });
        w
    }

    fn feed(&self, events: &[Event]) {
        for e in events {
            self.event(e);
        }
    }

    fn event(&self, e: &Event) {
        match e {
            Event::Device {
                id,
                name,
                uuid,
                sm_count,
                cc,
            } => {
                let info = gm_device_info {
                    name: name.as_ref().map_or(null(), |s| s.as_ptr()),
                    uuid: uuid.as_ref().map_or(null(), |s| s.as_ptr()),
                    sm_count: *sm_count,
                    cc_major: cc.0,
                    cc_minor: cc.1,
                    ..gm_device_info::new(*id)
                };
                // SAFETY: a live meter and a device description whose strings live for the call.
                expect_ok(unsafe { gm_meter_register_device(self.0, &info) });
            }
            Event::Buffer(b) => expect_ok(self.ingest(b)),
            Event::Dropped { device_id, count } => {
                // SAFETY: a live meter.
                expect_ok(unsafe { gm_meter_report_dropped(self.0, *device_id, *count) });
            }
            Event::Exit { pid, timestamp_ns } => {
                // SAFETY: a live meter.
                expect_ok(unsafe { gm_meter_process_exited(self.0, *pid, *timestamp_ns) });
            }
        }
    }
}

impl Drop for M {
    fn drop(&mut self) {
        // SAFETY: a meter from `gm_meter_new`, freed once, no thread uses it any more.
        unsafe { gm_meter_free(self.0) };
    }
}

/// A recording's event, copied out of a `gm_recording_item`.
#[derive(Debug, Clone)]
enum Event {
    Device {
        id: u32,
        name: Option<CString>,
        uuid: Option<CString>,
        sm_count: u32,
        cc: (u32, u32),
    },
    Buffer(Vec<u8>),
    Dropped {
        device_id: u32,
        count: u64,
    },
    Exit {
        pid: u32,
        timestamp_ns: u64,
    },
}

impl Event {
    fn buffer(&self) -> Option<&[u8]> {
        match self {
            Event::Buffer(b) => Some(b),
            _ => None,
        }
    }
}

fn opt_cstring(p: *const c_char) -> Option<CString> {
    // SAFETY: NULL or a string the recording owns, alive until the next `gm_recording_next`.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_owned())
}

/// A recording's events and its CUPTI API version, read through `gm_recording_*`.
fn recording(path: &std::path::Path) -> (u32, Vec<Event>) {
    let path = c(path.to_str().expect("UTF-8 path"));
    let mut rec = null_mut();
    // SAFETY: a NUL-terminated path and a writable out-pointer.
    expect_ok(unsafe { gm_recording_open(path.as_ptr(), 0, &mut rec) });
    // SAFETY: a live recording.
    let api = unsafe { gm_recording_cupti_api_version(rec) };
    let mut events = Vec::new();
    loop {
        let mut it = gm_recording_item::new();
        // SAFETY: a live recording used by this thread only, and a sized item.
        expect_ok(unsafe { gm_recording_next(rec, &mut it) });
        assert_eq!(it.struct_size, std::mem::size_of::<gm_recording_item>());
        let kind = it.kind;
        if kind == gm_recording_item_kind::GM_ITEM_END as u32 {
            break;
        } else if kind == gm_recording_item_kind::GM_ITEM_DEVICE as u32 {
            // SAFETY: the recording's device, alive until the next call.
            let d = unsafe { &*it.device };
            assert_eq!(d.struct_size, std::mem::size_of::<gm_device_info>());
            events.push(Event::Device {
                id: d.device_id,
                name: opt_cstring(d.name),
                uuid: opt_cstring(d.uuid),
                sm_count: d.sm_count,
                cc: (d.cc_major, d.cc_minor),
            });
        } else if kind == gm_recording_item_kind::GM_ITEM_BUFFER as u32 {
            // SAFETY: `buffer_size` bytes owned by the recording, alive until the next call.
            let b = unsafe { std::slice::from_raw_parts(it.buffer, it.buffer_size) };
            events.push(Event::Buffer(b.to_vec()));
        } else if kind == gm_recording_item_kind::GM_ITEM_DROPPED as u32 {
            events.push(Event::Dropped {
                device_id: it.device_id,
                count: it.dropped,
            });
        } else if kind == gm_recording_item_kind::GM_ITEM_PROCESS_EXIT as u32 {
            events.push(Event::Exit {
                pid: it.pid,
                timestamp_ns: it.timestamp_ns,
            });
        } else {
            panic!("unknown item kind {kind}");
        }
    }
    // After the end: the end again.
    let mut it = gm_recording_item::new();
    // SAFETY: as above.
    expect_ok(unsafe { gm_recording_next(rec, &mut it) });
    assert_eq!(it.kind, gm_recording_item_kind::GM_ITEM_END as u32);
    // SAFETY: a recording from `gm_recording_open`, freed once.
    unsafe { gm_recording_free(rec) };
    (api, events)
}

/// The smoke recording (one H200, CUDA 13.0, one 628 KB buffer), its buffer cut at record
/// boundaries into [`PIECES`] buffers, as CUPTI hands them over with smaller buffers.
fn smoke() -> (u32, Vec<Event>) {
    let (api, events) = pieces(&smoke_path());
    assert!(events.iter().filter(|e| e.buffer().is_some()).count() >= PIECES);
    (api, events)
}

/// A recording's events with each buffer cut at record boundaries into about [`PIECES`].
fn pieces(path: &std::path::Path) -> (u32, Vec<Event>) {
    let (api, events) = recording(path);
    assert_eq!(api, 130_001, "the recordings are CUDA 13.0's");
    let api_v = ApiVersion::from_cupti(api).expect("api");
    let mut out = Vec::new();
    for e in events {
        let Event::Buffer(b) = e else {
            out.push(e);
            continue;
        };
        let d = decode(&b, api_v).expect("the recording's buffer decodes");
        let per = d.records.len().div_ceil(PIECES).max(1);
        let mut from = 0;
        for chunk in d.records.chunks(per) {
            let last = chunk.last().expect("a record");
            let to = last.offset + last.size;
            out.push(Event::Buffer(b[from..to].to_vec()));
            from = to;
        }
        if from < b.len() {
            out.push(Event::Buffer(b[from..].to_vec()));
        }
    }
    (api, out)
}

/// How many buffers the smoke recording's one buffer becomes.
const PIECES: usize = 48;

/// A report without what names its meter instance (the stream's source digest, and so the
/// report's own digest), for comparing the reports of two meters fed the same buffers.
fn without_identity(json: &str) -> UsageReport {
    let mut r = report(json);
    for s in &mut r.sources {
        s.sha256.clear();
    }
    r.sha256.clear();
    r
}

fn report(json: &str) -> UsageReport {
    serde_json::from_str(json).expect("a usage report")
}

type RowKey = (String, String, String, String);

/// Usage rows by (tenant, device_key, window_start, meter).
fn rows(r: &UsageReport) -> BTreeMap<RowKey, u128> {
    let mut m = BTreeMap::new();
    for u in &r.usage {
        let key = (
            u.tenant.clone(),
            u.device_key.clone(),
            u.window_start.clone(),
            u.meter.as_str().to_string(),
        );
        assert!(
            m.insert(key.clone(), u.quantity.0).is_none(),
            "{key:?} twice"
        );
    }
    m
}

/// A crafted buffer of the fuzz seeds (every decoded kind): byte 0 is the target's selector.
fn crafted(api: u32) -> (ApiVersion, Vec<u8>) {
    let bytes = std::fs::read(root().join(format!("fuzz/seeds/decode_buffer/crafted_{api}.bin")))
        .expect("seed");
    (
        ApiVersion::from_cupti(api).expect("api"),
        bytes[1..].to_vec(),
    )
}

#[test]
fn abi_version_is_the_constant() {
    assert_eq!(gm_abi_version(), GM_ABI_VERSION);
    assert_eq!(GM_ABI_VERSION, 2);
}

#[test]
fn null_pointers_are_refused_and_outputs_stay_untouched() {
    use gm_status_code::GM_ERR_NULL_ARGUMENT as NULL;
    let m = M::new("{}");
    let tenant = c("alice");
    let config = c("{}");
    let book = c("schema = \"gpumeter.pricebook/v1\"");
    let usage = c(&m.usage());
    let path = c(smoke_path().to_str().expect("UTF-8"));
    // SAFETY (every call below): NULL where the test says so, else live objects and
    // NUL-terminated strings; sentinel out-pointers are never written on failure (checked).
    unsafe {
        expect_err(gm_meter_new(config.as_ptr(), null_mut()), NULL, "out");
        expect_err(gm_meter_new(null(), null_mut()), NULL, "out");

        let info = gm_device_info::new(0);
        expect_err(gm_meter_register_device(null_mut(), &info), NULL, "meter");
        expect_err(gm_meter_register_device(m.0, null()), NULL, "info");

        expect_err(
            gm_meter_ingest_cupti_buffer(null_mut(), null(), 0),
            NULL,
            "meter",
        );
        expect_err(gm_meter_ingest_cupti_buffer(m.0, null(), 5), NULL, "buffer");

        expect_err(
            gm_meter_set_tenant_for_external_id(null_mut(), 1, tenant.as_ptr()),
            NULL,
            "meter",
        );
        expect_err(
            gm_meter_set_tenant_for_external_id(m.0, 1, null()),
            NULL,
            "tenant",
        );
        expect_err(
            gm_meter_set_tenant_for_pid(null_mut(), 1, tenant.as_ptr()),
            NULL,
            "meter",
        );
        expect_err(gm_meter_set_tenant_for_pid(m.0, 1, null()), NULL, "tenant");

        expect_err(gm_meter_report_dropped(null_mut(), 0, 1), NULL, "meter");
        expect_err(gm_meter_process_exited(null_mut(), 1, 1), NULL, "meter");

        let mut w = 0xdead_beef_u64;
        expect_err(gm_meter_watermark_ns(null(), &mut w), NULL, "meter");
        assert_eq!(w, 0xdead_beef);
        expect_err(gm_meter_watermark_ns(m.0, null_mut()), NULL, "out_ns");

        let mut out: *mut c_char = sentinel();
        expect_err(gm_meter_usage_json(null(), &mut out), NULL, "meter");
        assert_eq!(out, sentinel());
        expect_err(gm_meter_usage_json(m.0, null_mut()), NULL, "out_json");

        expect_err(
            gm_meter_drain_usage_json(null_mut(), 0, &mut out),
            NULL,
            "meter",
        );
        assert_eq!(out, sentinel());
        expect_err(
            gm_meter_drain_usage_json(m.0, 0, null_mut()),
            NULL,
            "out_json",
        );

        expect_err(
            gm_rate_json(null(), book.as_ptr(), &mut out),
            NULL,
            "usage_json",
        );
        assert_eq!(out, sentinel());
        expect_err(
            gm_rate_json(usage.as_ptr(), null(), &mut out),
            NULL,
            "price_book_toml",
        );
        assert_eq!(out, sentinel());
        expect_err(
            gm_rate_json(usage.as_ptr(), book.as_ptr(), null_mut()),
            NULL,
            "out_invoice_json",
        );

        let mut rec: *mut gm_recording = sentinel();
        expect_err(gm_recording_open(null(), 0, &mut rec), NULL, "path");
        assert_eq!(rec, sentinel());
        expect_err(gm_recording_open(path.as_ptr(), 0, null_mut()), NULL, "out");
        let mut item = gm_recording_item::new();
        item.kind = 0xffff;
        expect_err(gm_recording_next(null_mut(), &mut item), NULL, "recording");
        assert_eq!(item.kind, 0xffff);
        let mut rec = null_mut();
        expect_ok(gm_recording_open(path.as_ptr(), 0, &mut rec));
        expect_err(gm_recording_next(rec, null_mut()), NULL, "item");
        gm_recording_free(rec);
        assert_eq!(gm_recording_cupti_api_version(null()), 0);

        let mut meter_out: *mut gm_meter = sentinel();
        let bad = c("{");
        expect_err(
            gm_meter_new(bad.as_ptr(), &mut meter_out),
            gm_status_code::GM_ERR_INVALID_CONFIG,
            "config_json",
        );
        assert_eq!(meter_out, sentinel());
    }
}

#[test]
fn frees_accept_null() {
    // SAFETY: NULL is allowed for every free.
    unsafe {
        gm_meter_free(null_mut());
        gm_string_free(null_mut());
        gm_recording_free(null_mut());
    }
}

#[test]
fn a_null_empty_buffer_is_empty_and_a_null_sized_one_is_an_error() {
    let m = M::new("{}");
    // SAFETY: (NULL, 0) is an empty buffer.
    expect_ok(unsafe { gm_meter_ingest_cupti_buffer(m.0, null(), 0) });
    // An empty slice at a dangling address too.
    expect_ok(m.ingest(&[]));
    let r = report(&m.usage());
    assert!(r.usage.is_empty());
    assert!(r.devices.is_empty());
    let before = m.usage();
    // SAFETY: NULL with a length: refused before anything is read.
    let s = unsafe { gm_meter_ingest_cupti_buffer(m.0, null(), 5) };
    expect_err(s, gm_status_code::GM_ERR_NULL_ARGUMENT, "buffer");
    assert_eq!(m.usage(), before, "a refused buffer changes nothing");
}

#[test]
fn invalid_utf8_is_refused() {
    use gm_status_code::GM_ERR_INVALID_UTF8 as UTF8;
    let bad = CString::new(vec![b'a', 0xff, b'b']).expect("no NUL");
    let m = M::new("{}");
    let book = c("schema = \"gpumeter.pricebook/v1\"");
    let usage = c(&m.usage());
    // SAFETY (every call): live objects and NUL-terminated strings.
    unsafe {
        let mut out: *mut gm_meter = sentinel();
        expect_err(gm_meter_new(bad.as_ptr(), &mut out), UTF8, "config_json");
        assert_eq!(out, sentinel());
        expect_err(
            gm_meter_set_tenant_for_pid(m.0, 1, bad.as_ptr()),
            UTF8,
            "tenant",
        );
        expect_err(
            gm_meter_set_tenant_for_external_id(m.0, 1, bad.as_ptr()),
            UTF8,
            "tenant",
        );
        let mut s: *mut c_char = sentinel();
        expect_err(
            gm_rate_json(bad.as_ptr(), book.as_ptr(), &mut s),
            UTF8,
            "usage_json",
        );
        expect_err(
            gm_rate_json(usage.as_ptr(), bad.as_ptr(), &mut s),
            UTF8,
            "price_book_toml",
        );
        assert_eq!(s, sentinel());
        let name = gm_device_info {
            name: bad.as_ptr(),
            ..gm_device_info::new(0)
        };
        expect_err(gm_meter_register_device(m.0, &name), UTF8, "info->name");
        let uuid = gm_device_info {
            name: null(),
            uuid: bad.as_ptr(),
            ..name
        };
        expect_err(gm_meter_register_device(m.0, &uuid), UTF8, "info->uuid");
        let mut rec: *mut gm_recording = sentinel();
        expect_err(gm_recording_open(bad.as_ptr(), 0, &mut rec), UTF8, "path");
        assert_eq!(rec, sentinel());
        // The byte offset is named.
        expect_err(
            gm_meter_set_tenant_for_pid(m.0, 1, bad.as_ptr()),
            UTF8,
            "offset 1",
        );
    }
    assert!(
        report(&m.usage()).devices.is_empty(),
        "nothing was registered"
    );
}

#[test]
fn bad_configs_are_refused() {
    for (config, needle) in [
        ("{", "config_json"),
        ("[1]", "config_json"),
        (r#"{"window_seconds": 60, "colour": 1}"#, "colour"),
        (r#"{"window_seconds": 7}"#, "window_seconds"),
        (r#"{"window_seconds": 0}"#, "window_seconds"),
        (r#"{"cupti_api_version": 12345}"#, "cupti_api_version"),
        (r#"{"tenant": "idle"}"#, "tenant"),
        (r#"{"tenant": ""}"#, "tenant"),
        (r#"{"source_name": ""}"#, "source_name"),
        (r#"{"window_seconds": "60"}"#, "config_json"),
        // Issue 30 item 17: an object only (serde read an array field by field), and integers
        // past their range are too large, not "floating point".
        (r#"[60, "acme", 26, 0, "node-7"]"#, "must be a JSON object"),
        (r#"[60, null, null, null, null]"#, "not an array"),
        ("60", "not a number"),
        ("null", "not null"),
        (
            r#"{"window_seconds": 18446744073709551616}"#,
            "18446744073709551616 is too large (from 0 to 18446744073709551615)",
        ),
        (
            r#"{"reorder_horizon_ns": 99999999999999999999999}"#,
            "99999999999999999999999 is too large",
        ),
        (
            r#"{"cupti_api_version": 4294967296}"#,
            "4294967296 is too large (from 0 to 4294967295)",
        ),
        (r#"{"window_seconds": -60}"#, "-60 is too small"),
        (r#"{"window_seconds": 60.5}"#, "60.5 is not an integer"),
    ] {
        let text = c(config);
        let mut out: *mut gm_meter = sentinel();
        // SAFETY: a NUL-terminated config and a writable out-pointer.
        let s = unsafe { gm_meter_new(text.as_ptr(), &mut out) };
        expect_err(s, gm_status_code::GM_ERR_INVALID_CONFIG, needle);
        assert!(!last_error().contains("floating point"), "{}", last_error());
        assert_eq!(out, sentinel(), "{config}: out untouched");
    }
    // The documented keys are accepted.
    for config in [
        "{}",
        r#"{"window_seconds": 60, "tenant": "acme", "cupti_api_version": 26,
            "reorder_horizon_ns": 0, "source_name": "node-7"}"#,
        r#"{"cupti_api_version": 130001}"#,
        r#"{"cupti_api_version": 130401, "window_seconds": 86400}"#,
    ] {
        drop(M::new(config));
    }
    let mut m = null_mut();
    // SAFETY: NULL config (the defaults) and a writable out-pointer.
    expect_ok(unsafe { gm_meter_new(null(), &mut m) });
    // SAFETY: the meter just made, freed once.
    unsafe { gm_meter_free(m) };
}

const BOOK: &str = r#"
schema = "gpumeter.pricebook/v1"
version = "abi-test-1"
currency = "USD"
rounding = "half_even"

[[sku]]
id = "h200"
match = ["NVIDIA H200*"]

[[rate]]
sku = "h200"
meter = "sm_ns"
unit = "SM·hour"
unit_price = "0.026515"

[[rate]]
sku = "h200"
meter = "gpu_busy_ns"
unit = "hour"
unit_price = "0.10"

[[rate]]
sku = "h200"
meter = "memcpy_htod_bytes"
unit = "GB"
unit_price = "0.01"
"#;

fn smoke_meter(extra: &str) -> M {
    let (api, events) = smoke();
    let m = M::new(&format!(r#"{{"cupti_api_version": {api}{extra}}}"#));
    m.feed(&events);
    m
}

fn rate(usage: &str, book: &str) -> (gm_status, Option<String>) {
    let usage = c(usage);
    let book = c(book);
    let mut out: *mut c_char = sentinel();
    // SAFETY: NUL-terminated strings and a writable out-pointer.
    let s = unsafe { gm_rate_json(usage.as_ptr(), book.as_ptr(), &mut out) };
    if s == OK {
        (s, Some(take(out)))
    } else {
        assert_eq!(out, sentinel(), "out untouched on failure");
        (s, None)
    }
}

#[test]
fn bad_price_books_and_usage_are_refused() {
    let m = smoke_meter("");
    let usage = m.usage();
    let (s, _) = rate(&usage, "schema = ");
    expect_err(s, gm_status_code::GM_ERR_PRICE_BOOK, "price_book_toml");
    let (s, _) = rate(&usage, &BOOK.replace("0.026515", "-1"));
    expect_err(s, gm_status_code::GM_ERR_PRICE_BOOK, "unit_price");
    let (s, _) = rate("{", BOOK);
    expect_err(s, gm_status_code::GM_ERR_USAGE_JSON, "usage_json");
    let (s, _) = rate("{}", BOOK);
    expect_err(s, gm_status_code::GM_ERR_USAGE_JSON, "usage_json");
    // Tampered: one quantity changed, the digest left as it was.
    let mut v: serde_json::Value = serde_json::from_str(&usage).expect("JSON");
    let q = &mut v["usage"][0]["quantity"];
    let n: u128 = q.as_str().expect("a decimal string").parse().expect("u128");
    *q = serde_json::Value::String((n + 1).to_string());
    let tampered = serde_json::to_string(&v).expect("JSON");
    let (s, _) = rate(&tampered, BOOK);
    expect_err(s, gm_status_code::GM_ERR_USAGE_JSON, "sha256");
    // Untampered, it rates.
    let (s, doc) = rate(&usage, BOOK);
    expect_ok(s);
    assert!(doc.is_some());
    // A snapshot says it is incomplete; a drained report that it is complete.
    assert_eq!(report(&usage).complete, Some(false));
    assert_eq!(report(&m.drain(u64::MAX)).complete, Some(true));
    // One row listed twice, totals and digest made to match: refused by the readers' checks,
    // naming the row (issue 30 item 11; before, both rows were rated: one hour billed twice).
    let mut twice = report(&usage);
    let again = twice.usage[0].clone();
    twice.usage.push(again);
    twice.seal_with_totals().expect("seal");
    let n = twice.usage.len() - 1;
    let (s, _) = rate(&serde_json::to_string(&twice).expect("JSON"), BOOK);
    expect_err(
        s,
        gm_status_code::GM_ERR_USAGE_JSON,
        &format!("usage_json: usage[{n}] has the tenant, device, window and meter of usage[0]"),
    );
}

/// Every prefix of `buf` that ends inside a record fails with GM_ERR_DECODE and leaves the
/// meter as it was; every prefix that ends on a record boundary (or in the zero tail) meters.
fn check_truncations(api: ApiVersion, buf: &[u8], what: &str) {
    let decoded = decode(buf, api).expect("the whole buffer decodes");
    assert!(decoded.records.len() > 1, "{what}: several records");
    let mut ends: Vec<usize> = vec![0];
    ends.extend(decoded.records.iter().map(|r| r.offset + r.size));
    let records_end = *ends.last().expect("records");
    let config = format!(r#"{{"cupti_api_version": {}}}"#, api.cupti_api_version());
    let m = M::new(&config);
    // A meter with something in it: the whole buffer once.
    expect_ok(m.ingest(buf));
    let before = m.usage();
    let mut cut = 0;
    for len in 0..=buf.len() {
        let prefix = &buf[..len];
        if ends.contains(&len) || len >= records_end {
            let scratch = M::new(&config);
            expect_ok(scratch.ingest(prefix));
            continue;
        }
        // A copy of exactly the prefix, so that a read past it would be caught by the
        // allocator's bounds (and Miri/ASan), not land on the rest of `buf`.
        let exact = prefix.to_vec();
        let s = m.ingest(&exact);
        expect_err(s, gm_status_code::GM_ERR_DECODE, "buffer");
        cut += 1;
    }
    assert!(cut > 0);
    assert_eq!(
        m.usage(),
        before,
        "{what}: failed buffers changed the meter"
    );
}

#[test]
fn truncated_buffers_fail_and_change_nothing() {
    for api in [26, 130_001, 130_401] {
        let (api_v, buf) = crafted(api);
        check_truncations(api_v, &buf, &format!("crafted_{api}"));
    }
    // The first records of a real buffer (every prefix of a whole one would take minutes).
    let (api, events) = smoke();
    let api = ApiVersion::from_cupti(api).expect("api");
    let buf = events.iter().find_map(Event::buffer).expect("a buffer");
    let d = decode(buf, api).expect("decodes");
    let n = d.records.len().min(40);
    let end = d.records[n - 1].offset + d.records[n - 1].size;
    check_truncations(api, &buf[..end], "smoke's first buffer");
}

#[test]
fn odd_alignments_meter_as_aligned() {
    let (api, events) = smoke();
    let config = format!(r#"{{"cupti_api_version": {api}, "window_seconds": 1}}"#);
    let mut want = None;
    for offset in 0..8 {
        let m = M::new(&config);
        for e in &events {
            match e.buffer() {
                Some(b) => {
                    // The buffer at `offset` bytes past an 8-aligned address.
                    let mut store = vec![0u64; b.len() / 8 + 2];
                    // SAFETY: `store` holds `(b.len() / 8 + 2) * 8 >= b.len() + 8` bytes.
                    let bytes: &mut [u8] = unsafe {
                        std::slice::from_raw_parts_mut(store.as_mut_ptr().cast(), store.len() * 8)
                    };
                    bytes[offset..offset + b.len()].copy_from_slice(b);
                    expect_ok(m.ingest(&bytes[offset..offset + b.len()]));
                }
                None => m.event(e),
            }
        }
        let got = m.usage();
        match &want {
            None => {
                assert!(!report(&got).usage.is_empty());
                want = Some(got);
            }
            // Each meter is a stream of its own (its source digest), the rest is equal.
            Some(w) => assert_eq!(
                without_identity(&got),
                without_identity(w),
                "offset {offset}"
            ),
        }
    }
}

#[test]
fn last_error_message_rules() {
    // A message with multi-byte characters: the unknown key is quoted in it.
    let config = c(r#"{"ééééé": 1}"#);
    let mut out: *mut gm_meter = sentinel();
    // SAFETY: a NUL-terminated config and a writable out-pointer.
    let s = unsafe { gm_meter_new(config.as_ptr(), &mut out) };
    assert_eq!(s, gm_status_code::GM_ERR_INVALID_CONFIG as gm_status);
    let full = last_error();
    assert!(full.contains("ééééé"), "{full}");
    // (NULL, 0) asks the length; a buffer of len 0 is not written.
    // SAFETY: (NULL, 0).
    assert_eq!(unsafe { gm_last_error_message(null_mut(), 0) }, full.len());
    let mut one = [0x55u8; 1];
    // SAFETY: a zero length: nothing is written.
    assert_eq!(
        unsafe { gm_last_error_message(one.as_mut_ptr().cast(), 0) },
        full.len()
    );
    assert_eq!(one, [0x55]);
    // SAFETY: one writable byte: just the NUL.
    assert_eq!(
        unsafe { gm_last_error_message(one.as_mut_ptr().cast(), 1) },
        full.len()
    );
    assert_eq!(one, [0]);
    // Every buffer size: the longest prefix on a char boundary that fits, then a NUL.
    let first_e = full.find('é').expect("é");
    for len in 1..=full.len() + 3 {
        let mut buf = vec![0x55u8; len + 4];
        // SAFETY: `len` writable bytes (of `len + 4`).
        let n = unsafe { gm_last_error_message(buf.as_mut_ptr().cast(), len) };
        assert_eq!(n, full.len(), "always the full length");
        let mut want = (len - 1).min(full.len());
        while !full.is_char_boundary(want) {
            want -= 1;
        }
        assert_eq!(&buf[..want], &full.as_bytes()[..want], "len {len}");
        assert_eq!(buf[want], 0, "len {len}: NUL after the copied part");
        assert!(
            buf[want + 1..].iter().all(|&b| b == 0x55) || want + 1 > len,
            "len {len}: nothing written past the NUL"
        );
        assert!(
            buf[len..].iter().all(|&b| b == 0x55),
            "len {len}: nothing past len"
        );
        std::str::from_utf8(&buf[..want]).expect("a char boundary");
    }
    // The cut inside the first é: one byte of it would fit, none is copied.
    let mut buf = vec![0x55u8; first_e + 2];
    // SAFETY: `first_e + 2` writable bytes.
    unsafe { gm_last_error_message(buf.as_mut_ptr().cast(), first_e + 2) };
    assert_eq!(buf[first_e], 0);
    // Successful calls leave it unchanged.
    let m = M::new("{}");
    expect_ok(m.ingest(&[]));
    let _ = m.usage();
    let _ = gm_abi_version();
    assert_eq!(last_error(), full);
    // A later failure replaces it.
    // SAFETY: NULL meter: refused.
    let s = unsafe { gm_meter_report_dropped(null_mut(), 0, 1) };
    expect_err(s, gm_status_code::GM_ERR_NULL_ARGUMENT, "meter is NULL");
}

#[test]
fn last_error_is_per_thread() {
    // SAFETY: NULL meter: refused.
    let s = unsafe { gm_meter_report_dropped(null_mut(), 0, 1) };
    expect_err(s, gm_status_code::GM_ERR_NULL_ARGUMENT, "meter");
    let mine = last_error();
    std::thread::spawn(|| {
        assert_eq!(last_error(), "", "a new thread has no last error");
        let bad = c("{");
        let mut out = null_mut();
        // SAFETY: a NUL-terminated config and a writable out-pointer.
        let s = unsafe { gm_meter_new(bad.as_ptr(), &mut out) };
        expect_err(s, gm_status_code::GM_ERR_INVALID_CONFIG, "config_json");
    })
    .join()
    .expect("thread");
    assert_eq!(last_error(), mine, "another thread's failure is its own");
}

#[test]
fn eight_threads_ingesting_at_once_equal_one_thread() {
    let (api, events) = smoke();
    // A horizon of a day: buffers may come in any order without being late.
    let config = format!(r#"{{"cupti_api_version": {api}, "reorder_horizon_ns": 86400000000000}}"#);
    let one = M::new(&config);
    one.feed(&events);
    let many = M::new(&config);
    let (setup, rest): (Vec<&Event>, Vec<&Event>) = events
        .iter()
        .partition(|e| matches!(e, Event::Device { .. }));
    for e in setup {
        many.event(e);
    }
    let buffers: Vec<&[u8]> = rest.iter().filter_map(|e| e.buffer()).collect();
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(b) = buffers.get(i) else { break };
                expect_ok(many.ingest(b));
                if i.is_multiple_of(5) {
                    // Snapshots and watermarks at the same time change nothing.
                    let _ = many.watermark();
                    let _ = many.usage();
                }
            });
        }
    });
    for e in rest.iter().filter(|e| e.buffer().is_none()) {
        many.event(e);
    }
    let a = report(&one.usage());
    let b = report(&many.usage());
    assert!(!a.usage.is_empty());
    assert_eq!(rows(&b), rows(&a));
    assert_eq!(b.records, a.records);
    assert_eq!(b.totals, a.totals);
    assert_eq!(b.loss, a.loss);
}

/// The replayable recordings of `examples/data` (one H200, CUDA 13.0, made minutes apart;
/// the instrumented ones are refused by `gm_recording_open`) one after the other, in time
/// order, as one agent would have seen them.
fn session() -> (u32, Vec<Event>) {
    let mut all = Vec::new();
    for name in ["h200-cuda13-smoke.gmr", "h200-cuda13-green-context.gmr"] {
        let (api, events) = pieces(&root().join("examples/data").join(name));
        assert_eq!(api, 130_001);
        all.extend(events);
    }
    (130_001, all)
}

#[test]
fn drain_then_snapshot_never_double_counts() {
    let (api, events) = session();
    // 1 s windows and a short horizon, so the watermark moves while buffers come.
    let config = format!(
        r#"{{"cupti_api_version": {api}, "window_seconds": 1, "reorder_horizon_ns": 10000000}}"#
    );
    let whole = M::new(&config);
    whole.feed(&events);
    let want = rows(&report(&whole.usage()));
    let windows: std::collections::BTreeSet<&String> = want.keys().map(|k| &k.2).collect();
    assert!(windows.len() > 1, "several windows: {windows:?}");

    let drained = M::new(&config);
    let mut got: BTreeMap<RowKey, u128> = BTreeMap::new();
    let mut reports = 0;
    let mut nonempty = 0;
    let mut merge = |json: &str, got: &mut BTreeMap<RowKey, u128>| {
        let r = report(json);
        assert!(r.verify_digest(), "a drained report is sealed");
        reports += 1;
        if !r.usage.is_empty() {
            nonempty += 1;
        }
        for (k, q) in rows(&r) {
            assert!(
                got.insert(k.clone(), q).is_none(),
                "{k:?} is in two reports"
            );
        }
    };
    let mut last_edge = 0;
    for (i, e) in events.iter().enumerate() {
        drained.event(e);
        if i % 3 == 2 {
            let w = drained.watermark();
            assert!(w >= last_edge, "the watermark never goes back");
            // The watermark itself, then a second drain at the same edge (hands nothing more).
            merge(&drained.drain(w), &mut got);
            merge(&drained.drain(w), &mut got);
            last_edge = w;
        }
    }
    let w = drained.watermark();
    merge(&drained.drain(w), &mut got);
    // Then a snapshot: what was drained is not in it.
    let snap = drained.usage();
    merge(&snap, &mut got);
    assert!(
        nonempty >= 2,
        "drains handed over usage ({nonempty} of {reports})"
    );
    assert_eq!(got, want, "drained + snapshot = never drained");
    // The snapshot changed nothing: a final drain of everything gives the same rows.
    let rest = rows(&report(&drained.drain(u64::MAX)));
    assert_eq!(rest, rows(&report(&snap)));
    assert!(report(&drained.usage()).usage.is_empty());
}

/// Issue 30 item 19: the drain of everything (`UINT64_MAX`) hands over the last window before
/// the end of time too (its end is past `u64::MAX`): what a snapshot shows, with no loss.
#[test]
fn draining_everything_keeps_the_last_window_before_the_end_of_time() {
    // 20 kernels, one a second, from 100 s before the end of u64 time: inside the last hourly
    // window, which starts 2 073.7 s before it.
    let buffers = gpumeter_synth::buffers(&gpumeter_synth::SynthConfig {
        kernels: 20,
        devices: 1,
        kernels_per_second: 1,
        start_ns: u64::MAX - 100_000_000_000,
        kernels_per_buffer: 5,
        external_correlation: false,
        api_records: false,
        ..gpumeter_synth::SynthConfig::default()
    })
    .expect("the workload generates");
    for window_seconds in [3600, 60, 1] {
        let m = M::new(&format!(
            r#"{{"cupti_api_version": 26, "window_seconds": {window_seconds}}}"#
        ));
        for b in &buffers {
            expect_ok(m.ingest(b));
        }
        let snap = report(&m.usage());
        assert!(!snap.usage.is_empty(), "{window_seconds} s: usage");
        let all = report(&m.drain(u64::MAX));
        assert_eq!(
            rows(&all),
            rows(&snap),
            "{window_seconds} s: the drain of everything is the snapshot"
        );
        assert!(all.loss.is_empty(), "{window_seconds} s: {:?}", all.loss);
        assert_eq!(all.records, snap.records, "{window_seconds} s");
        // Nothing is left, and nothing can come: a later record is late.
        assert!(report(&m.usage()).usage.is_empty(), "{window_seconds} s");
    }
}

#[test]
fn rate_json_equals_preview() {
    let m = smoke_meter("");
    let usage = m.usage();
    let (s, doc) = rate(&usage, BOOK);
    expect_ok(s);
    let got: serde_json::Value =
        serde_json::from_str(&doc.expect("a document")).expect("invoice JSON");
    let book = gpumeter::PriceBook::from_toml_str("book", BOOK).expect("book");
    let want = gpumeter::preview(&report(&usage), &book, None).expect("preview");
    let want = serde_json::to_value(&want).expect("JSON");
    assert_eq!(got, want);
    let invoices = got["invoices"].as_array().expect("invoices");
    assert!(!invoices.is_empty(), "the H200 is priced: {got}");
}

#[test]
fn tenant_rules_change_attribution_in_the_next_snapshot() {
    let (api, events) = smoke();
    let m = M::new(&format!(r#"{{"cupti_api_version": {api}}}"#));
    m.feed(&events);
    let per_tenant = |r: &UsageReport| {
        let mut t: BTreeMap<String, u128> = BTreeMap::new();
        for u in &r.usage {
            *t.entry(u.tenant.clone()).or_default() += u.quantity.0;
        }
        t
    };
    let per_meter = |r: &UsageReport| {
        let mut t: BTreeMap<String, u128> = BTreeMap::new();
        for u in &r.usage {
            *t.entry(u.meter.as_str().to_string()).or_default() += u.quantity.0;
        }
        t
    };
    let before = report(&m.usage());
    assert_eq!(
        per_tenant(&before).keys().collect::<Vec<_>>(),
        ["unattributed"]
    );
    // The process ids the records carry (API records joined, or the recording's).
    let api_v = ApiVersion::from_cupti(api).expect("api");
    let mut pids = std::collections::BTreeSet::new();
    let mut externals = std::collections::BTreeSet::new();
    for b in events.iter().filter_map(Event::buffer) {
        for r in decode(b, api_v).expect("decodes").records {
            match r.record {
                Record::Api(a) => {
                    pids.insert(a.process_id);
                }
                Record::ExternalCorrelation(x) if (3..=5).contains(&x.external_kind) => {
                    externals.insert(x.external_id);
                }
                _ => {}
            }
        }
    }
    let pid = *pids.iter().next().expect("an API record");
    let alice = c("alice");
    // SAFETY: a live meter and a NUL-terminated tenant.
    expect_ok(unsafe { gm_meter_set_tenant_for_pid(m.0, pid, alice.as_ptr()) });
    let after = report(&m.usage());
    assert!(
        per_tenant(&after).contains_key("alice"),
        "{:?}",
        per_tenant(&after)
    );
    assert_eq!(
        per_meter(&after),
        per_meter(&before),
        "nothing created or lost"
    );
    // A later rule for the same pid replaces it.
    let bob = c("bob");
    // SAFETY: as above.
    expect_ok(unsafe { gm_meter_set_tenant_for_pid(m.0, pid, bob.as_ptr()) });
    let t = per_tenant(&report(&m.usage()));
    assert!(t.contains_key("bob") && !t.contains_key("alice"), "{t:?}");
    // External ids win over pids.
    if let Some(&x) = externals.iter().next() {
        let carol = c("carol");
        // SAFETY: as above.
        expect_ok(unsafe { gm_meter_set_tenant_for_external_id(m.0, x, carol.as_ptr()) });
        let r = report(&m.usage());
        assert!(per_tenant(&r).contains_key("carol"), "{:?}", per_tenant(&r));
        assert_eq!(per_meter(&r), per_meter(&before));
    } else {
        // The crafted buffer has an EXTERNAL_CORRELATION record.
        let (api_v, buf) = crafted(26);
        let mut x = None;
        for r in decode(&buf, api_v).expect("decodes").records {
            if let Record::ExternalCorrelation(e) = r.record {
                if (3..=5).contains(&e.external_kind) {
                    x = Some(e.external_id);
                }
            }
        }
        let x = x.expect("an external id in the crafted buffer");
        let m2 = M::new("{}");
        expect_ok(m2.ingest(&buf));
        let carol = c("carol");
        // SAFETY: as above.
        expect_ok(unsafe { gm_meter_set_tenant_for_external_id(m2.0, x, carol.as_ptr()) });
        let r = report(&m2.usage());
        assert!(per_tenant(&r).contains_key("carol"), "{:?}", per_tenant(&r));
    }
}

#[test]
fn invalid_tenant_names_are_refused() {
    let m = M::new("{}");
    for name in ["", " ", "idle", "IDLE", "a\u{7}b", "tab\there", " lead"] {
        let t = c(name);
        // SAFETY: a live meter and a NUL-terminated tenant.
        let s = unsafe { gm_meter_set_tenant_for_pid(m.0, 1, t.as_ptr()) };
        expect_err(s, gm_status_code::GM_ERR_INVALID_ARGUMENT, "tenant");
        // SAFETY: as above.
        let s = unsafe { gm_meter_set_tenant_for_external_id(m.0, 1, t.as_ptr()) };
        expect_err(s, gm_status_code::GM_ERR_INVALID_ARGUMENT, "tenant");
    }
    // An empty UUID is refused as well.
    let empty = c(" ");
    let info = gm_device_info {
        uuid: empty.as_ptr(),
        ..gm_device_info::new(0)
    };
    // SAFETY: a live meter and a readable description.
    let s = unsafe { gm_meter_register_device(m.0, &info) };
    expect_err(s, gm_status_code::GM_ERR_INVALID_ARGUMENT, "uuid");
}

/// Issue 30 item 17: `gm_device_info` and `gm_recording_item` start with their size, which
/// the caller sets: not set or too small is refused (nothing read or written); a newer
/// program's larger struct is accepted when the fields this library does not know are unset,
/// and an output's extra bytes are zeroed.
#[test]
fn sized_structs_are_checked_and_can_grow() {
    const INVALID: gm_status_code = gm_status_code::GM_ERR_INVALID_ARGUMENT;
    let m = M::new("{}");
    let uuid = c("GPU-11111111-2222-3333-4444-555555555555");
    let name = c("Newer GPU");
    let register = |info: *const gm_device_info| {
        // SAFETY: a live meter and a description of `struct_size` readable bytes.
        unsafe { gm_meter_register_device(m.0, info) }
    };
    let ours = std::mem::size_of::<gm_device_info>();
    // Not set, too small, and far more than any version (a struct never zeroed): refused
    // before anything past the size field is read.
    for size in [0, 8, ours - 1, 4097, 1 << 40, usize::MAX] {
        let info = gm_device_info {
            struct_size: size,
            uuid: uuid.as_ptr(),
            ..gm_device_info::new(0)
        };
        expect_err(register(&info), INVALID, "struct_size");
        assert!(last_error().contains(&format!("struct_size is {size}")));
    }
    #[repr(C)]
    struct Newer {
        info: gm_device_info,
        extra: u64,
    }
    let mut newer = Newer {
        info: gm_device_info {
            struct_size: std::mem::size_of::<Newer>(),
            name: name.as_ptr(),
            uuid: uuid.as_ptr(),
            ..gm_device_info::new(0)
        },
        extra: 7,
    };
    expect_err(
        register(std::ptr::from_ref(&newer).cast()),
        INVALID,
        "newer gpumeter.h",
    );
    assert!(report(&m.usage()).devices.is_empty(), "nothing registered");
    newer.extra = 0;
    expect_ok(register(std::ptr::from_ref(&newer).cast()));
    let (_, buf) = crafted(26);
    let m26 = M::new(r#"{"cupti_api_version": 26}"#);
    // SAFETY: as above, on the meter that reads the crafted buffer (device 0).
    expect_ok(unsafe { gm_meter_register_device(m26.0, std::ptr::from_ref(&newer).cast()) });
    expect_ok(m26.ingest(&buf));
    let devices = report(&m26.usage()).devices;
    assert!(
        devices
            .iter()
            .any(|d| d.name.as_deref() == Some("Newer GPU")),
        "the description was read: {devices:?}"
    );

    // The recording's items.
    let path = c(smoke_path().to_str().expect("UTF-8"));
    let mut rec = null_mut();
    // SAFETY: a NUL-terminated path and a writable out-pointer.
    expect_ok(unsafe { gm_recording_open(path.as_ptr(), 0, &mut rec) });
    let mut item = gm_recording_item {
        struct_size: 0,
        kind: 0xffff,
        ..gm_recording_item::new()
    };
    // SAFETY: a live recording and an item (too small a size: nothing is written).
    expect_err(
        unsafe { gm_recording_next(rec, &mut item) },
        INVALID,
        "item->struct_size",
    );
    assert_eq!((item.struct_size, item.kind), (0, 0xffff), "untouched");
    #[repr(C)]
    struct NewerItem {
        item: gm_recording_item,
        extra: [u8; 24],
    }
    let mut newer = NewerItem {
        item: gm_recording_item {
            struct_size: std::mem::size_of::<NewerItem>(),
            ..gm_recording_item::new()
        },
        extra: [0xa5; 24],
    };
    // SAFETY: a live recording and an item of `struct_size` writable bytes.
    expect_ok(unsafe { gm_recording_next(rec, std::ptr::from_mut(&mut newer).cast()) });
    assert_eq!(
        newer.item.struct_size,
        std::mem::size_of::<NewerItem>(),
        "kept"
    );
    assert_eq!(
        newer.extra, [0; 24],
        "the fields this library does not know: unset"
    );
    assert_eq!(
        newer.item.kind,
        gm_recording_item_kind::GM_ITEM_DEVICE as u32
    );
    // SAFETY: the recording's device, alive until the next call.
    let d = unsafe { &*newer.item.device };
    assert_eq!(d.struct_size, ours);
    // It goes to the meter as it is.
    let fresh = M::new("{}");
    // SAFETY: a live meter and the recording's device.
    expect_ok(unsafe { gm_meter_register_device(fresh.0, newer.item.device) });
    // SAFETY: the recording from `gm_recording_open`, freed once.
    unsafe { gm_recording_free(rec) };
}

/// Issue 30 item 19: one UUID is one device. A second device id described with a UUID the
/// meter knows (from a description or a DEVICE record, in any spelling) is refused, so the
/// two GPUs are never metered as one (one's usage lost against the other's).
#[test]
fn a_second_device_with_one_uuid_is_refused() {
    const INVALID: gm_status_code = gm_status_code::GM_ERR_INVALID_ARGUMENT;
    let m = M::new(r#"{"cupti_api_version": 26}"#);
    let register = |id: u32, uuid: &CString| {
        let info = gm_device_info {
            uuid: uuid.as_ptr(),
            ..gm_device_info::new(id)
        };
        // SAFETY: a live meter and a description whose strings live for the call.
        unsafe { gm_meter_register_device(m.0, &info) }
    };
    let a = c("GPU-aaaaaaaa-0000-0000-0000-000000000001");
    let bare = c("aaaaaaaa-0000-0000-0000-000000000001");
    let b = c("GPU-bbbbbbbb-0000-0000-0000-000000000002");
    expect_ok(register(0, &a));
    expect_ok(register(0, &a)); // the same device again
    expect_ok(register(0, &bare)); // its other spelling
    expect_err(register(1, &a), INVALID, "device 1: UUID GPU-aaaaaaaa");
    assert!(last_error().contains("device 0's"), "{}", last_error());
    expect_err(register(1, &bare), INVALID, "device 0's");
    expect_ok(register(1, &b));
    // The crafted buffer's DEVICE record (device 0) has a UUID of its own: once seen, it is
    // device 0's.
    let (_, buf) = crafted(26);
    let fresh = M::new(r#"{"cupti_api_version": 26}"#);
    expect_ok(fresh.ingest(&buf));
    let key = report(&fresh.usage()).devices[0].device_key.clone();
    let record_uuid = c(&key);
    let info = gm_device_info {
        uuid: record_uuid.as_ptr(),
        ..gm_device_info::new(7)
    };
    // SAFETY: a live meter and a description whose strings live for the call.
    let s = unsafe { gm_meter_register_device(fresh.0, &info) };
    expect_err(s, INVALID, "device 0's");
    let devices = report(&fresh.usage()).devices;
    assert_eq!(devices.len(), 1, "nothing registered: {devices:?}");
}

/// Hostile review of issue 30, finding 6: one UUID in another spelling (hex in upper case, no
/// prefix, a lower-case `gpu-` prefix) is one device. Buffers without DEVICE records, so the
/// descriptions name the devices: a second device id described with another spelling of
/// device 0's UUID is refused, device 0 described again in it is the same device, and its key
/// is `GPU-` and lower-case hex (as CUPTI and `nvidia-smi -L` print it) whatever the spelling.
/// Before, each spelling keyed a device of its own (`gpu-…` even became `GPU-gpu-…`), so one
/// GPU could be metered, and billed, twice.
#[test]
fn one_uuid_in_any_spelling_is_one_device() {
    const INVALID: gm_status_code = gm_status_code::GM_ERR_INVALID_ARGUMENT;
    let api = ApiVersion::from_cupti(26).expect("api");
    let buffers: Vec<Vec<u8>> = gpumeter_synth::buffers(&gpumeter_synth::SynthConfig {
        kernels: 40,
        devices: 2,
        kernels_per_second: 1,
        start_ns: 1_700_000_000_000_000_000,
        kernels_per_buffer: 5,
        external_correlation: false,
        api_records: false,
        ..gpumeter_synth::SynthConfig::default()
    })
    .expect("the workload generates")
    .into_iter()
    .map(|b| {
        let d = decode(&b, api).expect("decodes");
        let mut out = Vec::new();
        for r in &d.records {
            if !matches!(r.record, Record::Device(_)) {
                out.extend_from_slice(&b[r.offset..r.offset + r.size]);
            }
        }
        out
    })
    .collect();
    let canonical = "GPU-aaaaaaaa-0000-0000-0000-00000000000a";
    let other = "GPU-bbbbbbbb-0000-0000-0000-00000000000b";
    for (first, second) in [
        (canonical, "GPU-AAAAAAAA-0000-0000-0000-00000000000A"),
        (canonical, "AAAAAAAA-0000-0000-0000-00000000000A"),
        (
            "aaaaaaaa-0000-0000-0000-00000000000a",
            "gpu-aaaaaaaa-0000-0000-0000-00000000000a",
        ),
        ("Gpu-AAAAaaaa-0000-0000-0000-00000000000a", canonical),
    ] {
        let m = M::new(r#"{"cupti_api_version": 26}"#);
        let register = |id: u32, uuid: &str| {
            let uuid = c(uuid);
            let info = gm_device_info {
                uuid: uuid.as_ptr(),
                sm_count: 132,
                ..gm_device_info::new(id)
            };
            // SAFETY: a live meter and a description whose strings live for the call.
            unsafe { gm_meter_register_device(m.0, &info) }
        };
        expect_ok(register(0, first));
        expect_err(register(1, second), INVALID, "device 0's");
        expect_ok(register(0, second)); // device 0 again, in its other spelling
        expect_ok(register(1, other));
        for b in &buffers {
            expect_ok(m.ingest(b));
        }
        let r = report(&m.drain(u64::MAX));
        let keys: Vec<(u32, &str)> = r
            .devices
            .iter()
            .map(|d| (d.device, d.device_key.as_str()))
            .collect();
        assert_eq!(keys, [(0, canonical), (1, other)], "{first} then {second}");
        assert!(r
            .usage
            .iter()
            .all(|u| u.device_key == canonical || u.device_key == other));
        if let Err(e) = r.check() {
            panic!("{first} then {second}: {e}");
        }
    }
}
