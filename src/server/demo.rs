//! `GET /demo`: a page for a newcomer (docs/sdk.md#scoring-a-visit). It loads the SDK with
//! the development organization's test publishable key, asks for the handoff, and shows the
//! decision the site's backend would read, as a page a person can follow: the verdict and risk
//! score, the highlights as sentences, the category scores as bars, every fired signal with its
//! sentence, and the visitor with its linked sessions; the raw JSON behind a toggle. The
//! handoff is opened here on the server, as a backend would open it: no secret key ever
//! reaches the browser.
//!
//! It must not become an oracle that opens anyone's handoffs (docs/architecture.md#demo-page): it
//! is served only when the embedded store holds the development organization that
//! `credentials.json` names, and not at all with `--demo false`; it opens only that organization's
//! test-environment handoffs; and each of its answers costs the client address a step of the
//! anonymous bucket.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use edge::body::{JsonObject, Reply, RequestBody};
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
#[derive(RequestBody)]
struct HandoffBody {
    handoff: String,
}

/// What the page shows: the decision the site's backend would read, with what the page needs
/// to explain it.
#[derive(serde::Serialize)]
struct DemoDecision {
    session_id: schemas::SessionId,
    decision: Option<serde_json::Value>,
    /// The sentence of each fired signal, by slug: the decision names signals, a person reads
    /// sentences.
    sentences: BTreeMap<String, &'static str>,
    /// The visitor the session was linked to, once the probes came.
    visitor: Option<DemoVisitor>,
}

#[derive(serde::Serialize)]
struct DemoVisitor {
    id: schemas::VisitorId,
    seen_count: u64,
    #[serde(serialize_with = "schemas::time::ser")]
    first_seen_at: schemas::time::Timestamp,
    /// Its most recent sessions, newest first: this one among them.
    sessions: Vec<LinkedVisit>,
}

#[derive(serde::Serialize)]
struct LinkedVisit {
    id: schemas::SessionId,
    verdict: Option<serde_json::Value>,
    #[serde(serialize_with = "schemas::time::ser")]
    opened_at: schemas::time::Timestamp,
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
    let decision = session
        .as_ref()
        .and_then(|s| s.latest_decision.as_ref())
        .map(|d| d.to_value());
    // The visitor and its sessions only once the decision is final, which is when the page
    // shows them: the page polls until then, and each poll would read them all again.
    let is_final = decision
        .as_ref()
        .is_some_and(|d| d["decision_status"] == "final");
    let visitor = match session.and_then(|s| s.visitor_id) {
        Some(id) if is_final => linked_visitor(demo, id).await?,
        _ => None,
    };
    Ok(Reply::ok(DemoDecision {
        session_id: claims.session_id,
        sentences: sentences(decision.as_ref()),
        decision,
        visitor,
    }))
}

fn sentences(decision: Option<&serde_json::Value>) -> BTreeMap<String, &'static str> {
    let fired = decision
        .and_then(|d| d["signals_fired"].as_array())
        .into_iter()
        .flatten();
    fired
        .filter_map(|s| s["signal"].as_str())
        .filter_map(|slug| Some((slug.to_owned(), processor::signals::spec(slug)?.sentence)))
        .collect()
}

/// The demo organization's visitor `id` with the verdicts of its recent sessions.
async fn linked_visitor(
    demo: &Demo,
    id: schemas::VisitorId,
) -> Result<Option<DemoVisitor>, ApiError> {
    let store = &demo.auth.store;
    let Some(visitor) = store
        .get_visitor(demo.organization, Environment::Test, id)
        .await?
    else {
        return Ok(None);
    };
    let mut sessions = Vec::with_capacity(visitor.recent_sessions.len());
    for sid in visitor.recent_sessions {
        if let Some(s) = store
            .get_session(demo.organization, Environment::Test, sid)
            .await?
        {
            let verdict = s.latest_decision.map(|d| d.to_value()["verdict"].clone());
            sessions.push(LinkedVisit {
                id: s.id,
                verdict,
                opened_at: s.opened_at,
            });
        }
    }
    Ok(Some(DemoVisitor {
        id: visitor.id,
        seen_count: visitor.seen_count,
        first_seen_at: visitor.first_seen_at,
        sessions,
    }))
}

// Everything the page shows from the decision is set as text (`textContent`), never as markup:
// signals' observed values come from the visitor's browser.
const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Vigil demo</title>
<style>
  body { font: 16px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #1d2330; }
  h2 { font-size: 1.1rem; margin: 1.6rem 0 .5rem; }
  .verdict { font-size: 1.7rem; font-weight: 650; margin: .3rem 0; }
  .verdict.bot { color: #b42318; } .verdict.human { color: #157f3b; } .verdict.suspicious { color: #b54708; }
  .risk { font-size: 1.05rem; color: #475467; }
  ul.highlights { list-style: none; padding: 0; }
  ul.highlights li { padding: .35rem .6rem; margin: .3rem 0; border-left: 4px solid; background: #f8f9fb; }
  ul.highlights li.concerning { border-color: #d92d20; } ul.highlights li.reassuring { border-color: #12b76a; }
  .mark { font-weight: 600; margin-right: .4rem; }
  .bar { display: grid; grid-template-columns: 8rem 1fr 3rem; align-items: center; gap: .6rem; margin: .25rem 0; }
  .track { background: #eaecf0; height: .8rem; border-radius: .4rem; overflow: hidden; }
  .fill { background: #6172f3; height: 100%; }
  table { border-collapse: collapse; width: 100%; font-size: .92rem; }
  th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #eaecf0; vertical-align: top; }
  code { font-size: .88rem; }
  pre { background: #f4f4f4; padding: 1rem; overflow: auto; font-size: 12px; }
  [hidden] { display: none; }
</style>
</head>
<body>
<h1>Vigil demo</h1>
<p>This page loads the browser SDK with the development organization's test publishable key,
streams what it observes, then asks for the sealed handoff. The server opens the handoff, as
your backend would with its secret key, and shows the decision below. Move the mouse or type
before it finishes to give it some behaviour to look at.</p>
<p class="verdict" id="verdict">Observing…</p>
<p class="risk" id="risk"></p>
<div id="result" hidden>
  <h2>Why</h2>
  <ul class="highlights" id="highlights"></ul>
  <h2>Category scores</h2>
  <div id="scores"></div>
  <h2>Signals fired</h2>
  <table><thead><tr><th>Signal</th><th>Category</th><th>Weight</th><th>What it means</th></tr></thead>
  <tbody id="signals"></tbody></table>
  <h2>Visitor</h2>
  <p id="visitor"></p>
  <table><thead><tr><th>Linked session</th><th>Verdict</th><th>Opened</th></tr></thead>
  <tbody id="linked"></tbody></table>
  <details id="raw"><summary>Raw JSON</summary><pre id="decision"></pre></details>
</div>
<script src="/sdk/v1/vigil.js"></script>
<script>
(() => {
  const $ = (id) => document.getElementById(id);
  const el = (tag, text, className) => {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  };
  const row = (cells) => {
    const tr = el('tr');
    for (const cell of cells) tr.append(cell instanceof Node ? cell : el('td', cell));
    return tr;
  };
  const code = (text) => { const td = el('td'); td.append(el('code', text)); return td; };
  const LABELS = { automated: 'Automated', human: 'Human', uncertain: 'Uncertain' };

  function render(body) {
    const d = body.decision;
    $('verdict').textContent = (LABELS[d.automation_status] || d.automation_status) + ' · ' + d.verdict;
    $('verdict').className = 'verdict ' + d.verdict;
    $('risk').textContent = 'Risk score ' + d.risk_score + ' of 100 · rule ' + d.rule;
    for (const h of d.highlights || []) {
      const li = el('li', undefined, h.kind);
      li.append(el('span', h.kind === 'concerning' ? 'Concerning' : 'Reassuring', 'mark'), h.sentence);
      $('highlights').append(li);
    }
    if (!(d.highlights || []).length) $('highlights').append(el('li', 'Nothing stood out.'));
    for (const [category, score] of Object.entries((d.score_breakdown || {}).categories || {})) {
      const bar = el('div', undefined, 'bar');
      const track = el('div', undefined, 'track');
      const fill = el('div', undefined, 'fill');
      fill.style.width = Math.max(0, Math.min(100, Number(score) || 0)) + '%';
      track.append(fill);
      bar.append(el('span', category), track, el('span', score));
      $('scores').append(bar);
    }
    for (const s of d.signals_fired || []) {
      $('signals').append(row([code(s.signal), s.category, s.weight > 0 ? '+' + s.weight : s.weight,
        body.sentences[s.signal] || '']));
    }
    if (!(d.signals_fired || []).length) $('signals').append(row(['none', '', '', '']));
    const v = body.visitor;
    if (v) {
      $('visitor').textContent = 'Visitor ' + v.id + ', seen ' + v.seen_count + (v.seen_count === 1 ? ' time' : ' times')
        + ' since ' + v.first_seen_at + '.';
      for (const s of v.sessions) {
        $('linked').append(row([code(s.id + (s.id === body.session_id ? ' (this one)' : '')), s.verdict || 'pending', s.opened_at]));
      }
    } else {
      $('visitor').textContent = 'Not linked to a visitor yet.';
    }
    $('decision').textContent = JSON.stringify(d, null, 2);
    $('result').hidden = false;
  }

  (async () => {
    const show = (text) => { $('verdict').textContent = text; };
    try {
      const agent = await Vigil.load({ key: '{{KEY}}', endpoint: location.origin });
      await new Promise((r) => setTimeout(r, 2500));
      const { handoff } = await agent.result();
      for (let i = 0; i < 40; i++) {
        const r = await fetch('/demo/decision', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ handoff }) });
        const body = await r.json();
        const d = body.data && body.data.decision;
        if (d && d.decision_status === 'final') {
          render(body.data);
          document.title = 'Vigil demo: ' + d.verdict;
          return;
        }
        await new Promise((r) => setTimeout(r, 250));
      }
      show('No decision yet: is the processor running?');
    } catch (e) {
      show('Error: ' + (e.code || '') + ' ' + e.message);
    }
  })();
})();
</script>
</body>
</html>
"#;
