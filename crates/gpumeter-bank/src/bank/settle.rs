//! Settling an invoice at finalization: credits in force at the period's end burn against its
//! lines, and its subtotal, credits applied and total are set, with their postings.

use super::*;

/// What the period's earlier invoices settled, for a credit note to undo: the invoices, in
/// ledger order (the first one first), and the instant from which a grant counts as expired
/// (its credits given back go to breakage, as [`super::expire`] sends them).
pub(crate) struct Settled<'a> {
    /// The period's earlier invoices (none for a first invoice).
    pub(crate) invoices: &'a [Invoice],
    /// A grant whose expiry is at or before this instant (ns) has expired: the latest
    /// `expire` run's instant, or the caller's clock when later. `None`: none has.
    pub(crate) expired_by: Option<u64>,
}

/// Burns the credits in force at the period's end against the invoice's lines and sets its
/// subtotal, credits applied and total; adds the postings of the burns, the receivable and the
/// revenue. A supplement's negative lines first offset what its positive lines leave to pay
/// (those of the same SKU and meter, then the others in line order). A credit note (a negative
/// subtotal) burns nothing: it undoes the period's settlement in reverse ([`give_back`]): first
/// what the period's invoices left to pay in money, then the credits they burned, latest burn
/// first, as negative `credits_applied` entries.
#[allow(clippy::too_many_arguments)]
pub(crate) fn credits_and_totals(
    t: &dyn LedgerTx,
    inv: &mut Invoice,
    tenant: &str,
    to: u64,
    subtotal_minor: i128,
    book: &PriceBook,
    settled: &Settled<'_>,
    postings: &mut Vec<Posting>,
) -> Result<(), BankError> {
    let currency = book.currency();
    let scale = currency.scale();
    let at_end = to.saturating_sub(1);
    let mut left = payable(&inv.lines, scale)?;
    let mut applied: Vec<CreditApplied> = Vec::new();
    let mut covered_total: u128 = 0;
    let mut returned_total: u128 = 0;
    if subtotal_minor < 0 {
        let returned = give_back(t, inv, tenant, subtotal_minor.unsigned_abs(), book, settled)?;
        returned_total = returned.minor;
        applied = returned.applied;
        postings.extend(returned.postings);
    }
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
    let returned = i128::try_from(returned_total).map_err(|_| refused("credits exceed 2^127"))?;
    inv.subtotal = decimal(subtotal_minor, "subtotal")?;
    // A credit note is bounded as the invoice it takes back.
    bounded(tenant, inv.subtotal.abs(), inv)?;
    inv.credits_applied = applied;
    // total = subtotal − Σ credits_applied.amount, the credits given back counting negative.
    inv.total = decimal(subtotal_minor - covered + returned, "total")?;
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

/// One burn of a period's earlier invoice not given back yet: its grant, credits and the minor
/// units they covered.
struct Burned {
    grant: String,
    credits: Decimal,
    minor: u128,
}

/// What a credit note gives back of the period's credits.
struct GivenBack {
    /// The negative `credits_applied` entries, latest burn first.
    applied: Vec<CreditApplied>,
    /// The minor units the credits given back had covered.
    minor: u128,
    /// The burns' postings reversed (to breakage for a grant expired since).
    postings: Vec<Posting>,
}

/// The burns of the period's earlier invoices not given back yet, in burn order (the first
/// invoice's first burn first): each invoice's positive `credits_applied` entries pushed, its
/// negative ones (an earlier credit note's give-back) taking back the latest burns of their
/// grant, as [`give_back`] took them.
fn burns_standing(invoices: &[Invoice], scale: u32) -> Result<Vec<Burned>, BankError> {
    let mut stack: Vec<Burned> = Vec::new();
    for inv in invoices {
        for c in &inv.credits_applied {
            let minor = signed_minor(std::iter::once(c.amount), scale)?;
            if c.credits > Decimal::ZERO {
                stack.push(Burned {
                    grant: c.grant.clone(),
                    credits: c.credits,
                    minor: minor.max(0).unsigned_abs(),
                });
                continue;
            }
            let (mut credits, mut minor) = (-c.credits, minor.min(0).unsigned_abs());
            for b in stack.iter_mut().rev().filter(|b| b.grant == c.grant) {
                let (dc, dm) = (b.credits.min(credits), b.minor.min(minor));
                b.credits -= dc;
                b.minor -= dm;
                credits -= dc;
                minor -= dm;
            }
        }
        stack.retain(|b| b.credits > Decimal::ZERO || b.minor > 0);
    }
    Ok(stack)
}

/// A credit note of `need` minor units undoes the period's settlement in reverse: first what
/// the period's earlier invoices left to pay in money (the sum of their totals, which the
/// credit note's total takes off the receivable), then the credits they burned, latest burn
/// first, to the same grants at the credits' own rate: a burn given back whole returns
/// exactly the credits it burned, a part of one the credits worth that part, rounded up to
/// [`crate::grants::CREDIT_DECIMALS`] (the tenant's favour) and never more than it burned. The
/// postings mirror the burn's: `credits:<grant> +c`, `<source> −c` (credits), `<source> −m`
/// (currency); for a grant expired since ([`Settled::expired_by`]) the credits go to
/// `provider:breakage` instead of the tenant (a warning says so). What is left of `need` after
/// both lowers the receivable.
fn give_back(
    t: &dyn LedgerTx,
    inv: &mut Invoice,
    tenant: &str,
    need: u128,
    book: &PriceBook,
    settled: &Settled<'_>,
) -> Result<GivenBack, BankError> {
    let currency = book.currency();
    let scale = currency.scale();
    let owed = signed_minor(settled.invoices.iter().map(|i| i.total), scale)?;
    let mut need = need.saturating_sub(owed.max(0).unsigned_abs());
    let terms: BTreeMap<String, Grant> = grants(t, Some(tenant))?
        .into_iter()
        .map(|g| (g.grant.grant.clone(), g.grant))
        .collect();
    let mut out = GivenBack {
        applied: Vec::new(),
        minor: 0,
        postings: Vec::new(),
    };
    let mut stack = burns_standing(settled.invoices, scale)?;
    while need > 0 {
        let Some(b) = stack.pop() else { break };
        if b.minor == 0 {
            continue;
        }
        let g = terms.get(&b.grant).ok_or_else(|| {
            refused(format!(
                "tenant `{tenant}`: grant {} burned on the period's invoices is not in the ledger",
                b.grant
            ))
        })?;
        let minor = b.minor.min(need);
        let credits = if minor == b.minor {
            b.credits
        } else {
            credits_worth(minor, g.rate, scale)
                .ok_or_else(|| {
                    refused(format!(
                        "grant {}: {minor} minor units at a rate of {} cannot be expressed in \
                         credits",
                        b.grant, g.rate
                    ))
                })?
                .min(b.credits)
        };
        let amount = minor_units_to_decimal(&minor.into(), &currency)
            .ok_or_else(|| refused("a credit amount exceeds a decimal"))?;
        let source = g.kind.source_account();
        let expired = g
            .expires_ns()
            .zip(settled.expired_by)
            .is_some_and(|(e, by)| e <= by);
        if expired {
            postings_to(&mut out.postings, accounts::BREAKAGE, credits);
            inv.warnings.push(Warning::new(
                WarningCode::GrantNotInForce,
                format!(
                    "grant {} expired at {} since it paid this period: the {} credits this \
                     credit note gives back of it go to breakage, not to the tenant",
                    g.grant,
                    g.expires.as_deref().unwrap_or("never"),
                    credits.normalize()
                ),
            ));
        } else {
            postings_to(
                &mut out.postings,
                &accounts::credits(tenant, &g.grant),
                credits,
            );
        }
        out.postings.push(Posting::new(source, CREDITS, -credits));
        out.postings
            .push(Posting::new(source, currency.code(), -amount));
        match out.applied.last_mut() {
            Some(last) if last.grant == g.grant => {
                last.credits -= credits;
                last.amount -= amount;
            }
            _ => out.applied.push(CreditApplied {
                grant: g.grant.clone(),
                credits: -credits.normalize(),
                amount: -amount,
            }),
        }
        out.minor += minor;
        need -= minor;
    }
    for a in &mut out.applied {
        a.credits = a.credits.normalize();
    }
    Ok(out)
}

/// A posting of `credits` into `account` (the tenant's grant, or breakage).
fn postings_to(postings: &mut Vec<Posting>, account: &str, credits: Decimal) {
    postings.push(Posting::new(account.to_string(), CREDITS, credits));
}

/// The credits worth `minor` minor units at `rate`, rounded up to
/// [`crate::grants::CREDIT_DECIMALS`]: what a part of a burn gives back. `None` for a zero or
/// negative rate.
fn credits_worth(minor: u128, rate: Decimal, scale: u32) -> Option<Decimal> {
    let down = crate::grants::credits_for(minor, rate, scale, crate::grants::MAX_CREDITS)?;
    let want = Decimal::try_from_i128_with_scale(i128::try_from(minor).ok()?, scale).ok()?;
    let exact = down.checked_mul(rate).is_some_and(|v| v == want);
    Some(if exact {
        down
    } else {
        down + Decimal::new(1, crate::grants::CREDIT_DECIMALS)
    })
}
