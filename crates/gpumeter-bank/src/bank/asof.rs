//! As-of balances never fail (issue 30 item 9): the fragment postings of a
//! finalization or a close are ordered so that no fragment account is negative as of any
//! instant.
//!
//! A finalization's business time is its period's end. A tenant's carried fragments are one
//! pool: a finalization draws all of it and deposits its own period's tail (so over any order
//! of periods, Σ billed + fragments = Σ metered). When the pool holds postings at a later
//! business time than the period's end (a later period of the tenant was finalized first, a
//! close ran after it), drawing it at the period's end would leave the account negative from
//! then until that later time. So the fragment postings then go into a `carry` transaction
//! booked at the latest business time of the accounts' postings ([`fragment_booking`]): as of
//! every earlier instant the accounts are as they were, and from then on they hold what the
//! finalization left. A close ([`crate::close`]) draws the whole pool too, so it is booked the
//! same way, at the later of its instant and that latest business time (a period finalized
//! before it ended deposits its fragment at its end, after the close's "now").
//! [`check_fragments`] is the guard that holds whatever the order: postings that would make an
//! account's balance at some instant negative, and lower than it was without them (a
//! supplement whose fragment shrinks after a later period drew it, say), are refused. A
//! negative as-of history that is already in the ledger (written before issue 30, when a
//! period finalized after a later one drew at its own end) blocks nothing: postings at time
//! `at` change only the balances as of `at` and later, and only a balance they make newly
//! negative, or more negative, is refused.

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
/// one of the tenant's fragment accounts they touch would be negative as of some instant, and
/// lower than it was as of that instant without them: a balance made newly negative, or more
/// negative, by this transaction. The balance as of an instant is the sum of the account's
/// postings in transactions whose business time is at most that instant; the postings change
/// only the balances as of `at` and later, so those are the instants looked at (`at` itself
/// and each later business time of the account's postings). A negative balance already in the
/// history (a ledger written before issue 30) is not this transaction's and is not refused.
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
    let changes = history(t, tenant, &touched)?;
    // What the postings add to each account, from `at` on.
    let mut added: BTreeMap<&str, BTreeMap<u64, Decimal>> = BTreeMap::new();
    for p in postings {
        add(&mut added, &touched, &p.account, at, p.amount)?;
    }
    let sum = |account: &str, a: Decimal, b: Decimal| {
        crate::ledger::exact_add(a, b)
            .ok_or_else(|| refused(format!("the balance of {account} overflows")))
    };
    for (account, by_time) in added {
        // `add` summed the postings into the one instant `at`.
        let delta = by_time.get(&at).copied().unwrap_or(Decimal::ZERO);
        let empty = BTreeMap::new();
        let before_by_time = changes.get(account).unwrap_or(&empty);
        // The balance before the postings as of `at`, then as of each later business time.
        let mut before = Decimal::ZERO;
        for amount in before_by_time.range(..=at).map(|(_, a)| *a) {
            before = sum(account, before, amount)?;
        }
        use std::ops::Bound::{Excluded, Unbounded};
        let later = before_by_time.range((Excluded(at), Unbounded));
        let mut instants = vec![(at, Decimal::ZERO)];
        instants.extend(later.map(|(w, a)| (*w, *a)));
        for (when, amount) in instants {
            before = sum(account, before, amount)?;
            let after = sum(account, before, delta)?;
            if after < Decimal::ZERO && after < before {
                return Err(FinalizeRefusal::NegativeBalance {
                    tenant: tenant.to_string(),
                    from: rfc3339(period.0),
                    to: rfc3339(period.1),
                    account: account.to_string(),
                    balance: after.to_string(),
                    at: rfc3339(when),
                }
                .into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLedger;

    const FRAG: &str = "tenant:acme:fragments:h100:kernel_launches";

    fn ns(s: &str) -> u64 {
        parse_time(s).expect("a time")
    }

    fn moved(amount: i64) -> Vec<Posting> {
        vec![
            Posting::new(FRAG, "1", Decimal::from(amount)),
            Posting::new(accounts::FRAGMENTS, "1", Decimal::from(-amount)),
        ]
    }

    /// A ledger written before issue 30: the fragment account is -700 as of every instant of
    /// [2027-01-01, 2027-02-01) (a December drawn at its end from January's deposit), 0 after.
    fn legacy() -> MemoryLedger {
        let mut bank = MemoryLedger::new();
        bank.atomically(true, |t| {
            for (key, at, amount) in [
                ("finalize:legacy-december", "2027-01-01T00:00:00Z", -700),
                ("finalize:january", "2027-02-01T00:00:00Z", 700),
            ] {
                t.append(NewTransaction {
                    key: key.into(),
                    kind: "finalize".into(),
                    at: at.into(),
                    tenant: Some("acme".into()),
                    postings: moved(amount),
                    memo: serde_json::json!({}),
                })?;
            }
            Ok(())
        })
        .expect("the legacy history");
        bank
    }

    fn check(bank: &mut MemoryLedger, at: &str, amount: i64) -> Result<(), BankError> {
        let period = (ns("2027-03-01T00:00:00Z"), ns("2027-04-01T00:00:00Z"));
        bank.atomically(false, |t| {
            check_fragments(t, "acme", ns(at), &moved(amount), period)
        })
    }

    /// An old negative history is no new posting's fault: postings that leave it as it was,
    /// or less negative, pass; postings that make a balance at some instant more negative than
    /// it was, or newly negative, are refused, naming that balance and instant.
    #[test]
    fn only_a_balance_made_newly_or_more_negative_is_refused() {
        let mut bank = legacy();
        check(&mut bank, "2027-03-01T00:00:00Z", 700).expect("after the history");
        check(&mut bank, "2027-01-15T00:00:00Z", 100).expect("less negative");
        check(&mut bank, "2026-12-15T00:00:00Z", 0).expect("nothing moved");
        for (at, amount, balance, when) in [
            ("2027-01-15T00:00:00Z", -1, "-701", "2027-01-15T00:00:00Z"),
            ("2027-03-01T00:00:00Z", -1, "-1", "2027-03-01T00:00:00Z"),
            ("2026-12-15T00:00:00Z", -5, "-5", "2026-12-15T00:00:00Z"),
            // At January's end, where the history is back to 0: newly negative.
            ("2027-02-01T00:00:00Z", -1, "-1", "2027-02-01T00:00:00Z"),
        ] {
            let r = check(&mut bank, at, amount);
            let Err(BankError::Finalize(refusal)) = r else {
                panic!("{at} {amount}: {r:?}");
            };
            let FinalizeRefusal::NegativeBalance {
                account,
                balance: b,
                at: w,
                ..
            } = *refusal
            else {
                panic!("{at} {amount}: {refusal:?}");
            };
            assert_eq!(
                (account.as_str(), b.as_str(), w.as_str()),
                (FRAG, balance, when)
            );
        }
    }
}
