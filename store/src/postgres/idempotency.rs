//! Idempotency records in PostgreSQL: one row per (credential, key), claimed by one statement
//! so that of racing replicas exactly one runs the request.

use async_trait::async_trait;

use super::{PostgresStore, decode_opt, execute, json, row};
use crate::{
    IdempotencyBegin, IdempotencyRecord, IdempotencyScope, IdempotencyStore, Result, StoreError,
};

const IDEMPOTENCY_RECORDS: &str = "idempotency_records";

/// The `scope` column: the credential hash, then the key's UTF-8 (the embedded key's bytes).
fn scope_key(scope: &IdempotencyScope) -> Vec<u8> {
    let mut k = Vec::with_capacity(32 + scope.key.len());
    k.extend_from_slice(&scope.credential.0);
    k.extend_from_slice(scope.key.as_bytes());
    k
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    /// One statement claims the scope unless a live record holds it; an expired record counts as
    /// absent and is replaced.
    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        let client = self.client().await?;
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
            if let Some(existing) = decode_opt::<IdempotencyRecord>(IDEMPOTENCY_RECORDS, existing)?
            {
                return Ok(IdempotencyBegin::Existing(existing));
            }
        }
        Err(StoreError::Unavailable(
            "an idempotency record kept changing under its claim".into(),
        ))
    }

    async fn idempotency_complete(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<()> {
        execute(
            &self.client().await?,
            "INSERT INTO idempotency_records (scope, expires_at, body) VALUES ($1, $2, $3)
             ON CONFLICT (scope) DO UPDATE SET expires_at = excluded.expires_at, body = excluded.body",
            &[&scope_key(scope), &record.expires_at, &json(record)],
        )
        .await?;
        Ok(())
    }

    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        execute(
            &self.client().await?,
            "DELETE FROM idempotency_records WHERE scope = $1",
            &[&scope_key(scope)],
        )
        .await?;
        Ok(())
    }
}
