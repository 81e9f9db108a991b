//! The C callbacks CUPTI calls: the subscriber callback (kernel launches and context events,
//! dispatched to instrumented mode, FLOP counting and PM sampling) and the activity-buffer
//! request and completion callbacks, with the calls that hand them to CUPTI.
//!
//! Every callback catches panics (none crosses into C) and reports them through the
//! [`Core`]; the request callback never returns a NULL buffer.

use std::ffi::{c_char, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use cupti_sys::{Cupti, CuptiError};

use super::completion::{Core, NameReader};
use super::event::{ApiCall, Event};
use super::ffi::{
    check, device_of, read_dropped, sym, table, CBID_CONTEXT_CREATED,
    CBID_CONTEXT_DESTROY_STARTING, DOMAIN_DRIVER_API, DOMAIN_RESOURCE, DOMAIN_RUNTIME_API,
};
use super::live::LIVE;
use super::pool::Lent;
use gpumeter_recording::gmr::DroppedRecords;

/// Size of the buffer handed out when even the pool failed (never expected): 1 MiB.
const EMERGENCY_WORDS: usize = 1 << 17;

/// What the instrumented mode needs of a `CUpti_CallbackData` (API domains), read from either
/// bindings' struct.
pub(crate) trait ApiCallbackData {
    /// The call as an [`ApiCall`].
    fn call(&self) -> ApiCall;
}

/// What the instrumented mode needs of a `CUpti_ResourceData`: the context, as an address.
pub(crate) trait ResourceCallbackData {
    /// The context the resource event concerns.
    fn context(&self) -> usize;
}

macro_rules! callback_data {
    ($b:ident) => {
        impl ApiCallbackData for cupti_sys::$b::CUpti_CallbackData {
            fn call(&self) -> ApiCall {
                let exit = self.callbackSite == cupti_sys::$b::CUPTI_API_EXIT;
                ApiCall {
                    enter: self.callbackSite == cupti_sys::$b::CUPTI_API_ENTER,
                    correlation_id: self.correlationId,
                    context: self.context as usize,
                    context_uid: self.contextUid,
                    graph: false,
                    failed: exit
                        && !self.functionReturnValue.is_null()
                        // SAFETY: in an exit callback CUPTI points `functionReturnValue` at
                        // the API function's return value (a `cudaError_t` or `CUresult`, C
                        // enums of `int` size), valid during the callback; it is only read.
                        && unsafe { self.functionReturnValue.cast::<i32>().read_unaligned() } != 0,
                }
            }
        }
        impl ResourceCallbackData for cupti_sys::$b::CUpti_ResourceData {
            fn context(&self) -> usize {
                self.context as usize
            }
        }
    };
}
callback_data!(v12_8);
callback_data!(v13_4);

/// The subscriber callback, generic over the bindings' `CUpti_CallbackData` (`A`) and
/// `CUpti_ResourceData` (`R`). Without instrumented mode no domain or callback id is enabled,
/// so CUPTI never calls it and the subscription only claims CUPTI's one subscriber slot (and
/// so detects another profiler). In instrumented mode CUPTI calls it around kernel launches
/// and when a context is being destroyed ([`super::sass`]); with PM sampling, when a context is
/// created or being destroyed ([`super::pmsampling`]). Catches every panic.
///
/// # Safety
/// Called by CUPTI: `cbdata` points to a `CUpti_CallbackData` for the API domains and to a
/// `CUpti_ResourceData` for the resource domain, valid during the call.
unsafe extern "C" fn on_callback<A: ApiCallbackData, R: ResourceCallbackData>(
    _: *mut c_void,
    domain: c_uint,
    cbid: u32,
    cbdata: *const c_void,
) {
    if cbdata.is_null() {
        return;
    }
    let event = match domain {
        DOMAIN_DRIVER_API | DOMAIN_RUNTIME_API => {
            // SAFETY: for the API domains CUPTI passes a `CUpti_CallbackData`, valid during
            // the call; it is read, never kept.
            let data = unsafe { &*cbdata.cast::<A>() };
            let mut call = data.call();
            call.graph = super::flops::is_graph_launch(domain, cbid);
            Event::Api(call)
        }
        DOMAIN_RESOURCE if cbid == CBID_CONTEXT_CREATED => {
            // SAFETY: for the resource domain CUPTI passes a `CUpti_ResourceData`, valid
            // during the call.
            let ctx = unsafe { &*cbdata.cast::<R>() }.context();
            let _ = catch_unwind(AssertUnwindSafe(|| pm_context_event(ctx, true)));
            let _ = catch_unwind(AssertUnwindSafe(|| flops_context_created(ctx)));
            return;
        }
        DOMAIN_RESOURCE if cbid == CBID_CONTEXT_DESTROY_STARTING => {
            // SAFETY: for the resource domain CUPTI passes a `CUpti_ResourceData`, valid
            // during the call.
            let data = unsafe { &*cbdata.cast::<R>() };
            let ctx = data.context();
            let _ = catch_unwind(AssertUnwindSafe(|| pm_context_event(ctx, false)));
            if super::flops::ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    super::flops::on_context_destroying(ctx)
                }));
            }
            Event::ContextDestroying(ctx)
        }
        _ => return,
    };
    let _ = catch_unwind(AssertUnwindSafe(|| super::sass::on_event(event)));
}

/// Tells PM sampling ([`super::pmsampling`]) that context `ctx` was created (`created`) or is
/// being destroyed. Called from CUPTI's resource callback, where `ctx` is live.
fn pm_context_event(ctx: usize, created: bool) {
    let Some(live) = LIVE.get() else {
        return;
    };
    if ctx == 0 {
        return;
    }
    // SAFETY: CUPTI passed `ctx` to the resource callback that is running: it is live (being
    // created, or not yet destroyed).
    let Ok(device) = (unsafe { device_of(live.cupti, ctx) }) else {
        return;
    };
    if created {
        super::pmsampling::on_context_created(device);
    } else {
        super::pmsampling::on_context_destroying(device);
    }
}

/// Tells FLOP counting ([`super::flops`]) that context `ctx` was created. Called from CUPTI's
/// resource callback, where `ctx` is live.
fn flops_context_created(ctx: usize) {
    if ctx == 0 || !super::flops::ACTIVE.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let Some(live) = LIVE.get() else {
        return;
    };
    // SAFETY: CUPTI passed `ctx` to the resource callback that is running: it is live.
    let Ok(device) = (unsafe { device_of(live.cupti, ctx) }) else {
        return;
    };
    super::flops::on_context_created(ctx, device);
}

/// `cuptiSubscribe` with [`on_callback`]; returns the handle as an address.
pub(crate) fn subscribe(cupti: &Cupti) -> Result<usize, CuptiError> {
    table!(cupti, t, b => {
        let f = sym(&t.cuptiSubscribe, "cuptiSubscribe")?;
        let mut handle: b::CUpti_SubscriberHandle = std::ptr::null_mut();
        let cb: unsafe extern "C" fn(*mut c_void, c_uint, u32, *const c_void) =
            on_callback::<b::CUpti_CallbackData, b::CUpti_ResourceData>;
        // SAFETY: `handle` is a valid out-pointer; `cb` has the `CUpti_CallbackFunc`
        // signature, reads `cbdata` as the bindings of this library declare it and never
        // unwinds; the NULL user data is never read.
        let rc = unsafe { f(&mut handle, Some(cb), std::ptr::null_mut()) };
        check(cupti, "cuptiSubscribe", rc).map(|()| handle as usize)
    })
}

/// `cuptiActivityRegisterCallbacks` with the collector's request and completion callbacks.
pub(crate) fn register_callbacks(cupti: &Cupti) -> Result<(), CuptiError> {
    table!(cupti, t, b => {
        let f = sym(&t.cuptiActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks")?;
        let req: unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize) = buffer_requested;
        let done: unsafe extern "C" fn(b::CUcontext, u32, *mut u8, usize, usize) =
            buffer_completed::<b::CUctx_st>;
        // SAFETY: both functions have the signatures CUPTI declares, catch every panic and
        // stay valid for the life of the process (they are part of this library, which a
        // process that loaded libcupti through it never unloads while CUPTI runs).
        let rc = unsafe { f(Some(req), Some(done)) };
        check(cupti, "cuptiActivityRegisterCallbacks", rc)
    })
}

/// Reads kernel and device names out of live CUPTI buffers.
///
/// A name pointer comes from a record decoded with gpumeter's layout tables; should a table
/// ever disagree with the libcupti in use, the "pointer" would be garbage, and dereferencing it
/// would crash the metered program. So names are read with `process_vm_readv` on this
/// process, which fails with `EFAULT` instead of faulting on an unmapped address (the name is
/// then missing from the recording, nothing else). Where the system call is not allowed
/// (`ENOSYS`, `EPERM`: some seccomp profiles), names are read directly.
pub(crate) struct LiveNames;

/// Longest name copied, in bytes (C++ template kernel names run to a few KiB).
const MAX_NAME: usize = 1 << 16;
/// Set once `process_vm_readv` turned out to be unavailable.
static DIRECT_READS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Copies up to `out.len()` bytes from `addr` of this process; `Err(errno)` when nothing could
/// be read.
fn read_own_memory(addr: usize, out: &mut [u8]) -> Result<usize, i32> {
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast::<c_void>(),
        iov_len: out.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: out.len(),
    };
    // SAFETY: `local` describes `out`, writable for its length; the kernel reads `remote`
    // through the page tables of this process and reports unmapped addresses as EFAULT rather
    // than faulting, so no Rust reference to that memory is created.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(n as usize)
    }
}

impl LiveNames {
    /// The NUL-terminated string at `addr`, read with `process_vm_readv`; `Err(errno)` when
    /// the system call is unavailable.
    fn checked(addr: usize) -> Result<Option<String>, i32> {
        let mut text: Vec<u8> = Vec::new();
        let mut chunk = [0u8; 256];
        while text.len() < MAX_NAME {
            // Never read across a page boundary in one call: a readable page followed by an
            // unmapped one must still yield the bytes before the gap.
            let at = addr.wrapping_add(text.len());
            let to_page_end = 4096 - (at % 4096);
            let want = chunk.len().min(to_page_end);
            let got = match read_own_memory(at, &mut chunk[..want]) {
                Ok(0) => return Ok(None),
                Ok(n) => n,
                Err(e) if e == libc::ENOSYS || e == libc::EPERM => return Err(e),
                Err(_) => return Ok(None),
            };
            let part = &chunk[..got];
            if let Some(nul) = part.iter().position(|&b| b == 0) {
                text.extend_from_slice(&part[..nul]);
                return Ok(Some(String::from_utf8_lossy(&text).into_owned()));
            }
            text.extend_from_slice(part);
        }
        Ok(None)
    }
}

impl NameReader for LiveNames {
    fn read(&self, ptr: u64) -> Option<String> {
        let addr = usize::try_from(ptr).ok().filter(|&a| a != 0)?;
        if !DIRECT_READS.load(std::sync::atomic::Ordering::Relaxed) {
            match LiveNames::checked(addr) {
                Ok(s) => return s,
                Err(_) => DIRECT_READS.store(true, std::sync::atomic::Ordering::Relaxed),
            }
        }
        // SAFETY: `LiveNames` is only used by `Core::complete` on a buffer CUPTI has just
        // completed and not yet got back, and `ptr` is the `name` field of one of its kernel
        // or device records. CUPTI documents these as NUL-terminated strings it owns that
        // stay valid at least while the buffer is live; the buffer was produced in this
        // process, so the pointer is of this address space.
        let s = unsafe { CStr::from_ptr(addr as *const c_char) };
        Some(s.to_string_lossy().into_owned())
    }
}

/// A zeroed buffer outside the pool, leaked: for a request that cannot be served otherwise.
/// Its completion is reported as unknown and it is never freed.
fn emergency_buffer() -> Lent {
    let b: &'static mut [u64] = Box::leak(vec![0u64; EMERGENCY_WORDS].into_boxed_slice());
    Lent {
        ptr: NonNull::new(b.as_mut_ptr().cast::<u8>()).unwrap_or(NonNull::dangling()),
        size: EMERGENCY_WORDS * 8,
    }
}

/// The body of the request callback, for a given core (testable without CUPTI). Writes a
/// non-NULL buffer, its size and `maxNumRecords = 0` (fill the buffer) to the out-pointers
/// that are not NULL.
///
/// # Safety
/// Each pointer is NULL or valid for a write of its type.
pub(crate) unsafe fn serve_request(
    core: Option<&Core>,
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
) {
    let lent = match core {
        Some(core) => {
            catch_unwind(AssertUnwindSafe(|| core.request())).unwrap_or_else(|_| emergency_buffer())
        }
        None => emergency_buffer(),
    };
    // SAFETY: by the caller's contract each non-NULL pointer is valid for a write.
    unsafe {
        if !buffer.is_null() {
            *buffer = lent.ptr.as_ptr();
        }
        if !size.is_null() {
            *size = lent.size;
        }
        if !max_records.is_null() {
            *max_records = 0;
        }
    }
}

/// The body of the completion callback, for a given core: the dropped count is read through
/// `read_dropped` first, outside every lock of the core.
pub(crate) fn serve_completion(
    core: &Core,
    read_dropped: impl FnOnce() -> Result<Option<DroppedRecords>, String>,
    buffer: *mut u8,
    valid: usize,
    names: &dyn NameReader,
) {
    let dropped = catch_unwind(AssertUnwindSafe(read_dropped)).unwrap_or_else(|p| {
        Err(format!(
            "panic while reading the dropped-record count: {}",
            super::completion::panic_message(p.as_ref())
        ))
    });
    if let Err(p) = catch_unwind(AssertUnwindSafe(|| {
        core.complete(buffer, valid, dropped, names);
    })) {
        core.panicked("an activity-buffer completion", p.as_ref());
    }
}

/// CUPTI's buffer-request callback (`CUpti_BuffersCallbackRequestFunc`).
///
/// # Safety
/// Called by CUPTI with valid out-pointers.
unsafe extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max: *mut usize) {
    let core = LIVE.get().map(|l| &l.core);
    // SAFETY: CUPTI passes valid out-pointers (NULL ones are skipped).
    unsafe { serve_request(core, buffer, size, max) };
}

/// CUPTI's buffer-completed callback (`CUpti_BuffersCallbackCompleteFunc`); generic over the
/// bindings' context type so one body serves every CUPTI version. The context and stream
/// arguments are ignored (see [`read_dropped`]); so is the size (the pool knows it).
///
/// # Safety
/// Called by CUPTI with a buffer the request callback handed out and its valid size.
unsafe extern "C" fn buffer_completed<C>(
    _ctx: *mut C,
    _stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(live) = LIVE.get() else {
            // Not ours to free: leaked (cannot happen: callbacks are registered after LIVE).
            return;
        };
        serve_completion(
            &live.core,
            || read_dropped(live.cupti).map_err(|e| e.to_string()),
            buffer,
            valid,
            &LiveNames,
        );
    }));
}
