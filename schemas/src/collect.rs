//! The collect pipeline's log contract (`schemas/collect.md`, section 6): topic names, the
//! versioned record ingest appends for every accepted batch, the records ingest and the idle
//! sweep append beside the SDK's batches ([`ServerRecord`]), and the dead-letter record the
//! processor appends for a record it can never process.

use serde::{Deserialize, Serialize};

use crate::credential::Environment;
use crate::ids::{OrgId, SessionId};
use crate::time::Timestamp;

/// Accepted batches, keyed by session id so a session's batches stay in order.
pub const BATCHES_TOPIC: &str = "collect.batches.v1";
/// Partitions of the batches topic when Vigil creates it.
pub const BATCHES_PARTITIONS: u32 = 8;

/// The request a batch arrived with, as far as the processor needs it. The default is no
/// request at all: what a record the server writes for itself carries.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BatchRequest {
    pub ip: String,
    pub user_agent: String,
    /// Header names in the order they arrived: part of the connection fingerprint
    /// (docs/architecture.md#collect-transport).
    pub header_names: Vec<String>,
    pub url: String,
    /// The request's Web Bot Auth signature checked (docs/architecture.md#collect-transport);
    /// absent when it carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_bot_auth: Option<WebBotAuthCheck>,
    /// The `User-Agent`'s length in bytes as received, when it was longer than
    /// [`MAX_USER_AGENT_BYTES`] and `user_agent` holds its first part; absent when it was kept
    /// whole (a reader that does not know the member ignores it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent_bytes: Option<usize>,
    /// `HTTP/1.1`, `HTTP/2.0` (of the connection to Vigil: a proxy's, behind one); absent from
    /// records of versions that did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_version: Option<String>,
    /// The TLS client, when Vigil terminated TLS itself or a trusted proxy passed its
    /// fingerprint (docs/detection.md#transport-identity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsClient>,
}

/// The TLS client of a request's connection, as its ClientHello showed it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TlsClient {
    /// FoxIO's JA4 fingerprint: `t13d1516h2_8daaf6152771_02713d6af862`.
    pub ja4: Option<String>,
    /// Its raw form (the sorted ciphers and extensions, and the signature algorithms); absent
    /// when a proxy passed the fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ja4_r: Option<String>,
    /// Whether the hello carried GREASE values; absent when a proxy passed the fingerprint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub greased: Option<bool>,
    /// The version negotiated: `TLSv1.3`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_version: Option<String>,
    /// The protocol ALPN negotiated: `h2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alpn: Option<String>,
    /// Where it came from: `listener` (Vigil's own TLS) or `header`
    /// (`--client-fingerprint-header` from a trusted proxy).
    pub source: String,
}

/// What checking a request's Web Bot Auth signature (RFC 9421 with `Signature-Agent`) found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebBotAuthCheck {
    pub status: WebBotAuthStatus,
    /// The agent: the trusted directory's origin when verified, else what `Signature-Agent`
    /// claimed (if anything).
    pub signature_agent: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WebBotAuthStatus {
    /// A valid, unexpired signature by a key of a trusted agent's directory.
    Verified,
    /// A signature that fails: altered, expired, malformed, made for another host than this
    /// service's public authorities, replayed (its nonce seen before) or without a nonce, or
    /// by a key its `Signature-Agent` does not own.
    Invalid,
    /// A signature by a key no trusted directory holds: nothing proved either way.
    Unverified,
}

/// The most of a `User-Agent` kept (in bytes): browsers send a few hundred, and every batch
/// record and stored session carries it, so a client sending hundreds of kilobytes (with only
/// a site's public key) would otherwise fill the disk (schemas/collect.md §6).
pub const MAX_USER_AGENT_BYTES: usize = 512;

/// `raw` as it is kept: whole up to [`MAX_USER_AGENT_BYTES`], else cut there on a character
/// boundary, with the length received when it was cut.
pub fn kept_user_agent(raw: &str) -> (&str, Option<usize>) {
    if raw.len() <= MAX_USER_AGENT_BYTES {
        return (raw, None);
    }
    let mut end = MAX_USER_AGENT_BYTES;
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    (&raw[..end], Some(raw.len()))
}

/// One accepted batch on `collect.batches.v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchRecord {
    /// Always 1 for this version of the record.
    pub schema: u32,
    pub organization_id: OrgId,
    pub environment: Environment,
    pub session_id: SessionId,
    pub seq: u64,
    pub received_at: Timestamp,
    pub request: BatchRequest,
    /// The SDK batch's `kind` (`probes` or `interactions`) as ingest read it, so the processor
    /// does not read the batch a second time to find it. Absent on server-made records and on
    /// records of builds before it was carried, whose batches the processor reads it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The decrypted batch, as the SDK sent it (its text, passed through unparsed).
    pub observations: crate::raw::RawJson,
}

pub const BATCH_RECORD_SCHEMA: u32 = 1;

/// The records the server appends to a session's stream beside the SDK's batches (§6): number 0
/// (the SDK's start at 1), safe to apply more than once, carried in [`BatchRecord::observations`]
/// and told apart by `kind`. A record of a kind this build does not know does not decode, so
/// the processor sets it aside rather than misread it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ServerRecord {
    /// The network check of §4: what the HTTP request and the WebSocket showed of the client.
    /// (Boxed: the other records are a few bytes.)
    NetworkCheck {
        http: Box<ConnectionIdentity>,
        /// `None` when the session never opened its WebSocket.
        websocket: Option<Box<ConnectionIdentity>>,
        /// Whether the two identities matched.
        consistent: bool,
    },
    /// The handoff was minted: the decision is final from now on.
    Results,
    /// Sent by the processor's idle sweep: the decision is final unless the session changed
    /// after `idle_since` (its `updated_at` when the sweep found it idle).
    Idle {
        #[serde(serialize_with = "crate::time::ser")]
        idle_since: Timestamp,
    },
}

/// What one connection (the HTTP request or the WebSocket of the network check) shows of its
/// client. Members default to empty, and members this build does not know are kept, so an
/// identity written by another version reads and writes back unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ConnectionIdentity {
    pub accept_language: String,
    /// The `X-Forwarded-For` header as it arrived, empty without one.
    pub forwarded_for: String,
    /// Header names in the order they arrived, lower case.
    pub header_names: Vec<String>,
    pub ip: String,
    pub user_agent: String,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ConnectionIdentity {
    /// Whether two connections show the same client: the same address and the same browser.
    pub fn same_client(&self, other: &ConnectionIdentity) -> bool {
        self.ip == other.ip && self.user_agent == other.user_agent
    }
}

/// Records the processor could never process, each with why (see [`DeadLetter`]). Keyed like
/// the record it carries, so one session's dead letters keep their order.
pub const DEAD_TOPIC: &str = "collect.dead.v1";
/// Partitions of the dead-letter topic when Vigil creates it: few, it should stay near empty.
pub const DEAD_PARTITIONS: u32 = 1;
pub use crate::dead::DEAD_LETTER_SCHEMA;

/// Why a record was dead-lettered: a closed set, so it can label a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadReason {
    /// The session's stored row (or its processor state, or a row the fold reads beside it)
    /// does not decode.
    CorruptRow,
    /// The record, or the SDK batch it carries, does not decode.
    UnreadableRecord,
    /// An event the record caused is over the log's record size, so it can never be published.
    OversizeEvent,
}

impl DeadReason {
    pub const ALL: [DeadReason; 3] = [
        DeadReason::CorruptRow,
        DeadReason::UnreadableRecord,
        DeadReason::OversizeEvent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeadReason::CorruptRow => "corrupt_row",
            DeadReason::UnreadableRecord => "unreadable_record",
            DeadReason::OversizeEvent => "oversize_event",
        }
    }
}

/// One record of `collect.dead.v1` (see [`crate::dead::DeadLetter`]).
pub type DeadLetter = crate::dead::DeadLetter<DeadReason>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_agent_is_kept_whole_up_to_its_cap_and_cut_on_a_character_boundary() {
        let short = "Mozilla/5.0 (X11; Linux x86_64)";
        assert_eq!(kept_user_agent(short), (short, None));
        let exact = "a".repeat(MAX_USER_AGENT_BYTES);
        assert_eq!(kept_user_agent(&exact), (exact.as_str(), None));
        // 511 ASCII bytes, then a 3-byte character straddling the cap.
        let straddling = format!("{}€€", "a".repeat(MAX_USER_AGENT_BYTES - 1));
        let (kept, received) = kept_user_agent(&straddling);
        assert_eq!(kept, "a".repeat(MAX_USER_AGENT_BYTES - 1));
        assert_eq!(received, Some(straddling.len()));
    }

    #[test]
    fn a_dead_letter_carries_its_record_byte_for_byte() {
        let payload = b"\xff not json";
        let d = DeadLetter::of(
            BATCHES_TOPIC,
            3,
            42,
            b"sid_x",
            payload,
            DeadReason::UnreadableRecord,
            "expected value",
        );
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["reason"], "unreadable_record");
        assert_eq!(json["topic"], BATCHES_TOPIC);
        let back: DeadLetter = serde_json::from_value(json).unwrap();
        assert_eq!(back.payload().unwrap(), payload);
        assert_eq!(back.record_bytes, payload.len());
    }

    /// The server-made records as ingest and the idle sweep wrote them before they had a type
    /// (hand-built `json!`); records already in a log must still read, and the types must write
    /// the same documents.
    #[test]
    fn server_records_read_and_write_the_documents_written_before_their_type() {
        use serde_json::json;
        let identity = |ip: &str| {
            json!({
                "ip": ip,
                "forwarded_for": "",
                "user_agent": "Mozilla/5.0",
                "accept_language": "en-GB",
                "header_names": ["host", "user-agent"],
            })
        };
        let network = json!({
            "kind": "network_check",
            "http": identity("192.0.2.1"),
            "websocket": identity("192.0.2.1"),
            "consistent": true,
        });
        let no_socket = json!({
            "kind": "network_check",
            "http": identity("192.0.2.1"),
            "websocket": null,
            "consistent": false,
        });
        let results = json!({"kind": "results"});
        let idle = json!({"kind": "idle", "idle_since": "2026-11-21T23:18:46.123Z"});
        for today in [&network, &no_socket, &results, &idle] {
            let typed: ServerRecord = serde_json::from_value(today.clone()).unwrap();
            assert_eq!(&serde_json::to_value(&typed).unwrap(), today);
            // As text too: the log carries it as `observations`, unparsed.
            let raw = crate::raw::RawJson::encode(&typed).unwrap();
            assert_eq!(raw.decode::<ServerRecord>().unwrap(), typed);
        }
        let ServerRecord::NetworkCheck {
            http, websocket, ..
        } = serde_json::from_value(network).unwrap()
        else {
            panic!("a network check")
        };
        assert!(http.same_client(&websocket.unwrap()));
        assert_eq!(
            serde_json::from_value::<ServerRecord>(idle).unwrap(),
            ServerRecord::Idle {
                idle_since: "2026-11-21T23:18:46.123Z".parse().unwrap()
            }
        );
    }

    #[test]
    fn a_server_record_of_an_unknown_kind_or_shape_does_not_read() {
        use serde_json::json;
        for odd in [
            json!({"kind": "web_check"}),
            json!({"kind": "idle"}),
            json!({"kind": "idle", "idle_since": "yesterday"}),
            json!({"kind": "probes", "automation": {}}),
            json!({}),
        ] {
            assert!(
                serde_json::from_value::<ServerRecord>(odd.clone()).is_err(),
                "{odd}"
            );
        }
        // A member a newer ingest added to an identity is kept.
        let newer = json!({"ip": "192.0.2.1", "tls": {"ja4": "t13d"}});
        let identity: ConnectionIdentity = serde_json::from_value(newer.clone()).unwrap();
        let mut back = serde_json::to_value(&identity).unwrap();
        back.as_object_mut()
            .unwrap()
            .retain(|k, _| k == "ip" || k == "tls");
        assert_eq!(back, newer);
    }
}
