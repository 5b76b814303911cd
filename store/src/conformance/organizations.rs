//! Organizations, alone and created with their first keys, and what concurrent readers see of their writes (`OrganizationStore`).

use super::*;

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

/// Every write of an organization is seen by the next read, by id, by slug and through a key of
/// it, even with the old row just read (twice).
pub async fn organization_reads_follow_every_write(store: Store) {
    let org = organization("reads-follow");
    // An unknown id first: a backend must not remember that it was unknown.
    assert_eq!(store.get_organization(org.id).await.unwrap(), None);
    // A key of it, made first: authentication's read finds the key and no organization, and must
    // not remember that either.
    let holder = api_key(org.id, Environment::Live, KeyId::generate());
    store.create_api_key(&holder).await.unwrap();
    assert_authenticates_as(&store, &holder, "before the organization is made").await;
    store.create_organization(&org).await.unwrap();
    assert_organization_twice(&store, &org, &holder, "after the create").await;

    let renamed = OrganizationRecord {
        name: "Renamed".into(),
        updated_at: org.updated_at + TimeDelta::seconds(1),
        ..org.clone()
    };
    store.update_organization(&renamed).await.unwrap();
    assert_organization_twice(&store, &renamed, &holder, "after a rename").await;

    let suspended = OrganizationRecord {
        status: OrgStatus::Suspended,
        updated_at: org.updated_at + TimeDelta::seconds(2),
        ..renamed
    };
    store.update_organization(&suspended).await.unwrap();
    assert_organization_twice(&store, &suspended, &holder, "after a suspension").await;

    let reactivated = OrganizationRecord {
        status: OrgStatus::Active,
        updated_at: org.updated_at + TimeDelta::seconds(3),
        ..suspended
    };
    store.update_organization(&reactivated).await.unwrap();
    assert_organization_twice(&store, &reactivated, &holder, "after a reactivation").await;
}

async fn assert_organization_twice(
    store: &Store,
    expected: &OrganizationRecord,
    holder: &ApiKeyRecord,
    what: &str,
) {
    for read in ["", ", read again"] {
        // Authentication's read, when it answers the organization, answers the stored one.
        let authenticated = store
            .find_key_and_organization(&holder.key_hash)
            .await
            .unwrap()
            .expect("the holder's key exists");
        if let Some(organization) = &authenticated.organization {
            assert_eq!(
                &**organization, expected,
                "{what}{read} (authentication's read)"
            );
        }
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
