//! Visitors, their anchor index and their list orders (`VisitorStore`).

use super::*;

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
    second.revision += 1;
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
    seen_again.revision += 1;
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
    visitors[0].revision += 1;
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

/// Two writers that read one visitor at the same revision and save their change as the next:
/// the first is written, the second is stale and left out (nothing of it written, the others of
/// its call written), so the second reads again and saves over the first's change. Saved
/// twice, a revision is stale the second time.
pub async fn visitor_saves_race_by_revision(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let read = visitor_record(org, env, VisitorId::generate());
    store.save_visitor(&read).await.unwrap();

    let mut first = read.clone();
    first.revision += 1;
    first.seen_count += 1;
    first.remember_session(SessionId::generate());
    let mut second = read.clone();
    second.revision += 1;
    second.seen_count += 1;
    second.remember_session(SessionId::generate());
    assert_eq!(
        store
            .save_visitors(std::slice::from_ref(&first))
            .await
            .unwrap(),
        vec![]
    );
    let other = visitor_record(org, env, VisitorId::generate());
    assert_eq!(
        store
            .save_visitors(&[second.clone(), other.clone()])
            .await
            .unwrap(),
        vec![second.id],
        "the second writer's save is stale"
    );
    assert_eq!(
        store.get_visitor(org, env, read.id).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(
        store.get_visitor(org, env, other.id).await.unwrap(),
        Some(other),
        "the rest of a call with a stale visitor is written"
    );
    assert!(
        matches!(
            store.save_visitor(&first).await,
            Err(StoreError::Conflict(_))
        ),
        "a revision saved once is stale the second time"
    );

    // The second reads again and reapplies its visit.
    let mut merged = store.get_visitor(org, env, read.id).await.unwrap().unwrap();
    merged.revision += 1;
    merged.seen_count += 1;
    merged.remember_session(second.recent_sessions[0]);
    store.save_visitor(&merged).await.unwrap();
    let stored = store.get_visitor(org, env, read.id).await.unwrap().unwrap();
    assert_eq!(stored.seen_count, read.seen_count + 2);
    assert_eq!(
        &stored.recent_sessions[..2],
        &[second.recent_sessions[0], first.recent_sessions[0]]
    );
    // A stale visitor is left out of the anchor index's change too.
    let mut moved = stored.clone();
    moved.anchors.audio_hash = Some(unique("audio-stale"));
    assert_eq!(
        store.save_visitors(&[moved.clone()]).await.unwrap(),
        vec![moved.id]
    );
    assert_eq!(
        visitor_ids(
            &store
                .find_visitor_by_anchors(org, env, &stored.anchors, 10)
                .await
                .unwrap()
        ),
        vec![read.id]
    );
}
