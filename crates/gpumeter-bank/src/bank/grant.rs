//! Grants of credits (`gpumeter bank grant`).

use super::*;

/// A request for a grant (`gpumeter bank grant`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRequest {
    /// The tenant.
    pub tenant: String,
    /// Credits (positive).
    pub credits: Decimal,
    /// Value of one credit in the invoice currency (positive).
    pub rate: Decimal,
    /// Lower burns first (default 0).
    pub priority: i64,
    /// Usable from, ns (default: `at`).
    pub effective: u64,
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

/// Records a grant: `credits` on the tenant's new credits account, from the provider's
/// `credit_sales` or `promotions`. Returns the grant and whether it was applied now or
/// already (same key).
///
/// # Errors
/// [`BankError::Refused`] for non-positive credits or rate, an expiry not after the start;
/// [`BankError::Storage`].
pub fn grant<L: Ledger>(ledger: &mut L, req: &GrantRequest) -> Result<(Grant, bool), BankError> {
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
    if req.expires.is_some_and(|e| e <= req.effective) {
        return Err(refused("--expires must be after --from".to_string()));
    }
    let most = crate::grants::CREDIT_DECIMALS;
    if req.credits.normalize().scale() > most || req.rate.normalize().scale() > most {
        return Err(refused(format!(
            "--credits {} --rate {}: the bank keeps credits and rates to {most} decimals",
            req.credits, req.rate
        )));
    }
    let terms = serde_json::json!({
        "tenant": req.tenant, "credits": req.credits.to_string(), "rate": req.rate.to_string(),
        "priority": req.priority, "effective": rfc3339(req.effective),
        "expires": req.expires.map(rfc3339), "kind": req.kind.as_str(),
        "skus": req.skus, "meters": req.meters,
    });
    let key = match &req.key {
        Some(k) => format!("grant:{k}"),
        None => format!(
            "grant:{}",
            sha(&serde_json::json!({"terms": terms, "at": rfc3339(req.at)}))?
        ),
    };
    let id = format!("g-{}", &hex::encode(Sha256::digest(key.as_bytes()))[..12]);
    let g = Grant {
        grant: id.clone(),
        tenant: req.tenant.clone(),
        credits: req.credits,
        rate: req.rate,
        priority: req.priority,
        effective: rfc3339(req.effective),
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
        at: rfc3339(req.effective),
        tenant: Some(req.tenant.clone()),
        postings: vec![
            Posting::new(accounts::credits(&req.tenant, &id), CREDITS, req.credits),
            Posting::new(req.kind.source_account(), CREDITS, -req.credits),
        ],
        memo: serde_json::to_value(&g).map_err(|e| refused(e.to_string()))?,
    };
    let applied = ledger.atomically(true, |t| {
        t.lock_tenants(&[&req.tenant])?;
        t.append(tx.clone())
    })?;
    let stored: Grant = serde_json::from_value(applied.stored().tx.memo.clone())
        .map_err(|e| refused(e.to_string()))?;
    Ok((stored, matches!(applied, Appended::Applied(_))))
}
