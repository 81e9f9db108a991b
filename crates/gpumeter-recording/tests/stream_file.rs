//! Streaming a raw buffer file ([`meter_buffer_file`], [`BufferFile`]) and a `.gmr`
//! ([`meter_gmr_file`]) against the whole-file paths ([`meter_buffer`], [`meter_gmr`]): the same report, the same errors with the same offsets, across
//! chunk boundaries, for files out of time order, and no allocation per record.

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use gpumeter_core::{Meter, MeterConfig};
use gpumeter_cupti::{decode, ActivityKind, ApiVersion};
use gpumeter_recording::{
    meter_buffer, meter_buffer_file, meter_gmr, meter_gmr_file, BufferFile, CuptiOptions,
    CuptiSourceError, SourceItem, CHUNK_BYTES,
};

/// Counts allocations (of every thread), to show the replay allocates nothing per record.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Allocations made by this thread (tests run side by side on other threads).
    static THREAD_ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Held by the tests that count allocations, so that one's allocations never land in the
/// other's count ([`ALLOCATIONS`] counts every thread: the file reader has its own), and by
/// the tests that allocate for seconds (the joins tests), so that theirs do not either.
static COUNTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    // `try_with`: the thread's slot may be gone while it exits.
    let _ = THREAD_ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as `dealloc`; the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const API: ApiVersion = ApiVersion::Cupti12_8;

/// `n` CONCURRENT_KERNEL records of 12.8 on 4 streams, 3 µs long; record `i` starts at
/// `start(i)` ns after a base.
fn kernels(n: usize, start: impl Fn(usize) -> u64) -> Vec<u8> {
    let layout = API
        .layouts()
        .into_iter()
        .find(|l| l.kind == ActivityKind::CONCURRENT_KERNEL)
        .expect("kernel layout");
    let field = |name: &str| {
        layout
            .fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| (f.offset, f.width))
            .expect("field")
    };
    let fields = [
        "start",
        "end",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "correlationId",
        "streamId",
        "contextId",
    ]
    .map(field);
    let mut buf = vec![0u8; n * layout.size];
    let t0: u64 = 1_793_606_160_000_000_000;
    for (i, rec) in buf.chunks_exact_mut(layout.size).enumerate() {
        rec[..4].copy_from_slice(&ActivityKind::CONCURRENT_KERNEL.0.to_le_bytes());
        let s = t0 + start(i);
        let values: [u64; 9] = [
            s,
            s + 3_000,
            1 + (i as u64 % 300),
            1,
            1,
            128,
            i as u64 + 1,
            7 + (i as u64 % 4),
            1,
        ];
        for ((off, width), v) in fields.iter().zip(values) {
            rec[*off..off + width].copy_from_slice(&v.to_le_bytes()[..*width]);
        }
    }
    buf
}

/// `bytes` written to a file and scanned (pass 1), streamable.
fn scanned(bytes: &[u8]) -> BufferFile {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("buf.bin");
    std::fs::write(&path, bytes).expect("write");
    BufferFile::scan(&path, &CuptiOptions::default())
        .expect("scan")
        .expect("streamable")
}

fn whole(name: &str, bytes: &[u8]) -> Result<String, CuptiSourceError> {
    let mut meter = Meter::new(MeterConfig::default());
    meter_buffer(&mut meter, name, bytes, &CuptiOptions::default())?;
    Ok(serde_json::to_string(&meter.finish().expect("report")).expect("json"))
}

fn streamed(path: &Path) -> Result<String, CuptiSourceError> {
    let mut meter = Meter::new(MeterConfig::default());
    meter_buffer_file(&mut meter, path, &CuptiOptions::default())?;
    Ok(serde_json::to_string(&meter.finish().expect("report")).expect("json"))
}

fn same_report(bytes: &[u8]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("buf.bin");
    std::fs::write(&path, bytes).expect("write");
    let a = whole("buf.bin", bytes).expect("whole-file path");
    let b = streamed(&path).expect("streamed path");
    assert_eq!(a, b);
}

#[test]
fn in_order_across_chunks_meters_as_whole() {
    // Records span several chunks, and records straddle chunk boundaries (208 ∤ 1 MiB).
    let n = 3 * CHUNK_BYTES / 208 + 17;
    same_report(&kernels(n, |i| i as u64 * 1_000));
}

#[test]
fn out_of_order_beyond_the_horizon_meters_as_whole() {
    // Every 1000th record starts an hour before its neighbours (far past the meter's
    // reordering horizon), some records share a start: the whole-file path sorts them all,
    // and so must the stream.
    let n = 20_000;
    let hour = 3_600_000_000_000u64;
    let bytes = kernels(n, |i| {
        let t = hour + (i as u64 / 3) * 1_000;
        if i % 1000 == 999 {
            t - hour
        } else {
            t
        }
    });
    same_report(&bytes);
    let file = scanned(&bytes);
    assert!(file.displacement_ns() > 1_000_000_000_000);
}

#[test]
fn committed_raw_buffers_meter_as_whole() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../gpumeter-cupti/tests/c/live");
    for (name, api) in [
        ("h200_r580_cupti_26.bin", ApiVersion::Cupti12_8),
        ("h200_r580_cupti_130001.bin", ApiVersion::Cupti13_0),
        ("h200_r580_cupti_130401.bin", ApiVersion::Cupti13_4),
    ] {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).expect("committed buffer");
        let opts = CuptiOptions {
            api,
            ..CuptiOptions::default()
        };
        let mut a = Meter::new(MeterConfig::default());
        let sa = meter_buffer(&mut a, name, &bytes, &opts).expect("whole");
        let mut b = Meter::new(MeterConfig::default());
        let sb = meter_buffer_file(&mut b, &path, &opts).expect("streamed");
        assert_eq!(format!("{sa:?}"), format!("{sb:?}"), "{name}");
        let (a, b) = (a.finish().expect("report"), b.finish().expect("report"));
        assert_eq!(
            serde_json::to_string(&a).expect("json"),
            serde_json::to_string(&b).expect("json"),
            "{name}"
        );
    }
}

/// The error of the whole-file decode and of the stream, as text (offsets included).
fn same_error(bytes: &[u8]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("buf.bin");
    std::fs::write(&path, bytes).expect("write");
    let a = whole("buf.bin", bytes).expect_err("whole-file path refuses");
    let b = streamed(&path).expect_err("streamed path refuses");
    assert_eq!(a.to_string(), b.to_string());
    assert!(decode(bytes, API).is_err());
}

#[test]
fn faults_past_the_first_chunk_are_the_same_errors() {
    let n = CHUNK_BYTES / 208 + 100;
    let good = kernels(n, |i| i as u64 * 1_000);
    // Truncated last record.
    same_error(&good[..good.len() - 5]);
    // An unknown kind in the second chunk.
    let mut unknown = good.clone();
    let at = (CHUNK_BYTES / 208 + 3) * 208;
    unknown[at..at + 4].copy_from_slice(&0xdead_u32.to_le_bytes());
    same_error(&unknown);
    // Zeros over a chunk boundary, then a non-zero byte: an invalid kind at the zeros' start.
    let mut zeros = good[..208 * 100].to_vec();
    zeros.resize(zeros.len() + 2 * CHUNK_BYTES, 0);
    zeros.push(1);
    same_error(&zeros);
}

#[test]
fn a_zeroed_tail_over_chunks_is_no_fault() {
    let mut bytes = kernels(1_000, |i| i as u64 * 1_000);
    bytes.resize(bytes.len() + 2 * CHUNK_BYTES + 3, 0);
    same_report(&bytes);
}

#[test]
fn replay_allocates_nothing_per_record() {
    let _alone = COUNTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = 1_000_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("buf.bin");
    std::fs::write(&path, kernels(n, |i| i as u64 * 1_000)).expect("write");
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let file = BufferFile::scan(&path, &CuptiOptions::default())
        .expect("scan")
        .expect("streamable");
    let scanned = ALLOCATIONS.load(Ordering::Relaxed) - before;
    // A sink that allocates nothing: sums the kernels' durations.
    let (mut items, mut busy_ns) = (0u64, 0u64);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    file.replay(|item| {
        if let SourceItem::Work(r) = item {
            items += 1;
            busy_ns += r.end_ns - r.start_ns;
        }
    })
    .expect("replay");
    let replayed = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(items, n as u64);
    assert_eq!(busy_ns, 3_000 * n as u64);
    // A few chunks, a thread, the reorder buffer's first slots: not one per record.
    assert!(replayed < 200, "{replayed} allocations for {n} records");
    assert!(scanned < 500, "{scanned} allocations for {n} records");
}

/// The in-memory path of the collector and the C ABI: 1 M kernels handed to a
/// [`gpumeter_cupti::stream::CuptiStream`] as CUPTI hands them over (buffers of 10 000 records), decoded, joined and
/// metered, allocate nothing per record once warm: the allocations of this thread after 10
/// buffers are counted. Per buffer there are some (about 40 when written: the decoded
/// buffer, its joins and the order of its records), and the meter's reorder buffer and
/// duplicate table grow by doubling (the 60 s horizon holds every record of this 1 s
/// workload); 90 buffers of 10 000 records must stay under 64 a buffer, where one per record
/// would be 900 000.
#[test]
fn the_in_memory_stream_allocates_nothing_per_record() {
    let _alone = COUNTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = 1_000_000;
    let per_buffer = 10_000;
    let bytes = kernels(n, |i| i as u64 * 1_000);
    let size = bytes.len() / n;
    let mut meter = Meter::new(MeterConfig::default());
    let mut stream = gpumeter_cupti::stream::CuptiStream::new("agent", API);
    let thread_count = || THREAD_ALLOCATIONS.with(std::cell::Cell::get);
    let mut before = 0;
    let mut work = 0u64;
    for (b, chunk) in bytes.chunks(per_buffer * size).enumerate() {
        if b == 10 {
            before = thread_count();
        }
        work += stream
            .ingest(&mut meter, chunk)
            .expect("a buffer that decodes")
            .work_records;
    }
    let after = thread_count();
    let buffers = (n / per_buffer - 10) as u64;
    let records = (n - 10 * per_buffer) as u64;
    let allocations = after - before;
    assert_eq!(work, n as u64);
    assert!(
        allocations < buffers * 64,
        "{allocations} allocations for {records} records in {buffers} buffers"
    );
    stream.seal(&mut meter);
    let report = meter.finish().expect("a report");
    assert_eq!(report.records.kernel, n as u64);
}

/// The report (or the error) of a `.gmr` metered whole and streamed, as text, after
/// `continue_from(opening)` when given.
fn gmr_both(
    path: &Path,
    opening: Option<&gpumeter_core::UsageReport>,
) -> (Result<String, String>, Result<String, String>) {
    let bytes = std::fs::read(path).expect("read");
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .expect("name");
    let run = |streamed: bool| {
        let mut meter = Meter::new(MeterConfig::default());
        if let Some(o) = opening {
            meter.continue_from(o).expect("opening");
        }
        let summary = if streamed {
            meter_gmr_file(&mut meter, path, &CuptiOptions::default())
        } else {
            meter_gmr(&mut meter, &name, &bytes, &CuptiOptions::default())
        };
        match summary {
            Ok(s) => Ok(format!(
                "{s:?}\n{}",
                serde_json::to_string(&meter.finish().expect("report")).expect("json")
            )),
            Err(e) => Err(e.to_string()),
        }
    };
    (run(false), run(true))
}

#[test]
fn committed_recordings_meter_as_whole() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut n = 0;
    for dir in ["fuzz/seeds/gmr_reader", "examples/data"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("dir") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("gmr") {
                continue;
            }
            let (a, b) = gmr_both(&path, None);
            assert!(a.is_ok(), "{}", path.display());
            assert_eq!(a, b, "{}", path.display());
            n += 1;
        }
    }
    assert!(n >= 7, "{n} recordings");
}

#[test]
fn damaged_recordings_meter_and_fail_as_whole() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let good = std::fs::read(root.join("examples/data/h200-cuda13-smoke.gmr")).expect("read");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut variants: Vec<(String, Vec<u8>)> = vec![
        ("torn".into(), good[..good.len() - 7].to_vec()),
        ("header-only".into(), good[..200.min(good.len())].to_vec()),
        ("not-gmr".into(), b"not a recording at all".to_vec()),
        ("after-end".into(), [&good[..], &[1u8, 2, 3][..]].concat()),
    ];
    for at in [good.len() / 3, good.len() / 2, good.len() - 30] {
        let mut b = good.clone();
        b[at] ^= 0x5a;
        variants.push((format!("flip-{at}"), b));
    }
    for (name, bytes) in variants {
        let path = dir.path().join(format!("{name}.gmr"));
        std::fs::write(&path, &bytes).expect("write");
        let (a, b) = gmr_both(&path, None);
        assert_eq!(a, b, "{name}");
    }
}

#[test]
fn a_recording_chain_meters_as_whole() {
    // A recording read once while it was being written (no end frame yet), then again whole
    // with the first report as the opening: what the first report read is not metered again.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for file in [
        "fuzz/seeds/gmr_reader/recording_26.gmr",
        "examples/data/h200-cuda13-smoke.gmr",
    ] {
        let path = root.join(file);
        let bytes = std::fs::read(&path).expect("read");
        let file = gpumeter_recording::gmr::read_gmr(&bytes).expect("gmr");
        // Cut after about half of the frames.
        let half = file
            .frames
            .get(file.frames.len() / 2)
            .map(|f| f.offset as usize);
        let Some(half) = half else { continue };
        let dir = tempfile::tempdir().expect("tempdir");
        let early = dir.path().join("rec.gmr");
        std::fs::write(&early, &bytes[..half]).expect("write");
        let mut meter = Meter::new(MeterConfig::default());
        meter_gmr(
            &mut meter,
            "rec.gmr",
            &bytes[..half],
            &CuptiOptions::default(),
        )
        .expect("early");
        let opening = meter.finish().expect("report");
        let (a, b) = gmr_both(&path, Some(&opening));
        assert!(a.is_ok());
        assert_eq!(a, b, "{}", path.display());
    }
}

#[test]
fn a_synthetic_recording_out_of_order_meters_as_whole() {
    use gpumeter_recording::gmr::GmrWriter;
    let hour = 3_600_000_000_000u64;
    let bytes = kernels(30_000, |i| {
        let t = hour + (i as u64 / 2) * 1_000;
        if i % 997 == 0 {
            t - hour / 2
        } else {
            t
        }
    });
    let header = h100_header(77);
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    for part in bytes.chunks(208 * 4_000) {
        w.write_buffer(part).expect("buffer");
    }
    let out = w.finish().expect("finish");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("synthetic.gmr");
    std::fs::write(&path, out).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(a.is_ok());
    assert_eq!(a, b);
}

#[test]
fn a_recording_with_strings_drops_attribution_and_energy_meters_as_whole() {
    // recording_26.gmr without its INSTRUCTION_EXECUTION record (which sends a file to the
    // whole-file path): string tables, a dropped count, an attribution event and energy
    // samples around its buffer, all streamed; also cut before its end frame.
    use gpumeter_recording::gmr::{read_gmr, Frame, GmrWriter};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bytes = std::fs::read(root.join("fuzz/seeds/gmr_reader/recording_26.gmr")).expect("read");
    let file = read_gmr(&bytes).expect("gmr");
    let api = ApiVersion::from_cupti(file.header.cupti_api_version).expect("api");
    let mut w = GmrWriter::new(Vec::new(), &file.header).expect("writer");
    let mut kinds = 0;
    for f in &file.frames {
        match &f.frame {
            Frame::ActivityBuffer(b) => {
                let d = decode(b, api).expect("decode");
                let mut kept = Vec::new();
                for r in &d.records {
                    if r.kind != ActivityKind::INSTRUCTION_EXECUTION {
                        kept.extend_from_slice(&b[r.offset..r.offset + r.size]);
                    }
                }
                w.write_buffer(&kept).expect("buffer");
            }
            other => {
                kinds += 1;
                w.write_frame(other).expect("frame");
            }
        }
    }
    assert!(kinds >= 4, "{kinds} frames besides buffers");
    let out = w.finish().expect("finish");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rec.gmr");
    std::fs::write(&path, &out).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(a.is_ok());
    assert_eq!(a, b);
    // Unfinished: no end frame (16 bytes: an empty frame).
    std::fs::write(&path, &out[..out.len() - 16]).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(
        a.as_ref().is_ok_and(|r| r.contains("finished: false")),
        "{a:?}"
    );
    assert_eq!(a, b);
}

/// Review of issue 13: a record the meter refuses whatever its time (zero timestamps) at the
/// end of a time-ordered file is not disorder: the reorder buffer stays empty-handed
/// (displacement 0, where it would span the whole file), and the report is the whole-file
/// path's (the record is `zero_timestamp` loss either way).
#[test]
fn a_refused_record_last_is_no_disorder() {
    let n = 5_000;
    let mut bytes = kernels(n, |i| i as u64 * 1_000);
    let layout_size = bytes.len() / n;
    // The last record's start and end (offsets of the 12.8 layout's fields) set to 0.
    let layout = API
        .layouts()
        .into_iter()
        .find(|l| l.kind == ActivityKind::CONCURRENT_KERNEL)
        .expect("kernel layout");
    let last = (n - 1) * layout_size;
    for name in ["start", "end"] {
        let f = layout
            .fields
            .iter()
            .find(|f| f.name == name)
            .expect("field");
        bytes[last + f.offset..last + f.offset + f.width].fill(0);
    }
    same_report(&bytes);
    let file = scanned(&bytes);
    assert_eq!(file.displacement_ns(), 0);
}

/// Review of issue 13: a raw buffer changed between the pass that hashed it and the pass that
/// meters it is refused, so a report never carries the SHA-256 of bytes it did not meter:
/// rewritten in place (same length, another modification time), rewritten with its
/// modification time set back (Unix: the inode change time still moves), replaced by another
/// file of the same length and modification time (Unix: another inode), or cut short.
#[test]
fn a_buffer_changed_between_the_passes_is_refused() {
    let bytes = kernels(2_000, |i| i as u64 * 1_000);
    let other = kernels(2_000, |i| i as u64 * 2_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("buf.bin");
    let changes: &[&str] = if cfg!(unix) {
        &["rewrite", "rewrite, mtime restored", "replaced", "truncate"]
    } else {
        &["rewrite", "truncate"]
    };
    for &change in changes {
        std::fs::write(&path, &bytes).expect("write");
        let mtime = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .expect("mtime");
        let file = BufferFile::scan(&path, &CuptiOptions::default())
            .expect("scan")
            .expect("streamable");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        match change {
            "rewrite" => {
                std::fs::write(&path, &other).expect("rewrite");
                let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
                f.set_modified(later).expect("set mtime");
            }
            "rewrite, mtime restored" => {
                std::fs::write(&path, &other).expect("rewrite");
                f.set_modified(mtime).expect("set mtime back");
            }
            "replaced" => {
                let next = dir.path().join("next.bin");
                std::fs::write(&next, &other).expect("write");
                std::fs::File::options()
                    .write(true)
                    .open(&next)
                    .and_then(|n| n.set_modified(mtime))
                    .expect("set mtime");
                std::fs::rename(&next, &path).expect("replace");
            }
            _ => f.set_len(bytes.len() as u64 / 2).expect("truncate"),
        }
        assert_eq!(
            std::fs::metadata(&path).and_then(|m| m.modified()).ok() == Some(mtime),
            change.contains("restored") || change == "replaced",
            "{change}: the modification time alone does not tell"
        );
        let got = file.replay(|_| {});
        match got {
            Err(CuptiSourceError::Io { error, .. }) => {
                assert!(error.to_string().contains("changed"), "{change}: {error}");
            }
            other => panic!("{change}: expected the file-changed error, got {other:?}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The correlation joins of a streamed file, learned in a window as wide as the file's join
// distance (or whole past the cap): API and EXTERNAL_CORRELATION records far from the work
// they name, before and after it, give the same report as the whole-file path.

/// Records, each its bytes.
type Records = Vec<Vec<u8>>;

/// One record of `kind` in the 12.8 layout with `fields` (CUPTI header name, value).
fn record(kind: ActivityKind, fields: &[(&str, u64)]) -> Vec<u8> {
    API.layouts()
        .into_iter()
        .find(|l| l.kind == kind)
        .expect("layout")
        .encode(fields)
        .unwrap_or_else(|e| panic!("{e}"))
}

const T0: u64 = 1_793_606_160_000_000_000;

/// A `.gmr` header (CUPTI API 26, host "test") of process `pid` on one H100 (device 0,
/// 132 SMs, uuid `GPU-…0001`).
fn h100_header(pid: u32) -> gpumeter_recording::gmr::GmrHeader {
    use gpumeter_recording::gmr::{GmrDevice, GmrHeader};
    GmrHeader {
        cupti_api_version: 26,
        host: "test".into(),
        process_id: pid,
        devices: vec![GmrDevice {
            id: 0,
            name: Some("NVIDIA H100 80GB HBM3".into()),
            uuid: Some("GPU-00000000-0000-0000-0000-000000000001".into()),
            sm_count: Some(132),
            compute_capability: Some("9.0".into()),
        }],
        ..GmrHeader::default()
    }
}

/// A PM sample of `[T0 + a, T0 + b)` ns: `active` SM cycles of 1000 elapsed, `active` bytes
/// read, 1 written.
fn pm_sample(a: u64, b: u64, active: u64) -> gpumeter_core::PmSample {
    gpumeter_core::PmSample {
        start_ns: T0 + a,
        end_ns: T0 + b,
        sm_active_cycles: Some(active),
        sm_elapsed_cycles: Some(1_000),
        dram_read_bytes: Some(active),
        dram_write_bytes: Some(1),
        overflow: false,
    }
}

/// A kernel of correlation id `corr` starting `i` µs after [`T0`], 3 µs long, on one of 4
/// streams.
fn kernel_rec(i: u64, corr: u32) -> Vec<u8> {
    let s = T0 + i * 1_000;
    record(
        ActivityKind::CONCURRENT_KERNEL,
        &[
            ("start", s),
            ("end", s + 3_000),
            ("gridX", 1 + i % 300),
            ("gridY", 1),
            ("gridZ", 1),
            ("blockX", 128),
            ("blockY", 1),
            ("blockZ", 1),
            ("correlationId", corr.into()),
            ("streamId", 7 + i % 4),
            ("contextId", 1),
        ],
    )
}

/// A RUNTIME record of correlation id `corr` in process `pid`.
fn api_rec(corr: u32, pid: u32) -> Vec<u8> {
    record(
        ActivityKind::RUNTIME,
        &[("correlationId", corr.into()), ("processId", pid.into())],
    )
}

/// An EXTERNAL_CORRELATION record: `kind` 3 is CUSTOM0, 4 CUSTOM1, 5 CUSTOM2.
fn ext_rec(corr: u32, kind: u32, id: u64) -> Vec<u8> {
    record(
        ActivityKind::EXTERNAL_CORRELATION,
        &[
            ("externalKind", kind.into()),
            ("externalId", id),
            ("correlationId", corr.into()),
        ],
    )
}

/// A device-memory allocation (`release`: its release) of correlation id `corr` at `i` µs
/// after [`T0`], with no process id of its own (joined from its API record).
fn memory_rec(i: u64, corr: u32, release: bool) -> Vec<u8> {
    record(
        ActivityKind::MEMORY2,
        &[
            ("memoryOperationType", if release { 2 } else { 1 }),
            ("memoryKind", 3),
            ("correlationId", corr.into()),
            ("address", 0x7000_0000 + u64::from(corr) * 0x1000),
            ("bytes", 1 << 20),
            ("timestamp", T0 + i * 1_000),
            ("deviceId", 0),
            ("contextId", 1),
        ],
    )
}

/// Process ids 5000..5007 and CUSTOM0 external ids 900..903 are tenants; CUSTOM1 external
/// ids 800.. are tenants too (a record that kept its CUSTOM1 id where a CUSTOM0 one came
/// later would be billed to the wrong one).
fn tenant_map() -> gpumeter_core::TenantMap {
    let mut map = gpumeter_core::TenantMap::default();
    for pid in 5000..5008u32 {
        map.pid.insert(
            pid,
            gpumeter_core::TenantName::parse(&format!("p{pid}")).expect("name"),
        );
    }
    for ext in (900..904u64).chain(800..804) {
        map.external.insert(
            ext,
            gpumeter_core::TenantName::parse(&format!("e{ext}")).expect("name"),
        );
    }
    map
}

/// The summary and report of `records` metered whole, and streamed from a raw buffer file
/// and from a `.gmr` (buffer frames of `per_frame` records), as text; each report bills at
/// least `tenants` tenants.
fn joins_three_ways(records: &[Vec<u8>], per_frame: usize, tenants: usize) -> [String; 4] {
    use gpumeter_recording::gmr::{GmrHeader, GmrWriter};
    let bytes = records.concat();
    let dir = tempfile::tempdir().expect("tempdir");
    let raw = dir.path().join("joins.bin");
    std::fs::write(&raw, &bytes).expect("write");
    let header = GmrHeader {
        cupti_api_version: 26,
        host: "test".into(),
        process_id: 5007,
        ..GmrHeader::default()
    };
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    for part in records.chunks(per_frame) {
        w.write_buffer(&part.concat()).expect("buffer");
    }
    let gmr_bytes = w.finish().expect("finish");
    let gmr = dir.path().join("joins.gmr");
    std::fs::write(&gmr, &gmr_bytes).expect("write");
    let run =
        |f: &dyn Fn(&mut Meter) -> Result<gpumeter_recording::CuptiSummary, CuptiSourceError>| {
            let mut meter = Meter::new(MeterConfig::default());
            meter.set_tenant_map(tenant_map());
            let s = f(&mut meter).expect("metered");
            let report = meter.finish().expect("report");
            // The joins are exercised: so many tenants are billed.
            assert!(
                report
                    .totals
                    .iter()
                    .map(|t| t.tenant.as_str())
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    >= tenants,
                "{:?}",
                report.totals
            );
            format!("{s:?}\n{}", serde_json::to_string(&report).expect("json"))
        };
    let o = CuptiOptions::default();
    [
        run(&|m| meter_buffer(m, "joins.bin", &bytes, &o)),
        run(&|m| meter_buffer_file(m, &raw, &o)),
        run(&|m| meter_gmr(m, "joins.gmr", &gmr_bytes, &o)),
        run(&|m| meter_gmr_file(m, &gmr, &o)),
    ]
}

#[test]
fn joins_far_before_and_after_their_work_stream_as_whole() {
    let _alone = COUNTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = 4_000u32;
    let mut records = Vec::new();
    for i in 1..=n {
        let corr = i;
        records.push(kernel_rec(u64::from(i), corr));
        // API records 300 launches late; for ids ending in 7, a second API record of
        // another process 200 launches later still (the first one wins).
        if let Some(c) = i.checked_sub(300).filter(|&c| c > 0) {
            records.push(api_rec(c, 5000 + c % 7));
        }
        if let Some(c) = i.checked_sub(500).filter(|&c| c > 0 && c % 10 == 7) {
            records.push(api_rec(c, 5000 + (c + 1) % 7));
        }
        // CUSTOM1 ids 150 launches late, then CUSTOM0 ids (a lower kind: they replace them)
        // 450 launches late for odd ids; CUSTOM2 ids early, 20 launches ahead, for every
        // tenth id (replaced by the CUSTOM1 one). The widest distance between join records of
        // one id (320 launches) is less than between a kernel and its last join record (450).
        if let Some(c) = i.checked_sub(150).filter(|&c| c > 0) {
            records.push(ext_rec(c, 4, 800 + u64::from(c % 4)));
        }
        if let Some(c) = i.checked_sub(450).filter(|&c| c > 0 && c % 2 == 1) {
            records.push(ext_rec(c, 3, 900 + u64::from(c % 4)));
        }
        if (i + 20) % 10 == 0 && i + 20 <= n {
            records.push(ext_rec(i + 20, 5, 700));
        }
        // Memory of ids 10 000..: its API record comes 250 records later.
        if i % 100 == 0 {
            records.push(memory_rec(u64::from(i), 10_000 + i, false));
        }
        if let Some(c) = i.checked_sub(80).filter(|&c| c % 100 == 0) {
            records.push(api_rec(10_000 + c, 5000 + c % 5));
            records.push(memory_rec(u64::from(i), 10_000 + c, true));
        }
    }
    // The last API records at the end of the file.
    for c in n - 299..=n {
        records.push(api_rec(c, 5000 + c % 7));
    }
    // Kernel 50 000 near the start (the kernels after it have lower ids), its only join record
    // 12 000 records later (the widest distance of the file), or 7 records later (the widest
    // is then between a kernel of a lower id and its last join record).
    for far in [12_000, 10] {
        let mut records = records.clone();
        records.insert(3, kernel_rec(3, 50_000));
        records.insert(far, api_rec(50_000, 5006));
        let [whole_raw, streamed_raw, whole_gmr, streamed_gmr] = joins_three_ways(&records, 997, 4);
        assert_eq!(whole_raw, streamed_raw, "join record at {far}");
        assert_eq!(whole_gmr, streamed_gmr, "join record at {far}");
    }
}

#[test]
fn joins_past_the_distance_cap_stream_as_whole() {
    let _alone = COUNTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // One join each, past the 65 536 records the window may reach (the joins are then
    // learned whole): kernel 1's API and CUSTOM0 records come after 70 000 records; kernel
    // 3's first API record comes 70 000 records before it (it wins over the one next to it);
    // kernel 2's CUSTOM1 id is next to it, the lower CUSTOM0 one 70 000 records later.
    // (records before the 70 000, records after them)
    let far: [(Records, Records); 3] = [
        (
            vec![kernel_rec(1, 1)],
            vec![api_rec(1, 5001), ext_rec(1, 3, 901)],
        ),
        (
            vec![api_rec(3, 5003)],
            vec![kernel_rec(3, 3), api_rec(3, 5004)],
        ),
        (
            vec![kernel_rec(2, 2), api_rec(2, 5002), ext_rec(2, 4, 801)],
            vec![ext_rec(2, 3, 902)],
        ),
    ];
    for (case, (before, after)) in far.into_iter().enumerate() {
        let mut records = before;
        for i in 0..70_000u32 {
            // Other launches' joins, next to each other: no work of theirs.
            records.push(api_rec(100_000 + i, 5000 + i % 7));
        }
        records.extend(after);
        for i in 4..40u32 {
            records.push(api_rec(i, 5000 + i % 7));
            records.push(ext_rec(i, 3, 900 + u64::from(i % 4)));
            records.push(kernel_rec(u64::from(i), i));
        }
        let [whole_raw, streamed_raw, whole_gmr, streamed_gmr] =
            joins_three_ways(&records, 20_000, 4);
        assert_eq!(whole_raw, streamed_raw, "case {case}");
        assert_eq!(whole_gmr, streamed_gmr, "case {case}");
    }
}

#[test]
fn joins_next_to_their_work_and_joins_no_work_names_stream_as_whole() {
    let _alone = COUNTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // A distance of 1: each API record right after its kernel.
    let next: Records = (1..500u32)
        .flat_map(|i| [kernel_rec(i.into(), i), api_rec(i, 5000 + i % 7)])
        .collect();
    // A distance of 0: join records of ids no work names (the replay needs no window).
    let unnamed: Records = (1..500u32)
        .flat_map(|i| {
            [
                api_rec(10_000 + i, 5001),
                ext_rec(10_000 + i, 3, 900),
                kernel_rec(i.into(), i),
            ]
        })
        .collect();
    for (records, tenants) in [(next, 7), (unnamed, 1)] {
        let [whole_raw, streamed_raw, whole_gmr, streamed_gmr] =
            joins_three_ways(&records, 100, tenants);
        assert_eq!(whole_raw, streamed_raw);
        assert_eq!(whole_gmr, streamed_gmr);
    }
}

/// Review of the bounded joins through the real files: random files of kernels (out of
/// time order), API, EXTERNAL_CORRELATION (every kind, CUSTOM0..2 and others) and memory
/// records whose correlation ids repeat, wrap past `u32::MAX`, are 0 or are named by memory
/// only, several processes reusing ids, joins before and after their work, cut into `.gmr`
/// buffer frames of random sizes: the streamed reports equal the whole-file ones.
#[test]
fn random_joins_stream_as_whole() {
    let _alone = COUNTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut seed = 0x51_7CC1_B727_220Au64;
    let mut next = move |n: u64| {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    };
    for case in 0..40 {
        let n = 50 + next(600);
        let mode = next(3);
        let mut records: Records = Vec::new();
        for i in 0..n {
            let corr = match mode {
                0 => 1 + next(12) as u32,
                1 => (u32::MAX - 20).wrapping_add((i / 2 + next(5)) as u32),
                _ => (i + next(30)) as u32,
            };
            let corr = if next(25) == 0 { 0 } else { corr };
            let rec = match next(6) {
                0 => api_rec(corr, 5000 + next(8) as u32),
                1 => ext_rec(
                    corr,
                    2 + next(5) as u32,
                    [800, 801, 900, 901][next(4) as usize],
                ),
                2 => memory_rec(next(n), corr, next(2) == 0),
                _ => kernel_rec(next(n) + 1, corr),
            };
            records.push(rec);
        }
        let per_frame = 1 + next(60) as usize;
        let [whole_raw, streamed_raw, whole_gmr, streamed_gmr] =
            joins_three_ways(&records, per_frame, 1);
        assert_eq!(whole_raw, streamed_raw, "case {case}");
        assert_eq!(whole_gmr, streamed_gmr, "case {case}");
    }
}

/// Review of the bounded joins in a `.gmr` with damaged buffer frames (a record that does not
/// decode partway through a frame: the rest of that frame is not read) between the work and
/// its joins: the streamed report equals the whole-file one.
#[test]
fn joins_across_damaged_gmr_frames_stream_as_whole() {
    use gpumeter_recording::gmr::{GmrHeader, GmrWriter};
    let header = GmrHeader {
        cupti_api_version: 26,
        host: "test".into(),
        process_id: 5007,
        ..GmrHeader::default()
    };
    let mut records: Records = Vec::new();
    for i in 1..400u32 {
        records.push(kernel_rec(i.into(), i));
        if let Some(c) = i.checked_sub(40).filter(|&c| c > 0) {
            records.push(api_rec(c, 5000 + c % 7));
            records.push(ext_rec(c, 3, 900 + u64::from(c % 4)));
        }
    }
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    for (f, part) in records.chunks(37).enumerate() {
        let mut bytes = part.concat();
        if f % 3 == 1 {
            // Damaged partway: an unknown record kind after half the frame.
            let half = part[..part.len() / 2].concat().len();
            bytes.truncate(half);
            bytes.extend_from_slice(&[0xEE; 16]);
            bytes.extend(part[part.len() / 2..].concat());
        }
        w.write_buffer(&bytes).expect("buffer");
    }
    let gmr_bytes = w.finish().expect("finish");
    let dir = tempfile::tempdir().expect("tempdir");
    let gmr = dir.path().join("damaged.gmr");
    std::fs::write(&gmr, &gmr_bytes).expect("write");
    let run =
        |f: &dyn Fn(&mut Meter) -> Result<gpumeter_recording::CuptiSummary, CuptiSourceError>| {
            let mut meter = Meter::new(MeterConfig::default());
            meter.set_tenant_map(tenant_map());
            let s = f(&mut meter).expect("metered");
            let report = meter.finish().expect("report");
            format!("{s:?}\n{}", serde_json::to_string(&report).expect("json"))
        };
    let o = CuptiOptions::default();
    let whole = run(&|m| meter_gmr(m, "damaged.gmr", &gmr_bytes, &o));
    let streamed = run(&|m| meter_gmr_file(m, &gmr, &o));
    assert!(whole.contains("e901"), "the joins are exercised");
    assert_eq!(whole, streamed);
}

/// Issue 16: the H200 smoke recording with PM-sample frames of its device written among its
/// buffers (64 samples over its kernels' span, the first written last: disorder), and one
/// frame of a device it does not describe, streams with the whole-file path's report and
/// summary, finished, unfinished and continued from a report of its first half.
#[test]
fn a_recording_with_pm_samples_meters_as_whole() {
    use gpumeter_core::PmSample;
    use gpumeter_cupti::Record;
    use gpumeter_recording::gmr::{read_gmr, Frame, GmrWriter, PmSamples};
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bytes = std::fs::read(root.join("examples/data/h200-cuda13-smoke.gmr")).expect("read");
    let file = read_gmr(&bytes).expect("gmr");
    let api = ApiVersion::from_cupti(file.header.cupti_api_version).expect("api");
    let (mut lo, mut hi, mut buffers) = (u64::MAX, 0u64, 0usize);
    for f in &file.frames {
        if let Frame::ActivityBuffer(b) = &f.frame {
            buffers += 1;
            for r in decode(b, api).expect("decode").records {
                if let Record::Kernel(k) = &r.record {
                    lo = lo.min(k.start);
                    hi = hi.max(k.end);
                }
            }
        }
    }
    assert!(lo < hi && buffers > 0);
    let device = file.header.devices[0].id;
    let n = 64u64;
    let step = (hi - lo) / n + 1;
    let sample = |i: u64| PmSample {
        start_ns: lo + i * step,
        end_ns: lo + (i + 1) * step,
        sm_active_cycles: Some(1_000 * i),
        sm_elapsed_cycles: Some(1_000),
        dram_read_bytes: Some(i),
        dram_write_bytes: i.is_multiple_of(2).then_some(i),
        overflow: i == 7,
    };
    let mut w = GmrWriter::new(Vec::new(), &file.header).expect("writer");
    let mut seen = 0u64;
    let mut next = 1u64;
    for f in &file.frames {
        w.write_frame(&f.frame).expect("frame");
        if matches!(f.frame, Frame::ActivityBuffer(_)) {
            seen += 1;
            let upto = n * seen / buffers as u64;
            let samples: Vec<PmSample> = (next..upto).map(sample).collect();
            next = next.max(upto);
            w.write_pm_samples(&PmSamples {
                device_id: device,
                samples,
            })
            .expect("pm");
        }
    }
    let late = vec![sample(0)];
    w.write_pm_samples(&PmSamples {
        device_id: device,
        samples: late.clone(),
    })
    .expect("pm");
    w.write_pm_samples(&PmSamples {
        device_id: device + 9,
        samples: late,
    })
    .expect("pm");
    let out = w.finish().expect("finish");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pm.gmr");
    std::fs::write(&path, &out).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(
        a.as_ref().is_ok_and(|r| r.contains("pm_samples: 65")),
        "{a:?}"
    );
    assert_eq!(a, b);
    // Unfinished.
    std::fs::write(&path, &out[..out.len() - 16]).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(a.is_ok());
    assert_eq!(a, b);
    // Continued from a report of its first half.
    let again = read_gmr(&out).expect("gmr");
    let half = again.frames[again.frames.len() / 2].offset as usize;
    let mut meter = Meter::new(MeterConfig::default());
    meter_gmr(&mut meter, "pm.gmr", &out[..half], &CuptiOptions::default()).expect("early");
    let opening = meter.finish().expect("report");
    std::fs::write(&path, &out).expect("write");
    let (a, b) = gmr_both(&path, Some(&opening));
    assert!(a.is_ok());
    assert_eq!(a, b);
}

/// Issue 16 review: overlapping PM samples written out of their time order (the later-starting
/// one first) meter the same whole and streamed: the meter keeps the first of two overlapping
/// samples it is handed, so both paths must hand them over in the same (time) order.
#[test]
fn overlapping_pm_samples_out_of_order_meter_as_whole() {
    use gpumeter_recording::gmr::{GmrWriter, PmSamples};
    let header = h100_header(77);
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    w.write_buffer(&[kernel_rec(0, 1), kernel_rec(5, 2)].concat())
        .expect("buffer");
    // [2 µs, 6 µs) first, then [0, 4 µs) which overlaps it, then [5 µs, 9 µs) overlapping
    // only the first.
    for s in [
        pm_sample(2_000, 6_000, 50_000),
        pm_sample(0, 4_000, 7_000),
        pm_sample(5_000, 9_000, 3_000),
    ] {
        w.write_pm_samples(&PmSamples {
            device_id: 0,
            samples: vec![s],
        })
        .expect("pm");
    }
    w.write_buffer(&kernel_rec(20, 3)).expect("buffer");
    let out = w.finish().expect("finish");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("overlap.gmr");
    std::fs::write(&path, out).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(
        a.as_ref().is_ok_and(|r| r.contains("sm_active_ns")),
        "{a:?}"
    );
    assert_eq!(a, b);
}

/// Issue 16 review: random recordings of kernels and PM samples (some overlapping, some
/// duplicated, some invalid, written in random places among the buffers) meter the same whole
/// and streamed.
#[test]
fn random_pm_recordings_meter_as_whole() {
    use gpumeter_core::PmSample;
    use gpumeter_recording::gmr::{GmrWriter, PmSamples};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let header = h100_header(77);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("random.gmr");
    let strategy = (
        proptest::collection::vec(0u64..400, 1..40),
        proptest::collection::vec(
            (
                0u64..420,
                1u64..40,
                0u64..200_000,
                0u64..1000,
                any::<u32>(),
                0usize..64,
            ),
            0..30,
        ),
        1usize..8,
    );
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |(starts, samples, per)| {
            let mut starts = starts;
            starts.sort_unstable();
            let records: Vec<Vec<u8>> = starts
                .iter()
                .enumerate()
                .map(|(i, &s)| kernel_rec(s, i as u32 + 1))
                .collect();
            let buffers: Vec<Vec<u8>> = records.chunks(per).map(|c| c.concat()).collect();
            let mut frames: Vec<Vec<PmSample>> = vec![Vec::new(); buffers.len() + 1];
            for &(a, len, active, rd, flags, at) in &samples {
                let x = PmSample {
                    start_ns: T0 + a * 1_000,
                    end_ns: T0 + (a + len) * 1_000 - u64::from(flags % 7 == 0) * len * 1_000,
                    sm_active_cycles: (flags & 2 == 0).then_some(active),
                    sm_elapsed_cycles: (flags & 4 == 0).then_some(1_000),
                    dram_read_bytes: (flags & 8 == 0).then_some(rd),
                    dram_write_bytes: (flags & 16 == 0).then_some(rd / 2),
                    overflow: flags & 32 != 0,
                };
                let n = frames.len();
                frames[at % n].push(x);
                if flags & 64 != 0 {
                    // An exact copy elsewhere.
                    frames[(at / 2) % n].push(x);
                }
            }
            let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
            for (i, f) in frames.iter().enumerate() {
                if !f.is_empty() {
                    w.write_pm_samples(&PmSamples {
                        device_id: 0,
                        samples: f.clone(),
                    })
                    .expect("pm");
                }
                if let Some(b) = buffers.get(i) {
                    w.write_buffer(b).expect("buffer");
                }
            }
            std::fs::write(&path, w.finish().expect("finish")).expect("write");
            let (a, b) = gmr_both(&path, None);
            prop_assert!(a.is_ok(), "{:?}", a);
            prop_assert_eq!(a, b);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Issue 16 review: two recordings of one GPU whose PM samples overlap (the later-starting one
/// in the first file) meter the same streamed together (`meter_files`, merged in time order)
/// as read whole (`meter_sources`), in either order of the files.
#[test]
fn overlapping_pm_samples_of_two_recordings_meter_as_whole() {
    use gpumeter_core::PmSample;
    use gpumeter_recording::gmr::{GmrWriter, PmSamples};
    use gpumeter_recording::{meter_files, meter_sources, CuptiFormat, CuptiInput};
    let recording = |pid: u32, kernel_at: u64, s: PmSample| {
        let header = h100_header(pid);
        let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
        w.write_buffer(&kernel_rec(kernel_at, pid)).expect("buffer");
        w.write_pm_samples(&PmSamples {
            device_id: 0,
            samples: vec![s],
        })
        .expect("pm");
        w.finish().expect("finish")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let files = [
        (
            dir.path().join("a.gmr"),
            recording(71, 0, pm_sample(2_000, 6_000, 50_000)),
        ),
        (
            dir.path().join("b.gmr"),
            recording(72, 3, pm_sample(0, 4_000, 7_000)),
        ),
    ];
    for (p, b) in &files {
        std::fs::write(p, b).expect("write");
    }
    for order in [[0usize, 1], [1, 0]] {
        let mut whole = Meter::new(MeterConfig::default());
        let inputs: Vec<CuptiInput<'_>> = order
            .iter()
            .map(|&i| CuptiInput {
                name: if i == 0 { "a.gmr" } else { "b.gmr" },
                bytes: &files[i].1,
                format: CuptiFormat::Gmr,
            })
            .collect();
        meter_sources(&mut whole, &inputs, &CuptiOptions::default()).expect("whole");
        let whole = whole.finish().expect("report");
        let mut streamed = Meter::new(MeterConfig::default());
        let paths: Vec<(&Path, CuptiFormat)> = order
            .iter()
            .map(|&i| (files[i].0.as_path(), CuptiFormat::Gmr))
            .collect();
        let done = meter_files(&mut streamed, &paths, &CuptiOptions::default()).expect("stream");
        assert!(done.is_some(), "the files stream");
        let streamed = streamed.finish().expect("report");
        assert_eq!(
            whole.lost("GPU-00000000-0000-0000-0000-000000000001", "invalid_field"),
            1
        );
        assert_eq!(
            serde_json::to_string(&whole).expect("json"),
            serde_json::to_string(&streamed).expect("json"),
            "order {order:?}"
        );
    }
}

/// Issue 16 review: a GPU of the recording that is sampled but runs no kernel (its samples are
/// settled and freed as the stream goes, `Meter::settle`) meters the same streamed as whole.
#[test]
fn a_sampled_device_without_kernels_streams_as_whole() {
    use gpumeter_core::PmSample;
    use gpumeter_recording::gmr::{GmrDevice, GmrHeader, GmrWriter, PmSamples};
    let gpu = |id: u32| GmrDevice {
        id,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        uuid: Some(format!("GPU-00000000-0000-0000-0000-00000000000{}", id + 1)),
        sm_count: Some(132),
        compute_capability: Some("9.0".into()),
    };
    let header = GmrHeader {
        cupti_api_version: 26,
        host: "test".into(),
        process_id: 77,
        devices: vec![gpu(0), gpu(1)],
        ..GmrHeader::default()
    };
    let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
    for f in 0..10u64 {
        let records: Vec<Vec<u8>> = (0..100)
            .map(|i| kernel_rec(f * 1_000 + i * 10, (f * 100 + i) as u32 + 1))
            .collect();
        w.write_buffer(&records.concat()).expect("buffer");
        for device_id in [0, 1] {
            let samples = (0..1_000u64)
                .map(|i| {
                    let t = T0 + (f * 1_000 + i) * 1_000;
                    PmSample {
                        start_ns: t,
                        end_ns: t + 1_000,
                        sm_active_cycles: Some(i % 50),
                        sm_elapsed_cycles: Some(10),
                        dram_read_bytes: Some(i),
                        dram_write_bytes: Some(f),
                        overflow: false,
                    }
                })
                .collect();
            w.write_pm_samples(&PmSamples { device_id, samples })
                .expect("pm");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("idle-gpu.gmr");
    std::fs::write(&path, w.finish().expect("finish")).expect("write");
    let (a, b) = gmr_both(&path, None);
    assert!(
        a.as_ref()
            .is_ok_and(|r| r.contains("GPU-00000000-0000-0000-0000-000000000002")
                && r.contains("\"idle\"")),
        "{a:?}"
    );
    assert_eq!(a, b);
}

/// Issue 16 review: a growing recording's PM samples and records reach the file at different
/// times (samples decoded on their own period, buffers flushed on theirs). A report of the
/// chain that read records further than samples, or samples further than records, leaves
/// nothing of what the next report reads unmetered: samples and records are cut apart.
#[test]
fn a_recording_chain_cuts_pm_samples_and_records_apart() {
    use gpumeter_core::{MeterKind, PmSample};
    use gpumeter_recording::gmr::{GmrDevice, GmrHeader, GmrWriter, PmSamples};
    let header = GmrHeader {
        cupti_api_version: 26,
        host: "test".into(),
        process_id: 77,
        devices: vec![GmrDevice {
            id: 0,
            uuid: Some("GPU-00000000-0000-0000-0000-000000000001".into()),
            sm_count: Some(132),
            ..GmrDevice::default()
        }],
        ..GmrHeader::default()
    };
    let key = "GPU-00000000-0000-0000-0000-000000000001";
    // Samples of 1 ms, 2 bytes each; kernels of 1 µs every `i` µs (`kernel_rec`).
    let samples = |from: u64, to: u64| PmSamples {
        device_id: 0,
        samples: (from..to)
            .map(|i| PmSample {
                start_ns: T0 + i * 1_000_000,
                end_ns: T0 + (i + 1) * 1_000_000,
                sm_active_cycles: Some(10),
                sm_elapsed_cycles: Some(1),
                dram_read_bytes: Some(1),
                dram_write_bytes: Some(1),
                overflow: false,
            })
            .collect(),
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("growing.gmr");
    // Records ahead of samples: a kernel to 10 ms written, samples only to 5 ms, then the
    // samples to 10 ms. Samples ahead of records: samples to 10 ms written, a kernel at 1 ms,
    // then a kernel at 5 ms.
    /// Records and samples written before the first report, then after it.
    type Parts = (Vec<Vec<u8>>, PmSamples, Vec<Vec<u8>>, PmSamples);
    let ahead: [Parts; 2] = [
        (
            vec![kernel_rec(9_997, 1)],
            samples(0, 5),
            vec![],
            samples(5, 10),
        ),
        (
            vec![kernel_rec(1_000, 1)],
            samples(0, 10),
            vec![kernel_rec(5_000, 2)],
            samples(0, 0),
        ),
    ];
    // Per case, the memory events the opening report read as well (counted with the records
    // before PM samples were).
    for ((first_k, first_s, then_k, then_s), mem) in ahead.into_iter().zip([1usize, 0]) {
        let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
        w.write_buffer(&first_k.concat()).expect("buffer");
        w.write_pm_samples(&first_s).expect("pm");
        let part = w.finish().expect("finish");
        let part = &part[..part.len() - 16];
        let mut w = GmrWriter::new(Vec::new(), &header).expect("writer");
        w.write_buffer(&first_k.concat()).expect("buffer");
        w.write_pm_samples(&first_s).expect("pm");
        if !then_k.is_empty() {
            w.write_buffer(&then_k.concat()).expect("buffer");
        }
        w.write_pm_samples(&then_s).expect("pm");
        let full = w.finish().expect("finish");
        assert_eq!(&full[..part.len()], part);
        let mut meter = Meter::new(MeterConfig::default());
        meter_gmr(&mut meter, "growing.gmr", part, &CuptiOptions::default()).expect("early");
        let opening = meter.finish().expect("report");
        std::fs::write(&path, &full).expect("write");
        let (a, b) = gmr_both(&path, Some(&opening));
        assert_eq!(a, b);
        let mut meter = Meter::new(MeterConfig::default());
        meter.continue_from(&opening).expect("opening");
        meter_gmr(&mut meter, "growing.gmr", &full, &CuptiOptions::default()).expect("later");
        let later = meter.finish().expect("report");
        let dram = |r: &gpumeter_core::UsageReport| r.device_total(key, MeterKind::DramBytes);
        let launches =
            |r: &gpumeter_core::UsageReport| r.device_total(key, MeterKind::KernelLaunches);
        assert_eq!(dram(&opening) + dram(&later), 20, "every sample once");
        assert_eq!(
            launches(&opening) + launches(&later),
            (first_k.len() + then_k.len()) as u128,
            "every kernel once"
        );
        // What the opening report read is counted as billed by it: records and PM samples.
        let (k, s) = (first_k.len(), first_s.samples.len());
        assert_eq!(
            later.records.skipped.get("billed_by_opening_report"),
            Some(&((k + mem + s) as u64)),
            "{:?}",
            later.warnings
        );
        let said =
            format!("{k} work records, {mem} memory events and {s} PM samples of recordings");
        assert!(
            later.warnings.iter().any(|w| w.contains(&said)),
            "{:?}",
            later.warnings
        );
    }
}
