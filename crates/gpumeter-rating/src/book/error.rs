//! Price-book errors and where they point: [`PriceBookError`], the index of each key's
//! line and column in the TOML text, and the context that builds errors from it.

use std::collections::HashMap;

/// Errors reading or validating a price book. Each names the file, the line and column of the
/// offending key in the text (1-based; the column counts characters), the table (`""` for the
/// top level, else `sku[i]`, `rate[i]`, `rate[i].tiers[j]`, `band[i]`, counted from 0 in file
/// order), the field and the offending value as written in TOML, and prints as
/// `file:line:column: rate[3].unit_price = "-1": reason`. A price-book error never yields a
/// partial invoice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PriceBookError {
    /// The file could not be read.
    #[error("{file}: cannot read the price book: {source}")]
    Io {
        /// The path as given.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not UTF-8 text.
    #[error("{file}: the price book is not UTF-8 text: {reason}")]
    NotUtf8 {
        /// The path as given.
        file: String,
        /// Where the first bad byte is.
        reason: String,
    },
    /// The text is not a TOML document.
    #[error("{file}:{line}:{column}: not a TOML document: {message}")]
    Syntax {
        /// The file name as given.
        file: String,
        /// Line of the error, from 1 (1 when the parser gives no place).
        line: u32,
        /// Column of the error in characters, from 1.
        column: u32,
        /// The TOML parser's message.
        message: String,
    },
    /// A key that the format does not have (a typo is never ignored).
    #[error(
        "{file}:{line}:{column}: {}: unknown key `{key}` (known keys: {known})",
        place(table)
    )]
    UnknownKey {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level, `rate[3]`, `rate[3].tiers[1]`).
        table: String,
        /// The unknown key.
        key: String,
        /// The keys that table may have, comma-separated.
        known: String,
        /// Line of the unknown key, from 1.
        line: u32,
        /// Column of the unknown key in characters, from 1.
        column: u32,
    },
    /// A required field is absent.
    #[error("{file}:{line}:{column}: {} is missing", at(table, field))]
    Missing {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level).
        table: String,
        /// The field.
        field: &'static str,
        /// Line of the table's header (`[[rate]]`, `{` of an inline table), from 1; 1 for
        /// the top level.
        line: u32,
        /// Column of the table's header in characters, from 1.
        column: u32,
    },
    /// A field has a value the format does not allow, or conflicts with another table.
    #[error("{file}:{line}:{column}: {} = {value}: {reason}", at(table, field))]
    Invalid {
        /// The file name as given.
        file: String,
        /// The table (`""` for the top level).
        table: String,
        /// The field (`unit_price`; `""` when the whole table is wrong).
        field: &'static str,
        /// The value as written in TOML (strings quoted).
        value: String,
        /// What is wrong, for people (boxed to keep the error small: `Result`s of it are
        /// returned everywhere).
        reason: Box<str>,
        /// Line of the field's key (of the table's header when the field is absent or
        /// `""`), from 1.
        line: u32,
        /// Column of that key in characters, from 1.
        column: u32,
    },
}

impl PriceBookError {
    /// Where in the text the error is, `(line, column)` from 1 (column in characters), for
    /// every error about the book's content; `None` for [`PriceBookError::Io`] and
    /// [`PriceBookError::NotUtf8`].
    pub fn location(&self) -> Option<(u32, u32)> {
        match self {
            PriceBookError::Io { .. } | PriceBookError::NotUtf8 { .. } => None,
            PriceBookError::Syntax { line, column, .. }
            | PriceBookError::UnknownKey { line, column, .. }
            | PriceBookError::Missing { line, column, .. }
            | PriceBookError::Invalid { line, column, .. } => Some((*line, *column)),
        }
    }
}

/// Where each key and table of the TOML text starts, by path (`rate[3].unit_price`,
/// `rate[3]`, `rate[3].tiers[0].up_to`, `currency`), as `(line, column)` from 1.
#[derive(Debug, Default)]
pub(super) struct Locator {
    places: HashMap<String, (u32, u32)>,
}

impl Locator {
    /// Indexes `text`; a text that does not parse yields an empty index (the caller has
    /// already refused it).
    pub(super) fn new(text: &str) -> Locator {
        let mut loc = Locator::default();
        let lines = LineIndex::new(text);
        if let Ok(doc) = toml::de::DeTable::parse(text) {
            loc.walk(&lines, "", doc.get_ref());
        }
        loc
    }

    fn walk(&mut self, lines: &LineIndex<'_>, prefix: &str, table: &toml::de::DeTable<'_>) {
        for (key, value) in table.iter() {
            let path = if prefix.is_empty() {
                key.get_ref().to_string()
            } else {
                format!("{prefix}.{}", key.get_ref())
            };
            self.places
                .insert(path.clone(), lines.place(key.span().start));
            self.walk_value(lines, &path, value);
        }
    }

    fn walk_value(
        &mut self,
        lines: &LineIndex<'_>,
        path: &str,
        value: &toml::Spanned<toml::de::DeValue<'_>>,
    ) {
        match value.get_ref() {
            toml::de::DeValue::Table(t) => self.walk(lines, path, t),
            toml::de::DeValue::Array(items) => {
                for (j, item) in items.iter().enumerate() {
                    let p = format!("{path}[{j}]");
                    self.places
                        .insert(p.clone(), lines.place(item.span().start));
                    self.walk_value(lines, &p, item);
                }
            }
            _ => {}
        }
    }

    /// The place of `table.field`, else of `table`, else the start of the file.
    pub(super) fn find(&self, table: &str, field: &str) -> (u32, u32) {
        let key = at(table, field);
        self.places
            .get(&key)
            .or_else(|| self.places.get(table))
            .copied()
            .unwrap_or((1, 1))
    }
}

/// Byte offsets to `(line, column)`, both from 1, the column in characters.
pub(super) struct LineIndex<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        LineIndex { text, starts }
    }

    pub(super) fn place(&self, offset: usize) -> (u32, u32) {
        let line = self.starts.partition_point(|&s| s <= offset).max(1);
        let start = self.starts.get(line - 1).copied().unwrap_or(0);
        let column = self
            .text
            .get(start..offset.min(self.text.len()))
            .map_or(0, |s| s.chars().count());
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        (narrow(line), narrow(column + 1))
    }
}

/// The file name and the places of its keys, for building errors.
pub(super) struct Ctx<'a> {
    pub(super) file: &'a str,
    pub(super) loc: &'a Locator,
}

impl Ctx<'_> {
    pub(super) fn invalid(
        &self,
        table: &str,
        field: &'static str,
        value: String,
        reason: impl Into<String>,
    ) -> PriceBookError {
        let (line, column) = self.loc.find(table, field);
        PriceBookError::Invalid {
            file: self.file.to_string(),
            table: table.to_string(),
            field,
            value,
            reason: reason.into().into_boxed_str(),
            line,
            column,
        }
    }
}

/// `rate[3].unit_price`, or `currency` at the top level, or `band[0]` for a whole table.
pub(super) fn at(table: &str, field: &str) -> String {
    match (table.is_empty(), field.is_empty()) {
        (true, _) => field.to_string(),
        (false, true) => table.to_string(),
        (false, false) => format!("{table}.{field}"),
    }
}

fn place(table: &str) -> String {
    if table.is_empty() {
        "top level".to_string()
    } else {
        table.to_string()
    }
}
