//! Visitors (`004_visitors.cql`) with the indexes a save moves: `visitors_by_anchor`, which
//! linking reads, and the three order tables of `008_read_indexes.cql`.

use async_trait::async_trait;
use std::ops::Bound;

use fjall::{Keyspace, OwnedWriteBatch, Readable};
use schemas::credential::Environment;
use schemas::ids::{OrgId, VisitorId};
use schemas::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::key::Expiring;
use super::{
    EmbeddedStore, Inner, VISITORS, VISITORS_BY_ANCHOR, VISITORS_BY_FIRST_SEEN,
    VISITORS_BY_LAST_SEEN, VISITORS_BY_SEEN_COUNT, decode_row, encode, key, prefix_end,
    read_indexed, scan, unavailable,
};
use crate::{Result, VisitorAnchors, VisitorOrder, VisitorRecord, VisitorStore};

/// `visitors_by_anchor`: the visitor indexed under one anchor digest.
#[derive(Serialize, Deserialize)]
struct AnchorRow {
    visitor_id: VisitorId,
}

impl Inner {
    /// Adds one visitor's save to `batch`: the visitor row, an index row per digest of its
    /// anchors, the removal of the index rows of digests the stored row had and this one has
    /// not, and its rows in the order tables and the expiry queue moved to its new values.
    /// Callers hold the writer mutex, so the stored row read here is the one replaced. False,
    /// with nothing added, if the stored row is not at the revision before the visitor's.
    fn add_visitor_save(
        &self,
        batch: &mut OwnedWriteBatch,
        visitor: &VisitorRecord,
    ) -> Result<bool> {
        let (org, env, id) = (visitor.organization_id, visitor.environment, visitor.id);
        let k = key::visitor(org, env, id);
        let stored: Option<VisitorRecord> = decode_row(VISITORS, self.visitors.get(k))?;
        if stored
            .as_ref()
            .is_some_and(|s| s.revision.checked_add(1) != Some(visitor.revision))
        {
            return Ok(false);
        }
        let digests = visitor.anchors.digests();
        if let Some(stored) = &stored {
            for old in stored.anchors.digests() {
                if !digests.contains(&old) {
                    batch.remove(&self.visitors_by_anchor, key::anchor(org, env, &old, id));
                }
            }
        }
        if let Some(stored) = &stored {
            for order in VisitorOrder::ALL {
                let (old, new) = (order.value(stored), order.value(visitor));
                if old != new {
                    batch.remove(
                        self.visitor_order(order),
                        key::visitor_by(org, env, old, id),
                    );
                }
            }
            if stored.last_seen_at != visitor.last_seen_at {
                batch.remove(
                    &self.expiry_queue,
                    key::expiry(stored.last_seen_at, Expiring::Visitor, &k),
                );
            }
        }
        for order in VisitorOrder::ALL {
            batch.insert(
                self.visitor_order(order),
                key::visitor_by(org, env, order.value(visitor), id),
                [],
            );
        }
        batch.insert(
            &self.expiry_queue,
            key::expiry(visitor.last_seen_at, Expiring::Visitor, &k),
            [],
        );
        let row = encode(VISITORS_BY_ANCHOR, &AnchorRow { visitor_id: id })?;
        for digest in &digests {
            batch.insert(
                &self.visitors_by_anchor,
                key::anchor(org, env, digest, id),
                row.clone(),
            );
        }
        batch.insert(&self.visitors, k, encode(VISITORS, visitor)?);
        Ok(true)
    }

    pub(super) fn visitor_order(&self, order: VisitorOrder) -> &Keyspace {
        match order {
            VisitorOrder::LastSeen => &self.visitors_by_last_seen,
            VisitorOrder::SeenCount => &self.visitors_by_seen_count,
            VisitorOrder::FirstSeen => &self.visitors_by_first_seen,
        }
    }

    /// Drops the visitor at `k` if it was not seen since `keep_since`, with its anchor and order
    /// index rows.
    pub(super) fn purge_visitor(
        &self,
        batch: &mut OwnedWriteBatch,
        k: &[u8],
        keep_since: Timestamp,
    ) -> Result<()> {
        let Some(v) = decode_row::<VisitorRecord>(VISITORS, self.visitors.get(k))? else {
            return Ok(());
        };
        if v.last_seen_at >= keep_since {
            return Ok(());
        }
        let (org, env, id) = (v.organization_id, v.environment, v.id);
        for digest in v.anchors.digests() {
            batch.remove(&self.visitors_by_anchor, key::anchor(org, env, &digest, id));
        }
        for order in VisitorOrder::ALL {
            batch.remove(
                self.visitor_order(order),
                key::visitor_by(org, env, order.value(&v), id),
            );
        }
        batch.remove(&self.visitors, k.to_vec());
        Ok(())
    }
}

#[async_trait]
impl VisitorStore for EmbeddedStore {
    /// One batch under the writer mutex: the visitor row, an index row per digest of its
    /// anchors, and the removal of the index rows of digests the stored row had and this one
    /// has not (read under the same lock, so no concurrent save can slip in between, and the
    /// revision checked is the one replaced).
    async fn save_visitors(&self, visitors: &[VisitorRecord]) -> Result<Vec<VisitorId>> {
        crate::rules::check_visitor_saves(visitors)?;
        if visitors.is_empty() {
            return Ok(Vec::new());
        }
        let visitors = visitors.to_vec();
        self.write(move |db, _| {
            let mut batch = db.batch();
            let mut stale = Vec::new();
            for visitor in &visitors {
                if !db.add_visitor_save(&mut batch, visitor)? {
                    stale.push(visitor.id);
                }
            }
            batch.commit().map_err(unavailable)?;
            Ok(stale)
        })
        .await
    }

    async fn get_visitor(
        &self,
        org: OrgId,
        env: Environment,
        id: VisitorId,
    ) -> Result<Option<VisitorRecord>> {
        decode_row(
            VISITORS,
            self.inner
                .db
                .snapshot()
                .get(&self.inner.visitors, key::visitor(org, env, id)),
        )
    }

    async fn find_visitor_by_anchors(
        &self,
        org: OrgId,
        env: Environment,
        anchors: &VisitorAnchors,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The index rows and the visitor rows they name from one snapshot: a visitor saved
        // between the two reads cannot leave an index row pointing at a missing or older row.
        let snapshot = self.inner.db.snapshot();
        let mut ids: Vec<VisitorId> = Vec::new();
        for digest in anchors.digests() {
            let partition = key::anchor_partition(org, env, &digest);
            let rows: Vec<AnchorRow> = scan(
                VISITORS_BY_ANCHOR,
                &snapshot,
                &self.inner.visitors_by_anchor,
                Bound::Included(partition.to_vec()),
                prefix_end(&partition),
                limit,
            )?;
            ids.extend(rows.into_iter().map(|r| r.visitor_id));
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        ids.dedup();
        let mut found = Vec::with_capacity(ids.len().min(limit));
        for id in ids.into_iter().take(limit) {
            if let Some(v) = decode_row(
                VISITORS,
                snapshot.get(&self.inner.visitors, key::visitor(org, env, id)),
            )? {
                found.push(v);
            }
        }
        Ok(found)
    }

    async fn list_visitors(
        &self,
        org: OrgId,
        env: Environment,
        after: Option<VisitorId>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let partition = key::visitor_partition(org, env);
        let start = match after {
            Some(after) => Bound::Excluded(key::visitor(org, env, after).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        scan(
            VISITORS,
            &self.inner.db.snapshot(),
            &self.inner.visitors,
            start,
            prefix_end(&partition),
            limit,
        )
    }

    /// The order's index rows and the visitor rows they name, from one snapshot (they are
    /// written in one batch, so the snapshot has both or neither).
    async fn list_visitors_by(
        &self,
        org: OrgId,
        env: Environment,
        order: VisitorOrder,
        after: Option<(u64, VisitorId)>,
        limit: usize,
    ) -> Result<Vec<VisitorRecord>> {
        let partition = key::visitor_order_partition(org, env);
        let start = match after {
            Some((value, id)) => Bound::Excluded(key::visitor_by(org, env, value, id).to_vec()),
            None => Bound::Included(partition.to_vec()),
        };
        read_indexed(
            &self.inner.db.snapshot(),
            (
                self.inner.visitor_order(order),
                match order {
                    VisitorOrder::LastSeen => VISITORS_BY_LAST_SEEN,
                    VisitorOrder::SeenCount => VISITORS_BY_SEEN_COUNT,
                    VisitorOrder::FirstSeen => VISITORS_BY_FIRST_SEEN,
                },
            ),
            (start, prefix_end(&partition)),
            limit,
            (&self.inner.visitors, VISITORS),
            |id| key::visitor(org, env, VisitorId::from_ulid(id.into())),
        )
    }
}
