//! Which deliveries an event is to have (docs/architecture.md: #webhooks, #dispatcher): one per
//! active endpoint of its organization and environment that subscribes to its type; a
//! `webhook.test` only to the endpoint its `data.endpoint_id` names. Pure: the dispatcher reads the
//! endpoints and stores the result (`create_webhook_deliveries` keeps one per event and endpoint,
//! so fanning the same event out again, after a redelivery from the log, creates nothing twice).

use schemas::events::{EventType, LoggedEvent};
use schemas::time::Timestamp;
use store::{EndpointStatus, WebhookDeliveryRecord, WebhookEndpointRecord};

/// The pending deliveries of `logged`, first attempt due at `now`.
pub fn fan_out(
    logged: &LoggedEvent,
    endpoints: &[WebhookEndpointRecord],
    now: Timestamp,
) -> Vec<WebhookDeliveryRecord> {
    let event = &logged.event;
    let only = match event.event_type {
        EventType::WebhookTest => Some(event.data.get("endpoint_id").and_then(|v| v.as_str())),
        _ => None,
    };
    endpoints
        .iter()
        .filter(|e| {
            e.organization_id == logged.organization_id
                && e.environment == logged.environment
                && e.status == EndpointStatus::Active
        })
        .filter(|e| match only {
            // A test goes to its endpoint whatever that subscribes to, and nowhere else.
            Some(target) => target == Some(e.id.to_string().as_str()),
            None => e.event_types.contains(&event.event_type),
        })
        .map(|e| {
            WebhookDeliveryRecord::pending(
                logged.organization_id,
                logged.environment,
                (event.id, event.event_type),
                e.id,
                now,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use schemas::credential::Environment;
    use schemas::events::{Event, EventSubject};
    use schemas::ids::{OrgId, WebhookEndpointId};
    use serde_json::json;
    use store::DeliveryStatus;

    use super::*;

    fn endpoint(org: OrgId, env: Environment, types: &[EventType]) -> WebhookEndpointRecord {
        let now = schemas::time::now();
        WebhookEndpointRecord {
            id: WebhookEndpointId::generate(),
            organization_id: org,
            environment: env,
            name: "e".into(),
            url: "https://93.184.216.34/".into(),
            status: EndpointStatus::Active,
            event_types: types.to_vec(),
            sealed_secret: Vec::new(),
            previous_secret: None,
            created_at: now,
            updated_at: now,
        }
    }

    fn logged(
        org: OrgId,
        env: Environment,
        event_type: EventType,
        data: serde_json::Value,
    ) -> LoggedEvent {
        LoggedEvent::new(
            org,
            env,
            Event {
                id: schemas::EventId::generate(),
                object: "event".into(),
                event_type,
                subject: EventSubject {
                    kind: "session".into(),
                    id: "sid_x".into(),
                },
                data,
                webhook_deliveries: Vec::new(),
                created_at: schemas::time::now(),
            },
        )
    }

    #[test]
    fn an_event_goes_to_the_active_subscribed_endpoints_of_its_tenancy() {
        let (org, env) = (OrgId::generate(), Environment::Live);
        let result = EventType::SessionResultPersisted;
        let subscribed = endpoint(org, env, &[result, EventType::WebhookTest]);
        let mut disabled = endpoint(org, env, &[result]);
        disabled.status = EndpointStatus::Disabled;
        let endpoints = [
            subscribed.clone(),
            disabled,
            endpoint(org, env, &[EventType::SessionFingerprintCalculated]),
            endpoint(org, Environment::Test, &[result]),
            endpoint(OrgId::generate(), env, &[result]),
        ];
        let event = logged(org, env, result, json!({}));
        let now = schemas::time::now();
        let deliveries = fan_out(&event, &endpoints, now);
        assert_eq!(deliveries.len(), 1);
        let d = &deliveries[0];
        assert_eq!((d.endpoint_id, d.event_id), (subscribed.id, event.event.id));
        assert_eq!(d.status, DeliveryStatus::Pending);
        assert_eq!((d.attempts, d.next_attempt_at), (0, Some(now)));
    }

    #[test]
    fn a_test_event_goes_only_to_its_endpoint_whatever_it_subscribes_to() {
        let (org, env) = (OrgId::generate(), Environment::Test);
        let target = endpoint(org, env, &[EventType::SessionResultPersisted]);
        let other = endpoint(org, env, &[EventType::WebhookTest]);
        let event = logged(
            org,
            env,
            EventType::WebhookTest,
            json!({"endpoint_id": target.id.to_string()}),
        );
        let deliveries = fan_out(&event, &[target.clone(), other], schemas::time::now());
        assert_eq!(
            deliveries.iter().map(|d| d.endpoint_id).collect::<Vec<_>>(),
            vec![target.id]
        );
        let nameless = logged(org, env, EventType::WebhookTest, json!({}));
        assert!(fan_out(&nameless, &[target], schemas::time::now()).is_empty());
    }
}
