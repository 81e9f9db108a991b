//! Account names of the credit bank.
//!
//! Per tenant: `tenant:<t>:credits:<grant>` (commodity `credits`, one account per grant so the
//! burn order can be applied), `tenant:<t>:fragments:<sku>:<meter>` (the meter's canonical
//! unit), `tenant:<t>:receivable` (the currency). The provider: `provider:revenue`,
//! `provider:breakage`, `provider:promotions`, `provider:credit_sales`,
//! `provider:reservations`, and `provider:fragments` (the other side of carried fragments).
//! Names from the inputs (tenants, SKU ids, grant ids) are escaped so that `:` always
//! separates parts: `%` → `%25`, `:` → `%3A`.

use gpumeter_core::MeterKind;

/// The provider's revenue (currency).
pub const REVENUE: &str = "provider:revenue";
/// Expired credits (credits).
pub const BREAKAGE: &str = "provider:breakage";
/// The source of promotional credits, and of the currency they cover (credits, currency).
pub const PROMOTIONS: &str = "provider:promotions";
/// The source of purchased credits, and of the currency they cover (credits, currency).
pub const CREDIT_SALES: &str = "provider:credit_sales";
/// The source of credits converted from unused reservations (credits, currency).
pub const RESERVATIONS: &str = "provider:reservations";
/// The provider's side of the tenants' carried fragments (canonical units).
pub const FRAGMENTS: &str = "provider:fragments";

/// One part of an account name, escaped (`%` and `:`).
pub fn part(s: &str) -> String {
    s.replace('%', "%25").replace(':', "%3A")
}

/// Undoes [`part`].
pub fn unpart(s: &str) -> String {
    s.replace("%3A", ":").replace("%25", "%")
}

/// `tenant:<t>:` — the prefix of every account of a tenant.
pub fn tenant_prefix(tenant: &str) -> String {
    format!("tenant:{}:", part(tenant))
}

/// The credits account of one grant of a tenant.
pub fn credits(tenant: &str, grant: &str) -> String {
    format!("{}credits:{}", tenant_prefix(tenant), part(grant))
}

/// The fragment account of a tenant's SKU and meter.
pub fn fragments(tenant: &str, sku: &str, meter: MeterKind) -> String {
    format!(
        "{}fragments:{}:{}",
        tenant_prefix(tenant),
        part(sku),
        meter.as_str()
    )
}

/// The tenant's receivable (what the invoices leave to pay).
pub fn receivable(tenant: &str) -> String {
    format!("{}receivable", tenant_prefix(tenant))
}

/// `(sku, meter)` of a fragment account of `tenant`, `None` for another account.
pub fn parse_fragments(tenant: &str, account: &str) -> Option<(String, MeterKind)> {
    let rest = account.strip_prefix(&format!("{}fragments:", tenant_prefix(tenant)))?;
    let (sku, meter) = rest.rsplit_once(':')?;
    Some((unpart(sku), MeterKind::parse(meter)?))
}

/// Every tenant named by an account of the ledger's `accounts`.
pub fn tenant_of(account: &str) -> Option<String> {
    let rest = account.strip_prefix("tenant:")?;
    let (t, _) = rest.split_once(':')?;
    Some(unpart(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_with_colons_and_percents() {
        let t = "acme:eu%1";
        let a = fragments(t, "h100:sxm", MeterKind::SmNs);
        assert_eq!(a, "tenant:acme%3Aeu%251:fragments:h100%3Asxm:sm_ns");
        assert_eq!(
            parse_fragments(t, &a),
            Some(("h100:sxm".to_string(), MeterKind::SmNs))
        );
        assert_eq!(tenant_of(&a).as_deref(), Some(t));
        assert_eq!(parse_fragments("acme", &a), None);
    }
}
