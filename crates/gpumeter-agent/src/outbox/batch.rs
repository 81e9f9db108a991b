//! A batch of usage events encoded once into the HTTP requests that carry them, and its stored
//! form (docs/AGENT.md, "The outbox").

use gpumeter::events::{EventFormat, UsageEvent};
use serde::{Deserialize, Serialize};

use super::OutboxError;

/// The most events in one CloudEvents request (`application/cloudevents-batch+json`).
pub const CLOUDEVENTS_PER_REQUEST: usize = 100;

/// The most events in one Lago request: Lago's `POST /api/v1/events/batch` takes up to 100.
pub const LAGO_PER_REQUEST: usize = 100;

/// The content type of a CloudEvents batch (OpenMeter's `POST /api/v1/events`).
pub const CLOUDEVENTS_BATCH_CONTENT_TYPE: &str = "application/cloudevents-batch+json";

/// The content type of a Lago batch.
pub const LAGO_CONTENT_TYPE: &str = "application/json";

/// The content type of a Stripe meter event (`POST /v1/billing/meter_events`).
pub const STRIPE_CONTENT_TYPE: &str = "application/x-www-form-urlencoded";

/// The version of the stored batch file's shape.
const STORED_VERSION: u32 = 1;

/// One HTTP request of a batch: its body is sent byte for byte on every try.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// The `Content-Type` header.
    pub content_type: String,
    /// The idempotency keys of the events the body carries, in the body's order.
    pub ids: Vec<String>,
    /// The body (UTF-8 JSON or a form).
    pub body: String,
}

/// The events of one window set in one format, encoded once into their requests: CloudEvents
/// batches of at most [`CLOUDEVENTS_PER_REQUEST`] events, Lago `{"events": [...]}` of at most
/// [`LAGO_PER_REQUEST`], one Stripe form per event. The encoding is deterministic (the same
/// events give the same bytes), and an outbox stores and re-sends exactly these bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    format: EventFormat,
    requests: Vec<Request>,
}

/// The stored shape of a batch (`pending/<id>.batch`, JSON).
#[derive(Serialize, Deserialize)]
struct Stored {
    gpumeter_outbox_batch: u32,
    format: String,
    requests: Vec<Request>,
}

impl Batch {
    /// Encodes `events`, all of `format`, into their requests.
    ///
    /// # Errors
    /// [`OutboxError::MixedFormat`] when an event is not of `format`; [`OutboxError::Json`] if
    /// an event cannot be serialized (not expected).
    pub fn from_events(format: EventFormat, events: &[UsageEvent]) -> Result<Batch, OutboxError> {
        for e in events {
            if event_format(e) != format {
                return Err(OutboxError::MixedFormat {
                    format,
                    event_id: e.id().to_string(),
                    event_format: event_format(e),
                });
            }
        }
        let requests = match format {
            EventFormat::CloudEvents => events
                .chunks(CLOUDEVENTS_PER_REQUEST)
                .map(|c| json_request(CLOUDEVENTS_BATCH_CONTENT_TYPE, c, serde_json::to_string(c)))
                .collect::<Result<_, _>>()?,
            EventFormat::Lago => events
                .chunks(LAGO_PER_REQUEST)
                .map(|c| {
                    let body = serde_json::to_string(&serde_json::json!({ "events": c }));
                    json_request(LAGO_CONTENT_TYPE, c, body)
                })
                .collect::<Result<_, _>>()?,
            EventFormat::Stripe => events.iter().filter_map(stripe_request).collect(),
        };
        Ok(Batch { format, requests })
    }

    /// The events' format.
    pub fn format(&self) -> EventFormat {
        self.format
    }

    /// The requests, in sending order.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// The idempotency keys of every event, in sending order.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.requests
            .iter()
            .flat_map(|r| r.ids.iter().map(String::as_str))
    }

    /// How many events the batch carries.
    pub fn event_count(&self) -> usize {
        self.requests.iter().map(|r| r.ids.len()).sum()
    }

    /// The stored bytes (JSON).
    pub(super) fn to_stored(&self) -> Result<Vec<u8>, OutboxError> {
        let stored = Stored {
            gpumeter_outbox_batch: STORED_VERSION,
            format: self.format.as_str().to_string(),
            requests: self.requests.clone(),
        };
        Ok(serde_json::to_vec(&stored)?)
    }

    /// A batch from its stored bytes; `Err` gives the reason it cannot be read.
    pub(super) fn from_stored(bytes: &[u8]) -> Result<Batch, String> {
        let stored: Stored = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if stored.gpumeter_outbox_batch != STORED_VERSION {
            return Err(format!(
                "stored batch version {} (this agent reads {STORED_VERSION})",
                stored.gpumeter_outbox_batch
            ));
        }
        let format = match stored.format.as_str() {
            "cloudevents" => EventFormat::CloudEvents,
            "stripe" => EventFormat::Stripe,
            "lago" => EventFormat::Lago,
            other => return Err(format!("unknown event format `{other}`")),
        };
        Ok(Batch {
            format,
            requests: stored.requests,
        })
    }
}

/// The format of one event.
fn event_format(e: &UsageEvent) -> EventFormat {
    match e {
        UsageEvent::CloudEvents(_) => EventFormat::CloudEvents,
        UsageEvent::Stripe(_) => EventFormat::Stripe,
        UsageEvent::Lago(_) => EventFormat::Lago,
    }
}

/// A JSON request carrying `events`.
fn json_request(
    content_type: &str,
    events: &[UsageEvent],
    body: Result<String, serde_json::Error>,
) -> Result<Request, OutboxError> {
    Ok(Request {
        content_type: content_type.to_string(),
        ids: events.iter().map(|e| e.id().to_string()).collect(),
        body: body?,
    })
}

/// The form of one Stripe meter event, with the fields of Stripe's
/// `POST /v1/billing/meter_events` (docs/INTEGRATIONS.md, "Stripe"); `None` for another format
/// (ruled out by [`Batch::from_events`]).
fn stripe_request(e: &UsageEvent) -> Option<Request> {
    let UsageEvent::Stripe(e) = e else {
        return None;
    };
    let body = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("event_name", &e.event_name)
        .append_pair("identifier", &e.identifier)
        .append_pair("timestamp", &e.timestamp.to_string())
        .append_pair("payload[stripe_customer_id]", &e.payload.stripe_customer_id)
        .append_pair("payload[value]", &e.payload.value)
        .finish();
    Some(Request {
        content_type: STRIPE_CONTENT_TYPE.to_string(),
        ids: vec![e.identifier.clone()],
        body,
    })
}
