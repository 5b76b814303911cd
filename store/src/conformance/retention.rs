//! The bounded purge of rows past their retention (`RetentionStore`).

use super::*;

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
    seen_again.revision += 1;
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

/// On a backend whose rows expire by TTLs, `purge_expired` is left only the work no TTL can do
/// (withdrawing unacknowledged Gate signups): its steps end, answering `false`, instead of
/// reporting work forever.
pub async fn purge_expired_by_ttl_finishes_its_steps(store: Store) {
    let now = time::now();
    let mut steps = 0;
    while store
        .purge_expired(now, now - TimeDelta::days(90), 1)
        .await
        .unwrap()
    {
        steps += 1;
        assert!(
            steps < 1_000,
            "purge_expired reports work it never finishes"
        );
    }
}
