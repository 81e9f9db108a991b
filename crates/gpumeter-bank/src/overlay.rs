//! Work that does not commit (a preview, `verify`, `balance`, `history`, `export`), on a
//! database's read-only snapshot: [`Overlay`] reads through to the snapshot and keeps what the
//! work appends in memory, so a preview can rate, burn credits and append its finalization
//! without writing to the database, taking its write lock or any lock a writer holds. Both
//! databases run every `atomically(false, …)` through it.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::ledger::{
    chain_hash, exact_add, Appended, BankError, LedgerTx, NewTransaction, StoredTransaction,
};

/// A [`LedgerTx`] over a snapshot `base` whose appends stay in memory: they are read back by
/// every method as if stored (the same sequence numbers, hashes and balances a commit would
/// give), and dropped with the overlay. Locks are not taken: a snapshot does not change
/// under the work, and nothing is written for another writer to wait for.
pub(crate) struct Overlay<'a> {
    base: &'a dyn LedgerTx,
    appended: Vec<StoredTransaction>,
    /// Σ of the appended postings per (account, commodity).
    deltas: BTreeMap<(String, String), Decimal>,
}

impl<'a> Overlay<'a> {
    /// An overlay on `base`, with nothing appended.
    pub(crate) fn new(base: &'a dyn LedgerTx) -> Self {
        Overlay {
            base,
            appended: Vec::new(),
            deltas: BTreeMap::new(),
        }
    }

    fn overflow(account: &str, commodity: &str) -> BankError {
        BankError::Refused(format!(
            "the balance of {account} in {commodity} exceeds what a decimal holds"
        ))
    }
}

impl LedgerTx for Overlay<'_> {
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError> {
        if let Some(t) = self.appended.iter().find(|t| t.tx.key == key) {
            return Ok(Some(t.clone()));
        }
        self.base.find(key)
    }

    fn append(&mut self, mut tx: NewTransaction) -> Result<Appended, BankError> {
        if let Some(t) = self.find(&tx.key)? {
            return Ok(Appended::AlreadyApplied(t));
        }
        tx.canonicalize();
        tx.check_balanced()?;
        let (last_seq, prev_hash) = self.last()?.unwrap_or((0, String::new()));
        let seq = last_seq
            .checked_add(1)
            .ok_or_else(|| BankError::Refused(format!("sequence number {last_seq} is the last")))?;
        let hash = chain_hash(seq, &tx, &prev_hash)?;
        let mut deltas = self.deltas.clone();
        for p in &tx.postings {
            let slot = deltas
                .entry((p.account.clone(), p.commodity.clone()))
                .or_insert(Decimal::ZERO);
            *slot = exact_add(*slot, p.amount)
                .ok_or_else(|| Self::overflow(&p.account, &p.commodity))?;
            // The stored balance a commit would reach must be a decimal too.
            let stored = self.base.balance(&p.account, &p.commodity)?;
            exact_add(stored, *slot).ok_or_else(|| Self::overflow(&p.account, &p.commodity))?;
        }
        self.deltas = deltas;
        let stored = StoredTransaction {
            seq,
            tx,
            prev_hash,
            hash,
        };
        self.appended.push(stored.clone());
        Ok(Appended::Applied(stored))
    }

    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        let stored = self.base.balance(account, commodity)?;
        match self
            .deltas
            .get(&(account.to_string(), commodity.to_string()))
        {
            Some(d) => exact_add(stored, *d).ok_or_else(|| Self::overflow(account, commodity)),
            None => Ok(stored),
        }
    }

    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        let mut all: BTreeMap<(String, String), Decimal> = self
            .base
            .balances(prefix)?
            .into_iter()
            .map(|(a, c, b)| ((a, c), b))
            .collect();
        for ((account, commodity), d) in &self.deltas {
            if !account.starts_with(prefix) {
                continue;
            }
            let key = (account.clone(), commodity.clone());
            let stored = match all.get(&key) {
                Some(b) => *b,
                // Not listed: zero, or (only if the base lists non-zero balances wrongly)
                // whatever the base reads for it.
                None => self.base.balance(account, commodity)?,
            };
            let sum = exact_add(stored, *d).ok_or_else(|| Self::overflow(account, commodity))?;
            all.insert(key, sum);
        }
        // Keys sort bytewise, as the databases' `ORDER BY account, commodity` does.
        Ok(all
            .into_iter()
            .filter(|(_, b)| !b.is_zero())
            .map(|((a, c), b)| (a, c, b))
            .collect())
    }

    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError> {
        let mut out = self.base.transactions(kind)?;
        out.extend(
            self.appended
                .iter()
                .filter(|t| kind.is_none_or(|k| t.tx.kind == k))
                .cloned(),
        );
        Ok(out)
    }

    fn tenant_transactions(
        &self,
        kind: &str,
        tenant: &str,
    ) -> Result<Vec<StoredTransaction>, BankError> {
        let mut out = self.base.tenant_transactions(kind, tenant)?;
        out.extend(
            self.appended
                .iter()
                .filter(|t| t.tx.kind == kind && t.tx.tenant.as_deref() == Some(tenant))
                .cloned(),
        );
        Ok(out)
    }

    fn first_transaction(&self, kind: &str) -> Result<Option<StoredTransaction>, BankError> {
        match self.base.first_transaction(kind)? {
            Some(t) => Ok(Some(t)),
            None => Ok(self.appended.iter().find(|t| t.tx.kind == kind).cloned()),
        }
    }

    fn head(&self) -> Result<Option<String>, BankError> {
        match self.appended.last() {
            Some(t) => Ok(Some(t.hash.clone())),
            None => self.base.head(),
        }
    }

    fn last(&self) -> Result<Option<(u64, String)>, BankError> {
        match self.appended.last() {
            Some(t) => Ok(Some((t.seq, t.hash.clone()))),
            None => self.base.last(),
        }
    }

    fn lock_tenants(&mut self, _tenants: &[&str]) -> Result<(), BankError> {
        Ok(())
    }

    fn lock_all(&mut self) -> Result<(), BankError> {
        Ok(())
    }
}
