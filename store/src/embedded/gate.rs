//! Gate (`010_gate.cql`): services with their owner and registry indexes, signup and login
//! sessions with their one-time codes, the accounts they make and the agents' tokens.

use async_trait::async_trait;
use std::ops::Bound;

use fjall::{OwnedWriteBatch, Readable};
use schemas::credential::Environment;
use schemas::ids::OrgId;
use schemas::time::Timestamp;

use super::{
    AGENT_TOKENS, EmbeddedStore, GATE_ACCOUNTS, GATE_REGISTRY, GATE_SERVICES,
    GATE_SERVICES_BY_OWNER, GATE_SESSIONS, Inner, decode, decode_row, encode, key, prefix_end,
    unavailable,
};
use crate::rules::{self, GateSweep};
use crate::{
    AgentLogin, AgentTokenRecord, CredentialHash, GateAccountRecord, GateAttempt, GateAttemptCount,
    GatePoll, GateServiceRecord, GateServiceWrite, GateSessionRecord, GateSessionStatus, GateStore,
    Result, StoreError,
};

/// The rows of a Gate service: its own, its owner's index row, and its registry row when it
/// is published (any stale registry row is removed by the caller).
fn write_gate_service(
    db: &Inner,
    batch: &mut OwnedWriteBatch,
    service: &GateServiceRecord,
) -> Result<()> {
    batch.insert(
        &db.gate_services,
        service.id.as_bytes(),
        encode(GATE_SERVICES, service)?,
    );
    batch.insert(
        &db.gate_service_claims,
        schemas::gate::service_id_claim(&service.id).as_bytes(),
        service.id.as_bytes(),
    );
    batch.insert(
        &db.gate_services_by_owner,
        key::gate_service_of_owner(service.organization_id, service.environment, &service.id),
        [],
    );
    if service.is_published() {
        batch.insert(
            &db.gate_registry,
            key::gate_registry(service.environment, &service.id),
            [],
        );
    }
    Ok(())
}

impl Inner {
    /// One bounded step of retention's walk over `gate_sessions` (docs/gate.md#storage): at most
    /// `budget` sessions after `cursor`, each kept, withdrawn or dropped as
    /// [`rules::gate_sweep`] says, the changes added to `batch`. Whether rows are left (the walk
    /// starts over once there are none).
    pub(super) fn sweep_gate_sessions(
        &self,
        batch: &mut OwnedWriteBatch,
        cursor: &mut Option<Vec<u8>>,
        now: Timestamp,
        budget: usize,
    ) -> Result<bool> {
        let start = cursor.take().map_or(Bound::Unbounded, Bound::Excluded);
        let mut read = 0;
        let mut last = None;
        for guard in self
            .gate_sessions
            .range::<Vec<u8>, _>((start, Bound::Unbounded))
            .take(budget)
        {
            let (k, v) = guard.into_inner().map_err(unavailable)?;
            read += 1;
            last = Some(k.to_vec());
            let mut session: GateSessionRecord = decode(GATE_SESSIONS, &v)?;
            let sweep = rules::gate_sweep(&session, now);
            if matches!(
                sweep,
                GateSweep::Withdraw | GateSweep::Drop { withdraw: true }
            ) {
                if let Some(account) = session.account_id {
                    batch.remove(&self.gate_accounts, account.ulid().to_bytes());
                }
                if let Some(token) = session.agent_token {
                    batch.remove(&self.agent_tokens, token.0);
                }
            }
            match sweep {
                GateSweep::Keep => {}
                GateSweep::Drop { .. } => {
                    if let Some(code) = session.login_code {
                        batch.remove(&self.gate_login_codes, code.0);
                    }
                    batch.remove(&self.gate_sessions, k);
                }
                GateSweep::Withdraw => {
                    session.sealed_delivery = Vec::new();
                    session.ack_token = None;
                    batch.insert(&self.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
                }
            }
        }
        if read < budget {
            return Ok(false);
        }
        *cursor = last;
        Ok(true)
    }

    /// Claims the ids of services stored before claims existed, once, at open: a store has
    /// at most a few services per organization.
    pub(super) fn claim_gate_services(&self) -> Result<()> {
        if self.gate_service_claims.first_key_value().is_some() {
            return Ok(());
        }
        let mut batch = self.batch();
        for guard in self.gate_services.iter() {
            let id = guard.key().map_err(unavailable)?;
            let claim = schemas::gate::service_id_claim(&String::from_utf8_lossy(&id));
            batch.insert(&self.gate_service_claims, claim.as_bytes(), id.to_vec());
        }
        batch.commit().map_err(unavailable)
    }
}

#[async_trait]
impl GateStore for EmbeddedStore {
    async fn create_gate_service(
        &self,
        service: &GateServiceRecord,
        cap: usize,
    ) -> Result<GateServiceWrite> {
        let service = service.clone();
        self.write(move |db, _| {
            let claim = schemas::gate::service_id_claim(&service.id);
            if db.contains(&db.gate_services, service.id.as_bytes())?
                || db.contains(&db.gate_service_claims, claim.as_bytes())?
            {
                return Ok(GateServiceWrite::IdTaken);
            }
            // The cap is per environment: a test key's services never use up the live ones'.
            let partition = key::api_key_partition(service.organization_id, service.environment);
            let owned = db
                .db
                .snapshot()
                .prefix(&db.gate_services_by_owner, partition)
                .take(cap)
                .count();
            if owned >= cap {
                return Ok(GateServiceWrite::CapReached);
            }
            let mut batch = db.batch();
            write_gate_service(db, &mut batch, &service)?;
            batch.commit().map_err(unavailable)?;
            Ok(GateServiceWrite::Written)
        })
        .await
    }

    async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>> {
        decode_row(GATE_SERVICES, self.inner.gate_services.get(id.as_bytes()))
    }

    async fn list_gate_services(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Vec<GateServiceRecord>> {
        let snapshot = self.inner.db.snapshot();
        let partition = key::api_key_partition(org, env);
        let mut services = Vec::new();
        for guard in snapshot.prefix(&self.inner.gate_services_by_owner, partition) {
            let k = guard.key().map_err(unavailable)?;
            let service = decode_row::<GateServiceRecord>(
                GATE_SERVICES,
                snapshot.get(&self.inner.gate_services, &k[partition.len()..]),
            )?
            .ok_or_else(|| StoreError::Corrupt {
                table: GATE_SERVICES_BY_OWNER,
                detail: "an owner row names no service".into(),
            })?;
            services.push(service);
        }
        Ok(services)
    }

    async fn update_gate_service(
        &self,
        previous_id: &str,
        service: &GateServiceRecord,
    ) -> Result<GateServiceWrite> {
        let (previous_id, service) = (previous_id.to_owned(), service.clone());
        self.write(move |db, _| {
            let Some(stored) = decode_row::<GateServiceRecord>(
                GATE_SERVICES,
                db.gate_services.get(previous_id.as_bytes()),
            )?
            else {
                return Ok(GateServiceWrite::Missing);
            };
            if (stored.organization_id, stored.environment)
                != (service.organization_id, service.environment)
            {
                return Ok(GateServiceWrite::Missing);
            }
            let mut batch = db.batch();
            if service.id != previous_id {
                // A claim of the new id's form by another service than this one (a rename to
                // this service's own twin is no clash).
                let claimed_by: Option<fjall::Slice> = db
                    .gate_service_claims
                    .get(schemas::gate::service_id_claim(&service.id).as_bytes())
                    .map_err(unavailable)?;
                if db.contains(&db.gate_services, service.id.as_bytes())?
                    || claimed_by.is_some_and(|id| &*id != previous_id.as_bytes())
                {
                    return Ok(GateServiceWrite::IdTaken);
                }
                batch.remove(
                    &db.gate_service_claims,
                    schemas::gate::service_id_claim(&previous_id).as_bytes(),
                );
                batch.remove(&db.gate_services, previous_id.as_bytes());
                batch.remove(
                    &db.gate_services_by_owner,
                    key::gate_service_of_owner(
                        stored.organization_id,
                        stored.environment,
                        &previous_id,
                    ),
                );
            }
            batch.remove(
                &db.gate_registry,
                key::gate_registry(stored.environment, &previous_id),
            );
            write_gate_service(db, &mut batch, &service)?;
            batch.commit().map_err(unavailable)?;
            Ok(GateServiceWrite::Written)
        })
        .await
    }

    async fn list_gate_registry(
        &self,
        env: Environment,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<GateServiceRecord>> {
        let snapshot = self.inner.db.snapshot();
        let partition = [key::environment_byte(env)];
        let start = match after {
            Some(after) => Bound::Excluded(key::gate_registry(env, after)),
            None => Bound::Included(partition.to_vec()),
        };
        let mut services = Vec::new();
        for guard in snapshot
            .range(&self.inner.gate_registry, (start, prefix_end(&partition)))
            .take(limit)
        {
            let k = guard.key().map_err(unavailable)?;
            let service = decode_row::<GateServiceRecord>(
                GATE_SERVICES,
                snapshot.get(&self.inner.gate_services, &k[1..]),
            )?
            .ok_or_else(|| StoreError::Corrupt {
                table: GATE_REGISTRY,
                detail: "a registry row names no service".into(),
            })?;
            services.push(service);
        }
        Ok(services)
    }

    async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()> {
        let session = session.clone();
        self.write(move |db, _| {
            let k = session.id.ulid().to_bytes();
            if db.contains(&db.gate_sessions, &k)? {
                return Err(StoreError::Conflict(format!(
                    "gate session {} exists",
                    session.id
                )));
            }
            // Retention walks the sessions (`Inner::sweep_gate_sessions`): no queue row.
            let mut batch = db.batch();
            batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
            batch.commit().map_err(unavailable)
        })
        .await
    }

    async fn get_gate_session(
        &self,
        id: schemas::ids::GateSessionId,
    ) -> Result<Option<GateSessionRecord>> {
        decode_row(
            GATE_SESSIONS,
            self.inner.gate_sessions.get(id.ulid().to_bytes()),
        )
    }

    async fn transition_gate_session(
        &self,
        session: &GateSessionRecord,
        expected: GateSessionStatus,
        made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
    ) -> Result<bool> {
        let session = session.clone();
        let made = made.map(|(a, t)| (a.clone(), t.clone()));
        self.write(move |db, _| {
            let k = session.id.ulid().to_bytes();
            let Some(stored) =
                decode_row::<GateSessionRecord>(GATE_SESSIONS, db.gate_sessions.get(k))?
            else {
                return Ok(false);
            };
            if stored.status != expected {
                return Ok(false);
            }
            if let Some(code) = session.login_code
                && let Some(holder) = db.gate_login_codes.get(code.0).map_err(unavailable)?
                && *holder != k[..]
            {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
            if let Some(old) = stored.login_code.filter(|c| session.login_code != Some(*c)) {
                batch.remove(&db.gate_login_codes, old.0);
            }
            if let Some(code) = session.login_code {
                batch.insert(&db.gate_login_codes, code.0, k);
            }
            if let Some((account, token)) = &made {
                batch.insert(
                    &db.gate_accounts,
                    account.id.ulid().to_bytes(),
                    encode(GATE_ACCOUNTS, account)?,
                );
                batch.insert(&db.agent_tokens, token.hash.0, encode(AGENT_TOKENS, token)?);
            }
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }

    async fn count_gate_poll(
        &self,
        id: schemas::ids::GateSessionId,
        token: &CredentialHash,
        now: Timestamp,
        slow_down_secs: u32,
        max_polls: u32,
    ) -> Result<Option<(GateSessionRecord, GatePoll)>> {
        let token = *token;
        self.write(move |db, _| {
            let k = id.ulid().to_bytes();
            let Some(mut session) =
                decode_row::<GateSessionRecord>(GATE_SESSIONS, db.gate_sessions.get(k))?
            else {
                return Ok(None);
            };
            if session.poll_token != Some(token) {
                return Ok(None);
            }
            let counted = crate::rules::count_poll(&mut session, now, slow_down_secs, max_polls);
            if counted != GatePoll::Exhausted {
                let mut batch = db.batch();
                batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &session)?);
                batch.commit().map_err(unavailable)?;
            }
            Ok(Some((session, counted)))
        })
        .await
    }

    async fn count_gate_attempt(
        &self,
        id: schemas::ids::GateSessionId,
        attempt: GateAttempt,
        max: u32,
    ) -> Result<Option<GateAttemptCount>> {
        self.write(move |db, _| {
            let k = id.ulid().to_bytes();
            let Some(session) =
                decode_row::<GateSessionRecord>(GATE_SESSIONS, db.gate_sessions.get(k))?
            else {
                return Ok(None);
            };
            let counted = crate::rules::count_attempt(session, attempt, max);
            if let GateAttemptCount::Counted(session, _) = &counted {
                let mut batch = db.batch();
                batch.insert(&db.gate_sessions, k, encode(GATE_SESSIONS, &**session)?);
                batch.commit().map_err(unavailable)?;
            }
            Ok(Some(counted))
        })
        .await
    }

    async fn get_gate_account(
        &self,
        id: schemas::ids::GateAccountId,
    ) -> Result<Option<GateAccountRecord>> {
        decode_row(
            GATE_ACCOUNTS,
            self.inner.gate_accounts.get(id.ulid().to_bytes()),
        )
    }

    async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>> {
        decode_row(AGENT_TOKENS, self.inner.agent_tokens.get(hash.0))
    }

    async fn count_agent_login(
        &self,
        hash: &CredentialHash,
        now: Timestamp,
        per_hour: usize,
    ) -> Result<AgentLogin> {
        let hash = *hash;
        self.write(move |db, _| {
            let Some(token) =
                decode_row::<AgentTokenRecord>(AGENT_TOKENS, db.agent_tokens.get(hash.0))?
            else {
                return Ok(AgentLogin::Unusable);
            };
            let counted = crate::rules::count_login(token, now, per_hour);
            if let AgentLogin::Counted(token) = &counted {
                let mut batch = db.batch();
                batch.insert(&db.agent_tokens, hash.0, encode(AGENT_TOKENS, token)?);
                batch.commit().map_err(unavailable)?;
            }
            Ok(counted)
        })
        .await
    }

    async fn revoke_agent_token(
        &self,
        hash: &CredentialHash,
        at: Timestamp,
    ) -> Result<Option<AgentTokenRecord>> {
        let hash = *hash;
        self.write(move |db, _| {
            let Some(mut token) =
                decode_row::<AgentTokenRecord>(AGENT_TOKENS, db.agent_tokens.get(hash.0))?
            else {
                return Ok(None);
            };
            if token.revoked_at.is_none() {
                token.revoked_at = Some(at);
                let mut batch = db.batch();
                batch.insert(&db.agent_tokens, hash.0, encode(AGENT_TOKENS, &token)?);
                batch.commit().map_err(unavailable)?;
            }
            Ok(Some(token))
        })
        .await
    }

    async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>> {
        let snapshot = self.inner.db.snapshot();
        let Some(id) = snapshot
            .get(&self.inner.gate_login_codes, code.0)
            .map_err(unavailable)?
        else {
            return Ok(None);
        };
        decode_row(GATE_SESSIONS, snapshot.get(&self.inner.gate_sessions, &id))
    }

    async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool> {
        let token = token.clone();
        self.write(move |db, _| {
            if !db.contains(&db.agent_tokens, &token.hash.0)? {
                return Ok(false);
            }
            let mut batch = db.batch();
            batch.insert(
                &db.agent_tokens,
                token.hash.0,
                encode(AGENT_TOKENS, &token)?,
            );
            batch.commit().map_err(unavailable)?;
            Ok(true)
        })
        .await
    }
}
