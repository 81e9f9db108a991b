//! The C side of the collector: the callbacks CUPTI calls, the CUPTI functions `cupti-sys`
//! has no safe wrapper for, and the few libc / CUDA driver queries the header needs.
//!
//! Every callback catches panics (none crosses into C) and reports them through the
//! [`Core`]; the request callback never returns a NULL buffer.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use cupti_sys::{Bindings, Cupti, CuptiError};

use super::completion::{Core, NameReader};
use super::pool::Lent;
use super::LIVE;
use gpumeter_recording::gmr::{DroppedRecords, GmrDevice};

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`, the same in every CUPTI version.
pub(crate) const FLUSH_FORCED: u32 = 1;
/// `CUPTI_SUCCESS`.
const SUCCESS: u32 = 0;

/// Size of the buffer handed out when even the pool failed (never expected): 1 MiB.
const EMERGENCY_WORDS: usize = 1 << 17;

/// Runs `$body` with `$t` bound to the generated function table of `$cupti` and `$b` to its
/// bindings module.
macro_rules! table {
    ($cupti:expr, $t:ident, $b:ident => $body:expr) => {
        match $cupti.bindings() {
            Bindings::V12_8($t) => {
                #[allow(unused_imports)]
                use cupti_sys::v12_8 as $b;
                $body
            }
            Bindings::V13_4($t) => {
                #[allow(unused_imports)]
                use cupti_sys::v13_4 as $b;
                $body
            }
            other => Err(CuptiError::MissingSymbol {
                name: format!("a function table for {other:?}, which this build does not drive"),
            }),
        }
    };
}

/// The one path from a generated table's field to a callable function.
fn sym<T: Copy>(field: &Result<T, libloading::Error>, name: &'static str) -> Result<T, CuptiError> {
    field
        .as_ref()
        .map(|f| *f)
        .map_err(|_| CuptiError::MissingSymbol {
            name: name.to_string(),
        })
}

fn check(cupti: &Cupti, function: &'static str, rc: u32) -> Result<(), CuptiError> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(cupti.api_error(function, rc))
    }
}

/// What the instrumented mode needs of a `CUpti_CallbackData` (API domains), read from either
/// bindings' struct.
pub(crate) trait ApiCallbackData {
    /// The call as [`super::sass::ApiCall`].
    fn call(&self) -> super::sass::ApiCall;
}

/// What the instrumented mode needs of a `CUpti_ResourceData`: the context, as an address.
pub(crate) trait ResourceCallbackData {
    /// The context the resource event concerns.
    fn context(&self) -> usize;
}

macro_rules! callback_data {
    ($b:ident) => {
        impl ApiCallbackData for cupti_sys::$b::CUpti_CallbackData {
            fn call(&self) -> super::sass::ApiCall {
                let exit = self.callbackSite == cupti_sys::$b::CUPTI_API_EXIT;
                super::sass::ApiCall {
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

/// `CUPTI_CB_DOMAIN_DRIVER_API`, `_RUNTIME_API`, `_RESOURCE` (the same in every version).
pub(crate) const DOMAIN_DRIVER_API: u32 = 1;
pub(crate) const DOMAIN_RUNTIME_API: u32 = 2;
pub(crate) const DOMAIN_RESOURCE: u32 = 3;
/// `CUPTI_CBID_RESOURCE_CONTEXT_CREATED`.
pub(crate) const CBID_CONTEXT_CREATED: u32 = 1;
/// `CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING`.
pub(crate) const CBID_CONTEXT_DESTROY_STARTING: u32 = 2;

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
            super::sass::Event::Api(call)
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
            super::sass::Event::ContextDestroying(ctx)
        }
        _ => return,
    };
    let _ = catch_unwind(AssertUnwindSafe(|| super::sass::on_event(event)));
}

/// Tells PM sampling ([`super::pmsampling`]) that context `ctx` was created (`created`) or is
/// being destroyed. Called from CUPTI's resource callback, where `ctx` is live.
fn pm_context_event(ctx: usize, created: bool) {
    let Some(live) = super::LIVE.get() else {
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
    let Some(live) = super::LIVE.get() else {
        return;
    };
    // SAFETY: CUPTI passed `ctx` to the resource callback that is running: it is live.
    let Ok(device) = (unsafe { device_of(live.cupti, ctx) }) else {
        return;
    };
    super::flops::on_context_created(ctx, device);
}

/// The graph-launch callback ids of the runtime and driver APIs, as `(domain, cbid)`: one
/// correlation id for many kernels.
pub(crate) fn graph_launch_callback_ids(cupti: &Cupti) -> Vec<(u32, u32)> {
    let ids: Result<Vec<(u32, u32)>, CuptiError> = table!(cupti, _t, b => {
        Ok(vec![
            (DOMAIN_RUNTIME_API, b::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000),
            (DOMAIN_RUNTIME_API, b::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000),
            (DOMAIN_DRIVER_API, b::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch),
            (DOMAIN_DRIVER_API, b::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz),
        ])
    });
    ids.unwrap_or_default()
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

/// `cuptiEnableCallback(enable, subscriber, domain, cbid)`.
pub(crate) fn enable_callback(
    cupti: &Cupti,
    subscriber: usize,
    enable: bool,
    domain: u32,
    cbid: u32,
) -> Result<(), CuptiError> {
    table!(cupti, t, b => {
        let f = sym(&t.cuptiEnableCallback, "cuptiEnableCallback")?;
        // SAFETY: `subscriber` is the handle `cuptiSubscribe` returned and not yet
        // unsubscribed (the collector holds it while running); the rest are plain integers.
        let rc = unsafe { f(u32::from(enable), subscriber as b::CUpti_SubscriberHandle, domain, cbid) };
        check(cupti, "cuptiEnableCallback", rc)
    })
}

/// The kernel-launch callback ids of the runtime and driver APIs (single-context launches and
/// graph launches), as `(domain, cbid)`.
pub(crate) fn launch_callback_ids(cupti: &Cupti) -> Vec<(u32, u32)> {
    let ids: Result<Vec<(u32, u32)>, CuptiError> = table!(cupti, _t, b => {
        let runtime = [
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
            b::CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
        ];
        let driver = [
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunch,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
            b::CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
            b::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
            b::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
        ];
        Ok(runtime
            .iter()
            .map(|&c| (DOMAIN_RUNTIME_API, c))
            .chain(driver.iter().map(|&c| (DOMAIN_DRIVER_API, c)))
            .collect())
    });
    ids.unwrap_or_default()
}

/// `cuptiGetDeviceId(ctx)`: the CUDA ordinal of a context's device.
///
/// # Safety
/// `ctx` is a live `CUcontext` of this process (CUPTI passed it to a callback that is running).
pub(crate) unsafe fn device_of(cupti: &Cupti, ctx: usize) -> Result<u32, CuptiError> {
    table!(cupti, t, b => {
        let f = sym(&t.cuptiGetDeviceId, "cuptiGetDeviceId")?;
        let mut id = 0u32;
        // SAFETY: `ctx` is live by the caller's contract; `id` is a valid, writable u32.
        let rc = unsafe { f(ctx as b::CUcontext, &mut id) };
        check(cupti, "cuptiGetDeviceId", rc).map(|()| id)
    })
}

type CuCtxSynchronize = unsafe extern "C" fn() -> c_int;

/// `cuCtxSynchronize` of the CUDA driver this process has loaded; `None` when it has not.
fn cu_ctx_synchronize() -> Option<CuCtxSynchronize> {
    static SYNC: std::sync::OnceLock<Option<CuCtxSynchronize>> = std::sync::OnceLock::new();
    *SYNC.get_or_init(|| {
        use libloading::os::unix::{Library, RTLD_NOW};
        // SAFETY: RTLD_NOLOAD: a handle to libcuda only if this process already loaded it.
        let lib =
            unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }.ok()?;
        // Never unloaded: the process uses it.
        let lib = ManuallyDrop::new(lib);
        // SAFETY: `CUresult cuCtxSynchronize(void)` in cuda.h; CUresult is an int enum. The
        // library stays loaded, so the pointer stays valid.
        unsafe { lib.get::<CuCtxSynchronize>(b"cuCtxSynchronize\0") }
            .ok()
            .map(|s| *s)
    })
}

/// Waits for all work of the calling thread's current CUDA context (`cuCtxSynchronize`).
/// `Err` names the driver's result code, or says the driver is not loaded.
pub(crate) fn synchronize_current_context() -> Result<(), String> {
    let Some(sync) = cu_ctx_synchronize() else {
        return Err("the CUDA driver (libcuda.so.1) is not loaded in this process".to_string());
    };
    // SAFETY: takes no arguments; the driver is loaded and initialised (a launch just ran on
    // this thread).
    match unsafe { sync() } {
        0 => Ok(()),
        rc => Err(format!("cuCtxSynchronize returned CUresult {rc}")),
    }
}

/// `cuptiUnsubscribe` of a handle [`subscribe`] returned.
pub(crate) fn unsubscribe(cupti: &Cupti, handle: usize) -> Result<(), CuptiError> {
    table!(cupti, t, b => {
        let f = sym(&t.cuptiUnsubscribe, "cuptiUnsubscribe")?;
        // SAFETY: `handle` is the subscriber handle `cuptiSubscribe` returned, unsubscribed
        // once (the collector forgets it afterwards).
        let rc = unsafe { f(handle as b::CUpti_SubscriberHandle) };
        check(cupti, "cuptiUnsubscribe", rc)
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

/// `cuptiActivityFlushPeriod(ms)`.
pub(crate) fn flush_period(cupti: &Cupti, ms: u32) -> Result<(), CuptiError> {
    table!(cupti, t, _b => {
        let f = sym(&t.cuptiActivityFlushPeriod, "cuptiActivityFlushPeriod")?;
        // SAFETY: takes a plain integer.
        let rc = unsafe { f(ms) };
        check(cupti, "cuptiActivityFlushPeriod", rc)
    })
}

/// `cuptiActivityPushExternalCorrelationId(kind, id)`.
pub(crate) fn push_external(cupti: &Cupti, kind: u32, id: u64) -> Result<(), CuptiError> {
    table!(cupti, t, _b => {
        let f = sym(
            &t.cuptiActivityPushExternalCorrelationId,
            "cuptiActivityPushExternalCorrelationId",
        )?;
        // SAFETY: takes plain integers; CUPTI validates the kind.
        let rc = unsafe { f(kind, id) };
        check(cupti, "cuptiActivityPushExternalCorrelationId", rc)
    })
}

/// `cuptiActivityPopExternalCorrelationId(kind, &last)`.
pub(crate) fn pop_external(cupti: &Cupti, kind: u32) -> Result<u64, CuptiError> {
    table!(cupti, t, _b => {
        let f = sym(
            &t.cuptiActivityPopExternalCorrelationId,
            "cuptiActivityPopExternalCorrelationId",
        )?;
        let mut last = 0u64;
        // SAFETY: `last` is a valid, writable u64 for the duration of the call.
        let rc = unsafe { f(kind, &mut last) };
        check(cupti, "cuptiActivityPopExternalCorrelationId", rc).map(|()| last)
    })
}

/// Records CUPTI dropped since the last call, from its global queue
/// (`cuptiActivityGetNumDroppedRecords(NULL, 0, …)`; CUPTI resets the count when read, so this
/// is a delta); `None` when zero. Takes no lock of this crate.
///
/// Since CUDA 6 every activity buffer is global: the context and stream arguments of the
/// completion callback are documented as always NULL (CUPTI 13.0 was seen passing a non-zero
/// stream value there), so they are never used.
pub(crate) fn read_dropped(cupti: &Cupti) -> Result<Option<DroppedRecords>, CuptiError> {
    table!(cupti, t, _b => {
        let f = sym(
            &t.cuptiActivityGetNumDroppedRecords,
            "cuptiActivityGetNumDroppedRecords",
        )?;
        let mut n: usize = 0;
        // SAFETY: a NULL context asks for the global queue; `n` is a valid, writable size_t.
        let rc = unsafe { f(std::ptr::null_mut(), 0, &mut n) };
        check(cupti, "cuptiActivityGetNumDroppedRecords", rc)?;
        Ok((n > 0).then_some(DroppedRecords {
            device_id: None,
            context_id: 0,
            stream_id: 0,
            count: n as u64,
        }))
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

/// Whether a shared library of this soname is already loaded in the process (no initialiser
/// runs; the handle taken is leaked, so nothing is ever unloaded).
pub(crate) fn already_loaded(soname: &str) -> bool {
    use libloading::os::unix::{Library, RTLD_NOW};
    // SAFETY: with RTLD_NOLOAD, dlopen only returns a handle to an object already loaded in
    // this process; nothing new is mapped and no initialiser runs.
    match unsafe { Library::open(Some(soname), RTLD_NOW | libc::RTLD_NOLOAD) } {
        Ok(lib) => {
            let _ = ManuallyDrop::new(lib);
            true
        }
        Err(_) => false,
    }
}

/// Whether the CUDA driver library can be loaded at all (it stays loaded if so).
pub(crate) fn driver_loadable() -> bool {
    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
    // SAFETY: loading NVIDIA's driver library runs its initialisers, which need nothing from
    // this process (every CUDA program loads it the same way); it is never unloaded.
    match unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | RTLD_LOCAL) } {
        Ok(lib) => {
            let _ = ManuallyDrop::new(lib);
            true
        }
        Err(_) => false,
    }
}

type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetUuid = unsafe extern "C" fn(*mut [u8; 16], c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`, `..._COMPUTE_CAPABILITY_MAJOR`, `..._MINOR`.
const ATTR_SM_COUNT: c_int = 16;
const ATTR_CC_MAJOR: c_int = 75;
const ATTR_CC_MINOR: c_int = 76;

/// The GPUs of this process as the CUDA driver sees them (CUDA ordinals, so they match the
/// `deviceId` of CUPTI records), when the process has already loaded and initialised the
/// driver; `Err` says why not. Never loads or initialises the driver itself.
pub(crate) fn driver_inventory() -> Result<Vec<GmrDevice>, String> {
    use libloading::os::unix::{Library, RTLD_NOW};
    // SAFETY: RTLD_NOLOAD: a handle to libcuda only if this process already loaded it.
    let lib = unsafe { Library::open(Some("libcuda.so.1"), RTLD_NOW | libc::RTLD_NOLOAD) }
        .map_err(|_| "the CUDA driver (libcuda.so.1) is not loaded in this process".to_string())?;
    // Never unloaded: the process uses it.
    let lib = ManuallyDrop::new(lib);
    /// Looks up a driver function.
    ///
    /// # Safety
    /// `T` must be the function's type as declared in cuda.h.
    unsafe fn get<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
        let mut c = name.as_bytes().to_vec();
        c.push(0);
        // SAFETY: `T` is the symbol's type by the caller's contract; the library is never
        // unloaded, so the value stays valid.
        unsafe { lib.get::<T>(&c) }
            .map(|s| *s)
            .map_err(|_| format!("libcuda.so.1 has no {name}"))
    }
    // SAFETY (the five lookups): the CUDA driver API's signatures from cuda.h: CUresult and
    // CUdevice are ints, CUdevice_attribute an int enum, CUuuid 16 bytes.
    let count: CuDeviceGetCount = unsafe { get(&lib, "cuDeviceGetCount") }?;
    let device: CuDeviceGet = unsafe { get(&lib, "cuDeviceGet") }?;
    let name_of: CuDeviceGetName = unsafe { get(&lib, "cuDeviceGetName") }?;
    let attr: CuDeviceGetAttribute = unsafe { get(&lib, "cuDeviceGetAttribute") }?;
    let uuid_of: Option<CuDeviceGetUuid> = unsafe { get(&lib, "cuDeviceGetUuid_v2") }
        .or_else(|_| unsafe { get(&lib, "cuDeviceGetUuid") })
        .ok();
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid, writable int.
    let rc = unsafe { count(&mut n) };
    if rc != 0 {
        return Err(format!(
            "cuDeviceGetCount returned {rc} (the driver is not initialised in this process)"
        ));
    }
    let mut out = Vec::new();
    for ordinal in 0..n.max(0) {
        let mut dev: c_int = 0;
        // SAFETY: `dev` is a valid, writable int; `ordinal` is below the device count.
        if unsafe { device(&mut dev, ordinal) } != 0 {
            continue;
        }
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` holds 256 writable chars; the driver writes a NUL-terminated name
        // of at most that length.
        let name = if unsafe { name_of(buf.as_mut_ptr(), buf.len() as c_int, dev) } == 0 {
            buf[255] = 0;
            // SAFETY: `buf` is NUL-terminated (its last byte is 0).
            Some(
                unsafe { CStr::from_ptr(buf.as_ptr()) }
                    .to_string_lossy()
                    .into_owned(),
            )
        } else {
            None
        };
        let uuid = uuid_of.and_then(|f| {
            let mut u = [0u8; 16];
            // SAFETY: `u` is 16 writable bytes, the size of CUuuid.
            (unsafe { f(&mut u, dev) } == 0 && u != [0; 16])
                .then(|| format!("GPU-{}", gpumeter_cupti::decode::format_uuid(&u)))
        });
        let attribute = |a: c_int| {
            let mut v: c_int = 0;
            // SAFETY: `v` is a valid, writable int.
            (unsafe { attr(&mut v, a, dev) } == 0 && v > 0).then_some(v as u32)
        };
        let cc = attribute(ATTR_CC_MAJOR)
            .map(|major| format!("{major}.{}", attribute(ATTR_CC_MINOR).unwrap_or(0)));
        out.push(GmrDevice {
            id: ordinal as u32,
            name: name.filter(|n| !n.is_empty()),
            uuid,
            sm_count: attribute(ATTR_SM_COUNT),
            compute_capability: cc,
        });
    }
    Ok(out)
}

/// This machine's host name (`gethostname`), empty when unavailable.
pub(crate) fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is 256 writable bytes; gethostname writes at most that many.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(buf.get(..end).unwrap_or(&[])).into_owned()
}
