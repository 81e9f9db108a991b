//! cupti-sys against the real libcupti of NVIDIA's pip wheels (no GPU or driver needed for
//! CUPTI 12.8).
//!
//! The 12.8 library is taken from `GPUMETER_CUPTI_LIB`, else from the wheel cache of
//! `bindings/cupti/fetch-wheels.sh` (`bindings/cupti/.wheels`), else from the normal search.
//! The 13.4 library from `GPUMETER_CUPTI13_LIB`, else from the wheel cache. With `CI=true` a
//! missing library fails the test; otherwise the test prints a notice and passes.
// Tests reach one raw symbol through `Cupti::symbol`, with a `// SAFETY:` comment.
#![allow(unsafe_code)]

mod support {
    use std::path::{Path, PathBuf};

    use cupti_sys::Cupti;

    pub fn ci() -> bool {
        std::env::var("CI").is_ok_and(|v| v == "true")
    }

    fn wheels() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/cupti/.wheels")
    }

    /// The pinned wheel's libcupti 12.8, when fetched.
    pub fn wheel_lib12() -> PathBuf {
        wheels().join("cu12/nvidia/cuda_cupti/lib/libcupti.so.12")
    }

    /// The pinned wheel's libcupti 13.4, when fetched.
    pub fn wheel_lib13() -> PathBuf {
        wheels().join("cu13/nvidia/cu13/lib/libcupti.so.13")
    }

    fn missing(what: &str, why: &dyn std::fmt::Display) -> Option<Cupti> {
        let msg = format!(
            "{what} not available ({why}); run bindings/cupti/fetch-wheels.sh or set the \
             library's path in the environment"
        );
        assert!(!ci(), "CI=true: {msg}");
        {
            // Straight to stderr, past the test harness's capture: a skip is never silent.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: {msg}");
        }
        None
    }

    /// libcupti 12.x: `GPUMETER_CUPTI_LIB`, else the wheel cache, else the search.
    pub fn cupti12() -> Option<Cupti> {
        if let Some(p) = std::env::var_os("GPUMETER_CUPTI_LIB").filter(|p| !p.is_empty()) {
            return match Cupti::load_from(&p) {
                Ok(c) => Some(c),
                Err(e) => panic!("GPUMETER_CUPTI_LIB is set but does not load: {e}"),
            };
        }
        let wheel = wheel_lib12();
        if wheel.exists() {
            return match Cupti::load_from(&wheel) {
                Ok(c) => Some(c),
                Err(e) => panic!("the wheel's libcupti does not load: {e}"),
            };
        }
        match Cupti::load() {
            Ok(c) if c.path().to_string_lossy().ends_with(".so.12") => Some(c),
            Ok(c) => missing(
                "libcupti 12.x",
                &format!("found {} instead", c.path().display()),
            ),
            Err(e) => missing("libcupti 12.x", &e),
        }
    }

    /// libcupti 13.x: `GPUMETER_CUPTI13_LIB`, else the wheel cache.
    pub fn cupti13_path() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("GPUMETER_CUPTI13_LIB").filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
        let wheel = wheel_lib13();
        if wheel.exists() {
            return Some(wheel);
        }
        missing(
            "libcupti 13.x",
            &"not in the wheel cache, GPUMETER_CUPTI13_LIB unset",
        );
        None
    }

    /// True when `c` is the pinned wheel's 12.8 library (or CI, which uses it).
    pub fn is_pinned_12_8(c: &Cupti) -> bool {
        ci() || c.path() == wheel_lib12()
            || c.path().ends_with("nvidia/cuda_cupti/lib/libcupti.so.12")
    }
}

mod cupti12 {
    use cupti_sys::v12_8 as b;
    use cupti_sys::{BindingsVersion, CuptiError, ResultCode};

    use crate::support::{cupti12, is_pinned_12_8};

    #[test]
    fn loads_and_reports_api_version() {
        let Some(c) = cupti12() else { return };
        assert_eq!(c.bindings_version(), BindingsVersion::V12_8, "{c:?}");
        let v = c
            .version()
            .expect("cuptiGetVersion works without a driver in 12.x");
        assert_eq!(c.api_version_at_load(), Some(v));
        assert!(v < 130_000, "{v}");
        if is_pinned_12_8(&c) {
            assert_eq!(v, b::CUPTI_API_VERSION);
            assert_eq!(v, 26);
        }
        assert_eq!(BindingsVersion::V12_8.header_api_version(), 26);
    }

    #[test]
    fn result_strings_match_the_table() {
        let Some(c) = cupti12() else { return };
        for code in [
            b::CUPTI_SUCCESS,
            b::CUPTI_ERROR_INVALID_PARAMETER,
            b::CUPTI_ERROR_MAX_LIMIT_REACHED,
            b::CUPTI_ERROR_NOT_INITIALIZED,
            b::CUPTI_ERROR_INVALID_KIND,
            b::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
            b::CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED,
            b::CUPTI_ERROR_UNKNOWN,
        ] {
            let s = c.result_string(code).expect("known code");
            assert_eq!(s, ResultCode::from_raw(code).name(), "code {code}");
        }
        // A code the library does not know: it answers INVALID_PARAMETER.
        let err = c.result_string(12_345).expect_err("unknown code");
        assert_eq!(err.code(), Some(b::CUPTI_ERROR_INVALID_PARAMETER), "{err}");
        // The error a failing call reports carries the name and a message.
        match c.api_error("cuptiActivityEnable", b::CUPTI_ERROR_NOT_INITIALIZED) {
            CuptiError::Api {
                function,
                code,
                name,
                message,
            } => {
                assert_eq!((function, code), ("cuptiActivityEnable", 15));
                assert_eq!(name, "CUPTI_ERROR_NOT_INITIALIZED");
                assert!(!message.is_empty());
            }
            other => panic!("{other:?}"),
        }
        match c.api_error("f", 4242) {
            CuptiError::Api { name, .. } => assert_eq!(name, ResultCode::UNEXPECTED_NAME),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn timestamp_is_wall_clock_ns() {
        let Some(c) = cupti12() else { return };
        let t = c
            .timestamp()
            .expect("cuptiGetTimestamp works without a driver in 12.x");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_nanos();
        let diff = (now as i128 - i128::from(t)).abs();
        assert!(diff < 60_000_000_000, "CUPTI {t} vs wall clock {now}");
    }

    /// Records as a 12.8 buffer holds them: each its struct's size, one after another.
    fn crafted(records: &[(u32, usize)]) -> (Vec<u8>, Vec<(u32, usize)>) {
        let mut buf = Vec::new();
        let mut expected = Vec::new();
        for &(kind, size) in records {
            assert_eq!(size % 8, 0, "records keep 8-byte alignment");
            expected.push((kind, buf.len()));
            let start = buf.len();
            buf.resize(start + size, 0);
            buf[start..start + 4].copy_from_slice(&kind.to_ne_bytes());
        }
        (buf, expected)
    }

    fn four_records() -> (Vec<u8>, Vec<(u32, usize)>) {
        use std::mem::size_of;
        crafted(&[
            (
                b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                size_of::<b::CUpti_ActivityKernel9>(),
            ),
            (
                b::CUPTI_ACTIVITY_KIND_MEMCPY,
                size_of::<b::CUpti_ActivityMemcpy6>(),
            ),
            (
                b::CUPTI_ACTIVITY_KIND_MEMSET,
                size_of::<b::CUpti_ActivityMemset4>(),
            ),
            (
                b::CUPTI_ACTIVITY_KIND_KERNEL,
                size_of::<b::CUpti_ActivityKernel9>(),
            ),
        ])
    }

    /// An 8-byte aligned copy of `bytes`, with room for `extra` more bytes.
    fn aligned(bytes: &[u8], extra: usize) -> Vec<u64> {
        let mut words = vec![0u64; (bytes.len() + extra).div_ceil(8)];
        for (w, chunk) in words.iter_mut().zip(bytes.chunks(8)) {
            let mut a = [0u8; 8];
            a[..chunk.len()].copy_from_slice(chunk);
            *w = u64::from_ne_bytes(a);
        }
        words
    }

    fn as_bytes_mut(words: &mut [u64]) -> &mut [u8] {
        let len = words.len() * 8;
        // SAFETY: `words` owns `len` initialised bytes, any bytes are valid u8s, and the
        // returned slice borrows `words` exclusively for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
    }

    #[test]
    fn walks_a_crafted_buffer() {
        let Some(c) = cupti12() else { return };
        assert_eq!(std::mem::size_of::<b::CUpti_ActivityKernel9>(), 208);
        let (bytes, expected) = four_records();
        let valid = bytes.len();

        // Aligned, with slack after the valid bytes.
        let mut words = aligned(&bytes, 64);
        let walk = c
            .walk_activity_buffer(as_bytes_mut(&mut words), valid)
            .expect("walk");
        assert_eq!(walk.records, expected);
        assert!(!walk.ended_on_invalid_kind);

        // Unaligned: copied internally, same offsets.
        let mut words = aligned(&[], valid + 8);
        let storage = as_bytes_mut(&mut words);
        storage[1..=valid].copy_from_slice(&bytes);
        let walk = c
            .walk_activity_buffer(&mut storage[1..=valid], valid)
            .expect("unaligned walk");
        assert_eq!(walk.records, expected);

        // Only the first two records valid.
        let two = expected[2].1;
        let mut words = aligned(&bytes, 0);
        let walk = c
            .walk_activity_buffer(as_bytes_mut(&mut words), two)
            .expect("walk");
        assert_eq!(walk.records, expected[..2]);

        // Empty.
        let walk = c.walk_activity_buffer(&mut [], 0).expect("empty walk");
        assert!(walk.records.is_empty() && !walk.ended_on_invalid_kind);
    }

    #[test]
    fn walk_stops_at_an_unknown_kind() {
        let Some(c) = cupti12() else { return };
        let kernel = std::mem::size_of::<b::CUpti_ActivityKernel9>();
        let (bytes, expected) = crafted(&[
            (b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, kernel),
            (0x7fff_0000, 64),
            (b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, kernel),
        ]);
        let mut words = aligned(&bytes, 0);
        let walk = c
            .walk_activity_buffer(as_bytes_mut(&mut words), bytes.len())
            .expect("walk");
        assert_eq!(walk.records, expected[..1]);
        assert!(walk.ended_on_invalid_kind);
    }

    #[test]
    fn walk_of_a_truncated_record_does_not_read_past_the_valid_bytes() {
        let Some(c) = cupti12() else { return };
        let (bytes, expected) = four_records();
        // Cut the third record in half.
        let valid = expected[2].1 + 16;
        let mut words = aligned(&bytes[..valid], 0);
        let walk = c
            .walk_activity_buffer(as_bytes_mut(&mut words), valid)
            .expect("walk");
        assert_eq!(walk.records, expected[..2]);
    }

    #[test]
    fn walk_rejects_a_valid_size_past_the_buffer() {
        let Some(c) = cupti12() else { return };
        let mut buf = [0u8; 16];
        let err = c.walk_activity_buffer(&mut buf, 17).expect_err("too long");
        assert!(matches!(err, CuptiError::InvalidBuffer { .. }), "{err}");
    }

    #[test]
    fn missing_symbol_is_an_error() {
        let Some(c) = cupti12() else { return };
        // SAFETY: the type is irrelevant for a symbol that does not exist; nothing is called.
        let err = unsafe { c.symbol::<unsafe extern "C" fn()>("cuptiNoSuchFunction") }
            .expect_err("no such symbol");
        match err {
            CuptiError::MissingSymbol { name } => assert_eq!(name, "cuptiNoSuchFunction"),
            other => panic!("{other:?}"),
        }
        // SAFETY: `cuptiGetVersion` is `CUptiResult cuptiGetVersion(uint32_t *)`.
        let get = unsafe { c.symbol::<unsafe extern "C" fn(*mut u32) -> u32>("cuptiGetVersion") }
            .expect("cuptiGetVersion");
        let mut v = 0;
        // SAFETY: `v` is a valid, writable u32 for the duration of the call.
        assert_eq!(unsafe { get(&mut v) }, b::CUPTI_SUCCESS);
        assert_eq!(Some(v), c.api_version_at_load());
    }

    /// Without a GPU/driver, enabling activity fails with CUPTI_ERROR_NOT_INITIALIZED; with
    /// one it succeeds (and is disabled again).
    #[test]
    fn activity_enable_reports_a_missing_driver() {
        let Some(c) = cupti12() else { return };
        let kind = b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        match c.activity_enable(kind) {
            Ok(()) => c.activity_disable(kind).expect("disable"),
            Err(e) => {
                assert!(e.is_not_initialized(), "{e}");
                assert!(e.to_string().contains("CUPTI_ERROR_NOT_INITIALIZED"), "{e}");
                let flush = c.activity_flush_all(0).expect_err("not initialised");
                assert!(flush.is_not_initialized(), "{flush}");
            }
        }
    }
}

mod cupti13 {
    use cupti_sys::{v13_4 as b, BindingsVersion, Cupti};

    use crate::support::cupti13_path;

    /// CUPTI 13.x loads without a driver, but every call fails (CUPTI_ERROR_UNKNOWN):
    /// errors, never a panic or a hang. With a driver, the version is 13.x's.
    #[test]
    fn loads_and_fails_cleanly_without_a_driver() {
        let Some(path) = cupti13_path() else { return };
        let c = Cupti::load_from(&path).expect("libcupti.so.13 loads");
        assert_eq!(c.bindings_version(), BindingsVersion::V13_4, "{c:?}");
        assert_eq!(BindingsVersion::V13_4.header_api_version(), 130_401);
        match c.version() {
            Ok(v) => {
                assert!(v >= 130_000, "{v}");
                assert_eq!(c.api_version_at_load(), Some(v));
            }
            Err(e) => {
                eprintln!("notice: CUPTI 13 without a driver: {e}");
                assert!(e.code().is_some(), "{e}");
                assert_eq!(c.api_version_at_load(), None);
                let mut buf = [0u64; 4];
                let bytes = {
                    let len = buf.len() * 8;
                    // SAFETY: `buf` owns `len` initialised bytes, valid as u8s, borrowed
                    // exclusively by the slice.
                    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), len) }
                };
                let walk = c.walk_activity_buffer(bytes, 0);
                assert!(walk.is_err(), "{walk:?}");
                let enable = c.activity_enable(b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
                assert!(enable.is_err(), "{enable:?}");
            }
        }
    }
}

/// The SASS metrics API of libcupti 12.8 and 13.x: present in both; without a GPU every call
/// fails with a CUPTI error, never a panic. With a GPU the calls may succeed: only the absence
/// of panics and the error's shape are checked then.
mod sass {

    use cupti_sys::{Cupti, SASS_INST_EXECUTED};

    use crate::support::{cupti12, cupti13_path};

    fn exercise(c: &Cupti) {
        c.sass_metrics_available()
            .expect("libcupti 12.8 and 13.x export the SASS metrics API");
        let init = c.profiler_initialize();
        eprintln!("{}: cuptiProfilerInitialize: {init:?}", c.path().display());
        if let Err(e) = &init {
            assert!(e.code().is_some(), "{e}");
        }
        match c.sass_device_supported(0) {
            Ok(s) => eprintln!("device 0: {s:?}"),
            Err(e) => assert!(e.code().is_some(), "{e}"),
        }
        match c.device_chip_name(0) {
            Ok(chip) => {
                let m = c.sass_metric_properties(&chip, SASS_INST_EXECUTED);
                eprintln!("chip {chip}: {m:?}");
            }
            Err(e) => assert!(e.code().is_some(), "{e}"),
        }
        assert!(c.sass_metric_properties("gh100", "a\0b").is_err());
        // SAFETY: a NULL context means "the current one" to CUPTI.
        let flush = unsafe { c.sass_flush(std::ptr::null_mut()) };
        if let Err(e) = &flush {
            assert!(e.code().is_some(), "{e}");
        }
        // SAFETY: as above.
        let disable = unsafe { c.sass_disable(std::ptr::null_mut()) };
        assert!(matches!(disable, Err(_) | Ok(0)), "{disable:?}");
        assert!(c.sass_unset_config(u32::MAX).is_err());
    }

    #[test]
    fn cupti12_has_the_api_and_fails_cleanly_without_a_gpu() {
        let Some(c) = cupti12() else { return };
        exercise(&c);
    }

    #[test]
    fn cupti13_has_the_api_and_fails_cleanly_without_a_gpu() {
        let Some(path) = cupti13_path() else { return };
        let c = Cupti::load_from(&path).expect("libcupti.so.13 loads");
        exercise(&c);
    }

    /// CUPTI 12.6 and later export the PM sampling and profiler host APIs (issue 16): the
    /// pinned 12.8 and 13.x libraries have every function `pm_sampling_available` checks, and
    /// each is also found by name.
    #[test]
    fn cupti12_and_13_export_the_pm_sampling_api() {
        let mut libs = Vec::new();
        if let Some(c) = cupti12() {
            libs.push(c);
        }
        if let Some(path) = cupti13_path() {
            libs.push(Cupti::load_from(&path).expect("libcupti.so.13 loads"));
        }
        for c in &libs {
            c.pm_sampling_available()
                .unwrap_or_else(|e| panic!("{}: {e}", c.path().display()));
            for name in cupti_sys::PM_SAMPLING_SYMBOLS {
                // SAFETY: looked up, never called; any function pointer type fits the lookup.
                let found = unsafe { c.symbol::<unsafe extern "C" fn()>(name) };
                assert!(found.is_ok(), "{}: {name}", c.path().display());
            }
        }
    }
}

mod search {
    use std::ffi::OsString;
    use std::path::PathBuf;

    use cupti_sys::{search_locations_with, Cupti, SearchLocation, ENV_CUPTI_LIB, LIB_NAMES};

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn env_var_is_the_only_location_when_set() {
        let bogus = "/nonexistent/gpumeter-test/libcupti.so";
        let locs = search_locations_with(env(&[(ENV_CUPTI_LIB, bogus)]), || {
            panic!("python3 is not asked when GPUMETER_CUPTI_LIB is set")
        });
        assert_eq!(locs, [SearchLocation::File(PathBuf::from(bogus))]);
        let err = Cupti::load_from_locations(&locs).expect_err("bogus path");
        assert_eq!(err.attempts.len(), 1);
        assert_eq!(err.attempts[0].path, PathBuf::from(bogus));
        let text = err.to_string();
        assert!(
            text.contains(bogus) && text.contains("GPUMETER_CUPTI_LIB"),
            "{text}"
        );
    }

    #[test]
    fn load_from_a_missing_file_names_it() {
        let bogus = "/nonexistent/gpumeter-test/libcupti.so.12";
        let err = Cupti::load_from(bogus).expect_err("bogus path");
        assert_eq!(err.attempts[0].path, PathBuf::from(bogus));
        assert!(err.to_string().contains(bogus), "{err}");
    }

    #[test]
    fn a_library_without_cupti_symbols_is_rejected() {
        let err = Cupti::load_from("libm.so.6").expect_err("libm is not CUPTI");
        assert!(
            err.attempts[0].reason.contains("not a CUPTI library"),
            "{err}"
        );
    }

    #[test]
    fn search_order() {
        let locs = search_locations_with(
            env(&[
                (ENV_CUPTI_LIB, ""),
                ("CUDA_HOME", "/opt/cuda-a"),
                ("CUDA_PATH", "/opt/cuda-b"),
            ]),
            || vec![PathBuf::from("/py/site-packages")],
        );
        let dir = |p: &str| SearchLocation::Dir(PathBuf::from(p));
        let mut expected = Vec::new();
        for root in ["/opt/cuda-a", "/opt/cuda-b", "/usr/local/cuda"] {
            for sub in ["extras/CUPTI/lib64", "lib64", "targets/x86_64-linux/lib"] {
                expected.push(dir(&format!("{root}/{sub}")));
            }
        }
        expected.push(dir("/py/site-packages/nvidia/cuda_cupti/lib"));
        expected.push(dir("/py/site-packages/nvidia/cu13/lib"));
        expected.extend(LIB_NAMES.iter().map(|n| SearchLocation::LinkerSearch(n)));
        assert_eq!(locs, expected);
    }

    #[test]
    fn a_failed_search_lists_every_location() {
        let locs = [
            SearchLocation::Dir(PathBuf::from("/nonexistent/a")),
            SearchLocation::File(PathBuf::from("/nonexistent/b/libcupti.so")),
        ];
        let err = Cupti::load_from_locations(&locs).expect_err("nothing there");
        let paths: Vec<_> = err.attempts.iter().map(|a| a.path.clone()).collect();
        assert_eq!(
            paths,
            [
                PathBuf::from("/nonexistent/a"),
                PathBuf::from("/nonexistent/b/libcupti.so")
            ]
        );
    }
}

/// The profiler host side of PM sampling answers without a GPU in CUPTI 12.8 (libnvperf_host
/// beside libcupti is preloaded by `pm_host_initialize`); what it says is pinned here.
mod pm_sampling_host {
    use cupti_sys::{v12_8 as b, MetricType};

    use crate::support::{cupti12, is_pinned_12_8};

    #[test]
    fn host_api_lists_metrics_and_builds_config_images_offline() {
        let Some(c) = cupti12() else { return };
        c.pm_sampling_available()
            .expect("CUPTI 12.8 has the PM sampling API");
        for chip in ["GA100", "GH100", "AD102"] {
            let host = c
                .pm_host_initialize(chip, None)
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            assert_eq!(host.chip(), chip);
            let counters = c
                .pm_host_base_metrics(&host, MetricType::Counter)
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            assert!(
                counters.iter().any(|m| m == "sm__cycles_active"),
                "{chip}: {} counters",
                counters.len()
            );
            assert!(counters.iter().any(|m| m == "sm__cycles_elapsed"));
            c.pm_host_add_metrics(&host, &["sm__cycles_active.sum", "sm__cycles_elapsed.max"])
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            let image = c.pm_host_config_image(&host).expect("config image");
            assert!(image.len() > 64, "{chip}: {} bytes", image.len());
            c.pm_host_deinitialize(host).expect("deinitialize");
        }
    }

    #[test]
    fn host_api_refuses_what_the_chip_cannot_sample() {
        let Some(c) = cupti12() else { return };
        if !is_pinned_12_8(&c) {
            return;
        }
        let e = c
            .pm_host_initialize("NOPE", None)
            .expect_err("unknown chip");
        assert_eq!(e.code(), Some(b::CUPTI_ERROR_INVALID_PARAMETER), "{e}");
        let host = c.pm_host_initialize("GH100", None).expect("GH100");
        // PM sampling on GH100 has no DRAM byte counters in CUPTI 12.8 (only throughputs).
        let e = c
            .pm_host_add_metrics(&host, &["dram__bytes_read.sum"])
            .expect_err("dram__bytes_read.sum is not a PM sampling metric on GH100");
        assert_eq!(e.code(), Some(b::CUPTI_ERROR_INVALID_PARAMETER), "{e}");
        let e = c
            .pm_host_add_metrics(&host, &["with\0nul"])
            .expect_err("NUL byte");
        assert!(e.to_string().contains("NUL"), "{e}");
        c.pm_host_deinitialize(host).expect("deinitialize");
    }

    #[test]
    fn target_side_without_a_gpu_is_an_error_not_a_crash() {
        let Some(c) = cupti12() else { return };
        let e = c.profiler_initialize().expect_err("no GPU here");
        assert!(e.is_not_initialized(), "{e}");
        assert!(c.pm_counter_availability(0).is_err());
        assert!(c.pm_enable(0).is_err());
    }
}

/// The range profiler's host side answers without a GPU in CUPTI 12.8 (a host object of type
/// range profiler, its config images and their pass counts); its target side needs a GPU.
mod range_profiler_host {
    use cupti_sys::MetricType;

    use crate::support::{cupti12, is_pinned_12_8};

    const FFMA: &str = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum";

    #[test]
    fn range_host_objects_build_config_images_and_count_passes_offline() {
        let Some(c) = cupti12() else { return };
        c.range_profiler_available()
            .expect("CUPTI 12.8 has the range profiler API");
        for chip in ["GA100", "GH100", "AD102"] {
            let host = c
                .range_host_initialize(chip, None)
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            let counters = c
                .pm_host_base_metrics(&host, MetricType::Counter)
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            assert!(
                counters
                    .iter()
                    .any(|m| m == "smsp__sass_thread_inst_executed_op_ffma_pred_on"),
                "{chip}: {} counters",
                counters.len()
            );
            c.pm_host_add_metrics(&host, &[FFMA])
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            let image = c.pm_host_config_image(&host).expect("config image");
            let passes = c.profiler_host_num_passes(&image).expect("passes");
            if is_pinned_12_8(&c) {
                assert_eq!(passes, 1, "{chip}");
            }
            c.pm_host_deinitialize(host).expect("deinitialize");
        }
    }
}
