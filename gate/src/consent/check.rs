//! The consent page's check that a person decides (docs/gate.md#the-consent-page): the page
//! loads Vigil's own SDK with a publishable key of the built-in `vigil` service's organization,
//! and opens its collect session with a one-time ticket bound to this Gate session
//! ([`ticket`]), so Vigil scores the browser that shows it as it scores any site's visitors,
//! and only that page's session counts. Approve or Deny posts the page's handoff with the form.
//! [`judge`] opens that handoff and reads the decision, with the input the page's marked user
//! code field and Approve button received. Headers can be forged by any script, and a page
//! URL is only what the page claims; a session opened with the page's own ticket cannot be.

use std::time::Duration;

use schemas::credential::{Environment, KeyType};
use schemas::decision::{AutomationStatus, Decision};
use schemas::session_view::SessionView;
use schemas::time;
use store::{ApiKeyRecord, GateApproval, GateSessionRecord, StoreError};

use admin_api::AdminState;
use admin_api::api_keys::{KeySpec, mint};

/// How long a decision waits for the processor to score the page's session: `result()` makes
/// it final, and the processor reads it from the log a moment later.
const SCORING_WAIT: Duration = Duration::from_secs(10);
const SCORING_POLL: Duration = Duration::from_millis(100);

/// What Vigil made of the browser that posted a decision.
#[derive(Debug)]
pub enum Judgement {
    /// A person's browser, or one that cannot be told from it and was used like one: the
    /// person's own input reached the user code field and the Approve button.
    Person(GateApproval),
    /// A program: the decision is refused, and the Gate session closed.
    Automated(GateApproval),
    /// Not automated, but Vigil is not sure, or the page's fields received no input of the
    /// person's: another try is asked for, within the session's budget.
    AskAgain(GateApproval),
}

/// The ticket a consent page of `session` opens its collect session with: sealed, one-time,
/// and valid while the session waits.
pub fn ticket(state: &AdminState, session: &GateSessionRecord) -> String {
    secrets::consent_ticket::ConsentTicket::new(session.id, session.environment, session.expires_at)
        .seal(&state.auth.secret)
}

/// Why a decision could not be judged at all.
#[derive(Debug)]
pub enum Unjudged {
    /// The form came without the page's handoff: the page's script did not run.
    NoScript,
    /// The handoff is not this page's, or not one Vigil can open, or was used already.
    Refused(&'static str),
    /// The page's session was not scored in time.
    NotYet,
    /// The store did not answer.
    Unavailable,
}

impl From<StoreError> for Unjudged {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "gate: the consent check could not read the store");
        Unjudged::Unavailable
    }
}

/// The publishable key the consent page loads the SDK with, in `env` (the Gate session's: a
/// test session's page is scored with a test key, which plain HTTP may carry for local
/// stacks). The `vigil` service's organization and its keys are made the first time a page
/// needs them, so every process of a fleet, and a store that was down at start, gets them.
pub async fn page_key(state: &AdminState, env: Environment) -> Result<String, StoreError> {
    let org = schemas::gate::system_organization();
    let store = &state.auth.store;
    let origin = public_origin();
    for _ in 0..2 {
        let now = time::now();
        let keys = store.list_api_keys(org, env, None, 50).await?;
        // Only a key that works from this server's own origin: a browser on any other site is
        // refused it, so no site can have its visitors make "person" sessions for this page.
        let usable = keys.iter().find_map(|k| {
            (k.key_type == KeyType::Publishable
                && edge::auth::key_is_usable(k, now).is_ok()
                && k.allowed_origins == [origin.clone()])
            .then(|| k.publishable_token.clone())
            .flatten()
        });
        if let Some(token) = usable {
            return Ok(token);
        }
        let key = publishable_key(state, env);
        let made = match store.get_organization(org).await? {
            None => {
                let other = publishable_key(
                    state,
                    match env {
                        Environment::Live => Environment::Test,
                        Environment::Test => Environment::Live,
                    },
                );
                let record = system_organization_record();
                store
                    .create_organization_with_keys(&record, &[key, other])
                    .await
            }
            Some(_) => store.create_api_key(&key).await,
        };
        // A racing process made them first: read again.
        match made {
            Ok(()) | Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Unavailable(
        "the consent page's publishable key could not be made".into(),
    ))
}

/// The origin the consent pages are served from: the server's public URL's.
fn public_origin() -> String {
    url::Url::parse(edge::context::public_url())
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}

fn publishable_key(state: &AdminState, env: Environment) -> ApiKeyRecord {
    let spec = KeySpec {
        name: format!("consent page ({})", env.as_str()),
        key_type: KeyType::Publishable,
        environment: env,
        allowed_origins: vec![public_origin()],
        scopes: Vec::new(),
    };
    mint(
        &state.auth.secret,
        schemas::gate::system_organization(),
        spec,
    )
    .0
}

fn system_organization_record() -> store::OrganizationRecord {
    let now = time::now();
    store::OrganizationRecord {
        id: schemas::gate::system_organization(),
        name: "Vigil".into(),
        // Unique whatever a tenant named theirs: the id is what every process looks for.
        slug: format!(
            "vigil-system-{}",
            ulid::Ulid::generate().to_string().to_ascii_lowercase()
        ),
        status: schemas::resources::OrgStatus::Active,
        created_at: now,
        updated_at: now,
    }
}

/// Judges the browser that posted a decision on `session`'s consent page, from the page's
/// `handoff`. The handoff must be the `vigil` organization's, of the session's environment,
/// minted for a collect session opened with a ticket of this very Gate session's consent page,
/// and it is spent here: one scored page view decides once.
pub async fn judge(
    state: &AdminState,
    session: &GateSessionRecord,
    handoff: Option<&str>,
) -> Result<Judgement, Unjudged> {
    let handoff = handoff
        .filter(|h| !h.is_empty())
        .ok_or(Unjudged::NoScript)?;
    let now = time::now();
    let claims = secrets::handoff::open(&state.auth.secret, handoff, now)
        .map_err(|_| Unjudged::Refused("The page's check could not be read. Reload the page."))?;
    let org = schemas::gate::system_organization();
    if claims.organization_id != org || claims.environment != session.environment {
        return Err(Unjudged::Refused(
            "The check came from another page. Open the approval link again.",
        ));
    }
    let store = &state.auth.store;
    let collect = store
        .get_collect_session(claims.session_id)
        .await?
        .ok_or(Unjudged::Refused(
            "The check came from another page. Open the approval link again.",
        ))?;
    // Opened with this Gate session's own ticket, or it is another page's: whatever URL it
    // claims, a page the server did not render for this session never decides it.
    if collect.organization_id != org || collect.gate_session_id != Some(session.id) {
        return Err(Unjudged::Refused(
            "The check came from another page. Open the approval link again.",
        ));
    }
    let deadline = tokio::time::Instant::now() + SCORING_WAIT;
    let (decision, interacted, code_field, approve_button) = loop {
        let scored = store
            .get_session(org, claims.environment, claims.session_id)
            .await?;
        let decision = scored.as_ref().and_then(|s| {
            let raw = s.latest_decision.as_ref()?;
            Decision::from_raw(raw).ok().filter(Decision::is_final)
        });
        if let (Some(decision), Some(scored)) = (decision, scored) {
            let view = SessionView::of(&scored.state);
            // No probes: the SDK never ran in this page, whatever was sent in its name.
            if view.probes().is_none() {
                return Err(Unjudged::Refused(
                    "Vigil's check did not run in this page. Reload the page and decide again.",
                ));
            }
            // Input means events: a batch that carries none (`no_input_events`) is not input.
            let no_events = decision
                .signals_fired
                .iter()
                .any(|s| s.slug == "no_input_events");
            break (
                decision,
                view.interacted() && !no_events,
                view.field(CODE_FIELD).used(),
                view.field(APPROVE_BUTTON).activated(),
            );
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Unjudged::NotYet);
        }
        tokio::time::sleep(SCORING_POLL).await;
    };
    // Spent last, once nothing else can refuse it: a page view (its collect session, whatever
    // handoffs it minted) decides once.
    let opening = secrets::handoff::opening_id(&format!("gate-consent:{}", claims.session_id));
    if store
        .open_handoff_once(&store::HandoffOpening {
            handoff: opening,
            at: now,
            expires_at: claims.expires_at,
        })
        .await?
        .is_some()
    {
        return Err(Unjudged::Refused(
            "This check was used already. Reload the page and decide again.",
        ));
    }
    let approval = GateApproval {
        collect_session_id: claims.session_id,
        automation_status: decision.automation_status,
        verdict: decision.verdict,
        risk_score: decision.risk_score,
        interacted,
        used_code_field: code_field,
        used_approve_button: approve_button,
        judged_at: time::now(),
    };
    tracing::info!(
        gate_session = %session.id,
        collect_session = %approval.collect_session_id,
        automation = ?approval.automation_status,
        risk = approval.risk_score,
        interacted,
        code_field,
        approve_button,
        signals = ?decision.signals_fired.iter().map(|s| s.slug.as_str()).collect::<Vec<_>>(),
        "gate: a consent decision was scored"
    );
    // A person types the code and presses the button: an approval whose fields received none
    // of the person's input (a script that sent a browser's probes and asked for the result, a
    // page elsewhere that had its visitor click something else) is never a person's. An
    // uncertain browser is let through only with that evidence, a human one too.
    let used_the_page = interacted && code_field && approve_button;
    Ok(match decision.automation_status {
        AutomationStatus::Automated => Judgement::Automated(approval),
        AutomationStatus::Uncertain | AutomationStatus::Human if used_the_page => {
            Judgement::Person(approval)
        }
        AutomationStatus::Uncertain | AutomationStatus::Human => Judgement::AskAgain(approval),
    })
}

/// The consent page's marks (`data-vigil-field`) on its user code field and its Approve
/// button, whose input an approval is judged on.
pub const CODE_FIELD: &str = "code";
pub const APPROVE_BUTTON: &str = "approve";
