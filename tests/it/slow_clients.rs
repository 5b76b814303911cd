//! Slow and idle clients cannot exhaust the server (docs/architecture.md#connections), over real
//! TCP, plain and TLS: a client trickling its headers is disconnected after the header-read timeout
//! while other clients are answered at once; a kept-alive connection may wait for its next request
//! up to the keep-alive timeout (not the header one) and is closed after it; and the connection cap
//! holds, clients over it waiting until a connection closes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use vigil_tests::TestServer;

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: vigil.test\r\n\r\n";
const HEALTHY: &[u8] = br#"{"status":"ok"}"#;

fn addr(s: &TestServer) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// Sends the start of a request, then one more header byte every `every`, never finishing the
/// headers; returns how long after the first byte the server closed the connection, and what
/// it sent before closing.
async fn trickle(stream: impl AsyncRead + AsyncWrite, every: Duration) -> (Duration, Vec<u8>) {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let started = Instant::now();
    let writing = async {
        let _ = writer
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: vigil.test\r\nX-Slow: ")
            .await;
        loop {
            tokio::time::sleep(every).await;
            if writer.write_all(b"a").await.is_err() || writer.flush().await.is_err() {
                // The server is gone; the reader sees it too.
                std::future::pending::<()>().await;
            }
        }
    };
    let reading = async {
        let mut got = Vec::new();
        let _ = reader.read_to_end(&mut got).await;
        got
    };
    let got = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::select! {
            got = reading => got,
            _ = writing => unreachable!("the writer never ends"),
        }
    })
    .await
    .expect("the trickling client was not disconnected within 30 s");
    (started.elapsed(), got)
}

/// `GET /healthz` on a new connection; asserts it is answered 200 within a second.
async fn healthz_answers_at_once(addr: &str) {
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(1), async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(HEALTHZ).await.expect("write");
        read_answer(&mut stream).await
    })
    .await
    .unwrap_or_else(|_| panic!("/healthz took over a second"));
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Reads one `/healthz` answer (its body ends the answer).
async fn read_answer(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(HEALTHY) {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(
            n > 0,
            "closed mid-answer: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// Runs `ask` (a request that asserts its own quick answer) every 200 ms until `until`
/// resolves, and returns what `until` did.
async fn others_are_answered_while<T, F: std::future::Future<Output = ()>>(
    ask: impl Fn() -> F,
    until: impl std::future::Future<Output = T>,
) -> T {
    tokio::pin!(until);
    let mut asked = 0;
    loop {
        tokio::select! {
            out = &mut until => {
                assert!(asked >= 3, "only {asked} requests were made meanwhile");
                return out;
            }
            _ = async {
                ask().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            } => asked += 1,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_headers_is_dropped_while_others_are_answered() {
    let s = TestServer::start_with(|a| a.header_read_timeout = Duration::from_secs(2)).await;
    let addr = addr(&s);
    let slow = TcpStream::connect(&addr).await.unwrap();
    // A byte every half second keeps the socket busy, but the headers never end.
    let (after, got) = others_are_answered_while(
        || healthz_answers_at_once(&addr),
        trickle(slow, Duration::from_millis(500)),
    )
    .await;
    assert!(
        after >= Duration::from_millis(1500) && after < Duration::from_secs(6),
        "disconnected {after:?} after the first byte; the header-read timeout is 2 s"
    );
    assert!(
        !got.starts_with(b"HTTP/1.1 200"),
        "a request whose headers never ended was answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_waits_for_the_keep_alive_timeout_not_the_header_one() {
    let s = TestServer::start_with(|a| {
        a.header_read_timeout = Duration::from_secs(1);
        a.keep_alive_timeout = Duration::from_secs(3);
    })
    .await;
    let addr = addr(&s);

    // A connection that never sends anything owes its first request within the header timeout.
    let mut silent = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf))
        .await
        .expect("a silent connection was not closed within 10 s")
        .unwrap_or(0);
    assert_eq!(n, 0, "nothing is sent to a silent connection");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );

    let mut kept = TcpStream::connect(&addr).await.unwrap();
    kept.write_all(HEALTHZ).await.unwrap();
    read_answer(&mut kept).await;
    // Idle for twice the header timeout, well within the keep-alive one: still open.
    tokio::time::sleep(Duration::from_secs(2)).await;
    kept.write_all(HEALTHZ).await.unwrap();
    let again = read_answer(&mut kept).await;
    assert!(again.starts_with(b"HTTP/1.1 200"));
    // Then idle past the keep-alive timeout: closed.
    let answered = Instant::now();
    let n = tokio::time::timeout(Duration::from_secs(10), kept.read(&mut buf))
        .await
        .expect("an idle connection was not closed within 10 s")
        .unwrap_or(0);
    assert_eq!(n, 0);
    let idle = answered.elapsed();
    assert!(
        idle >= Duration::from_millis(2500) && idle < Duration::from_secs(7),
        "closed after {idle:?} idle; the keep-alive timeout is 3 s"
    );
}

/// The next request on a kept-alive connection owes its headers within the header timeout of
/// its first byte, as a first request does: the idle wait does not lend it the keep-alive time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_trickling_its_next_request_is_dropped_after_the_header_timeout() {
    let s = TestServer::start_with(|a| {
        a.header_read_timeout = Duration::from_secs(1);
        a.keep_alive_timeout = Duration::from_secs(30);
    })
    .await;
    let mut kept = TcpStream::connect(&addr(&s)).await.unwrap();
    kept.write_all(HEALTHZ).await.unwrap();
    read_answer(&mut kept).await;
    let (mut reader, mut writer) = kept.into_split();
    let began = Instant::now();
    let trickle = tokio::spawn(async move {
        for byte in HEALTHZ.iter().cycle().take(200) {
            if writer.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(15), reader.read(&mut buf))
        .await
        .expect("a trickled request on a kept-alive connection was not dropped within 15 s")
        .unwrap_or(0);
    trickle.abort();
    assert_eq!(n, 0, "a request whose headers never ended was answered");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "dropped after {:?}; the header timeout is 1 s, the keep-alive one 30 s",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_and_waiting_clients_are_served_when_one_closes() {
    const CAP: usize = 4;
    let s = TestServer::start_with(|a| a.max_connections = CAP).await;
    let addr = addr(&s);
    let mut idle = Vec::new();
    for _ in 0..CAP {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    // Over the cap: the connection waits in the listen queue, unanswered.
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let mut extra = TcpStream::connect(&addr).await.unwrap();
        extra.write_all(HEALTHZ).await.unwrap();
        waiting.push(extra);
    }
    for extra in &mut waiting {
        let mut buf = [0u8; 64];
        assert!(
            tokio::time::timeout(Duration::from_millis(700), extra.read(&mut buf))
                .await
                .is_err(),
            "a connection over the cap was served"
        );
    }
    // Closing the idle connections frees their slots; the waiting clients are served in turn.
    idle.clear();
    for extra in &mut waiting {
        let answer = tokio::time::timeout(Duration::from_secs(5), read_answer(extra))
            .await
            .expect("a waiting client was not served once slots were free");
        assert!(answer.starts_with(b"HTTP/1.1 200"));
    }
    drop(waiting);
    healthz_answers_at_once(&addr).await;
}

async fn tls_connect(
    addr: &str,
    config: &Arc<rustls::ClientConfig>,
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(config.clone())
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .expect("TLS handshake")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_trickling_client_and_a_stalled_handshake_are_dropped() {
    let (s, _dir, config) =
        vigil_tests::tls::serving(|a| a.header_read_timeout = Duration::from_secs(2)).await;
    let addr = addr(&s);
    let healthz_over_tls = || async {
        let started = Instant::now();
        let mut stream = tls_connect(&addr, &config).await;
        stream.write_all(HEALTHZ).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(1), read_answer(&mut stream))
            .await
            .expect("/healthz over TLS took over a second");
        assert!(answer.starts_with(b"HTTP/1.1 200"));
        assert!(started.elapsed() < Duration::from_secs(1));
    };

    // Headers trickled inside TLS.
    let slow = tls_connect(&addr, &config).await;
    let (after, got) =
        others_are_answered_while(healthz_over_tls, trickle(slow, Duration::from_millis(500)))
            .await;
    assert!(
        after < Duration::from_secs(6),
        "disconnected {after:?} after the first byte; the header-read timeout is 2 s"
    );
    assert!(!got.starts_with(b"HTTP/1.1 200"));

    // A client that connects and never finishes (here: never starts) its handshake.
    let mut stalled = TcpStream::connect(&addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(10), stalled.read(&mut buf))
        .await
        .expect("a stalled handshake was not dropped within 10 s")
        .unwrap_or(0);
    assert_eq!(n, 0);
    assert!(started.elapsed() < Duration::from_secs(6));
    healthz_over_tls().await;
}
