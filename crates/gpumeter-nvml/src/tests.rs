//! Tests without a GPU: [`Recorded`], the error mapping, and [`Nvml`]'s failures on a host
//! without NVML (on a GPU host the same tests accept a working NVML).

use std::time::{Duration, Instant};

use super::*;

fn gpu(index: u32, uuid: &str) -> Gpu {
    Gpu {
        index,
        name: Some(format!("NVIDIA Test {index}")),
        uuid: Some(uuid.to_string()),
        mig: false,
    }
}

#[test]
fn recorded_replays_per_gpu_in_order_then_is_exhausted() {
    let t = Recorded::new(vec![gpu(0, "GPU-a"), gpu(3, "GPU-b")])
        .with_energy(0, [(10, 100), (20, 150)])
        .with_energy(3, [(15, 7)]);
    assert_eq!(t.gpus(), Ok(vec![gpu(0, "GPU-a"), gpu(3, "GPU-b")]));
    assert_eq!(t.remaining(0), 2);
    let want = |index, timestamp_ns, energy_mj| {
        Ok(EnergyReading {
            index,
            timestamp_ns,
            energy_mj,
        })
    };
    // Interleaved calls: each GPU has its own queue.
    assert_eq!(t.energy(3), want(3, 15, 7));
    assert_eq!(t.energy(0), want(0, 10, 100));
    assert_eq!(t.energy(0), want(0, 20, 150));
    assert_eq!(t.energy(0), Err(TelemetryError::Exhausted { device: 0 }));
    assert_eq!(t.energy(3), Err(TelemetryError::Exhausted { device: 3 }));
    // More readings may be queued later (a replay fed as it goes).
    t.push(EnergyReading {
        index: 0,
        timestamp_ns: 30,
        energy_mj: 160,
    });
    assert_eq!(t.energy(0), want(0, 30, 160));
    // An index that is not one of the GPUs.
    assert_eq!(
        t.energy(1),
        Err(TelemetryError::NoDevice {
            call: "nvmlDeviceGetHandleByIndex_v2",
            device: 1
        })
    );
}

#[test]
fn recorded_errors_are_replayed_in_place() {
    let t = Recorded::new(vec![gpu(0, "GPU-a")]).with_energy(0, [(1, 1)]);
    let unsupported = TelemetryError::NotSupported {
        call: "nvmlDeviceGetTotalEnergyConsumption",
        device: Some(0),
        detail: "the requested operation is not available on the target device".into(),
    };
    t.push_error(0, unsupported.clone());
    t.push(EnergyReading {
        index: 0,
        timestamp_ns: 2,
        energy_mj: 2,
    });
    assert_eq!(t.energy(0).map(|r| r.energy_mj), Ok(1));
    assert_eq!(t.energy(0), Err(unsupported));
    assert_eq!(t.energy(0).map(|r| r.energy_mj), Ok(2));
    assert_eq!(t.remaining(0), 0);

    let gone = TelemetryError::Unavailable {
        call: "nvmlInit_v2",
        detail: "NVIDIA driver is not loaded".into(),
    };
    let t = Recorded::unavailable(gone.clone());
    assert_eq!(t.gpus(), Err(gone.clone()));
    assert_eq!(t.energy(0), Err(gone));
}

#[test]
fn recorded_process_listings_replay_in_order_and_the_last_one_repeats() {
    let p = |pid, used_memory_bytes| GpuProcess {
        pid,
        used_memory_bytes,
    };
    let lost = TelemetryError::Failed {
        call: CALL_PROCESSES,
        device: Some(3),
        detail: "GPU is lost".into(),
    };
    let t = Recorded::new(vec![gpu(0, "GPU-a"), gpu(3, "GPU-b"), gpu(5, "GPU-c")])
        .with_processes(
            0,
            [
                vec![p(10, Some(1 << 30)), p(11, None)],
                vec![p(11, Some(7))],
            ],
        )
        .with_processes(3, [vec![p(20, Some(1))]]);
    t.push_processes_error(3, lost.clone());
    assert_eq!(t.processes(0), Ok(vec![p(10, Some(1 << 30)), p(11, None)]));
    assert_eq!(t.processes(3), Ok(vec![p(20, Some(1))]));
    // The last listing (or error) is the answer from then on.
    for _ in 0..3 {
        assert_eq!(t.processes(0), Ok(vec![p(11, Some(7))]));
        assert_eq!(t.processes(3), Err(lost.clone()));
    }
    // Listed later: after what is queued.
    t.push_processes(0, Vec::new());
    assert_eq!(t.processes(0), Ok(vec![p(11, Some(7))]));
    assert_eq!(t.processes(0), Ok(Vec::new()));
    // A GPU with nothing queued has no processes; an unknown index is no device.
    assert_eq!(t.processes(5), Ok(Vec::new()));
    assert_eq!(
        t.processes(1),
        Err(TelemetryError::NoDevice {
            call: "nvmlDeviceGetHandleByIndex_v2",
            device: 1
        })
    );
    let gone = TelemetryError::Unavailable {
        call: "nvmlInit_v2",
        detail: "NVIDIA driver is not loaded".into(),
    };
    assert_eq!(Recorded::unavailable(gone.clone()).processes(0), Err(gone));
}

#[test]
fn a_telemetry_without_process_listing_says_not_supported() {
    /// An implementation written before `processes` existed.
    struct EnergyOnly;
    impl Telemetry for EnergyOnly {
        fn gpus(&self) -> Result<Vec<Gpu>, TelemetryError> {
            Ok(vec![gpu(0, "GPU-a")])
        }
        fn energy(&self, index: u32) -> Result<EnergyReading, TelemetryError> {
            Err(TelemetryError::Exhausted { device: index })
        }
    }
    let e = EnergyOnly.processes(2).expect_err("not listed");
    assert!(
        matches!(
            e,
            TelemetryError::NotSupported {
                call: "nvmlDeviceGetComputeRunningProcesses_v3",
                device: Some(2),
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "NVML nvmlDeviceGetComputeRunningProcesses_v3 on GPU 2: not supported by this GPU or \
         driver: this telemetry does not list GPU processes"
    );
}

#[test]
fn recorded_delay_plays_a_slow_driver() {
    let t = Recorded::new(vec![gpu(0, "GPU-a")]).with_delay(Duration::from_millis(50));
    let start = Instant::now();
    let _ = t.gpus();
    let _ = t.energy(0);
    assert!(start.elapsed() >= Duration::from_millis(100));
}

#[test]
fn telemetry_is_an_object_shared_between_threads() {
    let t: std::sync::Arc<dyn Telemetry> =
        std::sync::Arc::new(Recorded::new(vec![gpu(0, "GPU-a")]).with_energy(0, [(1, 5)]));
    let t2 = std::sync::Arc::clone(&t);
    let r = std::thread::spawn(move || t2.energy(0)).join();
    assert!(matches!(r, Ok(Ok(EnergyReading { energy_mj: 5, .. }))));
}

#[test]
fn every_error_names_nvml_the_call_and_the_gpu() {
    let cases: Vec<(TelemetryError, &str)> = vec![
        (
            TelemetryError::Unavailable {
                call: "nvmlInit_v2",
                detail: "x".into(),
            },
            "NVML is not available (nvmlInit_v2): x",
        ),
        (
            TelemetryError::NoPermission {
                call: "nvmlDeviceGetTotalEnergyConsumption",
                device: Some(2),
                detail: "x".into(),
            },
            "NVML nvmlDeviceGetTotalEnergyConsumption on GPU 2: no permission: x",
        ),
        (
            TelemetryError::NotSupported {
                call: "nvmlDeviceGetTotalEnergyConsumption",
                device: Some(1),
                detail: "x".into(),
            },
            "NVML nvmlDeviceGetTotalEnergyConsumption on GPU 1: not supported by this GPU or \
             driver: x",
        ),
        (
            TelemetryError::NoDevice {
                call: "nvmlDeviceGetHandleByIndex_v2",
                device: 9,
            },
            "NVML nvmlDeviceGetHandleByIndex_v2: no GPU with index 9",
        ),
        (
            TelemetryError::Failed {
                call: "nvmlDeviceGetCount_v2",
                device: None,
                detail: "x".into(),
            },
            "NVML nvmlDeviceGetCount_v2: x",
        ),
        (
            TelemetryError::Exhausted { device: 4 },
            "recorded NVML telemetry has no more energy samples for GPU 4",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
    assert_eq!(TelemetryError::Exhausted { device: 4 }.device(), Some(4));
    assert_eq!(
        TelemetryError::Unavailable {
            call: "nvmlInit_v2",
            detail: String::new()
        }
        .device(),
        None
    );
}

#[test]
fn nvml_return_codes_map_to_typed_errors() {
    use nvml_wrapper::error::NvmlError as W;
    let kind = |e: TelemetryError| match e {
        TelemetryError::Unavailable { .. } => "unavailable",
        TelemetryError::NoPermission { .. } => "permission",
        TelemetryError::NotSupported { .. } => "unsupported",
        TelemetryError::NoDevice { .. } => "no device",
        TelemetryError::Failed { .. } => "failed",
        TelemetryError::Exhausted { .. } => "exhausted",
    };
    let cases: Vec<(&'static str, Option<u32>, W, &str)> = vec![
        (CALL_INIT, None, W::DriverNotLoaded, "unavailable"),
        (CALL_INIT, None, W::LibraryNotFound, "unavailable"),
        (CALL_INIT, None, W::FunctionNotFound, "unavailable"),
        (
            CALL_INIT,
            None,
            W::FailedToLoadSymbol("x".into()),
            "unavailable",
        ),
        (CALL_INIT, None, W::NoPermission, "permission"),
        (CALL_ENERGY, Some(0), W::NotSupported, "unsupported"),
        (
            CALL_ENERGY,
            Some(0),
            W::FailedToLoadSymbol("x".into()),
            "unsupported",
        ),
        (CALL_ENERGY, Some(0), W::NoPermission, "permission"),
        (CALL_ENERGY, Some(0), W::GpuLost, "failed"),
        (CALL_ENERGY, Some(0), W::Unknown, "failed"),
        (CALL_HANDLE, Some(7), W::InvalidArg, "no device"),
        (CALL_HANDLE, Some(7), W::NotFound, "no device"),
        (CALL_COUNT, None, W::Uninitialized, "unavailable"),
        (
            CALL_PROCESSES,
            Some(1),
            W::FailedToLoadSymbol("nvmlDeviceGetComputeRunningProcesses_v3".into()),
            "unsupported",
        ),
        (CALL_PROCESSES, Some(1), W::NoPermission, "permission"),
        (CALL_PROCESSES, Some(1), W::GpuLost, "failed"),
        (CALL_PROCESSES, Some(1), W::InvalidArg, "failed"),
    ];
    for (call, device, e, want) in cases {
        let what = format!("{call} {e:?}");
        let got = TelemetryError::from_wrapper(call, device, e);
        assert!(got.to_string().contains("NVML"), "{got}");
        assert_eq!(got.device(), device, "{what}");
        assert_eq!(kind(got), want, "{what}");
    }
}

#[test]
fn a_missing_nvml_library_is_a_typed_error() {
    for path in ["/nonexistent/gpumeter-test/libnvidia-ml.so.1", "libc.so.6"] {
        match Nvml::init_from(path) {
            Err(
                e @ TelemetryError::Unavailable {
                    call: "nvmlInit_v2",
                    ..
                },
            ) => {
                assert!(e.to_string().contains("NVML"), "{e}");
            }
            other => panic!("{path}: expected Unavailable, got {other:?}"),
        }
    }
}

#[test]
fn nvml_init_is_ok_or_a_typed_error_naming_nvml() {
    // This test machine may or may not have a GPU: either answer is fine, never a panic.
    match Nvml::init() {
        Ok(nvml) => {
            let gpus = nvml
                .gpus()
                .expect("NVML initialised, so it can count its GPUs");
            for g in &gpus {
                match nvml.energy(g.index) {
                    Ok(r) => assert_eq!(r.index, g.index),
                    Err(e) => {
                        assert!(e.to_string().contains("NVML"), "{e}");
                        assert_eq!(e.device(), Some(g.index), "{e}");
                    }
                }
                match nvml.processes(g.index) {
                    Ok(list) => assert!(list.iter().all(|p| p.pid > 0), "{list:?}"),
                    Err(e) => {
                        assert!(e.to_string().contains("NVML"), "{e}");
                        assert_eq!(e.device(), Some(g.index), "{e}");
                    }
                }
            }
            let past = u32::try_from(gpus.len())
                .unwrap_or(u32::MAX)
                .saturating_add(64);
            assert!(nvml.energy(past).is_err());
        }
        Err(e) => assert!(e.to_string().contains("NVML"), "{e}"),
    }
}
