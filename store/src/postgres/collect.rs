//! Collect sessions and their pings' lookup rows in PostgreSQL. Every conditional change (a
//! counter raised, a ping's arrival, the first results) reads the session under its row lock,
//! so of racing ingest replicas exactly one makes it.

use deadpool_postgres::GenericClient;
use schemas::ids::{PingId, SessionId};
use schemas::time::Timestamp;

use super::{PostgresStore, db_error, decode_opt, execute, json, row, ulid_bytes, ulid_of};
use crate::{CollectSessionRecord, Result, StoreError};

const COLLECT_SESSIONS: &str = "collect_sessions";

/// `Conflict` if two of a new session's pings share an id, before anything is written.
fn check_pings(session: &CollectSessionRecord) -> Result<()> {
    let mut ids = std::collections::HashSet::with_capacity(session.pings.len());
    for ping in &session.pings {
        if !ids.insert(ping.id) {
            return Err(StoreError::Conflict(format!(
                "ping {} is given twice in collect session {}",
                ping.id, session.id
            )));
        }
    }
    Ok(())
}

pub async fn create_collect_session(
    store: &PostgresStore,
    session: &CollectSessionRecord,
) -> Result<()> {
    check_pings(session)?;
    let mut client = store.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    let id = ulid_bytes(session.id.ulid());
    execute(
        &tx,
        "INSERT INTO collect_sessions (id, body) VALUES ($1, $2)",
        &[&id, &json(session)],
    )
    .await?;
    for ping in &session.pings {
        execute(
            &tx,
            "INSERT INTO collect_pings (ping_id, session_id) VALUES ($1, $2)",
            &[&ulid_bytes(ping.id.ulid()), &id],
        )
        .await?;
    }
    tx.commit().await.map_err(db_error)
}

pub async fn get_collect_session(
    store: &PostgresStore,
    id: SessionId,
) -> Result<Option<CollectSessionRecord>> {
    let found = row(
        &store.client().await?,
        "SELECT body FROM collect_sessions WHERE id = $1",
        &[&ulid_bytes(id.ulid())],
    )
    .await?;
    decode_opt(COLLECT_SESSIONS, found)
}

pub async fn find_collect_ping(store: &PostgresStore, ping: PingId) -> Result<Option<SessionId>> {
    let found = row(
        &store.client().await?,
        "SELECT session_id FROM collect_pings WHERE ping_id = $1",
        &[&ulid_bytes(ping.ulid())],
    )
    .await?;
    found
        .map(|r| ulid_of("collect_pings", r.get::<_, &[u8]>(0)).map(SessionId::from_ulid))
        .transpose()
}

/// Reads the session under its row lock, lets `change` modify it (answering whether it did),
/// and writes it back only if it changed. `None` if there is no such session; otherwise
/// whether this call wrote, and the row as now stored.
async fn change(
    store: &PostgresStore,
    id: SessionId,
    change: impl FnOnce(&mut CollectSessionRecord) -> bool,
) -> Result<Option<(bool, CollectSessionRecord)>> {
    let mut client = store.client().await?;
    let tx = client.transaction().await.map_err(db_error)?;
    let key = ulid_bytes(id.ulid());
    let found = row(
        &tx,
        "SELECT body FROM collect_sessions WHERE id = $1 FOR UPDATE",
        &[&key],
    )
    .await?;
    let Some(mut session) = decode_opt::<CollectSessionRecord>(COLLECT_SESSIONS, found)? else {
        return Ok(None);
    };
    if !change(&mut session) {
        return Ok(Some((false, session)));
    }
    write(&tx, &key, &session).await?;
    tx.commit().await.map_err(db_error)?;
    Ok(Some((true, session)))
}

async fn write(
    tx: &impl GenericClient,
    key: &Vec<u8>,
    session: &CollectSessionRecord,
) -> Result<()> {
    execute(
        tx,
        "UPDATE collect_sessions SET body = $2 WHERE id = $1",
        &[key, &json(session)],
    )
    .await?;
    Ok(())
}

pub async fn advance_collect_seq(store: &PostgresStore, id: SessionId, seq: u64) -> Result<bool> {
    let changed = change(store, id, |s| {
        let raised = seq > s.last_seq;
        if raised {
            s.last_seq = seq;
        }
        raised
    })
    .await?;
    Ok(changed.is_some_and(|(written, _)| written))
}

pub async fn advance_collect_call(
    store: &PostgresStore,
    id: SessionId,
    counter: u64,
) -> Result<bool> {
    let changed = change(store, id, |s| {
        let raised = counter > s.last_call;
        if raised {
            s.last_call = counter;
        }
        raised
    })
    .await?;
    Ok(changed.is_some_and(|(written, _)| written))
}

pub async fn record_collect_ping(
    store: &PostgresStore,
    id: SessionId,
    ping: PingId,
    at: Timestamp,
) -> Result<bool> {
    let changed = change(store, id, |s| {
        match s.pings.iter_mut().find(|p| p.id == ping) {
            Some(p) if p.arrived_at.is_none() => {
                p.arrived_at = Some(at);
                true
            }
            // Already arrived, or not one of this session's pings.
            _ => false,
        }
    })
    .await?;
    Ok(changed.is_some_and(|(written, _)| written))
}

pub async fn record_collect_ws_identity(
    store: &PostgresStore,
    id: SessionId,
    identity: &serde_json::Value,
) -> Result<bool> {
    let changed = change(store, id, |s| {
        if s.ws_identity.is_some() {
            return false;
        }
        s.ws_identity = Some(identity.clone());
        true
    })
    .await?;
    Ok(changed.is_some_and(|(written, _)| written))
}

pub async fn mark_collect_results(
    store: &PostgresStore,
    id: SessionId,
    at: Timestamp,
) -> Result<Option<CollectSessionRecord>> {
    let changed = change(store, id, |s| {
        if s.results_at.is_some() {
            return false;
        }
        s.results_at = Some(at);
        true
    })
    .await?;
    Ok(changed.map(|(_, session)| session))
}
