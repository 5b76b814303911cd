//! Events, webhook endpoints and deliveries (`EventStore`).

use super::*;

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

/// Caps no case but the caps' own comes near.
const ROOMY: EndpointCaps = EndpointCaps {
    active: 1_000,
    total: 1_000,
};

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
    store
        .create_webhook_endpoint(&endpoint, ROOMY)
        .await
        .unwrap();
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
    assert_eq!(
        store
            .update_webhook_endpoint(&endpoint, ROOMY)
            .await
            .unwrap(),
        EndpointWrite::Written
    );
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
        assert_eq!(
            store
                .update_webhook_endpoint(&missing, ROOMY)
                .await
                .unwrap(),
            EndpointWrite::Missing
        );
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
    store.create_webhook_endpoint(&first, ROOMY).await.unwrap();
    let mut second = first.clone();
    second.name = "other".into();
    assert!(matches!(
        store.create_webhook_endpoint(&second, ROOMY).await,
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
            .create_webhook_endpoint(&webhook_endpoint(a, Environment::Live, *id), ROOMY)
            .await
            .unwrap();
    }
    store
        .create_webhook_endpoint(
            &webhook_endpoint(a, Environment::Test, WebhookEndpointId::generate()),
            ROOMY,
        )
        .await
        .unwrap();
    store
        .create_webhook_endpoint(
            &webhook_endpoint(b, Environment::Live, WebhookEndpointId::generate()),
            ROOMY,
        )
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

/// Disabling changes the status (and `updated_at`) and nothing else, once.
pub async fn disabling_an_endpoint_changes_its_status_only(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let mut endpoint = webhook_endpoint(org, env, WebhookEndpointId::generate());
    store
        .create_webhook_endpoint(&endpoint, ROOMY)
        .await
        .unwrap();
    endpoint.sealed_secret = vec![7; 60];
    assert_eq!(
        store
            .update_webhook_endpoint(&endpoint, ROOMY)
            .await
            .unwrap(),
        EndpointWrite::Written
    );
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

/// The caps hold for creates and for enabling, each checked in the write's own step: creates
/// racing for the last active places pass no further than the cap, enabling a disabled endpoint
/// past it is refused, disabled endpoints count toward the cap on all, and another
/// environment has caps of its own.
pub async fn webhook_endpoint_caps_hold_for_racing_creates_and_enabling(store: Store) {
    let caps = EndpointCaps {
        active: 3,
        total: 5,
    };
    let (org, env) = (OrgId::generate(), Environment::Live);
    let mut racing = JoinSet::new();
    for _ in 0..8 {
        let store = store.clone();
        racing.spawn(async move {
            let endpoint = webhook_endpoint(org, env, WebhookEndpointId::generate());
            store
                .create_webhook_endpoint(&endpoint, caps)
                .await
                .unwrap()
        });
    }
    let answers = racing.join_all().await;
    let written = answers
        .iter()
        .filter(|w| **w == EndpointWrite::Written)
        .count();
    assert_eq!(written, 3, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|w| matches!(w, EndpointWrite::Written | EndpointWrite::ActiveCapReached)),
        "{answers:?}"
    );
    let stored = store
        .list_webhook_endpoints(org, env, None, 100)
        .await
        .unwrap();
    assert_eq!(stored.len(), 3, "a refused create wrote nothing");

    // A disabled endpoint frees its active place, and enabling it again takes one.
    let mut first = stored[0].clone();
    assert!(
        store
            .disable_webhook_endpoint(org, env, first.id, time::now())
            .await
            .unwrap()
    );
    let fourth = webhook_endpoint(org, env, WebhookEndpointId::generate());
    assert_eq!(
        store.create_webhook_endpoint(&fourth, caps).await.unwrap(),
        EndpointWrite::Written
    );
    first.status = EndpointStatus::Active;
    assert_eq!(
        store.update_webhook_endpoint(&first, caps).await.unwrap(),
        EndpointWrite::ActiveCapReached,
        "enabling a fourth active endpoint"
    );
    assert_eq!(
        store
            .get_webhook_endpoint(org, env, first.id)
            .await
            .unwrap()
            .map(|e| e.status),
        Some(EndpointStatus::Disabled),
        "a refused enabling wrote nothing"
    );
    // An update of an active endpoint that leaves it active is no enabling.
    let mut renamed = fourth.clone();
    renamed.name = "renamed".into();
    assert_eq!(
        store.update_webhook_endpoint(&renamed, caps).await.unwrap(),
        EndpointWrite::Written
    );
    // Disabling through an update frees a place too.
    let mut off = renamed.clone();
    off.status = EndpointStatus::Disabled;
    assert_eq!(
        store.update_webhook_endpoint(&off, caps).await.unwrap(),
        EndpointWrite::Written
    );
    assert_eq!(
        store.update_webhook_endpoint(&first, caps).await.unwrap(),
        EndpointWrite::Written,
        "enabling into the freed place"
    );

    // Five endpoints now, two of them disabled: the cap on all refuses a sixth.
    let fifth = webhook_endpoint(org, env, WebhookEndpointId::generate());
    let sixth = webhook_endpoint(org, env, WebhookEndpointId::generate());
    assert!(
        store
            .disable_webhook_endpoint(org, env, stored[1].id, time::now())
            .await
            .unwrap()
    );
    assert_eq!(
        store.create_webhook_endpoint(&fifth, caps).await.unwrap(),
        EndpointWrite::Written
    );
    assert_eq!(
        store.create_webhook_endpoint(&sixth, caps).await.unwrap(),
        EndpointWrite::TotalCapReached,
        "disabled endpoints count toward the cap on all"
    );
    assert_eq!(
        store
            .get_webhook_endpoint(org, env, sixth.id)
            .await
            .unwrap(),
        None
    );
    let elsewhere = webhook_endpoint(org, Environment::Test, WebhookEndpointId::generate());
    assert_eq!(
        store
            .create_webhook_endpoint(&elsewhere, caps)
            .await
            .unwrap(),
        EndpointWrite::Written,
        "the other environment has caps of its own"
    );
}
