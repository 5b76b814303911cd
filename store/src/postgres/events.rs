//! Events, and the webhook endpoints and deliveries that carry them, in PostgreSQL. An event is
//! inserted or replaced by id, so a session saved again after a redelivery keeps one of each.
//! The due index is a partial index on the
//! deliveries' `next_attempt_at`; an attempt's outcome is one conditional `UPDATE` (written only
//! over the row the attempt started from), so dispatchers on several machines cannot record
//! one attempt twice.

use async_trait::async_trait;
use std::collections::HashSet;

use deadpool_postgres::GenericClient;
use schemas::credential::Environment;
use schemas::ids::{EventId, OrgId, WebhookDeliveryId, WebhookEndpointId};
use schemas::time::Timestamp;

use super::{
    PostgresStore, db_error, decode_all, decode_opt, env_code, execute, json, limit, owned_page,
    owned_row, row, rows, ulid_bytes,
};
use crate::{
    EndpointCaps, EndpointStatus, EndpointWrite, EventRecord, EventStore, Result, StoreError,
    WebhookDeliveryRecord, WebhookEndpointRecord,
};

const EVENTS: &str = "events";
const WEBHOOK_ENDPOINTS: &str = "webhook_endpoints";
const WEBHOOK_DELIVERIES: &str = "webhook_deliveries";

/// A delivery's primary key: organization, environment, event, endpoint.
type DeliveryKey = (Vec<u8>, i16, Vec<u8>, Vec<u8>);

fn delivery_key(d: &WebhookDeliveryRecord) -> DeliveryKey {
    (
        ulid_bytes(d.organization_id.ulid()),
        env_code(d.environment),
        ulid_bytes(d.event_id.ulid()),
        ulid_bytes(d.endpoint_id.ulid()),
    )
}

/// Rows locked in key order, so two dispatchers writing overlapping lists cannot deadlock.
fn in_key_order(deliveries: &[WebhookDeliveryRecord]) -> Vec<&WebhookDeliveryRecord> {
    let mut ordered: Vec<&WebhookDeliveryRecord> = deliveries.iter().collect();
    ordered.sort_by_key(|d| delivery_key(d));
    ordered
}

/// The stored delivery at `k`, its row locked until the transaction ends.
async fn locked_delivery(
    tx: &impl GenericClient,
    k: &DeliveryKey,
) -> Result<Option<WebhookDeliveryRecord>> {
    let found = row(
        tx,
        "SELECT body FROM webhook_deliveries
         WHERE organization_id = $1 AND environment = $2 AND event_id = $3
           AND endpoint_id = $4 FOR UPDATE",
        &[&k.0, &k.1, &k.2, &k.3],
    )
    .await?;
    decode_opt(WEBHOOK_DELIVERIES, found)
}

/// Sets the delivery's next attempt to `until`, in its record and in the indexed column.
async fn reschedule(
    tx: &impl GenericClient,
    k: &DeliveryKey,
    stored: &mut WebhookDeliveryRecord,
    until: Timestamp,
) -> Result<()> {
    stored.next_attempt_at = Some(until);
    execute(
        tx,
        "UPDATE webhook_deliveries SET next_attempt_at = $5, body = $6
         WHERE organization_id = $1 AND environment = $2 AND event_id = $3
           AND endpoint_id = $4",
        &[&k.0, &k.1, &k.2, &k.3, &until, &json(stored)],
    )
    .await?;
    Ok(())
}

/// Inserts or replaces events by id.
pub(super) async fn insert_events(tx: &impl GenericClient, events: &[&EventRecord]) -> Result<()> {
    // An id given twice is written once, the last standing: one statement cannot update a row
    // twice.
    let mut seen = std::collections::HashSet::with_capacity(events.len());
    let unique: Vec<&EventRecord> = events
        .iter()
        .rev()
        .filter(|e| seen.insert(e.id))
        .copied()
        .collect();
    if unique.is_empty() {
        return Ok(());
    }
    execute(
        tx,
        "INSERT INTO events (organization_id, environment, id, created_at, body)
         SELECT * FROM unnest($1::bytea[], $2::smallint[], $3::bytea[], $4::timestamptz[],
                              $5::json[])
         ON CONFLICT (organization_id, environment, id) DO UPDATE SET
             created_at = excluded.created_at, body = excluded.body",
        &[
            &unique
                .iter()
                .map(|e| ulid_bytes(e.organization_id.ulid()))
                .collect::<Vec<_>>(),
            &unique
                .iter()
                .map(|e| env_code(e.environment))
                .collect::<Vec<_>>(),
            &unique
                .iter()
                .map(|e| ulid_bytes(e.id.ulid()))
                .collect::<Vec<_>>(),
            &unique.iter().map(|e| e.created_at).collect::<Vec<_>>(),
            &unique.iter().map(|e| json(*e)).collect::<Vec<_>>(),
        ],
    )
    .await?;
    Ok(())
}

/// Runs `sql` with the endpoint's organization, environment, id and record as `$1` to `$4`.
async fn write_endpoint(
    tx: &impl GenericClient,
    sql: &str,
    endpoint: &WebhookEndpointRecord,
) -> Result<u64> {
    execute(
        tx,
        sql,
        &[
            &ulid_bytes(endpoint.organization_id.ulid()),
            &env_code(endpoint.environment),
            &ulid_bytes(endpoint.id.ulid()),
            &json(endpoint),
        ],
    )
    .await
}

/// Takes the advisory lock under which an endpoint's organization and environment count their
/// endpoints (the high 64 bits of the organization's id, tagged with the environment and a tag
/// of its own, so it is neither the Gate services' lock nor the keys'), and counts them: active
/// ones, and all. Endpoints that disable themselves (`disable_webhook_endpoint`) need no lock:
/// they only lower the active count.
async fn lock_and_count_endpoints(
    tx: &impl GenericClient,
    endpoint: &WebhookEndpointRecord,
) -> Result<(usize, usize)> {
    let bytes = endpoint.organization_id.ulid().to_bytes();
    let lock = i64::from_be_bytes(bytes[..8].try_into().unwrap_or_default())
        ^ (0x686f_6f6b_0000 + i64::from(env_code(endpoint.environment))); // "hook"
    execute(tx, "SELECT pg_advisory_xact_lock($1)", &[&lock]).await?;
    let counted = row(
        tx,
        "SELECT count(*) FILTER (WHERE body->>'status' = 'active'), count(*)
         FROM webhook_endpoints WHERE organization_id = $1 AND environment = $2",
        &[
            &ulid_bytes(endpoint.organization_id.ulid()),
            &env_code(endpoint.environment),
        ],
    )
    .await?;
    let count = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(counted.map_or((0, 0), |r| (count(r.get(0)), count(r.get(1)))))
}

#[async_trait]
impl EventStore for PostgresStore {
    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: EventId,
    ) -> Result<Option<EventRecord>> {
        let sql =
            "SELECT body FROM events WHERE organization_id = $1 AND environment = $2 AND id = $3";
        owned_row(self, EVENTS, sql, (org, env, id.ulid())).await
    }

    async fn record_events(&self, events: &[EventRecord]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        insert_events(&tx, &events.iter().collect::<Vec<_>>()).await?;
        tx.commit().await.map_err(db_error)
    }

    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<EventId>,
        count: usize,
    ) -> Result<Vec<EventRecord>> {
        let sql = "SELECT body FROM events
             WHERE organization_id = $1 AND environment = $2 AND ($3::bytea IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4";
        owned_page(
            self,
            EVENTS,
            sql,
            (org, env),
            after.map(|a| a.ulid()),
            count,
        )
        .await
    }

    /// Counted and written in one transaction, under an advisory lock on the organization and
    /// environment that every capped write of an endpoint takes.
    async fn create_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let counts = lock_and_count_endpoints(&tx, endpoint).await?;
        let write = EndpointWrite::check(endpoint, None, counts, caps);
        if write != EndpointWrite::Written {
            return Ok(write);
        }
        write_endpoint(
            &tx,
            "INSERT INTO webhook_endpoints (organization_id, environment, id, body)
             VALUES ($1, $2, $3, $4)",
            endpoint,
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => {
                StoreError::Conflict(format!("webhook endpoint {} exists", endpoint.id))
            }
            other => other,
        })?;
        tx.commit().await.map_err(db_error)?;
        Ok(write)
    }

    async fn get_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
    ) -> Result<Option<WebhookEndpointRecord>> {
        let sql = "SELECT body FROM webhook_endpoints
             WHERE organization_id = $1 AND environment = $2 AND id = $3";
        owned_row(self, WEBHOOK_ENDPOINTS, sql, (org, env, id.ulid())).await
    }

    async fn list_webhook_endpoints(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<WebhookEndpointId>,
        count: usize,
    ) -> Result<Vec<WebhookEndpointRecord>> {
        let sql = "SELECT body FROM webhook_endpoints
             WHERE organization_id = $1 AND environment = $2 AND ($3::bytea IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4";
        let after = after.map(|a| a.ulid());
        owned_page(self, WEBHOOK_ENDPOINTS, sql, (org, env), after, count).await
    }

    async fn update_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let counts = lock_and_count_endpoints(&tx, endpoint).await?;
        let found = row(
            &tx,
            "SELECT body FROM webhook_endpoints
             WHERE organization_id = $1 AND environment = $2 AND id = $3 FOR UPDATE",
            &[
                &ulid_bytes(endpoint.organization_id.ulid()),
                &env_code(endpoint.environment),
                &ulid_bytes(endpoint.id.ulid()),
            ],
        )
        .await?;
        let Some(stored) = decode_opt::<WebhookEndpointRecord>(WEBHOOK_ENDPOINTS, found)? else {
            return Ok(EndpointWrite::Missing);
        };
        let write = EndpointWrite::check(endpoint, Some(&stored), counts, caps);
        if write != EndpointWrite::Written {
            return Ok(write);
        }
        write_endpoint(
            &tx,
            "UPDATE webhook_endpoints SET body = $4
             WHERE organization_id = $1 AND environment = $2 AND id = $3",
            endpoint,
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(write)
    }

    async fn disable_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
        at: Timestamp,
    ) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let key = (ulid_bytes(org.ulid()), env_code(env), ulid_bytes(id.ulid()));
        let found = row(
            &tx,
            "SELECT body FROM webhook_endpoints
             WHERE organization_id = $1 AND environment = $2 AND id = $3 FOR UPDATE",
            &[&key.0, &key.1, &key.2],
        )
        .await?;
        let Some(mut endpoint) = decode_opt::<WebhookEndpointRecord>(WEBHOOK_ENDPOINTS, found)?
        else {
            return Ok(false);
        };
        if endpoint.status == EndpointStatus::Disabled {
            return Ok(false);
        }
        endpoint.status = EndpointStatus::Disabled;
        endpoint.updated_at = at;
        execute(
            &tx,
            "UPDATE webhook_endpoints SET body = $4
             WHERE organization_id = $1 AND environment = $2 AND id = $3",
            &[&key.0, &key.1, &key.2, &json(&endpoint)],
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    /// One transaction; a delivery already stored (by this call or another dispatcher) is left as
    /// it is and not answered.
    async fn create_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<Vec<WebhookDeliveryId>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        // Inserted in key order (two dispatchers fanning out one event cannot wait on each other's
        // rows in opposite orders), answered in the order given.
        let mut created = HashSet::new();
        for d in in_key_order(deliveries) {
            let k = delivery_key(d);
            let new = row(
                &tx,
                "INSERT INTO webhook_deliveries
                     (organization_id, environment, event_id, endpoint_id, id, attempts,
                      next_attempt_at, body)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT DO NOTHING RETURNING 1",
                &[
                    &k.0,
                    &k.1,
                    &k.2,
                    &k.3,
                    &ulid_bytes(d.id.ulid()),
                    &i64::from(d.attempts),
                    &d.next_attempt_at,
                    &json(d),
                ],
            )
            .await?;
            if new.is_some() {
                created.insert(d.id);
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(deliveries
            .iter()
            .map(|d| d.id)
            .filter(|id| created.contains(id))
            .collect())
    }

    /// Each outcome is written only over the stored row its attempt started from (same delivery
    /// id, one attempt fewer): an outcome recorded twice, or one that raced another attempt's,
    /// matches no row.
    async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let mut written: HashSet<DeliveryKey> = HashSet::new();
        for d in in_key_order(deliveries) {
            let k = delivery_key(d);
            let Some(started_from) = d.attempts.checked_sub(1) else {
                continue;
            };
            if written.contains(&k) {
                continue;
            }
            let changed = execute(
                &tx,
                "UPDATE webhook_deliveries SET attempts = $7, next_attempt_at = $8, body = $9
                 WHERE organization_id = $1 AND environment = $2 AND event_id = $3
                   AND endpoint_id = $4 AND id = $5 AND attempts = $6",
                &[
                    &k.0,
                    &k.1,
                    &k.2,
                    &k.3,
                    &ulid_bytes(d.id.ulid()),
                    &i64::from(started_from),
                    &i64::from(d.attempts),
                    &d.next_attempt_at,
                    &json(d),
                ],
            )
            .await?;
            if changed == 1 {
                written.insert(k);
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(written.len())
    }

    async fn defer_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<usize> {
        if deliveries.is_empty() {
            return Ok(0);
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let mut deferred: HashSet<DeliveryKey> = HashSet::new();
        for d in in_key_order(deliveries) {
            let k = delivery_key(d);
            let Some(until) = d.next_attempt_at else {
                continue;
            };
            if deferred.contains(&k) {
                continue;
            }
            let Some(mut stored) = locked_delivery(&tx, &k).await? else {
                continue;
            };
            if stored.next_attempt_at.is_none()
                || stored.id != d.id
                || stored.attempts != d.attempts
            {
                continue;
            }
            reschedule(&tx, &k, &mut stored, until).await?;
            deferred.insert(k);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(deferred.len())
    }

    /// Each claim is written only over the row the due scan read (same attempts, same due time,
    /// compared exactly on the record: the column is rounded to microseconds), under its lock, so
    /// of two dispatchers claiming one delivery exactly one does.
    async fn claim_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
        until: Timestamp,
    ) -> Result<Vec<WebhookDeliveryId>> {
        if deliveries.is_empty() {
            return Ok(Vec::new());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let mut claimed = Vec::new();
        let mut seen: HashSet<DeliveryKey> = HashSet::new();
        for d in in_key_order(deliveries) {
            let k = delivery_key(d);
            if !seen.insert(k.clone()) {
                continue;
            }
            let Some(mut stored) = locked_delivery(&tx, &k).await? else {
                continue;
            };
            if stored.next_attempt_at.is_none()
                || stored.id != d.id
                || stored.attempts != d.attempts
                || stored.next_attempt_at != d.next_attempt_at
            {
                continue;
            }
            reschedule(&tx, &k, &mut stored, until).await?;
            claimed.push(d.id);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(claimed)
    }

    async fn list_event_deliveries(
        &self,
        org: OrgId,
        env: Environment,
        event: EventId,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        let found = rows(
            &self.client().await?,
            "SELECT body FROM webhook_deliveries
             WHERE organization_id = $1 AND environment = $2 AND event_id = $3
             ORDER BY endpoint_id",
            &[
                &ulid_bytes(org.ulid()),
                &env_code(env),
                &ulid_bytes(event.ulid()),
            ],
        )
        .await?;
        decode_all(WEBHOOK_DELIVERIES, &found)
    }

    async fn due_webhook_deliveries(
        &self,
        before: Timestamp,
        count: usize,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        let found = rows(
            &self.client().await?,
            "SELECT body FROM webhook_deliveries
             WHERE next_attempt_at IS NOT NULL AND next_attempt_at < $1
             ORDER BY next_attempt_at, organization_id, environment, event_id, endpoint_id
             LIMIT $2",
            &[&before, &limit(count)],
        )
        .await?;
        decode_all(WEBHOOK_DELIVERIES, &found)
    }
}
