//! API keys: creation, lists, updates, rotation and touches, and what concurrent readers see of them (`OrganizationStore`, whose cases are split over two files).

use super::*;

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
    // Its organization exists, so a backend that reads a key with its organization (the embedded
    // store's row cache, once it holds both) serves the key from there too.
    let organization_row = organization("key-reads-follow");
    store.create_organization(&organization_row).await.unwrap();
    let org = organization_row.id;
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

/// Readers hammer `find_api_key_by_hash` and `find_key_and_organization` (authentication's read,
/// here of a key whose organization exists) while the key is revoked: once the revocation has
/// returned, no read may return the key unrevoked.
pub async fn concurrent_reads_see_a_revocation_once_it_returns(store: Store) {
    let at = time::now();
    reads_after_a_write_see_it(
        "a revocation",
        || {
            let store = store.clone();
            async move {
                let org = organization("hammered-key");
                store.create_organization(&org).await.unwrap();
                let key = api_key(org.id, Environment::Live, KeyId::generate());
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
                // The organization is read too, so a backend caching the pair has it to serve.
                store.get_organization(key.organization_id).await.unwrap();
                let authenticated = store
                    .find_key_and_organization(&key.key_hash)
                    .await
                    .unwrap();
                let authenticated = authenticated.expect("the key exists");
                assert_eq!(authenticated.key.id, key.id);
                found.revoked_at == Some(at) && authenticated.key.revoked_at == Some(at)
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

/// An organization's keys in use (neither revoked nor replaced) are capped over both
/// environments, counted in the write's own step: creates racing for the last places pass no
/// further than the cap, a revocation frees a place, a rotation takes its old key's, and the
/// uncapped create (the operator's) counts toward it too.
pub async fn api_keys_in_use_are_capped_per_organization_in_one_step(store: Store) {
    let org = OrgId::generate();
    let first = api_key(org, Environment::Live, KeyId::generate());
    store.create_api_key(&first).await.unwrap();
    let mut racing = JoinSet::new();
    for i in 0..6 {
        let store = store.clone();
        let env = if i % 2 == 0 {
            Environment::Live
        } else {
            Environment::Test
        };
        racing.spawn(async move {
            let key = api_key(org, env, KeyId::generate());
            (store.create_api_key_capped(&key, 3).await.unwrap(), key)
        });
    }
    let answers = racing.join_all().await;
    let written: Vec<&ApiKeyRecord> = answers
        .iter()
        .filter(|(w, _)| *w == ApiKeyWrite::Written)
        .map(|(_, k)| k)
        .collect();
    assert_eq!(written.len(), 2, "{answers:?}");
    for (answer, key) in &answers {
        let stored = store.find_api_key_by_hash(&key.key_hash).await.unwrap();
        assert_eq!(
            stored.is_some(),
            *answer == ApiKeyWrite::Written,
            "a refused create wrote nothing"
        );
    }
    let another = api_key(org, Environment::Test, KeyId::generate());
    assert_eq!(
        store.create_api_key_capped(&another, 3).await.unwrap(),
        ApiKeyWrite::CapReached
    );
    assert_eq!(
        store
            .create_api_key_capped(
                &api_key(OrgId::generate(), Environment::Live, KeyId::generate()),
                3
            )
            .await
            .unwrap(),
        ApiKeyWrite::Written,
        "another organization has a cap of its own"
    );

    // A rotation's replacement takes its old key's place.
    let replacement = api_key(org, first.environment, KeyId::generate());
    store
        .rotate_api_key(&rotation_of(&first, &replacement), &replacement)
        .await
        .unwrap();
    assert_eq!(
        store.create_api_key_capped(&another, 3).await.unwrap(),
        ApiKeyWrite::CapReached,
        "a rotation frees no place"
    );
    // A revocation frees one.
    let revoked = ApiKeyRecord {
        revoked_at: Some(time::now()),
        ..written[0].clone()
    };
    store.update_api_key(&revoked).await.unwrap();
    assert_eq!(
        store.create_api_key_capped(&another, 3).await.unwrap(),
        ApiKeyWrite::Written
    );
    // Revoking a key already replaced frees nothing: it held no place.
    let rotated = store
        .get_api_key(org, first.environment, first.id)
        .await
        .unwrap()
        .unwrap();
    store
        .update_api_key(&ApiKeyRecord {
            revoked_at: Some(time::now()),
            ..rotated
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .create_api_key_capped(&api_key(org, Environment::Live, KeyId::generate()), 3)
            .await
            .unwrap(),
        ApiKeyWrite::CapReached
    );
}
