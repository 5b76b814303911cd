//! Gate's services, sessions, accounts and agent tokens in PostgreSQL. Service ids and login
//! codes are unique by constraint; the registry is a partial index of published services; an
//! organization's service cap is checked under a transaction-scoped advisory lock on the
//! organization, so two racing creates cannot both take the last place.

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use schemas::credential::Environment;
use schemas::ids::{GateAccountId, GateSessionId, OrgId};
use schemas::time::Timestamp;

use super::{
    PostgresStore, db_error, decode_all, decode_opt, env_code, execute, is_unique_violation, json,
    limit, row, rows, ulid_bytes,
};
use crate::{
    AgentLogin, AgentTokenRecord, CredentialHash, GateAccountRecord, GateAttempt, GateAttemptCount,
    GatePoll, GateServiceRecord, GateServiceWrite, GateSessionRecord, GateSessionStatus, GateStore,
    Result, StoreError,
};

const GATE_SERVICES: &str = "gate_services";
const GATE_SESSIONS: &str = "gate_sessions";
const GATE_ACCOUNTS: &str = "gate_accounts";
const AGENT_TOKENS: &str = "agent_tokens";

/// The advisory lock key of an organization's Gate services: the high 64 bits of its id.
fn owner_lock(org: OrgId) -> i64 {
    let bytes = org.ulid().to_bytes();
    i64::from_be_bytes(bytes[..8].try_into().unwrap_or_default())
}

async fn insert_service(tx: &impl GenericClient, service: &GateServiceRecord) -> Result<bool> {
    let inserted = row(
        tx,
        "INSERT INTO gate_services (id, organization_id, environment, published, body)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1",
        &[
            &service.id,
            &ulid_bytes(service.organization_id.ulid()),
            &env_code(service.environment),
            &service.is_published(),
            &json(service),
        ],
    )
    .await?;
    Ok(inserted.is_some())
}

async fn lock_session(tx: &impl GenericClient, id: &Vec<u8>) -> Result<Option<GateSessionRecord>> {
    let found = row(
        tx,
        "SELECT body FROM gate_sessions WHERE id = $1 FOR UPDATE",
        &[id],
    )
    .await?;
    decode_opt(GATE_SESSIONS, found)
}

async fn lock_token(
    tx: &impl GenericClient,
    hash: &CredentialHash,
) -> Result<Option<AgentTokenRecord>> {
    let found = row(
        tx,
        "SELECT body FROM agent_tokens WHERE hash = $1 FOR UPDATE",
        &[&&hash.0[..]],
    )
    .await?;
    decode_opt(AGENT_TOKENS, found)
}

#[async_trait]
impl GateStore for PostgresStore {
    async fn create_gate_service(
        &self,
        service: &GateServiceRecord,
        cap: usize,
    ) -> Result<GateServiceWrite> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        execute(
            &tx,
            "SELECT pg_advisory_xact_lock($1)",
            &[&owner_lock(service.organization_id)],
        )
        .await?;
        let taken = row(
            &tx,
            "SELECT 1 FROM gate_services WHERE replace(id, '_', '-') = $1",
            &[&schemas::gate::service_id_claim(&service.id)],
        )
        .await?;
        if taken.is_some() {
            return Ok(GateServiceWrite::IdTaken);
        }
        // The cap is per environment: a test key's services never use up the live ones'.
        let owned: i64 = row(
            &tx,
            "SELECT count(*) FROM gate_services WHERE organization_id = $1 AND environment = $2",
            &[
                &ulid_bytes(service.organization_id.ulid()),
                &env_code(service.environment),
            ],
        )
        .await?
        .map_or(0, |r| r.get(0));
        if usize::try_from(owned).unwrap_or(usize::MAX) >= cap {
            return Ok(GateServiceWrite::CapReached);
        }
        if !insert_service(&tx, service).await? {
            return Ok(GateServiceWrite::IdTaken);
        }
        tx.commit().await.map_err(db_error)?;
        Ok(GateServiceWrite::Written)
    }

    async fn get_gate_service(&self, id: &str) -> Result<Option<GateServiceRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM gate_services WHERE id = $1",
            &[&id],
        )
        .await?;
        decode_opt(GATE_SERVICES, found)
    }

    async fn list_gate_services(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Vec<GateServiceRecord>> {
        let found = rows(
            &self.client().await?,
            "SELECT body FROM gate_services WHERE organization_id = $1 AND environment = $2
             ORDER BY id",
            &[&ulid_bytes(org.ulid()), &env_code(env)],
        )
        .await?;
        decode_all(GATE_SERVICES, &found)
    }

    async fn update_gate_service(
        &self,
        previous_id: &str,
        service: &GateServiceRecord,
    ) -> Result<GateServiceWrite> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let found = row(
            &tx,
            "SELECT body FROM gate_services WHERE id = $1 FOR UPDATE",
            &[&previous_id],
        )
        .await?;
        let Some(stored) = decode_opt::<GateServiceRecord>(GATE_SERVICES, found)? else {
            return Ok(GateServiceWrite::Missing);
        };
        if (stored.organization_id, stored.environment)
            != (service.organization_id, service.environment)
        {
            return Ok(GateServiceWrite::Missing);
        }
        if service.id == previous_id {
            execute(
                &tx,
                "UPDATE gate_services SET published = $2, body = $3 WHERE id = $1",
                &[&service.id, &service.is_published(), &json(service)],
            )
            .await?;
        } else {
            // The old id is freed first (a rename to its own twin is no clash), the new one
            // claimed by the insert's constraints; a clash drops the transaction, undoing both.
            execute(
                &tx,
                "DELETE FROM gate_services WHERE id = $1",
                &[&previous_id],
            )
            .await?;
            if !insert_service(&tx, service).await? {
                return Ok(GateServiceWrite::IdTaken);
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(GateServiceWrite::Written)
    }

    async fn list_gate_registry(
        &self,
        env: Environment,
        after: Option<&str>,
        count: usize,
    ) -> Result<Vec<GateServiceRecord>> {
        let found = rows(
            &self.client().await?,
            "SELECT body FROM gate_services
             WHERE published AND environment = $1 AND ($2::text IS NULL OR id > $2)
             ORDER BY id LIMIT $3",
            &[&env_code(env), &after, &limit(count)],
        )
        .await?;
        decode_all(GATE_SERVICES, &found)
    }

    async fn create_gate_session(&self, session: &GateSessionRecord) -> Result<()> {
        execute(
            &self.client().await?,
            "INSERT INTO gate_sessions (id, created_at, login_code, body) VALUES ($1, $2, $3, $4)",
            &[
                &ulid_bytes(session.id.ulid()),
                &session.created_at,
                &session.login_code.map(|c| c.0.to_vec()),
                &json(session),
            ],
        )
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => {
                StoreError::Conflict(format!("gate session {} exists", session.id))
            }
            other => other,
        })?;
        Ok(())
    }

    async fn get_gate_session(&self, id: GateSessionId) -> Result<Option<GateSessionRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM gate_sessions WHERE id = $1",
            &[&ulid_bytes(id.ulid())],
        )
        .await?;
        decode_opt(GATE_SESSIONS, found)
    }

    async fn transition_gate_session(
        &self,
        session: &GateSessionRecord,
        expected: GateSessionStatus,
        made: Option<(&GateAccountRecord, &AgentTokenRecord)>,
    ) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let id = ulid_bytes(session.id.ulid());
        let Some(stored) = lock_session(&tx, &id).await? else {
            return Ok(false);
        };
        if stored.status != expected {
            return Ok(false);
        }
        let code = session.login_code.map(|c| c.0.to_vec());
        // A code another session holds is refused by the constraint; that is a "no", not an error.
        let statement = tx
            .prepare_cached("UPDATE gate_sessions SET login_code = $2, body = $3 WHERE id = $1")
            .await
            .map_err(db_error)?;
        match tx.execute(&statement, &[&id, &code, &json(session)]).await {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Ok(false),
            Err(e) => return Err(db_error(e)),
        }
        if let Some((account, token)) = made {
            execute(
                &tx,
                "INSERT INTO gate_accounts (id, body) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET body = excluded.body",
                &[&ulid_bytes(account.id.ulid()), &json(account)],
            )
            .await?;
            execute(
                &tx,
                "INSERT INTO agent_tokens (hash, body) VALUES ($1, $2)
                 ON CONFLICT (hash) DO UPDATE SET body = excluded.body",
                &[&&token.hash.0[..], &json(token)],
            )
            .await?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }

    async fn count_gate_poll(
        &self,
        id: GateSessionId,
        token: &CredentialHash,
        now: Timestamp,
        slow_down_secs: u32,
        max_polls: u32,
    ) -> Result<Option<(GateSessionRecord, GatePoll)>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let key = ulid_bytes(id.ulid());
        let Some(mut session) = lock_session(&tx, &key).await? else {
            return Ok(None);
        };
        if session.poll_token != Some(*token) {
            return Ok(None);
        }
        let counted = crate::rules::count_poll(&mut session, now, slow_down_secs, max_polls);
        if counted == GatePoll::Exhausted {
            return Ok(Some((session, counted)));
        }
        execute(
            &tx,
            "UPDATE gate_sessions SET body = $2 WHERE id = $1",
            &[&key, &json(&session)],
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Some((session, counted)))
    }

    async fn count_gate_attempt(
        &self,
        id: GateSessionId,
        attempt: GateAttempt,
        max: u32,
    ) -> Result<Option<GateAttemptCount>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let key = ulid_bytes(id.ulid());
        let Some(session) = lock_session(&tx, &key).await? else {
            return Ok(None);
        };
        let counted = crate::rules::count_attempt(session, attempt, max);
        if let GateAttemptCount::Counted(session, _) = &counted {
            execute(
                &tx,
                "UPDATE gate_sessions SET body = $2 WHERE id = $1",
                &[&key, &json(&**session)],
            )
            .await?;
            tx.commit().await.map_err(db_error)?;
        }
        Ok(Some(counted))
    }

    async fn get_gate_account(&self, id: GateAccountId) -> Result<Option<GateAccountRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM gate_accounts WHERE id = $1",
            &[&ulid_bytes(id.ulid())],
        )
        .await?;
        decode_opt(GATE_ACCOUNTS, found)
    }

    async fn get_login_by_code(&self, code: &CredentialHash) -> Result<Option<GateSessionRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM gate_sessions WHERE login_code = $1",
            &[&&code.0[..]],
        )
        .await?;
        decode_opt(GATE_SESSIONS, found)
    }

    async fn get_agent_token(&self, hash: &CredentialHash) -> Result<Option<AgentTokenRecord>> {
        let found = row(
            &self.client().await?,
            "SELECT body FROM agent_tokens WHERE hash = $1",
            &[&&hash.0[..]],
        )
        .await?;
        decode_opt(AGENT_TOKENS, found)
    }

    async fn update_agent_token(&self, token: &AgentTokenRecord) -> Result<bool> {
        let written = execute(
            &self.client().await?,
            "UPDATE agent_tokens SET body = $2 WHERE hash = $1",
            &[&&token.hash.0[..], &json(token)],
        )
        .await?;
        Ok(written == 1)
    }

    async fn count_agent_login(
        &self,
        hash: &CredentialHash,
        now: Timestamp,
        per_hour: usize,
    ) -> Result<AgentLogin> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let Some(token) = lock_token(&tx, hash).await? else {
            return Ok(AgentLogin::Unusable);
        };
        let counted = crate::rules::count_login(token, now, per_hour);
        if let AgentLogin::Counted(token) = &counted {
            execute(
                &tx,
                "UPDATE agent_tokens SET body = $2 WHERE hash = $1",
                &[&&hash.0[..], &json(token)],
            )
            .await?;
            tx.commit().await.map_err(db_error)?;
        }
        Ok(counted)
    }

    async fn revoke_agent_token(
        &self,
        hash: &CredentialHash,
        at: Timestamp,
    ) -> Result<Option<AgentTokenRecord>> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let Some(mut token) = lock_token(&tx, hash).await? else {
            return Ok(None);
        };
        if token.revoked_at.is_none() {
            token.revoked_at = Some(at);
            execute(
                &tx,
                "UPDATE agent_tokens SET body = $2 WHERE hash = $1",
                &[&&hash.0[..], &json(&token)],
            )
            .await?;
            tx.commit().await.map_err(db_error)?;
        }
        Ok(Some(token))
    }
}
