//! The one walk every export makes: an organization's and environment's rows of one kind,
//! newest first by id, a page of the store at a time, from the window's end (or the caller's
//! `after`) down to the window's start. Each export says only what is its own: its columns,
//! its filters and how a page of its store is read ([`Listing`]).

use async_trait::async_trait;
use axum::http::HeaderMap;
use edge::ApiError;
use edge::body::QueryParams;
use schemas::OrgId;
use schemas::credential::Environment;
use schemas::ids::UlidId;
use store::Store;

use super::columns::Column;
use super::{Request, Source, Window};

/// One export's rows as its store lists them.
pub(super) trait Listing: Default + Send + Sync + 'static {
    /// The export's name, as its schema's metadata and its file name carry it.
    const EXPORT: &'static str;
    /// Its columns, version 1 (docs/analysts.md).
    const COLUMNS: &'static [Column<Self::Row>];
    /// The query parameters it takes besides every export's: none unless it says so.
    const FILTERS: &'static [&'static str] = &[];

    /// What one row of the export is made from.
    type Row: Walked;

    /// The listing the query's filters ask for, each checked: all rows when it has none.
    fn from_query(_query: &QueryParams) -> Result<Self, ApiError> {
        Ok(Self::default())
    }

    /// At most `at.limit` rows older than `at.before`, newest first, each with what the export
    /// adds to the store's row.
    fn page(
        &self,
        at: Page<'_, <Self::Row as Walked>::Id>,
    ) -> impl Future<Output = Result<Vec<Self::Row>, ApiError>> + Send;

    /// Whether the filters keep a row the page read: all of them unless the export filters
    /// after reading.
    fn keep(&self, _row: &Self::Row) -> bool {
        true
    }
}

/// A row an export walks by its id: minted from a ULID, so its time says which window it is in.
pub(super) trait Walked: Send + 'static {
    type Id: UlidId;
    fn id(&self) -> Self::Id;
}

/// Where the next page of a walk starts, and how much of it to read.
pub(super) struct Page<'a, Id> {
    pub store: &'a Store,
    pub org: OrgId,
    pub env: Environment,
    /// Rows older than this one, exclusive.
    pub before: Id,
    /// Rows minted before this are outside the window: a page may stop at the first of them
    /// rather than add to rows the walk will drop.
    pub lower: ulid::Ulid,
    pub limit: usize,
}

/// An export's query, every parameter checked.
pub(super) struct Asked<L: Listing> {
    pub request: Request<L::Row>,
    /// The listing its filters make.
    listing: L,
    /// Where a resumed download continues.
    after: Option<Id<L>>,
}

/// The id an export's rows are walked by.
type Id<L> = <<L as Listing>::Row as Walked>::Id;

/// An export's query, read.
pub(super) fn read<L: Listing>(
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<Asked<L>, ApiError> {
    let mut known = L::FILTERS.to_vec();
    known.push("after");
    let request = Request::parse(query, headers, L::COLUMNS, &known)?;
    let listing = L::from_query(query)?;
    let after = query
        .get("after")
        .map(|raw| {
            raw.parse::<Id<L>>().map_err(|_| {
                // "the last session received", of the export of sessions.
                let row = L::EXPORT.strip_suffix('s').unwrap_or(L::EXPORT);
                let expected = format!(
                    "must be the id ({}) of the last {row} received",
                    Id::<L>::PREFIX
                );
                ApiError::invalid_field("after", expected, Some(raw.into()))
                    .with_parameter_set("query")
            })
        })
        .transpose()?;
    Ok(Asked {
        request,
        listing,
        after,
    })
}

/// An export's request and its walk of the store, from the query.
pub(super) fn open<L: Listing>(
    store: Store,
    tenancy: (OrgId, Environment),
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<(Request<L::Row>, Windowed<L>), ApiError> {
    let Asked {
        request,
        listing,
        after,
    } = read::<L>(query, headers)?;
    let walk = Windowed::new(listing, store, tenancy, request.window, after);
    Ok((request, walk))
}

/// A walk of one listing through a window.
pub(super) struct Windowed<L: Listing> {
    listing: L,
    store: Store,
    tenancy: (OrgId, Environment),
    /// The last id read: the exclusive bound of the next page.
    before: Id<L>,
    /// Ids below this were minted before the window.
    lower: ulid::Ulid,
    exhausted: bool,
}

impl<L: Listing> Windowed<L> {
    fn new(
        listing: L,
        store: Store,
        tenancy: (OrgId, Environment),
        window: Window,
        after: Option<Id<L>>,
    ) -> Self {
        let (lower, upper) = window.id_bounds();
        let upper = Id::<L>::from_ulid(upper);
        Windowed {
            listing,
            store,
            tenancy,
            before: after.filter(|a| *a < upper).unwrap_or(upper),
            lower,
            exhausted: false,
        }
    }
}

#[async_trait]
impl<L: Listing> Source for Windowed<L> {
    type Row = L::Row;

    async fn next(&mut self, limit: usize) -> Result<Vec<L::Row>, ApiError> {
        let mut rows = Vec::new();
        // A filter that keeps nothing of a page reads on until it keeps something or the
        // window is done: an empty answer means the end.
        while rows.is_empty() && !self.exhausted {
            let (org, env) = self.tenancy;
            let at = Page {
                store: &self.store,
                org,
                env,
                before: self.before,
                lower: self.lower,
                limit,
            };
            let mut page = self.listing.page(at).await?;
            self.exhausted = page.len() < limit;
            if let Some(cut) = page.iter().position(|row| row.id().ulid() < self.lower) {
                page.truncate(cut);
                self.exhausted = true;
            }
            if let Some(last) = page.last() {
                self.before = last.id();
            }
            page.retain(|row| self.listing.keep(row));
            rows = page;
        }
        Ok(rows)
    }
}
