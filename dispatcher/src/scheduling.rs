//! When and how many attempts run (D13, D24). A delivery is attempted when the consumer hands
//! it over just after creating it, or when the store says it is due (a retry, or one left by a
//! restart). Attempts take turns per endpoint ([`PER_ENDPOINT`] at once) under a global cap
//! ([`GLOBAL`]), so a slow or dead endpoint holds its own turns and never the others'. Each
//! outcome is recorded in the store by the [`recorder`], many per write, before the delivery
//! may be claimed again.
//!
//! The store is the schedule; memory only says which deliveries are being attempted now
//! ([`InFlight`]), so the due scan does not start a second attempt beside a running one. A
//! delivery handed over in memory is created due a [`LEASE`] later, not now: if the process
//! dies before its outcome is recorded, the due scan after the restart attempts it then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edge::secrets::ServerSecret;
use schemas::ids::{WebhookDeliveryId, WebhookEndpointId};
use store::{EndpointStatus, Store, StoreError, WebhookDeliveryRecord, WebhookEndpointRecord};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::attempts::{Attempted, Outcome, RetrySchedule, record_attempt};
use crate::sending::{self, Request, Sender};
use crate::telemetry;

/// Attempts to one endpoint at once.
pub const PER_ENDPOINT: usize = 16;
/// Attempts at once, over all endpoints.
pub const GLOBAL: usize = 512;
/// The most deliveries waiting for or in an attempt in memory; past it, new deliveries wait in
/// the store until the due scan finds room.
pub const QUEUED_MAX: usize = 20_000;
/// How long after its creation a delivery handed over in memory is due in the store, in case
/// its attempt's outcome is never recorded (the process died). Longer than an attempt can
/// take, so a running attempt is not started again.
pub const LEASE: Duration = Duration::from_secs(60);
/// How often the store is asked for due deliveries.
pub const DUE_SCAN_EVERY: Duration = Duration::from_millis(250);
/// The most due deliveries one scan starts.
const DUE_BATCH: usize = 1_000;
/// The most outcomes one store write records.
const RECORD_BATCH: usize = 1_024;
/// How long a finished delivery is remembered, so a due scan that read the store before its
/// outcome was written does not start it again.
const FINISHED_MEMORY: Duration = Duration::from_secs(30);

/// Where an attempt stands in memory.
#[derive(Clone, Copy)]
enum Slot {
    Running,
    /// Its outcome was written at this instant.
    Finished(Instant),
}

/// The deliveries being attempted, and those whose outcome was written lately.
#[derive(Default)]
pub struct InFlight(Mutex<HashMap<WebhookDeliveryId, Slot>>);

impl InFlight {
    /// Claims `id` for an attempt; false if it is running, or if it finished after
    /// `read_at` (when the caller read it from the store as due): that read is stale.
    fn claim(&self, id: WebhookDeliveryId, read_at: Option<Instant>) -> bool {
        let mut slots = self.0.lock().expect("in-flight table");
        match (slots.get(&id), read_at) {
            (Some(Slot::Running), _) => false,
            (Some(Slot::Finished(at)), Some(read_at)) if *at >= read_at => false,
            _ => {
                slots.insert(id, Slot::Running);
                true
            }
        }
    }

    /// Its outcome is written (or there was none to write): it may be claimed from the next
    /// read of the store on.
    fn finish(&self, ids: impl IntoIterator<Item = WebhookDeliveryId>) {
        let now = Instant::now();
        let mut slots = self.0.lock().expect("in-flight table");
        for id in ids {
            slots.insert(id, Slot::Finished(now));
        }
    }

    /// How many are running.
    pub fn running(&self) -> usize {
        let slots = self.0.lock().expect("in-flight table");
        slots
            .values()
            .filter(|s| matches!(s, Slot::Running))
            .count()
    }

    fn forget_finished(&self) {
        let mut slots = self.0.lock().expect("in-flight table");
        slots.retain(|_, s| match s {
            Slot::Running => true,
            Slot::Finished(at) => at.elapsed() < FINISHED_MEMORY,
        });
    }
}

/// What attempts need, shared by every attempt task.
pub struct Dispatch {
    pub store: Store,
    pub secret: ServerSecret,
    pub schedule: RetrySchedule,
    pub sender: Sender,
    pub in_flight: Arc<InFlight>,
    endpoint_turns: Mutex<HashMap<WebhookEndpointId, Arc<Semaphore>>>,
    global_turns: Semaphore,
    outcomes: mpsc::UnboundedSender<Attempted>,
    /// Attempt tasks, waited for on shutdown.
    pub tasks: TaskTracker,
    /// Cancelled when attempts still running at shutdown are to be abandoned.
    pub abandon: CancellationToken,
}

impl Dispatch {
    /// A dispatch whose outcomes go to the returned receiver (for [`recorder`]).
    pub fn new(
        store: Store,
        secret: ServerSecret,
        schedule: RetrySchedule,
        sender: Sender,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Attempted>) {
        let (outcomes, received) = mpsc::unbounded_channel();
        let dispatch = Dispatch {
            store,
            secret,
            schedule,
            sender,
            in_flight: Arc::default(),
            endpoint_turns: Mutex::default(),
            global_turns: Semaphore::new(GLOBAL),
            outcomes,
            tasks: TaskTracker::new(),
            abandon: CancellationToken::new(),
        };
        (Arc::new(dispatch), received)
    }

    /// Starts an attempt of `delivery` unless one is running (or `read_at` is stale, see
    /// [`InFlight::claim`]). `body` is the event's payload when the caller has it.
    pub fn start(
        self: &Arc<Self>,
        delivery: WebhookDeliveryRecord,
        body: Option<Arc<Vec<u8>>>,
        read_at: Option<Instant>,
    ) {
        if !self.in_flight.claim(delivery.id, read_at) {
            return;
        }
        let dispatch = Arc::clone(self);
        self.tasks.spawn(async move {
            let id = delivery.id;
            tokio::select! {
                _ = dispatch.abandon.cancelled() => dispatch.in_flight.finish([id]),
                _ = dispatch.attempt(delivery, body) => {}
            }
        });
    }

    /// Waits for the endpoint's turn and a global one, attempts, and hands the outcome to the
    /// recorder. A store failure before sending leaves the delivery as it is, to be found due.
    async fn attempt(&self, delivery: WebhookDeliveryRecord, body: Option<Arc<Vec<u8>>>) {
        let turns = self.endpoint_turns(delivery.endpoint_id);
        let Ok(_endpoint_turn) = turns.acquire().await else {
            return;
        };
        let Ok(_turn) = self.global_turns.acquire().await else {
            return;
        };
        let started = Instant::now();
        if delivery.attempts == 0 {
            // An event id's time part is when the event happened (`schemas/events.md`).
            let created_ms = delivery.event_id.ulid().timestamp_ms();
            let now_ms = u64::try_from(schemas::time::now().timestamp_millis()).unwrap_or(0);
            telemetry::first_attempt(Duration::from_millis(now_ms.saturating_sub(created_ms)));
        }
        let outcome = match self.outcome(&delivery, body).await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(delivery = %delivery.id, error = %e, "dispatcher: could not read what an attempt needs; it stays due");
                self.in_flight.finish([delivery.id]);
                return;
            }
        };
        let attempted = record_attempt(delivery, outcome, &self.schedule, schemas::time::now());
        telemetry::attempted(&attempted.delivery, started.elapsed());
        // The recorder outlives every attempt task (it ends when they all have).
        let _ = self.outcomes.send(attempted);
    }

    /// Reads the endpoint (and the event, if not given) and sends.
    async fn outcome(
        &self,
        delivery: &WebhookDeliveryRecord,
        body: Option<Arc<Vec<u8>>>,
    ) -> Result<Outcome, StoreError> {
        let (org, env) = (delivery.organization_id, delivery.environment);
        let endpoint = self
            .store
            .get_webhook_endpoint(org, env, delivery.endpoint_id)
            .await?;
        let Some(endpoint) = endpoint.filter(|e| e.status == EndpointStatus::Active) else {
            return Ok(Outcome::Undeliverable(
                "the endpoint is disabled; nothing was sent".into(),
            ));
        };
        let body = match body {
            Some(body) => body,
            None => match self.store.get_event(org, env, delivery.event_id).await? {
                Some(event) => Arc::new(sending::body(&event)),
                None => {
                    return Ok(Outcome::Undeliverable(
                        "the event is no longer kept; nothing was sent".into(),
                    ));
                }
            },
        };
        let keys = self.signing_keys(&endpoint);
        if keys.is_empty() {
            return Ok(Outcome::NoAnswer(
                "the endpoint's signing secret does not open with this server's secret".into(),
            ));
        }
        let id = delivery.event_id.to_string();
        let request = Request {
            url: &endpoint.url,
            id: &id,
            body,
            keys: &keys,
        };
        Ok(self.sender.send(request, schemas::time::now()).await)
    }

    /// The endpoint's signing keys, newest first: its secret, and during a rotation's grace
    /// the previous one too.
    fn signing_keys(&self, endpoint: &WebhookEndpointRecord) -> Vec<Vec<u8>> {
        let context = WebhookEndpointRecord::secret_context(endpoint.organization_id, endpoint.id);
        let now = schemas::time::now();
        let previous = endpoint
            .previous_secret
            .as_ref()
            .filter(|p| p.until > now)
            .map(|p| &p.sealed);
        std::iter::once(&endpoint.sealed_secret)
            .chain(previous)
            .filter_map(|sealed| self.secret.open(sealed, &context))
            .filter_map(|secret| crate::signing::secret_key(std::str::from_utf8(&secret).ok()?))
            .collect()
    }

    fn endpoint_turns(&self, endpoint: WebhookEndpointId) -> Arc<Semaphore> {
        let mut turns = self.endpoint_turns.lock().expect("endpoint turns");
        Arc::clone(
            turns
                .entry(endpoint)
                .or_insert_with(|| Arc::new(Semaphore::new(PER_ENDPOINT))),
        )
    }

    /// Drops the turns of endpoints nobody is waiting on or attempting.
    fn forget_idle_endpoints(&self) {
        let mut turns = self.endpoint_turns.lock().expect("endpoint turns");
        turns.retain(|_, t| Arc::strong_count(t) > 1);
    }
}

/// Asks the store for due deliveries every [`DUE_SCAN_EVERY`] and starts them, until
/// `shutdown`. A failed scan is logged and tried again at the next tick.
pub async fn scan_due(dispatch: Arc<Dispatch>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(DUE_SCAN_EVERY) => {}
        }
        dispatch.in_flight.forget_finished();
        dispatch.forget_idle_endpoints();
        let running = dispatch.in_flight.running();
        if running >= QUEUED_MAX {
            continue;
        }
        let read_at = Instant::now();
        // Running deliveries may be due too (queued past their lease); asking for that many
        // more keeps them from hiding the others.
        let limit = DUE_BATCH + running;
        match dispatch
            .store
            .due_webhook_deliveries(schemas::time::now(), limit)
            .await
        {
            Ok(due) => {
                for delivery in due {
                    dispatch.start(delivery, None, Some(read_at));
                }
            }
            Err(e) => telemetry::retried("scanning due deliveries", &e, 1),
        }
    }
}

/// Records outcomes as they come, many per write, then disables the endpoints that answered
/// 410 and marks the deliveries finished. Ends when every sender is gone (all attempts ended),
/// after writing what it holds; `shutdown` only cuts short the retries of a failing write.
pub async fn recorder(
    store: Store,
    in_flight: Arc<InFlight>,
    mut outcomes: mpsc::UnboundedReceiver<Attempted>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while outcomes.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        let deliveries: Vec<WebhookDeliveryRecord> =
            batch.iter().map(|a| a.delivery.clone()).collect();
        let written = bus::retry::retry(
            "recording attempts",
            telemetry::retried,
            &shutdown,
            &mut (&store, &deliveries),
            |(store, deliveries)| {
                Box::pin(async move {
                    Ok::<_, crate::Failure>(store.record_webhook_attempts(deliveries).await?)
                })
            },
        )
        .await;
        if let bus::retry::Retried::Done(_) = written {
            for gone in batch.iter().filter(|a| a.disable_endpoint) {
                disable(&store, &gone.delivery, &shutdown).await;
            }
        }
        // Written or not (shutting down, or a row that will not decode), they are no longer
        // running; what was not written is found due again.
        in_flight.finish(deliveries.iter().map(|d| d.id));
        batch.clear();
    }
}

/// Disables the endpoint `delivery` went to, after its 410.
async fn disable(store: &Store, delivery: &WebhookDeliveryRecord, shutdown: &CancellationToken) {
    let (org, env, id) = (
        delivery.organization_id,
        delivery.environment,
        delivery.endpoint_id,
    );
    let disabled = bus::retry::retry(
        "disabling an endpoint",
        telemetry::retried,
        shutdown,
        &mut (store,),
        |(store,)| {
            Box::pin(async move {
                let Some(mut endpoint) = store.get_webhook_endpoint(org, env, id).await? else {
                    return Ok::<_, crate::Failure>(false);
                };
                if endpoint.status == EndpointStatus::Disabled {
                    return Ok(false);
                }
                endpoint.status = EndpointStatus::Disabled;
                endpoint.updated_at = schemas::time::now();
                Ok(store.update_webhook_endpoint(&endpoint).await?)
            })
        },
    )
    .await;
    if let bus::retry::Retried::Done(true) = disabled {
        telemetry::disabled(&id);
    }
}
