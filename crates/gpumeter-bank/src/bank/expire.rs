//! Expiry of grants (`gpumeter bank expire`).

use super::*;

/// Moves every credit of grants expired at `at` to `breakage` (one transaction, key
/// `expire:<at>:<head>`). Returns `(grant, credits)` moved. `at` should not be in the future
/// (the CLI refuses it): credits still in force would be lost; and periods ending before an
/// expiry should be finalized before it runs, since expired credits are gone.
///
/// # Errors
/// [`BankError::Storage`].
pub fn expire<L: Ledger>(ledger: &mut L, at: u64) -> Result<Vec<(String, Decimal)>, BankError> {
    ledger.atomically(true, |t| {
        // Every tenant's grants: no finalization may burn credits while they move.
        t.lock_all()?;
        let mut moved = Vec::new();
        let mut postings = Vec::new();
        for g in grants(t, None)? {
            let expired = g.grant.expires_ns().is_some_and(|e| e <= at);
            if expired && g.remaining > Decimal::ZERO {
                postings.push(Posting::new(
                    accounts::credits(&g.grant.tenant, &g.grant.grant),
                    CREDITS,
                    -g.remaining,
                ));
                postings.push(Posting::new(accounts::BREAKAGE, CREDITS, g.remaining));
                moved.push((g.grant.grant.clone(), g.remaining));
            }
        }
        if !postings.is_empty() {
            t.append(NewTransaction {
                key: format!("expire:{}:{}", rfc3339(at), t.head()?.unwrap_or_default()),
                kind: "expire".into(),
                at: rfc3339(at),
                tenant: None,
                postings,
                memo: serde_json::json!({ "expired": moved.iter().map(|(g, c)| serde_json::json!({"grant": g, "credits": c.to_string()})).collect::<Vec<_>>() }),
            })?;
        }
        Ok(moved)
    })
}
