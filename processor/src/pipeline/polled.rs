//! Reads a polled record of `collect.batches.v1` in one pass: the batch record and the SDK batch
//! it carries.
//!
//! Read as a [`BatchRecord`], a record's observations are kept as text, and finding where that
//! text ends means scanning all of it; the fold then parsed the same text again. Ingest writes
//! the batch's `kind` (and its `seq`) before its observations, so by the time the reader reaches
//! the observations it knows what they are and reads them as that batch at once. The scan was
//! 3.6% of a saturated ingest benchmark's samples (docs/performance.md#ingest).
//!
//! Every other record is read as before, its observations kept as text for the fold: a
//! server-made record (`seq` 0), one without a `kind` (from a build before it was carried) or
//! with the `kind` after the observations, and one whose batch does not read as its `kind` says,
//! so that the fold reports that batch as it always has.
//!
//! The price: a batch that does not read as its kind is read three times (here, again as text,
//! and by the fold, which reports it), where it was read twice. Ingest lets through any JSON
//! object with a kind, so a sender can choose that, within ingest's body limit; it gains
//! nothing by it but a dead letter. And a batch delivered again (after a crash, or when a
//! partition moves) is parsed whole before the fold passes it over as already processed.

use std::fmt;

use schemas::collect::BatchRecord;
use schemas::raw::RawJson;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::Batch;
use crate::observations::OfKind;

/// A polled batch record, with the SDK batch it carries when that was read with it.
pub(super) struct ReadRecord {
    /// The record. Its `observations` are JSON `null` when `observed` holds them.
    pub batch: BatchRecord,
    /// The SDK batch, read in the same pass as the record; `None` when it is kept as text in
    /// `batch.observations` instead, to be read when folded.
    pub observed: Option<Batch>,
}

/// Reads a record's payload; fails as reading it as a [`BatchRecord`] would.
pub(super) fn read(payload: &[u8]) -> serde_json::Result<ReadRecord> {
    match serde_json::from_slice::<OnePass>(payload) {
        Ok(OnePass(record)) => Ok(record),
        // The batch did not read as its kind says (a member of the wrong shape, one given twice,
        // or nested a level too deep for the parser inside the record), or the record itself is
        // wrong: read again with the batch as text, so that the record's error, or the batch's
        // when folded, is the one the two readings always gave, whatever failed here.
        Err(_) => serde_json::from_slice::<BatchRecord>(payload).map(|batch| ReadRecord {
            batch,
            observed: None,
        }),
    }
}

/// [`BatchRecord`]'s members, as its derived reading names them.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum Member {
    Schema,
    OrganizationId,
    Environment,
    SessionId,
    Seq,
    ReceivedAt,
    Request,
    Kind,
    Observations,
    /// Ignored, as the derived reading ignores unknown members.
    #[serde(other)]
    Other,
}

struct OnePass(ReadRecord);

impl<'de> Deserialize<'de> for OnePass {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(RecordVisitor)
    }
}

struct RecordVisitor;

/// Sets a member once; a second time fails the reading (which [`read`] then repeats as a
/// [`BatchRecord`], for that reading's own error).
fn once<T, E: de::Error>(slot: &mut Option<T>, name: &'static str, value: T) -> Result<(), E> {
    match slot {
        Some(_) => Err(E::duplicate_field(name)),
        None => {
            *slot = Some(value);
            Ok(())
        }
    }
}

fn required<T, E: de::Error>(slot: Option<T>, name: &'static str) -> Result<T, E> {
    slot.ok_or_else(|| E::missing_field(name))
}

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = OnePass;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a batch record")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OnePass, A::Error> {
        let (mut schema, mut organization_id, mut environment, mut session_id) =
            (None, None, None, None);
        let (mut seq, mut received_at, mut request) = (None, None, None);
        let mut kind: Option<Option<String>> = None;
        let mut observations: Option<(RawJson, Option<Batch>)> = None;
        while let Some(member) = map.next_key::<Member>()? {
            match member {
                Member::Schema => once(&mut schema, "schema", map.next_value()?)?,
                Member::OrganizationId => {
                    once(&mut organization_id, "organization_id", map.next_value()?)?
                }
                Member::Environment => once(&mut environment, "environment", map.next_value()?)?,
                Member::SessionId => once(&mut session_id, "session_id", map.next_value()?)?,
                Member::Seq => once(&mut seq, "seq", map.next_value::<u64>()?)?,
                Member::ReceivedAt => once(&mut received_at, "received_at", map.next_value()?)?,
                Member::Request => once(&mut request, "request", map.next_value()?)?,
                Member::Kind => once(&mut kind, "kind", map.next_value()?)?,
                Member::Observations => {
                    // An SDK batch (numbered from 1) of a kind already read: as that batch, the
                    // kind trusted as the fold trusts it (`Batch::of_kind`).
                    let of_kind = seq
                        .filter(|&seq| seq > 0)
                        .and(kind.as_ref())
                        .and_then(|kind| kind.as_deref())
                        .and_then(OfKind::new);
                    let value = match of_kind {
                        Some(of_kind) => (RawJson::null(), Some(map.next_value_seed(of_kind)?)),
                        None => (map.next_value()?, None),
                    };
                    once(&mut observations, "observations", value)?;
                }
                Member::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (observations, observed) = required(observations, "observations")?;
        Ok(OnePass(ReadRecord {
            batch: BatchRecord {
                schema: required(schema, "schema")?,
                organization_id: required(organization_id, "organization_id")?,
                environment: required(environment, "environment")?,
                session_id: required(session_id, "session_id")?,
                seq: required(seq, "seq")?,
                received_at: required(received_at, "received_at")?,
                request: required(request, "request")?,
                kind: kind.flatten(),
                observations,
            },
            observed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use schemas::collect::{BATCH_RECORD_SCHEMA, BatchRequest, ServerRecord};
    use serde_json::{Value, json};

    use super::*;

    fn record(seq: u64, kind: Option<&str>, observations: Value) -> BatchRecord {
        BatchRecord {
            schema: BATCH_RECORD_SCHEMA,
            organization_id: schemas::OrgId::generate(),
            environment: schemas::credential::Environment::Test,
            session_id: schemas::SessionId::generate(),
            seq,
            received_at: schemas::time::now(),
            request: BatchRequest {
                ip: "203.0.113.7".into(),
                user_agent: "Mozilla/5.0".into(),
                header_names: vec!["host".into(), "user-agent".into()],
                url: "https://shop.example/checkout".into(),
                web_bot_auth: None,
                user_agent_bytes: None,
                http_version: None,
                tls: None,
            },
            kind: kind.map(Into::into),
            observations: RawJson::encode(&observations).unwrap(),
        }
    }

    fn interactions() -> Value {
        json!({"kind": "interactions", "window_ms": [0, 2000], "events": [
            {"t": 16.6, "type": "pointermove", "x": 100, "y": 200, "trusted": true},
            {"t": 33.2, "type": "keydown", "trusted": true},
            5,
        ]})
    }

    /// What the two readings make of a record: the record, and its batch as the fold reads it.
    fn two_pass(payload: &[u8]) -> (BatchRecord, Result<Batch, serde_json::Error>) {
        let batch: BatchRecord = serde_json::from_slice(payload).unwrap();
        let observed = super::super::read_batch(&batch);
        (batch, observed)
    }

    #[test]
    fn an_sdk_batch_is_read_with_its_record_as_the_fold_would_read_it() {
        for (kind, observations) in [
            ("interactions", interactions()),
            (
                "probes",
                json!({"kind": "probes", "collected_in_ms": 41.5, "timed_out": ["audio"],
                "screen": {"width": 1920, "height": "tall"}}),
            ),
        ] {
            let payload = serde_json::to_vec(&record(7, Some(kind), observations)).unwrap();
            let (mut expected, batch) = two_pass(&payload);
            let read = read(&payload).unwrap();
            assert_eq!(read.observed, Some(batch.unwrap()), "{kind}");
            expected.observations = RawJson::null();
            assert_eq!(read.batch, expected, "{kind}");
        }
    }

    /// `record` as ingest writes it (its members in declaration order), with `members` spliced
    /// in first or last.
    fn spliced(record: &BatchRecord, first: &str, last: &str) -> Vec<u8> {
        let text = serde_json::to_string(record).unwrap();
        let inner = &text[1..text.len() - 1];
        format!("{{{first}{inner}{last}}}").into_bytes()
    }

    #[test]
    fn other_records_keep_their_observations_as_text() {
        let server = serde_json::to_value(ServerRecord::Results).unwrap();
        let cases = [
            // Server-made: number 0, no kind.
            serde_json::to_vec(&record(0, None, server)).unwrap(),
            // From a build before the kind was carried.
            serde_json::to_vec(&record(2, None, interactions())).unwrap(),
            // The kind after the batch.
            spliced(
                &record(2, None, interactions()),
                "",
                r#","kind":"interactions""#,
            ),
            // The number after the batch.
            {
                let mut text =
                    serde_json::to_value(record(2, Some("interactions"), interactions())).unwrap();
                let seq = text.as_object_mut().unwrap().remove("seq").unwrap();
                let without = serde_json::to_string(&text).unwrap();
                format!("{},\"seq\":{seq}}}", &without[..without.len() - 1]).into_bytes()
            },
            // A kind this build does not know (the fold refuses it).
            serde_json::to_vec(&record(2, Some("telemetry"), interactions())).unwrap(),
            // A null kind.
            serde_json::to_vec(&record(2, None, interactions()))
                .map(|text| {
                    let text = String::from_utf8(text).unwrap();
                    text.replace(r#""observations""#, r#""kind":null,"observations""#)
                        .into_bytes()
                })
                .unwrap(),
            // A batch that does not read as its kind says (the fold reports it): of the wrong
            // type, or with a member given twice (ingest lets both through).
            serde_json::to_vec(&record(2, Some("interactions"), json!(5))).unwrap(),
            serde_json::to_vec(&record(2, Some("probes"), json!("probes"))).unwrap(),
            {
                let text = serde_json::to_string(&record(2, Some("interactions"), interactions()))
                    .unwrap();
                text.replace(r#""events":"#, r#""events":[],"events":"#)
                    .into_bytes()
            },
        ];
        for payload in cases {
            let read = read(&payload).unwrap();
            let (expected, _) = two_pass(&payload);
            assert!(
                read.observed.is_none(),
                "{}",
                String::from_utf8_lossy(&payload)
            );
            assert_eq!(read.batch, expected);
        }
    }

    #[test]
    fn a_record_that_does_not_read_fails_as_it_did() {
        let good = serde_json::to_value(record(4, Some("interactions"), interactions())).unwrap();
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove("session_id");
        let duplicated = {
            let text = serde_json::to_string(&good).unwrap();
            format!(r#"{{"seq":4,{}"#, &text[1..])
        };
        let ordered = record(4, Some("interactions"), interactions());
        let mut no_batch = serde_json::to_value(&ordered).unwrap();
        no_batch.as_object_mut().unwrap().remove("observations");
        for payload in [
            serde_json::to_vec(&missing).unwrap(),
            serde_json::to_vec(&no_batch).unwrap(),
            duplicated.into_bytes(),
            // A second kind or batch after the batch was read as the first kind.
            spliced(&ordered, "", r#","kind":"probes""#),
            spliced(&ordered, "", r#","observations":{"kind":"probes"}"#),
            b"[1, 2]".to_vec(),
            b"{\"schema\": 1".to_vec(),
        ] {
            let one = read(&payload).err().map(|e| e.to_string());
            let derived = serde_json::from_slice::<BatchRecord>(&payload)
                .err()
                .map(|e| e.to_string());
            assert!(one.is_some(), "{}", String::from_utf8_lossy(&payload));
            assert_eq!(one, derived);
        }
    }

    #[test]
    fn unknown_members_are_passed_over() {
        let record = record(5, Some("interactions"), interactions());
        let extra = r#""written_by":{"build":"future","flags":[1,2,3]}"#;
        let payload = spliced(&record, &format!("{extra},"), &format!(",{extra}"));
        let read = read(&payload).unwrap();
        let (mut expected, batch) = two_pass(&payload);
        assert_eq!(read.observed, Some(batch.unwrap()));
        expected.observations = RawJson::null();
        assert_eq!(read.batch, expected);
    }
}
