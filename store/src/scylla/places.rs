//! The counts behind the caps the store enforces on ScyllaDB (`store/cql/012_caps.cql`): an
//! organization's API keys in use, and its webhook endpoints per environment with how many are
//! active. ScyllaDB has no transaction over a partition's rows, so each cap is a count moved by
//! lightweight transactions: a place is taken before the row is written and given back if the
//! row is not, so two racing writes cannot both take the last place.
//!
//! A count is first made from the rows it stands for. A process that stops between taking a
//! place and writing its row (or between a write that frees one and giving it back) leaves the
//! count one high: the cap then refuses one write too early until an operator deletes the
//! count row, which the next write makes again from the rows.

use schemas::credential::Environment;
use schemas::ids::OrgId;

use super::{CONTENDED_RETRIES, ScyllaStore, corrupt, env_text, rows_of};
use crate::{EndpointCaps, EndpointStatus, EndpointWrite, EventStore, OrganizationStore};
use crate::{Result, StoreError};

const KEY_COUNT: &str = "SELECT in_use FROM api_key_counts WHERE organization_id = ?";
const FIRST_KEY_COUNT: &str =
    "INSERT INTO api_key_counts (organization_id, in_use) VALUES (?, ?) IF NOT EXISTS";
const MOVE_KEY_COUNT: &str =
    "UPDATE api_key_counts SET in_use = ? WHERE organization_id = ? IF in_use = ?";
const ENDPOINT_COUNT: &str = "SELECT active, total FROM webhook_endpoint_counts \
     WHERE organization_id = ? AND environment = ?";
const FIRST_ENDPOINT_COUNT: &str = "INSERT INTO webhook_endpoint_counts \
     (organization_id, environment, active, total) VALUES (?, ?, ?, ?) IF NOT EXISTS";
const MOVE_ENDPOINT_COUNT: &str = "UPDATE webhook_endpoint_counts SET active = ?, total = ? \
     WHERE organization_id = ? AND environment = ? IF active = ? AND total = ?";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[
    KEY_COUNT,
    FIRST_KEY_COUNT,
    MOVE_KEY_COUNT,
    ENDPOINT_COUNT,
    FIRST_ENDPOINT_COUNT,
    MOVE_ENDPOINT_COUNT,
];

/// More rows than any capped table holds for one owner, to count them in one read.
const ALL_ROWS: usize = 1_000_000;

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn contended(what: &str) -> StoreError {
    StoreError::Unavailable(format!("ScyllaDB: {what} kept changing under its update"))
}

/// Active endpoints and all endpoints.
type EndpointCounts = (i32, i32);

impl ScyllaStore {
    async fn read_key_count(&self, org: OrgId) -> Result<Option<i32>> {
        let result = self.execute(KEY_COUNT, (org.to_string(),)).await?;
        let rows = rows_of("api_key_counts", result)?;
        Ok(rows
            .maybe_first_row::<(Option<i32>,)>()
            .map_err(|e| corrupt("api_key_counts", &e))?
            .map(|(n,)| n.unwrap_or(0)))
    }

    /// Makes an organization's key count from its keys, unless another caller made it first.
    async fn make_key_count(&self, org: OrgId) -> Result<()> {
        let mut in_use = 0;
        for env in [Environment::Live, Environment::Test] {
            let keys = self.list_api_keys(org, env, None, ALL_ROWS).await?;
            in_use += keys.iter().filter(|k| k.in_use()).count();
        }
        self.applied(FIRST_KEY_COUNT, (org.to_string(), count(in_use)))
            .await
            .map(drop)
    }

    /// Takes a place for a key of `org` under `cap`; false when the organization has `cap` keys
    /// in use already.
    pub(super) async fn take_key_place(&self, org: OrgId, cap: usize) -> Result<bool> {
        for _ in 0..CONTENDED_RETRIES {
            let Some(n) = self.read_key_count(org).await? else {
                self.make_key_count(org).await?;
                continue;
            };
            if usize::try_from(n).unwrap_or(0) >= cap {
                return Ok(false);
            }
            if self
                .applied(MOVE_KEY_COUNT, (n + 1, org.to_string(), n))
                .await?
            {
                return Ok(true);
            }
        }
        Err(contended("an organization's key count"))
    }

    /// Gives back a key's place: its write failed, or it is no longer in use. A count not made
    /// yet is left so: it is made from the rows as they are then.
    pub(super) async fn give_back_key_place(&self, org: OrgId) {
        let given = async {
            for _ in 0..CONTENDED_RETRIES {
                let Some(n) = self.read_key_count(org).await? else {
                    return Ok(());
                };
                if self
                    .applied(MOVE_KEY_COUNT, ((n - 1).max(0), org.to_string(), n))
                    .await?
                {
                    return Ok(());
                }
            }
            Err(contended("an organization's key count"))
        };
        if let Err(e) = given.await {
            tracing::warn!(error = %e, "ScyllaDB: a key's place under its cap was not given back");
        }
    }

    async fn read_endpoint_counts(
        &self,
        org: OrgId,
        env: Environment,
    ) -> Result<Option<EndpointCounts>> {
        let result = self
            .execute(ENDPOINT_COUNT, (org.to_string(), env_text(env)))
            .await?;
        let rows = rows_of("webhook_endpoint_counts", result)?;
        Ok(rows
            .maybe_first_row::<(Option<i32>, Option<i32>)>()
            .map_err(|e| corrupt("webhook_endpoint_counts", &e))?
            .map(|(active, total)| (active.unwrap_or(0), total.unwrap_or(0))))
    }

    async fn make_endpoint_counts(&self, org: OrgId, env: Environment) -> Result<()> {
        let endpoints = self
            .list_webhook_endpoints(org, env, None, ALL_ROWS)
            .await?;
        let active = endpoints
            .iter()
            .filter(|e| e.status == EndpointStatus::Active)
            .count();
        self.applied(
            FIRST_ENDPOINT_COUNT,
            (
                org.to_string(),
                env_text(env),
                count(active),
                count(endpoints.len()),
            ),
        )
        .await
        .map(drop)
    }

    /// Moves an organization's endpoint counts in `env` by `step`, which answers the new counts
    /// or why not (then nothing moves). A count not made yet is made first when `make`, else
    /// left so.
    async fn move_endpoint_counts(
        &self,
        (org, env): (OrgId, Environment),
        make: bool,
        step: impl Fn(EndpointCounts) -> std::result::Result<EndpointCounts, EndpointWrite>,
    ) -> Result<EndpointWrite> {
        for _ in 0..CONTENDED_RETRIES {
            let Some(counts) = self.read_endpoint_counts(org, env).await? else {
                if !make {
                    return Ok(EndpointWrite::Written);
                }
                self.make_endpoint_counts(org, env).await?;
                continue;
            };
            let (active, total) = match step(counts) {
                Ok(moved) => moved,
                Err(refused) => return Ok(refused),
            };
            let values = (
                active.max(0),
                total.max(0),
                org.to_string(),
                env_text(env),
                counts.0,
                counts.1,
            );
            if self.applied(MOVE_ENDPOINT_COUNT, values).await? {
                return Ok(EndpointWrite::Written);
            }
        }
        Err(contended("an organization's webhook endpoint counts"))
    }

    /// Takes a place for a new endpoint (active, among all) under `caps`.
    pub(super) async fn take_endpoint_place(
        &self,
        owner: (OrgId, Environment),
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        self.move_endpoint_counts(owner, true, |(active, total)| {
            if usize::try_from(total).unwrap_or(0) >= caps.total {
                Err(EndpointWrite::TotalCapReached)
            } else if usize::try_from(active).unwrap_or(0) >= caps.active {
                Err(EndpointWrite::ActiveCapReached)
            } else {
                Ok((active + 1, total + 1))
            }
        })
        .await
    }

    /// Takes an active place for an endpoint being enabled, under `caps.active`.
    pub(super) async fn take_active_place(
        &self,
        owner: (OrgId, Environment),
        caps: EndpointCaps,
    ) -> Result<EndpointWrite> {
        self.move_endpoint_counts(owner, true, |(active, total)| {
            if usize::try_from(active).unwrap_or(0) >= caps.active {
                Err(EndpointWrite::ActiveCapReached)
            } else {
                Ok((active + 1, total))
            }
        })
        .await
    }

    /// Gives back places: `(active, total)` of them, an endpoint's that was not written (1, 1)
    /// or one's that stopped being active (1, 0).
    pub(super) async fn give_back_endpoint_places(
        &self,
        owner: (OrgId, Environment),
        (active, total): EndpointCounts,
    ) {
        let given = self
            .move_endpoint_counts(owner, false, |(a, t)| Ok((a - active, t - total)))
            .await;
        if let Err(e) = given {
            tracing::warn!(error = %e, "ScyllaDB: a webhook endpoint's place under its cap was not given back");
        }
    }
}
