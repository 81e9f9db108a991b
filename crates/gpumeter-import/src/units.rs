//! Exact conversion of decimal number text to integers ("Parse the decimal text to
//! integer ns; never through `f64`").

use rust_decimal::prelude::ToPrimitive;
use rust_decimal::{Decimal, RoundingStrategy};

/// Converts the text of a JSON number of microseconds (`"1419247333430.849"`,
/// `"1682725898082228"`, `"10.0"`, `"-3"`, `"1.5e3"`) to integer nanoseconds: the exact
/// decimal value × 1000, rounded half-to-even to an integer. No floating point is involved.
///
/// The text must follow the JSON number grammar (optional `-`, digits without leading zeros,
/// optional fraction, optional exponent); surrounding whitespace is not allowed.
///
/// # Errors
/// A message when the text is not a JSON number, has more than 28 significant digits, or its
/// value in ns does not fit an `i128` (far beyond any time a trace can hold).
///
/// ```
/// use gpumeter_import::units::micros_text_to_ns;
/// assert_eq!(micros_text_to_ns("1.001"), Ok(1_001));
/// assert_eq!(micros_text_to_ns("1682725898082228"), Ok(1_682_725_898_082_228_000));
/// assert_eq!(micros_text_to_ns("0.0005"), Ok(0)); // half to even
/// assert_eq!(micros_text_to_ns("0.0015"), Ok(2));
/// assert_eq!(micros_text_to_ns("-3"), Ok(-3_000));
/// assert_eq!(micros_text_to_ns("1.5e3"), Ok(1_500_000));
/// ```
pub fn micros_text_to_ns(text: &str) -> Result<i128, String> {
    scaled_integer(text, 3)
}

/// Converts the text of a JSON number to an integer, exactly; a fractional part must be zero
/// (`"92928"`, `"92928.0"`, `"1e3"` are accepted, `"1.5"` is not).
///
/// # Errors
/// A message when the text is not a JSON number, is not a whole number, or does not fit an
/// `i128`.
pub fn integer_text(text: &str) -> Result<i128, String> {
    if let Ok(v) = text.parse::<i64>() {
        // Fast path; `i64::from_str` also accepts a leading `+`, which JSON does not.
        if !text.starts_with('+') {
            return Ok(i128::from(v));
        }
    }
    let d = exact_decimal(text, 0)?;
    if !d.fract().is_zero() {
        return Err("not a whole number".to_string());
    }
    d.to_i128()
        .ok_or_else(|| "out of range for an integer".to_string())
}

/// `value(text) × 10^shift`, rounded half-to-even to an integer.
fn scaled_integer(text: &str, shift: i64) -> Result<i128, String> {
    let d = exact_decimal(text, shift)?;
    d.round_dp_with_strategy(0, RoundingStrategy::MidpointNearestEven)
        .to_i128()
        .ok_or_else(|| "out of range".to_string())
}

/// The exact decimal value of JSON number `text` × 10^`shift`.
fn exact_decimal(text: &str, shift: i64) -> Result<Decimal, String> {
    let (mantissa, exponent) = split_json_number(text)?;
    let d = Decimal::from_str_exact(mantissa)
        .map_err(|e| format!("`{mantissa}` is not an exact decimal: {e}"))?;
    if d.is_zero() {
        return Ok(Decimal::ZERO);
    }
    let shift = exponent
        .checked_add(shift)
        .ok_or_else(|| "exponent out of range".to_string())?;
    if shift >= 0 {
        let mut d = d;
        for _ in 0..shift {
            d = d
                .checked_mul(Decimal::TEN)
                .ok_or_else(|| "value out of range".to_string())?;
        }
        Ok(d)
    } else {
        let scale = i64::from(d.scale()) - shift;
        let scale = u32::try_from(scale)
            .ok()
            .filter(|&s| s <= Decimal::MAX_SCALE)
            .ok_or_else(|| "more than 28 decimal places".to_string())?;
        let mut d = d;
        d.set_scale(scale)
            .map_err(|e| format!("more than 28 decimal places: {e}"))?;
        Ok(d)
    }
}

/// Checks `text` against the JSON number grammar and splits it into the mantissa text
/// (`-12.5`) and the exponent value.
fn split_json_number(text: &str) -> Result<(&str, i64), String> {
    let bad = || format!("`{}` is not a JSON number", crate::error::shorten(text));
    let b = text.as_bytes();
    let mut i = 0;
    if b.first() == Some(&b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let int_len = i - int_start;
    if int_len == 0 || (int_len > 1 && b[int_start] == b'0') {
        return Err(bad());
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let frac_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == frac_start {
            return Err(bad());
        }
    }
    let mantissa = &text[..i];
    if i == b.len() {
        return Ok((mantissa, 0));
    }
    if b[i] != b'e' && b[i] != b'E' {
        return Err(bad());
    }
    i += 1;
    let exp_text = &text[i..];
    let digits = exp_text.strip_prefix(['+', '-']).unwrap_or(exp_text);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    // Exponents beyond ±10^6 cannot give a representable value; refuse them early.
    let exp: i64 = exp_text
        .trim_start_matches('+')
        .parse()
        .ok()
        .filter(|e: &i64| e.abs() <= 1_000_000)
        .ok_or_else(|| "exponent out of range".to_string())?;
    Ok((mantissa, exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros() {
        assert_eq!(
            micros_text_to_ns("1419247333430.849"),
            Ok(1_419_247_333_430_849)
        );
        assert_eq!(micros_text_to_ns("10.0"), Ok(10_000));
        assert_eq!(micros_text_to_ns("0"), Ok(0));
        assert_eq!(micros_text_to_ns("-0"), Ok(0));
        assert_eq!(micros_text_to_ns("2.5e-3"), Ok(2)); // 2.5 ns → 2 (half to even)
        assert_eq!(micros_text_to_ns("3.5e-3"), Ok(4));
        assert_eq!(micros_text_to_ns("1E+2"), Ok(100_000));
        assert_eq!(micros_text_to_ns("0e999999"), Ok(0));
        assert_eq!(micros_text_to_ns("-1.0005"), Ok(-1_000)); // -1000.5 → -1000
        for bad in [
            "", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1_000", "NaN", "1 ", "0x10",
        ] {
            assert!(micros_text_to_ns(bad).is_err(), "{bad}");
        }
        assert!(micros_text_to_ns("1e30").is_err());
        assert!(micros_text_to_ns("1e-40").is_err());
        assert!(micros_text_to_ns("1e9999999").is_err());
    }

    #[test]
    fn integers() {
        assert_eq!(integer_text("92928"), Ok(92_928));
        assert_eq!(integer_text("92928.0"), Ok(92_928));
        assert_eq!(integer_text("1e3"), Ok(1_000));
        assert_eq!(integer_text("-1"), Ok(-1));
        assert!(integer_text("1.5").is_err());
        assert!(integer_text("+1").is_err());
        assert!(integer_text("\"1\"").is_err());
    }
}
