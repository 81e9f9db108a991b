//! The ledger: double-entry transactions whose postings sum to zero per
//! commodity, each with a unique idempotency key and the SHA-256 of the previous transaction,
//! behind the [`Ledger`] trait ([`crate::MemoryLedger`] for tests, [`crate::SqliteLedger`] in a
//! file, `PostgresLedger` in a PostgreSQL database with the Cargo feature `postgres`;
//! [`crate::open`] picks one by its location).
//!
//! Amounts are exact [`Decimal`]s: a currency at its minor-unit scale, `credits`, or a meter's
//! canonical unit for fragments (an integer). Debits are positive, credits negative; every
//! transaction's postings sum to zero per commodity ([`NewTransaction::check_balanced`]).

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The commodity of credits.
pub const CREDITS: &str = "credits";

/// Errors of the bank. Each names what it is about (the file, the transaction key or
/// sequence number, the account).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BankError {
    /// The database could not be opened, read or written.
    #[error("{file}: {message}")]
    Storage {
        /// The bank file (or `memory`).
        file: String,
        /// What failed.
        message: String,
    },
    /// The file is not a gpumeter ledger, or of a schema this version does not know.
    #[error("{file}: {reason}")]
    NotALedger {
        /// The bank file.
        file: String,
        /// Why.
        reason: String,
    },
    /// A transaction whose postings do not sum to zero for a commodity.
    #[error("transaction `{key}`: the postings of {commodity} sum to {sum}, not 0")]
    Unbalanced {
        /// The transaction's idempotency key.
        key: String,
        /// The commodity.
        commodity: String,
        /// The sum.
        sum: Decimal,
    },
    /// A request the bank refuses (an unknown tenant's balance, a grant of no credits, …).
    #[error("{0}")]
    Refused(String),
    /// A request whose idempotency key names an earlier request with other parameters
    /// (Stripe's rule: a key names one request): nothing was applied. A retry repeats the request
    /// exactly; a new request needs a new key.
    #[error(
        "idempotency key `{key}` names an earlier request with other parameters: its {field} \
         was {recorded}, this request's is {requested}; nothing was applied (a retry must \
         repeat the request exactly, a new request needs a new key)"
    )]
    KeyReused {
        /// The key as the caller gave it.
        key: String,
        /// The first parameter that differs (`tenant`, `credits`, `rate`, `priority`,
        /// `effective`, `expires`, `kind`, `skus`, `meters`).
        field: &'static str,
        /// Its value in the request recorded under the key.
        recorded: String,
        /// Its value in this request.
        requested: String,
    },
    /// `verify` found a transaction that breaks the chain or an invariant.
    #[error("transaction {seq} (`{key}`): {reason}")]
    Corrupt {
        /// Its sequence number, from 1.
        seq: u64,
        /// Its idempotency key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Rating failed while finalizing.
    #[error(transparent)]
    Rating(#[from] gpumeter_rating::RatingError),
    /// A finalization the bank refuses (a source billed before, a report without sources, a
    /// period overlapping a finalized one, an open period, …), naming what is in the way.
    #[error(transparent)]
    Finalize(Box<crate::bank::FinalizeRefusal>),
    /// The location names a backend this build leaves out (a `postgres://` URL without the
    /// Cargo feature `postgres`).
    #[error("{location}: this gpumeter was built without the `{feature}` feature, which this bank needs")]
    BackendNotEnabled {
        /// The location, as given (a password removed).
        location: String,
        /// The Cargo feature that adds the backend.
        feature: &'static str,
    },
    /// Concurrent writers kept conflicting (serialization failures or deadlocks): the work
    /// was run `attempts` times, rolled back each time, and nothing of it was applied.
    #[error("{file}: gave up after {attempts} attempts that conflicted with concurrent writers: {message}")]
    Contended {
        /// The bank's location (a password removed).
        file: String,
        /// How many times the work ran.
        attempts: u32,
        /// The last conflict, as the database reported it.
        message: String,
    },
    /// A file other than the ledger could not be read or written: an export's output, an
    /// import's input ([`crate::transfer`]).
    #[error("{file}: {message}")]
    Io {
        /// The file (a path, `<stdin>`, `<stdout>`).
        file: String,
        /// What failed.
        message: String,
    },
    /// [`crate::transfer::import`] refused a line of its input; nothing was imported.
    #[error("{file}:{line}: {}{reason}", transaction_prefix(.transaction))]
    Import {
        /// The input (a path, or `<stdin>`).
        file: String,
        /// The line, from 1.
        line: u64,
        /// The sequence number and key the line states, when it is a transaction.
        transaction: Option<(u64, String)>,
        /// What is wrong.
        reason: String,
    },
    /// Work that commits on a ledger opened for reading only ([`crate::open_read_only`]):
    /// nothing was written.
    #[error("{file}: the bank was opened for reading only; nothing was written")]
    ReadOnly {
        /// The bank's location (a password removed).
        file: String,
    },
    /// [`crate::transfer::import`] fills an empty ledger only, and this one holds
    /// transactions; nothing was imported.
    #[error("{file}: the ledger already holds {transactions} transactions; import fills an empty ledger only, nothing was imported")]
    NotEmpty {
        /// The input that was to be imported.
        file: String,
        /// How many transactions the ledger holds.
        transactions: u64,
    },
}

impl From<crate::bank::FinalizeRefusal> for BankError {
    fn from(r: crate::bank::FinalizeRefusal) -> Self {
        BankError::Finalize(Box::new(r))
    }
}

/// `transaction 3 (`key`): ` for an import error that names its transaction, else nothing.
fn transaction_prefix(t: &Option<(u64, String)>) -> String {
    t.as_ref().map_or_else(String::new, |(seq, key)| {
        format!("transaction {seq} (`{key}`): ")
    })
}

/// The idempotency key of a grant whose caller gave `key` (`bank grant --key`, `key` of
/// `gm_bank_grant_json`): `grant:<key>`. This is the only namespace callers write in: every
/// key the bank makes for itself begins with another prefix ([`conversion_key`],
/// [`derived_grant_key`], `finalize:`, `close:`, `expire:`, `reserve:`), so a caller's key
/// can never take an internal transaction's. Keys of ledgers written
/// before issue 30 are unchanged, so a retry of an old keyed grant finds its transaction.
pub fn user_grant_key(key: &str) -> String {
    format!("grant:{key}")
}

/// The key of a grant the bank derives from its terms and the instant it is recorded (a grant
/// requested without a key): `grant-terms:<sha256>`. Ledgers written before issue 30 hold such
/// grants as `grant:<sha256>` ([`legacy_derived_grant_key`]).
pub fn derived_grant_key(sha256: &str) -> String {
    format!("grant-terms:{sha256}")
}

/// The key a grant derived from its terms had before issue 30 (`grant:<sha256>`, in the
/// namespace callers write in), looked up so that a retry of such a request across an upgrade
/// applies once.
pub fn legacy_derived_grant_key(sha256: &str) -> String {
    format!("grant:{sha256}")
}

/// The key of the grant a finalization converts a reservation's unused capacity into:
/// `conversion:<finalization key>:<grant id>`. (Before issue 30 it was
/// `grant:<finalization key>:<grant id>`, a key a caller's `--key` could take first, so that
/// the conversion was named but never made.)
pub fn conversion_key(finalization: &str, grant: &str) -> String {
    format!("conversion:{finalization}:{grant}")
}

/// One posting: `amount` of `commodity` on `account` (positive = debit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Posting {
    /// The account (`tenant:alice:credits:g-1`, `provider:revenue`).
    pub account: String,
    /// The commodity: an ISO 4217 code, [`CREDITS`], or a meter's canonical unit.
    pub commodity: String,
    /// Signed amount, exact.
    pub amount: Decimal,
}

impl Posting {
    /// A posting. A zero amount is stored without a sign (`0.00`, never `-0.00`), so its text
    /// reads back as the same decimal and hashes the same ([`canonical_amount`]).
    pub fn new(account: impl Into<String>, commodity: impl Into<String>, amount: Decimal) -> Self {
        Posting {
            account: account.into(),
            commodity: commodity.into(),
            amount: canonical_amount(amount),
        }
    }
}

/// `amount` with a zero's sign cleared: `-0.00` becomes `0.00` (the scale is kept). Decimal
/// text `-0.00` parses back as an unsigned zero, so a negative zero would hash differently
/// once stored and read: every ledger applies this before hashing and storing.
pub fn canonical_amount(amount: Decimal) -> Decimal {
    let mut a = amount;
    if a.is_zero() {
        a.set_sign_positive(true);
    }
    a
}

/// A transaction to append.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewTransaction {
    /// Idempotency key, unique in the ledger: appending a second transaction with the same
    /// key changes nothing ([`Appended::AlreadyApplied`]).
    pub key: String,
    /// What it records (`grant`, `reserve`, `finalize`, `expire`, `close`).
    pub kind: String,
    /// When, RFC 3339 UTC (the business time: a grant's issue, a period's end).
    pub at: String,
    /// The tenant it concerns, if one.
    pub tenant: Option<String>,
    /// The postings; they sum to zero per commodity.
    pub postings: Vec<Posting>,
    /// The facts behind it (a grant's terms, a finalized invoice), JSON.
    pub memo: serde_json::Value,
}

impl NewTransaction {
    /// Clears the sign of every zero amount ([`canonical_amount`]); ledgers call it before
    /// hashing and storing a transaction.
    pub fn canonicalize(&mut self) {
        for p in &mut self.postings {
            p.amount = canonical_amount(p.amount);
        }
    }

    /// Refuses postings that do not sum to zero per commodity.
    ///
    /// # Errors
    /// [`BankError::Unbalanced`] naming the key and commodity.
    pub fn check_balanced(&self) -> Result<(), BankError> {
        for (commodity, sum) in sums(&self.postings)? {
            if !sum.is_zero() {
                return Err(BankError::Unbalanced {
                    key: self.key.clone(),
                    commodity,
                    sum,
                });
            }
        }
        Ok(())
    }
}

/// Σ amount per commodity.
fn sums(postings: &[Posting]) -> Result<BTreeMap<String, Decimal>, BankError> {
    let mut out: BTreeMap<String, Decimal> = BTreeMap::new();
    for p in postings {
        let slot = out.entry(p.commodity.clone()).or_insert(Decimal::ZERO);
        *slot = exact_add(*slot, p.amount).ok_or_else(|| {
            BankError::Refused(format!(
                "the postings of {} exceed what a decimal holds",
                p.commodity
            ))
        })?;
    }
    Ok(out)
}

/// `a + b` exactly, or `None` when the exact sum is not a [`Decimal`]: beyond its range, or
/// needing more digits than its 96-bit mantissa holds. (`Decimal::checked_add` rounds the
/// latter: `79228162514264337593543950335 + 0.00000001` gives the first operand back, so a
/// sum of postings could round to zero and a balance drift from its postings.) Every sum of
/// postings and every balance uses it.
pub(crate) fn exact_add(a: Decimal, b: Decimal) -> Option<Decimal> {
    let sum = a.checked_add(b)?;
    let scale = a.scale().max(b.scale()).max(sum.scale());
    let at_scale = |d: Decimal| {
        num_bigint::BigInt::from(d.mantissa())
            * num_bigint::BigInt::from(10u8).pow(scale - d.scale())
    };
    (at_scale(a) + at_scale(b) == at_scale(sum)).then_some(sum)
}

/// A transaction as stored: its sequence number and its place in the hash chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredTransaction {
    /// Position in the ledger, from 1.
    pub seq: u64,
    /// The transaction.
    #[serde(flatten)]
    pub tx: NewTransaction,
    /// SHA-256 of the previous transaction (`""` for the first).
    pub prev_hash: String,
    /// SHA-256 over the RFC 8785 canonical JSON of `{seq, key, kind, at, tenant, postings,
    /// memo, prev_hash}` ([`chain_hash`]).
    pub hash: String,
}

/// The hash of a transaction in the chain: SHA-256 (lowercase hex) over the RFC 8785
/// canonical JSON of `{seq, key, kind, at, tenant, postings, memo, prev_hash}`, amounts as
/// decimal strings.
///
/// # Errors
/// [`BankError::Refused`] when the JSON cannot be canonicalized.
pub fn chain_hash(seq: u64, tx: &NewTransaction, prev_hash: &str) -> Result<String, BankError> {
    let v = serde_json::json!({
        "seq": seq,
        "key": tx.key,
        "kind": tx.kind,
        "at": tx.at,
        "tenant": tx.tenant,
        "postings": tx.postings,
        "memo": tx.memo,
        "prev_hash": prev_hash,
    });
    let bytes = serde_json_canonicalizer_bytes(&v)?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

fn serde_json_canonicalizer_bytes(v: &serde_json::Value) -> Result<Vec<u8>, BankError> {
    // `gpumeter_core::document_sha256` canonicalizes with RFC 8785; reuse it without a digest
    // field by hashing its output's input: the canonical bytes.
    gpumeter_core::canonical_json(v).map_err(|e| BankError::Refused(e.to_string()))
}

/// What [`LedgerTx::append`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Appended {
    /// Appended now.
    Applied(StoredTransaction),
    /// A transaction with this key was already in the ledger; nothing changed.
    AlreadyApplied(StoredTransaction),
}

impl Appended {
    /// The stored transaction, new or earlier.
    pub fn stored(&self) -> &StoredTransaction {
        match self {
            Appended::Applied(t) | Appended::AlreadyApplied(t) => t,
        }
    }
}

/// Reads and writes inside one database transaction ([`Ledger::atomically`]).
pub trait LedgerTx {
    /// The transaction with this idempotency key, if any.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn find(&self, key: &str) -> Result<Option<StoredTransaction>, BankError>;

    /// Appends `tx` after checking that it balances per commodity; with a key already in the
    /// ledger, changes nothing and returns the earlier one.
    ///
    /// # Errors
    /// [`BankError::Unbalanced`], [`BankError::Storage`].
    fn append(&mut self, tx: NewTransaction) -> Result<Appended, BankError>;

    /// The balance of `account` in `commodity` (zero when it has no posting).
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn balance(&self, account: &str, commodity: &str) -> Result<Decimal, BankError>;

    /// Every non-zero balance of the accounts whose name starts with `prefix`, as
    /// `(account, commodity, balance)`, sorted.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn balances(&self, prefix: &str) -> Result<Vec<(String, String, Decimal)>, BankError>;

    /// Every transaction of `kind` (all kinds when `None`), in ledger order.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn transactions(&self, kind: Option<&str>) -> Result<Vec<StoredTransaction>, BankError>;

    /// The transactions of `kind` whose `tenant` is `tenant`, in ledger order: what a
    /// finalization reads of its tenant's past (grants, earlier finalizations), without
    /// reading every other tenant's. The default filters [`LedgerTx::transactions`]; the
    /// databases select in SQL.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn tenant_transactions(
        &self,
        kind: &str,
        tenant: &str,
    ) -> Result<Vec<StoredTransaction>, BankError> {
        let mut all = self.transactions(Some(kind))?;
        all.retain(|t| t.tx.tenant.as_deref() == Some(tenant));
        Ok(all)
    }

    /// The first transaction of `kind` (the lowest sequence number), if any.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn first_transaction(&self, kind: &str) -> Result<Option<StoredTransaction>, BankError> {
        Ok(self.transactions(Some(kind))?.into_iter().next())
    }

    /// The hash of the last transaction, `None` for an empty ledger.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn head(&self) -> Result<Option<String>, BankError>;

    /// The sequence number and hash of the last transaction, `None` for an empty ledger: what
    /// the next append follows. The default reads every transaction; the databases select
    /// the last row.
    ///
    /// # Errors
    /// [`BankError::Storage`].
    fn last(&self) -> Result<Option<(u64, String)>, BankError> {
        Ok(self.transactions(None)?.pop().map(|t| (t.seq, t.hash)))
    }

    /// Holds `tenants` for this database transaction: another writer that holds one of them
    /// waits until this transaction ends, and so does this one. A writer calls it before it
    /// reads what it decides on (a tenant's grants, fragments, earlier finalizations), so that
    /// concurrent finalizers of one tenant cannot both spend the same credits. Calling it again
    /// with tenants already held is allowed.
    ///
    /// Ledgers that run one writer at a time (SQLite's `BEGIN IMMEDIATE`, the memory ledger)
    /// hold everything already: the default does nothing.
    ///
    /// # Errors
    /// [`BankError::Storage`] (a lock not granted in time), or a conflict the ledger retries.
    fn lock_tenants(&mut self, tenants: &[&str]) -> Result<(), BankError> {
        let _ = tenants;
        Ok(())
    }

    /// Holds the whole bank for this database transaction: every other writer waits, and this
    /// one waits for the writers in progress. For work across tenants (`expire`, `import`, the
    /// first finalization, which fixes the bank's currency). The default does nothing, as for
    /// [`LedgerTx::lock_tenants`].
    ///
    /// # Errors
    /// [`BankError::Storage`] (a lock not granted in time), or a conflict the ledger retries.
    fn lock_all(&mut self) -> Result<(), BankError> {
        Ok(())
    }
}

/// A ledger: runs work atomically (one database transaction per ledger
/// transaction; writers that touch the same tenants, or the hash chain's head, are
/// serialized).
pub trait Ledger {
    /// Runs `f` in one database transaction; commits when `commit` is true and `f` succeeds,
    /// rolls back otherwise (a preview). A second writer waits for the first where their work
    /// overlaps ([`LedgerTx::lock_tenants`], [`LedgerTx::append`]).
    ///
    /// `f` may run more than once: a ledger shared by concurrent writers (PostgreSQL) rolls
    /// back and runs it again after a serialization failure or a deadlock, a bounded number
    /// of times. So `f` must not act outside the ledger, or must tolerate being repeated.
    ///
    /// # Errors
    /// What `f` returns, [`BankError::Storage`], or [`BankError::Contended`] when the
    /// conflicts outlast the retries.
    fn atomically<T>(
        &mut self,
        commit: bool,
        f: impl FnMut(&mut dyn LedgerTx) -> Result<T, BankError>,
    ) -> Result<T, BankError>;
}
