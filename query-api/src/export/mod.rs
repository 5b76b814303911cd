//! Bulk exports for analysts (docs/analysts.md): `GET /v1/sessions/export`,
//! `GET /v1/fingerprints/export` and `GET /v1/organizations/{organizationId}/events/export`,
//! each with a `/schema` that answers the empty stream. One request streams a window of rows
//! as an Arrow IPC stream (the default) or NDJSON, a page of the store at a time, at the
//! client's pace: memory stays flat however large the window, and a client that hangs up
//! stops the scan. Rows come newest first by id, so `after=<id>` resumes a broken download
//! exactly where it stopped.
//!
//! The machinery is here: the query (window, projection, format, resumption) and the streamed
//! body, whose pages are bounded by bytes; `running.rs` has the per-tenant cap on exports at
//! once and the watch on the key, `accept.rs` the reading of `Accept`, `windowed.rs` the walk of
//! the store every export makes. Each export's columns, filters and page of the store are in
//! its own module.

/// An export's two routes, each documented for the OpenAPI description: `GET <path>` streams
/// the window's rows of `listing` and `GET <path>/schema` answers its empty stream, both behind
/// `scope`, with the path's parameters, every export's query and the export's own filters, in that
/// order. `tenancy` names the caller (and the path's parameters, where the path has any) and
/// answers whose rows the export reads; the schema route checks it the same way, so a path
/// naming another organization is a 404 on both.
macro_rules! export_routes {
    (
        listing: $listing:ty,
        scope: $scope:ty = $scope_name:literal,
        rows: $export_op:literal at $export_path:literal,
        schema: $schema_op:literal at $schema_path:literal,
        path($($path_param:tt)*),
        filters($($filter:tt)*),
        tenancy: |$caller:ident $(, $params:ident)?| $tenancy:expr $(,)?
    ) => {
        export_routes!(@documented $export_op, $export_path, super::ExportRows, $scope_name,
            [$($path_param)*], [$($filter)*],
            pub(super) async fn export(
                axum::extract::State(state): axum::extract::State<crate::QueryState>,
                $caller: edge::SecretKey<$scope>,
                $($params: edge::body::PathParams,)?
                query: edge::body::QueryParams,
                headers: axum::http::HeaderMap,
            ) -> Result<axum::response::Response, edge::ApiError> {
                let tenancy = $tenancy;
                super::answer::<$listing>(&state, &$caller, tenancy, &query, &headers)
            }
        );

        export_routes!(@documented $schema_op, $schema_path, super::ExportSchema, $scope_name,
            [$($path_param)*], [$($filter)*],
            pub(super) async fn schema(
                $caller: edge::SecretKey<$scope>,
                $($params: edge::body::PathParams,)?
                query: edge::body::QueryParams,
                headers: axum::http::HeaderMap,
            ) -> Result<axum::response::Response, edge::ApiError> {
                let _: (schemas::OrgId, schemas::credential::Environment) = $tenancy;
                super::schema_of::<$listing>(&query, &headers)
            }
        );
    };
    // One route's handler with its OpenAPI operation.
    (@documented $op:literal, $path:literal, $answer:ty, $scope_name:literal,
        [$($path_param:tt)*], [$($filter:tt)*], $handler:item) => {
        #[utoipa::path(
            get,
            operation_id = $op,
            path = $path,
            tag = "exports",
            params($($path_param)* super::ExportQuery, $($filter)*),
            security(("secret_key" = [$scope_name])),
            responses($answer, super::ExportErrors, edge::openapi::SecretKeyErrors)
        )]
        $handler
    };
}

mod accept;
pub mod columns;
mod events;
mod fingerprints;
mod running;
mod sessions;
mod windowed;

pub use running::Slots;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_ipc::writer::StreamWriter;
use arrow_schema::Schema;
use async_trait::async_trait;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use chrono::TimeDelta;
use edge::body::QueryParams;
use edge::{ApiError, AuthContext};
use futures::StreamExt;
use futures::stream::BoxStream;
use schemas::ErrorCode;
use schemas::OrgId;
use schemas::credential::Environment;
use schemas::time::{self, Timestamp};

use store::Store;

use self::columns::Column;
use self::running::{KeyWatch, Slot};
use self::windowed::Listing;
use crate::QueryState;

/// The longest window one export covers.
pub const MAX_WINDOW_DAYS: i64 = 31;
/// Rows per record batch (and per store page) unless `batch_size` says otherwise.
pub const DEFAULT_BATCH_ROWS: usize = 8_192;
pub const MAX_BATCH_ROWS: usize = 65_536;
/// How many exports one organization may run at once in one environment, whichever keys
/// started them, unless the operator says otherwise (`--export-concurrency`).
pub const DEFAULT_CONCURRENCY: usize = 2;
/// About how many bytes of rows one page of an export holds, whatever `batch_size` asks: a page
/// is what an export keeps in memory while its client reads (the page read ahead and the one
/// encoded, each about this size), so a client that stops reading pins this much and no more.
pub const PAGE_BYTES: usize = 1024 * 1024;
/// The rows of an export's first page, before the size of its rows is known: a row of any
/// export is a few kilobytes at most (a `User-Agent` is kept to 512 bytes, a URL to 2 KiB).
const FIRST_PAGE_ROWS: usize = 256;

/// The media type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
pub const NDJSON: &str = "application/x-ndjson";

pub fn router() -> utoipa_axum::router::OpenApiRouter<QueryState> {
    use utoipa_axum::routes;
    utoipa_axum::router::OpenApiRouter::new()
        .routes(routes!(sessions::export))
        .routes(routes!(sessions::schema))
        .routes(routes!(fingerprints::export))
        .routes(routes!(fingerprints::schema))
        .routes(routes!(events::export))
        .routes(routes!(events::schema))
}

/// What every export refuses besides what any secret-key route does, for the OpenAPI
/// description.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)] // described, never built: the refusals themselves are `ApiError`s
pub(crate) enum ExportErrors {
    /// `request.validation_failed`: a parameter, the window or a column
    /// (`details.parameter_set` is `query`).
    #[response(status = 422)]
    Invalid(#[to_schema] schemas::error::ErrorEnvelope),
    /// `request.not_acceptable`: neither format is acceptable.
    #[response(status = 406)]
    NotAcceptable(#[to_schema] schemas::error::ErrorEnvelope),
    /// `rate.limited`: as many exports run already, or the key's own limit; retry after
    /// `Retry-After`.
    #[response(status = 429)]
    Busy(#[to_schema] schemas::error::ErrorEnvelope),
}

/// An export's rows, for the OpenAPI description: the window's, newest first, in either format.
pub(crate) struct ExportRows;

impl utoipa::IntoResponses for ExportRows {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        either_format("The rows of the window, newest first, as an Arrow stream or NDJSON.")
    }
}

/// An export's `/schema`, for the OpenAPI description.
pub(crate) struct ExportSchema;

impl utoipa::IntoResponses for ExportSchema {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        either_format("The export's schema: an Arrow stream with no rows (empty for NDJSON).")
    }
}

/// A 200 whose body is an Arrow stream or NDJSON, as `description` says.
fn either_format(
    description: &str,
) -> std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::response::Response>>
{
    use utoipa::PartialSchema;
    use utoipa::openapi::{ContentBuilder, ResponseBuilder, ResponsesBuilder};
    let content = |schema| ContentBuilder::new().schema(Some(schema)).build();
    let ok = ResponseBuilder::new()
        .description(description)
        .content(ARROW_STREAM, content(edge::openapi::Binary::schema()))
        .content(NDJSON, content(String::schema()))
        .build();
    ResponsesBuilder::new().response("200", ok).build().into()
}

/// The parameters every export takes (docs/analysts.md), for the OpenAPI description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by `Request::parse`
pub(crate) struct ExportQuery {
    /// The window's start (RFC 3339); a day before `to` when omitted. At most 31 days.
    #[param(format = DateTime)]
    from: Option<String>,
    /// The window's end (RFC 3339), exclusive; now when omitted.
    #[param(format = DateTime)]
    to: Option<String>,
    /// Comma-separated columns, in the order wanted; every column when omitted.
    columns: Option<String>,
    /// `arrows` (an Arrow IPC stream) or `ndjson`; otherwise the `Accept` header decides.
    #[param(pattern = "^(arrows|ndjson)$")]
    format: Option<String>,
    /// Rows per Arrow record batch.
    #[param(minimum = 1, maximum = 65536)]
    batch_size: Option<u32>,
    /// The id of the last row a broken download received: the export continues after it.
    after: Option<String>,
}

/// How the rows are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Arrow,
    Ndjson,
}

impl Format {
    pub fn media_type(self) -> &'static str {
        match self {
            Format::Arrow => ARROW_STREAM,
            Format::Ndjson => NDJSON,
        }
    }

    /// From `format=` when given, else from `Accept`: the type it weights highest of those this
    /// server writes (`*/*` and none at all mean Arrow; `q=0` refuses a type); an `Accept`
    /// leaving none is a 406.
    fn negotiate(query: &QueryParams, headers: &HeaderMap) -> Result<Format, ApiError> {
        if let Some(format) = query.one_of("format", &["arrows", "ndjson"])? {
            return Ok(if format == "ndjson" {
                Format::Ndjson
            } else {
                Format::Arrow
            });
        }
        let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
            return Ok(Format::Arrow);
        };
        match accept::choose(accept, &[ARROW_STREAM, NDJSON]) {
            Some(ARROW_STREAM) => return Ok(Format::Arrow),
            Some(_) => return Ok(Format::Ndjson),
            None => {}
        }
        Err(ApiError::new(
            ErrorCode::NotAcceptable,
            format!("exports are written as {ARROW_STREAM} or {NDJSON}"),
        )
        .with_header_name("Accept")
        .with_allowed_values([ARROW_STREAM, NDJSON]))
    }
}

/// The window `[from, to)` of row creation times: `to` defaults to now, `from` to a day
/// before `to`; at most [`MAX_WINDOW_DAYS`].
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub from: Timestamp,
    pub to: Timestamp,
}

impl Window {
    fn parse(query: &QueryParams) -> Result<Window, ApiError> {
        let at = |name: &str| -> Result<Option<Timestamp>, ApiError> {
            query
                .get(name)
                .map(|raw| {
                    chrono::DateTime::parse_from_rfc3339(raw)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .map_err(|_| {
                            ApiError::invalid_field(
                                name,
                                "must be an RFC 3339 timestamp, such as 2026-11-24T00:00:00Z",
                                Some(raw.into()),
                            )
                            .with_parameter_set("query")
                        })
                })
                .transpose()
        };
        // Whole milliseconds, the precision of every stored time and of the Arrow columns.
        let to = at("to")?.unwrap_or_else(time::now);
        let to = Timestamp::from_timestamp_millis(to.timestamp_millis()).unwrap_or(to);
        let from = at("from")?.unwrap_or(to - TimeDelta::days(1));
        if from >= to {
            return Err(ApiError::invalid_field(
                "from",
                "must be before `to`",
                Some(time::format(&from).into()),
            )
            .with_parameter_set("query"));
        }
        if to - from > TimeDelta::days(MAX_WINDOW_DAYS) {
            return Err(ApiError::invalid_field(
                "from",
                format!("the window from `from` to `to` is at most {MAX_WINDOW_DAYS} days"),
                Some(time::format(&from).into()),
            )
            .with_parameter_set("query"));
        }
        Ok(Window { from, to })
    }

    /// The id bounds of the window, as ULIDs minted in it: ids at or above `upper` were made
    /// at or after `to`, ids below `lower` before `from`.
    pub fn id_bounds(&self) -> (ulid::Ulid, ulid::Ulid) {
        let ms = |t: Timestamp| u64::try_from(t.timestamp_millis()).unwrap_or(0);
        (
            ulid::Ulid::from_parts(ms(self.from), 0),
            ulid::Ulid::from_parts(ms(self.to), 0),
        )
    }
}

/// What an export request asks for, checked.
pub struct Request<R: 'static> {
    pub format: Format,
    pub window: Window,
    pub columns: Vec<&'static Column<R>>,
    pub batch_rows: usize,
}

impl<R> Request<R> {
    /// The parameters every export takes, and `extra` of its own (its filters, `after`).
    fn parse(
        query: &QueryParams,
        headers: &HeaderMap,
        table: &'static [Column<R>],
        extra: &[&str],
    ) -> Result<Request<R>, ApiError> {
        let mut known = vec!["from", "to", "columns", "format", "batch_size"];
        known.extend_from_slice(extra);
        query.only(&known)?;
        let format = Format::negotiate(query, headers)?;
        let window = Window::parse(query)?;
        let columns = match query.get("columns").filter(|c| !c.is_empty()) {
            None => table.iter().collect(),
            Some(list) => {
                let mut chosen = Vec::new();
                for name in list.split(',').map(str::trim) {
                    let Some(column) = table.iter().find(|c| c.name == name) else {
                        return Err(ApiError::invalid_field(
                            "columns",
                            format!("`{name}` is not a column of this export"),
                            Some(list.into()),
                        )
                        .with_parameter_set("query")
                        .with_allowed_values(table.iter().map(|c| c.name)));
                    };
                    if !chosen.iter().any(|c: &&Column<R>| c.name == name) {
                        chosen.push(column);
                    }
                }
                chosen
            }
        };
        let batch_rows = match query.get("batch_size") {
            None => DEFAULT_BATCH_ROWS,
            Some(raw) => match raw.parse::<usize>() {
                Ok(n) if (1..=MAX_BATCH_ROWS).contains(&n) => n,
                _ => {
                    return Err(ApiError::invalid_field(
                        "batch_size",
                        format!("must be an integer from 1 to {MAX_BATCH_ROWS}"),
                        Some(raw.into()),
                    )
                    .with_parameter_set("query"));
                }
            },
        };
        Ok(Request {
            format,
            window,
            columns,
            batch_rows,
        })
    }
}

/// Where an export's rows come from: the store, a page at a time, newest first.
#[async_trait]
pub trait Source: Send + 'static {
    type Row: Send + 'static;
    /// The next rows, at most `limit`; none once the window is exhausted.
    async fn next(&mut self, limit: usize) -> Result<Vec<Self::Row>, ApiError>;
}

/// The answer to an export: its headers, and a body that pulls a page from `source`, encodes
/// it and hands it to the connection only as fast as the client reads.
fn stream<S: Source>(
    state: &QueryState,
    caller: &AuthContext,
    export: &'static str,
    request: Request<S::Row>,
    source: S,
) -> Result<Response, ApiError> {
    let slot = state
        .exports
        .take((caller.organization.id, caller.environment()))?;
    let watch = KeyWatch::new(state.auth.store.clone(), caller);
    let body = body(export, request, source, Some((slot, watch)))?;
    let (format, to) = (body.format, body.to);
    let mut response = axum::body::Body::from_stream(body.bytes).into_response();
    set_headers(&mut response, format, Some(to));
    Ok(response)
}

/// The three exports, by the name `vigil export` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Sessions,
    Fingerprints,
    Events,
}

impl Export {
    /// The column of each row's id, the value `after=` takes to resume.
    pub fn id_column(self) -> &'static str {
        match self {
            Export::Sessions => "session_id",
            Export::Fingerprints => "visitor_id",
            Export::Events => "event_id",
        }
    }
}

/// An export's bytes, as its HTTP answer carries them, and the end of the window they cover.
pub struct Body {
    pub format: Format,
    pub to: Timestamp,
    pub bytes: BoxStream<'static, Result<Bytes, std::io::Error>>,
}

/// An export read straight from the store, for `vigil export` on the store's host: the query is
/// the endpoint's, checked the same way, and the bytes are those the endpoint would answer.
pub fn from_store(
    store: Store,
    export: Export,
    tenancy: (OrgId, Environment),
    query: &QueryParams,
) -> Result<Body, ApiError> {
    fn walk<L: Listing>(
        store: Store,
        tenancy: (OrgId, Environment),
        query: &QueryParams,
    ) -> Result<Body, ApiError> {
        let (request, walk) = windowed::open::<L>(store, tenancy, query, &HeaderMap::new())?;
        body(L::EXPORT, request, walk, None)
    }
    match export {
        Export::Sessions => walk::<sessions::Sessions>(store, tenancy, query),
        Export::Fingerprints => walk::<fingerprints::Visitors>(store, tenancy, query),
        Export::Events => walk::<events::Events>(store, tenancy, query),
    }
}

/// The answer to an export's route: its query read, its walk of the store opened, and the
/// rows streamed.
fn answer<L: Listing>(
    state: &QueryState,
    caller: &AuthContext,
    tenancy: (OrgId, Environment),
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let (request, walk) = windowed::open::<L>(state.auth.store.clone(), tenancy, query, headers)?;
    stream(state, caller, L::EXPORT, request, walk)
}

/// The answer to an export's `/schema` route, its query read as the export reads it.
fn schema_of<L: Listing>(query: &QueryParams, headers: &HeaderMap) -> Result<Response, ApiError> {
    schema_only(L::EXPORT, windowed::read::<L>(query, headers)?.request)
}

/// The stream of an export's bytes: the schema first (in Arrow), then a page of `source`
/// encoded each time the reader wants more.
fn body<S: Source>(
    export: &'static str,
    request: Request<S::Row>,
    source: S,
    running: Option<(Slot, KeyWatch)>,
) -> Result<Body, ApiError> {
    let schema = columns::schema(export, &request.columns);
    let (format, to) = (request.format, request.window.to);
    let mut writer = match format {
        Format::Arrow => Some(
            StreamWriter::try_new(Vec::new(), &schema)
                .map_err(|e| ApiError::internal("export stream", e))?,
        ),
        Format::Ndjson => None,
    };
    // The schema's message, written by the writer's creation.
    let head = writer
        .as_mut()
        .map(|w| std::mem::take(w.get_mut()))
        .unwrap_or_default();
    let page_rows = Arc::new(AtomicUsize::new(request.batch_rows.min(FIRST_PAGE_ROWS)));
    let (slot, watch) = running.unzip();
    let pages = Pages {
        pages: read_ahead(source, page_rows.clone()),
        page_rows,
        request,
        schema,
        writer,
        done: false,
        watch,
        _slot: slot,
    };
    let bytes = futures::stream::once(async move { Ok::<_, std::io::Error>(Bytes::from(head)) })
        .chain(futures::stream::unfold(pages, Pages::next_chunk))
        .boxed();
    Ok(Body { format, to, bytes })
}

/// The empty stream of an export's schema (the columns `columns=` keeps): its header alone
/// in Arrow, nothing in NDJSON.
/// An export's schema alone, for a request read and checked as its export reads it (so a
/// parameter the export would refuse is refused here too).
fn schema_only<R>(export: &'static str, request: Request<R>) -> Result<Response, ApiError> {
    let body = match request.format {
        Format::Arrow => {
            let schema = columns::schema(export, &request.columns);
            let mut writer = StreamWriter::try_new(Vec::new(), &schema)
                .map_err(|e| ApiError::internal("export schema", e))?;
            writer
                .finish()
                .map_err(|e| ApiError::internal("export schema", e))?;
            writer
                .into_inner()
                .map_err(|e| ApiError::internal("export schema", e))?
        }
        Format::Ndjson => Vec::new(),
    };
    let mut response = axum::body::Body::from(body).into_response();
    set_headers(&mut response, request.format, None);
    Ok(response)
}

fn set_headers(response: &mut Response, format: Format, to: Option<Timestamp>) {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.media_type()),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(to) = to
        && let Ok(value) = HeaderValue::from_str(&time::format(&to))
    {
        // A repeated request with this `to` exports the same rows.
        headers.insert("vigil-export-to", value);
    }
}

/// Pages of `source` read by a task of their own, one page ahead of the encoding: reading
/// and encoding take a core each rather than turns on one, which doubled an export's rate. The
/// channel holds one page, so the reader waits for the client like the encoder does, and
/// stops when the body is dropped (the client hung up). Each page has the rows `page_rows`
/// says when it is read, which the encoder keeps to about [`PAGE_BYTES`].
fn read_ahead<S: Source>(
    mut source: S,
    page_rows: Arc<AtomicUsize>,
) -> tokio::sync::mpsc::Receiver<Result<Vec<S::Row>, ApiError>> {
    let (pages, received) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let page = source.next(page_rows.load(Ordering::Relaxed).max(1)).await;
            let last = page.as_ref().map_or(true, Vec::is_empty);
            if pages.send(page).await.is_err() || last {
                break;
            }
        }
    });
    received
}

/// The state of a streamed export between the pages the client reads.
struct Pages<R: 'static> {
    pages: tokio::sync::mpsc::Receiver<Result<Vec<R>, ApiError>>,
    /// The rows the reader puts in its next page: `batch_size` at most, fewer where that many
    /// would be over [`PAGE_BYTES`], measured on the pages encoded so far.
    page_rows: Arc<AtomicUsize>,
    request: Request<R>,
    schema: Arc<Schema>,
    writer: Option<StreamWriter<Vec<u8>>>,
    done: bool,
    /// The key the export runs for, read again as it streams; none for a read of the store by
    /// `vigil export`.
    watch: Option<KeyWatch>,
    /// Held until the body is done or dropped (the client hung up); none for a read of the
    /// store by `vigil export`.
    _slot: Option<Slot>,
}

impl<R: Send + 'static> Pages<R> {
    /// The next chunk of the body: a page of rows encoded, or the stream's end; an error ends
    /// the body early, which the client sees as a broken download to resume with `after`.
    async fn next_chunk(mut self) -> Option<(Result<Bytes, std::io::Error>, Self)> {
        if self.done {
            return None;
        }
        if let Some(watch) = self.watch.as_mut()
            && !watch.still_valid().await
        {
            tracing::info!("export: its key was revoked or expired; the body ends");
            self.done = true;
            return Some((
                Err(std::io::Error::other("the export's key is no longer valid")),
                self,
            ));
        }
        let page = self.pages.recv().await.unwrap_or_else(|| {
            Err(ApiError::internal(
                "export",
                "the reader of the store stopped without a last page",
            ))
        });
        let rows = match page {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = ?e.code, "export: the store failed mid-stream; the body ends");
                // Let the connection send what it holds first: the rows before the failure
                // reach the client, which resumes after the last of them.
                tokio::task::yield_now().await;
                self.done = true;
                return Some((Err(std::io::Error::other("the export stopped")), self));
            }
        };
        let mut chunk = Vec::new();
        if rows.is_empty() {
            self.done = true;
            if let Some(writer) = self.writer.as_mut() {
                if let Err(e) = writer.finish() {
                    return Some((Err(std::io::Error::other(e.to_string())), self));
                }
                chunk = std::mem::take(writer.get_mut());
            }
            if chunk.is_empty() {
                return None;
            }
            return Some((Ok(Bytes::from(chunk)), self));
        }
        match self.writer.as_mut() {
            Some(writer) => {
                let written = columns::record_batch(&self.schema, &self.request.columns, &rows)
                    .and_then(|batch| writer.write(&batch));
                if let Err(e) = written {
                    self.done = true;
                    return Some((Err(std::io::Error::other(e.to_string())), self));
                }
                chunk = std::mem::take(writer.get_mut());
            }
            None => columns::ndjson(&self.request.columns, &rows, &mut chunk),
        }
        // The next pages' rows, from this one's bytes a row: as many as fit in PAGE_BYTES.
        let per_row = (chunk.len() / rows.len()).max(1);
        self.page_rows.store(
            (PAGE_BYTES / per_row).clamp(1, self.request.batch_rows),
            Ordering::Relaxed,
        );
        Some((Ok(Bytes::from(chunk)), self))
    }
}
