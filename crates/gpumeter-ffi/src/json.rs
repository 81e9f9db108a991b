//! The JSON objects the C ABI reads (`config_json`, `grant_json`): an object, never an array
//! read field by field in declaration order (serde's derive accepts both), and integers whose
//! errors say what is wrong with them ("too large"), not how serde_json stored them (a number
//! past 64 bits is parsed as a float).

use std::fmt::Display;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Parses `text` as a JSON object into `T`. The message of an error does not name the
/// argument (the caller does).
pub(crate) fn object<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    // JSON's whitespace; an object starts with `{`.
    let start = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if !start.starts_with('{') {
        let what = match start.chars().next() {
            Some('[') => "an array",
            Some('"') => "a string",
            Some('t' | 'f') => "a boolean",
            Some('n') => "null",
            Some(c) if c == '-' || c.is_ascii_digit() => "a number",
            Some(_) => "not JSON",
            None => "empty",
        };
        return Err(format!(
            "must be a JSON object ({{\"key\": value, …}}), not {what}"
        ));
    }
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// An integer type a field may have, with its range for messages.
pub(crate) trait Int: Copy + Display + DeserializeOwned + TryFrom<i128> {
    /// The smallest value.
    const MIN: Self;
    /// The largest value.
    const MAX: Self;
}

impl Int for u32 {
    const MIN: Self = u32::MIN;
    const MAX: Self = u32::MAX;
}

impl Int for u64 {
    const MIN: Self = u64::MIN;
    const MAX: Self = u64::MAX;
}

impl Int for i64 {
    const MIN: Self = i64::MIN;
    const MAX: Self = i64::MAX;
}

/// Reads an integer field from its JSON text: an integer out of the type's range is "too
/// large" or "too small" (with the range), a number with a fraction or an exponent is "not
/// an integer"; anything else is "expected an integer".
fn int_from<T: Int>(raw: &RawValue) -> Result<T, String> {
    let text = raw.get();
    match serde_json::from_str::<T>(text) {
        Ok(v) => Ok(v),
        Err(_) => {
            let digits = text.strip_prefix('-').unwrap_or(text);
            let integer = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            let shown: String = text.chars().take(48).collect();
            let shown = if shown.len() < text.len() {
                format!("{shown}…")
            } else {
                shown
            };
            if integer {
                let small = text.starts_with('-');
                Err(format!(
                    "{shown} is too {} (from {} to {})",
                    if small { "small" } else { "large" },
                    T::MIN,
                    T::MAX
                ))
            } else if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
                Err(format!(
                    "{shown} is not an integer (from {} to {})",
                    T::MIN,
                    T::MAX
                ))
            } else {
                // (serde_json's message would give a position inside the value.)
                Err(format!("expected an integer, found {shown}"))
            }
        }
    }
}

/// `#[serde(deserialize_with = "json::int")]` for an integer field.
pub(crate) fn int<'de, D: Deserializer<'de>, T: Int>(d: D) -> Result<T, D::Error> {
    let raw = Box::<RawValue>::deserialize(d)?;
    int_from(&raw).map_err(D::Error::custom)
}

/// `#[serde(default, deserialize_with = "json::opt_int")]` for an optional integer field
/// (absent or `null`: `None`).
pub(crate) fn opt_int<'de, D: Deserializer<'de>, T: Int>(d: D) -> Result<Option<T>, D::Error> {
    match Option::<Box<RawValue>>::deserialize(d)? {
        None => Ok(None),
        Some(raw) => int_from(&raw).map(Some).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Fields {
        #[serde(default, deserialize_with = "opt_int")]
        a: Option<u64>,
        #[serde(default, deserialize_with = "opt_int")]
        b: Option<u32>,
        #[serde(default, deserialize_with = "int")]
        c: i64,
    }

    fn err(text: &str) -> String {
        object::<Fields>(text).expect_err(text)
    }

    #[test]
    fn an_object_only() {
        let f: Fields = object(" \n{\"a\": 5, \"c\": -3}").expect("an object");
        assert_eq!((f.a, f.b, f.c), (Some(5), None, -3));
        assert!(object::<Fields>(r#"{"a": null}"#)
            .expect("null")
            .a
            .is_none());
        for (text, what) in [
            ("[5, 6, 7]", "an array"),
            ("5", "a number"),
            ("\"x\"", "a string"),
            ("true", "a boolean"),
            ("null", "null"),
            ("", "empty"),
            ("  ", "empty"),
            ("x", "not JSON"),
        ] {
            let e = err(text);
            assert!(
                e.contains("must be a JSON object") && e.ends_with(what),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn integers_out_of_range_are_too_large_or_too_small() {
        for (text, says) in [
            (
                r#"{"a": 18446744073709551616}"#,
                "18446744073709551616 is too large (from 0 to 18446744073709551615)",
            ),
            (r#"{"a": -1}"#, "-1 is too small (from 0 to"),
            (
                r#"{"b": 4294967296}"#,
                "4294967296 is too large (from 0 to 4294967295)",
            ),
            (
                r#"{"c": 9223372036854775808}"#,
                "too large (from -9223372036854775808 to 9223372036854775807)",
            ),
            (r#"{"c": -9223372036854775809}"#, "too small"),
            (r#"{"a": 1.5}"#, "1.5 is not an integer"),
            (r#"{"a": 1e3}"#, "1e3 is not an integer"),
            (r#"{"a": "5"}"#, "expected an integer, found \"5\""),
            (
                &format!(r#"{{"a": {}}}"#, "9".repeat(400)),
                "… is too large",
            ),
        ] {
            let e = err(text);
            assert!(e.contains(says), "{text}: {e}");
            assert!(!e.contains("floating point"), "{text}: {e}");
        }
    }
}
