//! Exact money arithmetic.
//!
//! A line's amount is `round(quantity × unit_price ÷ factor)` to the currency's minor unit,
//! with one division and one rounding. With `unit_price = mantissa / 10^s` and
//! `factor = factor_num / factor_den` canonical units per pricing unit, the amount in minor
//! units (`10^-c` of the currency) is
//!
//! ```text
//! round( quantity × mantissa × 10^c × factor_den  /  (10^s × factor_num) )
//! ```
//!
//! computed in arbitrary-precision integers (`num-bigint`), so no `u128` quantity overflows;
//! only the final amount must fit a [`Decimal`] (96-bit mantissa, ≈ 7.9 × 10^28 minor units).

use num_bigint::BigUint;
use num_integer::Integer;
use num_traits::{One, ToPrimitive, Zero};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::currency::Currency;
use crate::units::PricingUnit;

/// How a line's amount is rounded to the currency's minor unit, once per line.
/// Amounts are never negative, so "up" means away from zero and "down" toward zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rounding {
    /// To nearest; ties to the even minor unit (banker's rounding). The default.
    #[default]
    HalfEven,
    /// To nearest; ties away from zero (up).
    HalfUp,
    /// Up (ceiling): any fraction of a minor unit becomes a whole one.
    Up,
    /// Down (floor, truncation): fractions of a minor unit are dropped.
    Down,
}

impl Rounding {
    /// Parses `half_even`, `half_up`, `up` or `down`.
    pub fn parse(text: &str) -> Option<Rounding> {
        match text {
            "half_even" => Some(Rounding::HalfEven),
            "half_up" => Some(Rounding::HalfUp),
            "up" => Some(Rounding::Up),
            "down" => Some(Rounding::Down),
            _ => None,
        }
    }

    /// The mode's name in price books (`half_even`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Rounding::HalfEven => "half_even",
            Rounding::HalfUp => "half_up",
            Rounding::Up => "up",
            Rounding::Down => "down",
        }
    }
}

impl std::fmt::Display for Rounding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `numerator ÷ denominator` rounded to an integer by `mode`: the one division and the one
/// rounding of a line. Returns `None` when `denominator` is zero.
pub fn round_div(numerator: &BigUint, denominator: &BigUint, mode: Rounding) -> Option<BigUint> {
    if denominator.is_zero() {
        return None;
    }
    let (q, r) = numerator.div_rem(denominator);
    if r.is_zero() {
        return Some(q);
    }
    let twice_r: BigUint = &r << 1u32;
    let bump = match mode {
        Rounding::Down => false,
        Rounding::Up => true,
        Rounding::HalfUp => twice_r >= *denominator,
        Rounding::HalfEven => match twice_r.cmp(denominator) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => q.is_odd(),
        },
    };
    Some(if bump { q + BigUint::one() } else { q })
}

fn pow10(exp: u32) -> BigUint {
    num_traits::pow(BigUint::from(10u32), exp as usize)
}

/// The unit price's mantissa as a non-negative big integer, `None` when it is negative.
fn price_mantissa(unit_price: Decimal) -> Option<BigUint> {
    u128::try_from(unit_price.mantissa())
        .ok()
        .map(BigUint::from)
}

/// The amount of one line in minor units of `currency`, before it becomes a [`Decimal`]:
/// `round(quantity × unit_price × 10^scale ÷ factor)` by `mode` (see the module docs).
///
/// `quantity` is in the meter's canonical unit; `unit_price` is per `unit`. Returns `None`
/// for a negative `unit_price` (price books never hold one) or a zero unit factor.
pub fn line_amount_minor_units(
    quantity: u128,
    unit_price: Decimal,
    unit: &PricingUnit,
    currency: &Currency,
    mode: Rounding,
) -> Option<BigUint> {
    amount_minor_units(
        quantity,
        unit_price,
        (unit.factor_num(), unit.factor_den()),
        currency,
        mode,
    )
}

/// `round(count × price ÷ (factor_num / factor_den))` in minor units of `currency`, with one
/// division and one rounding by `mode`, in arbitrary precision: the arithmetic of every line.
/// A usage line passes canonical units and its pricing unit's factor; a package line passes
/// whole packages and `(1, 1)`. `None` for a negative price or a zero factor.
pub fn amount_minor_units(
    count: u128,
    price: Decimal,
    (factor_num, factor_den): (u128, u128),
    currency: &Currency,
    mode: Rounding,
) -> Option<BigUint> {
    let mantissa = price_mantissa(price)?;
    let numerator =
        BigUint::from(count) * mantissa * pow10(currency.scale()) * BigUint::from(factor_den);
    let denominator = pow10(price.scale()) * BigUint::from(factor_num);
    round_div(&numerator, &denominator, mode)
}

/// `a × b` exactly as a [`Decimal`] (a band's multiplier times a unit price), `None` when the
/// exact product does not fit a decimal (scale above 28 or a mantissa beyond 96 bits) or
/// either is negative: never the silently rounded product of `Decimal`'s `*`.
pub fn exact_product(a: Decimal, b: Decimal) -> Option<Decimal> {
    let m = price_mantissa(a)? * price_mantissa(b)?;
    let scale = a.scale().checked_add(b.scale())?;
    if scale > 28 {
        return None;
    }
    Decimal::try_from_i128_with_scale(m.to_i128()?, scale).ok()
}

/// The amount of one line as a [`Decimal`] at the currency's scale (`"12.30"` for USD,
/// `"5"` for JPY): [`line_amount_minor_units`] made a decimal.
///
/// `None` when the unit price is negative, or when the amount exceeds what a [`Decimal`] holds
/// (a 96-bit mantissa: about 7.9 × 10^28 minor units); callers report that as an error. Never
/// panics, for any `u128` quantity.
pub fn line_amount(
    quantity: u128,
    unit_price: Decimal,
    unit: &PricingUnit,
    currency: &Currency,
    mode: Rounding,
) -> Option<Decimal> {
    let minor = line_amount_minor_units(quantity, unit_price, unit, currency, mode)?;
    minor_units_to_decimal(&minor, currency)
}

/// `minor` minor units of `currency` as a [`Decimal`] at the currency's scale; `None` when it
/// exceeds a [`Decimal`]'s range.
pub fn minor_units_to_decimal(minor: &BigUint, currency: &Currency) -> Option<Decimal> {
    let m = minor.to_i128()?;
    Decimal::try_from_i128_with_scale(m, currency.scale()).ok()
}

/// `amount` in minor units of `currency` (`"12.30"` USD → 1230); `None` when it is negative or
/// has more decimals than the currency's scale.
pub fn decimal_to_minor_units(amount: Decimal, currency: &Currency) -> Option<u128> {
    if amount.is_sign_negative() && !amount.is_zero() {
        return None;
    }
    let s = amount.scale();
    let c = currency.scale();
    if s > c {
        return None;
    }
    let m = u128::try_from(amount.mantissa()).ok()?;
    m.checked_mul(10u128.checked_pow(c - s)?)
}

/// `quantity` canonical units expressed in `unit`, rounded half-even to `decimals` places, as
/// a decimal string (`"1.500000000"`). For people only: rating never uses it. Exact for any
/// `u128` quantity (the string can be long). `"?"` for a zero unit factor, which no unit has.
pub fn quantity_in_unit(quantity: u128, unit: &PricingUnit, decimals: u32) -> String {
    let numerator = BigUint::from(quantity) * BigUint::from(unit.factor_den()) * pow10(decimals);
    let denominator = BigUint::from(unit.factor_num());
    match round_div(&numerator, &denominator, Rounding::HalfEven) {
        Some(scaled) => fixed_point(&scaled, decimals),
        None => "?".to_string(),
    }
}

/// Writes `scaled ÷ 10^decimals` with exactly `decimals` decimal places.
fn fixed_point(scaled: &BigUint, decimals: u32) -> String {
    let digits = scaled.to_str_radix(10);
    let d = decimals as usize;
    if d == 0 {
        return digits;
    }
    let padded = if digits.len() <= d {
        format!("{}{digits}", "0".repeat(d + 1 - digits.len()))
    } else {
        digits
    };
    let (int, frac) = padded.split_at(padded.len() - d);
    format!("{int}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(n: u64) -> BigUint {
        BigUint::from(n)
    }

    #[test]
    fn ties() {
        let cases = [
            (5, 2, Rounding::HalfEven, 2),
            (7, 2, Rounding::HalfEven, 4),
            (5, 2, Rounding::HalfUp, 3),
            (5, 2, Rounding::Up, 3),
            (5, 2, Rounding::Down, 2),
            (4, 2, Rounding::Up, 2),
            (0, 3, Rounding::Up, 0),
        ];
        for (n, d, m, want) in cases {
            assert_eq!(
                round_div(&big(n), &big(d), m),
                Some(big(want)),
                "{n}/{d} {m}"
            );
        }
        assert_eq!(round_div(&big(1), &big(0), Rounding::Up), None);
    }

    #[test]
    fn fixed() {
        assert_eq!(fixed_point(&big(5), 3), "0.005");
        assert_eq!(fixed_point(&big(1500), 3), "1.500");
        assert_eq!(fixed_point(&big(0), 2), "0.00");
        assert_eq!(fixed_point(&big(42), 0), "42");
    }
}
