//! Pricing units: every unit a rate may be priced in is an exact rational multiple
//! of its meter's canonical unit (ns, SM·ns, warp·ns, B, B·ns, 1, mJ, FLOP).
//!
//! The factor is held as an integer fraction `factor_num / factor_den` = canonical units per
//! pricing unit, so rating divides by it exactly (every unit listed here has `factor_den` 1;
//! the fraction keeps room for units that are not whole multiples).

use gpumeter_core::Dimension;

/// A pricing unit: its name, dimension and exact size in canonical units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PricingUnit {
    name: &'static str,
    dimension: Dimension,
    factor_num: u128,
    factor_den: u128,
}

const NS_PER_S: u128 = 1_000_000_000;
const NS_PER_MIN: u128 = 60 * NS_PER_S;
const NS_PER_HOUR: u128 = 3_600 * NS_PER_S;
const NS_PER_DAY: u128 = 86_400 * NS_PER_S;
const KIB: u128 = 1 << 10;
const MIB: u128 = 1 << 20;
const GIB: u128 = 1 << 30;
const TIB: u128 = 1 << 40;
const PIB: u128 = 1 << 50;
const GB: u128 = 1_000_000_000;

const fn unit(name: &'static str, dimension: Dimension, factor: u128) -> PricingUnit {
    PricingUnit {
        name,
        dimension,
        factor_num: factor,
        factor_den: 1,
    }
}

/// Every pricing unit a price book may name, with canonical units per pricing unit.
const UNITS: &[PricingUnit] = &[
    // time, canonical ns
    unit("s", Dimension::Time, NS_PER_S),
    unit("min", Dimension::Time, NS_PER_MIN),
    unit("hour", Dimension::Time, NS_PER_HOUR),
    unit("day", Dimension::Time, NS_PER_DAY),
    // SM·time, canonical SM·ns
    unit("SM·s", Dimension::SmTime, NS_PER_S),
    unit("SM·hour", Dimension::SmTime, NS_PER_HOUR),
    // warp·time, canonical warp·ns
    unit("warp·s", Dimension::WarpTime, NS_PER_S),
    unit("warp·hour", Dimension::WarpTime, NS_PER_HOUR),
    // bytes, canonical B: SI (10³ steps) and IEC (2¹⁰ steps)
    unit("B", Dimension::Bytes, 1),
    unit("KB", Dimension::Bytes, 1_000),
    unit("MB", Dimension::Bytes, 1_000_000),
    unit("GB", Dimension::Bytes, GB),
    unit("TB", Dimension::Bytes, 1_000_000_000_000),
    unit("PB", Dimension::Bytes, 1_000_000_000_000_000),
    unit("KiB", Dimension::Bytes, KIB),
    unit("MiB", Dimension::Bytes, MIB),
    unit("GiB", Dimension::Bytes, GIB),
    unit("TiB", Dimension::Bytes, TIB),
    unit("PiB", Dimension::Bytes, PIB),
    // byte·time, canonical B·ns
    unit("GB·hour", Dimension::ByteTime, GB * NS_PER_HOUR),
    unit("GiB·s", Dimension::ByteTime, GIB * NS_PER_S),
    unit("GiB·hour", Dimension::ByteTime, GIB * NS_PER_HOUR),
    // counts, canonical 1
    unit("1", Dimension::Count, 1),
    unit("1K", Dimension::Count, 1_000),
    unit("1M", Dimension::Count, 1_000_000),
    unit("1G", Dimension::Count, 1_000_000_000),
    // energy, canonical mJ
    unit("J", Dimension::Energy, 1_000),
    unit("kJ", Dimension::Energy, 1_000_000),
    unit("Wh", Dimension::Energy, 3_600_000),
    unit("kWh", Dimension::Energy, 3_600_000_000),
    // operations (the FLOP meters and tensor_ops), canonical 1 operation
    unit("FLOP", Dimension::Operations, 1),
    unit("GFLOP", Dimension::Operations, 1_000_000_000),
    unit("TFLOP", Dimension::Operations, 1_000_000_000_000),
    unit("PFLOP", Dimension::Operations, 1_000_000_000_000_000),
];

impl PricingUnit {
    /// Parses a pricing unit's name (`"SM·hour"`, `"GiB"`, `"kWh"`, `"1M"`);
    /// ASCII `*` may stand for `·` (`"SM*hour"`). Names are case-sensitive (`MB` ≠ `Mb`).
    /// `None` when the name is not in the list.
    pub fn parse(text: &str) -> Option<PricingUnit> {
        let normalized = text.replace('*', "·");
        UNITS.iter().copied().find(|u| u.name == normalized)
    }

    /// The unit's name with `·` (`"SM·hour"`), as invoices print it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The dimension; a rate's unit must have its meter's dimension.
    pub fn dimension(&self) -> Dimension {
        self.dimension
    }

    /// Numerator of canonical units per pricing unit (`SM·hour`: 3 600 000 000 000 SM·ns).
    pub fn factor_num(&self) -> u128 {
        self.factor_num
    }

    /// Denominator of canonical units per pricing unit (1 for every unit there is today).
    pub fn factor_den(&self) -> u128 {
        self.factor_den
    }

    /// `amount` pricing units in canonical units, when that is a whole number that fits a
    /// `u128` (`"0.001"` hour → 3 600 000 000 ns); `None` when it is fractional (`"0.1"` B),
    /// negative or too large. Increments, package sizes and tier edges must convert
    /// (an increment must be a whole number of canonical units).
    pub fn to_canonical(&self, amount: rust_decimal::Decimal) -> Option<u128> {
        if amount.is_sign_negative() && !amount.is_zero() {
            return None;
        }
        let mantissa = u128::try_from(amount.mantissa()).ok()?;
        // amount × num / den = mantissa × num / (10^scale × den), exactly.
        let num = num_bigint::BigUint::from(mantissa) * num_bigint::BigUint::from(self.factor_num);
        let den = num_traits::pow(num_bigint::BigUint::from(10u32), amount.scale() as usize)
            * num_bigint::BigUint::from(self.factor_den);
        let (q, r) = num_integer::Integer::div_rem(&num, &den);
        if !num_traits::Zero::is_zero(&r) {
            return None;
        }
        u128::try_from(q).ok()
    }

    /// Every pricing unit, grouped by dimension.
    pub fn all() -> impl Iterator<Item = PricingUnit> {
        UNITS.iter().copied()
    }
}

impl std::fmt::Display for PricingUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;
    use std::str::FromStr;

    #[test]
    fn canonical() {
        let d = |s: &str| Decimal::from_str(s).expect("a decimal literal");
        let hour = PricingUnit::parse("hour").expect("a unit of the list");
        assert_eq!(hour.to_canonical(d("0.001")), Some(3_600_000_000));
        assert_eq!(hour.to_canonical(d("0")), Some(0));
        let b = PricingUnit::parse("B").expect("a unit of the list");
        assert_eq!(b.to_canonical(d("0.1")), None);
        assert_eq!(b.to_canonical(d("-1")), None);
        let kib = PricingUnit::parse("KiB").expect("a unit of the list");
        assert_eq!(kib.to_canonical(d("0.5")), Some(512));
        assert_eq!(kib.to_canonical(d("0.0001")), None);
        let tb = PricingUnit::parse("GiB·hour").expect("a unit of the list");
        assert_eq!(tb.to_canonical(d("79228162514264337593543950335")), None);
    }
}
