//! A cell's integer quantities: per meter and tenant, from the cell's slots, as exact
//! rationals turned into integers by the largest-remainder method (ties to the tenant name
//! that sorts first).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use num_bigint::BigInt;
use num_rational::BigRational;
use num_traits::{ToPrimitive, Zero};

use super::cells::{Cell, Factor, Slot, Slots};
use crate::report::MeterKind;

/// Per meter, per tenant quantities: (meter, [(tenant, quantity)]).
pub(super) type CellQuantities = Vec<(MeterKind, Vec<(String, u128)>)>;

/// Per meter, per tenant integer quantities of one cell, in meter order then tenant order.
///
/// # Errors
/// The meter whose per-tenant sum (several attribution keys of one tenant) exceeds
/// `u128::MAX`.
pub(super) fn cell_quantities(
    cell: &Cell,
    slots: &Slots,
    tenants: &[String],
    sm_count: Option<u32>,
    warp_sm_count: Option<u32>,
    sets: &[Arc<[u32]>],
) -> Result<CellQuantities, MeterKind> {
    let mut out: BTreeMap<MeterKind, BTreeMap<String, u128>> = BTreeMap::new();
    // gpu_busy_ns: each set's length divided equally among its distinct tenants: integer
    // sums per (tenant, number of distinct tenants D), then one rational Σ_D sum / D per
    // tenant (never a rational per set and tenant).
    let mut per_d: BTreeMap<&String, BTreeMap<usize, u128>> = BTreeMap::new();
    let mut busy_total: u128 = 0;
    let (mut sm_exact, mut sm_capped) = (Vec::new(), Vec::new());
    let (mut warp_exact, mut warp_capped) = (Vec::new(), Vec::new());
    // Every sum below is by tenant (and meter, D or factor) in ordered maps: the cell's
    // first-touch order of its slots changes no quantity.
    for (slot, q) in cell.iter() {
        match slots.what[slot as usize] {
            Slot::Int(key, meter) => {
                let t = out
                    .entry(meter)
                    .or_default()
                    .entry(tenants[key as usize].clone())
                    .or_insert(0);
                *t = t.checked_add(q).ok_or(meter)?;
            }
            Slot::Busy(set) => {
                busy_total += q;
                let ts: BTreeSet<&String> = sets[set as usize]
                    .iter()
                    .map(|&k| &tenants[k as usize])
                    .collect();
                let d = ts.len();
                for t in ts {
                    *per_d.entry(t).or_default().entry(d).or_insert(0) += q;
                }
            }
            Slot::Idle(meter) => {
                let t = out
                    .entry(meter)
                    .or_default()
                    .entry(crate::tenant::IDLE.to_string())
                    .or_insert(0);
                *t = t.checked_add(q).ok_or(meter)?;
            }
            Slot::SmExact(key) => sm_exact.push((key, q)),
            Slot::WarpExact(key) => warp_exact.push((key, q)),
            Slot::SmCapped(key, f) => sm_capped.push((key, slots.factors[f as usize], q)),
            Slot::WarpCapped(key, f) => warp_capped.push((key, slots.factors[f as usize], q)),
        }
    }
    let busy: BTreeMap<String, BigRational> = per_d
        .into_iter()
        .map(|(t, by_d)| {
            let share = by_d.into_iter().fold(BigRational::zero(), |acc, (d, sum)| {
                acc + BigRational::new(BigInt::from(sum), BigInt::from(d))
            });
            (t.clone(), share)
        })
        .collect();
    if busy_total > 0 {
        out.insert(MeterKind::GpuBusyNs, largest_remainder(busy, busy_total));
    }
    if sm_count.is_some() {
        // Σ over tenants is an integer when only the device caps: per elementary interval the
        // capped shares sum to len × SMs. Partition caps can leave a fraction: floored.
        if let Some(q) = capped_shares(&sm_exact, &sm_capped, tenants) {
            out.insert(MeterKind::SmNs, q);
        }
    }
    if warp_sm_count.is_some() {
        // Σ over tenants may be fractional when capped: the cell's total is its floor.
        if let Some(q) = capped_shares(&warp_exact, &warp_capped, tenants) {
            out.insert(MeterKind::WarpNs, q);
        }
    }
    Ok(out
        .into_iter()
        .map(|(m, per)| (m, per.into_iter().collect()))
        .collect())
}

/// Per tenant integer shares of a capped time meter: `exact` (key, value) plus, per (key,
/// distinct cap factor `num / den`, value), `value × num / den` (a key or (key, factor) may
/// come more than once: its values add); exact rationals, the cell's total
/// floored, then largest remainder. `None` when the total is 0.
///
/// Values are first summed per (tenant, factor) as integers. The rationals are then formed
/// over one common denominator `L`, the least common multiple of the cell's distinct `den`s:
/// a tenant's share is `N / L` with `N = Σ value × num × (L / den)`, so no rational is ever
/// reduced (adding fractions one by one costs a gcd of ever larger numbers per term, which
/// made cells with thousands of distinct factors take minutes). Floors, the total and the
/// order of fractional parts are those of the exact rationals: the same numbers.
pub(super) fn capped_shares(
    exact: &[(u32, u128)],
    capped: &[(u32, Factor, u128)],
    tenants: &[String],
) -> Option<BTreeMap<String, u128>> {
    let mut whole: BTreeMap<&String, BigInt> = BTreeMap::new();
    for &(k, q) in exact {
        *whole.entry(&tenants[k as usize]).or_default() += q;
    }
    // Per tenant and denominator: Σ value × num (an integer).
    let mut per_den: BTreeMap<&String, BTreeMap<u128, BigInt>> = BTreeMap::new();
    for &(k, (num, den), v) in capped {
        *per_den
            .entry(&tenants[k as usize])
            .or_default()
            .entry(den)
            .or_default() += BigInt::from(v) * BigInt::from(num);
    }
    let dens: BTreeSet<u128> = per_den.values().flat_map(|m| m.keys().copied()).collect();
    let mut lcm = BigInt::from(1u8);
    for &d in &dens {
        let d = BigInt::from(d);
        let g = num_integer::Integer::gcd(&lcm, &d);
        lcm = lcm / g * d;
    }
    let mut numerators: BTreeMap<String, BigInt> = BTreeMap::new();
    for (t, w) in whole {
        numerators.insert(t.clone(), w * &lcm);
    }
    for (t, by_den) in per_den {
        let e = numerators.entry(t.clone()).or_default();
        for (den, v) in by_den {
            *e += v * (&lcm / BigInt::from(den));
        }
    }
    let sum: BigInt = numerators.values().sum();
    let total = (sum / &lcm).to_u128().filter(|&t| t > 0)?;
    Some(largest_remainder_over(numerators, &lcm, total))
}

/// [`largest_remainder`] for shares `N / den` over one denominator `den > 0`: the same
/// floors and the same order of fractional parts, compared as the integers `N mod den`.
fn largest_remainder_over(
    numerators: BTreeMap<String, BigInt>,
    den: &BigInt,
    total: u128,
) -> BTreeMap<String, u128> {
    hand_out(
        numerators.into_iter().map(|(t, n)| {
            let (q, r) = num_integer::Integer::div_mod_floor(&n, den);
            (t, q.to_u128().unwrap_or(0), r)
        }),
        total,
    )
}

/// Turns exact rational shares summing to `total` into integers summing to `total`: floors,
/// then one unit each to the largest fractional parts, ties to the tenant name that sorts first
/// (bytewise).
pub(crate) fn largest_remainder(
    shares: BTreeMap<String, BigRational>,
    total: u128,
) -> BTreeMap<String, u128> {
    hand_out(
        shares.into_iter().map(|(t, r)| {
            let f = r.floor();
            let fi = f.to_integer().to_u128().unwrap_or(0);
            (t, fi, r - f)
        }),
        total,
    )
}

/// The largest-remainder rule over (tenant, floor, fractional part): the floors, then one
/// unit each to the largest fractional parts until the floors sum to `total`, equal
/// fractions to the name that sorts first.
fn hand_out<F: Ord>(
    shares: impl Iterator<Item = (String, u128, F)>,
    total: u128,
) -> BTreeMap<String, u128> {
    let mut floors: BTreeMap<String, u128> = BTreeMap::new();
    let mut fracs: Vec<(F, String)> = Vec::new();
    let mut sum: u128 = 0;
    for (t, fi, frac) in shares {
        sum += fi;
        fracs.push((frac, t.clone()));
        floors.insert(t, fi);
    }
    let mut left = total.saturating_sub(sum);
    // Largest fraction first; equal fractions: name ascending.
    fracs.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    for (_, t) in fracs {
        if left == 0 {
            break;
        }
        if let Some(v) = floors.get_mut(&t) {
            *v += 1;
            left -= 1;
        }
    }
    floors
}

#[cfg(test)]
mod tests {
    use super::*;

    use rustc_hash::FxHashMap;

    pub(super) fn rat(n: i64, d: i64) -> BigRational {
        BigRational::new(BigInt::from(n), BigInt::from(d))
    }

    /// Review: `capped_shares` over one common denominator gives the shares of the exact
    /// rationals summed term by term (`largest_remainder` of `Σ value × num / den` per tenant,
    /// the total the floor of their sum), for random cells with values up to near `u128::MAX`
    /// and denominators sharing factors or not.
    #[test]
    fn capped_shares_equal_the_exact_rationals() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let tenants: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
        for case in 0..400 {
            let mut exact: FxHashMap<u32, u128> = FxHashMap::default();
            let mut capped: FxHashMap<(u32, Factor), u128> = FxHashMap::default();
            let big = case % 4 == 0;
            for _ in 0..(next() % 6) {
                let v = if big {
                    u128::from(next()) << 60
                } else {
                    u128::from(next() % 1000)
                };
                *exact.entry((next() % 5) as u32).or_default() += v;
            }
            for _ in 0..(next() % 12) {
                let den = u128::from(1 + next() % if big { u64::MAX } else { 40 });
                let num = u128::from(1 + next() % 200).min(den);
                let v = if big {
                    u128::from(next()) << 40
                } else {
                    u128::from(next() % 1000)
                };
                *capped.entry(((next() % 5) as u32, (num, den))).or_default() += v;
            }
            let mut shares: BTreeMap<String, BigRational> = BTreeMap::new();
            for (&k, &q) in &exact {
                *shares
                    .entry(tenants[k as usize].clone())
                    .or_insert_with(BigRational::zero) +=
                    BigRational::from_integer(BigInt::from(q));
            }
            for (&(k, (num, den)), &v) in &capped {
                *shares
                    .entry(tenants[k as usize].clone())
                    .or_insert_with(BigRational::zero) +=
                    BigRational::new(BigInt::from(v) * BigInt::from(num), BigInt::from(den));
            }
            let sum: BigRational = shares.values().sum();
            let total = sum.floor().to_integer().to_u128().filter(|&t| t > 0);
            let want = total.map(|t| largest_remainder(shares, t));
            let exact: Vec<(u32, u128)> = exact.into_iter().collect();
            let capped: Vec<(u32, Factor, u128)> =
                capped.into_iter().map(|((k, f), v)| (k, f, v)).collect();
            assert_eq!(
                capped_shares(&exact, &capped, &tenants),
                want,
                "case {case}"
            );
        }
    }

    #[test]
    pub(super) fn largest_remainder_ties_go_to_first_name() {
        let mut m = BTreeMap::new();
        m.insert("bob".to_string(), rat(1, 2));
        m.insert("alice".to_string(), rat(1, 2));
        let r = largest_remainder(m, 1);
        assert_eq!(r["alice"], 1);
        assert_eq!(r["bob"], 0);
    }

    #[test]
    pub(super) fn largest_remainder_largest_fraction_wins() {
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), rat(10, 3)); // 3.333
        m.insert("b".to_string(), rat(17, 3)); // 5.667
        let r = largest_remainder(m, 9);
        assert_eq!((r["a"], r["b"]), (3, 6));
    }
}
