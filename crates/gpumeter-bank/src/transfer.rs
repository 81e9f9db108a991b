//! Moving a ledger between backends (`gpumeter bank export` / `import`): the transactions as
//! JSON Lines, one [`StoredTransaction`] per line in its serde form (`seq`, `key`, `kind`,
//! `at`, `tenant`, `postings`, `memo`, `prev_hash`, `hash`), in ledger order.
//!
//! [`export`] writes a consistent snapshot: every transaction read in one database
//! transaction. [`import`] fills an empty ledger with them, in one database transaction that
//! holds the whole bank ([`LedgerTx::lock_all`]): each line is appended like any new
//! transaction (the target computes its sequence number and hash itself) and must come back
//! with the sequence number, `prev_hash` and `hash` the line states. So an edited export (an
//! amount, an account, a memo), a reordered one or one with a line left out is refused, and
//! nothing of it is imported; what is imported is the exported chain, transaction for
//! transaction, with the same head, and [`crate::verify()`] accepts it.

use std::io::{BufRead, Write};

use serde::Serialize;

use crate::ledger::{Appended, BankError, Ledger, LedgerTx, StoredTransaction};

/// What [`export`] wrote or [`import`] appended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Transferred {
    /// Number of transactions (lines).
    pub transactions: u64,
    /// The chain head: the last transaction's hash (SHA-256, lowercase hex), `None` for an
    /// empty ledger.
    pub head: Option<String>,
}

/// Writes every transaction of `ledger` to `writer` as JSON Lines (compact JSON, each line
/// ending with `\n`; nothing for an empty ledger), in ledger order, from one snapshot read
/// inside a transaction that is not committed. `name` names the output in errors (a file
/// path, `<stdout>`).
///
/// # Errors
/// [`BankError::Storage`] when the ledger cannot be read; [`BankError::Io`] naming `name`
/// when writing fails.
pub fn export<L: Ledger, W: Write>(
    ledger: &mut L,
    writer: W,
    name: &str,
) -> Result<Transferred, BankError> {
    export_with(ledger, writer, name, || serde_json::ser::CompactFormatter)
}

/// [`export`] with each line written through a serde_json [`Formatter`] made by `formatter`
/// (one per line), e.g. a compact formatter that also escapes characters a terminal would
/// act on. The formatter must write one line of JSON: no newline of its own.
///
/// # Errors
/// As [`export`].
///
/// [`Formatter`]: serde_json::ser::Formatter
pub fn export_with<L, W, F>(
    ledger: &mut L,
    writer: W,
    name: &str,
    mut formatter: impl FnMut() -> F,
) -> Result<Transferred, BankError>
where
    L: Ledger,
    W: Write,
    F: serde_json::ser::Formatter,
{
    let transactions = ledger.atomically(false, |t| t.transactions(None))?;
    let io = |e: std::io::Error| BankError::Io {
        file: name.to_string(),
        message: format!("cannot write the export: {e}"),
    };
    let mut w = std::io::BufWriter::new(writer);
    for t in &transactions {
        let mut ser = serde_json::Serializer::with_formatter(&mut w, formatter());
        t.serialize(&mut ser).map_err(|e| BankError::Io {
            file: name.to_string(),
            message: format!("cannot write transaction {} (`{}`): {e}", t.seq, t.tx.key),
        })?;
        w.write_all(b"\n").map_err(io)?;
    }
    w.flush().map_err(io)?;
    Ok(Transferred {
        transactions: transactions.len() as u64,
        head: transactions.last().map(|t| t.hash.clone()),
    })
}

/// One transaction of an export and the line (from 1) it was read from.
type Line = (u64, StoredTransaction);

/// An export read and checked ([`Export::read`]), ready to import ([`Export::import_into`]).
/// Reading first lets a caller refuse a bad input before it opens (and so creates) the
/// target.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// How errors name the input (a file path, `<stdin>`).
    name: String,
    /// The transactions and their lines, in order.
    lines: Vec<Line>,
}

impl Export {
    /// Reads the JSON Lines of an [`export`] from `reader` and checks the chain they state:
    /// each line must be one transaction (a blank line is refused too, and so is a line whose
    /// JSON gives a key twice in one object: serde_json would keep the last), line `n` must have
    /// sequence number `n`, and its `prev_hash` must be the hash of line `n − 1` (`""` for
    /// the first). `name` names the input in errors (a file path, `<stdin>`).
    ///
    /// # Errors
    /// [`BankError::Import`] naming `name` and the line (and, when the line parsed, its
    /// sequence number and key): a line that is not a transaction (serde_json's message), a
    /// break in the chain (a line reordered, left out or edited in its `seq` or
    /// `prev_hash`). [`BankError::Io`] when `reader` fails.
    pub fn read<R: BufRead>(reader: R, name: &str) -> Result<Export, BankError> {
        Ok(Export {
            name: name.to_string(),
            lines: read_lines(reader, name)?,
        })
    }

    /// The transactions as the input states them, in order.
    pub fn transactions(&self) -> impl Iterator<Item = &StoredTransaction> {
        self.lines.iter().map(|(_, t)| t)
    }

    /// What importing it gives: the number of transactions and the head the input states.
    pub fn summary(&self) -> Transferred {
        Transferred {
            transactions: self.lines.len() as u64,
            head: self.lines.last().map(|(_, t)| t.hash.clone()),
        }
    }

    /// Appends the transactions to `ledger`, which must be empty, in one database
    /// transaction holding the whole bank ([`LedgerTx::lock_all`]): each is appended
    /// ([`LedgerTx::append`]) and must be appended now (not a key already there) with the
    /// line's sequence number, `prev_hash` and `hash`, the hash the target computes from the
    /// line's contents, so a line whose contents were edited is refused. Any refusal rolls
    /// everything back: nothing is imported.
    ///
    /// # Errors
    /// - [`BankError::Import`] naming the input, the line and its transaction's sequence
    ///   number and key: contents that hash differently from the `hash` stated, a key given
    ///   twice, postings that do not balance.
    /// - [`BankError::NotEmpty`] when the ledger already holds transactions.
    /// - [`BankError::Storage`] when the ledger cannot be read or written;
    ///   [`BankError::Contended`] as for any write.
    pub fn import_into<L: Ledger>(&self, ledger: &mut L) -> Result<Transferred, BankError> {
        ledger.atomically(true, |t| append_all(t, &self.lines, &self.name))?;
        Ok(self.summary())
    }
}

/// Reads the JSON Lines of an [`export`] from `reader` and appends them to `ledger`, which
/// must be empty (a new one: [`crate::open`] creates it): [`Export::read`], then
/// [`Export::import_into`]. Every line is read and checked before the ledger is touched.
/// `name` names the input in errors (a file path, `<stdin>`).
///
/// # Errors
/// Those of [`Export::read`] and [`Export::import_into`]: [`BankError::Import`] (naming the
/// input's line, and its transaction's sequence number and key when it parsed),
/// [`BankError::NotEmpty`], [`BankError::Io`], [`BankError::Storage`],
/// [`BankError::Contended`].
pub fn import<L: Ledger, R: BufRead>(
    ledger: &mut L,
    reader: R,
    name: &str,
) -> Result<Transferred, BankError> {
    Export::read(reader, name)?.import_into(ledger)
}

/// Parses every line and checks the chain they state (sequence numbers 1, 2, …; each
/// `prev_hash` the previous line's `hash`).
fn read_lines<R: BufRead>(mut reader: R, name: &str) -> Result<Vec<Line>, BankError> {
    let mut out: Vec<Line> = Vec::new();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| BankError::Io {
                file: name.to_string(),
                message: format!("cannot read line {}: {e}", line + 1),
            })?;
        if n == 0 {
            break;
        }
        line += 1;
        let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        // serde_json keeps the last of two equal keys (and a transaction's hash is over the
        // value read): a line that gives one twice hides a value, as a memo in a ledger would.
        crate::verify::check_unique_keys(text).map_err(|e| BankError::Import {
            file: name.to_string(),
            line,
            transaction: None,
            reason: format!("not a transaction: it {e}"),
        })?;
        let t: StoredTransaction = serde_json::from_slice(text).map_err(|e| BankError::Import {
            file: name.to_string(),
            line,
            transaction: None,
            reason: format!("not a transaction: {e}"),
        })?;
        let refuse = |reason: String| BankError::Import {
            file: name.to_string(),
            line,
            transaction: Some((t.seq, t.tx.key.clone())),
            reason,
        };
        if t.seq != line {
            return Err(refuse(format!(
                "sequence number {} on line {line}: a line is missing, repeated or out of \
                 order (an export has transaction n on line n)",
                t.seq
            )));
        }
        let prev = out.last().map_or("", |(_, p)| p.hash.as_str());
        if t.prev_hash != prev {
            return Err(refuse(format!(
                "prev_hash `{}` is not the previous line's hash `{prev}`: the chain is broken \
                 (a line edited, left out or moved)",
                t.prev_hash
            )));
        }
        out.push((line, t));
    }
    Ok(out)
}

/// Appends `lines` to the empty ledger of `t`, each as it was: re-runnable (it reads only
/// `lines` and the ledger).
fn append_all(t: &mut dyn LedgerTx, lines: &[Line], name: &str) -> Result<(), BankError> {
    t.lock_all()?;
    if t.head()?.is_some() {
        let transactions = t.transactions(None)?.len() as u64;
        return Err(BankError::NotEmpty {
            file: name.to_string(),
            transactions,
        });
    }
    for (line, want) in lines {
        let refuse = |reason: String| BankError::Import {
            file: name.to_string(),
            line: *line,
            transaction: Some((want.seq, want.tx.key.clone())),
            reason,
        };
        let got = match t.append(want.tx.clone()) {
            Ok(Appended::Applied(got)) => got,
            Ok(Appended::AlreadyApplied(earlier)) => {
                return Err(refuse(format!(
                    "its key is that of transaction {} (an earlier line)",
                    earlier.seq
                )))
            }
            Err(e @ (BankError::Unbalanced { .. } | BankError::Refused(_))) => {
                return Err(refuse(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        let mut differs = Vec::new();
        if got.seq != want.seq {
            differs.push(format!(
                "sequence number {} (the line says {})",
                got.seq, want.seq
            ));
        }
        if got.prev_hash != want.prev_hash {
            differs.push(format!(
                "prev_hash `{}` (the line says `{}`)",
                got.prev_hash, want.prev_hash
            ));
        }
        if got.hash != want.hash {
            differs.push(format!(
                "hash `{}` (the line says `{}`): its contents are not those the hash was made \
                 from; the line was edited",
                got.hash, want.hash
            ));
        }
        if !differs.is_empty() {
            return Err(refuse(format!("appended, it has {}", differs.join(", "))));
        }
    }
    Ok(())
}
