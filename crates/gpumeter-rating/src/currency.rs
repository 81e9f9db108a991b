//! Currencies: ISO 4217 alphabetic codes and their minor-unit scales.
//!
//! Source: ISO 4217 "List one: currency, fund and precious metal codes" (the SIX Group
//! maintenance agency's published list, column "Minor unit"). Only currencies with a defined
//! minor unit are listed; fund and precious-metal codes (`XAU`, `XDR`, …) are not currencies a
//! price book can bill in. The scale is the number of decimal places of the minor unit
//! (USD 2: cents; JPY 0; BHD 3: fils; CLF 4).

/// A currency a price book bills in: its ISO 4217 code and minor-unit scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    code: &'static str,
    scale: u32,
}

/// (code, minor-unit scale) from ISO 4217 list one.
const ISO_4217: &[(&str, u32)] = &[
    ("AED", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("BGN", 2),
    ("BHD", 3),
    ("BIF", 0),
    ("BRL", 2),
    ("CAD", 2),
    ("CHF", 2),
    ("CLF", 4),
    ("CLP", 0),
    ("CNY", 2),
    ("COP", 2),
    ("CZK", 2),
    ("DJF", 0),
    ("DKK", 2),
    ("EGP", 2),
    ("EUR", 2),
    ("GBP", 2),
    ("GNF", 0),
    ("HKD", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("IQD", 3),
    ("ISK", 0),
    ("JOD", 3),
    ("JPY", 0),
    ("KES", 2),
    ("KMF", 0),
    ("KRW", 0),
    ("KWD", 3),
    ("LYD", 3),
    ("MXN", 2),
    ("MYR", 2),
    ("NGN", 2),
    ("NOK", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PHP", 2),
    ("PLN", 2),
    ("PYG", 0),
    ("QAR", 2),
    ("RON", 2),
    ("RWF", 0),
    ("SAR", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("THB", 2),
    ("TND", 3),
    ("TRY", 2),
    ("TWD", 2),
    ("UAH", 2),
    ("UGX", 0),
    ("USD", 2),
    ("UYI", 0),
    ("UYW", 4),
    ("VND", 0),
    ("VUV", 0),
    ("XAF", 0),
    ("XOF", 0),
    ("XPF", 0),
    ("ZAR", 2),
];

impl Currency {
    /// The currency with ISO 4217 alphabetic code `code` (three upper-case letters, exactly as
    /// ISO writes it), or `None` when the code is not in the table.
    pub fn from_code(code: &str) -> Option<Currency> {
        ISO_4217
            .iter()
            .find(|(c, _)| *c == code)
            .map(|&(code, scale)| Currency { code, scale })
    }

    /// The ISO 4217 alphabetic code (`"USD"`).
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// Decimal places of the minor unit (USD 2, JPY 0, BHD 3, CLF 4): every amount on an
    /// invoice is written at this scale.
    pub fn scale(&self) -> u32 {
        self.scale
    }

    /// Every currency in the table, sorted by code.
    pub fn all() -> impl Iterator<Item = Currency> {
        ISO_4217
            .iter()
            .map(|&(code, scale)| Currency { code, scale })
    }
}

impl std::fmt::Display for Currency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code)
    }
}
