//! A tenant's finalized periods: where a new finalization's period
//! stands among them (new, or a supplement of an equal one; an overlap is refused), and what a
//! supplement rates: the period's cumulative usage, from the rows every finalization keeps in
//! its memo.

use super::*;
use crate::bank::refusal::FinalizeRefusal;
use gpumeter_core::{DeviceEntry, RecordCounts, UsageRow};
use gpumeter_rating::InvoiceRef;

/// What a finalization keeps of the usage it billed (its memo's `usage`), so that a later
/// supplement can rate the period's cumulative usage: the tenant's rows in the period and what
/// rating needs of their devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredUsage {
    /// The report's window size, seconds.
    pub(crate) window_seconds: u64,
    /// The devices of the rows.
    pub(crate) devices: Vec<StoredDevice>,
    /// The rows, in the report's order.
    pub(crate) rows: Vec<StoredRow>,
}

/// A device as rating needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredDevice {
    pub(crate) device: u32,
    pub(crate) device_key: String,
    pub(crate) name: Option<String>,
    pub(crate) sm_count: Option<u32>,
}

/// A usage row without its tenant (the finalization's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredRow {
    pub(crate) device_key: String,
    pub(crate) window_start: String,
    pub(crate) meter: MeterKind,
    pub(crate) quantity: Quantity,
}

impl StoredUsage {
    /// The rows `rows` of `usage` and their devices.
    pub(crate) fn of(usage: &UsageReport, rows: &[&UsageRow]) -> Self {
        let keys: BTreeSet<&str> = rows.iter().map(|r| r.device_key.as_str()).collect();
        StoredUsage {
            window_seconds: usage.window_seconds,
            devices: usage
                .devices
                .iter()
                .filter(|d| keys.contains(d.device_key.as_str()))
                .map(|d| StoredDevice {
                    device: d.device,
                    device_key: d.device_key.clone(),
                    name: d.name.clone(),
                    sm_count: d.sm_count,
                })
                .collect(),
            rows: rows
                .iter()
                .map(|r| StoredRow {
                    device_key: r.device_key.clone(),
                    window_start: r.window_start.clone(),
                    meter: r.meter,
                    quantity: r.quantity,
                })
                .collect(),
        }
    }
}

/// An earlier finalization of the tenant.
#[derive(Debug, Clone)]
pub(crate) struct Earlier {
    /// Its finalization key (without `finalize:`).
    pub(crate) key: String,
    /// Its invoice, as finalized (sealed, with its `ledger_head`).
    pub(crate) invoice: Invoice,
    /// Its period, ns.
    pub(crate) period: (u64, u64),
    /// The usage it kept (`None`: recorded by a gpumeter before issue 30).
    pub(crate) usage: Option<StoredUsage>,
}

impl Earlier {
    /// How a supplement names it.
    pub(crate) fn reference(&self, with_subtotal: bool) -> InvoiceRef {
        InvoiceRef {
            sha256: self.invoice.sha256.clone(),
            finalization: self.key.clone(),
            subtotal: with_subtotal.then_some(self.invoice.subtotal),
        }
    }
}

/// Every finalization of `tenant`, in ledger order.
pub(crate) fn finalizations(t: &dyn LedgerTx, tenant: &str) -> Result<Vec<Earlier>, BankError> {
    let mut out = Vec::new();
    for done in t.tenant_transactions("finalize", tenant)? {
        let invoice = stored_invoice(&done)?;
        let period = (
            parse_time(&invoice.period.from)?,
            parse_time(&invoice.period.to)?,
        );
        let usage = match done.tx.memo.get("usage") {
            None => None,
            Some(u) => Some(
                serde_json::from_value(u.clone()).map_err(|e| BankError::Corrupt {
                    seq: done.seq,
                    key: done.tx.key.clone(),
                    reason: format!(
                        "the memo's `usage` is not the usage a finalization keeps: {e}"
                    ),
                })?,
            ),
        };
        out.push(Earlier {
            key: done
                .tx
                .key
                .strip_prefix("finalize:")
                .unwrap_or(&done.tx.key)
                .to_string(),
            invoice,
            period,
            usage,
        });
    }
    Ok(out)
}

/// The invoice a `finalize` transaction recorded, with its `ledger_head` and digest.
pub(crate) fn stored_invoice(t: &StoredTransaction) -> Result<Invoice, BankError> {
    let mut inv: Invoice =
        serde_json::from_value(t.tx.memo["invoice"].clone()).map_err(|e| BankError::Corrupt {
            seq: t.seq,
            key: t.tx.key.clone(),
            reason: format!("the memo of a finalization is not an invoice: {e}"),
        })?;
    inv.ledger_head = Some(t.hash.clone());
    inv.seal()?;
    Ok(inv)
}

/// Where a new finalization of a (tenant, period) stands among the tenant's finalizations.
#[derive(Debug)]
pub(crate) enum Place {
    /// The tenant's first finalization of the period.
    New,
    /// The period was finalized before: these are its finalizations, in ledger order (the
    /// first one first), and this one is a supplement.
    Supplement(Vec<Earlier>),
}

/// Places the period `(from, to)` of `tenant` among `all` its finalizations: equal to a
/// finalized period (a supplement), or new; refused when it overlaps a finalized period
/// without being equal to it.
pub(crate) fn place(
    tenant: &str,
    (from, to): (u64, u64),
    all: Vec<Earlier>,
) -> Result<Place, BankError> {
    if let Some(e) = all
        .iter()
        .find(|e| e.period != (from, to) && e.period.0 < to && from < e.period.1)
    {
        return Err(FinalizeRefusal::PeriodOverlap {
            tenant: tenant.to_string(),
            from: rfc3339(from),
            to: rfc3339(to),
            other_from: e.invoice.period.from.clone(),
            other_to: e.invoice.period.to.clone(),
            finalization: e.key.clone(),
        }
        .into());
    }
    let same: Vec<Earlier> = all.into_iter().filter(|e| e.period == (from, to)).collect();
    if same.is_empty() {
        Ok(Place::New)
    } else {
        Ok(Place::Supplement(same))
    }
}

/// The period's cumulative usage, as one report: the rows every earlier finalization of the
/// period kept, and `rows` of `usage`, summed per (device key, window, meter), with `usage`'s
/// window size, loss and warnings (the supplement's invoice carries them).
///
/// # Errors
/// [`FinalizeRefusal::NoRowsKept`], [`FinalizeRefusal::OtherWindow`],
/// [`FinalizeRefusal::DeviceDiffers`]; [`BankError::Refused`] for a quantity past `u128`.
pub(crate) fn cumulative_report(
    usage: &UsageReport,
    tenant: &str,
    (from, to): (u64, u64),
    rows: &[&UsageRow],
    earlier: &[Earlier],
) -> Result<UsageReport, BankError> {
    let period = || (rfc3339(from), rfc3339(to));
    // The window size of the cumulative usage: this report's when it adds rows (the earlier
    // rows must be in it too), else the earlier rows' (a supplement that adds only a
    // reservation's fee rates them as they were).
    let window_seconds = if rows.is_empty() {
        earlier
            .iter()
            .filter_map(|e| e.usage.as_ref())
            .find(|u| !u.rows.is_empty())
            .map_or(usage.window_seconds, |u| u.window_seconds)
    } else {
        usage.window_seconds
    };
    let mut devices: BTreeMap<String, DeviceEntry> = BTreeMap::new();
    for d in &usage.devices {
        devices
            .entry(d.device_key.clone())
            .or_insert_with(|| DeviceEntry {
                not_meterable: vec![],
                compute_capability: None,
                ..d.clone()
            });
    }
    let mut sums: BTreeMap<(String, u64, MeterKind), u128> = BTreeMap::new();
    let mut add = |key: &str, window: &str, meter: MeterKind, q: u128| -> Result<(), BankError> {
        let slot = sums
            .entry((key.to_string(), parse_time(window)?, meter))
            .or_insert(0);
        *slot = slot.checked_add(q).ok_or_else(|| {
            refused(format!(
                "tenant `{tenant}`: the period's cumulative {meter} on device {key} in the window \
                 starting {window} exceeds 2^128 − 1"
            ))
        })?;
        Ok(())
    };
    let used: BTreeSet<&str> = rows.iter().map(|r| r.device_key.as_str()).collect();
    for r in rows {
        add(&r.device_key, &r.window_start, r.meter, r.quantity.0)?;
    }
    for e in earlier {
        let Some(kept) = &e.usage else {
            return Err(FinalizeRefusal::NoRowsKept {
                tenant: tenant.to_string(),
                from: period().0,
                to: period().1,
                finalization: e.key.clone(),
            }
            .into());
        };
        if !kept.rows.is_empty() && kept.window_seconds != window_seconds {
            return Err(FinalizeRefusal::OtherWindow {
                tenant: tenant.to_string(),
                from: period().0,
                to: period().1,
                first_seconds: kept.window_seconds,
                seconds: usage.window_seconds,
            }
            .into());
        }
        keep_devices(&mut devices, &used, kept, tenant, (from, to))?;
        for r in &kept.rows {
            add(&r.device_key, &r.window_start, r.meter, r.quantity.0)?;
        }
    }
    let merged_rows = sums
        .into_iter()
        .map(|((device_key, ws, meter), q)| UsageRow {
            tenant: tenant.to_string(),
            device: devices.get(&device_key).map_or(0, |d| d.device),
            device_key,
            window_start: rfc3339(ws),
            meter,
            quantity: Quantity(q),
        })
        .collect();
    Ok(UsageReport {
        schema: usage.schema.clone(),
        metering_policy: usage.metering_policy.clone(),
        window_seconds,
        sources: usage.sources.clone(),
        devices: devices.into_values().collect(),
        records: RecordCounts::default(),
        loss: usage.loss.clone(),
        usage: merged_rows,
        totals: vec![],
        open_allocations: vec![],
        extensions: Default::default(),
        warnings: usage.warnings.clone(),
        complete: usage.complete,
        // Rating cites it; the supplement cites the report being finalized instead.
        sha256: usage.sha256.clone(),
    })
}

/// The devices of an earlier finalization's rows (`kept`) in the cumulative report's
/// `devices`: one that this report's rows use (`used`) must be described as it was
/// ([`FinalizeRefusal::DeviceDiffers`]); one that they do not use is added as it was billed.
fn keep_devices(
    devices: &mut BTreeMap<String, DeviceEntry>,
    used: &BTreeSet<&str>,
    kept: &StoredUsage,
    tenant: &str,
    (from, to): (u64, u64),
) -> Result<(), BankError> {
    for d in &kept.devices {
        match devices.get(&d.device_key) {
            Some(now)
                if used.contains(d.device_key.as_str())
                    && (now.name != d.name || now.sm_count != d.sm_count) =>
            {
                let text = |s: Option<String>| s.unwrap_or_else(|| "unknown".into());
                return Err(FinalizeRefusal::DeviceDiffers {
                    tenant: tenant.to_string(),
                    from: rfc3339(from),
                    to: rfc3339(to),
                    device_key: d.device_key.clone(),
                    name: text(now.name.clone()),
                    sm_count: text(now.sm_count.map(|n| n.to_string())),
                    first_name: text(d.name.clone()),
                    first_sm_count: text(d.sm_count.map(|n| n.to_string())),
                }
                .into());
            }
            Some(_) if used.contains(d.device_key.as_str()) => {}
            _ => {
                // A device of the earlier rows only (or described here, but without rows of
                // this tenant in the period): as it was billed.
                devices.insert(
                    d.device_key.clone(),
                    DeviceEntry {
                        device: d.device,
                        device_key: d.device_key.clone(),
                        name: d.name.clone(),
                        sm_count: d.sm_count,
                        compute_capability: None,
                        not_meterable: vec![],
                    },
                );
            }
        }
    }
    Ok(())
}
