//! API keys over HTTP: issue, reveal-once, list with pagination, read with last_used_at,
//! update rules, revocation on the next request, rotation with its grace window, the removed
//! scope, environment isolation, and the operator's rate-limit override.

use std::time::Duration;

use vigil_tests::{TestServer, json};

fn keys_path(s: &TestServer) -> String {
    format!("{}/api-keys", s.org_path())
}

#[tokio::test]
async fn a_secret_key_is_revealed_only_when_created() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let created = s
        .post(&keys_path(&s))
        .key(sk)
        .json(json!({"name": "backend", "type": "secret", "environment": "live", "rate_limit": 5}))
        .send()
        .await;
    let key = created.ok(201).clone();
    let revealed = key["revealed_key"].as_str().unwrap().to_owned();
    assert!(revealed.starts_with("sk_live_") && revealed.len() == 46);
    assert!(key["id"].as_str().unwrap().starts_with("key_"));
    assert_eq!(key["object"], "api_key");
    assert_eq!(key["status"], "active");
    assert_eq!(
        key["rate_limit"], 600,
        "rate_limit is read-only and ignored on write"
    );
    let scopes: Vec<String> = serde_json::from_value(key["scopes"].clone()).unwrap();
    assert_eq!(scopes.len(), 14, "omitted scopes default to the full set");
    for ts in [
        "rotated_at",
        "revoked_at",
        "grace_expires_at",
        "last_used_at",
    ] {
        assert!(key[ts].is_null(), "{ts} is null before its event");
    }
    let preview = key["key_preview"].as_str().unwrap();
    let display = key["display_key"].as_str().unwrap();
    assert!(revealed.starts_with(preview) && preview.len() < 16);
    assert!(!display.contains(&revealed[8..40]));
    s.get(&s.org_path())
        .key(preview)
        .send()
        .await
        .err(401, "auth.invalid_credentials");

    let id = key["id"].as_str().unwrap();
    let read = s
        .get(&format!("{}/{id}", keys_path(&s)))
        .key(sk)
        .send()
        .await;
    assert!(
        read.ok(200).get("revealed_key").is_none(),
        "never revealed again"
    );
    let list = s.get(&keys_path(&s)).key(sk).send().await;
    let listed = list
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == id)
        .unwrap()
        .clone();
    assert!(listed.get("revealed_key").is_none());
    assert!(
        listed.get("last_used_at").is_none(),
        "list items carry the interface's member set"
    );
    for member in [
        "id",
        "object",
        "type",
        "name",
        "environment",
        "key_preview",
        "display_key",
        "allowed_origins",
        "scopes",
        "rate_limit",
        "status",
        "created_at",
        "rotated_at",
        "revoked_at",
        "grace_expires_at",
    ] {
        assert!(listed.get(member).is_some(), "list item has {member}");
    }

    // The new key works, and its use is recorded.
    s.get(&s.org_path()).key(&revealed).send().await.ok(200);
    let mut used = serde_json::Value::Null;
    for _ in 0..50 {
        used = s
            .get(&format!("{}/{id}", keys_path(&s)))
            .key(sk)
            .send()
            .await
            .ok(200)["last_used_at"]
            .clone();
        if !used.is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(used.is_string(), "last_used_at is set after use");
}

#[tokio::test]
async fn publishable_keys_take_origins_and_secret_keys_take_scopes() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let pk = s
        .create_key(sk, json!({"name": "web", "type": "publishable", "environment": "live", "allowed_origins": ["https://Shop.Example"]}))
        .await;
    assert_eq!(pk["allowed_origins"], json!(["https://shop.example"]));
    assert!(pk["revealed_key"].as_str().unwrap().starts_with("pk_live_"));
    assert_eq!(pk["rate_limit"], 120);
    assert_eq!(pk["scopes"], json!([]));

    let r = s.post(&keys_path(&s)).key(sk).json(json!({"name": "w", "type": "publishable", "environment": "live", "scopes": ["sessions:read"]})).send().await;
    r.err(422, "request.validation_failed");
    assert_eq!(r.field_names(), vec!["scopes"]);
    let r = s.post(&keys_path(&s)).key(sk).json(json!({"name": "b", "type": "secret", "environment": "live", "allowed_origins": ["https://a.example"]})).send().await;
    assert_eq!(r.field_names(), vec!["allowed_origins"]);
    let r = s.post(&keys_path(&s)).key(sk).json(json!({"name": "b", "type": "secret", "environment": "live", "scopes": ["organizations:manage"]})).send().await;
    r.err(422, "request.validation_failed");
    assert_eq!(r.field_names(), vec!["scopes[0]"]);
    let r = s.post(&keys_path(&s)).key(sk).json(json!({"name": "w", "type": "publishable", "environment": "live", "allowed_origins": ["not a uri", "https://ok.example/path"]})).send().await;
    assert_eq!(
        r.field_names(),
        vec!["allowed_origins[0]", "allowed_origins[1]"]
    );
    let r = s
        .post(&keys_path(&s))
        .key(sk)
        .json(json!({"name": "", "type": "root", "environment": "prod"}))
        .send()
        .await;
    let e = r.err(422, "request.validation_failed");
    assert_eq!(r.field_names(), vec!["name", "type", "environment"]);
    assert!(
        e["details"].get("allowed_values").is_none(),
        "two enums failed: ambiguous"
    );

    let listed = s
        .get(&format!("{}?environment=live", keys_path(&s)))
        .key(sk)
        .send()
        .await;
    assert_eq!(
        listed.ok(200).as_array().unwrap().len(),
        3,
        "the two live dev keys and the one valid create"
    );
}

#[tokio::test]
async fn updates_change_names_origins_and_scopes_but_never_identity() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let key = s
        .create_key(
            sk,
            json!({"name": "a", "type": "secret", "environment": "live"}),
        )
        .await;
    let path = format!("{}/{}", keys_path(&s), key["id"].as_str().unwrap());

    let r = s.patch(&path).key(sk).json(json!({"name": "renamed", "scopes": ["sessions:read", "sessions:list"], "rate_limit": 99999})).send().await;
    let updated = r.ok(200);
    assert_eq!(updated["name"], "renamed");
    assert_eq!(updated["scopes"], json!(["sessions:list", "sessions:read"]));
    assert_eq!(updated["rate_limit"], 600);

    for (field, value) in [
        ("type", json!("publishable")),
        ("environment", json!("test")),
        ("revealed_key", json!("sk_live_x")),
        ("key_preview", json!("x")),
    ] {
        let r = s
            .patch(&path)
            .key(sk)
            .json(json!({ field: value, "name": "should-not-apply" }))
            .send()
            .await;
        r.err(422, "request.validation_failed");
        assert_eq!(r.field_names(), vec![field.to_owned()]);
    }
    let r = s
        .patch(&path)
        .key(sk)
        .json(json!({"allowed_origins": ["https://a.example"]}))
        .send()
        .await;
    assert_eq!(r.field_names(), vec!["allowed_origins"]);
    assert_eq!(
        s.get(&path).key(sk).send().await.ok(200)["name"],
        "renamed",
        "a refused update wrote nothing"
    );

    // The credential is not an id: update and revoke take the key_ id.
    let by_credential = format!(
        "{}/{}",
        keys_path(&s),
        key["revealed_key"].as_str().unwrap()
    );
    let r = s
        .patch(&by_credential)
        .key(sk)
        .json(json!({"name": "x"}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    assert_eq!(r.field_names(), vec!["keyId"]);
    s.delete(&by_credential)
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
}

#[tokio::test]
async fn revocation_takes_effect_on_the_next_request() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let key = s
        .create_key(
            sk,
            json!({"name": "doomed", "type": "secret", "environment": "live"}),
        )
        .await;
    let doomed = key["revealed_key"].as_str().unwrap();
    s.get(&s.org_path()).key(doomed).send().await.ok(200);

    let path = format!("{}/{}", keys_path(&s), key["id"].as_str().unwrap());
    let revoked = s.delete(&path).key(sk).send().await;
    let revoked = revoked.ok(200);
    assert_eq!(revoked["status"], "revoked");
    assert!(revoked["revoked_at"].is_string());

    s.get(&s.org_path())
        .key(doomed)
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    s.post(&format!("{path}/rotations"))
        .key(sk)
        .send()
        .await
        .err(409, "resource.conflict");
    s.patch(&path)
        .key(sk)
        .json(json!({"name": "back"}))
        .send()
        .await
        .err(409, "resource.conflict");
    // Revoking again returns the same revoked key.
    assert_eq!(
        s.delete(&path).key(sk).send().await.ok(200)["revoked_at"],
        revoked["revoked_at"]
    );
    // A key can revoke itself; its next request is refused.
    let own = s
        .create_key(
            sk,
            json!({"name": "self", "type": "secret", "environment": "live"}),
        )
        .await;
    let own_key = own["revealed_key"].as_str().unwrap();
    s.delete(&format!(
        "{}/{}",
        keys_path(&s),
        own["id"].as_str().unwrap()
    ))
    .key(own_key)
    .send()
    .await
    .ok(200);
    s.get(&s.org_path())
        .key(own_key)
        .send()
        .await
        .err(401, "auth.invalid_credentials");
}

#[tokio::test]
async fn rotation_keeps_the_old_key_through_its_grace_window_then_refuses_it() {
    let s = TestServer::start_with(|a| a.rotation_grace = Duration::from_secs(2)).await;
    let sk = &s.creds.keys.secret_live;
    let key = s.create_key(sk, json!({"name": "rotating", "type": "secret", "environment": "live", "scopes": ["organizations:read"]})).await;
    let old = key["revealed_key"].as_str().unwrap().to_owned();
    let path = format!("{}/{}", keys_path(&s), key["id"].as_str().unwrap());

    let rotated = s.post(&format!("{path}/rotations")).key(sk).send().await;
    let replacement = rotated.ok(201).clone();
    let new = replacement["revealed_key"].as_str().unwrap();
    assert_ne!(new, old);
    assert_ne!(replacement["id"], key["id"]);
    assert_eq!(replacement["name"], "rotating");
    assert_eq!(replacement["scopes"], json!(["organizations:read"]));
    assert_eq!(replacement["status"], "active");

    let old_view = s.get(&path).key(sk).send().await;
    let old_view = old_view.ok(200);
    assert_eq!(old_view["status"], "active");
    assert!(old_view["rotated_at"].is_string() && old_view["grace_expires_at"].is_string());
    s.get(&s.org_path()).key(&old).send().await.ok(200);
    s.get(&s.org_path()).key(new).send().await.ok(200);
    s.post(&format!("{path}/rotations"))
        .key(sk)
        .send()
        .await
        .err(409, "resource.conflict");

    tokio::time::sleep(Duration::from_millis(2100)).await;
    s.get(&s.org_path())
        .key(&old)
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    s.get(&s.org_path()).key(new).send().await.ok(200);
    assert_eq!(
        s.get(&path).key(sk).send().await.ok(200)["status"],
        "expired"
    );
}

#[tokio::test]
async fn a_key_with_the_removed_scope_must_rotate_before_organization_routes() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let key = s.create_key(sk, json!({"name": "legacy", "type": "secret", "environment": "live", "scopes": ["api_keys:manage", "organizations:read"]})).await;
    let legacy = key["revealed_key"].as_str().unwrap();
    // Keys minted before the scope was split carry it; write one as such a key was stored.
    let id = key["id"].as_str().unwrap();
    s.edit_key(schemas::credential::Environment::Live, id, |k| {
        k.scopes.push(schemas::Scope::OrganizationsManage)
    })
    .await;

    let r = s.get(&s.org_path()).key(legacy).send().await;
    assert_eq!(
        r.err(403, "auth.scope_removed")["details"]["next_action"],
        "rotate"
    );
    s.get(&keys_path(&s))
        .key(legacy)
        .send()
        .await
        .err(403, "auth.scope_removed");

    // Rotation is the way out, and the replacement carries the successor scopes.
    let rotated = s
        .post(&format!("{}/{}/rotations", keys_path(&s), id))
        .key(legacy)
        .send()
        .await;
    let replacement = rotated.ok(201);
    let scopes: Vec<String> = serde_json::from_value(replacement["scopes"].clone()).unwrap();
    assert!(
        scopes.contains(&"organizations:update".to_owned())
            && !scopes.contains(&"organizations:manage".to_owned())
    );
    s.get(&s.org_path())
        .key(replacement["revealed_key"].as_str().unwrap())
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn a_test_key_manages_test_keys_only() {
    let s = TestServer::start().await;
    let live = &s.creds.keys.secret_live;
    let test = &s.creds.keys.secret_test;
    let live_key = s
        .create_key(
            live,
            json!({"name": "l", "type": "secret", "environment": "live"}),
        )
        .await;
    let test_key = s
        .create_key(
            test,
            json!({"name": "t", "type": "secret", "environment": "test"}),
        )
        .await;
    assert!(
        test_key["revealed_key"]
            .as_str()
            .unwrap()
            .starts_with("sk_test_")
    );

    let r = s
        .post(&keys_path(&s))
        .key(test)
        .json(json!({"name": "x", "type": "secret", "environment": "live"}))
        .send()
        .await;
    r.err(403, "auth.environment_not_allowed");
    s.get(&format!(
        "{}/{}",
        keys_path(&s),
        live_key["id"].as_str().unwrap()
    ))
    .key(test)
    .send()
    .await
    .err(404, "resource.not_found");
    s.delete(&format!(
        "{}/{}",
        keys_path(&s),
        live_key["id"].as_str().unwrap()
    ))
    .key(test)
    .send()
    .await
    .err(404, "resource.not_found");
    // Live is the stronger environment: a live key reads (and manages) test keys too.
    s.get(&format!(
        "{}/{}",
        keys_path(&s),
        test_key["id"].as_str().unwrap()
    ))
    .key(live)
    .send()
    .await
    .ok(200);

    let envs = |r: &vigil_tests::Resp| -> Vec<String> {
        r.ok(200)
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["environment"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        envs(&s.get(&keys_path(&s)).key(test).send().await)
            .iter()
            .all(|e| e == "test")
    );
    let both = envs(&s.get(&keys_path(&s)).key(live).send().await);
    assert!(both.iter().any(|e| e == "live") && both.iter().any(|e| e == "test"));
    // Organization state is shared by both environments.
    s.get(&s.org_path()).key(test).send().await.ok(200);
}

#[tokio::test]
async fn lists_paginate_newest_first_with_signed_cursors() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let mut made = Vec::new();
    for i in 0..5 {
        made.push(
            s.create_key(
                sk,
                json!({"name": format!("k{i}"), "type": "secret", "environment": "live"}),
            )
            .await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    // 5 created + the dev organization's 2 live keys.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("{}?environment=live&limit=3&cursor={c}", keys_path(&s)),
            None => format!("{}?environment=live&limit=3", keys_path(&s)),
        };
        let page = s.get(&path).key(sk).send().await;
        let data = page.ok(200).as_array().unwrap().clone();
        assert_eq!(page.body["pagination"]["limit"], 3);
        seen.extend(data.iter().map(|k| k["id"].as_str().unwrap().to_owned()));
        if page.body["pagination"]["has_more"] == true {
            cursor = Some(
                page.body["pagination"]["next_cursor"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        } else {
            assert!(page.body["pagination"].get("next_cursor").is_none());
            break;
        }
    }
    assert_eq!(seen.len(), 7);
    // Newest first by id: ids are time-ordered to the millisecond (keys made within one are in
    // the order of their random parts: docs/architecture.md#ids-and-credentials).
    let mut newest_first: Vec<String> = made.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(&seen[..5], &newest_first[..]);

    for bad in [
        "limit=0",
        "limit=201",
        "limit=x",
        "cursor=forged.cursor",
        "sort=name",
    ] {
        let r = s
            .get(&format!("{}?{bad}", keys_path(&s)))
            .key(sk)
            .send()
            .await;
        r.err(422, "request.validation_failed");
    }
    // A cursor from another organization's list is refused.
    let other = s.second_organization("second").await;
    let theirs = format!("/v1/organizations/{}/api-keys?limit=1", other.org_id());
    let their_cursor = s
        .get(&theirs)
        .key(&other.keys.secret_live)
        .send()
        .await
        .body["pagination"]["next_cursor"]
        .as_str()
        .unwrap()
        .to_owned();
    s.get(&format!("{}?cursor={their_cursor}", keys_path(&s)))
        .key(sk)
        .send()
        .await
        .err(422, "request.validation_failed");
}

#[tokio::test]
async fn the_operator_sets_a_keys_rate_limit() {
    let mut s = TestServer::start().await;
    let sk = s.creds.keys.secret_live.clone();
    let key = s
        .create_key(
            &sk,
            json!({"name": "limited", "type": "secret", "environment": "live"}),
        )
        .await;
    let limited = key["revealed_key"].as_str().unwrap().to_owned();
    s.stop().await;
    let run = |args: &[&str]| {
        let cli = <vigil::config::Cli as clap::Parser>::try_parse_from(args.iter().copied())
            .expect("parses");
        vigil::run(cli)
    };
    let dir = s.dir.to_str().unwrap().to_owned();
    run(&[
        "vigil",
        "keys",
        "set-rate-limit",
        "--data-dir",
        &dir,
        "--key-id",
        key["id"].as_str().unwrap(),
        "--limit",
        "7",
    ])
    .await
    .unwrap();
    run(&[
        "vigil",
        "keys",
        "set-rate-limit",
        "--data-dir",
        &dir,
        "--key",
        &s.creds.keys.publishable_live,
        "--limit",
        "9",
    ])
    .await
    .unwrap();
    assert!(
        run(&[
            "vigil",
            "keys",
            "set-rate-limit",
            "--data-dir",
            &dir,
            "--key",
            "sk_live_nope",
            "--limit",
            "9"
        ])
        .await
        .is_err()
    );
    s.restart().await;

    let r = s.get(&s.org_path()).key(&limited).send().await;
    r.ok(200);
    assert_eq!(r.header("x-ratelimit-limit").as_deref(), Some("7"));
    let read = s
        .get(&format!(
            "{}/{}",
            keys_path(&s),
            key["id"].as_str().unwrap()
        ))
        .key(&sk)
        .send()
        .await;
    assert_eq!(read.ok(200)["rate_limit"], 7);
    let listed = s
        .get(&format!("{}?environment=live", keys_path(&s)))
        .key(&sk)
        .send()
        .await;
    let pk = listed
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["type"] == "publishable")
        .unwrap()
        .clone();
    assert_eq!(pk["rate_limit"], 9);
}

#[tokio::test]
async fn a_key_grants_only_the_scopes_it_holds() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let manager = s
        .create_key(sk, json!({"name": "manager", "type": "secret", "environment": "live", "scopes": ["api_keys:manage", "api_keys:read"]}))
        .await;
    let manager_key = manager["revealed_key"].as_str().unwrap();

    // Omitting scopes grants what this key holds, never the full set it lacks.
    let r = s
        .post(&keys_path(&s))
        .key(manager_key)
        .json(json!({"name": "x", "type": "secret", "environment": "live"}))
        .send()
        .await;
    assert_eq!(r.ok(201)["scopes"], manager["scopes"]);
    let r = s.post(&keys_path(&s)).key(manager_key).json(json!({"name": "x", "type": "secret", "environment": "live", "scopes": ["sessions:read"]})).send().await;
    assert_eq!(
        r.err(403, "auth.insufficient_scope")["details"]["allowed_values"],
        json!(["sessions:read"])
    );
    let sub = s.post(&keys_path(&s)).key(manager_key).json(json!({"name": "sub", "type": "secret", "environment": "live", "scopes": ["api_keys:read"]})).send().await;
    assert_eq!(sub.ok(201)["scopes"], json!(["api_keys:read"]));
    // Publishable keys carry no scopes, so any manager may issue them.
    s.post(&keys_path(&s))
        .key(manager_key)
        .json(json!({"name": "web", "type": "publishable", "environment": "live"}))
        .send()
        .await
        .ok(201);

    // It cannot widen itself, nor receive a wider key by rotating one.
    let own = format!("{}/{}", keys_path(&s), manager["id"].as_str().unwrap());
    s.patch(&own)
        .key(manager_key)
        .json(json!({"scopes": ["api_keys:manage", "organizations:update"]}))
        .send()
        .await
        .err(403, "auth.insufficient_scope");
    let listed = s.get(&keys_path(&s)).key(manager_key).send().await;
    let dev_key = listed
        .ok(200)
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "live secret")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post(&format!("{}/{dev_key}/rotations", keys_path(&s)))
        .key(manager_key)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
    s.get(&s.org_path()).key(sk).send().await.ok(200);
}

/// The writes of `last_used_at` the store has made so far. The counter is the process's, which
/// is the test's own: nextest runs each test in a process of its own.
async fn last_used_writes(s: &TestServer) -> f64 {
    let metrics = s.get("/metrics").send().await;
    metrics
        .body
        .as_str()
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("vigil_store_operation_seconds_count{operation=\"touch_api_key\"} ")
        })
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// The count once it has held still for half a second (the writes are made off the request
/// path), waiting at most ten seconds.
async fn settled_last_used_writes(s: &TestServer) -> f64 {
    let mut last = last_used_writes(s).await;
    let mut still = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = last_used_writes(s).await;
        still = if now == last { still + 1 } else { 0 };
        last = now;
        if still == 5 {
            break;
        }
    }
    last
}

#[tokio::test]
async fn a_key_in_use_by_many_requests_at_once_records_its_use_once() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let created = s
        .post(&keys_path(&s))
        .key(sk)
        .json(json!({"name": "busy", "type": "secret", "environment": "live"}))
        .send()
        .await;
    let key = created.ok(201)["revealed_key"].as_str().unwrap().to_owned();
    // Connections opened first, so that the burst below reaches the server at once.
    let path = s.org_path();
    let warm = (0..200).map(|_| s.get(&path).key(sk).send());
    futures::future::join_all(warm).await;
    let before = settled_last_used_writes(&s).await;
    // Many of these read the key before its first use is stored.
    let calls = (0..200).map(|_| s.get(&path).key(&key).send());
    for answer in futures::future::join_all(calls).await {
        answer.ok(200);
    }
    assert_eq!(
        settled_last_used_writes(&s).await - before,
        1.0,
        "one write of last_used_at for a minute of use, however many requests raced"
    );
}
