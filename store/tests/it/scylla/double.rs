//! An in-memory CQL node for the ScyllaDB backend's tests: `kassandra` answering the real
//! driver over TCP on a free loopback port. kassandra ships no server, so this is one: each
//! connection's frames go to one shared in-memory session.
//!
//! What it can check: that every statement parses as CQL, prepares and executes through the
//! driver, and round-trips its values. What it cannot: it ignores clustering order, treats a
//! clustering `=` as `>=`, drops range conditions, `IF` conditions and TTLs without an error. So
//! ordering, conditional writes and expiry are checked on a real node only
//! (`scripts/test-scylla.sh`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use kassandra::KassandraSession;
use kassandra::cql::query::{QueryString, QueryValue};
use kassandra::error::DbError;
use kassandra::frame::request::Request;
use kassandra::frame::response::Response;
use kassandra::frame::response::error::Error;
use kassandra::frame::response::result::{PreparedMetadata, QueryResult};
use kassandra::frame::{request_stream, response_sink};
use tokio::net::{TcpListener, TcpStream};

type Shared = Arc<Mutex<KassandraSession>>;

/// A running node; it stops with the test's runtime.
pub struct Double {
    pub addr: SocketAddr,
}

impl Double {
    pub async fn start() -> Double {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let node: Shared = Arc::new(Mutex::new(KassandraSession::new()));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(node.clone(), stream));
            }
        });
        Double { addr }
    }

    pub fn url(&self, keyspace: &str) -> String {
        format!("scylla://{}/{keyspace}", self.addr)
    }
}

async fn serve(node: Shared, mut stream: TcpStream) {
    let (read, write) = stream.split();
    let (mut frames, mut sink) = (request_stream(read), response_sink(write));
    while let Some(Ok((frame, opcode, data))) = frames.next().await {
        let response = match Request::deserialize(opcode, &data, frame.flags) {
            Ok(request) => answer(&node, request),
            Err(_) => Response::Error(Error::new(DbError::ProtocolError, "unparsable request")),
        };
        if sink.send((response, frame.stream)).await.is_err() {
            break;
        }
    }
}

fn answer(node: &Shared, request: Request<'_>) -> Response {
    let mut node = node.lock().unwrap();
    let result = match request {
        Request::StartUp(_) | Request::Register { .. } => return Response::Ready,
        Request::Options => return Response::options(),
        Request::Query(q) => node.process(q),
        Request::Prepare(p) => {
            let markers = bind_markers(&p);
            let mut prepared = node.prepare(p);
            if let (Some(markers), Ok(QueryResult::Prepared(prepared))) =
                (markers, prepared.as_mut())
            {
                keep_markers_only(&mut prepared.prepared_metadata, &markers);
            }
            prepared
        }
        Request::Execute(e) => node.execute(e),
        Request::Batch(b) => node.process_batch(b),
        Request::AuthResponse => {
            return Response::Error(Error::new(DbError::ProtocolError, "no authentication here"));
        }
    };
    match result {
        Ok(result) => Response::Result(result),
        Err(e) => Response::Error(e),
    }
}

/// Which values of a statement's WHERE or VALUES are `?` markers. kassandra counts literals
/// as markers too when it prepares, and the driver prepares its own topology queries (with
/// literals such as `key = 'local'`), which it then could not bind.
fn bind_markers(query: &QueryString) -> Option<Vec<bool>> {
    let values: Vec<&QueryValue> = match query {
        QueryString::Select(s) => s.r#where.statements.iter().map(|(_, v)| v).collect(),
        QueryString::Delete(d) => d.r#where.statements.iter().map(|(_, v)| v).collect(),
        QueryString::Insert(i) => i.values.iter().collect(),
        _ => return None,
    };
    Some(
        values
            .into_iter()
            .map(|v| matches!(v, QueryValue::Blankslate))
            .collect(),
    )
}

/// The prepared metadata with the literals' columns taken out, and the partition key's
/// indexes renumbered to match.
fn keep_markers_only(metadata: &mut PreparedMetadata, markers: &[bool]) {
    if metadata.col_specs.len() != markers.len() {
        return;
    }
    let mut renumbered = vec![None; markers.len()];
    let mut next = 0u16;
    for (i, &marker) in markers.iter().enumerate() {
        if marker {
            renumbered[i] = Some(next);
            next += 1;
        }
    }
    let specs = std::mem::take(&mut metadata.col_specs);
    metadata.col_specs = specs
        .into_iter()
        .zip(markers)
        .filter(|(_, marker)| **marker)
        .map(|(spec, _)| spec)
        .collect();
    for pk in &mut metadata.pk_indexes {
        if let Some(Some(index)) = renumbered.get(pk.index as usize) {
            pk.index = *index;
        }
    }
}
