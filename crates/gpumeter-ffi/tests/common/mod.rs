//! What the tests that build and run programs against the C ABI share: the libraries as they
//! are installed (`scripts/build-c-abi`), the `gpumeter` binary, and tool checks.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The repository root (programs run there).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repository root")
}

/// What `scripts/build-c-abi` built, and the `gpumeter` binary of the same profile.
pub struct Built {
    /// `target/<profile>`: this test binary lives in its `deps/`.
    pub profile_dir: PathBuf,
    /// `target/<profile>/c-abi`: `include/`, `lib/` (`libgpumeter_ffi.a`,
    /// `libgpumeter_ffi.so.1`, `libgpumeter_ffi.so`), `lib/pkgconfig/gpumeter.pc`.
    pub c_abi: PathBuf,
}

impl Built {
    /// `c-abi/lib`.
    pub fn lib(&self) -> PathBuf {
        self.c_abi.join("lib")
    }

    /// `c-abi/include`.
    pub fn include(&self) -> PathBuf {
        self.c_abi.join("include")
    }

    /// The shared library, by its SONAME.
    pub fn shared(&self) -> PathBuf {
        self.lib().join("libgpumeter_ffi.so.1")
    }

    /// The static library.
    pub fn static_lib(&self) -> PathBuf {
        self.lib().join("libgpumeter_ffi.a")
    }

    /// The `gpumeter` binary.
    pub fn cli(&self) -> PathBuf {
        self.profile_dir.join("gpumeter")
    }

    /// Linker arguments for the shared library, found at run time through an rpath.
    pub fn dynamic_args(&self) -> Vec<String> {
        let l = self.lib().to_str().expect("UTF-8 target path").to_string();
        vec![
            format!("-L{l}"),
            format!("-Wl,-rpath,{l}"),
            "-lgpumeter_ffi".to_string(),
        ]
    }

    /// Linker arguments for the static library and what it needs.
    pub fn static_args(&self) -> Vec<String> {
        vec![
            self.static_lib()
                .to_str()
                .expect("UTF-8 target path")
                .to_string(),
            "-lpthread".to_string(),
            "-ldl".to_string(),
            "-lm".to_string(),
        ]
    }
}

/// Builds, once per test binary, the libraries as they are installed (`scripts/build-c-abi`,
/// in this test binary's profile) and the `gpumeter` binary: `cargo test` builds only the
/// crate's rlib for its tests, so the libraries and the CLI the programs are compared with are
/// then those of the code under test, never stale ones.
pub fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let exe = std::env::current_exe().expect("test binary path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile> above deps/")
            .to_path_buf();
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cli = Command::new(&cargo);
        cli.args(["build", "--quiet", "-p", "gpumeter-cli"]);
        let mut c_abi = Command::new(root().join("scripts/build-c-abi"));
        if release {
            cli.arg("--release");
            c_abi.arg("--release");
        }
        run(cli.current_dir(root()));
        // The script runs cargo: the same one as this test's.
        run(c_abi.env("CARGO", &cargo).current_dir(root()));
        let built = Built {
            c_abi: profile_dir.join("c-abi"),
            profile_dir,
        };
        for f in [built.shared(), built.static_lib(), built.cli()] {
            assert!(f.is_file(), "{} was not built", f.display());
        }
        built
    })
}

/// Whether `tool` runs (`tool <version_arg>`). Missing under `CI=true`: a failure; otherwise
/// a notice and `false`.
pub fn have(tool: &str, version_arg: &str, what_is_skipped: &str) -> bool {
    let ok = Command::new(tool)
        .arg(version_arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: {tool} not found (`.ci/run` installs it)"
        );
        // Straight to stderr, past the test harness's capture: a skip is never silent.
        let _ = writeln!(
            std::io::stderr(),
            "skipped: {tool} not found; {what_is_skipped} (CI=true makes this a failure)"
        );
    }
    ok
}

/// Runs a command and returns its output, failing with its stderr unless it succeeded.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Compiles C `sources` with `gcc -std=c11 -Wall -Wextra -Werror -g`, `extra` flags, the
/// header's directory, and after the sources `libs`.
pub fn compile_c(out: &Path, sources: &[PathBuf], extra: &[&str], libs: &[String]) {
    run(Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g"])
        .args(extra)
        .arg("-I")
        .arg(root().join("bindings/c"))
        .args(sources)
        .arg("-o")
        .arg(out)
        .args(libs));
}

/// The flags of a build under AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer.
pub const SANITIZE: [&str; 3] = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
];

/// The environment of a sanitized program's run.
pub fn sanitizer_env(cmd: &mut Command) -> &mut Command {
    cmd.env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
}
