//! Saying what a recording holds: the one-line summary `record` prints for each recording it
//! wrote, and `recording show`'s text.

use std::path::Path;

use gpumeter::core::time::rfc3339_ns;
use gpumeter::cupti::ApiVersion;

use super::inspect::{inspect, EnergyDevice, Inspection, PmCounterTotal, PmDevice};
use crate::table::{esc, group, Table};

/// `: N buffers, K kernel records, …` for a recording, or the reason it cannot be read.
pub(super) fn describe(path: &Path) -> String {
    match inspect(path) {
        Ok(i) => {
            let mut s = format!(
                " ({}, {}",
                count(i.buffers, "activity buffer", "activity buffers"),
                count(i.kernels, "kernel record", "kernel records")
            );
            if i.dropped > 0 {
                s.push_str(&format!(
                    ", {} dropped by CUPTI",
                    count(i.dropped, "record", "records")
                ));
            }
            if !i.finished {
                s.push_str(", unfinished: the process ended before closing it");
            }
            if let Some(t) = &i.torn {
                s.push_str(&format!(", {t}"));
            }
            let corrupt = i.damaged.len() - usize::from(i.torn.is_some());
            if corrupt > 0 {
                s.push_str(&format!(
                    ", {}",
                    count(corrupt as u64, "corrupt frame", "corrupt frames")
                ));
            }
            s.push(')');
            s
        }
        Err(e) => format!(" (cannot be read: {e})"),
    }
}

/// `n` with thousands separators and the noun in the singular or the plural: `1 string
/// table`, `2,101 kernel records`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!(
        "{} {}",
        group(&n.to_string()),
        if n == 1 { one } else { many }
    )
}

/// A CUPTI timestamp (ns since the Unix epoch, as the meter reads it) as RFC 3339 UTC with
/// nine fractional digits, and the raw ns: `2026-11-29T21:38:52.011846105Z (1795997932011846105
/// ns)`.
/// A zero is a clock that was not read (a recording whose program never started CUPTI), not
/// the Unix epoch: `not read (0 ns)`.
fn clock_time(ns: u64) -> String {
    if ns == 0 {
        return "not read (0 ns)".to_string();
    }
    format!("{} ({ns} ns)", rfc3339_ns(ns))
}

/// A duration in ns as seconds with nine decimals: `0.326414778 s`.
fn seconds(ns: u64) -> String {
    format!("{}.{:09} s", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// The width of the key column of [`show_text`]: the longest key and two spaces.
const KEY_WIDTH: usize = "instructions".len() + 2;

/// `recording show` as text: one `key  value` line per fact, keys in one column; kernel names
/// and per-function instruction counts as right-aligned tables under their line; times as RFC
/// 3339 UTC beside the raw ns; counts with their nouns in the singular or the plural.
pub(super) fn show_text(i: &Inspection) -> String {
    let mut o = String::new();
    header_lines(&mut o, i);
    line(&mut o, "frames", frames_value(i));
    line(
        &mut o,
        "dropped",
        if i.dropped == 0 {
            "no records dropped by CUPTI".to_string()
        } else {
            format!("{} dropped by CUPTI", count(i.dropped, "record", "records"))
        },
    );
    if i.energy.is_empty() {
        line(&mut o, "energy", "no energy samples".to_string());
    }
    for e in &i.energy {
        line(&mut o, "energy", energy_value(e));
    }
    // PM sampling: only for a recording that has PM-sample frames.
    for p in &i.pm {
        line(&mut o, "pm", pm_value(p));
    }
    kernel_lines(&mut o, i);
    if i.header.instrumented || i.instruction_frames > 0 {
        instruction_lines(&mut o, i);
    }
    if i.op_frames > 0 {
        op_counter_lines(&mut o, i);
    }
    for e in &i.decode_errors {
        o.push_str(&format!("error: {}\n", esc(e)));
    }
    o.trim_end().to_string()
}

/// One `key  value` line of [`show_text`]. Every value can carry input text (file, host,
/// device and kernel names, errors): escaped.
fn line(o: &mut String, k: &str, v: String) {
    o.push_str(&format!("{k:<KEY_WIDTH$}{}\n", esc(&v)));
}

/// The lines of the recording's file, state and header: producer, CUPTI version, host,
/// process, clocks, devices.
fn header_lines(o: &mut String, i: &Inspection) {
    let h = &i.header;
    line(o, "recording", i.file.clone());
    let state = match (&i.torn, i.finished) {
        (Some(t), _) => format!("torn: {t}"),
        (None, true) => "finished".to_string(),
        (None, false) => "unfinished (no end frame: the producer did not close it)".to_string(),
    };
    line(o, "state", state);
    for d in &i.damaged {
        line(o, "damaged", d.clone());
    }
    line(
        o,
        "producer",
        format!("{} {}", h.producer.name, h.producer.version),
    );
    let api = ApiVersion::from_cupti(h.cupti_api_version)
        .map(|a| a.to_string())
        .unwrap_or_else(|e| e.to_string());
    line(o, "CUPTI", api);
    line(o, "host", h.host.clone());
    line(o, "process", h.process_id.to_string());
    line(
        o,
        "clock",
        format!(
            "CUPTI {}, wall clock {}",
            clock_time(h.clock.cupti_timestamp_ns),
            clock_time(h.clock.unix_time_ns)
        ),
    );
    if h.devices.is_empty() {
        line(o, "devices", "none in the header".to_string());
    }
    for d in &h.devices {
        line(
            o,
            "device",
            format!(
                "{}: {}, {}, compute capability {}, {}",
                d.id,
                d.name.as_deref().unwrap_or("(no name)"),
                d.sm_count
                    .map_or_else(|| "? SMs".to_string(), |n| count(n.into(), "SM", "SMs")),
                d.compute_capability.as_deref().unwrap_or("?"),
                d.uuid.as_deref().unwrap_or("(no uuid)"),
            ),
        );
    }
}

/// The `frames` line: how many frames of each type.
fn frames_value(i: &Inspection) -> String {
    format!(
        "{} ({}), {}, {}, {}, {}, {}{} of unknown types",
        count(i.buffers, "activity buffer", "activity buffers"),
        count(i.buffer_bytes, "byte", "bytes"),
        count(i.string_tables, "string table", "string tables"),
        count(
            i.dropped_frames,
            "dropped-count frame",
            "dropped-count frames"
        ),
        count(
            i.attribution_events,
            "attribution event",
            "attribution events"
        ),
        count(i.energy_samples, "energy sample", "energy samples"),
        if i.pm_frames > 0 {
            format!(
                "{} ({}), ",
                count(i.pm_frames, "PM-sample frame", "PM-sample frames"),
                count(i.pm_samples, "sample", "samples")
            )
        } else {
            String::new()
        },
        group(&i.unknown_frames.to_string()),
    )
}

/// An `energy` line: one device's energy samples.
fn energy_value(e: &EnergyDevice) -> String {
    let span = e.last_timestamp_ns.saturating_sub(e.first_timestamp_ns);
    let mut v = format!(
        "device {}: {} over {}, {} to {}; {} mJ (counter {} to {} mJ)",
        e.device,
        count(e.samples, "sample", "samples"),
        seconds(span),
        rfc3339_ns(e.first_timestamp_ns),
        rfc3339_ns(e.last_timestamp_ns),
        group(&e.delta_mj.to_string()),
        group(&e.first_mj.to_string()),
        group(&e.last_mj.to_string()),
    );
    if e.decreases > 0 {
        v.push_str(&format!(
            "; the counter fell {} (a driver reload)",
            count(e.decreases, "time", "times")
        ));
    }
    if e.out_of_order > 0 {
        v.push_str(&format!(
            "; {} out of time order",
            count(e.out_of_order, "sample", "samples")
        ));
    }
    v
}

/// A `pm` line: one device's PM samples and each counter's sum.
fn pm_value(p: &PmDevice) -> String {
    let span = p.last_end_ns.saturating_sub(p.first_start_ns);
    let total = |c: &PmCounterTotal, unit: &str| {
        if c.samples == 0 {
            "not sampled".to_string()
        } else if c.samples == p.samples {
            format!("{} {unit}", group(&c.sum.to_string()))
        } else {
            format!(
                "{} {unit} (in {} of {})",
                group(&c.sum.to_string()),
                count(c.samples, "sample", "samples"),
                group(&p.samples.to_string())
            )
        }
    };
    let mut v = format!(
        "device {}: {} in {}",
        p.device,
        count(p.samples, "sample", "samples"),
        count(p.frames, "frame", "frames"),
    );
    if p.samples > 0 {
        v.push_str(&format!(
            " over {}, {} to {}",
            seconds(span),
            rfc3339_ns(p.first_start_ns),
            rfc3339_ns(p.last_end_ns)
        ));
    }
    v.push_str(&format!(
        "; SM active {}, SM elapsed {}, DRAM read {}, DRAM written {}",
        total(&p.sm_active_cycles, "cycles"),
        total(&p.sm_elapsed_cycles, "cycles"),
        total(&p.dram_read_bytes, "bytes"),
        total(&p.dram_write_bytes, "bytes"),
    ));
    if p.overflows > 0 {
        v.push_str(&format!(
            "; {} after a hardware-buffer overflow (samples lost)",
            count(p.overflows, "sample", "samples")
        ));
    }
    v
}

/// The `records` and `kernels` lines, and the table of kernel names.
fn kernel_lines(o: &mut String, i: &Inspection) {
    let kinds: Vec<String> = i
        .records
        .iter()
        .map(|(k, n)| format!("{k} {}", group(&n.to_string())))
        .collect();
    line(
        o,
        "records",
        if kinds.is_empty() {
            "none".to_string()
        } else {
            kinds.join(", ")
        },
    );
    line(
        o,
        "kernels",
        format!(
            "{}, {}, {} without a name",
            count(i.kernels, "kernel record", "kernel records"),
            count(i.kernel_names.len() as u64, "name", "names"),
            group(&i.unnamed_kernels.to_string())
        ),
    );
    if !i.kernel_names.is_empty() {
        let rows = i
            .kernel_names
            .iter()
            .map(|k| vec![group(&k.count.to_string()), k.name.clone()]);
        o.push_str(&columns(
            &" ".repeat(KEY_WIDTH),
            &[("RECORDS", true), ("KERNEL", false)],
            rows,
        ));
    }
}

/// The `instructions` line and the table of warp instructions per function.
fn instruction_lines(o: &mut String, i: &Inspection) {
    o.push_str(&format!(
        "{:<KEY_WIDTH$}{}{}\n",
        "instructions",
        count(
            i.instruction_frames,
            "instruction-count frame",
            "instruction-count frames"
        ),
        if i.header.instrumented {
            " (instrumented run: kernels serialized and slowed)"
        } else {
            ""
        }
    ));
    let rows = i.instructions.iter().map(|f| {
        vec![
            group(&f.warp_instructions.to_string()),
            group(&f.launches.to_string()),
            f.name.clone(),
        ]
    });
    o.push_str(&columns(
        &" ".repeat(KEY_WIDTH),
        &[
            ("WARP INSTRUCTIONS", true),
            ("LAUNCHES", true),
            ("FUNCTION", false),
        ],
        rows,
    ));
}

/// The `op counters` line and the table of sums per metric.
fn op_counter_lines(o: &mut String, i: &Inspection) {
    let passes: Vec<String> = i
        .op_passes
        .iter()
        .map(|p| match p {
            0 => "unknown".to_string(),
            p => p.to_string(),
        })
        .collect();
    o.push_str(&format!(
        "{:<KEY_WIDTH$}{} for {} (range profiler, kernel replay: {} per kernel; kernels \
         serialized and replayed)\n",
        "op counters",
        count(
            i.op_frames,
            "operation-counters frame",
            "operation-counters frames"
        ),
        count(i.op_launches, "kernel launch", "kernel launches"),
        if i.op_passes == [1] {
            "1 pass".to_string()
        } else {
            format!("{} passes", passes.join(" or "))
        }
    ));
    let rows = i.op_counters.iter().map(|m| {
        vec![
            group(&m.sum.to_string()),
            group(&m.launches.to_string()),
            m.metric.clone(),
        ]
    });
    o.push_str(&columns(
        &" ".repeat(KEY_WIDTH),
        &[("SUM", true), ("LAUNCHES", true), ("METRIC", false)],
        rows,
    ));
}

/// A table under a `recording show` line: a header, then the rows, columns two spaces apart
/// and right- or left-aligned (`(name, right)`), each line indented; cells escaped.
fn columns(
    indent: &str,
    header: &[(&str, bool)],
    rows: impl Iterator<Item = Vec<String>>,
) -> String {
    let mut t = Table::new(header);
    for r in rows {
        t.row(r);
    }
    t.render(indent)
}
