//! [`LedgerTx`] on an open SQLite transaction: the reads, and the appends with their
//! postings and balances.

use rusqlite::{params, Connection, OptionalExtension};
use rust_decimal::Decimal;

use super::error::storage;
use crate::ledger::{chain_hash, Appended, BankError, LedgerTx, NewTransaction, StoredTransaction};
use crate::tables::{Assembler, PostingRow, TransactionRow};

/// [`LedgerTx`] on an open database transaction.
pub(super) struct SqliteTx<'c> {
    pub(super) conn: &'c Connection,
    pub(super) file: &'c str,
}

impl SqliteTx<'_> {
    fn err(&self, what: &str, e: &rusqlite::Error) -> BankError {
        storage(self.file, what, e)
    }

    /// The transactions `WHERE <filter>` with their postings, in ledger order.
    fn load(&self, filter: &str, args: &[&str]) -> Result<Vec<StoredTransaction>, BankError> {
        let sql = format!(
            "SELECT seq, key, kind, at, tenant, memo, prev_hash, hash FROM transactions
             WHERE {filter} ORDER BY seq"
        );
        let mut st = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.err("cannot read transactions", &e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok(TransactionRow {
                    seq: r.get(0)?,
                    key: r.get(1)?,
                    kind: r.get(2)?,
                    at: r.get(3)?,
                    tenant: r.get(4)?,
                    memo: r.get(5)?,
                    prev_hash: r.get(6)?,
                    hash: r.get(7)?,
                })
            })
            .map_err(|e| self.err("cannot read transactions", &e))?;
        let mut out = Assembler::default();
        for row in rows {
            out.transaction(row.map_err(|e| self.err("cannot read transactions", &e))?)?;
        }
        if out.is_empty() {
            return Ok(out.finish());
        }
        let sql = format!(
            "SELECT seq, idx, account, commodity, amount FROM postings
             WHERE seq IN (SELECT seq FROM transactions WHERE {filter}) ORDER BY seq, idx"
        );
        let mut st = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.err("cannot read postings", &e))?;
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok(PostingRow {
                    seq: r.get(0)?,
                    idx: r.get(1)?,
                    account: r.get(2)?,
                    commodity: r.get(3)?,
                    amount: r.get(4)?,
                })
            })
            .map_err(|e| self.err("cannot read postings", &e))?;
        for row in rows {
            out.posting(row.map_err(|e| self.err("cannot read postings", &e))?)?;
        }
        Ok(out.finish())
    }

    fn stored_balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        let text: Option<String> = self
            .conn
            .prepare_cached("SELECT amount FROM balances WHERE account = ?1 AND commodity = ?2")
            .and_then(|mut st| {
                st.query_row(params![account, commodity], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.err("cannot read a balance", &e))?;
        text.map_or(Ok(Decimal::ZERO), |t| {
            self.parse_balance(account, commodity, &t)
        })
    }

    fn parse_balance(
        &self,
        account: &str,
        commodity: &str,
        text: &str,
    ) -> Result<Decimal, BankError> {
        Decimal::from_str_exact(text).map_err(|e| BankError::Storage {
            file: self.file.to_string(),
            message: format!(
                "the balance of {account} in {commodity} is `{text}`, not a decimal ({e})"
            ),
        })
    }
}

impl LedgerTx for SqliteTx<'_> {
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self.load("key = ?1", &[key])?.into_iter().next())
    }

    fn append(&mut self, mut tx: NewTransaction) -> Result<Appended, BankError> {
        if let Some(t) = self.find(&tx.key)? {
            return Ok(Appended::AlreadyApplied(t));
        }
        tx.canonicalize();
        tx.check_balanced()?;
        let last: Option<(i64, String)> = self
            .conn
            .prepare_cached("SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.err("cannot read the chain head", &e))?;
        let (last_seq, prev_hash) = last.unwrap_or((0, String::new()));
        let seq = u64::try_from(last_seq)
            .ok()
            .and_then(|s| s.checked_add(1))
            .ok_or_else(|| BankError::Storage {
                file: self.file.to_string(),
                message: format!("the last sequence number {last_seq} cannot be followed"),
            })?;
        let seq_i = i64::try_from(seq).map_err(|_| BankError::Storage {
            file: self.file.to_string(),
            message: format!("sequence number {seq} exceeds what SQLite holds"),
        })?;
        let hash = chain_hash(seq, &tx, &prev_hash)?;
        let memo = serde_json::to_string(&tx.memo)
            .map_err(|e| BankError::Refused(format!("transaction `{}`: memo: {e}", tx.key)))?;
        self.conn
            .prepare_cached(
                "INSERT INTO transactions (seq, key, kind, at, tenant, memo, prev_hash, hash)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    seq_i, tx.key, tx.kind, tx.at, tx.tenant, memo, prev_hash, hash
                ])
            })
            .map_err(|e| self.err("cannot append a transaction", &e))?;
        for (idx, p) in tx.postings.iter().enumerate() {
            let idx = i64::try_from(idx).map_err(|_| {
                BankError::Refused(format!("transaction `{}` has too many postings", tx.key))
            })?;
            self.conn
                .prepare_cached(
                    "INSERT INTO postings (seq, idx, account, commodity, amount)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        seq_i,
                        idx,
                        p.account,
                        p.commodity,
                        p.amount.to_string()
                    ])
                })
                .map_err(|e| self.err("cannot append a posting", &e))?;
            let balance =
                crate::ledger::exact_add(self.stored_balance(&p.account, &p.commodity)?, p.amount)
                    .ok_or_else(|| {
                        BankError::Refused(format!(
                            "the balance of {} in {} exceeds what a decimal holds",
                            p.account, p.commodity
                        ))
                    })?;
            self.conn
                .prepare_cached(
                    "INSERT INTO balances (account, commodity, amount) VALUES (?1, ?2, ?3)
                     ON CONFLICT (account, commodity) DO UPDATE SET amount = excluded.amount",
                )
                .and_then(|mut st| st.execute(params![p.account, p.commodity, balance.to_string()]))
                .map_err(|e| self.err("cannot update a balance", &e))?;
        }
        Ok(Appended::Applied(StoredTransaction {
            seq,
            tx,
            prev_hash,
            hash,
        }))
    }

    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        self.stored_balance(account, commodity)
    }

    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT account, commodity, amount FROM balances
                 WHERE substr(account, 1, length(?1)) = ?1 ORDER BY account, commodity",
            )
            .map_err(|e| self.err("cannot read balances", &e))?;
        let rows = st
            .query_map([prefix], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.err("cannot read balances", &e))?;
        let mut out = Vec::new();
        for row in rows {
            let (account, commodity, text) =
                row.map_err(|e| self.err("cannot read balances", &e))?;
            let amount = self.parse_balance(&account, &commodity, &text)?;
            if !amount.is_zero() {
                out.push((account, commodity, amount));
            }
        }
        Ok(out)
    }

    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError> {
        match kind {
            Some(k) => self.load("kind = ?1", &[k]),
            None => self.load("1", &[]),
        }
    }

    fn tenant_transactions(
        &self,
        kind: &str,
        tenant: &str,
    ) -> Result<Vec<StoredTransaction>, BankError> {
        self.load("kind = ?1 AND tenant = ?2", &[kind, tenant])
    }

    fn first_transaction(&self, kind: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self
            .load(
                "seq = (SELECT min(seq) FROM transactions WHERE kind = ?1)",
                &[kind],
            )?
            .into_iter()
            .next())
    }

    fn head(&self) -> Result<Option<String>, BankError> {
        self.conn
            .prepare_cached("SELECT hash FROM transactions ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
            .map_err(|e| self.err("cannot read the chain head", &e))
    }

    fn last(&self) -> Result<Option<(u64, String)>, BankError> {
        let last: Option<(i64, String)> = self
            .conn
            .prepare_cached("SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1")
            .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.err("cannot read the chain head", &e))?;
        last.map(|(seq, hash)| {
            u64::try_from(seq)
                .map(|s| (s, hash))
                .map_err(|_| BankError::Storage {
                    file: self.file.to_string(),
                    message: format!("the last sequence number {seq} is negative"),
                })
        })
        .transpose()
    }
}
