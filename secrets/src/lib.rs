//! The server secret and what is derived from it: the pepper that turns credentials into the
//! keyed hashes the store keeps (docs/architecture.md#ids-and-credentials), the key that seals
//! stored idempotent responses (they may hold a freshly minted secret key), and the key that signs
//! pagination cursors.

use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::credential::CredentialHash;
use schemas::credential::{Credential, Environment};
use schemas::{OrgId, VisitorId};
use sha2::Sha256;

pub mod consent_ticket;
pub mod handoff;

type HmacSha256 = Hmac<Sha256>;

const VISITOR_TOKEN_VERSION: &str = "vt1";
/// Bytes of the MAC a visitor token carries (128 bits).
const VISITOR_TOKEN_MAC_LEN: usize = 16;

/// Subkeys derived from the 32-byte server secret, one per purpose, so no key serves two.
#[derive(Clone)]
pub struct ServerSecret {
    /// HMAC keyed with the pepper, ready to clone: keying costs two SHA-256 blocks, and every
    /// authenticated request hashes its credential.
    pepper: HmacSha256,
    sealing: [u8; 32],
    cursor: [u8; 32],
    visitor_token: [u8; 32],
    /// Handoff sealing keys by key id, newest first (docs/architecture.md#collect-transport): a
    /// handoff names its key id, and opening tries the key it names, so keys can be rotated without
    /// breaking handoffs in flight.
    handoff: Vec<(&'static str, [u8; 32])>,
}

impl std::fmt::Debug for ServerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerSecret(..)")
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

impl ServerSecret {
    pub fn from_bytes(master: [u8; 32]) -> Self {
        ServerSecret {
            pepper: <HmacSha256 as KeyInit>::new_from_slice(&hmac(
                &master,
                &[b"vigil/credential-pepper/v1"],
            ))
            .expect("HMAC takes any key length"),
            sealing: hmac(&master, &[b"vigil/response-sealing/v1"]),
            cursor: hmac(&master, &[b"vigil/cursor-signing/v1"]),
            visitor_token: hmac(&master, &[b"vigil/visitor-token/v1"]),
            handoff: vec![("k1", hmac(&master, &[b"vigil/handoff-sealing/k1"]))],
        }
    }

    /// Parses 64 hex characters (the `VIGIL_SERVER_SECRET` form).
    pub fn from_hex(s: &str) -> Result<Self, String> {
        let bytes = hex::decode(s.trim()).map_err(|e| format!("server secret is not hex: {e}"))?;
        let master: [u8; 32] = bytes
            .try_into()
            .map_err(|_| "server secret must be 32 bytes (64 hex characters)".to_string())?;
        Ok(Self::from_bytes(master))
    }

    /// Reads the secret file, creating it (mode 0600) with fresh OS randomness on first start.
    /// Processes sharing the directory (a compose stack's services on one volume) may start at
    /// once: the first to publish its secret wins, and every other reads that one.
    pub fn load_or_create(path: &Path) -> std::io::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(s) => Self::from_hex(&s).map_err(std::io::Error::other),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut master = [0u8; 32];
                OsRng
                    .try_fill_bytes(&mut master)
                    .map_err(std::io::Error::other)?;
                // Written whole under a random name of its own, then linked to the real
                // name, which fails if another process linked its secret first.
                let mine = path.with_extension(format!(
                    "{:016x}.tmp",
                    OsRng.try_next_u64().map_err(std::io::Error::other)?
                ));
                let written = write_new_private(&mine, hex::encode(master).as_bytes());
                let linked = written.and_then(|()| std::fs::hard_link(&mine, path));
                let published = match linked {
                    Ok(()) => Ok(true),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                    // A filesystem without hard links: renamed instead, which a process
                    // starting at the same instant could overwrite; alone, as such a
                    // directory's owner usually is, it is the same.
                    Err(e)
                        if e.kind() == std::io::ErrorKind::Unsupported
                            || e.raw_os_error() == Some(1) =>
                    {
                        std::fs::rename(&mine, path).map(|()| true)
                    }
                    Err(e) => Err(e),
                };
                let _ = std::fs::remove_file(&mine);
                if published? {
                    Ok(Self::from_bytes(master))
                } else {
                    Self::from_hex(&std::fs::read_to_string(path)?).map_err(std::io::Error::other)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// The keyed hash under which a credential is stored and looked up.
    pub fn hash_credential(&self, credential: &Credential) -> CredentialHash {
        let mut mac = self.pepper.clone();
        mac.update(credential.expose().as_bytes());
        CredentialHash(mac.finalize().into_bytes().into())
    }

    /// The keyed hash of a Gate workflow token or login code, as credentials are stored.
    pub fn hash_token(&self, token: &str) -> CredentialHash {
        let mut mac = self.pepper.clone();
        mac.update(token.as_bytes());
        CredentialHash(mac.finalize().into_bytes().into())
    }

    /// Encrypts `plain` bound to `context`; the output carries its random nonce.
    pub fn seal(&self, plain: &[u8], context: &[u8]) -> Vec<u8> {
        let cipher = XChaCha20Poly1305::new((&self.sealing).into());
        let mut nonce = [0u8; 24];
        OsRng.try_fill_bytes(&mut nonce).expect("OS random source");
        let sealed = cipher
            .encrypt(
                &XNonce::from(nonce),
                Payload {
                    msg: plain,
                    aad: context,
                },
            )
            .expect("XChaCha20-Poly1305 encryption does not fail for in-memory buffers");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        out
    }

    /// Opens what `seal` produced for the same `context`; `None` if it was altered.
    pub fn open(&self, sealed: &[u8], context: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < 24 {
            return None;
        }
        let (nonce, body) = sealed.split_at(24);
        let cipher = XChaCha20Poly1305::new((&self.sealing).into());
        let nonce = XNonce::try_from(nonce).ok()?;
        cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: body,
                    aad: context,
                },
            )
            .ok()
    }

    /// The key new handoffs are sealed with, and its id.
    pub fn current_handoff_key(&self) -> (&'static str, &[u8; 32]) {
        let (id, key) = &self.handoff[0];
        (id, key)
    }

    /// The handoff key with this id, if it is one this server still opens.
    pub fn handoff_key(&self, id: &str) -> Option<&[u8; 32]> {
        self.handoff
            .iter()
            .find(|(kid, _)| *kid == id)
            .map(|(_, key)| key)
    }

    /// A MAC for tamper-evident tokens such as pagination cursors.
    pub fn cursor_mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        hmac(&self.cursor, parts)
    }

    /// A MAC for the visitor tokens the SDK keeps in first-party storage
    /// (docs/architecture.md#visitors), under a key of its own.
    pub fn visitor_token_mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        hmac(&self.visitor_token, parts)
    }

    /// The signed visitor token of a visitor: `vt1.<visitor id>.<b64url MAC>`, the MAC binding
    /// the organization, the environment and the visitor id, so a token copied to another site
    /// or environment links nothing there.
    pub fn visitor_token(&self, org: OrgId, env: Environment, visitor: VisitorId) -> String {
        let mac = self.visitor_token_binding(org, env, &visitor.to_string());
        format!(
            "{VISITOR_TOKEN_VERSION}.{visitor}.{}",
            URL_SAFE_NO_PAD.encode(&mac[..VISITOR_TOKEN_MAC_LEN])
        )
    }

    /// The visitor a token names, if this server signed it for this organization and
    /// environment; `None` for anything else (malformed, altered, another tenancy).
    pub fn verify_visitor_token(
        &self,
        org: OrgId,
        env: Environment,
        token: &str,
    ) -> Option<VisitorId> {
        let mut parts = token.split('.');
        let (Some(VISITOR_TOKEN_VERSION), Some(id), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let visitor: VisitorId = id.parse().ok()?;
        let mac = URL_SAFE_NO_PAD.decode(mac).ok()?;
        let expected = self.visitor_token_binding(org, env, id);
        // Constant-time comparison, as for cursors.
        let same = mac.len() == VISITOR_TOKEN_MAC_LEN
            && mac
                .iter()
                .zip(&expected[..VISITOR_TOKEN_MAC_LEN])
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        same.then_some(visitor)
    }

    fn visitor_token_binding(&self, org: OrgId, env: Environment, visitor: &str) -> [u8; 32] {
        self.visitor_token_mac(&[
            org.to_string().as_bytes(),
            b"\0",
            env.to_string().as_bytes(),
            b"\0",
            visitor.as_bytes(),
        ])
    }
}

/// Creates `path` (which must not exist) with mode 0600 and `contents`, synced to disk.
fn write_new_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

/// Writes a file only its owner can read, creating or replacing it.
pub fn write_private(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Written beside the target and renamed over it, so the file is never seen half-written,
    // and created 0600, so an older file's wider mode is not inherited.
    let temp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(contents)?;
    f.sync_all()?;
    std::fs::rename(&temp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemas::credential::{Environment, KeyType};

    #[test]
    fn processes_creating_the_secret_at_once_all_read_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server-secret");
        let made: Vec<ServerSecret> = std::thread::scope(|scope| {
            let starts: Vec<_> = (0..8)
                .map(|_| scope.spawn(|| ServerSecret::load_or_create(&path).unwrap()))
                .collect();
            starts.into_iter().map(|s| s.join().unwrap()).collect()
        });
        let credential = Credential::generate(KeyType::Secret, Environment::Live);
        let first = made[0].hash_credential(&credential);
        assert!(made.iter().all(|s| s.hash_credential(&credential) == first));
        let on_disk = ServerSecret::load_or_create(&path).unwrap();
        assert_eq!(on_disk.hash_credential(&credential), first);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn hashes_are_keyed_and_seals_are_bound_to_context() {
        let a = ServerSecret::from_bytes([1; 32]);
        let b = ServerSecret::from_bytes([2; 32]);
        let c = Credential::generate(KeyType::Secret, Environment::Live);
        assert_eq!(a.hash_credential(&c), a.hash_credential(&c));
        assert_ne!(a.hash_credential(&c), b.hash_credential(&c));

        let sealed = a.seal(b"sk_live_...", b"ctx");
        assert_eq!(a.open(&sealed, b"ctx").unwrap(), b"sk_live_...");
        assert!(a.open(&sealed, b"other").is_none());
        assert!(b.open(&sealed, b"ctx").is_none());
    }

    #[test]
    fn visitor_tokens_verify_only_in_their_tenancy_and_unaltered() {
        let a = ServerSecret::from_bytes([1; 32]);
        let (org, vid) = (OrgId::generate(), VisitorId::generate());
        let token = a.visitor_token(org, Environment::Test, vid);
        assert!(token.starts_with(&format!("vt1.{vid}.")));
        assert_eq!(
            a.verify_visitor_token(org, Environment::Test, &token),
            Some(vid)
        );
        assert_eq!(a.verify_visitor_token(org, Environment::Live, &token), None);
        assert_eq!(
            a.verify_visitor_token(OrgId::generate(), Environment::Test, &token),
            None
        );
        let b = ServerSecret::from_bytes([2; 32]);
        assert_eq!(b.verify_visitor_token(org, Environment::Test, &token), None);
        let other = VisitorId::generate();
        let moved = token.replace(&vid.to_string(), &other.to_string());
        assert_eq!(a.verify_visitor_token(org, Environment::Test, &moved), None);
        for bad in [
            "",
            "vt1",
            "vt1.vid_x.AAAA",
            &format!("{token}.x"),
            "nonsense",
        ] {
            assert_eq!(a.verify_visitor_token(org, Environment::Test, bad), None);
        }
    }
}
