//! Visitor fingerprints in PostgreSQL. The three list orders are indexes on the visitor row's
//! own columns, and the anchor index is a table that follows each save in the same transaction
//! (and goes with its visitor by cascade).

use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use schemas::credential::Environment;
use schemas::ids::{OrgId, VisitorId};

use super::{
    PostgresStore, db_error, decode_all, env_code, execute, json, limit, owned_page, owned_row,
    rows, ulid_bytes,
};
use crate::{Result, VisitorAnchors, VisitorOrder, VisitorRecord, VisitorStore};

const VISITORS: &str = "visitors";

/// An order's value as its `bigint` column (milliseconds and counts fit).
fn order_value(order: VisitorOrder, v: &VisitorRecord) -> i64 {
    i64::try_from(order.value(v)).unwrap_or(i64::MAX)
}

/// Writes one visitor over the revision before its own; false, with nothing written, if the
/// stored row is at another (the condition is checked under the row's lock, so no save slips in
/// between).
async fn save_one(tx: &impl GenericClient, v: &VisitorRecord) -> Result<bool> {
    let (org, env, id) = (
        ulid_bytes(v.organization_id.ulid()),
        env_code(v.environment),
        ulid_bytes(v.id.ulid()),
    );
    let revision = i64::try_from(v.revision).unwrap_or(i64::MAX);
    let written = execute(
        tx,
        "INSERT INTO visitors (organization_id, environment, id, last_seen, seen_count, first_seen,
                               last_seen_at, body, revision)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (organization_id, environment, id) DO UPDATE SET
             last_seen = excluded.last_seen, seen_count = excluded.seen_count,
             first_seen = excluded.first_seen, last_seen_at = excluded.last_seen_at,
             body = excluded.body, revision = excluded.revision
         WHERE visitors.revision = $9 - 1",
        &[
            &org,
            &env,
            &id,
            &order_value(VisitorOrder::LastSeen, v),
            &order_value(VisitorOrder::SeenCount, v),
            &order_value(VisitorOrder::FirstSeen, v),
            &v.last_seen_at,
            &json(v),
            &revision,
        ],
    )
    .await?;
    if written == 0 {
        return Ok(false);
    }
    let digests: Vec<Vec<u8>> = v.anchors.digests().iter().map(|d| d.0.to_vec()).collect();
    // The index never names a visitor for anchors it lost.
    execute(
        tx,
        "DELETE FROM visitors_by_anchor
         WHERE organization_id = $1 AND environment = $2 AND visitor_id = $3
           AND NOT (digest = ANY($4))",
        &[&org, &env, &id, &digests],
    )
    .await?;
    execute(
        tx,
        "INSERT INTO visitors_by_anchor (organization_id, environment, digest, visitor_id)
         SELECT $1, $2, digest, $3 FROM unnest($4::bytea[]) AS digest
         ON CONFLICT DO NOTHING",
        &[&org, &env, &id, &digests],
    )
    .await?;
    Ok(true)
}

#[async_trait]
impl VisitorStore for PostgresStore {
    /// One transaction, visitors in key order (so overlapping saves cannot deadlock).
    async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<Vec<VisitorId>> {
        crate::rules::check_visitor_saves(visitors)?;
        if visitors.is_empty() {
            return Ok(Vec::new());
        }
        let mut ordered: Vec<&VisitorRecord> = visitors.iter().collect();
        ordered.sort_by_key(|v| (v.organization_id, env_code(v.environment), v.id));
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let mut stale = Vec::new();
        for visitor in ordered {
            if !save_one(&tx, visitor).await? {
                stale.push(visitor.id);
            }
        }
        tx.commit().await.map_err(db_error)?;
        Ok(stale)
    }

    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        let sql =
            "SELECT body FROM visitors WHERE organization_id = $1 AND environment = $2 AND id = $3";
        owned_row(self, VISITORS, sql, (org, env, id.ulid())).await
    }

    /// The index rows and the visitors they name in one statement, so the two agree.
    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        count: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let digests: Vec<Vec<u8>> = anchors.digests().iter().map(|d| d.0.to_vec()).collect();
        if count == 0 || digests.is_empty() {
            return Ok(Vec::new());
        }
        let found = rows(
            &self.client().await?,
            "SELECT v.body FROM visitors v
             WHERE v.organization_id = $1 AND v.environment = $2 AND v.id IN (
                 SELECT visitor_id FROM visitors_by_anchor
                 WHERE organization_id = $1 AND environment = $2 AND digest = ANY($3))
             ORDER BY v.id DESC LIMIT $4",
            &[
                &ulid_bytes(org.ulid()),
                &env_code(env),
                &digests,
                &limit(count),
            ],
        )
        .await?;
        decode_all(VISITORS, &found)
    }

    async fn list_visitors(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<VisitorId>,
        count: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let sql = "SELECT body FROM visitors
             WHERE organization_id = $1 AND environment = $2 AND ($3::bytea IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4";
        owned_page(
            self,
            VISITORS,
            sql,
            (org, env),
            after.map(|a| a.ulid()),
            count,
        )
        .await
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
        let sql = match order {
            VisitorOrder::LastSeen => {
                "SELECT body FROM visitors
                 WHERE organization_id = $1 AND environment = $2
                   AND ($3::bigint IS NULL OR (last_seen, id) < ($3, $4::bytea))
                 ORDER BY last_seen DESC, id DESC LIMIT $5"
            }
            VisitorOrder::SeenCount => {
                "SELECT body FROM visitors
                 WHERE organization_id = $1 AND environment = $2
                   AND ($3::bigint IS NULL OR (seen_count, id) < ($3, $4::bytea))
                 ORDER BY seen_count DESC, id DESC LIMIT $5"
            }
            VisitorOrder::FirstSeen => {
                "SELECT body FROM visitors
                 WHERE organization_id = $1 AND environment = $2
                   AND ($3::bigint IS NULL OR (first_seen, id) < ($3, $4::bytea))
                 ORDER BY first_seen DESC, id DESC LIMIT $5"
            }
        };
        let (value, id) = match after {
            Some((value, id)) => (
                Some(i64::try_from(value).unwrap_or(i64::MAX)),
                Some(ulid_bytes(id.ulid())),
            ),
            None => (None, None),
        };
        let found = rows(
            &self.client().await?,
            sql,
            &[
                &ulid_bytes(org.ulid()),
                &env_code(env),
                &value,
                &id,
                &limit(count),
            ],
        )
        .await?;
        decode_all(VISITORS, &found)
    }
}
