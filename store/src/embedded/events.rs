//! Events (`005_events.cql`) and the webhooks that deliver them (`009_webhooks.cql`):
//! `webhook_endpoints`, `webhook_deliveries` and the embedded-only `webhook_deliveries_due`.

use async_trait::async_trait;
use std::ops::Bound;

use fjall::{OwnedWriteBatch, Readable};
use schemas::credential::Environment;
use schemas::ids::{EventId, OrgId, WebhookDeliveryId, WebhookEndpointId};
use schemas::time::Timestamp;
use serde::Deserialize;

use super::key::Expiring;
use super::{
    EVENTS, EmbeddedStore, Inner, WEBHOOK_DELIVERIES, WEBHOOK_DELIVERIES_DUE, WEBHOOK_ENDPOINTS,
    decode, decode_row, encode, key, prefix_end, scan, unavailable,
};
use crate::{
    EndpointCaps, EndpointStatus, EndpointWrite, EventRecord, EventStore, Result, StoreError,
    WebhookDeliveryRecord, WebhookEndpointRecord,
};

/// The column of a stored `events` row that says when it expires.
#[derive(Deserialize)]
pub(super) struct EventPlace {
    pub(super) created_at: Timestamp,
}

impl Inner {
    /// How many endpoints an organization has in `env`, and how many of them are active, as
    /// the latest writes left them: read under the writer's lock, so a cap checked on it holds
    /// until the lock's write lands.
    fn count_endpoints(&self, org: OrgId, env: Environment) -> Result<(usize, usize)> {
        let partition = key::webhook_endpoint_partition(org, env);
        let (mut active, mut total) = (0, 0);
        for guard in self
            .webhook_endpoints
            .range((Bound::Included(partition.to_vec()), prefix_end(&partition)))
        {
            let value = guard.value().map_err(unavailable)?;
            let endpoint: WebhookEndpointRecord = decode(WEBHOOK_ENDPOINTS, &value)?;
            total += 1;
            if endpoint.status == EndpointStatus::Active {
                active += 1;
            }
        }
        Ok((active, total))
    }

    /// Adds events (insert or replace by id) and their expiry queue rows to `batch`.
    pub(super) fn add_events(
        &self,
        batch: &mut OwnedWriteBatch,
        events: &[EventRecord],
    ) -> Result<()> {
        for e in events {
            let ek = key::event(e.organization_id, e.environment, e.id);
            // Saved again with another time, the event keeps a stale queue row too; the purge
            // checks the row's own time before dropping it.
            batch.insert(
                &self.expiry_queue,
                key::expiry(e.created_at, Expiring::Event, &ek),
                [],
            );
            batch.insert(&self.events, ek, encode(EVENTS, e)?);
        }
        Ok(())
    }

    /// The stored delivery at `k`, if any.
    fn stored_delivery(&self, k: &[u8; 49]) -> Result<Option<WebhookDeliveryRecord>> {
        decode_row(WEBHOOK_DELIVERIES, self.webhook_deliveries.get(k))
    }

    /// Adds to `batch` the delivery at `k` with its next attempt moved from `due` to `until`,
    /// in its record and in the due index.
    fn reschedule_delivery(
        &self,
        batch: &mut OwnedWriteBatch,
        k: [u8; 49],
        stored: &mut WebhookDeliveryRecord,
        due: Timestamp,
        until: Timestamp,
    ) -> Result<()> {
        batch.remove(&self.webhook_deliveries_due, key::delivery_due(due, &k));
        batch.insert(
            &self.webhook_deliveries_due,
            key::delivery_due(until, &k),
            [],
        );
        stored.next_attempt_at = Some(until);
        batch.insert(
            &self.webhook_deliveries,
            k,
            encode(WEBHOOK_DELIVERIES, stored)?,
        );
        Ok(())
    }

    /// Drops the deliveries of the event at `event_key` (their partition is the event's key),
    /// with their due-index rows: they go with their event (docs/architecture.md#retention). An
    /// event has one per endpoint it went to, a handful.
    pub(super) fn purge_deliveries(
        &self,
        batch: &mut OwnedWriteBatch,
        event_key: &[u8],
    ) -> Result<()> {
        for guard in self.webhook_deliveries.prefix(event_key) {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            let delivery: WebhookDeliveryRecord = decode(WEBHOOK_DELIVERIES, &v)?;
            if let (Some(at), Ok(dk)) = (delivery.next_attempt_at, <[u8; 49]>::try_from(k.as_ref()))
            {
                batch.remove(&self.webhook_deliveries_due, key::delivery_due(at, &dk));
            }
            batch.remove(&self.webhook_deliveries, k);
        }
        Ok(())
    }
}

#[async_trait]
impl EventStore for EmbeddedStore {
    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: EventId,
    ) -> Result<Option<EventRecord>> {
        decode_row(
            EVENTS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.events, key::event(org, env, id)),
        )
    }

    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<EventId>,
        limit: usize,
    ) -> Result<Vec<EventRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::event_partition(org, env);
        let start = match after {
            Some(after) => Bound::Excluded(key::event(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            EVENTS,
            &self.inner.db.snapshot(),
            &self.inner.events,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    async fn record_events(&self, events: &[EventRecord]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let events = events.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            db.add_events(&mut batch, &events)?;
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn create_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<Vec<schemas::ids::WebhookDeliveryId>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            let mut keys = std::collections::HashSet::new();
            let mut created = Vec::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                if db.contains(&db.webhook_deliveries, &k)? || !keys.insert(k) {
                    continue;
                }
                created.push(d.id);
                batch.insert(&db.webhook_deliveries, k, encode(WEBHOOK_DELIVERIES, d)?);
                if let Some(at) = d.next_attempt_at {
                    batch.insert(&db.webhook_deliveries_due, key::delivery_due(at, &k), []);
                }
            }
            if !created.is_empty() {
                batch.commit().map_err(unavailable)?;
            }
            Ok(created)
        })
        .await
    }

    async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            // Rows this call writes: a second outcome of one delivery in the same call started
            // from the same stored row as the first, so it is a race the first one won.
            let mut written = std::collections::HashSet::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                let Some(stored) = db.stored_delivery(&k)? else {
                    continue;
                };
                if written.contains(&k)
                    || stored.id != d.id
                    || stored.attempts.checked_add(1) != Some(d.attempts)
                {
                    continue;
                }
                if let Some(at) = stored.next_attempt_at {
                    batch.remove(&db.webhook_deliveries_due, key::delivery_due(at, &k));
                }
                if let Some(at) = d.next_attempt_at {
                    batch.insert(&db.webhook_deliveries_due, key::delivery_due(at, &k), []);
                }
                batch.insert(&db.webhook_deliveries, k, encode(WEBHOOK_DELIVERIES, d)?);
                written.insert(k);
            }
            if written.is_empty() {
                return Ok(0);
            }
            batch.commit().map_err(unavailable)?;
            Ok(written.len())
        })
        .await
    }

    async fn defer_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<usize> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            let mut deferred = std::collections::HashSet::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                let Some(mut stored) = db.stored_delivery(&k)? else {
                    continue;
                };
                let (Some(due), Some(until)) = (stored.next_attempt_at, d.next_attempt_at) else {
                    continue;
                };
                if deferred.contains(&k) || stored.id != d.id || stored.attempts != d.attempts {
                    continue;
                }
                db.reschedule_delivery(&mut batch, k, &mut stored, due, until)?;
                deferred.insert(k);
            }
            if !deferred.is_empty() {
                batch.commit().map_err(unavailable)?;
            }
            Ok(deferred.len())
        })
        .await
    }

    async fn claim_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
        until: Timestamp,
    ) -> Result<Vec<WebhookDeliveryId>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let deliveries = deliveries.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            let mut claimed = Vec::new();
            let mut keys = std::collections::HashSet::new();
            for d in &deliveries {
                let k = key::delivery(d.organization_id, d.environment, d.event_id, d.endpoint_id);
                let Some(mut stored) = db.stored_delivery(&k)? else {
                    continue;
                };
                let Some(due) = stored.next_attempt_at else {
                    continue;
                };
                if keys.contains(&k)
                    || stored.id != d.id
                    || stored.attempts != d.attempts
                    || Some(due) != d.next_attempt_at
                {
                    continue;
                }
                db.reschedule_delivery(&mut batch, k, &mut stored, due, until)?;
                keys.insert(k);
                claimed.push(d.id);
            }
            if !claimed.is_empty() {
                batch.commit().map_err(unavailable)?;
            }
            Ok(claimed)
        })
        .await
    }

    async fn list_event_deliveries(
        &self,
        org: OrgId,
        env: Environment,
        event: EventId,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        let partition = key::delivery_partition(org, env, event);
        scan(
            WEBHOOK_DELIVERIES,
            &self.inner.db.snapshot(),
            &self.inner.webhook_deliveries,
            Bound::Included(partition.to_vec()),
            prefix_end(&partition),
            usize::MAX,
        )
    }

    async fn due_webhook_deliveries(
        &self,
        before: Timestamp,
        limit: usize,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        let db = &self.inner;
        let snapshot = db.db.snapshot();
        let end = key::delivery_due_before(before).to_vec();
        let mut due = Vec::new();
        for guard in snapshot
            .range(&db.webhook_deliveries_due, ..end)
            .take(limit)
        {
            let k = guard.key().map_err(unavailable)?;
            let delivery = key::delivery_of_due(&k).ok_or_else(|| StoreError::Corrupt {
                table: WEBHOOK_DELIVERIES_DUE,
                detail: "a due key of the wrong length".into(),
            })?;
            // Written in one batch with the index, so a missing row is damage.
            let row = decode_row(
                WEBHOOK_DELIVERIES,
                snapshot.get(&db.webhook_deliveries, delivery),
            )?
            .ok_or_else(|| StoreError::Corrupt {
                table: WEBHOOK_DELIVERIES_DUE,
                detail: "a due row names no delivery".into(),
            })?;
            due.push(row);
        }
        Ok(due)
    }

    async fn create_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        let endpoint = endpoint.clone();
        self.write(move |db, _| {
            let k =
                key::webhook_endpoint(endpoint.organization_id, endpoint.environment, endpoint.id);
            if db.contains(&db.webhook_endpoints, &k)? {
                return Err(StoreError::Conflict(format!(
                    "webhook endpoint {} exists",
                    endpoint.id
                )));
            }
            let counts = db.count_endpoints(endpoint.organization_id, endpoint.environment)?;
            let write = EndpointWrite::check(&endpoint, None, counts, caps);
            if write != EndpointWrite::Written {
                return Ok(write);
            }
            let mut batch = db.batch();
            batch.insert(
                &db.webhook_endpoints,
                k,
                encode(WEBHOOK_ENDPOINTS, &endpoint)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(write)
        })
        .await
    }

    async fn get_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
    ) -> Result<Option<WebhookEndpointRecord>> {
        decode_row(
            WEBHOOK_ENDPOINTS,
            self.inner
                .webhook_endpoints
                .get(key::webhook_endpoint(org, env, id)),
        )
    }

    async fn list_webhook_endpoints(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<WebhookEndpointId>,
        limit: usize,
    ) -> Result<Vec<WebhookEndpointRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::webhook_endpoint_partition(org, env);
        let start = match after {
            Some(after) => Bound::Excluded(key::webhook_endpoint(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            WEBHOOK_ENDPOINTS,
            &self.inner.db.snapshot(),
            &self.inner.webhook_endpoints,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    async fn disable_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
        at: Timestamp,
    ) -> Result<bool> {
        self.write(move |db, _| {
            let k = key::webhook_endpoint(org, env, id);
            let Some(mut endpoint) = decode_row::<WebhookEndpointRecord>(
                WEBHOOK_ENDPOINTS,
                db.webhook_endpoints.get(k),
            )?
            else {
                return Ok(false);
            };
            if endpoint.status == crate::EndpointStatus::Disabled {
                return Ok(false);
            }
            endpoint.status = crate::EndpointStatus::Disabled;
            endpoint.updated_at = at;
            let mut batch = db.batch();
            batch.insert(
                &db.webhook_endpoints,
                k,
                encode(WEBHOOK_ENDPOINTS, &endpoint)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn update_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        let endpoint = endpoint.clone();
        self.write(move |db, _| {
            let k =
                key::webhook_endpoint(endpoint.organization_id, endpoint.environment, endpoint.id);
            let Some(stored) = decode_row::<WebhookEndpointRecord>(
                WEBHOOK_ENDPOINTS,
                db.webhook_endpoints.get(k),
            )?
            else {
                return Ok(EndpointWrite::Missing);
            };
            let counts = db.count_endpoints(endpoint.organization_id, endpoint.environment)?;
            let write = EndpointWrite::check(&endpoint, Some(&stored), counts, caps);
            if write != EndpointWrite::Written {
                return Ok(write);
            }
            let mut batch = db.batch();
            batch.insert(
                &db.webhook_endpoints,
                k,
                encode(WEBHOOK_ENDPOINTS, &endpoint)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(EndpointWrite::Written)
        })
        .await
    }
}
