//! Rating: a usage report and a price book become one invoice per tenant and period.
//!
//! [`rate`] reads as its steps, one part each: `checks.rs` (the report, its windows and the
//! period), `gather.rs` (the rows into each tenant's usage), `bands.rs` (which band holds over
//! a window), `series.rs` (one SKU and meter's usage into priced lines) and `assemble.rs` (a
//! tenant's invoice, and `idle` listed apart).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpumeter_core::{MeterKind, UsageReport, WindowSize};

use crate::book::{PriceBook, Rate};
pub use crate::error::{BandEdge, RatingError};
use crate::invoice::InvoiceDocument;
pub use crate::invoice::{CarriedFragments, FragmentKey};
use crate::model::Terms;

/// Decimal places of `quantity_in_pricing_unit` (shown to 9 decimals, for people).
pub const PRICING_UNIT_DECIMALS: u32 = 9;

mod assemble;
mod bands;
mod checks;
mod gather;
mod series;

use assemble::{build_invoice, idle_usage, report_warnings};
use bands::BandCache;
use checks::{check_period, check_report, default_period, window_starts};
use gather::{add_carried_in, gather, Gathered};

/// One tenant's usage in the period: its rated series, carried-in fragments, unpriced usage
/// and unrated meters.
#[derive(Default)]
struct TenantUsage<'a> {
    /// Canonical quantity per (SKU index, meter) and window start (ns), for windows with a
    /// rate in force; a series of a carried-in fragment may have no window.
    series: BTreeMap<(usize, MeterKind), BTreeMap<u64, u128>>,
    /// Carried-in fragment per (SKU index, meter).
    fragments_in: BTreeMap<(usize, MeterKind), u128>,
    /// Unpriced quantity per (device key, meter, reason).
    unpriced: BTreeMap<(&'a str, MeterKind, String), u128>,
    /// Meters of this tenant's usage that its SKUs have no rate for (not billed, not listed).
    unrated: BTreeSet<MeterKind>,
}

/// Rates `usage` with `book`: one invoice per tenant that has usage (or a carried-in fragment)
/// in the period, sorted by tenant name (bytewise), in a `gpumeter.invoice/v1` document.
/// [`gpumeter_core::IDLE`] is a report tenant, never invoiced: its usage in the period is summed
/// per device and meter under the document's `extensions.idle` with an `idle_not_invoiced`
/// warning, and a carried-in fragment of `idle` is ignored; a document without idle usage
/// has no `extensions`.
/// Preview and finalization share this one function; `carried_in` holds the
/// fragments the bank carried from the previous period (empty without a bank).
///
/// `period` is `(from, to)` in ns since the Unix epoch, half-open; both must fall on edges of
/// the report's windows. `None`: the usage's span rounded out to whole windows (earliest
/// `window_start` to the latest one plus `window_seconds`); a report without usage then gives a
/// document with no invoices. A usage row counts when its `window_start` lies in the period;
/// when a given period leaves rows of the report out, every invoice warns how many (and how
/// many of them its tenant's), with the earliest and latest window start left out.
///
/// Per tenant, SKU and meter, usage is summed over the devices the SKU matches per window and
/// rated in window order:
/// - each window is priced by the rate in force at its start and the band (time of use) that
///   holds there in the band's zone (local weekday and time at window start); a band edge
///   inside a window is [`RatingError::BandEdgeNotOnWindow`];
/// - the carried-in fragment counts first, as usage of the period's first window;
/// - the billing increment (one canonical unit without one) applies once to the period's
///   total plus the carried-in fragment: the billable quantity is its whole increments, and
///   the rest, the tail of the time-ordered usage, is `fragment_carried` on the lines it
///   comes from and is carried out ([`InvoiceDocument::fragments_out`]);
/// - the rate's model ([`crate::model`]) splits the billable quantity into tiers (graduated
///   consumption accumulates across the period, so a tier edge may split a window) or
///   packages; flat fees of the tiers reached (graduated) or chosen (volume) are lines of
///   their own, from the rate in force where the tier is first reached.
///
/// Lines are per (SKU, meter, rate, tier, band), each amount rounded once
/// (`round(billable × unit_price × multiplier ÷ factor)`). What is not billed:
/// - usage of a meter for which the device's SKU has no rate at all is not billed and not
///   listed (the book chose not to price that meter);
/// - usage on a device with no name, not listed in the report's `devices`, or matched by no
///   SKU, and usage in a window in which none of its SKU's rates for that meter is in force,
///   goes to the invoice's `unpriced` block with a warning, never dropped.
///
/// If the book has an invoice minimum and the usage and flat-fee lines sum to less, a
/// `minimum` line tops them up; the minimum applies to priced usage only (an invoice without
/// a usage line has no `minimum` line and a warning that says why). `subtotal` = Σ lines; `total` = subtotal (credits come with the
/// bank); `ledger_head` null; `usage_sha256` is the report's own `sha256`, copied, or computed
/// here when it is empty (an unsealed report). Every invoice is sealed ([`Invoice::seal`](crate::Invoice::seal)).
/// The same inputs give byte-identical JSON, whatever the order of the usage rows.
///
/// # Errors
/// [`RatingError::Usage`] for a report of another schema or policy, a bad window size or a
/// `window_start` that is not an RFC 3339 window edge, or (without `period`) a window that
/// ends after the latest time a `u64` of ns holds, naming its row (`usage[i].window_start`);
/// [`RatingError::Period`] for an empty given period or one off window edges;
/// [`RatingError::EdgeNotOnWindow`] for a rate validity edge inside a window;
/// [`RatingError::BandEdgeNotOnWindow`] for a band edge inside a window that has usage;
/// [`RatingError::AmbiguousSku`]; [`RatingError::Fragment`] for a carried-in fragment of an
/// unknown SKU, or carried-in fragments without a period when the report has no usage; [`RatingError::QuantityOverflow`] and [`RatingError::AmountOverflow`] when a
/// quantity or an amount exceeds what the invoice can hold; [`RatingError::Unrateable`],
/// [`RatingError::BandOverlap`] (guards the price book's validation already enforces);
/// [`RatingError::Digest`].
pub fn rate(
    usage: &UsageReport,
    book: &PriceBook,
    period: Option<(u64, u64)>,
    carried_in: &CarriedFragments,
) -> Result<InvoiceDocument, RatingError> {
    check_report(usage)?;
    let window =
        WindowSize::from_seconds(usage.window_seconds).map_err(|reason| RatingError::Usage {
            field: "window_seconds".into(),
            value: usage.window_seconds.to_string(),
            reason,
        })?;
    let starts = window_starts(usage, window)?;

    let Some((from, to)) = rating_period(usage, period, &starts, window, carried_in)? else {
        return Ok(InvoiceDocument::new(Vec::new()));
    };
    let (sku_index, rates_of) = index_rates(book);
    let Gathered {
        mut tenants,
        left_out,
        idle,
    } = gather(usage, book, &starts, (from, to), window, &rates_of)?;
    add_carried_in(&mut tenants, carried_in, &sku_index)?;

    let common_warnings = report_warnings(usage);
    let usage_sha256 = usage_digest(usage)?;
    let ctx = Context {
        usage,
        book,
        terms: rate_terms(book),
        rates_of,
        bands: BandCache::new(book, window),
        period: (from, to),
        usage_sha256,
    };
    let mut ctx = ctx;
    let mut invoices = Vec::with_capacity(tenants.len());
    for (tenant, acc) in tenants {
        // Loss and the report's warnings, then the usage the period leaves out.
        let mut warnings = common_warnings.clone();
        warnings.extend(left_out.warning(tenant, (from, to)));
        let mut inv = build_invoice(&mut ctx, tenant, acc, &warnings)?;
        inv.seal()?;
        invoices.push(inv);
    }
    let mut doc = InvoiceDocument::new(invoices);
    doc.extensions.idle = idle_usage(usage, &idle, (from, to));
    Ok(doc)
}

/// The period to rate: `period` checked to be on window edges, else the usage's span rounded
/// out to whole windows; `None` when no period is given and the report has no usage (a
/// document with no invoices), which carried-in fragments refuse.
fn rating_period(
    usage: &UsageReport,
    period: Option<(u64, u64)>,
    starts: &[u64],
    window: WindowSize,
    carried_in: &CarriedFragments,
) -> Result<Option<(u64, u64)>, RatingError> {
    let p = match period {
        Some((from, to)) => {
            check_period(from, to, window)?;
            Some((from, to))
        }
        None => match default_period(usage, starts, window)? {
            Some(p) => Some(p),
            None => {
                // No usage, so no period to derive. Carried-in fragments cannot be dropped
                // silently: they need a period to be billed in or carried on from.
                if let Some((key, q)) = carried_in.iter().find(|(_, &q)| q > 0) {
                    return Err(RatingError::Fragment {
                        tenant: key.tenant.clone(),
                        reason: format!(
                            "{q} units of {} on sku `{}` are carried in, but the usage report \
                             has no usage to derive a period from; give the period",
                            key.meter, key.sku
                        ),
                    });
                }
                None
            }
        },
    };
    Ok(p)
}

/// Each SKU's index by id, and the rates of each (SKU index, meter), in book order.
#[allow(clippy::type_complexity)]
fn index_rates(
    book: &PriceBook,
) -> (
    HashMap<&str, usize>,
    HashMap<(usize, MeterKind), Vec<&Rate>>,
) {
    let sku_index: HashMap<&str, usize> = book
        .skus()
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut rates_of: HashMap<(usize, MeterKind), Vec<&Rate>> = HashMap::new();
    for r in book.rates() {
        if let Some(&s) = sku_index.get(r.sku.as_str()) {
            rates_of.entry((s, r.meter)).or_default().push(r);
        }
    }
    (sku_index, rates_of)
}

/// The report's `sha256`, or for an unsealed report (empty `sha256`) the digest it would have.
fn usage_digest(usage: &UsageReport) -> Result<String, RatingError> {
    if usage.sha256.is_empty() {
        // An unsealed report: cite the digest it would have.
        let v = serde_json::to_value(usage).map_err(|e| RatingError::Digest(e.to_string()))?;
        gpumeter_core::document_sha256(&v, "sha256").map_err(|e| RatingError::Digest(e.to_string()))
    } else {
        Ok(usage.sha256.clone())
    }
}

/// What every invoice of one rating shares.
struct Context<'a> {
    usage: &'a UsageReport,
    book: &'a PriceBook,
    /// Canonical terms of each rate, by rate index.
    terms: Vec<Terms<'a>>,
    rates_of: HashMap<(usize, MeterKind), Vec<&'a Rate>>,
    bands: BandCache<'a>,
    period: (u64, u64),
    usage_sha256: String,
}

/// Each rate's tier edges and package size in canonical units, as the price book's
/// validation computed them.
fn rate_terms(book: &PriceBook) -> Vec<Terms<'_>> {
    book.rates()
        .iter()
        .map(|r| Terms {
            rate: r,
            edges: r.tiers.iter().map(|t| t.up_to_canonical).collect(),
            package: r.package_size_canonical,
        })
        .collect()
}
