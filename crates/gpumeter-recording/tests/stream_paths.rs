//! A [`CuptiStream`] books a buffer of the column kinds straight from its columns, and any
//! other buffer through typed records (issue 34): on every real CUPTI buffer the project tests
//! with — libcupti 12.8, 13.0 and 13.4 on an H200 (`crates/gpumeter-cupti/tests/c/live/`) and
//! every committed `.gmr` recording (`examples/data/`, `fuzz/seeds/gmr_reader/`) — the
//! columnar path's snapshot is the typed path's. Each input is booked twice: as recorded (its
//! buffers with DEVICE or CONTEXT records take the typed path either way), and with only the
//! records of the column kinds kept, so that every one of its buffers takes the columnar path.
//! All are committed files: a missing one fails the test, it never skips.

use std::path::{Path, PathBuf};

use gpumeter_core::{Meter, MeterConfig, TenantMap, TenantName, UsageReport, WindowSize};
use gpumeter_cupti::stream::CuptiStream;
use gpumeter_cupti::{decode, decode_buffer_columns, ApiVersion, BufferColumns, Record};
use gpumeter_recording::gmr::{read_gmr, Frame};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `.ext` files of `dir` (relative to the repository root), sorted.
fn files(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = root().join(dir);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut out: Vec<PathBuf> = entries
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .collect();
    out.sort();
    out
}

/// Every input: its name, API version and activity buffers in order.
fn inputs() -> Vec<(String, ApiVersion, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for path in files("crates/gpumeter-cupti/tests/c/live", "bin") {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let v = stem.rsplit('_').next().and_then(|v| v.parse::<u32>().ok());
        let api = v
            .and_then(|v| ApiVersion::from_cupti(v).ok())
            .unwrap_or_else(|| panic!("{}: no API version in the name", path.display()));
        out.push((path.display().to_string(), api, vec![read(&path)]));
    }
    for dir in ["examples/data", "fuzz/seeds/gmr_reader"] {
        for path in files(dir, "gmr") {
            let file = read_gmr(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let api = ApiVersion::from_cupti(file.header.cupti_api_version)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let buffers = file
                .frames
                .into_iter()
                .filter_map(|f| match f.frame {
                    Frame::ActivityBuffer(b) => Some(b),
                    _ => None,
                })
                .collect();
            out.push((path.display().to_string(), api, buffers));
        }
    }
    out
}

/// `buf` with only its records of the kinds with columns (kernels, copies, memsets, API and
/// EXTERNAL_CORRELATION records), in their order.
fn column_kinds_only(buf: &[u8], api: ApiVersion) -> Vec<u8> {
    let d = decode(buf, api).expect("a recorded buffer decodes");
    let mut out = Vec::new();
    for r in &d.records {
        let kept = matches!(
            r.record,
            Record::Kernel(_)
                | Record::Memcpy(_)
                | Record::PeerCopy(_)
                | Record::Memset(_)
                | Record::Api(_)
                | Record::ExternalCorrelation(_)
        );
        if kept {
            out.extend_from_slice(&buf[r.offset..r.offset + r.size]);
        }
    }
    out
}

/// A snapshot as text without the stream's random identity.
fn text(stream: &CuptiStream, report: &UsageReport) -> String {
    let sha = stream.sha256();
    let mut report = report.clone();
    report.sha256.clear();
    format!("{report:?}")
        .replace(&sha, "SHA")
        .replace(&sha[..16], "LABEL")
}

/// A tenant per process id and per external id the buffers' API and EXTERNAL_CORRELATION
/// records name, so that a join missed or wrong moves usage between tenants.
fn tenants(api: ApiVersion, buffers: &[Vec<u8>]) -> TenantMap {
    let mut map = TenantMap::default();
    let name = |s: String| TenantName::parse(&s).expect("a tenant name");
    for b in buffers {
        for r in decode(b, api).expect("decodes").records {
            match r.record {
                Record::Api(a) => {
                    map.pid
                        .insert(a.process_id, name(format!("p{}", a.process_id)));
                }
                Record::ExternalCorrelation(e) => {
                    map.external
                        .insert(e.external_id, name(format!("x{}", e.external_id)));
                }
                _ => {}
            }
        }
    }
    map
}

/// The snapshot of `buffers` booked through one stream, on the typed path or not.
fn book(api: ApiVersion, buffers: &[Vec<u8>], typed: bool, window: u64) -> String {
    let config = MeterConfig {
        window: WindowSize::from_seconds(window).expect("a window"),
        ..MeterConfig::default()
    };
    let mut meter = Meter::new(config);
    meter.set_tenant_map(tenants(api, buffers));
    let mut stream = CuptiStream::new("rec", api);
    for b in buffers {
        if typed {
            let p = CuptiStream::prepare_typed(api, b).expect("decodes");
            stream.apply(&mut meter, p);
        } else {
            stream.ingest(&mut meter, b).expect("decodes");
        }
    }
    let report = stream.snapshot(&mut meter).expect("snapshot");
    text(&stream, &report)
}

#[test]
fn real_buffers_book_alike_on_both_paths() {
    let (mut columnar, mut inputs_n, mut kernels) = (0, 0, 0);
    let mut cols = BufferColumns::new();
    for (name, api, buffers) in inputs() {
        let only: Vec<Vec<u8>> = buffers.iter().map(|b| column_kinds_only(b, api)).collect();
        for b in &only {
            let counts = decode_buffer_columns(b, api, &mut cols).expect("decodes");
            assert_eq!(
                counts.skipped.total(),
                0,
                "{name}: a kind without columns kept"
            );
            kernels += counts.kernels;
            columnar += 1;
        }
        for window in [3600, 1] {
            for (what, bufs) in [("as recorded", &buffers), ("column kinds only", &only)] {
                assert_eq!(
                    book(api, bufs, false, window),
                    book(api, bufs, true, window),
                    "{name}, {what}, {window} s windows"
                );
            }
        }
        inputs_n += 1;
    }
    assert!(inputs_n >= 11, "{inputs_n} inputs");
    assert!(
        columnar >= 16 && kernels >= 2000,
        "{columnar} buffers, {kernels} kernels"
    );
}
