//! Fault-injecting backends for tests: a store that fails chosen calls a set number of times
//! before passing them through (a store outage the processor must ride out) and can report a
//! session's row as corrupt (a damaged disk), and a log that
//! refuses one key's records on one topic as over its size (a topic configured with a smaller
//! `max.message.bytes` than Vigil assumes). Both wrap the real backends and change nothing else.
//! The same store also runs out of space on demand ([`FullDisk`]): while its switch is on,
//! every write (and `ping`) is refused with the error the embedded store gives on a full disk,
//! so a full disk's answers can be tested without mounting a filesystem; reads pass through.

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use log::{LogCall, LogError, LogLayer, Topic};
use store::*;

/// The faults injected into a store (see [`FlakyStore::wrap`]): the next `n` calls of chosen
/// methods fail as `Unavailable` ([`FlakyStore::fail_next`]), chosen sessions read as corrupt,
/// and writes are refused while its [`FullDisk`] is filled. A layer of the store port, so it
/// sees every method by name and forwards nothing by hand.
pub struct FlakyStore {
    inner: Store,
    /// Failures still to inject, by method name.
    failures_left: Mutex<HashMap<&'static str, u32>>,
    /// Calls to let through before those failures, by method name.
    passes_left: Mutex<HashMap<&'static str, u32>>,
    /// Sessions whose row reads as corrupt.
    corrupt_sessions: Mutex<HashSet<schemas::SessionId>>,
    /// How many calls failed so far.
    pub failed: AtomicU32,
    /// While on, writes are refused as on a full disk.
    disk: FullDisk,
}

/// The switch a test holds to fill and free a [`FlakyStore`]'s "disk".
#[derive(Clone, Default)]
pub struct FullDisk(Arc<AtomicBool>);

impl FullDisk {
    pub fn fill(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn free(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// `store`, refusing writes while this switch is on.
    pub fn wrap(&self, store: Store) -> Store {
        FlakyStore::with_disk(store, self.clone()).0
    }
}

/// The store methods that write (and `ping`, which a full disk fails too).
const WRITES: &[&str] = &[
    "ping",
    "create_organization",
    "update_organization",
    "create_organization_with_keys",
    "create_api_key",
    "create_api_key_capped",
    "update_api_key",
    "rotate_api_key",
    "touch_api_key",
    "idempotency_begin",
    "idempotency_complete",
    "idempotency_abandon",
    "open_handoff_once",
    "leave_replay_marks",
    "create_collect_session",
    "advance_collect_seq",
    "change_collect_session",
    "spend_nonce",
    "claim_partitions",
    "save_sessions",
    "save_visitors",
    "record_events",
    "create_webhook_endpoint",
    "update_webhook_endpoint",
    "disable_webhook_endpoint",
    "create_webhook_deliveries",
    "record_webhook_attempts",
    "defer_webhook_deliveries",
    "claim_webhook_deliveries",
    "create_gate_service",
    "update_gate_service",
    "create_gate_session",
    "transition_gate_session",
    "update_agent_token",
    "count_agent_login",
    "count_gate_poll",
    "count_gate_attempt",
    "revoke_agent_token",
    "purge_expired",
    "put_setting_if_absent",
];

impl FlakyStore {
    /// Wraps `inner`: the store to serve with, and the faults to inject into it (none until
    /// [`FlakyStore::fail_next`] or [`FlakyStore::corrupt_session`] says so).
    pub fn wrap(inner: Store) -> (Store, Arc<Self>) {
        Self::with_disk(inner, FullDisk::default())
    }

    /// Wraps `inner`, its disk filled and freed by `disk`.
    fn with_disk(inner: Store, disk: FullDisk) -> (Store, Arc<Self>) {
        let faults = Arc::new(FlakyStore {
            inner: Arc::clone(&inner),
            failures_left: Mutex::default(),
            passes_left: Mutex::default(),
            corrupt_sessions: Mutex::default(),
            failed: AtomicU32::new(0),
            disk,
        });
        (Arc::new(Layered::new(inner, Arc::clone(&faults))), faults)
    }

    /// A server whose store is a `FlakyStore`, with settings changed by `configure`; returns
    /// the server and the faults to inject into its store.
    pub async fn serve(
        configure: impl Fn(&mut vigil::config::ServeArgs) + Send + Sync + 'static,
    ) -> (crate::TestServer, Arc<Self>) {
        let flaky = Arc::new(Mutex::new(None::<Arc<Self>>));
        let hold = flaky.clone();
        let s = crate::TestServer::start_wrapped_with(
            vigil::server::Wrap {
                store: Some(Box::new(move |store| {
                    let (wrapped, faults) = Self::wrap(store);
                    *hold.lock().unwrap() = Some(faults);
                    wrapped
                })),
                ..Default::default()
            },
            configure,
        )
        .await;
        let faults = flaky
            .lock()
            .unwrap()
            .clone()
            .expect("the store was wrapped");
        (s, faults)
    }

    /// The store it wraps, for a test to read without meeting the faults.
    pub fn inner(&self) -> &Store {
        &self.inner
    }

    /// Makes the next `n` calls of `method` (a store method's name) fail.
    pub fn fail_next(&self, method: &'static str, n: u32) {
        self.failures_left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(method, n);
    }

    /// Lets the next `passing` calls of `method` through, then makes `n` fail: a store that
    /// breaks in the middle of a long read.
    pub fn fail_after(&self, method: &'static str, passing: u32, n: u32) {
        self.passes_left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(method, passing);
        self.fail_next(method, n);
    }

    /// From now on, reading `session`'s row fails as `Corrupt`, as a damaged row would.
    pub fn corrupt_session(&self, session: schemas::SessionId) {
        self.corrupt_sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(session);
    }

    fn fault(&self, method: &'static str) -> Result<()> {
        if self.disk.0.load(Ordering::SeqCst) && WRITES.contains(&method) {
            // The embedded store's words for it (`schemas::disk`).
            return Err(StoreError::Unavailable(
                "disk full: 0 bytes free, under the reserve (injected)".into(),
            ));
        }
        let passed = self
            .passes_left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(method)
            .filter(|n| **n > 0)
            .map(|n| *n -= 1);
        if passed.is_some() {
            return Ok(());
        }
        let mut left = self
            .failures_left
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let took = left.get_mut(method).filter(|n| **n > 0).map(|n| *n -= 1);
        if took.is_some() {
            self.failed.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable(format!(
                "injected fault in {method}"
            )));
        }
        Ok(())
    }

    /// A session row read by `get_session` that the test made corrupt answers as the embedded
    /// store answers for a row whose bytes do not decode.
    fn corrupt(&self, answer: &mut dyn Any) {
        let Some(Ok(Some(session))) = answer.downcast_mut::<Result<Option<SessionRecord>>>() else {
            return;
        };
        let id = session.id;
        let corrupt = self
            .corrupt_sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&id);
        if corrupt {
            *answer
                .downcast_mut::<Result<Option<SessionRecord>>>()
                .expect("checked above") = Err(StoreError::Corrupt {
                table: "sessions",
                detail: format!("injected: the row of {id} does not decode"),
            });
        }
    }
}

impl StoreLayer for FlakyStore {
    async fn around<'a, T: Send + 'static>(
        &'a self,
        operation: &'static str,
        call: impl Future<Output = Result<T>> + Send + 'a,
    ) -> Result<T> {
        self.fault(operation)?;
        let mut answer = call.await;
        if operation == "get_session" {
            self.corrupt(&mut answer);
        }
        answer
    }
}

/// A log layer refusing as `TooLarge` every append to `topic` whose key is one of `keys`.
pub struct RefusingLog {
    topic: Topic,
    keys: Mutex<HashSet<Vec<u8>>>,
}

impl RefusingLog {
    /// `inner` behind a refusing layer, and the layer, to say which keys it refuses.
    pub fn wrap(inner: log::Log, topic: &'static str) -> (log::Log, Arc<Self>) {
        let layer = Arc::new(RefusingLog {
            topic: Topic::from_static(topic),
            keys: Mutex::new(HashSet::new()),
        });
        let log: log::Log = Arc::new(log::Layered::new(inner, Arc::clone(&layer)));
        (log, layer)
    }

    /// From now on, appends to the topic with this key are refused.
    pub fn refuse(&self, key: &[u8]) {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_vec());
    }

    /// From now on, appends with this key pass again (the topic's limit was raised).
    pub fn allow(&self, key: &[u8]) {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

impl LogLayer for RefusingLog {
    async fn around<'a, T: Send + 'a>(
        &'a self,
        call: LogCall<'a>,
        run: impl Future<Output = log::Result<T>> + Send + 'a,
    ) -> log::Result<T> {
        if let LogCall::Append {
            topic,
            key,
            payload,
        }
        | LogCall::TryAppend {
            topic,
            key,
            payload,
        } = call
        {
            let refused = *topic == self.topic
                && self
                    .keys
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .contains(key);
            if refused {
                return Err(LogError::TooLarge {
                    size: key.len() + payload.len(),
                    limit: key.len() + payload.len() - 1,
                });
            }
        }
        run.await
    }
}

#[cfg(test)]
mod tests {
    use super::WRITES;

    /// Every method of the store port is a read (by its name) or listed in [`WRITES`], so a
    /// write added to the port is refused on a full disk too; `save_session` and `save_visitor`
    /// are the port's own shorthands for `save_sessions` and `save_visitors`, and the four named
    /// collect changes its shorthands for `change_collect_session`.
    #[test]
    fn every_write_of_the_port_is_refused_on_a_full_disk() {
        let port = include_str!("../../store/src/port.rs");
        const READS: &[&str] = &["get_", "find_", "list_", "locate_", "due_"];
        const SHORTHANDS: &[&str] = &[
            "save_session",
            "save_visitor",
            "advance_collect_call",
            "record_collect_ping",
            "record_collect_ws_identity",
            "mark_collect_results",
        ];
        let methods: Vec<&str> = port
            .split("async fn ")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            // The macro that declares the port also spells `async fn $method:ident(`.
            .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect();
        assert!(methods.len() > 50, "the port's methods: {methods:?}");
        for method in &methods {
            let read = READS.iter().any(|prefix| method.starts_with(prefix));
            assert!(
                read || SHORTHANDS.contains(method) || WRITES.contains(method),
                "{method} writes (its name is no read's) but is not in WRITES"
            );
        }
        for write in WRITES {
            assert!(
                methods.contains(write),
                "WRITES names {write}, which the port lacks"
            );
        }
    }
}
