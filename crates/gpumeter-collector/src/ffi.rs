//! The CUPTI functions `cupti-sys` has no safe wrapper for, each reached through the one
//! generated-table lookup (`table!`, `sym`, `check`): subscriber and callback-id
//! management, the activity flush period, external correlation ids, the dropped-record count
//! and a context's device. The callbacks CUPTI calls are in [`super::callbacks`]; the CUDA
//! driver and libc queries in [`super::driver`].

use cupti_sys::{Cupti, CuptiError};

use gpumeter_recording::gmr::DroppedRecords;

/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`, the same in every CUPTI version.
pub(crate) const FLUSH_FORCED: u32 = 1;
/// `CUPTI_SUCCESS`.
const SUCCESS: u32 = 0;

/// Runs `$body` with `$t` bound to the generated function table of `$cupti` and `$b` to its
/// bindings module.
macro_rules! table {
    ($cupti:expr, $t:ident, $b:ident => $body:expr) => {
        match $cupti.bindings() {
            cupti_sys::Bindings::V12_8($t) => {
                #[allow(unused_imports)]
                use cupti_sys::v12_8 as $b;
                $body
            }
            cupti_sys::Bindings::V13_4($t) => {
                #[allow(unused_imports)]
                use cupti_sys::v13_4 as $b;
                $body
            }
            other => Err(cupti_sys::CuptiError::MissingSymbol {
                name: format!("a function table for {other:?}, which this build does not drive"),
            }),
        }
    };
}
pub(crate) use table;

/// The one path from a generated table's field to a callable function.
pub(crate) fn sym<T: Copy>(
    field: &Result<T, libloading::Error>,
    name: &'static str,
) -> Result<T, CuptiError> {
    field
        .as_ref()
        .map(|f| *f)
        .map_err(|_| CuptiError::MissingSymbol {
            name: name.to_string(),
        })
}

pub(crate) fn check(cupti: &Cupti, function: &'static str, rc: u32) -> Result<(), CuptiError> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(cupti.api_error(function, rc))
    }
}

/// `CUPTI_CB_DOMAIN_DRIVER_API`, `_RUNTIME_API`, `_RESOURCE` (the same in every version).
pub(crate) const DOMAIN_DRIVER_API: u32 = 1;
pub(crate) const DOMAIN_RUNTIME_API: u32 = 2;
pub(crate) const DOMAIN_RESOURCE: u32 = 3;
/// `CUPTI_CBID_RESOURCE_CONTEXT_CREATED`.
pub(crate) const CBID_CONTEXT_CREATED: u32 = 1;
/// `CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING`.
pub(crate) const CBID_CONTEXT_DESTROY_STARTING: u32 = 2;

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

/// `cuptiUnsubscribe` of a handle [`subscribe`](super::callbacks::subscribe) returned.
pub(crate) fn unsubscribe(cupti: &Cupti, handle: usize) -> Result<(), CuptiError> {
    table!(cupti, t, b => {
        let f = sym(&t.cuptiUnsubscribe, "cuptiUnsubscribe")?;
        // SAFETY: `handle` is the subscriber handle `cuptiSubscribe` returned, unsubscribed
        // once (the collector forgets it afterwards).
        let rc = unsafe { f(handle as b::CUpti_SubscriberHandle) };
        check(cupti, "cuptiUnsubscribe", rc)
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
