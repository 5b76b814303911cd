//! Organizations and their API keys in PostgreSQL. Slugs, key ids and credential hashes are unique by constraint; the merges the port asks of
//! key updates (sticky revocation, `last_used_at` only forward, rotation columns untouched)
//! happen under the row's lock.

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::time::Timestamp;

use super::{
    PostgresStore, db_error, decode, decode_opt, env_code, execute, json, owned_page, owned_row,
    row, ulid_bytes,
};
use crate::{
    ApiKeyRecord, ApiKeyWrite, CredentialHash, KeyAndOrganization, OrganizationRecord,
    OrganizationStore, Result,
};

/// The advisory lock key under which an organization's keys are counted for its cap: the high
/// 64 bits of its id, with a tag of its own so it is not the Gate services' lock on it.
fn key_count_lock(org: OrgId) -> i64 {
    let bytes = org.ulid().to_bytes();
    i64::from_be_bytes(bytes[..8].try_into().unwrap_or_default()) ^ 0x6b65_7973 // "keys"
}

const ORGANIZATIONS: &str = "organizations";
const API_KEYS: &str = "api_keys";

async fn insert_organization(client: &impl GenericClient, org: &OrganizationRecord) -> Result<()> {
    execute(
        client,
        "INSERT INTO organizations (id, slug, body) VALUES ($1, $2, $3)",
        &[&ulid_bytes(org.id.ulid()), &org.slug, &json(org)],
    )
    .await?;
    Ok(())
}

async fn insert_api_key(client: &impl GenericClient, key: &ApiKeyRecord) -> Result<()> {
    execute(
        client,
        "INSERT INTO api_keys (id, organization_id, environment, key_hash, body)
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &ulid_bytes(key.id.ulid()),
            &ulid_bytes(key.organization_id.ulid()),
            &env_code(key.environment),
            &&key.key_hash.0[..],
            &json(key),
        ],
    )
    .await?;
    Ok(())
}

/// The key's stored row, locked for the rest of the transaction.
async fn lock_api_key(
    tx: &impl GenericClient,
    org: OrgId,
    env: Environment,
    id: KeyId,
) -> Result<Option<ApiKeyRecord>> {
    let found = row(
        tx,
        "SELECT body FROM api_keys
         WHERE id = $1 AND organization_id = $2 AND environment = $3 FOR UPDATE",
        &[
            &ulid_bytes(id.ulid()),
            &ulid_bytes(org.ulid()),
            &env_code(env),
        ],
    )
    .await?;
    decode_opt(API_KEYS, found)
}

async fn write_api_key(tx: &impl GenericClient, key: &ApiKeyRecord) -> Result<()> {
    execute(
        tx,
        "UPDATE api_keys SET body = $2 WHERE id = $1",
        &[&ulid_bytes(key.id.ulid()), &json(key)],
    )
    .await?;
    Ok(())
}

#[async_trait]
impl OrganizationStore for PostgresStore {
    async fn create_organization(&self, org: &OrganizationRecord) -> Result<()> {
        insert_organization(&self.client().await?, org).await
    }

    /// Served from the credential cache while it listens (`postgres/credentials.rs`).
    async fn get_organization(&self, id: OrgId) -> Result<Option<OrganizationRecord>> {
        if let Some(org) = self.credentials.organization(id) {
            return Ok(Some(org));
        }
        let epoch = self.credentials.epoch();
        let found = row(
            &self.client().await?,
            "SELECT body FROM organizations WHERE id = $1",
            &[&ulid_bytes(id.ulid())],
        )
        .await?;
        let org: Option<OrganizationRecord> = decode_opt(ORGANIZATIONS, found)?;
        if let Some(org) = &org {
            self.credentials.keep_organization(org, epoch);
        }
        Ok(org)
    }

    async fn get_organization_by_slug(&self, slug: &str) -> Result<Option<OrganizationRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM organizations WHERE slug = $1",
            &[&slug],
        )
        .await?;
        decode_opt(ORGANIZATIONS, found)
    }

    async fn update_organization(&self, org: &OrganizationRecord) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let id = ulid_bytes(org.id.ulid());
        let Some(found) = row(
            &tx,
            "SELECT body FROM organizations WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await?
        else {
            return Ok(());
        };
        let mut stored: OrganizationRecord = decode(ORGANIZATIONS, &found, 0)?;
        stored.name.clone_from(&org.name);
        stored.status = org.status;
        stored.updated_at = org.updated_at;
        execute(
            &tx,
            "UPDATE organizations SET body = $2 WHERE id = $1",
            &[&id, &json(&stored)],
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        self.credentials_changed(client).await;
        Ok(())
    }

    /// One transaction: a conflict on any row aborts it, so nothing of a failed call stays.
    async fn create_organization_with_keys(
        &self,
        org: &OrganizationRecord,
        keys: &[ApiKeyRecord],
    ) -> Result<()> {
        crate::rules::check_organization_keys(org, keys)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        insert_organization(&tx, org).await?;
        for key in keys {
            insert_api_key(&tx, key).await?;
        }
        tx.commit().await.map_err(db_error)
    }

    async fn create_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        insert_api_key(&self.client().await?, key).await
    }

    /// Counted and written in one transaction, under an advisory lock on the organization that
    /// every capped create takes, so replicas on other machines count one at a time.
    async fn create_api_key_capped(&self, key: &ApiKeyRecord, cap: usize) -> Result<ApiKeyWrite> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        execute(
            &tx,
            "SELECT pg_advisory_xact_lock($1)",
            &[&key_count_lock(key.organization_id)],
        )
        .await?;
        let counted = row(
            &tx,
            "SELECT count(*) FROM api_keys WHERE organization_id = $1
               AND body->>'revoked_at' IS NULL AND body->>'replaced_by' IS NULL",
            &[&ulid_bytes(key.organization_id.ulid())],
        )
        .await?;
        let in_use: i64 = counted.map_or(0, |r| r.get(0));
        if usize::try_from(in_use).unwrap_or(usize::MAX) >= cap {
            return Ok(ApiKeyWrite::CapReached);
        }
        insert_api_key(&tx, key).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(ApiKeyWrite::Written)
    }

    async fn get_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
    ) -> Result<Option<ApiKeyRecord>> {
        let sql =
            "SELECT body FROM api_keys WHERE organization_id = $1 AND environment = $2 AND id = $3";
        owned_row(self, API_KEYS, sql, (org, env, id.ulid())).await
    }

    async fn locate_api_key(&self, id: KeyId) -> Result<Option<(OrgId, Environment)>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM api_keys WHERE id = $1",
            &[&ulid_bytes(id.ulid())],
        )
        .await?;
        let key: Option<ApiKeyRecord> = decode_opt(API_KEYS, found)?;
        Ok(key.map(|k| (k.organization_id, k.environment)))
    }

    /// The authentication path's read: from the credential cache while it listens for changes
    /// (`postgres/credentials.rs`), so a revocation through any replica still counts on the next
    /// request; else one indexed lookup.
    async fn find_api_key_by_hash(&self, hash: &CredentialHash) -> Result<Option<ApiKeyRecord>> {
        if let Some(key) = self.credentials.key(hash) {
            return Ok(Some(key));
        }
        let epoch = self.credentials.epoch();
        let found = row(
            &self.client().await?,
            "SELECT body FROM api_keys WHERE key_hash = $1",
            &[&&hash.0[..]],
        )
        .await?;
        let key: Option<ApiKeyRecord> = decode_opt(API_KEYS, found)?;
        if let Some(key) = &key {
            self.credentials.keep_key(*hash, key, epoch);
        }
        Ok(key)
    }

    /// The key alone, from the credential cache while it listens; `get_organization` reads the
    /// organization when the caller needs it.
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
        let sql = "SELECT body FROM api_keys
             WHERE organization_id = $1 AND environment = $2 AND ($3::bytea IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4";
        owned_page(
            self,
            API_KEYS,
            sql,
            (org, env),
            after.map(|a| a.ulid()),
            count,
        )
        .await
    }

    async fn update_api_key(&self, key: &ApiKeyRecord) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let Some(stored) = lock_api_key(&tx, key.organization_id, key.environment, key.id).await?
        else {
            return Ok(());
        };
        let key = crate::rules::merge_key_update(&stored, key);
        write_api_key(&tx, &key).await?;
        tx.commit().await.map_err(db_error)?;
        self.credentials_changed(client).await;
        Ok(())
    }

    async fn rotate_api_key(&self, old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let stored = lock_api_key(&tx, old.organization_id, old.environment, old.id).await?;
        let old = crate::rules::rotated_key(stored.as_ref(), old)?;
        write_api_key(&tx, &old).await?;
        insert_api_key(&tx, replacement).await?;
        tx.commit().await.map_err(db_error)?;
        self.credentials_changed(client).await;
        Ok(())
    }

    async fn touch_api_key(
        &self,
        org: OrgId,
        env: Environment,
        id: KeyId,
        at: Timestamp,
    ) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let Some(mut stored) = lock_api_key(&tx, org, env, id).await? else {
            return Ok(());
        };
        stored.last_used_at = Some(at);
        write_api_key(&tx, &stored).await?;
        tx.commit().await.map_err(db_error)?;
        // Not notified (a key's last use changes nothing of what it may do), but this replica's
        // copy is dropped, or every request would find it older than a minute and touch it.
        self.credentials.forget_key(&stored.key_hash);
        Ok(())
    }
}
