//! Organizations, API keys, idempotency records, handoff openings and settings in PostgreSQL.
//! Slugs, key ids and credential hashes are unique by constraint; the merges the port asks of
//! key updates (sticky revocation, `last_used_at` only forward, rotation columns untouched)
//! happen under the row's lock.

use deadpool_postgres::GenericClient;
use schemas::credential::Environment;
use schemas::ids::{KeyId, OrgId};
use schemas::time::Timestamp;

use super::{
    PostgresStore, db_error, decode, decode_opt, env_code, execute, json, owned_page, owned_row,
    row, ulid_bytes,
};
use crate::{
    ApiKeyRecord, CredentialHash, IdempotencyBegin, IdempotencyRecord, IdempotencyScope,
    OrganizationRecord, Result, StoreError,
};

const ORGANIZATIONS: &str = "organizations";
const API_KEYS: &str = "api_keys";
const IDEMPOTENCY_RECORDS: &str = "idempotency_records";

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

pub async fn create_organization(store: &PostgresStore, org: &OrganizationRecord) -> Result<()> {
    insert_organization(&store.client().await?, org).await
}

pub async fn get_organization(
    store: &PostgresStore,
    id: OrgId,
) -> Result<Option<OrganizationRecord>> {
    let found = row(
        &store.client().await?,
        "SELECT body FROM organizations WHERE id = $1",
        &[&ulid_bytes(id.ulid())],
    )
    .await?;
    decode_opt(ORGANIZATIONS, found)
}

pub async fn get_organization_by_slug(
    store: &PostgresStore,
    slug: &str,
) -> Result<Option<OrganizationRecord>> {
    let found = row(
        &store.client().await?,
        "SELECT body FROM organizations WHERE slug = $1",
        &[&slug],
    )
    .await?;
    decode_opt(ORGANIZATIONS, found)
}

pub async fn update_organization(store: &PostgresStore, org: &OrganizationRecord) -> Result<()> {
    let mut client = store.client().await?;
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
    tx.commit().await.map_err(db_error)
}

/// One transaction: a conflict on any row aborts it, so nothing of a failed call stays.
pub async fn create_organization_with_keys(
    store: &PostgresStore,
    org: &OrganizationRecord,
    keys: &[ApiKeyRecord],
) -> Result<()> {
    crate::check_organization_keys(org, keys)?;
    let mut client = store.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    insert_organization(&tx, org).await?;
    for key in keys {
        insert_api_key(&tx, key).await?;
    }
    tx.commit().await.map_err(db_error)
}

pub async fn create_api_key(store: &PostgresStore, key: &ApiKeyRecord) -> Result<()> {
    insert_api_key(&store.client().await?, key).await
}

pub async fn get_api_key(
    store: &PostgresStore,
    org: OrgId,
    env: Environment,
    id: KeyId,
) -> Result<Option<ApiKeyRecord>> {
    let sql =
        "SELECT body FROM api_keys WHERE organization_id = $1 AND environment = $2 AND id = $3";
    owned_row(store, API_KEYS, sql, (org, env, id.ulid())).await
}

pub async fn locate_api_key(
    store: &PostgresStore,
    id: KeyId,
) -> Result<Option<(OrgId, Environment)>> {
    let found = row(
        &store.client().await?,
        "SELECT body FROM api_keys WHERE id = $1",
        &[&ulid_bytes(id.ulid())],
    )
    .await?;
    let key: Option<ApiKeyRecord> = decode_opt(API_KEYS, found)?;
    Ok(key.map(|k| (k.organization_id, k.environment)))
}

/// The authentication path's read: one indexed lookup, no cache (see the module doc of
/// `postgres`), so a revocation through any replica counts at once.
pub async fn find_api_key_by_hash(
    store: &PostgresStore,
    hash: &CredentialHash,
) -> Result<Option<ApiKeyRecord>> {
    let found = row(
        &store.client().await?,
        "SELECT body FROM api_keys WHERE key_hash = $1",
        &[&&hash.0[..]],
    )
    .await?;
    decode_opt(API_KEYS, found)
}

pub async fn list_api_keys(
    store: &PostgresStore,
    org: OrgId,
    env: Environment,
    after: Option<KeyId>,
    count: usize,
) -> Result<Vec<ApiKeyRecord>> {
    let sql = "SELECT body FROM api_keys
         WHERE organization_id = $1 AND environment = $2 AND ($3::bytea IS NULL OR id < $3)
         ORDER BY id DESC LIMIT $4";
    owned_page(
        store,
        API_KEYS,
        sql,
        (org, env),
        after.map(|a| a.ulid()),
        count,
    )
    .await
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

pub async fn update_api_key(store: &PostgresStore, key: &ApiKeyRecord) -> Result<()> {
    let mut client = store.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    let Some(stored) = lock_api_key(&tx, key.organization_id, key.environment, key.id).await?
    else {
        return Ok(());
    };
    let key = crate::rules::merge_key_update(&stored, key);
    write_api_key(&tx, &key).await?;
    tx.commit().await.map_err(db_error)
}

pub async fn rotate_api_key(
    store: &PostgresStore,
    old: &ApiKeyRecord,
    replacement: &ApiKeyRecord,
) -> Result<()> {
    let mut client = store.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    let stored = lock_api_key(&tx, old.organization_id, old.environment, old.id).await?;
    let old = crate::rules::rotated_key(stored.as_ref(), old)?;
    write_api_key(&tx, &old).await?;
    insert_api_key(&tx, replacement).await?;
    tx.commit().await.map_err(db_error)
}

pub async fn touch_api_key(
    store: &PostgresStore,
    org: OrgId,
    env: Environment,
    id: KeyId,
    at: Timestamp,
) -> Result<()> {
    let mut client = store.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    let Some(mut stored) = lock_api_key(&tx, org, env, id).await? else {
        return Ok(());
    };
    stored.last_used_at = Some(at);
    write_api_key(&tx, &stored).await?;
    tx.commit().await.map_err(db_error)
}

/// The `scope` column: the credential hash, then the key's UTF-8 (the embedded key's bytes).
fn scope_key(scope: &IdempotencyScope) -> Vec<u8> {
    let mut k = Vec::with_capacity(32 + scope.key.len());
    k.extend_from_slice(&scope.credential.0);
    k.extend_from_slice(scope.key.as_bytes());
    k
}

/// One statement claims the scope unless a live record holds it; an expired record counts as
/// absent and is replaced.
pub async fn idempotency_begin(
    store: &PostgresStore,
    scope: &IdempotencyScope,
    record: &IdempotencyRecord,
) -> Result<IdempotencyBegin> {
    let client = store.client().await?;
    let k = scope_key(scope);
    // A record released between the claim and the read is claimed again.
    for _ in 0..3 {
        let now = chrono::Utc::now();
        let claimed = row(
            &client,
            "INSERT INTO idempotency_records (scope, expires_at, body) VALUES ($1, $2, $3)
             ON CONFLICT (scope) DO UPDATE SET expires_at = excluded.expires_at, body = excluded.body
             WHERE idempotency_records.expires_at <= $4
             RETURNING 1",
            &[&k, &record.expires_at, &json(record), &now],
        )
        .await?;
        if claimed.is_some() {
            return Ok(IdempotencyBegin::Started);
        }
        let existing = row(
            &client,
            "SELECT body FROM idempotency_records WHERE scope = $1",
            &[&k],
        )
        .await?;
        if let Some(existing) = decode_opt::<IdempotencyRecord>(IDEMPOTENCY_RECORDS, existing)? {
            return Ok(IdempotencyBegin::Existing(existing));
        }
    }
    Err(StoreError::Unavailable(
        "an idempotency record kept changing under its claim".into(),
    ))
}

pub async fn idempotency_complete(
    store: &PostgresStore,
    scope: &IdempotencyScope,
    record: &IdempotencyRecord,
) -> Result<()> {
    execute(
        &store.client().await?,
        "INSERT INTO idempotency_records (scope, expires_at, body) VALUES ($1, $2, $3)
         ON CONFLICT (scope) DO UPDATE SET expires_at = excluded.expires_at, body = excluded.body",
        &[&scope_key(scope), &record.expires_at, &json(record)],
    )
    .await?;
    Ok(())
}

pub async fn idempotency_abandon(store: &PostgresStore, scope: &IdempotencyScope) -> Result<()> {
    execute(
        &store.client().await?,
        "DELETE FROM idempotency_records WHERE scope = $1",
        &[&scope_key(scope)],
    )
    .await?;
    Ok(())
}

pub async fn open_handoff_once(
    store: &PostgresStore,
    handoff: &[u8; 16],
    at: Timestamp,
    expires_at: Timestamp,
) -> Result<Option<Timestamp>> {
    let client = store.client().await?;
    let first = row(
        &client,
        "INSERT INTO handoff_openings (handoff, first_opened_at, expires_at) VALUES ($1, $2, $3)
         ON CONFLICT (handoff) DO NOTHING RETURNING 1",
        &[&&handoff[..], &at, &expires_at],
    )
    .await?;
    if first.is_some() {
        return Ok(None);
    }
    let stored = row(
        &client,
        "SELECT first_opened_at FROM handoff_openings WHERE handoff = $1",
        &[&&handoff[..]],
    )
    .await?;
    // The row was there a statement ago; the sweep may have dropped it since, once expired.
    Ok(Some(stored.map_or(at, |r| r.get(0))))
}

pub async fn get_setting(store: &PostgresStore, name: &str) -> Result<Option<Vec<u8>>> {
    let found = row(
        &store.client().await?,
        "SELECT value FROM settings WHERE name = $1",
        &[&name],
    )
    .await?;
    Ok(found.map(|r| r.get(0)))
}

pub async fn put_setting_if_absent(
    store: &PostgresStore,
    name: &str,
    value: &[u8],
) -> Result<bool> {
    let written = execute(
        &store.client().await?,
        "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        &[&name, &value],
    )
    .await?;
    Ok(written == 1)
}
