//! Usage events: a [`UsageReport`] as events for a metering or billing service — CloudEvents
//! 1.0 in the shape OpenMeter ingests, Stripe meter events, Lago events — one event per usage
//! row of a *closed* window, each with a deterministic idempotency key so that a re-sent window
//! is dropped by the receiver's deduplication instead of being billed twice.
//!
//! ```
//! use gpumeter::events::{usage_events, EventFormat, EventOptions};
//! # let report: gpumeter::UsageReport = serde_json::from_str(r#"{"schema":"gpumeter.usage/v1",
//! #  "metering_policy":"v1","window_seconds":3600,"sources":[],"devices":[],
//! #  "records":{"kernel":0,"memcpy":0,"memset":0,"skipped":{}},"loss":[],
//! #  "usage":[{"tenant":"alice","device":0,"device_key":"GPU-1","window_start":"2026-12-01T00:00:00Z",
//! #  "meter":"kernel_ns","quantity":"307197"}],"totals":[],"open_allocations":[],"warnings":[],
//! #  "sha256":""}"#)?;
//! let events = usage_events(&report, &EventOptions::new(EventFormat::CloudEvents))?;
//! let lines = gpumeter::events::to_json_lines(&events.events)?;
//! assert!(lines.starts_with(r#"{"specversion":"1.0","id":""#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Which rows become events
//!
//! Every row of [`UsageReport::usage`] (one per tenant, device, UTC window and meter with a
//! non-zero quantity) whose window is *closed*: a window the meter can no longer change. A
//! report of files is final, so all its windows are closed ([`EventOptions::closed_before_ns`]
//! `None`, the default) — provided the report holds every input with usage in them: the key
//! does not name the inputs, so two reports that each hold part of one device's window (two
//! recordings of one GPU in the same hour, metered apart) give events with the same key and
//! different quantities, and a deduplicating receiver keeps only the first. Meter a window's
//! inputs together (or merge the reports) before sending it. A live meter's last windows may still grow: set `closed_before_ns` to
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
//! `[tenant, device_key, window_start, meter, metering_policy]`, five JSON strings: the tenant
//! as in the report (not the mapped customer id), the device key, the window start as RFC 3339
//! UTC with seconds precision and a `Z` (`2025-07-18T08:00:00Z`), the meter's name (`sm_ns`)
//! and the report's metering policy (`v1`). For example
//! `["alice","GPU-1","2026-12-01T00:00:00Z","kernel_ns","v1"]` (no spaces; `"` and `\` and
//! control characters escaped as JSON does, everything else as is). A receiver recomputes it
//! from the event's own fields. The key is the CloudEvents `id`, the Stripe `identifier` and
//! the Lago `transaction_id`; it does not depend on the format, the mapping or the quantity, so
//! a window sent again — by a retry, or a report metered again from the same files — carries
//! the same key. A device key without a GPU UUID names its source file
//! (`trace.json.gz@1a2b3c4d#0`), so the same bytes under another file name give other keys. A *corrected* quantity for a window already sent also carries the same key,
//! and a receiver that deduplicates drops it: corrections are not expressible as events.
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

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use gpumeter_core::time::{parse_rfc3339, rfc3339, NS_PER_SECOND};
use gpumeter_core::{MeterKind, UsageReport};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The largest quantity a Stripe meter event carries: 15 digits, the most Stripe accepts in a
/// meter event's `value` (values with more than 15 significant digits are refused with a 400
/// since API version 2026-04-22.dahlia).
pub const STRIPE_MAX_VALUE: u128 = 999_999_999_999_999;

/// The longest Stripe `event_name`, in characters (Stripe's API reference: "Max length: 100").
pub const STRIPE_EVENT_NAME_MAX: usize = 100;

/// The CloudEvents `source` when the mapping names none.
pub const DEFAULT_SOURCE: &str = "gpumeter";

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
}

/// The idempotency key of a usage row: SHA-256 (64 lowercase hex digits) of the RFC 8785
/// canonical JSON of `[tenant, device_key, window_start, meter, metering_policy]` (see the
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
    meter: &str,
    metering_policy: &str,
) -> Result<String, EventsError> {
    let parts = serde_json::json!([tenant, device_key, window_start, meter, metering_policy]);
    let bytes = gpumeter_core::report::canonical_json(&parts).map_err(|e| EventsError::Row {
        row: 0,
        field: "id",
        reason: e.to_string(),
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// What to do with a tenant the mapping has no id for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UnmappedTenants {
    /// Send the tenant's own name as the customer, subject or subscription id (the default:
    /// right when the receiver's ids are gpumeter's tenant names).
    #[default]
    TenantName,
    /// Refuse the whole batch with [`EventsError::UnmappedTenant`] naming the first row whose
    /// tenant has no id for the format (right for Stripe, whose customer ids are `cus_…`).
    Refuse,
}

/// One tenant's ids in each system (`[tenants."NAME"]` of the mapping). An absent id is the
/// tenant's name unless the mapping refuses unmapped tenants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantIds {
    /// CloudEvents `subject` (OpenMeter: the subject a customer's usage is attributed to).
    pub subject: Option<String>,
    /// Stripe customer id (`cus_…`), sent as `payload.stripe_customer_id`.
    pub stripe_customer_id: Option<String>,
    /// Lago subscription's external id, sent as `external_subscription_id`.
    pub lago_external_subscription_id: Option<String>,
}

/// One meter's names in each system (`[meters.METER]` of the mapping). An absent name is the
/// meter's own (`sm_ns`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MeterNames {
    /// CloudEvents `type` (OpenMeter: a meter's `eventType`).
    pub event_type: Option<String>,
    /// Stripe meter's `event_name` (at most [`STRIPE_EVENT_NAME_MAX`] characters).
    pub stripe_event_name: Option<String>,
    /// Lago billable metric's `code`.
    pub lago_code: Option<String>,
}

/// The events mapping (TOML): tenants to each system's ids, meters to each system's names.
///
/// ```toml
/// source = "gpumeter/eu-west-1"     # CloudEvents source (default "gpumeter")
/// unmapped_tenants = "refuse"       # or "tenant-name" (the default)
/// only_mapped_meters = true         # send only the meters below (default false: all)
///
/// [tenants."alice"]
/// subject = "customer-alice"
/// stripe_customer_id = "cus_NciAYcXfLnqBoz"
/// lago_external_subscription_id = "sub_alice_gpu"
///
/// [meters.sm_ns]
/// type = "gpu_sm_ns"
/// stripe_event_name = "gpu_sm_ns"
/// lago_code = "gpu_sm_ns"
/// ```
///
/// Tenant keys are tenant names (the rule of `--tenant`) or `unattributed`/`idle`; meter keys
/// are gpumeter's meter names. Ids and names are non-empty, without control characters or
/// surrounding spaces. Unknown keys are errors. There is no unit conversion: quantities stay
/// exact integers in the meter's canonical unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMap {
    /// CloudEvents `source` (default [`DEFAULT_SOURCE`]). OpenMeter deduplicates on
    /// (`source`, `id`): keep it fixed for a deployment, or re-sent windows count again.
    pub source: String,
    /// What to do with a tenant without an id for the format.
    pub unmapped_tenants: UnmappedTenants,
    /// Send only the meters that have a `[meters.METER]` table (rows of other meters are
    /// counted in [`UsageEvents::unmapped_meter_rows`], not sent).
    pub only_mapped_meters: bool,
    /// Tenants' ids, by gpumeter tenant name.
    pub tenants: BTreeMap<String, TenantIds>,
    /// Meters' names.
    pub meters: BTreeMap<MeterKind, MeterNames>,
}

impl Default for EventMap {
    fn default() -> Self {
        EventMap {
            source: DEFAULT_SOURCE.to_string(),
            unmapped_tenants: UnmappedTenants::default(),
            only_mapped_meters: false,
            tenants: BTreeMap::new(),
            meters: BTreeMap::new(),
        }
    }
}

/// A non-empty id or name without control characters or surrounding whitespace (a mapping
/// value); the TOML parser attaches the value's place to the error.
#[derive(Debug, Clone)]
struct Text(String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Err(serde::de::Error::custom("must not be empty"));
        }
        if s.trim() != s {
            return Err(serde::de::Error::custom(
                "must not start or end with whitespace",
            ));
        }
        if let Some(c) = s.chars().find(|c| c.is_control()) {
            return Err(serde::de::Error::custom(format!(
                "must not hold control characters (U+{:04X})",
                u32::from(c)
            )));
        }
        Ok(Text(s))
    }
}

/// A tenant key of the mapping: a tenant name or one gpumeter writes itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct TenantKey(String);

impl<'de> Deserialize<'de> for TenantKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == gpumeter_core::UNATTRIBUTED || s == gpumeter_core::IDLE {
            return Ok(TenantKey(s));
        }
        match gpumeter_core::TenantName::parse(&s) {
            Ok(_) => Ok(TenantKey(s)),
            Err(e) => Err(serde::de::Error::custom(format!(
                "tenant `{}` is not a tenant name: {e}",
                gpumeter_core::text::printable(&s)
            ))),
        }
    }
}

/// A meter key of the mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct MeterKey(MeterKind);

impl<'de> Deserialize<'de> for MeterKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MeterKind::parse(&s).map(MeterKey).ok_or_else(|| {
            let known: Vec<&str> = MeterKind::ALL.iter().map(|m| m.as_str()).collect();
            serde::de::Error::custom(format!(
                "`{}` is not a gpumeter meter (meters: {})",
                gpumeter_core::text::printable(&s),
                known.join(", ")
            ))
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMap {
    source: Option<Text>,
    #[serde(default)]
    unmapped_tenants: UnmappedTenants,
    #[serde(default)]
    only_mapped_meters: bool,
    #[serde(default)]
    tenants: BTreeMap<TenantKey, RawTenant>,
    #[serde(default)]
    meters: BTreeMap<MeterKey, RawMeter>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    subject: Option<Text>,
    stripe_customer_id: Option<Text>,
    lago_external_subscription_id: Option<Text>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeter {
    #[serde(rename = "type")]
    event_type: Option<Text>,
    stripe_event_name: Option<toml::Spanned<Text>>,
    lago_code: Option<Text>,
}

impl EventMap {
    /// Reads a mapping file.
    ///
    /// # Errors
    /// [`EventsError::MapIo`] when it cannot be read; [`EventsError::Map`] as for
    /// [`EventMap::from_toml_str`].
    pub fn from_path(path: &Path) -> Result<EventMap, EventsError> {
        let text = std::fs::read_to_string(path).map_err(|source| EventsError::MapIo {
            path: path.to_path_buf(),
            source,
        })?;
        EventMap::from_toml_str(&path.display().to_string(), &text)
    }

    /// Parses a mapping; `file` names it in errors.
    ///
    /// # Errors
    /// [`EventsError::Map`] with the line and column of the offending key or value: not TOML,
    /// an unknown key, a tenant key that is not a tenant name, an unknown meter, an empty id or
    /// name (or one with control characters or surrounding spaces), a Stripe event name over
    /// [`STRIPE_EVENT_NAME_MAX`] characters.
    pub fn from_toml_str(file: &str, text: &str) -> Result<EventMap, EventsError> {
        let at = |span: Option<Range<usize>>, message: String| {
            let (line, column, line_text) = place(text, span.map_or(0, |s| s.start));
            EventsError::Map {
                file: file.to_string(),
                line,
                column,
                text: line_text,
                message,
            }
        };
        let raw: RawMap = toml::from_str(text).map_err(|e| at(e.span(), e.message().into()))?;
        let text_of = |t: Option<Text>| t.map(|t| t.0);
        let mut meters = BTreeMap::new();
        for (MeterKey(meter), m) in raw.meters {
            let stripe_event_name = match m.stripe_event_name {
                Some(name) => {
                    let n = name.get_ref().0.chars().count();
                    if n > STRIPE_EVENT_NAME_MAX {
                        return Err(at(
                            Some(name.span()),
                            format!(
                                "a Stripe event_name has at most {STRIPE_EVENT_NAME_MAX} \
                                 characters, this one {n}"
                            ),
                        ));
                    }
                    Some(name.into_inner().0)
                }
                None => None,
            };
            meters.insert(
                meter,
                MeterNames {
                    event_type: text_of(m.event_type),
                    stripe_event_name,
                    lago_code: text_of(m.lago_code),
                },
            );
        }
        Ok(EventMap {
            source: raw
                .source
                .map_or_else(|| DEFAULT_SOURCE.to_string(), |t| t.0),
            unmapped_tenants: raw.unmapped_tenants,
            only_mapped_meters: raw.only_mapped_meters,
            tenants: raw
                .tenants
                .into_iter()
                .map(|(TenantKey(name), t)| {
                    (
                        name,
                        TenantIds {
                            subject: text_of(t.subject),
                            stripe_customer_id: text_of(t.stripe_customer_id),
                            lago_external_subscription_id: text_of(t.lago_external_subscription_id),
                        },
                    )
                })
                .collect(),
            meters,
        })
    }

    /// The tenant's id for `format` (the mapped one, else the tenant's name), and the name of
    /// the mapping field.
    fn customer<'a>(
        &'a self,
        tenant: &'a str,
        format: EventFormat,
    ) -> (Option<&'a str>, &'static str) {
        let ids = self.tenants.get(tenant);
        let (id, field) = match format {
            EventFormat::CloudEvents => (ids.and_then(|t| t.subject.as_deref()), "subject"),
            EventFormat::Stripe => (
                ids.and_then(|t| t.stripe_customer_id.as_deref()),
                "stripe_customer_id",
            ),
            EventFormat::Lago => (
                ids.and_then(|t| t.lago_external_subscription_id.as_deref()),
                "lago_external_subscription_id",
            ),
        };
        match (id, self.unmapped_tenants) {
            (Some(id), _) => (Some(id), field),
            (None, UnmappedTenants::TenantName) => (Some(tenant), field),
            (None, UnmappedTenants::Refuse) => (None, field),
        }
    }

    /// The meter's name for `format`: the mapped one, else the meter's own.
    fn meter_name(&self, meter: MeterKind, format: EventFormat) -> &str {
        let names = self.meters.get(&meter);
        let mapped = match format {
            EventFormat::CloudEvents => names.and_then(|m| m.event_type.as_deref()),
            EventFormat::Stripe => names.and_then(|m| m.stripe_event_name.as_deref()),
            EventFormat::Lago => names.and_then(|m| m.lago_code.as_deref()),
        };
        mapped.unwrap_or(meter.as_str())
    }
}

/// `(line, column, the line's text)` of byte `offset` in `text`, line and column from 1 (the
/// column in characters); the text trimmed and cut at 80 characters.
fn place(text: &str, offset: usize) -> (u32, u32, String) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = text
        .get(line_start..offset)
        .map_or(0, |s| s.chars().count())
        + 1;
    let line_end = text
        .get(line_start..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |i| line_start + i);
    let line_text = text.get(line_start..line_end).unwrap_or_default().trim();
    let mut shown: String = line_text.chars().take(80).collect();
    if line_text.chars().count() > 80 {
        shown.push('…');
    }
    let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    (narrow(line), narrow(column), shown)
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
}

impl EventOptions<'_> {
    /// Options for `format`, no mapping, every window closed.
    pub fn new(format: EventFormat) -> Self {
        EventOptions {
            format,
            map: None,
            closed_before_ns: None,
        }
    }
}

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
    /// The idempotency key ([`idempotency_key`]).
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
    /// The idempotency key ([`idempotency_key`]).
    pub identifier: String,
    /// The window start, Unix seconds.
    pub timestamp: u64,
}

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
    /// The idempotency key ([`idempotency_key`]).
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
}

/// The events of every usage row of a closed window of `report`.
///
/// # Errors
/// [`EventsError::UnmappedTenant`] when the mapping refuses a tenant it has no id for,
/// [`EventsError::ValueTooLarge`] for a Stripe quantity over [`STRIPE_MAX_VALUE`],
/// [`EventsError::Row`] for a `window_start` that is not RFC 3339 or not on a window edge
/// (a multiple of `window_seconds` since the epoch) or a row with the same key as an earlier
/// one (the same tenant, device key, window and meter, however written); each names the first such
/// row (`usage[i]`), and no event is returned.
pub fn usage_events(
    report: &UsageReport,
    options: &EventOptions<'_>,
) -> Result<UsageEvents, EventsError> {
    let default_map = EventMap::default();
    let map = options.map.unwrap_or(&default_map);
    let format = options.format;
    let window_ns = report
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
        })?;
    let mut out = UsageEvents {
        events: Vec::with_capacity(report.usage.len()),
        open_rows: 0,
        unmapped_meter_rows: 0,
    };
    // Each key's first row: two rows with one key would be one event to a receiver that
    // deduplicates, which keeps the first quantity and drops the other.
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for (i, row) in report.usage.iter().enumerate() {
        let bad = |field: &'static str, reason: String| EventsError::Row {
            row: i,
            field,
            reason,
        };
        let start_ns = parse_rfc3339(&row.window_start).map_err(|e| bad("window_start", e))?;
        // A window starts on a multiple of its size; any other start would be a window of its
        // own with a key of its own, so its usage could be sent twice.
        if start_ns.checked_rem(window_ns) != Some(0) {
            return Err(bad(
                "window_start",
                format!(
                    "`{}` is not on a {} s window edge (windows are aligned to multiples of \
                     their size)",
                    gpumeter_core::text::printable(&row.window_start),
                    report.window_seconds
                ),
            ));
        }
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
            row.meter.as_str(),
            &report.metering_policy,
        )
        .map_err(|e| match e {
            EventsError::Row { field, reason, .. } => bad(field, reason),
            e => e,
        })?;
        if let Some(first) = seen.insert(id.clone(), i) {
            return Err(bad(
                "window_start",
                format!(
                    "the same tenant, device key, window ({window_start}) and meter as \
                     usage[{first}]: both would carry one idempotency key, and a receiver would \
                     keep only one of them (merge the rows first)"
                ),
            ));
        }
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
        let name = map.meter_name(row.meter, format).to_string();
        let quantity = row.quantity.0.to_string();
        let unit = row.meter.canonical_unit().to_string();
        let seconds = start_ns / NS_PER_SECOND;
        let event = match format {
            EventFormat::CloudEvents => UsageEvent::CloudEvents(CloudEvent {
                specversion: "1.0".into(),
                id,
                source: map.source.clone(),
                event_type: name,
                subject: customer,
                time: window_start,
                datacontenttype: "application/json".into(),
                data: CloudEventData {
                    meter: row.meter,
                    quantity,
                    unit,
                    tenant: row.tenant.clone(),
                    device: row.device,
                    device_key: row.device_key.clone(),
                    window_end,
                    metering_policy: report.metering_policy.clone(),
                },
            }),
            EventFormat::Stripe => {
                if row.quantity.0 > STRIPE_MAX_VALUE {
                    return Err(EventsError::ValueTooLarge {
                        row: i,
                        tenant: row.tenant.clone(),
                        device_key: row.device_key.clone(),
                        window_start,
                        meter: row.meter,
                        quantity: row.quantity.0,
                        limit: STRIPE_MAX_VALUE,
                        format,
                    });
                }
                UsageEvent::Stripe(StripeMeterEvent {
                    event_name: name,
                    payload: StripePayload {
                        stripe_customer_id: customer,
                        value: quantity,
                    },
                    identifier: id,
                    timestamp: seconds,
                })
            }
            EventFormat::Lago => UsageEvent::Lago(LagoEvent {
                transaction_id: id,
                external_subscription_id: customer,
                code: name,
                timestamp: seconds,
                properties: LagoProperties {
                    quantity,
                    unit,
                    meter: row.meter,
                    tenant: row.tenant.clone(),
                    device_key: row.device_key.clone(),
                    window_end,
                    metering_policy: report.metering_policy.clone(),
                },
            }),
        };
        out.events.push(event);
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(parts: [&str; 5]) -> String {
        idempotency_key(parts[0], parts[1], parts[2], parts[3], parts[4]).expect("key")
    }

    #[test]
    fn the_key_is_sha256_of_the_canonical_array() {
        let k = key(["alice", "GPU-1", "2026-12-01T00:00:00Z", "kernel_ns", "v1"]);
        let expected = hex::encode(Sha256::digest(
            br#"["alice","GPU-1","2026-12-01T00:00:00Z","kernel_ns","v1"]"#,
        ));
        assert_eq!(k, expected);
        assert_eq!(k.len(), 64);
    }

    #[test]
    fn each_part_changes_the_key_and_equal_parts_give_equal_keys() {
        let base = ["alice", "GPU-1", "2026-12-01T00:00:00Z", "kernel_ns", "v1"];
        let other = ["bob", "GPU-2", "2026-12-01T01:00:00Z", "sm_ns", "v2"];
        let k = key(base);
        assert_eq!(k, key(base));
        for i in 0..5 {
            let mut p = base;
            p[i] = other[i];
            assert_ne!(key(p), k, "changing part {i}");
        }
        // Boundaries are part of the encoding: moving a character between parts changes it.
        assert_ne!(
            key(["ab", "c", "t", "m", "v1"]),
            key(["a", "bc", "t", "m", "v1"])
        );
        assert_ne!(
            key(["a\",\"b", "c", "t", "m", "v1"]),
            key(["a", "b\",\"c", "t", "m", "v1"])
        );
    }

    fn report(window_seconds: u64, window_start: &str) -> UsageReport {
        let text = format!(
            r#"{{"schema":"gpumeter.usage/v1","metering_policy":"v1",
            "window_seconds":{window_seconds},"sources":[],"devices":[],
            "records":{{"kernel":0,"memcpy":0,"memset":0,"skipped":{{}}}},"loss":[],
            "usage":[{{"tenant":"alice","device":0,"device_key":"GPU-1",
            "window_start":"{window_start}","meter":"kernel_ns","quantity":"7"}}],
            "totals":[],"open_allocations":[],"warnings":[],"sha256":""}}"#
        );
        serde_json::from_str(&text).expect("report")
    }

    #[test]
    fn a_window_start_off_the_window_edges_is_refused_not_keyed() {
        let options = EventOptions::new(EventFormat::CloudEvents);
        // On an edge, written with an offset: the key of the `Z` form.
        let on_edge =
            usage_events(&report(3600, "2026-12-01T01:00:00+01:00"), &options).expect("an edge");
        assert_eq!(
            on_edge.events[0].id(),
            key(["alice", "GPU-1", "2026-12-01T00:00:00Z", "kernel_ns", "v1"])
        );
        // Half past: a window of its own would get a key of its own.
        let msg = usage_events(&report(3600, "2026-12-01T00:30:00Z"), &options)
            .expect_err("off the edges")
            .to_string();
        assert!(
            msg.starts_with("usage[0].window_start: `2026-12-01T00:30:00Z` is not on a 3600 s"),
            "{msg}"
        );
        // A 60 s report's minute edges are edges.
        assert!(usage_events(&report(60, "2026-12-01T00:31:00Z"), &options).is_ok());
        // Zero-second windows: an error, not a division by zero.
        let msg = usage_events(&report(0, "2026-12-01T00:00:00Z"), &options)
            .expect_err("zero windows")
            .to_string();
        assert!(msg.contains("window_seconds"), "{msg}");
    }

    #[test]
    fn two_rows_with_one_key_are_refused_not_sent_as_duplicates() {
        let mut r = report(3600, "2026-12-01T00:00:00Z");
        let mut again = r.usage[0].clone();
        again.window_start = "2026-12-01T01:00:00+01:00".into();
        r.usage.push(again);
        let msg = usage_events(&r, &EventOptions::new(EventFormat::Lago))
            .expect_err("one key twice")
            .to_string();
        assert!(
            msg.starts_with(
                "usage[1].window_start: the same tenant, device key, window \
                 (2026-12-01T00:00:00Z) and meter as usage[0]"
            ),
            "{msg}"
        );
        // Another meter is another key.
        r.usage[1].meter = MeterKind::SmNs;
        assert_eq!(
            usage_events(&r, &EventOptions::new(EventFormat::Lago))
                .expect("two keys")
                .events
                .len(),
            2
        );
    }

    #[test]
    fn mapping_errors_name_the_line_column_and_field() {
        let text = "source = \"s\"\n[tenants.alice]\nstripe_customer_id = \"\"\n";
        let e = EventMap::from_toml_str("m.toml", text).expect_err("empty id");
        let msg = e.to_string();
        assert!(
            msg.starts_with("m.toml:3:22: stripe_customer_id = \"\": "),
            "{msg}"
        );
        assert!(msg.contains("must not be empty"), "{msg}");

        let text = "[meters.sm_ns]\nstripe_event_nam = \"x\"\n";
        let msg = EventMap::from_toml_str("m.toml", text)
            .expect_err("typo")
            .to_string();
        assert!(msg.starts_with("m.toml:2:1: stripe_event_nam"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");

        let text = "[meters.sm_nss]\ntype = \"x\"\n";
        let msg = EventMap::from_toml_str("m.toml", text)
            .expect_err("meter")
            .to_string();
        assert!(msg.starts_with("m.toml:1:9: [meters.sm_nss]"), "{msg}");
        assert!(msg.contains("is not a gpumeter meter"), "{msg}");

        let text = "[tenants.\"Idle\"]\nsubject = \"x\"\n";
        let msg = EventMap::from_toml_str("m.toml", text)
            .expect_err("reserved tenant")
            .to_string();
        assert!(msg.starts_with("m.toml:1:10: "), "{msg}");
        assert!(msg.contains("is not a tenant name"), "{msg}");

        let long = "x".repeat(101);
        let text = format!("[meters.sm_ns]\nstripe_event_name = \"{long}\"\n");
        let msg = EventMap::from_toml_str("m.toml", &text)
            .expect_err("long")
            .to_string();
        assert!(msg.starts_with("m.toml:2:21: "), "{msg}");
        assert!(
            msg.contains("at most 100 characters, this one 101"),
            "{msg}"
        );
    }

    #[test]
    fn a_mapping_reads_every_field() {
        let text = "source = \"gpumeter/eu\"\nunmapped_tenants = \"refuse\"\n\
                    only_mapped_meters = true\n[tenants.\"alice smith\"]\nsubject = \"c-1\"\n\
                    stripe_customer_id = \"cus_1\"\nlago_external_subscription_id = \"sub_1\"\n\
                    [meters.sm_ns]\ntype = \"gpu.sm\"\nstripe_event_name = \"gpu_sm\"\n\
                    lago_code = \"gpu_sm_code\"\n";
        let m = EventMap::from_toml_str("m.toml", text).expect("valid");
        assert_eq!(m.source, "gpumeter/eu");
        assert_eq!(m.unmapped_tenants, UnmappedTenants::Refuse);
        assert!(m.only_mapped_meters);
        let t = &m.tenants["alice smith"];
        assert_eq!(t.subject.as_deref(), Some("c-1"));
        assert_eq!(t.stripe_customer_id.as_deref(), Some("cus_1"));
        assert_eq!(t.lago_external_subscription_id.as_deref(), Some("sub_1"));
        assert_eq!(
            m.meter_name(MeterKind::SmNs, EventFormat::CloudEvents),
            "gpu.sm"
        );
        assert_eq!(m.meter_name(MeterKind::SmNs, EventFormat::Stripe), "gpu_sm");
        assert_eq!(
            m.meter_name(MeterKind::SmNs, EventFormat::Lago),
            "gpu_sm_code"
        );
        assert_eq!(
            m.meter_name(MeterKind::KernelNs, EventFormat::Lago),
            "kernel_ns"
        );
        assert_eq!(
            EventMap::from_toml_str("e.toml", "").expect("empty"),
            EventMap::default()
        );
    }
}
