//! # gpumeter-rating
//!
//! Price books, exact decimal rating and invoices: a
//! [`gpumeter_core::UsageReport`] and a [`PriceBook`] become a `gpumeter.invoice/v1`
//! [`InvoiceDocument`], one invoice per tenant and period, with money as
//! [`rust_decimal::Decimal`] and never a float.
//!
//! ```
//! use gpumeter_core::{DeviceEntry, MeterKind, Quantity, RecordCounts, UsageReport, UsageRow};
//! use gpumeter_rating::{rate, PriceBook};
//!
//! let book = PriceBook::from_toml_str("book.toml", r#"
//! schema = "gpumeter.pricebook/v1"
//! version = "2026-12"
//! currency = "USD"
//! [[sku]]
//! id = "h100"
//! match = ["NVIDIA H100*"]
//! [[rate]]
//! sku = "h100"
//! meter = "sm_ns"
//! unit = "SM·hour"
//! unit_price = "0.0175"
//! "#)?;
//!
//! let mut usage = UsageReport {
//!     schema: "gpumeter.usage/v1".into(),
//!     metering_policy: "v1".into(),
//!     window_seconds: 3600,
//!     complete: Some(true),
//!     sources: vec![],
//!     devices: vec![DeviceEntry {
//!         device: 0,
//!         device_key: "GPU-0".into(),
//!         name: Some("NVIDIA H100 80GB HBM3".into()),
//!         sm_count: Some(132),
//!         compute_capability: Some("9.0".into()),
//!         not_meterable: vec![],
//!     }],
//!     records: RecordCounts::default(),
//!     loss: vec![],
//!     usage: vec![UsageRow {
//!         tenant: "alice".into(),
//!         device: 0,
//!         device_key: "GPU-0".into(),
//!         window_start: "2026-12-01T08:00:00Z".into(),
//!         meter: MeterKind::SmNs,
//!         // 132 SMs for one hour = 132 SM·hour
//!         quantity: Quantity(132 * 3_600_000_000_000),
//!     }],
//!     totals: vec![],
//!     open_allocations: vec![],
//!     extensions: Default::default(),
//!     warnings: vec![],
//!     sha256: String::new(),
//! };
//! usage.seal()?;
//!
//! let doc = rate(&usage, &book, None, &Default::default())?;
//! let inv = &doc.invoices[0];
//! assert_eq!(inv.lines[0].quantity_in_pricing_unit.as_deref(), Some("132.000000000"));
//! assert_eq!(inv.total.to_string(), "2.31"); // 132 × 0.0175 = 2.31 USD
//! assert!(doc.verify_digests());
//! print!("{}", doc.to_text_table());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Pricing rules
//! Every pricing rule is rated by [`rate`], the one function that preview and finalization
//! share: the models ([`RateModel`], in [`model`]: `per_unit`, `graduated`, `volume`,
//! `package`) with per-tier flat fees as lines of their own, time-of-use bands in IANA zones
//! ([`Band`], `chrono-tz`), effective-dated rates, billing increments whose fragments are the
//! tail of the period's time-ordered usage ([`CarriedFragments`] in, `fragments_out` of
//! [`InvoiceDocument`] out), the invoice minimum and the four rounding modes. The book's
//! validation ([`PriceBook::from_toml_str`], `gpumeter prices check`) refuses every book
//! rating could not price exactly, with the TOML line and column; the edges that depend on
//! the usage's windows are checked by rating. Renderings: [`render`] (CSV, HTML) and
//! [`InvoiceDocument::to_text_table`]. Credits come with the bank (`credits_applied` is empty,
//! `ledger_head` null).
//!
//! ## Decisions on what the price book and invoice formats leave open
//! - Price-book errors name tables by their position counted from 0 in file order
//!   (`rate[0]` is the first `[[rate]]`).
//! - Decimals (`unit_price`, `invoice_minimum`, …) are strings of digits with an optional
//!   fractional part, or TOML integers; TOML floats, signs, exponents and `_` are refused.
//!   Times are RFC 3339 with an offset, as strings or TOML offset date-times.
//! - Unknown keys are errors everywhere, except under a top-level `[extensions]` table, which
//!   is ignored (the convention of gpumeter's documents for extra keys).
//! - Pricing units are exactly [`PricingUnit`]'s list; canonical units such as `ns` are not pricing units.
//! - A usage report's `window_start`s and an explicit period's edges must fall on window
//!   edges, like rate validity edges, so no window straddles a period or a price change.
//! - Usage of a meter for which the device's SKU has no rate is not billed and not listed.
//!   Usage in a window where the SKU has rates for the meter but none in force goes to
//!   `unpriced`, with a warning.
//! - Every tenant with usage in the period gets an invoice, `unattributed` included; the
//!   invoice minimum applies to each invoice with priced usage (at least one usage line),
//!   never to one whose usage is all unpriced or unrated, which says why in a warning. A
//!   `minimum` line has `null` in every field but `kind` and `amount`.
//! - `idle` (what the GPU measured while no tenant's kernel ran: energy, PM-sampled SM
//!   activity and DRAM bytes) is a report tenant, never invoiced: its usage in the
//!   period is listed apart, under the document's `extensions.idle`
//!   ([`invoice::IdleUsage`]), with a warning (`idle_not_invoiced`), and gets no invoice.
//! - `usage_sha256` is copied from the report, not recomputed (callers verify the report);
//!   only an unsealed report (empty `sha256`) has its digest computed.
//! - Loss is per device, not per tenant, so every invoice from a report with loss carries the
//!   loss warning; the report's own warnings are copied into every invoice.
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod book;
pub mod currency;
pub mod error;
pub mod invoice;
pub mod model;
pub mod money;
pub mod rating;
pub mod render;
pub mod supplement;
pub mod units;

pub use book::{
    Band, MatchRank, PriceBook, PriceBookError, Rate, RateModel, Sku, SkuPattern, Tier, TierLimit,
    PRICEBOOK_SCHEMA,
};
pub use currency::Currency;
pub use error::{BandEdge, RatingError};
pub use invoice::{
    CarriedFragments, CreditApplied, DocumentExtensions, Fragment, FragmentKey, IdleRow, IdleUsage,
    Invoice, InvoiceDocument, InvoiceExtensions, InvoiceKind, InvoiceRef, Line, LineChange,
    LineExtensions, LineKind, Period, PriceBookRef, SignedQuantity, Unpriced, INVOICE_SCHEMA,
};
pub use money::{line_amount, Rounding};
pub use rating::{rate, PRICING_UNIT_DECIMALS};
pub use supplement::{unpriced_change, LineKey, LineTotals, PeriodLines};
pub use units::PricingUnit;
