//! Organizations and their API keys (`001_core.cql`): `organizations`, `organizations_by_slug`,
//! `api_keys`, `api_keys_by_hash` and `api_key_ids`, the tables the row cache serves.

use async_trait::async_trait;
use std::ops::Bound;

use fjall::{OwnedWriteBatch, Readable};
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::row_cache::{Changes, Lookup};
use super::{
    API_KEY_IDS, API_KEYS, API_KEYS_BY_HASH, EmbeddedStore, Inner, ORGANIZATIONS,
    ORGANIZATIONS_BY_SLUG, decode, decode_row, encode, key, unavailable,
};
use crate::{
    ApiKeyRecord, ApiKeyWrite, CredentialHash, KeyAndOrganization, OrganizationRecord,
    OrganizationStore, Result, StoreError,
};

/// `organizations_by_slug`: the claim of one slug.
#[derive(Serialize, Deserialize)]
struct SlugRow {
    organization_id: OrgId,
}

/// `api_keys_by_hash`: where the key holding a credential hash lives.
#[derive(Serialize, Deserialize)]
struct KeyHashRow {
    organization_id: OrgId,
    environment: Environment,
    id: KeyId,
}

/// `api_key_ids`: where a key id lives.
#[derive(Serialize, Deserialize)]
struct KeyIdRow {
    organization_id: OrgId,
    environment: Environment,
}

impl Inner {
    fn get_api_key(&self, org: OrgId, env: Environment, id: KeyId) -> Result<Option<ApiKeyRecord>> {
        decode_row(API_KEYS, self.api_keys.get(key::api_key(org, env, id)))
    }

    /// Adds a new organization's row and its slug claim to `batch`, after checking (under the
    /// writer mutex) that neither its slug nor its id is taken.
    fn insert_new_organization(
        &self,
        batch: &mut OwnedWriteBatch,
        org: &OrganizationRecord,
    ) -> Result<()> {
        if self.contains(&self.organizations_by_slug, key::slug(&org.slug))? {
            return Err(StoreError::Conflict(format!(
                "organization slug `{}` is taken",
                org.slug
            )));
        }
        if self.contains(&self.organizations, &key::organization(org.id))? {
            return Err(StoreError::Conflict(format!(
                "organization {} exists",
                org.id
            )));
        }
        batch.insert(
            &self.organizations,
            key::organization(org.id),
            encode(ORGANIZATIONS, org)?,
        );
        batch.insert(
            &self.organizations_by_slug,
            key::slug(&org.slug),
            encode(
                ORGANIZATIONS_BY_SLUG,
                &SlugRow {
                    organization_id: org.id,
                },
            )?,
        );
        Ok(())
    }

    /// Adds a new key's row and both lookup rows to `batch`, after checking (under the writer
    /// mutex) that neither its id nor its hash is taken.
    fn insert_new_api_key(&self, batch: &mut OwnedWriteBatch, key: &ApiKeyRecord) -> Result<()> {
        if self.contains(&self.api_key_ids, &key::api_key_id(key.id))? {
            return Err(StoreError::Conflict(format!(
                "api key id {} exists",
                key.id
            )));
        }
        if self.contains(&self.api_keys_by_hash, &key::api_key_hash(&key.key_hash))? {
            return Err(StoreError::Conflict(
                "api key credential hash exists".into(),
            ));
        }
        let hash_row = KeyHashRow {
            organization_id: key.organization_id,
            environment: key.environment,
            id: key.id,
        };
        let id_row = KeyIdRow {
            organization_id: key.organization_id,
            environment: key.environment,
        };
        batch.insert(
            &self.api_keys,
            key::api_key(key.organization_id, key.environment, key.id),
            encode(API_KEYS, key)?,
        );
        batch.insert(
            &self.api_keys_by_hash,
            key::api_key_hash(&key.key_hash),
            encode(API_KEYS_BY_HASH, &hash_row)?,
        );
        batch.insert(
            &self.api_key_ids,
            key::api_key_id(key.id),
            encode(API_KEY_IDS, &id_row)?,
        );
        Ok(())
    }
}

impl Inner {
    /// Writes a new key with its lookup rows, under the writer's lock the caller holds.
    fn add_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let mut batch = self.batch();
        self.insert_new_api_key(&mut batch, key)?;
        self.commit(
            batch,
            Changes {
                api_keys: &[key.key_hash],
                ..Changes::default()
            },
        )
    }
}

/// The keys of one organization's environment: from its partition's prefix to, excluded, the
/// prefix with its last byte (the environment tag, 0 or 1) incremented, which cannot overflow.
fn api_key_partition_range(org: OrgId, env: Environment) -> (Vec<u8>, Bound<Vec<u8>>) {
    let partition = key::api_key_partition(org, env);
    let mut end = partition;
    end[16] += 1;
    (partition.to_vec(), Bound::Excluded(end.to_vec()))
}

#[async_trait]
impl OrganizationStore for EmbeddedStore {
    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        let org = org.clone();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.insert_new_organization(&mut batch, &org)?;
            db.commit(
                batch,
                Changes {
                    organizations: &[org.id],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        let db = &self.inner;
        let ticket = match db.cache.organization(id) {
            Lookup::Hit(org) => return Ok(Some(org)),
            Lookup::Miss(ticket) => ticket,
        };
        let org: Option<OrganizationRecord> =
            decode_row(ORGANIZATIONS, db.organizations.get(key::organization(id)))?;
        if let Some(org) = &org {
            db.cache.fill_organization(ticket, id, org);
        }
        Ok(org)
    }

    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        let db = &self.inner;
        // Both reads from one snapshot, so they agree with each other.
        let snapshot = db.db.snapshot();
        let Some(claim) = decode_row::<SlugRow>(
            ORGANIZATIONS_BY_SLUG,
            snapshot.get(&db.organizations_by_slug, key::slug(slug)),
        )?
        else {
            return Ok(None);
        };
        match decode_row(
            ORGANIZATIONS,
            snapshot.get(&db.organizations, key::organization(claim.organization_id)),
        )? {
            Some(org) => Ok(Some(org)),
            // The claim and the row are written in one batch, so a dangling claim is damage.
            None => Err(StoreError::Corrupt {
                table: ORGANIZATIONS_BY_SLUG,
                detail: format!(
                    "slug `{slug}` names missing organization {}",
                    claim.organization_id
                ),
            }),
        }
    }

    /// Replaces name, status and updated_at of an existing row. A missing row is left missing
    /// (no upsert): creating happens only through `create_organization` (or
    /// `create_organization_with_keys`), which claims the slug.
    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        let org = org.clone();
        self.write(move |db, _| {
            let k = key::organization(org.id);
            let Some(mut stored) =
                decode_row::<OrganizationRecord>(ORGANIZATIONS, db.organizations.get(k))?
            else {
                return Ok(());
            };
            stored.name = org.name;
            stored.status = org.status;
            stored.updated_at = org.updated_at;
            let mut batch = db.batch();
            batch.insert(&db.organizations, k, encode(ORGANIZATIONS, &stored)?);
            db.commit(
                batch,
                Changes {
                    organizations: &[stored.id],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    /// One batch: the organization, its slug claim, and every key with its two lookup rows,
    /// each checked free under the writer mutex (as `create_organization` and `create_api_key`
    /// check them) before anything is added. The first conflict drops the unwritten batch, so a
    /// failed call leaves no row and no claim.
    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        // Before the lock: a stray key or a key given twice needs no read.
        crate::rules::check_organization_keys(org, keys)?;
        let org = org.clone();
        let keys = keys.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.insert_new_organization(&mut batch, &org)?;
            for key in &keys {
                db.insert_new_api_key(&mut batch, key)?;
            }
            let hashes: Vec<CredentialHash> = keys.iter().map(|k| k.key_hash).collect();
            db.commit(
                batch,
                Changes {
                    organizations: &[org.id],
                    api_keys: &hashes,
                    ..Changes::default()
                },
            )
        })
        .await
    }

    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let key = key.clone();
        self.write(move |db, _| db.add_api_key(&key)).await
    }

    async fn create_api_key_capped(&self, key: &ApiKeyRecord, cap: usize) -> Result<ApiKeyWrite> {
        let key = key.clone();
        self.write(move |db, _| {
            // Counted under the writer's lock, which the write below holds too.
            let mut in_use = 0;
            for env in [Environment::Live, Environment::Test] {
                let (partition, end) = api_key_partition_range(key.organization_id, env);
                for guard in db.api_keys.range((Bound::Included(partition), end)) {
                    let value = guard.value().map_err(unavailable)?;
                    if decode::<ApiKeyRecord>(API_KEYS, &value)?.in_use() {
                        in_use += 1;
                    }
                }
            }
            if in_use >= cap {
                return Ok(ApiKeyWrite::CapReached);
            }
            db.add_api_key(&key)?;
            Ok(ApiKeyWrite::Written)
        })
        .await
    }

    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        self.inner.get_api_key(org, env, id)
    }

    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        let db = &self.inner;
        let row: Option<KeyIdRow> =
            decode_row(API_KEY_IDS, db.api_key_ids.get(key::api_key_id(id)))?;
        Ok(row.map(|r| (r.organization_id, r.environment)))
    }

    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        let db = &self.inner;
        let ticket = match db.cache.api_key(hash) {
            Lookup::Hit(record) => return Ok(Some(record)),
            Lookup::Miss(ticket) => ticket,
        };
        let snapshot = db.db.snapshot();
        let Some(at) = decode_row::<KeyHashRow>(
            API_KEYS_BY_HASH,
            snapshot.get(&db.api_keys_by_hash, key::api_key_hash(hash)),
        )?
        else {
            return Ok(None);
        };
        match decode_row(
            API_KEYS,
            snapshot.get(
                &db.api_keys,
                key::api_key(at.organization_id, at.environment, at.id),
            ),
        )? {
            Some(record) => {
                db.cache.fill_api_key(ticket, hash, &record);
                Ok(Some(record))
            }
            None => Err(StoreError::Corrupt {
                table: API_KEYS_BY_HASH,
                detail: format!("credential hash names missing api key {}", at.id),
            }),
        }
    }

    /// Both rows from the cache under one hold of its lock when both are there (a consistent
    /// pair: the cache is exact, `row_cache.rs`); else the key as `find_api_key_by_hash` reads it
    /// (which fills the cache), and the organization left to `get_organization`.
    async fn find_key_and_organization(
        &self,
        hash: &CredentialHash,
    ) -> Result<Option<KeyAndOrganization>> {
        if let Some(both) = self.inner.cache.key_and_organization(hash) {
            return Ok(Some(both));
        }
        crate::port::key_alone(self, hash).await
    }

    async fn list_api_keys(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<KeyId>,
        limit: usize,
    ) -> Result<Vec<ApiKeyRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let (partition, end) = api_key_partition_range(org, env);
        let start = match after {
            // Keys sort newest first, so "older than `after`" is "after its key".
            Some(after) => Bound::Excluded(key::api_key(org, env, after).to_vec()),
            None => Bound::Included(partition),
        };
        let mut keys = Vec::with_capacity(limit.min(1024));
        for guard in self.inner.api_keys.range((start, end)).take(limit) {
            let value = guard.value().map_err(unavailable)?;
            keys.push(decode(API_KEYS, &value)?);
        }
        Ok(keys)
    }

    /// Replaces an existing key row; the row's identity (organization, environment, id) and its
    /// credential hash are kept as stored, so the lookup rows can never dangle. A missing row is
    /// left missing (no upsert). The rotation columns are kept as stored (only `rotate_api_key`
    /// writes them), a stored revocation is kept and `last_used_at` only moves forward (see the
    /// trait); the writer mutex makes the read and the write one step.
    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let given = key.clone();
        self.write(move |db, _| {
            let Some(stored) =
                db.get_api_key(given.organization_id, given.environment, given.id)?
            else {
                return Ok(());
            };
            let key = crate::rules::merge_key_update(&stored, &given);
            let mut batch = db.batch();
            batch.insert(
                &db.api_keys,
                key::api_key(key.organization_id, key.environment, key.id),
                encode(API_KEYS, &key)?,
            );
            db.commit(
                batch,
                Changes {
                    api_keys: &[key.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    /// One batch: the rotated old row, the replacement row and its two lookup rows. `Conflict`
    /// if the old key does not exist (a replacement for nothing would be a key nobody rotated),
    /// is revoked or was already rotated (checked on the stored row, under the writer mutex, so
    /// a racing revocation or rotation is seen), or if the replacement's id or hash is taken.
    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        let given = old.clone();
        let replacement = replacement.clone();
        self.write(move |db, _| {
            let stored = db.get_api_key(given.organization_id, given.environment, given.id)?;
            let old = crate::rules::rotated_key(stored.as_ref(), &given)?;
            let mut batch = db.batch();
            batch.insert(
                &db.api_keys,
                key::api_key(old.organization_id, old.environment, old.id),
                encode(API_KEYS, &old)?,
            );
            db.insert_new_api_key(&mut batch, &replacement)?;
            db.commit(
                batch,
                Changes {
                    api_keys: &[old.key_hash, replacement.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }

    /// Read-modify-write of `last_used_at` under the writer mutex, which every other write of
    /// the row also holds: nothing written in between is overwritten. A missing key stays missing.
    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        self.write(move |db, _| {
            let Some(mut stored) = db.get_api_key(org, env, id)? else {
                return Ok(());
            };
            stored.last_used_at = Some(at);
            let mut batch = db.batch();
            batch.insert(
                &db.api_keys,
                key::api_key(org, env, id),
                encode(API_KEYS, &stored)?,
            );
            db.commit(
                batch,
                Changes {
                    api_keys: &[stored.key_hash],
                    ..Changes::default()
                },
            )
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The race the cache's generation check exists for, step by step through the real write
    /// path: a reader misses and reads the old row, a revocation commits and returns, then the
    /// reader offers the old row. It must not be cached.
    #[tokio::test]
    async fn a_row_read_before_a_write_is_not_cached_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let now = schemas::time::now();
        let org = OrganizationRecord {
            id: OrgId::generate(),
            name: "Raced".into(),
            slug: "raced".into(),
            status: schemas::resources::OrgStatus::Active,
            created_at: now,
            updated_at: now,
        };
        store.create_organization(&org).await.unwrap();
        let key = ApiKeyRecord {
            id: KeyId::generate(),
            organization_id: org.id,
            key_type: schemas::credential::KeyType::Secret,
            environment: Environment::Live,
            name: "raced".into(),
            key_hash: CredentialHash([7; 32]),
            key_preview: "sk_live_Ab12".into(),
            display_key: "sk_live_Ab12...wxyz".into(),
            publishable_token: None,
            allowed_origins: Vec::new(),
            scopes: Vec::new(),
            rate_limit_override: None,
            created_at: now,
            rotated_at: None,
            revoked_at: None,
            grace_expires_at: None,
            last_used_at: None,
            replaced_by: None,
        };
        store.create_api_key(&key).await.unwrap();

        let Lookup::Miss(key_ticket) = store.inner.cache.api_key(&key.key_hash) else {
            panic!("nothing was read yet");
        };
        let Lookup::Miss(org_ticket) = store.inner.cache.organization(org.id) else {
            panic!("nothing was read yet");
        };
        let old_key = store
            .inner
            .get_api_key(key.organization_id, key.environment, key.id);
        let old_key = old_key.unwrap().unwrap();
        let old_org: OrganizationRecord = decode_row(
            ORGANIZATIONS,
            store.inner.organizations.get(key::organization(org.id)),
        )
        .unwrap()
        .unwrap();

        let revoked = ApiKeyRecord {
            revoked_at: Some(schemas::time::now()),
            ..key.clone()
        };
        store.update_api_key(&revoked).await.unwrap();
        let suspended = OrganizationRecord {
            status: schemas::resources::OrgStatus::Suspended,
            ..org.clone()
        };
        store.update_organization(&suspended).await.unwrap();

        store
            .inner
            .cache
            .fill_api_key(key_ticket, &key.key_hash, &old_key);
        store
            .inner
            .cache
            .fill_organization(org_ticket, org.id, &old_org);
        assert_eq!(
            store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
            Some(revoked.clone())
        );
        assert_eq!(
            store.get_organization(org.id).await.unwrap(),
            Some(suspended.clone())
        );
        // And now from the cache.
        assert!(matches!(store.inner.cache.api_key(&key.key_hash), Lookup::Hit(k) if k == revoked));
        assert!(matches!(store.inner.cache.organization(org.id), Lookup::Hit(o) if o == suspended));
        // Authentication's read takes the pair from the cache, as it is now.
        let both = store
            .find_key_and_organization(&key.key_hash)
            .await
            .unwrap();
        let both = both.expect("the key exists");
        assert_eq!(*both.key, revoked);
        assert_eq!(both.organization.as_deref(), Some(&suspended));
        // A write of either row drops the pair until both are read again.
        let renamed = OrganizationRecord {
            name: "Renamed".into(),
            ..suspended
        };
        store.update_organization(&renamed).await.unwrap();
        let both = store
            .find_key_and_organization(&key.key_hash)
            .await
            .unwrap();
        assert_eq!(both.expect("the key exists").organization, None);
    }
}
