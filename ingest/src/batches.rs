//! `POST /v1/collect/sessions/{sessionId}/batches`: opens an encrypted batch, refuses replays
//! and batches of other sessions, appends it to the log, and acknowledges only once the log has
//! it. A batch refused for any reason writes nothing.

use axum::extract::State;
use axum::http::{StatusCode, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use edge::body::{FromPath, PathParams, Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::{ApiError, PublishableKey};
use schemas::collect::{BATCH_RECORD_SCHEMA, BatchRecord, BatchRequest, kept_user_agent};
use schemas::error::ErrorEnvelope;
use schemas::raw::RawJson;
use schemas::resources::Single;
use schemas::{ErrorCode, SessionId};
use serde::Serialize;

use crate::IngestState;
use crate::sessions::MAX_BATCH_BYTES;
use crate::transport::{self, BatchKey};
use crate::web_bot_auth::Request as WebBotAuthRequest;

/// A batch's acknowledgement (`object: collect_batch`): the log has it.
#[derive(Serialize, utoipa::ToSchema)]
struct Accepted {
    #[schema(value_type = String, pattern = "^collect_batch$")]
    object: &'static str,
    session_id: SessionId,
    seq: u64,
    accepted: bool,
}

/// An encrypted batch (schemas/collect.md, section 2).
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(plain = BatchBody::plain)]
pub(crate) struct BatchBody {
    /// The batch's number in its session, from 1, each above the last accepted.
    #[schema(minimum = 1)]
    seq: u64,
    /// AES-256-GCM of the batch's JSON under the session's batch key, base64url without
    /// padding (its unused last bits zero).
    #[schema(value_type = String, pattern = "^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-][AQgw]|[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048])?$")]
    #[member(parse = edge::body::base64url)]
    ciphertext: Vec<u8>,
}

impl BatchBody {
    /// The SDK's batches, `{"seq": 3, "ciphertext": "…"}`, read without a tree: the tree and
    /// the copy of the ciphertext into it were about 2.5% of a saturated ingest benchmark's
    /// samples. Anything else (a number spelt `3.0`, an escape in the ciphertext, a member
    /// twice or unknown, a body that is not an object) is left to the derived reader.
    fn plain(bytes: &[u8]) -> Option<Self> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Plain<'a> {
            seq: u64,
            ciphertext: &'a str,
        }
        // serde reads a struct from an array too; `read` takes only objects.
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return None;
        }
        let plain: Plain = serde_json::from_slice(bytes).ok()?;
        let ciphertext = URL_SAFE_NO_PAD.decode(plain.ciphertext).ok()?;
        (plain.seq >= 1).then_some(BatchBody {
            seq: plain.seq,
            ciphertext,
        })
    }
}

/// The batch's `kind`: the one member of a batch ingest reads. Only from an object (serde's
/// derived reading of a struct also takes a sequence, which would let `["probes"]` through as a
/// probes batch), and only from a batch already checked to be one JSON document: members are
/// skipped up to the first `kind` and the rest is not read again. The SDK sends `kind` first, so
/// each batch is read once here rather than twice (the second reading was 4% of the samples of
/// a saturated ingest benchmark). `None` when the batch is not an object, has no `kind`, or its
/// first `kind` is not a string.
fn batch_kind(batch: &RawJson) -> Option<std::borrow::Cow<'_, str>> {
    let mut kind = None;
    let mut reader = serde_json::Deserializer::from_str(batch.as_str());
    // The visitor returns as soon as it has the kind, so serde_json then finds the object's
    // remaining members unread and reports it. That error is expected, and so are those of a
    // batch with no kind to read (not an object, a kind that is not a string): `kind` is the
    // answer either way.
    let _ = serde::Deserializer::deserialize_map(&mut reader, LeadingKind(&mut kind));
    kind
}

/// Reads an object's members up to its first `kind` (see [`batch_kind`]).
struct LeadingKind<'a, 'de>(&'a mut Option<std::borrow::Cow<'de, str>>);

impl<'de> serde::de::Visitor<'de> for LeadingKind<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a batch object with its kind")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        /// A member's name, told apart without copying it.
        #[derive(serde::Deserialize)]
        #[serde(field_identifier, rename_all = "lowercase")]
        enum Member {
            Kind,
            #[serde(other)]
            Other,
        }
        /// The kind's text, borrowed from the batch unless it has escapes.
        #[derive(serde::Deserialize)]
        struct Text<'a>(#[serde(borrow)] std::borrow::Cow<'a, str>);

        while let Some(member) = map.next_key::<Member>()? {
            match member {
                Member::Kind => {
                    *self.0 = Some(map.next_value::<Text<'de>>()?.0);
                    return Ok(());
                }
                Member::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

fn invalid_batch() -> ApiError {
    ApiError::new(
        ErrorCode::BatchInvalid,
        "the batch does not open under this session's key with its number; it was altered or belongs elsewhere",
    )
}

#[utoipa::path(
    post,
    operation_id = "send_collect_batch",
    path = "/v1/collect/sessions/{sessionId}/batches",
    tag = "collect",
    params(("sessionId" = SessionId, Path, description = "The opened session.")),
    request_body = BatchBody,
    security(("publishable_key" = [])),
    responses(
        (status = 202, description = "The log has the batch.", body = Single<Accepted>),
        (status = 409, description = "`collect.batch_replayed`: this number was accepted already.", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: no such session for this key.", body = ErrorEnvelope),
        (status = 410, description = "`collect.session_expired`: open a new session.", body = ErrorEnvelope),
        (status = 503, description = "`service.unavailable`: the log cannot take it now; retry.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
pub(crate) async fn accept(
    State(state): State<IngestState>,
    caller: PublishableKey,
    params: PathParams,
    request: axum::http::request::Parts,
    Valid(body): Valid<BatchBody>,
) -> Result<Reply, ApiError> {
    let id: SessionId = FromPath::from_path(&params)?;
    let (method, uri, headers) = (&request.method, &request.uri, &request.headers);
    let BatchBody { seq, ciphertext } = body;
    // AES-GCM adds a 16-byte tag to the plaintext.
    if ciphertext.len() > MAX_BATCH_BYTES + 16 {
        return Err(ApiError::new(
            ErrorCode::TooLarge,
            format!("a batch holds at most {MAX_BATCH_BYTES} bytes"),
        ));
    }

    let ctx = &caller.ctx;
    let session = state.opened.get(&state, ctx, id).await?;
    if seq <= session.last_seq() {
        return Err(replayed());
    }
    let key = BatchKey(session.batch_key);
    let plaintext = transport::open_batch(&key, &id.to_string(), seq, &ciphertext)
        .map_err(|_| invalid_batch())?;
    // Checked to be one JSON object of a known kind, then passed on as text: the processor
    // parses it straight into its typed batch.
    let observations = RawJson::parse(&plaintext).map_err(|_| invalid_batch())?;
    let kind = match batch_kind(&observations) {
        Some(kind) if matches!(kind.as_ref(), "probes" | "interactions") => kind.into_owned(),
        _ => return Err(invalid_batch()),
    };

    // A verified signature's nonce is spent in the store, so its replay to any ingest process
    // of a fleet reads invalid.
    let checked = state.agents.check(
        &WebBotAuthRequest::new(
            method.as_str(),
            if ctx.client.tls { "https" } else { "http" },
            uri,
            headers,
        ),
        chrono::Utc::now().timestamp(),
    );
    let web_bot_auth = match checked {
        Some(checked) => Some(checked.settle(&state.auth.store).await),
        None => None,
    };
    // Kept to its first 512 bytes, with the length received when it was longer
    // (schemas/collect.md §6): the record and the stored session carry it on every batch.
    // Read as UTF-8, not only visible ASCII, so a long one is cut on a character's boundary.
    let (user_agent, user_agent_bytes) = kept_user_agent(
        headers
            .get(header::USER_AGENT)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
            .unwrap_or(""),
    );
    let record = BatchRecord {
        schema: BATCH_RECORD_SCHEMA,
        organization_id: ctx.organization.id,
        environment: ctx.environment(),
        session_id: id,
        seq,
        received_at: schemas::time::now(),
        request: BatchRequest {
            ip: ctx.client.ip.to_string(),
            user_agent: user_agent.to_owned(),
            header_names: headers.keys().map(|k| k.as_str().to_owned()).collect(),
            url: uri.to_string(),
            web_bot_auth,
            user_agent_bytes,
            http_version: Some(format!("{:?}", request.version)),
            tls: edge::transport::tls_client(
                headers,
                request.extensions.get(),
                &ctx.client,
                state.auth.client_fingerprint_header.as_ref(),
            ),
        },
        kind: Some(kind),
        observations,
    };
    // Sized for the batch and the request's few members at once, rather than grown by doubling
    // from empty (several reallocations and copies of the batch each).
    let mut payload = Vec::with_capacity(record.observations.as_str().len() + 1024);
    serde_json::to_writer(&mut payload, &record)
        .map_err(|e| ApiError::internal("batch record", e))?;
    if !(state.log_ready)() {
        return Err(ApiError::log_unavailable());
    }
    // The log first: a batch the log does not have is never acknowledged. A crash between the
    // two steps lets the SDK's retry append it again, which the processor ignores by (session,
    // number).
    state
        .log
        .try_append(&state.batches, id.to_string().as_bytes(), &payload)
        .await
        .map_err(|e| crate::append_failed("appending a batch", e))?;
    if !state.auth.store.advance_collect_seq(id, seq).await? {
        return Err(replayed());
    }
    session.accepted(seq);
    Ok(Reply::single(
        StatusCode::ACCEPTED,
        Accepted {
            object: "collect_batch",
            session_id: id,
            seq,
            accepted: true,
        },
    ))
}

fn replayed() -> ApiError {
    ApiError::new(
        ErrorCode::BatchReplayed,
        "a batch with this number was already accepted for this session",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(text: &str) -> Option<String> {
        let batch = RawJson::parse(text.as_bytes()).expect("test batches are JSON");
        batch_kind(&batch).map(|kind| kind.into_owned())
    }

    #[test]
    fn the_kind_is_read_wherever_it_stands_in_the_object() {
        assert_eq!(
            kind_of(r#"{"kind":"probes","timed_out":[]}"#).as_deref(),
            Some("probes")
        );
        // Members before it are skipped whole, a `kind` nested in them included.
        let late =
            r#"{"events":[{"kind":"probes","t":1}],"meta":{"kind":"x"},"kind":"interactions"}"#;
        assert_eq!(kind_of(late).as_deref(), Some("interactions"));
        assert_eq!(
            kind_of(r#"{"kind":"pro\u0062es"}"#).as_deref(),
            Some("probes")
        );
        assert_eq!(
            kind_of(r#"{"k\u0069nd":"probes"}"#).as_deref(),
            Some("probes")
        );
        assert_eq!(
            kind_of(" {\n \"kind\" : \"probes\" } ").as_deref(),
            Some("probes")
        );
        // The first of two stands; the rest of the batch is not read.
        assert_eq!(
            kind_of(r#"{"kind":"probes","kind":"interactions"}"#).as_deref(),
            Some("probes")
        );
    }

    #[test]
    fn a_batch_without_a_string_kind_in_an_object_has_none() {
        for text in [
            r#"{}"#,
            r#"{"events":[{"kind":"probes"}]}"#,
            r#"{"kind":5}"#,
            r#"{"kind":null}"#,
            r#"{"kind":["probes"]}"#,
            // Only the first kind counts, even when a later one would do.
            r#"{"kind":5,"kind":"probes"}"#,
            r#"{"Kind":"probes"}"#,
            r#"["probes"]"#,
            r#"[{"kind":"probes"}]"#,
            r#""probes""#,
            "null",
        ] {
            assert_eq!(kind_of(text), None, "{text}");
        }
    }

    /// What the usual reading (every problem reported) makes of a body: the value or the
    /// error's fields.
    fn read_usual(body: &str) -> Result<(u64, Vec<u8>), serde_json::Value> {
        let object = match serde_json::from_str(body) {
            Ok(serde_json::Value::Object(map)) => edge::body::JsonObject(map),
            other => return Err(serde_json::json!({ "not an object": format!("{other:?}") })),
        };
        BatchBody::from_object(object)
            .map(|b| (b.seq, b.ciphertext))
            .map_err(|e| serde_json::to_value(e.details).unwrap())
    }

    #[test]
    fn the_plain_reading_takes_only_what_the_usual_one_takes_and_reads_it_the_same() {
        let plain = [
            r#"{"seq":3,"ciphertext":"AAEC"}"#,
            r#"{"ciphertext":"AAEC","seq":1}"#,
            " {\n \"seq\" : 18446744073709551615 , \"ciphertext\" : \"\" } ",
            r#"{"s\u0065q":2,"ciphertext":"AAEC"}"#,
        ];
        for body in plain {
            let read = BatchBody::read_plain(body.as_bytes())
                .unwrap_or_else(|| panic!("{body} is read plainly"));
            assert_eq!(Ok((read.seq, read.ciphertext)), read_usual(body), "{body}");
        }
        // Each of these goes the usual way: some are accepted there, the rest refused with
        // their problems named.
        let usual = [
            r#"{"seq":3.0,"ciphertext":"AAEC"}"#,
            r#"{"seq":3,"ciphertext":"AA\u0045C"}"#,
            r#"{"seq":3,"seq":4,"ciphertext":"AAEC"}"#,
            r#"{"seq":3,"ciphertext":"AAEC","extra":1}"#,
            r#"{"seq":0,"ciphertext":"AAEC"}"#,
            r#"{"seq":-1,"ciphertext":"AAEC"}"#,
            r#"{"seq":3,"ciphertext":"AAE="}"#,
            r#"{"seq":3,"ciphertext":"AA+C"}"#,
            r#"{"seq":3}"#,
            r#"{"ciphertext":"AAEC"}"#,
            r#"{"seq":"3","ciphertext":"AAEC"}"#,
            r#"{"seq":3,"ciphertext":null}"#,
            r#"[3,"AAEC"]"#,
            r#"{"seq":3,"ciphertext":"AAEC"} {}"#,
            r#"{"seq":1e0,"ciphertext":"AAEC"}"#,
            r#"{"seq":-0,"ciphertext":"AAEC"}"#,
            r#"{"seq":18446744073709551616,"ciphertext":"AAEC"}"#,
            "\u{feff}{\"seq\":3,\"ciphertext\":\"AAEC\"}",
            r#"{"seq":3,"ciphert\u0065xt":"AAEC","ciphertext":"AAEC"}"#,
        ];
        for body in usual {
            assert!(
                BatchBody::read_plain(body.as_bytes()).is_none(),
                "{body} is not read plainly"
            );
        }
        // Those the usual reading accepts: what the plain one would have had to agree with.
        assert_eq!(read_usual(usual[0]), Ok((3, vec![0, 1, 2])));
        assert_eq!(read_usual(usual[1]), Ok((3, vec![0, 1, 2])));
        assert!(read_usual(usual[4]).is_err());
    }

    /// Bodies made of the members' likely spellings, in any order and number, with any spacing:
    /// whatever the plain reading takes, the usual reading takes too, as the same value.
    mod agreement {
        use proptest::prelude::*;
        use proptest::strategy::ValueTree;

        use super::*;

        /// A member: most often a well-formed `seq` or `ciphertext` (so that many bodies are
        /// ones the plain reading takes), else a likely misspelling of a name or a value.
        fn member() -> impl Strategy<Value = String> {
            let name = prop::sample::select(vec![
                "\"seq\"",
                "\"ciphertext\"",
                "\"s\\u0065q\"",
                "\"ciphert\\u0065xt\"",
                "\"Seq\"",
                "\"extra\"",
            ]);
            let value = prop::sample::select(vec![
                "1",
                "0",
                "-1",
                "3.0",
                "1e0",
                "-0",
                "18446744073709551615",
                "18446744073709551616",
                "\"3\"",
                "null",
                "\"AAEC\"",
                "\"\"",
                "\"AA\\u0045C\"",
                "\"AAE=\"",
                "\"AA+C\"",
                "[]",
            ]);
            let space = " {0,2}";
            prop_oneof![
                3 => (any::<u64>(), space).prop_map(|(n, s)| format!("{s}\"seq\"{s}:{s}{n}")),
                3 => (prop::collection::vec(any::<u8>(), 0..9), space).prop_map(|(bytes, s)| {
                    let c = URL_SAFE_NO_PAD.encode(bytes);
                    format!("{s}\"ciphertext\"{s}:{s}\"{c}\"")
                }),
                1 => ("[A-Za-z0-9_-]{0,12}", space)
                    .prop_map(|(c, s)| format!("{s}\"ciphertext\"{s}:{s}\"{c}\"")),
                2 => (name, value, space).prop_map(|(n, v, s)| format!("{s}{n}{s}:{s}{v}")),
            ]
        }

        fn body() -> impl Strategy<Value = String> {
            (
                prop_oneof![
                    3 => prop::collection::vec(member(), 2..=2),
                    1 => prop::collection::vec(member(), 0..4),
                ],
                "[ \n]{0,2}",
                prop::sample::select(vec!["", " ", "\n", " {}", "x"]),
            )
                .prop_map(|(members, lead, tail)| format!("{lead}{{{}}}{tail}", members.join(",")))
        }

        #[test]
        fn the_plain_reading_agrees_with_the_usual_one() {
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let (mut plain, cases) = (0, 2_000);
            for _ in 0..cases {
                let body = body().new_tree(&mut runner).unwrap().current();
                if let Some(read) = BatchBody::read_plain(body.as_bytes()) {
                    assert_eq!(Ok((read.seq, read.ciphertext)), read_usual(&body), "{body}");
                    plain += 1;
                }
            }
            // Not vacuous: a good share of the bodies took the plain way.
            assert!(
                plain > cases / 40,
                "only {plain} of {cases} bodies were read plainly"
            );
        }
    }
}
