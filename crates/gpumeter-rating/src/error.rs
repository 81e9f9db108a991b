//! The rater's errors, in a module of their own: the price book (an ambiguous device match),
//! the invoice (its digest), supplements and the rater itself all return them, and none of
//! them has to reach into another for its error type.

use gpumeter_core::MeterKind;

/// Errors rating a usage report. No error yields a partial invoice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RatingError {
    /// The usage report is not one rating can read.
    #[error("usage report: {field} = {value}: {reason}")]
    Usage {
        /// The field (`schema`, `window_seconds`, `usage[12].window_start`).
        field: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },
    /// The requested period (the caller's, never a default derived from the usage) is empty or
    /// not on window edges.
    #[error("period [{from}, {to}): {reason}")]
    Period {
        /// Start, RFC 3339 UTC.
        from: String,
        /// End (exclusive), RFC 3339 UTC.
        to: String,
        /// What is wrong.
        reason: String,
    },
    /// A rate's validity edge lies inside a usage window, so that window would have two
    /// prices (rate validity edges must fall on window edges).
    #[error(
        "{book}:{line}:{column}: rate[{rate}].{field} = {value} is not on an edge of the usage's \
         {window_seconds} s windows (UTC multiples of the window size from the epoch)"
    )]
    EdgeNotOnWindow {
        /// The price book's file name.
        book: String,
        /// Line of the key in the book, from 1.
        line: u32,
        /// Column of the key in the book, from 1 (characters).
        column: u32,
        /// The rate's index among `[[rate]]`, from 0.
        rate: usize,
        /// `valid_from` or `valid_to`.
        field: String,
        /// The edge, RFC 3339 UTC.
        value: String,
        /// The usage report's window size, seconds.
        window_seconds: u64,
    },
    /// A band's edge lies inside a usage window, so that window would be partly in the band
    /// (band edges must fall on window edges).
    #[error(transparent)]
    BandEdgeNotOnWindow(Box<BandEdge>),
    /// Two bands apply to one window of one rate (the price book's validation refuses books
    /// where this can happen; this is the rater's own guard).
    #[error(
        "{book}: band[{first}] and band[{second}] both apply to sku `{sku}` {meter} in the window \
         starting {window_start}"
    )]
    BandOverlap {
        /// The price book's file name.
        book: String,
        /// One band's index.
        first: usize,
        /// The other band's index.
        second: usize,
        /// The SKU id.
        sku: String,
        /// The meter.
        meter: MeterKind,
        /// The window's start, RFC 3339 UTC.
        window_start: String,
    },
    /// A banded unit price (unit price × the band's multiplier) that a decimal cannot hold
    /// exactly. The price book's validation refuses such books; this is the rater's own
    /// guard.
    #[error("{book}: {table}.{field}: {reason}")]
    Unrateable {
        /// The price book's file name.
        book: String,
        /// The table (`rate[2]`, `band[0]`).
        table: String,
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A carried-in fragment names a SKU the book does not have.
    #[error("carried-in fragment of tenant `{tenant}`: {reason}")]
    Fragment {
        /// The tenant.
        tenant: String,
        /// What is wrong.
        reason: String,
    },
    /// Two SKUs match a device name equally well (a validation error).
    #[error("device `{device}` matches sku `{first}` and sku `{second}` equally well")]
    AmbiguousSku {
        /// The device name.
        device: String,
        /// One SKU id.
        first: String,
        /// The other SKU id.
        second: String,
    },
    /// A line's canonical quantity exceeds `u128`.
    #[error(
        "tenant `{tenant}`: the total {meter} on sku `{sku}` exceeds 2^128 − 1 canonical units"
    )]
    QuantityOverflow {
        /// The tenant.
        tenant: String,
        /// The SKU id.
        sku: String,
        /// The meter.
        meter: MeterKind,
    },
    /// An amount exceeds what a `rust_decimal::Decimal` holds (a 96-bit mantissa, about
    /// 7.9 × 10^28 minor units).
    #[error(
        "tenant `{tenant}`: {what}: the amount, {minor_units} minor units of {currency}, exceeds \
         what a decimal can hold (about 7.9e28 minor units)"
    )]
    AmountOverflow {
        /// The tenant.
        tenant: String,
        /// Which amount (`sku h100 sm_ns`, `subtotal`).
        what: String,
        /// The amount in minor units, exactly.
        minor_units: String,
        /// The currency code.
        currency: String,
    },
    /// The invoice could not be serialized for its digest.
    #[error("cannot compute the invoice digest: {0}")]
    Digest(String),
}

/// A band edge inside a usage window ([`RatingError::BandEdgeNotOnWindow`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "{book}:{line}:{column}: band[{band}].hours (`{name}`, {tz}): the band begins or ends at \
     {edge}, inside the {window_seconds} s window starting {window_start}; band edges must \
     fall on window edges (use a window that divides the band's hours, or move the band's \
     edge)"
)]
pub struct BandEdge {
    /// The price book's file name.
    pub book: String,
    /// Line of the band's `hours` in the book, from 1.
    pub line: u32,
    /// Column of the band's `hours` in the book, from 1 (characters).
    pub column: u32,
    /// The band's index among `[[band]]`, from 0.
    pub band: usize,
    /// The band's name.
    pub name: String,
    /// The band's time zone.
    pub tz: String,
    /// The instant inside the window where the band changes, RFC 3339 UTC.
    pub edge: String,
    /// The window's start, RFC 3339 UTC.
    pub window_start: String,
    /// The usage report's window size, seconds.
    pub window_seconds: u64,
}
