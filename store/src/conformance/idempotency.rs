//! Idempotency records (`IdempotencyStore`).

use super::*;

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
