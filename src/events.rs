//! Usage events: a [`UsageReport`] as events for a metering or billing service — CloudEvents
//! 1.0 in the shape OpenMeter ingests, Stripe meter events, Lago events — one event per usage
//! row of a *closed* window, each with a deterministic idempotency key so that a re-sent window
//! is dropped by the receiver's deduplication instead of being billed twice.
//!
//! ```
//! use gpumeter::core::{ActivityRecord, CopyDirection, DeviceInfo, Work};
//! use gpumeter::events::{usage_events, EventFormat, EventOptions};
//! use gpumeter::{Meter, MeterConfig};
//! let mut meter = Meter::new(MeterConfig::default());
//! let gpu = meter.register_device(DeviceInfo::bare("GPU-1", 0));
//! let copy = Work::Memcpy { bytes: 4096, direction: CopyDirection::HostToDevice };
//! meter.push(ActivityRecord::new(gpu, 1_796_083_200_000_000_000, 1_796_083_200_000_307_197, copy));
//! let report = meter.finish()?;
//! let events = usage_events(&report, &EventOptions::new(EventFormat::CloudEvents))?;
//! let lines = gpumeter::events::to_json_lines(&events.events)?;
//! assert!(lines.starts_with(r#"{"specversion":"1.0","id":""#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Which rows become events
//!
//! The report is checked first as every reader checks it ([`gpumeter_core::check_report`]:
//! its digest, one row per key, no zero rows, rows on window edges, totals, bounds, tenant
//! names), and it must be *complete* ([`UsageReport::is_complete`]: not a snapshot, no `.gmr`
//! recording without its end frame), unless [`EventOptions::allow_incomplete`] is set; then
//! [`UsageEvents::incomplete`] says why it is not, for the caller's warning.
//!
//! Every row of [`UsageReport::usage`] (one per tenant, device, UTC window and meter with a
//! non-zero quantity) whose window is *closed*: a window the meter can no longer change. A
//! complete report of files is final, so all its windows are closed
//! ([`EventOptions::closed_before_ns`] `None`, the default) — provided the report holds every
//! input with usage in them: the key does not name the inputs, so two reports that each hold
//! part of one device's window (two recordings of one GPU in the same hour, metered apart)
//! give events with the same key and different quantities, and a deduplicating receiver keeps
//! only the first. Meter a window's inputs together (or merge the reports) before sending it:
//! only the one owner of a device's windows may send them (`docs/INTEGRATIONS.md`). A live meter's last windows may still grow: set `closed_before_ns` to
//! an instant `T` (ns since the Unix epoch) before which nothing can arrive any more — for
//! gpumeter's meter, the latest record time it has seen minus its reordering horizon
//! ([`crate::MeterConfig`], 60 s by default), since a record later than that is counted as loss,
//! not usage — and only rows whose window *ends* at or before `T` are sent; the others are
//! counted in [`UsageEvents::open_rows`] and sent by a later call once closed. Rows of meters
//! the mapping leaves out ([`EventMap::only_mapped_meters`]) are counted in
//! [`UsageEvents::unmapped_meter_rows`]. Events come in the report's row order (device key,
//! window, meter, tenant).
//!
//! # The idempotency key
//!
//! [`idempotency_key`]: the SHA-256, as 64 lowercase hexadecimal digits, of the UTF-8 bytes of
//! the RFC 8785 (JCS) canonical JSON of the array
//! `[tenant, device_key, window_start, window_seconds, meter, metering_policy]`, six JSON
//! strings: the tenant as in the report (not the mapped customer id), the device key, the
//! window start as RFC 3339 UTC with seconds precision and a `Z` (`2025-07-18T08:00:00Z`), the
//! window size in seconds as a decimal string (`"3600"`), the meter's name (`sm_ns`) and the
//! report's metering policy (`v1`). For example
//! `["alice","GPU-1","2026-12-01T00:00:00Z","3600","kernel_ns","v1"]` (no spaces; `"` and `\`
//! and control characters escaped as JSON does, everything else as is). A receiver recomputes
//! it from the event's own fields (the window size is `window_end` − `time`). The key is the
//! CloudEvents `id`, the Stripe `identifier` and the Lago `transaction_id`; it does not depend
//! on the format, the mapping or the quantity, so a window sent again — by a retry, or a
//! report metered again from the same inputs — carries the same key, and the same window of
//! another size (a 30 min run of a trace beside its 1 h run) another. A device key without a
//! GPU UUID names its source's content (`309220b5c1d2e3f4#0`, [`gpumeter_core::source_label`]),
//! never its file name: the same trace renamed, gzipped or gunzipped gives the same keys. A
//! *corrected* quantity for a window already sent also carries the same key, and a receiver
//! that deduplicates drops it: corrections are not expressible as events.
//!
//! # Formats (field names and limits from each system's documentation)
//!
//! - [`EventFormat::CloudEvents`]: a CloudEvents 1.0 JSON event as OpenMeter ingests it
//!   (<https://openmeter.io/docs/concepts/usage-events>; `POST /api/v1/events` accepts one event
//!   as `application/cloudevents+json` or a JSON array as
//!   `application/cloudevents-batch+json`, and answers 204): `specversion` `"1.0"`, `id` the
//!   key, `source` ([`EventMap::source`], default `gpumeter`), `type` (the meter's mapped
//!   [`MeterNames::event_type`], default the meter's name), `subject` (the tenant's mapped
//!   [`TenantIds::subject`], default the tenant), `time` the window start (RFC 3339 UTC),
//!   `datacontenttype` `application/json`, and `data` ([`CloudEventData`]) with the meter, the
//!   quantity as a decimal string, its unit, the tenant, the device and device key, the window
//!   end and the metering policy. OpenMeter deduplicates on (namespace, `source`, `id`).
//! - [`EventFormat::Stripe`]: a Stripe billing meter event, the body of
//!   `POST /v1/billing/meter_events` (<https://docs.stripe.com/api/billing/meter-event/create>):
//!   `event_name` (mapped [`MeterNames::stripe_event_name`], default the meter's name; at most
//!   100 characters), `payload` with `stripe_customer_id` (mapped
//!   [`TenantIds::stripe_customer_id`], default the tenant) and `value` (the quantity as a
//!   string of digits), `identifier` the key (64 characters; Stripe enforces uniqueness over a
//!   rolling period of at least 24 hours) and `timestamp` the window start in Unix seconds
//!   (Stripe takes only the past 35 days up to 5 minutes ahead: older windows are refused by
//!   Stripe, not here). Stripe refuses values of more than 15 significant digits (API version
//!   2026-04-22.dahlia, <https://docs.stripe.com/changelog/dahlia/2026-04-22/billing-meter-event-values-validation>):
//!   a quantity above [`STRIPE_MAX_VALUE`] (15 nines) is refused here with
//!   [`EventsError::ValueTooLarge`] naming the row, before anything is written — it is never
//!   rounded, split or sent as a float. Leave such meters out with
//!   [`EventMap::only_mapped_meters`].
//! - [`EventFormat::Lago`]: a Lago event, the `event` object of `POST /api/v1/events` (or an
//!   item of `events` in `POST /api/v1/events/batch`, up to 100 per request;
//!   <https://getlago.com/docs/api-reference/events/usage>): `transaction_id` the key,
//!   `external_subscription_id` (mapped [`TenantIds::lago_external_subscription_id`], default
//!   the tenant), `code` (mapped [`MeterNames::lago_code`], default the meter's name),
//!   `timestamp` the window start in Unix seconds, and `properties` ([`LagoProperties`]) with
//!   the quantity as a decimal string (a billable metric sums `quantity`), the unit, meter,
//!   tenant, device key, window end and metering policy.
//!
//! Quantities are gpumeter's exact `u128` integers in the meter's canonical unit (`ns`,
//! `SM·ns`, `B`, …): no unit conversion, never a float. `docs/INTEGRATIONS.md` tells how to
//! send each format and what each system can express.

mod cloudevents;
mod lago;
mod mapping;
mod stripe;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpumeter_core::time::{parse_rfc3339, rfc3339, NS_PER_SECOND};
use gpumeter_core::{MeterKind, UsageReport, UsageRow};
use serde::Serialize;
use sha2::{Digest, Sha256};

pub use cloudevents::{CloudEvent, CloudEventData};
pub use lago::{LagoEvent, LagoProperties};
pub use mapping::{EventMap, MeterNames, TenantIds, UnmappedTenants};
pub use stripe::{StripeMeterEvent, StripePayload};

/// The largest quantity a Stripe meter event carries: 15 digits, the most Stripe accepts in a
/// meter event's `value` (values with more than 15 significant digits are refused with a 400
/// since API version 2026-04-22.dahlia).
pub const STRIPE_MAX_VALUE: u128 = 999_999_999_999_999;

/// The longest Stripe `event_name`, in characters (Stripe's API reference: "Max length: 100").
pub const STRIPE_EVENT_NAME_MAX: usize = 100;

/// The CloudEvents `source` when the mapping names none.
pub const DEFAULT_SOURCE: &str = "gpumeter";

/// The largest CloudEvent gpumeter writes, in bytes of its JSON: 64 KiB, the size CloudEvents
/// 1.0 ("Size Limits") says intermediaries must forward and producers should stay within.
pub const CLOUDEVENT_MAX_BYTES: usize = 65_536;

/// Which system's event shape to write (`--events-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum EventFormat {
    /// CloudEvents 1.0 JSON, as OpenMeter ingests it ([`CloudEvent`]).
    #[default]
    CloudEvents,
    /// Stripe billing meter events ([`StripeMeterEvent`]).
    Stripe,
    /// Lago usage events ([`LagoEvent`]).
    Lago,
}

impl EventFormat {
    /// The format's name on the command line: `cloudevents`, `stripe`, `lago`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventFormat::CloudEvents => "cloudevents",
            EventFormat::Stripe => "stripe",
            EventFormat::Lago => "lago",
        }
    }
}

impl std::fmt::Display for EventFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything that can go wrong turning usage into events. Nothing is written when any row
/// fails: events are built whole first.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventsError {
    /// The mapping file cannot be read.
    #[error("{}: cannot read the events mapping: {source}", path.display())]
    MapIo {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The mapping file is not valid: not TOML, an unknown key (a typo is never ignored), a
    /// tenant that is not a tenant name, a meter gpumeter does not have, an empty or too long
    /// id or name. Prints as `file:line:column: <the line as written>: what is wrong`.
    #[error("{file}:{line}:{column}: {text}: {message}")]
    Map {
        /// The file name as given.
        file: String,
        /// Line, from 1.
        line: u32,
        /// Column in characters, from 1.
        column: u32,
        /// The offending line as written (trimmed, at most 80 characters).
        text: String,
        /// What is wrong (the TOML parser's or gpumeter's message).
        message: String,
    },
    /// The mapping says `unmapped_tenants = "refuse"` and names no id of this format for a
    /// tenant that has usage.
    #[error(
        "usage[{row}]: tenant `{tenant}` has no {field} in the events mapping, which refuses \
         unmapped tenants (unmapped_tenants = \"refuse\")"
    )]
    UnmappedTenant {
        /// Index of the row in the report's `usage`.
        row: usize,
        /// The tenant.
        tenant: String,
        /// The mapping field that is missing (`stripe_customer_id`, …).
        field: &'static str,
    },
    /// A quantity is larger than the format carries exactly ([`STRIPE_MAX_VALUE`] for Stripe);
    /// it is refused, never rounded, split or clamped.
    #[error(
        "usage[{row}] (tenant `{tenant}`, device {device_key}, window {window_start}, \
         {meter}): quantity {quantity} has more than 15 digits, more than a {format} event's \
         value carries (at most {limit}); leave the meter out of the events \
         (only_mapped_meters in the events mapping) or send another format"
    )]
    ValueTooLarge {
        /// Index of the row in the report's `usage`.
        row: usize,
        /// The row's tenant.
        tenant: String,
        /// The row's device key.
        device_key: String,
        /// The row's window start.
        window_start: String,
        /// The row's meter.
        meter: MeterKind,
        /// The quantity.
        quantity: u128,
        /// The largest quantity the format carries.
        limit: u128,
        /// The format.
        format: EventFormat,
    },
    /// A usage row or the report cannot be read as events (a `window_start` that is not
    /// RFC 3339 or not on an edge of the report's windows, a window past year 2554, a report
    /// whose `window_seconds` is 0, a row with the key of an earlier row).
    #[error("usage[{row}].{field}: {reason}")]
    Row {
        /// Index of the row in the report's `usage`.
        row: usize,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The events could not be serialized (not expected: every field is a string or integer).
    #[error("cannot write the events as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The report fails the checks every reader makes ([`gpumeter_core::check_report`]): a
    /// bad digest, two rows with one key, a zero row, a row off the window edges, totals that
    /// disagree with the rows, usage a device cannot do, tenant names that look alike.
    #[error("the usage report: {0}")]
    Check(Box<gpumeter_core::ReportCheckError>),
    /// The report is incomplete ([`UsageReport::is_complete`]) and
    /// [`EventOptions::allow_incomplete`] is not set: its events would be final for windows
    /// that may still grow, with the ids the complete windows will have.
    #[error(
        "the usage report is incomplete (\"complete\": false: {why}): its last windows may \
         still grow, and their events would carry the ids of the complete windows, so a \
         receiver would keep the partial quantities; send the events of a complete report, or \
         allow it with --allow-incomplete"
    )]
    Incomplete {
        /// Why ([`UsageReport::incomplete_because`]).
        why: &'static str,
    },
    /// Two meters would be sent under one event name (`type`, `event_name` or `code`): the
    /// receiver would add their quantities, in different units, into one meter.
    #[error(
        "usage[{row}]: {meter} would be sent as `{name}`, the {format} name {first_meter} of \
         usage[{first_row}] has: a receiver would add their quantities into one meter; give \
         each meter its own name in the events mapping"
    )]
    SharedEventName {
        /// The later row.
        row: usize,
        /// Its meter.
        meter: MeterKind,
        /// The name both would be sent under, escaped.
        name: String,
        /// The format.
        format: EventFormat,
        /// The earlier row.
        first_row: usize,
        /// Its meter.
        first_meter: MeterKind,
    },
    /// A CloudEvent over [`CLOUDEVENT_MAX_BYTES`] (the mapping's names are that long).
    #[error(
        "usage[{row}]: its CloudEvent is {bytes} bytes of JSON, more than the {limit} bytes \
         CloudEvents 1.0 says every intermediary forwards; shorten the events mapping's names"
    )]
    EventTooLarge {
        /// The row.
        row: usize,
        /// The event's size.
        bytes: usize,
        /// [`CLOUDEVENT_MAX_BYTES`].
        limit: usize,
    },
}

/// The idempotency key of a usage row: SHA-256 (64 lowercase hex digits) of the RFC 8785
/// canonical JSON of `[tenant, device_key, window_start, window_seconds, meter,
/// metering_policy]`, `window_seconds` written as a decimal string (see the
/// [module documentation](self#the-idempotency-key)). `window_start` must be written as gpumeter
/// writes it (RFC 3339 UTC, seconds precision, `Z`); [`usage_events`] normalizes it first.
///
/// # Errors
/// [`EventsError::Row`] (field `id`; row 0 here, the row's index from [`usage_events`]) if the
/// array cannot be canonicalized, which does not happen for strings.
pub fn idempotency_key(
    tenant: &str,
    device_key: &str,
    window_start: &str,
    window_seconds: u64,
    meter: &str,
    metering_policy: &str,
) -> Result<String, EventsError> {
    let parts = serde_json::json!([
        tenant,
        device_key,
        window_start,
        window_seconds.to_string(),
        meter,
        metering_policy
    ]);
    let bytes = gpumeter_core::report::canonical_json(&parts).map_err(|e| EventsError::Row {
        row: 0,
        field: "id",
        reason: e.to_string(),
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// How to turn a report into events.
#[derive(Debug, Clone, Default)]
pub struct EventOptions<'a> {
    /// The event shape.
    pub format: EventFormat,
    /// The mapping (`None`: every id and name is gpumeter's own, source `gpumeter`).
    pub map: Option<&'a EventMap>,
    /// Only windows that end at or before this instant (ns since the Unix epoch) are closed
    /// and sent; `None` (a report of files): every window is closed. See the
    /// [module documentation](self#which-rows-become-events).
    pub closed_before_ns: Option<u64>,
    /// Send the events of an incomplete report too (`--allow-incomplete`): a snapshot's or an
    /// unfinished recording's windows become final events with the ids of the complete
    /// windows. `false` (the default): [`EventsError::Incomplete`].
    pub allow_incomplete: bool,
}

impl EventOptions<'_> {
    /// Options for `format`, no mapping, every window closed, incomplete reports refused.
    pub fn new(format: EventFormat) -> Self {
        EventOptions {
            format,
            map: None,
            closed_before_ns: None,
            allow_incomplete: false,
        }
    }
}

/// One usage event in one of the formats; serializes as that format's JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum UsageEvent {
    /// CloudEvents.
    CloudEvents(CloudEvent),
    /// Stripe.
    Stripe(StripeMeterEvent),
    /// Lago.
    Lago(LagoEvent),
}

impl UsageEvent {
    /// The idempotency key (`id`, `identifier` or `transaction_id`).
    pub fn id(&self) -> &str {
        match self {
            UsageEvent::CloudEvents(e) => &e.id,
            UsageEvent::Stripe(e) => &e.identifier,
            UsageEvent::Lago(e) => &e.transaction_id,
        }
    }
}

/// The events of a report and the rows not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageEvents {
    /// One per sent row, in the report's row order.
    pub events: Vec<UsageEvent>,
    /// Rows of windows not closed yet ([`EventOptions::closed_before_ns`]).
    pub open_rows: usize,
    /// Rows of meters the mapping leaves out ([`EventMap::only_mapped_meters`]).
    pub unmapped_meter_rows: usize,
    /// Why the report is incomplete, when [`EventOptions::allow_incomplete`] let its events
    /// be built anyway (the caller warns: these events are final for windows that may still
    /// grow); `None` for a complete report.
    pub incomplete: Option<&'static str>,
}

/// The events of every usage row of a closed window of `report`.
///
/// # Errors
/// [`EventsError::Check`] for a report that fails the checks of every reader (a bad digest,
/// a row off the window edges, two rows with one key, a zero row, …);
/// [`EventsError::Incomplete`] for an incomplete report without
/// [`EventOptions::allow_incomplete`]; [`EventsError::UnmappedTenant`] when the mapping
/// refuses a tenant it has no id for, [`EventsError::ValueTooLarge`] for a Stripe quantity
/// over [`STRIPE_MAX_VALUE`], [`EventsError::SharedEventName`] when two meters would be sent
/// under one name, [`EventsError::EventTooLarge`] for a CloudEvent over
/// [`CLOUDEVENT_MAX_BYTES`]; each names the first such row (`usage[i]`), and no event is
/// returned.
pub fn usage_events(
    report: &UsageReport,
    options: &EventOptions<'_>,
) -> Result<UsageEvents, EventsError> {
    let incomplete = checked(report, options)?;
    let default_map = EventMap::default();
    let map = options.map.unwrap_or(&default_map);
    let format = options.format;
    let window_ns = window_ns(report)?;
    let mut out = UsageEvents {
        events: Vec::with_capacity(report.usage.len()),
        open_rows: 0,
        unmapped_meter_rows: 0,
        incomplete,
    };
    // Each event name's first (meter, row): two meters under one name would be added into one
    // meter by the receiver. (Two rows with one key are refused by the check.)
    let mut names: BTreeMap<&str, (MeterKind, usize)> = BTreeMap::new();
    for (i, row) in report.usage.iter().enumerate() {
        let bad = |field: &'static str, reason: String| EventsError::Row {
            row: i,
            field,
            reason,
        };
        // On a window edge: the check refuses any other start (a window of its own would get
        // a key of its own, so its usage could be sent twice).
        let start_ns = parse_rfc3339(&row.window_start).map_err(|e| bad("window_start", e))?;
        let end_ns = start_ns
            .checked_add(window_ns)
            .ok_or_else(|| bad("window_start", "its window ends after 2554".into()))?;
        if options.closed_before_ns.is_some_and(|cut| end_ns > cut) {
            out.open_rows += 1;
            continue;
        }
        if map.only_mapped_meters && !map.meters.contains_key(&row.meter) {
            out.unmapped_meter_rows += 1;
            continue;
        }
        let window_start = rfc3339(start_ns);
        let window_end = rfc3339(end_ns);
        let id = idempotency_key(
            &row.tenant,
            &row.device_key,
            &window_start,
            report.window_seconds,
            row.meter.as_str(),
            &report.metering_policy,
        )
        .map_err(|e| match e {
            EventsError::Row { field, reason, .. } => bad(field, reason),
            e => e,
        })?;
        let name = map.meter_name(row.meter, format);
        one_meter_per_name(&mut names, name, row.meter, i, format)?;
        let customer = match map.customer(&row.tenant, format) {
            (Some(c), _) => c.to_string(),
            (None, field) => {
                return Err(EventsError::UnmappedTenant {
                    row: i,
                    tenant: row.tenant.clone(),
                    field,
                })
            }
        };
        let fields = RowEvent {
            row,
            id,
            name: name.to_string(),
            customer,
            quantity: row.quantity.0.to_string(),
            unit: row.meter.canonical_unit().to_string(),
            seconds: start_ns / NS_PER_SECOND,
            window_start,
            window_end,
        };
        let policy = &report.metering_policy;
        let event = match format {
            EventFormat::CloudEvents => {
                UsageEvent::CloudEvents(cloudevents::encode(fields, &map.source, policy, i)?)
            }
            EventFormat::Stripe => UsageEvent::Stripe(stripe::encode(fields, i)?),
            EventFormat::Lago => UsageEvent::Lago(lago::encode(fields, policy)),
        };
        out.events.push(event);
    }
    Ok(out)
}

/// One usage row as every format sends it: its key, the receiver's names and ids from the
/// mapping, its quantity and its window.
struct RowEvent<'a> {
    /// The row.
    row: &'a UsageRow,
    /// The idempotency key ([`idempotency_key`]).
    id: String,
    /// The meter's name for the format (mapped, else the meter's own).
    name: String,
    /// The tenant's id for the format (mapped, else the tenant).
    customer: String,
    /// The quantity, a decimal string of digits.
    quantity: String,
    /// The meter's canonical unit.
    unit: String,
    /// The window start, Unix seconds.
    seconds: u64,
    /// The window start, RFC 3339 UTC.
    window_start: String,
    /// The window end (exclusive), RFC 3339 UTC.
    window_end: String,
}

/// Checks `report` as every reader does and refuses an incomplete one unless
/// [`EventOptions::allow_incomplete`]; the answer is why it is incomplete, if it is.
fn checked(
    report: &UsageReport,
    options: &EventOptions<'_>,
) -> Result<Option<&'static str>, EventsError> {
    report
        .check()
        .map_err(|e| EventsError::Check(Box::new(e)))?;
    let incomplete = report.incomplete_because();
    if let Some(why) = incomplete {
        if !options.allow_incomplete {
            return Err(EventsError::Incomplete { why });
        }
    }
    Ok(incomplete)
}

/// The report's window in ns (not 0, no overflow).
fn window_ns(report: &UsageReport) -> Result<u64, EventsError> {
    report
        .window_seconds
        .checked_mul(NS_PER_SECOND)
        .filter(|&ns| ns > 0)
        .ok_or_else(|| EventsError::Row {
            row: 0,
            field: "window_seconds",
            reason: format!(
                "{} s windows are empty or overflow u64 ns",
                report.window_seconds
            ),
        })
}

/// Records `name` as `meter`'s (row `row`), refusing a name an earlier row's other meter has:
/// the receiver would add the two meters' quantities into one meter.
fn one_meter_per_name<'m>(
    names: &mut BTreeMap<&'m str, (MeterKind, usize)>,
    name: &'m str,
    meter: MeterKind,
    row: usize,
    format: EventFormat,
) -> Result<(), EventsError> {
    match names.get(name) {
        Some(&(first_meter, first_row)) if first_meter != meter => {
            Err(EventsError::SharedEventName {
                row,
                meter,
                name: gpumeter_core::text::printable(name).into_owned(),
                format,
                first_row,
                first_meter,
            })
        }
        Some(_) => Ok(()),
        None => {
            names.insert(name, (meter, row));
            Ok(())
        }
    }
}

/// The events as JSON Lines: one compact JSON object per line, each line ending in `\n` (an
/// empty string for no events). The same events give the same bytes.
///
/// # Errors
/// [`EventsError::Json`] if an event cannot be serialized (not expected).
pub fn to_json_lines(events: &[UsageEvent]) -> Result<String, EventsError> {
    let mut out = String::with_capacity(events.len() * 400);
    for e in events {
        out.push_str(&serde_json::to_string(e)?);
        out.push('\n');
    }
    Ok(out)
}
