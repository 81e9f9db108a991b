//! As-of balances never fail (issue 30 item 9): the fragment postings of a
//! finalization are ordered so that no fragment account is negative as of any instant.
//!
//! A finalization's business time is its period's end. A tenant's carried fragments are one
//! pool: a finalization draws all of it and deposits its own period's tail (so over any order
//! of periods, Σ billed + fragments = Σ metered). When the pool holds postings at a later
//! business time than the period's end (a later period of the tenant was finalized first, a
//! close ran after it), drawing it at the period's end would leave the account negative from
//! then until that later time. So the fragment postings then go into a `carry` transaction
//! booked at the latest business time of the accounts' postings ([`fragment_booking`]): as of
//! every earlier instant the accounts are as they were, and from then on they hold what the
//! finalization left. [`check_fragments`] is the guard that holds whatever the order: postings
//! that would still leave an account negative at some instant (a supplement whose fragment
//! shrinks after a later period drew it, say) are refused.

use super::*;
use crate::bank::refusal::FinalizeRefusal;

/// The changes of `tenant`'s fragment accounts named in `accounts`, by business time: every
/// transaction of the tenant that posts to fragments (finalizations, carries, closes).
fn history<'a>(
    t: &dyn LedgerTx,
    tenant: &str,
    accounts: &BTreeSet<&'a str>,
) -> Result<BTreeMap<&'a str, BTreeMap<u64, Decimal>>, BankError> {
    let mut out: BTreeMap<&'a str, BTreeMap<u64, Decimal>> = BTreeMap::new();
    for kind in ["finalize", "carry", "close"] {
        for tx in t.tenant_transactions(kind, tenant)? {
            let when = parse_time(&tx.tx.at)?;
            for p in &tx.tx.postings {
                add(&mut out, accounts, &p.account, when, p.amount)?;
            }
        }
    }
    Ok(out)
}

fn add<'a>(
    out: &mut BTreeMap<&'a str, BTreeMap<u64, Decimal>>,
    accounts: &BTreeSet<&'a str>,
    account: &str,
    when: u64,
    amount: Decimal,
) -> Result<(), BankError> {
    let Some(name) = accounts.get(account) else {
        return Ok(());
    };
    let slot = out
        .entry(name)
        .or_default()
        .entry(when)
        .or_insert(Decimal::ZERO);
    *slot = crate::ledger::exact_add(*slot, amount)
        .ok_or_else(|| refused(format!("the balance of {account} overflows")))?;
    Ok(())
}

/// The tenant's fragment accounts among `postings`.
fn fragment_accounts<'a>(tenant: &str, postings: &'a [Posting]) -> BTreeSet<&'a str> {
    postings
        .iter()
        .filter(|p| accounts::parse_fragments(tenant, &p.account).is_some())
        .map(|p| p.account.as_str())
        .collect()
}

/// When a finalization of `tenant` whose period ends at `at` books its fragment `postings`:
/// `None` at `at`, in the finalization's own transaction; `Some(later)` in a `carry`
/// transaction at `later`, the latest business time of a posting to one of those accounts,
/// when that is after `at`.
pub(crate) fn fragment_booking(
    t: &dyn LedgerTx,
    tenant: &str,
    at: u64,
    postings: &[Posting],
) -> Result<Option<u64>, BankError> {
    let touched = fragment_accounts(tenant, postings);
    if touched.is_empty() {
        return Ok(None);
    }
    let latest = history(t, tenant, &touched)?
        .values()
        .filter_map(|by_time| by_time.keys().next_back().copied())
        .max();
    Ok(latest.filter(|&l| l > at))
}

/// Refuses `postings` of a transaction of `tenant` at business time `at` (ns) when, with them,
/// one of the tenant's fragment accounts they touch would be negative as of any instant: the
/// sum of its postings in transactions whose business time is at most that instant.
/// `period` names the finalization in the refusal.
pub(crate) fn check_fragments(
    t: &dyn LedgerTx,
    tenant: &str,
    at: u64,
    postings: &[Posting],
    period: (u64, u64),
) -> Result<(), BankError> {
    let touched = fragment_accounts(tenant, postings);
    if touched.is_empty() {
        return Ok(());
    }
    let mut changes = history(t, tenant, &touched)?;
    for p in postings {
        add(&mut changes, &touched, &p.account, at, p.amount)?;
    }
    for (account, by_time) in changes {
        let mut balance = Decimal::ZERO;
        for (when, amount) in by_time {
            balance = crate::ledger::exact_add(balance, amount)
                .ok_or_else(|| refused(format!("the balance of {account} overflows")))?;
            if balance < Decimal::ZERO {
                return Err(FinalizeRefusal::NegativeBalance {
                    tenant: tenant.to_string(),
                    from: rfc3339(period.0),
                    to: rfc3339(period.1),
                    account: account.to_string(),
                    balance: balance.to_string(),
                    at: rfc3339(when),
                }
                .into());
            }
        }
    }
    Ok(())
}
