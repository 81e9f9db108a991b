//! Status codes and the thread's last error message.

use std::cell::RefCell;

/// What a fallible `gm_*` function returns: `gm_status_code::GM_OK` (0) or one of the
/// other `gm_status_code` numbers. Read it as an integer: a later library may return a
/// number this header does not name (treat it as an error).
#[allow(non_camel_case_types)]
pub type gm_status = u32;

/// The numbers a `gm_status` takes. Numbers are never reused: a code that is retired stays
/// reserved.
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum gm_status_code {
    /// Success; outputs were written.
    GM_OK = 0,
    /// A pointer that must not be NULL was NULL (the message names the argument).
    GM_ERR_NULL_ARGUMENT = 1,
    /// A string argument is not valid UTF-8 (the message names the argument and byte).
    GM_ERR_INVALID_UTF8 = 2,
    /// `config_json` is not valid JSON, has an unknown key, or a value out of range.
    GM_ERR_INVALID_CONFIG = 3,
    /// An argument is invalid: a tenant name the tenant rules refuse, a device description
    /// with an empty UUID, a bank request's field.
    GM_ERR_INVALID_ARGUMENT = 4,
    /// A CUPTI activity buffer does not decode (the message gives the byte offset, record
    /// kind and field); nothing of it was metered.
    GM_ERR_DECODE = 5,
    /// `usage_json` is not a `gpumeter.usage/v1` report, or its `sha256` does not match it.
    GM_ERR_USAGE_JSON = 6,
    /// The price book is invalid (the message names the line, column, table and field).
    GM_ERR_PRICE_BOOK = 7,
    /// The price book cannot rate this usage (e.g. a rate's validity edge inside a window).
    GM_ERR_RATING = 8,
    /// The usage report cannot be built (a quantity beyond 128 bits, more windows than a
    /// report holds, energy that cannot be drained).
    GM_ERR_METER = 9,
    /// The credit bank refused or failed (names the bank's location, transaction or account;
    /// a PostgreSQL URL without its password).
    GM_ERR_BANK = 10,
    /// A file cannot be read or is not what it should be (a recording).
    GM_ERR_IO = 11,
    /// An internal error was caught at the boundary (a bug: please report the message).
    /// Nothing crossed into the caller; the handle it concerned is no longer usable.
    GM_ERR_PANIC = 12,
    /// The handle was left unusable by an earlier internal error (`GM_ERR_PANIC`): free it.
    GM_ERR_POISONED = 13,
    /// The handle (meter, bank, recording) was made in another process: this is a child
    /// after `fork()` (e.g. Python's `multiprocessing` with the fork start method). A handle
    /// is not usable in a child (a thread that did not fork may have held it); nothing was
    /// done. Make a new handle in the child; its `_free` leaves the parent's alone.
    GM_ERR_FORKED = 14,
}

/// A failure on its way to the caller: its status and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) status: gm_status_code,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: gm_status_code, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Stores `message` as this thread's last error.
pub(crate) fn set_last_error(message: String) {
    LAST_ERROR.with(|e| *e.borrow_mut() = message);
}

/// Copies this thread's last error into `out` (as much as fits, NUL-terminated when `out` is
/// not empty, cut on a UTF-8 character boundary) and returns its full length in bytes
/// without the NUL.
pub(crate) fn copy_last_error(out: Option<&mut [u8]>) -> usize {
    LAST_ERROR.with(|e| {
        let msg = e.borrow();
        if let Some(buf) = out {
            if let Some(room) = buf.len().checked_sub(1) {
                let mut n = msg.len().min(room);
                while !msg.is_char_boundary(n) {
                    n -= 1;
                }
                buf[..n].copy_from_slice(&msg.as_bytes()[..n]);
                buf[n] = 0;
            }
        }
        msg.len()
    })
}
