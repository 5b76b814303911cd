//! `GET /demo`: a page for a newcomer (docs/sdk.md#scoring-a-visit). It loads the SDK with
//! the development organization's test publishable key, asks for the handoff, and shows the
//! decision the site's backend would read. The handoff is opened here on the server, as a
//! backend would open it: no secret key ever reaches the browser.
//!
//! It must not become an oracle that opens anyone's handoffs (docs/architecture.md#demo-page): it
//! is served only when the embedded store holds the development organization that
//! `credentials.json` names, and not at all with `--demo false`; it opens only that organization's
//! test-environment handoffs; and each of its answers costs the client address a step of the
//! anonymous bucket.

use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use edge::body::{Fields, JsonObject, Reply, RequestBody};
use edge::{ApiError, Authenticator};
use schemas::OrgId;
use schemas::credential::Environment;

#[derive(Clone)]
struct Demo {
    auth: Arc<Authenticator>,
    organization: OrgId,
    publishable_test: String,
}

/// The demo routes, when `credentials.json` names a development organization that the store
/// holds; `None` otherwise (the caller also leaves them out with `--demo false` and on a shared
/// store).
pub async fn router(auth: Arc<Authenticator>, credentials: &std::path::Path) -> Option<Router> {
    let text = std::fs::read_to_string(credentials).ok()?;
    let creds: serde_json::Value = serde_json::from_str(&text).ok()?;
    let organization: OrgId = creds.pointer("/organization/id")?.as_str()?.parse().ok()?;
    auth.store.get_organization(organization).await.ok()??;
    let publishable_test = creds
        .pointer("/keys/publishable_test")?
        .as_str()?
        .to_owned();
    let demo = Demo {
        auth,
        organization,
        publishable_test,
    };
    Some(
        Router::new()
            .route("/demo", get(page))
            .route("/demo/decision", post(decision))
            .with_state(demo),
    )
}

async fn page(State(demo): State<Demo>) -> Response {
    Html(PAGE.replace("{{KEY}}", &demo.publishable_test)).into_response()
}

/// Opens the page's handoff server-side and answers the decision the backend would read.
async fn decision(
    State(demo): State<Demo>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    request: Request,
) -> Response {
    let (mut parts, body) = request.into_parts();
    parts.extensions.insert(ConnectInfo(peer));
    let client = edge::transport::client_info(&parts, &demo.auth.trusted_proxies);
    let auth = demo.auth.clone();
    edge::auth::charge_anonymous(&auth, client, || async move {
        let request = Request::from_parts(parts, body);
        let answer = match JsonObject::from_request(request, &()).await {
            Ok(body) => open_test_handoff(&demo, body).await,
            Err(e) => Err(e),
        };
        answer.into_response()
    })
    .await
}

/// The demo page's body: the handoff its SDK minted.
struct HandoffBody {
    handoff: String,
}

impl RequestBody for HandoffBody {
    fn read(f: &mut Fields) -> Option<Self> {
        let handoff = f.string("handoff", true)?;
        Some(HandoffBody { handoff })
    }
}

/// What the page shows: the decision the site's backend would read.
#[derive(serde::Serialize)]
struct DemoDecision {
    session_id: schemas::SessionId,
    decision: Option<serde_json::Value>,
}

async fn open_test_handoff(demo: &Demo, body: JsonObject) -> Result<Reply, ApiError> {
    let HandoffBody { handoff } = HandoffBody::from_object(body)?;
    let claims = secrets::handoff::open(&demo.auth.secret, &handoff, schemas::time::now())
        .map_err(|e| ApiError::invalid_field("handoff", e.to_string(), None))?;
    if claims.organization_id != demo.organization || claims.environment != Environment::Test {
        return Err(ApiError::not_found("handoff"));
    }
    let session = demo
        .auth
        .store
        .get_session(
            claims.organization_id,
            claims.environment,
            claims.session_id,
        )
        .await?;
    Ok(Reply::ok(DemoDecision {
        session_id: claims.session_id,
        decision: session
            .and_then(|s| s.latest_decision)
            .map(|d| d.to_value()),
    }))
}

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Vigil demo</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; }
  pre { background: #f4f4f4; padding: 1rem; overflow: auto; font-size: 13px; }
  .verdict { font-size: 1.6rem; font-weight: 600; }
</style>
</head>
<body>
<h1>Vigil demo</h1>
<p>This page loads the browser SDK with the development organization's test publishable key,
streams what it observes, then asks for the sealed handoff. The server opens the handoff, as
your backend would with its secret key, and shows the decision below. Move the mouse or type
before it finishes to give it some behaviour to look at.</p>
<p class="verdict" id="verdict">Observing…</p>
<pre id="decision"></pre>
<script src="/sdk/v1/vigil.js"></script>
<script>
(async () => {
  const show = (text) => { document.getElementById('verdict').textContent = text; };
  try {
    const agent = await Vigil.load({ key: '{{KEY}}', endpoint: location.origin });
    await new Promise((r) => setTimeout(r, 2500));
    const { handoff } = await agent.result();
    for (let i = 0; i < 40; i++) {
      const r = await fetch('/demo/decision', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ handoff }) });
      const body = await r.json();
      const d = body.data && body.data.decision;
      if (d && d.decision_status === 'final') {
        show(d.automation_status + ' · ' + d.verdict + ' · risk ' + d.risk_score);
        document.getElementById('decision').textContent = JSON.stringify(d, null, 2);
        return;
      }
      await new Promise((r) => setTimeout(r, 250));
    }
    show('No decision yet: is the processor running?');
  } catch (e) {
    show('Error: ' + (e.code || '') + ' ' + e.message);
  }
})();
</script>
</body>
</html>
"#;
