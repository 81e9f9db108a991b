//! # gpumeter-bank
//!
//! The credit bank: a double-entry ledger of credits, billing-increment fragments
//! and finalized invoices, with a hash chain a third party can check.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accounts;
pub mod bank;
pub mod grants;
pub mod ledger;
pub mod memory;
pub mod sqlite;
pub mod verify;

pub use bank::{
    balance, close, expire, finalization_key, finalize, grant, reserve, Balance, Closed, Finalized,
    GrantRequest, Outcome, ReserveRequest,
};
pub use grants::{Grant, GrantKind, Reservation};
pub use ledger::{
    canonical_amount, chain_hash, Appended, BankError, Ledger, LedgerTx, NewTransaction, Posting,
    StoredTransaction, CREDITS,
};
pub use memory::MemoryLedger;
pub use sqlite::SqliteLedger;
pub use verify::{verify, VerifyReport};
