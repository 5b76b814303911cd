//! Events, webhook endpoints and deliveries on ScyllaDB (`store/cql/005_events.cql`,
//! `009_webhooks.cql`). A save of sessions writes its events in its own logged batch
//! ([`batch_events`]). A delivery's changes are read-check-writes on its `rev`; its due-index
//! row for the new time is written before the change and the old one dropped after it, so a
//! change cut short, or one that lost its race, leaves a stale due row (dropped by the next due
//! scan) but never loses one.

use std::collections::HashSet;

use async_trait::async_trait;
use schemas::EventId;
use schemas::credential::Environment;
use schemas::ids::{OrgId, WebhookDeliveryId, WebhookEndpointId};
use schemas::time::Timestamp;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::{CqlTimestamp, CqlValue};

use super::{CONTENDED_RETRIES, ScyllaStore, corrupt, encode, env_of, env_text, errors, rows_of};
use crate::{
    EndpointCaps, EndpointStatus, EndpointWrite, EventRecord, EventStore, Result, StoreError,
    WebhookDeliveryRecord, WebhookEndpointRecord,
};

const EVENTS: &str = "events";
const WEBHOOK_ENDPOINTS: &str = "webhook_endpoints";
const WEBHOOK_DELIVERIES: &str = "webhook_deliveries";
const DUE: &str = "webhook_deliveries_due";

/// The due index's partitions: a delivery's is its event id's ULID modulo this.
const DUE_BUCKETS: u8 = 16;

const INSERT: &str =
    "INSERT INTO events (organization_id, environment, id, body) VALUES (?, ?, ?, ?)";
const READ: &str =
    "SELECT body FROM events WHERE organization_id = ? AND environment = ? AND id = ?";
const LIST: &str = "SELECT body FROM events WHERE organization_id = ? AND environment = ?";
const LIST_AFTER: &str =
    "SELECT body FROM events WHERE organization_id = ? AND environment = ? AND id < ?";
const CREATE_ENDPOINT: &str = "INSERT INTO webhook_endpoints \
     (organization_id, environment, id, rev, body) VALUES (?, ?, ?, 0, ?) IF NOT EXISTS";
const READ_ENDPOINT: &str = "SELECT rev, body FROM webhook_endpoints \
     WHERE organization_id = ? AND environment = ? AND id = ?";
const UPDATE_ENDPOINT: &str = "UPDATE webhook_endpoints SET rev = ?, body = ? \
     WHERE organization_id = ? AND environment = ? AND id = ? IF rev = ?";
const LIST_ENDPOINTS: &str =
    "SELECT body FROM webhook_endpoints WHERE organization_id = ? AND environment = ?";
const LIST_ENDPOINTS_AFTER: &str =
    "SELECT body FROM webhook_endpoints WHERE organization_id = ? AND environment = ? AND id < ?";
const CREATE_DELIVERY: &str = "INSERT INTO webhook_deliveries \
     (organization_id, environment, event_id, endpoint_id, rev, body) \
     VALUES (?, ?, ?, ?, 0, ?) IF NOT EXISTS";
const READ_DELIVERY: &str = "SELECT rev, body FROM webhook_deliveries \
     WHERE organization_id = ? AND environment = ? AND event_id = ? AND endpoint_id = ?";
const UPDATE_DELIVERY: &str = "UPDATE webhook_deliveries SET rev = ?, body = ? \
     WHERE organization_id = ? AND environment = ? AND event_id = ? AND endpoint_id = ? IF rev = ?";
const EVENT_DELIVERIES: &str = "SELECT body FROM webhook_deliveries \
     WHERE organization_id = ? AND environment = ? AND event_id = ?";
const INDEX_DUE: &str = "INSERT INTO webhook_deliveries_due \
     (bucket, due_at, organization_id, environment, event_id, endpoint_id) \
     VALUES (?, ?, ?, ?, ?, ?)";
const UNINDEX_DUE: &str = "DELETE FROM webhook_deliveries_due WHERE bucket = ? AND due_at = ? \
     AND organization_id = ? AND environment = ? AND event_id = ? AND endpoint_id = ?";
const DUE_SCAN: &str = "SELECT due_at, organization_id, environment, event_id, endpoint_id \
     FROM webhook_deliveries_due WHERE bucket = ? AND due_at < ?";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[
    INSERT,
    READ,
    LIST,
    LIST_AFTER,
    CREATE_ENDPOINT,
    READ_ENDPOINT,
    UPDATE_ENDPOINT,
    LIST_ENDPOINTS,
    LIST_ENDPOINTS_AFTER,
    CREATE_DELIVERY,
    READ_DELIVERY,
    UPDATE_DELIVERY,
    EVENT_DELIVERIES,
    INDEX_DUE,
    UNINDEX_DUE,
    DUE_SCAN,
];

/// Appends the insert (or replacement, by id) of each event to `batch`.
pub(super) fn batch_events(
    events: &[EventRecord],
    batch: &mut Batch,
    values: &mut Vec<Vec<Option<CqlValue>>>,
) {
    for event in events {
        batch.append_statement(INSERT);
        values.push(vec![
            Some(CqlValue::Text(event.organization_id.to_string())),
            Some(CqlValue::Text(env_text(event.environment).to_owned())),
            Some(CqlValue::Text(event.id.to_string())),
            Some(CqlValue::Text(encode(event))),
        ]);
    }
}

/// A delivery's primary key, as its columns.
type DeliveryKey = (String, &'static str, String, String);

fn delivery_key(d: &WebhookDeliveryRecord) -> DeliveryKey {
    (
        d.organization_id.to_string(),
        env_text(d.environment),
        d.event_id.to_string(),
        d.endpoint_id.to_string(),
    )
}

fn bucket(event: EventId) -> i8 {
    (event.ulid().0 % u128::from(DUE_BUCKETS)) as i8
}

fn millis(at: Timestamp) -> CqlTimestamp {
    CqlTimestamp(at.timestamp_millis())
}

impl ScyllaStore {
    /// Writes (or drops) the due row of delivery `d` at `due`.
    async fn due_row(
        &self,
        d: &WebhookDeliveryRecord,
        due: Timestamp,
        present: bool,
    ) -> Result<()> {
        let (org, env, event, endpoint) = delivery_key(d);
        let values = (bucket(d.event_id), millis(due), org, env, event, endpoint);
        let cql = if present { INDEX_DUE } else { UNINDEX_DUE };
        self.execute(cql, values).await.map(drop)
    }

    async fn read_delivery(
        &self,
        key: &DeliveryKey,
    ) -> Result<Option<(i64, WebhookDeliveryRecord)>> {
        let result = self.execute(READ_DELIVERY, key.clone()).await?;
        Self::revision(WEBHOOK_DELIVERIES, result)
    }

    /// Reads the delivery at `key`, asks `change` for its new row (`None`: leave it), and writes
    /// it if no other writer came between, moving its due row. Whether it wrote.
    async fn change_delivery(
        &self,
        key: &DeliveryKey,
        change: impl Fn(&WebhookDeliveryRecord) -> Option<WebhookDeliveryRecord>,
    ) -> Result<bool> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, stored)) = self.read_delivery(key).await? else {
                return Ok(false);
            };
            let Some(new) = change(&stored) else {
                return Ok(false);
            };
            let moved = new.next_attempt_at != stored.next_attempt_at;
            if let Some(due) = new.next_attempt_at.filter(|_| moved) {
                self.due_row(&new, due, true).await?;
            }
            let (org, env, event, endpoint) = key.clone();
            let applied = self
                .applied(
                    UPDATE_DELIVERY,
                    (rev + 1, encode(&new), org, env, event, endpoint, rev),
                )
                .await?;
            // Applied: the old due row goes. Not applied: the new one stays, for the writer
            // that came first may have written the same row (a claim to the same `until`); the
            // due scan drops it if it matches no delivery.
            if applied {
                if let Some(due) = stored.next_attempt_at.filter(|_| moved) {
                    self.due_row(&stored, due, false).await?;
                }
                return Ok(true);
            }
        }
        Err(StoreError::Unavailable(
            "ScyllaDB: a webhook delivery kept changing under its update".into(),
        ))
    }

    async fn change_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
        change: impl Fn(&WebhookEndpointRecord) -> Option<WebhookEndpointRecord>,
    ) -> Result<bool> {
        let key = (org.to_string(), env_text(env), id.to_string());
        for _ in 0..CONTENDED_RETRIES {
            let result = self.execute(READ_ENDPOINT, key.clone()).await?;
            let Some((rev, stored)) =
                Self::revision::<WebhookEndpointRecord>(WEBHOOK_ENDPOINTS, result)?
            else {
                return Ok(false);
            };
            let Some(new) = change(&stored) else {
                return Ok(false);
            };
            let (org, env, id) = key.clone();
            if self
                .applied(UPDATE_ENDPOINT, (rev + 1, encode(&new), org, env, id, rev))
                .await?
            {
                return Ok(true);
            }
        }
        Err(StoreError::Unavailable(
            "ScyllaDB: a webhook endpoint kept changing under its update".into(),
        ))
    }
}

#[async_trait]
impl EventStore for ScyllaStore {
    async fn get_event(
        &self,
        org: OrgId,
        env: Environment,
        id: EventId,
    ) -> Result<Option<EventRecord>> {
        let result = self
            .execute(READ, (org.to_string(), env_text(env), id.to_string()))
            .await?;
        Self::body(EVENTS, result)
    }

    async fn record_events(&self, events: &[EventRecord]) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::new(BatchType::Logged);
        let mut values = Vec::new();
        batch_events(events, &mut batch, &mut values);
        self.session()
            .await?
            .batch(&batch, values)
            .await
            .map_err(errors::execution)
            .map(drop)
    }

    async fn list_events(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<EventId>,
        count: usize,
    ) -> Result<Vec<EventRecord>> {
        let (org, env) = (org.to_string(), env_text(env));
        match after {
            None => self.first_bodies(EVENTS, LIST, (org, env), count).await,
            Some(after) => {
                self.first_bodies(EVENTS, LIST_AFTER, (org, env, after.to_string()), count)
                    .await
            }
        }
    }

    /// A place under the caps first, then the row by IF NOT EXISTS; the place is given back if
    /// the row is not written.
    async fn create_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        let owner = (endpoint.organization_id, endpoint.environment);
        let placed = self.take_endpoint_place(owner, caps).await?;
        if placed != EndpointWrite::Written {
            return Ok(placed);
        }
        let created = self
            .applied(
                CREATE_ENDPOINT,
                (
                    endpoint.organization_id.to_string(),
                    env_text(endpoint.environment),
                    endpoint.id.to_string(),
                    encode(endpoint),
                ),
            )
            .await?;
        if created {
            Ok(EndpointWrite::Written)
        } else {
            self.give_back_endpoint_places(owner, (1, 1)).await;
            Err(StoreError::Conflict(format!(
                "webhook endpoint {} exists",
                endpoint.id
            )))
        }
    }

    async fn get_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
    ) -> Result<Option<WebhookEndpointRecord>> {
        let result = self
            .execute(
                READ_ENDPOINT,
                (org.to_string(), env_text(env), id.to_string()),
            )
            .await?;
        Ok(Self::revision(WEBHOOK_ENDPOINTS, result)?.map(|(_, endpoint)| endpoint))
    }

    async fn list_webhook_endpoints(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<WebhookEndpointId>,
        count: usize,
    ) -> Result<Vec<WebhookEndpointRecord>> {
        let (org, env) = (org.to_string(), env_text(env));
        match after {
            None => {
                self.first_bodies(WEBHOOK_ENDPOINTS, LIST_ENDPOINTS, (org, env), count)
                    .await
            }
            Some(after) => {
                self.first_bodies(
                    WEBHOOK_ENDPOINTS,
                    LIST_ENDPOINTS_AFTER,
                    (org, env, after.to_string()),
                    count,
                )
                .await
            }
        }
    }

    /// Enabling takes an active place before the conditional write (given back if the write
    /// does not apply); disabling gives one back after it.
    async fn update_webhook_endpoint(
        &self,
        endpoint: &WebhookEndpointRecord,
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        let owner = (endpoint.organization_id, endpoint.environment);
        let key = (
            endpoint.organization_id.to_string(),
            env_text(endpoint.environment),
            endpoint.id.to_string(),
        );
        let active = |e: &WebhookEndpointRecord| e.status == EndpointStatus::Active;
        for _ in 0..CONTENDED_RETRIES {
            let result = self.execute(READ_ENDPOINT, key.clone()).await?;
            let Some((rev, stored)) =
                Self::revision::<WebhookEndpointRecord>(WEBHOOK_ENDPOINTS, result)?
            else {
                return Ok(EndpointWrite::Missing);
            };
            let enabling = active(endpoint) && !active(&stored);
            if enabling {
                let placed = self.take_active_place(owner, caps).await?;
                if placed != EndpointWrite::Written {
                    return Ok(placed);
                }
            }
            let (org, env, id) = key.clone();
            if self
                .applied(
                    UPDATE_ENDPOINT,
                    (rev + 1, encode(endpoint), org, env, id, rev),
                )
                .await?
            {
                if active(&stored) && !active(endpoint) {
                    self.give_back_endpoint_places(owner, (1, 0)).await;
                }
                return Ok(EndpointWrite::Written);
            }
            if enabling {
                self.give_back_endpoint_places(owner, (1, 0)).await;
            }
        }
        Err(StoreError::Unavailable(
            "ScyllaDB: a webhook endpoint kept changing under its update".into(),
        ))
    }

    async fn disable_webhook_endpoint(
        &self,
        org: OrgId,
        env: Environment,
        id: WebhookEndpointId,
        at: Timestamp,
    ) -> Result<bool> {
        let disabled = self
            .change_endpoint(org, env, id, |stored| {
                if stored.status == EndpointStatus::Disabled {
                    return None;
                }
                let mut disabled = stored.clone();
                disabled.status = EndpointStatus::Disabled;
                disabled.updated_at = at;
                Some(disabled)
            })
            .await?;
        if disabled {
            self.give_back_endpoint_places((org, env), (1, 0)).await;
        }
        Ok(disabled)
    }

    /// Each delivery by IF NOT EXISTS, its due row written first; one already stored is left as
    /// it is (and the due row made for it dropped, unless it is that delivery's own).
    async fn create_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<Vec<WebhookDeliveryId>> {
        let mut created = Vec::new();
        let mut seen = HashSet::new();
        for d in deliveries {
            let key = delivery_key(d);
            if !seen.insert(key.clone()) {
                continue;
            }
            if let Some(due) = d.next_attempt_at {
                self.due_row(d, due, true).await?;
            }
            let (org, env, event, endpoint) = key.clone();
            if self
                .applied(CREATE_DELIVERY, (org, env, event, endpoint, encode(d)))
                .await?
            {
                created.push(d.id);
                continue;
            }
            if let Some(due) = d.next_attempt_at {
                let existing = self.read_delivery(&key).await?;
                let its_own = existing.is_some_and(|(_, e)| e.next_attempt_at == Some(due));
                if !its_own {
                    self.due_row(d, due, false).await?;
                }
            }
        }
        Ok(created)
    }

    /// Each outcome is written only over the stored row its attempt started from (same delivery
    /// id, one attempt fewer).
    async fn record_webhook_attempts(&self, deliveries: &[WebhookDeliveryRecord]) -> Result<usize> {
        let mut written = HashSet::new();
        for d in deliveries {
            let key = delivery_key(d);
            let Some(started_from) = d.attempts.checked_sub(1) else {
                continue;
            };
            if written.contains(&key) {
                continue;
            }
            let wrote = self
                .change_delivery(&key, |stored| {
                    (stored.id == d.id && stored.attempts == started_from).then(|| d.clone())
                })
                .await?;
            if wrote {
                written.insert(key);
            }
        }
        Ok(written.len())
    }

    async fn defer_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
    ) -> Result<usize> {
        let mut deferred = HashSet::new();
        for d in deliveries {
            let key = delivery_key(d);
            let Some(until) = d.next_attempt_at else {
                continue;
            };
            if deferred.contains(&key) {
                continue;
            }
            let wrote = self
                .change_delivery(&key, |stored| {
                    let current = stored.next_attempt_at.is_some()
                        && stored.id == d.id
                        && stored.attempts == d.attempts;
                    current.then(|| WebhookDeliveryRecord {
                        next_attempt_at: Some(until),
                        ..stored.clone()
                    })
                })
                .await?;
            if wrote {
                deferred.insert(key);
            }
        }
        Ok(deferred.len())
    }

    /// Each claim is written only over the row the due scan read (same attempts, same due
    /// time), by a lightweight transaction on its revision: of two dispatchers claiming one
    /// delivery, exactly one does.
    async fn claim_webhook_deliveries(
        &self,
        deliveries: &[WebhookDeliveryRecord],
        until: Timestamp,
    ) -> Result<Vec<WebhookDeliveryId>> {
        let mut claimed = Vec::new();
        let mut seen = HashSet::new();
        for d in deliveries {
            let key = delivery_key(d);
            if !seen.insert(key.clone()) {
                continue;
            }
            let wrote = self
                .change_delivery(&key, |stored| {
                    let current = stored.next_attempt_at.is_some()
                        && stored.id == d.id
                        && stored.attempts == d.attempts
                        && stored.next_attempt_at == d.next_attempt_at;
                    current.then(|| WebhookDeliveryRecord {
                        next_attempt_at: Some(until),
                        ..stored.clone()
                    })
                })
                .await?;
            if wrote {
                claimed.push(d.id);
            }
        }
        Ok(claimed)
    }

    async fn list_event_deliveries(
        &self,
        org: OrgId,
        env: Environment,
        event: EventId,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        // One row per endpoint of the organization: capped, so one page holds them all.
        let result = self
            .execute(
                EVENT_DELIVERIES,
                (org.to_string(), env_text(env), event.to_string()),
            )
            .await?;
        let mut found: Vec<WebhookDeliveryRecord> = Self::bodies(WEBHOOK_DELIVERIES, result)?;
        found.sort_by_key(|d| d.endpoint_id.to_string());
        Ok(found)
    }

    /// Each bucket's earliest, merged earliest first; each delivery read by key, and a due row
    /// that no longer matches its delivery dropped.
    async fn due_webhook_deliveries(
        &self,
        before: Timestamp,
        count: usize,
    ) -> Result<Vec<WebhookDeliveryRecord>> {
        type DueRow = (CqlTimestamp, String, String, String, String);
        let mut due: Vec<DueRow> = Vec::new();
        for b in 0..DUE_BUCKETS {
            let rows = self
                .first_rows(DUE_SCAN, (b as i8, millis(before)), count, |page| {
                    let rows = rows_of(DUE, page)?;
                    let found = rows.rows::<DueRow>().map_err(|e| corrupt(DUE, &e))?;
                    found.map(|row| row.map_err(|e| corrupt(DUE, &e))).collect()
                })
                .await?;
            due.extend(rows);
        }
        due.sort_by(|a, b| (a.0.0, &a.1, &a.2, &a.3, &a.4).cmp(&(b.0.0, &b.1, &b.2, &b.3, &b.4)));
        due.truncate(count);
        let mut found = Vec::new();
        for (at, org, env, event, endpoint) in due {
            let key = (org, env_text(env_of(DUE, &env)?), event, endpoint);
            match self.read_delivery(&key).await? {
                Some((_, d)) if d.next_attempt_at.map(millis) == Some(at) => found.push(d),
                _ => {
                    let (org, env, event, endpoint) = key;
                    let bucket = event
                        .parse::<EventId>()
                        .map(bucket)
                        .map_err(|_| corrupt(DUE, &"event id"))?;
                    self.execute(UNINDEX_DUE, (bucket, at, org, env, event, endpoint))
                        .await?;
                }
            }
        }
        Ok(found)
    }
}
