//! Scored sessions, their decision history, saves of several sessions and the idle and verdict indexes (`SessionStore`).

use super::*;

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
        fence: None,
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
        fence: None,
    };
    store.save_sessions(&[save]).await.unwrap();
    store
        .get_session(session.organization_id, session.environment, session.id)
        .await
        .unwrap()
        .unwrap()
}

pub async fn sessions_saved_together_land_together(store: Store) {
    saved_together(&store, 5).await;
    assert!(
        store.save_sessions(&[]).await.is_ok(),
        "an empty list is a no-op"
    );
}

/// A poll's worth of sessions in one save (more than a backend writes in one statement) lands
/// whole, each with its decision and event.
pub async fn a_save_of_hundreds_of_sessions_lands_whole(store: Store) {
    saved_together(&store, 300).await;
}

/// Saves `n` sessions in one call, each with a decision and an event, and reads each back.
async fn saved_together(store: &Store, n: u64) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let saves: Vec<SessionSave> = (0..n)
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

/// Sessions saved together in one call have their decision histories pruned each on its own:
/// one session's turning points neither keep nor drop another's decisions.
pub async fn decision_histories_saved_together_are_pruned_each_alone(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    let (a, b) = (SessionId::generate(), SessionId::generate());
    let da = sorted_ids(4, DecisionId::generate);
    let db = sorted_ids(4, DecisionId::generate);
    // `a` never turns, so each new latest replaces the last; `b` turns every time.
    let verdicts_b = ["human", "bot", "human", "bot"];
    for i in 0..4 {
        let saves: Vec<SessionSave> = [(a, da[i], "human"), (b, db[i], verdicts_b[i])]
            .into_iter()
            .map(|(sid, id, verdict)| {
                let decision = turn(sid, id, "snapshot", verdict);
                let mut session = session_record(org, env, sid);
                session.latest_decision = Some(decision.decision.clone());
                SessionSave {
                    session,
                    decision: Some(decision),
                    events: Vec::new(),
                    settled: None,
                    fence: None,
                }
            })
            .collect();
        store.save_sessions(&saves).await.unwrap();
    }
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, a, 100).await.unwrap()),
        vec![da[3], da[0]],
        "the first and the latest of a session that never turned"
    );
    assert_eq!(
        decision_ids(&store.list_decisions(org, env, b, 100).await.unwrap()),
        vec![db[3], db[2], db[1], db[0]],
        "every decision of a session that turned each time"
    );
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

/// The sessions export's digests (`list_session_digests`): each session's as its latest save
/// makes it (its settled part included), newest first, paged by `after`, by verdict, and apart
/// per organization and environment.
pub async fn session_digests_follow_each_save(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Test);
    let ids = sorted_ids(5, SessionId::generate);
    let settled = RawJson::encode(
        &json!({ "observations": { "probes": { "screen": { "width": 1920, "height": 1080 } } } }),
    )
    .unwrap();
    let mut sessions = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let verdict = if i % 2 == 0 { "bot" } else { "human" };
        let session = session_with_verdict(org, env, *id, verdict);
        let part = (i == 0).then(|| settled.clone());
        store
            .save_sessions(&[SessionSave {
                session: session.clone(),
                decision: None,
                events: Vec::new(),
                settled: part.clone(),
                fence: None,
            }])
            .await
            .unwrap();
        sessions.push((session, part));
    }
    store
        .save_session(
            &session_with_verdict(org, Environment::Live, SessionId::generate(), "bot"),
            None,
            &[],
        )
        .await
        .unwrap();
    let list = |verdict: Option<&'static str>, after, limit| {
        let store = store.clone();
        async move {
            store
                .list_session_digests(org, env, verdict, after, limit)
                .await
                .unwrap()
        }
    };
    let ids_of = |digests: &[SessionDigest]| -> Vec<SessionId> {
        digests.iter().map(|d| d.session_id).collect()
    };
    let all = list(None, None, 100).await;
    assert_eq!(ids_of(&all), vec![ids[4], ids[3], ids[2], ids[1], ids[0]]);
    for digest in &all {
        let (session, part) = sessions
            .iter()
            .find(|(s, _)| s.id == digest.session_id)
            .unwrap();
        assert_eq!(*digest, session.digest(part.as_ref()));
        assert_eq!(digest.url, session.page_url);
        assert_eq!(digest.visitor_id, session.visitor_id);
        assert_eq!(digest.created_at_ms, session.opened_at.timestamp_millis());
    }
    assert_eq!(all[4].screen_width, Some(1920), "from the settled part");
    assert_eq!(all[3].screen_width, None);
    assert_eq!(
        ids_of(&list(None, Some(ids[3]), 2).await),
        vec![ids[2], ids[1]]
    );
    assert_eq!(
        ids_of(&list(Some("bot"), None, 10).await),
        vec![ids[4], ids[2], ids[0]]
    );
    assert_eq!(
        ids_of(&list(Some("bot"), Some(ids[4]), 10).await),
        vec![ids[2], ids[0]]
    );
    assert!(list(Some("suspicious"), None, 10).await.is_empty());
    assert!(
        store
            .list_session_digests(OrgId::generate(), env, None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .list_session_digests(org, Environment::Live, None, None, 10)
            .await
            .unwrap()
            .len(),
        1,
        "the other environment's own"
    );

    // A later save replaces the digest, and moves it between verdicts.
    let moved = SessionRecord {
        page_url: "https://shop.example/paid".into(),
        ..session_with_verdict(org, env, ids[4], "human")
    };
    store.save_session(&moved, None, &[]).await.unwrap();
    let again = list(None, None, 1).await;
    assert_eq!(again[0], moved.digest(None));
    assert_eq!(again[0].url, "https://shop.example/paid");
    assert_eq!(
        ids_of(&list(Some("bot"), None, 10).await),
        vec![ids[2], ids[0]]
    );
}

/// A processor's saves carry its claim on their partition: once another processor claimed the
/// partition, a save under the older claim is refused with nothing written (the other saves of
/// its list included), naming the partition, while the newer claim's saves land. A partition
/// never claimed fences nothing, and one named twice in a claim is claimed once.
pub async fn a_save_under_a_superseded_claim_is_refused(store: Store) {
    let (org, env) = (OrgId::generate(), Environment::Live);
    // Partition numbers no other case or process uses: claims are not per organization.
    let base = u32::try_from(SessionId::generate().ulid().0 % 1_000_000_000).unwrap() + 1_000;
    let (moved, kept, unclaimed) = (base, base + 1, base + 2);
    let stalled = store.claim_partitions(&[moved, kept, moved]).await.unwrap();
    assert_eq!(stalled.len(), 3);
    assert_eq!(
        stalled[0], stalled[2],
        "a partition named twice is claimed once"
    );
    let taken_over = store.claim_partitions(&[moved]).await.unwrap();
    assert_eq!(taken_over[0].partition, moved);
    assert!(taken_over[0].generation > stalled[0].generation);

    let fenced = |session: SessionRecord, fence: PartitionFence| SessionSave {
        fence: Some(fence),
        ..save_of(session, 1)
    };
    let late = session_record(org, env, SessionId::generate());
    let innocent = session_record(org, env, SessionId::generate());
    let refused = store
        .save_sessions(&[
            fenced(late.clone(), stalled[0]),
            fenced(innocent.clone(), stalled[1]),
        ])
        .await;
    match refused {
        Err(StoreError::Fenced { partitions }) => assert_eq!(partitions, vec![moved]),
        other => panic!("a save under a superseded claim must be Fenced, not {other:?}"),
    }
    for id in [late.id, innocent.id] {
        assert_eq!(
            store.get_session(org, env, id).await.unwrap(),
            None,
            "nothing written"
        );
    }

    // The new owner's save, the stalled one's of the partition it kept, and one never fenced.
    let never = PartitionFence {
        partition: unclaimed,
        generation: 0,
    };
    store
        .save_sessions(&[
            fenced(late.clone(), taken_over[0]),
            fenced(innocent.clone(), stalled[1]),
        ])
        .await
        .unwrap();
    let free = session_record(org, env, SessionId::generate());
    store
        .save_sessions(&[fenced(free.clone(), never)])
        .await
        .unwrap();
    for id in [late.id, innocent.id, free.id] {
        assert!(store.get_session(org, env, id).await.unwrap().is_some());
    }
}
