//! What CUPTI's subscriber callback reports ([`super::callbacks`]) to instrumented mode
//! ([`super::sass`]) and FLOP counting ([`super::flops`]): a kernel-launch API call's entry or
//! exit, or a context about to be destroyed.

/// One launch API callback, as read from CUPTI's callback data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ApiCall {
    /// `true` at the API's entry, `false` at its exit.
    pub(crate) enter: bool,
    /// The call's correlation id (its kernels carry it).
    pub(crate) correlation_id: u32,
    /// The `CUcontext`, as an address.
    pub(crate) context: usize,
    /// CUPTI's id of that context.
    pub(crate) context_uid: u32,
    /// A graph launch (one correlation id, many kernels).
    pub(crate) graph: bool,
    /// At the exit: the call returned an error (no kernel was launched).
    pub(crate) failed: bool,
}

/// What a callback reports.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// A kernel-launch API call's entry or exit.
    Api(ApiCall),
    /// A context is about to be destroyed (`CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING`).
    ContextDestroying(usize),
}
