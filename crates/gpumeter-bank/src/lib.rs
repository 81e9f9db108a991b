//! # gpumeter-bank
//!
//! The credit bank: a double-entry ledger of credits, billing-increment fragments
//! and finalized invoices, with a hash chain a third party can check.
//!
//! The ledger lives in an SQLite file ([`SqliteLedger`], the embedded default) or, with the
//! Cargo feature `postgres`, in a PostgreSQL database shared by many billing workers
//! (`PostgresLedger`); [`open`] chooses by the location (a path, or a `postgres://` URL).
//!
//! Where this crate sits in the flow from sources to the bank, what it owns and what it may
//! depend on: `docs/ARCHITECTURE.md` in the repository.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod accounts;
pub mod backend;
pub mod bank;
pub mod grants;
pub mod ledger;
mod location;
pub mod memory;
mod overlay;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sqlite;
mod tables;
pub mod transfer;
pub mod verify;

pub use backend::{is_postgres, open, open_existing, open_read_only, redact, AnyLedger};
pub use bank::{
    balance, check_grant, check_reservation, close, expire, finalization_key, finalize,
    finalize_with, grant, reserve, Balance, Closed, FinalizeOptions, FinalizeRefusal, Finalized,
    GrantRequest, Outcome, ReserveRequest,
};
pub use grants::{Grant, GrantKind, Reservation};
pub use ledger::{
    canonical_amount, chain_hash, Appended, BankError, Ledger, LedgerTx, NewTransaction, Posting,
    StoredTransaction, CREDITS,
};
pub use memory::MemoryLedger;
#[cfg(feature = "postgres")]
pub use postgres::PostgresLedger;
pub use sqlite::SqliteLedger;
pub use transfer::{export, import, Export, Transferred};
pub use verify::{verify, VerifyReport};
