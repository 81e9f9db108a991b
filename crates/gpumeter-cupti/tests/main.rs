//! Integration tests of gpumeter-cupti: crafted buffers for every decoded kind in every API
//! version, and the C cross-check against the real CUPTI header structs (and libcupti 12.8's
//! and 13.0's own walk). Buffers libcupti recorded on a GPU, metering and the `.gmr` format
//! are gpumeter-recording's tests (tests/main.rs there).

use std::collections::{BTreeMap, BTreeSet};

use gpumeter_cupti::{decode, ActivityKind, ApiVersion, DecodeError, Record};

include!("support/buffers.rs");
include!("support/lines.rs");

/// Header members decoded as `bool`: a crafted value for them must be 0 or 1.
const BOOL_FIELDS: [&str; 4] = [
    "isCudaVisible",
    "isMigEnabled",
    "isGreenContext",
    "isDeviceLaunched",
];

// ------------------------------------------------------------------------------------------

mod crafted {
    use super::*;

    /// Every decoded field of every decoded kind, in every version, written at its table
    /// offset with a distinct byte pattern, decodes to exactly those bytes; and the decoded
    /// structs cover exactly the table's fields.
    #[test]
    fn every_decoded_field_round_trips() {
        for api in ApiVersion::ALL {
            for layout in api.layouts() {
                if layout.fields.is_empty() {
                    continue;
                }
                let mut bytes = vec![0u8; layout.size];
                let mut want: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
                for (i, f) in layout.fields.iter().enumerate() {
                    let pattern: Vec<u8> = if f.name == "kind" {
                        layout.kind.0.to_le_bytes().to_vec()
                    } else if BOOL_FIELDS.contains(&f.name) {
                        vec![1]
                    } else {
                        (0..f.width).map(|j| (17 * i + j + 1) as u8).collect()
                    };
                    bytes[f.offset..f.offset + f.width].copy_from_slice(&pattern);
                    want.insert(f.name, pattern);
                }
                let d = ok(decode(&bytes, api));
                assert_eq!(d.records.len(), 1, "{api} {}", layout.struct_name);
                let got: BTreeMap<&str, Vec<u8>> = fields_of(layout.kind, &d.records[0].record)
                    .into_iter()
                    .collect();
                assert_eq!(got, want, "{api} {} ({})", layout.struct_name, layout.kind);
            }
        }
    }

    /// A buffer with one record of every kind each version defines walks with the table
    /// sizes; undecoded kinds are stepped over and counted by name.
    #[test]
    fn every_kind_walks_and_unknown_ones_are_counted() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            let mut offsets = Vec::new();
            for l in api.layouts() {
                offsets.push((l.kind, b.rec(l.kind, &[])));
            }
            let d = ok(decode(&b.bytes, api));
            let got: Vec<_> = d.records.iter().map(|r| (r.kind, r.offset)).collect();
            assert_eq!(got, offsets, "{api}");
            assert_eq!(d.skipped.get("marker"), Some(&1), "{api}");
            assert_eq!(d.skipped.get("jit"), Some(&1), "{api}");
            assert_eq!(d.skipped.get("concurrent_kernel"), None, "{api}");
            let undecoded = d
                .records
                .iter()
                .filter(|r| matches!(r.record, Record::Other(_)))
                .count() as u64;
            assert_eq!(d.skipped.values().sum::<u64>(), undecoded);
            assert_eq!(d.trailing_zero_bytes, 0);
        }
    }

    #[test]
    fn api_versions() {
        assert_eq!(
            ok(ApiVersion::from_cupti(26)).cupti_api_version(),
            26,
            "12.8"
        );
        assert_eq!(ok(ApiVersion::from_cupti(130_001)), ApiVersion::Cupti13_0);
        // 13.0 GA (130000) emits the same structs as 13.0 Update 1.
        assert_eq!(ok(ApiVersion::from_cupti(130_000)), ApiVersion::Cupti13_0);
        assert_eq!(ok(ApiVersion::from_cupti(130_401)), ApiVersion::Cupti13_4);
        for n in [0, 24, 27, 28, 130_002, 130_100, 130_400, 130_402, 140_000] {
            assert_eq!(
                ApiVersion::from_cupti(n),
                Err(DecodeError::UnsupportedApiVersion(n))
            );
        }
        assert_eq!(ApiVersion::default(), ApiVersion::Cupti12_8);
        for api in ApiVersion::ALL {
            assert_eq!(ok(ApiVersion::from_cupti(api.cupti_api_version())), api);
        }
        assert_eq!(
            ApiVersion::ALL.map(|a| a.to_string()),
            [
                "CUPTI 12.8 (API 26)",
                "CUPTI 13.0 (API 130001)",
                "CUPTI 13.4 (API 130401)"
            ]
        );
        // The struct choices of the issue.
        let k = ActivityKind::CONCURRENT_KERNEL;
        assert_eq!(
            ApiVersion::Cupti12_8.struct_name(k),
            Some("CUpti_ActivityKernel9")
        );
        assert_eq!(
            ApiVersion::Cupti13_0.struct_name(k),
            Some("CUpti_ActivityKernel10")
        );
        assert_eq!(
            ApiVersion::Cupti13_4.struct_name(k),
            Some("CUpti_ActivityKernel13")
        );
        assert_eq!(ApiVersion::Cupti12_8.record_size(k), Some(208));
        assert_eq!(ApiVersion::Cupti13_0.record_size(k), Some(216));
        assert_eq!(ApiVersion::Cupti13_4.record_size(k), Some(248));
        // 13.0's structs per kind where they differ from 12.8's or 13.4's.
        let s13_0 = |k: u32| {
            let k = ActivityKind(k);
            (
                ApiVersion::Cupti13_0.struct_name(k),
                ApiVersion::Cupti13_0.record_size(k),
            )
        };
        assert_eq!(s13_0(1), (Some("CUpti_ActivityMemcpy6"), Some(96)));
        assert_eq!(s13_0(2), (Some("CUpti_ActivityMemset4"), Some(88)));
        assert_eq!(s13_0(8), (Some("CUpti_ActivityDevice5"), Some(184)));
        assert_eq!(s13_0(9), (Some("CUpti_ActivityContext3"), Some(32)));
        assert_eq!(s13_0(13), (Some("CUpti_ActivityMarkerData2"), Some(40)));
        assert_eq!(s13_0(40), (Some("CUpti_ActivityNvLink4"), Some(136)));
        assert_eq!(s13_0(50), (Some("CUpti_ActivityMemoryPool3"), Some(80)));
        assert_eq!(s13_0(52), (Some("CUpti_ActivityJit2"), Some(72)));
        assert_eq!(
            s13_0(55),
            (Some("CUpti_ActivityConfidentialComputeRotation"), Some(32))
        );
        assert_eq!(s13_0(56), (None, None));
        assert_eq!(
            ApiVersion::Cupti12_8.record_size(ActivityKind::GREEN_CONTEXT),
            None
        );
        assert_eq!(
            ApiVersion::Cupti13_0.record_size(ActivityKind::GREEN_CONTEXT),
            None
        );
    }

    #[test]
    fn truncated_record_names_its_offset() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            b.kernel(T0, T0 + 10, 1, 1);
            let last = b.rec(ActivityKind::MEMSET, &[("bytes", 4)]);
            let size = b.bytes.len() - last;
            for cut in last + 1..b.bytes.len() {
                let e = decode(&b.bytes[..cut], api);
                let want = if cut - last < 4 {
                    // Not even the kind fits; its bytes are non-zero, so not a zeroed tail.
                    DecodeError::Truncated {
                        offset: last,
                        kind: None,
                        needed: 4,
                        available: cut - last,
                    }
                } else {
                    DecodeError::Truncated {
                        offset: last,
                        kind: Some(ActivityKind::MEMSET),
                        needed: size,
                        available: cut - last,
                    }
                };
                assert_eq!(e, Err(want), "{api} cut at {cut}");
            }
            let msg = match decode(&b.bytes[..b.bytes.len() - 1], api) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("decoded a truncated buffer"),
            };
            assert!(msg.contains(&format!("byte {last}")), "{msg}");
            assert!(msg.contains("MEMSET"), "{msg}");
        }
    }

    #[test]
    fn any_alignment_decodes_the_same() {
        for api in ApiVersion::ALL {
            let mut b = Buf::new(api);
            b.rec(ActivityKind::DEVICE, &[("numMultiprocessors", 132)]);
            b.kernel(T0, T0 + 100, 264, 5);
            b.rec(
                ActivityKind::MEMCPY,
                &[("bytes", 1 << 40), ("start", T0.into())],
            );
            let want = ok(decode(&b.bytes, api));
            for pad in 1..8 {
                let mut v = vec![0xEEu8; pad];
                v.extend_from_slice(&b.bytes);
                assert_eq!(ok(decode(&v[pad..], api)), want, "{api} pad {pad}");
            }
        }
    }

    #[test]
    fn unknown_and_invalid_kinds() {
        let api = ApiVersion::Cupti12_8;
        let mut b = Buf::new(api);
        b.kernel(T0, T0 + 1, 1, 1);
        let at = b.bytes.len();
        // A 13.x-only kind in a 12.8 buffer: its size is unknown there.
        b.bytes.extend_from_slice(&59u32.to_le_bytes());
        b.bytes.extend_from_slice(&[0; 60]);
        assert_eq!(
            decode(&b.bytes, api),
            Err(DecodeError::UnknownKind {
                offset: at,
                kind: 59,
                api
            })
        );
        // 13.0 ends at CONFIDENTIAL_COMPUTE_ROTATION (55): 56 and 59 are unknown there too.
        let mut b130 = Buf::new(ApiVersion::Cupti13_0);
        b130.rec(ActivityKind(55), &[]);
        let at130 = b130.bytes.len();
        for k in [56u32, 59] {
            let mut bytes = b130.bytes.clone();
            bytes.extend_from_slice(&k.to_le_bytes());
            bytes.extend_from_slice(&[0; 300]);
            assert_eq!(
                decode(&bytes, ApiVersion::Cupti13_0),
                Err(DecodeError::UnknownKind {
                    offset: at130,
                    kind: k,
                    api: ApiVersion::Cupti13_0
                })
            );
        }
        let d = ok(decode(&b130.bytes, ApiVersion::Cupti13_0));
        assert_eq!(d.skipped.get("confidential_compute_rotation"), Some(&1));
        // The same kind is a GREEN_CONTEXT record in 13.4, stepped over and counted.
        let mut b13 = Buf::new(ApiVersion::Cupti13_4);
        b13.rec(ActivityKind::GREEN_CONTEXT, &[]);
        let d = ok(decode(&b13.bytes, ApiVersion::Cupti13_4));
        assert_eq!(d.skipped.get("green_context"), Some(&1));
        // A kind no release defines.
        let mut bad = 0x7fff_ffffu32.to_le_bytes().to_vec();
        bad.extend_from_slice(&[0; 36]);
        assert!(matches!(
            decode(&bad, ApiVersion::Cupti13_4),
            Err(DecodeError::UnknownKind {
                offset: 0,
                kind: 0x7fff_ffff,
                ..
            })
        ));
        // Kind 0 followed by zeros: the unused tail of a whole buffer.
        let mut tail = b.bytes[..at].to_vec();
        tail.extend_from_slice(&[0; 1000]);
        let d = ok(decode(&tail, api));
        assert_eq!((d.records.len(), d.trailing_zero_bytes), (1, 1000));
        tail.extend_from_slice(&[0, 0, 0]);
        assert_eq!(ok(decode(&tail, api)).trailing_zero_bytes, 1003);
        // Kind 0 followed by something else: an error.
        let mut junk = b.bytes[..at].to_vec();
        junk.extend_from_slice(&[0, 0, 0, 0, 1]);
        assert_eq!(
            decode(&junk, api),
            Err(DecodeError::InvalidKind { offset: at })
        );
        assert_eq!(ok(decode(&[], api)).records.len(), 0);
    }

    #[test]
    fn device_uuid_keys() {
        let api = ApiVersion::Cupti13_4;
        let mut b = Buf::new(api);
        let uuid = i128::from_le_bytes([
            0x74, 0xe1, 0x28, 0xb2, 0x90, 0xb6, 0xb4, 0x09, 0x07, 0xc8, 0x33, 0xbe, 0xe5, 0xff,
            0x6f, 0x88,
        ]);
        b.rec(ActivityKind::DEVICE, &[("uuid", uuid)]);
        b.rec(
            ActivityKind::DEVICE,
            &[("uuid", uuid), ("isMigEnabled", 1), ("migUuid", 0x11)],
        );
        b.rec(ActivityKind::DEVICE, &[]);
        let d = ok(decode(&b.bytes, api));
        let keys: Vec<Option<String>> = d
            .records
            .iter()
            .map(|r| match &r.record {
                Record::Device(d) => d.uuid_key(),
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            keys,
            [
                Some("GPU-74e128b2-90b6-b409-07c8-33bee5ff6f88".to_string()),
                Some("MIG-11000000-0000-0000-0000-000000000000".to_string()),
                None
            ]
        );
    }
}

// ------------------------------------------------------------------------------------------

mod cross_check {
    //! The C helper (`tests/c/make_buffers.c`) compiled against each wheel's real headers is
    //! the oracle: its `offsetof`/`sizeof`, its buffers and its expected values; and, for 12.8
    //! and 13.0 (whose libcupti walks buffers without a GPU or driver), libcupti's own
    //! `cuptiActivityGetNextRecord`: its record size for every kind value, and its walk of the
    //! same buffers.
    //!
    //! Headers come from `CUPTI12_INCLUDE`, `CUDA12_INCLUDE`, `CUDA12_CRT_INCLUDE`,
    //! `CUPTI12_LIB` (and the `13` variants for 13.4, the `130` ones for 13.0), as
    //! `bindings/cupti/fetch-wheels.sh` writes them into `bindings/cupti/.wheels/env.sh`, else
    //! from that `.wheels` folder's fixed layout. Missing headers or compiler, for any version:
    //! a notice, or a failure under `CI=true`.

    use super::*;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::OnceLock;

    struct Toolchain {
        includes: Vec<PathBuf>,
        lib: Option<PathBuf>,
    }

    fn wheels() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bindings/cupti/.wheels")
    }

    fn env_path(name: &str) -> Option<PathBuf> {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    }

    fn toolchain(api: ApiVersion) -> Result<Toolchain, String> {
        // The suffix of the env.sh variables and the folder under `.wheels` of each version.
        let (n, dir) = match api {
            ApiVersion::Cupti12_8 => ("12", "cu12"),
            ApiVersion::Cupti13_0 => ("130", "cu130"),
            ApiVersion::Cupti13_4 => ("13", "cu13"),
            other => return Err(format!("no CUPTI wheel is pinned for {other}")),
        };
        let lib_name = match api {
            ApiVersion::Cupti12_8 => "libcupti.so.12",
            _ => "libcupti.so.13",
        };
        let w = wheels().join(dir);
        let (cupti, cuda, crt, lib) = match api {
            ApiVersion::Cupti12_8 => (
                w.join("nvidia/cuda_cupti/include"),
                w.join("nvidia/cuda_runtime/include"),
                w.join("nvidia/cuda_nvcc/include"),
                w.join("nvidia/cuda_cupti/lib"),
            ),
            _ => (
                w.join("nvidia/cu13/include"),
                w.join("nvidia/cu13/include"),
                w.join("nvidia/cu13/include"),
                w.join("nvidia/cu13/lib"),
            ),
        };
        let cupti = env_path(&format!("CUPTI{n}_INCLUDE")).unwrap_or(cupti);
        let cuda = env_path(&format!("CUDA{n}_INCLUDE")).unwrap_or(cuda);
        let crt = env_path(&format!("CUDA{n}_CRT_INCLUDE")).unwrap_or(crt);
        let lib = env_path(&format!("CUPTI{n}_LIB")).unwrap_or(lib);
        if !cupti.join("cupti.h").is_file() {
            return Err(format!(
                "CUPTI {} headers not found ({}); run bindings/cupti/fetch-wheels.sh and \
                 source bindings/cupti/.wheels/env.sh",
                api.cuda_release(),
                cupti.display()
            ));
        }
        if !cuda.join("cuda.h").is_file() {
            return Err(format!("cuda.h not found in {}", cuda.display()));
        }
        let lib = if lib.is_dir() {
            lib.join(lib_name)
        } else {
            lib
        };
        Ok(Toolchain {
            includes: vec![cupti, cuda, crt],
            lib: lib.is_file().then_some(lib),
        })
    }

    /// Compiles the helper for `api` once per test run; `Err` says why it cannot be.
    fn helper(api: ApiVersion) -> Result<PathBuf, String> {
        static HELPERS: [OnceLock<Result<PathBuf, String>>; ApiVersion::ALL.len()] =
            [const { OnceLock::new() }; ApiVersion::ALL.len()];
        let Some(i) = ApiVersion::ALL.iter().position(|&a| a == api) else {
            return Err(format!("{api} is not in ApiVersion::ALL"));
        };
        HELPERS[i]
            .get_or_init(|| {
                let tc = toolchain(api)?;
                let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/make_buffers.c");
                let out = Path::new(env!("CARGO_TARGET_TMPDIR"))
                    .join(format!("make_buffers_{}", api.cupti_api_version()));
                let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
                let mut cmd = Command::new(&cc);
                cmd.args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror"]);
                for i in &tc.includes {
                    cmd.arg("-I").arg(i);
                }
                cmd.arg("-o").arg(&out).arg(&src).arg("-ldl");
                let o = cmd
                    .output()
                    .map_err(|e| format!("cannot run the C compiler `{cc}`: {e}"))?;
                if !o.status.success() {
                    return Err(format!(
                        "compiling {} failed:\n{}",
                        src.display(),
                        String::from_utf8_lossy(&o.stderr)
                    ));
                }
                Ok(out)
            })
            .clone()
    }

    /// The helper, or `None` after a notice (a panic under `CI=true`).
    fn helper_or_skip(api: ApiVersion) -> Option<PathBuf> {
        match helper(api) {
            Ok(p) => Some(p),
            Err(why) => {
                skip(&why);
                None
            }
        }
    }

    fn skip(why: &str) {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{why} (CI=true: the cross-check must run)");
        }
        {
            // Straight to stderr, past the test harness's capture: a skip is never silent.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped: the C cross-check: {why}");
        }
    }

    fn run(helper: &Path, args: &[&std::ffi::OsStr]) -> String {
        let o = match Command::new(helper).args(args).output() {
            Ok(o) => o,
            Err(e) => panic!("running {}: {e}", helper.display()),
        };
        assert!(
            o.status.success(),
            "{} {:?} failed: {}",
            helper.display(),
            args,
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn tmp(name: &str) -> PathBuf {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
    }

    /// Our tables against the headers' `offsetof`/`sizeof`, for every kind (its struct and
    /// size) and every decoded field, in every version.
    #[test]
    fn layouts_match_the_headers() {
        for api in ApiVersion::ALL {
            let Some(h) = helper_or_skip(api) else {
                continue;
            };
            let text = run(&h, &["layouts".as_ref()]);
            let mut sizes: BTreeMap<u32, (String, usize)> = BTreeMap::new();
            let mut fields: BTreeSet<(String, String, usize, usize)> = BTreeSet::new();
            let mut count = 0u32;
            for line in text.lines() {
                let w: Vec<&str> = line.split_whitespace().collect();
                match w.as_slice() {
                    ["api", n] => assert_eq!(n.parse::<u32>().ok(), Some(api.cupti_api_version())),
                    ["size", k, st, s] => {
                        sizes.insert(ok(k.parse()), (st.to_string(), ok(s.parse())));
                    }
                    ["field", st, f, o, s] => {
                        fields.insert((
                            st.to_string(),
                            f.to_string(),
                            ok(o.parse()),
                            ok(s.parse()),
                        ));
                    }
                    ["count", n] => count = ok(n.parse()),
                    _ => panic!("unexpected line {line:?}"),
                }
            }
            let ours: BTreeMap<u32, (String, usize)> = api
                .layouts()
                .iter()
                .map(|l| (l.kind.0, (l.struct_name.to_string(), l.size)))
                .collect();
            assert_eq!(ours, sizes, "{api}: record structs and sizes per kind");
            assert_eq!(
                count as usize,
                sizes.len() + 1,
                "{api}: CUPTI_ACTIVITY_KIND_COUNT"
            );
            let mut ours_f = BTreeSet::new();
            for l in api.layouts() {
                for f in &l.fields {
                    ours_f.insert((
                        l.struct_name.to_string(),
                        f.name.to_string(),
                        f.offset,
                        f.width,
                    ));
                }
            }
            let only_ours: Vec<_> = ours_f.difference(&fields).collect();
            let only_c: Vec<_> = fields.difference(&ours_f).collect();
            assert!(
                only_ours.is_empty() && only_c.is_empty(),
                "{api}: field tables differ from the headers:\n ours only: {only_ours:?}\n headers only: {only_c:?}"
            );
            eprintln!(
                "{api}: {} kinds, {} fields agree with the headers",
                sizes.len(),
                fields.len()
            );
        }
    }

    /// Buffers of real header structs (every decoded kind, plus skipped ones) decode to the
    /// values the C helper set, field by field, in every version.
    #[test]
    fn crafted_buffers_agree_field_by_field() {
        for api in ApiVersion::ALL {
            let Some(h) = helper_or_skip(api) else {
                continue;
            };
            let v = api.cupti_api_version();
            let (bin, exp) = (tmp(&format!("buf_{v}.bin")), tmp(&format!("exp_{v}.txt")));
            run(&h, &["buffer".as_ref(), bin.as_os_str(), exp.as_os_str()]);
            let buf = ok(std::fs::read(&bin));
            let text = ok(std::fs::read_to_string(&exp));
            assert_eq!(text.lines().next(), Some(format!("api {v}").as_str()));
            let lines = parse_lines(&text, "record");
            let kinds: BTreeSet<u32> = lines.iter().map(|l| l.0).collect();
            for k in [1, 2, 3, 4, 5, 8, 9, 10, 17, 22, 24, 39, 48, 49, 51] {
                assert!(kinds.contains(&k), "{api}: the C buffer lacks kind {k}");
            }
            let n = agree(api, &buf, &lines, "crafted buffer");
            assert!(n > 250, "{api}: only {n} fields compared");
            eprintln!(
                "{api}: {} records, {n} fields agree with the C structs",
                lines.len()
            );
        }
    }

    /// One zeroed record of every kind of the release, laid out by the C helper with the
    /// headers' `sizeof`, walks to the same kinds and offsets.
    #[test]
    fn every_kind_of_the_release_walks() {
        for api in ApiVersion::ALL {
            let Some(h) = helper_or_skip(api) else {
                continue;
            };
            let bin = tmp(&format!("all_{}.bin", api.cupti_api_version()));
            run(&h, &["allkinds".as_ref(), bin.as_os_str()]);
            let buf = ok(std::fs::read(&bin));
            let d = ok(decode(&buf, api));
            let kinds: Vec<u32> = d.records.iter().map(|r| r.kind.0).collect();
            let want: Vec<u32> = api.layouts().iter().map(|l| l.kind.0).collect();
            assert_eq!(kinds, want, "{api}");
        }
    }

    /// The kinds that libcupti 13.0 and 13.4 refuse in their own walk
    /// (`CUPTI_ERROR_INVALID_KIND`) although their enums still define them: the legacy event,
    /// metric, source-level and PC-sampling kinds that the 13.x headers call "unsupported" from
    /// CUDA 13.0 on (enabling them answers `CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED`). Our
    /// tables keep their header sizes. Seen with libcupti 13.0.85 here and with 13.0.85 and
    /// 13.4.92 on an H200 with driver 580.159.04.
    const REFUSED_BY_LIBCUPTI_13: [u32; 16] =
        [6, 7, 14, 15, 16, 21, 23, 24, 29, 30, 31, 32, 41, 42, 43, 44];

    /// `CUPTI_ERROR_INVALID_KIND`.
    const INVALID_KIND: i64 = 21;

    /// Whether libcupti of `api` walks buffers without a GPU or driver (12.8 and 13.0 do;
    /// 13.4 answers `CUPTI_ERROR_UNKNOWN` to every call there). For these, a libcupti that
    /// cannot be used is a failure under `CI=true`; for the others a notice.
    fn walks_without_driver(api: ApiVersion) -> bool {
        matches!(api, ApiVersion::Cupti12_8 | ApiVersion::Cupti13_0)
    }

    /// The C helper and the libcupti of `api`, or `None` after a notice (a failure under
    /// `CI=true` for the versions that need no driver).
    fn helper_and_libcupti(api: ApiVersion) -> Option<(PathBuf, PathBuf)> {
        let why = match (helper(api), toolchain(api).map(|t| t.lib)) {
            (Ok(h), Ok(Some(lib))) => return Some((h, lib)),
            (Err(e), _) | (_, Err(e)) => e,
            (_, Ok(None)) => format!("libcupti of {api} not found (bindings/cupti/.wheels)"),
        };
        if walks_without_driver(api) {
            skip(&why);
        } else {
            {
                // Straight to stderr, past the test harness's capture: a skip is never silent.
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: libcupti's walk for {api}: {why}"
                );
            }
        }
        None
    }

    /// libcupti's walk of `buf` through `crates/cupti-sys` (the loader the collector uses):
    /// for 12.8 `GPUMETER_CUPTI_LIB`, else the libcupti of the version's wheel. `None` when it
    /// cannot be loaded or used here; the C helper's `walk` mode (the same libcupti function
    /// through `dlopen`) still runs then, and with `CI=true` the helper itself is required.
    fn libcupti_walk(api: ApiVersion, lib: &Path, buf: &[u8]) -> Option<Vec<(u32, usize)>> {
        let path = match api {
            ApiVersion::Cupti12_8 => std::env::var_os("GPUMETER_CUPTI_LIB")
                .map(PathBuf::from)
                .unwrap_or_else(|| lib.to_path_buf()),
            _ => lib.to_path_buf(),
        };
        let cupti = cupti_sys::Cupti::load_from(&path).ok()?;
        if cupti.version().ok()? != api.cupti_api_version() {
            return None;
        }
        let mut copy = buf.to_vec();
        let len = copy.len();
        let walk = cupti.walk_activity_buffer(&mut copy, len).ok()?;
        assert!(
            !walk.ended_on_invalid_kind,
            "{api}: libcupti stopped on an invalid kind"
        );
        Some(walk.records)
    }

    /// libcupti's own record size of every kind value (the helper's `steps` mode: how far
    /// `cuptiActivityGetNextRecord` steps over a record of that kind) equals our table's size,
    /// for every kind it accepts; the kinds it refuses are the ones our table lacks, plus, for
    /// 13.x, the legacy kinds 13.x no longer emits ([`REFUSED_BY_LIBCUPTI_13`]).
    #[test]
    fn libcupti_record_sizes_match_the_tables() {
        for api in ApiVersion::ALL {
            let Some((h, lib)) = helper_and_libcupti(api) else {
                continue;
            };
            let text = run(&h, &["steps".as_ref(), lib.as_os_str()]);
            let mut sizes: BTreeMap<u32, usize> = BTreeMap::new();
            let mut refused: BTreeMap<u32, i64> = BTreeMap::new();
            for line in text.lines() {
                match line.split_whitespace().collect::<Vec<_>>().as_slice() {
                    ["step", k, "refused", st] => {
                        refused.insert(ok(k.parse()), ok(st.parse()));
                    }
                    ["step", k, size] => {
                        sizes.insert(ok(k.parse()), ok(size.parse()));
                    }
                    _ => panic!("unexpected line {line:?}"),
                }
            }
            if sizes.is_empty() && !walks_without_driver(api) {
                eprintln!(
                    "notice: libcupti of {api} walks nothing here (status {:?}; no driver?)",
                    refused.values().next()
                );
                continue;
            }
            for (&k, &size) in &sizes {
                assert_eq!(
                    api.record_size(ActivityKind(k)),
                    Some(size),
                    "{api}: libcupti steps {size} bytes over kind {}",
                    ActivityKind(k)
                );
            }
            assert!(
                refused.values().all(|&st| st == INVALID_KIND),
                "{api}: {refused:?}"
            );
            let refused_known: BTreeSet<u32> = refused
                .keys()
                .copied()
                .filter(|&k| api.record_size(ActivityKind(k)).is_some())
                .collect();
            let want: BTreeSet<u32> = match api {
                ApiVersion::Cupti12_8 => BTreeSet::new(),
                _ => REFUSED_BY_LIBCUPTI_13.into_iter().collect(),
            };
            assert_eq!(refused_known, want, "{api}: kinds libcupti refuses");
            for l in api.layouts() {
                assert!(
                    sizes.contains_key(&l.kind.0) || refused.contains_key(&l.kind.0),
                    "{api}: {} not probed",
                    l.kind
                );
            }
            eprintln!(
                "{api}: libcupti steps {} kinds by our sizes, refuses {} we know",
                sizes.len(),
                refused_known.len()
            );
        }
    }

    /// The records of `buf` (laid out as the C helper's `lines` say, with the header sizes of
    /// `api`) without those of `kinds`: the buffer libcupti can walk, and its expected lines at
    /// their new offsets.
    fn without_kinds(
        api: ApiVersion,
        buf: &[u8],
        lines: &[Line],
        kinds: &[u32],
    ) -> (Vec<u8>, Vec<Line>) {
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for (kind, offset, fields) in lines {
            let size = api
                .record_size(ActivityKind(*kind))
                .unwrap_or_else(|| panic!("{api}: no size for kind {kind}"));
            if kinds.contains(kind) {
                continue;
            }
            kept.push((*kind, out.len(), fields.clone()));
            out.extend_from_slice(&buf[*offset..*offset + size]);
        }
        (out, kept)
    }

    /// libcupti's `cuptiActivityGetNextRecord` walks both C buffers (the crafted one and one of
    /// every kind) record by record to the same kinds and offsets as our decoder, and the key
    /// fields read through the header structs at libcupti's addresses agree with it; also
    /// through `cupti-sys`. For 13.x, the records of the kinds libcupti 13.x refuses are left
    /// out of the buffers first. Runs for 12.8 and 13.0 (and 13.4 where a driver lets its
    /// libcupti work).
    #[test]
    fn libcupti_walk_agrees() {
        for api in ApiVersion::ALL {
            let Some((h, lib)) = helper_and_libcupti(api) else {
                continue;
            };
            let v = api.cupti_api_version();
            let (bin, exp, all) = (
                tmp(&format!("wbuf_{v}.bin")),
                tmp(&format!("wexp_{v}.txt")),
                tmp(&format!("wall_{v}.bin")),
            );
            run(&h, &["buffer".as_ref(), bin.as_os_str(), exp.as_os_str()]);
            run(&h, &["allkinds".as_ref(), all.as_os_str()]);
            let refused: &[u32] = match api {
                ApiVersion::Cupti12_8 => &[],
                _ => &REFUSED_BY_LIBCUPTI_13,
            };
            let crafted = ok(std::fs::read(&bin));
            let crafted_lines = parse_lines(&ok(std::fs::read_to_string(&exp)), "record");
            let every = ok(std::fs::read(&all));
            let every_lines: Vec<Line> = ok(decode(&every, api))
                .records
                .iter()
                .map(|r| (r.kind.0, r.offset, Vec::new()))
                .collect();
            for (buf, lines, what) in [
                (&crafted, &crafted_lines, "crafted buffer"),
                (&every, &every_lines, "all kinds"),
            ] {
                let (buf, want) = without_kinds(api, buf, lines, refused);
                let path = tmp(&format!("walk_{v}_{}.bin", what.replace(' ', "_")));
                ok(std::fs::write(&path, &buf));
                let text = run(&h, &["walk".as_ref(), lib.as_os_str(), path.as_os_str()]);
                if text.trim() == "end status=999" && !walks_without_driver(api) {
                    eprintln!("notice: libcupti of {api} does not walk here (no driver?)");
                    break;
                }
                // CUPTI_ERROR_MAX_LIMIT_REACHED (12): the walk reached the end of the buffer.
                assert!(
                    text.lines().any(|l| l == "end status=12"),
                    "{api}: libcupti walk of the {what} did not end cleanly:\n{text}"
                );
                let lines = parse_lines(&text, "walk");
                let at: Vec<(u32, usize)> = lines.iter().map(|l| (l.0, l.1)).collect();
                let want_at: Vec<(u32, usize)> = want.iter().map(|l| (l.0, l.1)).collect();
                assert_eq!(at, want_at, "{api}: libcupti walk of the {what}");
                let n = agree(api, &buf, &lines, &format!("libcupti walk of the {what}"));
                let via_cupti_sys = libcupti_walk(api, &lib, &buf).map(|walk| {
                    assert_eq!(walk, want_at, "{api}: cupti-sys walk of the {what}");
                    walk.len()
                });
                if std::env::var("CI").as_deref() == Ok("true") && walks_without_driver(api) {
                    assert!(
                        via_cupti_sys.is_some(),
                        "CI=true: libcupti of {api} must load and walk through cupti-sys"
                    );
                }
                eprintln!(
                    "{api}: libcupti walk of the {what}: {} records, {n} fields agree; \
                     cupti-sys: {via_cupti_sys:?} records agree",
                    lines.len()
                );
            }
        }
    }
}
