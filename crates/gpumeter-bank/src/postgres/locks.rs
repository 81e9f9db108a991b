//! The advisory locks a PostgreSQL ledger takes, by name: the bank, the hash chain, the
//! migration and each tenant, keyed per schema.

use sha2::{Digest, Sha256};

/// Advisory lock keys: 64-bit, from SHA-256 of the schema's name and the lock's name.
#[derive(Debug, Clone)]
pub(super) struct LockKeys {
    pub(super) schema: String,
}

impl LockKeys {
    fn key(&self, what: &str, name: &str) -> i64 {
        let mut h = Sha256::new();
        h.update(b"gpumeter-ledger\0");
        h.update(self.schema.as_bytes());
        h.update(b"\0");
        h.update(what.as_bytes());
        h.update(b"\0");
        h.update(name.as_bytes());
        let d = h.finalize();
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[..8]);
        i64::from_be_bytes(b)
    }

    /// The whole bank: shared by tenant work, exclusive for work across tenants.
    pub(super) fn bank(&self) -> i64 {
        self.key("bank", "")
    }

    /// The hash chain's head.
    pub(super) fn chain(&self) -> i64 {
        self.key("chain", "")
    }

    /// Schema creation and migration.
    pub(super) fn migration(&self) -> i64 {
        self.key("migration", "")
    }

    pub(super) fn tenant(&self, tenant: &str) -> i64 {
        self.key("tenant", tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::LockKeys;

    #[test]
    fn lock_keys_name_the_schema_and_the_lock() {
        let a = LockKeys { schema: "a".into() };
        let b = LockKeys { schema: "b".into() };
        assert_ne!(a.tenant("x"), b.tenant("x"));
        assert_ne!(a.tenant("x"), a.tenant("y"));
        assert_ne!(a.bank(), a.chain());
        assert_eq!(a.tenant("x"), LockKeys { schema: "a".into() }.tenant("x"));
    }
}
