//! Tenant names: the one rule for what may name a tenant, parsed in one place
//! ([`TenantName::parse`]) and used by `--tenant`, tenant maps, opening state and the C ABI.
//!
//! A tenant name is printed in invoice tables, written into documents and used as a key that
//! decides who pays: two names that look alike must not be two tenants, and a name must not
//! be able to move a terminal's cursor. So a name is in a *safe form*:
//!
//! * 1 to 256 bytes of UTF-8, without leading or trailing whitespace;
//! * printable: every character is a letter, mark, number, punctuation or symbol (Unicode
//!   general categories L, M, N, P, S), or the space U+0020 between other characters. Control
//!   characters (ESC, newline, …), format characters (zero-width spaces and joiners,
//!   bidirectional overrides), other spaces (no-break, ideographic), line and paragraph
//!   separators, private-use and unassigned code points are refused;
//! * in Unicode Normalization Form C (NFC), so one name has one spelling in bytes (the
//!   precomposed `é`, not `e` + combining acute);
//! * not a reserved name ([`RESERVED_TENANTS`]: `unattributed`, `idle`) in any case or width:
//!   compared after NFKC normalization and lower-casing, so `IDLE` and `ｉｄｌｅ` are refused.
//!
//! Sources: Unicode Standard Annex #44 (general categories), UAX #15 (normalization forms).

use std::fmt;

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// Tenant for usage that no attribution rule matched (DESIGN §4).
pub const UNATTRIBUTED: &str = "unattributed";

/// Tenant for a window's energy when no tenant has `sm_ns` in it (DESIGN §4 "Energy").
pub const IDLE: &str = "idle";

/// Tenant names gpumeter assigns itself ([`UNATTRIBUTED`], [`IDLE`]): a tenant map or
/// `--tenant` may not name a customer so (in any case), or its usage could not be told apart.
pub const RESERVED_TENANTS: [&str; 2] = [UNATTRIBUTED, IDLE];

/// The longest tenant name, in bytes of UTF-8.
pub const MAX_TENANT_NAME_BYTES: usize = 256;

/// A tenant name in the safe form of the [module docs](self).
///
/// ```
/// use gpumeter_core::TenantName;
/// assert_eq!(TenantName::parse("alice smith")?.as_str(), "alice smith");
/// assert!(TenantName::parse(" alice").is_err());   // leading space
/// assert!(TenantName::parse("IDLE").is_err());     // reserved, in any case
/// assert!(TenantName::parse("al\u{200b}ice").is_err()); // zero-width space
/// assert!(TenantName::parse("e\u{301}").is_err()); // not NFC (use "\u{e9}")
/// # Ok::<(), gpumeter_core::TenantNameError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantName(String);

/// Why a text is not a [`TenantName`]. The message names the offending character by its code
/// point, never by printing it raw.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TenantNameError {
    /// Empty, or only whitespace.
    #[error("a tenant name must not be empty")]
    Empty,
    /// More than [`MAX_TENANT_NAME_BYTES`] bytes.
    #[error("a tenant name must be at most {MAX_TENANT_NAME_BYTES} bytes (this one has {0})")]
    TooLong(usize),
    /// Leading or trailing whitespace.
    #[error("a tenant name must not begin or end with whitespace")]
    Untrimmed,
    /// A character that is not printable (or a space other than U+0020).
    #[error(
        "a tenant name must be printable: character {index} is U+{code:04X}, {what}, which is \
         not allowed (letters, marks, numbers, punctuation, symbols and the space U+0020 are)"
    )]
    NotPrintable {
        /// 0-based index of the character (in characters, not bytes).
        index: usize,
        /// Its code point.
        code: u32,
        /// Its kind, for people (`a control character`, `a format character`, …).
        what: &'static str,
    },
    /// Not in Normalization Form C.
    #[error(
        "a tenant name must be in Unicode Normalization Form C (NFC): write it with precomposed \
         characters"
    )]
    NotNfc,
    /// A reserved name, in some case or width.
    #[error(
        "`{0}` is reserved (in any case): gpumeter gives usage no rule attributes to \
         `unattributed` and energy of windows without sm_ns to `idle`"
    )]
    Reserved(&'static str),
}

impl TenantName {
    /// Checks `text` against the safe form (module docs) and wraps it; nothing is trimmed or
    /// rewritten, so what was given is what is billed.
    ///
    /// # Errors
    /// [`TenantNameError`] naming the first rule `text` breaks.
    pub fn parse(text: &str) -> Result<TenantName, TenantNameError> {
        if text.trim().is_empty() {
            return Err(TenantNameError::Empty);
        }
        if text.len() > MAX_TENANT_NAME_BYTES {
            return Err(TenantNameError::TooLong(text.len()));
        }
        if text.trim() != text {
            return Err(TenantNameError::Untrimmed);
        }
        for (index, c) in text.chars().enumerate() {
            if c == ' ' {
                continue;
            }
            let what = match c.general_category_group() {
                GeneralCategoryGroup::Letter
                | GeneralCategoryGroup::Mark
                | GeneralCategoryGroup::Number
                | GeneralCategoryGroup::Punctuation
                | GeneralCategoryGroup::Symbol => continue,
                GeneralCategoryGroup::Separator => "a space or separator other than U+0020",
                GeneralCategoryGroup::Other => other_kind(c),
            };
            return Err(TenantNameError::NotPrintable {
                index,
                code: u32::from(c),
                what,
            });
        }
        if !unicode_normalization::is_nfc(text) {
            return Err(TenantNameError::NotNfc);
        }
        let folded: String = text.nfkc().flat_map(char::to_lowercase).collect();
        if let Some(r) = RESERVED_TENANTS.iter().find(|r| **r == folded) {
            return Err(TenantNameError::Reserved(r));
        }
        Ok(TenantName(text.to_string()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// The kind of a character of general category C (Cc, Cf, Cs, Co, Cn), for messages.
fn other_kind(c: char) -> &'static str {
    use unicode_properties::GeneralCategory as G;
    match c.general_category() {
        G::Control => "a control character",
        G::Format => "a format character (zero-width or bidirectional control)",
        G::PrivateUse => "a private-use character",
        G::Surrogate => "a surrogate",
        _ => "an unassigned code point",
    }
}

impl fmt::Display for TenantName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for TenantName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for TenantName {
    type Err = TenantNameError;
    /// As [`TenantName::parse`].
    fn from_str(s: &str) -> Result<Self, TenantNameError> {
        TenantName::parse(s)
    }
}

impl TryFrom<&str> for TenantName {
    type Error = TenantNameError;
    /// As [`TenantName::parse`].
    fn try_from(s: &str) -> Result<Self, TenantNameError> {
        TenantName::parse(s)
    }
}

impl TryFrom<String> for TenantName {
    type Error = TenantNameError;
    /// As [`TenantName::parse`].
    fn try_from(s: String) -> Result<Self, TenantNameError> {
        TenantName::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted() {
        for ok in [
            "alice",
            "alice smith",
            "team-7/prod",
            "Zoë",
            "租户",
            "a",
            "idle2",
            "unattributed-team",
            "émile",
            "🦀",
        ] {
            assert!(TenantName::parse(ok).is_ok(), "{ok:?}");
        }
        assert!(TenantName::parse(&"a".repeat(256)).is_ok());
    }

    #[test]
    fn refused() {
        use TenantNameError as E;
        type Case = (&'static str, fn(&E) -> bool);
        let cases: [Case; 17] = [
            ("", |e| *e == E::Empty),
            ("   ", |e| *e == E::Empty),
            ("idle ", |e| *e == E::Untrimmed),
            (" alice", |e| *e == E::Untrimmed),
            ("alice\t", |e| *e == E::Untrimmed),
            ("IDLE", |e| *e == E::Reserved(IDLE)),
            ("Unattributed", |e| *e == E::Reserved(UNATTRIBUTED)),
            ("ｉｄｌｅ", |e| *e == E::Reserved(IDLE)),
            ("unattributed", |e| *e == E::Reserved(UNATTRIBUTED)),
            ("al\u{200b}ice", |e| {
                matches!(
                    e,
                    E::NotPrintable {
                        index: 2,
                        code: 0x200b,
                        ..
                    }
                )
            }),
            ("al\u{1b}[2Jice", |e| {
                matches!(e, E::NotPrintable { code: 0x1b, .. })
            }),
            ("a\nb", |e| matches!(e, E::NotPrintable { code: 0x0a, .. })),
            ("a\u{202e}b", |e| {
                matches!(e, E::NotPrintable { code: 0x202e, .. })
            }),
            ("a\u{a0}b", |e| {
                matches!(e, E::NotPrintable { code: 0xa0, .. })
            }),
            ("a\u{e000}b", |e| {
                matches!(e, E::NotPrintable { code: 0xe000, .. })
            }),
            ("e\u{301}", |e| *e == E::NotNfc),
            ("x\u{7f}", |e| {
                matches!(e, E::NotPrintable { code: 0x7f, .. })
            }),
        ];
        for (text, ok) in cases {
            match TenantName::parse(text) {
                Err(e) => assert!(ok(&e), "{text:?}: {e:?}"),
                Ok(t) => panic!("{text:?} was accepted as {t}"),
            }
        }
        assert_eq!(
            TenantName::parse(&"a".repeat(257)),
            Err(TenantNameError::TooLong(257))
        );
    }

    #[test]
    fn messages_never_print_the_character() {
        let e = TenantName::parse("a\u{1b}b").err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("U+001B") && !e.contains('\u{1b}'), "{e}");
    }
}
