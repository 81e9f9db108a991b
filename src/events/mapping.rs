//! The events mapping (TOML): tenants to each receiver's ids, meters to each receiver's names,
//! read and checked ([`EventMap::from_toml_str`]) so that every id and name is one a receiver
//! can show people, and no two meters share a receiver's name.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use gpumeter_core::MeterKind;
use serde::Deserialize;

use super::{EventFormat, EventsError, DEFAULT_SOURCE, STRIPE_EVENT_NAME_MAX};

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
    /// counted in [`UsageEvents::unmapped_meter_rows`](super::UsageEvents::unmapped_meter_rows), not sent).
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
    pub(super) fn customer<'a>(
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
    pub(super) fn meter_name(&self, meter: MeterKind, format: EventFormat) -> &str {
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
