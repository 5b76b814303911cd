//! When and how many attempts run (docs/architecture.md: #webhooks, #dispatcher). A delivery is
//! attempted when the consumer hands it over just after creating it, or when the store says it is
//! due (a retry, or one left by a restart). Attempts take turns per endpoint ([`PER_ENDPOINT`] at
//! once), per organization ([`PER_ORGANIZATION`]) and overall ([`GLOBAL`]), and at most
//! [`ENDPOINT_QUEUE`] of one endpoint's deliveries wait in memory: a slow or dead endpoint holds
//! its own turns and places, never the others'. Its due deliveries past that are put off in the
//! store, in waves of a queue's worth per scan, so the due scan reaches everyone else's and a busy
//! endpoint gets a full queue again at every scan. Each outcome is recorded in the
//! store by the [`recorder`], many per write, before the delivery may be claimed again.
//!
//! The store is the schedule; memory only says which deliveries are being attempted now
//! ([`InFlight`]), so the due scan does not start a second attempt beside a running one. A due
//! delivery is claimed in the store for a lease before it is started, so of a fleet's
//! dispatchers scanning the same rows one attempts it. A
//! delivery handed over in memory is created due a [`LEASE`] later, not now: if the process
//! dies before its outcome is recorded, the due scan after the restart attempts it then.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use schemas::ids::{WebhookDeliveryId, WebhookEndpointId};
use secrets::ServerSecret;
use store::{EndpointStatus, Store, StoreError, WebhookDeliveryRecord, WebhookEndpointRecord};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::attempts::{Attempted, Outcome, RetrySchedule, record_attempt};
use crate::telemetry;
use sender::sending::{self, Request, Sender};

/// Attempts to one endpoint at once.
pub const PER_ENDPOINT: usize = 16;
/// Attempts at once for one organization, over all its endpoints.
pub const PER_ORGANIZATION: usize = 64;
/// Attempts at once, over all endpoints.
pub const GLOBAL: usize = 512;
/// The most deliveries of one endpoint waiting for or in an attempt in memory.
pub const ENDPOINT_QUEUE: usize = 1_024;
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
    Running(WebhookEndpointId),
    /// Its outcome was written at this instant.
    Finished(Instant),
}

/// The deliveries being attempted, and those whose outcome was written lately.
#[derive(Default)]
pub struct InFlight(Mutex<Slots>);

#[derive(Default)]
struct Slots {
    slots: HashMap<WebhookDeliveryId, Slot>,
    /// Running deliveries per endpoint.
    per_endpoint: HashMap<WebhookEndpointId, usize>,
    running: usize,
}

/// Why a delivery was not claimed.
#[derive(Debug, PartialEq)]
enum Unclaimed {
    /// Running, or read before its outcome was written: someone has it.
    Taken,
    /// Its endpoint has [`ENDPOINT_QUEUE`] deliveries in memory already.
    EndpointFull,
}

impl InFlight {
    /// Claims `delivery` for an attempt. Refused if it is running, or if it finished after
    /// `read_at` (when the caller read it from the store as due: that read is stale), or if
    /// its endpoint's queue is full.
    fn claim(
        &self,
        delivery: &WebhookDeliveryRecord,
        read_at: Option<Instant>,
    ) -> Result<(), Unclaimed> {
        let mut table = self.0.lock().expect("in-flight table");
        match (table.slots.get(&delivery.id), read_at) {
            (Some(Slot::Running(_)), _) => return Err(Unclaimed::Taken),
            (Some(Slot::Finished(at)), Some(read_at)) if *at >= read_at => {
                return Err(Unclaimed::Taken);
            }
            _ => {}
        }
        let queued = table.per_endpoint.entry(delivery.endpoint_id).or_default();
        if *queued >= ENDPOINT_QUEUE {
            return Err(Unclaimed::EndpointFull);
        }
        *queued += 1;
        table.running += 1;
        table
            .slots
            .insert(delivery.id, Slot::Running(delivery.endpoint_id));
        Ok(())
    }

    /// Its outcome is written (or there was none to write): it may be claimed from the next
    /// read of the store on.
    fn finish(&self, ids: impl IntoIterator<Item = WebhookDeliveryId>) {
        let now = Instant::now();
        let mut table = self.0.lock().expect("in-flight table");
        for id in ids {
            if let Some(Slot::Running(endpoint)) = table.slots.insert(id, Slot::Finished(now)) {
                table.running -= 1;
                if let Some(queued) = table.per_endpoint.get_mut(&endpoint) {
                    *queued -= 1;
                    if *queued == 0 {
                        table.per_endpoint.remove(&endpoint);
                    }
                }
            }
        }
    }

    /// How many are running.
    pub fn running(&self) -> usize {
        self.0.lock().expect("in-flight table").running
    }

    /// How many more of `endpoint`'s deliveries fit in memory.
    fn room(&self, endpoint: WebhookEndpointId) -> usize {
        let table = self.0.lock().expect("in-flight table");
        ENDPOINT_QUEUE.saturating_sub(table.per_endpoint.get(&endpoint).copied().unwrap_or(0))
    }

    fn forget_finished(&self) {
        let mut table = self.0.lock().expect("in-flight table");
        table.slots.retain(|_, s| match s {
            Slot::Running(_) => true,
            Slot::Finished(at) => at.elapsed() < FINISHED_MEMORY,
        });
    }
}

/// A claimed delivery: finished when dropped, unless its outcome went to the recorder (which
/// finishes it once written). So an attempt that ends any other way (no outcome, abandoned,
/// a panic) never leaves its delivery claimed.
struct Claim {
    in_flight: Arc<InFlight>,
    id: WebhookDeliveryId,
    handed_to_recorder: bool,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.handed_to_recorder {
            self.in_flight.finish([self.id]);
        }
    }
}

/// What attempts need, shared by every attempt task.
pub struct Dispatch {
    pub store: Store,
    pub secret: ServerSecret,
    pub schedule: RetrySchedule,
    pub sender: Sender,
    pub in_flight: Arc<InFlight>,
    endpoint_turns: Turns<WebhookEndpointId>,
    organization_turns: Turns<schemas::OrgId>,
    global_turns: Semaphore,
    outcomes: mpsc::UnboundedSender<Attempted>,
    /// Attempt tasks, waited for on shutdown.
    pub tasks: TaskTracker,
    /// Cancelled when the dispatcher stops: attempts not yet sent are not sent.
    pub stopping: CancellationToken,
    /// Cancelled when attempts still running at shutdown are to be abandoned.
    pub abandon: CancellationToken,
}

/// A semaphore of [`PER_ENDPOINT`]-like size per key, made when first needed and dropped when
/// nobody holds or waits on it.
struct Turns<K> {
    each: usize,
    by_key: Mutex<HashMap<K, Arc<Semaphore>>>,
}

impl<K: std::hash::Hash + Eq + Copy> Turns<K> {
    fn new(each: usize) -> Self {
        Turns {
            each,
            by_key: Mutex::default(),
        }
    }

    fn of(&self, key: K) -> Arc<Semaphore> {
        let mut by_key = self.by_key.lock().expect("turns");
        Arc::clone(
            by_key
                .entry(key)
                .or_insert_with(|| Arc::new(Semaphore::new(self.each))),
        )
    }

    fn forget_idle(&self) {
        let mut by_key = self.by_key.lock().expect("turns");
        by_key.retain(|_, t| Arc::strong_count(t) > 1);
    }
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
            endpoint_turns: Turns::new(PER_ENDPOINT),
            organization_turns: Turns::new(PER_ORGANIZATION),
            global_turns: Semaphore::new(GLOBAL),
            outcomes,
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            abandon: CancellationToken::new(),
        };
        (Arc::new(dispatch), received)
    }

    /// Starts an attempt of `delivery` unless one is running (or `read_at` is stale, see
    /// [`InFlight::claim`]); `body` is the event's payload when the caller has it. False if
    /// it was not started because its endpoint's queue is full.
    pub fn start(
        self: &Arc<Self>,
        delivery: WebhookDeliveryRecord,
        body: Option<Arc<Vec<u8>>>,
        read_at: Option<Instant>,
    ) -> bool {
        match self.in_flight.claim(&delivery, read_at) {
            Ok(()) => {}
            Err(Unclaimed::Taken) => return true,
            Err(Unclaimed::EndpointFull) => return false,
        }
        let claim = Claim {
            in_flight: Arc::clone(&self.in_flight),
            id: delivery.id,
            handed_to_recorder: false,
        };
        let dispatch = Arc::clone(self);
        self.tasks.spawn(async move {
            let mut claim = claim;
            tokio::select! {
                _ = dispatch.abandon.cancelled() => {}
                _ = dispatch.attempt(delivery, body, &mut claim) => {}
            }
        });
        true
    }

    /// How many more of `endpoint`'s deliveries fit in memory.
    pub fn room(&self, endpoint: WebhookEndpointId) -> usize {
        self.in_flight.room(endpoint)
    }

    /// Waits for the endpoint's, the organization's and a global turn, attempts, and hands the
    /// outcome to the recorder. A store failure before sending leaves the delivery as it is,
    /// to be found due; so does a stop before sending.
    async fn attempt(
        &self,
        delivery: WebhookDeliveryRecord,
        body: Option<Arc<Vec<u8>>>,
        claim: &mut Claim,
    ) {
        let endpoint_turns = self.endpoint_turns.of(delivery.endpoint_id);
        let organization_turns = self.organization_turns.of(delivery.organization_id);
        let turns = async {
            let endpoint = endpoint_turns.acquire().await.ok()?;
            let organization = organization_turns.acquire().await.ok()?;
            let global = self.global_turns.acquire().await.ok()?;
            Some((endpoint, organization, global))
        };
        let _turns = tokio::select! {
            _ = self.stopping.cancelled() => return,
            turns = turns => match turns {
                Some(turns) => turns,
                None => return,
            },
        };
        if self.stopping.is_cancelled() {
            return;
        }
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
                return;
            }
        };
        let attempted = record_attempt(delivery, outcome, &self.schedule, schemas::time::now());
        telemetry::attempted(&attempted.delivery, started.elapsed());
        // The recorder outlives every attempt task (it ends when they all have).
        if self.outcomes.send(attempted).is_ok() {
            claim.handed_to_recorder = true;
        }
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
            .filter_map(|secret| sender::signing::secret_key(std::str::from_utf8(&secret).ok()?))
            .collect()
    }

    /// Drops the turns of endpoints and organizations nobody is waiting on or attempting.
    fn forget_idle_turns(&self) {
        self.endpoint_turns.forget_idle();
        self.organization_turns.forget_idle();
    }
}

/// Asks the store for due deliveries every [`DUE_SCAN_EVERY`] and starts them, until
/// `shutdown`. Those of an endpoint whose queue is full are put off: the first
/// [`ENDPOINT_QUEUE`] of them to the next scan, the next as many to the one after, and so on.
/// A failed scan is logged and tried again at the next tick.
pub async fn scan_due(dispatch: Arc<Dispatch>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(DUE_SCAN_EVERY) => {}
        }
        dispatch.in_flight.forget_finished();
        dispatch.forget_idle_turns();
        let running = dispatch.in_flight.running();
        if running >= QUEUED_MAX {
            continue;
        }
        let read_at = Instant::now();
        // Running deliveries may be due too (queued past their lease); asking for that many
        // more keeps them from hiding the others.
        let limit = DUE_BATCH + running;
        let now = schemas::time::now();
        let due = match dispatch.store.due_webhook_deliveries(now, limit).await {
            Ok(due) => due,
            Err(e) => {
                telemetry::retried("scanning due deliveries", &e, 1);
                continue;
            }
        };
        // Claimed in the store before any is started: the other dispatchers of a fleet scan the
        // same rows, and only the one whose claim lands attempts a delivery. A claim lasts a
        // lease, like a delivery handed over in memory, so one whose dispatcher dies is due
        // again after it.
        let until = now + chrono::TimeDelta::from_std(LEASE).expect("a short lease");
        let claimed: std::collections::HashSet<WebhookDeliveryId> =
            match dispatch.store.claim_webhook_deliveries(&due, until).await {
                Ok(claimed) => claimed.into_iter().collect(),
                Err(e) => {
                    telemetry::retried("claiming due deliveries", &e, 1);
                    continue;
                }
            };
        let mut overflow: HashMap<WebhookEndpointId, u32> = HashMap::new();
        let mut put_off = Vec::new();
        for mut delivery in due {
            if !claimed.contains(&delivery.id) {
                continue;
            }
            delivery.next_attempt_at = Some(until);
            if dispatch.start(delivery.clone(), None, Some(read_at)) {
                continue;
            }
            let behind = overflow.entry(delivery.endpoint_id).or_default();
            let wave = 1 + *behind / ENDPOINT_QUEUE as u32;
            *behind += 1;
            let mut later = delivery;
            later.next_attempt_at = Some(
                now + chrono::TimeDelta::from_std(DUE_SCAN_EVERY * wave).expect("a short wait"),
            );
            put_off.push(later);
        }
        if !put_off.is_empty() {
            match dispatch.store.defer_webhook_deliveries(&put_off).await {
                Ok(deferred) => telemetry::deferred(deferred),
                Err(e) => telemetry::retried("putting off deliveries", &e, 1),
            }
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
        // A 410's endpoint is disabled before its failed delivery is recorded, so whoever reads
        // that delivery finds the endpoint disabled too. A crash between the two leaves the
        // delivery due, and its next attempt finds the endpoint disabled and sends nothing.
        for gone in batch.iter().filter(|a| a.disable_endpoint) {
            disable(&store, &gone.delivery, &shutdown).await;
        }
        let deliveries: Vec<WebhookDeliveryRecord> =
            batch.iter().map(|a| a.delivery.clone()).collect();
        let written = log::retry::retry(
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
        let unwritten = match written {
            log::retry::Retried::Done(_) | log::retry::Retried::ShuttingDown => Vec::new(),
            // A row that will not take the write (one that no longer decodes): written one by
            // one, so the others land; those that still fail stay claimed until a restart,
            // rather than be attempted again and again.
            log::retry::Retried::Failed(e) => {
                tracing::error!(error = %e, "dispatcher: recording attempts failed; recording them one by one");
                let mut unwritten = Vec::new();
                for d in &deliveries {
                    if let Err(e) = store.record_webhook_attempts(std::slice::from_ref(d)).await {
                        tracing::error!(delivery = %d.id, error = %e, "dispatcher: an attempt's outcome cannot be recorded; the delivery is held until a restart");
                        unwritten.push(d.id);
                    }
                }
                unwritten
            }
        };
        // No longer running; what was not written (shutting down) is found due again.
        in_flight.finish(
            deliveries
                .iter()
                .map(|d| d.id)
                .filter(|id| !unwritten.contains(id)),
        );
        batch.clear();
    }
}

/// Disables the endpoint `delivery` went to, after its 410: its status only, so an update
/// made meanwhile (a rotation, say) stands.
async fn disable(store: &Store, delivery: &WebhookDeliveryRecord, shutdown: &CancellationToken) {
    let (org, env, id) = (
        delivery.organization_id,
        delivery.environment,
        delivery.endpoint_id,
    );
    let disabled = log::retry::retry(
        "disabling an endpoint",
        telemetry::retried,
        shutdown,
        &mut (store,),
        |(store,)| {
            Box::pin(async move {
                Ok::<_, crate::Failure>(
                    store
                        .disable_webhook_endpoint(org, env, id, schemas::time::now())
                        .await?,
                )
            })
        },
    )
    .await;
    if let log::retry::Retried::Done(true) = disabled {
        telemetry::disabled(&id);
    }
}
