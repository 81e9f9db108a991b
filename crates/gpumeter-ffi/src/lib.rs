//! # gpumeter-ffi
//!
//! gpumeter's C ABI, for node agents written in C, C++, Go or Python that own a
//! CUPTI subscription: hand each completed activity buffer to a `gm_meter`, read usage as
//! `gpumeter.usage/v1` JSON (a snapshot, or drained window by window), rate it with a price
//! book, and keep the credit bank. The header is `bindings/c/gpumeter.h`, generated from this
//! crate by cbindgen (`bindings/c/cbindgen.toml`); the libraries, `libgpumeter_ffi.so.1` and
//! `libgpumeter_ffi.a`, are made from this crate's staticlib by `scripts/build-c-abi`, which
//! leaves only the `gm_*` functions global (docs/C_ABI.md, "Installing").
//!
//! ```c
//! gm_meter *m = NULL;
//! if (gm_abi_version() != GM_ABI_VERSION) abort();
//! if (gm_meter_new("{\"window_seconds\": 60, \"cupti_api_version\": 26}", &m) != GM_OK) {
//!   char msg[512]; gm_last_error_message(msg, sizeof msg); fprintf(stderr, "%s\n", msg);
//! }
//! // in CUPTI's buffer-completed callback:
//! gm_meter_ingest_cupti_buffer(m, buffer, valid_size);
//! // now and then:
//! char *usage = NULL;
//! uint64_t closed = 0;
//! gm_meter_watermark_ns(m, &closed);
//! if (gm_meter_drain_usage_json(m, closed, &usage) == GM_OK) { send(usage); gm_string_free(usage); }
//! gm_meter_free(m);
//! ```
//!
//! Conventions (docs/C_ABI.md, "Conventions"): every fallible function returns a `gm_status`
//! (`GM_OK` = 0) and writes its outputs only on success; `gm_last_error_message` gives this
//! thread's last failure; every exported body runs inside one panic boundary (a panic becomes
//! `GM_ERR_PANIC`, never an abort or unwinding into C); every pointer is checked for NULL;
//! `(NULL, 0)` is an empty buffer; buffers of any alignment are accepted; strings the library
//! returns are freed with `gm_string_free`; handles are freed with their `_free`, which
//! accepts NULL.
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![deny(missing_docs)]
// The C ABI is an FFI edge: `#[no_mangle]` and raw pointers. Every `unsafe` block says why it
// holds (`// SAFETY:`); pointer conversions live in `ffi.rs`.
#![allow(unsafe_code)]

mod bank;
mod ffi;
mod json;
mod meter;
mod rate;
mod recording;
mod status;

pub use bank::*;
pub use meter::*;
pub use rate::gm_rate_json;
pub use recording::*;
pub use status::{gm_status, gm_status_code};

/// The C ABI version of this library (`gm_abi_version`). It changes only when a function,
/// type or code changes meaning; additions keep it. 2: `gm_device_info` and
/// `gm_recording_item` start with `struct_size` (and `gm_recording_item.device` is a pointer);
/// the library has a SONAME (`libgpumeter_ffi.so.1`) and `GM_1` symbol versions.
pub const GM_ABI_VERSION: u32 = 2;
