//! Idempotency records on ScyllaDB (`store/cql/001_core.cql`): one row per (credential,
//! key), claimed by a lightweight transaction so that of racing replicas exactly one runs the
//! request. Each row lives until its `expires_at` (a TTL); one whose TTL has not run yet but
//! whose `expires_at` has passed counts as absent and is taken over.

use async_trait::async_trait;
use scylla::value::CqlTimestamp;

use super::{CONTENDED_RETRIES, ScyllaStore, corrupt, encode, rows_of};
use crate::{
    IdempotencyBegin, IdempotencyRecord, IdempotencyScope, IdempotencyStore, Result, StoreError,
};

const IDEMPOTENCY_RECORDS: &str = "idempotency_records";

const CLAIM: &str = "INSERT INTO idempotency_records (credential_hash, idempotency_key, expires_at, body) \
     VALUES (?, ?, ?, ?) IF NOT EXISTS USING TTL ?";
const READ: &str = "SELECT expires_at, body FROM idempotency_records \
     WHERE credential_hash = ? AND idempotency_key = ?";
const TAKE_OVER: &str = "UPDATE idempotency_records USING TTL ? SET expires_at = ?, body = ? \
     WHERE credential_hash = ? AND idempotency_key = ? IF expires_at = ?";
const COMPLETE: &str = "UPDATE idempotency_records USING TTL ? SET expires_at = ?, body = ? \
     WHERE credential_hash = ? AND idempotency_key = ? IF EXISTS";
const ABANDON: &str =
    "DELETE FROM idempotency_records WHERE credential_hash = ? AND idempotency_key = ? IF EXISTS";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[CLAIM, READ, TAKE_OVER, COMPLETE, ABANDON];

/// Seconds from now to `record.expires_at`, at least one: the row's TTL.
fn ttl(record: &IdempotencyRecord) -> i32 {
    let left = (record.expires_at - schemas::time::now()).num_seconds();
    i32::try_from(left.max(1)).unwrap_or(i32::MAX)
}

fn millis(at: schemas::time::Timestamp) -> CqlTimestamp {
    CqlTimestamp(at.timestamp_millis())
}

#[async_trait]
impl IdempotencyStore for ScyllaStore {
    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        let (hash, key) = (&scope.credential.0[..], scope.key.as_str());
        for _ in 0..CONTENDED_RETRIES {
            let body = encode(record);
            if self
                .applied(
                    CLAIM,
                    (
                        hash,
                        key,
                        millis(record.expires_at),
                        body.as_str(),
                        ttl(record),
                    ),
                )
                .await?
            {
                return Ok(IdempotencyBegin::Started);
            }
            let result = self.execute(READ, (hash, key)).await?;
            let rows = rows_of(IDEMPOTENCY_RECORDS, result)?;
            let Some((expires_at, existing)) = rows
                .maybe_first_row::<(CqlTimestamp, String)>()
                .map_err(|e| corrupt(IDEMPOTENCY_RECORDS, &e))?
            else {
                // Released between the claim and the read: claim again.
                continue;
            };
            let existing: IdempotencyRecord = super::decode(IDEMPOTENCY_RECORDS, &existing)?;
            if existing.expires_at > schemas::time::now() {
                return Ok(IdempotencyBegin::Existing(existing));
            }
            // Expired, its TTL not yet run: taken over if no one else took it first.
            if self
                .applied(
                    TAKE_OVER,
                    (
                        ttl(record),
                        millis(record.expires_at),
                        body.as_str(),
                        hash,
                        key,
                        expires_at,
                    ),
                )
                .await?
            {
                return Ok(IdempotencyBegin::Started);
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
        let (hash, key) = (&scope.credential.0[..], scope.key.as_str());
        let body = encode(record);
        let updated = self
            .applied(
                COMPLETE,
                (
                    ttl(record),
                    millis(record.expires_at),
                    body.as_str(),
                    hash,
                    key,
                ),
            )
            .await?;
        if !updated {
            // Gone meanwhile (abandoned, or expired): kept all the same, as the first answer.
            self.applied(
                CLAIM,
                (
                    hash,
                    key,
                    millis(record.expires_at),
                    body.as_str(),
                    ttl(record),
                ),
            )
            .await?;
        }
        Ok(())
    }

    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        self.applied(ABANDON, (&scope.credential.0[..], scope.key.as_str()))
            .await
            .map(drop)
    }
}
