//! One attempt on the wire (docs/architecture.md#webhooks): the event's JSON POSTed to the
//! endpoint's URL with the Standard Webhooks headers, within the attempt timeout (15 s), following
//! no redirects and using no proxy, reading at most 4 KiB of the answer. The outbound rule
//! (`crate::outbound`) is applied to the addresses actually connected to: names resolve through
//! [`PublicOnly`], which hands the connector only public addresses, and an address written in the
//! URL is checked before sending. So a name whose DNS changed to a private address since the
//! endpoint was created is refused at delivery.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::outbound;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use schemas::time::Timestamp;
use serde::Serialize;
use store::EventRecord;

use crate::{MAX_RESPONSE_BODY, Outcome};

/// The attempt timeout (docs/architecture.md#webhooks): an endpoint that has not answered within it
/// has failed this attempt.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// The body of a delivery: the event in the interface's shape, less `webhook_deliveries` (the
/// deliveries are the receiver's own business, and would change between retries).
#[derive(Serialize)]
struct Payload<'a> {
    id: schemas::EventId,
    object: &'static str,
    #[serde(rename = "type")]
    event_type: schemas::events::EventType,
    subject: &'a schemas::events::EventSubject,
    data: &'a serde_json::Value,
    #[serde(serialize_with = "schemas::time::ser")]
    created_at: Timestamp,
}

/// The bytes a delivery of `event` sends (and signs); the same on every retry.
pub fn body(event: &EventRecord) -> Vec<u8> {
    serde_json::to_vec(&Payload {
        id: event.id,
        object: "event",
        event_type: event.event_type,
        subject: &event.subject,
        data: &event.data,
        created_at: event.created_at,
    })
    .expect("an event serialises")
}

/// Name lookups running at once, over all endpoints.
const LOOKUPS: usize = 4;
static LOOKUP_THREADS: std::sync::LazyLock<Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Semaphore::new(LOOKUPS)));
/// How long a name lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves endpoint names to their public addresses only (all of them when private
/// destinations are allowed); a name with none is an error, so nothing is connected to.
struct PublicOnly {
    allow_private: bool,
}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            // The system resolver blocks a thread of the pool the store's writes run on; the
            // permit travels with the lookup and is released only when its thread is done, so
            // names that never answer tie up at most LOOKUPS threads.
            let permit = LOOKUP_THREADS
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| "the resolver is closed")?;
            let name = host.clone();
            let lookup = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), 0))
                    .map(Iterator::collect::<Vec<SocketAddr>>)
            });
            // The delivery's error is the tenant's to read, so a name that resolves inside, to
            // nothing, or not in time reads the same there: what it resolved to stays in the
            // operator's log (docs/webhooks.md#registering-an-endpoint).
            let refused = |detail: String| {
                tracing::warn!(%host, %detail, "delivery refused: the host resolves to no public address");
                format!(
                    "`{host}` does not resolve to a public address (loopback, private, \
                     link-local and reserved addresses are refused); not delivered"
                )
            };
            let all = match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
                Ok(Ok(Ok(all))) => all,
                Ok(Ok(Err(e))) => return Err(refused(e.to_string()).into()),
                // The lookup's thread failed: nothing the host's answer said.
                Ok(Err(e)) => return Err(e.into()),
                Err(_) => {
                    return Err(refused(format!("no answer within {LOOKUP_TIMEOUT:?}")).into());
                }
            };
            let kept: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| allow_private || outbound::is_public(a.ip()))
                .collect();
            if kept.is_empty() {
                let shown = all
                    .first()
                    .map_or("nothing".to_owned(), |a| a.ip().to_string());
                return Err(refused(format!("resolves to {shown}")).into());
            }
            Ok(Box::new(kept.into_iter()) as Addrs)
        })
    }
}

/// Sends deliveries; one per dispatcher, its connections pooled per endpoint host.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    allow_private: bool,
    /// The most of an answer read: a delivery keeps 4 KiB; Gate reads a service's variables.
    max_answer: usize,
}

/// What one attempt sends.
pub struct Request<'a> {
    pub url: &'a str,
    /// `webhook-id`: the event's id, the same on every retry and to every endpoint.
    pub id: &'a str,
    pub body: Arc<Vec<u8>>,
    /// The signing keys, newest first (two while a secret rotates).
    pub keys: &'a [Vec<u8>],
}

impl Sender {
    pub fn new(allow_private: bool, timeout: Duration) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .dns_resolver(PublicOnly { allow_private })
            .user_agent(concat!("Vigil-Webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .expect("the webhook client builds");
        Sender {
            client,
            allow_private,
            max_answer: MAX_RESPONSE_BODY,
        }
    }

    /// The same sender reading up to `bytes` of each answer.
    pub fn reading_up_to(mut self, bytes: usize) -> Self {
        self.max_answer = bytes;
        self
    }

    /// One attempt, signed at `now`.
    pub async fn send(&self, request: Request<'_>, now: Timestamp) -> Outcome {
        let url = match outbound::check_url(request.url, self.allow_private) {
            Ok(url) => url,
            Err(e) => return Outcome::NoAnswer(format!("the endpoint URL {e}")),
        };
        // An address in the URL is not resolved, so the resolver's rule is applied here.
        if !self.allow_private
            && let Some(ip) = literal_address(&url)
            && !outbound::is_public(ip)
        {
            return Outcome::NoAnswer(format!(
                "{ip} is a loopback, private, link-local or reserved address; not delivered"
            ));
        }
        let timestamp = now.timestamp();
        let keys: Vec<&[u8]> = request.keys.iter().map(Vec::as_slice).collect();
        let signature =
            crate::signing::signature_header(&keys, request.id, timestamp, &request.body);
        let sent = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", request.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(reqwest::Body::from(request.body.as_ref().clone()))
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(e) => return Outcome::NoAnswer(describe(&e)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, now));
        // The answer is read up to what is kept, and no further: an endpoint cannot make the
        // dispatcher read (or hold) more.
        let mut body = Vec::new();
        while body.len() < self.max_answer {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break,
                // The status arrived: the answer counts even if its body was cut short.
                Err(_) => break,
            }
        }
        body.truncate(self.max_answer);
        Outcome::Answered {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
            retry_after,
        }
    }
}

/// The address a URL names directly, if it names one rather than a host name.
fn literal_address(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// `Retry-After` as a wait: seconds, or an HTTP date (from `now`).
fn retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    if let Ok(seconds) = value.trim().parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value.trim()).ok()?;
    let now = std::time::SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(now.timestamp_millis()).ok()?);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// A failed request in a sentence: the timeout, or the innermost cause (a refused address, a
/// refused connection, a TLS failure), without the URL (the delivery names its endpoint).
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "no answer within the attempt timeout".into();
    }
    let mut cause: &dyn std::error::Error = e;
    let mut text = e.to_string();
    while let Some(next) = cause.source() {
        text = next.to_string();
        cause = next;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = schemas::time::now();
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        let in_a_minute = std::time::SystemTime::UNIX_EPOCH
            + Duration::from_secs(u64::try_from(now.timestamp()).unwrap() + 61);
        let date = httpdate::fmt_http_date(in_a_minute);
        let wait = retry_after(&date, now).unwrap();
        assert!(
            wait > Duration::from_secs(59) && wait <= Duration::from_secs(61),
            "{wait:?}"
        );
        assert_eq!(retry_after("soon", now), None);
    }

    #[test]
    fn the_body_is_the_event_without_its_deliveries() {
        let event = EventRecord {
            id: schemas::EventId::generate(),
            organization_id: schemas::OrgId::generate(),
            environment: schemas::credential::Environment::Live,
            event_type: schemas::events::EventType::WebhookTest,
            subject: schemas::events::EventSubject {
                kind: "webhook_endpoint".into(),
                id: "we_1".into(),
            },
            data: serde_json::json!({"message": "hi"}),
            created_at: schemas::time::now(),
        };
        let body: serde_json::Value = serde_json::from_slice(&body(&event)).unwrap();
        assert_eq!(body["id"], event.id.to_string());
        assert_eq!(body["type"], "webhook.test");
        assert_eq!(body["object"], "event");
        assert_eq!(body["data"]["message"], "hi");
        assert!(body.get("webhook_deliveries").is_none());
        assert!(body.get("organization_id").is_none());
    }
}
