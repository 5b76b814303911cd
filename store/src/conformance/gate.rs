//! Gate services, sessions, accounts and agent tokens (`GateStore`).

use super::*;

fn gate_service(id: &str, org: OrgId, env: Environment) -> crate::GateServiceRecord {
    let now = time::now();
    crate::GateServiceRecord {
        id: id.to_owned(),
        organization_id: org,
        environment: env,
        status: crate::GateServiceStatus::Active,
        discoverable: true,
        name: format!("Service {id}"),
        description: String::new(),
        website: "https://acme.example".into(),
        dashboard_login_url: None,
        webhook_url: None,
        sealed_webhook_secret: vec![1, 2, 3],
        env_vars: vec![crate::GateEnvVar {
            name: "API key".into(),
            key: "ACME_API_KEY".into(),
            secret: true,
        }],
        docs_url: None,
        sdks: Vec::new(),
        branding: crate::GateBranding::default(),
        consent: crate::GateConsent::default(),
        created_at: now,
        updated_at: now,
    }
}

/// A Gate service id is claimed over every organization and environment; an organization has
/// at most `cap` services over both environments, disabled ones included; a refused create
/// writes nothing.
pub async fn gate_services_claim_ids_everywhere_and_keep_to_the_cap(store: Store) {
    use crate::GateServiceWrite::*;
    let (org, other) = (OrgId::generate(), OrgId::generate());
    let live = gate_service("acme", org, Environment::Live);
    assert_eq!(store.create_gate_service(&live, 2).await.unwrap(), Written);
    assert_eq!(
        store.get_gate_service("acme").await.unwrap(),
        Some(live.clone())
    );
    for taken in [
        gate_service("acme", other, Environment::Live),
        gate_service("acme", org, Environment::Test),
    ] {
        assert_eq!(store.create_gate_service(&taken, 2).await.unwrap(), IdTaken);
    }
    let mut disabled = gate_service("acme-two", org, Environment::Test);
    disabled.status = crate::GateServiceStatus::Disabled;
    assert_eq!(
        store.create_gate_service(&disabled, 2).await.unwrap(),
        Written
    );
    // `-` and `_` are one character to a service id: both become `_` in its variable's name.
    for twin in [
        gate_service("acme_two", other, Environment::Live),
        gate_service("acme_two", org, Environment::Live),
    ] {
        assert_eq!(store.create_gate_service(&twin, 2).await.unwrap(), IdTaken);
    }
    assert_eq!(store.get_gate_service("acme_two").await.unwrap(), None);
    assert_eq!(
        store
            .create_gate_service(&gate_service("acme-three", org, Environment::Live), 2)
            .await
            .unwrap(),
        Written
    );
    assert_eq!(
        store
            .create_gate_service(&gate_service("acme-four", org, Environment::Live), 2)
            .await
            .unwrap(),
        CapReached,
        "the live services, disabled ones included, count toward the live cap"
    );
    assert_eq!(store.get_gate_service("acme-four").await.unwrap(), None);
    assert_eq!(
        store
            .create_gate_service(&gate_service("acme-five", org, Environment::Test), 2)
            .await
            .unwrap(),
        Written,
        "the test environment has a cap of its own"
    );
    assert_eq!(
        store
            .create_gate_service(&gate_service("acme-six", org, Environment::Test), 2)
            .await
            .unwrap(),
        CapReached,
        "a disabled test service counts toward the test cap"
    );
    assert_eq!(
        store
            .create_gate_service(&gate_service("other-one", other, Environment::Live), 2)
            .await
            .unwrap(),
        Written,
        "another organization has its own cap"
    );
    let listed: Vec<String> = store
        .list_gate_services(org, Environment::Live)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(listed, vec!["acme", "acme-three"]);
    let test: Vec<String> = store
        .list_gate_services(org, Environment::Test)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(test, vec!["acme-five", "acme-two"]);
}

/// An update replaces the service whole; a rename claims the new id and frees the old one; the
/// registry lists exactly the published services of an environment, by id, in pages.
pub async fn gate_service_updates_rename_and_follow_the_registry(store: Store) {
    use crate::GateServiceWrite::*;
    let org = OrgId::generate();
    let env = Environment::Test;
    let ids = |services: Vec<crate::GateServiceRecord>| {
        services.into_iter().map(|s| s.id).collect::<Vec<_>>()
    };
    for id in ["reg-a", "reg-b", "reg-c"] {
        store
            .create_gate_service(&gate_service(id, org, env), 10)
            .await
            .unwrap();
    }
    store
        .create_gate_service(&gate_service("reg-live", org, Environment::Live), 10)
        .await
        .unwrap();
    assert_eq!(
        ids(store.list_gate_registry(env, None, 10).await.unwrap()),
        ["reg-a", "reg-b", "reg-c"]
    );
    assert_eq!(
        ids(store
            .list_gate_registry(env, Some("reg-a"), 1)
            .await
            .unwrap()),
        ["reg-b"]
    );

    let mut hidden = gate_service("reg-b", org, env);
    hidden.discoverable = false;
    assert_eq!(
        store.update_gate_service("reg-b", &hidden).await.unwrap(),
        Written
    );
    let mut disabled = gate_service("reg-c", org, env);
    disabled.status = crate::GateServiceStatus::Disabled;
    assert_eq!(
        store.update_gate_service("reg-c", &disabled).await.unwrap(),
        Written
    );
    assert_eq!(
        ids(store.list_gate_registry(env, None, 10).await.unwrap()),
        ["reg-a"]
    );
    assert_eq!(store.get_gate_service("reg-b").await.unwrap(), Some(hidden));

    let renamed = gate_service("reg-z", org, env);
    assert_eq!(
        store.update_gate_service("reg-a", &renamed).await.unwrap(),
        Written
    );
    assert_eq!(store.get_gate_service("reg-a").await.unwrap(), None);
    assert_eq!(
        ids(store.list_gate_registry(env, None, 10).await.unwrap()),
        ["reg-z"]
    );
    assert_eq!(
        ids(store.list_gate_services(org, env).await.unwrap()),
        ["reg-b", "reg-c", "reg-z"]
    );
    let onto_taken = gate_service("reg-live", org, env);
    assert_eq!(
        store
            .update_gate_service("reg-z", &onto_taken)
            .await
            .unwrap(),
        IdTaken
    );
    let stranger = gate_service("reg-z", OrgId::generate(), env);
    assert_eq!(
        store.update_gate_service("reg-z", &stranger).await.unwrap(),
        Missing
    );
    assert_eq!(
        store
            .update_gate_service("nowhere", &gate_service("nowhere", org, env))
            .await
            .unwrap(),
        Missing
    );
    assert_eq!(
        store.get_gate_service("reg-z").await.unwrap(),
        Some(renamed)
    );
}

/// A Gate session moves from a status once: a second approval (or an approval of a denied
/// session) writes nothing; an approval writes the account and the agent token with it.
pub async fn a_gate_session_transitions_once_and_an_approval_writes_its_account_and_token(
    store: Store,
) {
    use crate::{AgentTokenRecord, GateAccountRecord, GateSessionRecord, GateSessionStatus};
    let now = time::now();
    let org = OrgId::generate();
    let pending = GateSessionRecord {
        organization_id: org,
        poll_token: Some(CredentialHash([2; 32])),
        ..waiting_signup(CredentialHash([2; 32]), now)
    };
    store.create_gate_session(&pending).await.unwrap();
    assert!(
        store.create_gate_session(&pending).await.is_err(),
        "an id is made once"
    );
    let account = GateAccountRecord {
        id: schemas::ids::GateAccountId::generate(),
        service_id: "acme".into(),
        organization_id: org,
        environment: Environment::Test,
        name: "dev".into(),
        created_at: now,
    };
    let token = AgentTokenRecord {
        hash: CredentialHash([3; 32]),
        account_id: account.id,
        service_id: "acme".into(),
        organization_id: org,
        environment: Environment::Test,
        created_at: now,
        expires_at: now + TimeDelta::days(90),
        revoked_at: None,
        recent_logins: Vec::new(),
    };
    let mut approved = pending.clone();
    approved.status = GateSessionStatus::Approved;
    approved.account_id = Some(account.id);
    approved.sealed_delivery = vec![9, 9];
    // The consent page's judgement is kept with the approval.
    approved.approval = Some(crate::GateApproval {
        collect_session_id: SessionId::generate(),
        automation_status: schemas::decision::AutomationStatus::Human,
        verdict: schemas::decision::Verdict::Human,
        risk_score: 7,
        interacted: true,
        used_code_field: true,
        used_approve_button: true,
        judged_at: now,
    });
    assert!(
        store
            .transition_gate_session(
                &approved,
                GateSessionStatus::Pending,
                Some((&account, &token))
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .transition_gate_session(&approved, GateSessionStatus::Pending, None)
            .await
            .unwrap(),
        "approved once"
    );
    assert_eq!(
        store.get_gate_session(pending.id).await.unwrap(),
        Some(approved.clone())
    );
    assert_eq!(
        store.get_gate_account(account.id).await.unwrap(),
        Some(account.clone())
    );
    assert_eq!(
        store.get_agent_token(&token.hash).await.unwrap(),
        Some(token.clone())
    );
    let mut revoked = token.clone();
    revoked.revoked_at = Some(now);
    assert!(store.update_agent_token(&revoked).await.unwrap());
    assert_eq!(
        store.get_agent_token(&token.hash).await.unwrap(),
        Some(revoked.clone())
    );
    // Counting logins checks the token and the cap in one step; revoking is for good.
    let mut second = pending.clone();
    second.id = schemas::ids::GateSessionId::generate();
    store.create_gate_session(&second).await.unwrap();
    let mut fresh = revoked.clone();
    fresh.hash = CredentialHash([5; 32]);
    fresh.revoked_at = None;
    let mut approved_too = second.clone();
    approved_too.status = GateSessionStatus::Approved;
    let other_account = GateAccountRecord {
        id: schemas::ids::GateAccountId::generate(),
        ..account.clone()
    };
    assert!(
        store
            .transition_gate_session(
                &approved_too,
                GateSessionStatus::Pending,
                Some((&other_account, &fresh))
            )
            .await
            .unwrap()
    );
    for _ in 0..2 {
        assert!(matches!(
            store.count_agent_login(&fresh.hash, now, 2).await.unwrap(),
            crate::AgentLogin::Counted(_)
        ));
    }
    assert_eq!(
        store.count_agent_login(&fresh.hash, now, 2).await.unwrap(),
        crate::AgentLogin::CapReached(now)
    );
    let later = now + TimeDelta::hours(2);
    assert!(matches!(
        store
            .count_agent_login(&fresh.hash, later, 2)
            .await
            .unwrap(),
        crate::AgentLogin::Counted(_)
    ));
    let gone = store
        .revoke_agent_token(&fresh.hash, later)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(gone.revoked_at, Some(later));
    let again = store
        .revoke_agent_token(&fresh.hash, later + TimeDelta::hours(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.revoked_at,
        Some(later),
        "revoked once, when first revoked"
    );
    assert_eq!(
        store
            .count_agent_login(&fresh.hash, later, 2)
            .await
            .unwrap(),
        crate::AgentLogin::Unusable
    );
    assert_eq!(
        store
            .revoke_agent_token(&CredentialHash([6; 32]), later)
            .await
            .unwrap(),
        None
    );
    let mut stranger = token;
    stranger.hash = CredentialHash([4; 32]);
    assert!(!store.update_agent_token(&stranger).await.unwrap());
    assert_eq!(store.get_agent_token(&stranger.hash).await.unwrap(), None);
}

/// Retention keeps a Gate session a day past the window in which an approved signup's
/// delivery is shown (twice its lifetime), then drops it with its login code's row; a signup
/// approved but never acknowledged has its delivery withdrawn as soon as that window closes,
/// and the account and agent token it made deleted; an acknowledged one keeps them.
pub async fn gate_sessions_are_dropped_a_day_after_their_window_and_unacknowledged_signups_withdrawn(
    store: Store,
) {
    use crate::{
        AgentTokenRecord, GateAccountRecord, GateFlow, GateSessionRecord, GateSessionStatus,
    };
    let now = time::now();
    let session = |flow: GateFlow, created_at: Timestamp, code: u8| GateSessionRecord {
        flow,
        environment: Environment::Live,
        consent_token: CredentialHash([code; 32]),
        poll_token: None,
        expires_at: created_at + TimeDelta::minutes(15),
        created_at,
        ..waiting_signup(CredentialHash([code; 32]), created_at)
    };
    let old = session(GateFlow::Login, now - TimeDelta::hours(25), 7);
    let day_old = session(GateFlow::Login, now - TimeDelta::hours(23), 8);
    let recent = session(GateFlow::Login, now, 9);
    let unacknowledged = session(GateFlow::Signup, now - TimeDelta::hours(1), 10);
    let acknowledged = session(GateFlow::Signup, now - TimeDelta::hours(1), 11);
    let fresh_signup = session(GateFlow::Signup, now - TimeDelta::minutes(20), 12);
    // Never swept in its window (retention was down): dropped, and withdrawn all the same.
    let forgotten = session(GateFlow::Signup, now - TimeDelta::hours(26), 13);
    for s in [
        &old,
        &day_old,
        &recent,
        &unacknowledged,
        &acknowledged,
        &fresh_signup,
        &forgotten,
    ] {
        store.create_gate_session(s).await.unwrap();
    }
    // A backend whose rows go by TTLs (ScyllaDB) drops a session written past its drop time at
    // once, as its sweep would: then there is nothing to approve, and nothing it made to
    // withdraw. Every other backend keeps it until the sweep below.
    let dropped_at_once = |s: Option<GateSessionRecord>| s.is_none();
    let old_dropped = dropped_at_once(store.get_gate_session(old.id).await.unwrap());
    let forgotten_dropped = dropped_at_once(store.get_gate_session(forgotten.id).await.unwrap());
    assert_eq!(
        old_dropped, forgotten_dropped,
        "both sessions are past their drop time"
    );
    let mut coded = old.clone();
    coded.status = GateSessionStatus::Approved;
    coded.login_code = Some(CredentialHash([9; 32]));
    assert_eq!(
        store
            .transition_gate_session(&coded, GateSessionStatus::Pending, None)
            .await
            .unwrap(),
        !old_dropped
    );
    // Three signups approved, each with the account and token it made.
    let mut made = Vec::new();
    for (n, signup) in [&unacknowledged, &acknowledged, &fresh_signup, &forgotten]
        .into_iter()
        .enumerate()
    {
        let account = GateAccountRecord {
            id: schemas::ids::GateAccountId::generate(),
            service_id: "acme".into(),
            organization_id: signup.organization_id,
            environment: Environment::Live,
            name: "dev".into(),
            created_at: signup.created_at,
        };
        let token = AgentTokenRecord {
            hash: CredentialHash([20 + n as u8; 32]),
            account_id: account.id,
            service_id: "acme".into(),
            organization_id: signup.organization_id,
            environment: Environment::Live,
            created_at: signup.created_at,
            expires_at: now + TimeDelta::days(90),
            revoked_at: None,
            recent_logins: Vec::new(),
        };
        let mut approved = signup.clone();
        approved.status = GateSessionStatus::Approved;
        approved.account_id = Some(account.id);
        approved.agent_token = Some(token.hash);
        approved.sealed_delivery = vec![1, 2, 3];
        assert_eq!(
            store
                .transition_gate_session(
                    &approved,
                    GateSessionStatus::Pending,
                    Some((&account, &token))
                )
                .await
                .unwrap(),
            !(signup.id == forgotten.id && forgotten_dropped),
            "{n}"
        );
        made.push((approved, account, token));
    }
    let mut completed = made[1].0.clone();
    completed.status = GateSessionStatus::Completed;
    completed.sealed_delivery = Vec::new();
    assert!(
        store
            .transition_gate_session(&completed, GateSessionStatus::Approved, None)
            .await
            .unwrap()
    );

    while store
        .purge_expired(now, now - TimeDelta::days(90), 1)
        .await
        .unwrap()
    {}
    assert_eq!(store.get_gate_session(old.id).await.unwrap(), None);
    assert_eq!(
        store
            .get_login_by_code(&CredentialHash([9; 32]))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.get_gate_session(day_old.id).await.unwrap(),
        Some(day_old)
    );
    assert_eq!(
        store.get_gate_session(recent.id).await.unwrap(),
        Some(recent)
    );
    // Withdrawn: the delivery cleared, the account and the token gone.
    let (approved, account, token) = &made[0];
    let withdrawn = store.get_gate_session(approved.id).await.unwrap().unwrap();
    assert!(withdrawn.sealed_delivery.is_empty());
    assert_eq!(withdrawn.status, GateSessionStatus::Approved);
    assert_eq!(store.get_gate_account(account.id).await.unwrap(), None);
    assert_eq!(store.get_agent_token(&token.hash).await.unwrap(), None);
    // Acknowledged, and still within its window: untouched.
    let (_, account, token) = &made[1];
    assert_eq!(
        store.get_gate_session(completed.id).await.unwrap(),
        Some(completed.clone())
    );
    assert!(store.get_gate_account(account.id).await.unwrap().is_some());
    assert!(store.get_agent_token(&token.hash).await.unwrap().is_some());
    let (approved, account, token) = &made[2];
    assert_eq!(
        store.get_gate_session(approved.id).await.unwrap(),
        Some(approved.clone())
    );
    assert!(store.get_gate_account(account.id).await.unwrap().is_some());
    assert!(store.get_agent_token(&token.hash).await.unwrap().is_some());
    let (approved, account, token) = &made[3];
    assert_eq!(store.get_gate_session(approved.id).await.unwrap(), None);
    assert_eq!(store.get_gate_account(account.id).await.unwrap(), None);
    assert_eq!(store.get_agent_token(&token.hash).await.unwrap(), None);
}

/// A poll is counted by the holder of the poll token only; one sooner than the interval grows
/// it; past the cap nothing is written.
/// A signup waiting for its person, polled with `token`.
fn waiting_signup(
    token: CredentialHash,
    now: schemas::time::Timestamp,
) -> crate::GateSessionRecord {
    use crate::{GateFlow, GateSessionRecord, GateSessionStatus};
    GateSessionRecord {
        id: schemas::ids::GateSessionId::generate(),
        flow: GateFlow::Signup,
        service_id: "acme".into(),
        organization_id: OrgId::generate(),
        environment: Environment::Test,
        status: GateSessionStatus::Pending,
        consent_token: CredentialHash([1; 32]),
        poll_token: Some(token),
        interval_secs: 5,
        polls: 0,
        last_poll_at: None,
        account_id: None,
        sealed_delivery: Vec::new(),
        ack_token: None,
        login_code: None,
        agent_token: None,
        code_expires_at: None,
        approval: None,
        client_name: None,
        env_var_keys: Vec::new(),
        user_code: Some(CredentialHash([5; 32])),
        code_attempts: 0,
        uncertain_judgements: 0,
        denial: None,
        created_at: now,
        expires_at: now + TimeDelta::minutes(15),
    }
}

/// The consent page's attempts (user codes typed, uncertain judgements) are counted each in
/// its own budget, in one step: parallel attempts cannot pass it, a spent budget writes
/// nothing, the right user code is matched and never counted (and, past the budget, no code
/// is compared), and a session that no longer waits counts nothing.
pub async fn gate_attempts_are_counted_within_their_budget_in_one_step(store: Store) {
    use crate::{GateAttempt, GateAttemptCount, GateSessionStatus};
    let now = time::now();
    let session = waiting_signup(CredentialHash([3; 32]), now);
    store.create_gate_session(&session).await.unwrap();
    assert_eq!(
        store
            .count_gate_attempt(
                schemas::ids::GateSessionId::generate(),
                GateAttempt::UserCode(CredentialHash([9; 32])),
                5
            )
            .await
            .unwrap(),
        None,
        "no such session"
    );
    let (right, wrong) = (
        GateAttempt::UserCode(session.user_code.unwrap()),
        GateAttempt::UserCode(CredentialHash([9; 32])),
    );
    // The right code is matched, and counts nothing.
    assert!(matches!(
        store
            .count_gate_attempt(session.id, right, 3)
            .await
            .unwrap(),
        Some(GateAttemptCount::Matched(_))
    ));
    // Five wrong ones raced for a budget of three: exactly three count.
    let raced =
        futures::future::join_all((0..5).map(|_| store.count_gate_attempt(session.id, wrong, 3)))
            .await;
    let mut numbers: Vec<u32> = raced
        .into_iter()
        .filter_map(|r| match r.unwrap().unwrap() {
            GateAttemptCount::Counted(_, n) => Some(n),
            _ => None,
        })
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2, 3]);
    let stored = store.get_gate_session(session.id).await.unwrap().unwrap();
    assert_eq!((stored.code_attempts, stored.uncertain_judgements), (3, 0));
    // Past the budget, no code is compared, the right one neither.
    assert!(matches!(
        store
            .count_gate_attempt(session.id, right, 3)
            .await
            .unwrap(),
        Some(GateAttemptCount::Refused(_))
    ));
    // The other budget is its own.
    match store
        .count_gate_attempt(session.id, GateAttempt::UnsureJudgement, 3)
        .await
        .unwrap()
        .unwrap()
    {
        GateAttemptCount::Counted(after, 1) => {
            assert_eq!((after.code_attempts, after.uncertain_judgements), (3, 1));
        }
        other => panic!("{other:?}"),
    }
    // A session that no longer waits counts nothing.
    let mut denied = store.get_gate_session(session.id).await.unwrap().unwrap();
    denied.status = GateSessionStatus::Denied;
    assert!(
        store
            .transition_gate_session(&denied, GateSessionStatus::Pending, None)
            .await
            .unwrap()
    );
    assert!(matches!(
        store
            .count_gate_attempt(session.id, GateAttempt::UnsureJudgement, 3)
            .await
            .unwrap(),
        Some(GateAttemptCount::Refused(_))
    ));
    assert_eq!(
        store.get_gate_session(session.id).await.unwrap(),
        Some(denied)
    );
}

pub async fn gate_polls_are_counted_with_their_interval_and_cap_in_one_step(store: Store) {
    use crate::GatePoll;
    let now = time::now();
    let token = CredentialHash([3; 32]);
    let session = waiting_signup(token, now);
    store.create_gate_session(&session).await.unwrap();
    let poll = |at, cap| store.count_gate_poll(session.id, &token, at, 5, cap);
    assert_eq!(
        store
            .count_gate_poll(session.id, &CredentialHash([4; 32]), now, 5, 10)
            .await
            .unwrap(),
        None,
        "another token counts nothing"
    );
    let (first, how) = poll(now, 10).await.unwrap().unwrap();
    assert_eq!(
        (how, first.polls, first.interval_secs),
        (GatePoll::Counted, 1, 5)
    );
    let (soon, how) = poll(now + TimeDelta::seconds(1), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (how, soon.polls, soon.interval_secs),
        (GatePoll::TooSoon, 2, 10)
    );
    let (later, how) = poll(now + TimeDelta::seconds(12), 10)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((how, later.interval_secs), (GatePoll::Counted, 10));
    let (spent, how) = poll(now + TimeDelta::seconds(30), 3)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((how, spent.polls), (GatePoll::Exhausted, 3));
    assert_eq!(
        store.get_gate_session(session.id).await.unwrap(),
        Some(spent)
    );
}
