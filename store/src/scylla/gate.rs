//! Gate's services, sessions, accounts and agent tokens on ScyllaDB
//! (`store/cql/010_gate.cql`). Service ids and login codes are claimed by `IF NOT EXISTS`; an
//! organization's service cap is a counter raised by a lightweight transaction, so two racing
//! creates cannot both take the last place; every change of a session or a token is a
//! read-check-write on its `rev`, under the rules every backend applies.

use async_trait::async_trait;
use schemas::credential::Environment;
use schemas::ids::{GateAccountId, GateSessionId, OrgId};
use schemas::time::Timestamp;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::CqlValue;

use super::{CONTENDED_RETRIES, ScyllaStore, corrupt, encode, env_text, errors, rows_of};
use crate::{
    AgentLogin, AgentTokenRecord, CredentialHash, GateAccountRecord, GateAttempt, GateAttemptCount,
    GatePoll, GateServiceRecord, GateServiceWrite, GateSessionRecord, GateSessionStatus, GateStore,
    Result, StoreError,
};

const GATE_SERVICES: &str = "gate_services";
const GATE_SESSIONS: &str = "gate_sessions";
const GATE_ACCOUNTS: &str = "gate_accounts";
const AGENT_TOKENS: &str = "agent_tokens";

const CLAIM_ID: &str =
    "INSERT INTO gate_service_claims (claim, service_id) VALUES (?, ?) IF NOT EXISTS";
const RELEASE_ID: &str = "DELETE FROM gate_service_claims WHERE claim = ? IF service_id = ?";
const DROP_CLAIM: &str = "DELETE FROM gate_service_claims WHERE claim = ?";
const RENAME_CLAIM: &str = "INSERT INTO gate_service_claims (claim, service_id) VALUES (?, ?)";
const COUNT: &str =
    "SELECT services FROM gate_service_counts WHERE organization_id = ? AND environment = ?";
const FIRST_PLACE: &str = "INSERT INTO gate_service_counts (organization_id, environment, services) \
     VALUES (?, ?, 1) IF NOT EXISTS";
const NEXT_PLACE: &str = "UPDATE gate_service_counts SET services = ? \
     WHERE organization_id = ? AND environment = ? IF services = ?";
const INSERT_SERVICE: &str = "INSERT INTO gate_services (id, rev, body) VALUES (?, 0, ?)";
const INSERT_SERVICE_NEW: &str =
    "INSERT INTO gate_services (id, rev, body) VALUES (?, 0, ?) IF NOT EXISTS";
const READ_SERVICE: &str = "SELECT rev, body FROM gate_services WHERE id = ?";
const UPDATE_SERVICE: &str = "UPDATE gate_services SET rev = ?, body = ? WHERE id = ? IF rev = ?";
const DELETE_SERVICE: &str = "DELETE FROM gate_services WHERE id = ?";
const INDEX_OWNER: &str =
    "INSERT INTO gate_services_by_owner (organization_id, environment, id) VALUES (?, ?, ?)";
const UNINDEX_OWNER: &str =
    "DELETE FROM gate_services_by_owner WHERE organization_id = ? AND environment = ? AND id = ?";
const OWNED: &str =
    "SELECT id FROM gate_services_by_owner WHERE organization_id = ? AND environment = ?";
const INDEX_REGISTRY: &str = "INSERT INTO gate_registry (environment, id) VALUES (?, ?)";
const UNINDEX_REGISTRY: &str = "DELETE FROM gate_registry WHERE environment = ? AND id = ?";
const REGISTRY: &str = "SELECT id FROM gate_registry WHERE environment = ?";
const REGISTRY_AFTER: &str = "SELECT id FROM gate_registry WHERE environment = ? AND id > ?";
const CREATE_SESSION: &str =
    "INSERT INTO gate_sessions (id, rev, body) VALUES (?, 0, ?) IF NOT EXISTS USING TTL ?";
const READ_SESSION: &str = "SELECT rev, body FROM gate_sessions WHERE id = ?";
const UPDATE_SESSION: &str =
    "UPDATE gate_sessions USING TTL ? SET rev = ?, body = ? WHERE id = ? IF rev = ?";
const CLAIM_CODE: &str =
    "INSERT INTO gate_login_codes (code, session_id) VALUES (?, ?) IF NOT EXISTS USING TTL ?";
const PEND_DELIVERY: &str = "INSERT INTO gate_pending_deliveries (shard, session_id) VALUES (0, ?)";
const UNPEND_DELIVERY: &str =
    "DELETE FROM gate_pending_deliveries WHERE shard = 0 AND session_id = ?";
const PENDING_DELIVERIES: &str = "SELECT session_id FROM gate_pending_deliveries WHERE shard = 0";
const DELETE_ACCOUNT: &str = "DELETE FROM gate_accounts WHERE id = ?";
const DELETE_TOKEN: &str = "DELETE FROM agent_tokens WHERE hash = ?";
const RELEASE_CODE: &str = "DELETE FROM gate_login_codes WHERE code = ? IF session_id = ?";
const CODE_HOLDER: &str = "SELECT session_id FROM gate_login_codes WHERE code = ?";
const WRITE_ACCOUNT: &str = "INSERT INTO gate_accounts (id, body) VALUES (?, ?)";
const READ_ACCOUNT: &str = "SELECT body FROM gate_accounts WHERE id = ?";
const WRITE_TOKEN: &str = "INSERT INTO agent_tokens (hash, rev, body) VALUES (?, 0, ?)";
const READ_TOKEN: &str = "SELECT rev, body FROM agent_tokens WHERE hash = ?";
const UPDATE_TOKEN: &str = "UPDATE agent_tokens SET rev = ?, body = ? WHERE hash = ? IF rev = ?";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[
    CLAIM_ID,
    RELEASE_ID,
    DROP_CLAIM,
    RENAME_CLAIM,
    COUNT,
    FIRST_PLACE,
    NEXT_PLACE,
    INSERT_SERVICE,
    INSERT_SERVICE_NEW,
    READ_SERVICE,
    UPDATE_SERVICE,
    DELETE_SERVICE,
    INDEX_OWNER,
    UNINDEX_OWNER,
    OWNED,
    INDEX_REGISTRY,
    UNINDEX_REGISTRY,
    REGISTRY,
    REGISTRY_AFTER,
    CREATE_SESSION,
    READ_SESSION,
    UPDATE_SESSION,
    CLAIM_CODE,
    PEND_DELIVERY,
    UNPEND_DELIVERY,
    PENDING_DELIVERIES,
    DELETE_ACCOUNT,
    DELETE_TOKEN,
    RELEASE_CODE,
    CODE_HOLDER,
    WRITE_ACCOUNT,
    READ_ACCOUNT,
    WRITE_TOKEN,
    READ_TOKEN,
    UPDATE_TOKEN,
];

fn contended(what: &str) -> StoreError {
    StoreError::Unavailable(format!("ScyllaDB: {what} kept changing under its update"))
}

fn text(s: impl Into<String>) -> Option<CqlValue> {
    Some(CqlValue::Text(s.into()))
}

/// Seconds from `now` until the session is dropped (`rules::gate_sweep`): its rows' TTL.
fn session_ttl(session: &GateSessionRecord, now: Timestamp) -> i32 {
    i32::try_from(seconds_left(session, now).max(1)).unwrap_or(i32::MAX)
}

/// Seconds from `now` until the session is dropped; none or fewer once it is past that.
fn seconds_left(session: &GateSessionRecord, now: Timestamp) -> i64 {
    let window = chrono::TimeDelta::from_std(schemas::gate::SESSION_TTL).unwrap_or_default();
    let kept =
        chrono::TimeDelta::from_std(schemas::gate::SESSION_KEPT_AFTER_EXPIRY).unwrap_or_default();
    (session.expires_at + window + kept - now).num_seconds()
}

/// An approved signup whose delivery is still sealed in it: its account and token are
/// withdrawn if the tool never acknowledges them.
fn delivery_pending(session: &GateSessionRecord) -> bool {
    session.flow == crate::GateFlow::Signup
        && session.status == GateSessionStatus::Approved
        && !session.sealed_delivery.is_empty()
}

impl ScyllaStore {
    async fn read_service(&self, id: &str) -> Result<Option<(i64, GateServiceRecord)>> {
        let result = self.execute(READ_SERVICE, (id,)).await?;
        Self::revision(GATE_SERVICES, result)
    }

    /// The stored session as it is, even past its drop time (for retention's own work).
    async fn read_stored_session(
        &self,
        id: GateSessionId,
    ) -> Result<Option<(i64, GateSessionRecord)>> {
        let result = self.execute(READ_SESSION, (id.to_string(),)).await?;
        Self::revision(GATE_SESSIONS, result)
    }

    /// The session, absent once past its drop time (`rules::gate_sweep`): its TTL, a second at
    /// least, may not have run yet.
    async fn read_session(&self, id: GateSessionId) -> Result<Option<(i64, GateSessionRecord)>> {
        let now = schemas::time::now();
        Ok(self.read_stored_session(id).await?.filter(|(_, s)| {
            !matches!(
                crate::rules::gate_sweep(s, now),
                crate::rules::GateSweep::Drop { .. }
            )
        }))
    }

    async fn read_token(&self, hash: &CredentialHash) -> Result<Option<(i64, AgentTokenRecord)>> {
        let result = self.execute(READ_TOKEN, (&hash.0[..],)).await?;
        Self::revision(AGENT_TOKENS, result)
    }

    async fn write_session(&self, rev: i64, session: &GateSessionRecord) -> Result<bool> {
        let ttl = session_ttl(session, schemas::time::now());
        self.applied(
            UPDATE_SESSION,
            (ttl, rev + 1, encode(session), session.id.to_string(), rev),
        )
        .await
    }

    /// Keeps the pending-delivery index in step with a session just written.
    async fn follow_delivery(
        &self,
        before: &GateSessionRecord,
        after: &GateSessionRecord,
    ) -> Result<()> {
        match (delivery_pending(before), delivery_pending(after)) {
            (false, true) => self
                .execute(PEND_DELIVERY, (after.id.to_string(),))
                .await
                .map(drop),
            (true, false) => self
                .execute(UNPEND_DELIVERY, (after.id.to_string(),))
                .await
                .map(drop),
            _ => Ok(()),
        }
    }

    /// One retention step of Gate (`rules::gate_sweep`): the deliveries of approved signups
    /// never acknowledged whose window has closed are withdrawn, with the accounts and agent
    /// tokens they made. Sessions themselves go by their TTL. Whether more may remain.
    pub(super) async fn withdraw_unacknowledged(
        &self,
        now: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        // Few at a time (approved signups inside their window), so all are read; those kept
        // do not count as work, so a step ends when nothing is left to withdraw.
        let pending = self
            .first_texts(
                "gate_pending_deliveries",
                PENDING_DELIVERIES,
                (),
                usize::MAX,
            )
            .await?;
        let mut done = 0;
        for id in pending {
            if done >= budget {
                return Ok(true);
            }
            let Ok(id) = id.parse::<GateSessionId>() else {
                continue;
            };
            for _ in 0..CONTENDED_RETRIES {
                let stored = self.read_stored_session(id).await?;
                let Some((rev, stored)) = stored.filter(|(_, s)| delivery_pending(s)) else {
                    self.execute(UNPEND_DELIVERY, (id.to_string(),)).await?;
                    done += 1;
                    break;
                };
                let sweep = crate::rules::gate_sweep(&stored, now);
                if !matches!(
                    sweep,
                    crate::rules::GateSweep::Withdraw
                        | crate::rules::GateSweep::Drop { withdraw: true }
                ) {
                    break;
                }
                // The account and token first: a session left holding its delivery is retried.
                if let Some(account) = stored.account_id {
                    self.execute(DELETE_ACCOUNT, (account.to_string(),)).await?;
                }
                if let Some(token) = stored.agent_token {
                    self.execute(DELETE_TOKEN, (&token.0[..],)).await?;
                }
                let mut withdrawn = stored.clone();
                withdrawn.sealed_delivery = Vec::new();
                withdrawn.ack_token = None;
                if self.write_session(rev, &withdrawn).await? {
                    self.execute(UNPEND_DELIVERY, (id.to_string(),)).await?;
                    done += 1;
                    break;
                }
            }
        }
        Ok(false)
    }

    async fn write_token(&self, rev: i64, token: &AgentTokenRecord) -> Result<bool> {
        self.applied(
            UPDATE_TOKEN,
            (rev + 1, encode(token), &token.hash.0[..], rev),
        )
        .await
    }

    /// Takes a place under the organization's cap for its environment; false when it is full.
    async fn take_place(&self, org: OrgId, env: Environment, cap: usize) -> Result<bool> {
        let (org, env) = (org.to_string(), env_text(env));
        for _ in 0..CONTENDED_RETRIES {
            let result = self.execute(COUNT, (org.as_str(), env)).await?;
            let rows = rows_of("gate_service_counts", result)?;
            let count = rows
                .maybe_first_row::<(Option<i32>,)>()
                .map_err(|e| corrupt("gate_service_counts", &e))?
                .map(|(n,)| n.unwrap_or(0));
            let taken = usize::try_from(count.unwrap_or(0)).unwrap_or(usize::MAX);
            if taken >= cap {
                return Ok(false);
            }
            let applied = match count {
                None => self.applied(FIRST_PLACE, (org.as_str(), env)).await?,
                Some(n) => {
                    self.applied(NEXT_PLACE, (n + 1, org.as_str(), env, n))
                        .await?
                }
            };
            if applied {
                return Ok(true);
            }
        }
        Err(contended("a Gate service count"))
    }

    /// Claims a service id; false when another service has it (or its `_`/`-` twin).
    async fn claim_service_id(&self, id: &str) -> Result<bool> {
        self.applied(CLAIM_ID, (schemas::gate::service_id_claim(id), id))
            .await
    }

    async fn release_service_id(&self, id: &str) {
        if let Err(e) = self
            .applied(RELEASE_ID, (schemas::gate::service_id_claim(id), id))
            .await
        {
            tracing::warn!(error = %e, "ScyllaDB: a Gate service id claim was not released");
        }
    }

    /// Runs a logged batch of plain statements.
    async fn logged(&self, statements: Vec<(&'static str, Vec<Option<CqlValue>>)>) -> Result<()> {
        let mut batch = Batch::new(BatchType::Logged);
        let mut values = Vec::new();
        for (cql, bound) in statements {
            batch.append_statement(cql);
            values.push(bound);
        }
        self.session()
            .await?
            .batch(&batch, values)
            .await
            .map_err(errors::execution)
            .map(drop)
    }

    /// The registry row of `service`: written while it is published, dropped otherwise.
    fn registry_row(service: &GateServiceRecord) -> (&'static str, Vec<Option<CqlValue>>) {
        let cql = if service.is_published() {
            INDEX_REGISTRY
        } else {
            UNINDEX_REGISTRY
        };
        (
            cql,
            vec![text(env_text(service.environment)), text(&service.id)],
        )
    }

    async fn services_by_id(&self, ids: Vec<String>) -> Result<Vec<GateServiceRecord>> {
        let reads = ids.into_iter().map(|id| async move {
            Ok::<_, StoreError>(self.read_service(&id).await?.map(|(_, s)| s))
        });
        let found = futures::future::try_join_all(reads).await?;
        Ok(found.into_iter().flatten().collect())
    }
}

#[async_trait]
impl GateStore for ScyllaStore {
    async fn create_gate_service(
        &self,
        service: &GateServiceRecord,
        cap: usize,
    ) -> Result<GateServiceWrite> {
        if !self.claim_service_id(&service.id).await? {
            return Ok(GateServiceWrite::IdTaken);
        }
        // The cap is per environment: a test key's services never use up the live ones'.
        if !self
            .take_place(service.organization_id, service.environment, cap)
            .await?
        {
            self.release_service_id(&service.id).await;
            return Ok(GateServiceWrite::CapReached);
        }
        let (org, env) = (
            service.organization_id.to_string(),
            env_text(service.environment),
        );
        self.logged(vec![
            (
                INSERT_SERVICE,
                vec![text(&service.id), text(encode(service))],
            ),
            (INDEX_OWNER, vec![text(&org), text(env), text(&service.id)]),
            Self::registry_row(service),
        ])
        .await?;
        Ok(GateServiceWrite::Written)
    }

    async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>> {
        Ok(self.read_service(id).await?.map(|(_, s)| s))
    }

    async fn list_gate_services(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Vec<GateServiceRecord>> {
        // An organization's services are capped, so one page holds them, in id order.
        let result = self
            .execute(OWNED, (org.to_string(), env_text(env)))
            .await?;
        let rows = rows_of("gate_services_by_owner", result)?;
        let ids: Vec<String> = rows
            .rows::<(String,)>()
            .map_err(|e| corrupt("gate_services_by_owner", &e))?
            .map(|row| {
                row.map(|(id,)| id)
                    .map_err(|e| corrupt("gate_services_by_owner", &e))
            })
            .collect::<Result<_>>()?;
        let services = self.services_by_id(ids).await?;
        Ok(services
            .into_iter()
            .filter(|s| s.organization_id == org && s.environment == env)
            .collect())
    }

    async fn update_gate_service(
        &self,
        previous_id: &str,
        service: &GateServiceRecord,
    ) -> Result<GateServiceWrite> {
        let owner = (service.organization_id, service.environment);
        if service.id == previous_id {
            for _ in 0..CONTENDED_RETRIES {
                let Some((rev, stored)) = self.read_service(previous_id).await? else {
                    return Ok(GateServiceWrite::Missing);
                };
                if (stored.organization_id, stored.environment) != owner {
                    return Ok(GateServiceWrite::Missing);
                }
                if self
                    .applied(
                        UPDATE_SERVICE,
                        (rev + 1, encode(service), service.id.as_str(), rev),
                    )
                    .await?
                {
                    self.logged(vec![Self::registry_row(service)]).await?;
                    return Ok(GateServiceWrite::Written);
                }
            }
            return Err(contended("a Gate service"));
        }
        // A rename: the new id claimed (unless it is the old one's `_`/`-` twin, which this
        // service already holds) and inserted, then the old one's rows dropped.
        let Some((_, stored)) = self.read_service(previous_id).await? else {
            return Ok(GateServiceWrite::Missing);
        };
        if (stored.organization_id, stored.environment) != owner {
            return Ok(GateServiceWrite::Missing);
        }
        let (old_claim, new_claim) = (
            schemas::gate::service_id_claim(previous_id),
            schemas::gate::service_id_claim(&service.id),
        );
        let twin = old_claim == new_claim;
        if !twin && !self.claim_service_id(&service.id).await? {
            return Ok(GateServiceWrite::IdTaken);
        }
        if !self
            .applied(INSERT_SERVICE_NEW, (service.id.as_str(), encode(service)))
            .await?
        {
            if !twin {
                self.release_service_id(&service.id).await;
            }
            return Ok(GateServiceWrite::IdTaken);
        }
        let (org, env) = (
            service.organization_id.to_string(),
            env_text(service.environment),
        );
        let mut statements = vec![
            (DELETE_SERVICE, vec![text(previous_id)]),
            (
                UNINDEX_OWNER,
                vec![text(&org), text(env), text(previous_id)],
            ),
            (UNINDEX_REGISTRY, vec![text(env), text(previous_id)]),
            (INDEX_OWNER, vec![text(&org), text(env), text(&service.id)]),
            Self::registry_row(service),
        ];
        if twin {
            // The claim stays this service's; it names the new id now.
            statements.push((RENAME_CLAIM, vec![text(new_claim), text(&service.id)]));
        } else {
            statements.push((DROP_CLAIM, vec![text(old_claim)]));
        }
        self.logged(statements).await?;
        Ok(GateServiceWrite::Written)
    }

    async fn list_gate_registry(
        &self,
        env: Environment,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<GateServiceRecord>> {
        let table = "gate_registry";
        let ids = match after {
            None => {
                self.first_texts(table, REGISTRY, (env_text(env),), count)
                    .await?
            }
            Some(after) => {
                self.first_texts(table, REGISTRY_AFTER, (env_text(env), after), count)
                    .await?
            }
        };
        let services = self.services_by_id(ids).await?;
        Ok(services
            .into_iter()
            .filter(|s| s.environment == env && s.is_published())
            .collect())
    }

    async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()> {
        let now = schemas::time::now();
        // Already past the time the sweep drops it: a row would live for the shortest TTL and
        // vanish under whoever read it then, so it is dropped now, as the sweep would.
        if seconds_left(session, now) <= 0 {
            return Ok(());
        }
        let id = session.id.to_string();
        let ttl = session_ttl(session, now);
        if let Some(code) = session.login_code
            && !self
                .applied(CLAIM_CODE, (&code.0[..], id.as_str(), ttl))
                .await?
        {
            return Err(StoreError::Conflict(format!(
                "the login code of gate session {} is another's",
                session.id
            )));
        }
        if !self
            .applied(CREATE_SESSION, (id.as_str(), encode(session), ttl))
            .await?
        {
            if let Some(code) = session.login_code {
                self.applied(RELEASE_CODE, (&code.0[..], id.as_str()))
                    .await?;
            }
            return Err(StoreError::Conflict(format!(
                "gate session {} exists",
                session.id
            )));
        }
        if delivery_pending(session) {
            self.execute(PEND_DELIVERY, (id.as_str(),)).await?;
        }
        Ok(())
    }

    async fn get_gate_session(&self, id: GateSessionId) -> Result<Option<GateSessionRecord>> {
        Ok(self.read_session(id).await?.map(|(_, s)| s))
    }

    /// The session moves only from `expected`; a new login code is claimed first (one another
    /// session holds is a "no"); the account and token made are written once it has moved,
    /// so no token exists for a session that did not.
    async fn transition_gate_session(
        &self,
        session: &GateSessionRecord,
        expected: GateSessionStatus,
        made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
    ) -> Result<bool> {
        let id = session.id.to_string();
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, stored)) = self.read_session(session.id).await? else {
                return Ok(false);
            };
            if stored.status != expected {
                return Ok(false);
            }
            let new_code = session.login_code.filter(|c| Some(*c) != stored.login_code);
            let ttl = session_ttl(session, schemas::time::now());
            if let Some(code) = new_code
                && !self
                    .applied(CLAIM_CODE, (&code.0[..], id.as_str(), ttl))
                    .await?
            {
                return Ok(false);
            }
            if !self.write_session(rev, session).await? {
                if let Some(code) = new_code {
                    self.applied(RELEASE_CODE, (&code.0[..], id.as_str()))
                        .await?;
                }
                continue;
            }
            if let Some(old) = stored.login_code.filter(|c| session.login_code != Some(*c)) {
                self.applied(RELEASE_CODE, (&old.0[..], id.as_str()))
                    .await?;
            }
            self.follow_delivery(&stored, session).await?;
            if let Some((account, token)) = made {
                self.logged(vec![
                    (
                        WRITE_ACCOUNT,
                        vec![text(account.id.to_string()), text(encode(account))],
                    ),
                    (
                        WRITE_TOKEN,
                        vec![
                            Some(CqlValue::Blob(token.hash.0.to_vec())),
                            text(encode(token)),
                        ],
                    ),
                ])
                .await?;
            }
            return Ok(true);
        }
        Err(contended("a Gate session"))
    }

    async fn count_gate_poll(
        &self,
        id: GateSessionId,
        token: &CredentialHash,
        now: Timestamp,
        slow_down_secs: u32,
        max_polls: u32,
    ) -> Result<Option<(GateSessionRecord, GatePoll)>> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, mut session)) = self.read_session(id).await? else {
                return Ok(None);
            };
            if session.poll_token != Some(*token) {
                return Ok(None);
            }
            let counted = crate::rules::count_poll(&mut session, now, slow_down_secs, max_polls);
            if counted == GatePoll::Exhausted {
                return Ok(Some((session, counted)));
            }
            if self.write_session(rev, &session).await? {
                return Ok(Some((session, counted)));
            }
        }
        Err(contended("a Gate session"))
    }

    async fn count_gate_attempt(
        &self,
        id: GateSessionId,
        attempt: GateAttempt,
        max: u32,
    ) -> Result<Option<GateAttemptCount>> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, session)) = self.read_session(id).await? else {
                return Ok(None);
            };
            let counted = crate::rules::count_attempt(session, attempt, max);
            match &counted {
                GateAttemptCount::Counted(session, _) => {
                    if self.write_session(rev, session).await? {
                        return Ok(Some(counted));
                    }
                }
                GateAttemptCount::Matched(_) | GateAttemptCount::Refused(_) => {
                    return Ok(Some(counted));
                }
            }
        }
        Err(contended("a Gate session"))
    }

    async fn get_gate_account(&self, id: GateAccountId) -> Result<Option<GateAccountRecord>> {
        let result = self.execute(READ_ACCOUNT, (id.to_string(),)).await?;
        Self::body(GATE_ACCOUNTS, result)
    }

    async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>> {
        let result = self.execute(CODE_HOLDER, (&code.0[..],)).await?;
        let rows = rows_of("gate_login_codes", result)?;
        let Some((holder,)) = rows
            .maybe_first_row::<(String,)>()
            .map_err(|e| corrupt("gate_login_codes", &e))?
        else {
            return Ok(None);
        };
        let holder: GateSessionId = holder
            .parse()
            .map_err(|_| corrupt("gate_login_codes", &"gate session id"))?;
        // The session must still hold the code: a claim whose write was cut short is no login.
        Ok(self
            .get_gate_session(holder)
            .await?
            .filter(|s| s.login_code == Some(*code)))
    }

    async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>> {
        Ok(self.read_token(hash).await?.map(|(_, t)| t))
    }

    async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, _)) = self.read_token(&token.hash).await? else {
                return Ok(false);
            };
            if self.write_token(rev, token).await? {
                return Ok(true);
            }
        }
        Err(contended("an agent token"))
    }

    async fn count_agent_login(
        &self,
        hash: &CredentialHash,
        now: Timestamp,
        per_hour: usize,
    ) -> Result<AgentLogin> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, token)) = self.read_token(hash).await? else {
                return Ok(AgentLogin::Unusable);
            };
            let counted = crate::rules::count_login(token, now, per_hour);
            match &counted {
                AgentLogin::Counted(token) => {
                    if self.write_token(rev, token).await? {
                        return Ok(counted);
                    }
                }
                _ => return Ok(counted),
            }
        }
        Err(contended("an agent token"))
    }

    async fn revoke_agent_token(
        &self,
        hash: &CredentialHash,
        at: Timestamp,
    ) -> Result<Option<AgentTokenRecord>> {
        for _ in 0..CONTENDED_RETRIES {
            let Some((rev, mut token)) = self.read_token(hash).await? else {
                return Ok(None);
            };
            if token.revoked_at.is_some() {
                return Ok(Some(token));
            }
            token.revoked_at = Some(at);
            if self.write_token(rev, &token).await? {
                return Ok(Some(token));
            }
        }
        Err(contended("an agent token"))
    }
}
