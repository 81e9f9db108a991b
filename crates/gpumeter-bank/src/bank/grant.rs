//! Grants of credits (`gpumeter bank grant`).

use std::collections::BTreeSet;

use super::*;
use crate::grants::check_bounds;
use crate::ledger::{derived_grant_key, legacy_derived_grant_key, user_grant_key};

/// A request for a grant (`gpumeter bank grant`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRequest {
    /// The tenant.
    pub tenant: String,
    /// Credits (positive, at most [`crate::grants::MAX_CREDITS`]).
    pub credits: Decimal,
    /// Value of one credit in the invoice currency (positive, at most
    /// [`crate::grants::MAX_CREDIT_RATE`]; `credits × rate` at most
    /// [`crate::grants::MAX_AMOUNT`]).
    pub rate: Decimal,
    /// Lower burns first (default 0).
    pub priority: i64,
    /// Usable from, ns; `None`: `at`. A retry with a key and no `effective` matches the grant
    /// recorded under the key whatever its start (the default is the instant of the first
    /// request, which a retry cannot repeat).
    pub effective: Option<u64>,
    /// Usable until (exclusive), ns.
    pub expires: Option<u64>,
    /// Purchased or promotional.
    pub kind: GrantKind,
    /// SKU scope; empty: every SKU.
    pub skus: Vec<String>,
    /// Meter scope; empty: every meter.
    pub meters: Vec<MeterKind>,
    /// Idempotency key; `None`: derived from the terms and `at`, so a retry of the same
    /// command at another instant is a new grant (give a key to retry safely).
    pub key: Option<String>,
    /// When the grant is recorded, ns.
    pub at: u64,
}

/// Checks a grant request without a ledger, as [`grant`] does first: a caller (the CLI) refuses
/// a request before it opens, or creates, a bank.
///
/// # Errors
/// [`BankError::Refused`] as [`grant`]'s, for everything but a reused key.
pub fn check_grant(req: &GrantRequest) -> Result<(), BankError> {
    never_idle(&req.tenant)?;
    if req.credits <= Decimal::ZERO {
        return Err(refused(format!(
            "--credits {}: a grant needs a positive number of credits",
            req.credits
        )));
    }
    if req.rate <= Decimal::ZERO {
        return Err(refused(format!(
            "--rate {}: a credit needs a positive value",
            req.rate
        )));
    }
    check_bounds("--credits", req.credits, req.rate)?;
    let effective = req.effective.unwrap_or(req.at);
    if req.expires.is_some_and(|e| e <= effective) {
        return Err(refused("--expires must be after --from".to_string()));
    }
    let most = crate::grants::CREDIT_DECIMALS;
    if req.credits.normalize().scale() > most || req.rate.normalize().scale() > most {
        return Err(refused(format!(
            "--credits {} --rate {}: the bank keeps credits and rates to {most} decimals",
            req.credits, req.rate
        )));
    }
    Ok(())
}

/// Records a grant: `credits` on the tenant's new credits account, from the provider's
/// `credit_sales` or `promotions`. Returns the grant and whether it was applied now or
/// already (same key, same request).
///
/// With a key already in the ledger, the request must be the one recorded under it (Stripe's
/// rule: a key names one request): the same tenant, credits, rate, priority, start (when given),
/// expiry, kind and scope (SKUs and meters as sets); decimals compare by value (`5` and
/// `5.00` are one amount). A key the caller gives lives in its own namespace
/// ([`crate::ledger::user_grant_key`]); in a ledger written before issue 30, such a key may
/// name a conversion the bank made, which is refused as another request too.
///
/// # Errors
/// [`BankError::Refused`] for the tenant `idle`, non-positive credits or rate, credits or a
/// rate beyond the bounds ([`crate::grants::check_bounds`]), an expiry not after the start,
/// more than 9 decimals; [`BankError::KeyReused`] naming the first parameter that differs
/// from the request recorded under the key; [`BankError::Storage`].
pub fn grant<L: Ledger>(ledger: &mut L, req: &GrantRequest) -> Result<(Grant, bool), BankError> {
    check_grant(req)?;
    let effective = req.effective.unwrap_or(req.at);
    let terms = serde_json::json!({
        "tenant": req.tenant, "credits": req.credits.to_string(), "rate": req.rate.to_string(),
        "priority": req.priority, "effective": rfc3339(effective),
        "expires": req.expires.map(rfc3339), "kind": req.kind.as_str(),
        "skus": req.skus, "meters": req.meters,
    });
    let (key, legacy) = match &req.key {
        Some(k) => (user_grant_key(k), None),
        None => {
            let digest = sha(&serde_json::json!({"terms": terms, "at": rfc3339(req.at)}))?;
            (
                derived_grant_key(&digest),
                Some(legacy_derived_grant_key(&digest)),
            )
        }
    };
    let id = format!("g-{}", &hex::encode(Sha256::digest(key.as_bytes()))[..12]);
    let g = Grant {
        grant: id.clone(),
        tenant: req.tenant.clone(),
        credits: req.credits,
        rate: req.rate,
        priority: req.priority,
        effective: rfc3339(effective),
        expires: req.expires.map(rfc3339),
        kind: req.kind,
        skus: req.skus.clone(),
        meters: req.meters.clone(),
        reservation: None,
    };
    let tx = NewTransaction {
        key,
        kind: "grant".into(),
        // The business time of a grant is when its credits become usable, so a balance as of
        // an instant shows the grants in force then, whenever they were recorded.
        at: rfc3339(effective),
        tenant: Some(req.tenant.clone()),
        postings: vec![
            Posting::new(accounts::credits(&req.tenant, &id), CREDITS, req.credits),
            Posting::new(req.kind.source_account(), CREDITS, -req.credits),
        ],
        memo: serde_json::to_value(&g).map_err(|e| refused(e.to_string()))?,
    };
    let shown_key = req.key.clone().unwrap_or_else(|| tx.key.clone());
    ledger.atomically(true, |t| {
        t.lock_tenants(&[&req.tenant])?;
        // A request without a key recorded before issue 30 (same terms, same instant).
        if let Some(old) = &legacy {
            if let Some(earlier) = t.find(old)? {
                let stored = recorded_grant(&earlier)?;
                same_request(&shown_key, &stored, req)?;
                return Ok((stored, false));
            }
        }
        let applied = t.append(tx.clone())?;
        let stored = recorded_grant(applied.stored())?;
        if let Appended::AlreadyApplied(_) = applied {
            same_request(&shown_key, &stored, req)?;
            return Ok((stored, false));
        }
        Ok((stored, true))
    })
}

/// The grant a `grant` transaction recorded.
fn recorded_grant(t: &StoredTransaction) -> Result<Grant, BankError> {
    if t.tx.kind != "grant" {
        return Err(BankError::Corrupt {
            seq: t.seq,
            key: t.tx.key.clone(),
            reason: format!("a grant's key on a transaction of kind `{}`", t.tx.kind),
        });
    }
    serde_json::from_value(t.tx.memo.clone()).map_err(|e| BankError::Corrupt {
        seq: t.seq,
        key: t.tx.key.clone(),
        reason: format!("the memo of a grant is not a grant: {e}"),
    })
}

/// Refuses `req` unless it is the request that recorded `stored` under `key`, naming the
/// first parameter that differs ([`BankError::KeyReused`]).
fn same_request(key: &str, stored: &Grant, req: &GrantRequest) -> Result<(), BankError> {
    let differ = |field: &'static str, recorded: String, requested: String| {
        Err(BankError::KeyReused {
            key: key.to_string(),
            field,
            recorded,
            requested,
        })
    };
    if stored.tenant != req.tenant {
        return differ("tenant", stored.tenant.clone(), req.tenant.clone());
    }
    if stored.kind != req.kind || stored.reservation.is_some() {
        let recorded = match &stored.reservation {
            Some(r) => format!("a conversion of reservation {r} (a grant the bank made)"),
            None => stored.kind.as_str().to_string(),
        };
        return differ("kind", recorded, req.kind.as_str().to_string());
    }
    if stored.credits != req.credits {
        return differ(
            "credits",
            stored.credits.to_string(),
            req.credits.to_string(),
        );
    }
    if stored.rate != req.rate {
        return differ("rate", stored.rate.to_string(), req.rate.to_string());
    }
    if stored.priority != req.priority {
        return differ(
            "priority",
            stored.priority.to_string(),
            req.priority.to_string(),
        );
    }
    if let Some(e) = req.effective.map(rfc3339) {
        if stored.effective != e {
            return differ("effective", stored.effective.clone(), e);
        }
    }
    let expires = req.expires.map(rfc3339);
    if stored.expires != expires {
        let show = |e: &Option<String>| e.clone().unwrap_or_else(|| "never".to_string());
        return differ("expires", show(&stored.expires), show(&expires));
    }
    let set = |v: Vec<String>| -> BTreeSet<String> { v.into_iter().collect() };
    let show = |v: &BTreeSet<String>| {
        if v.is_empty() {
            "every one".to_string()
        } else {
            v.iter().cloned().collect::<Vec<_>>().join(", ")
        }
    };
    let (a, b) = (set(stored.skus.clone()), set(req.skus.clone()));
    if a != b {
        return differ("skus", show(&a), show(&b));
    }
    let meters = |m: &[MeterKind]| set(m.iter().map(|m| m.as_str().to_string()).collect());
    let (a, b) = (meters(&stored.meters), meters(&req.meters));
    if a != b {
        return differ("meters", show(&a), show(&b));
    }
    Ok(())
}
