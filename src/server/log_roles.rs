//! The roles that need the log before they can work (the topics ingest, the processor and the
//! dispatcher use, then the processor and the dispatcher themselves), started in the background so that the server answers at once
//! even when the log is not there yet: `/healthz` is 200, `/readyz` names the log as the
//! missing dependency, and a collect batch answers a retryable 503 until the log is back.
//! Preparation retries with backoff until it succeeds or the server stops.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use tokio_util::sync::CancellationToken;

/// The first wait after a failed preparation; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two preparations, so a broker that comes back is used within it.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How far the log's preparation has come, for `/readyz`.
#[derive(Clone)]
pub struct LogPreparation(Arc<watch::Sender<Result<(), String>>>);

/// The status before the first preparation has finished.
const NOT_YET: &str = "the log's topics are not prepared yet";

impl LogPreparation {
    fn new() -> Self {
        Self(Arc::new(watch::Sender::new(Err(NOT_YET.into()))))
    }

    /// `Ok` once the topics exist (and the log roles of this process run); else the last
    /// failure.
    pub fn status(&self) -> Result<(), String> {
        self.0.borrow().clone()
    }

    /// Waits up to `bound` for the preparation to succeed; whether it did. A log that is there
    /// (the embedded one, a reachable broker) is prepared in milliseconds, so the server starts
    /// ready; one that is not costs start-up no more than `bound`.
    pub async fn wait_ready(&self, bound: Duration) -> bool {
        let mut status = self.0.subscribe();
        tokio::time::timeout(bound, status.wait_for(Result::is_ok))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Waits up to `bound` for the first preparation to finish, however it went; whether the
    /// topics are ready. For the embedded log, whose preparation needs no network: a busy
    /// machine's seconds are waited out, a failing disk is not.
    pub async fn wait_first_attempt(&self, bound: Duration) -> bool {
        let mut status = self.0.subscribe();
        let settled = |s: &Result<(), String>| s.as_ref().err().is_none_or(|e| e != NOT_YET);
        let _ = tokio::time::timeout(bound, status.wait_for(settled)).await;
        self.status().is_ok()
    }

    fn set(&self, status: Result<(), String>) {
        self.0.send_modify(|current| *current = status);
    }
}

/// The processor role's settings, less what the preparation makes (the topics).
pub struct ProcessorSettings {
    pub store: store::Store,
    pub log: log::Log,
    pub secret: secrets::ServerSecret,
    pub idle_after: Duration,
    /// How long a visitor not seen is kept (docs/architecture.md#retention), for its `expires_at`.
    pub retention: Duration,
    /// `--processor-cache-mb`, in bytes.
    pub cache_bytes: u64,
    /// `--replay-memory`: how long the replay record keeps a mark; zero keeps none.
    pub replay_memory: Duration,
    /// `--ip-database` and the lists beside it, opened; `None` when none is configured.
    pub network: Option<std::sync::Arc<ipdata::NetworkData>>,
}

/// Starts the background task: prepares the topics (retrying with backoff), then runs the
/// processor and the dispatcher, each when given, until `shutdown`. The handle ends when all
/// have stopped.
pub fn start(
    log: log::Log,
    processor: Option<ProcessorSettings>,
    dispatcher: Option<dispatcher::Settings>,
    shutdown: CancellationToken,
) -> (LogPreparation, tokio::task::JoinHandle<()>) {
    let preparation = LogPreparation::new();
    let status = preparation.clone();
    let task = tokio::spawn(async move {
        let Some((batches, topics, dispatching_topics)) = prepare(&log, &status, &shutdown).await
        else {
            return;
        };
        status.set(Ok(()));
        tracing::info!(
            processor = processor.is_some(),
            dispatcher = dispatcher.is_some(),
            "the log's topics are ready"
        );
        // The dispatcher role: delivers the events the processor and the admin API append.
        let dispatching = dispatcher.map(|settings| {
            tokio::spawn(dispatcher::run(
                settings,
                dispatching_topics,
                shutdown.clone(),
            ))
        });
        // The processor role: consumes the batches ingest appends, stores decisions and events.
        if let Some(settings) = processor {
            let pipeline = processor::pipeline::Pipeline {
                store: settings.store,
                log: settings.log,
                batches,
                events: topics.events,
                dead: topics.dead,
                secret: settings.secret,
                idle_after: settings.idle_after,
                retention: settings.retention,
                cache_bytes: settings.cache_bytes,
                replay_memory: settings.replay_memory,
                network: settings.network,
            };
            run_processor(pipeline, shutdown.clone()).await;
        }
        if let Some(dispatching) = dispatching {
            let _ = dispatching.await;
        }
    });
    (preparation, task)
}

/// The batches topic, the processor's (events, dead letters) and the dispatcher's (events, its
/// dead letters) once all exist; `None` if the server stops first.
async fn prepare(
    log: &log::Log,
    status: &LogPreparation,
    shutdown: &CancellationToken,
) -> Option<(log::Topic, processor::pipeline::Topics, dispatcher::Topics)> {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let prepared = async {
            let batches = ingest::prepare_log(log).await?;
            let topics = processor::pipeline::prepare_log(log).await?;
            let dispatching = dispatcher::prepare_log(log).await?;
            Ok::<_, log::LogError>((batches, topics, dispatching))
        };
        let failure = tokio::select! {
            _ = shutdown.cancelled() => return None,
            prepared = prepared => match prepared {
                Ok(topics) => return Some(topics),
                Err(e) => e,
            },
        };
        tracing::warn!(error = %failure, retry_in = ?backoff, "preparing the log's topics; retrying");
        status.set(Err(failure.to_string()));
        tokio::select! {
            _ = shutdown.cancelled() => return None,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Runs the processor on a thread of its own, with its own runtime, until it stops.
///
/// Why its own thread: on the server's runtime the processor is one task among one per
/// connection, so when the cores are busy the scheduler gives thousands of connections a turn
/// for each of its turns, ingest goes on accepting batches, and the processor falls seconds
/// behind what it was sent. As a thread it gets the operating system's fair share of the
/// cores beside the runtime's workers: under load, accepting a batch slows down (a longer
/// round trip) before scoring the batches already accepted does.
async fn run_processor(pipeline: processor::pipeline::Pipeline, shutdown: CancellationToken) {
    let (done, stopped) = tokio::sync::oneshot::channel();
    let stop_server = shutdown.clone();
    let started = std::thread::Builder::new()
        .name("vigil-processor".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("vigil-processor-io")
                .max_blocking_threads(super::BLOCKING_THREADS)
                .build();
            match runtime {
                Ok(runtime) => runtime.block_on(processor::pipeline::run(pipeline, shutdown)),
                Err(e) => {
                    tracing::error!(error = %e, "processor: cannot start its runtime; nothing is scored");
                    shutdown.cancel();
                }
            }
            let _ = done.send(());
        });
    match started {
        Ok(_) => {
            let _ = stopped.await;
        }
        // As when the processor stops on its own: the server stops rather than accept batches
        // nobody scores.
        Err(e) => {
            tracing::error!(error = %e, "processor: cannot start its thread; nothing is scored");
            stop_server.cancel();
        }
    }
}
