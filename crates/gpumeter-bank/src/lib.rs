//! # gpumeter-bank
//!
//! The credit bank (DESIGN §6): a double-entry ledger of credits, billing-increment fragments
//! and finalized invoices, with a hash chain a third party can check.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ledger;
pub mod memory;
pub mod sqlite;
pub mod verify;

pub use ledger::{
    chain_hash, Appended, BankError, Ledger, LedgerTx, NewTransaction, Posting, StoredTransaction,
    CREDITS,
};
pub use memory::MemoryLedger;
pub use sqlite::SqliteLedger;
pub use verify::{verify, VerifyReport};
