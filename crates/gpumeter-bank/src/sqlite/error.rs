//! SQLite's errors as the bank's: [`BankError::Storage`] naming the file, on one line.

use crate::ledger::BankError;

/// A storage error on one line: SQLite's message, without the SQL of a statement that failed
/// (rusqlite quotes the whole statement, a migration's dozens of lines).
pub(super) fn storage(file: &str, what: &str, e: &rusqlite::Error) -> BankError {
    let message = match e {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        e => e.to_string(),
    };
    BankError::Storage {
        file: file.to_string(),
        message: format!(
            "{what}: {}",
            message.split_whitespace().collect::<Vec<_>>().join(" ")
        ),
    }
}
