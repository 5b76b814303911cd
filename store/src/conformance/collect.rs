//! Collect sessions, their counters, pings and results, handoff openings and the replay record
//! (`CollectStore`).

use super::*;

/// A mark is left by the first session that brings its key, with its sketch; a later session
/// (or the same one again, a redelivery) finds that first mark; marks of one call are answered
/// in order, the second of two equal keys finding the first; an empty call is answered empty.
pub async fn replay_marks_are_left_once_and_found_by_later_sessions(store: Store) {
    use crate::ReplayMark;
    let key = |n: u8| {
        let mut key: [u8; 16] = KeyId::generate().ulid().to_bytes();
        key[0] = n;
        key
    };
    let (first, later) = (SessionId::generate(), SessionId::generate());
    let (probes, stream) = (key(1), key(2));
    let mark = |key, session, sketch: &[u8]| ReplayMark {
        key,
        session_id: session,
        sketch: sketch.to_vec(),
    };
    let until = tomorrow();
    assert_eq!(store.leave_replay_marks(&[], until).await.unwrap(), vec![]);
    let left = store
        .leave_replay_marks(
            &[mark(probes, first, &[]), mark(stream, first, &[1, 2, 3])],
            until,
        )
        .await
        .unwrap();
    assert_eq!(left, vec![None, None], "both left by the first session");
    let found = store
        .leave_replay_marks(
            &[
                mark(stream, later, &[9, 9]),
                mark(key(3), later, &[4]),
                mark(probes, later, &[]),
            ],
            until,
        )
        .await
        .unwrap();
    assert_eq!(
        found,
        vec![
            Some(mark(stream, first, &[1, 2, 3])),
            None,
            Some(mark(probes, first, &[])),
        ],
        "a later session finds the first's marks, with its sketch, and leaves its own new one"
    );
    // Delivered again, the first session finds its own marks.
    let again = store
        .leave_replay_marks(&[mark(stream, first, &[1, 2, 3])], until)
        .await
        .unwrap();
    assert_eq!(again, vec![Some(mark(stream, first, &[1, 2, 3]))]);
    // Two equal keys in one call: the first leaves it, the second finds it.
    let twice = key(4);
    let both = store
        .leave_replay_marks(&[mark(twice, first, &[7]), mark(twice, later, &[8])], until)
        .await
        .unwrap();
    assert_eq!(both, vec![None, Some(mark(twice, first, &[7]))]);
}

pub async fn handoff_opens_once(store: Store) {
    let handoff: [u8; 16] = KeyId::generate().ulid().to_bytes();
    let other: [u8; 16] = KeyId::generate().ulid().to_bytes();
    let first = time::now();
    let expires = tomorrow();
    assert_eq!(
        store
            .open_handoff_once(&crate::HandoffOpening {
                handoff,
                at: first,
                expires_at: expires
            })
            .await
            .unwrap(),
        None,
        "the first opening is first"
    );
    let later = first + TimeDelta::seconds(5);
    assert_eq!(
        store
            .open_handoff_once(&crate::HandoffOpening {
                handoff,
                at: later,
                expires_at: expires
            })
            .await
            .unwrap(),
        Some(first),
        "a later opening learns when the first was"
    );
    assert_eq!(
        store
            .open_handoff_once(&crate::HandoffOpening {
                handoff,
                at: later,
                expires_at: expires
            })
            .await
            .unwrap(),
        Some(first),
        "and a later one still, unchanged"
    );
    assert_eq!(
        store
            .open_handoff_once(&crate::HandoffOpening {
                handoff: other,
                at: later,
                expires_at: expires
            })
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
                .open_handoff_once(&crate::HandoffOpening {
                    handoff,
                    at,
                    expires_at: tomorrow(),
                })
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

/// Many sessions' batch numbers advanced at once (as ingest does for every batch, and as the
/// stores raise them, in groups): each session ends at its highest number, the highest is
/// accepted for each, and an unknown session among them is answered `false` and not created.
pub async fn collect_seq_advances_of_many_sessions_at_once_stay_apart(store: Store) {
    let mut sessions = Vec::new();
    for _ in 0..16 {
        let session = collect_session(1);
        store.create_collect_session(&session).await.unwrap();
        sessions.push(session);
    }
    let ghost = SessionId::generate();
    let ids: Vec<SessionId> = sessions.iter().map(|s| s.id).collect();
    let results = race(16 * 4 + 1, |i| {
        let store = store.clone();
        // The last racer advances a session that does not exist.
        let (id, to) = match ids.get(i % 16) {
            Some(&id) if i < 64 => (id, 1 + (i / 16) as u64),
            _ => (ghost, 1),
        };
        async move { (id, to, store.advance_collect_seq(id, to).await.unwrap()) }
    })
    .await;
    for session in &sessions {
        assert!(
            results.contains(&(session.id, 4, true)),
            "the highest number of {} was refused: {results:?}",
            session.id
        );
        let mut expected = session.clone();
        expected.last_seq = 4;
        assert_eq!(
            store.get_collect_session(session.id).await.unwrap(),
            Some(expected)
        );
    }
    assert!(results.contains(&(ghost, 1, false)), "{results:?}");
    assert_eq!(store.get_collect_session(ghost).await.unwrap(), None);
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

/// A nonce is spent once per scope (a signing key), however many spend it at once, and another
/// scope's nonce of the same text is its own.
pub async fn a_nonce_is_spent_once_per_scope(store: Store) {
    let nonce = unique("nonce");
    let until = time::now() + TimeDelta::minutes(5);
    let attempts: Vec<_> = (0..8)
        .map(|_| {
            let (store, nonce) = (store.clone(), nonce.clone());
            tokio::spawn(async move { store.spend_nonce("key-a", &nonce, until).await.unwrap() })
        })
        .collect();
    let mut first = 0;
    for attempt in attempts {
        first += usize::from(attempt.await.unwrap());
    }
    assert_eq!(first, 1, "one of eight concurrent spends is the first");
    assert!(
        !store.spend_nonce("key-a", &nonce, until).await.unwrap(),
        "spent"
    );
    assert!(
        store.spend_nonce("key-b", &nonce, until).await.unwrap(),
        "another key's nonce is its own"
    );
}
