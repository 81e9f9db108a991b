//! The CUDA driver and libc queries the collector makes itself: whether a library is already
//! loaded, `cuCtxSynchronize` of the current context, the driver's device inventory, and the
//! host name. The driver is never loaded or initialised here except by [`driver_loadable`].

use std::ffi::{c_char, c_int, CStr};
use std::mem::ManuallyDrop;

use gpumeter_recording::gmr::GmrDevice;

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
