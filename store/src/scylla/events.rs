//! Events on ScyllaDB (`schemas/cql/005_events.cql`): each event's record as JSON in its
//! organization's and environment's partition, newest first. A save of sessions writes its
//! events in its own logged batch ([`batch_events`]).

use scylla::statement::batch::Batch;
use scylla::value::CqlValue;

use super::{encode, env_text};
use crate::EventRecord;

const INSERT: &str =
    "INSERT INTO events (organization_id, environment, id, body) VALUES (?, ?, ?, ?)";

/// Every statement of this module, for the test that prepares each on a CQL node.
pub const STATEMENTS: &[&str] = &[INSERT];

/// Appends the insert (or replacement, by id) of each event to `batch`.
pub(super) fn batch_events(
    events: &[EventRecord],
    batch: &mut Batch,
    values: &mut Vec<Vec<Option<CqlValue>>>,
) {
    for event in events {
        batch.append_statement(INSERT);
        values.push(vec![
            Some(CqlValue::Text(event.organization_id.to_string())),
            Some(CqlValue::Text(env_text(event.environment).to_owned())),
            Some(CqlValue::Text(event.id.to_string())),
            Some(CqlValue::Text(encode(event))),
        ]);
    }
}
