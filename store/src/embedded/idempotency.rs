//! Idempotency records (`001_core.cql`): single rows looked up by their whole key, each written
//! once or replaced, never listed.

use super::{EmbeddedStore, IDEMPOTENCY_RECORDS, decode_row, encode, key, unavailable};
use crate::{IdempotencyBegin, IdempotencyRecord, IdempotencyScope, IdempotencyStore, Result};
use async_trait::async_trait;

#[async_trait]
impl IdempotencyStore for EmbeddedStore {
    async fn idempotency_begin(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<IdempotencyBegin> {
        let k = key::idempotency(scope);
        let record = record.clone();
        self.write(move |db, _| {
            let now = chrono::Utc::now();
            let existing: Option<IdempotencyRecord> =
                decode_row(IDEMPOTENCY_RECORDS, db.idempotency_records.get(&k))?;
            // An expired record counts as absent (ScyllaDB's TTL would have removed it).
            if let Some(existing) = existing.filter(|r| r.expires_at > now) {
                return Ok(IdempotencyBegin::Existing(existing));
            }
            let mut batch = db.batch();
            batch.insert(
                &db.idempotency_records,
                k,
                encode(IDEMPOTENCY_RECORDS, &record)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(IdempotencyBegin::Started)
        })
        .await
    }

    async fn idempotency_complete(
        &self,
        scope: &IdempotencyScope,
        record: &IdempotencyRecord,
    ) -> Result<()> {
        let k = key::idempotency(scope);
        let record = record.clone();
        self.write(move |db, _| {
            let mut batch = db.batch();
            batch.insert(
                &db.idempotency_records,
                k,
                encode(IDEMPOTENCY_RECORDS, &record)?,
            );
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        let k = key::idempotency(scope);
        // Synced like any write: a lost release would block the client's retries until expiry.
        self.write(move |db, _| {
            let mut batch = db.batch();
            batch.remove(&db.idempotency_records, k);
            batch.commit().map_err(unavailable)
        })
        .await
    }
}
