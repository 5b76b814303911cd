//! Idempotency records, handoff openings and settings (`001_core.cql`, `007_handoffs.cql`):
//! single rows looked up by their whole key, each written once or replaced, never listed.

use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::{
    EmbeddedStore, HANDOFF_OPENINGS, IDEMPOTENCY_RECORDS, decode_row, encode, key, unavailable,
};
use crate::{IdempotencyBegin, IdempotencyRecord, IdempotencyScope, Result};

/// `handoff_openings`: when a handoff was first opened, kept until it expires.
#[derive(Serialize, Deserialize)]
pub(super) struct HandoffOpening {
    first_opened_at: Timestamp,
    pub(super) expires_at: Timestamp,
}

impl EmbeddedStore {
    pub(super) async fn idempotency_begin(
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

    pub(super) async fn idempotency_complete(
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

    pub(super) async fn idempotency_abandon(&self, scope: &IdempotencyScope) -> Result<()> {
        let k = key::idempotency(scope);
        // Synced like any write: a lost release would block the client's retries until expiry.
        self.write(move |db, _| {
            let mut batch = db.batch();
            batch.remove(&db.idempotency_records, k);
            batch.commit().map_err(unavailable)
        })
        .await
    }

    pub(super) async fn open_handoff_once(
        &self,
        handoff: &[u8; 16],
        at: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<Timestamp>> {
        let k = *handoff;
        self.write(move |db, _| {
            let stored: Option<HandoffOpening> =
                decode_row(HANDOFF_OPENINGS, db.handoff_openings.get(k))?;
            if let Some(first) = stored {
                return Ok(Some(first.first_opened_at));
            }
            let row = HandoffOpening {
                first_opened_at: at,
                expires_at,
            };
            let mut batch = db.batch();
            batch.insert(&db.handoff_openings, k, encode(HANDOFF_OPENINGS, &row)?);
            batch.commit().map_err(unavailable)?;
            Ok(None)
        })
        .await
    }

    pub(super) async fn get_setting(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let value = self
            .inner
            .settings
            .get(key::setting(name))
            .map_err(unavailable)?;
        Ok(value.map(|v| v.to_vec()))
    }

    pub(super) async fn put_setting_if_absent(&self, name: &str, value: &[u8]) -> Result<bool> {
        let name = name.to_owned();
        let value = value.to_vec();
        self.write(move |db, _| {
            if db.contains(&db.settings, key::setting(&name))? {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(&db.settings, key::setting(&name), value);
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }
}
