//! The store conformance suite: the behaviour every `StoreBackend` must show, as test bodies a
//! backend's tests instantiate in one line with [`store_conformance_suite!`](crate::store_conformance_suite).
//!
//! Each body takes a fresh [`Store`] but never assumes it is empty: slugs, setting names and
//! idempotency keys carry a unique suffix and ids are fresh ULIDs, so a backend may share one
//! database (a ScyllaDB keyspace) among all the cases. Timestamps are whole milliseconds, the
//! precision of CQL's `timestamp`. The module is built with the `testsuite` feature rather than
//! only under `cfg(test)`, so other crates' tests can run it by enabling that feature in their
//! dev-dependencies, while the binary never carries it; it needs tokio only in the macro's
//! expansion.

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
use schemas::time::{self, Timestamp};
use schemas::{DecisionId, EventId, PingId, SessionId, VisitorId};
use serde_json::json;
use tokio::task::JoinSet;

use crate::{
    ApiKeyRecord, CollectSessionRecord, CredentialHash, DecisionRecord, DeliveryStatus,
    EndpointStatus, EventRecord, IdempotencyBegin, IdempotencyRecord, IdempotencyScope,
    IdleSession, OrganizationRecord, PingRecord, PreviousSecret, RawJson, Result, SessionRecord,
    SessionSave, Store, StoreError, StoredResponse, VisitorAnchors, VisitorOrder, VisitorRecord,
    VisitorRequest, VisitorStorage, VisitorTraits, WebhookDeliveryRecord, WebhookEndpointRecord,
};

/// Expands into one `#[tokio::test]` per conformance case.
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
    ($make:expr) => {
        $crate::store_conformance_suite!(@cases $make;
            ping_answers,
            organization_round_trip,
            organization_update_replaces_mutable_columns_only,
            organization_update_of_missing_row_creates_nothing,
            organization_slug_conflict_writes_nothing,
            concurrent_slug_claims_have_one_winner,
            api_key_round_trip,
            api_key_create_conflicts_write_nothing,
            concurrent_api_key_creates_with_one_hash_have_one_winner,
            organization_with_keys_stores_all,
            organization_with_keys_slug_conflict_writes_no_key,
            organization_with_keys_key_conflict_writes_nothing,
            organization_with_keys_rejects_a_key_of_another_organization,
            concurrent_organization_with_keys_creates_with_one_hash_have_one_winner,
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
            organization_reads_follow_every_write,
            concurrent_reads_see_a_revocation_once_it_returns,
            concurrent_reads_see_an_organization_update_once_it_returns,
            idempotency_lifecycle,
            idempotency_expired_record_counts_as_absent,
            idempotency_scopes_are_independent,
            handoff_opens_once,
            concurrent_handoff_openings_have_one_first,
            concurrent_idempotency_begins_have_one_winner,
            settings_put_if_absent,
            concurrent_setting_puts_have_one_winner,
            collect_session_round_trip,
            collect_session_conflicts_write_nothing,
            collect_seq_advances_only_upward,
            concurrent_collect_seq_advances_have_one_winner,
            collect_call_counter_advances_only_upward,
            concurrent_collect_call_advances_have_one_winner,
            collect_ping_first_arrival_wins,
            concurrent_collect_ping_arrivals_have_one_winner,
            collect_ws_identity_is_recorded_once,
            collect_results_first_call_wins,
            concurrent_collect_results_have_one_winner,
            concurrent_collect_updates_keep_each_other,
            session_round_trip,
            session_save_replaces_the_row,
            session_list_is_newest_first_and_paginates,
            session_list_is_isolated_per_organization_and_environment,
            session_decisions_are_kept_newest_first_and_only_when_given,
            concurrent_reads_see_a_session_and_its_decision_together,
            events_are_saved_with_their_session_and_listed_newest_first,
            events_saved_again_replace_their_row,
            events_are_isolated_per_organization_and_environment,
            events_of_another_organization_are_refused_with_nothing_written,
            sessions_saved_together_land_together,
            a_state_saved_in_two_parts_reads_whole,
            a_refused_save_in_a_list_writes_nothing,
            the_idle_index_follows_each_save_until_final,
            visitor_round_trip,
            visitor_save_replaces_the_row_and_its_anchor_rows,
            visitors_saved_together_are_each_indexed_once,
            visitor_list_is_newest_first_paginates_and_is_isolated,
            visitor_anchor_lookup_finds_visitors_sharing_two_anchors,
            decision_history_keeps_turning_points_and_the_latest,
            sessions_by_verdict_follow_the_latest_decision,
            visitors_list_in_each_order_across_pages,
            purge_expired_drops_rows_past_retention_in_bounded_steps,
            events_recorded_alone_are_listed_and_isolated,
            webhook_deliveries_are_created_once_listed_and_due_in_order,
            a_webhook_delivery_update_moves_it_in_the_due_index,
            webhook_endpoint_round_trip_and_update,
            webhook_endpoint_create_conflict_writes_nothing,
            webhook_endpoints_list_newest_first_paginated_and_isolated,
            gate_services_claim_ids_everywhere_and_keep_to_the_cap,
            gate_service_updates_rename_and_follow_the_registry,
            a_gate_session_transitions_once_and_an_approval_writes_its_account_and_token,
            gate_sessions_are_purged_a_retention_after_they_started,
            disabling_an_endpoint_changes_its_status_only,
            gate_polls_are_counted_with_their_interval_and_cap_in_one_step,
            a_due_delivery_is_claimed_by_one_dispatcher,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            // Multi-threaded, so the concurrent cases really race.
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (store, guard) = $make.await;
                $crate::conformance::$case(::std::clone::Clone::clone(&store)).await;
                ::std::mem::drop(store);
                ::std::mem::drop(guard);
            }
        )*
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

fn organization(slug_prefix: &str) -> OrganizationRecord {
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
fn api_key(org: OrgId, env: Environment, id: KeyId) -> ApiKeyRecord {
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

// ---- cases ----

pub async fn ping_answers(store: Store) {
    store.ping().await.expect("ping");
}

pub async fn organization_round_trip(store: Store) {
    let org = organization("round-trip");
    store.create_organization(&org).await.unwrap();

    assert_eq!(
        store.get_organization(org.id).await.unwrap(),
        Some(org.clone())
    );
    assert_eq!(
        store.get_organization_by_slug(&org.slug).await.unwrap(),
        Some(org.clone())
    );
    assert_eq!(
        store.get_organization(OrgId::generate()).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .get_organization_by_slug(&unique("nobody"))
            .await
            .unwrap(),
        None
    );
}

pub async fn organization_update_replaces_mutable_columns_only(store: Store) {
    let org = organization("update");
    store.create_organization(&org).await.unwrap();

    let changed = OrganizationRecord {
        name: "Renamed".into(),
        status: OrgStatus::Suspended,
        updated_at: org.updated_at + TimeDelta::seconds(5),
        // Neither of these may change.
        slug: unique("other-slug"),
        created_at: org.created_at - TimeDelta::days(1),
        ..org.clone()
    };
    store.update_organization(&changed).await.unwrap();

    let expected = OrganizationRecord {
        name: changed.name.clone(),
        status: changed.status,
        updated_at: changed.updated_at,
        ..org.clone()
    };
    assert_eq!(
        store.get_organization(org.id).await.unwrap(),
        Some(expected.clone())
    );
    assert_eq!(
        store.get_organization_by_slug(&org.slug).await.unwrap(),
        Some(expected)
    );
    assert_eq!(
        store.get_organization_by_slug(&changed.slug).await.unwrap(),
        None,
        "the slug never changes"
    );
}

pub async fn organization_update_of_missing_row_creates_nothing(store: Store) {
    let org = organization("ghost");
    store
        .update_organization(&org)
        .await
        .expect("updating a missing row is a no-op");
    assert_eq!(store.get_organization(org.id).await.unwrap(), None);
    assert_eq!(
        store.get_organization_by_slug(&org.slug).await.unwrap(),
        None
    );
}

pub async fn organization_slug_conflict_writes_nothing(store: Store) {
    let first = organization("taken");
    store.create_organization(&first).await.unwrap();

    let second = OrganizationRecord {
        name: "Impostor".into(),
        ..organization("other")
    };
    let clash = OrganizationRecord {
        slug: first.slug.clone(),
        ..second.clone()
    };
    assert_conflict(
        store.create_organization(&clash).await,
        "a second organization with a taken slug",
    );

    assert_eq!(
        store.get_organization(clash.id).await.unwrap(),
        None,
        "the losing row was written"
    );
    assert_eq!(
        store.get_organization_by_slug(&first.slug).await.unwrap(),
        Some(first.clone())
    );

    // The loser's id was not claimed either: it can still be created under a free slug.
    store.create_organization(&second).await.unwrap();
    assert_eq!(
        store.get_organization(second.id).await.unwrap(),
        Some(second)
    );
}

pub async fn concurrent_slug_claims_have_one_winner(store: Store) {
    let slug = unique("contested");
    let results = race(8, |_| {
        let store = store.clone();
        let org = OrganizationRecord {
            slug: slug.clone(),
            ..organization("contested")
        };
        async move { (org.id, store.create_organization(&org).await) }
    })
    .await;

    let winners: Vec<OrgId> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one claim of a slug succeeds: {results:?}"
    );
    for (id, result) in results {
        if id != winners[0] {
            assert_conflict(result, "a losing slug claim");
            assert_eq!(
                store.get_organization(id).await.unwrap(),
                None,
                "a loser's row was written"
            );
        }
    }
    let owner = store
        .get_organization_by_slug(&slug)
        .await
        .unwrap()
        .expect("slug resolves");
    assert_eq!(owner.id, winners[0]);
}

pub async fn api_key_round_trip(store: Store) {
    let org = OrgId::generate();
    let key = fully_populated_key(org, Environment::Live);
    store.create_api_key(&key).await.unwrap();

    assert_eq!(
        store
            .get_api_key(org, Environment::Live, key.id)
            .await
            .unwrap(),
        Some(key.clone())
    );
    assert_eq!(
        store.locate_api_key(key.id).await.unwrap(),
        Some((org, Environment::Live))
    );
    assert_eq!(
        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
        Some(key.clone())
    );

    // Every part of the primary key counts.
    assert_eq!(
        store
            .get_api_key(org, Environment::Test, key.id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .get_api_key(OrgId::generate(), Environment::Live, key.id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .get_api_key(org, Environment::Live, KeyId::generate())
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.locate_api_key(KeyId::generate()).await.unwrap(), None);
    assert_eq!(
        store
            .find_api_key_by_hash(&hash_of(KeyId::generate()))
            .await
            .unwrap(),
        None
    );
}

pub async fn api_key_create_conflicts_write_nothing(store: Store) {
    let org = OrgId::generate();
    let key = api_key(org, Environment::Live, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    // Same id, another hash and partition.
    let same_id = ApiKeyRecord {
        key_hash: hash_of(KeyId::generate()),
        ..api_key(OrgId::generate(), Environment::Test, key.id)
    };
    assert_conflict(
        store.create_api_key(&same_id).await,
        "a key with a taken id",
    );
    assert_eq!(
        store.find_api_key_by_hash(&same_id.key_hash).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .get_api_key(same_id.organization_id, Environment::Test, key.id)
            .await
            .unwrap(),
        None
    );

    // Same hash, another id.
    let same_hash = ApiKeyRecord {
        key_hash: key.key_hash,
        ..api_key(org, Environment::Live, KeyId::generate())
    };
    assert_conflict(
        store.create_api_key(&same_hash).await,
        "a key with a taken hash",
    );
    assert_eq!(store.locate_api_key(same_hash.id).await.unwrap(), None);
    assert_eq!(
        store
            .get_api_key(org, Environment::Live, same_hash.id)
            .await
            .unwrap(),
        None
    );

    // The original is untouched.
    assert_eq!(
        store.locate_api_key(key.id).await.unwrap(),
        Some((org, Environment::Live))
    );
    assert_eq!(
        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
        Some(key.clone())
    );
    assert_eq!(
        ids(&store
            .list_api_keys(org, Environment::Live, None, 10)
            .await
            .unwrap()),
        vec![key.id]
    );
}

pub async fn concurrent_api_key_creates_with_one_hash_have_one_winner(store: Store) {
    let org = OrgId::generate();
    let hash = hash_of(KeyId::generate());
    let results = race(8, |_| {
        let store = store.clone();
        let key = ApiKeyRecord {
            key_hash: hash,
            ..api_key(org, Environment::Live, KeyId::generate())
        };
        async move { (key.id, store.create_api_key(&key).await) }
    })
    .await;

    let winners: Vec<KeyId> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one key may hold a hash: {results:?}"
    );
    for (id, result) in results {
        if id != winners[0] {
            assert_conflict(result, "a losing key create");
            assert_eq!(
                store.locate_api_key(id).await.unwrap(),
                None,
                "a loser's lookup row was written"
            );
        }
    }
    assert_eq!(
        store
            .find_api_key_by_hash(&hash)
            .await
            .unwrap()
            .map(|k| k.id),
        Some(winners[0])
    );
    assert_eq!(
        ids(&store
            .list_api_keys(org, Environment::Live, None, 100)
            .await
            .unwrap()),
        winners
    );
}

/// The organization and every key are stored: the organization by id and slug, each key by
/// primary key, hash and id alone, and listed in its partition newest first.
pub async fn organization_with_keys_stores_all(store: Store) {
    let org = organization("with-keys");
    // Sorted, because ids generated within one millisecond are in random order.
    let mut k: Vec<KeyId> = (0..3).map(|_| KeyId::generate()).collect();
    k.sort();
    let keys = vec![
        api_key(org.id, Environment::Live, k[0]),
        ApiKeyRecord {
            id: k[1],
            key_hash: hash_of(k[1]),
            ..fully_populated_key(org.id, Environment::Live)
        },
        api_key(org.id, Environment::Test, k[2]),
    ];
    store
        .create_organization_with_keys(&org, &keys)
        .await
        .unwrap();

    assert_eq!(
        store.get_organization(org.id).await.unwrap(),
        Some(org.clone())
    );
    assert_eq!(
        store.get_organization_by_slug(&org.slug).await.unwrap(),
        Some(org.clone())
    );
    for key in &keys {
        assert_stored(&store, key, "a key created with its organization").await;
        assert_eq!(
            store.locate_api_key(key.id).await.unwrap(),
            Some((org.id, key.environment)),
            "locating a key created with its organization"
        );
    }
    assert_eq!(
        store
            .list_api_keys(org.id, Environment::Live, None, 10)
            .await
            .unwrap(),
        vec![keys[1].clone(), keys[0].clone()],
        "live keys, newest first"
    );
    assert_eq!(
        store
            .list_api_keys(org.id, Environment::Test, None, 10)
            .await
            .unwrap(),
        vec![keys[2].clone()],
        "test keys"
    );

    // No keys at all: just the organization.
    let bare = organization("with-no-keys");
    store
        .create_organization_with_keys(&bare, &[])
        .await
        .unwrap();
    assert_eq!(
        store.get_organization_by_slug(&bare.slug).await.unwrap(),
        Some(bare.clone())
    );
    for env in [Environment::Live, Environment::Test] {
        assert!(
            store
                .list_api_keys(bare.id, env, None, 10)
                .await
                .unwrap()
                .is_empty()
        );
    }
}

/// A taken slug fails the whole call: neither the organization nor any key is written, and
/// nothing stays claimed (the same organization and keys succeed under a free slug).
pub async fn organization_with_keys_slug_conflict_writes_no_key(store: Store) {
    let first = organization("with-keys-taken");
    store.create_organization(&first).await.unwrap();

    let clash = OrganizationRecord {
        slug: first.slug.clone(),
        ..organization("with-keys-other")
    };
    let keys = vec![
        api_key(clash.id, Environment::Live, KeyId::generate()),
        api_key(clash.id, Environment::Test, KeyId::generate()),
    ];
    assert_conflict(
        store.create_organization_with_keys(&clash, &keys).await,
        "an organization with keys and a taken slug",
    );

    assert_eq!(
        store.get_organization(clash.id).await.unwrap(),
        None,
        "the losing organization was written"
    );
    assert_eq!(
        store.get_organization_by_slug(&first.slug).await.unwrap(),
        Some(first.clone())
    );
    for key in &keys {
        assert_no_key(&store, key, "a key of an organization whose slug was taken").await;
    }
    for env in [Environment::Live, Environment::Test] {
        assert!(
            store
                .list_api_keys(clash.id, env, None, 10)
                .await
                .unwrap()
                .is_empty(),
            "a key of an organization whose slug was taken is listed"
        );
    }

    let freed = OrganizationRecord {
        slug: unique("with-keys-freed"),
        ..clash
    };
    store
        .create_organization_with_keys(&freed, &keys)
        .await
        .expect("the loser's id and keys were left claimed");
    for key in &keys {
        assert_stored(&store, key, "a key created under a free slug").await;
    }
}

/// A key whose id or hash is taken (by a stored key, or by another key of the same call) fails
/// the whole call: neither the organization nor any of its keys is written, the holder is
/// untouched, and nothing stays claimed.
pub async fn organization_with_keys_key_conflict_writes_nothing(store: Store) {
    // A key of another organization holds an id and a hash.
    let holder = api_key(OrgId::generate(), Environment::Live, KeyId::generate());
    store.create_api_key(&holder).await.unwrap();

    let org = organization("with-keys-key-conflict");
    let fresh = |env| api_key(org.id, env, KeyId::generate());
    // Valid keys around the bad one, so a backend that writes keys one by one is caught
    // whichever way it goes.
    let (before, after) = (fresh(Environment::Live), fresh(Environment::Test));
    let twin = fresh(Environment::Live);
    let cases = [
        (
            "a key with a taken hash",
            ApiKeyRecord {
                key_hash: holder.key_hash,
                ..fresh(Environment::Live)
            },
        ),
        (
            "a key with a taken id",
            ApiKeyRecord {
                id: holder.id,
                ..fresh(Environment::Live)
            },
        ),
        (
            "two keys with one hash",
            ApiKeyRecord {
                key_hash: twin.key_hash,
                ..fresh(Environment::Test)
            },
        ),
        (
            "two keys with one id",
            ApiKeyRecord {
                id: twin.id,
                ..fresh(Environment::Test)
            },
        ),
    ];
    for (what, bad) in cases {
        let keys = vec![before.clone(), twin.clone(), bad.clone(), after.clone()];
        assert_conflict(store.create_organization_with_keys(&org, &keys).await, what);

        assert_eq!(
            store.get_organization(org.id).await.unwrap(),
            None,
            "{what}: the organization was written"
        );
        assert_eq!(
            store.get_organization_by_slug(&org.slug).await.unwrap(),
            None,
            "{what}: the slug was claimed"
        );
        for key in &keys {
            assert_eq!(
                store
                    .get_api_key(org.id, key.environment, key.id)
                    .await
                    .unwrap(),
                None,
                "{what}: key {} was written",
                key.id
            );
            let located = store.locate_api_key(key.id).await.unwrap();
            if key.id == holder.id {
                assert_eq!(located, Some((holder.organization_id, holder.environment)));
            } else {
                assert_eq!(
                    located, None,
                    "{what}: the id of key {} was claimed",
                    key.id
                );
            }
            let found = store.find_api_key_by_hash(&key.key_hash).await.unwrap();
            if key.key_hash == holder.key_hash {
                assert_eq!(found.as_ref(), Some(&holder), "{what}: the holder changed");
            } else {
                assert_eq!(
                    found, None,
                    "{what}: the hash of key {} was claimed",
                    key.id
                );
            }
        }
        for env in [Environment::Live, Environment::Test] {
            assert!(
                store
                    .list_api_keys(org.id, env, None, 10)
                    .await
                    .unwrap()
                    .is_empty(),
                "{what}: a key is listed"
            );
        }
        assert_stored(&store, &holder, &format!("{what}: the holder")).await;
    }

    let keys = vec![before, twin, after];
    store
        .create_organization_with_keys(&org, &keys)
        .await
        .expect("a failed call left its organization or keys claimed");
    for key in &keys {
        assert_stored(&store, key, "a key created once the conflict was gone").await;
    }
}

/// Every key must belong to the organization created with it: a key naming another
/// organization is `Invalid` (a caller bug, not a conflict), and nothing is written.
pub async fn organization_with_keys_rejects_a_key_of_another_organization(store: Store) {
    let org = organization("with-keys-stray");
    let own = api_key(org.id, Environment::Live, KeyId::generate());
    let stray = api_key(OrgId::generate(), Environment::Live, KeyId::generate());
    match store
        .create_organization_with_keys(&org, &[own.clone(), stray.clone()])
        .await
    {
        Err(StoreError::Invalid(_)) => {}
        other => panic!("a key of another organization: expected Invalid, got {other:?}"),
    }
    assert_eq!(store.get_organization(org.id).await.unwrap(), None);
    assert_eq!(
        store.get_organization_by_slug(&org.slug).await.unwrap(),
        None
    );
    assert_no_key(&store, &own, "the organization's own key").await;
    assert_no_key(&store, &stray, "the stray key").await;
    assert!(
        store
            .list_api_keys(stray.organization_id, Environment::Live, None, 10)
            .await
            .unwrap()
            .is_empty(),
        "the stray key was written to its own organization"
    );

    // Invalid wins over a conflict, whatever a backend would check first.
    let taken = organization("with-keys-stray-taken");
    store.create_organization(&taken).await.unwrap();
    let clash = OrganizationRecord {
        slug: taken.slug.clone(),
        ..organization("with-keys-stray-clash")
    };
    match store
        .create_organization_with_keys(&clash, std::slice::from_ref(&stray))
        .await
    {
        Err(StoreError::Invalid(_)) => {}
        other => panic!("a stray key and a taken slug: expected Invalid, got {other:?}"),
    }
    assert_no_key(&store, &stray, "the stray key, with a taken slug").await;

    let rehomed = ApiKeyRecord {
        organization_id: org.id,
        ..stray
    };
    store
        .create_organization_with_keys(&org, &[own.clone(), rehomed.clone()])
        .await
        .unwrap();
    assert_stored(&store, &own, "the own key, once every key belongs").await;
    assert_stored(&store, &rehomed, "the re-homed key").await;
}

/// Organizations created at once with a key of one hash: exactly one is created, and no loser
/// leaves its organization or any of its keys behind.
pub async fn concurrent_organization_with_keys_creates_with_one_hash_have_one_winner(store: Store) {
    let hash = hash_of(KeyId::generate());
    let results = race(8, |_| {
        let store = store.clone();
        let org = organization("raced-with-keys");
        let keys = vec![
            api_key(org.id, Environment::Test, KeyId::generate()),
            ApiKeyRecord {
                key_hash: hash,
                ..api_key(org.id, Environment::Live, KeyId::generate())
            },
        ];
        async move {
            let result = store.create_organization_with_keys(&org, &keys).await;
            (org, keys, result)
        }
    })
    .await;

    let winners: Vec<OrgId> = results
        .iter()
        .filter(|(_, _, r)| r.is_ok())
        .map(|(org, _, _)| org.id)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one organization may hold a key hash: {results:?}"
    );
    for (org, keys, result) in results {
        if org.id == winners[0] {
            for key in &keys {
                assert_stored(&store, key, "a winner's key").await;
            }
            continue;
        }
        assert_conflict(result, "a losing organization create");
        assert_eq!(
            store.get_organization(org.id).await.unwrap(),
            None,
            "a loser's organization was written"
        );
        assert_eq!(
            store.get_organization_by_slug(&org.slug).await.unwrap(),
            None,
            "a loser's slug was claimed"
        );
        for key in &keys {
            assert_eq!(
                store.locate_api_key(key.id).await.unwrap(),
                None,
                "a loser's key id was claimed"
            );
            assert_eq!(
                store
                    .get_api_key(org.id, key.environment, key.id)
                    .await
                    .unwrap(),
                None,
                "a loser's key was written"
            );
        }
    }
    assert_eq!(
        store
            .find_api_key_by_hash(&hash)
            .await
            .unwrap()
            .map(|k| k.organization_id),
        Some(winners[0])
    );
}

pub async fn api_key_list_is_newest_first_and_paginates(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Test;
    // Sorted, because ids generated within one millisecond are in random order; k[2] is never
    // stored (a cursor may name a gap), k[6] is newer than every stored key.
    let mut k: Vec<KeyId> = (0..7).map(|_| KeyId::generate()).collect();
    k.sort();
    // Inserted out of order: the order must come from the ids, not from insertion.
    for i in [4, 0, 5, 1, 3] {
        store
            .create_api_key(&api_key(org, env, k[i]))
            .await
            .unwrap();
    }

    let all = store.list_api_keys(org, env, None, 100).await.unwrap();
    assert_eq!(
        ids(&all),
        vec![k[5], k[4], k[3], k[1], k[0]],
        "newest first"
    );
    assert_eq!(
        all[0],
        store.get_api_key(org, env, k[5]).await.unwrap().unwrap(),
        "list returns whole rows"
    );

    assert_eq!(
        ids(&store.list_api_keys(org, env, None, 2).await.unwrap()),
        vec![k[5], k[4]]
    );
    assert_eq!(
        ids(&store.list_api_keys(org, env, Some(k[4]), 2).await.unwrap()),
        vec![k[3], k[1]],
        "after is exclusive"
    );
    assert_eq!(
        ids(&store.list_api_keys(org, env, Some(k[1]), 2).await.unwrap()),
        vec![k[0]]
    );
    assert_eq!(
        ids(&store.list_api_keys(org, env, Some(k[2]), 10).await.unwrap()),
        vec![k[1], k[0]],
        "a cursor between rows"
    );
    assert_eq!(
        ids(&store.list_api_keys(org, env, Some(k[6]), 10).await.unwrap()),
        ids(&all)
    );
    assert!(
        store
            .list_api_keys(org, env, Some(k[0]), 10)
            .await
            .unwrap()
            .is_empty(),
        "nothing is older than the oldest"
    );
    assert!(
        store
            .list_api_keys(org, env, None, 0)
            .await
            .unwrap()
            .is_empty(),
        "limit 0"
    );
}

pub async fn api_key_list_is_isolated_per_organization_and_environment(store: Store) {
    // Generated back to back, so their ids (and any encoding of them) are neighbours.
    let a = OrgId::generate();
    let empty = OrgId::generate();
    let b = OrgId::generate();
    let mut expected = Vec::new();
    for (org, env, n) in [
        (a, Environment::Live, 2),
        (a, Environment::Test, 2),
        (b, Environment::Live, 2),
        (b, Environment::Test, 1),
    ] {
        let mut made: Vec<KeyId> = Vec::new();
        for _ in 0..n {
            let key = api_key(org, env, KeyId::generate());
            store.create_api_key(&key).await.unwrap();
            made.push(key.id);
        }
        made.sort_by(|x, y| y.cmp(x));
        expected.push((org, env, made));
    }
    for (org, env, made) in expected {
        let listed = store.list_api_keys(org, env, None, 100).await.unwrap();
        assert_eq!(ids(&listed), made, "keys of {org} {env}");
        assert!(
            listed
                .iter()
                .all(|k| k.organization_id == org && k.environment == env)
        );
    }
    for env in [Environment::Live, Environment::Test] {
        assert!(
            store
                .list_api_keys(empty, env, None, 100)
                .await
                .unwrap()
                .is_empty(),
            "a neighbour's keys leaked"
        );
    }
}

pub async fn api_key_update_replaces_the_row(store: Store) {
    let org = OrgId::generate();
    let key = api_key(org, Environment::Live, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    let now = time::now();
    let updated = ApiKeyRecord {
        name: "renamed".into(),
        scopes: vec![Scope::ApiKeysRead],
        allowed_origins: vec!["https://a.example".into()],
        rate_limit_override: Some(7),
        revoked_at: Some(now),
        last_used_at: Some(now),
        ..key.clone()
    };
    store.update_api_key(&updated).await.unwrap();

    assert_eq!(
        store
            .get_api_key(org, Environment::Live, key.id)
            .await
            .unwrap(),
        Some(updated.clone())
    );
    assert_eq!(
        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
        Some(updated.clone())
    );
    assert_eq!(
        store
            .list_api_keys(org, Environment::Live, None, 10)
            .await
            .unwrap(),
        vec![updated]
    );
}

pub async fn api_key_update_of_missing_row_creates_nothing(store: Store) {
    let org = OrgId::generate();
    let key = api_key(org, Environment::Live, KeyId::generate());
    store
        .update_api_key(&key)
        .await
        .expect("updating a missing row is a no-op");
    assert_eq!(
        store
            .get_api_key(org, Environment::Live, key.id)
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.locate_api_key(key.id).await.unwrap(), None);
    assert_eq!(
        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
        None
    );
    assert!(
        store
            .list_api_keys(org, Environment::Live, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn api_key_update_keeps_a_revocation(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    let t = time::now();
    let revoked = ApiKeyRecord {
        revoked_at: Some(t),
        ..key.clone()
    };
    store.update_api_key(&revoked).await.unwrap();
    assert_stored(&store, &revoked, "a revocation is written").await;

    // A copy read before the revocation: its other columns are written, the revocation stays.
    let stale = ApiKeyRecord {
        name: "renamed from a stale copy".into(),
        scopes: vec![Scope::ApiKeysRead],
        ..key.clone()
    };
    assert_eq!(stale.revoked_at, None);
    store.update_api_key(&stale).await.unwrap();
    let expected = ApiKeyRecord {
        revoked_at: Some(t),
        ..stale
    };
    assert_stored(&store, &expected, "an update must not clear a revocation").await;

    // Nor can the revocation time be moved, later or earlier.
    for moved in [t + TimeDelta::hours(1), t - TimeDelta::hours(1)] {
        let re_revoked = ApiKeyRecord {
            revoked_at: Some(moved),
            ..expected.clone()
        };
        store.update_api_key(&re_revoked).await.unwrap();
        assert_stored(&store, &expected, "an update must not move a revocation").await;
    }
}

pub async fn api_key_update_keeps_the_later_last_used_at(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Test;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    let t = time::now();
    store.touch_api_key(org, env, key.id, t).await.unwrap();

    // A copy read before the touch (`None`) or holding an older touch cannot roll it back.
    for (stale_used, name) in [
        (None, "stale none"),
        (Some(t - TimeDelta::minutes(5)), "stale older"),
    ] {
        let stale = ApiKeyRecord {
            name: name.into(),
            last_used_at: stale_used,
            ..key.clone()
        };
        store.update_api_key(&stale).await.unwrap();
        assert_stored(
            &store,
            &ApiKeyRecord {
                last_used_at: Some(t),
                ..stale
            },
            "an update must not roll back last_used_at",
        )
        .await;
    }

    // A later value is written.
    let later = t + TimeDelta::minutes(2);
    let newer = ApiKeyRecord {
        name: "newer".into(),
        last_used_at: Some(later),
        ..key.clone()
    };
    store.update_api_key(&newer).await.unwrap();
    assert_stored(&store, &newer, "a later last_used_at is written").await;

    // The rotated old row follows the same rule.
    let replacement = api_key(org, env, KeyId::generate());
    let rotated = ApiKeyRecord {
        rotated_at: Some(later),
        grace_expires_at: Some(later + TimeDelta::hours(24)),
        replaced_by: Some(replacement.id),
        last_used_at: Some(t),
        ..newer.clone()
    };
    store.rotate_api_key(&rotated, &replacement).await.unwrap();
    assert_stored(
        &store,
        &ApiKeyRecord {
            last_used_at: Some(later),
            ..rotated
        },
        "a rotation must not roll back last_used_at",
    )
    .await;
    assert_stored(&store, &replacement, "the replacement is written").await;
}

pub async fn concurrent_stale_updates_cannot_undo_a_revocation(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    // One revocation races seven updates from copies read before it.
    let t = time::now();
    let results = race(8, |i| {
        let store = store.clone();
        let copy = if i == 0 {
            ApiKeyRecord {
                revoked_at: Some(t),
                ..key.clone()
            }
        } else {
            ApiKeyRecord {
                name: format!("stale {i}"),
                ..key.clone()
            }
        };
        async move { store.update_api_key(&copy).await }
    })
    .await;
    for result in results {
        result.expect("update");
    }

    let stored = store.get_api_key(org, env, key.id).await.unwrap().unwrap();
    assert_eq!(
        stored.revoked_at,
        Some(t),
        "a racing stale update undid the revocation: {stored:?}"
    );
}

pub async fn api_key_update_never_writes_the_rotation_columns(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    // Before a rotation: the caller's rotation columns are ignored, its other columns written.
    let now = time::now();
    let forged = ApiKeyRecord {
        name: "renamed".into(),
        rotated_at: Some(now),
        grace_expires_at: Some(now + TimeDelta::hours(1)),
        replaced_by: Some(KeyId::generate()),
        ..key.clone()
    };
    store.update_api_key(&forged).await.unwrap();
    let renamed = ApiKeyRecord {
        name: "renamed".into(),
        ..key.clone()
    };
    assert_stored(
        &store,
        &renamed,
        "an update must not set the rotation columns",
    )
    .await;

    let replacement = api_key(org, env, KeyId::generate());
    let rotated = rotation_of(&renamed, &replacement);
    store.rotate_api_key(&rotated, &replacement).await.unwrap();
    assert_stored(&store, &rotated, "the rotation is written").await;

    // A copy read before the rotation: its other columns are written, the rotation stays.
    let stale = ApiKeyRecord {
        name: "renamed from a stale copy".into(),
        scopes: vec![Scope::ApiKeysRead],
        ..renamed.clone()
    };
    store.update_api_key(&stale).await.unwrap();
    let expected = ApiKeyRecord {
        rotated_at: rotated.rotated_at,
        grace_expires_at: rotated.grace_expires_at,
        replaced_by: rotated.replaced_by,
        ..stale
    };
    assert_stored(&store, &expected, "an update must not undo a rotation").await;

    // Nor can an update move the rotation's times or point it at another key.
    let t = rotated.rotated_at.unwrap();
    for (moved, what) in [
        (
            ApiKeyRecord {
                rotated_at: Some(t + TimeDelta::hours(1)),
                ..expected.clone()
            },
            "an update must not move rotated_at",
        ),
        (
            ApiKeyRecord {
                grace_expires_at: Some(t + TimeDelta::days(30)),
                ..expected.clone()
            },
            "an update must not extend the grace period",
        ),
        (
            ApiKeyRecord {
                grace_expires_at: None,
                ..expected.clone()
            },
            "an update must not clear the grace period",
        ),
        (
            ApiKeyRecord {
                replaced_by: Some(KeyId::generate()),
                ..expected.clone()
            },
            "an update must not change replaced_by",
        ),
    ] {
        store.update_api_key(&moved).await.unwrap();
        assert_stored(&store, &expected, what).await;
    }

    // The key is still rotated: a second rotation from the stale copy is refused.
    let second = api_key(org, env, KeyId::generate());
    assert_conflict(
        store
            .rotate_api_key(&rotation_of(&renamed, &second), &second)
            .await,
        "rotating a key after a stale update",
    );
    assert_no_key(&store, &second, "the second replacement").await;
    assert_stored(&store, &replacement, "the replacement stands").await;

    // A revocation after the rotation is written, and keeps the rotation too.
    let revoked = ApiKeyRecord {
        revoked_at: Some(t + TimeDelta::minutes(1)),
        ..expected.clone()
    };
    store
        .update_api_key(&ApiKeyRecord {
            replaced_by: None,
            ..revoked.clone()
        })
        .await
        .unwrap();
    assert_stored(&store, &revoked, "a revocation of a rotated key").await;
}

pub async fn concurrent_stale_updates_cannot_undo_a_rotation(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Test;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    // One rotation races seven updates from copies read before it.
    let replacement = api_key(org, env, KeyId::generate());
    let rotated = rotation_of(&key, &replacement);
    let results = race(8, |i| {
        let store = store.clone();
        let (rotated, replacement) = (rotated.clone(), replacement.clone());
        let stale = ApiKeyRecord {
            name: format!("stale {i}"),
            ..key.clone()
        };
        async move {
            if i == 0 {
                store.rotate_api_key(&rotated, &replacement).await
            } else {
                store.update_api_key(&stale).await
            }
        }
    })
    .await;
    for result in results {
        result.expect("rotation or update");
    }

    let stored = store.get_api_key(org, env, key.id).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.rotated_at,
            stored.grace_expires_at,
            stored.replaced_by
        ),
        (
            rotated.rotated_at,
            rotated.grace_expires_at,
            rotated.replaced_by
        ),
        "a racing stale update undid the rotation: {stored:?}"
    );
    assert_stored(&store, &replacement, "the replacement is written").await;
}

pub async fn api_key_rotation_stores_both_keys(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let old = api_key(org, env, KeyId::generate());
    store.create_api_key(&old).await.unwrap();

    let now = time::now();
    let replacement = ApiKeyRecord {
        created_at: now,
        ..api_key(org, env, KeyId::generate())
    };
    let rotated = ApiKeyRecord {
        rotated_at: Some(now),
        grace_expires_at: Some(now + TimeDelta::hours(24)),
        replaced_by: Some(replacement.id),
        ..old.clone()
    };
    store.rotate_api_key(&rotated, &replacement).await.unwrap();

    assert_eq!(
        store.get_api_key(org, env, old.id).await.unwrap(),
        Some(rotated.clone())
    );
    assert_eq!(
        store.get_api_key(org, env, replacement.id).await.unwrap(),
        Some(replacement.clone())
    );
    assert_eq!(
        store.find_api_key_by_hash(&old.key_hash).await.unwrap(),
        Some(rotated.clone())
    );
    assert_eq!(
        store
            .find_api_key_by_hash(&replacement.key_hash)
            .await
            .unwrap(),
        Some(replacement.clone())
    );
    assert_eq!(
        store.locate_api_key(replacement.id).await.unwrap(),
        Some((org, env))
    );
    // Newest (greatest id) first; two ids from one millisecond may come in either order.
    let mut expected = vec![replacement, rotated];
    expected.sort_by_key(|k| std::cmp::Reverse(k.id));
    assert_eq!(
        store.list_api_keys(org, env, None, 10).await.unwrap(),
        expected
    );
}

pub async fn api_key_rotation_of_missing_key_writes_nothing(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let ghost = api_key(org, env, KeyId::generate());
    let replacement = api_key(org, env, KeyId::generate());
    let rotated = ApiKeyRecord {
        rotated_at: Some(time::now()),
        replaced_by: Some(replacement.id),
        ..ghost.clone()
    };

    assert_conflict(
        store.rotate_api_key(&rotated, &replacement).await,
        "rotating a key that does not exist",
    );
    assert_eq!(store.locate_api_key(replacement.id).await.unwrap(), None);
    assert_eq!(
        store
            .find_api_key_by_hash(&replacement.key_hash)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .list_api_keys(org, env, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// The old row's half of a rotation to `replacement`, made from the caller's copy `old`.
fn rotation_of(old: &ApiKeyRecord, replacement: &ApiKeyRecord) -> ApiKeyRecord {
    let now = time::now();
    ApiKeyRecord {
        rotated_at: Some(now),
        grace_expires_at: Some(now + TimeDelta::hours(24)),
        replaced_by: Some(replacement.id),
        ..old.clone()
    }
}

pub async fn api_key_rotation_of_revoked_key_writes_nothing(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();
    let revoked = ApiKeyRecord {
        revoked_at: Some(time::now()),
        ..key.clone()
    };
    store.update_api_key(&revoked).await.unwrap();

    // The rotating caller read the key before the revocation.
    let replacement = api_key(org, env, KeyId::generate());
    assert_conflict(
        store
            .rotate_api_key(&rotation_of(&key, &replacement), &replacement)
            .await,
        "rotating a revoked key",
    );
    assert_stored(&store, &revoked, "the revoked key is unchanged").await;
    assert_no_key(&store, &replacement, "the replacement of a revoked key").await;
    assert_eq!(
        ids(&store.list_api_keys(org, env, None, 10).await.unwrap()),
        vec![key.id]
    );
}

pub async fn api_key_rotation_of_rotated_key_writes_nothing(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Test;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();
    let first = api_key(org, env, KeyId::generate());
    let rotated = rotation_of(&key, &first);
    store.rotate_api_key(&rotated, &first).await.unwrap();

    // A second rotation from a copy read before the first.
    let second = api_key(org, env, KeyId::generate());
    assert_conflict(
        store
            .rotate_api_key(&rotation_of(&key, &second), &second)
            .await,
        "rotating an already rotated key",
    );
    assert_stored(&store, &rotated, "the first rotation stands").await;
    assert_stored(&store, &first, "the first replacement stands").await;
    assert_no_key(&store, &second, "the second replacement").await;

    // The replacement itself can be rotated.
    let third = api_key(org, env, KeyId::generate());
    store
        .rotate_api_key(&rotation_of(&first, &third), &third)
        .await
        .expect("rotating the replacement");
    assert_stored(&store, &third, "the replacement's replacement").await;
}

pub async fn concurrent_rotations_of_one_key_have_one_winner(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let key = api_key(org, env, KeyId::generate());
    store.create_api_key(&key).await.unwrap();

    let results = race(8, |_| {
        let store = store.clone();
        let replacement = api_key(org, env, KeyId::generate());
        let old = rotation_of(&key, &replacement);
        async move {
            let result = store.rotate_api_key(&old, &replacement).await;
            (replacement, result)
        }
    })
    .await;

    let winners: Vec<KeyId> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(k, _)| k.id)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one rotation of a key succeeds: {results:?}"
    );
    for (replacement, result) in results {
        if replacement.id != winners[0] {
            assert_conflict(result, "a losing rotation");
            assert_no_key(&store, &replacement, "a losing rotation's replacement").await;
        }
    }
    let stored = store.get_api_key(org, env, key.id).await.unwrap().unwrap();
    assert_eq!(stored.replaced_by, Some(winners[0]));
    let mut expected = vec![key.id, winners[0]];
    expected.sort_by(|x, y| y.cmp(x));
    assert_eq!(
        ids(&store.list_api_keys(org, env, None, 100).await.unwrap()),
        expected
    );
}

pub async fn api_key_touch_changes_only_last_used_at(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Test;
    // Not yet revoked: the case revokes it below.
    let key = ApiKeyRecord {
        last_used_at: None,
        revoked_at: None,
        ..fully_populated_key(org, env)
    };
    store.create_api_key(&key).await.unwrap();

    let at = time::now() + TimeDelta::seconds(30);
    store.touch_api_key(org, env, key.id, at).await.unwrap();
    let touched = ApiKeyRecord {
        last_used_at: Some(at),
        ..key.clone()
    };
    assert_eq!(
        store.get_api_key(org, env, key.id).await.unwrap(),
        Some(touched.clone())
    );

    // A touch after a revocation keeps the revocation.
    let revoked = ApiKeyRecord {
        revoked_at: Some(at + TimeDelta::seconds(1)),
        name: "revoked".into(),
        ..touched
    };
    store.update_api_key(&revoked).await.unwrap();
    let later = at + TimeDelta::minutes(2);
    store.touch_api_key(org, env, key.id, later).await.unwrap();
    let expected = ApiKeyRecord {
        last_used_at: Some(later),
        ..revoked
    };
    assert_eq!(
        store.get_api_key(org, env, key.id).await.unwrap(),
        Some(expected.clone())
    );
    assert_eq!(
        store.find_api_key_by_hash(&key.key_hash).await.unwrap(),
        Some(expected)
    );

    // Touching a key that does not exist creates nothing.
    let ghost = KeyId::generate();
    store.touch_api_key(org, env, ghost, later).await.unwrap();
    assert_eq!(store.get_api_key(org, env, ghost).await.unwrap(), None);
    assert_eq!(
        ids(&store.list_api_keys(org, env, None, 10).await.unwrap()),
        vec![key.id]
    );
}

// Read-after-write through the reads a backend may cache (the authentication hot path's). Each
// write below comes right after reads of the row, so a cache holding the old value is caught.

/// Every write of a key is seen by the next read, by hash and by primary key, even with the old
/// row just read (and read twice, so a cache has served it).
pub async fn api_key_reads_follow_every_write(store: Store) {
    let org = OrgId::generate();
    let env = Environment::Live;
    let key = api_key(org, env, KeyId::generate());
    // An unknown hash first: a backend must not remember that it was unknown.
    assert_no_key(&store, &key, "before the create").await;
    store.create_api_key(&key).await.unwrap();
    assert_stored_twice(&store, &key, "after the create").await;

    let renamed = ApiKeyRecord {
        name: "renamed".into(),
        scopes: vec![Scope::ApiKeysRead],
        rate_limit_override: Some(3),
        ..key.clone()
    };
    store.update_api_key(&renamed).await.unwrap();
    assert_stored_twice(&store, &renamed, "after an update").await;

    let at = time::now();
    store.touch_api_key(org, env, key.id, at).await.unwrap();
    let touched = ApiKeyRecord {
        last_used_at: Some(at),
        ..renamed
    };
    assert_stored_twice(&store, &touched, "after a touch").await;

    let replacement = api_key(org, env, KeyId::generate());
    assert_no_key(&store, &replacement, "the replacement before the rotation").await;
    let rotated = rotation_of(&touched, &replacement);
    store.rotate_api_key(&rotated, &replacement).await.unwrap();
    assert_stored_twice(&store, &rotated, "the old key after a rotation").await;
    assert_stored_twice(&store, &replacement, "the replacement after a rotation").await;

    let revoked = ApiKeyRecord {
        revoked_at: Some(time::now()),
        ..rotated
    };
    store.update_api_key(&revoked).await.unwrap();
    assert_stored_twice(&store, &revoked, "after a revocation").await;

    let later = at + TimeDelta::minutes(1);
    store.touch_api_key(org, env, key.id, later).await.unwrap();
    let touched_again = ApiKeyRecord {
        last_used_at: Some(later),
        ..revoked
    };
    assert_stored_twice(&store, &touched_again, "after a touch of a revoked key").await;

    // The replacement's row changes on its own.
    let replacement_revoked = ApiKeyRecord {
        revoked_at: Some(time::now()),
        ..replacement
    };
    store.update_api_key(&replacement_revoked).await.unwrap();
    assert_stored_twice(&store, &replacement_revoked, "the revoked replacement").await;
    assert_stored(&store, &touched_again, "the old key is unchanged").await;
}

async fn assert_stored_twice(store: &Store, expected: &ApiKeyRecord, what: &str) {
    assert_stored(store, expected, what).await;
    assert_stored(store, expected, &format!("{what}, read again")).await;
}

/// Every write of an organization is seen by the next read, by id and by slug, even with the
/// old row just read (twice).
pub async fn organization_reads_follow_every_write(store: Store) {
    let org = organization("reads-follow");
    // An unknown id first: a backend must not remember that it was unknown.
    assert_eq!(store.get_organization(org.id).await.unwrap(), None);
    store.create_organization(&org).await.unwrap();
    assert_organization_twice(&store, &org, "after the create").await;

    let renamed = OrganizationRecord {
        name: "Renamed".into(),
        updated_at: org.updated_at + TimeDelta::seconds(1),
        ..org.clone()
    };
    store.update_organization(&renamed).await.unwrap();
    assert_organization_twice(&store, &renamed, "after a rename").await;

    let suspended = OrganizationRecord {
        status: OrgStatus::Suspended,
        updated_at: org.updated_at + TimeDelta::seconds(2),
        ..renamed
    };
    store.update_organization(&suspended).await.unwrap();
    assert_organization_twice(&store, &suspended, "after a suspension").await;

    let reactivated = OrganizationRecord {
        status: OrgStatus::Active,
        updated_at: org.updated_at + TimeDelta::seconds(3),
        ..suspended
    };
    store.update_organization(&reactivated).await.unwrap();
    assert_organization_twice(&store, &reactivated, "after a reactivation").await;
}

async fn assert_organization_twice(store: &Store, expected: &OrganizationRecord, what: &str) {
    for read in ["", ", read again"] {
        assert_eq!(
            store.get_organization(expected.id).await.unwrap().as_ref(),
            Some(expected),
            "{what}{read}"
        );
        assert_eq!(
            store
                .get_organization_by_slug(&expected.slug)
                .await
                .unwrap()
                .as_ref(),
            Some(expected),
            "{what}{read} (by slug)"
        );
    }
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

/// Readers hammer `find_api_key_by_hash` (the authentication hot path) while the key is
/// revoked: once the revocation has returned, no read may return the key unrevoked.
pub async fn concurrent_reads_see_a_revocation_once_it_returns(store: Store) {
    let at = time::now();
    reads_after_a_write_see_it(
        "a revocation",
        || {
            let store = store.clone();
            async move {
                let key = api_key(OrgId::generate(), Environment::Live, KeyId::generate());
                store.create_api_key(&key).await.unwrap();
                (store, key)
            }
        },
        move |s: Arc<(Store, ApiKeyRecord)>| {
            Box::pin(async move {
                let (store, key) = &*s;
                let found = store.find_api_key_by_hash(&key.key_hash).await.unwrap();
                let found = found.expect("the key exists");
                assert_eq!(found.id, key.id);
                found.revoked_at == Some(at)
            })
        },
        |s| {
            Box::pin(async move {
                let (store, key) = &*s;
                let revoked = ApiKeyRecord {
                    revoked_at: Some(at),
                    ..key.clone()
                };
                store.update_api_key(&revoked).await.unwrap();
            })
        },
    )
    .await;
}

/// Readers hammer `get_organization` (the authentication hot path) while the organization is
/// suspended: once the update has returned, every read sees the suspension.
pub async fn concurrent_reads_see_an_organization_update_once_it_returns(store: Store) {
    reads_after_a_write_see_it(
        "an organization suspension",
        || {
            let store = store.clone();
            async move {
                let org = organization("hammered");
                store.create_organization(&org).await.unwrap();
                (store, org)
            }
        },
        |s: Arc<(Store, OrganizationRecord)>| {
            Box::pin(async move {
                let (store, org) = &*s;
                let found = store.get_organization(org.id).await.unwrap();
                found.expect("the organization exists").status == OrgStatus::Suspended
            })
        },
        |s| {
            Box::pin(async move {
                let (store, org) = &*s;
                let suspended = OrganizationRecord {
                    status: OrgStatus::Suspended,
                    updated_at: org.updated_at + TimeDelta::seconds(1),
                    ..org.clone()
                };
                store.update_organization(&suspended).await.unwrap();
            })
        },
    )
    .await;
}

pub async fn idempotency_lifecycle(store: Store) {
    // Answered: the first request completes, a retry gets the stored answer.
    let answered = scope("answered");
    let first = in_flight(1, tomorrow());
    assert_eq!(
        store.idempotency_begin(&answered, &first).await.unwrap(),
        IdempotencyBegin::Started
    );
    let retry = in_flight(2, tomorrow());
    assert_eq!(
        store.idempotency_begin(&answered, &retry).await.unwrap(),
        IdempotencyBegin::Existing(first.clone()),
        "a retry while in flight sees the held record"
    );
    let done = IdempotencyRecord {
        response: Some(StoredResponse {
            status: 201,
            sealed_body: vec![0, 1, 2, 255, 254],
            required_scope: Some("api_keys:manage".into()),
        }),
        ..first.clone()
    };
    store.idempotency_complete(&answered, &done).await.unwrap();
    assert_eq!(
        store.idempotency_begin(&answered, &retry).await.unwrap(),
        IdempotencyBegin::Existing(done)
    );

    // Abandoned: the hold is released and the next request starts afresh.
    let abandoned = scope("abandoned");
    assert_eq!(
        store.idempotency_begin(&abandoned, &first).await.unwrap(),
        IdempotencyBegin::Started
    );
    store.idempotency_abandon(&abandoned).await.unwrap();
    assert_eq!(
        store.idempotency_begin(&abandoned, &retry).await.unwrap(),
        IdempotencyBegin::Started
    );
    assert_eq!(
        store.idempotency_begin(&abandoned, &first).await.unwrap(),
        IdempotencyBegin::Existing(retry)
    );

    // Abandoning a scope that holds nothing is harmless.
    store.idempotency_abandon(&scope("never")).await.unwrap();
}

pub async fn idempotency_expired_record_counts_as_absent(store: Store) {
    let s = scope("expiring");
    let expired = in_flight(1, time::now() - TimeDelta::seconds(1));
    assert_eq!(
        store.idempotency_begin(&s, &expired).await.unwrap(),
        IdempotencyBegin::Started
    );

    let live = in_flight(2, tomorrow());
    assert_eq!(
        store.idempotency_begin(&s, &live).await.unwrap(),
        IdempotencyBegin::Started,
        "an expired record must not be replayed"
    );
    assert_eq!(
        store.idempotency_begin(&s, &expired).await.unwrap(),
        IdempotencyBegin::Existing(live)
    );
}

pub async fn handoff_opens_once(store: Store) {
    let handoff: [u8; 16] = KeyId::generate().ulid().to_bytes();
    let other: [u8; 16] = KeyId::generate().ulid().to_bytes();
    let first = time::now();
    let expires = tomorrow();
    assert_eq!(
        store
            .open_handoff_once(&handoff, first, expires)
            .await
            .unwrap(),
        None,
        "the first opening is first"
    );
    let later = first + TimeDelta::seconds(5);
    assert_eq!(
        store
            .open_handoff_once(&handoff, later, expires)
            .await
            .unwrap(),
        Some(first),
        "a later opening learns when the first was"
    );
    assert_eq!(
        store
            .open_handoff_once(&handoff, later, expires)
            .await
            .unwrap(),
        Some(first),
        "and a later one still, unchanged"
    );
    assert_eq!(
        store
            .open_handoff_once(&other, later, expires)
            .await
            .unwrap(),
        None,
        "another handoff is its own"
    );
}

pub async fn concurrent_handoff_openings_have_one_first(store: Store) {
    let handoff: [u8; 16] = KeyId::generate().ulid().to_bytes();
    let at = time::now();
    let mut tasks = JoinSet::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.spawn(async move {
            store
                .open_handoff_once(&handoff, at, tomorrow())
                .await
                .unwrap()
        });
    }
    let mut firsts = 0;
    while let Some(outcome) = tasks.join_next().await {
        match outcome.unwrap() {
            None => firsts += 1,
            Some(first) => assert_eq!(first, at),
        }
    }
    assert_eq!(firsts, 1, "exactly one opening is first");
}

pub async fn idempotency_scopes_are_independent(store: Store) {
    let base = scope("shared-key");
    let other_credential = IdempotencyScope {
        credential: hash_of(KeyId::generate()),
        ..base.clone()
    };
    let other_key = IdempotencyScope {
        key: unique("shared-key"),
        ..base.clone()
    };
    let expires_at = tomorrow();
    let scopes = [&base, &other_credential, &other_key];
    for (i, s) in scopes.iter().enumerate() {
        let record = in_flight(i as u8, expires_at);
        assert_eq!(
            store.idempotency_begin(s, &record).await.unwrap(),
            IdempotencyBegin::Started,
            "scope {i}"
        );
    }
    // Each scope holds its own record.
    for (i, s) in scopes.iter().enumerate() {
        assert_eq!(
            store
                .idempotency_begin(s, &in_flight(9, expires_at))
                .await
                .unwrap(),
            IdempotencyBegin::Existing(in_flight(i as u8, expires_at)),
            "scope {i}"
        );
    }
}

pub async fn concurrent_idempotency_begins_have_one_winner(store: Store) {
    let s = scope("raced");
    let expires_at = tomorrow();
    let results = race(8, |i| {
        let store = store.clone();
        let s = s.clone();
        async move {
            (
                i,
                store
                    .idempotency_begin(&s, &in_flight(i as u8, expires_at))
                    .await
                    .unwrap(),
            )
        }
    })
    .await;

    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, r)| *r == IdempotencyBegin::Started)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one request may hold a scope: {results:?}"
    );
    let held = in_flight(winners[0] as u8, expires_at);
    for (i, result) in results {
        if i != winners[0] {
            assert_eq!(
                result,
                IdempotencyBegin::Existing(held.clone()),
                "request {i} saw another record"
            );
        }
    }
}

pub async fn settings_put_if_absent(store: Store) {
    let name = unique("setting");
    assert_eq!(store.get_setting(&name).await.unwrap(), None);
    let first = [0u8, 1, 2, 0xff, 0xfe];
    assert!(store.put_setting_if_absent(&name, &first).await.unwrap());
    assert_eq!(
        store.get_setting(&name).await.unwrap().as_deref(),
        Some(&first[..])
    );
    assert!(
        !store.put_setting_if_absent(&name, b"second").await.unwrap(),
        "a set setting was overwritten"
    );
    assert_eq!(
        store.get_setting(&name).await.unwrap().as_deref(),
        Some(&first[..])
    );
    assert_eq!(store.get_setting(&unique("setting")).await.unwrap(), None);
}

pub async fn concurrent_setting_puts_have_one_winner(store: Store) {
    let name = unique("raced-setting");
    let results = race(8, |i| {
        let store = store.clone();
        let name = name.clone();
        async move {
            (
                i,
                store
                    .put_setting_if_absent(&name, format!("value {i}").as_bytes())
                    .await
                    .unwrap(),
            )
        }
    })
    .await;

    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, set)| *set)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one put may set a setting: {results:?}"
    );
    let expected = format!("value {}", winners[0]).into_bytes();
    assert_eq!(store.get_setting(&name).await.unwrap(), Some(expected));
}

// ---- collect sessions ----

pub async fn collect_session_round_trip(store: Store) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(session.clone())
    );
    for ping in &session.pings {
        assert_eq!(
            store.find_collect_ping(ping.id).await.unwrap(),
            Some(session.id),
            "ping {} resolves to its session",
            ping.id
        );
    }

    // Every column is stored as given, later state included, and the pings keep the order
    // they were given in (here not the order of their ids).
    let now = time::now();
    let (early, late) = (fresh_ping(), fresh_ping());
    let full = CollectSessionRecord {
        environment: Environment::Test,
        last_seq: 17,
        last_call: 5,
        pings: vec![
            PingRecord {
                arrived_at: Some(now - TimeDelta::milliseconds(1500)),
                ..late
            },
            early,
        ],
        ws_identity: Some(ws_identity("2001:db8::1")),
        results_at: Some(now),
        ..collect_session(0)
    };
    store.create_collect_session(&full).await.unwrap();
    assert_eq!(
        store.get_collect_session(full.id).await.unwrap(),
        Some(full.clone())
    );
    for ping in &full.pings {
        assert_eq!(
            store.find_collect_ping(ping.id).await.unwrap(),
            Some(full.id)
        );
    }
    // A session created with its one-time columns set keeps them.
    assert!(
        !store
            .record_collect_ping(full.id, full.pings[0].id, now)
            .await
            .unwrap()
    );
    assert!(
        !store
            .record_collect_ws_identity(full.id, &ws_identity("192.0.2.1"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .mark_collect_results(full.id, now + TimeDelta::seconds(1))
            .await
            .unwrap(),
        Some(full.clone())
    );
    assert!(!store.advance_collect_seq(full.id, 17).await.unwrap());
    assert!(!store.advance_collect_call(full.id, 5).await.unwrap());
    assert_eq!(
        store.get_collect_session(full.id).await.unwrap(),
        Some(full)
    );

    // A session without pings is a session too.
    let bare = collect_session(0);
    store.create_collect_session(&bare).await.unwrap();
    assert_eq!(
        store.get_collect_session(bare.id).await.unwrap(),
        Some(bare)
    );

    assert_eq!(
        store
            .get_collect_session(SessionId::generate())
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.find_collect_ping(PingId::generate()).await.unwrap(),
        None
    );
}

pub async fn collect_session_conflicts_write_nothing(store: Store) {
    let first = collect_session(3);
    store.create_collect_session(&first).await.unwrap();

    // A taken session id, with fresh pings.
    let same_id = CollectSessionRecord {
        id: first.id,
        page_url: "https://impostor.example/".into(),
        ..collect_session(2)
    };
    assert_conflict(
        store.create_collect_session(&same_id).await,
        "a session with a taken id",
    );
    for ping in &same_id.pings {
        assert_eq!(
            store.find_collect_ping(ping.id).await.unwrap(),
            None,
            "a losing session's ping was claimed"
        );
    }

    // A taken ping id among fresh ones.
    let mut taken_ping = collect_session(3);
    taken_ping.pings[1].id = first.pings[2].id;
    assert_conflict(
        store.create_collect_session(&taken_ping).await,
        "a session with a taken ping id",
    );
    assert_eq!(
        store.get_collect_session(taken_ping.id).await.unwrap(),
        None,
        "the losing session was written"
    );
    for ping in [&taken_ping.pings[0], &taken_ping.pings[2]] {
        assert_eq!(
            store.find_collect_ping(ping.id).await.unwrap(),
            None,
            "a losing session's free ping was claimed"
        );
    }
    assert_eq!(
        store.find_collect_ping(first.pings[2].id).await.unwrap(),
        Some(first.id),
        "the taken ping changed hands"
    );

    // One ping twice in the same session: a conflict, as if the first had been created first.
    let mut twice = collect_session(2);
    twice.pings[1].id = twice.pings[0].id;
    assert_conflict(
        store.create_collect_session(&twice).await,
        "a session naming one ping twice",
    );
    assert_eq!(store.get_collect_session(twice.id).await.unwrap(), None);
    assert_eq!(
        store.find_collect_ping(twice.pings[0].id).await.unwrap(),
        None
    );

    // The original is untouched.
    assert_eq!(
        store.get_collect_session(first.id).await.unwrap(),
        Some(first.clone())
    );
    for ping in &first.pings {
        assert_eq!(
            store.find_collect_ping(ping.id).await.unwrap(),
            Some(first.id)
        );
    }

    // Nothing a failed call checked stays claimed: retried with the conflict fixed, each
    // succeeds, with the ids it could not have before.
    let retried = CollectSessionRecord {
        pings: vec![
            taken_ping.pings[0].clone(),
            fresh_ping(),
            taken_ping.pings[2].clone(),
        ],
        ..taken_ping
    };
    store.create_collect_session(&retried).await.unwrap();
    assert_eq!(
        store.get_collect_session(retried.id).await.unwrap(),
        Some(retried.clone())
    );
    let retried = CollectSessionRecord {
        pings: vec![twice.pings[0].clone(), fresh_ping()],
        ..twice
    };
    store.create_collect_session(&retried).await.unwrap();
    assert_eq!(
        store.find_collect_ping(retried.pings[0].id).await.unwrap(),
        Some(retried.id)
    );
    let retried = CollectSessionRecord {
        id: SessionId::generate(),
        ..same_id
    };
    store.create_collect_session(&retried).await.unwrap();
    assert_eq!(
        store.get_collect_session(retried.id).await.unwrap(),
        Some(retried)
    );
}

/// One of a collect session's two counters: batch numbers and call-proof counters follow the
/// same rule (only upward, one winner), so one set of cases checks both.
#[derive(Clone, Copy, Debug)]
enum CollectCounter {
    Seq,
    Call,
}

impl CollectCounter {
    async fn advance(self, store: &Store, id: SessionId, to: u64) -> bool {
        match self {
            CollectCounter::Seq => store.advance_collect_seq(id, to).await.unwrap(),
            CollectCounter::Call => store.advance_collect_call(id, to).await.unwrap(),
        }
    }

    fn set(self, session: &mut CollectSessionRecord, to: u64) {
        match self {
            CollectCounter::Seq => session.last_seq = to,
            CollectCounter::Call => session.last_call = to,
        }
    }
}

pub async fn collect_seq_advances_only_upward(store: Store) {
    collect_counter_advances_only_upward(store, CollectCounter::Seq).await;
}

pub async fn collect_call_counter_advances_only_upward(store: Store) {
    collect_counter_advances_only_upward(store, CollectCounter::Call).await;
}

pub async fn concurrent_collect_seq_advances_have_one_winner(store: Store) {
    concurrent_collect_counter_advances_have_one_winner(store, CollectCounter::Seq).await;
}

pub async fn concurrent_collect_call_advances_have_one_winner(store: Store) {
    concurrent_collect_counter_advances_have_one_winner(store, CollectCounter::Call).await;
}

async fn collect_counter_advances_only_upward(store: Store, counter: CollectCounter) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();

    let mut expected = session.clone();
    // (to, accepted): gaps are allowed, a value not above the last accepted one is a replay.
    let steps = [
        (0, false),
        (1, true),
        (1, false),
        (4, true),
        (3, false),
        (4, false),
        (5, true),
        (u64::MAX - 1, true),
        (2, false),
        (u64::MAX, true),
        (u64::MAX, false),
        (0, false),
    ];
    for (to, accepted) in steps {
        assert_eq!(
            counter.advance(&store, session.id, to).await,
            accepted,
            "{counter:?}: advance to {to}"
        );
        if accepted {
            counter.set(&mut expected, to);
        }
        assert_eq!(
            store.get_collect_session(session.id).await.unwrap(),
            Some(expected.clone()),
            "{counter:?}: after advancing to {to}"
        );
    }

    let ghost = SessionId::generate();
    assert!(!counter.advance(&store, ghost, 1).await);
    assert_eq!(
        store.get_collect_session(ghost).await.unwrap(),
        None,
        "an advance created a session"
    );
}

async fn concurrent_collect_counter_advances_have_one_winner(
    store: Store,
    counter: CollectCounter,
) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();

    // One value delivered eight times at once: one is accepted, the others are replays.
    let results = race(8, |_| {
        let store = store.clone();
        async move { counter.advance(&store, session.id, 1).await }
    })
    .await;
    assert_eq!(
        results.iter().filter(|accepted| **accepted).count(),
        1,
        "{counter:?}: exactly one advance to a value succeeds: {results:?}"
    );

    // Different values at once: whatever the order, the highest is accepted and stays.
    let results = race(8, |i| {
        let store = store.clone();
        let to = 2 + i as u64;
        async move { (to, counter.advance(&store, session.id, to).await) }
    })
    .await;
    assert!(
        results.contains(&(9, true)),
        "{counter:?}: the highest value was refused: {results:?}"
    );
    let mut expected = session;
    counter.set(&mut expected, 9);
    assert_eq!(
        store.get_collect_session(expected.id).await.unwrap(),
        Some(expected)
    );
}

pub async fn collect_ping_first_arrival_wins(store: Store) {
    let session = collect_session(3);
    let other = collect_session(1);
    store.create_collect_session(&session).await.unwrap();
    store.create_collect_session(&other).await.unwrap();
    let t1 = time::now();
    let t2 = t1 + TimeDelta::seconds(1);

    let mut expected = session.clone();
    assert!(
        store
            .record_collect_ping(session.id, session.pings[1].id, t1)
            .await
            .unwrap()
    );
    expected.pings[1].arrived_at = Some(t1);
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected.clone())
    );

    // The first arrival is the one that counts, even against an earlier time.
    for at in [t2, t1 - TimeDelta::seconds(1)] {
        assert!(
            !store
                .record_collect_ping(session.id, session.pings[1].id, at)
                .await
                .unwrap(),
            "a second arrival was recorded"
        );
    }
    // Pings the session does not have are refused: unknown, or another session's.
    assert!(
        !store
            .record_collect_ping(session.id, PingId::generate(), t1)
            .await
            .unwrap(),
        "an unknown ping was recorded"
    );
    assert!(
        !store
            .record_collect_ping(session.id, other.pings[0].id, t1)
            .await
            .unwrap(),
        "another session's ping was recorded"
    );
    // A missing session: refused, and not created.
    let ghost = SessionId::generate();
    assert!(
        !store
            .record_collect_ping(ghost, session.pings[0].id, t1)
            .await
            .unwrap()
    );
    assert_eq!(store.get_collect_session(ghost).await.unwrap(), None);
    assert_eq!(
        store.find_collect_ping(session.pings[0].id).await.unwrap(),
        Some(session.id)
    );
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected.clone()),
        "a refused arrival changed the session"
    );
    assert_eq!(
        store.get_collect_session(other.id).await.unwrap(),
        Some(other)
    );

    // The other pings still arrive, each once.
    assert!(
        store
            .record_collect_ping(session.id, session.pings[2].id, t2)
            .await
            .unwrap()
    );
    assert!(
        store
            .record_collect_ping(session.id, session.pings[0].id, t1)
            .await
            .unwrap()
    );
    expected.pings[2].arrived_at = Some(t2);
    expected.pings[0].arrived_at = Some(t1);
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected)
    );
}

pub async fn concurrent_collect_ping_arrivals_have_one_winner(store: Store) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();
    let base = time::now();
    let at = move |i: usize| base + TimeDelta::milliseconds(i as i64);

    let ping = session.pings[0].id;
    let results = race(8, |i| {
        let store = store.clone();
        async move {
            let recorded = store.record_collect_ping(session.id, ping, at(i)).await;
            (i, recorded.unwrap())
        }
    })
    .await;
    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, r)| *r)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one arrival of a ping is recorded: {results:?}"
    );

    // Arrivals of different pings at once: none undoes another.
    let pings = [session.pings[1].id, session.pings[2].id];
    let results = race(2, |i| {
        let store = store.clone();
        async move { store.record_collect_ping(session.id, pings[i], base).await }
    })
    .await;
    for result in results {
        assert!(result.unwrap());
    }

    let mut expected = session.clone();
    expected.pings[0].arrived_at = Some(at(winners[0]));
    expected.pings[1].arrived_at = Some(base);
    expected.pings[2].arrived_at = Some(base);
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected)
    );
}

pub async fn collect_ws_identity_is_recorded_once(store: Store) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();
    let first = ws_identity("203.0.113.7");

    assert!(
        store
            .record_collect_ws_identity(session.id, &first)
            .await
            .unwrap()
    );
    let expected = CollectSessionRecord {
        ws_identity: Some(first.clone()),
        ..session.clone()
    };
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected.clone())
    );
    assert!(
        !store
            .record_collect_ws_identity(session.id, &ws_identity("198.51.100.9"))
            .await
            .unwrap(),
        "a second identity was recorded"
    );
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected)
    );

    let ghost = SessionId::generate();
    assert!(
        !store
            .record_collect_ws_identity(ghost, &first)
            .await
            .unwrap()
    );
    assert_eq!(store.get_collect_session(ghost).await.unwrap(), None);

    // Eight connections at once: one identity is recorded, the winner's.
    let raced = collect_session(3);
    store.create_collect_session(&raced).await.unwrap();
    let results = race(8, |i| {
        let store = store.clone();
        async move {
            let identity = ws_identity(&format!("192.0.2.{i}"));
            let recorded = store.record_collect_ws_identity(raced.id, &identity).await;
            (i, recorded.unwrap())
        }
    })
    .await;
    let winners: Vec<usize> = results
        .iter()
        .filter(|(_, r)| *r)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one identity is recorded: {results:?}"
    );
    assert_eq!(
        store
            .get_collect_session(raced.id)
            .await
            .unwrap()
            .and_then(|s| s.ws_identity),
        Some(ws_identity(&format!("192.0.2.{}", winners[0])))
    );
}

pub async fn collect_results_first_call_wins(store: Store) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();
    store.advance_collect_seq(session.id, 2).await.unwrap();
    let t1 = time::now();

    let expected = CollectSessionRecord {
        last_seq: 2,
        results_at: Some(t1),
        ..session.clone()
    };
    assert_eq!(
        store.mark_collect_results(session.id, t1).await.unwrap(),
        Some(expected.clone()),
        "the first call returns the stored session"
    );
    for at in [t1 + TimeDelta::seconds(5), t1 - TimeDelta::seconds(5)] {
        assert_eq!(
            store.mark_collect_results(session.id, at).await.unwrap(),
            Some(expected.clone()),
            "a later call moved results_at"
        );
    }
    assert_eq!(
        store.get_collect_session(session.id).await.unwrap(),
        Some(expected)
    );

    let ghost = SessionId::generate();
    assert_eq!(store.mark_collect_results(ghost, t1).await.unwrap(), None);
    assert_eq!(
        store.get_collect_session(ghost).await.unwrap(),
        None,
        "marking created a session"
    );
}

pub async fn concurrent_collect_results_have_one_winner(store: Store) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();
    let base = time::now();
    let results = race(8, |i| {
        let store = store.clone();
        let at = base + TimeDelta::seconds(i as i64);
        async move { store.mark_collect_results(session.id, at).await.unwrap() }
    })
    .await;

    let stored = store
        .get_collect_session(session.id)
        .await
        .unwrap()
        .expect("the session exists");
    let Some(at) = stored.results_at else {
        panic!("no call set results_at");
    };
    assert!(
        (0..8).any(|i| at == base + TimeDelta::seconds(i)),
        "results_at is none of the calls' times: {at}"
    );
    assert_eq!(
        stored,
        CollectSessionRecord {
            results_at: Some(at),
            ..session
        }
    );
    for result in results {
        assert_eq!(
            result.as_ref(),
            Some(&stored),
            "every call returns the one stored session"
        );
    }
}

/// Each update writes only its own column: run all at once, every one of them is kept.
pub async fn concurrent_collect_updates_keep_each_other(store: Store) {
    let session = collect_session(3);
    store.create_collect_session(&session).await.unwrap();
    let at = time::now();
    let identity = ws_identity("203.0.113.50");
    let pings: Vec<PingId> = session.pings.iter().map(|p| p.id).collect();

    let results = race(7, |i| {
        let store = store.clone();
        let identity = identity.clone();
        let ping = pings[i % 3];
        async move {
            match i {
                0..=2 => store.record_collect_ping(session.id, ping, at).await,
                3 => store.advance_collect_seq(session.id, 3).await,
                4 => {
                    store
                        .record_collect_ws_identity(session.id, &identity)
                        .await
                }
                5 => store.advance_collect_call(session.id, 2).await,
                _ => store
                    .mark_collect_results(session.id, at)
                    .await
                    .map(|s| s.is_some()),
            }
        }
    })
    .await;
    for result in results {
        assert!(result.unwrap(), "an update was refused");
    }

    let expected = CollectSessionRecord {
        last_seq: 3,
        last_call: 2,
        pings: session
            .pings
            .iter()
            .map(|p| PingRecord {
                arrived_at: Some(at),
                ..p.clone()
            })
            .collect(),
        ws_identity: Some(identity),
        results_at: Some(at),
        ..session
    };
    assert_eq!(
        store.get_collect_session(expected.id).await.unwrap(),
        Some(expected)
    );
}

/// A session is stored whole and read back by its full primary key only; a missing session
/// answers `None` and has no decisions.
pub async fn session_round_trip(store: Store) {
    let org = OrgId::generate();
    let session = session_record(org, Environment::Live, SessionId::generate());
    store.save_session(&session, None, &[]).await.unwrap();
    assert_eq!(
        store
            .get_session(org, Environment::Live, session.id)
            .await
            .unwrap(),
        Some(session.clone())
    );
    assert_eq!(
        store
            .get_session(org, Environment::Test, session.id)
            .await
            .unwrap(),
        None,
        "another environment"
    );
    assert_eq!(
        store
            .get_session(OrgId::generate(), Environment::Live, session.id)
            .await
            .unwrap(),
        None,
        "another organization"
    );
    let missing = SessionId::generate();
    assert_eq!(
        store
            .get_session(org, Environment::Live, missing)
            .await
            .unwrap(),
        None,
        "a missing session"
    );
    assert!(
        store
            .list_decisions(org, Environment::Live, missing, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_sessions(OrgId::generate(), Environment::Live, None, 10)
            .await
            .unwrap()
            .is_empty(),
        "an organization without sessions"
    );

    // The minimal session (no visitor, empty lists, JSON null) round-trips too.
    let bare = SessionRecord {
        id: SessionId::generate(),
        visitor_id: None,
        page_url: String::new(),
        processed_through: 0,
        processed_seqs: Vec::new(),
        state: RawJson::null(),
        ..session.clone()
    };
    store.save_session(&bare, None, &[]).await.unwrap();
    assert_eq!(
        store
            .get_session(org, Environment::Live, bare.id)
            .await
            .unwrap(),
        Some(bare)
    );
}

/// Saving a session again replaces its row: one row, the latest columns.
pub async fn session_save_replaces_the_row(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let first = session_record(org, env, SessionId::generate());
    store.save_session(&first, None, &[]).await.unwrap();
    let d = decision_record(first.id, DecisionId::generate(), 1);
    let second = SessionRecord {
        updated_at: first.updated_at + TimeDelta::seconds(3),
        processed_through: 2,
        processed_seqs: vec![5, 6],
        state: RawJson::encode(&json!({ "score": 0.9 })).unwrap(),
        latest_decision: Some(d.decision.clone()),
        visitor_id: None,
        ..first.clone()
    };
    store.save_session(&second, Some(&d), &[]).await.unwrap();
    assert_eq!(
        store.get_session(org, env, first.id).await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        store.list_sessions(org, env, None, 10).await.unwrap(),
        vec![second],
        "a replaced session is still one row"
    );
}

pub async fn session_list_is_newest_first_and_paginates(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    // s[2] is never stored (a cursor may name a gap), s[6] is newer than every stored session.
    let s = sorted_ids(7, SessionId::generate);
    // Saved out of order: the order must come from the ids, not from the writes.
    for i in [4, 0, 5, 1, 3] {
        store
            .save_session(&session_record(org, env, s[i]), None, &[])
            .await
            .unwrap();
    }
    let list = |after, limit| {
        let store = store.clone();
        async move { session_ids(&store.list_sessions(org, env, after, limit).await.unwrap()) }
    };
    let all = store.list_sessions(org, env, None, 100).await.unwrap();
    assert_eq!(
        session_ids(&all),
        vec![s[5], s[4], s[3], s[1], s[0]],
        "newest first"
    );
    assert_eq!(
        Some(all[0].clone()),
        store.get_session(org, env, s[5]).await.unwrap(),
        "list returns whole rows"
    );
    assert_eq!(list(None, 2).await, vec![s[5], s[4]], "limit");
    assert_eq!(
        list(Some(s[4]), 2).await,
        vec![s[3], s[1]],
        "after is exclusive"
    );
    assert_eq!(list(Some(s[1]), 2).await, vec![s[0]]);
    assert_eq!(
        list(Some(s[2]), 10).await,
        vec![s[1], s[0]],
        "a cursor between rows"
    );
    assert_eq!(
        list(Some(s[6]), 10).await,
        session_ids(&all),
        "a cursor above all"
    );
    assert!(
        list(Some(s[0]), 10).await.is_empty(),
        "nothing is older than the oldest"
    );
    assert!(list(None, 0).await.is_empty(), "limit 0");
}

pub async fn session_list_is_isolated_per_organization_and_environment(store: Store) {
    // Generated back to back, so their ids (and any encoding of them) are neighbours.
    let a = OrgId::generate();
    let empty = OrgId::generate();
    let b = OrgId::generate();
    let mut expected = Vec::new();
    for (org, env, n) in [
        (a, Environment::Live, 2),
        (a, Environment::Test, 2),
        (b, Environment::Live, 2),
        (b, Environment::Test, 1),
    ] {
        let mut made = sorted_ids(n, SessionId::generate);
        for id in &made {
            store
                .save_session(&session_record(org, env, *id), None, &[])
                .await
                .unwrap();
        }
        made.reverse();
        expected.push((org, env, made));
    }
    for (org, env, made) in expected {
        let listed = store.list_sessions(org, env, None, 100).await.unwrap();
        assert_eq!(session_ids(&listed), made, "sessions of {org} {env}");
        assert!(
            listed
                .iter()
                .all(|s| s.organization_id == org && s.environment == env)
        );
        for id in &made {
            let other = match env {
                Environment::Live => Environment::Test,
                Environment::Test => Environment::Live,
            };
            assert_eq!(store.get_session(org, other, *id).await.unwrap(), None);
        }
    }
    for env in [Environment::Live, Environment::Test] {
        assert!(
            store
                .list_sessions(empty, env, None, 100)
                .await
                .unwrap()
                .is_empty(),
            "a neighbour's sessions leaked"
        );
    }
}

/// Every save with a decision appends it to the session's history (read newest first, by
/// decision id); a save without one leaves the history as it was; histories are per session.
pub async fn session_decisions_are_kept_newest_first_and_only_when_given(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    // Neighbouring sessions, so a history leaking into the next partition would show.
    let sids = sorted_ids(3, SessionId::generate);
    let (sid, neighbour, last) = (sids[0], sids[1], sids[2]);
    let d = sorted_ids(4, DecisionId::generate);
    let mut session = session_record(org, env, sid);

    store.save_session(&session, None, &[]).await.unwrap();
    assert!(
        store
            .list_decisions(org, env, sid, 10)
            .await
            .unwrap()
            .is_empty(),
        "a save without a decision records none"
    );
    // Written out of order (d[3] before d[1]): the history's order comes from the ids.
    let mut written = Vec::new();
    for (i, with) in [
        (0, true),
        (0, false),
        (2, true),
        (3, true),
        (3, false),
        (1, true),
    ] {
        session.processed_seqs.push(i);
        let decision = with.then(|| decision_record(sid, d[i as usize], i));
        session.latest_decision = decision.as_ref().map(|x| x.decision.clone());
        store
            .save_session(&session, decision.as_ref(), &[])
            .await
            .unwrap();
        written.extend(decision);
    }
    let other = decision_record(neighbour, DecisionId::generate(), 9);
    store
        .save_session(&session_record(org, env, neighbour), Some(&other), &[])
        .await
        .unwrap();
    store
        .save_session(&session_record(org, env, last), None, &[])
        .await
        .unwrap();

    let history = store.list_decisions(org, env, sid, 10).await.unwrap();
    assert_eq!(
        decision_ids(&history),
        vec![d[3], d[2], d[1], d[0]],
        "every decision given, newest first, and no other"
    );
    let mut expected = written.clone();
    expected.sort_by_key(|x| std::cmp::Reverse(x.id));
    assert_eq!(history, expected, "decisions are stored whole");
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 2).await.unwrap()),
        vec![d[3], d[2]],
        "limit"
    );
    assert!(
        store
            .list_decisions(org, env, sid, 0)
            .await
            .unwrap()
            .is_empty(),
        "limit 0"
    );
    assert_eq!(
        store.list_decisions(org, env, neighbour, 10).await.unwrap(),
        vec![other],
        "histories are per session"
    );
    assert!(
        store
            .list_decisions(org, env, last, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.get_session(org, env, sid).await.unwrap(),
        Some(session),
        "the session row is the last one saved"
    );
}

/// A session and the decision saved with it are one write: readers racing a series of saves
/// never see a decision without its session row, nor a session row without its decision.
pub async fn concurrent_reads_see_a_session_and_its_decision_together(store: Store) {
    const SAVES: u64 = 40;
    const READERS: usize = 4;
    let (org, env) = (OrgId::generate(), Environment::Test);
    let sid = SessionId::generate();
    let d = sorted_ids(SAVES as usize + 1, DecisionId::generate);
    let save = |n: u64| {
        let decision = decision_record(sid, d[n as usize], n);
        let session = SessionRecord {
            processed_seqs: vec![n],
            latest_decision: Some(decision.decision.clone()),
            ..session_record(org, env, sid)
        };
        (session, decision)
    };
    let (s0, d0) = save(0);
    store.save_session(&s0, Some(&d0), &[]).await.unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let mut readers = JoinSet::new();
    for _ in 0..READERS {
        let (store, done) = (store.clone(), Arc::clone(&done));
        readers.spawn(async move {
            let seq = |s: Option<SessionRecord>| s.expect("the session exists").processed_seqs[0];
            let mut reads = 0u64;
            loop {
                let finished = done.load(Ordering::SeqCst);
                // Session, history, session: a history newer than the first session read means
                // a decision landed before its session row; older than the second read means a
                // session row landed before its decision.
                let before = seq(store.get_session(org, env, sid).await.unwrap());
                let newest = store.list_decisions(org, env, sid, 1).await.unwrap();
                let after = seq(store.get_session(org, env, sid).await.unwrap());
                let newest = newest[0].decision.to_value()["n"].as_u64().unwrap();
                assert!(
                    before <= newest,
                    "session row at save {before} without its decision (newest {newest})"
                );
                assert!(
                    newest <= after,
                    "decision {newest} visible before its session row (then at {after})"
                );
                reads += 1;
                if finished {
                    return reads;
                }
                tokio::task::yield_now().await;
            }
        });
    }
    for n in 1..=SAVES {
        let (session, decision) = save(n);
        store
            .save_session(&session, Some(&decision), &[])
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    done.store(true, Ordering::SeqCst);
    let reads: u64 = readers.join_all().await.into_iter().sum();
    assert!(reads >= READERS as u64);
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 100).await.unwrap()),
        d.iter().rev().copied().collect::<Vec<_>>(),
        "every save's decision is kept"
    );
}

// ---- events ----

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

fn event_ids(events: &[EventRecord]) -> Vec<EventId> {
    events.iter().map(|e| e.id).collect()
}

pub async fn events_are_saved_with_their_session_and_listed_newest_first(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let e = sorted_ids(5, EventId::generate);
    let mut written = Vec::new();
    for (i, id) in e.iter().enumerate() {
        let session = session_record(org, env, SessionId::generate());
        let kind = if i % 2 == 0 {
            EventType::SessionFingerprintCalculated
        } else {
            EventType::SessionResultPersisted
        };
        let event = event_record(&session, *id, kind);
        let d = decision_record(session.id, DecisionId::generate(), i as u64);
        store
            .save_session(&session, Some(&d), std::slice::from_ref(&event))
            .await
            .unwrap();
        written.push(event);
    }
    for event in &written {
        assert_eq!(
            store.get_event(org, env, event.id).await.unwrap().as_ref(),
            Some(event),
            "an event reads back whole"
        );
    }
    let all = store.list_events(org, env, None, 10).await.unwrap();
    assert_eq!(
        event_ids(&all),
        e.iter().rev().copied().collect::<Vec<_>>(),
        "newest first"
    );
    let page = store.list_events(org, env, None, 2).await.unwrap();
    assert_eq!(event_ids(&page), vec![e[4], e[3]], "limit");
    let next = store.list_events(org, env, Some(e[3]), 2).await.unwrap();
    assert_eq!(event_ids(&next), vec![e[2], e[1]], "`after` is exclusive");
    assert!(
        store
            .list_events(org, env, Some(e[0]), 2)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_events(org, env, None, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .get_event(org, env, EventId::generate())
            .await
            .unwrap(),
        None
    );

    // Two events in one save, with no decision.
    let session = session_record(org, env, SessionId::generate());
    let pair = sorted_ids(2, EventId::generate);
    let both = [
        event_record(&session, pair[0], EventType::SessionFingerprintCalculated),
        event_record(&session, pair[1], EventType::SessionResultPersisted),
    ];
    store.save_session(&session, None, &both).await.unwrap();
    assert_eq!(
        event_ids(&store.list_events(org, env, None, 2).await.unwrap()),
        vec![pair[1], pair[0]]
    );
}

/// A redelivered batch saves the same events again: one row each, the later one kept.
pub async fn events_saved_again_replace_their_row(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let session = session_record(org, env, SessionId::generate());
    let id = EventId::generate();
    let first = event_record(&session, id, EventType::SessionResultPersisted);
    store
        .save_session(&session, None, std::slice::from_ref(&first))
        .await
        .unwrap();
    let again = EventRecord {
        data: json!({ "redelivered": true }),
        ..first.clone()
    };
    store
        .save_session(&session, None, std::slice::from_ref(&again))
        .await
        .unwrap();
    assert_eq!(
        store.list_events(org, env, None, 10).await.unwrap(),
        vec![again],
        "one row per event id"
    );
}

pub async fn events_are_isolated_per_organization_and_environment(store: Store) {
    let org = OrgId::generate();
    let other_org = OrgId::generate();
    let mut ids = Vec::new();
    for (o, env) in [
        (org, Environment::Live),
        (org, Environment::Test),
        (other_org, Environment::Live),
    ] {
        let session = session_record(o, env, SessionId::generate());
        let event = event_record(&session, EventId::generate(), EventType::WebhookTest);
        store
            .save_session(&session, None, std::slice::from_ref(&event))
            .await
            .unwrap();
        ids.push(event.id);
    }
    assert_eq!(
        event_ids(
            &store
                .list_events(org, Environment::Live, None, 10)
                .await
                .unwrap()
        ),
        vec![ids[0]]
    );
    assert_eq!(
        event_ids(
            &store
                .list_events(org, Environment::Test, None, 10)
                .await
                .unwrap()
        ),
        vec![ids[1]]
    );
    assert_eq!(
        store
            .get_event(org, Environment::Test, ids[0])
            .await
            .unwrap(),
        None,
        "a live event is not found under test"
    );
    assert_eq!(
        store
            .get_event(org, Environment::Live, ids[2])
            .await
            .unwrap(),
        None,
        "another organization's event is not found"
    );
}

pub async fn events_of_another_organization_are_refused_with_nothing_written(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let session = session_record(org, env, SessionId::generate());
    let stranger = session_record(OrgId::generate(), env, SessionId::generate());
    let other_env = session_record(org, Environment::Test, SessionId::generate());
    let ours = event_record(
        &session,
        EventId::generate(),
        EventType::SessionResultPersisted,
    );
    for foreign in [&stranger, &other_env] {
        let theirs = event_record(
            foreign,
            EventId::generate(),
            EventType::SessionResultPersisted,
        );
        let refused = store
            .save_session(&session, None, &[ours.clone(), theirs])
            .await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{refused:?}"
        );
    }
    assert_eq!(store.get_session(org, env, session.id).await.unwrap(), None);
    assert!(
        store
            .list_events(org, env, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        store
            .list_events(stranger.organization_id, env, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

// ---- several sessions in one save, and the idle index ----

fn save_of(session: SessionRecord, n: u64) -> SessionSave {
    let decision = decision_record(session.id, DecisionId::generate(), n);
    let event = event_record(
        &session,
        EventId::generate(),
        EventType::SessionResultPersisted,
    );
    SessionSave {
        session,
        decision: Some(decision),
        events: vec![event],
        settled: None,
    }
}

/// A state given in two parts (`SessionSave::settled`) reads back whole, by every read; a later
/// save that gives the same settled part keeps it, one that gives another replaces it, and one
/// that gives the state whole leaves nothing of the old part behind.
pub async fn a_state_saved_in_two_parts_reads_whole(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let mut session = session_record(org, env, SessionId::generate());
    let id = session.id;
    session.latest_decision = Some(decision_record(id, DecisionId::generate(), 1).decision);
    session.state =
        RawJson::encode(&json!({ "observations": { "batches": 1 }, "final": false })).unwrap();
    let settled = RawJson::encode(
        &json!({ "observations": { "probes": { "screen": [1920, 1080] }, "events": "AbC" } }),
    )
    .unwrap();
    let whole = |state: &RawJson, settled: &RawJson| crate::merge_state(state, settled).unwrap();
    let expected = whole(&session.state, &settled);
    assert_eq!(
        expected.to_value(),
        json!({
            "observations": { "batches": 1, "probes": { "screen": [1920, 1080] }, "events": "AbC" },
            "final": false
        }),
        "objects merge member by member"
    );
    saved(&store, &session, Some(&settled)).await;
    let read = |store: Store| async move {
        let got = store.get_session(org, env, id).await.unwrap().unwrap();
        let listed = store.list_sessions(org, env, None, 10).await.unwrap();
        let by_verdict = store
            .list_sessions_by_verdict(org, env, "allow", None, 10)
            .await
            .unwrap();
        (got, listed, by_verdict)
    };
    let (got, listed, by_verdict) = read(store.clone()).await;
    assert_eq!(got.state.to_value(), expected.to_value());
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state.to_value(), expected.to_value());
    assert_eq!(by_verdict.len(), 1);
    assert_eq!(by_verdict[0].state.to_value(), expected.to_value());

    // The next fold: the unsettled part changes, the settled part is the same.
    session.state =
        RawJson::encode(&json!({ "observations": { "batches": 2 }, "final": true })).unwrap();
    let got = saved(&store, &session, Some(&settled)).await;
    assert_eq!(
        got.state.to_value(),
        whole(&session.state, &settled).to_value()
    );
    // Another settled part replaces the first.
    let more = RawJson::encode(&json!({ "observations": { "events": "AbCdE" } })).unwrap();
    let got = saved(&store, &session, Some(&more)).await;
    assert_eq!(
        got.state.to_value(),
        json!({ "observations": { "batches": 2, "events": "AbCdE" }, "final": true })
    );
    // The state given whole: nothing of the settled part is merged in any more.
    let got = saved(&store, &session, None).await;
    assert_eq!(got, session);
}

/// Saves `session` (its state with `settled` apart, if given) alone, and reads it back.
async fn saved(store: &Store, session: &SessionRecord, settled: Option<&RawJson>) -> SessionRecord {
    let save = SessionSave {
        session: session.clone(),
        decision: None,
        events: Vec::new(),
        settled: settled.cloned(),
    };
    store.save_sessions(&[save]).await.unwrap();
    store
        .get_session(session.organization_id, session.environment, session.id)
        .await
        .unwrap()
        .unwrap()
}

pub async fn sessions_saved_together_land_together(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let saves: Vec<SessionSave> = (0..5)
        .map(|n| save_of(session_record(org, env, SessionId::generate()), n))
        .collect();
    store.save_sessions(&saves).await.unwrap();
    for save in &saves {
        let id = save.session.id;
        assert_eq!(
            store.get_session(org, env, id).await.unwrap().as_ref(),
            Some(&save.session)
        );
        assert_eq!(
            store.list_decisions(org, env, id, 10).await.unwrap(),
            vec![save.decision.clone().unwrap()]
        );
        assert_eq!(
            store
                .get_event(org, env, save.events[0].id)
                .await
                .unwrap()
                .as_ref(),
            Some(&save.events[0])
        );
    }
    assert!(
        store.save_sessions(&[]).await.is_ok(),
        "an empty list is a no-op"
    );
}

pub async fn a_refused_save_in_a_list_writes_nothing(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let good = save_of(session_record(org, env, SessionId::generate()), 1);
    let mut foreign_decision = save_of(session_record(org, env, SessionId::generate()), 2);
    foreign_decision.decision = Some(decision_record(
        SessionId::generate(),
        DecisionId::generate(),
        2,
    ));
    let twice = save_of(good.session.clone(), 3);
    for list in [
        vec![good.clone(), foreign_decision],
        vec![good.clone(), twice],
    ] {
        let refused = store.save_sessions(&list).await;
        assert!(
            matches!(refused, Err(StoreError::Invalid(_))),
            "{refused:?}"
        );
        for save in &list {
            assert_eq!(
                store.get_session(org, env, save.session.id).await.unwrap(),
                None,
                "nothing of a refused list is written"
            );
        }
    }
    assert!(
        store
            .list_events(org, env, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
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

pub async fn the_idle_index_follows_each_save_until_final(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let t0 = time::now() - TimeDelta::hours(2);
    let at = |minutes: i64| t0 + TimeDelta::minutes(minutes);
    let a = SessionRecord {
        updated_at: at(0),
        ..session_record(org, env, SessionId::generate())
    };
    let b = SessionRecord {
        updated_at: at(10),
        ..session_record(org, env, SessionId::generate())
    };
    store.save_session(&a, None, &[]).await.unwrap();
    store.save_session(&b, None, &[]).await.unwrap();
    let entry = |s: &SessionRecord| IdleSession {
        organization_id: org,
        environment: env,
        session_id: s.id,
        idle_since: s.updated_at,
    };
    assert_eq!(
        idle_of(&store, org, at(5)).await,
        vec![entry(&a)],
        "`before` is a bound"
    );
    let mut both = idle_of(&store, org, at(11)).await;
    both.sort_by_key(|s| s.idle_since);
    assert_eq!(both, vec![entry(&a), entry(&b)]);
    assert_eq!(
        idle_of(&store, org, at(10)).await,
        vec![entry(&a)],
        "`before` is exclusive"
    );

    // A later save moves the session: it is no longer idle since its old time.
    let a2 = SessionRecord {
        updated_at: at(20),
        ..a.clone()
    };
    store.save_session(&a2, None, &[]).await.unwrap();
    assert_eq!(idle_of(&store, org, at(11)).await, vec![entry(&b)]);
    let mut moved = idle_of(&store, org, at(30)).await;
    moved.sort_by_key(|s| s.idle_since);
    assert_eq!(moved, vec![entry(&b), entry(&a2)], "one row per session");

    // Final: out of the index for good, whatever its time.
    let b2 = SessionRecord {
        finalized: true,
        updated_at: at(30),
        ..b.clone()
    };
    store.save_session(&b2, None, &[]).await.unwrap();
    assert_eq!(idle_of(&store, org, at(60)).await, vec![entry(&a2)]);
    let b3 = SessionRecord {
        updated_at: at(40),
        ..b2.clone()
    };
    store.save_session(&b3, None, &[]).await.unwrap();
    assert_eq!(
        idle_of(&store, org, at(60)).await,
        vec![entry(&a2)],
        "a final session stays out"
    );
    assert_eq!(
        store.list_idle_sessions(at(60), 0).await.unwrap(),
        vec![],
        "limit 0"
    );
}

// ---- visitors ----

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
    }
}

fn visitor_ids(visitors: &[VisitorRecord]) -> Vec<VisitorId> {
    visitors.iter().map(|v| v.id).collect()
}

/// A visitor is stored whole and read back by its full primary key only.
pub async fn visitor_round_trip(store: Store) {
    let org = OrgId::generate();
    let visitor = visitor_record(org, Environment::Test, VisitorId::generate());
    store.save_visitor(&visitor).await.unwrap();
    assert_eq!(
        store
            .get_visitor(org, Environment::Test, visitor.id)
            .await
            .unwrap(),
        Some(visitor.clone())
    );
    assert_eq!(
        store
            .get_visitor(org, Environment::Live, visitor.id)
            .await
            .unwrap(),
        None,
        "another environment"
    );
    assert_eq!(
        store
            .get_visitor(OrgId::generate(), Environment::Test, visitor.id)
            .await
            .unwrap(),
        None,
        "another organization"
    );
    assert_eq!(
        store
            .get_visitor(org, Environment::Test, VisitorId::generate())
            .await
            .unwrap(),
        None,
        "a missing visitor"
    );
    // The minimal visitor (no anchors, empty lists) round-trips too, and indexes nothing.
    let bare = VisitorRecord {
        id: VisitorId::generate(),
        anchors: VisitorAnchors::default(),
        components: Vec::new(),
        recent_sessions: Vec::new(),
        traits: VisitorTraits::default(),
        ..visitor.clone()
    };
    store.save_visitor(&bare).await.unwrap();
    assert_eq!(
        store
            .get_visitor(org, Environment::Test, bare.id)
            .await
            .unwrap(),
        Some(bare.clone())
    );
    assert!(
        store
            .find_visitor_by_anchors(org, Environment::Test, &bare.anchors, 10)
            .await
            .unwrap()
            .is_empty(),
        "no anchors find nothing"
    );
}

/// Saving a visitor again replaces its row, and its index follows its anchors: a lost anchor
/// pair no longer finds it, a new one does.
pub async fn visitor_save_replaces_the_row_and_its_anchor_rows(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let first = visitor_record(org, env, VisitorId::generate());
    store.save_visitor(&first).await.unwrap();
    let mut second = first.clone();
    second.seen_count += 1;
    second.last_seen_at = first.last_seen_at + TimeDelta::seconds(5);
    second.remember_session(SessionId::generate());
    second.anchors = VisitorAnchors {
        audio_hash: Some(unique("audio-2")),
        ..first.anchors.clone()
    };
    store.save_visitor(&second).await.unwrap();
    assert_eq!(
        store.get_visitor(org, env, first.id).await.unwrap(),
        Some(second.clone())
    );
    assert_eq!(
        store.list_visitors(org, env, None, 10).await.unwrap(),
        vec![second.clone()],
        "a replaced visitor is still one row"
    );
    // The old audio hash with the old WebGL hash: only the (webgl, parameters) pair is shared.
    let old_pair = VisitorAnchors {
        parameters_hash: None,
        ..first.anchors.clone()
    };
    assert!(
        store
            .find_visitor_by_anchors(org, env, &old_pair, 10)
            .await
            .unwrap()
            .is_empty(),
        "a lost anchor pair must not find the visitor"
    );
    assert_eq!(
        visitor_ids(
            &store
                .find_visitor_by_anchors(org, env, &second.anchors, 10)
                .await
                .unwrap()
        ),
        vec![first.id]
    );
    let mut capped = second.clone();
    for _ in 0..(VisitorRecord::RECENT_SESSIONS + 5) {
        capped.remember_session(SessionId::generate());
    }
    let newest = capped.recent_sessions[0];
    capped.remember_session(newest);
    assert_eq!(capped.recent_sessions.len(), VisitorRecord::RECENT_SESSIONS);
    assert_eq!(capped.recent_sessions[0], newest, "remembered once, first");
}

pub async fn visitors_saved_together_are_each_indexed_once(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let known = visitor_record(org, env, VisitorId::generate());
    store.save_visitor(&known).await.unwrap();
    let mut seen_again = known.clone();
    seen_again.seen_count += 1;
    seen_again.last_seen_at = known.last_seen_at + TimeDelta::seconds(5);
    let new = visitor_record(org, env, VisitorId::generate());
    store
        .save_visitors(&[seen_again.clone(), new.clone()])
        .await
        .unwrap();
    assert_eq!(
        store.get_visitor(org, env, known.id).await.unwrap(),
        Some(seen_again.clone())
    );
    assert_eq!(
        store.get_visitor(org, env, new.id).await.unwrap(),
        Some(new.clone())
    );
    // The order tables hold each visitor once, at its new values.
    let by_count = store
        .list_visitors_by(org, env, VisitorOrder::SeenCount, None, 10)
        .await
        .unwrap();
    assert_eq!(by_count.len(), 2, "{by_count:?}");
    assert_eq!(by_count[0].id, known.id, "the visitor seen twice leads");
    // Nothing is written when a visitor is given twice.
    let other = visitor_record(org, env, VisitorId::generate());
    assert!(matches!(
        store
            .save_visitors(&[other.clone(), seen_again.clone(), seen_again.clone()])
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(store.get_visitor(org, env, other.id).await.unwrap(), None);
    store.save_visitors(&[]).await.unwrap();
}

pub async fn visitor_list_is_newest_first_paginates_and_is_isolated(store: Store) {
    let a = OrgId::generate();
    let b = OrgId::generate();
    let env = Environment::Test;
    // v[2] is never stored (a cursor may name a gap).
    let v = sorted_ids(6, VisitorId::generate);
    for i in [4, 0, 5, 1, 3] {
        store
            .save_visitor(&visitor_record(a, env, v[i]))
            .await
            .unwrap();
    }
    store
        .save_visitor(&visitor_record(b, env, VisitorId::generate()))
        .await
        .unwrap();
    store
        .save_visitor(&visitor_record(a, Environment::Live, VisitorId::generate()))
        .await
        .unwrap();
    let list = |after, limit| {
        let store = store.clone();
        async move { visitor_ids(&store.list_visitors(a, env, after, limit).await.unwrap()) }
    };
    assert_eq!(
        list(None, 100).await,
        vec![v[5], v[4], v[3], v[1], v[0]],
        "newest first, this partition only"
    );
    assert_eq!(list(None, 2).await, vec![v[5], v[4]], "limit");
    assert_eq!(
        list(Some(v[4]), 2).await,
        vec![v[3], v[1]],
        "after is exclusive"
    );
    assert_eq!(
        list(Some(v[2]), 10).await,
        vec![v[1], v[0]],
        "a cursor between rows"
    );
    assert!(list(Some(v[0]), 10).await.is_empty());
    assert!(list(None, 0).await.is_empty(), "limit 0");
    assert_eq!(
        store
            .list_visitors(OrgId::generate(), env, None, 10)
            .await
            .unwrap(),
        Vec::new()
    );
}

/// The index finds every visitor sharing at least two anchor values, newest first, each once,
/// within its organization and environment only.
pub async fn visitor_anchor_lookup_finds_visitors_sharing_two_anchors(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let ids = sorted_ids(2, VisitorId::generate);
    let older = visitor_record(org, env, ids[0]);
    // The newer one shares the WebGL and parameters hashes but not audio.
    let newer = VisitorRecord {
        anchors: VisitorAnchors {
            audio_hash: Some(unique("audio-other")),
            ..older.anchors.clone()
        },
        ..visitor_record(org, env, ids[1])
    };
    store.save_visitor(&older).await.unwrap();
    store.save_visitor(&newer).await.unwrap();
    // Elsewhere, the same anchors.
    store
        .save_visitor(&VisitorRecord {
            anchors: older.anchors.clone(),
            ..visitor_record(org, Environment::Test, VisitorId::generate())
        })
        .await
        .unwrap();
    store
        .save_visitor(&VisitorRecord {
            anchors: older.anchors.clone(),
            ..visitor_record(OrgId::generate(), env, VisitorId::generate())
        })
        .await
        .unwrap();

    let find = |anchors: VisitorAnchors, limit| {
        let store = store.clone();
        async move {
            visitor_ids(
                &store
                    .find_visitor_by_anchors(org, env, &anchors, limit)
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(
        find(older.anchors.clone(), 10).await,
        vec![newer.id, older.id],
        "both share a pair; newest first; each once"
    );
    assert_eq!(
        find(older.anchors.clone(), 1).await,
        vec![newer.id],
        "limit"
    );
    // Audio timed out: the two remaining anchors still find both.
    let no_audio = VisitorAnchors {
        audio_hash: None,
        ..older.anchors.clone()
    };
    assert_eq!(find(no_audio, 10).await, vec![newer.id, older.id]);
    // WebGL and audio: only the older one has that audio hash.
    let webgl_audio = VisitorAnchors {
        parameters_hash: None,
        ..older.anchors.clone()
    };
    assert_eq!(find(webgl_audio, 10).await, vec![older.id]);
    // One anchor alone links nothing.
    let only_webgl = VisitorAnchors {
        webgl_hash: older.anchors.webgl_hash.clone(),
        ..VisitorAnchors::default()
    };
    assert!(find(only_webgl, 10).await.is_empty());
    assert!(find(older.anchors.clone(), 0).await.is_empty(), "limit 0");
}

// ---- retention and read indexes (D23, D4) ----

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

/// A session keeps the decisions where its phase or verdict changed, plus its latest: one row
/// per fold is pruned in the save that supersedes it. A redelivered decision prunes nothing.
pub async fn decision_history_keeps_turning_points_and_the_latest(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let sid = SessionId::generate();
    let d = sorted_ids(9, DecisionId::generate);
    let script = [
        ("snapshot", "human"),  // 0: first, kept
        ("snapshot", "human"),  // 1: same, dropped when 2 arrives
        ("snapshot", "human"),  // 2: same, dropped when 3 arrives
        ("snapshot", "bot"),    // 3: verdict changed, kept
        ("interactive", "bot"), // 4: phase changed, kept
        ("interactive", "bot"), // 5: same, dropped when 6 arrives
        ("interactive", "bot"), // 6: same; the latest, kept
    ];
    let mut session = session_record(org, env, sid);
    let mut last = None;
    for (i, (phase, verdict)) in script.iter().enumerate() {
        let decision = turn(sid, d[i], phase, verdict);
        session.latest_decision = Some(decision.decision.clone());
        store
            .save_session(&session, Some(&decision), &[])
            .await
            .unwrap();
        last = Some(decision);
    }
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 100).await.unwrap()),
        vec![d[6], d[4], d[3], d[0]],
        "turning points plus the latest, newest first"
    );
    // The latest saved again (a redelivery) is neither duplicated nor pruned.
    store
        .save_session(&session, last.as_ref(), &[])
        .await
        .unwrap();
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 100).await.unwrap()),
        vec![d[6], d[4], d[3], d[0]],
        "a redelivery keeps the history"
    );
    // A late decision (older than the latest) lands below it and prunes nothing.
    let late = turn(sid, d[5], "interactive", "bot");
    store
        .save_session(&session, Some(&late), &[])
        .await
        .unwrap();
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 100).await.unwrap()),
        vec![d[6], d[5], d[4], d[3], d[0]],
        "a late decision keeps the history"
    );
    // A new latest with the same turn replaces the old latest, which was no turning point.
    let next = turn(sid, d[7], "interactive", "bot");
    store
        .save_session(&session, Some(&next), &[])
        .await
        .unwrap();
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 100).await.unwrap()),
        vec![d[7], d[5], d[4], d[3], d[0]]
    );
    // And the next after it, the same again.
    let last = turn(sid, d[8], "interactive", "bot");
    store
        .save_session(&session, Some(&last), &[])
        .await
        .unwrap();
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, sid, 100).await.unwrap()),
        vec![d[8], d[5], d[4], d[3], d[0]]
    );
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

/// `list_sessions_by_verdict` reads the sessions whose latest decision has the verdict, newest
/// first, paginated and isolated; a session moves between verdicts with its latest decision.
pub async fn sessions_by_verdict_follow_the_latest_decision(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let ids = sorted_ids(7, SessionId::generate);
    for (i, id) in ids.iter().enumerate() {
        let verdict = if i % 2 == 0 { "bot" } else { "human" };
        store
            .save_session(&session_with_verdict(org, env, *id, verdict), None, &[])
            .await
            .unwrap();
    }
    // Undecided sessions are indexed under no verdict; other partitions are apart.
    store
        .save_session(&session_record(org, env, SessionId::generate()), None, &[])
        .await
        .unwrap();
    store
        .save_session(
            &session_with_verdict(org, Environment::Live, SessionId::generate(), "bot"),
            None,
            &[],
        )
        .await
        .unwrap();
    store
        .save_session(
            &session_with_verdict(OrgId::generate(), env, SessionId::generate(), "bot"),
            None,
            &[],
        )
        .await
        .unwrap();
    let list = |verdict: &'static str, after, limit| {
        let store = store.clone();
        async move {
            session_ids(
                &store
                    .list_sessions_by_verdict(org, env, verdict, after, limit)
                    .await
                    .unwrap(),
            )
        }
    };
    assert_eq!(
        list("bot", None, 100).await,
        vec![ids[6], ids[4], ids[2], ids[0]]
    );
    assert_eq!(list("human", None, 100).await, vec![ids[5], ids[3], ids[1]]);
    assert_eq!(list("bot", None, 2).await, vec![ids[6], ids[4]], "limit");
    assert_eq!(
        list("bot", Some(ids[4]), 2).await,
        vec![ids[2], ids[0]],
        "after is exclusive"
    );
    assert_eq!(
        list("bot", Some(ids[3]), 10).await,
        vec![ids[2], ids[0]],
        "a cursor between rows"
    );
    assert!(list("suspicious", None, 10).await.is_empty());
    assert!(
        list("bo", None, 10).await.is_empty(),
        "a verdict's prefix is another partition"
    );

    // ids[6] turns human: it leaves the bot list and joins the human one, as stored now.
    let moved = session_with_verdict(org, env, ids[6], "human");
    store.save_session(&moved, None, &[]).await.unwrap();
    assert_eq!(list("bot", None, 100).await, vec![ids[4], ids[2], ids[0]]);
    let humans = store
        .list_sessions_by_verdict(org, env, "human", None, 100)
        .await
        .unwrap();
    assert_eq!(session_ids(&humans), vec![ids[6], ids[5], ids[3], ids[1]]);
    assert_eq!(humans[0], moved, "rows are the sessions as stored");
}

/// Each order lists every visitor of the partition by its value descending, then id
/// descending, across pages, and follows a visitor's updates.
pub async fn visitors_list_in_each_order_across_pages(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let base = time::now() - TimeDelta::days(30);
    let ids = sorted_ids(12, VisitorId::generate);
    let mut visitors = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let i = i as i64;
        let v = VisitorRecord {
            // Values repeat (i % 4 and i % 3), so ties are broken by id.
            first_seen_at: base + TimeDelta::hours(i % 4),
            last_seen_at: base + TimeDelta::days(1 + (i * 7) % 12),
            seen_count: (i % 3) as u64,
            ..visitor_record(org, env, *id)
        };
        store.save_visitor(&v).await.unwrap();
        visitors.push(v);
    }
    store
        .save_visitor(&visitor_record(
            org,
            Environment::Test,
            VisitorId::generate(),
        ))
        .await
        .unwrap();
    store
        .save_visitor(&visitor_record(
            OrgId::generate(),
            env,
            VisitorId::generate(),
        ))
        .await
        .unwrap();

    let check = |visitors: Vec<VisitorRecord>| {
        let store = store.clone();
        async move {
            for order in VisitorOrder::ALL {
                let mut expected = visitors.clone();
                expected.sort_by_key(|v| std::cmp::Reverse((order.value(v), v.id)));
                let mut read = Vec::new();
                let mut after = None;
                loop {
                    let page = store
                        .list_visitors_by(org, env, order, after, 5)
                        .await
                        .unwrap();
                    if page.is_empty() {
                        break;
                    }
                    after = page.last().map(|v| (order.value(v), v.id));
                    read.extend(page);
                }
                assert_eq!(read, expected, "{order:?}: every visitor once, in order");
            }
        }
    };
    check(visitors.clone()).await;

    // A visit moves a visitor in the last_seen and seen_count orders.
    visitors[0].last_seen_at = time::now();
    visitors[0].seen_count = 99;
    store.save_visitor(&visitors[0]).await.unwrap();
    check(visitors.clone()).await;
    assert_eq!(
        store
            .list_visitors_by(org, env, VisitorOrder::LastSeen, None, 1)
            .await
            .unwrap(),
        vec![visitors[0].clone()]
    );
}

/// `purge_expired` drops what was last written or seen before `keep_since` (sessions with
/// their decisions and index rows, events, visitors with theirs) and nothing newer, a bounded
/// step at a time. Times are decades back, so rows of other cases sharing the store are not
/// touched.
pub async fn purge_expired_drops_rows_past_retention_in_bounded_steps(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let long_ago = Timestamp::from_timestamp_millis(1_000_000_000_000).unwrap(); // 2001
    let keep_since = long_ago + TimeDelta::days(90);
    let now = time::now();

    let mut old_sessions = Vec::new();
    for (i, id) in sorted_ids(5, SessionId::generate).into_iter().enumerate() {
        let session = SessionRecord {
            updated_at: long_ago + TimeDelta::minutes(i as i64),
            opened_at: long_ago,
            ..session_with_verdict(org, env, id, "bot")
        };
        let decision = turn(id, DecisionId::generate(), "snapshot", "bot");
        let event = EventRecord {
            created_at: long_ago,
            ..event_record(
                &session,
                EventId::generate(),
                EventType::SessionResultPersisted,
            )
        };
        store
            .save_session(&session, Some(&decision), std::slice::from_ref(&event))
            .await
            .unwrap();
        old_sessions.push((session, event));
    }
    // Written long ago, then again within the retention: kept.
    let revived_id = SessionId::generate();
    let mut revived = SessionRecord {
        updated_at: long_ago,
        ..session_with_verdict(org, env, revived_id, "bot")
    };
    store.save_session(&revived, None, &[]).await.unwrap();
    revived.updated_at = keep_since + TimeDelta::days(1);
    store.save_session(&revived, None, &[]).await.unwrap();
    let fresh = session_with_verdict(org, env, SessionId::generate(), "bot");
    let fresh_event = event_record(
        &fresh,
        EventId::generate(),
        EventType::SessionResultPersisted,
    );
    store
        .save_session(&fresh, None, std::slice::from_ref(&fresh_event))
        .await
        .unwrap();

    // A pending delivery of an old event goes with it; the fresh event's stays.
    let old_delivery = delivery(
        org,
        old_sessions[0].1.id,
        WebhookEndpointId::generate(),
        Some(long_ago),
    );
    let fresh_delivery = delivery(org, fresh_event.id, WebhookEndpointId::generate(), None);
    store
        .create_webhook_deliveries(&[old_delivery.clone(), fresh_delivery.clone()])
        .await
        .unwrap();

    let old_visitor = VisitorRecord {
        first_seen_at: long_ago,
        last_seen_at: long_ago,
        ..visitor_record(org, env, VisitorId::generate())
    };
    store.save_visitor(&old_visitor).await.unwrap();
    let mut seen_again = VisitorRecord {
        first_seen_at: long_ago,
        last_seen_at: long_ago,
        ..visitor_record(org, env, VisitorId::generate())
    };
    store.save_visitor(&seen_again).await.unwrap();
    seen_again.last_seen_at = now;
    store.save_visitor(&seen_again).await.unwrap();

    // Budget 1: each step does a little and says more remains, until nothing does.
    let mut steps = 0;
    while store.purge_expired(now, keep_since, 1).await.unwrap() {
        steps += 1;
        assert!(steps < 10_000, "the purge finishes");
    }
    assert!(
        steps >= 5,
        "a budget of 1 takes a step per expired row ({steps} steps)"
    );

    for (session, event) in &old_sessions {
        assert_eq!(store.get_session(org, env, session.id).await.unwrap(), None);
        assert!(
            store
                .list_decisions(org, env, session.id, 10)
                .await
                .unwrap()
                .is_empty(),
            "its decisions go too"
        );
        assert_eq!(store.get_event(org, env, event.id).await.unwrap(), None);
    }
    // Newest first; the two ids may share a millisecond, so their order is the ids' own.
    let mut kept = vec![fresh.id, revived_id];
    kept.sort_by(|a, b| b.cmp(a));
    assert_eq!(
        session_ids(
            &store
                .list_sessions_by_verdict(org, env, "bot", None, 100)
                .await
                .unwrap()
        ),
        kept.clone(),
        "the verdict index keeps only the kept sessions"
    );
    assert_eq!(
        session_ids(&store.list_sessions(org, env, None, 100).await.unwrap()),
        kept.clone()
    );
    assert!(
        idle_of(&store, org, now + TimeDelta::days(1))
            .await
            .iter()
            .all(|s| s.session_id == fresh.id || s.session_id == revived_id),
        "no idle row names a purged session"
    );
    assert_eq!(
        store.get_session(org, env, revived_id).await.unwrap(),
        Some(revived)
    );
    assert_eq!(
        store.get_event(org, env, fresh_event.id).await.unwrap(),
        Some(fresh_event.clone())
    );
    assert!(
        store
            .list_event_deliveries(org, env, old_delivery.event_id)
            .await
            .unwrap()
            .is_empty(),
        "an expired event's deliveries go with it"
    );
    assert!(
        store
            .due_webhook_deliveries(now, 10)
            .await
            .unwrap()
            .iter()
            .all(|d| d.id != old_delivery.id),
        "and leave nothing due"
    );
    assert_eq!(
        store
            .list_event_deliveries(org, env, fresh_event.id)
            .await
            .unwrap(),
        vec![fresh_delivery]
    );

    assert_eq!(
        store.get_visitor(org, env, old_visitor.id).await.unwrap(),
        None
    );
    assert!(
        store
            .find_visitor_by_anchors(org, env, &old_visitor.anchors, 10)
            .await
            .unwrap()
            .is_empty(),
        "its anchor rows go too"
    );
    for order in VisitorOrder::ALL {
        assert_eq!(
            store
                .list_visitors_by(org, env, order, None, 10)
                .await
                .unwrap(),
            vec![seen_again.clone()],
            "{order:?}: the order index keeps only the kept visitor"
        );
    }
    assert!(
        !store.purge_expired(now, keep_since, 100).await.unwrap(),
        "nothing remains"
    );
}

fn webhook_endpoint(org: OrgId, env: Environment, id: WebhookEndpointId) -> WebhookEndpointRecord {
    let now = time::now();
    WebhookEndpointRecord {
        id,
        organization_id: org,
        environment: env,
        name: "orders".into(),
        url: "https://hooks.shop.example/vigil".into(),
        status: EndpointStatus::Active,
        event_types: vec![EventType::SessionResultPersisted],
        sealed_secret: vec![1, 2, 3, 255],
        previous_secret: None,
        created_at: now,
        updated_at: now,
    }
}

/// An endpoint reads back as written, and an update replaces it, a rotation's previous secret
/// included; an update of an endpoint that does not exist (or is another organization's or
/// environment's) writes nothing.
pub async fn webhook_endpoint_round_trip_and_update(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let mut endpoint = webhook_endpoint(org, env, WebhookEndpointId::generate());
    store.create_webhook_endpoint(&endpoint).await.unwrap();
    assert_eq!(
        store
            .get_webhook_endpoint(org, env, endpoint.id)
            .await
            .unwrap(),
        Some(endpoint.clone())
    );
    assert_eq!(
        store
            .get_webhook_endpoint(org, Environment::Test, endpoint.id)
            .await
            .unwrap(),
        None,
        "the other environment's"
    );
    endpoint.status = EndpointStatus::Disabled;
    endpoint.event_types = vec![
        EventType::WebhookTest,
        EventType::SessionFingerprintCalculated,
    ];
    endpoint.previous_secret = Some(PreviousSecret {
        sealed: endpoint.sealed_secret.clone(),
        until: time::now(),
    });
    endpoint.sealed_secret = vec![9; 60];
    assert!(store.update_webhook_endpoint(&endpoint).await.unwrap());
    assert_eq!(
        store
            .get_webhook_endpoint(org, env, endpoint.id)
            .await
            .unwrap(),
        Some(endpoint.clone())
    );
    for missing in [
        webhook_endpoint(org, env, WebhookEndpointId::generate()),
        webhook_endpoint(OrgId::generate(), env, endpoint.id),
        webhook_endpoint(org, Environment::Test, endpoint.id),
    ] {
        assert!(!store.update_webhook_endpoint(&missing).await.unwrap());
        assert_eq!(
            store
                .get_webhook_endpoint(missing.organization_id, missing.environment, missing.id)
                .await
                .unwrap(),
            None,
            "an update created nothing"
        );
    }
}

/// A second create with a taken id is a conflict and leaves the first row as it was.
pub async fn webhook_endpoint_create_conflict_writes_nothing(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let first = webhook_endpoint(org, env, WebhookEndpointId::generate());
    store.create_webhook_endpoint(&first).await.unwrap();
    let mut second = first.clone();
    second.name = "other".into();
    assert!(matches!(
        store.create_webhook_endpoint(&second).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        store
            .get_webhook_endpoint(org, env, first.id)
            .await
            .unwrap(),
        Some(first)
    );
}

/// Endpoints list newest first, page by `after`, and never show a neighbour's.
pub async fn webhook_endpoints_list_newest_first_paginated_and_isolated(store: Store) {
    let a = OrgId::generate();
    let empty = OrgId::generate();
    let b = OrgId::generate();
    let ids = sorted_ids(5, WebhookEndpointId::generate);
    for id in &ids {
        store
            .create_webhook_endpoint(&webhook_endpoint(a, Environment::Live, *id))
            .await
            .unwrap();
    }
    store
        .create_webhook_endpoint(&webhook_endpoint(
            a,
            Environment::Test,
            WebhookEndpointId::generate(),
        ))
        .await
        .unwrap();
    store
        .create_webhook_endpoint(&webhook_endpoint(
            b,
            Environment::Live,
            WebhookEndpointId::generate(),
        ))
        .await
        .unwrap();
    let newest_first: Vec<_> = ids.iter().rev().copied().collect();
    let first = store
        .list_webhook_endpoints(a, Environment::Live, None, 3)
        .await
        .unwrap();
    let rest = store
        .list_webhook_endpoints(a, Environment::Live, first.last().map(|e| e.id), 3)
        .await
        .unwrap();
    let listed: Vec<_> = first.iter().chain(&rest).map(|e| e.id).collect();
    assert_eq!(listed, newest_first);
    assert_eq!(
        store
            .list_webhook_endpoints(a, Environment::Test, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
    for env in [Environment::Live, Environment::Test] {
        assert!(
            store
                .list_webhook_endpoints(empty, env, None, 10)
                .await
                .unwrap()
                .is_empty(),
            "a neighbour's endpoints leaked"
        );
    }
    assert!(
        store
            .list_webhook_endpoints(a, Environment::Live, None, 0)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Events recorded without a session (a webhook endpoint's test event) read and list like a
/// session's, in their own organization and environment only; recorded again, one row.
pub async fn events_recorded_alone_are_listed_and_isolated(store: Store) {
    let org = OrgId::generate();
    let live = session_record(org, Environment::Live, SessionId::generate());
    let test = session_record(org, Environment::Test, SessionId::generate());
    let ids = sorted_ids(3, EventId::generate);
    let mut recorded = vec![
        event_record(&live, ids[0], EventType::WebhookTest),
        event_record(&live, ids[1], EventType::WebhookTest),
        event_record(&test, ids[2], EventType::WebhookTest),
    ];
    store.record_events(&recorded).await.unwrap();
    store.record_events(&[]).await.unwrap();
    recorded[1].data = json!({"again": true});
    store.record_events(&recorded[1..2]).await.unwrap();
    let listed = store
        .list_events(org, Environment::Live, None, 10)
        .await
        .unwrap();
    assert_eq!(event_ids(&listed), vec![ids[1], ids[0]]);
    assert_eq!(
        listed[0].data,
        json!({"again": true}),
        "recorded again, replaced"
    );
    assert_eq!(
        store
            .get_event(org, Environment::Test, ids[2])
            .await
            .unwrap(),
        Some(recorded[2].clone())
    );
    assert_eq!(
        store
            .get_event(org, Environment::Test, ids[0])
            .await
            .unwrap(),
        None,
        "the other environment's"
    );
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

/// A fan-out stores each (event, endpoint) once however often it runs; an event's deliveries
/// list by endpoint; pending ones come back from the due index earliest first, only once due.
pub async fn webhook_deliveries_are_created_once_listed_and_due_in_order(store: Store) {
    let org = OrgId::generate();
    let (event, other_event) = (EventId::generate(), EventId::generate());
    let endpoints = sorted_ids(3, WebhookEndpointId::generate);
    let now = time::now();
    let later = |s: i64| now + TimeDelta::seconds(s);
    let fan_out = vec![
        delivery(org, event, endpoints[0], Some(later(-30))),
        delivery(org, event, endpoints[1], Some(later(-60))),
        delivery(org, event, endpoints[2], Some(later(3_600))),
        delivery(org, event, endpoints[2], Some(later(3_600))),
    ];
    assert_eq!(
        store.create_webhook_deliveries(&fan_out).await.unwrap(),
        vec![fan_out[0].id, fan_out[1].id, fan_out[2].id],
        "the second delivery to endpoint 2 is the first one's twin"
    );
    let again: Vec<_> = fan_out
        .iter()
        .map(|d| delivery(org, event, d.endpoint_id, Some(later(-90))))
        .collect();
    assert_eq!(
        store.create_webhook_deliveries(&again).await.unwrap(),
        vec![],
        "a second fan-out of the same event creates nothing"
    );
    store
        .create_webhook_deliveries(&[delivery(org, other_event, endpoints[0], None)])
        .await
        .unwrap();

    let listed = store
        .list_event_deliveries(org, Environment::Live, event)
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|d| d.endpoint_id).collect::<Vec<_>>(),
        endpoints
    );
    assert_eq!(listed[0], fan_out[0], "the first fan-out's rows are kept");
    assert!(
        store
            .list_event_deliveries(org, Environment::Test, event)
            .await
            .unwrap()
            .is_empty()
    );

    let due = store.due_webhook_deliveries(now, 10).await.unwrap();
    assert_eq!(
        due.iter().map(|d| d.endpoint_id).collect::<Vec<_>>(),
        vec![endpoints[1], endpoints[0]],
        "earliest first, and only those due"
    );
    assert_eq!(store.due_webhook_deliveries(now, 1).await.unwrap().len(), 1);
}

/// A recorded attempt replaces the row and moves it in the due index: a retry is due at its
/// new time, a finished delivery is due never again; a delivery not stored is not created, and
/// an outcome recorded twice (or racing another attempt's) changes nothing.
/// Two dispatchers whose due scans read the same delivery: exactly one claims it, it is not due
/// again before the claim runs out, and the attempt started from the claim is recorded.
pub async fn a_due_delivery_is_claimed_by_one_dispatcher(store: Store) {
    let org = OrgId::generate();
    let now = time::now();
    let d = delivery(
        org,
        EventId::generate(),
        WebhookEndpointId::generate(),
        Some(now - TimeDelta::seconds(1)),
    );
    store
        .create_webhook_deliveries(std::slice::from_ref(&d))
        .await
        .unwrap();
    let seen = store.due_webhook_deliveries(now, 10).await.unwrap();
    assert_eq!(seen, vec![d.clone()]);
    let until = now + TimeDelta::seconds(60);
    let (first, second) = tokio::join!(
        store.claim_webhook_deliveries(&seen, until),
        store.claim_webhook_deliveries(&seen, until)
    );
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(
        first.len() + second.len(),
        1,
        "one claim wins: {first:?} {second:?}"
    );
    assert_eq!(first.iter().chain(&second).next(), Some(&d.id));
    assert!(
        store
            .due_webhook_deliveries(now + TimeDelta::seconds(59), 10)
            .await
            .unwrap()
            .is_empty(),
        "not due again before the claim runs out"
    );
    assert_eq!(
        store
            .due_webhook_deliveries(until + TimeDelta::seconds(1), 10)
            .await
            .unwrap()
            .len(),
        1,
        "due again once it ran out (its claimer died)"
    );
    // A stale read claims nothing; the attempt started from the claim is recorded.
    assert!(
        store
            .claim_webhook_deliveries(&seen, until)
            .await
            .unwrap()
            .is_empty()
    );
    let mut attempted = d.clone();
    attempted.attempts = 1;
    attempted.status = DeliveryStatus::Succeeded;
    attempted.next_attempt_at = None;
    assert_eq!(
        store
            .record_webhook_attempts(std::slice::from_ref(&attempted))
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .due_webhook_deliveries(until + TimeDelta::seconds(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_webhook_delivery_update_moves_it_in_the_due_index(store: Store) {
    let org = OrgId::generate();
    let event = EventId::generate();
    let now = time::now();
    let mut d = delivery(
        org,
        event,
        WebhookEndpointId::generate(),
        Some(now - TimeDelta::seconds(1)),
    );
    store
        .create_webhook_deliveries(std::slice::from_ref(&d))
        .await
        .unwrap();
    assert_eq!(
        store.due_webhook_deliveries(now, 10).await.unwrap(),
        vec![d.clone()]
    );

    d.attempts = 1;
    d.response_status = Some(500);
    d.response_body = Some("upstream down".into());
    d.next_attempt_at = Some(now + TimeDelta::seconds(5));
    let mut raced = d.clone();
    raced.response_status = Some(502);
    assert_eq!(
        store
            .record_webhook_attempts(&[d.clone(), raced.clone()])
            .await
            .unwrap(),
        1,
        "the second outcome of the same attempt lost"
    );
    assert_eq!(store.record_webhook_attempts(&[raced]).await.unwrap(), 0);
    assert!(
        store
            .due_webhook_deliveries(now, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let later = now + TimeDelta::seconds(6);
    assert_eq!(
        store.due_webhook_deliveries(later, 10).await.unwrap(),
        vec![d.clone()]
    );

    // Putting it off moves it in the due index and nothing else; a stale copy is not put off.
    let put_off = now + TimeDelta::seconds(30);
    d.next_attempt_at = Some(put_off);
    assert_eq!(
        store
            .defer_webhook_deliveries(std::slice::from_ref(&d))
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .due_webhook_deliveries(later, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let after_put_off = put_off + TimeDelta::seconds(1);
    assert_eq!(
        store
            .due_webhook_deliveries(after_put_off, 10)
            .await
            .unwrap(),
        vec![d.clone()]
    );
    let mut stale = d.clone();
    stale.attempts = 0;
    stale.next_attempt_at = Some(later);
    assert_eq!(store.defer_webhook_deliveries(&[stale]).await.unwrap(), 0);

    d.attempts = 2;
    d.status = DeliveryStatus::Succeeded;
    let later = after_put_off;
    d.response_status = Some(204);
    d.next_attempt_at = None;
    assert_eq!(
        store
            .record_webhook_attempts(std::slice::from_ref(&d))
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .due_webhook_deliveries(later, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .list_event_deliveries(org, Environment::Live, event)
            .await
            .unwrap(),
        vec![d]
    );

    let mut stranger = delivery(
        org,
        EventId::generate(),
        WebhookEndpointId::generate(),
        Some(now),
    );
    stranger.attempts = 1;
    assert_eq!(
        store
            .record_webhook_attempts(&[stranger.clone()])
            .await
            .unwrap(),
        0
    );
    assert!(
        store
            .list_event_deliveries(org, Environment::Live, stranger.event_id)
            .await
            .unwrap()
            .is_empty()
    );
}

fn gate_service(id: &str, org: OrgId, env: Environment) -> crate::GateServiceRecord {
    let now = time::now();
    crate::GateServiceRecord {
        id: id.to_owned(),
        organization_id: org,
        environment: env,
        status: crate::GateServiceStatus::Active,
        discoverable: true,
        name: format!("Service {id}"),
        description: String::new(),
        website: "https://acme.example".into(),
        dashboard_login_url: None,
        webhook_url: None,
        sealed_webhook_secret: vec![1, 2, 3],
        env_vars: vec![crate::GateEnvVar {
            name: "API key".into(),
            key: "ACME_API_KEY".into(),
            secret: true,
        }],
        docs_url: None,
        sdks: Vec::new(),
        branding: crate::GateBranding::default(),
        consent: crate::GateConsent::default(),
        created_at: now,
        updated_at: now,
    }
}

/// A Gate service id is claimed over every organization and environment; an organization has
/// at most `cap` services over both environments, disabled ones included; a refused create
/// writes nothing.
pub async fn gate_services_claim_ids_everywhere_and_keep_to_the_cap(store: Store) {
    use crate::GateServiceWrite::*;
    let (org, other) = (OrgId::generate(), OrgId::generate());
    let live = gate_service("acme", org, Environment::Live);
    assert_eq!(store.create_gate_service(&live, 3).await.unwrap(), Written);
    assert_eq!(
        store.get_gate_service("acme").await.unwrap(),
        Some(live.clone())
    );
    for taken in [
        gate_service("acme", other, Environment::Live),
        gate_service("acme", org, Environment::Test),
    ] {
        assert_eq!(store.create_gate_service(&taken, 3).await.unwrap(), IdTaken);
    }
    let mut disabled = gate_service("acme-two", org, Environment::Test);
    disabled.status = crate::GateServiceStatus::Disabled;
    assert_eq!(
        store.create_gate_service(&disabled, 3).await.unwrap(),
        Written
    );
    assert_eq!(
        store
            .create_gate_service(&gate_service("acme-three", org, Environment::Live), 3)
            .await
            .unwrap(),
        Written
    );
    assert_eq!(
        store
            .create_gate_service(&gate_service("acme-four", org, Environment::Test), 3)
            .await
            .unwrap(),
        CapReached,
        "both environments and disabled services count"
    );
    assert_eq!(store.get_gate_service("acme-four").await.unwrap(), None);
    assert_eq!(
        store
            .create_gate_service(&gate_service("other-one", other, Environment::Live), 3)
            .await
            .unwrap(),
        Written,
        "another organization has its own cap"
    );
    let listed: Vec<String> = store
        .list_gate_services(org, Environment::Live)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec!["acme", "acme-three"]);
    assert_eq!(
        store
            .list_gate_services(org, Environment::Test)
            .await
            .unwrap(),
        vec![disabled]
    );
}

/// An update replaces the service whole; a rename claims the new id and frees the old one; the
/// registry lists exactly the published services of an environment, by id, in pages.
pub async fn gate_service_updates_rename_and_follow_the_registry(store: Store) {
    use crate::GateServiceWrite::*;
    let org = OrgId::generate();
    let env = Environment::Test;
    let ids = |services: Vec<crate::GateServiceRecord>| {
        services.into_iter().map(|s| s.id).collect::<Vec<_>>()
    };
    for id in ["reg-a", "reg-b", "reg-c"] {
        store
            .create_gate_service(&gate_service(id, org, env), 10)
            .await
            .unwrap();
    }
    store
        .create_gate_service(&gate_service("reg-live", org, Environment::Live), 10)
        .await
        .unwrap();
    assert_eq!(
        ids(store.list_gate_registry(env, None, 10).await.unwrap()),
        ["reg-a", "reg-b", "reg-c"]
    );
    assert_eq!(
        ids(store
            .list_gate_registry(env, Some("reg-a"), 1)
            .await
            .unwrap()),
        ["reg-b"]
    );

    let mut hidden = gate_service("reg-b", org, env);
    hidden.discoverable = false;
    assert_eq!(
        store.update_gate_service("reg-b", &hidden).await.unwrap(),
        Written
    );
    let mut disabled = gate_service("reg-c", org, env);
    disabled.status = crate::GateServiceStatus::Disabled;
    assert_eq!(
        store.update_gate_service("reg-c", &disabled).await.unwrap(),
        Written
    );
    assert_eq!(
        ids(store.list_gate_registry(env, None, 10).await.unwrap()),
        ["reg-a"]
    );
    assert_eq!(store.get_gate_service("reg-b").await.unwrap(), Some(hidden));

    let renamed = gate_service("reg-z", org, env);
    assert_eq!(
        store.update_gate_service("reg-a", &renamed).await.unwrap(),
        Written
    );
    assert_eq!(store.get_gate_service("reg-a").await.unwrap(), None);
    assert_eq!(
        ids(store.list_gate_registry(env, None, 10).await.unwrap()),
        ["reg-z"]
    );
    assert_eq!(
        ids(store.list_gate_services(org, env).await.unwrap()),
        ["reg-b", "reg-c", "reg-z"]
    );
    let onto_taken = gate_service("reg-live", org, env);
    assert_eq!(
        store
            .update_gate_service("reg-z", &onto_taken)
            .await
            .unwrap(),
        IdTaken
    );
    let stranger = gate_service("reg-z", OrgId::generate(), env);
    assert_eq!(
        store.update_gate_service("reg-z", &stranger).await.unwrap(),
        Missing
    );
    assert_eq!(
        store
            .update_gate_service("nowhere", &gate_service("nowhere", org, env))
            .await
            .unwrap(),
        Missing
    );
    assert_eq!(
        store.get_gate_service("reg-z").await.unwrap(),
        Some(renamed)
    );
}

/// A Gate session moves from a status once: a second approval (or an approval of a denied
/// session) writes nothing; an approval writes the account and the agent token with it.
pub async fn a_gate_session_transitions_once_and_an_approval_writes_its_account_and_token(
    store: Store,
) {
    use crate::{
        AgentTokenRecord, GateAccountRecord, GateFlow, GateSessionRecord, GateSessionStatus,
    };
    let now = time::now();
    let org = OrgId::generate();
    let pending = GateSessionRecord {
        id: schemas::ids::GateSessionId::generate(),
        flow: GateFlow::Signup,
        service_id: "acme".into(),
        organization_id: org,
        environment: Environment::Test,
        status: GateSessionStatus::Pending,
        consent_token: CredentialHash([1; 32]),
        poll_token: Some(CredentialHash([2; 32])),
        interval_secs: 5,
        polls: 0,
        last_poll_at: None,
        account_id: None,
        sealed_delivery: Vec::new(),
        ack_token: None,
        login_code: None,
        agent_token: None,
        code_expires_at: None,
        created_at: now,
        expires_at: now + TimeDelta::minutes(15),
    };
    store.create_gate_session(&pending).await.unwrap();
    assert!(
        store.create_gate_session(&pending).await.is_err(),
        "an id is made once"
    );
    let account = GateAccountRecord {
        id: schemas::ids::GateAccountId::generate(),
        service_id: "acme".into(),
        organization_id: org,
        environment: Environment::Test,
        name: "dev".into(),
        created_at: now,
    };
    let token = AgentTokenRecord {
        hash: CredentialHash([3; 32]),
        account_id: account.id,
        service_id: "acme".into(),
        organization_id: org,
        environment: Environment::Test,
        created_at: now,
        expires_at: now + TimeDelta::days(90),
        revoked_at: None,
        recent_logins: Vec::new(),
    };
    let mut approved = pending.clone();
    approved.status = GateSessionStatus::Approved;
    approved.account_id = Some(account.id);
    approved.sealed_delivery = vec![9, 9];
    assert!(
        store
            .transition_gate_session(
                &approved,
                GateSessionStatus::Pending,
                Some((&account, &token))
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .transition_gate_session(&approved, GateSessionStatus::Pending, None)
            .await
            .unwrap(),
        "approved once"
    );
    assert_eq!(
        store.get_gate_session(pending.id).await.unwrap(),
        Some(approved.clone())
    );
    assert_eq!(
        store.get_gate_account(account.id).await.unwrap(),
        Some(account.clone())
    );
    assert_eq!(
        store.get_agent_token(&token.hash).await.unwrap(),
        Some(token.clone())
    );
    let mut revoked = token.clone();
    revoked.revoked_at = Some(now);
    assert!(store.update_agent_token(&revoked).await.unwrap());
    assert_eq!(
        store.get_agent_token(&token.hash).await.unwrap(),
        Some(revoked.clone())
    );
    // Counting logins checks the token and the cap in one step; revoking is for good.
    let mut second = pending.clone();
    second.id = schemas::ids::GateSessionId::generate();
    store.create_gate_session(&second).await.unwrap();
    let mut fresh = revoked.clone();
    fresh.hash = CredentialHash([5; 32]);
    fresh.revoked_at = None;
    let mut approved_too = second.clone();
    approved_too.status = GateSessionStatus::Approved;
    let other_account = GateAccountRecord {
        id: schemas::ids::GateAccountId::generate(),
        ..account.clone()
    };
    assert!(
        store
            .transition_gate_session(
                &approved_too,
                GateSessionStatus::Pending,
                Some((&other_account, &fresh))
            )
            .await
            .unwrap()
    );
    for _ in 0..2 {
        assert!(matches!(
            store.count_agent_login(&fresh.hash, now, 2).await.unwrap(),
            crate::AgentLogin::Counted(_)
        ));
    }
    assert_eq!(
        store.count_agent_login(&fresh.hash, now, 2).await.unwrap(),
        crate::AgentLogin::CapReached(now)
    );
    let later = now + TimeDelta::hours(2);
    assert!(matches!(
        store
            .count_agent_login(&fresh.hash, later, 2)
            .await
            .unwrap(),
        crate::AgentLogin::Counted(_)
    ));
    let gone = store
        .revoke_agent_token(&fresh.hash, later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone.revoked_at, Some(later));
    let again = store
        .revoke_agent_token(&fresh.hash, later + TimeDelta::hours(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.revoked_at,
        Some(later),
        "revoked once, when first revoked"
    );
    assert_eq!(
        store
            .count_agent_login(&fresh.hash, later, 2)
            .await
            .unwrap(),
        crate::AgentLogin::Unusable
    );
    assert_eq!(
        store
            .revoke_agent_token(&CredentialHash([6; 32]), later)
            .await
            .unwrap(),
        None
    );
    let mut stranger = token;
    stranger.hash = CredentialHash([4; 32]);
    assert!(!store.update_agent_token(&stranger).await.unwrap());
    assert_eq!(store.get_agent_token(&stranger.hash).await.unwrap(), None);
}

/// Gate sessions are dropped by `purge_expired` once they started before the retention, with
/// their login code's index row; a recent one stays.
pub async fn gate_sessions_are_purged_a_retention_after_they_started(store: Store) {
    use crate::{GateFlow, GateSessionRecord, GateSessionStatus};
    let long_ago = Timestamp::from_timestamp_millis(1_000_000_000_000).unwrap();
    let now = time::now();
    let session = |created_at: Timestamp, code: u8| GateSessionRecord {
        id: schemas::ids::GateSessionId::generate(),
        flow: GateFlow::Login,
        service_id: "acme".into(),
        organization_id: OrgId::generate(),
        environment: Environment::Live,
        status: GateSessionStatus::Pending,
        consent_token: CredentialHash([code; 32]),
        poll_token: None,
        interval_secs: 5,
        polls: 0,
        last_poll_at: None,
        account_id: None,
        sealed_delivery: Vec::new(),
        ack_token: None,
        login_code: None,
        agent_token: None,
        code_expires_at: None,
        created_at,
        expires_at: created_at + TimeDelta::minutes(15),
    };
    let (old, recent) = (session(long_ago, 7), session(now, 8));
    for s in [&old, &recent] {
        store.create_gate_session(s).await.unwrap();
    }
    let mut approved = old.clone();
    approved.status = GateSessionStatus::Approved;
    approved.login_code = Some(CredentialHash([9; 32]));
    assert!(
        store
            .transition_gate_session(&approved, GateSessionStatus::Pending, None)
            .await
            .unwrap()
    );
    assert!(
        store
            .get_login_by_code(&CredentialHash([9; 32]))
            .await
            .unwrap()
            .is_some()
    );
    let keep_since = long_ago + TimeDelta::days(90);
    while store.purge_expired(now, keep_since, 1).await.unwrap() {}
    assert_eq!(store.get_gate_session(old.id).await.unwrap(), None);
    assert_eq!(
        store
            .get_login_by_code(&CredentialHash([9; 32]))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.get_gate_session(recent.id).await.unwrap(),
        Some(recent)
    );
}

/// Disabling changes the status (and `updated_at`) and nothing else, once.
pub async fn disabling_an_endpoint_changes_its_status_only(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let mut endpoint = webhook_endpoint(org, env, WebhookEndpointId::generate());
    store.create_webhook_endpoint(&endpoint).await.unwrap();
    endpoint.sealed_secret = vec![7; 60];
    assert!(store.update_webhook_endpoint(&endpoint).await.unwrap());
    let at = time::now() + TimeDelta::seconds(5);
    assert!(
        store
            .disable_webhook_endpoint(org, env, endpoint.id, at)
            .await
            .unwrap()
    );
    assert!(
        !store
            .disable_webhook_endpoint(org, env, endpoint.id, at)
            .await
            .unwrap()
    );
    endpoint.status = EndpointStatus::Disabled;
    endpoint.updated_at = at;
    assert_eq!(
        store
            .get_webhook_endpoint(org, env, endpoint.id)
            .await
            .unwrap(),
        Some(endpoint.clone()),
        "the secret written before stands"
    );
    assert!(
        !store
            .disable_webhook_endpoint(org, Environment::Live, endpoint.id, at)
            .await
            .unwrap()
    );
}

/// A poll is counted by the holder of the poll token only; one sooner than the interval grows
/// it; past the cap nothing is written.
pub async fn gate_polls_are_counted_with_their_interval_and_cap_in_one_step(store: Store) {
    use crate::{GateFlow, GatePoll, GateSessionRecord, GateSessionStatus};
    let now = time::now();
    let token = CredentialHash([3; 32]);
    let session = GateSessionRecord {
        id: schemas::ids::GateSessionId::generate(),
        flow: GateFlow::Signup,
        service_id: "acme".into(),
        organization_id: OrgId::generate(),
        environment: Environment::Test,
        status: GateSessionStatus::Pending,
        consent_token: CredentialHash([1; 32]),
        poll_token: Some(token),
        interval_secs: 5,
        polls: 0,
        last_poll_at: None,
        account_id: None,
        sealed_delivery: Vec::new(),
        ack_token: None,
        login_code: None,
        agent_token: None,
        code_expires_at: None,
        created_at: now,
        expires_at: now + TimeDelta::minutes(15),
    };
    store.create_gate_session(&session).await.unwrap();
    let poll = |at, cap| store.count_gate_poll(session.id, &token, at, 5, cap);
    assert_eq!(
        store
            .count_gate_poll(session.id, &CredentialHash([4; 32]), now, 5, 10)
            .await
            .unwrap(),
        None,
        "another token counts nothing"
    );
    let (first, how) = poll(now, 10).await.unwrap().unwrap();
    assert_eq!(
        (how, first.polls, first.interval_secs),
        (GatePoll::Counted, 1, 5)
    );
    let (soon, how) = poll(now + TimeDelta::seconds(1), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (how, soon.polls, soon.interval_secs),
        (GatePoll::TooSoon, 2, 10)
    );
    let (later, how) = poll(now + TimeDelta::seconds(12), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((how, later.interval_secs), (GatePoll::Counted, 10));
    let (spent, how) = poll(now + TimeDelta::seconds(30), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((how, spent.polls), (GatePoll::Exhausted, 3));
    assert_eq!(
        store.get_gate_session(session.id).await.unwrap(),
        Some(spent)
    );
}
