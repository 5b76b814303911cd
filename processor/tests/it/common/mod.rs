//! Shared by the integration tests: loading the observation fixtures and running them through
//! the processor the way the consumer does (fold every batch in order, then evaluate).

#![allow(dead_code)] // each test binary uses its own subset

use processor::{Batch, Evaluation, ServerContext, SessionObservations};
use serde_json::Value;
use std::path::{Path, PathBuf};

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A fixture document by file stem (`desktop_chrome_human`).
pub fn load(name: &str) -> Value {
    let path = fixtures_dir().join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every fixture's stem, sorted.
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures directory")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "json").then(|| path.file_stem()?.to_str().map(str::to_owned))?
        })
        .collect();
    names.sort();
    names
}

/// The session and context a fixture describes.
pub fn session_of(doc: &Value) -> (SessionObservations, ServerContext) {
    let context: ServerContext =
        serde_json::from_value(doc["context"].clone()).expect("fixture context");
    let mut session = SessionObservations::default();
    for batch in doc["batches"].as_array().expect("fixture batches") {
        session.record(Batch::from_value(batch.clone()).expect("fixture batch"));
    }
    (session, context)
}

pub fn evaluate(doc: &Value) -> Evaluation {
    let (session, context) = session_of(doc);
    processor::evaluate(&session, &context)
}

pub fn fired(decision: &Evaluation) -> Vec<&'static str> {
    decision
        .signals_fired
        .iter()
        .map(|signal| signal.slug)
        .collect()
}

/// Sets the member at a JSON pointer, creating objects on the way.
pub fn set(doc: &mut Value, pointer: &str, value: Value) {
    let mut node = doc;
    for key in pointer.trim_start_matches('/').split('/') {
        node = match node {
            Value::Array(items) => &mut items[key.parse::<usize>().expect("array index")],
            other => {
                if !other.is_object() {
                    *other = Value::Object(Default::default());
                }
                other
                    .as_object_mut()
                    .expect("object")
                    .entry(key)
                    .or_insert(Value::Null)
            }
        };
    }
    *node = value;
}

/// Removes the member at a JSON pointer.
pub fn remove(doc: &mut Value, pointer: &str) {
    let (parent, key) = pointer.rsplit_once('/').expect("pointer with a parent");
    let parent = doc.pointer_mut(parent).expect("parent exists");
    match parent {
        Value::Array(items) => {
            items.remove(key.parse::<usize>().expect("array index"));
        }
        Value::Object(map) => {
            map.remove(key);
        }
        _ => panic!("{pointer} has no parent container"),
    }
}

/// Replaces a fixture's interaction batches with one batch of these events.
pub fn with_events(doc: &mut Value, events: Vec<Value>) {
    let batches = doc["batches"].as_array_mut().expect("batches");
    batches.retain(|batch| batch["kind"] != "interactions");
    batches.push(
        serde_json::json!({ "kind": "interactions", "window_ms": [0, 10_000], "events": events }),
    );
}
