//! The names a producer's pointers stood for: kernel, device and allocation names copied while
//! CUPTI's buffer was live (a `.gmr` carries them as string-table frames), so a reader names
//! things without ever dereferencing a pointer read from a buffer.

use std::collections::BTreeMap;

/// Pointer values of the producing process and the strings they pointed to (kernel, device and
/// allocation names), copied while CUPTI's buffer was live. Lets a reader name things without
/// ever dereferencing a pointer read from a buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StringTable {
    /// Pointer value → string.
    pub entries: BTreeMap<u64, String>,
}

impl StringTable {
    /// An empty table.
    pub fn new() -> Self {
        StringTable::default()
    }

    /// Adds or replaces the string for a pointer value.
    pub fn insert(&mut self, ptr: u64, text: impl Into<String>) {
        self.entries.insert(ptr, text.into());
    }

    /// The string for a pointer value; `None` for 0 or an unknown value.
    pub fn get(&self, ptr: u64) -> Option<&str> {
        if ptr == 0 {
            return None;
        }
        self.entries.get(&ptr).map(String::as_str)
    }

    /// Adds every entry of `other`, replacing equal pointer values (later tables win: a pointer
    /// may be reused for another string once CUPTI freed the first).
    pub fn extend_from(&mut self, other: &StringTable) {
        for (k, v) in &other.entries {
            self.entries.insert(*k, v.clone());
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
