//! The injection library of this build and the fake libcupti and fake CUDA program of
//! gpumeter-inject's tests (`crates/gpumeter-inject/tests/c`), compiled against the CUPTI 12.8
//! wheel's headers: `gpumeter record`'s tests and the agent's end-to-end tests run real
//! processes under the real injection library with them. With `CI=true` missing headers fail
//! the test instead of skipping it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The newest of `target/<profile>/libgpumeter_inject.so` (`cargo build`) and its `deps/` copy
/// (`cargo test --workspace`).
pub fn inject_lib() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_gpumeter"));
    let dir = bin.parent().expect("bin directory");
    let newest = [
        dir.join("libgpumeter_inject.so"),
        dir.join("deps/libgpumeter_inject.so"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max();
    if let Some((_, p)) = newest {
        return p;
    }
    panic!(
        "libgpumeter_inject.so is not beside {}: run `cargo build -p gpumeter-inject` first",
        bin.display()
    );
}

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

/// The fake libcupti and fake CUDA program of gpumeter-inject's tests, compiled into `dir`.
pub fn build_fakes(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let includes = [
        header_dir("CUPTI12_INCLUDE", "cuda_cupti/include"),
        header_dir("CUDA12_INCLUDE", "cuda_runtime/include"),
        header_dir("CUDA12_CRT_INCLUDE", "cuda_nvcc/include"),
    ];
    if !includes[0].join("cupti.h").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but the CUPTI 12.8 headers are missing at {}",
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
    let c = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../gpumeter-inject/tests/c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let (lib, app) = (dir.join("libcupti.so.12"), dir.join("fake_cuda_app"));
    let mut fake = Command::new(&cc);
    fake.args(["-shared", "-fPIC", "-O1"]);
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
    host.args(["-O1", "-o"])
        .arg(&app)
        .arg(c.join("fake_cuda_app.c"))
        .arg("-ldl");
    for mut cmd in [fake, host] {
        let o = cmd.output().unwrap_or_else(|e| panic!("run {cc}: {e}"));
        assert!(o.status.success(), "{cmd:?}: {}", text(&o.stderr));
    }
    Some((lib, app))
}
