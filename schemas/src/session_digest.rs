//! A session as the sessions export reads it (docs/analysts.md#sessions): its request and its
//! latest decision flattened into a few hundred bytes. The store keeps one beside each
//! session's row, written with it, so an export reads these rather than decoding every
//! session's whole state and decision, which made it thirty times slower (docs/performance.md#exports).
//! Enumerated values are kept as the JSON API spells them.

use serde::{Deserialize, Serialize};

use crate::decision::{AutomationStatus, Category, DecisionStatus, Manipulation, Phase, Verdict};
use crate::ids::{SessionId, VisitorId};
use crate::network::{NetworkFacts, Vpn};
use crate::raw::RawJson;
use crate::session_view::{ScreenView, SessionView, WebBotAuthOutcome};
use crate::time::Timestamp;

/// The categories of [`DecisionDigest::scores`], in order.
pub const CATEGORIES: [Category; 5] = [
    Category::Automation,
    Category::Integrity,
    Category::Network,
    Category::Behavior,
    Category::Consistency,
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDigest {
    pub session_id: SessionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visitor_id: Option<VisitorId>,
    /// Milliseconds since the epoch, the precision of every stored time.
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub url: String,
    pub user_agent: String,
    pub ip_address: String,
    /// CSS pixels, as the browser reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_width: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_height: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_bot_auth: Option<String>,
    /// Where the operator's IP data places the address (`crate::network`); each absent without
    /// the data that gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asn: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asn_organization: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosting: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tor_exit: Option<bool>,
    /// The VPN judgement's `result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpn: Option<bool>,
    /// The TLS client's JA4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ja4: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<DecisionDigest>,
}

/// The latest decision, flattened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecisionDigest {
    pub decided_at_ms: i64,
    pub automation_status: String,
    pub verdict: String,
    pub decision_status: String,
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manipulation: Option<String>,
    pub risk_score: u8,
    pub rule: String,
    /// By [`CATEGORIES`].
    pub scores: [Option<u8>; 5],
    /// The slugs of the signals that fired.
    pub signals: Vec<String>,
}

/// What a session's row says of its request.
pub struct Request<'a> {
    pub session_id: SessionId,
    pub visitor_id: Option<VisitorId>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub url: &'a str,
    pub user_agent: &'a str,
    pub ip_address: &'a str,
}

impl SessionDigest {
    /// The digest of a session: its request, its latest decision, and the browser's screen and
    /// the signed agent's outcome from the processor's state (`parts`: what the state's parts
    /// show, read in turn; the first with a member gives it).
    pub fn of(
        request: Request<'_>,
        decision: Option<DecisionDigest>,
        parts: &[StateDigest],
    ) -> Self {
        let screen = parts.iter().find_map(|p| p.screen);
        let network = parts.iter().find_map(|p| p.network.as_ref());
        let asn = network.and_then(|n| n.asn.as_ref());
        let side = |side: Option<f64>| {
            side.filter(|v| v.is_finite() && *v >= 0.0)
                .map(|v| v as i64)
        };
        SessionDigest {
            session_id: request.session_id,
            visitor_id: request.visitor_id,
            created_at_ms: request.created_at.timestamp_millis(),
            updated_at_ms: request.updated_at.timestamp_millis(),
            url: request.url.to_owned(),
            user_agent: request.user_agent.to_owned(),
            ip_address: request.ip_address.to_owned(),
            screen_width: screen.and_then(|[width, _]| side(width)),
            screen_height: screen.and_then(|[_, height]| side(height)),
            web_bot_auth: parts.iter().find_map(|p| p.web_bot_auth).and_then(name),
            asn: asn.map(|a| a.number),
            asn_organization: asn.and_then(|a| a.organization.clone()),
            country: network.and_then(|n| n.country.clone()),
            hosting: network.and_then(|n| n.hosting),
            tor_exit: network.and_then(|n| n.tor_exit),
            vpn: parts.iter().find_map(|p| p.vpn),
            ja4: parts.iter().find_map(|p| p.ja4.clone()),
            decision,
        }
    }
}

/// What the digest reads of one part of a session's state: a few bytes, so a store that saves
/// a part unchanged can keep this beside the part's hash instead of reading the part again
/// (the settled part, the probes and kept events, is most of a state).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StateDigest {
    /// The probes' `screen` (width, height), when the part has one.
    pub screen: Option<[Option<f64>; 2]>,
    pub web_bot_auth: Option<WebBotAuthOutcome>,
    /// The context's network facts, when the part has them.
    pub network: Option<NetworkFacts>,
    /// The context's VPN judgement's `result`.
    pub vpn: Option<bool>,
    /// The context's request's TLS client's JA4.
    pub ja4: Option<String>,
}

impl StateDigest {
    /// What `view` shows of the digest's members.
    pub fn of(view: &SessionView) -> Self {
        StateDigest {
            screen: view
                .probes()
                .and_then(|p| p.screen.as_ref())
                .map(|s| [s.width, s.height]),
            web_bot_auth: view.context().and_then(|c| c.web_bot_auth),
            network: view.context().and_then(|c| c.network.clone()),
            vpn: view.context().and_then(|c| c.vpn).map(|v| v.result),
            ja4: view
                .context()
                .and_then(|c| c.request.as_ref())
                .and_then(|r| r.tls.as_ref())
                .and_then(|t| t.ja4.clone()),
        }
    }

    /// The same as `of(&SessionView::of(part))`, but decoding only the members on the way to
    /// the digest's: the rest are skipped rather than built into trees, which the whole view
    /// does for every member it knows. A member on the way of an unexpected shape (not an
    /// object, or named twice) fails this read, and the whole view is read instead, so both
    /// agree on any document.
    pub fn read(part: &RawJson) -> Self {
        #[derive(Deserialize)]
        struct Part {
            #[serde(default)]
            observations: Option<Object<Observations>>,
            #[serde(default)]
            context: Option<Object<Context>>,
        }
        #[derive(Deserialize)]
        struct Observations {
            #[serde(default)]
            probes: Option<Object<Probes>>,
        }
        #[derive(Deserialize)]
        struct Probes {
            #[serde(default, deserialize_with = "crate::raw::lenient")]
            screen: Option<ScreenView>,
        }
        #[derive(Deserialize)]
        struct Context {
            #[serde(default, deserialize_with = "crate::raw::lenient")]
            web_bot_auth: Option<WebBotAuthOutcome>,
            #[serde(default, deserialize_with = "crate::raw::lenient")]
            network: Option<NetworkFacts>,
            #[serde(default, deserialize_with = "crate::raw::lenient")]
            vpn: Option<Vpn>,
            #[serde(default)]
            request: Option<Object<Request>>,
        }
        #[derive(Deserialize)]
        struct Request {
            #[serde(default, deserialize_with = "crate::raw::lenient")]
            tls: Option<crate::collect::TlsClient>,
        }
        match part.decode::<Object<Part>>() {
            Ok(Object(p)) => StateDigest {
                screen: p
                    .observations
                    .and_then(|o| o.0.probes)
                    .and_then(|p| p.0.screen)
                    .map(|s| [s.width, s.height]),
                web_bot_auth: p.context.as_ref().and_then(|c| c.0.web_bot_auth),
                network: p.context.as_ref().and_then(|c| c.0.network.clone()),
                vpn: p.context.as_ref().and_then(|c| c.0.vpn).map(|v| v.result),
                ja4: p
                    .context
                    .and_then(|c| c.0.request)
                    .and_then(|r| r.0.tls)
                    .and_then(|t| t.ja4),
            },
            Err(_) => StateDigest::of(&SessionView::of(part)),
        }
    }
}

impl DecisionDigest {
    /// The digest of a stored decision, read without decoding what it does not show: the whole
    /// `Decision` keeps every member a newer writer added (`extra`), and gathering those made
    /// the whole read several times this one. A document that the whole read refuses only in
    /// members the digest does not show (a highlight missing, say) still gives its digest.
    pub fn read(raw: &RawJson) -> Option<Self> {
        #[derive(Deserialize)]
        struct Shown {
            automation_status: AutomationStatus,
            decision_status: DecisionStatus,
            evaluated_at: Timestamp,
            manipulation: Option<Manipulation>,
            phase: Phase,
            risk_score: u8,
            rule: String,
            score_breakdown: Object<Breakdown>,
            signals_fired: Vec<Object<Fired>>,
            verdict: Verdict,
        }
        #[derive(Deserialize)]
        struct Breakdown {
            categories: std::collections::BTreeMap<Category, u8>,
        }
        #[derive(Deserialize)]
        struct Fired {
            signal: String,
        }
        let Object(d) = raw.decode::<Object<Shown>>().ok()?;
        Some(DecisionDigest {
            decided_at_ms: d.evaluated_at.timestamp_millis(),
            automation_status: name(d.automation_status).unwrap_or_default(),
            verdict: name(d.verdict).unwrap_or_default(),
            decision_status: name(d.decision_status).unwrap_or_default(),
            phase: name(d.phase).unwrap_or_default(),
            manipulation: d.manipulation.and_then(name),
            risk_score: d.risk_score,
            rule: d.rule,
            scores: CATEGORIES.map(|c| d.score_breakdown.0.categories.get(&c).copied()),
            signals: d.signals_fired.into_iter().map(|s| s.0.signal).collect(),
        })
    }
}

/// A struct read from a JSON object only. A derived struct also reads an array, its members by
/// position, where the whole reads these narrow ones stand in for do not (a `Decision` takes its
/// newer writer's members from a map; a lenient view's member at a position is another member).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Members<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Members(std::marker::PhantomData))
            .map(Object)
    }
}

/// An enumerated value's name as the JSON API spells it.
fn name(value: impl Serialize) -> Option<String> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The narrow read agrees with the whole view on documents of every shape a stored state
    /// may take: members present, absent, null, of the wrong type, or named twice.
    #[test]
    fn the_narrow_read_agrees_with_the_whole_view() {
        let screen = json!({"width": 1920.0, "height": 1080.0, "orientation": "landscape"});
        let documents = [
            json!({"observations": {"probes": {"screen": screen}}, "context": {"web_bot_auth": "verified"}}),
            json!({"observations": {"probes": {"screen": {"width": "wide", "height": 800}}, "interaction_batches": 3}}),
            json!({"observations": {"probes": {"screen": 7, "automation": {"webdriver": true}}}}),
            json!({"observations": {"probes": null}, "context": {"web_bot_auth": "telepathic"}}),
            json!({"observations": "none", "context": {"web_bot_auth": "absent"}}),
            json!({"observations": {"probes": [1, 2]}, "context": []}),
            // Arrays where objects belong: a derived struct would read them by position.
            json!({"context": ["verified"]}),
            json!({"context": [{"header_names": ["a"]}, [], true, "verified"]}),
            json!({"observations": {"probes": [{"width": 390}]}}),
            json!({"observations": [{"screen": {"width": 390}}]}),
            json!([{"probes": {"screen": {"width": 390}}}, {"web_bot_auth": "verified"}]),
            json!({"observations": null, "context": null, "events": [{"t": 1}]}),
            json!({"context": {"web_bot_auth": "invalid", "request": {"header_names": ["a"]}}}),
            json!({"context": {"network": {"asn": {"number": 16509, "organization": "AMAZON-02"}, "country": "US", "hosting": true}, "vpn": {"result": true, "confidence": "medium", "methods": {"hosting_desktop": true}}}}),
            json!({"context": {"network": {"asn": "AS1", "country": 7}, "vpn": {"result": "yes"}}}),
            json!({"context": {"request": {"tls": {"ja4": "t13d1516h2_8daaf6152771_02713d6af862", "source": "listener"}}}}),
            json!({"context": {"request": {"tls": {"ja4": 7}}}}),
            json!({"context": {"request": [{"tls": {"ja4": "x"}}]}}),
            json!([1, 2, 3]),
            json!("state"),
            json!(null),
            json!({}),
        ];
        let mut texts: Vec<String> = documents.iter().map(|d| d.to_string()).collect();
        // Named twice: at the top the whole view refuses the document and reads as empty; within
        // a member it keeps the last. The narrow read refuses both and defers to it.
        texts.push(
            r#"{"context": {"web_bot_auth": "verified"}, "context": {"web_bot_auth": "invalid"}}"#
                .into(),
        );
        texts
            .push(r#"{"context": {"web_bot_auth": "verified", "web_bot_auth": "invalid"}}"#.into());
        for text in texts {
            let part = RawJson::parse(text.as_bytes()).unwrap();
            assert_eq!(
                StateDigest::read(&part),
                StateDigest::of(&SessionView::of(&part)),
                "{text}"
            );
        }
        let part = RawJson::parse(documents[0].to_string().as_bytes()).unwrap();
        assert_eq!(
            StateDigest::read(&part),
            StateDigest {
                screen: Some([Some(1920.0), Some(1080.0)]),
                web_bot_auth: Some(WebBotAuthOutcome::Verified),
                network: None,
                vpn: None,
                ja4: None,
            },
            "the check above compares members that are there"
        );
        // And the network members, so that both reads dropping them would show.
        let network = RawJson::encode(&json!({"context": {
            "network": {"asn": {"number": 16509, "organization": "AMAZON-02"}},
            "vpn": {"result": true, "confidence": "medium", "methods": {"hosting_desktop": true}},
        }}))
        .unwrap();
        let read = StateDigest::read(&network);
        assert_eq!(read.network.unwrap().asn.unwrap().number, 16509);
        assert_eq!(read.vpn, Some(true));
        let tls = RawJson::encode(&json!({"context": {"request": {"tls": {
            "ja4": "t13d1516h2_8daaf6152771_02713d6af862", "source": "listener",
        }}}}))
        .unwrap();
        assert_eq!(
            StateDigest::read(&tls).ja4.as_deref(),
            Some("t13d1516h2_8daaf6152771_02713d6af862")
        );
    }

    /// A decision's digest reads what it shows, past every member it does not (a newer
    /// writer's among them).
    #[test]
    fn a_decisions_digest_reads_only_what_it_shows() {
        let mut decision = json!({
            "automation_status": "automated",
            "verdict": "bot",
            "risk_score": 87,
            "phase": "final",
            "decision_status": "final",
            "manipulation": "runtime_tampering",
            "score_breakdown": {"categories": {"automation": 60, "integrity": 40, "consistency": 12}},
            "highlights": [{"kind": "concerning", "sentence": "Automated.",
                            "evidence": {"signal": "webdriver", "observed": true}}],
            "signals_fired": [
                {"signal": "webdriver", "category": "automation", "weight": 60, "observed": true},
                {"signal": "tampered_natives", "category": "integrity", "weight": 40,
                 "observed": {"functions": ["toString"]}, "first_seen_seq": 1},
            ],
            "rule": "automation_markers",
            "event_id": crate::ids::DecisionId::generate(),
            "evaluated_at": "2026-11-21T23:18:46.123Z",
            "evaluation_duration_ms": 0.41,
            "is_provisional": false,
            "confidence": 0.93,
        });
        let read = |d: &serde_json::Value| DecisionDigest::read(&RawJson::encode(d).unwrap());
        let digest = read(&decision).unwrap();
        assert_eq!(
            digest,
            DecisionDigest {
                decided_at_ms: 1_795_303_126_123,
                automation_status: "automated".into(),
                verdict: "bot".into(),
                decision_status: "final".into(),
                phase: "final".into(),
                manipulation: Some("runtime_tampering".into()),
                risk_score: 87,
                rule: "automation_markers".into(),
                scores: [Some(60), Some(40), None, None, Some(12)],
                signals: vec!["webdriver".into(), "tampered_natives".into()],
            }
        );
        decision["manipulation"] = serde_json::Value::Null;
        assert_eq!(read(&decision).unwrap().manipulation, None);
        // What the digest does not show need not be there.
        decision.as_object_mut().unwrap().remove("highlights");
        assert_eq!(read(&decision).unwrap().risk_score, 87);
        // Its members by position are not a decision.
        let by_position = json!([
            "automated", "final", "2026-11-21T23:18:46.123Z", null, "final", 87,
            "automation_markers", {"categories": {}}, [], "bot"
        ]);
        assert_eq!(read(&by_position), None);
        let mut fired_by_position = decision.clone();
        fired_by_position["signals_fired"] = json!([["webdriver"]]);
        assert_eq!(read(&fired_by_position), None);
        decision["verdict"] = json!("maybe");
        assert_eq!(
            read(&decision),
            None,
            "a member it shows, of no known value"
        );
        assert_eq!(read(&json!({"verdict": "bot"})), None);
    }
}
