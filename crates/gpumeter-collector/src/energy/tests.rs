//! The energy sampler without a GPU: `gpumeter_nvml::Recorded` plays NVML, closures play
//! CUPTI's clock, the CUDA driver's inventory and the recording.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use gpumeter_nvml::EnergyReading;

use super::*;

/// Shares a `Recorded` between the test and the sampler.
struct Played(Arc<gpumeter_nvml::Recorded>);

impl Telemetry for Played {
    fn gpus(&self) -> Result<Vec<Gpu>, TelemetryError> {
        self.0.gpus()
    }
    fn energy(&self, index: u32) -> Result<EnergyReading, TelemetryError> {
        self.0.energy(index)
    }
}

fn gpu(index: u32, uuid: &str, mig: bool) -> Gpu {
    Gpu {
        index,
        name: Some(format!("NVIDIA Test {index}")),
        uuid: Some(uuid.to_string()),
        mig,
    }
}

fn dev(id: u32, uuid: Option<&str>) -> GmrDevice {
    GmrDevice {
        id,
        uuid: uuid.map(str::to_string),
        ..GmrDevice::default()
    }
}

/// `n` readings of GPU `index`: energy `base + 10·k` mJ at wall time `k` s.
fn series(t: gpumeter_nvml::Recorded, index: u32, base: u64, n: u64) -> gpumeter_nvml::Recorded {
    t.with_energy(
        index,
        (0..n).map(|k| (1_700_000_000_000_000_000 + k * 1_000_000_000, base + 10 * k)),
    )
}

type Frames = Arc<Mutex<Vec<EnergySample>>>;

/// Sources over `t`; CUPTI's clock advances 1000 ns per read; frames collect in the result.
fn sources(
    t: &Arc<gpumeter_nvml::Recorded>,
    inventory: impl FnMut() -> Option<Vec<GmrDevice>> + Send + 'static,
    by_index: fn(bool) -> bool,
) -> (Sources, Frames) {
    let frames: Frames = Arc::default();
    let sink = Arc::clone(&frames);
    let clock = Arc::new(AtomicU64::new(5_000_000));
    let played = Arc::clone(t);
    let s = Sources {
        open: Box::new(move || Ok(Box::new(Played(played)) as Box<dyn Telemetry>)),
        clock: Box::new(move || Some(clock.fetch_add(1_000, Ordering::SeqCst))),
        clock_pair: ClockPair::default(),
        inventory: Box::new(inventory),
        by_index,
        write: Box::new(move |s| {
            lock(&sink).push(*s);
            true
        }),
    };
    (s, frames)
}

fn frames_of(frames: &[EnergySample], device: u32) -> Vec<EnergySample> {
    frames
        .iter()
        .copied()
        .filter(|f| f.device_id == device)
        .collect()
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < limit,
            "condition not met within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn assert_increasing(frames: &[EnergySample]) {
    for w in frames.windows(2) {
        assert!(w[0].timestamp_ns < w[1].timestamp_ns, "{frames:?}");
        assert!(w[0].energy_mj <= w[1].energy_mj, "{frames:?}");
    }
}

/// Frames go out under the CUDA ordinal of the inventory entry with the NVML GPU's UUID (NVML
/// index 0 is CUDA ordinal 1 here), including the readings held back until the inventory was
/// known, with CUPTI-clock timestamps; the last reading is taken at stop.
#[test]
fn readings_are_written_under_the_matched_cuda_ordinal() {
    let t =
        gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-bbbb", false), gpu(1, "GPU-AAAA", false)]);
    let t = Arc::new(series(
        series(t, 0, 1_000_000, 10_000),
        1,
        2_000_000,
        10_000,
    ));
    let asked = Arc::new(AtomicUsize::new(0));
    let asked2 = Arc::clone(&asked);
    let inventory = move || {
        // Unknown for the first two turns (the program has not initialised CUDA yet).
        (asked2.fetch_add(1, Ordering::SeqCst) >= 2)
            .then(|| vec![dev(0, Some("gpu-aaaa")), dev(1, Some("GPU-bbbb"))])
    };
    let (src, frames) = sources(&t, inventory, |_| false);
    let sampler = EnergySampler::start(src, Duration::from_millis(10)).expect("thread");
    wait_until(Duration::from_secs(10), || lock(&frames).len() >= 10);
    let left = sampler.stop(Duration::from_secs(5));
    let resolved = left.resolve(&[dev(0, Some("GPU-AAAA")), dev(1, Some("GPU-bbbb"))]);
    assert_eq!(resolved.warnings, Vec::<String>::new());
    assert!(resolved.samples.is_empty(), "all resolved while running");
    let frames = lock(&frames).clone();
    assert_eq!(resolved.written, frames.len() as u64);
    assert!(asked.load(Ordering::SeqCst) >= 3);
    let (d0, d1) = (frames_of(&frames, 0), frames_of(&frames, 1));
    assert_eq!(d0.len() + d1.len(), frames.len(), "only ordinals 0 and 1");
    // NVML index 1 (GPU-AAAA) is CUDA ordinal 0; its first frame is the reading at start.
    assert_eq!(d0[0].energy_mj, 2_000_000);
    assert_eq!(d1[0].energy_mj, 1_000_000);
    assert!(d0
        .iter()
        .all(|f| (2_000_000..3_000_000).contains(&f.energy_mj)));
    assert!(d1
        .iter()
        .all(|f| (1_000_000..2_000_000).contains(&f.energy_mj)));
    assert_increasing(&d0);
    assert_increasing(&d1);
    // Every reading taken was written once: start, each interval, and the one at stop.
    assert_eq!(d0.len(), 10_000 - t.remaining(1));
    assert_eq!(d1.len(), 10_000 - t.remaining(0));
    // CUPTI's clock, midpoint of the reads around the NVML call (the counter's odd steps).
    assert!(d0
        .iter()
        .all(|f| f.timestamp_ns >= 5_000_000 && f.timestamp_ns % 1_000 == 500));
}

/// GPUs that are no CUDA device of the process (another GPU of the node; a GPU in MIG mode,
/// whose CUDA devices are its instances) are never written, stop being sampled once that is
/// known, and are named in the warnings.
#[test]
fn gpus_that_are_no_cuda_device_are_never_written() {
    let t = gpumeter_nvml::Recorded::new(vec![
        gpu(0, "GPU-m", true),
        gpu(1, "GPU-x", false),
        gpu(2, "GPU-c", false),
    ]);
    let t = Arc::new(series(
        series(series(t, 0, 100, 1_000), 1, 200, 1_000),
        2,
        300,
        1_000,
    ));
    // CUDA sees GPU-c as ordinal 0 and a MIG instance of GPU-m as ordinal 1. By-index
    // matching is allowed here but must not give NVML GPU 1 ordinal 1 (entry 1 has a UUID).
    let devices = vec![dev(0, Some("GPU-c")), dev(1, Some("MIG-1234"))];
    let inv = devices.clone();
    let (src, frames) = sources(&t, move || Some(inv.clone()), |_| true);
    let sampler = EnergySampler::start(src, Duration::from_millis(10)).expect("thread");
    wait_until(Duration::from_secs(10), || lock(&frames).len() >= 5);
    let used_1 = 1_000 - t.remaining(1);
    std::thread::sleep(Duration::from_millis(50));
    let resolved = sampler.stop(Duration::from_secs(5)).resolve(&devices);
    let frames = lock(&frames).clone();
    assert!(frames.iter().all(|f| f.device_id == 0), "{frames:?}");
    assert!(frames
        .iter()
        .all(|f| (300..1_000_000).contains(&f.energy_mj)));
    assert_eq!(
        t.remaining(1),
        1_000 - used_1,
        "no more readings once unmatched"
    );
    assert!(used_1 <= 2, "sampled before the inventory was known only");
    assert_eq!(resolved.warnings.len(), 2, "{:?}", resolved.warnings);
    assert!(resolved.warnings[0].contains("NVML GPU 1 (GPU-x)"));
    assert!(resolved.warnings[0].contains("not a CUDA device"));
    assert!(resolved.warnings[1].contains("NVML GPU 0 (GPU-m)"));
    assert!(resolved.warnings[1].contains("MIG"));
    assert!(resolved.samples.is_empty());
}

/// Without an inventory while running, readings are held back and resolved with the final
/// inventory at stop (here by index: one GPU, the entry has no UUID); with none, dropped.
#[test]
fn held_back_readings_resolve_with_the_final_inventory() {
    for (devices, want) in [(vec![dev(0, None)], true), (Vec::new(), false)] {
        let t = Arc::new(series(
            gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
            0,
            50,
            100,
        ));
        let (src, frames) = sources(&t, || None, |single| single);
        let sampler = EnergySampler::start(src, Duration::from_secs(3600)).expect("thread");
        wait_until(Duration::from_secs(10), || t.remaining(0) == 99);
        let resolved = sampler.stop(Duration::from_secs(5)).resolve(&devices);
        assert!(lock(&frames).is_empty(), "nothing written while unknown");
        assert_eq!(resolved.written, 0);
        if want {
            // The reading at start and the one at stop, under ordinal 0.
            assert_eq!(resolved.samples.len(), 2, "{resolved:?}");
            assert_eq!(resolved.samples[0].energy_mj, 50);
            assert_eq!(resolved.samples[1].energy_mj, 60);
            assert!(resolved.samples.iter().all(|s| s.device_id == 0));
            assert!(resolved.warnings.is_empty(), "{:?}", resolved.warnings);
        } else {
            assert!(resolved.samples.is_empty());
            assert_eq!(resolved.warnings.len(), 1);
            assert!(resolved.warnings[0].contains("NVML GPU 0 (GPU-a)"));
        }
    }
}

/// A long interval does not delay the stop: the sampler wakes, takes the last reading, ends.
#[test]
fn stop_is_prompt_and_takes_the_last_reading() {
    let t = Arc::new(series(
        gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
        0,
        7,
        100,
    ));
    let (src, _frames) = sources(&t, || None, |_| true);
    let sampler = EnergySampler::start(src, Duration::from_secs(3600)).expect("thread");
    wait_until(Duration::from_secs(10), || t.remaining(0) == 99);
    let start = Instant::now();
    let resolved = sampler
        .stop(Duration::from_secs(30))
        .resolve(&[dev(0, None)]);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(t.remaining(0), 98, "one reading at start, one at stop");
    assert_eq!(resolved.samples.len(), 2);
}

/// A wedged NVML costs the last reading and a warning, never more than the timeout; the late
/// thread writes nothing after the stop.
#[test]
fn a_wedged_nvml_never_holds_the_stop() {
    let t = Arc::new(series(
        gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
        0,
        7,
        100,
    ));
    let slow = Arc::new(
        series(
            gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
            0,
            7,
            100,
        )
        .with_delay(Duration::from_millis(700)),
    );
    let (mut src, frames) = sources(&t, || Some(vec![dev(0, Some("GPU-a"))]), |_| true);
    let played = Arc::clone(&slow);
    src.open = Box::new(move || Ok(Box::new(Played(played)) as Box<dyn Telemetry>));
    let sampler = EnergySampler::start(src, Duration::from_millis(10)).expect("thread");
    std::thread::sleep(Duration::from_millis(50));
    let start = Instant::now();
    let resolved = sampler
        .stop(Duration::from_millis(200))
        .resolve(&[dev(0, Some("GPU-a"))]);
    assert!(
        start.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        start.elapsed()
    );
    assert!(
        resolved
            .warnings
            .iter()
            .any(|w| w.contains("did not answer")),
        "{:?}",
        resolved.warnings
    );
    let written = lock(&frames).len();
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(
        lock(&frames).len(),
        written,
        "nothing written after the stop"
    );
}

/// No NVML, a GPU without the counter, and passing failures: warnings (each once, with a
/// count), never a failure.
#[test]
fn read_failures_are_warnings() {
    let (mut src, frames) = sources(
        &Arc::new(gpumeter_nvml::Recorded::new(Vec::new())),
        || None,
        |_| true,
    );
    src.open = Box::new(|| {
        Err(TelemetryError::Unavailable {
            call: "nvmlInit_v2",
            detail: "NVIDIA driver is not loaded".into(),
        })
    });
    let resolved = EnergySampler::start(src, Duration::from_millis(10))
        .expect("thread")
        .stop(Duration::from_secs(5))
        .resolve(&[dev(0, None)]);
    assert_eq!(
        resolved.warnings,
        vec![
            "no energy samples: NVML is not available (nvmlInit_v2): NVIDIA driver is not loaded"
                .to_string()
        ]
    );
    assert!(lock(&frames).is_empty());

    let t = gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false), gpu(1, "GPU-b", false)]);
    let lost = TelemetryError::Failed {
        call: "nvmlDeviceGetTotalEnergyConsumption",
        device: Some(1),
        detail: "device fell off the bus".into(),
    };
    t.push_error(1, lost.clone());
    t.push_error(1, lost);
    let t = series(t, 1, 900, 1_000);
    t.push_error(
        0,
        TelemetryError::NotSupported {
            call: "nvmlDeviceGetTotalEnergyConsumption",
            device: Some(0),
            detail: "pre-Volta".into(),
        },
    );
    let t = Arc::new(series(t, 0, 1, 1_000));
    let devices = vec![dev(0, Some("GPU-a")), dev(1, Some("GPU-b"))];
    let inv = devices.clone();
    let (src, frames) = sources(&t, move || Some(inv.clone()), |_| false);
    let sampler = EnergySampler::start(src, Duration::from_millis(10)).expect("thread");
    wait_until(Duration::from_secs(10), || lock(&frames).len() >= 3);
    let resolved = sampler.stop(Duration::from_secs(5)).resolve(&devices);
    assert_eq!(t.remaining(0), 1_000, "not sampled after NOT_SUPPORTED");
    assert!(lock(&frames).iter().all(|f| f.device_id == 1));
    assert_eq!(resolved.warnings.len(), 2, "{:?}", resolved.warnings);
    assert!(resolved.warnings[0].starts_with("no energy samples for NVML GPU 0 (GPU-a): NVML"));
    assert!(resolved.warnings[0].contains("not supported"));
    assert!(resolved.warnings[1].starts_with("energy of NVML GPU 1 (GPU-b) not read: NVML"));
    assert!(
        resolved.warnings[1].ends_with("(2 times)"),
        "{:?}",
        resolved.warnings
    );
}

/// Readings held back past `MAX_PENDING` keep the first and the latest.
#[test]
fn held_back_readings_are_bounded() {
    let n = MAX_PENDING as u64 + 500;
    let t = Arc::new(series(
        gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
        0,
        0,
        n,
    ));
    let (src, _frames) = sources(&t, || None, |_| true);
    let sampler = EnergySampler::start(src, Duration::ZERO).expect("thread");
    wait_until(Duration::from_secs(30), || t.remaining(0) == 0);
    let resolved = sampler
        .stop(Duration::from_secs(5))
        .resolve(&[dev(0, None)]);
    assert_eq!(resolved.samples.len(), MAX_PENDING);
    assert_eq!(resolved.samples[0].energy_mj, 0);
    assert_eq!(
        resolved.samples.last().map(|s| s.energy_mj),
        Some(10 * (n - 1))
    );
    assert!(resolved.warnings.iter().any(|w| w.contains("thinned out")));
}

#[test]
fn wall_times_map_through_the_clock_pair() {
    let pair = ClockPair {
        cupti_timestamp_ns: 1_000,
        unix_time_ns: 10_000,
    };
    assert_eq!(wall_to_cupti(10_500, &pair), 1_500);
    assert_eq!(wall_to_cupti(9_000, &pair), 0);
    assert_eq!(wall_to_cupti(10_500, &ClockPair::default()), 10_500);
    // Without CUPTI's clock, a reading's wall time is mapped.
    let t = Arc::new(series(
        gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
        0,
        3,
        10,
    ));
    let (mut src, _frames) = sources(&t, || None, |_| true);
    src.clock = Box::new(|| None);
    src.clock_pair = ClockPair {
        cupti_timestamp_ns: 1_000,
        unix_time_ns: 1_700_000_000_000_000_000,
    };
    let sampler = EnergySampler::start(src, Duration::from_secs(3600)).expect("thread");
    wait_until(Duration::from_secs(10), || t.remaining(0) == 9);
    let resolved = sampler
        .stop(Duration::from_secs(5))
        .resolve(&[dev(0, None)]);
    let times: Vec<u64> = resolved.samples.iter().map(|s| s.timestamp_ns).collect();
    assert_eq!(times, vec![1_000, 1_000_001_000]);
}

/// The collector's path: the sampler writes through the recording session's sink, and the
/// `.gmr` holds type-6 frames under CUDA ordinals, readable back.
#[test]
fn frames_reach_the_recording() {
    use crate::completion::{Core, Session};
    use crate::{GmrFileSink, MIN_BUFFER_SIZE};
    use gpumeter_cupti::layout::ApiVersion;
    use gpumeter_recording::gmr::{read_gmr, Frame, GmrHeader};

    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("energy.gmr");
    let core: &'static Core = Box::leak(Box::new(Core::new(MIN_BUFFER_SIZE, 1)));
    let header = GmrHeader {
        cupti_api_version: ApiVersion::Cupti12_8.cupti_api_version(),
        ..GmrHeader::default()
    };
    let sink = GmrFileSink::create(&path);
    assert!(core
        .begin(Session::new(
            ApiVersion::Cupti12_8,
            header.clone(),
            Box::new(sink)
        ))
        .is_ok());
    let t = Arc::new(series(
        gpumeter_nvml::Recorded::new(vec![gpu(0, "GPU-a", false)]),
        0,
        1_000,
        1_000,
    ));
    let (mut src, _frames) = sources(&t, || Some(vec![dev(3, Some("GPU-a"))]), |_| false);
    src.write = Box::new(move |s| core.energy(s));
    let sampler = EnergySampler::start(src, Duration::from_millis(10)).expect("thread");
    wait_until(Duration::from_secs(10), || t.remaining(0) <= 995);
    let resolved = sampler
        .stop(Duration::from_secs(5))
        .resolve(&[dev(3, Some("GPU-a"))]);
    let mut session = core.end().expect("session");
    for s in &resolved.samples {
        session.sink.energy(s).expect("energy frame");
    }
    session.sink.finish(&header).expect("finish");
    assert!(core.tally().errors.is_empty(), "{:?}", core.tally().errors);

    let file = read_gmr(&std::fs::read(&path).expect("read")).expect("gmr");
    let energy: Vec<EnergySample> = file
        .frames
        .iter()
        .filter_map(|f| match f.frame {
            Frame::Energy(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(
        energy.len() as u64,
        resolved.written + resolved.samples.len() as u64
    );
    assert!(energy.len() >= 5, "{energy:?}");
    assert!(energy.iter().all(|e| e.device_id == 3));
    assert_eq!(energy[0].energy_mj, 1_000);
    assert_increasing(&energy);
}
