//! [`LedgerTx`] on an open PostgreSQL transaction: the reads, and the appends that hold the
//! hash chain from the first until the commit.

use std::cell::{Cell, RefCell};

use postgres::Transaction;
use rust_decimal::Decimal;

use super::error::{describe, is_conflict, storage, storage_msg};
use super::locks::LockKeys;
use crate::ledger::{chain_hash, Appended, BankError, LedgerTx, NewTransaction, StoredTransaction};
use crate::tables::{Assembler, PostingRow, TransactionRow};

/// [`LedgerTx`] on an open PostgreSQL transaction.
pub(super) struct PgTx<'a, 'c> {
    pub(super) tx: RefCell<Transaction<'c>>,
    pub(super) location: &'a str,
    pub(super) keys: &'a LockKeys,
    /// The first conflict (serialization failure, deadlock) a statement met: the work is run
    /// again.
    pub(super) conflict: Cell<Option<String>>,
    /// Whether this transaction holds the hash chain's lock.
    pub(super) chain_held: bool,
}

impl PgTx<'_, '_> {
    fn err(&self, what: &str, e: &postgres::Error) -> BankError {
        if is_conflict(e) {
            let first = self.conflict.take();
            self.conflict
                .set(Some(first.unwrap_or_else(|| describe(e))));
        }
        storage(self.location, what, e)
    }

    fn query(
        &self,
        what: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, BankError> {
        self.tx
            .borrow_mut()
            .query(sql, params)
            .map_err(|e| self.err(what, &e))
    }

    fn get<'r, T: postgres::types::FromSql<'r>>(
        &self,
        what: &str,
        row: &'r postgres::Row,
        i: usize,
    ) -> Result<T, BankError> {
        row.try_get(i).map_err(|e| self.err(what, &e))
    }

    /// A statement of [`LedgerTx::append`] that writes transaction `key`'s data: an error the
    /// server blames on the data (SQLSTATE class 22, a data exception such as a character the
    /// database's encoding lacks; class 54, a limit such as a key too long for its index) is
    /// [`BankError::Refused`] naming the transaction, since the same transaction would fail
    /// again; any other is what [`PgTx::query`] returns.
    fn write(
        &self,
        what: &str,
        key: &str,
        sql: &str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, BankError> {
        let out = self.tx.borrow_mut().query(sql, params);
        out.map_err(|e| {
            let class = e.code().map(|c| &c.code()[..2]);
            if matches!(class, Some("22" | "54")) {
                let mut shown: String = key.chars().take(80).collect();
                if shown.len() < key.len() {
                    shown.push('…');
                }
                BankError::Refused(format!(
                    "transaction `{}`: PostgreSQL refuses it: {what}: {}",
                    shown.escape_debug(),
                    describe(&e)
                ))
            } else {
                self.err(what, &e)
            }
        })
    }

    /// Takes the advisory locks `keys`, sorted, exclusive (after the bank's, shared).
    fn lock(&self, mut keys: Vec<i64>) -> Result<(), BankError> {
        keys.sort_unstable();
        keys.dedup();
        self.query(
            "cannot lock the bank",
            "SELECT pg_advisory_xact_lock_shared($1)",
            &[&self.keys.bank()],
        )?;
        for k in keys {
            self.query(
                "cannot lock a tenant",
                "SELECT pg_advisory_xact_lock($1)",
                &[&k],
            )?;
        }
        Ok(())
    }

    /// The transactions `WHERE <filter>` with their postings, in ledger order.
    fn load(&self, filter: &str, args: &[&str]) -> Result<Vec<StoredTransaction>, BankError> {
        let what = "cannot read transactions";
        let args: Vec<&(dyn postgres::types::ToSql + Sync)> = args
            .iter()
            .map(|a| a as &(dyn postgres::types::ToSql + Sync))
            .collect();
        let rows = self.query(
            what,
            &format!(
                "SELECT seq, key, kind, at, tenant, memo, prev_hash, hash FROM transactions
                 WHERE {filter} ORDER BY seq"
            ),
            &args,
        )?;
        let mut out = Assembler::default();
        for r in &rows {
            out.transaction(TransactionRow {
                seq: self.get(what, r, 0)?,
                key: self.get(what, r, 1)?,
                kind: self.get(what, r, 2)?,
                at: self.get(what, r, 3)?,
                tenant: self.get(what, r, 4)?,
                memo: self.get(what, r, 5)?,
                prev_hash: self.get(what, r, 6)?,
                hash: self.get(what, r, 7)?,
            })?;
        }
        if out.is_empty() {
            return Ok(out.finish());
        }
        let what = "cannot read postings";
        let rows = self.query(
            what,
            &format!(
                "SELECT seq, idx, account, commodity, amount::text FROM postings
                 WHERE seq IN (SELECT seq FROM transactions WHERE {filter}) ORDER BY seq, idx"
            ),
            &args,
        )?;
        for r in &rows {
            out.posting(PostingRow {
                seq: self.get(what, r, 0)?,
                idx: i64::from(self.get::<i32>(what, r, 1)?),
                account: self.get(what, r, 2)?,
                commodity: self.get(what, r, 3)?,
                amount: self.get(what, r, 4)?,
            })?;
        }
        Ok(out.finish())
    }

    fn parse_balance(
        &self,
        account: &str,
        commodity: &str,
        text: &str,
    ) -> Result<Decimal, BankError> {
        Decimal::from_str_exact(text).map_err(|e| {
            storage_msg(
                self.location,
                format!("the balance of {account} in {commodity} is `{text}`, not a decimal ({e})"),
            )
        })
    }
}

/// Refuses a transaction with a NUL character in a text column (PostgreSQL's `text` cannot
/// hold one; an SQLite ledger can, so an export of one may carry it). The memo is JSON, whose
/// text escapes it.
fn refuse_nul(tx: &NewTransaction) -> Result<(), BankError> {
    let mut fields: Vec<(&str, &str)> = vec![("key", &tx.key), ("kind", &tx.kind), ("at", &tx.at)];
    if let Some(t) = &tx.tenant {
        fields.push(("tenant", t));
    }
    for p in &tx.postings {
        fields.push(("account", &p.account));
        fields.push(("commodity", &p.commodity));
    }
    match fields.iter().find(|(_, v)| v.contains('\0')) {
        Some((field, _)) => Err(BankError::Refused(format!(
            "transaction `{}`: its {field} holds a NUL character, which PostgreSQL text \
             cannot hold",
            tx.key.escape_debug()
        ))),
        None => Ok(()),
    }
}

/// The steps of [`LedgerTx::append`].
impl PgTx<'_, '_> {
    /// Holds the hash chain (from the first append to the commit) and reads its head: the
    /// sequence number the next transaction takes (also as PostgreSQL's `bigint`) and the
    /// hash it follows.
    fn next_link(&mut self) -> Result<(u64, i64, String), BankError> {
        if !self.chain_held {
            self.query(
                "cannot lock the chain's head",
                "SELECT pg_advisory_xact_lock($1)",
                &[&self.keys.chain()],
            )?;
            self.chain_held = true;
        }
        let what = "cannot read the chain head";
        let last = self.query(
            what,
            "SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1",
            &[],
        )?;
        let (last_seq, prev_hash): (i64, String) = match last.first() {
            Some(r) => (self.get(what, r, 0)?, self.get(what, r, 1)?),
            None => (0, String::new()),
        };
        let seq = u64::try_from(last_seq)
            .ok()
            .and_then(|s| s.checked_add(1))
            .ok_or_else(|| {
                storage_msg(
                    self.location,
                    format!("the last sequence number {last_seq} cannot be followed"),
                )
            })?;
        let seq_i = i64::try_from(seq).map_err(|_| {
            storage_msg(
                self.location,
                format!("sequence number {seq} exceeds what PostgreSQL's bigint holds"),
            )
        })?;
        Ok((seq, seq_i, prev_hash))
    }

    /// Inserts the row of `tx` at `seq_i`, with its `memo` text and `(prev_hash, hash)`;
    /// `false` when its key was taken first.
    fn insert_transaction(
        &self,
        tx: &NewTransaction,
        seq_i: i64,
        memo: &str,
        (prev_hash, hash): (&str, &str),
    ) -> Result<bool, BankError> {
        // The unique key decides: a concurrent writer that appended this key first (and has
        // committed: it held the chain) makes this insert do nothing.
        let inserted = self.write(
            "cannot append a transaction",
            &tx.key,
            "INSERT INTO transactions (seq, key, kind, at, tenant, memo, prev_hash, hash)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (key) DO NOTHING RETURNING seq",
            &[
                &seq_i, &tx.key, &tx.kind, &tx.at, &tx.tenant, &memo, &prev_hash, &hash,
            ],
        )?;
        Ok(!inserted.is_empty())
    }

    /// Writes the postings of `tx` (transaction `seq_i`) and adds them to the balances.
    fn post(&self, tx: &NewTransaction, seq_i: i64) -> Result<(), BankError> {
        // The postings and their balances in two statements, not two per posting: this runs
        // while the chain is held, and every round trip here is one every other writer waits
        // out. Balances are summed per account and commodity first (a statement's upsert may
        // touch a row once); a balance beyond a decimal is refused as on SQLite.
        if i32::try_from(tx.postings.len()).is_err() {
            return Err(BankError::Refused(format!(
                "transaction `{}` has too many postings",
                tx.key
            )));
        }
        let accounts: Vec<&str> = tx.postings.iter().map(|p| p.account.as_str()).collect();
        let commodities: Vec<&str> = tx.postings.iter().map(|p| p.commodity.as_str()).collect();
        let amounts: Vec<String> = tx.postings.iter().map(|p| p.amount.to_string()).collect();
        if !tx.postings.is_empty() {
            self.write(
                "cannot append the postings",
                &tx.key,
                "INSERT INTO postings (seq, idx, account, commodity, amount)
                 SELECT $1, (p.i - 1)::integer, p.a, p.c, p.m::numeric
                 FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS p(a, c, m, i)",
                &[&seq_i, &accounts, &commodities, &amounts],
            )?;
            let what = "cannot update the balances";
            let rows = self.write(
                what,
                &tx.key,
                "INSERT INTO balances (account, commodity, amount)
                 SELECT p.a, p.c, sum(p.m::numeric)
                 FROM unnest($1::text[], $2::text[], $3::text[]) AS p(a, c, m)
                 GROUP BY p.a, p.c
                 ON CONFLICT (account, commodity)
                 DO UPDATE SET amount = balances.amount + excluded.amount
                 RETURNING account, commodity, amount::text",
                &[&accounts, &commodities, &amounts],
            )?;
            for r in &rows {
                let account: String = self.get(what, r, 0)?;
                let commodity: String = self.get(what, r, 1)?;
                let text: String = self.get(what, r, 2)?;
                if Decimal::from_str_exact(&text).is_err() {
                    return Err(BankError::Refused(format!(
                        "the balance of {account} in {commodity} exceeds what a decimal holds"
                    )));
                }
            }
        }
        Ok(())
    }
}

impl LedgerTx for PgTx<'_, '_> {
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self.load("key = $1", &[key])?.into_iter().next())
    }

    fn append(&mut self, mut tx: NewTransaction) -> Result<Appended, BankError> {
        refuse_nul(&tx)?;
        if let Some(t) = self.find(&tx.key)? {
            return Ok(Appended::AlreadyApplied(t));
        }
        tx.canonicalize();
        tx.check_balanced()?;
        let (seq, seq_i, prev_hash) = self.next_link()?;
        let hash = chain_hash(seq, &tx, &prev_hash)?;
        let memo = serde_json::to_string(&tx.memo)
            .map_err(|e| BankError::Refused(format!("transaction `{}`: memo: {e}", tx.key)))?;
        if !self.insert_transaction(&tx, seq_i, &memo, (&prev_hash, &hash))? {
            let earlier = self.find(&tx.key)?.ok_or_else(|| {
                storage_msg(
                    self.location,
                    format!(
                        "transaction `{}`: its key is taken, but no transaction has it",
                        tx.key
                    ),
                )
            })?;
            return Ok(Appended::AlreadyApplied(earlier));
        }
        self.post(&tx, seq_i)?;
        Ok(Appended::Applied(StoredTransaction {
            seq,
            tx,
            prev_hash,
            hash,
        }))
    }

    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError> {
        let what = "cannot read a balance";
        let rows = self.query(
            what,
            "SELECT amount::text FROM balances WHERE account = $1 AND commodity = $2",
            &[&account, &commodity],
        )?;
        match rows.first() {
            Some(r) => {
                let text: String = self.get(what, r, 0)?;
                self.parse_balance(account, commodity, &text)
            }
            None => Ok(Decimal::ZERO),
        }
    }

    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError> {
        let what = "cannot read balances";
        let rows = self.query(
            what,
            "SELECT account, commodity, amount::text FROM balances
             WHERE left(account, length($1)) = $1 ORDER BY account, commodity",
            &[&prefix],
        )?;
        let mut out = Vec::new();
        for r in &rows {
            let account: String = self.get(what, r, 0)?;
            let commodity: String = self.get(what, r, 1)?;
            let text: String = self.get(what, r, 2)?;
            let amount = self.parse_balance(&account, &commodity, &text)?;
            if !amount.is_zero() {
                out.push((account, commodity, amount));
            }
        }
        Ok(out)
    }

    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError> {
        match kind {
            Some(k) => self.load("kind = $1", &[k]),
            None => self.load("TRUE", &[]),
        }
    }

    fn tenant_transactions(
        &self,
        kind: &str,
        tenant: &str,
    ) -> Result<Vec<StoredTransaction>, BankError> {
        self.load("kind = $1 AND tenant = $2", &[kind, tenant])
    }

    fn first_transaction(&self, kind: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self
            .load(
                "seq = (SELECT min(seq) FROM transactions WHERE kind = $1)",
                &[kind],
            )?
            .into_iter()
            .next())
    }

    fn head(&self) -> Result<Option<String>, BankError> {
        let what = "cannot read the chain head";
        let rows = self.query(
            what,
            "SELECT hash FROM transactions ORDER BY seq DESC LIMIT 1",
            &[],
        )?;
        rows.first().map(|r| self.get(what, r, 0)).transpose()
    }

    fn last(&self) -> Result<Option<(u64, String)>, BankError> {
        let what = "cannot read the chain head";
        let rows = self.query(
            what,
            "SELECT seq, hash FROM transactions ORDER BY seq DESC LIMIT 1",
            &[],
        )?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let seq: i64 = self.get(what, r, 0)?;
        let seq = u64::try_from(seq).map_err(|_| {
            storage_msg(
                self.location,
                format!("the last sequence number {seq} is negative"),
            )
        })?;
        Ok(Some((seq, self.get(what, r, 1)?)))
    }

    fn lock_tenants(&mut self, tenants: &[&str]) -> Result<(), BankError> {
        let keys = tenants.iter().map(|t| self.keys.tenant(t)).collect();
        self.lock(keys)
    }

    fn lock_all(&mut self) -> Result<(), BankError> {
        self.query(
            "cannot lock the bank",
            "SELECT pg_advisory_xact_lock($1)",
            &[&self.keys.bank()],
        )?;
        Ok(())
    }
}
