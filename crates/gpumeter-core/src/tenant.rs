//! Tenant names: the one rule for what may name a tenant, parsed in one place
//! ([`TenantName::parse`]) and used by `--tenant`, tenant maps, opening state and the C ABI.
//!
//! A tenant name is printed in invoice tables, written into documents and used as a key that
//! decides who pays: two names that look alike must not be two tenants, a name must not look
//! like one gpumeter assigns itself, and a name must not be able to move a terminal's cursor.
//! So a name is in a *safe form*:
//!
//! * 1 to 256 bytes of UTF-8, without leading or trailing whitespace;
//! * printable: every character is a letter, mark, number, punctuation or symbol (Unicode
//!   general categories L, M, N, P, S), or the space U+0020 between other characters. Control
//!   characters (ESC, newline, …), format characters (zero-width spaces and joiners,
//!   bidirectional overrides), other spaces (no-break, ideographic), line and paragraph
//!   separators, private-use and unassigned code points are refused;
//! * visible: no character that renders as nothing. Every Default_Ignorable_Code_Point
//!   (Unicode `DerivedCoreProperties.txt`, read from ICU4X's `icu_properties`) is refused,
//!   among them the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0 (letters that render as
//!   nothing), the combining grapheme joiner U+034F, the variation selectors (U+180B–U+180F,
//!   U+FE00–U+FE0F, U+E0100–U+E01EF, so an emoji is written without its presentation
//!   selector) and the Khmer inherent vowels U+17B4, U+17B5. So are the [`BLANK_CHARACTERS`]:
//!   characters that render as nothing but which Unicode does not list as ignorable (U+2800
//!   BRAILLE PATTERN BLANK, U+1D159 MUSICAL SYMBOL NULL NOTEHEAD, U+16FE4 KHITAN SMALL SCRIPT
//!   FILLER). And a name needs at least one visible base character (a letter, number,
//!   punctuation or symbol): combining marks alone mark nothing;
//! * in Unicode Normalization Form C (NFC), so one name has one spelling in bytes (the
//!   precomposed `é`, not `e` + combining acute);
//! * not a reserved name ([`RESERVED_TENANTS`]: `unattributed`, `idle`) in any case or width:
//!   compared after NFKC normalization and lower-casing, so `IDLE` and `ｉｄｌｅ` are refused;
//! * not confusable with a reserved name: its UTS #39 confusable skeleton
//!   ([`TenantName::skeleton`], of its NFKC form, and again of its NFKC lower-cased form) is not
//!   the skeleton of a reserved name written in lower case, capitalized or in upper case, so
//!   `іdle` (Cyrillic `і`), `ıdle`, `id1e` and `ldle` (which looks like `Idle`) are refused.
//!
//! Two different names can still look alike (`alice` and `аlice` with a Cyrillic `а`): within
//! one tenant map they are refused (`gpumeter-import`'s tenant map compares
//! [`TenantName::skeleton`]s). Messages never print a name's characters raw: they name code
//! points (`U+2800`) or write the name with everything outside printable ASCII escaped
//! ([`TenantName::escaped`]).
//!
//! Sources: Unicode Standard Annex #44 (general categories, Default_Ignorable_Code_Point),
//! UAX #15 (normalization forms), Unicode Technical Standard #39 (confusable skeletons, via
//! unicode-rs's `unicode-security`, the crate rustc uses for its confusable-identifier lint).

use std::fmt;

use icu_properties::props::DefaultIgnorableCodePoint;
use icu_properties::{CodePointSetData, CodePointSetDataBorrowed};
use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// Tenant for usage that no attribution rule matched.
pub const UNATTRIBUTED: &str = "unattributed";

/// Tenant for a window's energy when no tenant has `sm_ns` in it.
pub const IDLE: &str = "idle";

/// Tenant names gpumeter assigns itself ([`UNATTRIBUTED`], [`IDLE`]): a tenant map or
/// `--tenant` may not name a customer so (in any case), or its usage could not be told apart.
pub const RESERVED_TENANTS: [&str; 2] = [UNATTRIBUTED, IDLE];

/// The longest tenant name, in bytes of UTF-8.
pub const MAX_TENANT_NAME_BYTES: usize = 256;

/// Characters refused because they render as nothing although Unicode does not list them as
/// Default_Ignorable_Code_Point: U+2800 BRAILLE PATTERN BLANK (a symbol, So: the braille cell
/// with no dot raised), U+1D159 MUSICAL SYMBOL NULL NOTEHEAD (a symbol, So: an invisible
/// placeholder notehead) and U+16FE4 KHITAN SMALL SCRIPT FILLER (a nonspacing mark, Mn: an
/// invisible filler that shapes a Khitan cluster). These are the characters of the graphic
/// categories (L, M, N, P, S) that are blank in every font; every other character that renders
/// as nothing is a control, format, separator, unassigned or default-ignorable code point,
/// refused by those rules. (Spacing by itself is not the test: U+3000 and U+00A0 are
/// separators, refused as such.)
pub const BLANK_CHARACTERS: [char; 3] = ['\u{2800}', '\u{1D159}', '\u{16FE4}'];

/// Unicode's Default_Ignorable_Code_Point set (ICU4X's compiled data).
const DEFAULT_IGNORABLE: CodePointSetDataBorrowed<'static> =
    CodePointSetData::new::<DefaultIgnorableCodePoint>();

/// A tenant name in the safe form of the [module docs](self).
///
/// ```
/// use gpumeter_core::TenantName;
/// assert_eq!(TenantName::parse("alice smith")?.as_str(), "alice smith");
/// assert!(TenantName::parse(" alice").is_err());   // leading space
/// assert!(TenantName::parse("IDLE").is_err());     // reserved, in any case
/// assert!(TenantName::parse("al\u{200b}ice").is_err()); // zero-width space
/// assert!(TenantName::parse("e\u{301}").is_err()); // not NFC (use "\u{e9}")
/// assert!(TenantName::parse("idle\u{2800}").is_err()); // a blank braille cell
/// assert!(TenantName::parse("\u{456}dle").is_err()); // Cyrillic і: looks like `idle`
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
    /// A character that renders as nothing: a Default_Ignorable_Code_Point or one of the
    /// [`BLANK_CHARACTERS`].
    #[error(
        "a tenant name must be visible: character {index} is U+{code:04X}, {what}, which renders \
         as nothing"
    )]
    Invisible {
        /// 0-based index of the character (in characters, not bytes).
        index: usize,
        /// Its code point.
        code: u32,
        /// Why it is invisible, for people.
        what: &'static str,
    },
    /// No letter, number, punctuation or symbol: only combining marks (and spaces).
    #[error(
        "a tenant name must have a visible character (a letter, number, punctuation or symbol): \
         this one has only combining marks, the first U+{first:04X}"
    )]
    NoVisibleCharacter {
        /// The name's first code point.
        first: u32,
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
    /// Confusable with a reserved name: the same UTS #39 skeleton as the reserved name in
    /// lower case, capitalized or in upper case.
    #[error(
        "a tenant name must not look like the reserved name `{reserved}`: `{name}` has the UTS \
         #39 confusable skeleton of `{like}`"
    )]
    LooksReserved {
        /// The reserved name it looks like.
        reserved: &'static str,
        /// The form of it the name is confusable with (`idle`, `Idle` or `IDLE`).
        like: String,
        /// The refused name, escaped ([`TenantName::escaped`]).
        name: String,
    },
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
        let mut visible = false;
        for (index, c) in text.chars().enumerate() {
            match unseen(c) {
                Some(Unseen::NotPrintable(what)) => {
                    return Err(TenantNameError::NotPrintable {
                        index,
                        code: u32::from(c),
                        what,
                    })
                }
                Some(Unseen::Invisible(what)) => {
                    return Err(TenantNameError::Invisible {
                        index,
                        code: u32::from(c),
                        what,
                    })
                }
                None => {}
            }
            visible |= matches!(
                c.general_category_group(),
                GeneralCategoryGroup::Letter
                    | GeneralCategoryGroup::Number
                    | GeneralCategoryGroup::Punctuation
                    | GeneralCategoryGroup::Symbol
            );
        }
        if !visible {
            return Err(TenantNameError::NoVisibleCharacter {
                first: text.chars().next().map_or(0, u32::from),
            });
        }
        if !unicode_normalization::is_nfc(text) {
            return Err(TenantNameError::NotNfc);
        }
        let nfkc: String = text.nfkc().collect();
        let folded: String = nfkc.chars().flat_map(char::to_lowercase).collect();
        if let Some(r) = RESERVED_TENANTS.iter().find(|r| **r == folded) {
            return Err(TenantNameError::Reserved(r));
        }
        let ours = [skeleton_of(&nfkc), skeleton_of(&folded)];
        for reserved in RESERVED_TENANTS {
            for like in [
                reserved.to_string(),
                capitalized(reserved),
                reserved.to_uppercase(),
            ] {
                if ours.contains(&skeleton_of(&like)) {
                    return Err(TenantNameError::LooksReserved {
                        reserved,
                        like,
                        name: escaped(text),
                    });
                }
            }
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

    /// The name's confusable skeleton: UTS #39's skeleton of its NFKC form. Two names with
    /// the same skeleton look alike (`alice` and `аlice` with a Cyrillic `а`, `ａｌｉｃｅ`); a
    /// tenant map refuses two such names as different tenants.
    pub fn skeleton(&self) -> String {
        skeleton_of(&self.0.nfkc().collect::<String>())
    }

    /// The name for messages about what it looks like: printable ASCII as it is, every other
    /// character (and `\`, `` ` ``) as `\u{XXXX}`, so look-alikes can be told apart on any
    /// terminal (`\u{0430}lice`).
    pub fn escaped(&self) -> String {
        escaped(&self.0)
    }
}

/// UTS #39's skeleton of `text` (NFD, confusable prototypes, NFD; default-ignorable code points
/// dropped).
fn skeleton_of(text: &str) -> String {
    unicode_security::skeleton(text).collect()
}

/// Why a person does not see a character as it is, where a name must be seen to be told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unseen {
    /// Not printable: a control, format, private-use or unassigned character, or a space or
    /// separator other than U+0020 (general categories C and Z, Unicode 15's UCD).
    NotPrintable(&'static str),
    /// Printable but drawn as nothing: a default-ignorable code point (Unicode's
    /// `Default_Ignorable_Code_Point`) or a blank character ([`BLANK_CHARACTERS`]).
    Invisible(&'static str),
}

/// Whether `c` is a character a person would not see in a name (a tenant name, an event
/// mapping's ids and names), and why; `None` for U+0020 and every visible character or mark.
/// The rule [`TenantName::parse`] applies to each character.
pub fn unseen(c: char) -> Option<Unseen> {
    if c == ' ' {
        return None;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Separator => {
            return Some(Unseen::NotPrintable(
                "a space or separator other than U+0020",
            ))
        }
        GeneralCategoryGroup::Other => return Some(Unseen::NotPrintable(other_kind(c))),
        _ => {}
    }
    if DEFAULT_IGNORABLE.contains(c) {
        Some(Unseen::Invisible(
            "a default-ignorable code point (Unicode Default_Ignorable_Code_Point)",
        ))
    } else if BLANK_CHARACTERS.contains(&c) {
        Some(Unseen::Invisible(
            "a blank character (one with an empty glyph, see BLANK_CHARACTERS)",
        ))
    } else {
        None
    }
}

/// `text` with its first character upper-cased.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// `text` with everything outside printable ASCII, and `\` and `` ` ``, as `\u{XXXX}`.
/// [`TenantName::escaped`] of any text (a tenant as read, valid or not).
pub(crate) fn escaped_text(text: &str) -> String {
    escaped(text)
}

fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c == ' ' || c.is_ascii_graphic()) && c != '\\' && c != '`' {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:04X}}}", u32::from(c)));
        }
    }
    out
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

    /// The review's invisible names: each default-ignorable or blank character is refused,
    /// naming its index and code point.
    #[test]
    fn invisible_characters_are_refused() {
        for (text, index, code) in [
            ("idle\u{2800}", 4, 0x2800),
            ("unattributed\u{3164}", 12, 0x3164),
            ("Idle\u{180b}", 4, 0x180b),
            ("alice\u{034f}", 5, 0x034f),
            ("alice\u{fe0f}", 5, 0xfe0f),
            ("\u{3164}", 0, 0x3164),
            ("\u{115f}", 0, 0x115f),
            ("a\u{1160}b", 1, 0x1160),
            ("a\u{ffa0}", 1, 0xffa0),
            ("a\u{17b4}", 1, 0x17b4),
            ("a\u{e0100}", 1, 0xe0100),
            ("\u{2800}", 0, 0x2800),
            ("a\u{1d159}", 1, 0x1d159),
            ("a\u{16fe4}", 1, 0x16fe4),
        ] {
            match TenantName::parse(text) {
                Err(TenantNameError::Invisible {
                    index: i, code: c, ..
                }) => {
                    assert_eq!((i, c), (index, code), "{text:?}")
                }
                other => panic!("{text:?}: expected Invisible, got {other:?}"),
            }
        }
        // Every one of the blank characters, and every default-ignorable that is otherwise
        // printable (a letter or mark), is refused.
        for c in BLANK_CHARACTERS {
            assert!(
                TenantName::parse(&format!("x{c}")).is_err(),
                "U+{:04X}",
                u32::from(c)
            );
        }
        let printable_ignorables = ('\0'..=char::MAX)
            .filter(|c| DEFAULT_IGNORABLE.contains(*c))
            .filter(|c| {
                matches!(
                    c.general_category_group(),
                    GeneralCategoryGroup::Letter | GeneralCategoryGroup::Mark
                )
            })
            .inspect(|c| {
                let e = TenantName::parse(&format!("x{c}"));
                assert!(
                    matches!(e, Err(TenantNameError::Invisible { .. })),
                    "U+{:04X}: {e:?}",
                    u32::from(*c)
                );
            })
            .count();
        assert!(printable_ignorables > 250, "{printable_ignorables}");
    }

    #[test]
    fn a_name_needs_a_visible_character() {
        for text in ["\u{301}", "\u{301}\u{302}", "\u{301} \u{302}"] {
            assert_eq!(
                TenantName::parse(text),
                Err(TenantNameError::NoVisibleCharacter { first: 0x301 }),
                "{text:?}"
            );
        }
        // A mark on a base character is fine.
        assert!(TenantName::parse("x\u{301}").is_ok()); // no precomposed x́: NFC
    }

    #[test]
    fn look_alikes_of_reserved_names_are_refused() {
        for (text, reserved, like) in [
            ("\u{0456}dle", IDLE, "idle"),                         // Cyrillic і
            ("\u{0131}dle", IDLE, "idle"),                         // dotless ı
            ("id1e", IDLE, "idle"),                                // digit one
            ("ldle", IDLE, "Idle"),                                // l as capital I
            ("\u{0406}DLE", IDLE, "idle"),                         // Cyrillic І, lower-cased: і
            ("\u{04c0}dle", IDLE, "Idle"),                         // Cyrillic palochka
            ("unattribut\u{0435}d", UNATTRIBUTED, "unattributed"), // Cyrillic е
            ("\u{ff55}nattribut\u{0435}d", UNATTRIBUTED, "unattributed"), // fullwidth u, е
        ] {
            match TenantName::parse(text) {
                Err(TenantNameError::LooksReserved {
                    reserved: r,
                    like: l,
                    name,
                }) => {
                    assert_eq!((r, l.as_str()), (reserved, like), "{text:?}");
                    assert!(name.is_ascii(), "{name}");
                }
                other => panic!("{text:?}: expected LooksReserved, got {other:?}"),
            }
        }
        for ok in ["idler", "idle2", "id", "unattributed-team", "\u{0456}dl"] {
            assert!(TenantName::parse(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn skeletons_and_escaped_names() {
        let sk = |t: &str| tn(t).skeleton();
        assert_eq!(sk("\u{0430}lice"), sk("alice")); // Cyrillic а
        assert_eq!(sk("\u{ff41}lice"), sk("alice")); // fullwidth a (NFKC)
        assert_ne!(sk("Alice"), sk("alice"));
        assert_ne!(sk("alice"), sk("alicia"));
        assert_eq!(tn("\u{0430}lice").escaped(), "\\u{0430}lice");
        assert_eq!(tn("a\\b`c").escaped(), "a\\u{005C}b\\u{0060}c");
        assert_eq!(tn("team-7/prod").escaped(), "team-7/prod");
    }

    fn tn(t: &str) -> TenantName {
        match TenantName::parse(t) {
            Ok(n) => n,
            Err(e) => panic!("{t:?}: {e}"),
        }
    }

    #[test]
    fn new_messages_name_the_rule_and_code_point_never_the_character() {
        for (text, needle, rule) in [
            ("idle\u{2800}", "U+2800", "visible"),
            (
                "unattributed\u{3164}",
                "U+3164",
                "Default_Ignorable_Code_Point",
            ),
            ("\u{301}", "U+0301", "visible character"),
            ("\u{0456}dle", "\\u{0456}dle", "UTS #39 confusable skeleton"),
        ] {
            let e = TenantName::parse(text).err().map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(e.contains(needle) && e.contains(rule), "{e}");
            assert!(e.is_ascii(), "{e}");
        }
    }

    #[test]
    fn messages_never_print_the_character() {
        let e = TenantName::parse("a\u{1b}b").err().map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("U+001B") && !e.contains('\u{1b}'), "{e}");
    }
}
