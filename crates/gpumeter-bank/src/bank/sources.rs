//! Sources billed once: each finalization records the (source, device, time
//! ranges) it billed, and a finalization overlapping any earlier one, of any tenant, is refused.
//!
//! Usage rows do not name their source. A finalization therefore claims, for **every source of
//! its report**, the time ranges of **every device of the rows it bills** (the rows'
//! `[window_start, window_start + window_seconds)`, merged): conservative, so a report of two
//! sources claims each device's ranges for both. A report with one source per device claims
//! exactly what it bills.

use super::*;
use crate::bank::refusal::FinalizeRefusal;

/// What one finalization billed of one source on one device (the memo's `claims`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Claim {
    /// The source's SHA-256 (`usage.sources[].sha256`).
    pub(crate) source: String,
    /// The device's key.
    pub(crate) device_key: String,
    /// Half-open ranges `[from, to)`, RFC 3339 UTC, sorted and merged.
    pub(crate) ranges: Vec<(String, String)>,
}

/// A range billed before, with the finalization that billed it.
#[derive(Debug, Clone)]
pub(crate) struct Billed {
    /// The device's key; `None` (any device) for a finalization recorded before devices were
    /// kept (its memo's `billed` pairs of source and window start).
    device_key: Option<String>,
    from: u64,
    to: u64,
    tenant: String,
    period: (String, String),
    finalization: String,
}

/// The ranges billed before, by source SHA-256.
#[derive(Debug, Default)]
pub(crate) struct BilledSources {
    by_source: BTreeMap<String, Vec<Billed>>,
}

/// The name the advisory lock of a source takes ([`LedgerTx::lock_tenants`]): a control
/// character first, which no tenant name may hold (the tenant rule), so it never waits on a
/// tenant.
fn lock_name(source: &str) -> String {
    format!("\u{0}source:{source}")
}

/// Holds the report's sources for this database transaction, so that two finalizers of one
/// source (for different tenants, whose locks do not meet) take turns, and the second sees
/// what the first recorded.
pub(crate) fn lock_sources(t: &mut dyn LedgerTx, usage: &UsageReport) -> Result<(), BankError> {
    let names: Vec<String> = usage.sources.iter().map(|s| lock_name(&s.sha256)).collect();
    if names.is_empty() {
        return Ok(());
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    t.lock_tenants(&refs)
}

/// What `rows` claim of the report's sources: every source × every device of the rows, the
/// rows' windows merged into ranges.
pub(crate) fn claims_of(usage: &UsageReport, rows: &[&UsageRow]) -> Result<Vec<Claim>, BankError> {
    let window_ns = usage
        .window_seconds
        .checked_mul(1_000_000_000)
        .ok_or_else(|| {
            refused(format!(
                "window_seconds {} is too large",
                usage.window_seconds
            ))
        })?;
    let mut by_device: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for r in rows {
        let start = parse_time(&r.window_start)?;
        let end = start.saturating_add(window_ns);
        by_device
            .entry(r.device_key.as_str())
            .or_default()
            .push((start, end));
    }
    let mut out = Vec::new();
    for s in &usage.sources {
        for (device, ranges) in &by_device {
            out.push(Claim {
                source: s.sha256.clone(),
                device_key: (*device).to_string(),
                ranges: merged(ranges.clone())
                    .into_iter()
                    .map(|(a, b)| (rfc3339(a), rfc3339(b)))
                    .collect(),
            });
        }
    }
    Ok(out)
}

/// Half-open ranges sorted and merged where they touch or overlap.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Every range every finalization of the ledger billed, all tenants: O(finalizations) (see
/// docs/decisions/integrity-periods-and-sources.md).
pub(crate) fn billed_sources(t: &dyn LedgerTx) -> Result<BilledSources, BankError> {
    let mut out = BilledSources::default();
    for done in t.transactions(Some("finalize"))? {
        let memo = &done.tx.memo;
        let inv = &memo["invoice"];
        let tenant = done.tx.tenant.clone().unwrap_or_default();
        let period = (
            inv["period"]["from"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            inv["period"]["to"].as_str().unwrap_or_default().to_string(),
        );
        let finalization = done
            .tx
            .key
            .strip_prefix("finalize:")
            .unwrap_or(&done.tx.key)
            .to_string();
        let mut add = |source: String, device_key: Option<String>, from: u64, to: u64| {
            out.by_source.entry(source).or_default().push(Billed {
                device_key,
                from,
                to,
                tenant: tenant.clone(),
                period: period.clone(),
                finalization: finalization.clone(),
            });
        };
        if let Some(claims) = memo.get("claims") {
            let claims: Vec<Claim> =
                serde_json::from_value(claims.clone()).map_err(|e| BankError::Corrupt {
                    seq: done.seq,
                    key: done.tx.key.clone(),
                    reason: format!("the memo's `claims` are not claims: {e}"),
                })?;
            for c in claims {
                for (a, b) in &c.ranges {
                    add(
                        c.source.clone(),
                        Some(c.device_key.clone()),
                        parse_time(a)?,
                        parse_time(b)?,
                    );
                }
            }
        } else if let Ok(pairs) =
            serde_json::from_value::<Vec<(String, String)>>(memo["billed"].clone())
        {
            // Recorded before devices and window sizes were kept: the source's windows in that
            // period, on any device, claim the whole period (the window size is not known).
            let (Ok(from), Ok(to)) = (parse_time(&period.0), parse_time(&period.1)) else {
                continue;
            };
            let sources: BTreeSet<String> = pairs.into_iter().map(|(s, _)| s).collect();
            for s in sources {
                add(s, None, from, to);
            }
        }
    }
    Ok(out)
}

impl BilledSources {
    /// Refuses `claims` when one overlaps a range billed before, naming the source (by its
    /// name in `usage`), the overlap and the invoice that billed it.
    pub(crate) fn check(&self, usage: &UsageReport, claims: &[Claim]) -> Result<(), BankError> {
        for c in claims {
            let Some(before) = self.by_source.get(&c.source) else {
                continue;
            };
            for (a, b) in &c.ranges {
                let (a, b) = (parse_time(a)?, parse_time(b)?);
                let hit = before.iter().find(|x| {
                    x.device_key.as_deref().is_none_or(|d| d == c.device_key)
                        && x.from < b
                        && a < x.to
                });
                if let Some(x) = hit {
                    let name = usage
                        .sources
                        .iter()
                        .find(|s| s.sha256 == c.source)
                        .map_or_else(|| c.source.clone(), |s| s.name.clone());
                    return Err(FinalizeRefusal::SourceBilled {
                        source_name: name,
                        source_sha256: c.source.clone(),
                        device_key: x.device_key.clone().unwrap_or_else(|| "*".into()),
                        from: rfc3339(a.max(x.from)),
                        to: rfc3339(b.min(x.to)),
                        tenant: x.tenant.clone(),
                        period_from: x.period.0.clone(),
                        period_to: x.period.1.clone(),
                        finalization: x.finalization.clone(),
                    }
                    .into());
                }
            }
        }
        Ok(())
    }
}
