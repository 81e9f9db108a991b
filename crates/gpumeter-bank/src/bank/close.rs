//! Contract close: the remaining fragments billed (`gpumeter bank close`).

use super::*;

/// What `close` billed: one line per fragment, and the transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closed {
    /// The tenant.
    pub tenant: String,
    /// The currency.
    pub currency: String,
    /// `(sku, meter, quantity, unit_price, amount)` per fragment billed.
    pub lines: Vec<ClosedLine>,
    /// Σ amounts.
    pub total: Decimal,
    /// The business time the close is booked at (RFC 3339 UTC) when it is not the instant it
    /// was asked for: the tenant's fragment accounts have postings after that instant (a
    /// period finalized before it ended deposits its fragment at its end), and the close,
    /// which draws them whole, is booked at the latest of those postings, so no as-of balance
    /// is negative. Absent when the close is booked at the instant asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booked_at: Option<String>,
}

/// One fragment billed at contract close.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedLine {
    /// The SKU.
    pub sku: String,
    /// The meter.
    pub meter: MeterKind,
    /// Canonical units billed (the whole fragment).
    pub quantity: Quantity,
    /// The last unit price of the SKU and meter (the rate with the latest validity).
    pub unit_price: Decimal,
    /// The pricing unit.
    pub pricing_unit: String,
    /// round(quantity × unit_price ÷ unit), once; under a package rate
    /// round((quantity − covered) × unit_price ÷ package_size), once.
    pub amount: Decimal,
    /// Under a package rate: the package size in canonical units (`unit_price` is the price
    /// of one package). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_size: Option<Quantity>,
    /// Under a package rate: the canonical units of the fragment that the packages its last
    /// period paid for already hold (not billed again). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub covered: Option<Quantity>,
}

/// Contract close: bills each of `tenant`'s remaining fragments at the last unit
/// price of its SKU and meter in `book` (the rate with the latest `valid_from`; its
/// `unit_price`), rounded once per fragment, and empties them.
///
/// Under a package rate (issue 30 item 5) `unit_price` is the price of a package, so a close
/// bills at most the fragment's pro-rata share of one: `round(uncovered × unit_price ÷
/// package_size)`, where `uncovered` is the part of the fragment the packages already paid
/// for do not hold. The tenant's latest finalization that carried the fragment out says what
/// was paid: when the last lines of the SKU and meter of its period's cumulative rating are
/// package lines (the period's last package span, whichever of the period's invoices billed
/// them: its memo's `paid_packages`), they paid `Σ packages × package_size` units for
/// `Σ billable` units, and the room left (`packages × size − billable`) holds that much of the
/// fragment, which is then not billed again. Without such a finalization (or when it did not
/// carry out this fragment), nothing counts as covered. A memo without `paid_packages` (a
/// gpumeter before it) is read from its invoice's own lines, as it was then.
///
/// The close's business time is `at`, or, when the fragment accounts it draws have postings
/// at a later business time (a period finalized before it ended, whose fragment is deposited
/// at its end), the latest of them ([`Closed::booked_at`]): the close draws the accounts'
/// balances at the end of time, so booked earlier it would leave them negative as of every
/// instant between (issue 30 item 9). As of every instant before its booking the accounts are
/// as they were, and from then on they are empty.
///
/// # Errors
/// [`BankError::Refused`] for the tenant `idle`, a fragment whose SKU and meter the book has
/// no rate for, a close worth more than [`crate::grants::MAX_AMOUNT`];
/// [`BankError::Storage`].
pub fn close<L: Ledger>(
    ledger: &mut L,
    tenant: &str,
    book: &PriceBook,
    at: u64,
) -> Result<Closed, BankError> {
    never_idle(tenant)?;
    let currency = book.currency();
    ledger.atomically(true, |t| {
        // The currency first: a bank without one yet is held whole before the tenant is.
        check_currency(t, book)?;
        t.lock_tenants(&[tenant])?;
        let mut lines = Vec::new();
        let mut postings = Vec::new();
        let mut total = Decimal::ZERO;
        for ((sku, meter), q) in fragment_balances(t, tenant)? {
            if q == 0 {
                continue;
            }
            let last = book
                .rates()
                .iter()
                .filter(|r| r.sku == sku && r.meter == meter)
                .max_by_key(|r| (r.valid_from.unwrap_or(0), r.index))
                .ok_or_else(|| {
                    refused(format!(
                        "{}: no rate of sku `{sku}` for {meter} to bill the fragment with",
                        book.name()
                    ))
                })?;
            let (billed, factor, package) = match last.package_size_canonical {
                Some(size) if last.model.priced_per_package() => {
                    let covered = paid_room(t, tenant, &sku, meter, q, size)?.min(q);
                    (q - covered, (size.max(1), 1), Some((size, covered)))
                }
                _ => (q, (last.unit.factor_num(), last.unit.factor_den()), None),
            };
            let m = amount_minor_units(billed, last.unit_price, factor, &currency, book.rounding())
                .ok_or_else(|| refused("the fragment's amount cannot be computed"))?;
            let amount = minor_units_to_decimal(&m, &currency)
                .ok_or_else(|| refused("the fragment's amount exceeds a decimal"))?;
            let qd = Decimal::try_from_i128_with_scale(to_i128(q)?, 0)
                .map_err(|_| refused("a fragment exceeds a decimal"))?;
            postings.push(Posting::new(
                accounts::fragments(tenant, &sku, meter),
                meter.canonical_unit(),
                -qd,
            ));
            postings.push(Posting::new(
                accounts::FRAGMENTS,
                meter.canonical_unit(),
                qd,
            ));
            total = crate::ledger::exact_add(total, amount).ok_or_else(|| {
                refused(format!(
                    "closing `{tenant}`: the fragments' amounts sum past what a decimal holds"
                ))
            })?;
            lines.push(ClosedLine {
                sku,
                meter,
                quantity: Quantity(q),
                unit_price: last.unit_price,
                pricing_unit: last.unit.name().to_string(),
                amount,
                package_size: package.map(|(size, _)| Quantity(size)),
                covered: package.map(|(_, c)| Quantity(c)),
            });
        }
        crate::grants::within(
            &format!("closing `{tenant}`: the fragments' amount"),
            total,
            crate::grants::MAX_AMOUNT,
            "one request may be worth",
        )?;
        // Booked at `at`, or at the latest posting of the accounts it draws when that is later
        // (the same booking as a finalization's fragments, `asof::fragment_booking`). Drawn
        // then, at or after every posting of them, the accounts are as they were before it and
        // empty from it on: no as-of balance goes negative, so `asof::check_fragments` would
        // have nothing to refuse.
        let booked = fragment_booking(t, tenant, at, &postings)?;
        let closed = Closed {
            tenant: tenant.to_string(),
            currency: currency.code().to_string(),
            lines,
            total,
            booked_at: booked.map(rfc3339),
        };
        if !postings.is_empty() {
            postings.push(Posting::new(
                accounts::receivable(tenant),
                currency.code(),
                total,
            ));
            postings.push(Posting::new(accounts::REVENUE, currency.code(), -total));
            t.append(NewTransaction {
                key: format!("close:{tenant}:{}", t.head()?.unwrap_or_default()),
                kind: "close".into(),
                at: rfc3339(booked.unwrap_or(at)),
                tenant: Some(tenant.to_string()),
                postings,
                memo: serde_json::to_value(&closed).map_err(|e| refused(e.to_string()))?,
            })?;
        }
        Ok(closed)
    })
}

/// The last package span of a period's cumulative rating on one SKU and meter: what a
/// finalization's memo keeps (`paid_packages`) for [`close`], so that a close after a
/// supplement reads the period's packages, not the supplement's changes of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PaidPackages {
    /// The SKU.
    pub(crate) sku: String,
    /// The meter.
    pub(crate) meter: MeterKind,
    /// Σ packages of the trailing package lines of the SKU and meter.
    pub(crate) packages: Quantity,
    /// Σ billable canonical units of those lines.
    pub(crate) billable: Quantity,
}

/// The last package span of each SKU and meter of `inv`, a whole rating (a first invoice, or
/// a period's cumulative rating; not a supplement's changes): per SKU and meter, its trailing
/// `usage` lines that are package lines, summed. A SKU and meter whose last usage line is not
/// a package line has none.
pub(crate) fn paid_packages(inv: &Invoice) -> Vec<PaidPackages> {
    let mut spans: BTreeMap<(String, MeterKind), (u128, u128)> = BTreeMap::new();
    for l in &inv.lines {
        let (LineKind::Usage, Some(sku), Some(meter)) = (&l.kind, l.sku.as_ref(), l.meter) else {
            continue;
        };
        let key = (sku.clone(), meter);
        match l.extensions.packages {
            Some(p) => {
                let slot = spans.entry(key).or_insert((0, 0));
                slot.0 = slot.0.saturating_add(p.0);
                slot.1 = slot
                    .1
                    .saturating_add(l.billable_quantity.map_or(0, |b| b.0));
            }
            // A line after a package span ends it.
            None => {
                spans.remove(&key);
            }
        }
    }
    spans
        .into_iter()
        .map(|((sku, meter), (packages, billable))| PaidPackages {
            sku,
            meter,
            packages: Quantity(packages),
            billable: Quantity(billable),
        })
        .collect()
}

/// The canonical units of `tenant`'s fragment of `q` on (`sku`, `meter`) that the packages of
/// its last period already hold: from the latest finalization whose invoice names the SKU and
/// meter, when it carried out exactly this fragment, `Σ packages × size − Σ billable` over the
/// last package span of its period's cumulative rating (its memo's `paid_packages`; for a memo
/// without them, the trailing package lines of its own invoice); 0 otherwise.
fn paid_room(
    t: &dyn LedgerTx,
    tenant: &str,
    sku: &str,
    meter: MeterKind,
    q: u128,
    size: u128,
) -> Result<u128, BankError> {
    let ours = |sk: &str, m: MeterKind| sk == sku && m == meter;
    for done in t.tenant_transactions("finalize", tenant)?.iter().rev() {
        let Ok(inv) = serde_json::from_value::<Invoice>(done.tx.memo["invoice"].clone()) else {
            continue;
        };
        let lines: Vec<&Line> = inv
            .lines
            .iter()
            .filter(|l| {
                l.kind == LineKind::Usage && l.sku.as_deref() == Some(sku) && l.meter == Some(meter)
            })
            .collect();
        let names = !lines.is_empty()
            || inv
                .extensions
                .fragments_in
                .iter()
                .chain(&inv.extensions.fragments_out)
                .any(|f| ours(&f.sku, f.meter));
        if !names {
            continue;
        }
        let out: u128 = inv
            .extensions
            .fragments_out
            .iter()
            .filter(|f| ours(&f.sku, f.meter))
            .map(|f| f.quantity.0)
            .sum();
        if out != q {
            return Ok(0);
        }
        let spans: Vec<PaidPackages> = match done.tx.memo.get("paid_packages") {
            Some(kept) => serde_json::from_value(kept.clone()).map_err(|e| BankError::Corrupt {
                seq: done.seq,
                key: done.tx.key.clone(),
                reason: format!("the memo's `paid_packages` are not the packages paid for: {e}"),
            })?,
            // A memo of a gpumeter before `paid_packages`: its invoice's own lines.
            None => paid_packages(&inv),
        };
        let Some(span) = spans.iter().find(|p| ours(&p.sku, p.meter)) else {
            return Ok(0);
        };
        return Ok(span
            .packages
            .0
            .saturating_mul(size)
            .saturating_sub(span.billable.0));
    }
    Ok(0)
}
