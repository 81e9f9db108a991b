//! An in-memory [`Ledger`] for tests and previews without a file: the same rules as the
//! SQLite one (balanced postings, unique keys, the hash chain), nothing persisted.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::ledger::{
    chain_hash, Appended, BankError, Ledger, LedgerTx, NewTransaction, StoredTransaction,
};

/// An in-memory ledger. [`Ledger::atomically`] works on a copy and keeps it only on commit,
/// so a failed or previewed transaction leaves nothing behind.
#[derive(Debug, Clone, Default)]
pub struct MemoryLedger {
    state: State,
}

#[derive(Debug, Clone, Default)]
struct State {
    transactions: Vec<StoredTransaction>,
    balances: BTreeMap<(String, String), Decimal>,
}

impl MemoryLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        MemoryLedger::default()
    }
}

impl Ledger for MemoryLedger {
    fn atomically<T>(
        &mut self,
        commit: bool,
        mut f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError> {
        let mut work = self.state.clone();
        let out = f(&mut work)?;
        if commit {
            self.state = work;
        }
        Ok(out)
    }
}

impl LedgerTx for State {
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self.transactions.iter().find(|t| t.tx.key == key).cloned())
    }

    fn append(&mut self, mut tx: NewTransaction) -> Result<Appended, BankError> {
        if let Some(t) = self.find(&tx.key)? {
            return Ok(Appended::AlreadyApplied(t));
        }
        tx.canonicalize();
        tx.check_balanced()?;
        let prev_hash = self
            .transactions
            .last()
            .map_or_else(String::new, |t| t.hash.clone());
        let seq = self.transactions.len() as u64 + 1;
        let hash = chain_hash(seq, &tx, &prev_hash)?;
        for p in &tx.postings {
            let slot = self
                .balances
                .entry((p.account.clone(), p.commodity.clone()))
                .or_insert(Decimal::ZERO);
            *slot = crate::ledger::exact_add(*slot, p.amount).ok_or_else(|| {
                BankError::Refused(format!(
                    "the balance of {} in {} exceeds what a decimal holds",
                    p.account, p.commodity
                ))
            })?;
        }
        let stored = StoredTransaction {
            seq,
            tx,
            prev_hash,
            hash,
        };
        self.transactions.push(stored.clone());
        Ok(Appended::Applied(stored))
    }

    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        Ok(self
            .balances
            .get(&(account.to_string(), commodity.to_string()))
            .copied()
            .unwrap_or(Decimal::ZERO))
    }

    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        Ok(self
            .balances
            .iter()
            .filter(|((a, _), b)| a.starts_with(prefix) && !b.is_zero())
            .map(|((a, c), b)| (a.clone(), c.clone(), *b))
            .collect())
    }

    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError> {
        Ok(self
            .transactions
            .iter()
            .filter(|t| kind.is_none_or(|k| t.tx.kind == k))
            .cloned()
            .collect())
    }

    fn head(&self) -> Result<Option<String>, BankError> {
        Ok(self.transactions.last().map(|t| t.hash.clone()))
    }
}
