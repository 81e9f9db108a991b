//! The HTML page's utilization chart: each device's exact share of every window (or bucket of
//! whole windows) it was busy and its SM·time held ([`utilization`]), drawn as SVG bars.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{MeterKind, UsageReport};

use super::html_text;

/// Windows drawn per device at most: a longer period is drawn in buckets of whole windows
/// (each bucket's share is over its whole duration), so a month of one-minute windows stays a
/// readable chart and a small file.
pub const MAX_CHART_BARS: usize = 240;

/// An exact share `part / whole` (of a window's time, or of its SM·time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// The used amount (ns or SM·ns).
    pub part: u128,
    /// The available amount (ns or SM·ns); never zero.
    pub whole: u128,
}

impl Share {
    /// The share in tenths of a percent, rounded half up (`500` is 50.0 %); may exceed
    /// `1000` if the usage exceeds what the window holds (it cannot under policy v1).
    pub fn per_mille(self) -> u128 {
        match self.part.checked_mul(1000) {
            Some(p) => (p + self.whole / 2) / self.whole,
            // A part this large is far above the whole: the exact value hardly matters.
            None => (self.part / self.whole).saturating_mul(1000),
        }
    }

    /// The share as text for people, one decimal: `"50.0 %"`.
    pub fn percent_text(self) -> String {
        let m = self.per_mille();
        format!("{}.{} %", m / 10, m % 10)
    }

    /// The share as a drawing fraction in `[0, 1]` (clamped). Floats are used here only for
    /// SVG coordinates, never for a number shown as text.
    pub fn fraction(self) -> f64 {
        if self.part >= self.whole {
            return 1.0;
        }
        // Both below 2^128; the ratio of their f64 approximations is exact enough to draw.
        self.part as f64 / self.whole as f64
    }
}

/// One bar of a device's chart: a window (or a bucket of whole windows, see
/// [`MAX_CHART_BARS`]) and the device's use of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowUtilization {
    /// Start of the window, ns since the Unix epoch (UTC).
    pub start_ns: u64,
    /// Length, ns (`window_seconds` × the windows in the bucket).
    pub length_ns: u128,
    /// Σ `gpu_busy_ns` over every tenant ÷ the window's ns: the share of time the GPU had work.
    pub busy: Share,
    /// Σ `sm_ns` ÷ (SMs × the window's ns): the share of the device's SM·time held; `None`
    /// when the device's SM count is unknown.
    pub sm: Option<Share>,
}

/// A device's utilization over the chart's span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceUtilization {
    /// The device's key in the usage report.
    pub device_key: String,
    /// The device's name, when known.
    pub name: Option<String>,
    /// The device's SMs, when known.
    pub sm_count: Option<u32>,
    /// The bars, in time order, covering the span without gaps.
    pub windows: Vec<WindowUtilization>,
}

/// The utilization of every device of `usage` over `[from, to)` (ns since the epoch), one
/// entry per window, or per bucket of `k` whole windows when there are more than
/// [`MAX_CHART_BARS`] windows. Usage of every tenant counts (`gpu_busy_ns` is split among
/// tenants, so their sum is the device's busy time). `span` `None`: the usage's own span, its
/// first window to the end of its last. Rows whose `window_start` does not parse (the rating
/// refuses them) or lies outside the span are left out.
pub fn utilization(usage: &UsageReport, span: Option<(u64, u64)>) -> Vec<DeviceUtilization> {
    let window_ns = u128::from(usage.window_seconds) * 1_000_000_000;
    let starts: Vec<(usize, u64)> = usage
        .usage
        .iter()
        .enumerate()
        .filter_map(|(i, r)| parse_rfc3339(&r.window_start).ok().map(|t| (i, t)))
        .collect();
    let span = span.or_else(|| {
        let first = starts.iter().map(|&(_, t)| t).min()?;
        let last = starts.iter().map(|&(_, t)| t).max()?;
        let end = u128::from(last) + window_ns;
        Some((first, u64::try_from(end).unwrap_or(u64::MAX)))
    });
    let Some((from, to)) = span.filter(|&(f, t)| t > f && window_ns > 0) else {
        return usage
            .devices
            .iter()
            .map(|d| DeviceUtilization {
                device_key: d.device_key.clone(),
                name: d.name.clone(),
                sm_count: d.sm_count,
                windows: vec![],
            })
            .collect();
    };
    let span_ns = u128::from(to - from);
    let n_windows = span_ns.div_ceil(window_ns);
    let per_bar = n_windows.div_ceil(MAX_CHART_BARS as u128).max(1);
    let n_bars = n_windows.div_ceil(per_bar);
    let bar_ns = per_bar * window_ns;

    // (device key, bar) → (Σ gpu_busy_ns, Σ sm_ns)
    let mut sums: BTreeMap<(&str, u128), (u128, u128)> = BTreeMap::new();
    for (i, t) in starts {
        let r = &usage.usage[i];
        if t < from || t >= to || !matches!(r.meter, MeterKind::GpuBusyNs | MeterKind::SmNs) {
            continue;
        }
        let bar = u128::from(t - from) / bar_ns;
        let e = sums.entry((r.device_key.as_str(), bar)).or_default();
        if r.meter == MeterKind::GpuBusyNs {
            e.0 = e.0.saturating_add(r.quantity.0);
        } else {
            e.1 = e.1.saturating_add(r.quantity.0);
        }
    }

    usage
        .devices
        .iter()
        .map(|d| {
            let windows = (0..n_bars)
                .map(|bar| {
                    let start = u128::from(from) + bar * bar_ns;
                    let length_ns = bar_ns.min(u128::from(to) - start);
                    let (busy, sm) = sums
                        .get(&(d.device_key.as_str(), bar))
                        .copied()
                        .unwrap_or_default();
                    WindowUtilization {
                        start_ns: u64::try_from(start).unwrap_or(u64::MAX),
                        length_ns,
                        busy: Share {
                            part: busy,
                            whole: length_ns,
                        },
                        sm: d.sm_count.filter(|&c| c > 0).map(|c| Share {
                            part: sm,
                            whole: length_ns.saturating_mul(u128::from(c)),
                        }),
                    }
                })
                .collect();
            DeviceUtilization {
                device_key: d.device_key.clone(),
                name: d.name.clone(),
                sm_count: d.sm_count,
                windows,
            }
        })
        .collect()
}

// Chart geometry, in SVG user units (pixels at scale 1).
const CHART_W: f64 = 760.0;
const CHART_H: f64 = 250.0;
const PLOT_LEFT: f64 = 52.0;
const PLOT_RIGHT: f64 = 12.0;
const PLOT_TOP: f64 = 30.0;
const PLOT_BOTTOM: f64 = 46.0;
/// Bars per chart up to which each bar carries its percentage as a label.
const LABELLED_BARS: usize = 12;
/// Time labels on the x axis at most.
const TIME_LABELS: usize = 8;

/// The height in SVG units of a bar for `share` in a plot `plot_h` high (clamped to it).
/// Drawing coordinates only.
pub fn bar_height(share: Share, plot_h: f64) -> f64 {
    share.fraction() * plot_h
}

/// The plot area of a chart with `n` bars. Drawing coordinates only (f64).
struct Plot {
    /// Width of the plot area.
    w: f64,
    /// Height of the plot area (100 %).
    h: f64,
    /// y of the 0 % line.
    base: f64,
    /// Width of one window's slot.
    slot: f64,
    /// Width of one bar (two per slot).
    bar_w: f64,
    /// Whether each bar carries its percentage as a label.
    labelled: bool,
}

impl Plot {
    fn new(n: usize) -> Plot {
        let w = CHART_W - PLOT_LEFT - PLOT_RIGHT;
        let h = CHART_H - PLOT_TOP - PLOT_BOTTOM;
        let slot = w / n.max(1) as f64;
        Plot {
            w,
            h,
            base: PLOT_TOP + h,
            slot,
            bar_w: slot * 0.38,
            labelled: n <= LABELLED_BARS,
        }
    }
}

/// One device's figure: caption, then an SVG bar chart of its windows.
pub(super) fn chart(out: &mut String, d: &DeviceUtilization) {
    let h = html_text;
    let sms = d
        .sm_count
        .map(|c| format!(", {c} SMs"))
        .unwrap_or_else(|| ", SM count unknown".into());
    let _ = writeln!(
        out,
        "<figure class=\"device\">\n<figcaption>{} ({}{sms})</figcaption>",
        h(&d.device_key),
        h(d.name.as_deref().unwrap_or("no name"))
    );
    if d.windows.is_empty() {
        out.push_str("<p>No windows to draw.</p>\n</figure>\n");
        return;
    }
    // Floats from here on are drawing coordinates only; the percentages written as text come
    // from `Share::percent_text` (integer arithmetic).
    let plot = Plot::new(d.windows.len());
    let _ = writeln!(
        out,
        "<svg class=\"chart\" width=\"{CHART_W}\" height=\"{CHART_H}\" viewBox=\"0 0 {CHART_W} \
         {CHART_H}\" role=\"img\" aria-label=\"utilization of {}\">",
        h(&d.device_key)
    );
    legend(out, d.sm_count.is_some());
    y_axis(out, &plot);
    series(out, d, &plot, ("busy", "GPU busy"), 0.1, &|w| Some(w.busy));
    if d.sm_count.is_some() {
        series(out, d, &plot, ("sm", "SMs held"), 0.52, &|w| w.sm);
    }
    time_axis(out, d, &plot);
    out.push_str("</svg>\n</figure>\n");
}

/// The series' colours and meanings, above the plot.
fn legend(out: &mut String, with_sm: bool) {
    let _ = writeln!(
        out,
        "<rect class=\"busy\" x=\"{PLOT_LEFT}\" y=\"8\" width=\"12\" height=\"12\"/>\
         <text x=\"{:.1}\" y=\"18\">GPU busy (gpu_busy_ns ÷ window)</text>",
        PLOT_LEFT + 16.0
    );
    if with_sm {
        let _ = writeln!(
            out,
            "<rect class=\"sm\" x=\"{:.1}\" y=\"8\" width=\"12\" height=\"12\"/>\
             <text x=\"{:.1}\" y=\"18\">SMs held (sm_ns ÷ (SMs × window))</text>",
            PLOT_LEFT + 250.0,
            PLOT_LEFT + 266.0
        );
    } else {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"18\">SM share not drawn: SM count unknown</text>",
            PLOT_LEFT + 250.0
        );
    }
}

/// Grid lines and labels at 0, 25, 50, 75 and 100 %, and the x axis line.
fn y_axis(out: &mut String, plot: &Plot) {
    for pct in [0u32, 25, 50, 75, 100] {
        let y = plot.base - plot.h * f64::from(pct) / 100.0;
        let _ = writeln!(
            out,
            "<line class=\"grid\" x1=\"{PLOT_LEFT}\" y1=\"{y:.2}\" x2=\"{:.2}\" y2=\"{y:.2}\"/>\
             <text x=\"{:.1}\" y=\"{:.2}\" text-anchor=\"end\">{pct} %</text>",
            PLOT_LEFT + plot.w,
            PLOT_LEFT - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        out,
        "<line class=\"axis\" x1=\"{PLOT_LEFT}\" y1=\"{base:.2}\" x2=\"{:.2}\" y2=\"{base:.2}\"/>",
        PLOT_LEFT + plot.w,
        base = plot.base
    );
}

/// One series of bars (`(class, label)`), `offset` slots from each slot's left edge; windows
/// for which `pick` gives no share are not drawn.
fn series(
    out: &mut String,
    d: &DeviceUtilization,
    plot: &Plot,
    (name, label): (&str, &str),
    offset: f64,
    pick: &dyn Fn(&WindowUtilization) -> Option<Share>,
) {
    let _ = writeln!(out, "<g class=\"{name}\" data-series=\"{name}\">");
    for (i, w) in d.windows.iter().enumerate() {
        let Some(share) = pick(w) else { continue };
        let bh = bar_height(share, plot.h);
        let x = PLOT_LEFT + plot.slot * (i as f64 + offset);
        let _ = writeln!(
            out,
            "<rect x=\"{x:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{bh:.2}\">\
             <title>{} {label} {}</title></rect>",
            plot.base - bh,
            plot.bar_w,
            rfc3339(w.start_ns),
            share.percent_text()
        );
        if plot.labelled {
            let _ = writeln!(
                out,
                "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{}</text>",
                x + plot.bar_w / 2.0,
                plot.base - bh - 4.0,
                share.percent_text()
            );
        }
    }
    out.push_str("</g>\n");
}

/// Window starts (UTC) under the bars, at most [`TIME_LABELS`] of them, and the axis title.
fn time_axis(out: &mut String, d: &DeviceUtilization, plot: &Plot) {
    let n = d.windows.len();
    let step = n.div_ceil(TIME_LABELS).max(1);
    for i in (0..n).step_by(step) {
        let x = PLOT_LEFT + plot.slot * (i as f64 + 0.5);
        let _ = writeln!(
            out,
            "<text x=\"{x:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{}</text>",
            plot.base + 16.0,
            time_label(d.windows[i].start_ns)
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">window start (UTC)</text>",
        PLOT_LEFT + plot.w / 2.0,
        plot.base + 36.0
    );
}

/// `MM-DD HH:MM` in UTC, from the RFC 3339 text of `ns`.
fn time_label(ns: u64) -> String {
    let t = rfc3339(ns);
    match (t.get(5..10), t.get(11..16)) {
        (Some(d), Some(hm)) => format!("{d} {hm}"),
        _ => t,
    }
}
