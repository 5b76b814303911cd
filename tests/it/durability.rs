//! Restart durability: what the API acknowledged is there after a stop and a start on the same
//! data dir, and the development organization is created once, not on every start.

use vigil_tests::{TestServer, json, vigil_binary};

#[tokio::test]
async fn acknowledged_writes_survive_a_restart() {
    let mut s = TestServer::start().await;
    let sk = s.creds.keys.secret_live.clone();
    let org = s
        .post("/v1/organizations")
        .key(&sk)
        .json(json!({"name": "Kept", "slug": "kept"}))
        .send()
        .await
        .ok(201)
        .clone();
    let key = s.create_key(&sk, json!({"name": "kept-key", "type": "publishable", "environment": "live", "allowed_origins": ["https://kept.example"]})).await;
    let revoked = s
        .create_key(
            &sk,
            json!({"name": "gone", "type": "secret", "environment": "live"}),
        )
        .await;
    s.delete(&format!(
        "{}/api-keys/{}",
        s.org_path(),
        revoked["id"].as_str().unwrap()
    ))
    .key(&sk)
    .send()
    .await
    .ok(200);
    let creds_before = std::fs::read(s.dir.join("credentials.json")).unwrap();

    s.restart().await;

    assert_eq!(
        std::fs::read(s.dir.join("credentials.json")).unwrap(),
        creds_before,
        "created once"
    );
    assert_eq!(s.creds.keys.secret_live, sk);
    let read = s
        .get(&format!(
            "{}/api-keys/{}",
            s.org_path(),
            key["id"].as_str().unwrap()
        ))
        .key(&sk)
        .send()
        .await;
    let read = read.ok(200);
    assert_eq!(read["name"], "kept-key");
    assert_eq!(read["allowed_origins"], json!(["https://kept.example"]));
    assert_eq!(read["revealed_key"], key["revealed_key"]);
    s.get(&s.org_path())
        .key(revoked["revealed_key"].as_str().unwrap())
        .send()
        .await
        .err(401, "auth.invalid_credentials");
    // The slug is still taken.
    s.post("/v1/organizations")
        .key(&sk)
        .json(json!({"name": "Again", "slug": org["slug"].as_str().unwrap()}))
        .send()
        .await
        .err(409, "resource.conflict");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(s.dir.join("credentials.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn bootstrap_prints_an_organization_and_four_keys_and_refuses_a_taken_slug() {
    let mut s = TestServer::start().await;
    s.stop().await;
    let dir = s.dir.to_str().unwrap().to_owned();
    let out = std::process::Command::new(vigil_binary())
        .args([
            "bootstrap",
            "--data-dir",
            &dir,
            "--name",
            "Acme",
            "--slug",
            "acme",
        ])
        .output()
        .expect("runs vigil");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    assert_eq!(printed["organization"]["slug"], "acme");
    for (name, prefix) in [
        ("secret_live", "sk_live_"),
        ("secret_test", "sk_test_"),
        ("publishable_live", "pk_live_"),
        ("publishable_test", "pk_test_"),
    ] {
        assert!(
            printed["keys"][name].as_str().unwrap().starts_with(prefix),
            "{name}"
        );
    }
    let again = std::process::Command::new(vigil_binary())
        .args([
            "bootstrap",
            "--data-dir",
            &dir,
            "--name",
            "Acme",
            "--slug",
            "acme",
        ])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));

    s.restart().await;
    let acme_sk = printed["keys"]["secret_live"].as_str().unwrap();
    let path = format!(
        "/v1/organizations/{}",
        printed["organization"]["id"].as_str().unwrap()
    );
    s.get(&path).key(acme_sk).send().await.ok(200);
}
