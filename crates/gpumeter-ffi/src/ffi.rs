//! The one place where C pointers become Rust references, and the panic boundary every
//! exported function runs inside (docs/C_ABI.md, "Conventions").
//!
//! Ownership, as the header states it per function:
//! - handles (`gm_meter`, `gm_bank`, `gm_recording`) are `Box`es the caller owns between
//!   `_new`/`_open` and `_free`; every function borrows them;
//! - strings the library returns are `CString`s the caller owns and frees with
//!   `gm_string_free`;
//! - every other pointer is borrowed for the call only.

use std::any::Any;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe, UnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::status::{gm_status, gm_status_code, set_last_error, Failure};

/// Runs an exported function's body: `Ok` is `GM_OK`; a failure sets this thread's last
/// error and returns its status; a panic is caught here, never crosses into C, and becomes
/// `GM_ERR_PANIC` with its message as the last error.
pub(crate) fn boundary<F>(body: F) -> gm_status
where
    F: FnOnce() -> Result<(), Failure> + UnwindSafe,
{
    match catch_unwind(body) {
        Ok(Ok(())) => gm_status_code::GM_OK as gm_status,
        Ok(Err(f)) => {
            set_last_error(f.message);
            f.status as gm_status
        }
        Err(payload) => {
            set_last_error(format!(
                "internal error (a panic, caught at the C ABI boundary): {}",
                panic_message(payload.as_ref())
            ));
            gm_status_code::GM_ERR_PANIC as gm_status
        }
    }
}

/// Runs a body that cannot fail (a `_free`, a getter): a panic is caught, becomes the last
/// error, and `fallback` is returned.
pub(crate) fn infallible<T, F: FnOnce() -> T>(fallback: T, body: F) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            set_last_error(format!(
                "internal error (a panic, caught at the C ABI boundary): {}",
                panic_message(payload.as_ref())
            ));
            fallback
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "no message"
    }
}

fn null(name: &str) -> Failure {
    Failure::new(
        gm_status_code::GM_ERR_NULL_ARGUMENT,
        format!("{name} is NULL"),
    )
}

/// Forks seen by this process's children: each child adds one, in a `pthread_atfork` handler,
/// before `fork()` returns in it.
static FORKS: AtomicU64 = AtomicU64::new(0);

/// Whether the handler is registered: 0 not yet, 1 yes, 2 being registered, 3 failed (then
/// handles compare process ids instead).
static ATFORK: AtomicU8 = AtomicU8::new(0);

extern "C" {
    // POSIX (libc; libpthread before glibc 2.34, which -lpthread links).
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> c_int;
}

/// Runs in the child of every `fork()` of the process, before `fork()` returns there: only an
/// atomic add, which is async-signal-safe.
unsafe extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
}

/// Where a handle was made: the process, and the forks before it. In a child after `fork()` a
/// handle of the parent is not usable: a thread of the parent may have held its
/// lock, or been halfway through changing it, and that thread does not exist in the child, so
/// the lock would never be released (the first call hung) and the state may be torn; a bank's
/// connection is the parent's. Calls on it fail with `GM_ERR_FORKED` instead, without
/// touching it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Origin {
    forks: u64,
    pid: u32,
    /// Whether the fork handler was in place when the handle was made (then every later fork
    /// is counted, and `forks` tells); else the process id tells.
    counted: bool,
}

impl Origin {
    /// The process making a handle now.
    pub(crate) fn here() -> Origin {
        if ATFORK
            .compare_exchange(0, 2, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            // SAFETY: registers a handler that only adds to an atomic (async-signal-safe, as a
            // child handler must be); no prepare or parent handler.
            let rc = unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
            ATFORK.store(if rc == 0 { 1 } else { 3 }, Ordering::SeqCst);
        }
        Origin {
            counted: ATFORK.load(Ordering::SeqCst) == 1,
            forks: FORKS.load(Ordering::SeqCst),
            pid: std::process::id(),
        }
    }

    /// Whether this is the process the handle was made in (not a child after `fork()`): no
    /// fork since, counted by the handler (an atomic load, no system call); else, when the
    /// handler was not in place yet (or could not be registered), the same process id (a
    /// forked child always has another one).
    pub(crate) fn is_here(&self) -> bool {
        if self.counted {
            FORKS.load(Ordering::SeqCst) == self.forks
        } else {
            std::process::id() == self.pid
        }
    }
}

/// An opaque handle of the C ABI (`gm_meter`, `gm_bank`, `gm_recording`): a `Box` the caller
/// owns, made in one process.
pub(crate) trait Handle {
    /// Its name in messages (`meter`).
    const WHAT: &'static str;
    /// Where it was made.
    fn origin(&self) -> &Origin;
}

/// `GM_ERR_FORKED` unless `h` was made in this process.
fn here<T: Handle>(h: &T) -> Result<(), Failure> {
    let o = h.origin();
    if o.is_here() {
        return Ok(());
    }
    let what = T::WHAT;
    Err(Failure::new(
        gm_status_code::GM_ERR_FORKED,
        format!(
            "this {what} was made in process {} before a fork(), and this is process {}: a \
             {what} is not usable in a child after fork() (a thread that did not fork may hold \
             it, and it is the parent's); make a new one in this process (docs/C_ABI.md, \
             \"Processes\")",
            o.pid,
            std::process::id()
        ),
    ))
}

/// Borrows the handle behind `p` for the call: NULL is `GM_ERR_NULL_ARGUMENT`, a handle of
/// the parent in a child after `fork()` is `GM_ERR_FORKED` (checked before any lock).
///
/// # Safety
/// `p` is NULL or points to a live `T` that no other thread mutates during the call (handles
/// synchronize inside).
pub(crate) unsafe fn handle<'a, T: Handle>(p: *const T, name: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's contract: NULL or a live, properly aligned `T` for the call.
    let h = unsafe { p.as_ref() }.ok_or_else(|| null(name))?;
    here(h)?;
    Ok(h)
}

/// As [`handle`], mutably.
///
/// # Safety
/// `p` is NULL or points to a live `T` that no other thread uses during the call.
pub(crate) unsafe fn handle_mut<'a, T: Handle>(
    p: *mut T,
    name: &str,
) -> Result<&'a mut T, Failure> {
    // SAFETY: the caller's contract: NULL or a live `T` no other thread uses.
    let h = unsafe { p.as_mut() }.ok_or_else(|| null(name))?;
    here(h)?;
    Ok(h)
}

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that lives for the call.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char, name: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL and NUL-terminated, alive for the call (the caller's contract).
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|e| {
        Failure::new(
            gm_status_code::GM_ERR_INVALID_UTF8,
            format!(
                "{name} is not UTF-8 (invalid byte at offset {})",
                e.valid_up_to()
            ),
        )
    })
}

/// An optional C string argument (NULL = `None`) as UTF-8.
///
/// # Safety
/// As [`str_arg`].
pub(crate) unsafe fn opt_str_arg<'a>(
    p: *const c_char,
    name: &str,
) -> Result<Option<&'a str>, Failure> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: as `str_arg`, whose contract the caller keeps.
    unsafe { str_arg(p, name) }.map(Some)
}

/// A byte buffer argument: `(NULL, 0)` is empty; NULL with a length is an error. Any
/// alignment.
///
/// # Safety
/// `p` is NULL or points to `len` readable bytes that no one writes during the call.
pub(crate) unsafe fn bytes_arg<'a>(
    p: *const u8,
    len: usize,
    name: &str,
) -> Result<&'a [u8], Failure> {
    if p.is_null() {
        if len == 0 {
            return Ok(&[]);
        }
        return Err(null(name));
    }
    if len > isize::MAX as usize {
        return Err(Failure::new(
            gm_status_code::GM_ERR_INVALID_ARGUMENT,
            format!("{name}: a length of {len} bytes cannot be a buffer"),
        ));
    }
    // SAFETY: non-NULL, `len` readable bytes (u8 has no alignment), not written during the
    // call: the caller's contract; the length fits an isize (checked above).
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Checks an output pointer before any work is done, so that a NULL one fails early.
pub(crate) fn out_arg<T>(p: *mut T, name: &str) -> Result<OutPtr<T>, Failure> {
    if p.is_null() {
        Err(null(name))
    } else {
        Ok(OutPtr(p))
    }
}

/// An output pointer known not to be NULL; written once, on success.
pub(crate) struct OutPtr<T>(*mut T);

impl<T> OutPtr<T> {
    /// Writes the output.
    ///
    /// # Safety
    /// The pointer given to [`out_arg`] points to writable, aligned storage for a `T` (the
    /// caller's contract); the old value is not dropped (it is C's).
    pub(crate) unsafe fn write(self, v: T) {
        // SAFETY: non-NULL (checked by `out_arg`), writable and aligned: the caller's contract.
        unsafe { self.0.write(v) }
    }
}

/// A struct the caller allocates, whose first field is `size_t struct_size`: the caller sets it
/// to `sizeof` the struct as its header declares it, so the struct can grow in later versions
/// (fields are only ever added at the end). `MIN_SIZE` is the size of the struct's first
/// version: the end of its last field then.
///
/// # Safety
/// `Self` is `#[repr(C)]`, starts with a `usize` (`struct_size`), and every bit pattern of
/// zeros is a valid value of it (integers and pointers only).
pub(crate) unsafe trait SizedStruct: Copy {
    /// The size of the struct's first version.
    const MIN_SIZE: usize;
    /// Its C name, for messages.
    const C_NAME: &'static str;
}

/// The largest `struct_size` taken: more is not the size of a struct of this ABI but a value
/// never set (a struct not zeroed), which must not make the library read or write that far.
const MAX_STRUCT_SIZE: usize = 4096;

/// The size a caller's struct says it has, checked: at least the first version's, at most
/// [`MAX_STRUCT_SIZE`].
///
/// # Safety
/// `p` is non-NULL and points to at least a readable `usize`.
unsafe fn struct_size<T: SizedStruct>(p: *const T, name: &str) -> Result<usize, Failure> {
    // SAFETY: non-NULL and readable for a usize (the caller's contract); unaligned reads are
    // allowed.
    let n = unsafe { p.cast::<usize>().read_unaligned() };
    if !(T::MIN_SIZE..=MAX_STRUCT_SIZE).contains(&n) {
        return Err(Failure::new(
            gm_status_code::GM_ERR_INVALID_ARGUMENT,
            format!(
                "{name}->struct_size is {n}: set it to sizeof({}) ({} in this library)",
                T::C_NAME,
                std::mem::size_of::<T>()
            ),
        ));
    }
    Ok(n)
}

/// Reads a struct the caller allocated and sized (`struct_size`): the fields its size covers;
/// fields of a later version than the caller's are zero. A caller's struct larger than this
/// library's (built with a newer header) is accepted when the fields this library does not
/// know are all zero (unset), and refused otherwise, never silently ignored.
///
/// # Safety
/// `p` is NULL or points to `struct_size` readable bytes (at least a `usize`).
pub(crate) unsafe fn sized_arg<T: SizedStruct>(p: *const T, name: &str) -> Result<T, Failure> {
    if p.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL, at least a usize (the caller's contract).
    let n = unsafe { struct_size(p, name) }?;
    let ours = std::mem::size_of::<T>();
    // SAFETY: the caller's struct is `n` readable bytes (the caller's contract).
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
    if let Some(at) = bytes.iter().skip(ours).position(|b| *b != 0) {
        return Err(Failure::new(
            gm_status_code::GM_ERR_INVALID_ARGUMENT,
            format!(
                "{name}: byte {} is set, past the {ours} bytes of {} this library knows                  (struct_size {n}: the program was built with a newer gpumeter.h than this                  library's and uses a field it does not have)",
                ours + at,
                T::C_NAME
            ),
        ));
    }
    let mut v = std::mem::MaybeUninit::<T>::zeroed();
    let take = n.min(ours);
    // SAFETY: `take` bytes fit both the caller's struct and `v`; all-zero is a valid `T` (the
    // trait's contract), and so is any prefix of a valid `T` over zeros.
    unsafe {
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), v.as_mut_ptr().cast::<u8>(), take);
        Ok(v.assume_init())
    }
}

/// An output struct the caller allocated and sized (`struct_size`), checked before any work.
pub(crate) struct SizedOut<T> {
    p: *mut T,
    size: usize,
}

/// Checks an output struct the caller sized (`struct_size`, at least the first version's).
///
/// # Safety
/// `p` is NULL or points to `struct_size` writable bytes (at least a `usize`).
pub(crate) unsafe fn sized_out<T: SizedStruct>(
    p: *mut T,
    name: &str,
) -> Result<SizedOut<T>, Failure> {
    if p.is_null() {
        return Err(null(name));
    }
    // SAFETY: non-NULL, at least a usize (the caller's contract).
    let size = unsafe { struct_size(p.cast_const(), name) }?;
    Ok(SizedOut { p, size })
}

impl<T: SizedStruct> SizedOut<T> {
    /// Writes `v` into the caller's struct: the fields its size covers; bytes past this
    /// library's struct (a newer caller's fields) are zero (unset). `struct_size` stays the
    /// caller's.
    ///
    /// # Safety
    /// As [`sized_out`]: the caller's struct is `struct_size` writable bytes.
    pub(crate) unsafe fn write(self, v: T) {
        let ours = std::mem::size_of::<T>();
        let put = self.size.min(ours);
        let out = self.p.cast::<u8>();
        // SAFETY: `put` bytes fit both `v` and the caller's struct, `self.size` bytes are the
        // caller's and writable (the caller's contract); the first usize is `struct_size`.
        unsafe {
            std::ptr::copy_nonoverlapping(std::ptr::from_ref(&v).cast::<u8>(), out, put);
            if self.size > ours {
                std::ptr::write_bytes(out.add(ours), 0, self.size - ours);
            }
            out.cast::<usize>().write_unaligned(self.size);
        }
    }
}

/// A string for C (caller frees it with `gm_string_free`).
pub(crate) fn c_string(s: String, what: &str) -> Result<*mut c_char, Failure> {
    CString::new(s).map(CString::into_raw).map_err(|_| {
        Failure::new(
            gm_status_code::GM_ERR_PANIC,
            format!("{what} holds a NUL byte and cannot be a C string"),
        )
    })
}

/// Takes back a string made by [`c_string`] and frees it.
///
/// # Safety
/// `s` is NULL or a pointer [`c_string`] returned, not freed before.
pub(crate) unsafe fn free_c_string(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: made by `CString::into_raw` in `c_string`, freed once: the caller's contract.
        drop(unsafe { CString::from_raw(s) });
    }
}

/// Takes back a handle made by `Box::into_raw` and drops it. A handle of the parent in a
/// child after `fork()` is left alone (its memory is the child's copy, and dropping it could
/// close the parent's database connection or free state a thread of the parent was changing).
///
/// # Safety
/// `p` is NULL or a pointer `Box::<T>::into_raw` returned, not freed before, used by no
/// other thread.
pub(crate) unsafe fn free_handle<T: Handle>(p: *mut T) {
    // SAFETY: NULL or a live handle (the caller's contract).
    if let Some(h) = unsafe { p.as_ref() } {
        if h.origin().is_here() {
            // SAFETY: made by `Box::into_raw`, freed once, unused elsewhere: the caller's
            // contract.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

/// Moves a handle to C.
pub(crate) fn into_handle<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// Makes a body that captures raw pointers usable in [`boundary`]: pointers are plain data,
/// and every handle's state sits behind a `Mutex` that a panic poisons.
pub(crate) fn unwind_safe<F: FnOnce() -> Result<(), Failure>>(f: F) -> AssertUnwindSafe<F> {
    AssertUnwindSafe(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meter::test_hooks::panic_in_next_ingest;
    use crate::{
        gm_meter, gm_meter_free, gm_meter_ingest_cupti_buffer, gm_meter_new, gm_meter_usage_json,
        gm_meter_watermark_ns,
    };

    fn last_error() -> String {
        let mut buf = vec![0u8; crate::status::copy_last_error(None) + 1];
        let n = crate::status::copy_last_error(Some(&mut buf));
        buf.truncate(n);
        String::from_utf8(buf).expect("UTF-8")
    }

    const PANIC: gm_status = gm_status_code::GM_ERR_PANIC as gm_status;

    #[test]
    fn boundary_turns_a_panic_into_a_status() {
        let s = boundary(|| -> Result<(), Failure> { panic!("boom {}", 42) });
        assert_eq!(s, PANIC);
        let msg = last_error();
        assert!(msg.contains("panic") && msg.ends_with("boom 42"), "{msg}");
        let s = boundary(|| -> Result<(), Failure> { panic!("static boom") });
        assert_eq!(s, PANIC);
        assert!(last_error().ends_with("static boom"));
        let s = boundary(|| -> Result<(), Failure> { std::panic::panic_any(7_u8) });
        assert_eq!(s, PANIC);
        assert!(last_error().ends_with("no message"));
        // A failure and a success, for comparison.
        let s = boundary(|| Err(Failure::new(gm_status_code::GM_ERR_DECODE, "nope")));
        assert_eq!(s, gm_status_code::GM_ERR_DECODE as gm_status);
        assert_eq!(last_error(), "nope");
        assert_eq!(boundary(|| Ok(())), gm_status_code::GM_OK as gm_status);
        assert_eq!(last_error(), "nope", "success leaves the message");
    }

    #[test]
    fn infallible_returns_its_fallback_on_a_panic() {
        let v: usize = infallible(17, || panic!("inside a getter"));
        assert_eq!(v, 17);
        assert!(last_error().ends_with("inside a getter"));
        assert_eq!(infallible(0, || 5), 5);
    }

    /// The inside of a real exported function panics on purpose (a test-only hook in
    /// `gm_meter_ingest_cupti_buffer`, while the meter's lock is held): C sees GM_ERR_PANIC,
    /// not an abort; the meter is then poisoned and says so, and can still be freed.
    #[test]
    fn a_panic_inside_an_exported_function_is_a_status_then_the_meter_is_poisoned() {
        let mut m: *mut gm_meter = std::ptr::null_mut();
        // SAFETY: NULL config (defaults) and a writable out-pointer.
        assert_eq!(unsafe { gm_meter_new(std::ptr::null(), &mut m) }, 0);
        // SAFETY: a live meter and (NULL, 0), the empty buffer.
        assert_eq!(
            unsafe { gm_meter_ingest_cupti_buffer(m, std::ptr::null(), 0) },
            0
        );
        panic_in_next_ingest();
        // SAFETY: as above.
        let s = unsafe { gm_meter_ingest_cupti_buffer(m, std::ptr::null(), 0) };
        assert_eq!(s, PANIC);
        let msg = last_error();
        assert!(
            msg.contains("caught at the C ABI boundary") && msg.contains("the test asked for"),
            "{msg}"
        );
        // The panic happened while the lock was held: every later call is refused.
        let poisoned = gm_status_code::GM_ERR_POISONED as gm_status;
        // SAFETY: as above.
        let s = unsafe { gm_meter_ingest_cupti_buffer(m, std::ptr::null(), 0) };
        assert_eq!(s, poisoned);
        assert!(last_error().contains("gm_meter_free"));
        let mut out: *mut std::ffi::c_char = std::ptr::null_mut();
        // SAFETY: a live meter and a writable out-pointer.
        assert_eq!(unsafe { gm_meter_usage_json(m, &mut out) }, poisoned);
        assert!(out.is_null(), "no output on failure");
        let mut w = 7u64;
        // SAFETY: a live meter and a writable u64.
        assert_eq!(unsafe { gm_meter_watermark_ns(m, &mut w) }, poisoned);
        assert_eq!(w, 7);
        // SAFETY: the meter from `gm_meter_new`, freed once.
        unsafe { gm_meter_free(m) };
    }
}
