//! The dispatcher's consumer loop: reads `events.v1`, fans each event out to its endpoints
//! ([`crate::fan_out`]), stores the deliveries, commits its position, and hands the new
//! deliveries to [`crate::scheduling`] for their first attempt.
//!
//! Nothing is lost and nothing doubled by a crash: the deliveries are stored before the
//! position is committed, so a crash redelivers the events, and a second fan-out of an event
//! creates nothing (the store keeps one delivery per event and endpoint).
//!
//! Dispatchers are members of one consumer group ([`log::LogBackend::member`]), so replicas on
//! Kafka share the partitions of `events.v1`. A poll's events are stored and committed before
//! the next poll, and a partition taken from this replica is handed over only at that next
//! poll: its next owner starts after everything this one handled. Nothing is kept in memory
//! per partition, so a rebalance needs nothing more here. Before its deliveries
//! are stored, the event itself is made sure of in the store (the processor publishes an event
//! before it stores it), so a retry after a restart can read what to send.
//!
//! A record it cannot read is never passed over silently, nor misread
//! (docs/architecture.md#conv-consumer-failures): one of a newer schema than this build's, of an
//! event type it does not know, or not an event at all, goes to `events.dead.v1` with its reason
//! ([`schemas::events::EventDeadLetter`]), is counted, and is committed past like any delivered
//! event, so the events behind it go on. A newer build can deliver it once the fleet is upgraded,
//! by appending it again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use log::retry::{Retried, retry};
use log::{Group, Log, Record};
use schemas::OrgId;
use schemas::credential::Environment;
use schemas::events::{EventDeadReason, LoggedEvent};
use store::{EventRecord, Store, WebhookEndpointRecord};
use tokio_util::sync::CancellationToken;

use crate::scheduling::{Dispatch, LEASE, QUEUED_MAX};
use crate::telemetry;
use crate::{Failure, Topics};

/// The consumer group of the dispatcher role.
pub const GROUP: &str = "dispatcher";
/// The most events one poll takes: their deliveries are stored in one write.
const POLL_EVENTS: usize = 512;
/// How long a poll waits for events before the loop looks at shutdown again.
const POLL_WAIT: Duration = Duration::from_millis(500);
/// The most endpoints read per page of an organization's endpoints.
const ENDPOINT_PAGE: usize = 500;

/// Consumes `events` until `shutdown`.
pub async fn consume(
    dispatch: &Arc<Dispatch>,
    log: &Log,
    topics: &Topics,
    shutdown: &CancellationToken,
) {
    let group = Group::from_static(GROUP);
    let events = &topics.events;
    let opened = retry(
        "opening the events consumer",
        telemetry::retried,
        shutdown,
        &mut (log, &group, events),
        |(log, group, events)| {
            Box::pin(async move { Ok::<_, Failure>(log.member(group, events).await?) })
        },
    )
    .await;
    let mut consumer = match opened {
        Retried::Done(consumer) => consumer,
        Retried::Failed(e) => {
            tracing::error!(error = %e, "dispatcher: cannot consume the events; no webhook is fanned out");
            return;
        }
        Retried::ShuttingDown => return,
    };
    loop {
        let polled = tokio::select! {
            _ = shutdown.cancelled() => return,
            polled = consumer.poll(POLL_EVENTS, POLL_WAIT) => polled,
        };
        let records = match polled {
            Ok(records) => records,
            Err(e) => {
                telemetry::retried("polling events", &e, 1);
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(POLL_WAIT) => {}
                }
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        if !handle(dispatch, log, topics, &records, shutdown).await {
            return;
        }
        let positions: Vec<log::Position> = records.iter().map(Record::position).collect();
        let committed = retry(
            "committing the events position",
            telemetry::retried,
            shutdown,
            &mut (&mut *consumer, &positions),
            |(consumer, positions)| {
                Box::pin(async move { Ok::<_, Failure>(consumer.commit(positions).await?) })
            },
        )
        .await;
        if !matches!(committed, Retried::Done(())) {
            return;
        }
    }
}

/// Fans a poll's events out and stores their deliveries, after dead-lettering the records it
/// cannot read; false if shutdown came first.
async fn handle(
    dispatch: &Arc<Dispatch>,
    log: &Log,
    topics: &Topics,
    records: &[Record],
    shutdown: &CancellationToken,
) -> bool {
    let mut events = Vec::with_capacity(records.len());
    for record in records {
        match LoggedEvent::read(&record.payload) {
            Ok(logged) => events.push(logged),
            Err((reason, message)) => {
                if !dead_letter(log, topics, record, reason, &message, shutdown).await {
                    return false;
                }
            }
        }
    }
    let now = schemas::time::now();
    let mut endpoints: HashMap<(OrgId, Environment), Vec<WebhookEndpointRecord>> = HashMap::new();
    let mut deliveries = Vec::new();
    let mut delivered = Vec::new();
    for logged in &events {
        let tenancy = (logged.organization_id, logged.environment);
        if let std::collections::hash_map::Entry::Vacant(slot) = endpoints.entry(tenancy) {
            match all_endpoints(&dispatch.store, tenancy, shutdown).await {
                Retried::Done(found) => slot.insert(found),
                Retried::Failed(e) => {
                    telemetry::unreadable(&format!("reading the endpoints of {}: {e}", tenancy.0));
                    slot.insert(Vec::new())
                }
                Retried::ShuttingDown => return false,
            };
        }
        let fanned = crate::fan_out::fan_out(logged, &endpoints[&tenancy], now);
        if !fanned.is_empty() {
            delivered.push(EventRecord::of_logged(logged));
            deliveries.extend(fanned);
        }
    }
    if deliveries.is_empty() {
        return true;
    }
    match keep_events(&dispatch.store, &delivered, shutdown).await {
        Retried::Done(()) => {}
        Retried::Failed(e) => {
            telemetry::unreadable(&format!("keeping the events: {e}"));
            return true;
        }
        Retried::ShuttingDown => return false,
    }
    // Those handed over in memory are due in the store only a lease later (see scheduling):
    // as many as there is room for, overall and per endpoint. The others are due now, for the
    // due scan.
    let mut room = QUEUED_MAX.saturating_sub(dispatch.in_flight.running());
    let lease = schemas::time::now() + chrono::TimeDelta::from_std(LEASE).expect("a short lease");
    let mut endpoint_room: HashMap<_, usize> = HashMap::new();
    let mut handed = Vec::with_capacity(deliveries.len());
    for delivery in deliveries.iter_mut() {
        let endpoint = delivery.endpoint_id;
        let fits = endpoint_room
            .entry(endpoint)
            .or_insert_with(|| dispatch.room(endpoint));
        let hand = room > 0 && *fits > 0;
        if hand {
            delivery.next_attempt_at = Some(lease);
            room -= 1;
            *fits -= 1;
        }
        handed.push(hand);
    }
    // A delivery the due scan reads from now on is judged against this instant (see
    // `InFlight::claim`), so a lease that ran out before the hand-off cannot start it twice.
    let read_at = std::time::Instant::now();
    let created = retry(
        "creating deliveries",
        telemetry::retried,
        shutdown,
        &mut (&dispatch.store, &deliveries),
        |(store, deliveries)| {
            Box::pin(
                async move { Ok::<_, Failure>(store.create_webhook_deliveries(deliveries).await?) },
            )
        },
    )
    .await;
    let created = match created {
        Retried::Done(created) => created,
        Retried::Failed(e) => {
            telemetry::unreadable(&format!("creating deliveries: {e}"));
            return true;
        }
        Retried::ShuttingDown => return false,
    };
    telemetry::created(created.len());
    let created: std::collections::HashSet<_> = created.into_iter().collect();
    let bodies: HashMap<schemas::EventId, Arc<Vec<u8>>> = delivered
        .iter()
        .map(|e| (e.id, Arc::new(sender::sending::body(e))))
        .collect();
    // The due scan may have filled an endpoint's places meanwhile: what did not fit is made
    // due now, not at the end of its lease.
    let mut unstarted = Vec::new();
    for (mut delivery, hand) in deliveries.into_iter().zip(handed) {
        if hand && created.contains(&delivery.id) {
            let body = bodies.get(&delivery.event_id).cloned();
            if !dispatch.start(delivery.clone(), body, Some(read_at)) {
                delivery.next_attempt_at = Some(schemas::time::now());
                unstarted.push(delivery);
            }
        }
    }
    if !unstarted.is_empty()
        && let Err(e) = dispatch.store.defer_webhook_deliveries(&unstarted).await
    {
        // They stay due at the end of their lease.
        telemetry::retried("making deliveries due", &e, 1);
    }
    true
}

/// Appends the dead letter of `record` to `events.dead.v1`, retrying while the log is
/// unavailable, and counts it; false if shutdown came first (nothing may be committed then).
async fn dead_letter(
    log: &Log,
    topics: &Topics,
    record: &Record,
    reason: EventDeadReason,
    message: &str,
    shutdown: &CancellationToken,
) -> bool {
    match log::dead_letter::append(
        log,
        (&topics.events, &topics.dead),
        record,
        log::dead_letter::Cause { reason, message },
        telemetry::retried,
        shutdown,
    )
    .await
    {
        Retried::Done(()) => {
            telemetry::dead_lettered(reason, record.partition, record.offset, message);
            true
        }
        Retried::Failed(e) => {
            // Not transient, and not its size: logged, and the record is still not allowed to
            // stall the events behind it.
            telemetry::unreadable(&format!(
                "dead-lettering the record at {}/{}: {e}",
                record.partition, record.offset
            ));
            true
        }
        Retried::ShuttingDown => false,
    }
}

/// Every endpoint of a tenancy, page by page.
async fn all_endpoints(
    store: &Store,
    (org, env): (OrgId, Environment),
    shutdown: &CancellationToken,
) -> Retried<Vec<WebhookEndpointRecord>, Failure> {
    retry(
        "reading endpoints",
        telemetry::retried,
        shutdown,
        &mut (store,),
        |(store,)| {
            Box::pin(async move {
                let mut all = Vec::new();
                loop {
                    let after = all.last().map(|e: &WebhookEndpointRecord| e.id);
                    let page = store
                        .list_webhook_endpoints(org, env, after, ENDPOINT_PAGE)
                        .await?;
                    let full = page.len() == ENDPOINT_PAGE;
                    all.extend(page);
                    if !full {
                        return Ok::<_, Failure>(all);
                    }
                }
            })
        },
    )
    .await
}

/// Stores the events the store does not have yet (published but not yet stored, or stored by a
/// processor that crashed before it could), so every delivery's event can be read back.
async fn keep_events(
    store: &Store,
    events: &[EventRecord],
    shutdown: &CancellationToken,
) -> Retried<(), Failure> {
    retry(
        "keeping events",
        telemetry::retried,
        shutdown,
        &mut (store, events),
        |(store, events)| {
            Box::pin(async move {
                let mut missing = Vec::new();
                for event in events.iter() {
                    let stored = store
                        .get_event(event.organization_id, event.environment, event.id)
                        .await?;
                    if stored.is_none() {
                        missing.push(event.clone());
                    }
                }
                if !missing.is_empty() {
                    store.record_events(&missing).await?;
                }
                Ok::<_, Failure>(())
            })
        },
    )
    .await
}
