//! Checking the books (`gpumeter bank verify`): the hash chain and the ledger's invariants,
//! through [`LedgerTx`] only, so it checks any [`crate::Ledger`] implementation.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use rust_decimal::Decimal;
use serde::Serialize;

use crate::ledger::{chain_hash, BankError, LedgerTx};

/// What [`verify`] walked, when everything held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Number of transactions in the ledger.
    pub transactions: u64,
    /// Number of postings over all transactions.
    pub postings: u64,
    /// Number of distinct accounts that have at least one posting.
    pub accounts: u64,
    /// The chain head: the last transaction's hash (SHA-256, lowercase hex), `None` for an
    /// empty ledger.
    pub head: Option<String>,
}

/// Walks every transaction in ledger order and checks that
/// - sequence numbers run 1, 2, 3, … without a gap;
/// - idempotency keys are unique;
/// - each `prev_hash` is the previous transaction's `hash` (`""` for the first);
/// - each `hash` recomputes with [`chain_hash`] from the transaction as stored (so an edited
///   amount, account, memo or a removed posting is caught);
/// - each memo is JSON whose objects give each key once (a second value for a key would be
///   hidden from the hash: [`LedgerTx::transactions`] refuses it as it reads the memo);
/// - each transaction's postings sum to zero per commodity;
/// - the ledger's head ([`LedgerTx::head`]) is the last transaction's hash;
/// - the balances the ledger reports ([`LedgerTx::balances`] of every account) equal the sums
///   of all postings per (account, commodity), non-zero ones only.
///
/// Use it inside a transaction that is not committed: `ledger.atomically(false, |tx|
/// verify(&*tx))`.
///
/// # Errors
/// - [`BankError::Corrupt`] for the first transaction that breaks a rule, naming its sequence
///   number and key. A stored balance that differs from its postings names the last
///   transaction that posted to that account and commodity (sequence 0 and an empty key when
///   none did).
/// - [`BankError::Storage`] when the ledger cannot be read.
pub fn verify(tx: &dyn LedgerTx) -> Result<VerifyReport, BankError> {
    let transactions = tx.transactions(None)?;
    let mut sums: BTreeMap<(String, String), Decimal> = BTreeMap::new();
    let mut last_poster: BTreeMap<(String, String), (u64, String)> = BTreeMap::new();
    let mut keys: HashSet<&str> = HashSet::new();
    let mut accounts: BTreeSet<&str> = BTreeSet::new();
    let mut postings = 0u64;
    let mut prev_hash = "";
    for (expected_seq, t) in (1u64..).zip(&transactions) {
        let corrupt = |reason: String| BankError::Corrupt {
            seq: t.seq,
            key: t.tx.key.clone(),
            reason,
        };
        if t.seq != expected_seq {
            return Err(corrupt(format!(
                "sequence number {} where {expected_seq} was expected",
                t.seq
            )));
        }
        if !keys.insert(&t.tx.key) {
            return Err(corrupt(
                "its key is used by an earlier transaction".to_string(),
            ));
        }
        if t.prev_hash != prev_hash {
            return Err(corrupt(format!(
                "prev_hash `{}` is not the previous transaction's hash `{prev_hash}`",
                t.prev_hash
            )));
        }
        let recomputed = chain_hash(t.seq, &t.tx, &t.prev_hash)?;
        if recomputed != t.hash {
            return Err(corrupt(format!(
                "stored hash `{}` but its contents hash to `{recomputed}`: it was edited",
                t.hash
            )));
        }
        t.tx.check_balanced().map_err(|e| corrupt(e.to_string()))?;
        for p in &t.tx.postings {
            let k = (p.account.clone(), p.commodity.clone());
            let slot = sums.entry(k.clone()).or_insert(Decimal::ZERO);
            *slot = crate::ledger::exact_add(*slot, p.amount).ok_or_else(|| {
                corrupt(format!(
                    "the balance of {} in {} exceeds what a decimal holds",
                    p.account, p.commodity
                ))
            })?;
            last_poster.insert(k, (t.seq, t.tx.key.clone()));
            accounts.insert(&p.account);
            postings += 1;
        }
        prev_hash = &t.hash;
    }
    let head = transactions.last().map(|t| t.hash.clone());
    let reported_head = tx.head()?;
    if reported_head != head {
        let (seq, key) = transactions
            .last()
            .map_or((0, String::new()), |t| (t.seq, t.tx.key.clone()));
        return Err(BankError::Corrupt {
            seq,
            key,
            reason: format!(
                "the ledger's head is {reported_head:?}, not the last transaction's hash"
            ),
        });
    }
    check_balances(tx, &sums, &last_poster)?;
    Ok(VerifyReport {
        transactions: transactions.len() as u64,
        postings,
        accounts: accounts.len() as u64,
        head,
    })
}

/// The reported balances against the sums of the postings, both without zeros.
fn check_balances(
    tx: &dyn LedgerTx,
    sums: &BTreeMap<(String, String), Decimal>,
    last_poster: &BTreeMap<(String, String), (u64, String)>,
) -> Result<(), BankError> {
    let reported: BTreeMap<(String, String), Decimal> = tx
        .balances("")?
        .into_iter()
        .map(|(a, c, b)| ((a, c), b))
        .collect();
    let all: BTreeSet<&(String, String)> = sums.keys().chain(reported.keys()).collect();
    for k in all {
        let want = sums.get(k).copied().unwrap_or(Decimal::ZERO);
        let got = reported.get(k).copied().unwrap_or(Decimal::ZERO);
        if want != got {
            let (seq, key) = last_poster.get(k).cloned().unwrap_or((0, String::new()));
            return Err(BankError::Corrupt {
                seq,
                key,
                reason: format!(
                    "the ledger reports a balance of {got} for {} in {}, but its postings sum \
                     to {want} (this is the last transaction that posted to it)",
                    k.0, k.1
                ),
            });
        }
    }
    Ok(())
}

/// A stored memo's JSON text as a value, refusing text that is not JSON and objects that give
/// a key twice. serde_json keeps the last of two equal keys, and a transaction's hash is over
/// the value read back, so `{"credits": "500", "credits": "5"}` would hash as `{"credits":
/// "5"}` while a person reading the row (or another JSON reader, which may keep the first)
/// sees 500: every reader of the ledger refuses it, and so `verify` fails naming the
/// transaction ([`BankError::Corrupt`]).
///
/// # Errors
/// Why, for [`BankError::Corrupt`]'s reason.
pub(crate) fn parse_memo(text: &str) -> Result<serde_json::Value, String> {
    check_unique_keys(text.as_bytes()).map_err(|e| format!("its memo {e}"))?;
    serde_json::from_str(text).map_err(|e| format!("its memo is not JSON: {e}"))
}

/// Checks that no JSON object in `text` gives a key twice (keys compared after unescaping,
/// so `"a"` and `"\u0061"` are one key), reading `text` with serde_json's parser. Text that is
/// not JSON passes here and is refused by the caller's parse.
///
/// # Errors
/// `gives the key `k` twice in one object (at line L column C)`.
pub(crate) fn check_unique_keys(text: &[u8]) -> Result<(), String> {
    match serde_json::from_slice::<UniqueKeys>(text) {
        Ok(UniqueKeys) => Ok(()),
        Err(e) if e.is_data() => Err(e.to_string()),
        Err(_) => Ok(()),
    }
}

/// Deserializes any JSON value, failing on an object that gives a key twice.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_none<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<UniqueKeys, D::Error> {
        serde::Deserialize::deserialize(d)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format_args!(
                    "gives the key `{}` twice in one object",
                    key.escape_debug()
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(UniqueKeys)
    }
}
