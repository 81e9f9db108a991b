//! A recording replayed buffer by buffer through a [`CuptiStream`] meters what the whole
//! file does (`meter_path`), meter by meter.

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpumeter_core::{Meter, MeterConfig, UsageReport, WindowSize};
use gpumeter_cupti::replay::{Replay, ReplayItem};
use gpumeter_cupti::stream::CuptiStream;
use gpumeter_cupti::{meter_path, ApiVersion, CuptiOptions};

fn totals(r: &UsageReport) -> BTreeMap<String, u128> {
    let mut t = BTreeMap::new();
    for row in &r.usage {
        *t.entry(row.meter.as_str().to_string()).or_insert(0) += row.quantity.0;
    }
    t
}

fn replay_into(meter: &mut Meter, path: &PathBuf) -> CuptiStream {
    let bytes = std::fs::read(path).expect("read");
    let replay = Replay::from_bytes("rec", &bytes, ApiVersion::default()).expect("replay");
    let mut stream = CuptiStream::new("agent", replay.api);
    for item in replay.items {
        match item {
            ReplayItem::Device(d) => {
                let mut info = gpumeter_core::DeviceInfo::bare("", d.id);
                info.name = d.name;
                info.uuid = d.uuid;
                info.sm_count = d.sm_count;
                info.compute_capability = d.compute_capability.and_then(|c| c.parse().ok());
                stream.register_device(meter, info);
            }
            ReplayItem::Buffer(b) => {
                stream.ingest(meter, &b).expect("buffer decodes");
            }
            ReplayItem::Dropped { device_id, count } => {
                stream.report_dropped(meter, device_id, count)
            }
            ReplayItem::ProcessExit { pid, timestamp_ns } => {
                stream.process_exited(meter, pid, timestamp_ns)
            }
        }
    }
    stream.seal(meter);
    stream
}

#[test]
fn replayed_recordings_meter_as_the_whole_file() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/data");
    for name in ["h200-cuda13-smoke.gmr", "h200-cuda13-green-context.gmr"] {
        let path = root.join(name);
        for window in [3600, 1] {
            let config = MeterConfig {
                window: WindowSize::from_seconds(window).expect("window"),
                ..MeterConfig::default()
            };
            let mut whole = Meter::new(config.clone());
            meter_path(&mut whole, &path, &CuptiOptions::default()).expect("meter");
            let whole = whole.finish().expect("report");
            let mut streamed = Meter::new(config.clone());
            replay_into(&mut streamed, &path);
            let snap = streamed.snapshot().expect("snapshot");
            let mut want = totals(&whole);
            // Energy frames are not part of the buffer stream.
            want.remove("energy_mj");
            assert_eq!(totals(&snap), want, "{name} at {window} s");
            // Drained in pieces, then the rest: the same rows.
            let mut drained = Meter::new(config);
            let mut stream = replay_into(&mut drained, &path);
            let mut sum: BTreeMap<(String, String, String), u128> = BTreeMap::new();
            let mut parts = Vec::new();
            let w = drained.watermark_ns();
            for edge in [w / 2, w, w + 1_000_000_000, u64::MAX] {
                stream.seal_drain(&mut drained, edge);
                let part = drained.drain(edge).expect("drain");
                parts.push((format!("drain-{edge}"), part.clone()));
                for r in &part.usage {
                    *sum.entry((
                        r.window_start.clone(),
                        r.device_key.clone(),
                        r.meter.as_str().to_string(),
                    ))
                    .or_insert(0) += r.quantity.0;
                }
            }
            let rest = drained.snapshot().expect("snapshot");
            assert!(rest.usage.is_empty(), "{name}: everything was drained");
            let mut want_rows: BTreeMap<(String, String, String), u128> = BTreeMap::new();
            for r in &snap.usage {
                *want_rows
                    .entry((
                        r.window_start.clone(),
                        r.device_key.clone(),
                        r.meter.as_str().to_string(),
                    ))
                    .or_insert(0) += r.quantity.0;
            }
            assert_eq!(sum, want_rows, "{name} at {window} s: drained rows");
            // The drained reports of one stream merge (each has a source identity of its own)
            // into the rows of the snapshot.
            let merged = gpumeter_core::merge_reports(&parts).expect("drained reports merge");
            let mut merged_rows: BTreeMap<(String, String, String), u128> = BTreeMap::new();
            for r in &merged.usage {
                *merged_rows
                    .entry((
                        r.window_start.clone(),
                        r.device_key.clone(),
                        r.meter.as_str().to_string(),
                    ))
                    .or_insert(0) += r.quantity.0;
            }
            assert_eq!(
                merged_rows, want_rows,
                "{name} at {window} s: merged drains"
            );
        }
    }
}
