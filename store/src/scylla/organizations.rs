//! Organizations and their API keys on ScyllaDB (`store/cql/001_core.cql`). Unique values
//! (a slug, a key's id and its credential hash) are claimed one lightweight transaction each
//! before any row is written, and released if the call fails; a key's changes are
//! read-check-writes on its `rev`, under the rules every backend applies (`crate::rules`).

use async_trait::async_trait;
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::time::Timestamp;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::CqlValue;

use super::{CONTENDED_RETRIES, ScyllaStore, corrupt, encode, env_of, env_text, errors, rows_of};
use crate::{
    ApiKeyRecord, ApiKeyWrite, CredentialHash, KeyAndOrganization, OrganizationRecord,
    OrganizationStore, Result, StoreError,
};

const ORGANIZATIONS: &str = "organizations";
const API_KEYS: &str = "api_keys";

const CLAIM_SLUG: &str =
    "INSERT INTO organizations_by_slug (slug, organization_id) VALUES (?, ?) IF NOT EXISTS";
const RELEASE_SLUG: &str =
    "DELETE FROM organizations_by_slug WHERE slug = ? IF organization_id = ?";
const CLAIM_KEY_ID: &str =
    "INSERT INTO api_key_ids (id, organization_id, environment) VALUES (?, ?, ?) IF NOT EXISTS";
const RELEASE_KEY_ID: &str = "DELETE FROM api_key_ids WHERE id = ? IF organization_id = ?";
const CLAIM_KEY_HASH: &str = "INSERT INTO api_keys_by_hash (key_hash, organization_id, environment, id) \
     VALUES (?, ?, ?, ?) IF NOT EXISTS";
const RELEASE_KEY_HASH: &str = "DELETE FROM api_keys_by_hash WHERE key_hash = ? IF id = ?";
const INSERT_ORGANIZATION: &str =
    "INSERT INTO organizations (id, rev, body) VALUES (?, 0, ?) IF NOT EXISTS";
const INSERT_ORGANIZATION_PLAIN: &str =
    "INSERT INTO organizations (id, rev, body) VALUES (?, 0, ?)";
const READ_ORGANIZATION: &str = "SELECT rev, body FROM organizations WHERE id = ?";
const UPDATE_ORGANIZATION: &str =
    "UPDATE organizations SET rev = ?, body = ? WHERE id = ? IF rev = ?";
const INSERT_KEY: &str = "INSERT INTO api_keys (organization_id, environment, id, rev, body) \
     VALUES (?, ?, ?, 0, ?) IF NOT EXISTS";
const INSERT_KEY_PLAIN: &str =
    "INSERT INTO api_keys (organization_id, environment, id, rev, body) VALUES (?, ?, ?, 0, ?)";
const READ_KEY: &str =
    "SELECT rev, body FROM api_keys WHERE organization_id = ? AND environment = ? AND id = ?";
const UPDATE_KEY: &str = "UPDATE api_keys SET rev = ?, body = ? \
     WHERE organization_id = ? AND environment = ? AND id = ? IF rev = ?";
const READ_ORGANIZATION_BODY: &str = "SELECT body FROM organizations WHERE id = ?";
const READ_SLUG: &str = "SELECT organization_id FROM organizations_by_slug WHERE slug = ?";
const LOCATE_KEY: &str = "SELECT organization_id, environment FROM api_key_ids WHERE id = ?";
const FIND_BY_HASH: &str =
    "SELECT organization_id, environment, id FROM api_keys_by_hash WHERE key_hash = ?";
const LIST_KEYS: &str = "SELECT body FROM api_keys WHERE organization_id = ? AND environment = ?";
const LIST_KEYS_AFTER: &str =
    "SELECT body FROM api_keys WHERE organization_id = ? AND environment = ? AND id < ?";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[
    CLAIM_SLUG,
    RELEASE_SLUG,
    CLAIM_KEY_ID,
    RELEASE_KEY_ID,
    CLAIM_KEY_HASH,
    RELEASE_KEY_HASH,
    INSERT_ORGANIZATION,
    INSERT_ORGANIZATION_PLAIN,
    READ_ORGANIZATION,
    UPDATE_ORGANIZATION,
    INSERT_KEY,
    INSERT_KEY_PLAIN,
    READ_KEY,
    UPDATE_KEY,
    LIST_KEYS,
    LIST_KEYS_AFTER,
    READ_ORGANIZATION_BODY,
];

/// A unique value this call holds, to give back if the call fails.
enum Claim {
    Slug(String, OrgId),
    KeyId(KeyId, OrgId),
    KeyHash(CredentialHash, KeyId),
}

fn contended(what: &str) -> StoreError {
    StoreError::Unavailable(format!("ScyllaDB: {what} kept changing under its update"))
}

impl ScyllaStore {
    /// Claims a key's id and hash and inserts it, after its place in the organization's count
    /// was taken; a key that is not written (its id or hash taken) gives its place back.
    async fn insert_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let held = match self.claim(None, std::slice::from_ref(key)).await {
            Ok(held) => held,
            Err(e) => {
                if matches!(e, StoreError::Conflict(_)) {
                    self.give_back_key_place(key.organization_id).await;
                }
                return Err(e);
            }
        };
        match self.applied(INSERT_KEY, Self::key_values(key)).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.release(held).await;
                self.give_back_key_place(key.organization_id).await;
                Err(StoreError::Conflict(format!(
                    "the key id {} is taken",
                    key.id
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Claims a key's id and credential hash.
    async fn claim_key(&self, key: &ApiKeyRecord, held: &mut Vec<Claim>) -> Result<()> {
        let id = key.id.to_string();
        let org = key.organization_id.to_string();
        let env = env_text(key.environment);
        if !self
            .applied(CLAIM_KEY_ID, (id.as_str(), org.as_str(), env))
            .await?
        {
            return Err(StoreError::Conflict(format!(
                "the key id {} is taken",
                key.id
            )));
        }
        held.push(Claim::KeyId(key.id, key.organization_id));
        if !self
            .applied(
                CLAIM_KEY_HASH,
                (&key.key_hash.0[..], org.as_str(), env, id.as_str()),
            )
            .await?
        {
            return Err(StoreError::Conflict(
                "a key with this credential exists".into(),
            ));
        }
        held.push(Claim::KeyHash(key.key_hash, key.id));
        Ok(())
    }

    /// Claims the slug and every key's id and hash: all, or none and the reason.
    async fn claim(
        &self,
        slug: Option<(&str, OrgId)>,
        keys: &[ApiKeyRecord],
    ) -> Result<Vec<Claim>> {
        let mut held = Vec::new();
        let claimed = async {
            if let Some((slug, org)) = slug {
                if !self.applied(CLAIM_SLUG, (slug, org.to_string())).await? {
                    return Err(StoreError::Conflict(format!("the slug `{slug}` is taken")));
                }
                held.push(Claim::Slug(slug.to_owned(), org));
            }
            for key in keys {
                self.claim_key(key, &mut held).await?;
            }
            Ok(())
        }
        .await;
        match claimed {
            Ok(()) => Ok(held),
            Err(e) => {
                self.release(held).await;
                Err(e)
            }
        }
    }

    /// Gives back claims, each only while it is still this call's. A release that fails leaves
    /// a claim with no row, which reads as absent; only its value stays taken.
    async fn release(&self, claims: Vec<Claim>) {
        for claim in claims {
            let released = match &claim {
                Claim::Slug(slug, org) => {
                    self.applied(RELEASE_SLUG, (slug.as_str(), org.to_string()))
                        .await
                }
                Claim::KeyId(id, org) => {
                    self.applied(RELEASE_KEY_ID, (id.to_string(), org.to_string()))
                        .await
                }
                Claim::KeyHash(hash, id) => {
                    self.applied(RELEASE_KEY_HASH, (&hash.0[..], id.to_string()))
                        .await
                }
            };
            if let Err(e) = released {
                tracing::warn!(error = %e, "ScyllaDB: a claim of a failed call was not released");
            }
        }
    }

    fn key_values(key: &ApiKeyRecord) -> (String, &'static str, String, String) {
        (
            key.organization_id.to_string(),
            env_text(key.environment),
            key.id.to_string(),
            encode(key),
        )
    }

    async fn read_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<(i64, ApiKeyRecord)>> {
        let result = self
            .execute(READ_KEY, (org.to_string(), env_text(env), id.to_string()))
            .await?;
        Self::revision(API_KEYS, result)
    }

    /// Writes `key` over the revision `rev` read; false when another writer came first.
    async fn write_key(&self, rev: i64, key: &ApiKeyRecord) -> Result<bool> {
        self.applied(
            UPDATE_KEY,
            (
                rev + 1,
                super::encode(key),
                key.organization_id.to_string(),
                env_text(key.environment),
                key.id.to_string(),
                rev,
            ),
        )
        .await
    }

    /// Reads the key, changes it with `change` (`None`: nothing to write), and writes it back
    /// if no other writer came between.
    async fn change_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        change: impl Fn(&ApiKeyRecord) -> Option<ApiKeyRecord>,
    ) -> Result<()> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, stored)) = self.read_key(org, env, id).await? else {
                return Ok(());
            };
            let Some(changed) = change(&stored) else {
                return Ok(());
            };
            if self.write_key(rev, &changed).await? {
                return Ok(());
            }
        }
        Err(contended("an API key"))
    }
}

#[async_trait]
impl OrganizationStore for ScyllaStore {
    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        let held = self.claim(Some((&org.slug, org.id)), &[]).await?;
        let inserted = self
            .applied(INSERT_ORGANIZATION, (org.id.to_string(), encode(org)))
            .await;
        match inserted {
            Ok(true) => Ok(()),
            Ok(false) => {
                self.release(held).await;
                Err(StoreError::Conflict(format!(
                    "the organization id {} is taken",
                    org.id
                )))
            }
            // Unknown whether it landed: the slug stays claimed rather than be handed to
            // another organization just before this one appears.
            Err(e) => Err(e),
        }
    }

    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        let result = self
            .execute(READ_ORGANIZATION_BODY, (id.to_string(),))
            .await?;
        Self::body(ORGANIZATIONS, result)
    }

    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        let result = self.execute(READ_SLUG, (slug,)).await?;
        let rows = rows_of("organizations_by_slug", result)?;
        let Some((id,)) = rows
            .maybe_first_row::<(String,)>()
            .map_err(|e| corrupt("organizations_by_slug", &e))?
        else {
            return Ok(None);
        };
        let id: OrgId = id
            .parse()
            .map_err(|_| corrupt("organizations_by_slug", &format!("organization id `{id}`")))?;
        // A claim whose organization is not written yet (or never was) reads as absent.
        Ok(self
            .get_organization(id)
            .await?
            .filter(|org| org.slug == slug))
    }

    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        for _ in 0..CONTENDED_RETRIES {
            let result = self
                .execute(READ_ORGANIZATION, (org.id.to_string(),))
                .await?;
            let Some((rev, mut stored)) =
                Self::revision::<OrganizationRecord>(ORGANIZATIONS, result)?
            else {
                return Ok(());
            };
            stored.name.clone_from(&org.name);
            stored.status = org.status;
            stored.updated_at = org.updated_at;
            if self
                .applied(
                    UPDATE_ORGANIZATION,
                    (rev + 1, encode(&stored), org.id.to_string(), rev),
                )
                .await?
            {
                return Ok(());
            }
        }
        Err(contended("an organization"))
    }

    /// Claims first, then one logged batch of the rows: a conflict leaves nothing behind.
    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        crate::rules::check_organization_keys(org, keys)?;
        // Ids are fresh ULIDs; a batch cannot hold a condition across partitions, so a read
        // guards against one reused.
        if self.get_organization(org.id).await?.is_some() {
            return Err(StoreError::Conflict(format!(
                "the organization id {} is taken",
                org.id
            )));
        }
        let held = self.claim(Some((&org.slug, org.id)), keys).await?;
        let mut batch = Batch::new(BatchType::Logged);
        let mut values: Vec<Vec<CqlValue>> = Vec::new();
        batch.append_statement(INSERT_ORGANIZATION_PLAIN);
        values.push(vec![
            CqlValue::Text(org.id.to_string()),
            CqlValue::Text(encode(org)),
        ]);
        for key in keys {
            let (org_id, env, id, body) = Self::key_values(key);
            batch.append_statement(INSERT_KEY_PLAIN);
            values.push(vec![
                CqlValue::Text(org_id),
                CqlValue::Text(env.to_owned()),
                CqlValue::Text(id),
                CqlValue::Text(body),
            ]);
        }
        let session = self.session().await?;
        match session.batch(&batch, values).await {
            Ok(_) => Ok(()),
            // A logged batch that failed may still be replayed from its batchlog: the claims
            // stay, so no other caller takes them just before it lands.
            Err(e) => {
                drop(held);
                Err(errors::execution(e))
            }
        }
    }

    /// Takes a place in the organization's key count like a capped create, so the count the
    /// cap reads stays true.
    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        self.take_key_place(key.organization_id, usize::MAX).await?;
        self.insert_key(key).await
    }

    async fn create_api_key_capped(&self, key: &ApiKeyRecord, cap: usize) -> Result<ApiKeyWrite> {
        if !self.take_key_place(key.organization_id, cap).await? {
            return Ok(ApiKeyWrite::CapReached);
        }
        self.insert_key(key).await?;
        Ok(ApiKeyWrite::Written)
    }

    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        Ok(self.read_key(org, env, id).await?.map(|(_, key)| key))
    }

    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        let result = self.execute(LOCATE_KEY, (id.to_string(),)).await?;
        let rows = rows_of("api_key_ids", result)?;
        let Some((org, env)) = rows
            .maybe_first_row::<(String, String)>()
            .map_err(|e| corrupt("api_key_ids", &e))?
        else {
            return Ok(None);
        };
        let org: OrgId = org
            .parse()
            .map_err(|_| corrupt("api_key_ids", &format!("organization id `{org}`")))?;
        let env = env_of("api_key_ids", &env)?;
        // Only a key whose row exists: a claim of a failed create reads as absent.
        Ok(self
            .get_api_key(org, env, id)
            .await?
            .map(|key| (key.organization_id, key.environment)))
    }

    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        let result = self.execute(FIND_BY_HASH, (&hash.0[..],)).await?;
        let rows = rows_of("api_keys_by_hash", result)?;
        let Some((org, env, id)) = rows
            .maybe_first_row::<(String, String, String)>()
            .map_err(|e| corrupt("api_keys_by_hash", &e))?
        else {
            return Ok(None);
        };
        let bad = |what: &str| corrupt("api_keys_by_hash", &what);
        let org: OrgId = org.parse().map_err(|_| bad("organization id"))?;
        let id: KeyId = id.parse().map_err(|_| bad("key id"))?;
        let env = env_of("api_keys_by_hash", &env)?;
        Ok(self
            .get_api_key(org, env, id)
            .await?
            .filter(|key| key.key_hash == *hash))
    }

    async fn find_key_and_organization(
        &self,
        hash: &CredentialHash,
    ) -> Result<Option<KeyAndOrganization>> {
        crate::port::key_alone(self, hash).await
    }

    async fn list_api_keys(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<KeyId>,
        count: usize,
    ) -> Result<Vec<ApiKeyRecord>> {
        let (org, env) = (org.to_string(), env_text(env));
        match after {
            None => {
                self.first_bodies(API_KEYS, LIST_KEYS, (org, env), count)
                    .await
            }
            Some(after) => {
                self.first_bodies(
                    API_KEYS,
                    LIST_KEYS_AFTER,
                    (org, env, after.to_string()),
                    count,
                )
                .await
            }
        }
    }

    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        // Whether the write that applied took the key out of use (the last call's answer).
        // (Atomic only to keep the future `Send`.)
        let freed = std::sync::atomic::AtomicBool::new(false);
        self.change_key(key.organization_id, key.environment, key.id, |stored| {
            let merged = crate::rules::merge_key_update(stored, key);
            freed.store(
                stored.in_use() && !merged.in_use(),
                std::sync::atomic::Ordering::Relaxed,
            );
            Some(merged)
        })
        .await?;
        if freed.load(std::sync::atomic::Ordering::Relaxed) {
            self.give_back_key_place(key.organization_id).await;
        }
        Ok(())
    }

    /// The replacement's id and hash are claimed first; then one conditional batch on the
    /// keys' partition writes the rotated old key (if its `rev` is still the one read) and
    /// inserts the replacement.
    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        // The two keys share a partition, so one conditional batch writes both.
        if (replacement.organization_id, replacement.environment)
            != (old.organization_id, old.environment)
        {
            return Err(StoreError::Invalid(format!(
                "the replacement of key {} belongs to another organization or environment",
                old.id
            )));
        }
        let held = self.claim(None, std::slice::from_ref(replacement)).await?;
        for _ in 0..CONTENDED_RETRIES {
            let stored = self
                .read_key(old.organization_id, old.environment, old.id)
                .await?;
            let rotated = match crate::rules::rotated_key(stored.as_ref().map(|(_, k)| k), old) {
                Ok(rotated) => rotated,
                Err(e) => {
                    self.release(held).await;
                    return Err(e);
                }
            };
            let rev = stored.map_or(0, |(rev, _)| rev);
            let mut batch = Batch::new(BatchType::Logged);
            batch.append_statement(UPDATE_KEY);
            batch.append_statement(INSERT_KEY_PLAIN);
            let (org, env, id, body) = Self::key_values(replacement);
            let values: Vec<Vec<CqlValue>> = vec![
                vec![
                    CqlValue::BigInt(rev + 1),
                    CqlValue::Text(encode(&rotated)),
                    CqlValue::Text(rotated.organization_id.to_string()),
                    CqlValue::Text(env_text(rotated.environment).to_owned()),
                    CqlValue::Text(rotated.id.to_string()),
                    CqlValue::BigInt(rev),
                ],
                vec![
                    CqlValue::Text(org),
                    CqlValue::Text(env.to_owned()),
                    CqlValue::Text(id),
                    CqlValue::Text(body),
                ],
            ];
            let session = self.session().await?;
            let answer = session
                .batch(&batch, values)
                .await
                .map_err(errors::execution)?;
            if super::applied(answer)? {
                return Ok(());
            }
        }
        Err(contended("an API key being rotated"))
    }

    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        self.change_key(org, env, id, |stored| {
            let mut touched = stored.clone();
            touched.last_used_at = Some(at);
            Some(touched)
        })
        .await
    }
}
