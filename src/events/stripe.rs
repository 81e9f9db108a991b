//! Stripe billing meter events ([`StripeMeterEvent`]), whose values carry at most
//! [`STRIPE_MAX_VALUE`].

use serde::{Deserialize, Serialize};

use super::{EventFormat, EventsError, RowEvent, STRIPE_MAX_VALUE};

/// The `payload` of a [`StripeMeterEvent`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripePayload {
    /// The Stripe customer (mapped, else the tenant).
    pub stripe_customer_id: String,
    /// The quantity, a string of digits, at most [`STRIPE_MAX_VALUE`].
    pub value: String,
}

/// A Stripe billing meter event (the body of `POST /v1/billing/meter_events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StripeMeterEvent {
    /// The meter's event name (mapped, else the meter's name).
    pub event_name: String,
    /// Customer and value.
    pub payload: StripePayload,
    /// The idempotency key ([`idempotency_key`](super::idempotency_key)).
    pub identifier: String,
    /// The window start, Unix seconds.
    pub timestamp: u64,
}

/// The Stripe meter event of one row (`row`: its index in the report's `usage`), refused when
/// its quantity is over [`STRIPE_MAX_VALUE`] (never rounded, split or clamped).
pub(super) fn encode(e: RowEvent<'_>, row: usize) -> Result<StripeMeterEvent, EventsError> {
    if e.row.quantity.0 > STRIPE_MAX_VALUE {
        return Err(EventsError::ValueTooLarge {
            row,
            tenant: e.row.tenant.clone(),
            device_key: e.row.device_key.clone(),
            window_start: e.window_start,
            meter: e.row.meter,
            quantity: e.row.quantity.0,
            limit: STRIPE_MAX_VALUE,
            format: EventFormat::Stripe,
        });
    }
    Ok(StripeMeterEvent {
        event_name: e.name,
        payload: StripePayload {
            stripe_customer_id: e.customer,
            value: e.quantity,
        },
        identifier: e.id,
        timestamp: e.seconds,
    })
}
