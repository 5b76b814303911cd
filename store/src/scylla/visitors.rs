//! Visitor fingerprints on ScyllaDB (`store/cql/004_visitors.cql` and the order indexes of
//! `008_read_indexes.cql`). A save reads the values the stored row is indexed under, then
//! writes the row, its anchor index rows and its order index rows in one logged batch; the
//! lists read an index, then each visitor by key.

use std::collections::BTreeSet;

use async_trait::async_trait;
use schemas::credential::Environment;
use schemas::ids::{OrgId, VisitorId};
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::CqlValue;

use super::{ScyllaStore, corrupt, encode, env_text, errors, rows_of};
use crate::{Result, VisitorAnchors, VisitorOrder, VisitorRecord, VisitorStore};

const VISITORS: &str = "visitors";
const VISITORS_BY_ANCHOR: &str = "visitors_by_anchor";

const READ_STORED: &str = "SELECT last_seen, seen_count, first_seen, anchor_digests, body \
     FROM visitors WHERE organization_id = ? AND environment = ? AND id = ?";
/// The row of a visitor not stored yet (or dropped by retention since it was read).
const INSERT: &str = "INSERT INTO visitors (organization_id, environment, id, last_seen, \
     seen_count, first_seen, anchor_digests, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS";
/// The row of a stored visitor, over the row as read: its record (which holds its revision) is
/// compared whole, so the table needs no column of its own for the revision.
const UPDATE: &str = "UPDATE visitors SET last_seen = ?, seen_count = ?, first_seen = ?, \
     anchor_digests = ?, body = ? WHERE organization_id = ? AND environment = ? AND id = ? \
     IF body = ?";
const INDEX_ANCHOR: &str = "INSERT INTO visitors_by_anchor \
     (organization_id, environment, anchor_digest, visitor_id) VALUES (?, ?, ?, ?)";
const UNINDEX_ANCHOR: &str = "DELETE FROM visitors_by_anchor \
     WHERE organization_id = ? AND environment = ? AND anchor_digest = ? AND visitor_id = ?";
const BY_ANCHOR: &str = "SELECT visitor_id FROM visitors_by_anchor \
     WHERE organization_id = ? AND environment = ? AND anchor_digest = ?";
const READ: &str =
    "SELECT body FROM visitors WHERE organization_id = ? AND environment = ? AND id = ?";
const LIST: &str = "SELECT body FROM visitors WHERE organization_id = ? AND environment = ?";
const LIST_AFTER: &str =
    "SELECT body FROM visitors WHERE organization_id = ? AND environment = ? AND id < ?";

/// Each order's index table, and its statements.
struct OrderIndex {
    index: &'static str,
    unindex: &'static str,
    list: &'static str,
    list_after: &'static str,
}

macro_rules! order_index {
    ($table:literal) => {
        OrderIndex {
            index: concat!(
                "INSERT INTO ",
                $table,
                " (organization_id, environment, value, visitor_id) VALUES (?, ?, ?, ?)"
            ),
            unindex: concat!(
                "DELETE FROM ",
                $table,
                " WHERE organization_id = ? AND environment = ? AND value = ? AND visitor_id = ?"
            ),
            list: concat!(
                "SELECT visitor_id FROM ",
                $table,
                " WHERE organization_id = ? AND environment = ?"
            ),
            list_after: concat!(
                "SELECT visitor_id FROM ",
                $table,
                " WHERE organization_id = ? AND environment = ? AND (value, visitor_id) < (?, ?)"
            ),
        }
    };
}

const LAST_SEEN: OrderIndex = order_index!("visitors_by_last_seen");
const SEEN_COUNT: OrderIndex = order_index!("visitors_by_seen_count");
const FIRST_SEEN: OrderIndex = order_index!("visitors_by_first_seen");

fn order_index(order: VisitorOrder) -> &'static OrderIndex {
    match order {
        VisitorOrder::LastSeen => &LAST_SEEN,
        VisitorOrder::SeenCount => &SEEN_COUNT,
        VisitorOrder::FirstSeen => &FIRST_SEEN,
    }
}

/// Every statement of this module, for the test that prepares each on a CQL node.
pub fn statements() -> Vec<&'static str> {
    let mut all = vec![
        READ_STORED,
        INSERT,
        UPDATE,
        INDEX_ANCHOR,
        UNINDEX_ANCHOR,
        BY_ANCHOR,
        READ,
        LIST,
        LIST_AFTER,
    ];
    for order in VisitorOrder::ALL {
        let i = order_index(order);
        all.extend([i.index, i.unindex, i.list, i.list_after]);
    }
    all
}

/// An order's value as its `bigint` column (milliseconds and counts fit).
fn order_value(order: VisitorOrder, v: &VisitorRecord) -> i64 {
    i64::try_from(order.value(v)).unwrap_or(i64::MAX)
}

type Bound = Option<CqlValue>;

fn text(s: impl Into<String>) -> Bound {
    Some(CqlValue::Text(s.into()))
}

/// What a save must know of the stored row: its value in each order, its anchor digests, its
/// record (for its revision, and the condition of the write).
type Stored = (
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<Vec<Vec<u8>>>,
    Option<String>,
);

impl ScyllaStore {
    /// Writes the visitor's row by a lightweight transaction over the row as read, if that is at
    /// the revision before the visitor's (or if absent), then its index rows in one batch. False, with nothing written, when the
    /// row is at another revision. Should the index batch fail after the row was written, the
    /// next save of the visitor writes its index rows again.
    async fn save_visitor_batch(&self, v: &VisitorRecord) -> Result<bool> {
        let (org, env, id) = (
            v.organization_id.to_string(),
            env_text(v.environment),
            v.id.to_string(),
        );
        let result = self
            .execute(READ_STORED, (org.as_str(), env, id.as_str()))
            .await?;
        let rows = rows_of(VISITORS, result)?;
        let stored = rows
            .maybe_first_row::<Stored>()
            .map_err(|e| corrupt(VISITORS, &e))?;
        let digests: Vec<Vec<u8>> = v.anchors.digests().iter().map(|d| d.0.to_vec()).collect();
        let body = encode(v);
        let orders = (
            order_value(VisitorOrder::LastSeen, v),
            order_value(VisitorOrder::SeenCount, v),
            order_value(VisitorOrder::FirstSeen, v),
        );
        let written = match &stored {
            Some(row) => {
                let read: Option<VisitorRecord> = match row.4.as_deref() {
                    Some(body) => Some(super::decode(VISITORS, body)?),
                    None => None,
                };
                let at = read.as_ref().map_or(0, |r| r.revision);
                if at.checked_add(1) != Some(v.revision) {
                    return Ok(false);
                }
                self.applied(
                    UPDATE,
                    (
                        orders.0,
                        orders.1,
                        orders.2,
                        &digests,
                        body.as_str(),
                        org.as_str(),
                        env,
                        id.as_str(),
                        row.4.as_deref(),
                    ),
                )
                .await?
            }
            None => {
                self.applied(
                    INSERT,
                    (
                        org.as_str(),
                        env,
                        id.as_str(),
                        orders.0,
                        orders.1,
                        orders.2,
                        &digests,
                        body.as_str(),
                    ),
                )
                .await?
            }
        };
        if !written {
            return Ok(false);
        }

        let mut batch = Batch::new(BatchType::Logged);
        let mut values: Vec<Vec<Bound>> = Vec::new();
        // The anchor index never names a visitor for anchors it lost.
        let had: BTreeSet<Vec<u8>> = stored
            .as_ref()
            .and_then(|s| s.3.clone())
            .unwrap_or_default()
            .into_iter()
            .collect();
        for lost in had.iter().filter(|d| !digests.contains(d)) {
            batch.append_statement(UNINDEX_ANCHOR);
            values.push(vec![
                text(&org),
                text(env),
                Some(CqlValue::Blob(lost.clone())),
                text(&id),
            ]);
        }
        for digest in &digests {
            batch.append_statement(INDEX_ANCHOR);
            values.push(vec![
                text(&org),
                text(env),
                Some(CqlValue::Blob(digest.clone())),
                text(&id),
            ]);
        }
        let stored_values = stored.as_ref().map(|s| [s.0, s.1, s.2]);
        for (i, order) in VisitorOrder::ALL.into_iter().enumerate() {
            let index = order_index(order);
            let value = order_value(order, v);
            if let Some(old) = stored_values.and_then(|values| values[i])
                && old != value
            {
                batch.append_statement(index.unindex);
                values.push(vec![
                    text(&org),
                    text(env),
                    Some(CqlValue::BigInt(old)),
                    text(&id),
                ]);
            }
            batch.append_statement(index.index);
            values.push(vec![
                text(&org),
                text(env),
                Some(CqlValue::BigInt(value)),
                text(&id),
            ]);
        }
        self.session()
            .await?
            .batch(&batch, values)
            .await
            .map_err(errors::execution)?;
        Ok(true)
    }

    /// Visitors by id, in the order given; an id whose row is gone is skipped.
    async fn visitors_by_id(
        &self,
        org: OrgId,
        env: Environment,
        ids: Vec<String>,
    ) -> Result<Vec<VisitorRecord>> {
        let reads = ids.into_iter().map(|id| async move {
            let result = self
                .execute(READ, (org.to_string(), env_text(env), id))
                .await?;
            Self::body::<VisitorRecord>(VISITORS, result)
        });
        let found = futures::future::try_join_all(reads).await?;
        Ok(found.into_iter().flatten().collect())
    }
}

#[async_trait]
impl VisitorStore for ScyllaStore {
    async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<Vec<VisitorId>> {
        crate::rules::check_visitor_saves(visitors)?;
        let mut stale = Vec::new();
        for visitor in visitors {
            if !self.save_visitor_batch(visitor).await? {
                stale.push(visitor.id);
            }
        }
        Ok(stale)
    }

    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        let result = self
            .execute(READ, (org.to_string(), env_text(env), id.to_string()))
            .await?;
        Self::body(VISITORS, result)
    }

    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        count: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let digests = anchors.digests();
        if count == 0 || digests.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids = BTreeSet::new();
        for digest in digests {
            let found = self
                .first_texts(
                    VISITORS_BY_ANCHOR,
                    BY_ANCHOR,
                    (org.to_string(), env_text(env), digest.0.to_vec()),
                    count,
                )
                .await?;
            ids.extend(found);
        }
        // Newest first, as every list of visitors.
        let newest: Vec<String> = ids.into_iter().rev().take(count).collect();
        self.visitors_by_id(org, env, newest).await
    }

    async fn list_visitors(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<VisitorId>,
        count: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let (org, env) = (org.to_string(), env_text(env));
        match after {
            None => self.first_bodies(VISITORS, LIST, (org, env), count).await,
            Some(after) => {
                self.first_bodies(VISITORS, LIST_AFTER, (org, env, after.to_string()), count)
                    .await
            }
        }
    }

    /// Served by the order's index: value descending, then id descending, after a row position.
    async fn list_visitors_by(
        &self,
        org: OrgId,
        env: Environment,
        order: VisitorOrder,
        after: Option<(u64, VisitorId)>,
        count: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let index = order_index(order);
        let table = "visitors order index";
        let ids = match after {
            None => {
                self.first_texts(table, index.list, (org.to_string(), env_text(env)), count)
                    .await?
            }
            Some((value, id)) => {
                self.first_texts(
                    table,
                    index.list_after,
                    (
                        org.to_string(),
                        env_text(env),
                        i64::try_from(value).unwrap_or(i64::MAX),
                        id.to_string(),
                    ),
                    count,
                )
                .await?
            }
        };
        self.visitors_by_id(org, env, ids).await
    }
}
