//! A property of the whole router, in-process: whatever bytes, methods, paths and headers a
//! client sends, no route answers a 5xx, and every refusal is the interface's error envelope.
//! The requests go through the same router the server serves (`RunningServer::router`), with
//! the client address the listener would attach, so every layer runs.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::BodyExt;
use proptest::prelude::*;
use serde_json::Value;
use tower::ServiceExt;
use vigil_tests::TestServer;

/// Paths the service has (with placeholders filled by arbitrary segments) and some it has not.
const PATHS: &[&str] = &[
    "/v1/organizations",
    "/v1/organizations/{org}",
    "/v1/organizations/{org}/api-keys",
    "/v1/organizations/{org}/api-keys/{seg}",
    "/v1/organizations/{org}/api-keys/{seg}/rotations",
    "/v1/collect/sessions",
    "/v1/collect/sessions/{seg}/batches",
    "/v1/collect/sessions/{seg}/results",
    "/v1/collect/pings/{seg}",
    "/v1/collect/network-checks",
    "/v1/collect/ws",
    "/v1/handoffs/open",
    "/v1/sessions",
    "/v1/sessions/{seg}",
    "/v1/fingerprints",
    "/v1/fingerprints/{seg}",
    "/demo/decision",
    "/healthz",
    "/{seg}",
    "/v1/{seg}/{seg}",
];

/// Routes whose success is not JSON: the SDK script, probes' text, the docs, the demo page.
fn is_text_route(path: &str) -> bool {
    path == "/metrics" || path.starts_with("/sdk/") || path == "/docs/errors" || path == "/demo"
}

#[derive(Debug, Clone)]
struct Arbitrary {
    method: Method,
    path: String,
    query: Option<String>,
    credential: usize,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

fn method() -> impl Strategy<Value = Method> {
    prop_oneof![
        Just(Method::GET),
        Just(Method::POST),
        Just(Method::PATCH),
        Just(Method::DELETE),
        Just(Method::PUT),
        Just(Method::OPTIONS),
        Just(Method::HEAD),
        "[A-Z]{1,12}".prop_map(|m| Method::from_bytes(m.as_bytes()).unwrap()),
    ]
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{2,5}_[0-9a-z]{0,30}",
        "[A-Za-z0-9._~%-]{0,40}",
        Just("sid_00000000000000000000000000".to_owned()),
        Just("%00%ff%2F..".to_owned()),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..256),
        Just(b"{}".to_vec()),
        Just(b"[]".to_vec()),
        Just(b"null".to_vec()),
        Just(br#"{"name":"","type":"root","scopes":[1,2],"handoff":"vh1.k1.AAAA"}"#.to_vec()),
        "\\PC{0,80}"
            .prop_map(|s| format!(r#"{{"name":{s:?},"slug":{s:?},"status":{s:?}}}"#).into_bytes()),
    ]
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = prop_oneof![
        Just("content-type".to_owned()),
        Just("authorization".to_owned()),
        Just("idempotency-key".to_owned()),
        Just("origin".to_owned()),
        Just("x-forwarded-for".to_owned()),
        Just("content-length".to_owned()),
        Just("vigil-session-proof".to_owned()),
        Just("access-control-request-method".to_owned()),
        Just("signature".to_owned()),
        Just("signature-input".to_owned()),
        Just("signature-agent".to_owned()),
        "[a-z][a-z0-9-]{0,20}",
    ];
    let value = prop_oneof![
        Just(b"application/json".to_vec()),
        Just(b"text/plain".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..64),
    ];
    (name, value)
}

fn request() -> impl Strategy<Value = Arbitrary> {
    (
        method(),
        (0..PATHS.len(), segment(), segment()),
        proptest::option::of("[a-z_]{1,8}=[^#]{0,20}(&[a-z_]{1,8}=[a-z0-9]{0,8}){0,3}"),
        0usize..6,
        proptest::collection::vec(header(), 0..5),
        body(),
    )
        .prop_map(|(method, (p, a, b), query, credential, headers, body)| {
            let path = PATHS[p].replacen("{seg}", &a, 1).replacen("{seg}", &b, 1);
            Arbitrary {
                method,
                path,
                query,
                credential,
                headers,
                body,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_request_gets_a_5xx_or_an_unenveloped_refusal(requests in proptest::collection::vec(request(), 1..4)) {
        let rt = runtime();
        rt.block_on(async {
            let s = server().await;
            for r in requests {
                check(s, r).await;
            }
        });
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// One server for every case: what a case writes (a key revoked on a browser route, an
/// organization) is just more arbitrary state for the next.
async fn server() -> &'static TestServer {
    static SERVER: tokio::sync::OnceCell<TestServer> = tokio::sync::OnceCell::const_new();
    SERVER.get_or_init(TestServer::start).await
}

async fn check(s: &TestServer, r: Arbitrary) {
    let org = s.creds.org_id().to_owned();
    let path = r.path.replace("{org}", &org);
    let uri = match &r.query {
        Some(q) => format!("{path}?{q}"),
        None => path.clone(),
    };
    let mut builder = Request::builder().method(r.method.clone()).uri(&uri);
    let credential = match r.credential {
        0 => None,
        1 => Some("Bearer sk_test_notarealkey0000000000000000000000000000".to_owned()),
        2 => Some(format!("Bearer {}", s.creds.keys.publishable_test)),
        3 => Some(format!("Bearer {}", s.creds.keys.secret_live)),
        4 => Some(format!("Bearer {}", s.creds.keys.secret_test)),
        _ => Some("Basic Zm9vOmJhcg==".to_owned()),
    };
    if let Some(c) = credential {
        builder = builder.header("authorization", c);
    }
    for (name, value) in &r.headers {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        builder = builder.header(name, value);
    }
    let Ok(mut request) = builder.body(Body::from(r.body.clone())) else {
        return; // not a request a client could send over HTTP/1.1
    };
    request
        .extensions_mut()
        .insert(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000))));
    let router = s.running.as_ref().expect("running").router.clone();
    let response = router.oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    assert!(
        status.as_u16() < 500,
        "{} {uri} answered {status}: {}",
        r.method,
        String::from_utf8_lossy(&bytes)
    );
    if status.is_client_error() && r.method != Method::HEAD {
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
            panic!(
                "{} {uri} answered {status} without a JSON body: {:?}",
                r.method,
                String::from_utf8_lossy(&bytes)
            )
        });
        let e = &body["error"];
        assert_eq!(e["status"], status.as_u16(), "{} {uri}: {body}", r.method);
        assert!(
            e["code"].as_str().is_some_and(|c| c.contains('.')),
            "{body}"
        );
        assert!(
            e["request_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("req_")),
            "{body}"
        );
        assert!(
            e["message"].is_string() && e["retryable"].is_boolean(),
            "{body}"
        );
    } else if status.is_success() && !bytes.is_empty() && !is_text_route(&path) {
        assert!(
            serde_json::from_slice::<Value>(&bytes).is_ok(),
            "{} {uri} answered {status} with a body that is not JSON",
            r.method
        );
    }
}
