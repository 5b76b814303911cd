//! Serving connections (docs/architecture.md#connections): one accept loop for the plain and the
//! TLS listener, with a cap on connections served at once and a watchdog per connection, so slow
//! and idle clients cannot hold the server's sockets.
//!
//! - **Cap.** A connection is accepted only once a slot is free (`--max-connections`); over
//!   the cap, new clients wait in the kernel's listen queue rather than being refused, and are
//!   served as slots free up. A slot is held by the socket itself, so an upgraded connection (a
//!   WebSocket) keeps its slot until it closes.
//! - **Header-read timeout.** A request's headers must arrive within `--header-read-timeout`
//!   of their first byte; a new connection's first request (TLS handshake included) within
//!   that time of its opening. A client trickling headers is disconnected.
//! - **Idle timeout.** A connection with no request in flight and no traffic for
//!   `--keep-alive-timeout` is closed. With HTTP/2, any frame that arrives while no request is
//!   in flight starts the header clock, so a client idle but for pings is closed after the
//!   header-read timeout.
//!
//! hyper has a header-read timeout of its own (with a timer installed), but it also runs while
//! a kept-alive HTTP/1 connection waits for its next request, so it would close idle
//! connections after the header timeout rather than the keep-alive one, and it does not cover
//! the TLS handshake, the HTTP/1-or-2 detection or HTTP/2. The watchdog here times all of them
//! from the bytes that cross the socket and the requests hyper hands over, and hyper's is left
//! off (no timer is installed).
//!
//! Shutdown: when the token is cancelled the loop stops accepting, every connection finishes
//! its requests in flight (HTTP/1 closes when idle, HTTP/2 sends GOAWAY), and connections still
//! open after [`SHUTDOWN_GRACE`] are closed.

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum_server::accept::{Accept, DefaultAcceptor};
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use edge::client_hello::{self, ClientHello, HelloError};
use edge::transport::{ListenerTls, OverTls};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::Service as _;

/// How long connections may take to finish their requests once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The limits of `--header-read-timeout`, `--keep-alive-timeout` and `--max-connections`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub header_read_timeout: Duration,
    pub keep_alive_timeout: Duration,
    pub max_connections: usize,
}

/// How the listener speaks.
pub enum Transport {
    Plain,
    Tls(RustlsConfig),
}

/// Serves `app` on `listener` until `shutdown` is cancelled and the connections have finished
/// (or [`SHUTDOWN_GRACE`] has passed).
pub async fn serve(
    listener: TcpListener,
    transport: Transport,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let connections = TaskTracker::new();
    let closing = CancellationToken::new();
    let tls = match transport {
        Transport::Plain => None,
        Transport::Tls(config) => {
            Some(RustlsAcceptor::new(config).handshake_timeout(limits.header_read_timeout))
        }
    };
    let builder = Arc::new(builder());
    let mut last_accept_warning: Option<Instant> = None;
    loop {
        // A slot first, then a connection: over the cap, clients wait in the listen queue.
        let slot = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.map_err(io::Error::other)?,
        };
        let (stream, peer) = tokio::select! {
            biased;
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // wait a moment and go on; say so at most once a second.
                    if last_accept_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!(error = %e, "accepting a connection");
                        last_accept_warning = Some(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = Watched {
            inner: stream,
            activity: activity.clone(),
            _slot: slot,
        };
        let connection = Connection {
            peer,
            tls: tls.is_some(),
            tls_client: None,
            app: app.clone(),
            builder: builder.clone(),
            activity,
            limits,
            shutdown: shutdown.clone(),
            closing: closing.clone(),
            tasks: connections.clone(),
        };
        match &tls {
            None => connections.spawn(connection.serve(io)),
            Some(acceptor) => {
                connections.spawn(connection.serve_tls(acceptor.clone(), Recording::new(io)))
            }
        };
    }
    // Closing the listener refuses new connections at once instead of leaving them queued.
    drop(listener);
    connections.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            // The connections hold the slots (their tasks include each one's sentry).
            open = limits.max_connections - slots.available_permits(),
            "connections still busy {SHUTDOWN_GRACE:?} after shutdown began: closing them"
        );
        closing.cancel();
        connections.wait().await;
    }
    Ok(())
}

/// How many bytes of a request hyper holds before it has the whole head: room for the request
/// line and twice the headers the API accepts. Vigil refuses headers over
/// `edge::context::MAX_HEADER_BYTES` with its own 431 in the error envelope; past this bound
/// hyper answers a bare 431 and closes, so no client makes a connection hold hyper's default
/// of about 400 KiB.
const REQUEST_HEAD_BUFFER: usize = 2 * edge::context::MAX_HEADER_BYTES + 16 * 1024;

/// hyper's connection builder, HTTP/1 and HTTP/2 alike, with the request head bounded.
fn builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().max_buf_size(REQUEST_HEAD_BUFFER);
    // HTTP/2's default (16 KiB, each header counted with 32 bytes more) is below the API's own
    // limit: raise it so the API, not the codec, decides, and answers in its envelope.
    builder
        .http2()
        .max_header_list_size(u32::try_from(REQUEST_HEAD_BUFFER).unwrap_or(u32::MAX));
    builder
}

/// One accepted connection and what serving it needs.
struct Connection {
    peer: SocketAddr,
    /// Accepted by the TLS listener: its requests carry `OverTls`.
    tls: bool,
    /// What its ClientHello showed (docs/detection.md#transport-identity), once the handshake
    /// is done: its requests carry it.
    tls_client: Option<ListenerTls>,
    app: Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    activity: Arc<Activity>,
    limits: ConnectionLimits,
    /// Finish the requests in flight, then close.
    shutdown: CancellationToken,
    /// Close now: the shutdown grace is over.
    closing: CancellationToken,
    /// The server's connection tasks, which its shutdown waits for; the sentry is one of them.
    tasks: TaskTracker,
}

impl Connection {
    async fn serve_tls(
        mut self,
        acceptor: RustlsAcceptor<DefaultAcceptor>,
        io: Recording<Watched>,
    ) {
        let handshake = tokio::select! {
            done = acceptor.accept(io, ()) => done,
            _ = self.activity.clone().watchdog(self.limits) => return,
            _ = self.shutdown.cancelled() => return,
        };
        match handshake {
            Ok((mut stream, ())) => {
                let (io, session) = stream.get_mut();
                let hello = io
                    .kept
                    .take()
                    .and_then(|bytes| ClientHello::parse(&bytes).ok());
                self.tls_client = hello.map(|hello| {
                    // `TLSv1_3` as rustls names it; `TLSv1.3` as OpenSSL and browsers do.
                    let version = session
                        .protocol_version()
                        .and_then(|v| v.as_str())
                        .map(|v| v.replace('_', "."));
                    let alpn = session
                        .alpn_protocol()
                        .map(|p| String::from_utf8_lossy(p).into_owned());
                    ListenerTls(Arc::new(client_hello::tls_client(&hello, version, alpn)))
                });
                self.serve(stream).await
            }
            Err(e) => tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed"),
        }
    }

    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            peer,
            tls,
            tls_client,
            app,
            builder,
            activity,
            limits,
            shutdown,
            closing,
            tasks,
        } = self;
        let in_flight = activity.clone();
        // The router is called in place: a clone for each request (as `oneshot` needs) writes
        // to its reference count, which every connection on every core shares. An axum router
        // is always ready (its `poll_ready` is), and its future owns what it needs, so the
        // borrow ends with `call`.
        let app = RefCell::new(app);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            // Each extension is a boxed entry in a map that grows past three, so a plain
            // request carries only its peer; `OverTls` marks the others.
            request.extensions_mut().insert(ConnectInfo(peer));
            if tls {
                request.extensions_mut().insert(OverTls);
            }
            if let Some(client) = &tls_client {
                request.extensions_mut().insert(client.clone());
            }
            let started = in_flight.request_started();
            let answer = app.borrow_mut().call(request);
            async move {
                let response = answer.await;
                drop(started);
                response
            }
        });
        let connection = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(connection);
        // The watchdog and the shutdown tokens are watched by a task of their own, which tells
        // this one through two one-shot channels: this task is woken for every read and write,
        // and the tokens, shared by every connection, take a lock each time they are polled.
        let (gracefully, mut finish) = tokio::sync::oneshot::channel();
        let (now, mut close) = tokio::sync::oneshot::channel();
        let (ended, connection_ended) = tokio::sync::oneshot::channel::<()>();
        tasks.spawn(sentry(
            Sentry {
                peer,
                activity,
                limits,
                shutdown,
                closing,
            },
            gracefully,
            now,
            connection_ended,
        ));
        // Dropped when this task returns, however it does: the sentry then stops.
        let _ended = ended;
        let outcome = tokio::select! {
            // Close before anything else once told to (dropping the connection closes the
            // socket); a sender dropped unsent says nothing.
            biased;
            Ok(()) = &mut close => return,
            outcome = connection.as_mut() => outcome,
            Ok(()) = &mut finish => {
                connection.as_mut().graceful_shutdown();
                tokio::select! {
                    biased;
                    Ok(()) = &mut close => return,
                    outcome = connection.as_mut() => outcome,
                }
            }
        };
        if let Err(e) = outcome {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// What the sentry of one connection watches.
struct Sentry {
    peer: SocketAddr,
    activity: Arc<Activity>,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
    closing: CancellationToken,
}

/// Watches one connection's limits and the server's shutdown, and tells the connection to
/// finish its requests (`gracefully`) or to close (`now`); returns once the connection has ended.
async fn sentry(
    sentry: Sentry,
    gracefully: tokio::sync::oneshot::Sender<()>,
    now: tokio::sync::oneshot::Sender<()>,
    mut ended: tokio::sync::oneshot::Receiver<()>,
) {
    let Sentry {
        peer,
        activity,
        limits,
        shutdown,
        closing,
    } = sentry;
    let watchdog = activity.watchdog(limits);
    tokio::pin!(watchdog);
    tokio::select! {
        _ = &mut ended => return,
        _ = &mut watchdog => {
            tracing::debug!(%peer, "closing a connection past its header-read or idle timeout");
            let _ = now.send(());
            return;
        }
        _ = closing.cancelled() => {
            let _ = now.send(());
            return;
        }
        _ = shutdown.cancelled() => {
            let _ = gracefully.send(());
        }
    }
    tokio::select! {
        _ = &mut ended => {}
        _ = &mut watchdog => {
            let _ = now.send(());
        }
        _ = closing.cancelled() => {
            let _ = now.send(());
        }
    }
}

/// Marks "no request head is arriving" in [`Activity::head_since`].
const NONE: u64 = u64::MAX;

/// Milliseconds on the system's coarse monotonic clock, which ticks every few milliseconds and
/// costs a fraction of a precise read: every read and write of every connection stamps the
/// time, and the limits it is checked against are seconds.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn coarse_millis() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse);
    u64::try_from(t.tv_sec).unwrap_or(0) * 1000 + u64::try_from(t.tv_nsec / 1_000_000).unwrap_or(0)
}

/// Where the system has no coarse clock: the precise one, from the first call.
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn coarse_millis() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What crosses one connection, in milliseconds since it opened: what its watchdog reads.
struct Activity {
    /// [`coarse_millis`] when the connection opened.
    opened: u64,
    /// The last byte read or written.
    last_io: AtomicU64,
    /// When the head of the next request began to arrive (its first byte with no request in
    /// flight), or [`NONE`]. A new connection's first request is due from its opening.
    head_since: AtomicU64,
    /// Requests handed to the app and not yet answered.
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity {
            opened: coarse_millis(),
            last_io: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        coarse_millis().saturating_sub(self.opened)
    }

    fn read(&self) {
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Acquire) == 0 {
            // Only the first byte starts the clock: a trickle does not restart it.
            let _ =
                self.head_since
                    .compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    fn wrote(&self) {
        self.last_io.store(self.now(), Ordering::Relaxed);
    }

    /// A request's head was read whole and handed to the app; it is in flight until the
    /// returned guard drops.
    fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_since.store(NONE, Ordering::Release);
        InFlight(self.clone())
    }

    /// Resolves when the connection has broken a limit and must be closed.
    async fn watchdog(self: Arc<Self>, limits: ConnectionLimits) {
        let header = u64::try_from(limits.header_read_timeout.as_millis()).unwrap_or(NONE - 1);
        let idle = u64::try_from(limits.keep_alive_timeout.as_millis()).unwrap_or(NONE - 1);
        loop {
            let deadline = if self.in_flight.load(Ordering::Acquire) > 0 {
                None
            } else {
                match self.head_since.load(Ordering::Acquire) {
                    NONE => Some(self.last_io.load(Ordering::Relaxed).saturating_add(idle)),
                    since => Some(since.saturating_add(header)),
                }
            };
            let now = self.now();
            match deadline {
                Some(at) if at <= now => return,
                // At most a header timeout at a time: the first byte of a kept-alive
                // connection's next request starts its header clock without waking this, so an
                // idle wait looks again that often. (The coarse clock may lag the timer's by a
                // tick: then this sleeps a millisecond or two more and looks again.)
                Some(at) => tokio::time::sleep(Duration::from_millis((at - now).min(header))).await,
                // A request is being answered; look again later.
                None => tokio::time::sleep(limits.header_read_timeout).await,
            }
        }
    }
}

/// A request in flight on a connection; dropping it (the answer is ready, or the request was
/// abandoned) makes the connection idle again if it was the last.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_io.store(self.0.now(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The accepted socket, reporting its traffic to the connection's [`Activity`] and holding
/// its slot of the connection cap until it is dropped.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
    _slot: OwnedSemaphorePermit,
}

/// The most of a connection's first bytes kept for its ClientHello: a post-quantum key share
/// makes a hello of about 1.8 KiB; one larger than this is not fingerprinted.
const MAX_HELLO_BYTES: usize = 16 * 1024;

/// A TLS connection's stream that keeps the first bytes the client sends, until they hold
/// its whole ClientHello, so the listener can fingerprint the hello rustls read.
struct Recording<I> {
    inner: I,
    /// The bytes kept; taken once the handshake is done, `None` for a hello too large.
    kept: Option<Vec<u8>>,
    /// Still keeping: false once the hello is whole (or cannot be one), so later reads pass
    /// straight through.
    recording: bool,
}

impl<I> Recording<I> {
    fn new(inner: I) -> Self {
        Recording {
            inner,
            kept: Some(Vec::with_capacity(2048)),
            recording: true,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Recording<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let this = &mut *self;
        if this.recording
            && matches!(polled, Poll::Ready(Ok(())))
            && let Some(kept) = &mut this.kept
        {
            kept.extend_from_slice(&buf.filled()[before..]);
            if kept.len() > MAX_HELLO_BYTES {
                this.kept = None;
                this.recording = false;
            } else if !matches!(ClientHello::parse(kept), Err(HelloError::Incomplete)) {
                // Whole, or never going to parse: either way, nothing more to keep.
                this.recording = false;
            }
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Recording<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, data)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
