//! The ledger's tables as both databases hold them (`meta`, `transactions`, `postings`,
//! `balances`; the SQLite ledger's module page describes them): the application and schema
//! version `meta` names, the check that reads them, and the assembly of table rows into stored
//! transactions. The SQLite and PostgreSQL ledgers both use it; neither uses the other's.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::ledger::{BankError, NewTransaction, Posting, StoredTransaction};

/// The `meta` row `application` of every gpumeter ledger.
pub const APPLICATION: &str = "gpumeter-ledger";

/// The schema version this build writes, and the newest it can open.
pub const SCHEMA_VERSION: u32 = 1;

/// The version of the ledger whose `meta` table holds `application` and `schema_version`
/// (read lazily: `schema_version` only once `application` is a ledger's), shared by the SQLite
/// and PostgreSQL ledgers, whose `meta` tables are alike.
///
/// # Errors
/// [`BankError::NotALedger`] naming `file`: another application's `meta`, a missing or
/// malformed version, a version newer than `newest`; and what `meta` returns.
pub(crate) fn ledger_version(
    file: &str,
    newest: u32,
    mut meta: impl FnMut(&str) -> Result<Option<String>, BankError>,
) -> Result<u32, BankError> {
    let not_a_ledger = |reason: String| BankError::NotALedger {
        file: file.to_string(),
        reason,
    };
    match meta("application")? {
        Some(a) if a == APPLICATION => {}
        Some(a) => {
            return Err(not_a_ledger(format!(
                "not a gpumeter ledger: its `meta` application is `{a}`, not `{APPLICATION}`"
            )))
        }
        None => {
            return Err(not_a_ledger(format!(
                "not a gpumeter ledger: its `meta` table names no application \
                 (expected `{APPLICATION}`)"
            )))
        }
    }
    let version = meta("schema_version")?.ok_or_else(|| {
        not_a_ledger("a gpumeter ledger without a `schema_version` in `meta`".to_string())
    })?;
    // Only the text a ledger writes: `1`, never `+1`, `01` or ` 1`.
    let version: u32 = version
        .parse()
        .ok()
        .filter(|v: &u32| v.to_string() == version)
        .ok_or_else(|| {
            not_a_ledger(format!(
                "a gpumeter ledger whose `schema_version` `{}` is not a version number",
                version.escape_debug()
            ))
        })?;
    if version == 0 {
        // The `meta` table is made by the migration to version 1: a ledger that has one and
        // says 0 was edited or damaged, and migrating it again would fail on its tables.
        return Err(not_a_ledger(
            "a gpumeter ledger whose `schema_version` is 0, which no ledger has (version 1 \
             made its `meta` table): it was edited or damaged; restore it from a backup or an \
             export"
                .to_string(),
        ));
    }
    if version > newest {
        return Err(not_a_ledger(format!(
            "a gpumeter ledger of schema version {version}, newer than this gpumeter \
             knows ({newest}); open it with a newer gpumeter"
        )));
    }
    Ok(version)
}

/// One row of the `transactions` table, as both databases store it.
pub(crate) struct TransactionRow {
    pub(crate) seq: i64,
    pub(crate) key: String,
    pub(crate) kind: String,
    pub(crate) at: String,
    pub(crate) tenant: Option<String>,
    /// JSON text.
    pub(crate) memo: String,
    pub(crate) prev_hash: String,
    pub(crate) hash: String,
}

/// One row of the `postings` table; `amount` is decimal text.
pub(crate) struct PostingRow {
    pub(crate) seq: i64,
    pub(crate) idx: i64,
    pub(crate) account: String,
    pub(crate) commodity: String,
    pub(crate) amount: String,
}

/// Builds stored transactions from the rows a database returns: the transactions in ledger
/// order, then their postings ordered by (seq, idx). A negative sequence number, a memo that
/// is not JSON, an amount that is not a decimal and a missing posting are
/// [`BankError::Corrupt`] naming the transaction.
#[derive(Default)]
pub(crate) struct Assembler {
    out: Vec<StoredTransaction>,
    index: BTreeMap<i64, usize>,
}

impl Assembler {
    pub(crate) fn transaction(&mut self, row: TransactionRow) -> Result<(), BankError> {
        let TransactionRow {
            seq,
            key,
            kind,
            at,
            tenant,
            memo,
            prev_hash,
            hash,
        } = row;
        let corrupt = |reason: String| BankError::Corrupt {
            seq: u64::try_from(seq).unwrap_or(0),
            key: key.clone(),
            reason,
        };
        let seq_u = u64::try_from(seq)
            .map_err(|_| corrupt(format!("sequence number {seq} is negative")))?;
        let memo = crate::verify::parse_memo(&memo).map_err(corrupt)?;
        self.index.insert(seq, self.out.len());
        self.out.push(StoredTransaction {
            seq: seq_u,
            tx: NewTransaction {
                key,
                kind,
                at,
                tenant,
                postings: Vec::new(),
                memo,
            },
            prev_hash,
            hash,
        });
        Ok(())
    }

    /// Whether no transaction was added (the postings need not be read).
    pub(crate) fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    pub(crate) fn posting(&mut self, row: PostingRow) -> Result<(), BankError> {
        let PostingRow {
            seq,
            idx,
            account,
            commodity,
            amount,
        } = row;
        let Some(t) = self.index.get(&seq).and_then(|&i| self.out.get_mut(i)) else {
            return Ok(());
        };
        let amount = Decimal::from_str_exact(&amount).map_err(|e| BankError::Corrupt {
            seq: t.seq,
            key: t.tx.key.clone(),
            reason: format!("posting {idx}: amount `{amount}` is not a decimal ({e})"),
        })?;
        if usize::try_from(idx).ok() != Some(t.tx.postings.len()) {
            return Err(BankError::Corrupt {
                seq: t.seq,
                key: t.tx.key.clone(),
                reason: format!(
                    "posting {idx} where posting {} was expected (a posting is missing)",
                    t.tx.postings.len()
                ),
            });
        }
        t.tx.postings.push(Posting {
            account,
            commodity,
            amount,
        });
        Ok(())
    }

    pub(crate) fn finish(self) -> Vec<StoredTransaction> {
        self.out
    }
}
