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

/// A non-empty id or name without control characters, bidirectional formatting characters,
/// line or paragraph separators ([`gpumeter_core::text::is_escaped`]), characters a person
/// cannot see ([`gpumeter_core::tenant::unseen`], as in tenant names) or surrounding
/// whitespace (a mapping value): each receiver shows these names to people, where such a
/// character would reorder or hide text. The TOML parser attaches the value's place to the
/// error.
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
        if let Some(c) = s.chars().find(|&c| gpumeter_core::text::is_escaped(c)) {
            return Err(serde::de::Error::custom(format!(
                "must not hold control or bidirectional formatting characters (U+{:04X})",
                u32::from(c)
            )));
        }
        // Nor characters a person cannot see, as in tenant names (zero-width spaces, U+FEFF,
        // a Hangul filler): two ids that read alike would be two meters or customers.
        if let Some((c, why)) = s.chars().find_map(|c| {
            gpumeter_core::tenant::unseen(c).map(|u| match u {
                gpumeter_core::tenant::Unseen::NotPrintable(w)
                | gpumeter_core::tenant::Unseen::Invisible(w) => (c, w),
            })
        }) {
            return Err(serde::de::Error::custom(format!(
                "must not hold characters a person cannot see (U+{:04X}: {why})",
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
    source: Option<toml::Spanned<Text>>,
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
    event_type: Option<toml::Spanned<Text>>,
    stripe_event_name: Option<toml::Spanned<Text>>,
    lago_code: Option<toml::Spanned<Text>>,
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
    /// name (or one with control or bidirectional formatting characters or surrounding
    /// spaces), a `source` that is not an RFC 3986 URI-reference (CloudEvents 1.0), a Stripe
    /// event name over [`STRIPE_EVENT_NAME_MAX`] characters, two meters with one name for a
    /// receiver (`type`, `stripe_event_name` or `lago_code`: the receiver would add their
    /// quantities into one meter).
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
        let source = match raw.source {
            Some(s) => {
                // CloudEvents 1.0: `source` is a non-empty URI-reference (RFC 3986).
                if let Err(e) = fluent_uri::UriRef::parse(s.get_ref().0.as_str()) {
                    return Err(at(
                        Some(s.span()),
                        format!(
                            "the CloudEvents source must be a URI-reference (RFC 3986), as \
                             CloudEvents 1.0 requires: {e}"
                        ),
                    ));
                }
                s.into_inner().0
            }
            None => DEFAULT_SOURCE.to_string(),
        };
        let mut meters = BTreeMap::new();
        // Per receiver's field, each name's first meter: two meters under one name would be
        // added into one meter by the receiver.
        let mut named: BTreeMap<(&'static str, String), MeterKind> = BTreeMap::new();
        for (MeterKey(meter), m) in raw.meters {
            let mut name_of = |field: &'static str,
                               t: Option<toml::Spanned<Text>>|
             -> Result<Option<String>, EventsError> {
                let Some(t) = t else { return Ok(None) };
                if field == "stripe_event_name" {
                    let n = t.get_ref().0.chars().count();
                    if n > STRIPE_EVENT_NAME_MAX {
                        return Err(at(
                            Some(t.span()),
                            format!(
                                "a Stripe event_name has at most {STRIPE_EVENT_NAME_MAX} \
                                 characters, this one {n}"
                            ),
                        ));
                    }
                }
                if let Some(first) = named.insert((field, t.get_ref().0.clone()), meter) {
                    return Err(at(
                        Some(t.span()),
                        format!(
                            "{field} `{}` is also {first}'s: a receiver would add the two \
                             meters' quantities into one meter",
                            gpumeter_core::text::printable(&t.get_ref().0)
                        ),
                    ));
                }
                Ok(Some(t.into_inner().0))
            };
            let names = MeterNames {
                event_type: name_of("type", m.event_type)?,
                stripe_event_name: name_of("stripe_event_name", m.stripe_event_name)?,
                lago_code: name_of("lago_code", m.lago_code)?,
            };
            meters.insert(meter, names);
        }
        Ok(EventMap {
            source,
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
    report
        .check()
        .map_err(|e| EventsError::Check(Box::new(e)))?;
    let incomplete = report.incomplete_because();
    if let Some(why) = incomplete {
        if !options.allow_incomplete {
            return Err(EventsError::Incomplete { why });
        }
    }
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
        match names.get(name) {
            Some(&(first_meter, first_row)) if first_meter != row.meter => {
                return Err(EventsError::SharedEventName {
                    row: i,
                    meter: row.meter,
                    name: gpumeter_core::text::printable(name).into_owned(),
                    format,
                    first_row,
                    first_meter,
                })
            }
            Some(_) => {}
            None => {
                names.insert(name, (row.meter, i));
            }
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
        let name = name.to_string();
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
        if let UsageEvent::CloudEvents(e) = &event {
            let bytes = serde_json::to_vec(e)?.len();
            if bytes > CLOUDEVENT_MAX_BYTES {
                return Err(EventsError::EventTooLarge {
                    row: i,
                    bytes,
                    limit: CLOUDEVENT_MAX_BYTES,
                });
            }
        }
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
    use gpumeter_core::{DeviceEntry, Quantity, TotalRow, UsageRow};

    fn key(parts: [&str; 6]) -> String {
        let seconds: u64 = parts[3].parse().expect("seconds");
        idempotency_key(parts[0], parts[1], parts[2], seconds, parts[4], parts[5]).expect("key")
    }

    const BASE: [&str; 6] = [
        "alice",
        "GPU-1",
        "2026-12-01T00:00:00Z",
        "3600",
        "kernel_ns",
        "v1",
    ];

    #[test]
    fn the_key_is_sha256_of_the_canonical_array() {
        let k = key(BASE);
        let expected = hex::encode(Sha256::digest(
            br#"["alice","GPU-1","2026-12-01T00:00:00Z","3600","kernel_ns","v1"]"#,
        ));
        assert_eq!(k, expected);
        assert_eq!(k.len(), 64);
    }

    /// Item 13 of issue 30: the window size is part of the key, so a 1 h and a 30 min run of
    /// one trace (whose first windows start at the same instant) never share an id; before,
    /// the key was `[tenant, device, start, meter, policy]` and they did.
    #[test]
    fn each_part_changes_the_key_and_equal_parts_give_equal_keys() {
        let other = [
            "bob",
            "GPU-2",
            "2026-12-01T01:00:00Z",
            "1800",
            "sm_ns",
            "v2",
        ];
        let k = key(BASE);
        assert_eq!(k, key(BASE));
        for i in 0..6 {
            let mut p = BASE;
            p[i] = other[i];
            assert_ne!(key(p), k, "changing part {i}");
        }
        // Boundaries are part of the encoding: moving a character between parts changes it.
        assert_ne!(
            key(["ab", "c", "t", "60", "m", "v1"]),
            key(["a", "bc", "t", "60", "m", "v1"])
        );
        assert_ne!(
            key(["a\",\"b", "c", "t", "60", "m", "v1"]),
            key(["a", "b\",\"c", "t", "60", "m", "v1"])
        );
    }

    /// A sealed report of one row per `(tenant, window_start, meter, quantity)` on device
    /// GPU-1 (132 SMs), windows of `window_seconds`, with its totals.
    fn report_of(window_seconds: u64, rows: &[(&str, &str, MeterKind, u128)]) -> UsageReport {
        let device = DeviceEntry {
            device: 0,
            device_key: "GPU-1".into(),
            name: None,
            sm_count: Some(132),
            compute_capability: None,
            not_meterable: Vec::new(),
        };
        let usage: Vec<UsageRow> = rows
            .iter()
            .map(|&(tenant, window_start, meter, q)| UsageRow {
                tenant: tenant.into(),
                device: 0,
                device_key: "GPU-1".into(),
                window_start: window_start.into(),
                meter,
                quantity: Quantity(q),
            })
            .collect();
        let mut sums: BTreeMap<(String, MeterKind), u128> = BTreeMap::new();
        for u in &usage {
            *sums.entry((u.tenant.clone(), u.meter)).or_insert(0) += u.quantity.0;
        }
        let totals = sums
            .into_iter()
            .map(|((tenant, meter), q)| TotalRow {
                tenant,
                device: 0,
                device_key: "GPU-1".into(),
                meter,
                quantity: Quantity(q),
            })
            .collect();
        let mut r = UsageReport {
            schema: gpumeter_core::USAGE_SCHEMA.into(),
            metering_policy: "v1".into(),
            window_seconds,
            complete: Some(true),
            sources: Vec::new(),
            devices: vec![device],
            records: gpumeter_core::RecordCounts::default(),
            loss: Vec::new(),
            usage,
            totals,
            open_allocations: Vec::new(),
            warnings: Vec::new(),
            extensions: gpumeter_core::Extensions::default(),
            sha256: String::new(),
        };
        r.seal().expect("seal");
        r
    }

    fn report(window_seconds: u64, window_start: &str) -> UsageReport {
        report_of(
            window_seconds,
            &[("alice", window_start, MeterKind::KernelNs, 7)],
        )
    }

    #[test]
    fn a_window_start_off_the_window_edges_is_refused_not_keyed() {
        let options = EventOptions::new(EventFormat::CloudEvents);
        // On an edge, written with an offset: the key of the `Z` form.
        let on_edge =
            usage_events(&report(3600, "2026-12-01T01:00:00+01:00"), &options).expect("an edge");
        assert_eq!(on_edge.events[0].id(), key(BASE));
        // Half past: a window of its own would get a key of its own.
        let msg = usage_events(&report(3600, "2026-12-01T00:30:00Z"), &options)
            .expect_err("off the edges")
            .to_string();
        assert!(
            msg.starts_with(
                "the usage report: usage[0].window_start: `2026-12-01T00:30:00Z` is not on an edge"
            ),
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
        let r = report_of(
            3600,
            &[
                ("alice", "2026-12-01T00:00:00Z", MeterKind::KernelNs, 7),
                ("alice", "2026-12-01T01:00:00+01:00", MeterKind::KernelNs, 7),
            ],
        );
        let msg = usage_events(&r, &EventOptions::new(EventFormat::Lago))
            .expect_err("one key twice")
            .to_string();
        assert!(
            msg.starts_with(
                "the usage report: usage[1] has the tenant, device, window and meter of usage[0]"
            ),
            "{msg}"
        );
        // Another meter is another key.
        let r = report_of(
            3600,
            &[
                ("alice", "2026-12-01T00:00:00Z", MeterKind::KernelNs, 7),
                (
                    "alice",
                    "2026-12-01T01:00:00+01:00",
                    MeterKind::GpuBusyNs,
                    7,
                ),
            ],
        );
        assert_eq!(
            usage_events(&r, &EventOptions::new(EventFormat::Lago))
                .expect("two keys")
                .events
                .len(),
            2
        );
    }

    /// Item 13: a mapping that sends two meters under one name is refused, in the file (two
    /// mapped names) and when the events are built (a mapped name equal to an unmapped
    /// meter's own).
    #[test]
    fn two_meters_under_one_event_name_are_refused() {
        let text = "[meters.sm_ns]\ntype = \"gpu\"\n[meters.kernel_ns]\ntype = \"gpu\"\n";
        let msg = EventMap::from_toml_str("m.toml", text)
            .expect_err("one type twice")
            .to_string();
        // Meters are taken in report order: kernel_ns first, so sm_ns's line is named.
        assert!(msg.starts_with("m.toml:2:8: "), "{msg}");
        assert!(msg.contains("type `gpu` is also kernel_ns's"), "{msg}");
        // One name per receiver's field: the same name for Stripe and Lago is fine.
        let text = "[meters.sm_ns]\nstripe_event_name = \"gpu\"\nlago_code = \"gpu\"\n";
        assert!(EventMap::from_toml_str("m.toml", text).is_ok());
        // `sm_ns` sent as `kernel_ns`, beside kernel_ns's own rows.
        let map = EventMap::from_toml_str("m.toml", "[meters.sm_ns]\nlago_code = \"kernel_ns\"\n")
            .expect("valid");
        let r = report_of(
            3600,
            &[
                ("alice", "2026-12-01T00:00:00Z", MeterKind::KernelNs, 7),
                ("alice", "2026-12-01T00:00:00Z", MeterKind::SmNs, 9),
            ],
        );
        let options = EventOptions {
            map: Some(&map),
            ..EventOptions::new(EventFormat::Lago)
        };
        let e = usage_events(&r, &options).expect_err("two meters, one code");
        assert!(
            matches!(
                e,
                EventsError::SharedEventName {
                    row: 1,
                    first_row: 0,
                    ..
                }
            ),
            "{e}"
        );
        // CloudEvents keeps the meters' own types: fine.
        let options = EventOptions {
            map: Some(&map),
            ..EventOptions::new(EventFormat::CloudEvents)
        };
        assert_eq!(
            usage_events(&r, &options).expect("two types").events.len(),
            2
        );
    }

    /// Item 13: mapping values are checked for the receivers: a CloudEvents `source` is a
    /// URI-reference, and no value holds control or bidirectional formatting characters.
    #[test]
    fn mapping_values_are_checked_for_the_receivers() {
        for (text, at, says) in [
            ("source = \"a b\"\n", "m.toml:1:10: ", "URI-reference"),
            ("source = \"gpu%zz\"\n", "m.toml:1:10: ", "URI-reference"),
            (
                "[tenants.alice]\nsubject = \"cus\u{202e}tomer\"\n",
                "m.toml:2:11: ",
                "U+202E",
            ),
            (
                "[meters.sm_ns]\nlago_code = \"gpu\u{2028}sm\"\n",
                "m.toml:2:13: ",
                "U+2028",
            ),
            // Characters a person cannot see, refused in tenant names too (hostile review).
            (
                "[tenants.alice]\nsubject = \"cus\u{200b}tomer\"\n",
                "m.toml:2:11: ",
                "U+200B",
            ),
            (
                "[tenants.alice]\nsubject = \"\u{feff}customer\"\n",
                "m.toml:2:11: ",
                "U+FEFF",
            ),
            (
                "[meters.sm_ns]\nlago_code = \"gpu\u{3164}\"\n",
                "m.toml:2:13: ",
                "U+3164",
            ),
            (
                "[meters.sm_ns]\nlago_code = \"gpu\u{ad}sm\"\n",
                "m.toml:2:13: ",
                "U+00AD",
            ),
        ] {
            let msg = EventMap::from_toml_str("m.toml", text)
                .expect_err(text)
                .to_string();
            assert!(msg.starts_with(at) && msg.contains(says), "{text}: {msg}");
        }
        for ok in [
            "source = \"gpumeter/eu-west-1\"\n",
            "source = \"https://gpumeter.example/cluster-a\"\n",
            "source = \"urn:uuid:6e8bc430-9c3a-11d9-9669-0800200c9a66\"\n",
        ] {
            assert!(EventMap::from_toml_str("m.toml", ok).is_ok(), "{ok}");
        }
    }

    /// Item 12: a report that is not complete (a snapshot) is refused unless allowed, and
    /// then the events say why.
    #[test]
    fn an_incomplete_report_is_refused_unless_allowed() {
        let mut r = report(3600, "2026-12-01T00:00:00Z");
        r.complete = Some(false);
        r.seal().expect("seal");
        let e =
            usage_events(&r, &EventOptions::new(EventFormat::CloudEvents)).expect_err("incomplete");
        assert!(matches!(e, EventsError::Incomplete { .. }), "{e}");
        let allowed = EventOptions {
            allow_incomplete: true,
            ..EventOptions::new(EventFormat::CloudEvents)
        };
        let events = usage_events(&r, &allowed).expect("allowed");
        assert_eq!(events.events.len(), 1);
        assert!(events.incomplete.is_some());
        assert_eq!(
            usage_events(&report(3600, "2026-12-01T00:00:00Z"), &allowed)
                .expect("complete")
                .incomplete,
            None
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
