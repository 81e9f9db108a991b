//! gpumeter-cupti's columnar decoders ([`decode_kernel_columns`], and [`decode_buffer_columns`]
//! for every family: kernels, copies, memsets, API and external-correlation records; issue 34)
//! against its typed decoder on every real CUPTI buffer the project tests with: the buffers libcupti 12.8,
//! 13.0 and 13.4 recorded on an H200 (`crates/gpumeter-cupti/tests/c/live/`), the committed
//! `.gmr` recordings (`examples/data/`, `fuzz/seeds/gmr_reader/`) and the crafted decoder seeds
//! (`fuzz/seeds/decode_buffer/`); and a `CuptiStream`'s columnar path against its typed path
//! on the same recordings (equal snapshots). All are committed files: a missing one fails the
//! test, it never skips. (Here, not in gpumeter-cupti, because reading a `.gmr` is this crate's.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpumeter_core::{Meter, MeterConfig, TenantMap, TenantName, UsageReport, WindowSize};
use gpumeter_cupti::stream::CuptiStream;
use gpumeter_cupti::{
    decode, decode_buffer_columns, decode_kernel_columns, ApiRow, ApiVersion, BufferColumns,
    CopyRow, DecodeError, ExternalRow, KernelColumns, KernelRow, Record, SetRow,
};
use gpumeter_recording::gmr::{read_gmr, Frame};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `files` of `dir` (relative to the repository root) ending in `.ext`, sorted.
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

/// The API version a file name ends with (`…_130401.bin`).
fn api_of_name(path: &Path) -> ApiVersion {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let v = stem.rsplit('_').next().and_then(|v| v.parse::<u32>().ok());
    v.and_then(|v| ApiVersion::from_cupti(v).ok())
        .unwrap_or_else(|| panic!("{}: no API version in the name", path.display()))
}

type Reduced = (Vec<KernelRow>, BTreeMap<u32, u64>, usize);

/// Both decoders on one buffer: the kernel rows in order, the other records by kind and the
/// trailing zero bytes must be equal, or the errors. Returns the rows compared.
fn agree(buf: &[u8], api: ApiVersion, what: &str) -> Result<usize, DecodeError> {
    let typed: Result<Reduced, DecodeError> = decode(buf, api).map(|d| {
        let mut rows = Vec::new();
        let mut other = BTreeMap::new();
        for r in &d.records {
            match &r.record {
                Record::Kernel(k) => rows.push(KernelRow::from(k)),
                _ => *other.entry(r.kind.0).or_insert(0) += 1,
            }
        }
        (rows, other, d.trailing_zero_bytes)
    });
    let mut cols = KernelColumns::new();
    let columnar: Result<Reduced, DecodeError> =
        decode_kernel_columns(buf, api, &mut cols).map(|c| {
            assert_eq!(c.kernels, cols.len() as u64, "{what}");
            let other = c.skipped.iter().map(|(k, n)| (k.0, n)).collect();
            (cols.rows().collect(), other, c.trailing_zero_bytes)
        });
    assert_eq!(columnar, typed, "{what}");
    assert_eq!(all_columns(buf, api, what), all_typed(buf, api), "{what}");
    columnar.map(|(rows, _, _)| rows.len())
}

/// Every family [`BufferColumns`] keeps, in order, the other records by kind, the trailing
/// zero bytes.
#[derive(Debug, Default, PartialEq, Eq)]
struct AllRows {
    kernels: Vec<KernelRow>,
    copies: Vec<CopyRow>,
    sets: Vec<SetRow>,
    api: Vec<ApiRow>,
    external: Vec<ExternalRow>,
    other: BTreeMap<u32, u64>,
    tail: usize,
}

fn all_typed(buf: &[u8], api: ApiVersion) -> Result<AllRows, DecodeError> {
    let d = decode(buf, api)?;
    let mut out = AllRows {
        tail: d.trailing_zero_bytes,
        ..AllRows::default()
    };
    for r in &d.records {
        match &r.record {
            Record::Kernel(k) => out.kernels.push(k.into()),
            Record::Memcpy(m) => out.copies.push(m.into()),
            Record::PeerCopy(p) => out.copies.push(p.into()),
            Record::Memset(m) => out.sets.push(m.into()),
            Record::Api(a) => out.api.push(a.into()),
            Record::ExternalCorrelation(e) => out.external.push(e.into()),
            _ => *out.other.entry(r.kind.0).or_insert(0) += 1,
        }
    }
    Ok(out)
}

fn all_columns(buf: &[u8], api: ApiVersion, what: &str) -> Result<AllRows, DecodeError> {
    let mut cols = BufferColumns::new();
    let got = decode_buffer_columns(buf, api, &mut cols);
    let c = match got {
        Ok(c) => c,
        Err(e) => {
            assert!(cols.is_empty(), "{what}: rows left after an error");
            return Err(e);
        }
    };
    assert_eq!(
        c.records() as usize - c.skipped.total() as usize,
        cols.len(),
        "{what}"
    );
    Ok(AllRows {
        kernels: cols.kernels.rows().collect(),
        copies: cols.copies.rows().collect(),
        sets: cols.sets.rows().collect(),
        api: cols.api.rows().collect(),
        external: cols.external.rows().collect(),
        other: c.skipped.iter().map(|(k, n)| (k.0, n)).collect(),
        tail: c.trailing_zero_bytes,
    })
}

/// The rows of every family [`BufferColumns`] keeps across `buffers` (each decoded alike).
fn family_rows<'a>(buffers: impl IntoIterator<Item = (&'a [u8], ApiVersion)>) -> [usize; 5] {
    let mut n = [0; 5];
    for (buf, api) in buffers {
        if let Ok(r) = all_columns(buf, api, "counting") {
            let rows = [
                r.kernels.len(),
                r.copies.len(),
                r.sets.len(),
                r.api.len(),
                r.external.len(),
            ];
            for (n, r) in n.iter_mut().zip(rows) {
                *n += r;
            }
        }
    }
    n
}

/// The H200 recordings of libcupti 12.8, 13.0 and 13.4: the same kernel rows, field by field
/// and in order, and the same error at every truncation.
#[test]
fn libcupti_recorded_buffers_decode_alike() {
    let bins = files("crates/gpumeter-cupti/tests/c/live", "bin");
    assert_eq!(bins.len(), ApiVersion::ALL.len(), "{bins:?}");
    for path in bins {
        let api = api_of_name(&path);
        let buf = read(&path);
        let what = path.display().to_string();
        let kernels = agree(&buf, api, &what).expect("a recorded buffer walks");
        assert!(kernels > 0, "{what}: no kernel record");
        let mut errors = 0;
        for cut in 0..buf.len() {
            errors += usize::from(agree(&buf[..cut], api, &format!("{what}[..{cut}]")).is_err());
        }
        assert!(
            errors > buf.len() / 2,
            "{what}: {errors} truncations failed"
        );
    }
}

/// Every activity buffer of every committed `.gmr` recording.
#[test]
fn recorded_gmr_buffers_decode_alike() {
    let mut recordings = 0;
    let mut kernels = 0;
    for dir in ["examples/data", "fuzz/seeds/gmr_reader"] {
        for path in files(dir, "gmr") {
            let file = read_gmr(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let api = ApiVersion::from_cupti(file.header.cupti_api_version)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut buffers = 0;
            for (i, f) in file.frames.iter().enumerate() {
                if let Frame::ActivityBuffer(b) = &f.frame {
                    let what = format!("{} frame {i}", path.display());
                    kernels += agree(b, api, &what).expect("a recorded buffer walks");
                    buffers += 1;
                }
            }
            assert!(buffers > 0, "{}: no activity buffer", path.display());
            recordings += 1;
        }
    }
    assert!(recordings >= 8, "{recordings} recordings");
    assert!(kernels >= 100, "{kernels} kernel records");
}

/// The decoder's crafted fuzz seeds (every kind of every version; a selector byte first).
#[test]
fn crafted_seed_buffers_decode_alike() {
    let seeds = files("fuzz/seeds/decode_buffer", "bin");
    assert!(seeds.len() >= 6, "{seeds:?}");
    for path in seeds {
        let data = read(&path);
        let buf = data.get(1..).unwrap_or_default();
        agree(buf, api_of_name(&path), &path.display().to_string()).expect("a seed walks");
    }
}

/// The real buffers hold every family [`BufferColumns`] keeps, so each is compared on recorded
/// records (kernels, copies, memsets, API and external-correlation records).
#[test]
fn recorded_buffers_hold_every_family() {
    let mut buffers: Vec<(Vec<u8>, ApiVersion)> =
        files("crates/gpumeter-cupti/tests/c/live", "bin")
            .into_iter()
            .map(|p| (read(&p), api_of_name(&p)))
            .collect();
    for dir in ["examples/data", "fuzz/seeds/gmr_reader"] {
        for path in files(dir, "gmr") {
            let file = read_gmr(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let api = ApiVersion::from_cupti(file.header.cupti_api_version)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for f in file.frames {
                if let Frame::ActivityBuffer(b) = f.frame {
                    buffers.push((b, api));
                }
            }
        }
    }
    let n = family_rows(buffers.iter().map(|(b, a)| (b.as_slice(), *a)));
    let [kernels, copies, sets, api, external] = n;
    assert!(
        kernels > 0 && copies > 0 && sets > 0 && api > 0 && external > 0,
        "{n:?}"
    );
    eprintln!("rows compared: {kernels} kernels, {copies} copies, {sets} memsets, {api} API, {external} external");
}

// ---------------------------------------------------------------------------------------
// The stream's two paths on the same real buffers (issue 34): a `CuptiStream` books a buffer
// of the column kinds straight from its columns, and any other buffer through typed records.
// Each input is booked twice: as recorded (its buffers with DEVICE or CONTEXT records take the
// typed path either way), and with only the records of the column kinds kept, so that every
// one of its buffers takes the columnar path.

/// Every input: its name, API version and activity buffers in order.
fn inputs() -> Vec<(String, ApiVersion, Vec<Vec<u8>>)> {
    let mut out = Vec::new();
    for path in files("crates/gpumeter-cupti/tests/c/live", "bin") {
        let api = api_of_name(&path);
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
