//! Organizations over HTTP: create, read and update, validation, slug uniqueness, suspension
//! (docs/architecture.md#organizations), scopes, and isolation from a second organization.

use vigil_tests::{TestServer, json};

#[tokio::test]
async fn create_read_and_update_an_organization() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;

    let created = s
        .post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "Acme", "slug": "acme-corp"}))
        .send()
        .await;
    let org = created.ok(201);
    assert_eq!(org["object"], "organization");
    assert_eq!(org["name"], "Acme");
    assert_eq!(org["slug"], "acme-corp");
    assert_eq!(org["status"], "active");
    let id = org["id"].as_str().unwrap();
    assert!(id.starts_with("org_") && id.len() == 30);
    assert!(org["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        org["created_at"].as_str().unwrap().len(),
        24,
        "millisecond precision"
    );

    // The creating key belongs to its own organization and reaches only that one.
    s.get(&format!("/v1/organizations/{id}"))
        .key(sk)
        .send()
        .await
        .err(404, "resource.not_found");

    let own = s.get(&s.org_path()).key(sk).send().await;
    assert_eq!(own.ok(200)["slug"], "development");
    assert_eq!(own.header("x-ratelimit-limit").as_deref(), Some("600"));

    let renamed = s
        .patch(&s.org_path())
        .key(sk)
        .json(json!({"name": "Dev Renamed"}))
        .send()
        .await;
    let renamed = renamed.ok(200);
    assert_eq!(renamed["name"], "Dev Renamed");
    assert_ne!(renamed["updated_at"], renamed["created_at"]);
    assert_eq!(
        s.get(&s.org_path()).key(sk).send().await.ok(200)["name"],
        "Dev Renamed"
    );
}

#[tokio::test]
async fn slugs_are_unique_and_validated() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    s.post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "A", "slug": "taken"}))
        .send()
        .await
        .ok(201);
    let again = s
        .post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "B", "slug": "taken"}))
        .send()
        .await;
    again.err(409, "resource.conflict");
    s.post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "Dev", "slug": "development"}))
        .send()
        .await
        .err(409, "resource.conflict");

    for bad in ["Upper", "-lead", "trail-", "dou--ble", "sp ace", ""] {
        let r = s
            .post("/v1/organizations")
            .key(sk)
            .json(json!({"name": "X", "slug": bad}))
            .send()
            .await;
        r.err(422, "request.validation_failed");
        assert_eq!(r.field_names(), vec!["slug"], "{bad}");
    }
    let r = s
        .post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "", "slug": 7, "extra": true}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    let mut names = r.field_names();
    names.sort();
    assert_eq!(names, vec!["extra", "name", "slug"]);
    let r = s
        .post("/v1/organizations")
        .key(sk)
        .json(json!({}))
        .send()
        .await;
    r.err(422, "request.validation_failed");
    assert_eq!(
        r.body["error"]["details"]["fields"][0]["issue"],
        "is required"
    );

    let r = s
        .patch(&s.org_path())
        .key(sk)
        .json(json!({"status": "closed"}))
        .send()
        .await;
    let e = r.err(422, "request.validation_failed");
    assert_eq!(
        e["details"]["allowed_values"],
        json!(["active", "suspended"])
    );
    s.patch(&s.org_path())
        .key(sk)
        .json(json!({"slug": "new"}))
        .send()
        .await
        .err(422, "request.validation_failed");
    s.patch(&s.org_path())
        .key(sk)
        .json(json!({"name": ""}))
        .send()
        .await
        .err(422, "request.validation_failed");
    assert_eq!(
        s.get(&s.org_path()).key(sk).send().await.ok(200)["name"],
        "Development",
        "no partial write"
    );
}

#[tokio::test]
async fn a_suspended_organization_keeps_read_reactivate_and_key_incident_handling() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let pk = &s.creds.keys.publishable_live;
    // While active, a publishable key is refused on secret routes for its type.
    s.get(&s.org_path())
        .key(pk)
        .send()
        .await
        .err(403, "auth.credential_type_not_allowed");

    let r = s
        .patch(&s.org_path())
        .key(sk)
        .json(json!({"status": "suspended"}))
        .send()
        .await;
    assert_eq!(r.ok(200)["status"], "suspended");

    let refused = s.get(&s.org_path()).key(pk).send().await;
    refused.err(403, "organization.suspended");
    assert!(refused.header("x-ratelimit-remaining").is_some());
    // Its live secret keys can still list, revoke and rotate keys (an incident is handled
    // before reactivation; tests/it/security.rs), but not create them.
    s.get(&format!("{}/api-keys", s.org_path()))
        .key(sk)
        .send()
        .await
        .ok(200);
    s.post(&format!("{}/api-keys", s.org_path()))
        .key(sk)
        .json(json!({"name": "new"}))
        .send()
        .await
        .err(403, "organization.suspended");
    s.post("/v1/organizations")
        .key(sk)
        .json(json!({"name": "A", "slug": "a"}))
        .send()
        .await
        .err(403, "organization.suspended");
    assert_eq!(
        s.get(&s.org_path()).key(sk).send().await.ok(200)["status"],
        "suspended"
    );

    let r = s
        .patch(&s.org_path())
        .key(sk)
        .json(json!({"status": "active"}))
        .send()
        .await;
    assert_eq!(r.ok(200)["status"], "active");
    s.get(&format!("{}/api-keys", s.org_path()))
        .key(sk)
        .send()
        .await
        .ok(200);
}

#[tokio::test]
async fn scopes_are_enforced_per_route() {
    let s = TestServer::start().await;
    let sk = &s.creds.keys.secret_live;
    let reader = s
        .create_key(sk, json!({"name": "reader", "type": "secret", "environment": "live", "scopes": ["organizations:read"]}))
        .await;
    let reader = reader["revealed_key"].as_str().unwrap();
    s.get(&s.org_path()).key(reader).send().await.ok(200);
    let r = s
        .patch(&s.org_path())
        .key(reader)
        .json(json!({"name": "x"}))
        .send()
        .await;
    assert_eq!(
        r.err(403, "auth.insufficient_scope")["details"]["allowed_values"],
        json!(["organizations:update"])
    );
    let r = s
        .post("/v1/organizations")
        .key(reader)
        .json(json!({"name": "x", "slug": "x"}))
        .send()
        .await;
    assert_eq!(
        r.err(403, "auth.insufficient_scope")["details"]["allowed_values"],
        json!(["organizations:create"])
    );
    s.get(&format!("{}/api-keys", s.org_path()))
        .key(reader)
        .send()
        .await
        .err(403, "auth.insufficient_scope");
}

#[tokio::test]
async fn a_second_organization_stays_unreachable() {
    let s = TestServer::start().await;
    let other = s.second_organization("second").await;
    let mine = &s.creds.keys.secret_live;
    let theirs = &other.keys.secret_live;
    let their_path = format!("/v1/organizations/{}", other.org_id());

    s.get(&their_path)
        .key(mine)
        .send()
        .await
        .err(404, "resource.not_found");
    s.patch(&their_path)
        .key(mine)
        .json(json!({"name": "pwned"}))
        .send()
        .await
        .err(404, "resource.not_found");
    s.get(&format!("{their_path}/api-keys"))
        .key(mine)
        .send()
        .await
        .err(404, "resource.not_found");
    s.post(&format!("{their_path}/api-keys"))
        .key(mine)
        .json(json!({"name": "x", "type": "secret", "environment": "live"}))
        .send()
        .await
        .err(404, "resource.not_found");

    // Their keys, addressed through my organization's path, do not exist for me either.
    let their_keys = s
        .get(&format!("{their_path}/api-keys"))
        .key(theirs)
        .send()
        .await;
    let their_key_id = their_keys.ok(200)[0]["id"].as_str().unwrap().to_owned();
    s.get(&format!("{}/api-keys/{their_key_id}", s.org_path()))
        .key(mine)
        .send()
        .await
        .err(404, "resource.not_found");
    s.delete(&format!("{}/api-keys/{their_key_id}", s.org_path()))
        .key(mine)
        .send()
        .await
        .err(404, "resource.not_found");
    s.post(&format!(
        "{}/api-keys/{their_key_id}/rotations",
        s.org_path()
    ))
    .key(mine)
    .send()
    .await
    .err(404, "resource.not_found");

    assert_eq!(
        s.get(&their_path).key(theirs).send().await.ok(200)["name"],
        "Second"
    );
    s.get(&their_path).key(theirs).send().await.ok(200);
}
