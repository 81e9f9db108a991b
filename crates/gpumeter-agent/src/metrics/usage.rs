//! The totals behind `gpumeter_usage_total` (docs/AGENT.md, "Metrics"): the usage of every
//! closed window set the agent handed over, per tenant label, device label and meter, in each
//! meter's canonical unit. They live in the checkpoint ([`crate::state::Checkpoint`]) and are
//! updated in the same atomic write that records the set as closed, so a restart resumes from
//! them and a set closed again after a crash (the checkpoint's `pending` set) is counted once.

use std::collections::BTreeMap;

use gpumeter_core::{Quantity, UsageReport};
use serde::{Deserialize, Serialize};

/// The `tenant` label value of usage of tenants past the cap (and of a tenant named `other`).
pub const OTHER_TENANT: &str = "other";

/// The `device` label value of a device without a UUID (its report key is per recording,
/// `<source label>#<id>`, so it would give every recording series of its own).
pub const UNKNOWN_DEVICE: &str = "unknown";

/// The `device` label value of a report's device key: the key itself for `GPU-<uuid>` and
/// `MIG-<uuid>` (stable across recordings and restarts), else [`UNKNOWN_DEVICE`].
pub fn device_label(device_key: &str) -> &str {
    if device_key.starts_with("GPU-") || device_key.starts_with("MIG-") {
        device_key
    } else {
        UNKNOWN_DEVICE
    }
}

/// Cumulative usage of the closed window sets, as `gpumeter_usage_total` shows it.
///
/// The tenants with a label value of their own are the first `max_tenants` seen (in the order
/// of the sets' usage rows: a set closed again gives the same rows, so the same tenants), kept
/// here so that they stay the same across scrapes and restarts. The usage of later tenants is
/// added under [`OTHER_TENANT`], each such row counted in [`UsageTotals::folded_rows`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// Tenant label value → device label value ([`device_label`]) → meter name → quantity in
    /// the meter's canonical unit (ns, bytes, SM·ns, …; a decimal string in JSON).
    pub usage: BTreeMap<String, BTreeMap<String, BTreeMap<String, Quantity>>>,
    /// Usage rows (one tenant, device, window and meter of a set's report) whose tenant was
    /// past the cap and counted under [`OTHER_TENANT`].
    pub folded_rows: u64,
}

impl UsageTotals {
    /// Tenants with a label value of their own (not [`OTHER_TENANT`]).
    pub fn admitted(&self) -> usize {
        self.usage.keys().filter(|t| *t != OTHER_TENANT).count()
    }

    /// Adds `report`'s usage rows: a tenant seen before keeps its label value, a new one gets
    /// its own while fewer than `max_tenants` have one, else its rows go to [`OTHER_TENANT`]
    /// (counted in `folded_rows`). A tenant named `other` shares that series without counting
    /// as folded. Quantities saturate at `u128::MAX`.
    pub fn add(&mut self, report: &UsageReport, max_tenants: usize) {
        let mut admitted = self.admitted();
        for row in &report.usage {
            let tenant = if row.tenant == OTHER_TENANT || self.usage.contains_key(&row.tenant) {
                row.tenant.as_str()
            } else if admitted < max_tenants {
                admitted += 1;
                row.tenant.as_str()
            } else {
                self.folded_rows += 1;
                OTHER_TENANT
            };
            let q = self
                .usage
                .entry(tenant.to_string())
                .or_default()
                .entry(device_label(&row.device_key).to_string())
                .or_default()
                .entry(row.meter.as_str().to_string())
                .or_default();
            q.0 = q.0.saturating_add(row.quantity.0);
        }
    }

    /// Every series: (tenant, device, meter, quantity), in label order.
    pub fn series(&self) -> impl Iterator<Item = (&str, &str, &str, u128)> + '_ {
        self.usage.iter().flat_map(|(t, devices)| {
            devices.iter().flat_map(move |(d, meters)| {
                meters
                    .iter()
                    .map(move |(m, q)| (t.as_str(), d.as_str(), m.as_str(), q.0))
            })
        })
    }
}
