//! What rating checks of its inputs: the report's schema and policy, window starts on
//! window edges, the period (given or derived), and rate validity edges on window edges.

use std::collections::HashMap;

use gpumeter_core::time::{parse_rfc3339, rfc3339};
use gpumeter_core::{UsageReport, WindowSize, METERING_POLICY, USAGE_SCHEMA};

use crate::book::{PriceBook, Rate};
use crate::error::RatingError;

pub(super) fn check_report(usage: &UsageReport) -> Result<(), RatingError> {
    if usage.schema != USAGE_SCHEMA {
        return Err(RatingError::Usage {
            field: "schema".into(),
            value: format!("\"{}\"", usage.schema),
            reason: format!("expected \"{USAGE_SCHEMA}\""),
        });
    }
    if usage.metering_policy != METERING_POLICY {
        return Err(RatingError::Usage {
            field: "metering_policy".into(),
            value: format!("\"{}\"", usage.metering_policy),
            reason: format!("rating rates metering policy \"{METERING_POLICY}\" only"),
        });
    }
    Ok(())
}

/// Refuses a validity edge of `rates` strictly inside the window starting `ws` (validity
/// edges fall on window edges), so no window with usage has two prices. Only the
/// rates of a SKU and meter that have usage in the window are asked: an edge elsewhere in the
/// book does not concern this usage.
pub(super) fn check_rate_edges(
    book: &PriceBook,
    rates: &[&Rate],
    ws: u64,
    window: WindowSize,
) -> Result<(), RatingError> {
    let end = ws.saturating_add(window.ns());
    for r in rates {
        for (field, edge) in [("valid_from", r.valid_from), ("valid_to", r.valid_to)] {
            if let Some(t) = edge.filter(|&t| ws < t && t < end) {
                let (line, column) = book
                    .place_of(&format!("rate[{}]", r.index), field)
                    .unwrap_or((1, 1));
                return Err(RatingError::EdgeNotOnWindow {
                    book: book.name().to_string(),
                    line,
                    column,
                    rate: r.index,
                    field: field.into(),
                    value: rfc3339(t),
                    window_seconds: window.seconds(),
                });
            }
        }
    }
    Ok(())
}

/// The usage's span rounded out to whole windows, `None` without usage. A window that ends
/// after the latest time a `u64` of ns holds (2554-07-21T23:34:33.709551615Z) is a fault of
/// the usage report (its row is named), not of the command line: no period was given.
pub(super) fn default_period(
    usage: &UsageReport,
    starts: &[u64],
    window: WindowSize,
) -> Result<Option<(u64, u64)>, RatingError> {
    let (Some(&lo), Some(&hi)) = (starts.iter().min(), starts.iter().max()) else {
        return Ok(None);
    };
    if let Some(end) = hi.checked_add(window.ns()) {
        return Ok(Some((lo, end)));
    }
    let i = starts
        .iter()
        .position(|&s| s.checked_add(window.ns()).is_none())
        .unwrap_or_default();
    let value = usage
        .usage
        .get(i)
        .map_or_else(String::new, |r| format!("\"{}\"", r.window_start));
    Err(RatingError::Usage {
        field: format!("usage[{i}].window_start"),
        value,
        reason: format!(
            "its {} s window ends after {}, the latest time gpumeter holds (2^64 − 1 ns after the \
             Unix epoch), so the usage's period cannot end; rate an explicit period that ends \
             before this window",
            window.seconds(),
            rfc3339(u64::MAX)
        ),
    })
}

pub(super) fn check_period(from: u64, to: u64, window: WindowSize) -> Result<(), RatingError> {
    let err = |reason: String| RatingError::Period {
        from: rfc3339(from),
        to: rfc3339(to),
        reason,
    };
    if from >= to {
        return Err(err("the start must be before the end".into()));
    }
    for (name, t) in [("start", from), ("end", to)] {
        if t % window.ns() != 0 {
            return Err(err(format!(
                "the {name} is not on an edge of the usage's {} s windows (UTC multiples of the \
                 window size from the epoch), so a window would straddle the period",
                window.seconds()
            )));
        }
    }
    Ok(())
}

/// Each usage row's window start in ns, checked to be on a window edge.
pub(super) fn window_starts(
    usage: &UsageReport,
    window: WindowSize,
) -> Result<Vec<u64>, RatingError> {
    let mut cache: HashMap<&str, u64> = HashMap::new();
    let mut out = Vec::with_capacity(usage.usage.len());
    for (i, row) in usage.usage.iter().enumerate() {
        let text = row.window_start.as_str();
        let t = match cache.get(text) {
            Some(&t) => t,
            None => {
                let bad = |reason: String| RatingError::Usage {
                    field: format!("usage[{i}].window_start"),
                    value: format!("\"{text}\""),
                    reason,
                };
                let t = parse_rfc3339(text).map_err(bad)?;
                if t % window.ns() != 0 {
                    return Err(bad(format!(
                        "not the start of a {} s window",
                        window.seconds()
                    )));
                }
                cache.insert(text, t);
                t
            }
        };
        out.push(t);
    }
    Ok(out)
}
