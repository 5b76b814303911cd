//! The store conformance suite: the behaviour every `StoreBackend` must show, as test bodies a
//! backend's tests instantiate in one line with [`store_conformance_suite!`](crate::store_conformance_suite).
//! The bodies live in one module per table group, named as the backends' files are; this module
//! holds the fixtures they share. Every case runs on every backend.
//!
//! Each body takes a fresh [`Store`] but never assumes it is empty: slugs, setting names and
//! idempotency keys carry a unique suffix and ids are fresh ULIDs, so a backend may share one
//! database (a ScyllaDB keyspace) among all the cases. Timestamps are whole milliseconds, the
//! precision of CQL's `timestamp`. The module is built with the `testsuite` feature rather than
//! only under `cfg(test)`, so other crates' tests can run it by enabling that feature in their
//! dev-dependencies, while the binary never carries it; it needs tokio only in the macro's
//! expansion.

pub mod api_keys;
pub mod backend;
pub mod collect;
pub mod events;
pub mod gate;
pub mod idempotency;
pub mod organizations;
pub mod retention;
pub mod sessions;
pub mod visitors;

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use chrono::TimeDelta;
use schemas::credential::{Environment, KeyType};
use schemas::events::{EventSubject, EventType};
use schemas::ids::{KeyId, OrgId, WebhookEndpointId};
use schemas::resources::OrgStatus;
use schemas::scope::Scope;
use schemas::session_digest::SessionDigest;
use schemas::time::{self, Timestamp};
use schemas::{DecisionId, EventId, PingId, SessionId, VisitorId};
use serde_json::json;
use tokio::task::JoinSet;

use crate::{
    ApiKeyRecord, CollectSessionRecord, CredentialHash, DecisionRecord, DeliveryStatus,
    EndpointStatus, EventRecord, IdempotencyBegin, IdempotencyRecord, IdempotencyScope,
    IdleSession, OrganizationRecord, PartitionFence, PingRecord, PreviousSecret, RawJson, Result,
    SessionRecord, SessionSave, Store, StoreError, StoredResponse, VisitorAnchors, VisitorOrder,
    VisitorRecord, VisitorRequest, VisitorStorage, VisitorTraits, WebhookDeliveryRecord,
    WebhookEndpointRecord,
};
#[allow(unused_imports)] // each used by one group's module through `super::*`
use crate::{ApiKeyWrite, EndpointCaps, EndpointWrite};

/// Expands into one `#[tokio::test]` per conformance case, each carrying the attributes given
/// after `$make` (`ignore = "…"` for a backend whose server the test command cannot start).
///
/// `$make` is an expression evaluated afresh in every test, yielding a future of
/// `(Store, guard)`; the guard (a temp dir, a keyspace to drop, or `()`) is dropped after the
/// store, so the backend can shut down before its files or keyspace go away. The calling crate
/// needs this crate with the `testsuite` feature and `tokio` (with `macros` and
/// `rt-multi-thread`) among its dev-dependencies.
///
/// ```ignore
/// async fn embedded() -> (store::Store, tempfile::TempDir) { /* open in a temp dir */ }
/// store::store_conformance_suite!(embedded());
/// ```
#[macro_export]
macro_rules! store_conformance_suite {
    // A backend whose rows expire by TTLs set at write time (ScyllaDB) cannot drop rows
    // written long ago by `keep_since`; its retention case is the TTL one.
    (ttl_retention: $make:expr $(, $attr:meta)* $(,)?) => {
        $crate::store_conformance_suite!(@all [$(#[$attr])*] $make;
            [purge_expired_by_ttl_finishes_its_steps]);
    };
    ($make:expr $(, $attr:meta)* $(,)?) => {
        $crate::store_conformance_suite!(@all [$(#[$attr])*] $make;
            [purge_expired_drops_rows_past_retention_in_bounded_steps]);
    };
    (@all $attrs:tt $make:expr; [$($retention:ident),*]) => {
        $crate::store_conformance_suite!(@groups $attrs $make;
            backend: [
                ping_answers,
                settings_put_if_absent,
                concurrent_setting_puts_have_one_winner,
            ],
            organizations: [
                organization_round_trip,
                organization_update_replaces_mutable_columns_only,
                organization_update_of_missing_row_creates_nothing,
                organization_slug_conflict_writes_nothing,
                concurrent_slug_claims_have_one_winner,
                organization_with_keys_stores_all,
                organization_with_keys_slug_conflict_writes_no_key,
                organization_with_keys_key_conflict_writes_nothing,
                organization_with_keys_rejects_a_key_of_another_organization,
                concurrent_organization_with_keys_creates_with_one_hash_have_one_winner,
                organization_reads_follow_every_write,
                concurrent_reads_see_an_organization_update_once_it_returns,
            ],
            api_keys: [
                api_key_round_trip,
                api_key_create_conflicts_write_nothing,
                concurrent_api_key_creates_with_one_hash_have_one_winner,
                api_key_list_is_newest_first_and_paginates,
                api_key_list_is_isolated_per_organization_and_environment,
                api_key_update_replaces_the_row,
                api_key_update_of_missing_row_creates_nothing,
                api_key_update_keeps_a_revocation,
                api_key_update_keeps_the_later_last_used_at,
                concurrent_stale_updates_cannot_undo_a_revocation,
                api_key_update_never_writes_the_rotation_columns,
                concurrent_stale_updates_cannot_undo_a_rotation,
                api_key_rotation_stores_both_keys,
                api_key_rotation_of_missing_key_writes_nothing,
                api_key_rotation_of_revoked_key_writes_nothing,
                api_key_rotation_of_rotated_key_writes_nothing,
                concurrent_rotations_of_one_key_have_one_winner,
                api_key_touch_changes_only_last_used_at,
                api_key_reads_follow_every_write,
                concurrent_reads_see_a_revocation_once_it_returns,
                api_keys_in_use_are_capped_per_organization_in_one_step,
            ],
            idempotency: [
                idempotency_lifecycle,
                idempotency_expired_record_counts_as_absent,
                idempotency_scopes_are_independent,
                concurrent_idempotency_begins_have_one_winner,
            ],
            collect: [
                handoff_opens_once,
                concurrent_handoff_openings_have_one_first,
                collect_session_round_trip,
                collect_session_conflicts_write_nothing,
                collect_seq_advances_only_upward,
                collect_call_counter_advances_only_upward,
                concurrent_collect_seq_advances_have_one_winner,
                collect_seq_advances_of_many_sessions_at_once_stay_apart,
                concurrent_collect_call_advances_have_one_winner,
                collect_ping_first_arrival_wins,
                concurrent_collect_ping_arrivals_have_one_winner,
                collect_ws_identity_is_recorded_once,
                collect_results_first_call_wins,
                concurrent_collect_results_have_one_winner,
                concurrent_collect_updates_keep_each_other,
                a_nonce_is_spent_once_per_scope,
                replay_marks_are_left_once_and_found_by_later_sessions,
            ],
            sessions: [
                session_round_trip,
                session_save_replaces_the_row,
                session_list_is_newest_first_and_paginates,
                session_list_is_isolated_per_organization_and_environment,
                session_decisions_are_kept_newest_first_and_only_when_given,
                concurrent_reads_see_a_session_and_its_decision_together,
                a_state_saved_in_two_parts_reads_whole,
                sessions_saved_together_land_together,
                a_save_of_hundreds_of_sessions_lands_whole,
                a_refused_save_in_a_list_writes_nothing,
                the_idle_index_follows_each_save_until_final,
                decision_history_keeps_turning_points_and_the_latest,
                decision_histories_saved_together_are_pruned_each_alone,
                sessions_by_verdict_follow_the_latest_decision,
                session_digests_follow_each_save,
                a_save_under_a_superseded_claim_is_refused,
            ],
            visitors: [
                visitor_round_trip,
                visitor_save_replaces_the_row_and_its_anchor_rows,
                visitors_saved_together_are_each_indexed_once,
                visitor_list_is_newest_first_paginates_and_is_isolated,
                visitor_anchor_lookup_finds_visitors_sharing_two_anchors,
                visitors_list_in_each_order_across_pages,
                visitor_saves_race_by_revision,
            ],
            events: [
                events_are_saved_with_their_session_and_listed_newest_first,
                events_saved_again_replace_their_row,
                events_are_isolated_per_organization_and_environment,
                events_of_another_organization_are_refused_with_nothing_written,
                webhook_endpoint_round_trip_and_update,
                webhook_endpoint_create_conflict_writes_nothing,
                webhook_endpoints_list_newest_first_paginated_and_isolated,
                events_recorded_alone_are_listed_and_isolated,
                webhook_deliveries_are_created_once_listed_and_due_in_order,
                a_due_delivery_is_claimed_by_one_dispatcher,
                a_webhook_delivery_update_moves_it_in_the_due_index,
                disabling_an_endpoint_changes_its_status_only,
                webhook_endpoint_caps_hold_for_racing_creates_and_enabling,
            ],
            gate: [
                gate_services_claim_ids_everywhere_and_keep_to_the_cap,
                gate_service_updates_rename_and_follow_the_registry,
                a_gate_session_transitions_once_and_an_approval_writes_its_account_and_token,
                gate_sessions_are_dropped_a_day_after_their_window_and_unacknowledged_signups_withdrawn,
                gate_polls_are_counted_with_their_interval_and_cap_in_one_step,
                gate_attempts_are_counted_within_their_budget_in_one_step,
            ],
            retention: [$($retention),*],
        );
    };
    (@groups $attrs:tt $make:expr; $($group:ident: [$($case:ident),* $(,)?]),* $(,)?) => {
        $(
            mod $group {
                #[allow(unused_imports)]
                use super::*;
                $(
                    $crate::store_conformance_suite!(@case $attrs $group $case $make);
                )*
            }
        )*
    };
    (@case [$($attr:tt)*] $group:ident $case:ident $make:expr) => {
        // Multi-threaded, so the concurrent cases really race.
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $($attr)*
        async fn $case() {
            let (store, guard) = $make.await;
            $crate::conformance::$group::$case(::std::clone::Clone::clone(&store)).await;
            ::std::mem::drop(store);
            ::std::mem::drop(guard);
        }
    };
}

// ---- fixtures ----

/// `prefix` plus a suffix no other call in any process shares.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        OrgId::generate().ulid().to_string().to_ascii_lowercase()
    )
}

/// An active organization with a slug of its own (for backend-specific tests too).
pub fn organization(slug_prefix: &str) -> OrganizationRecord {
    let now = time::now();
    OrganizationRecord {
        id: OrgId::generate(),
        name: format!("Org {slug_prefix}"),
        slug: unique(slug_prefix),
        status: OrgStatus::Active,
        created_at: now,
        updated_at: now,
    }
}

/// A hash unique to `id` (the store does not care how it was computed).
fn hash_of(id: KeyId) -> CredentialHash {
    let mut h = [0xa5; 32];
    h[..16].copy_from_slice(&id.ulid().to_bytes());
    CredentialHash(h)
}

/// A freshly issued secret key: no lifecycle timestamps yet.
pub fn api_key(org: OrgId, env: Environment, id: KeyId) -> ApiKeyRecord {
    ApiKeyRecord {
        id,
        organization_id: org,
        key_type: KeyType::Secret,
        environment: env,
        name: format!("key {id}"),
        key_hash: hash_of(id),
        key_preview: "sk_test_Ab12".into(),
        display_key: "sk_test_Ab12...wxyz".into(),
        publishable_token: None,
        allowed_origins: Vec::new(),
        scopes: vec![Scope::SessionsList, Scope::SessionsRead],
        rate_limit_override: None,
        created_at: time::now(),
        rotated_at: None,
        revoked_at: None,
        grace_expires_at: None,
        last_used_at: None,
        replaced_by: None,
    }
}

/// A key with every optional column set, and values at the edges of their types.
fn fully_populated_key(org: OrgId, env: Environment) -> ApiKeyRecord {
    let now = time::now();
    ApiKeyRecord {
        key_type: KeyType::Publishable,
        publishable_token: Some("pk_live_0123456789abcdefghijABCDEFGHIJ01abcd".into()),
        allowed_origins: vec![
            "https://shop.example".into(),
            "http://localhost:3000".into(),
        ],
        // The removed scope must survive storage too (legacy keys carry it).
        scopes: vec![Scope::OrganizationsManage, Scope::GateServicesManage],
        rate_limit_override: Some(u32::MAX),
        rotated_at: Some(now),
        revoked_at: Some(now + TimeDelta::seconds(1)),
        grace_expires_at: Some(now + TimeDelta::hours(24)),
        last_used_at: Some(now - TimeDelta::minutes(3)),
        replaced_by: Some(KeyId::generate()),
        name: "ünïcode ✓ name".into(),
        ..api_key(org, env, KeyId::generate())
    }
}

fn scope(prefix: &str) -> IdempotencyScope {
    IdempotencyScope {
        credential: hash_of(KeyId::generate()),
        key: unique(prefix),
    }
}

fn in_flight(fingerprint: u8, expires_at: Timestamp) -> IdempotencyRecord {
    IdempotencyRecord {
        request_fingerprint: [fingerprint; 32],
        expires_at,
        response: None,
    }
}

fn tomorrow() -> Timestamp {
    time::now() + TimeDelta::hours(24)
}

/// A just-opened collect session with `pings` pings: nothing arrived, no batch, no handoff.
pub(crate) fn collect_session(pings: usize) -> CollectSessionRecord {
    let now = time::now();
    CollectSessionRecord {
        id: SessionId::generate(),
        organization_id: OrgId::generate(),
        environment: Environment::Live,
        key_id: KeyId::generate(),
        sealed_batch_key: vec![0, 1, 0x7f, 0x80, 0xfe, 0xff, 0, 42],
        sealed_proof_key: vec![0xff, 0, 7, 0x80, 1],
        page_url: "https://shop.example/checkout?step=2&q=ünïcode#✓".into(),
        sdk_version: "1.4.0-beta.2".into(),
        opened_at: now,
        expires_at: now + TimeDelta::minutes(30),
        last_seq: 0,
        last_call: 0,
        pings: (0..pings).map(|_| fresh_ping()).collect(),
        network_check_token_hash: [0x3c; 32],
        ws_identity: None,
        results_at: None,
        gate_session_id: None,
        challenge: String::new(),
    }
}

fn fresh_ping() -> PingRecord {
    PingRecord {
        id: PingId::generate(),
        arrived_at: None,
    }
}

/// What a network-check WebSocket might show: nested, with numbers, nulls and non-ASCII text.
fn ws_identity(address: &str) -> serde_json::Value {
    json!({
        "address": address,
        "forwarded_for": ["198.51.100.7", "10.0.0.2"],
        "header_names": ["accept", "user-agent", "x-ünïcode"],
        "port": 443,
        "rtt_ms": 12.5,
        "tls": null,
        "nested": { "ok": true, "list": [1, -2, 3.25] },
    })
}

/// A scored session with every column set (nested JSON, non-ASCII text, several seqs).
fn session_record(org: OrgId, env: Environment, id: SessionId) -> SessionRecord {
    let now = time::now();
    SessionRecord {
        id,
        organization_id: org,
        environment: env,
        visitor_id: Some(VisitorId::generate()),
        opened_at: now - TimeDelta::seconds(40),
        updated_at: now,
        page_url: "https://shop.example/checkout?step=2&q=ünïcode#✓".into(),
        ip: "2001:db8::17".into(),
        user_agent: "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0".into(),
        processed_through: 12,
        processed_seqs: vec![14, 15, u64::MAX],
        state: RawJson::encode(
            &json!({ "observations": [ws_identity("198.51.100.9")], "score": 0.25, "n": null }),
        )
        .unwrap(),
        latest_decision: None,
        finalized: false,
    }
}

/// A decision of `session` numbered `n` (its JSON names its id, as the processor's does).
fn decision_record(session: SessionId, id: DecisionId, n: u64) -> DecisionRecord {
    DecisionRecord {
        session_id: session,
        id,
        evaluated_at: time::now(),
        decision: RawJson::encode(
            // A phase of its own, so every decision is a turning point the history keeps.
            &json!({ "event_id": id.to_string(), "n": n, "verdict": "allow", "phase": format!("p{n}"), "reasons": ["ünï"] }),
        )
        .unwrap(),
    }
}

/// `n` fresh ids, oldest first (ids minted within one millisecond are in random order).
fn sorted_ids<T: Ord>(n: usize, generate: fn() -> T) -> Vec<T> {
    let mut ids: Vec<T> = (0..n).map(|_| generate()).collect();
    ids.sort();
    ids
}

fn session_ids(sessions: &[SessionRecord]) -> Vec<SessionId> {
    sessions.iter().map(|s| s.id).collect()
}

fn decision_ids(decisions: &[DecisionRecord]) -> Vec<DecisionId> {
    decisions.iter().map(|d| d.id).collect()
}

#[track_caller]
fn assert_conflict<T: Debug>(result: Result<T>, what: &str) {
    match result {
        Err(StoreError::Conflict(_)) => {}
        other => panic!("{what}: expected Conflict, got {other:?}"),
    }
}

/// Asserts that `key` was not written: no row, no lookup rows.
async fn assert_no_key(store: &Store, key: &ApiKeyRecord, what: &str) {
    assert_eq!(
        store
            .get_api_key(key.organization_id, key.environment, key.id)
            .await
            .unwrap(),
        None,
        "{what}: the row was written"
    );
    assert_eq!(
        store.locate_api_key(key.id).await.unwrap(),
        None,
        "{what}: the id lookup row was written"
    );
    assert_eq!(
        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
        None,
        "{what}: the hash lookup row was written"
    );
    assert_eq!(
        store
            .find_key_and_organization(&key.key_hash)
            .await
            .unwrap(),
        None,
        "{what}: authentication's read found a key"
    );
}

/// Asserts that the stored row of `key` (by primary key and by hash) is `expected`.
async fn assert_stored(store: &Store, expected: &ApiKeyRecord, what: &str) {
    assert_eq!(
        store
            .get_api_key(expected.organization_id, expected.environment, expected.id)
            .await
            .unwrap()
            .as_ref(),
        Some(expected),
        "{what}"
    );
    assert_eq!(
        store
            .find_api_key_by_hash(&expected.key_hash)
            .await
            .unwrap()
            .as_ref(),
        Some(expected),
        "{what} (by hash)"
    );
    assert_authenticates_as(store, expected, what).await;
}

/// Asserts that authentication's read of `key`'s hash answers `key`, and, if it answers an
/// organization, the one `get_organization` answers for it. The organization is read after, so a
/// backend that caches it has it for the next read (`assert_stored_twice` reads twice).
async fn assert_authenticates_as(store: &Store, key: &ApiKeyRecord, what: &str) {
    let found = store
        .find_key_and_organization(&key.key_hash)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: authentication's read found no key"));
    assert_eq!(*found.key, *key, "{what} (authentication's read)");
    let stored = store.get_organization(key.organization_id).await.unwrap();
    if let Some(organization) = found.organization {
        assert_eq!(
            Some(&*organization),
            stored.as_ref(),
            "{what} (authentication's read of the organization)"
        );
    }
}

fn ids(keys: &[ApiKeyRecord]) -> Vec<KeyId> {
    keys.iter().map(|k| k.id).collect()
}

/// Runs `n` copies of `op` at once and returns their results.
async fn race<T, F>(n: usize, op: impl Fn(usize) -> F) -> Vec<T>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
{
    let mut tasks = JoinSet::new();
    for i in 0..n {
        tasks.spawn(op(i));
    }
    tasks.join_all().await
}

type Check = Pin<Box<dyn Future<Output = bool> + Send>>;

/// Races `write` against `readers` tasks that repeat `read` (which answers whether it saw the
/// write) before, during and after it: every read that starts after `write` has returned must
/// see it. Several rounds, each with fresh rows from `setup`, to give the race many chances.
async fn reads_after_a_write_see_it<S, SF>(
    what: &str,
    setup: impl Fn() -> SF,
    read: impl Fn(Arc<S>) -> Check + Send + Sync + 'static,
    write: impl Fn(Arc<S>) -> Pin<Box<dyn Future<Output = ()> + Send>>,
) where
    S: Send + Sync + 'static,
    SF: Future<Output = S>,
{
    const ROUNDS: usize = 12;
    const READERS: usize = 4;
    /// Reads each reader makes after the write returned.
    const READS_AFTER: usize = 50;

    let read = Arc::new(read);
    for round in 0..ROUNDS {
        let subject = Arc::new(setup().await);
        let returned = Arc::new(AtomicBool::new(false));
        let warm = Arc::new(AtomicUsize::new(0));
        let mut readers = JoinSet::new();
        for _ in 0..READERS {
            let (read, subject) = (Arc::clone(&read), Arc::clone(&subject));
            let (returned, warm) = (Arc::clone(&returned), Arc::clone(&warm));
            readers.spawn(async move {
                let mut after = 0;
                let mut stale = 0;
                while after < READS_AFTER {
                    let started_after = returned.load(Ordering::SeqCst);
                    let seen = read(Arc::clone(&subject)).await;
                    if started_after {
                        after += 1;
                        if !seen {
                            stale += 1;
                        }
                    } else {
                        warm.fetch_add(1, Ordering::SeqCst);
                    }
                    // A read may never wait (an in-memory backend): let the writer run.
                    tokio::task::yield_now().await;
                }
                stale
            });
        }
        // Write while the readers are busy (and any cache has the old row).
        while warm.load(Ordering::SeqCst) < 4 * READERS {
            tokio::task::yield_now().await;
        }
        write(Arc::clone(&subject)).await;
        returned.store(true, Ordering::SeqCst);

        let stale: usize = readers.join_all().await.into_iter().sum();
        assert_eq!(
            stale, 0,
            "{what}: round {round}: {stale} reads started after the write returned missed it"
        );
    }
}

/// An event of `session` with every column set.
fn event_record(session: &SessionRecord, id: EventId, event_type: EventType) -> EventRecord {
    EventRecord {
        id,
        organization_id: session.organization_id,
        environment: session.environment,
        event_type,
        subject: EventSubject {
            kind: "session".into(),
            id: session.id.to_string(),
        },
        data: json!({ "session_id": session.id.to_string(), "note": "ünï", "n": [1, null] }),
        created_at: time::now(),
    }
}

/// Ids of the idle index's sessions of `org` (other tests' sessions share the index).
async fn idle_of(store: &Store, org: OrgId, before: Timestamp) -> Vec<IdleSession> {
    store
        .list_idle_sessions(before, 100_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.organization_id == org)
        .collect()
}

fn session_with_verdict(
    org: OrgId,
    env: Environment,
    id: SessionId,
    verdict: &str,
) -> SessionRecord {
    SessionRecord {
        latest_decision: Some(
            RawJson::encode(&json!({ "verdict": verdict, "phase": "snapshot" })).unwrap(),
        ),
        ..session_record(org, env, id)
    }
}

/// A decision of `session` with the given phase and verdict.
fn turn(session: SessionId, id: DecisionId, phase: &str, verdict: &str) -> DecisionRecord {
    DecisionRecord {
        session_id: session,
        id,
        evaluated_at: time::now(),
        decision: RawJson::encode(
            &json!({ "event_id": id.to_string(), "phase": phase, "verdict": verdict }),
        )
        .unwrap(),
    }
}

/// A visitor with every column set; `anchors` are three values unique to this call.
fn visitor_record(org: OrgId, env: Environment, id: VisitorId) -> VisitorRecord {
    let now = time::now();
    VisitorRecord {
        id,
        organization_id: org,
        environment: env,
        first_seen_at: now - TimeDelta::days(3),
        last_seen_at: now,
        seen_count: 7,
        expires_at: now + TimeDelta::days(365),
        latest_request: VisitorRequest {
            user_agent: "Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0 ✓".into(),
            ip_address: "2001:db8::17".into(),
        },
        storage: VisitorStorage {
            cookies: true,
            local_storage: true,
            indexed_db: false,
            service_worker: false,
            window_name: true,
        },
        anchors: VisitorAnchors {
            webgl_hash: Some(unique("webgl")),
            parameters_hash: Some(unique("params")),
            audio_hash: Some(unique("audio")),
        },
        components: vec![1920.0, 1080.0, -1.0, 1.25, 0.0, 65_535.0],
        traits: VisitorTraits {
            engine: "gecko".into(),
            os: "linux".into(),
            major: Some(128),
        },
        recent_sessions: sorted_ids(3, SessionId::generate)
            .into_iter()
            .rev()
            .collect(),
        revision: 1,
    }
}

fn delivery(
    org: OrgId,
    event: EventId,
    endpoint: WebhookEndpointId,
    due: Option<Timestamp>,
) -> WebhookDeliveryRecord {
    WebhookDeliveryRecord {
        next_attempt_at: due,
        ..WebhookDeliveryRecord::pending(
            org,
            Environment::Live,
            (event, EventType::SessionResultPersisted),
            endpoint,
            time::now(),
        )
    }
}
