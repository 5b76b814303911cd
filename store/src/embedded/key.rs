//! Key encodings: partition key bytes, then clustering key bytes, each fixed-width except a
//! final variable-length text part, so no separator is needed and prefixes never collide.

use schemas::credential::Environment;
use schemas::ids::{
    DecisionId, EventId, KeyId, OrgId, PingId, SessionId, VisitorId, WebhookEndpointId,
};
use schemas::time::Timestamp;

use crate::{AnchorDigest, CredentialHash, IdempotencyScope};

pub fn organization(id: OrgId) -> [u8; 16] {
    id.ulid().to_bytes()
}

pub fn slug(slug: &str) -> &[u8] {
    slug.as_bytes()
}

pub fn environment_byte(env: Environment) -> u8 {
    environment(env)
}

fn environment(env: Environment) -> u8 {
    match env {
        Environment::Live => 0,
        Environment::Test => 1,
    }
}

/// `gate_services_by_owner`: the owner's partition, then the service id.
pub fn gate_service_of_owner(org: OrgId, env: Environment, id: &str) -> Vec<u8> {
    [&api_key_partition(org, env)[..], id.as_bytes()].concat()
}

/// `gate_registry`: the environment, then the service id.
pub fn gate_registry(env: Environment, id: &str) -> Vec<u8> {
    [&[environment(env)][..], id.as_bytes()].concat()
}

/// The `api_keys` partition `(organization_id, environment)`: 16 + 1 bytes.
pub fn api_key_partition(org: OrgId, env: Environment) -> [u8; 17] {
    let mut k = [0; 17];
    k[..16].copy_from_slice(&org.ulid().to_bytes());
    k[16] = environment(env);
    k
}

/// Partition, then the id's ULID inverted (`u128::MAX - id`) big-endian: clustering `id DESC`,
/// so a forward scan of the partition yields the newest key first.
pub fn api_key(org: OrgId, env: Environment, id: KeyId) -> [u8; 33] {
    let mut k = [0; 33];
    k[..17].copy_from_slice(&api_key_partition(org, env));
    k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

pub fn api_key_hash(hash: &CredentialHash) -> [u8; 32] {
    hash.0
}

pub fn api_key_id(id: KeyId) -> [u8; 16] {
    id.ulid().to_bytes()
}

/// Partition `(credential_hash, idempotency_key)`: the 32-byte hash, then the key's UTF-8.
pub fn idempotency(scope: &IdempotencyScope) -> Vec<u8> {
    let mut k = Vec::with_capacity(32 + scope.key.len());
    k.extend_from_slice(&scope.credential.0);
    k.extend_from_slice(scope.key.as_bytes());
    k
}

pub fn setting(name: &str) -> &[u8] {
    name.as_bytes()
}

/// The session id's ULID, whose first 48 bits are the millisecond it was minted: the
/// table is in minting order, which the retention sweep relies on.
pub fn collect_session(id: SessionId) -> [u8; 16] {
    id.ulid().to_bytes()
}

/// The first `collect_sessions` key of a session minted at `ms` (ms since the epoch) or
/// later; every key below it belongs to a session minted earlier.
pub fn collect_sessions_minted_from(ms: u64) -> [u8; 16] {
    // A ULID's timestamp is its top 48 bits; the 80 random bits below are zero here.
    (u128::from(ms) << 80).to_be_bytes()
}

pub fn collect_ping(id: PingId) -> [u8; 16] {
    id.ulid().to_bytes()
}

/// The `sessions` partition `(organization_id, environment)`: 16 + 1 bytes, as `api_keys`.
pub fn session_partition(org: OrgId, env: Environment) -> [u8; 17] {
    api_key_partition(org, env)
}

/// The organization, environment and id a `sessions` key holds.
pub fn parse_session(k: &[u8]) -> Option<(OrgId, Environment, SessionId)> {
    let k: &[u8; 33] = k.try_into().ok()?;
    let org = u128::from_be_bytes(k[..16].try_into().ok()?);
    let env = match k[16] {
        0 => Environment::Live,
        1 => Environment::Test,
        _ => return None,
    };
    let id = trailing_id(k)?;
    Some((
        OrgId::from_ulid(org.into()),
        env,
        SessionId::from_ulid(id.into()),
    ))
}

/// Partition, then the id's ULID inverted: clustering `id DESC`, newest session first.
pub fn session(org: OrgId, env: Environment, id: SessionId) -> [u8; 33] {
    let mut k = [0; 33];
    k[..17].copy_from_slice(&session_partition(org, env));
    k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

/// How many partitions `sessions_idle` spreads over.
pub const IDLE_BUCKETS: u8 = 16;

/// The `sessions_idle` partition of a session: the low bits of its id's random part.
pub fn idle_bucket_of(session: SessionId) -> u8 {
    (session.ulid().0 % u128::from(IDLE_BUCKETS)) as u8
}

pub fn idle_bucket(bucket: u8) -> [u8; 1] {
    [bucket]
}

/// Partition, then `idle_since` in milliseconds (big-endian, so oldest first), then the
/// session's ULID.
pub fn idle(session: SessionId, idle_since: Timestamp) -> [u8; 25] {
    let mut k = [0; 25];
    k[0] = idle_bucket_of(session);
    k[1..9].copy_from_slice(&millis(idle_since).to_be_bytes());
    k[9..].copy_from_slice(&session.ulid().to_bytes());
    k
}

/// The first key of `bucket` at or after `before`: the end of a scan for older rows.
pub fn idle_before(bucket: u8, before: Timestamp) -> [u8; 9] {
    let mut k = [0; 9];
    k[0] = bucket;
    k[1..9].copy_from_slice(&millis(before).to_be_bytes());
    k
}

pub fn parse_idle(k: &[u8]) -> Option<(SessionId, Timestamp)> {
    let k: &[u8; 25] = k.try_into().ok()?;
    let ms = u64::from_be_bytes(k[1..9].try_into().ok()?);
    let at = Timestamp::from_timestamp_millis(i64::try_from(ms).ok()?)?;
    let id = u128::from_be_bytes(k[9..].try_into().ok()?);
    Some((SessionId::from_ulid(id.into()), at))
}

/// Milliseconds since the epoch; times before it (never written) clamp to 0.
fn millis(t: Timestamp) -> u64 {
    u64::try_from(t.timestamp_millis()).unwrap_or(0)
}

/// The `events` partition `(organization_id, environment)`: 16 + 1 bytes, as `sessions`.
pub fn event_partition(org: OrgId, env: Environment) -> [u8; 17] {
    api_key_partition(org, env)
}

/// Partition, then the id's ULID inverted: clustering `id DESC`, newest event first.
pub fn event(org: OrgId, env: Environment, id: EventId) -> [u8; 33] {
    let mut k = [0; 33];
    k[..17].copy_from_slice(&event_partition(org, env));
    k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

/// The `webhook_endpoints` partition `(organization_id, environment)`, as `api_keys`.
pub fn webhook_endpoint_partition(org: OrgId, env: Environment) -> [u8; 17] {
    api_key_partition(org, env)
}

/// Partition, then the id's ULID inverted: clustering `id DESC`, newest endpoint first.
pub fn webhook_endpoint(org: OrgId, env: Environment, id: WebhookEndpointId) -> [u8; 33] {
    let mut k = [0; 33];
    k[..17].copy_from_slice(&webhook_endpoint_partition(org, env));
    k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

/// The `webhook_deliveries` partition `(organization_id, environment, event_id)`: the
/// event's key (its id inverted, as in `events`).
pub fn delivery_partition(org: OrgId, env: Environment, event: EventId) -> [u8; 33] {
    self::event(org, env, event)
}

/// Partition, then the endpoint's ULID.
pub fn delivery(
    org: OrgId,
    env: Environment,
    event: EventId,
    endpoint: WebhookEndpointId,
) -> [u8; 49] {
    let mut k = [0; 49];
    k[..33].copy_from_slice(&delivery_partition(org, env, event));
    k[33..].copy_from_slice(&endpoint.ulid().to_bytes());
    k
}

/// `webhook_deliveries_due`: when the attempt is due in milliseconds (8, big-endian, so
/// earliest first), then the delivery's key.
pub fn delivery_due(at: Timestamp, delivery: &[u8; 49]) -> [u8; 57] {
    let mut k = [0; 57];
    k[..8].copy_from_slice(&millis(at).to_be_bytes());
    k[8..].copy_from_slice(delivery);
    k
}

/// The delivery key at the end of a due-index key.
pub fn delivery_of_due(k: &[u8]) -> Option<&[u8]> {
    k.get(8..).filter(|d| d.len() == 49)
}

/// The due-index keys of attempts due before `at`.
pub fn delivery_due_before(at: Timestamp) -> [u8; 8] {
    millis(at).to_be_bytes()
}

/// The `visitors` partition `(organization_id, environment)`: 16 + 1 bytes, as `sessions`.
pub fn visitor_partition(org: OrgId, env: Environment) -> [u8; 17] {
    api_key_partition(org, env)
}

/// Partition, then the id's ULID inverted: clustering `id DESC`, newest visitor first.
pub fn visitor(org: OrgId, env: Environment, id: VisitorId) -> [u8; 33] {
    let mut k = [0; 33];
    k[..17].copy_from_slice(&visitor_partition(org, env));
    k[17..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

/// The `visitors_by_anchor` partition `(organization_id, environment, anchor_digest)`:
/// 16 + 1 + 32 bytes.
pub fn anchor_partition(org: OrgId, env: Environment, digest: &AnchorDigest) -> [u8; 49] {
    let mut k = [0; 49];
    k[..17].copy_from_slice(&api_key_partition(org, env));
    k[17..].copy_from_slice(&digest.0);
    k
}

/// Partition, then the visitor id's ULID inverted: newest visitor first.
pub fn anchor(org: OrgId, env: Environment, digest: &AnchorDigest, id: VisitorId) -> [u8; 65] {
    let mut k = [0; 65];
    k[..49].copy_from_slice(&anchor_partition(org, env, digest));
    k[49..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

/// The `sessions_by_verdict` partition `(organization_id, environment, verdict)`: 16 + 1,
/// then the verdict's length (1) and UTF-8, so no verdict's partition is a prefix of
/// another's. `None` for a verdict too long to index (the enumeration's are short).
pub fn verdict_partition(org: OrgId, env: Environment, verdict: &str) -> Option<Vec<u8>> {
    let len = u8::try_from(verdict.len()).ok()?;
    let mut k = Vec::with_capacity(18 + verdict.len() + 16);
    k.extend_from_slice(&api_key_partition(org, env));
    k.push(len);
    k.extend_from_slice(verdict.as_bytes());
    Some(k)
}

/// Partition, then the session id's ULID inverted: newest session first.
pub fn session_by_verdict(
    org: OrgId,
    env: Environment,
    verdict: &str,
    id: SessionId,
) -> Option<Vec<u8>> {
    let mut k = verdict_partition(org, env, verdict)?;
    k.extend_from_slice(&(!id.ulid().0).to_be_bytes());
    Some(k)
}

/// The partition `(organization_id, environment)` of the `visitors_by_*` order tables.
pub fn visitor_order_partition(org: OrgId, env: Environment) -> [u8; 17] {
    api_key_partition(org, env)
}

/// Partition, then the sort value inverted, then the visitor id's ULID inverted: clustering
/// `(value DESC, visitor_id DESC)`.
pub fn visitor_by(org: OrgId, env: Environment, value: u64, id: VisitorId) -> [u8; 41] {
    let mut k = [0; 41];
    k[..17].copy_from_slice(&visitor_order_partition(org, env));
    k[17..25].copy_from_slice(&(!value).to_be_bytes());
    k[25..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

/// The id whose ULID, inverted, ends key `k` (every `id DESC` clustering ends so).
pub fn trailing_id(k: &[u8]) -> Option<u128> {
    let tail: [u8; 16] = k.get(k.len().checked_sub(16)?..)?.try_into().ok()?;
    Some(!u128::from_be_bytes(tail))
}

/// What an `expiry_queue` row names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Expiring {
    Session = 0,
    Visitor = 1,
    Event = 2,
    /// A Gate session: dropped a retention after it started (its tokens are long useless).
    GateSession = 3,
}

/// `expiry_queue`: the time the row was last written in milliseconds (8, big-endian, so
/// oldest first), what it is (1), and the row's key in its own table.
pub fn expiry(at: Timestamp, kind: Expiring, target: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + target.len());
    k.extend_from_slice(&millis(at).to_be_bytes());
    k.push(kind as u8);
    k.extend_from_slice(target);
    k
}

/// The first `expiry_queue` key at or after `at`: the end of a scan for older rows.
pub fn expiry_before(at: Timestamp) -> [u8; 8] {
    millis(at).to_be_bytes()
}

pub fn parse_expiry(k: &[u8]) -> Option<(u8, &[u8])> {
    Some((*k.get(8)?, k.get(9..)?))
}

/// The `session_decisions` partition `session_id`: the session's ULID (16).
pub fn decision_partition(session: SessionId) -> [u8; 16] {
    session.ulid().to_bytes()
}

/// Partition, then the decision id's ULID inverted: clustering `id DESC`, newest first.
pub fn decision(session: SessionId, id: DecisionId) -> [u8; 32] {
    let mut k = [0; 32];
    k[..16].copy_from_slice(&decision_partition(session));
    k[16..].copy_from_slice(&(!id.ulid().0).to_be_bytes());
    k
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use super::super::{key, prefix_end};
    use super::*;

    #[test]
    fn a_session_key_parses_back() {
        let (org, id) = (OrgId::generate(), SessionId::generate());
        for env in [Environment::Live, Environment::Test] {
            assert_eq!(
                key::parse_session(&key::session(org, env, id)),
                Some((org, env, id))
            );
        }
        assert_eq!(key::parse_session(&[0; 32]), None);
    }

    #[test]
    fn newer_keys_sort_first_within_a_partition() {
        let org = OrgId::generate();
        // Sorted: ids from one millisecond are not generated in order.
        let (older, newer) = {
            let (x, y) = (KeyId::generate(), KeyId::generate());
            (x.min(y), x.max(y))
        };
        let (a, b) = (
            key::api_key(org, Environment::Live, newer),
            key::api_key(org, Environment::Live, older),
        );
        assert!(a < b, "the newer key must come first in byte order");
        let partition = key::api_key_partition(org, Environment::Live);
        assert!(a.starts_with(&partition) && b.starts_with(&partition));
        assert!(!key::api_key(org, Environment::Test, newer).starts_with(&partition));
    }

    #[test]
    fn newer_sessions_and_decisions_sort_first_within_a_partition() {
        let org = OrgId::generate();
        let (older, newer) = {
            let (x, y) = (SessionId::generate(), SessionId::generate());
            (x.min(y), x.max(y))
        };
        let (a, b) = (
            key::session(org, Environment::Test, newer),
            key::session(org, Environment::Test, older),
        );
        assert!(a < b, "the newer session must come first in byte order");
        let partition = key::session_partition(org, Environment::Test);
        assert!(a.starts_with(&partition) && b.starts_with(&partition));
        let Bound::Excluded(end) = prefix_end(&partition) else {
            panic!("the partition has an end");
        };
        assert!(b.as_slice() < end.as_slice());

        let (d_old, d_new) = {
            let (x, y) = (DecisionId::generate(), DecisionId::generate());
            (x.min(y), x.max(y))
        };
        assert!(key::decision(newer, d_new) < key::decision(newer, d_old));
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), Bound::Excluded(vec![2]));
        assert_eq!(prefix_end(&[0xff]), Bound::Unbounded);
    }
}
