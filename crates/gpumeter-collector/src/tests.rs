//! Tests of the collector without a GPU: the buffer pool and completion handling driven as
//! CUPTI would drive them (from several threads, completions in any order, panics and sink
//! failures injected), the `.gmr` file sink, and `Collector::start` against the real libcupti
//! of the CUDA 12.8 / 13.x wheels (`GPUMETER_CUPTI_LIB`, `GPUMETER_CUPTI13_LIB`; with
//! `CI=true` a missing library fails the test instead of skipping it).

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::callbacks::{serve_completion, serve_request, LiveNames};
use super::completion::{Core, NameReader, Session};
use super::pool::lock;
use super::report::add_pm_tally;
use super::stop::merge_inventory;
use super::*;
use cupti_sys::CuptiError;
use gpumeter_cupti::decode::{decode, Record};
use gpumeter_cupti::layout::KindLayout;
use gpumeter_recording::gmr::{read_gmr, DroppedRecords, Frame, GmrDevice, GmrError, StringTable};

const API: ApiVersion = ApiVersion::Cupti12_8;

fn layout(kind: ActivityKind) -> KindLayout {
    API.layouts()
        .into_iter()
        .find(|l| l.kind == kind)
        .expect("kind in the 12.8 tables")
}

fn put(rec: &mut [u8], l: &KindLayout, field: &str, value: &[u8]) {
    let f = l
        .fields
        .iter()
        .find(|f| f.name == field)
        .unwrap_or_else(|| panic!("{} has no field {field}", l.struct_name));
    assert!(value.len() <= f.width, "{field} is {} bytes", f.width);
    rec[f.offset..f.offset + value.len()].copy_from_slice(value);
}

/// A 12.8 CONCURRENT_KERNEL record.
fn kernel(correlation: u32, name_ptr: u64, start: u64) -> Vec<u8> {
    let l = layout(ActivityKind::CONCURRENT_KERNEL);
    let mut r = vec![0u8; l.size];
    r[0..4].copy_from_slice(&ActivityKind::CONCURRENT_KERNEL.0.to_le_bytes());
    put(&mut r, &l, "start", &start.to_le_bytes());
    put(&mut r, &l, "end", &(start + 1_000).to_le_bytes());
    put(&mut r, &l, "correlationId", &correlation.to_le_bytes());
    put(&mut r, &l, "name", &name_ptr.to_le_bytes());
    for g in ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"] {
        put(&mut r, &l, g, &1i32.to_le_bytes());
    }
    r
}

/// A 12.8 DEVICE record.
fn device(id: u32, name_ptr: u64, sms: u32) -> Vec<u8> {
    let l = layout(ActivityKind::DEVICE);
    let mut r = vec![0u8; l.size];
    r[0..4].copy_from_slice(&ActivityKind::DEVICE.0.to_le_bytes());
    put(&mut r, &l, "id", &id.to_le_bytes());
    put(&mut r, &l, "name", &name_ptr.to_le_bytes());
    put(&mut r, &l, "numMultiprocessors", &sms.to_le_bytes());
    put(&mut r, &l, "computeCapabilityMajor", &9u32.to_le_bytes());
    let uuid: [u8; 16] = std::array::from_fn(|i| i as u8 + 1);
    put(&mut r, &l, "uuid", &uuid);
    r
}

/// Copies `records` into a lent buffer; returns the valid size.
fn fill(ptr: *mut u8, size: usize, records: &[Vec<u8>]) -> usize {
    let bytes: Vec<u8> = records.concat();
    assert!(bytes.len() <= size);
    // SAFETY: `ptr` is a buffer of `size` bytes lent by the pool and not yet completed: this
    // test is the only writer, like CUPTI would be.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr, bytes.len()) };
    bytes.len()
}

/// What a test sink saw, in order.
#[derive(Debug, Clone)]
enum Event {
    Begin,
    Buffer(StringTable, Vec<u8>),
    Dropped(DroppedRecords),
    Finish,
}

/// Correlation ids marking buffers on which the test sink panics or fails.
const PANIC_MARK: u32 = 900_000;
const FAIL_MARK: u32 = 800_000;

#[derive(Clone, Default)]
struct TestSink {
    events: Arc<Mutex<Vec<Event>>>,
}

fn first_correlation(bytes: &[u8]) -> Option<u32> {
    decode(bytes, API)
        .ok()?
        .records
        .iter()
        .find_map(|r| match &r.record {
            Record::Kernel(k) => Some(k.correlation_id),
            _ => None,
        })
}

impl CompletionSink for TestSink {
    fn begin(&mut self, _: &GmrHeader) -> Result<(), GmrError> {
        lock(&self.events).push(Event::Begin);
        Ok(())
    }
    fn buffer(&mut self, strings: &StringTable, bytes: &[u8]) -> Result<(), GmrError> {
        match first_correlation(bytes) {
            Some(c) if c >= PANIC_MARK => panic!("injected sink panic on buffer {c}"),
            Some(c) if c >= FAIL_MARK => Err(GmrError::Write(format!("injected failure {c}"))),
            _ => {
                lock(&self.events).push(Event::Buffer(strings.clone(), bytes.to_vec()));
                Ok(())
            }
        }
    }
    fn dropped(&mut self, d: &DroppedRecords) -> Result<(), GmrError> {
        lock(&self.events).push(Event::Dropped(*d));
        Ok(())
    }
    fn attribution(&mut self, _: &AttributionEvent) -> Result<(), GmrError> {
        Ok(())
    }
    fn finish(&mut self, _: &GmrHeader) -> Result<(), GmrError> {
        lock(&self.events).push(Event::Finish);
        Ok(())
    }
}

fn session(sink: impl CompletionSink + 'static) -> Session {
    let header = GmrHeader {
        cupti_api_version: API.cupti_api_version(),
        ..GmrHeader::default()
    };
    Session::new(API, header, Box::new(sink))
}

fn begin(core: &Core, sink: impl CompletionSink + 'static) {
    if core.begin(session(sink)).is_err() {
        panic!("session did not begin");
    }
}

/// A lent buffer as an address (raw pointers are not `Send`).
#[derive(Debug, Clone, Copy)]
struct Buf {
    addr: usize,
    size: usize,
}

fn request(core: &Core) -> Buf {
    let mut ptr: *mut u8 = std::ptr::null_mut();
    let mut size = 0usize;
    let mut max = 99usize;
    // SAFETY: three valid, writable locals.
    unsafe { serve_request(Some(core), &mut ptr, &mut size, &mut max) };
    assert!(!ptr.is_null(), "CUPTI must never get a NULL buffer");
    assert_eq!(ptr as usize % 8, 0, "8-byte aligned");
    assert_eq!(max, 0);
    Buf {
        addr: ptr as usize,
        size,
    }
}

/// Deterministic shuffle (xorshift), so a failure reproduces.
fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        v.swap(i, (seed % (i as u64 + 1)) as usize);
    }
}

/// Completions in a shuffled order from several threads, with panics injected in requests
/// and in the sink and sink errors: every buffer is delivered exactly once or counted as
/// failed, every dropped count is booked once, names always precede the buffers that need
/// them, and every buffer goes back to the pool exactly once.
#[test]
fn completions_in_any_order_from_many_threads_lose_and_duplicate_nothing() {
    let names: Vec<CString> = (0..5)
        .map(|i| CString::new(format!("kernel_{i}")).expect("no NUL"))
        .collect();
    let name_ptrs: Vec<u64> = names.iter().map(|n| n.as_ptr() as u64).collect();

    let core = Arc::new(Core::new(MIN_BUFFER_SIZE, 3));
    let sink = TestSink::default();
    begin(&core, sink.clone());
    core.panic_requests
        .store(5, std::sync::atomic::Ordering::SeqCst);

    const N: usize = 240;
    const THREADS: usize = 6;
    // Request from several threads at once.
    let mut bufs: Vec<Buf> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                let core = Arc::clone(&core);
                s.spawn(move || (0..N / THREADS).map(|_| request(&core)).collect::<Vec<_>>())
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("request thread"))
            .collect()
    });
    assert_eq!(bufs.len(), N);
    let distinct: BTreeSet<usize> = bufs.iter().map(|b| b.addr).collect();
    assert_eq!(distinct.len(), N, "no buffer lent twice while outstanding");

    // Fill: buffer i holds 3 kernels with correlation ids base+3i..; some are marked to make
    // the sink panic or fail. Dropped count of buffer i: i % 4.
    let mut jobs = Vec::new();
    let mut expect_ok: BTreeSet<u32> = BTreeSet::new();
    let (mut expect_failed, mut expect_panics, mut dropped_total) = (0u64, 0usize, 0u64);
    for (i, b) in bufs.iter().enumerate() {
        let base = match i % 20 {
            3 => {
                expect_panics += 1;
                PANIC_MARK
            }
            11 => FAIL_MARK,
            _ => 0,
        };
        if base != 0 {
            expect_failed += 1;
        }
        let recs: Vec<Vec<u8>> = (0..3u32)
            .map(|j| {
                let c = base + 3 * i as u32 + j + 1;
                if base == 0 {
                    expect_ok.insert(c);
                }
                let name = name_ptrs[(i + j as usize) % name_ptrs.len()];
                kernel(c, name, 1_000_000 + i as u64)
            })
            .collect();
        let valid = fill(b.addr as *mut u8, b.size, &recs);
        let dropped = (i % 4) as u64;
        dropped_total += dropped;
        jobs.push((*b, valid, dropped));
    }
    shuffle(&mut jobs, 0x9E37_79B9_7F4A_7C15);
    bufs.clear();

    std::thread::scope(|s| {
        for chunk in jobs.chunks(N / THREADS) {
            let core = Arc::clone(&core);
            s.spawn(move || {
                for &(b, valid, dropped) in chunk {
                    serve_completion(
                        &core,
                        || {
                            Ok((dropped > 0).then_some(DroppedRecords {
                                device_id: None,
                                context_id: 0,
                                stream_id: 0,
                                count: dropped,
                            }))
                        },
                        b.addr as *mut u8,
                        valid,
                        &LiveNames,
                    );
                }
            });
        }
    });

    // A second completion of a buffer and a pointer the pool never lent: ignored, not freed.
    let (again, valid, _) = jobs[0];
    serve_completion(&core, || Ok(None), again.addr as *mut u8, valid, &LiveNames);
    let mut foreign = vec![0u64; 64];
    let foreign_bytes = 64 * 8;
    serve_completion(
        &core,
        || Ok(None),
        foreign.as_mut_ptr().cast(),
        foreign_bytes,
        &LiveNames,
    );
    assert!(
        foreign.iter().all(|&w| w == 0),
        "a foreign buffer is not touched"
    );

    let t = core.tally();
    let events = lock(&sink.events).clone();
    // Replay the sink's events in order: names must be known before each buffer uses them.
    let mut known: HashMap<u64, String> = HashMap::new();
    let mut seen: Vec<u32> = Vec::new();
    let mut dropped_seen = 0u64;
    for e in &events {
        match e {
            Event::Buffer(strings, bytes) => {
                for (p, s) in &strings.entries {
                    known.insert(*p, s.clone());
                }
                for r in decode(bytes, API).expect("decodes").records {
                    if let Record::Kernel(k) = r.record {
                        seen.push(k.correlation_id);
                        let idx = name_ptrs
                            .iter()
                            .position(|&p| p == k.name_ptr)
                            .expect("a test name");
                        assert_eq!(
                            known.get(&k.name_ptr).map(String::as_str),
                            Some(format!("kernel_{idx}").as_str()),
                            "the name of {} reached the sink before its buffer",
                            k.correlation_id
                        );
                    }
                }
            }
            Event::Dropped(d) => dropped_seen += d.count,
            Event::Begin | Event::Finish => {}
        }
    }
    let seen_set: BTreeSet<u32> = seen.iter().copied().collect();
    assert_eq!(seen.len(), seen_set.len(), "no record delivered twice");
    assert_eq!(seen_set, expect_ok, "every good buffer delivered");
    assert!(
        known.len() <= name_ptrs.len(),
        "each name written once, not once per buffer"
    );

    assert_eq!(t.completed, N as u64 + 2);
    assert_eq!(t.written, N as u64 - expect_failed);
    assert_eq!(t.failed, expect_failed);
    assert_eq!(t.kernels, 3 * (N as u64 - expect_failed));
    assert_eq!(t.dropped, dropped_total, "every dropped delta counted once");
    assert_eq!(dropped_seen, dropped_total, "and written once");
    assert_eq!(t.discarded, 0);
    assert_eq!(t.pool.lent, N as u64);
    assert_eq!(t.pool.reclaimed, N as u64);
    assert_eq!(t.pool.unknown, 2);
    assert_eq!(t.unknown, 2);
    assert_eq!(t.pool.outstanding, 0, "every buffer came back");
    assert!(t.pool.free <= 3);
    assert_eq!(
        t.panics.len(),
        5 + expect_panics,
        "5 request panics and {expect_panics} sink panics reported: {:?}",
        t.panics
    );
    assert!(t
        .panics
        .iter()
        .any(|p| p.contains("injected request panic")));
    assert!(t.panics.iter().any(|p| p.contains("injected sink panic")));
    let sink_errors = t
        .errors
        .iter()
        .filter(|e| e.contains("injected failure"))
        .count();
    assert_eq!(sink_errors as u64, expect_failed - expect_panics as u64);
    assert_eq!(
        t.errors
            .iter()
            .filter(|e| e.contains("did not lend"))
            .count(),
        2
    );
    drop(names);
}

/// A name pointer reused for another string (CUPTI freed the first) is written again.
#[test]
fn changed_names_are_written_again() {
    struct Map(Mutex<HashMap<u64, String>>);
    impl NameReader for Map {
        fn read(&self, ptr: u64) -> Option<String> {
            lock(&self.0).get(&ptr).cloned()
        }
    }
    let reader = Map(Mutex::new(HashMap::from([(0x1000, "first".to_string())])));
    let core = Core::new(MIN_BUFFER_SIZE, 1);
    let sink = TestSink::default();
    begin(&core, sink.clone());
    for (round, text) in [(1, "first"), (2, "first"), (3, "second")] {
        lock(&reader.0).insert(0x1000, text.to_string());
        let b = request(&core);
        let valid = fill(b.addr as *mut u8, b.size, &[kernel(round, 0x1000, 5)]);
        serve_completion(&core, || Ok(None), b.addr as *mut u8, valid, &reader);
    }
    let tables: Vec<Vec<String>> = lock(&sink.events)
        .iter()
        .filter_map(|e| match e {
            Event::Buffer(t, _) => Some(t.entries.values().cloned().collect()),
            _ => None,
        })
        .collect();
    assert_eq!(
        tables,
        [
            vec!["first".to_string()],
            vec![],
            vec!["second".to_string()]
        ]
    );
}

/// Buffers completed after the session ended are counted, not recorded, and still go back.
#[test]
fn completions_without_a_session_are_discarded_and_recycled() {
    let core = Core::new(MIN_BUFFER_SIZE, 2);
    let b = request(&core);
    let valid = fill(b.addr as *mut u8, b.size, &[kernel(1, 0, 5)]);
    serve_completion(&core, || Ok(None), b.addr as *mut u8, valid, &LiveNames);
    let t = core.tally();
    assert_eq!((t.completed, t.discarded, t.written), (1, 1, 0));
    assert_eq!(t.pool.outstanding, 0);
    assert_eq!(t.pool.free, 1);
}

/// A panic while reading the dropped count is reported; the buffer is still delivered.
#[test]
fn a_panic_reading_the_dropped_count_is_caught() {
    let core = Core::new(MIN_BUFFER_SIZE, 2);
    let sink = TestSink::default();
    begin(&core, sink.clone());
    let b = request(&core);
    let valid = fill(b.addr as *mut u8, b.size, &[kernel(1, 0, 5)]);
    serve_completion(
        &core,
        || panic!("injected dropped-count panic"),
        b.addr as *mut u8,
        valid,
        &LiveNames,
    );
    let t = core.tally();
    assert_eq!(t.written, 1);
    assert!(t
        .errors
        .iter()
        .any(|e| e.contains("injected dropped-count panic")));
    assert_eq!(t.pool.outstanding, 0);
}

/// Without a core (cannot happen once started) the request still gets a non-NULL buffer.
#[test]
fn requests_without_a_core_get_a_buffer() {
    let mut ptr: *mut u8 = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: valid locals; NULL for the third output is allowed.
    unsafe { serve_request(None, &mut ptr, &mut size, std::ptr::null_mut()) };
    assert!(!ptr.is_null());
    assert!(size >= MIN_BUFFER_SIZE);
}

/// The file sink streams frames, then rewrites the header with the devices learned; the
/// result reads back, meters, and names the kernels.
#[test]
fn file_sink_writes_a_recording_that_meters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.gmr");
    let kname = CString::new("gm_test_kernel").expect("no NUL");
    let dname = CString::new("NVIDIA H200").expect("no NUL");
    let core = Core::new(MIN_BUFFER_SIZE, 2);
    let header = GmrHeader {
        cupti_api_version: API.cupti_api_version(),
        host: "test-host".into(),
        process_id: 4242,
        ..GmrHeader::default()
    };
    let sink = GmrFileSink::create(&path);
    assert_eq!(sink.path(), path.as_path());
    if core
        .begin(Session::new(API, header.clone(), Box::new(sink)))
        .is_err()
    {
        panic!("begin");
    }
    let t0 = 1_752_826_085_000_000_000u64;
    for i in 0..3u32 {
        let b = request(&core);
        let mut recs = vec![kernel(
            i + 1,
            kname.as_ptr() as u64,
            t0 + u64::from(i) * 10_000,
        )];
        if i == 0 {
            recs.insert(0, device(0, dname.as_ptr() as u64, 132));
        }
        let valid = fill(b.addr as *mut u8, b.size, &recs);
        let dropped = (i == 1).then_some(DroppedRecords {
            device_id: None,
            context_id: 0,
            stream_id: 0,
            count: 2,
        });
        serve_completion(&core, || Ok(dropped), b.addr as *mut u8, valid, &LiveNames);
    }
    let mut s = core.end().expect("session");
    let mut final_header = header.clone();
    final_header.devices = s.devices().values().cloned().collect();
    assert_eq!(final_header.devices.len(), 1);
    s.sink.finish(&final_header).expect("finish");

    let bytes = std::fs::read(&path).expect("recording");
    let file = read_gmr(&bytes).expect("reads");
    assert!(file.finished && file.torn.is_none());
    assert_eq!(file.header, final_header, "the header was rewritten");
    let dev = &file.header.devices[0];
    assert_eq!(dev.name.as_deref(), Some("NVIDIA H200"));
    assert_eq!(dev.sm_count, Some(132));
    assert_eq!(dev.compute_capability.as_deref(), Some("9.0"));
    assert_eq!(
        dev.uuid.as_deref(),
        Some("GPU-01020304-0506-0708-090a-0b0c0d0e0f10")
    );
    let buffers = file
        .frames
        .iter()
        .filter(|f| matches!(f.frame, Frame::ActivityBuffer(_)))
        .count();
    let tables: Vec<&StringTable> = file
        .frames
        .iter()
        .filter_map(|f| match &f.frame {
            Frame::StringTable(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(buffers, 3);
    assert_eq!(tables.len(), 1, "names are written once");
    let names: BTreeSet<&str> = tables[0].entries.values().map(String::as_str).collect();
    assert_eq!(names, BTreeSet::from(["NVIDIA H200", "gm_test_kernel"]));
    assert!(
        matches!(file.frames[0].frame, Frame::StringTable(_)),
        "names first"
    );

    let mut meter = gpumeter_core::Meter::new(gpumeter_core::MeterConfig::default());
    let summary = gpumeter_recording::meter_gmr(&mut meter, "run.gmr", &bytes, &Default::default())
        .expect("meters");
    assert_eq!(summary.records, 3);
    assert_eq!(summary.dropped, 2);
    assert_eq!(
        summary.device_keys,
        ["GPU-01020304-0506-0708-090a-0b0c0d0e0f10"]
    );
}

/// A sink that cannot begin fails the session; one whose writes fail stops writing, so
/// the file stays readable.
#[test]
fn file_sink_failures() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut bad = GmrFileSink::create(dir.path().join("no/such/dir/run.gmr"));
    assert!(bad.begin(&GmrHeader::default()).is_err());
    let core = Core::new(MIN_BUFFER_SIZE, 1);
    assert!(core.begin(session(bad)).is_err());
    assert!(core.end().is_none(), "nothing installed");

    // Writing after finish is refused.
    let mut sink = GmrFileSink::create(dir.path().join("ok.gmr"));
    let h = GmrHeader {
        cupti_api_version: 26,
        ..GmrHeader::default()
    };
    sink.begin(&h).expect("begin");
    sink.finish(&h).expect("finish");
    assert!(sink.buffer(&StringTable::new(), &[]).is_err());
    let file = read_gmr(&std::fs::read(dir.path().join("ok.gmr")).expect("read")).expect("gmr");
    assert!(file.finished && file.frames.is_empty());

    // Abort removes the file.
    let path = dir.path().join("aborted.gmr");
    let mut sink = GmrFileSink::create(&path);
    sink.begin(&h).expect("begin");
    assert!(path.exists());
    sink.abort();
    assert!(!path.exists());
}

#[test]
fn config_is_validated_before_cupti_is_touched() {
    for (config, needle) in [
        (
            CollectorConfig {
                kinds: vec![ActivityKind::CONCURRENT_KERNEL, ActivityKind::KERNEL],
                ..CollectorConfig::default()
            },
            "KERNEL",
        ),
        (
            CollectorConfig {
                kinds: vec![ActivityKind::MEMCPY],
                ..CollectorConfig::default()
            },
            "CONCURRENT_KERNEL",
        ),
        (
            CollectorConfig {
                buffer_size: 1024,
                ..CollectorConfig::default()
            },
            "buffer_size",
        ),
    ] {
        match Collector::start(config, Box::new(TestSink::default())) {
            Err(CollectorError::Config(m)) => assert!(m.contains(needle), "{m}"),
            other => panic!("expected a config error, got {other:?}"),
        }
    }
}

#[test]
fn error_codes_map_to_typed_errors() {
    let api = |code: u32| CuptiError::Api {
        function: "cuptiSubscribe",
        code,
        name: cupti_sys::ResultCode::from_raw(code).name(),
        message: String::new(),
    };
    assert!(matches!(
        CollectorError::from_cupti(api(15)),
        CollectorError::NoGpu {
            function: "cuptiSubscribe",
            ..
        }
    ));
    assert!(matches!(
        CollectorError::from_cupti(api(39)),
        CollectorError::AnotherProfiler { .. }
    ));
    assert!(matches!(
        CollectorError::from_cupti(api(999)),
        CollectorError::Cupti(_)
    ));
}

/// A libcupti named by an environment variable, else the pinned wheel's (fetched by
/// `bindings/cupti/fetch-wheels.sh`), or `None` (with a notice) outside CI.
fn lib_from_env(var: &str) -> Option<PathBuf> {
    let wheel = match var {
        "GPUMETER_CUPTI13_LIB" => "cu13/nvidia/cu13/lib/libcupti.so.13",
        _ => "cu12/nvidia/cuda_cupti/lib/libcupti.so.12",
    };
    let fallback = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../bindings/cupti/.wheels")
        .join(wheel);
    let lib = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or(fallback);
    if lib.exists() {
        return Some(lib);
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but there is no libcupti at {} ({var}): run bindings/cupti/fetch-wheels.sh",
        lib.display()
    );
    {
        // Straight to stderr, past the test harness's capture: a skip is never silent.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: no libcupti at {} ({var}); test body not run",
            lib.display()
        );
    }
    None
}

/// Runs `f` on a thread and fails the test if it takes longer than `limit` (a hang).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no answer within {limit:?}: a hang"))
}

/// On this GPU-less machine the real CUPTI 12.8 answers NOT_INITIALIZED at once: a typed
/// error, no panic, no hang, and no recording left behind.
#[test]
fn start_without_a_gpu_is_a_typed_error() {
    let Some(lib) = lib_from_env("GPUMETER_CUPTI_LIB") else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run.gmr");
    let out2 = out.clone();
    let r = within(Duration::from_secs(60), move || {
        let config = CollectorConfig {
            cupti_lib: Some(lib),
            ..CollectorConfig::default()
        };
        Collector::start(config, Box::new(GmrFileSink::create(out2))).map(|c| c.stop())
    });
    match r {
        Err(CollectorError::NoGpu { function, detail }) => {
            assert!(detail.contains("CUPTI_ERROR_NOT_INITIALIZED"), "{detail}");
            assert!(!function.is_empty());
        }
        other => panic!("expected NoGpu, got {other:?}"),
    }
    assert!(!out.exists(), "no recording without collection");
    // The running flag was released: the next start fails the same way, not AlreadyRunning.
    let again = Collector::start(CollectorConfig::default(), Box::new(TestSink::default()));
    assert!(
        !matches!(again, Err(CollectorError::AlreadyRunning)),
        "{again:?}"
    );
}

/// Cases that need a fresh process (the first libcupti a process loads is its only one).
const CHILD_CASE: &str = "GPUMETER_COLLECTOR_TEST_CASE";

/// Run by [`start_errors_in_fresh_processes`] in a child process.
#[test]
#[ignore = "run in a child process by start_errors_in_fresh_processes"]
fn child_start() {
    let case = std::env::var(CHILD_CASE).unwrap_or_default();
    let config = match case.as_str() {
        "missing-path" => CollectorConfig {
            cupti_lib: Some(PathBuf::from("/nonexistent/libcupti.so.12")),
            ..CollectorConfig::default()
        },
        _ => CollectorConfig::default(),
    };
    let r = within(Duration::from_secs(60), move || {
        Collector::start(config, Box::new(TestSink::default())).map(|c| c.stop())
    });
    let got = match &r {
        Err(CollectorError::LibraryMissing(e)) => {
            assert!(e.to_string().contains("/nonexistent/libcupti.so.12"), "{e}");
            "LibraryMissing"
        }
        Err(CollectorError::NoGpu { .. }) => "NoGpu",
        other => panic!("unexpected: {other:?}"),
    };
    println!("CHILD-RESULT {got}");
}

#[test]
fn start_errors_in_fresh_processes() {
    let exe = std::env::current_exe().expect("test binary");
    let mut cases: Vec<(&str, Option<PathBuf>, &str)> = vec![
        (
            "missing-env",
            Some(PathBuf::from("/nonexistent/libcupti.so.12")),
            "LibraryMissing",
        ),
        ("missing-path", None, "LibraryMissing"),
    ];
    if let Some(lib13) = lib_from_env("GPUMETER_CUPTI13_LIB") {
        // CUPTI 13.x answers CUPTI_ERROR_UNKNOWN to everything without a driver.
        cases.push(("cupti13", Some(lib13), "NoGpu"));
    }
    for (case, env_lib, expect) in cases {
        let mut cmd = std::process::Command::new(&exe);
        cmd.args([
            "--exact",
            "tests::child_start",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_CASE, case);
        match env_lib {
            Some(p) => cmd.env("GPUMETER_CUPTI_LIB", p),
            None => cmd.env_remove("GPUMETER_CUPTI_LIB"),
        };
        let out = cmd.output().expect("run the child test");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("CHILD-RESULT {expect}")),
            "case {case}: expected {expect}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Names are read without trusting the pointer: an unmapped address or a string running into
/// an unmapped page gives no name instead of a crash; long names cross read chunks.
#[test]
fn live_names_never_fault() {
    let r = LiveNames;
    assert_eq!(r.read(0), None);
    let long = CString::new("k".repeat(5000)).expect("no NUL");
    assert_eq!(r.read(long.as_ptr() as u64).map(|s| s.len()), Some(5000));
    // SAFETY: an anonymous private mapping of two pages, the second unmapped again; only the
    // first page is written, through its own pointer, and both are unmapped at the end.
    unsafe {
        let page = 4096usize;
        let base = libc::mmap(
            std::ptr::null_mut(),
            2 * page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(base, libc::MAP_FAILED);
        let base = base.cast::<u8>();
        assert_eq!(libc::munmap(base.add(page).cast(), page), 0);
        // "abc" at the very end of the first page, no NUL before the gap.
        std::ptr::write_bytes(base, b'x', page);
        assert_eq!(r.read(base.add(page - 3) as u64), None);
        // With a NUL inside the page it reads.
        *base.add(page - 1) = 0;
        assert_eq!(r.read(base.add(page - 4) as u64).as_deref(), Some("xxx"));
        assert_eq!(r.read(base.add(page) as u64), None, "unmapped");
        assert_eq!(libc::munmap(base.cast(), page), 0);
    }
}

fn dev(id: u32, name: Option<&str>, uuid: Option<&str>, sms: Option<u32>) -> GmrDevice {
    GmrDevice {
        id,
        name: name.map(str::to_string),
        uuid: uuid.map(str::to_string),
        sm_count: sms,
        compute_capability: None,
    }
}

fn nv(index: u32, name: &str, uuid: &str, mig: bool) -> nvml::NvmlDevice {
    nvml::NvmlDevice {
        index,
        name: Some(name.to_string()),
        uuid: Some(uuid.to_string()),
        mig,
    }
}

#[test]
fn inventory_sources_fill_only_missing_fields_records_then_driver_then_nvml() {
    // DEVICE records: 0 fully named; 1 with a UUID only; 2 with nothing but an SM count.
    let mut devices = vec![
        dev(0, Some("from records"), Some("GPU-aaaa"), Some(132)),
        dev(1, None, Some("GPU-bbbb"), None),
        dev(2, None, None, Some(16)),
    ];
    // The driver names 1 (its UUID is ignored: the records' stays) and adds device 3.
    merge_inventory(
        &mut devices,
        vec![
            dev(0, Some("from driver"), Some("GPU-zzzz"), Some(1)),
            dev(1, Some("driver 1"), Some("GPU-other"), Some(66)),
            dev(3, None, None, None),
        ],
    );
    let nvml = [
        // Matched to 0 by UUID (case-insensitive): nothing missing, nothing changes.
        nv(5, "nvml 0", "gpu-AAAA", false),
        // Matched to 1 by UUID: the driver's name stays.
        nv(1, "nvml 1", "GPU-bbbb", false),
        // Index 2, no UUID known there: filled by index.
        nv(2, "nvml 2", "GPU-cccc", false),
        // Index 3 in MIG mode: CUDA ordinal 3 is a MIG instance, not this GPU.
        nv(3, "nvml 3", "GPU-dddd", true),
    ];
    let mut by_index = devices.clone();
    nvml::fill_from_nvml(&mut by_index, &nvml, true);
    assert_eq!(
        by_index,
        vec![
            dev(0, Some("from records"), Some("GPU-aaaa"), Some(132)),
            dev(1, Some("driver 1"), Some("GPU-bbbb"), Some(66)),
            dev(2, Some("nvml 2"), Some("GPU-cccc"), Some(16)),
            dev(3, None, None, None),
        ]
    );
    // When the NVML index is not the CUDA ordinal, only UUID matches fill anything.
    let mut by_uuid = devices.clone();
    nvml::fill_from_nvml(&mut by_uuid, &nvml, false);
    assert_eq!(by_uuid, devices);

    // An NVML device whose UUID belongs to another entry is never matched by index.
    let mut taken = vec![dev(0, None, None, None), dev(1, None, Some("GPU-x"), None)];
    nvml::fill_from_nvml(&mut taken, &[nv(0, "x", "GPU-X", false)], true);
    assert_eq!(taken[0], dev(0, None, None, None));
    assert_eq!(taken[1], dev(1, Some("x"), Some("GPU-x"), None));
    // NVML never adds devices.
    let mut none: Vec<GmrDevice> = Vec::new();
    nvml::fill_from_nvml(&mut none, &nvml, true);
    assert!(none.is_empty());
}

#[test]
fn nvml_without_a_driver_gives_nothing_and_no_error() {
    use libloading::os::unix::{Library, RTLD_NOW};
    // SAFETY: loading libnvidia-ml runs only its initialisers, as NVML's own loading does; the
    // handle is dropped (and the library unloaded) at once.
    let present = unsafe { Library::open(Some("libnvidia-ml.so.1"), RTLD_NOW) }.is_ok();
    let mut devices = vec![dev(0, None, None, None)];
    let mut warnings = Vec::new();
    // Never a hang, never a panic, with or without a driver.
    let _ = within(Duration::from_secs(30), move || {
        nvml::nvml_inventory(&mut devices, &mut warnings, true, Duration::from_secs(10));
        (devices, warnings)
    });
    if present {
        // A machine with a driver: only that it returns without panicking.
        return;
    }
    assert!(nvml::nvml_devices().is_err());
    let mut devices = vec![dev(0, None, None, None)];
    let mut warnings = Vec::new();
    nvml::nvml_inventory(&mut devices, &mut warnings, false, Duration::from_secs(10));
    assert_eq!(devices, vec![dev(0, None, None, None)]);
    assert!(
        warnings.is_empty(),
        "quiet without GPUMETER_VERBOSE: {warnings:?}"
    );
    nvml::nvml_inventory(&mut devices, &mut warnings, true, Duration::from_secs(10));
    assert_eq!(devices, vec![dev(0, None, None, None)]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("NVML"), "{warnings:?}");
}

/// PM sampling without a GPU: configuration, value conversion, metric selection (on given
/// metric lists and through the real profiler host API of CUPTI 12.8, which answers offline),
/// error mapping, frames from a fake decoder into a real recording, and the start on this
/// GPU-less machine.
mod pm {
    use std::collections::VecDeque;

    use gpumeter_core::PmSample;

    use super::*;
    use gpumeter_recording::gmr::PmSamples;

    #[test]
    fn config_is_validated_field_by_field() {
        PmSamplingConfig::default().validate().expect("defaults");
        let cases = [
            (
                PmSamplingConfig {
                    interval: Duration::ZERO,
                    ..PmSamplingConfig::default()
                },
                "pm_sampling.interval",
            ),
            (
                PmSamplingConfig {
                    interval: Duration::from_secs(2),
                    ..PmSamplingConfig::default()
                },
                "pm_sampling.interval",
            ),
            (
                PmSamplingConfig {
                    hw_buffer_bytes: 4096,
                    ..PmSamplingConfig::default()
                },
                "pm_sampling.hw_buffer_bytes",
            ),
            (
                PmSamplingConfig {
                    decode_period: Duration::from_secs(60),
                    ..PmSamplingConfig::default()
                },
                "pm_sampling.decode_period",
            ),
        ];
        for (pm, needle) in cases {
            let e = pm.validate().expect_err(needle);
            assert!(e.contains(needle), "{e}");
            // The collector refuses it before loading anything.
            let config = CollectorConfig {
                cupti_lib: Some(PathBuf::from("/nonexistent/libcupti.so.12")),
                pm_sampling: Some(pm),
                ..CollectorConfig::default()
            };
            match Collector::start(config, Box::new(TestSink::default())) {
                Err(CollectorError::Config(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("expected a config error, got {other:?}"),
            }
        }
        // The edges are allowed.
        for interval in [*PM_INTERVAL_RANGE.start(), *PM_INTERVAL_RANGE.end()] {
            PmSamplingConfig {
                interval,
                ..PmSamplingConfig::default()
            }
            .validate()
            .expect("edge");
        }
    }

    #[test]
    fn values_become_counts_or_are_refused() {
        assert_eq!(to_count(0.0), Ok(0));
        assert_eq!(to_count(-0.0), Ok(0));
        assert_eq!(to_count(-0.4), Ok(0), "rounds to zero");
        assert_eq!(to_count(2.5), Ok(3), "half away from zero");
        assert_eq!(to_count(1234.49), Ok(1234));
        assert_eq!(to_count(9_007_199_254_740_992.0), Ok(1 << 53));
        assert_eq!(to_count(-0.6), Err(Unusable::Negative));
        assert_eq!(to_count(-1e9), Err(Unusable::Negative));
        assert_eq!(to_count(f64::NAN), Err(Unusable::NaN));
        assert_eq!(to_count(f64::INFINITY), Err(Unusable::Infinite));
        assert_eq!(to_count(f64::NEG_INFINITY), Err(Unusable::Infinite));
        assert_eq!(
            to_count(18_446_744_073_709_551_616.0),
            Err(Unusable::TooLarge)
        );
        // The largest f64 below 2^64 still converts.
        assert_eq!(
            to_count(18_446_744_073_709_549_568.0),
            Ok(18_446_744_073_709_549_568)
        );
    }

    fn full() -> MetricSelection {
        MetricSelection {
            sm_active: Some("sm__cycles_active.sum"),
            sm_elapsed: Some("sm__cycles_elapsed.max"),
            dram_read: Some("dram__bytes_read.sum"),
            dram_write: Some("dram__bytes_write.sum"),
        }
    }

    fn sm_only() -> MetricSelection {
        MetricSelection {
            dram_read: None,
            dram_write: None,
            ..full()
        }
    }

    #[test]
    fn raw_samples_fill_the_selected_counters_in_role_order() {
        let raw = RawSample {
            start_ns: 100,
            end_ns: 200,
            values: vec![528.0, 132.0],
        };
        let (s, bad) = to_pm_sample(&raw, &sm_only());
        assert_eq!(bad, 0);
        assert_eq!(
            s,
            PmSample {
                start_ns: 100,
                end_ns: 200,
                sm_active_cycles: Some(528),
                sm_elapsed_cycles: Some(132),
                dram_read_bytes: None,
                dram_write_bytes: None,
                overflow: false,
            }
        );
        let raw = RawSample {
            start_ns: 1,
            end_ns: 2,
            values: vec![f64::NAN, 7.0, -3.0, 1e30],
        };
        let (s, bad) = to_pm_sample(&raw, &full());
        assert_eq!(bad, 3, "NaN, negative and too large are counted");
        assert_eq!(
            (
                s.sm_active_cycles,
                s.sm_elapsed_cycles,
                s.dram_read_bytes,
                s.dram_write_bytes
            ),
            (None, Some(7), None, None)
        );
        // Fewer values than metrics: the missing ones are unusable, not invented.
        let raw = RawSample {
            start_ns: 1,
            end_ns: 2,
            values: vec![5.0],
        };
        let (s, bad) = to_pm_sample(&raw, &sm_only());
        assert_eq!(
            (s.sm_active_cycles, s.sm_elapsed_cycles, bad),
            (Some(5), None, 1)
        );
    }

    /// A chip described by its base counters and the metric sets it accepts.
    struct FakeChip {
        bases: Vec<&'static str>,
        accept: fn(&[&str]) -> bool,
        asked: Vec<Vec<String>>,
    }

    impl MetricProbe for FakeChip {
        fn base_counters(&mut self) -> Result<Vec<String>, CuptiError> {
            Ok(self.bases.iter().map(|s| s.to_string()).collect())
        }
        fn accepts(&mut self, metrics: &[&str]) -> Result<bool, CuptiError> {
            self.asked
                .push(metrics.iter().map(|s| s.to_string()).collect());
            Ok((self.accept)(metrics))
        }
    }

    #[test]
    fn selection_takes_the_first_candidate_the_chip_accepts() {
        // Everything available: the first candidate of every role.
        let mut chip = FakeChip {
            bases: vec![
                "sm__cycles_active",
                "sm__cycles_elapsed",
                "gpc__cycles_elapsed",
                "dram__bytes_read",
                "dram__bytes_write",
            ],
            accept: |_| true,
            asked: Vec::new(),
        };
        assert_eq!(select_metrics(&mut chip).expect("select"), full());
        assert_eq!(
            chip.asked.last().map(Vec::len),
            Some(4),
            "the last question holds every chosen metric: {:?}",
            chip.asked
        );
        // No sm__cycles_elapsed: the GPC clock; DRAM listed but refused (as CUPTI 12.8 does on
        // GH100): absent, and the selection says what it lacks.
        let mut chip = FakeChip {
            bases: vec![
                "sm__cycles_active",
                "gpc__cycles_elapsed",
                "dram__bytes_read",
                "dram__bytes_write",
            ],
            accept: |m| !m.iter().any(|x| x.starts_with("dram__")),
            asked: Vec::new(),
        };
        let sel = select_metrics(&mut chip).expect("select");
        assert_eq!(sel.sm_active, Some("sm__cycles_active.sum"));
        assert_eq!(sel.sm_elapsed, Some("gpc__cycles_elapsed.max"));
        assert_eq!((sel.dram_read, sel.dram_write), (None, None));
        assert_eq!(
            sel.metrics(),
            vec!["sm__cycles_active.sum", "gpc__cycles_elapsed.max"]
        );
        let gap = sel.missing().expect("DRAM missing");
        assert!(gap.contains("dram_bytes"), "{gap}");
        assert!(!gap.contains("sm_active_ns"), "{gap}");
        // A candidate whose base the chip does not list is never asked about.
        assert!(chip
            .asked
            .iter()
            .flatten()
            .all(|m| !m.starts_with("sm__cycles_elapsed")));
        // Nothing at all.
        let mut chip = FakeChip {
            bases: vec!["gpu__time_duration"],
            accept: |_| true,
            asked: Vec::new(),
        };
        let sel = select_metrics(&mut chip).expect("select");
        assert!(sel.metrics().is_empty());
        assert!(chip.asked.is_empty());
    }

    /// The real profiler host API of CUPTI 12.8 answers without a GPU: GA100, GH100 and AD102
    /// get both SM counters and no DRAM byte counter (CUPTI offers only DRAM throughput
    /// percentages for PM sampling on them).
    #[test]
    fn selection_through_the_real_host_api() {
        let Some(lib) = lib_from_env("GPUMETER_CUPTI_LIB") else {
            return;
        };
        let cupti = Cupti::load_from(&lib).expect("libcupti loads");
        let pinned = lib.ends_with("nvidia/cuda_cupti/lib/libcupti.so.12");
        for chip in ["GA100", "GH100", "AD102"] {
            let sel = select_metrics(&mut HostProbe::new(&cupti, chip, None))
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            assert_eq!(sel.sm_active, Some("sm__cycles_active.sum"), "{chip}");
            assert_eq!(sel.sm_elapsed, Some("sm__cycles_elapsed.max"), "{chip}");
            if pinned {
                assert_eq!((sel.dram_read, sel.dram_write), (None, None), "{chip}");
            }
            // The chosen set builds a config image.
            let host = cupti.pm_host_initialize(chip, None).expect("host");
            cupti
                .pm_host_add_metrics(&host, &sel.metrics())
                .expect("add");
            assert!(!cupti.pm_host_config_image(&host).expect("image").is_empty());
            cupti.pm_host_deinitialize(host).expect("deinit");
        }
        // An unknown chip is an error of the probe, not an empty selection.
        let e = select_metrics(&mut HostProbe::new(&cupti, "NOPE", None)).expect_err("unknown");
        assert!(e.to_string().contains("cuptiProfilerHostInitialize"), "{e}");
    }

    /// What CUPTI 12.8's profiler host API offers for DRAM traffic under PM sampling, asked
    /// without a GPU (the table in docs/COLLECTION.md "PM sampling"): no byte or sector
    /// counter, none of a byte counter's submetrics, only throughput percentages and DRAM
    /// cycle counters. Pinned to the wheel's library: another CUPTI may offer more.
    #[test]
    fn pm_sampling_offers_no_dram_byte_count_in_cupti_12_8() {
        let Some(lib) = lib_from_env("GPUMETER_CUPTI_LIB") else {
            return;
        };
        if !lib.ends_with("nvidia/cuda_cupti/lib/libcupti.so.12") {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {} is not the pinned CUPTI 12.8 wheel; test body not run",
                lib.display()
            );
            return;
        }
        let cupti = Cupti::load_from(&lib).expect("libcupti loads");
        let accepts = |chip: &str, metric: &str| {
            HostProbe::new(&cupti, chip, None)
                .accepts(&[metric])
                .unwrap_or_else(|e| panic!("{chip} {metric}: {e}"))
        };
        let refused = [
            "dram__bytes_read.sum",
            "dram__bytes_write.sum",
            "dram__bytes.sum",
            "dram__bytes_read.sum.per_second",
            "dram__bytes_write.sum.per_second",
            "dram__bytes.sum.per_second",
            "dram__bytes_read.sum.peak_sustained",
            "dram__bytes_read.sum.pct_of_peak_sustained_elapsed",
            "dram__sectors_read.sum",
            "dram__sectors_write.sum",
            "fbpa__dram_read_bytes.sum",
            "fbpa__dram_write_bytes.sum",
            "dramc__sectors_op_read.sum",
            "lts__t_sectors_srcunit_tex.sum",
            "lts__t_sectors_aperture_device.sum",
            "lts__t_bytes.sum",
            "dram__read_throughput.avg",
            "dram__read_throughput.sum",
        ];
        let accepted = [
            "dram__read_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__write_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__throughput.avg.pct_of_peak_sustained_elapsed",
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
            "dram__cycles_elapsed.avg",
            "dram__cycles_elapsed.avg.per_second",
            "dram__cycles_active.sum",
        ];
        for chip in ["GA100", "GH100", "AD102"] {
            for m in refused {
                assert!(
                    !accepts(chip, m),
                    "{chip} now accepts {m}: use it for dram_bytes"
                );
            }
            for m in accepted {
                assert!(accepts(chip, m), "{chip} refuses {m}");
            }
            // The chip's PM sampling counters name no DRAM or L2 byte or sector count: the
            // DRAM-side counters are clock cycles only.
            let bases = HostProbe::new(&cupti, chip, None)
                .base_counters()
                .expect("base counters");
            let dram: Vec<&String> = bases
                .iter()
                .filter(|b| {
                    let name = b.rsplit('.').next().unwrap_or(b);
                    ["dram", "fbpa", "lts__t_"]
                        .iter()
                        .any(|p| name.starts_with(p))
                })
                .collect();
            assert!(!dram.is_empty(), "{chip}: no DRAM counter at all");
            assert!(
                dram.iter()
                    .all(|b| !b.contains("bytes") && !b.contains("sectors")),
                "{chip}: {dram:?}"
            );
        }
    }

    #[test]
    fn cupti_failures_map_to_typed_pm_errors() {
        let api = |code: u32| CuptiError::Api {
            function: "cuptiPmSamplingEnable",
            code,
            name: cupti_sys::ResultCode::from_raw(code).name(),
            message: String::new(),
        };
        let e = PmSamplingError::from_cupti(1, None, api(35));
        assert!(
            matches!(e, PmSamplingError::InsufficientPrivileges { device: 1, .. }),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains("NVreg_RestrictProfilingToAdminUsers=0"),
            "{msg}"
        );
        assert!(msg.contains("root"), "{msg}");
        assert!(msg.contains("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"), "{msg}");
        let e = PmSamplingError::from_cupti(0, Some("TU102"), api(27));
        assert!(
            matches!(&e, PmSamplingError::Unsupported { chip, .. } if chip == "TU102"),
            "{e:?}"
        );
        assert!(matches!(
            PmSamplingError::from_cupti(0, None, api(15)),
            PmSamplingError::NoGpu { .. }
        ));
        assert!(matches!(
            PmSamplingError::from_cupti(0, None, api(999)),
            PmSamplingError::Cupti { device: 0, .. }
        ));
        let missing = CuptiError::NotSupported {
            api: "PM sampling",
            missing: "cuptiPmSamplingEnable".into(),
        };
        let e = CollectorError::from(PmSamplingError::from_cupti(0, None, missing));
        assert!(e.to_string().contains("CUDA 12.6"), "{e}");
    }

    /// A decoder that hands out prepared decodes, then nothing.
    struct FakeSource {
        device: u32,
        selection: MetricSelection,
        decodes: VecDeque<Result<Decoded, String>>,
        finished: Arc<Mutex<bool>>,
    }

    impl SampleSource for FakeSource {
        fn device(&self) -> u32 {
            self.device
        }
        fn selection(&self) -> &MetricSelection {
            &self.selection
        }
        fn decode(&mut self) -> Result<Decoded, String> {
            self.decodes.pop_front().unwrap_or(Ok(Decoded::default()))
        }
        fn finish(self: Box<Self>) -> Vec<String> {
            *lock(&self.finished) = true;
            vec!["stop refused (fake)".to_string()]
        }
    }

    fn raw(start: u64, values: &[f64]) -> RawSample {
        RawSample {
            start_ns: start,
            end_ns: start + 100,
            values: values.to_vec(),
        }
    }

    #[test]
    fn frames_from_a_fake_decoder_reach_the_recording() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pm.gmr");
        let header = GmrHeader {
            cupti_api_version: 26,
            ..GmrHeader::default()
        };
        let sink = Arc::new(Mutex::new(GmrFileSink::create(&path)));
        lock(&sink).begin(&header).expect("begin");
        let w = Arc::clone(&sink);
        let pump = Pump::start(
            Duration::from_secs(3600),
            Box::new(move |frame: &PmSamples| lock(&w).pm_samples(frame).is_ok()),
        )
        .expect("pump");
        let finished = Arc::new(Mutex::new(false));
        let decodes = VecDeque::from(vec![
            // Two samples, then the buffer overflowed: samples after them were lost.
            Ok(Decoded {
                samples: vec![raw(1_000, &[40.0, 10.0]), raw(1_100, &[f64::NAN, 10.0])],
                overflow: true,
            }),
            Err("decode refused (fake)".to_string()),
            // The next sample carries the flag.
            Ok(Decoded {
                samples: vec![raw(5_000, &[20.0, 10.0])],
                overflow: false,
            }),
            // An overflow with nothing after it: a counter-free flagged sample at the end.
            Ok(Decoded {
                samples: Vec::new(),
                overflow: true,
            }),
        ]);
        pump.add(
            Box::new(FakeSource {
                device: 3,
                selection: sm_only(),
                decodes,
                finished: Arc::clone(&finished),
            }),
            "fake chip".into(),
        );
        assert!(pump.has(3));
        pump.note(None, Some("a warning".into()));
        // Three decodes now; stop decodes the rest.
        for _ in 0..3 {
            pump.decode_now();
        }
        let tally = pump.stop();
        assert!(*lock(&finished), "the source was finished");
        assert_eq!(tally.devices, vec![(3, "fake chip".to_string())]);
        assert_eq!(tally.samples, 4, "{tally:?}");
        assert_eq!(tally.frames, 3, "{tally:?}");
        assert_eq!(tally.overflows, 2);
        assert_eq!(tally.unusable_values, 1);
        assert_eq!(tally.unwritten_samples, 0);
        assert_eq!(tally.warnings, vec!["a warning".to_string()]);
        assert!(
            tally.errors.iter().any(|e| e.contains("decode refused")),
            "{:?}",
            tally.errors
        );
        assert!(tally.errors.iter().any(|e| e.contains("stop refused")));
        lock(&sink).finish(&header).expect("finish");

        let file = read_gmr(&std::fs::read(&path).expect("read")).expect("gmr");
        let frames: Vec<PmSamples> = file
            .frames
            .into_iter()
            .filter_map(|f| match f.frame {
                Frame::PmSamples(p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().all(|f| f.device_id == 3));
        let samples: Vec<PmSample> = frames.into_iter().flat_map(|f| f.samples).collect();
        let flags: Vec<bool> = samples.iter().map(|s| s.overflow).collect();
        assert_eq!(flags, vec![false, false, true, true]);
        assert_eq!(samples[0].sm_active_cycles, Some(40));
        assert_eq!(samples[1].sm_active_cycles, None, "NaN left out");
        assert_eq!(samples[1].sm_elapsed_cycles, Some(10));
        assert_eq!(samples[2].start_ns, 5_000);
        let last = &samples[3];
        assert_eq!((last.start_ns, last.end_ns), (5_100, 5_100));
        assert_eq!(last.sm_active_cycles, None);
        assert!(samples.iter().all(|s| s.dram_read_bytes.is_none()));
    }

    #[test]
    fn the_stop_report_says_what_pm_sampling_lost() {
        let mut report = StopReport::default();
        let mut errors = Vec::new();
        add_pm_tally(
            &mut report,
            &mut errors,
            PmSamplingTally {
                samples: 10,
                frames: 2,
                overflows: 1,
                unusable_values: 2,
                errors: vec!["device 0: x".into()],
                ..PmSamplingTally::default()
            },
        );
        assert_eq!(
            (report.pm_samples, report.pm_frames, report.pm_overflows),
            (10, 2, 1)
        );
        assert_eq!(report.pm_unusable_values, 2);
        assert!(!report.is_complete(), "an overflow lost samples");
        assert!(report.warnings.iter().any(|w| w.contains("overflowed 1")));
        assert!(report
            .warnings
            .iter()
            .any(|w| w.contains("2 counter value")));
        assert_eq!(errors, vec!["device 0: x".to_string()]);
    }

    /// On this GPU-less machine a start with PM sampling is the same typed error as without:
    /// no panic, no hang.
    #[test]
    fn start_with_pm_sampling_without_a_gpu_is_a_typed_error() {
        let Some(lib) = lib_from_env("GPUMETER_CUPTI_LIB") else {
            return;
        };
        let r = within(Duration::from_secs(60), move || {
            let config = CollectorConfig {
                cupti_lib: Some(lib),
                pm_sampling: Some(PmSamplingConfig::default()),
                ..CollectorConfig::default()
            };
            Collector::start(config, Box::new(TestSink::default())).map(|c| c.stop())
        });
        match r {
            Err(CollectorError::NoGpu { detail, .. }) => {
                assert!(detail.contains("CUPTI_ERROR_NOT_INITIALIZED"), "{detail}");
            }
            other => panic!("expected NoGpu, got {other:?}"),
        }
    }
}

/// The FLOP counters the range profiler offers, asked through the real profiler host API of
/// CUPTI 12.8 without a GPU (docs/COLLECTION.md "FLOP counters (range profiler)" has the
/// table): all nine SASS op counters on GA100, GH100 and AD102, which fit one pass alone; the
/// tensor-path totals per chip; and the passes of the whole selection. Pinned to the wheel's
/// library: another CUPTI may answer otherwise.
mod flops_selection {
    use super::*;
    use crate::{select_flops_metrics, RangeHostProbe};
    use gpumeter_core::ops::{is_tensor_op_metric, SASS_OP_METRICS};

    /// (chip, tensor-path totals, passes of the 9 SASS counters alone, passes of all).
    const PINNED: [(&str, &[&str], usize, usize); 3] = [
        (
            "GA100",
            &[
                "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
                "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
                "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
                "sm__ops_path_tensor_src_fp64.sum",
                "sm__ops_path_tensor_src_int1.sum",
                "sm__ops_path_tensor_src_int4.sum",
                "sm__ops_path_tensor_src_int8.sum",
                "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
            ],
            1,
            PASSES_GA100,
        ),
        (
            "GH100",
            &[
                "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
                "sm__ops_path_tensor_src_fp16.sum",
                "sm__ops_path_tensor_src_fp64.sum",
                "sm__ops_path_tensor_src_fp8.sum",
                "sm__ops_path_tensor_src_int1.sum",
                "sm__ops_path_tensor_src_int8.sum",
                "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
            ],
            1,
            PASSES_GH100,
        ),
        (
            "AD102",
            &[
                "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
                "sm__ops_path_tensor_src_fp16_dst_fp16.sum",
                "sm__ops_path_tensor_src_fp16_dst_fp32.sum",
                "sm__ops_path_tensor_src_fp64.sum",
                "sm__ops_path_tensor_src_fp8.sum",
                "sm__ops_path_tensor_src_int1.sum",
                "sm__ops_path_tensor_src_int4.sum",
                "sm__ops_path_tensor_src_int8.sum",
                "sm__ops_path_tensor_src_tf32_dst_fp32.sum",
            ],
            1,
            PASSES_AD102,
        ),
    ];
    const PASSES_GA100: usize = 9;
    const PASSES_GH100: usize = 8;
    const PASSES_AD102: usize = 10;

    /// Passes of the nine SASS counters with one tensor-path total (`sm__ops_path_tensor_src_`
    /// and `.sum` left out): 2 each, 3 for the integer ones of 8 and 4 bits and GH100's fp16.
    const PASSES_WITH_ONE: [(&str, &str, usize); 24] = [
        ("GA100", "bf16_dst_fp32", 2),
        ("GA100", "fp16_dst_fp16", 2),
        ("GA100", "fp16_dst_fp32", 2),
        ("GA100", "tf32_dst_fp32", 2),
        ("GA100", "fp64", 2),
        ("GA100", "int8", 3),
        ("GA100", "int4", 3),
        ("GA100", "int1", 2),
        ("GH100", "bf16_dst_fp32", 2),
        ("GH100", "tf32_dst_fp32", 2),
        ("GH100", "fp16", 3),
        ("GH100", "fp64", 2),
        ("GH100", "fp8", 2),
        ("GH100", "int8", 3),
        ("GH100", "int1", 2),
        ("AD102", "bf16_dst_fp32", 2),
        ("AD102", "fp16_dst_fp16", 2),
        ("AD102", "fp16_dst_fp32", 2),
        ("AD102", "tf32_dst_fp32", 2),
        ("AD102", "fp64", 2),
        ("AD102", "fp8", 2),
        ("AD102", "int8", 3),
        ("AD102", "int4", 3),
        ("AD102", "int1", 2),
    ];

    /// What each tensor-path total costs on top of the SASS counters (the table's last
    /// column in docs/COLLECTION.md), pinned to the wheel's libcupti 12.8.
    #[test]
    fn each_tensor_total_costs_one_or_two_passes_more() {
        let Some(lib) = lib_from_env("GPUMETER_CUPTI_LIB") else {
            return;
        };
        if !lib.ends_with("nvidia/cuda_cupti/lib/libcupti.so.12") {
            return;
        }
        let cupti = Cupti::load_from(&lib).expect("libcupti loads");
        let sass: Vec<&str> = SASS_OP_METRICS.iter().map(|m| m.name).collect();
        for (chip, tensor, want) in PASSES_WITH_ONE {
            let t = format!("sm__ops_path_tensor_src_{tensor}.sum");
            let mut metrics = sass.clone();
            metrics.push(&t);
            let host = cupti.range_host_initialize(chip, None).expect("host");
            cupti.pm_host_add_metrics(&host, &metrics).expect("add");
            let image = cupti.pm_host_config_image(&host).expect("image");
            cupti.pm_host_deinitialize(host).expect("deinit");
            let passes = cupti.profiler_host_num_passes(&image).expect("passes");
            assert_eq!(passes, want, "{chip} {tensor}");
        }
    }

    #[test]
    fn the_range_profiler_offers_every_sass_op_counter_and_these_tensor_totals() {
        let Some(lib) = lib_from_env("GPUMETER_CUPTI_LIB") else {
            return;
        };
        let cupti = Cupti::load_from(&lib).expect("libcupti loads");
        let pinned = lib.ends_with("nvidia/cuda_cupti/lib/libcupti.so.12");
        for (chip, tensor, sass_passes, all_passes) in PINNED {
            let sel = select_flops_metrics(&mut RangeHostProbe::new(&cupti, chip, None))
                .unwrap_or_else(|e| panic!("{chip}: {e}"));
            let names: Vec<&str> = SASS_OP_METRICS.iter().map(|m| m.name).collect();
            assert_eq!(sel.sass, names, "{chip}");
            if !pinned {
                continue;
            }
            assert_eq!(sel.tensor, tensor, "{chip}");
            assert_eq!(sel.passes, all_passes, "{chip}");
            let alone = {
                let host = cupti.range_host_initialize(chip, None).expect("host");
                cupti.pm_host_add_metrics(&host, &names).expect("add");
                let image = cupti.pm_host_config_image(&host).expect("image");
                cupti.pm_host_deinitialize(host).expect("deinit");
                cupti.profiler_host_num_passes(&image).expect("passes")
            };
            assert_eq!(alone, sass_passes, "{chip}");
            // Every tensor total the chip offers, with or without a `_dst_` type, is one
            // core's tensor_ops adds up: none is recorded only raw.
            assert!(tensor.iter().all(|m| is_tensor_op_metric(m)), "{chip}");
            assert!(sel.tensor_not_metered().is_empty(), "{chip}");
        }
    }
}
