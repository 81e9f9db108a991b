//! `gpumeter bank export` / `import`: a ledger as JSON Lines of its transactions, to move it
//! between backends (an SQLite file to PostgreSQL) or keep a copy that `import` checks line by
//! line ([`gpumeter::bank::transfer`]).

use std::path::PathBuf;

use clap::Args;
use gpumeter::bank::{BankError, Export, Transferred};

use crate::stdin::{is_stdin, STDIN_NAME};
use crate::{Failure, Output};

/// How messages name standard output as an export's destination.
const STDOUT_NAME: &str = "<stdout>";

/// `bank export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The bank to export: an SQLite file, or a PostgreSQL URL (postgres://…). It must exist.
    #[arg(long, value_name = "LOCATION")]
    bank: String,
    /// Write the JSON Lines to FILE (replaced whole, only once the export is complete)
    /// instead of standard output; `-` is standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// `bank import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The bank to fill: an SQLite file, or a PostgreSQL URL (postgres://…). Created when
    /// there is none; it must hold no transaction.
    #[arg(long, value_name = "LOCATION")]
    bank: String,
    /// The JSON Lines of a `bank export`; `-` reads standard input.
    #[arg(value_name = "FILE")]
    input: PathBuf,
}

/// A bank error as the other bank commands report it (exit 1).
fn bank_err(e: BankError) -> Failure {
    Failure::from(gpumeter::Error::from(e))
}

/// Exit 1 for a file that cannot be opened, read or written.
fn io_failure(message: String) -> Failure {
    Failure { code: 1, message }
}

/// `gpumeter bank export`: the JSON Lines on standard output (as they are, a newline after
/// each line, nothing for an empty bank), or written to `--output` with a one-line summary.
pub(crate) fn export(a: ExportArgs) -> Result<Output, Failure> {
    crate::output::Files::new()
        .bank(Some(&a.bank), false)
        .output_or_stdout("--output", a.output.as_deref())
        .check()?;
    let mut ledger = gpumeter::bank::open_read_only(&a.bank).map_err(bank_err)?;
    let mut lines = |w: &mut dyn std::io::Write, name: &str| {
        // Strings with control or bidirectional characters (a memo's text) are `\uXXXX`
        // escapes: the same JSON to `import`, nothing a terminal acts on.
        gpumeter::bank::transfer::export_with(&mut ledger, &mut *w, name, || {
            crate::events::CompactTerminalSafe
        })
        .map_err(bank_err)
    };
    match a.output.filter(|p| !is_stdin(p)) {
        None => {
            let mut out = Vec::new();
            lines(&mut out, STDOUT_NAME)?;
            String::from_utf8(out)
                .map(Output::Events)
                .map_err(|e| io_failure(format!("cannot write the export: {e}")))
        }
        Some(path) => {
            let name = path.display().to_string();
            let done = crate::output::write_atomically(&path, |w| lines(w, &name))?;
            Ok(Output::Text(crate::text_out(&format!(
                "exported {} transactions to {name}; head {}",
                done.transactions,
                head(&done)
            ))))
        }
    }
}

/// `gpumeter bank import`: reads and checks the whole input, then appends its transactions
/// to an empty bank, each against the hash it states; a one-line summary.
pub(crate) fn import(a: ImportArgs) -> Result<String, Failure> {
    crate::output::Files::new()
        .input("the export to import", Some(&a.input))
        .bank(Some(&a.bank), true)
        .check()?;
    // The input first: one that cannot be read, or does not chain, creates no bank.
    let export = if is_stdin(&a.input) {
        Export::read(std::io::stdin().lock(), STDIN_NAME)
    } else {
        let file = std::fs::File::open(&a.input)
            .map_err(|e| io_failure(format!("{}: cannot open: {e}", a.input.display())))?;
        Export::read(
            std::io::BufReader::new(file),
            &a.input.display().to_string(),
        )
    }
    .map_err(bank_err)?;
    let mut ledger = gpumeter::bank::open(&a.bank).map_err(bank_err)?;
    let done = export.import_into(&mut ledger).map_err(|e| match e {
        BankError::NotEmpty { file, transactions } => io_failure(format!(
            "{}: the bank already holds {transactions} transactions; import fills an empty \
             bank only (nothing was imported from {file})",
            ledger.location()
        )),
        e => bank_err(e),
    })?;
    Ok(crate::text_out(&format!(
        "imported {} transactions; head {}",
        done.transactions,
        head(&done)
    )))
}

/// The head as the summaries print it.
fn head(done: &Transferred) -> &str {
    done.head.as_deref().unwrap_or("(empty ledger)")
}
