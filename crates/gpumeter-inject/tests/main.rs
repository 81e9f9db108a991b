//! The built `libgpumeter_inject.so`: it loads, exports the entry point the CUDA driver looks
//! for and the agent helpers, and on a machine without a GPU its `InitializeInjection`
//! answers 0 at once (no hang, no panic) and leaves no recording behind.
//!
//! End to end without a GPU: `tests/c/fake_cupti.c` stands in for libcupti (the CUPTI 12.8 ABI,
//! producing real 12.8 records when flushed) and `tests/c/fake_cuda_app.c` plays the driver's
//! part (dlopen `CUDA_INJECTION64_PATH`, call `InitializeInjection`, exit), so the whole path
//! from CUPTI's callbacks to a finished `.gmr` runs through the real library.
//!
//! Cargo builds the cdylib before this test; the library is looked up beside the test binary
//! (`target/<profile>/` and `target/<profile>/deps/`). The C helpers are compiled with `$CC`
//! (default `cc`) against the CUPTI 12.8 wheel's headers (`CUPTI12_INCLUDE`, `CUDA12_INCLUDE`,
//! `CUDA12_CRT_INCLUDE` from `bindings/cupti/.wheels/env.sh`, else the wheel cache). With
//! `CI=true` a missing libcupti or header fails the test instead of skipping it.
// Loading the library and calling its C functions is FFI.
#![allow(unsafe_code)]

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `libgpumeter_inject.so` as built for this test run.
fn inject_lib() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    let profile = deps.parent().expect("profile directory").to_path_buf();
    for dir in [profile, deps] {
        let p = dir.join("libgpumeter_inject.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "libgpumeter_inject.so not found beside {}: build it with `cargo build -p gpumeter-inject`",
        exe.display()
    );
}

fn libcupti() -> Option<PathBuf> {
    let lib = std::env::var_os("GPUMETER_CUPTI_LIB")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../bindings/cupti/.wheels/cu12/nvidia/cuda_cupti/lib/libcupti.so.12")
        });
    if lib.exists() {
        return Some(lib);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but there is no libcupti at {}: run bindings/cupti/fetch-wheels.sh",
        lib.display()
    );
    {
        // Straight to stderr, past the test harness's capture: a skip is never silent.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no libcupti at {}; InitializeInjection not called",
            lib.display()
        );
    }
    None
}

#[test]
fn the_library_exports_the_injection_entry_point() {
    let path = inject_lib();
    // SAFETY: loading our own cdylib runs no initialiser of ours; it is never unloaded (a
    // Rust cdylib that ran code must not be dlclose'd while its thread-locals may live).
    let lib = unsafe { libloading::Library::new(&path) }.expect("the injection library loads");
    let lib = std::mem::ManuallyDrop::new(lib);
    // SAFETY: only looked up, not called: the signatures are those the library exports.
    unsafe {
        lib.get::<extern "C" fn() -> c_int>(b"InitializeInjection\0")
            .expect("InitializeInjection is exported");
        lib.get::<extern "C" fn(u32, u64) -> c_int>(b"gpumeter_inject_push_external_id\0")
            .expect("push helper exported");
        lib.get::<unsafe extern "C" fn(u32, *mut u64) -> c_int>(
            b"gpumeter_inject_pop_external_id\0",
        )
        .expect("pop helper exported");
        lib.get::<unsafe extern "C" fn(u64, *const std::ffi::c_char) -> c_int>(
            b"gpumeter_inject_tenant_hint\0",
        )
        .expect("tenant hint exported");
    }
    // The dynamic symbol table, as the driver's dlsym sees it.
    if let Ok(out) = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&path)
        .output()
    {
        if out.status.success() {
            let syms = String::from_utf8_lossy(&out.stdout);
            assert!(
                syms.lines().any(|l| l.ends_with(" T InitializeInjection")),
                "{syms}"
            );
        }
    }
}

/// Case run in a child process by [`initialize_without_a_gpu_fails_fast`].
#[test]
#[ignore = "run in a child process by initialize_without_a_gpu_fails_fast"]
fn child_initialize() {
    let path = inject_lib();
    // SAFETY: as above; never unloaded.
    let lib = unsafe { libloading::Library::new(&path) }.expect("loads");
    let lib = std::mem::ManuallyDrop::new(lib);
    // SAFETY: `InitializeInjection` is `int InitializeInjection(void)`.
    let init =
        unsafe { lib.get::<extern "C" fn() -> c_int>(b"InitializeInjection\0") }.expect("exported");
    let t0 = Instant::now();
    let rc = init();
    println!("CHILD-RC {rc} in {:?}", t0.elapsed());
    // A second call does nothing and reports success, as the driver expects.
    println!("CHILD-RC2 {}", init());
}

/// What the driver would see on a machine without a GPU (where it never calls us): 0, at
/// once, with the reason on stderr, and no recording left behind.
#[test]
fn initialize_without_a_gpu_fails_fast() {
    let Some(cupti) = libcupti() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run.gmr");
    let t0 = Instant::now();
    let o = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_initialize",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GPUMETER_CUPTI_LIB", &cupti)
        .env("GPUMETER_OUT", &out)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("CHILD-RC 0 "), "{stdout}\n{stderr}");
    assert!(stdout.contains("CHILD-RC2 1"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("gpumeter-inject: not metering this process")
            && stderr.contains("no CUDA driver or GPU"),
        "{stderr}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t0.elapsed()
    );
    assert!(!out.exists(), "no recording is left behind");
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "nothing else either"
    );
}

/// A directory from an environment variable, else under the wheel cache.
fn header_dir(var: &str, wheel: &str) -> PathBuf {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../bindings/cupti/.wheels/cu12/nvidia")
                .join(wheel)
        })
}

/// Compiles the fake libcupti and the fake CUDA program into `dir`; `None` (with a notice)
/// when the headers are missing outside CI.
fn build_fakes(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let includes = [
        header_dir("CUPTI12_INCLUDE", "cuda_cupti/include"),
        header_dir("CUDA12_INCLUDE", "cuda_runtime/include"),
        header_dir("CUDA12_CRT_INCLUDE", "cuda_nvcc/include"),
    ];
    if !includes[0].join("cupti.h").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the CUPTI 12.8 headers are missing at {}: run \
             bindings/cupti/fetch-wheels.sh",
            includes[0].display()
        );
        {
            // Straight to stderr, past the test harness's capture: a skip is never silent.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no CUPTI 12.8 headers; fake-CUPTI test not run"
            );
        }
        return None;
    }
    let c = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let lib = dir.join("libcupti.so.12");
    let app = dir.join("fake_cuda_app");
    let mut fake = Command::new(&cc);
    fake.args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror"]);
    // cupti_profiler_host.h includes C++'s <string> without using it: an empty one first.
    fake.arg("-I")
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bindings/cupti/shim"));
    for i in &includes {
        fake.arg("-I").arg(i);
    }
    fake.arg("-o")
        .arg(&lib)
        .arg(c.join("fake_cupti.c"))
        .arg("-lpthread");
    let mut host = Command::new(&cc);
    host.args(["-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&app)
        .arg(c.join("fake_cuda_app.c"))
        .arg("-ldl");
    for mut cmd in [fake, host] {
        let o = cmd.output().unwrap_or_else(|e| panic!("run {cc}: {e}"));
        assert!(
            o.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    Some((lib, app))
}

fn run_fake_app(
    app: &Path,
    fake_cupti: &Path,
    out: &Path,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut cmd = Command::new(app);
    cmd.arg("4")
        .env("CUDA_INJECTION64_PATH", inject_lib())
        .env("GPUMETER_CUPTI_LIB", fake_cupti)
        .env("GPUMETER_OUT", out)
        .env("GPUMETER_VERBOSE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run the fake CUDA program")
}

/// The whole injection path with a fake libcupti: names copied while buffers are live,
/// buffers completed out of order on another thread, the dropped count as a delta, the
/// device inventory from the DEVICE record in the rewritten header, the agent helpers, the
/// program's exit code untouched.
#[test]
fn a_fake_cupti_program_is_recorded_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("rec/run.gmr");
    let o = run_fake_app(
        &app,
        &fake,
        &out,
        &[("FAKE_CUPTI_KERNELS", "25"), ("FAKE_CUPTI_DROPPED", "3")],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("InitializeInjection=1"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("push=0 hint=0 pop=0 last=77"), "{stdout}");
    assert!(stderr.contains("25 kernel records"), "{stderr}");
    assert!(stderr.contains("3 records dropped by CUPTI"), "{stderr}");

    let bytes = std::fs::read(&out).expect("the recording");
    let file = gpumeter_recording::gmr::read_gmr(&bytes).expect("a valid .gmr");
    assert!(file.finished && file.torn.is_none());
    let h = &file.header;
    assert_eq!(h.cupti_api_version, 26);
    assert_eq!(h.producer.name, "gpumeter-inject");
    assert_ne!(h.clock.cupti_timestamp_ns, 0);
    assert_eq!(h.devices.len(), 1, "{:?}", h.devices);
    assert_eq!(h.devices[0].name.as_deref(), Some("NVIDIA H200"));
    assert_eq!(h.devices[0].sm_count, Some(132));

    let mut names = gpumeter_cupti::StringTable::new();
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let mut attribution = Vec::new();
    for f in &file.frames {
        match &f.frame {
            gpumeter_recording::gmr::Frame::StringTable(t) => names.extend_from(t),
            gpumeter_recording::gmr::Frame::ActivityBuffer(b) => {
                let d = gpumeter_cupti::decode(b, gpumeter_cupti::ApiVersion::Cupti12_8)
                    .expect("decodes");
                for r in d.records {
                    if let gpumeter_cupti::Record::Kernel(k) = r.record {
                        let n = names.get(k.name_ptr).expect("named before its buffer");
                        *counts.entry(n.to_string()).or_default() += 1;
                    }
                }
            }
            gpumeter_recording::gmr::Frame::Attribution(a) => attribution.push(a.clone()),
            _ => {}
        }
    }
    assert_eq!(
        counts,
        [
            ("fake_kernel_add".to_string(), 12),
            ("fake_kernel_scale".to_string(), 13)
        ]
        .into_iter()
        .collect()
    );
    assert_eq!(attribution.len(), 1);
    assert_eq!(
        (attribution[0].external_id, attribution[0].label.as_str()),
        (1001, "alice")
    );

    let mut meter = gpumeter_core::Meter::new(gpumeter_core::MeterConfig::default());
    let s = gpumeter_recording::meter_gmr(&mut meter, "run.gmr", &bytes, &Default::default())
        .expect("meters");
    assert_eq!((s.records, s.dropped), (25, 3));
    assert_eq!(s.device_keys, ["GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"]);
}

/// Another profiler holding CUPTI: the typed error on stderr, 0 to the driver, no file.
#[test]
fn another_profiler_is_reported_and_nothing_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    for (env, needle) in [
        (
            ("FAKE_CUPTI_SUBSCRIBE_RC", "39"),
            "another profiler holds CUPTI",
        ),
        (("FAKE_CUPTI_ENABLE_RC", "15"), "no CUDA driver or GPU"),
    ] {
        let out = dir.path().join("run.gmr");
        let o = run_fake_app(&app, &fake, &out, &[env]);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{stdout}\n{stderr}");
        assert!(
            stdout.contains("InitializeInjection=0"),
            "{stdout}\n{stderr}"
        );
        assert!(
            stdout.contains("push=-1"),
            "helpers say not running: {stdout}"
        );
        assert!(stderr.contains(needle), "{env:?}: {stderr}");
        assert!(!out.exists(), "{env:?}: no recording");
    }
}

/// Two processes of one job writing the same GPUMETER_OUT: the second gets `<stem>.<pid>`.
#[test]
fn a_second_process_does_not_clobber_the_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let out = dir.path().join("job.gmr");
    for _ in 0..2 {
        let o = run_fake_app(&app, &fake, &out, &[]);
        assert_eq!(
            o.status.code(),
            Some(4),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("job."))
        .collect();
    names.sort();
    assert_eq!(names.len(), 2, "{names:?}");
    let other = match names.iter().position(|n| n == "job.gmr") {
        Some(0) => &names[1],
        Some(_) => &names[0],
        None => panic!("job.gmr missing: {names:?}"),
    };
    let pid = other
        .strip_prefix("job.")
        .and_then(|r| r.strip_suffix(".gmr"))
        .expect("job.<pid>.gmr");
    assert!(pid.bytes().all(|b| b.is_ascii_digit()), "{names:?}");
}

/// The one `.gmr` in `spool`, if there is one yet.
fn spooled(spool: &Path) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(spool)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "gmr"))
        .collect();
    assert!(found.len() <= 1, "one process, one recording: {found:?}");
    found.pop()
}

/// The kernel records of a recording's activity buffers, per buffer: `(start_ns, end_ns)`.
fn kernels_per_buffer(file: &gpumeter_recording::gmr::GmrFile) -> Vec<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for f in &file.frames {
        if let gpumeter_recording::gmr::Frame::ActivityBuffer(b) = &f.frame {
            let d =
                gpumeter_cupti::decode(b, gpumeter_cupti::ApiVersion::Cupti12_8).expect("decodes");
            let k: Vec<(u64, u64)> = d
                .records
                .into_iter()
                .filter_map(|r| match r.record {
                    gpumeter_cupti::Record::Kernel(k) => Some((k.start, k.end)),
                    _ => None,
                })
                .collect();
            if !k.is_empty() {
                out.push(k);
            }
        }
    }
    out
}

/// The fake's streaming mode under the injection library, as the node agent sees a process:
/// the recording in the spool grows while the process runs (complete frames readable from
/// the bytes so far), and ends finished, with the process's labels in its header and kernel
/// records from many buffers, in time order.
#[test]
fn a_running_process_streams_a_labelled_recording() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((fake, app)) = build_fakes(dir.path()) else {
        return;
    };
    let spool = dir.path().join("spool");
    let mut child = Command::new(&app)
        .env("CUDA_INJECTION64_PATH", inject_lib())
        .env("GPUMETER_CUPTI_LIB", &fake)
        .env("GPUMETER_OUT", spool.join("%h-%p.gmr"))
        .env("GPUMETER_FLUSH_PERIOD_MS", "50")
        .env("FAKE_CUPTI_STREAM_MS", "50")
        .env("FAKE_APP_RUN_MS", "600")
        .env("POD_NAMESPACE", "team-a")
        .env("GPUMETER_TENANT", "alice")
        .env("POD_NAME", "")
        .env_remove("POD_UID")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the fake CUDA program");
    let pid = child.id();
    // Frame counts of the recording read while the process was still running (checked
    // after each read).
    let mut seen = std::collections::BTreeSet::new();
    let status = loop {
        let counted = spooled(&spool)
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| gpumeter_recording::gmr::read_gmr(&bytes).ok())
            .map(|f| f.frames.len());
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        seen.extend(counted);
        std::thread::sleep(Duration::from_millis(5));
    };
    let o = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(status.success(), "{status}: {stdout}\n{stderr}");
    assert!(
        stdout.contains("InitializeInjection=1"),
        "{stdout}\n{stderr}"
    );
    assert!(
        seen.len() >= 2,
        "the recording grows while the process runs: frame counts seen {seen:?}\n{stderr}"
    );

    let path = spooled(&spool).expect("the recording");
    let name = path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(name.ends_with(&format!("-{pid}.gmr")), "{name}");
    let bytes = std::fs::read(&path).expect("read");
    let file = gpumeter_recording::gmr::read_gmr(&bytes).expect("a valid .gmr");
    assert!(file.finished && file.torn.is_none() && file.damaged.is_empty());
    assert!(file.frames.len() >= *seen.last().expect("seen"), "{seen:?}");
    let labels = &file.header.labels;
    assert_eq!(
        labels.get("POD_NAMESPACE").map(String::as_str),
        Some("team-a")
    );
    assert_eq!(
        labels.get("GPUMETER_TENANT").map(String::as_str),
        Some("alice")
    );
    assert!(!labels.contains_key("POD_NAME") && !labels.contains_key("POD_UID"));
    // The child's cgroup is this test's (inherited).
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok();
    assert_eq!(
        labels.get("cgroup").map(String::as_str),
        cgroup
            .as_deref()
            .and_then(gpumeter_collector::labels::cgroup_path),
        "{labels:?}"
    );
    // So is its pid namespace, and the header's pid is its pid there.
    let ns = std::fs::read_link("/proc/self/ns/pid").expect("/proc/self/ns/pid");
    let ns = gpumeter_collector::labels::namespace_inode(ns.to_str().expect("utf-8"))
        .expect("a pid namespace link");
    assert_eq!(
        labels.get("pid_ns").map(String::as_str),
        Some(ns.to_string().as_str()),
        "{labels:?}"
    );
    assert_eq!(file.header.process_id, pid);
    assert_eq!(
        file.header.devices[0].uuid.as_deref(),
        Some("GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf")
    );

    let buffers = kernels_per_buffer(&file);
    assert!(
        buffers.len() >= 2,
        "kernels in several buffers: {buffers:?}"
    );
    assert!(buffers.iter().all(|b| b.len() == 5), "{buffers:?}");
    let kernels: Vec<(u64, u64)> = buffers.concat();
    assert!(
        kernels.windows(2).all(|w| w[0].1 <= w[1].0),
        "the process's kernels are in time order: {kernels:?}"
    );
    assert!(kernels.iter().all(|(s, e)| e - s == 2000), "{kernels:?}");
    // Near the recording's clock: after its start, not before.
    let t0 = file.header.clock.cupti_timestamp_ns;
    assert!(kernels[0].0 + 1_000_000 >= t0, "{t0} {kernels:?}");

    let mut meter = gpumeter_core::Meter::new(gpumeter_core::MeterConfig::default());
    let s = gpumeter_recording::meter_gmr(&mut meter, &name, &bytes, &Default::default())
        .expect("meters");
    assert_eq!(s.records, kernels.len() as u64);
    assert_eq!(s.device_keys, ["GPU-a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf"]);
}
