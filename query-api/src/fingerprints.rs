//! `GET /v1/fingerprints` and `GET /v1/fingerprints/{visitorId}` (the API's
//! `visitor_fingerprint`, documented in docs/api.md#sessions-fingerprints-and-handoffs;
//! docs/architecture.md: #scopes, #lists, #environments, #visitors): handlers, query validation
//! and the shapes they answer. A visitor of another organization or environment is a 404.
//!
//! Lists default to `last_seen` descending; `sort=seen_count` and `sort=first_seen` are
//! descending too, the visitor id breaking ties. Each order is an index table the store keeps on
//! every visitor write (`visitors_by_last_seen`, ...), so a page is one range read over all of an
//! environment's visitors, never a sort in memory; the cursor carries the sort value and id of
//! the last row returned, signed and bound to the order.

use axum::extract::State;
use edge::body::{InPath, QueryParams, Reply};
use edge::openapi::{PageQuery, SecretKeyErrors};
use edge::pagination::{encode_cursor, scan_page};
use edge::policy::{ListFingerprints, ReadFingerprint};
use edge::{ApiError, SecretKey};
use schemas::error::ErrorEnvelope;
use schemas::resources::{List, Pagination, Single};
use schemas::time::{self, Timestamp};
use schemas::{SessionId, VisitorId};
use serde::Serialize;
use store::{VisitorAnchors, VisitorOrder, VisitorRecord, VisitorRequest, VisitorStorage};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::QueryState;
use crate::evidence::LinkedSession;

/// The values of `sort=`; without it, `last_seen`.
pub const SORTS: [&str; 2] = ["seen_count", "first_seen"];
/// How many index rows one `search` request reads at most while filtering, so a search that
/// matches little cannot make a request read a whole partition; the cursor resumes after them.
const SCAN_BUDGET: usize = 2_000;

pub fn router() -> OpenApiRouter<QueryState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(read))
}

#[derive(Serialize, utoipa::ToSchema)]
struct Lifecycle {
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    first_seen_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    last_seen_at: Timestamp,
    seen_count: u64,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    expires_at: Timestamp,
}

/// The members list items and the detail share.
#[derive(Serialize, utoipa::ToSchema)]
struct Fingerprint<'a> {
    id: VisitorId,
    #[schema(value_type = String, pattern = "^visitor_fingerprint$")]
    object: &'static str,
    lifecycle: Lifecycle,
    #[schema(value_type = RequestDoc)]
    latest_request: &'a VisitorRequest,
    #[schema(value_type = StorageDoc)]
    storage: &'a VisitorStorage,
    #[schema(value_type = AnchorsDoc)]
    anchors: &'a VisitorAnchors,
}

fn fingerprint(v: &VisitorRecord) -> Fingerprint<'_> {
    Fingerprint {
        id: v.id,
        object: "visitor_fingerprint",
        lifecycle: Lifecycle {
            first_seen_at: v.first_seen_at,
            last_seen_at: v.last_seen_at,
            seen_count: v.seen_count,
            expires_at: v.expires_at,
        },
        latest_request: &v.latest_request,
        storage: &v.storage,
        anchors: &v.anchors,
    }
}

/// A visitor fingerprint with its component vector and recent sessions.
#[derive(Serialize, utoipa::ToSchema)]
struct Detail<'a> {
    #[serde(flatten)]
    fingerprint: Fingerprint<'a>,
    components: Components<'a>,
    activity: Activity,
}

/// The fingerprint's component vector.
#[derive(Serialize, utoipa::ToSchema)]
struct Components<'a> {
    vector: &'a [f64],
}

/// The visitor's most recent linked sessions.
#[derive(Serialize, utoipa::ToSchema)]
struct Activity {
    sessions: Vec<LinkedSession>,
}

/// The request that last linked to the visitor.
#[derive(utoipa::ToSchema)]
#[schema(as = VisitorRequest)]
#[allow(dead_code)] // described; the answer serializes the store's `VisitorRequest`
struct RequestDoc {
    user_agent: String,
    ip_address: String,
}

/// Where the SDK found the visitor token.
#[derive(utoipa::ToSchema)]
#[schema(as = VisitorStorage)]
#[allow(dead_code)] // described; the answer serializes the store's `VisitorStorage`
struct StorageDoc {
    cookies: bool,
    local_storage: bool,
    indexed_db: bool,
    service_worker: bool,
    window_name: bool,
}

/// The rendering hashes that link a fresh profile on the same machine.
#[derive(utoipa::ToSchema)]
#[schema(as = VisitorAnchors)]
#[allow(dead_code)] // described; the answer serializes the store's `VisitorAnchors`
struct AnchorsDoc {
    #[schema(required = true)]
    webgl_hash: Option<String>,
    #[schema(required = true)]
    parameters_hash: Option<String>,
    #[schema(required = true)]
    audio_hash: Option<String>,
}

fn sort_name(order: VisitorOrder) -> &'static str {
    match order {
        VisitorOrder::LastSeen => "last_seen",
        VisitorOrder::SeenCount => "seen_count",
        VisitorOrder::FirstSeen => "first_seen",
    }
}

/// `search` (docs/architecture.md#lists): a visitor id, an IP address or a user-agent substring.
fn matches(v: &VisitorRecord, search: Option<&str>) -> bool {
    match search {
        None => true,
        Some(q) => {
            v.id.to_string() == q
                || v.latest_request.ip_address == q
                || v.latest_request.user_agent.contains(q)
        }
    }
}

/// The caller's environment's visitor fingerprints, the most recently seen first unless `sort`
/// says otherwise.
#[utoipa::path(
    get,
    operation_id = "list_fingerprints",
    path = "/v1/fingerprints",
    tag = "fingerprints",
    params(
        PageQuery,
        ("sort" = Option<String>, Query, pattern = "^(seen_count|first_seen)$",
            description = "The most seen, or the first seen, first."),
        ("search" = Option<String>, Query,
            description = "A visitor id, an IP address or part of a user agent."),
    ),
    security(("secret_key" = ["fingerprints:list"])),
    responses(
        (status = 200, description = "A page of fingerprints.", body = List<Fingerprint>),
        (status = 422, description = "`request.validation_failed`: a query parameter or path id (`details.parameter_set`).", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn list(
    State(state): State<QueryState>,
    caller: SecretKey<ListFingerprints>,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    query.only(&["limit", "cursor", "search", "sort"])?;
    let limit = query.limit(50, 200)? as usize;
    let order = match query.one_of("sort", &SORTS)? {
        Some("seen_count") => VisitorOrder::SeenCount,
        Some("first_seen") => VisitorOrder::FirstSeen,
        _ => VisitorOrder::LastSeen,
    };
    let search = query.get("search").filter(|s| !s.is_empty());
    let (org, env) = (caller.organization.id, caller.environment());
    // The position only means something in one order, so the cursor is bound to it.
    let binding = format!("fingerprints:{org}:{env}:{}", sort_name(order));
    let position = query
        .cursor::<SortPosition>(&state.auth.secret, &binding)?
        .map(|p| (p.value, p.id));

    // A search filters the index's rows and reads at most SCAN_BUDGET of them.
    let store = &state.auth.store;
    let page = scan_page(
        limit,
        search.is_some(),
        SCAN_BUDGET,
        position,
        move |after, n| store.list_visitors_by(org, env, order, after, n),
        |v: &VisitorRecord| (order.value(v), v.id),
        |v| matches(v, search),
    )
    .await?;
    let (has_more, next) = (page.has_more, page.next);
    let next_cursor = match (has_more, next) {
        (true, Some((value, id))) => Some(encode_cursor(
            &state.auth.secret,
            &binding,
            &SortPosition { value, id }.to_string(),
        )),
        _ => None,
    };
    let rows: Vec<Fingerprint<'_>> = page.rows.iter().map(fingerprint).collect();
    Ok(Reply::list(
        rows,
        Pagination {
            limit: limit as u32,
            has_more,
            next_cursor,
        },
    ))
}

/// Where a page of fingerprints in one order ended, as its cursor carries it: the order's value
/// of the last visitor, then its id (`<value>.<vid_…>`).
struct SortPosition {
    value: u64,
    id: VisitorId,
}

impl std::fmt::Display for SortPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.value, self.id)
    }
}

impl std::str::FromStr for SortPosition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parsed = s.split_once('.').and_then(|(value, id)| {
            Some(SortPosition {
                value: value.parse().ok()?,
                id: id.parse().ok()?,
            })
        });
        parsed.ok_or_else(|| format!("not a position of this list: {s}"))
    }
}

/// One visitor fingerprint.
#[utoipa::path(
    get,
    operation_id = "read_fingerprint",
    path = "/v1/fingerprints/{visitorId}",
    tag = "fingerprints",
    params(("visitorId" = VisitorId, Path, description = "A visitor of the caller's environment.")),
    security(("secret_key" = ["fingerprints:read"])),
    responses(
        (status = 200, description = "The fingerprint.", body = Single<Detail>),
        (status = 404, description = "`resource.not_found`: no such visitor for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(
    State(state): State<QueryState>,
    caller: SecretKey<ReadFingerprint>,
    InPath(id): InPath<VisitorId>,
) -> Result<Reply, ApiError> {
    let (org, env) = (caller.organization.id, caller.environment());
    let visitor = state
        .auth
        .store
        .get_visitor(org, env, id)
        .await?
        .ok_or_else(|| ApiError::not_found("visitor_fingerprint"))?;
    let mut sessions = Vec::with_capacity(visitor.recent_sessions.len());
    for sid in &visitor.recent_sessions {
        let sid: SessionId = *sid;
        if let Some(s) = state.auth.store.get_session(org, env, sid).await? {
            sessions.push(LinkedSession::of(&s));
        }
    }
    Ok(Reply::ok(Detail {
        fingerprint: fingerprint(&visitor),
        components: Components {
            vector: &visitor.components,
        },
        activity: Activity { sessions },
    }))
}
