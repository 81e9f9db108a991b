//! The tenant map (`--tenant-map FILE`): which tenant an external
//! correlation id or a process id belongs to.
//!
//! ```toml
//! [external]          # CUPTI external correlation ids (kinds CUSTOM0..2) → tenant
//! 1001 = "alice"
//! [pid]               # process ids → tenant
//! 4242 = "carol"
//! ```
//!
//! The first rule that matches wins: external id, then process id, then the source's tenant
//! (`--tenant`), else `unattributed`. The meter resolves the rules when it builds the report, so
//! a map may be set before or after the records are pushed.
//!
//! Every tenant is a [`TenantName`] (the rule of `--tenant`), and two different tenants of one
//! map must not look alike: `alice` and `аlice` (Cyrillic `а`), or `team-1` and `team-l`, have
//! the same UTS #39 confusable skeleton ([`TenantName::skeleton`]), so the map is refused,
//! naming both keys. One tenant may be named by any number of keys.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gpumeter_core::{TenantMap, TenantName};

use crate::error::{shorten, ImportError};

/// Reading a [`TenantMap`] from its TOML file. Bring the trait into scope to call
/// `TenantMap::from_path` / `TenantMap::from_toml_str`.
///
/// ```
/// use gpumeter_core::TenantMap;
/// use gpumeter_import::TenantMapFile as _;
///
/// let map = TenantMap::from_toml_str("map.toml", "[external]\n1001 = \"alice\"\n[pid]\n4242 = \"carol\"\n")?;
/// assert_eq!(map.external[&1001].as_str(), "alice");
/// assert_eq!(map.pid[&4242].as_str(), "carol");
/// # Ok::<(), gpumeter_import::ImportError>(())
/// ```
pub trait TenantMapFile: Sized {
    /// Reads and parses a tenant-map file.
    ///
    /// # Errors
    /// [`ImportError::Io`] when the file cannot be read; [`ImportError::TenantMap`] as for
    /// [`TenantMapFile::from_toml_str`].
    fn from_path(path: &Path) -> Result<Self, ImportError>;

    /// Parses tenant-map text; `name` names the file in errors.
    ///
    /// # Errors
    /// [`ImportError::TenantMap`] naming the file, table and key when the TOML is invalid, a
    /// top-level entry is not the table `[external]` or `[pid]`, a key is not a decimal integer
    /// in range (`u64` for external ids, `u32` for process ids), two keys are the same number
    /// (`7` and `07`), a value is not a tenant name ([`TenantName::parse`]: trimmed,
    /// printable, visible, NFC, at most 256 bytes, not a reserved name in any case nor one
    /// that looks like it), or two different tenants look alike (the same
    /// [`TenantName::skeleton`], `alice` and `аlice` with a Cyrillic `а`): the message names
    /// both keys.
    fn from_toml_str(name: &str, text: &str) -> Result<Self, ImportError>;
}

impl TenantMapFile for TenantMap {
    fn from_path(path: &Path) -> Result<Self, ImportError> {
        let text = std::fs::read_to_string(path).map_err(|source| ImportError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&path.display().to_string(), &text)
    }

    fn from_toml_str(name: &str, text: &str) -> Result<Self, ImportError> {
        let err = |reason: String| ImportError::TenantMap {
            path: PathBuf::from(name),
            reason,
        };
        let doc: toml::Table = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let mut map = TenantMap::default();
        let mut looks = LookAlikes::default();
        for (table, value) in &doc {
            let toml::Value::Table(rules) = value else {
                return Err(err(format!(
                    "`{}` must be the table [external] or [pid], not a {}",
                    shorten(table),
                    value.type_str()
                )));
            };
            match table.as_str() {
                "external" => {
                    for (key, value) in rules {
                        let id = id_key::<u64>(key, "an external correlation id", u64::MAX)
                            .map_err(|r| err(format!("[external] key `{}`: {r}", shorten(key))))?;
                        let tenant = tenant_value(value)
                            .map_err(|r| err(format!("[external] key `{}`: {r}", shorten(key))))?;
                        looks
                            .check(format!("[external] key `{}`", shorten(key)), &tenant)
                            .map_err(err)?;
                        if map.external.insert(id, tenant).is_some() {
                            return Err(err(format!(
                                "[external] key `{}`: external id {id} is given twice",
                                shorten(key)
                            )));
                        }
                    }
                }
                "pid" => {
                    for (key, value) in rules {
                        let pid = id_key::<u32>(key, "a process id", u32::MAX.into())
                            .map_err(|r| err(format!("[pid] key `{}`: {r}", shorten(key))))?;
                        let tenant = tenant_value(value)
                            .map_err(|r| err(format!("[pid] key `{}`: {r}", shorten(key))))?;
                        looks
                            .check(format!("[pid] key `{}`", shorten(key)), &tenant)
                            .map_err(err)?;
                        if map.pid.insert(pid, tenant).is_some() {
                            return Err(err(format!(
                                "[pid] key `{}`: process id {pid} is given twice",
                                shorten(key)
                            )));
                        }
                    }
                }
                other => {
                    return Err(err(format!(
                        "unknown table [{}] (expected [external] or [pid])",
                        shorten(other)
                    )))
                }
            }
        }
        Ok(map)
    }
}

/// The tenants of a map by [`TenantName::skeleton`], with the first key that named each: two
/// different names with one skeleton look alike (`alice`, `аlice`), and a bill that shows
/// both as separate tenants cannot be read.
#[derive(Default)]
struct LookAlikes {
    by_skeleton: HashMap<String, (String, TenantName)>,
}

impl LookAlikes {
    /// Notes `tenant`, named by the rule `at`; refuses it when a different tenant of the map
    /// looks like it, naming both rules (names escaped: look-alikes never print raw).
    fn check(&mut self, at: String, tenant: &TenantName) -> Result<(), String> {
        let skeleton = tenant.skeleton();
        match self.by_skeleton.get(&skeleton) {
            Some((first, other)) if other != tenant => Err(format!(
                "{at}: the tenant `{}` looks like the tenant `{}` of {first} (the same UTS #39 \
                 confusable skeleton): two tenants must not look alike",
                tenant.escaped(),
                other.escaped(),
            )),
            Some(_) => Ok(()),
            None => {
                self.by_skeleton.insert(skeleton, (at, tenant.clone()));
                Ok(())
            }
        }
    }
}

/// A key as a decimal integer of type `T` (digits only: no sign, no spaces, no hex); `max` is
/// `T`'s largest value, for the message.
fn id_key<T: std::str::FromStr>(key: &str, what: &str, max: u64) -> Result<T, String> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("not a decimal integer ({what})"));
    }
    key.parse::<T>()
        .map_err(|_| format!("{what} must be at most {max}"))
}

/// A value as a tenant name ([`TenantName::parse`], the rules of `--tenant`).
fn tenant_value(value: &toml::Value) -> Result<TenantName, String> {
    let Some(s) = value.as_str() else {
        return Err(format!(
            "the tenant must be a string, not a {}",
            value.type_str()
        ));
    };
    TenantName::parse(s).map_err(|e| e.to_string())
}
