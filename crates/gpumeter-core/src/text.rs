//! Text for terminals: the one escaping rule for strings that came from inputs (device and
//! kernel names, file names, tenant names, warnings, error messages) before they are printed
//! as text.
//!
//! A device name `"\u{1b}[2J"` in a trace would clear the screen of whoever runs
//! `gpumeter usage`; a newline in a cell would fake a table row (`"x\n  Total 0.00"`); a
//! right-to-left override (U+202E) would show `0.00` where the bytes say something else.
//! [`printable`] replaces each character that can do such things with a visible escape and
//! leaves every other character as it is (non-ASCII letters included), so a name is still
//! readable. JSON output needs none of this for its parsers, but see [`is_escaped`] for what a
//! JSON writer should escape too.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is escaped by [`printable`]: control characters (C0 U+0000–U+001F, DEL U+007F,
/// C1 U+0080–U+009F: ESC, newline, CR, tab, CSI, …), the bidirectional formatting characters
/// (embeddings and overrides U+202A–U+202E, isolates U+2066–U+2069, the marks U+200E, U+200F
/// and U+061C) and the line and paragraph separators U+2028, U+2029.
pub fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

/// `text` with every character of [`is_escaped`] written as a Rust-style escape: `\t`, `\n`,
/// `\r`, and `\u{1b}` (lower-case hex, no padding) for the others. Everything else, the
/// backslash included, is unchanged; text with nothing to escape is returned borrowed.
///
/// ```
/// use gpumeter_core::text::printable;
/// assert_eq!(printable("NVIDIA H100\u{1b}[2J\n"), "NVIDIA H100\\u{1b}[2J\\n");
/// assert_eq!(printable("a\u{202e}b"), "a\\u{202e}b");
/// assert_eq!(printable("Zoë 租户"), "Zoë 租户");
/// ```
pub fn printable(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(is_escaped) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(text.get(..first).unwrap_or_default());
    for c in text.get(first..).unwrap_or_default().chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if is_escaped(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_controls_and_bidi_and_nothing_else() {
        let cases = [
            ("\u{1b}[2J", "\\u{1b}[2J"),
            ("a\nb\rc\td", "a\\nb\\rc\\td"),
            (
                "\u{0}\u{7f}\u{80}\u{9b}\u{9f}",
                "\\u{0}\\u{7f}\\u{80}\\u{9b}\\u{9f}",
            ),
            (
                "\u{202a}\u{202b}\u{202c}\u{202d}\u{202e}",
                "\\u{202a}\\u{202b}\\u{202c}\\u{202d}\\u{202e}",
            ),
            (
                "\u{2066}\u{2067}\u{2068}\u{2069}",
                "\\u{2066}\\u{2067}\\u{2068}\\u{2069}",
            ),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
            ("\u{2028}\u{2029}", "\\u{2028}\\u{2029}"),
        ];
        for (raw, want) in cases {
            assert_eq!(printable(raw), want, "{raw:?}");
            assert!(!printable(raw).chars().any(is_escaped), "{raw:?}");
        }
        for kept in [
            "NVIDIA H100 80GB HBM3",
            "Zoë",
            "租户",
            "émile",
            "🦀",
            "back\\slash",
            "void k<float>(int*)",
            "a\u{a0}b",
            "",
        ] {
            assert!(
                matches!(printable(kept), Cow::Borrowed(s) if s == kept),
                "{kept:?}"
            );
        }
    }

    #[test]
    fn every_escaped_char_is_in_the_listed_ranges() {
        for u in 0u32..=0x3000 {
            let Some(c) = char::from_u32(u) else { continue };
            let listed = u < 0x20
                || (0x7f..=0x9f).contains(&u)
                || (0x202a..=0x202e).contains(&u)
                || (0x2066..=0x2069).contains(&u)
                || [0x200e, 0x200f, 0x061c, 0x2028, 0x2029].contains(&u);
            assert_eq!(is_escaped(c), listed, "U+{u:04X}");
        }
    }
}
