//! Record-level faults: [`Fault`] reads a record's fields as typed values (numbers as written,
//! strings, `[x, y, z]`) and builds the [`ImportError::BadField`] that names the record, the
//! field and the value; [`Duplicate`] is a key given twice in an event or its `args`.

use std::borrow::Cow;
use std::path::Path;

use serde_json::value::RawValue;

use super::json::raw_str;
use crate::error::{shorten, ImportError, RecordLocation};
use crate::units::integer_text;

/// The first key given twice in an event or its `args`: the field as messages name it, and
/// the first and second values.
#[derive(Clone, Copy)]
pub(super) struct Duplicate<'a> {
    pub(super) field: &'static str,
    pub(super) first: &'a RawValue,
    pub(super) second: &'a RawValue,
}

impl Duplicate<'_> {
    /// The record-level fault: the field with both values (`` `1` and `2` `` once printed
    /// between the message's backticks).
    pub(super) fn fault(&self, f: &Fault<'_>, reason: String) -> ImportError {
        ImportError::BadField {
            path: f.path.to_path_buf(),
            record: f.record.clone(),
            field: self.field,
            value: format!(
                "{}` and `{}",
                shorten(self.first.get()),
                shorten(self.second.get())
            ),
            reason,
        }
    }
}

/// Builds [`ImportError::BadField`]s for one record.
pub(super) struct Fault<'p> {
    pub(super) path: &'p Path,
    pub(super) record: RecordLocation,
}

impl Fault<'_> {
    pub(super) fn err(
        &self,
        field: &'static str,
        value: &str,
        reason: impl Into<String>,
    ) -> ImportError {
        ImportError::BadField {
            path: self.path.to_path_buf(),
            record: self.record.clone(),
            field,
            value: shorten(value),
            reason: reason.into(),
        }
    }

    /// The number text of a raw JSON value: a number as written, or the content of a string;
    /// `None` for `null`.
    pub(super) fn number_text<'v>(
        &self,
        field: &'static str,
        raw: &'v RawValue,
    ) -> Result<Option<Cow<'v, str>>, ImportError> {
        let t = raw.get();
        match t.as_bytes().first() {
            Some(b'n') if t == "null" => Ok(None),
            Some(b'"') => serde_json::from_str::<String>(t)
                .map(|s| Some(Cow::Owned(s)))
                .map_err(|e| self.err(field, t, e.to_string())),
            Some(b'-' | b'0'..=b'9') => Ok(Some(Cow::Borrowed(t))),
            _ => Err(self.err(field, t, "expected a number")),
        }
    }

    pub(super) fn int_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<i128>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        let Some(t) = self.number_text(field, raw)? else {
            return Ok(None);
        };
        integer_text(&t)
            .map(Some)
            .map_err(|e| self.err(field, &t, e))
    }

    pub(super) fn u32_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<u32>, ImportError> {
        match self.int_opt(field, raw)? {
            None => Ok(None),
            Some(v) => u32::try_from(v).map(Some).map_err(|_| {
                self.err(
                    field,
                    &v.to_string(),
                    "out of range for an unsigned 32-bit value",
                )
            }),
        }
    }

    pub(super) fn u64_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<u64>, ImportError> {
        match self.int_opt(field, raw)? {
            None => Ok(None),
            Some(v) => u64::try_from(v).map(Some).map_err(|_| {
                self.err(
                    field,
                    &v.to_string(),
                    "out of range for an unsigned 64-bit value",
                )
            }),
        }
    }

    /// `[x, y, z]` of non-negative integers.
    pub(super) fn dim3_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<[u32; 3]>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        if raw.get() == "null" {
            return Ok(None);
        }
        let parts: Vec<&RawValue> = serde_json::from_str(raw.get())
            .map_err(|_| self.err(field, raw.get(), "expected an array [x, y, z]"))?;
        let [x, y, z] = parts.as_slice() else {
            return Err(self.err(field, raw.get(), "expected three dimensions [x, y, z]"));
        };
        let mut out = [0u32; 3];
        for (o, p) in out.iter_mut().zip([x, y, z]) {
            *o = self
                .u32_opt(field, Some(p))?
                .ok_or_else(|| self.err(field, raw.get(), "a dimension is null"))?;
        }
        Ok(Some(out))
    }

    /// A string value; `None` for a missing field or `null`. The error says what is wrong: not
    /// a string, or not valid Unicode (a lone surrogate escape).
    pub(super) fn string_opt(
        &self,
        field: &'static str,
        raw: Option<&RawValue>,
    ) -> Result<Option<String>, ImportError> {
        let Some(raw) = raw else { return Ok(None) };
        if raw.get() == "null" {
            return Ok(None);
        }
        raw_str(raw)
            .map(|s| Some(s.into_owned()))
            .map_err(|why| self.err(field, raw.get(), why))
    }
}
