//! The embedded store's spent nonces (`spend_nonce`): the nonces of verified Web Bot Auth
//! signatures, remembered until each signature expires, so a signed request replayed within its
//! validity window reads `invalid` (docs/architecture.md#collect-transport). In memory, since
//! the embedded store is one process's: every ingest that can see a replay is in it.
//!
//! Memory is bounded twice: an entry goes when its signature expires, and the table holds at
//! most [`SeenNonces::CAPACITY`] entries. Only signatures that verified under a trusted key are
//! spent, so only a trusted agent can fill the table; when it is full a new signature cannot be
//! protected from replay, and the caller leaves it unverified rather than let it through
//! unprotected.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

/// What remembering a nonce found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NonceUse {
    /// Not seen within its signature's window: remembered now.
    First,
    /// Seen before: the request is a replay.
    Replayed,
    /// The table is full of unexpired nonces; nothing was remembered.
    Full,
}

#[derive(Default)]
pub(super) struct SeenNonces {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `keyid \n nonce` → until when it is remembered (Unix seconds).
    until: HashMap<Arc<str>, i64>,
    /// The same entries by expiry, to drop the expired ones cheaply.
    by_expiry: BTreeSet<(i64, Arc<str>)>,
}

impl SeenNonces {
    /// About 64 thousand signatures in flight at once, a few megabytes with nonces of the usual
    /// 88 characters (base64 of 64 bytes).
    pub const CAPACITY: usize = 65_536;

    /// Remembers `nonce` of `scope` (a key id) until `until` (Unix seconds), unless it is
    /// already remembered. Nonces are per key: one agent cannot spend another's.
    pub(super) fn first_use(&self, keyid: &str, nonce: &str, until: i64, now: i64) -> NonceUse {
        self.first_use_within(keyid, nonce, until, now, Self::CAPACITY)
    }

    fn first_use_within(
        &self,
        keyid: &str,
        nonce: &str,
        until: i64,
        now: i64,
        capacity: usize,
    ) -> NonceUse {
        // Key ids and nonces are structured-field strings: printable ASCII, never a newline.
        let key: Arc<str> = format!("{keyid}\n{nonce}").into();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(first) = inner.by_expiry.first().cloned() {
            if first.0 >= now {
                break;
            }
            inner.by_expiry.remove(&first);
            inner.until.remove(&first.1);
        }
        if inner.until.contains_key(&key) {
            return NonceUse::Replayed;
        }
        if inner.until.len() >= capacity {
            return NonceUse::Full;
        }
        inner.until.insert(key.clone(), until);
        inner.by_expiry.insert((until, key));
        NonceUse::First
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .until
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_used_once_per_key_until_it_expires() {
        let seen = SeenNonces::default();
        assert_eq!(seen.first_use("k1", "n", 100, 10), NonceUse::First);
        assert_eq!(seen.first_use("k1", "n", 100, 50), NonceUse::Replayed);
        assert_eq!(
            seen.first_use("k2", "n", 100, 50),
            NonceUse::First,
            "per key"
        );
        // Past its expiry the entry is gone (and a signature that old is refused by its time).
        assert_eq!(seen.first_use("k1", "other", 300, 101), NonceUse::First);
        assert_eq!(seen.len(), 1, "both expired entries were dropped");
    }

    #[test]
    fn a_full_table_refuses_until_entries_expire() {
        let seen = SeenNonces::default();
        for n in 0..3 {
            assert_eq!(
                seen.first_use_within("k", &n.to_string(), 100 + n, 0, 3),
                NonceUse::First
            );
        }
        assert_eq!(seen.first_use_within("k", "x", 200, 0, 3), NonceUse::Full);
        assert_eq!(
            seen.first_use_within("k", "x", 200, 101, 3),
            NonceUse::First
        );
        assert_eq!(seen.len(), 3, "the one expired entry made room");
    }
}
