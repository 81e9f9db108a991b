//! The price-book check as aligned text; the usage report's and the invoices' text are the
//! library's ([`gpumeter::render`]).
//!
//! Every text that can come from an input (price-book text, device names) is escaped with
//! [`esc`] before it is placed, and column widths are those of the escaped text.

use std::fmt::Write as _;

pub(crate) use gpumeter::render::{esc, group_digits as group, Table};
use gpumeter::{DeviceCatalog, PriceBook, PriceBookError};

/// `prices check`: the price book's SKUs, rates (model, tiers, increment, package size,
/// validity) and bands, the SKU each catalog device maps to, and warnings about SKUs no
/// catalog device matches.
///
/// # Errors
/// [`PriceBookError`] when two SKUs match a catalog device equally well (see
/// [`PriceBook::check_catalog`]).
pub(crate) fn prices_check(
    book: &PriceBook,
    catalog: Option<&DeviceCatalog>,
) -> Result<String, PriceBookError> {
    let warnings = match catalog {
        Some(c) => {
            let names: Vec<&str> = c.devices.iter().filter_map(|d| d.name.as_deref()).collect();
            book.check_catalog(&names)?
        }
        None => Vec::new(),
    };
    let mut out = String::from("ok: the price book is valid\n\n");
    for line in book.summary() {
        out.push_str(&esc(&line));
        out.push('\n');
    }
    if let Some(c) = catalog {
        let _ = writeln!(out, "\nDevices of the catalog and the SKU that prices them");
        let mut t = Table::new(&[("ID", true), ("NAME", false), ("SKU", false)]);
        for d in &c.devices {
            let sku = match &d.name {
                None => "(unpriced: the catalog gives no name)".to_string(),
                Some(name) => match book.sku_for(name) {
                    Ok(Some(sku)) => sku.id.clone(),
                    Ok(None) => "(unpriced: no SKU matches)".to_string(),
                    Err(e) => format!("(error: {e})"),
                },
            };
            t.row(vec![
                d.id.to_string(),
                d.name.clone().unwrap_or_else(|| "(unknown)".into()),
                sku,
            ]);
        }
        out.push_str(&t.render("  "));
    }
    if !warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings");
        for w in &warnings {
            let _ = writeln!(out, "  - {}", esc(w));
        }
    }
    Ok(out.trim_end().to_string())
}
