//! PostgreSQL's errors as the bank's: [`BankError::Storage`] naming the location, with the
//! server's message and SQLSTATE, and which errors are conflicts worth running the work again.

use postgres::error::SqlState;

use crate::ledger::BankError;

pub(super) fn storage_msg(file: &str, message: String) -> BankError {
    BankError::Storage {
        file: file.to_string(),
        message,
    }
}

pub(super) fn storage(file: &str, what: &str, e: &postgres::Error) -> BankError {
    storage_msg(file, format!("{what}: {}", describe(e)))
}

/// The server's message and SQLSTATE when there is one, else the client's error with its
/// causes (`error performing TLS handshake: invalid peer certificate: UnknownIssuer`,
/// `error connecting to server: Connection refused (os error 111)`).
pub(super) fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// Whether rolling back and running the work again may succeed.
pub(super) fn is_conflict(e: &postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}
