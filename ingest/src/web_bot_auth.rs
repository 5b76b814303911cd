//! Web Bot Auth (docs/architecture.md#collect-transport): checks the HTTP Message Signature (RFC
//! 9421) an agent puts on its requests, with the `Signature-Agent` header naming the agent whose
//! key directory holds the signing key. The cryptography and the parsing of `Signature-Input` are
//! Cloudflare's `web-bot-auth` crate; this module supplies what the crate leaves to its caller: the
//! request's components, the trusted agents' keys, the time window (the crate never checks
//! `expires`), the rule that a key only speaks for the agent whose directory it came from, and the
//! two rules that make a signature good for one request to this service only:
//!
//! - the covered `@authority` is checked against the service's own public authorities (from
//!   `--public-url`), never against the request's `Host`, so a signature made for another site
//!   cannot be re-hosted here by sending that site's name as `Host`;
//! - a signature's `nonce` is spent in the store until the signature expires ([`Checked::settle`],
//!   `spend_nonce`), so a replay reads invalid, whichever ingest process of a fleet it reaches. A signature without a nonce cannot be told from its replay, so it reads
//!   invalid too: the crate does not insist on a nonce, but a verified outcome here promises
//!   that the agent made this very request.
//!
//! Trusted agents come from the operator (`--web-bot-auth-keys`, a JSON file mapping each
//! agent's origin to its key directory, the JWKS it serves at
//! `/.well-known/http-message-signatures-directory`). Directories are never fetched from the
//! network at request time: a request must not make the service call out to a URL it names.
//! The file can be read again while the service runs ([`TrustedAgents::reload`]); a file that
//! does not parse leaves the directories in use as they were.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock};

use axum::http::HeaderMap;
use schemas::collect::{WebBotAuthCheck, WebBotAuthStatus};
use sfv::SerializeValue as _;
use web_bot_auth::components::{
    CoveredComponent, DerivedComponent, HTTPField, HTTPFieldParameters,
};
use web_bot_auth::keyring::{Algorithm, JSONWebKeySet, KeyRing};
use web_bot_auth::message_signatures::SignedMessage;
use web_bot_auth::{ImplementationError, SignatureAgentLink, WebBotAuthVerifier};

/// How far a signature's `created` and `expires` may be from our clock.
const CLOCK_SKEW_SECS: i64 = 60;
/// The longest a signature may be valid: its nonce is kept that long (in a fleet's store), so an
/// agent cannot make it keep one for years. Web Bot Auth signatures live a minute or so.
const MAX_VALIDITY_SECS: i64 = 3600;
/// The longest `Signature-Agent` kept when reporting an unverified claim.
const MAX_AGENT_LEN: usize = 256;
/// The longest nonce remembered; Web Bot Auth's are 88 characters (base64 of 64 bytes).
const MAX_NONCE_LEN: usize = 256;

/// The keys of the agents the operator trusts, by key id (the JWK thumbprint that `keyid`
/// carries), with the agent each belongs to.
#[derive(Default)]
pub struct Directories {
    ring: KeyRing,
    owner: HashMap<String, String>,
}

impl Directories {
    /// Reads `{ "<agent origin>": <its key directory (JWKS)>, ... }`. Keys other than Ed25519
    /// are skipped (the only algorithm Web Bot Auth uses); a directory with none is an error,
    /// so a typo does not silently trust nobody.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let directories: HashMap<String, serde_json::Value> = serde_json::from_str(&text)
            .map_err(|e| format!("{}: not a JSON object of agents: {e}", path.display()))?;
        let mut agents = Directories::default();
        for (agent, directory) in directories {
            let added = agents.add_directory(&agent, directory)?;
            if added == 0 {
                return Err(format!(
                    "{}: the directory of {agent} has no Ed25519 key",
                    path.display()
                ));
            }
        }
        Ok(agents)
    }

    /// Trusts `agent` (an origin, such as `https://crawler.example`) for the Ed25519 keys of
    /// `directory`; returns how many it has. A key already in another agent's directory is an
    /// error: a key speaks for one agent only.
    pub fn add_directory(
        &mut self,
        agent: &str,
        directory: serde_json::Value,
    ) -> Result<usize, String> {
        let set: JSONWebKeySet = serde_json::from_value(directory)
            .map_err(|e| format!("the key directory of {agent}: {e}"))?;
        let agent = agent.trim_end_matches('/').to_ascii_lowercase();
        let mut added = 0;
        for jwk in &set.keys {
            let keyid = jwk.b64_thumbprint();
            match self.owner.get(&keyid) {
                Some(owner) if *owner != agent => {
                    return Err(format!(
                        "key {keyid} is in the directories of both {owner} and {agent}"
                    ));
                }
                Some(_) => added += 1,
                None => {
                    if self.ring.try_import_jwk(jwk).is_ok() {
                        self.owner.insert(keyid, agent.clone());
                        added += 1;
                    }
                }
            }
        }
        Ok(added)
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }
}

/// What a reload found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    /// Keys trusted now.
    pub keys: usize,
    /// Whether any key or its agent differs from before.
    pub changed: bool,
}

/// What the signature alone shows.
enum Verification {
    Refused(WebBotAuthStatus),
    /// By a key of `agent`'s directory, for this service, in its window: verified once its
    /// nonce (key id, nonce, valid until) is spent.
    Verified {
        agent: String,
        nonce: (String, String, i64),
    },
}

/// A signature's outcome as far as the request shows it ([`TrustedAgents::check`]); a verified one
/// holds until its nonce is spent ([`Checked::settle`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    outcome: WebBotAuthCheck,
    /// What `Signature-Agent` claimed, reported if the nonce turns out spent.
    claimed: Option<String>,
    /// The nonce to spend, for a verified signature: its key id, the nonce and until when the
    /// signature is valid (Unix seconds).
    nonce: Option<(String, String, i64)>,
}

impl Checked {
    /// The outcome, once a verified signature's nonce is spent in `store`: a nonce spent
    /// before (a replay, here or at another process of the fleet) reads invalid, and so does
    /// one the store cannot spend, since a signature that cannot be protected from replay must
    /// not pass as verified.
    pub async fn settle(self, store: &store::Store) -> WebBotAuthCheck {
        let Some((keyid, nonce, until)) = self.nonce else {
            return self.outcome;
        };
        let until = chrono::DateTime::from_timestamp(until, 0)
            .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
        let claimed = self.claimed;
        let with = |status| WebBotAuthCheck {
            status,
            signature_agent: claimed,
        };
        match store.spend_nonce(&keyid, &nonce, until).await {
            Ok(true) => self.outcome,
            Ok(false) => with(WebBotAuthStatus::Invalid),
            // Whether the nonce was spent before is unknown: the signature is not trusted, but
            // it is no forgery either (an agent must not read as a forger while the store is
            // down).
            Err(e) => {
                tracing::warn!(
                    agent = ?self.outcome.signature_agent,
                    error = %e,
                    "web bot auth: cannot spend the signature's nonce; left unverified"
                );
                with(WebBotAuthStatus::Unverified)
            }
        }
    }
}

/// The agents trusted for Web Bot Auth and the service's public authorities: everything
/// [`TrustedAgents::check`] needs.
pub struct TrustedAgents {
    /// Replaced whole by a reload; a check works on the directories it started with.
    directories: RwLock<Arc<Directories>>,
    /// `host[:port]` of each `--public-url`, lower case, the scheme's default port left out
    /// (RFC 9421 §2.2.3).
    authorities: Vec<String>,
}

impl std::fmt::Debug for TrustedAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedAgents")
            .field("keys", &self.current().len())
            .field("authorities", &self.authorities)
            .finish()
    }
}

/// The `@authority` a signature for `public_url` covers: its host and any port other than the
/// scheme's default, lower case. `Err` for anything but an absolute http(s) URL with a host.
pub fn authority_of(public_url: &str) -> Result<String, String> {
    // Echoed in errors, so shown redacted like every URL (docs/architecture.md#secrets-in-logs).
    let shown = schemas::redact::redact_url(public_url);
    let url = url::Url::parse(public_url)
        .map_err(|e| format!("`{shown}` is not an absolute URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("`{shown}` is not an http or https URL"));
    }
    let host = url
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("`{shown}` names no host"))?;
    // `port()` is `None` for the scheme's default port, which `@authority` leaves out.
    Ok(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
    .to_ascii_lowercase())
}

impl TrustedAgents {
    /// Trusts the agents of `directories` for signatures that cover one of `authorities` (see
    /// [`authority_of`]).
    pub fn new(directories: Directories, authorities: Vec<String>) -> Self {
        TrustedAgents {
            directories: RwLock::new(Arc::new(directories)),
            authorities,
        }
    }

    fn current(&self) -> Arc<Directories> {
        self.directories
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the keys file again and trusts what it names from now on; on any error the
    /// directories in use stay as they were.
    pub fn reload(&self, path: &Path) -> Result<Reloaded, String> {
        let fresh = Directories::from_file(path)?;
        let changed = self.current().owner != fresh.owner;
        let keys = fresh.len();
        if changed {
            *self
                .directories
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        }
        Ok(Reloaded { keys, changed })
    }

    /// Checks the request's signature; `None` when it carries no `Signature` and
    /// `Signature-Input` (most requests: browsers do not sign). A verified outcome holds once
    /// its nonce is spent ([`Checked::settle`]).
    pub fn check(&self, request: &Request<'_>, now_unix: i64) -> Option<Checked> {
        let has = |name: &str| request.headers.contains_key(name);
        if !has("signature") || !has("signature-input") {
            return None;
        }
        let claimed = request
            .header("signature-agent")
            .map(|v| v.chars().take(MAX_AGENT_LEN).collect::<String>());
        let (status, agent, nonce) = match self.verify(request, now_unix) {
            Verification::Refused(status) => (status, None, None),
            Verification::Verified { agent, nonce } => {
                (WebBotAuthStatus::Verified, Some(agent), Some(nonce))
            }
        };
        Some(Checked {
            outcome: WebBotAuthCheck {
                status,
                signature_agent: agent.or(claimed.clone()),
            },
            claimed,
            nonce,
        })
    }

    fn verify(&self, request: &Request<'_>, now: i64) -> Verification {
        use Verification::Refused;
        use WebBotAuthStatus::{Invalid, Unverified};
        // A label without the web-bot-auth tag, key id, times or the covered authority (and
        // `signature-agent` when that header is sent) does not parse.
        let Ok(verifier) = WebBotAuthVerifier::parse(request) else {
            return Refused(Invalid);
        };
        let details = &verifier.get_parsed_label().base.parameters.details;
        let (Some(created), Some(expires)) = (details.created, details.expires) else {
            return Refused(Invalid);
        };
        if expires + CLOCK_SKEW_SECS <= now
            || created - CLOCK_SKEW_SECS > now
            || created > expires
            || expires - created > MAX_VALIDITY_SECS
        {
            return Refused(Invalid);
        }
        if details
            .algorithm
            .as_ref()
            .is_some_and(|a| *a != Algorithm::Ed25519)
        {
            return Refused(Invalid);
        }
        let keyid = details.keyid.clone().unwrap_or_default();
        let directories = self.current();
        let Some(owner) = directories.owner.get(&keyid) else {
            return Refused(Unverified);
        };
        let Some(nonce) = details
            .nonce
            .clone()
            .filter(|n| !n.is_empty() && n.len() <= MAX_NONCE_LEN)
        else {
            return Refused(Invalid);
        };
        // The key speaks only for its own agent: a `Signature-Agent` naming another directory
        // (or carrying its own inline keys) is a forgery, whatever the signature.
        let agents = verifier.get_signature_agents();
        let owned = agents.is_empty()
            || agents.iter().any(|link| match link {
                SignatureAgentLink::External(url) => {
                    let url = url.trim_end_matches('/');
                    let origin = url
                        .strip_suffix("/.well-known/http-message-signatures-directory")
                        .unwrap_or(url);
                    origin.eq_ignore_ascii_case(owner)
                }
                SignatureAgentLink::Inline(_) => false,
            });
        if !owned {
            return Refused(Invalid);
        }
        match self.verify_for_our_authority(request, &directories.ring) {
            Ok(()) => {}
            Err(ImplementationError::NoSuchKey) => return Refused(Unverified),
            Err(_) => return Refused(Invalid),
        }
        Verification::Verified {
            agent: owner.clone(),
            nonce: (keyid, nonce, expires + CLOCK_SKEW_SECS),
        }
    }

    /// Verifies the signature with `@authority` (and `@target-uri`) taken as each of the
    /// service's public authorities in turn, the one the `Host` header names first: a proxy
    /// may rewrite `Host`, but a signature only counts if it was made for this service.
    fn verify_for_our_authority(
        &self,
        request: &Request<'_>,
        ring: &KeyRing,
    ) -> Result<(), ImplementationError> {
        let mut candidates: Vec<&String> = self.authorities.iter().collect();
        candidates.sort_by_key(|a| **a != request.authority);
        let mut outcome = Err(ImplementationError::LookupError(CoveredComponent::Derived(
            DerivedComponent::Authority { req: false },
        )));
        for authority in candidates {
            let ours = Request {
                authority: authority.clone(),
                ..*request
            };
            // A verifier holds the signature base of the request it parsed, so each
            // authority needs its own.
            outcome = WebBotAuthVerifier::parse(&ours).and_then(|v| v.verify(ring, None).map(drop));
            if outcome.is_ok() {
                break;
            }
        }
        outcome
    }
}

/// A request as the signature covers it.
pub struct Request<'a> {
    pub method: &'a str,
    /// `https` when the request reached us over TLS (directly or through a trusted proxy).
    pub scheme: &'a str,
    /// The `Host` the client sent, lower case: which of the service's authorities to try first,
    /// never what a signature is checked against.
    pub authority: String,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

impl<'a> Request<'a> {
    pub fn new(
        method: &'a str,
        scheme: &'a str,
        uri: &'a axum::http::Uri,
        headers: &'a HeaderMap,
    ) -> Self {
        let authority = headers
            .get(axum::http::header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| uri.authority().map(|a| a.as_str()))
            .unwrap_or_default()
            .to_ascii_lowercase();
        Request {
            method,
            scheme,
            authority,
            path: uri.path(),
            query: uri.query(),
            headers,
        }
    }

    fn header(&self, name: &str) -> Option<String> {
        let values: Vec<&str> = self
            .headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .collect();
        (!values.is_empty()).then(|| values.join(", "))
    }
}

impl SignedMessage for Request<'_> {
    fn lookup_component(&self, component: &CoveredComponent) -> Vec<String> {
        match component {
            CoveredComponent::HTTP(HTTPField { name, parameters }) => {
                let Some(value) = self.header(name) else {
                    return Vec::new();
                };
                match parameters.0.as_slice() {
                    [] => vec![value],
                    // RFC 9421 §2.1.2: `;key="k"` covers the serialized member `k` of the
                    // header read as a structured dictionary.
                    [HTTPFieldParameters::Key(k)] => {
                        let Ok(dictionary) = sfv::Parser::new(&value).parse_dictionary() else {
                            return Vec::new();
                        };
                        match dictionary.into_iter().find(|(key, _)| key.as_str() == k) {
                            Some((_, sfv::ListEntry::Item(item))) => vec![item.serialize_value()],
                            Some((_, inner)) => vec![inner].serialize_value().into_iter().collect(),
                            None => Vec::new(),
                        }
                    }
                    // Other parameters (`sf`, `bs`, `tr`, `req`) are not used by Web Bot Auth;
                    // an unanswered component fails the signature.
                    _ => Vec::new(),
                }
            }
            CoveredComponent::Derived(derived) => {
                let path = if self.path.is_empty() { "/" } else { self.path };
                let target = match self.query {
                    Some(q) => format!("{path}?{q}"),
                    None => path.to_owned(),
                };
                let value = match derived {
                    DerivedComponent::Method { .. } => self.method.to_owned(),
                    DerivedComponent::Authority { .. } => self.authority.clone(),
                    DerivedComponent::Scheme { .. } => self.scheme.to_owned(),
                    DerivedComponent::Path { .. } => path.to_owned(),
                    DerivedComponent::Query { .. } => format!("?{}", self.query.unwrap_or("")),
                    DerivedComponent::RequestTarget { .. } => target,
                    DerivedComponent::TargetUri { .. } => {
                        format!("{}://{}{target}", self.scheme, self.authority)
                    }
                    _ => return Vec::new(),
                };
                vec![value]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agents.json");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    const ED25519: &str = r#"{"keys":[{"kty":"OKP","crv":"Ed25519","x":"JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs"}]}"#;

    #[test]
    fn a_keys_file_must_name_agents_with_ed25519_keys() {
        let (_d, good) = file(&format!(r#"{{"https://agent.test/": {ED25519}}}"#));
        let agents = Directories::from_file(&good).unwrap();
        assert_eq!(
            agents.owner.values().collect::<Vec<_>>(),
            ["https://agent.test"],
            "the origin, without its trailing slash"
        );
        for bad in [
            "not json",
            "[]",
            r#"{"https://agent.test": {"keys": []}}"#,
            r#"{"https://agent.test": {"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}}"#,
            r#"{"https://agent.test": "no directory"}"#,
            &format!(r#"{{"https://agent.test": {ED25519}, "https://other.test": {ED25519}}}"#),
        ] {
            let (_d, path) = file(bad);
            assert!(Directories::from_file(&path).is_err(), "{bad}");
        }
        assert!(Directories::from_file(Path::new("/nonexistent/agents.json")).is_err());
    }

    #[test]
    fn a_reload_that_fails_keeps_the_directories_in_use() {
        let (dir, path) = file(&format!(r#"{{"https://agent.test": {ED25519}}}"#));
        let agents = TrustedAgents::new(Directories::default(), vec!["vigil.test".into()]);
        assert_eq!(
            agents.reload(&path),
            Ok(Reloaded {
                keys: 1,
                changed: true
            })
        );
        assert_eq!(
            agents.reload(&path),
            Ok(Reloaded {
                keys: 1,
                changed: false
            })
        );
        std::fs::write(&path, "{ half a file").unwrap();
        assert!(agents.reload(&path).is_err());
        assert!(agents.reload(&dir.path().join("gone.json")).is_err());
        assert_eq!(agents.current().len(), 1, "the old directories stay");
    }

    #[test]
    fn authorities_are_host_and_port_without_the_default_port() {
        for (url, authority) in [
            ("https://API.Example/", "api.example"),
            ("https://api.example:443", "api.example"),
            ("http://api.example:80/x", "api.example"),
            ("https://api.example:8443", "api.example:8443"),
            ("http://127.0.0.1:8080", "127.0.0.1:8080"),
            ("http://[::1]:8080", "[::1]:8080"),
        ] {
            assert_eq!(authority_of(url).as_deref(), Ok(authority), "{url}");
        }
        for bad in ["api.example", "ftp://api.example", "https://", "/relative"] {
            assert!(authority_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unsigned_request_has_no_outcome() {
        let headers = HeaderMap::new();
        let uri: axum::http::Uri = "/v1/collect/sessions".parse().unwrap();
        let request = Request::new("POST", "https", &uri, &headers);
        let agents = TrustedAgents::new(Directories::default(), vec!["vigil.test".into()]);
        assert_eq!(agents.check(&request, 0), None);
    }
}
