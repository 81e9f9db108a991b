//! gpumeter as a library: meter a trace, print its usage, rate it, print the invoice.
use gpumeter::render::{invoice_text, usage_text, UsageTextOptions};
use gpumeter::{load_price_book, meter_inputs, preview, Period, UsageOptions};

/// `gpumeter usage` and `gpumeter preview` on the README's example input and price book.
pub fn main() -> Result<(), Box<dyn std::error::Error>> {
    let inputs = ["examples/data/finetune-2xh100.json.gz".into()];
    let usage = meter_inputs(&inputs, &UsageOptions::default())?; // exact integers per window
    print!("{}", usage_text(&usage, &UsageTextOptions::default()));
    let book = load_price_book("examples/pricebook.toml".as_ref())?;
    let period = Period::parse("2026-11-30T23:00:00Z", "2026-12-01T01:00:00Z")?;
    let invoices = preview(&usage, &book, Some(period))?; // one invoice per tenant, Decimal money
    print!("{}", invoice_text(&invoices));
    Ok(())
}
