//! Lago usage events ([`LagoEvent`]).

use gpumeter_core::MeterKind;
use serde::{Deserialize, Serialize};

use super::RowEvent;

/// The `properties` of a [`LagoEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagoProperties {
    /// The quantity in the meter's canonical unit, a decimal string of digits (a `sum_agg`
    /// billable metric's `field_name`).
    pub quantity: String,
    /// The canonical unit.
    pub unit: String,
    /// The meter.
    pub meter: MeterKind,
    /// gpumeter's tenant.
    pub tenant: String,
    /// Identity of the device across sources.
    pub device_key: String,
    /// End of the window (exclusive), RFC 3339 UTC.
    pub window_end: String,
    /// The report's metering policy.
    pub metering_policy: String,
}

/// A Lago usage event (the `event` of `POST /api/v1/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagoEvent {
    /// The idempotency key ([`idempotency_key`](super::idempotency_key)).
    pub transaction_id: String,
    /// The subscription (mapped, else the tenant).
    pub external_subscription_id: String,
    /// The billable metric's code (mapped, else the meter's name).
    pub code: String,
    /// The window start, Unix seconds.
    pub timestamp: u64,
    /// The usage.
    pub properties: LagoProperties,
}

/// The Lago event of one row.
pub(super) fn encode(e: RowEvent<'_>, metering_policy: &str) -> LagoEvent {
    LagoEvent {
        transaction_id: e.id,
        external_subscription_id: e.customer,
        code: e.name,
        timestamp: e.seconds,
        properties: LagoProperties {
            quantity: e.quantity,
            unit: e.unit,
            meter: e.row.meter,
            tenant: e.row.tenant.clone(),
            device_key: e.row.device_key.clone(),
            window_end: e.window_end,
            metering_policy: metering_policy.to_string(),
        },
    }
}
