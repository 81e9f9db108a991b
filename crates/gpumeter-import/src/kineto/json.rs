//! JSON text primitives of the Kineto reader: strings borrowed from the text ([`JStr`],
//! [`raw_str`]), values read and dropped but still checked ([`Checked`]), keys matched without
//! being kept ([`KeyIndex`]), and serde_json's errors as import errors ([`json_error`]).

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::ImportError;

/// A JSON string borrowed from the input when it has no escapes.
pub(super) struct JStr<'a>(pub(super) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for JStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = JStr<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<JStr<'de>, E> {
                Ok(JStr(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<JStr<'de>, E> {
                Ok(JStr(Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<JStr<'de>, E> {
                Ok(JStr(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A JSON value read and dropped, as [`serde::de::IgnoredAny`] but with every string in it decoded (into
/// serde_json's reused scratch buffer, nothing allocated), so that a string that is not valid
/// UTF-8 is still the JSON error it was when the field was kept as a raw value. Used where
/// fields are owned (an element read by the streaming reader): it also refuses an escape of a
/// lone surrogate, which a raw value (the usual, borrowed, case) lets pass.
pub(super) struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Checked)
    }
}

impl<'de> Visitor<'de> for Checked {
    type Value = Checked;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
    }
}

/// The index of a key in a list of known keys (`None`: a key not read), matched without
/// keeping the key.
pub(super) struct KeyIndex(pub(super) &'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyIndex {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIndex {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

/// The text of a JSON string value (borrowed when it has no escapes), or why it is not one:
/// not a string, or a string that is not valid Unicode (a lone surrogate escape).
pub(super) fn raw_str(raw: &RawValue) -> Result<Cow<'_, str>, String> {
    let t = raw.get();
    if !t.starts_with('"') {
        return Err("not a string".to_string());
    }
    if let Some(inner) = t.get(1..t.len() - 1).filter(|i| !i.contains('\\')) {
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(t)
        .map(Cow::Owned)
        .map_err(|e| format!("not valid Unicode text: {e}"))
}

pub(super) fn json_error(path: &Path, source: serde_json::Error) -> ImportError {
    ImportError::Json {
        path: path.to_path_buf(),
        line: source.line(),
        column: source.column(),
        source,
    }
}
