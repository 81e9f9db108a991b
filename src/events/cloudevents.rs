//! CloudEvents 1.0 JSON events in the shape OpenMeter ingests ([`CloudEvent`]).

use gpumeter_core::MeterKind;
use serde::{Deserialize, Serialize};

use super::{EventsError, RowEvent, CLOUDEVENT_MAX_BYTES};

/// The `data` of a [`CloudEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudEventData {
    /// The meter (`sm_ns`).
    pub meter: MeterKind,
    /// The quantity in the meter's canonical unit, a decimal string of digits.
    pub quantity: String,
    /// The canonical unit (`ns`, `SM·ns`, `B`, …).
    pub unit: String,
    /// gpumeter's tenant (the `subject` may be a mapped id).
    pub tenant: String,
    /// Device id within its source.
    pub device: u32,
    /// Identity of the device across sources.
    pub device_key: String,
    /// End of the window (exclusive), RFC 3339 UTC; it starts at the event's `time`.
    pub window_end: String,
    /// The report's metering policy (`v1`).
    pub metering_policy: String,
}

/// A CloudEvents 1.0 JSON event in the shape OpenMeter ingests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: String,
    /// The idempotency key ([`idempotency_key`](super::idempotency_key)).
    pub id: String,
    /// The mapping's `source` (default `gpumeter`).
    pub source: String,
    /// The meter's event type (mapped, else the meter's name).
    #[serde(rename = "type")]
    pub event_type: String,
    /// The tenant's subject (mapped, else the tenant).
    pub subject: String,
    /// The window start, RFC 3339 UTC.
    pub time: String,
    /// Always `application/json`.
    pub datacontenttype: String,
    /// The usage.
    pub data: CloudEventData,
}

/// The CloudEvent of one row (`row`: its index in the report's `usage`), refused when its
/// JSON is over [`CLOUDEVENT_MAX_BYTES`].
pub(super) fn encode(
    e: RowEvent<'_>,
    source: &str,
    metering_policy: &str,
    row: usize,
) -> Result<CloudEvent, EventsError> {
    let event = CloudEvent {
        specversion: "1.0".into(),
        id: e.id,
        source: source.to_string(),
        event_type: e.name,
        subject: e.customer,
        time: e.window_start,
        datacontenttype: "application/json".into(),
        data: CloudEventData {
            meter: e.row.meter,
            quantity: e.quantity,
            unit: e.unit,
            tenant: e.row.tenant.clone(),
            device: e.row.device,
            device_key: e.row.device_key.clone(),
            window_end: e.window_end,
            metering_policy: metering_policy.to_string(),
        },
    };
    let bytes = serde_json::to_vec(&event)?.len();
    if bytes > CLOUDEVENT_MAX_BYTES {
        return Err(EventsError::EventTooLarge {
            row,
            bytes,
            limit: CLOUDEVENT_MAX_BYTES,
        });
    }
    Ok(event)
}
