//! The one rule for long strings, shared by both importers: a string is kept up to
//! [`MAX_STRING_BYTES`] and the rest replaced by [`CUT_MARK`] and a digest of what was dropped.
//! Kineto text is cut as it is read (`kineto`'s string cap); names an importer holds whole
//! (Nsight kernel and device names) are cut by `cut_string`.

#[cfg(any(feature = "nsys", test))]
use sha2::{Digest, Sha256};

/// The longest a JSON string of a Kineto trace is read: 65,536 bytes of its JSON text. A
/// longer string is cut at the first character boundary at or after this many bytes of its
/// text, an escape counting as the bytes it stands for (never inside an escape, nor between
/// the two escapes of a surrogate pair), so a string is cut at the same character however it
/// is escaped, before the JSON parser
/// sees it, so that a string of any length costs at most this much memory. The rest of its
/// text is not kept but is still read: validated as serde_json validates a string, and
/// digested, so that the cut string ends in [`CUT_MARK`] and 32 hex digits (the first 16 bytes
/// of the SHA-256 of the text dropped, escapes decoded (the UTF-8 of what the string stands
/// for, from the first character not kept to its end), and `]`. Two strings that differ only
/// past the cut thus stay two strings, and equal strings (however escaped) stay equal. A cut
/// string keeps at most `MAX_STRING_BYTES + 3` bytes of text (the character or surrogate pair
/// under way is finished), then
/// [`CUT_SUFFIX_BYTES`] bytes of mark and digest. Not 4 KiB: real C++ template kernel names
/// pass it (one of 5,123 bytes in the HTA AlexNet trace of `shared/data`), and a kernel name is
/// never cut in a real trace. Each source with a cut string gets one warning saying how many.
pub const MAX_STRING_BYTES: usize = 64 * 1024;

/// What follows the kept part of a string cut at [`MAX_STRING_BYTES`], before the hex digest
/// of the part dropped: `...[cut sha256:`, then 32 lowercase hex digits and `]`.
pub const CUT_MARK: &str = "...[cut sha256:";

/// The bytes a cut string gains after its kept part: [`CUT_MARK`], 32 hex digits, `]` (48).
pub const CUT_SUFFIX_BYTES: usize = CUT_MARK.len() + 33;

/// Cuts `s` as a Kineto string is cut as it is read: the characters that
/// start before [`MAX_STRING_BYTES`] bytes are kept, and when any is dropped, [`CUT_MARK`], the
/// first 16 bytes of the SHA-256 of the UTF-8 text dropped (32 lowercase hex digits) and `]`
/// follow, so two names that differ only past the cut stay two names (and two records of
/// kernels with such names are not one record and a duplicate). Returns whether it was cut.
/// For names an importer keeps whole before cutting (Nsight kernel and device names).
#[cfg(any(feature = "nsys", test))]
pub(crate) fn cut_string(s: &mut String) -> bool {
    if s.len() <= MAX_STRING_BYTES {
        return false;
    }
    let mut end = MAX_STRING_BYTES;
    while !s.is_char_boundary(end) {
        end += 1;
    }
    if end >= s.len() {
        return false;
    }
    let digest = Sha256::digest(&s.as_bytes()[end..]);
    s.truncate(end);
    s.push_str(CUT_MARK);
    s.push_str(&hex::encode(&digest[..16]));
    s.push(']');
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_name_keeps_a_digest_of_what_it_drops() {
        let base = "k".repeat(MAX_STRING_BYTES);
        let (mut a, mut b) = (format!("{base}<A>"), format!("{base}<B>"));
        assert!(cut_string(&mut a) && cut_string(&mut b));
        assert_ne!(a, b, "names that differ past the cut stay two names");
        assert!(a.starts_with(&base) && a[MAX_STRING_BYTES..].starts_with(CUT_MARK));
        assert_eq!(a.len(), MAX_STRING_BYTES + CUT_SUFFIX_BYTES);
        let want = hex::encode(&Sha256::digest(b"<A>")[..16]);
        assert!(
            a.ends_with(&format!("{want}]")),
            "{}",
            &a[MAX_STRING_BYTES..]
        );
        // Not longer than the limit: untouched.
        let mut short = base.clone();
        assert!(!cut_string(&mut short));
        assert_eq!(short, base);
    }

    #[test]
    fn the_character_under_way_at_the_limit_is_kept_whole() {
        // 'é' is 2 bytes: one starts at byte MAX_STRING_BYTES - 1 and ends past the limit.
        let head = "k".repeat(MAX_STRING_BYTES - 1);
        let mut s = format!("{head}éx");
        assert!(cut_string(&mut s));
        assert!(
            s.starts_with(&format!("{head}é{CUT_MARK}")),
            "{}",
            &s[s.len() - 60..]
        );
        // A string that ends with that character drops nothing: not cut.
        let mut whole = format!("{head}é");
        assert!(!cut_string(&mut whole));
        assert_eq!(whole, format!("{head}é"));
    }
}
