//! Settling an invoice at finalization: credits in force at the period's end burn against its
//! lines, and its subtotal, credits applied and total are set, with their postings.

use super::*;

/// Burns the credits in force at the period's end against the invoice's lines and sets its
/// subtotal, credits applied and total; adds the postings of the burns, the receivable and the
/// revenue. A supplement's negative lines first offset what its positive lines leave to pay
/// (those of the same SKU and meter, then the others in line order); a credit note (a negative
/// subtotal) burns nothing.
pub(crate) fn credits_and_totals(
    t: &dyn LedgerTx,
    inv: &mut Invoice,
    tenant: &str,
    to: u64,
    subtotal_minor: i128,
    book: &PriceBook,
    postings: &mut Vec<Posting>,
) -> Result<(), BankError> {
    let currency = book.currency();
    let scale = currency.scale();
    let at_end = to.saturating_sub(1);
    let mut left = payable(&inv.lines, scale)?;
    let mut applied: Vec<CreditApplied> = Vec::new();
    let mut covered_total: u128 = 0;
    for g in grants(t, Some(tenant))? {
        if subtotal_minor < 0 {
            break;
        }
        if g.remaining <= Decimal::ZERO {
            continue;
        }
        if !g.grant.in_force_at(at_end) {
            inv.warnings.push(Warning::new(
                WarningCode::GrantNotInForce,
                format!(
                "grant {} ({} credits left, usable from {} until {}) is not in force at the end \
                 of the period and pays nothing on this invoice",
                g.grant.grant,
                g.remaining,
                g.grant.effective,
                g.grant.expires.as_deref().unwrap_or("never")
            ),
            ));
            continue;
        }
        let (burned_credits, covered) = burn(&g, &inv.lines, &mut left, scale)?;
        if covered == 0 {
            continue;
        }
        let amount = minor_units_to_decimal(&covered.into(), &currency)
            .ok_or_else(|| refused("a credit amount exceeds a decimal"))?;
        let source = g.grant.kind.source_account();
        postings.push(Posting::new(
            accounts::credits(tenant, &g.grant.grant),
            CREDITS,
            -burned_credits,
        ));
        postings.push(Posting::new(source, CREDITS, burned_credits));
        postings.push(Posting::new(source, currency.code(), amount));
        applied.push(CreditApplied {
            grant: g.grant.grant.clone(),
            credits: burned_credits.normalize(),
            amount,
        });
        covered_total += covered;
    }
    let decimal = |m: i128, what: &str| {
        let d = minor_units_to_decimal(&m.unsigned_abs().into(), &currency)
            .ok_or_else(|| refused(format!("the {what} exceeds a decimal")))?;
        Ok::<_, BankError>(if m < 0 { -d } else { d })
    };
    let covered = i128::try_from(covered_total).map_err(|_| refused("credits exceed 2^127"))?;
    inv.subtotal = decimal(subtotal_minor, "subtotal")?;
    // A credit note is bounded as the invoice it takes back.
    bounded(tenant, inv.subtotal.abs(), inv)?;
    inv.credits_applied = applied;
    inv.total = decimal(subtotal_minor - covered, "total")?;
    postings.push(Posting::new(
        accounts::receivable(tenant),
        currency.code(),
        inv.total,
    ));
    postings.push(Posting::new(
        accounts::REVENUE,
        currency.code(),
        -inv.subtotal,
    ));
    Ok(())
}

/// The minor units each line leaves to pay: its amount when positive; a supplement's negative
/// lines offset the positive lines of their SKU and meter first, then the others in line
/// order. All zero when the lines sum to less than zero (a credit note).
fn payable(lines: &[Line], scale: u32) -> Result<Vec<u128>, BankError> {
    let amounts: Vec<i128> = lines
        .iter()
        .map(|l| signed_minor(std::iter::once(l.amount), scale))
        .collect::<Result<_, _>>()?;
    let mut left: Vec<u128> = amounts.iter().map(|&a| a.max(0).unsigned_abs()).collect();
    for (i, &a) in amounts.iter().enumerate() {
        if a >= 0 {
            continue;
        }
        let mut need = a.unsigned_abs();
        let same = |j: usize| lines[j].sku == lines[i].sku && lines[j].meter == lines[i].meter;
        let order: Vec<usize> = (0..lines.len())
            .filter(|&j| same(j))
            .chain((0..lines.len()).filter(|&j| !same(j)))
            .collect();
        for j in order {
            let take = left[j].min(need);
            left[j] -= take;
            need -= take;
        }
        if need > 0 {
            return Ok(vec![0; lines.len()]);
        }
    }
    Ok(left)
}

/// Σ amounts in minor units of a currency of `scale` decimals, signed.
pub(crate) fn signed_minor(
    amounts: impl Iterator<Item = Decimal>,
    scale: u32,
) -> Result<i128, BankError> {
    let mut sum: i128 = 0;
    for a in amounts {
        let mut a = a;
        a.rescale(scale);
        sum = sum
            .checked_add(a.mantissa())
            .ok_or_else(|| refused("amounts exceed 2^127 minor units"))?;
    }
    Ok(sum)
}

/// Burns grant `g` against the lines it may pay for, in line order: returns the credits
/// burned and the minor units covered, and lowers `left` (minor units left per line).
fn burn(
    g: &GrantBalance,
    lines: &[Line],
    left: &mut [u128],
    scale: u32,
) -> Result<(Decimal, u128), BankError> {
    let mut remaining = g.remaining;
    let mut burned = Decimal::ZERO;
    let mut covered_total = 0u128;
    for (l, rest) in lines.iter().zip(left.iter_mut()) {
        if *rest == 0 || !g.grant.covers(l.sku.as_deref(), l.meter) {
            continue;
        }
        // The credits that pay the line, and the whole minor units they cover: never more
        // than one minor unit beyond their value, whatever the rate (issue 30 item 6).
        let (credits, covered) = crate::grants::pay(*rest, remaining, g.grant.rate, scale)
            .ok_or_else(|| {
                refused(format!(
                    "grant {}: {} minor units at a rate of {} cannot be expressed in credits",
                    g.grant.grant, *rest, g.grant.rate
                ))
            })?;
        if covered == 0 || credits.is_zero() {
            // Worth less than one credit at 9 decimals: a burn of nothing pays nothing.
            continue;
        }
        remaining -= credits;
        burned += credits;
        *rest -= covered;
        covered_total += covered;
    }
    Ok((burned, covered_total))
}
