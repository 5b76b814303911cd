//! The processor's consumer loop (DESIGN.md "Shape"; D10): reads `collect.batches.v1` in order
//! per session, folds each batch into the session's state, decides, and stores the session with
//! its new decision, then commits its position in the log. The log delivers at least once: a
//! redelivered batch is recognised by its number and skipped, so a crash between storing and
//! committing costs a repeat, never a lost or doubled effect. A record that cannot be read is
//! logged, counted and skipped; a store or log failure is retried with backoff and never
//! skipped.

use std::time::{Duration, Instant};

use bus::{Group, Log, LogConsumer, Record, Topic};
use schemas::DecisionId;
use schemas::collect::BatchRecord;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use store::{DecisionRecord, SessionRecord, Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::{Batch, ServerContext, SessionObservations};

/// The consumer group of the processor role.
pub const GROUP: &str = "processor";

/// What the processor keeps of a session between batches (`SessionRecord::state`).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct SessionState {
    observations: SessionObservations,
    context: ServerContext,
    /// The SDK asked for the handoff: the decision is final from then on.
    final_requested: bool,
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    /// Worth retrying: the store or the log did not answer.
    #[error("transient: {0}")]
    Transient(String),
    /// The record can never be processed.
    #[error("unreadable record: {0}")]
    Unreadable(String),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(d) => Failure::Transient(d),
            other => Failure::Transient(other.to_string()),
        }
    }
}

/// Runs until `shutdown` is cancelled, consuming every partition of `topic`.
pub async fn run(store: Store, log: Log, topic: Topic, shutdown: CancellationToken) {
    let group = Group::from_static(GROUP);
    let mut consumer = loop {
        match log.consumer_of_all(&group, &topic).await {
            Ok(c) => break c,
            Err(e) => {
                tracing::error!(error = %e, "processor: opening the consumer; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    while !shutdown.is_cancelled() {
        let records = tokio::select! {
            _ = shutdown.cancelled() => return,
            polled = consumer.poll(256, Duration::from_millis(500)) => polled,
        };
        let records = match records {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "processor: polling the log; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if records.is_empty() {
            continue;
        }
        tracing::debug!(records = records.len(), "processor: polled");
        for record in &records {
            process_with_retry(&store, record, &shutdown).await;
            if shutdown.is_cancelled() {
                return;
            }
        }
        commit(&mut *consumer, &records, &shutdown).await;
    }
}

async fn process_with_retry(store: &Store, record: &Record, shutdown: &CancellationToken) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match process(store, &record.payload).await {
            Ok(()) => return,
            Err(Failure::Unreadable(why)) => {
                tracing::error!(partition = record.partition, offset = record.offset, %why, "processor: skipping an unreadable record");
                return;
            }
            Err(Failure::Transient(why)) => {
                tracing::warn!(%why, "processor: store unavailable; retrying the record");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

async fn commit(consumer: &mut dyn LogConsumer, records: &[Record], shutdown: &CancellationToken) {
    let positions: Vec<_> = records.iter().map(Record::position).collect();
    while let Err(e) = consumer.commit(&positions).await {
        tracing::warn!(error = %e, "processor: committing; retrying");
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
    }
}

/// Folds one log record into its session and stores the new decision.
async fn process(store: &Store, payload: &[u8]) -> Result<(), Failure> {
    let started = Instant::now();
    let batch: BatchRecord =
        serde_json::from_slice(payload).map_err(|e| Failure::Unreadable(e.to_string()))?;
    let now = schemas::time::now();
    let mut session = match store
        .get_session(batch.organization_id, batch.environment, batch.session_id)
        .await?
    {
        Some(s) => s,
        None => new_session(store, &batch).await?,
    };
    // Numbers from 1 are the SDK's batches, delivered at least once; 0 marks server-made
    // records, whose effects are idempotent.
    if batch.seq > 0 && session.processed_seqs.contains(&batch.seq) {
        return Ok(());
    }
    let mut state: SessionState = serde_json::from_value(session.state.clone()).unwrap_or_default();
    match batch.observations.get("kind").and_then(Value::as_str) {
        Some("network_check") => {
            state.context.network_check_consistent = batch
                .observations
                .get("consistent")
                .and_then(Value::as_bool);
        }
        Some("results") => state.final_requested = true,
        _ => match Batch::from_value(batch.observations.clone()) {
            Ok(observed) => state.observations.record(observed),
            Err(e) => {
                return Err(Failure::Unreadable(format!(
                    "batch {} of {}: {e}",
                    batch.seq, batch.session_id
                )));
            }
        },
    }
    if state.context.request.ip.is_none() {
        state.context.request = crate::RequestContext {
            ip: Some(batch.request.ip.clone()),
            user_agent: Some(batch.request.user_agent.clone()),
            header_names: batch.request.header_names.clone(),
            url: Some(batch.request.url.clone()),
        };
    }
    if let Some(collect) = store.get_collect_session(batch.session_id).await? {
        state.context.ping_arrivals = collect.pings.iter().filter_map(|p| p.arrived_at).collect();
        state.final_requested |= collect.results_at.is_some();
    }

    let mut decision = crate::evaluate(&state.observations, &state.context);
    if state.final_requested {
        decision = decision.finalize();
    }
    let id = DecisionId::generate();
    let mut decision_json =
        serde_json::to_value(&decision).map_err(|e| Failure::Unreadable(e.to_string()))?;
    if let Value::Object(map) = &mut decision_json {
        map.insert("event_id".into(), json!(id));
        map.insert("evaluated_at".into(), json!(schemas::time::format(&now)));
        map.insert(
            "evaluation_duration_ms".into(),
            json!(started.elapsed().as_secs_f64() * 1000.0),
        );
        map.insert("is_provisional".into(), json!(!state.final_requested));
    }
    if batch.seq > 0 {
        session.processed_seqs.push(batch.seq);
    }
    session.updated_at = now;
    session.state = serde_json::to_value(&state).map_err(|e| Failure::Unreadable(e.to_string()))?;
    session.latest_decision = Some(decision_json.clone());
    let record = DecisionRecord {
        session_id: batch.session_id,
        id,
        evaluated_at: now,
        decision: decision_json,
    };
    store.save_session(&session, Some(&record)).await?;
    tracing::debug!(session = %batch.session_id, seq = batch.seq, verdict = ?decision.verdict, status = ?decision.decision_status, "processor: decided");
    Ok(())
}

async fn new_session(store: &Store, batch: &BatchRecord) -> Result<SessionRecord, Failure> {
    let collect = store.get_collect_session(batch.session_id).await?;
    Ok(SessionRecord {
        id: batch.session_id,
        organization_id: batch.organization_id,
        environment: batch.environment,
        visitor_id: None,
        opened_at: collect
            .as_ref()
            .map(|c| c.opened_at)
            .unwrap_or(batch.received_at),
        updated_at: batch.received_at,
        page_url: collect.map(|c| c.page_url).unwrap_or_default(),
        ip: batch.request.ip.clone(),
        user_agent: batch.request.user_agent.clone(),
        processed_seqs: Vec::new(),
        state: Value::Null,
        latest_decision: None,
    })
}
