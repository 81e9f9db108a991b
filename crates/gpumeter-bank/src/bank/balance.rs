//! A tenant's balances as of an instant (`gpumeter bank balance`).

use super::*;

/// One grant in a balance (`balance --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditBalance {
    /// The grant's id.
    pub grant: String,
    /// Purchased, promotional or reservation.
    pub kind: GrantKind,
    /// Its priority.
    pub priority: i64,
    /// Its expiry, RFC 3339 UTC, `null` for never.
    pub expires: Option<String>,
    /// Credits left, usable at the balance's instant.
    pub remaining: Decimal,
}

/// A fragment in a balance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FragmentBalance {
    /// The SKU.
    pub sku: String,
    /// The meter.
    pub meter: MeterKind,
    /// Canonical units carried.
    pub quantity: Quantity,
}

/// A tenant's balance at an instant (`gpumeter bank balance --json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Balance {
    /// The tenant.
    pub tenant: String,
    /// The instant, RFC 3339 UTC.
    pub at: String,
    /// Grants in force at `at` with credits left, in burn order.
    pub credits: Vec<CreditBalance>,
    /// Fragments carried, by SKU and meter.
    pub fragments: Vec<FragmentBalance>,
    /// What the finalized invoices leave to pay, per currency (`{"USD": "12.30"}`).
    pub receivable: BTreeMap<String, Decimal>,
}

/// `tenant`'s balance as of `at` (ns): the postings of transactions whose business time
/// (`at` of the grant, the period's end of a finalization, the instant of an expiry) is at
/// most `at`; the credits of grants in force at `at` that have credits left then.
///
/// # Errors
/// [`BankError::Storage`]; [`BankError::Refused`] for a fragment balance that is negative or
/// not whole (a damaged ledger).
pub fn balance<L: Ledger>(ledger: &mut L, tenant: &str, at: u64) -> Result<Balance, BankError> {
    ledger.atomically(false, |t| {
        // Balances as of `at`: the postings of the tenant's accounts in transactions whose
        // business time is at most `at`.
        let prefix = accounts::tenant_prefix(tenant);
        let mut as_of: BTreeMap<(String, String), Decimal> = BTreeMap::new();
        for tx in t.transactions(None)? {
            if parse_rfc3339(&tx.tx.at).map_or(true, |when| when > at) {
                continue;
            }
            for p in tx
                .tx
                .postings
                .iter()
                .filter(|p| p.account.starts_with(&prefix))
            {
                let slot = as_of
                    .entry((p.account.clone(), p.commodity.clone()))
                    .or_insert(Decimal::ZERO);
                *slot = crate::ledger::exact_add(*slot, p.amount)
                    .ok_or_else(|| refused(format!("the balance of {} overflows", p.account)))?;
            }
        }
        let get = |account: &str, commodity: &str| {
            as_of
                .get(&(account.to_string(), commodity.to_string()))
                .copied()
                .unwrap_or(Decimal::ZERO)
        };
        let credits = grants(t, Some(tenant))?
            .into_iter()
            .map(|g| {
                let remaining = get(&accounts::credits(tenant, &g.grant.grant), CREDITS);
                (g, remaining)
            })
            .filter(|(g, remaining)| g.grant.in_force_at(at) && *remaining > Decimal::ZERO)
            .map(|(g, remaining)| CreditBalance {
                grant: g.grant.grant,
                kind: g.grant.kind,
                priority: g.grant.priority,
                expires: g.grant.expires,
                remaining,
            })
            .collect();
        let mut fragments = Vec::new();
        let mut receivable = BTreeMap::new();
        for ((account, commodity), amount) in &as_of {
            if amount.is_zero() {
                continue;
            }
            if let Some((sku, meter)) = accounts::parse_fragments(tenant, account) {
                let q = whole(account, *amount)?;
                fragments.push(FragmentBalance {
                    sku,
                    meter,
                    quantity: Quantity(q),
                });
            } else if *account == accounts::receivable(tenant) {
                receivable.insert(commodity.clone(), *amount);
            }
        }
        Ok(Balance {
            tenant: tenant.to_string(),
            at: rfc3339(at),
            credits,
            fragments,
            receivable,
        })
    })
}
