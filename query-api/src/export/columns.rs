//! The columns of an export and their two encodings: an Arrow IPC stream (one record batch per
//! page of rows) and NDJSON (one object per row). A column is a name, an Arrow type, and how
//! a row gives its value; each export's table of columns is its schema (docs/analysts.md).

use std::borrow::Cow;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder, StringDictionaryBuilder};
use arrow_array::types::Int8Type;
use arrow_array::{
    ArrayRef, BooleanArray, Float32Array, Int64Array, RecordBatch, StringArray,
    TimestampMillisecondArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema, TimeUnit};
use schemas::time::Timestamp;
use serde_json::{Map, Value};

/// The version of every export's Arrow schema, in its metadata (`vigil.schema_version`): a
/// column's type never changes within a version. Version 2 added the sessions export's network
/// columns (`asn` to `ja4`).
pub const SCHEMA_VERSION: &str = "2";

/// A column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    /// A value of a closed set (a verdict, a status): dictionary-encoded.
    Enum,
    /// Milliseconds since the epoch, UTC.
    Time,
    Float32,
    Int64,
    Bool,
    /// A list of texts (the signals that fired).
    TextList,
}

impl Kind {
    fn data_type(self) -> DataType {
        match self {
            Kind::Text => DataType::Utf8,
            Kind::Enum => DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)),
            Kind::Time => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            Kind::Float32 => DataType::Float32,
            Kind::Int64 => DataType::Int64,
            Kind::Bool => DataType::Boolean,
            Kind::TextList => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        }
    }
}

/// One value of a row, borrowed from the row where it can be: an export copies each string
/// once, into its Arrow array.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell<'a> {
    Null,
    Text(Cow<'a, str>),
    Time(Timestamp),
    /// A time as milliseconds since the epoch, as a digest keeps it.
    Millis(i64),
    Float32(f32),
    Int64(i64),
    Bool(bool),
    TextList(Cow<'a, [String]>),
}

impl<'a> Cell<'a> {
    // A cell's value as its column's kind holds it; `None` (a null) for any other cell.

    fn into_text(self) -> Option<Cow<'a, str>> {
        match self {
            Cell::Text(s) => Some(s),
            _ => None,
        }
    }

    fn into_millis(self) -> Option<i64> {
        match self {
            Cell::Time(t) => Some(t.timestamp_millis()),
            Cell::Millis(ms) => Some(ms),
            _ => None,
        }
    }

    fn into_f32(self) -> Option<f32> {
        match self {
            Cell::Float32(v) => Some(v),
            _ => None,
        }
    }

    fn into_i64(self) -> Option<i64> {
        match self {
            Cell::Int64(v) => Some(v),
            _ => None,
        }
    }

    fn into_bool(self) -> Option<bool> {
        match self {
            Cell::Bool(v) => Some(v),
            _ => None,
        }
    }

    pub fn text(s: impl Into<Cow<'a, str>>) -> Cell<'a> {
        Cell::Text(s.into())
    }

    pub fn optional_text(s: Option<impl Into<Cow<'a, str>>>) -> Cell<'a> {
        s.map_or(Cell::Null, |s| Cell::Text(s.into()))
    }

    pub fn optional_time(t: Option<Timestamp>) -> Cell<'a> {
        t.map_or(Cell::Null, Cell::Time)
    }

    pub fn optional_f32(v: Option<f32>) -> Cell<'a> {
        v.map_or(Cell::Null, Cell::Float32)
    }

    pub fn text_list(items: impl Into<Cow<'a, [String]>>) -> Cell<'a> {
        Cell::TextList(items.into())
    }

    fn json(&self) -> Value {
        match self {
            Cell::Null => Value::Null,
            Cell::Text(s) => Value::String(s.to_string()),
            Cell::Time(t) => Value::String(schemas::time::format(t)),
            Cell::Millis(ms) => Timestamp::from_timestamp_millis(*ms)
                .map_or(Value::Null, |t| Value::String(schemas::time::format(&t))),
            Cell::Float32(v) => {
                serde_json::Number::from_f64(f64::from(*v)).map_or(Value::Null, Value::Number)
            }
            Cell::Int64(v) => Value::from(*v),
            Cell::Bool(v) => Value::Bool(*v),
            Cell::TextList(items) => Value::from(items.to_vec()),
        }
    }
}

/// A column of rows of type `R`.
pub struct Column<R> {
    pub name: &'static str,
    pub kind: Kind,
    pub nullable: bool,
    /// What the column holds, for the documentation of the schema.
    pub doc: &'static str,
    pub get: fn(&R) -> Cell<'_>,
}

/// The Arrow schema of `columns`, versioned in its metadata, with each column's description.
pub fn schema<R>(export: &str, columns: &[&Column<R>]) -> Arc<Schema> {
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| {
            Field::new(c.name, c.kind.data_type(), c.nullable).with_metadata(
                std::collections::HashMap::from([("description".to_owned(), c.doc.to_owned())]),
            )
        })
        .collect();
    Arc::new(Schema::new_with_metadata(
        fields,
        std::collections::HashMap::from([
            ("vigil.schema_version".to_owned(), SCHEMA_VERSION.to_owned()),
            ("vigil.export".to_owned(), export.to_owned()),
        ]),
    ))
}

/// One record batch of `rows` in `columns`.
pub fn record_batch<R>(
    schema: &Arc<Schema>,
    columns: &[&Column<R>],
    rows: &[R],
) -> Result<RecordBatch, ArrowError> {
    let arrays: Vec<ArrayRef> = columns.iter().map(|c| array(c, rows)).collect();
    RecordBatch::try_new(Arc::clone(schema), arrays)
}

fn array<R>(column: &Column<R>, rows: &[R]) -> ArrayRef {
    let cells = rows.iter().map(|r| (column.get)(r));
    match column.kind {
        // Each kind's array from its cells: a cell of another kind is null.
        Kind::Text => Arc::new(cells.map(Cell::into_text).collect::<StringArray>()),
        Kind::Enum => {
            let mut b = StringDictionaryBuilder::<Int8Type>::new();
            for cell in cells {
                match cell {
                    Cell::Text(s) => {
                        // A closed set of at most a few dozen values: an Int8 key fits.
                        if b.append(&s).is_err() {
                            b.append_null();
                        }
                    }
                    _ => b.append_null(),
                }
            }
            Arc::new(b.finish())
        }
        Kind::Time => Arc::new(
            cells
                .map(Cell::into_millis)
                .collect::<TimestampMillisecondArray>()
                .with_timezone("UTC"),
        ),
        Kind::Float32 => Arc::new(cells.map(Cell::into_f32).collect::<Float32Array>()),
        Kind::Int64 => Arc::new(cells.map(Cell::into_i64).collect::<Int64Array>()),
        Kind::Bool => Arc::new(cells.map(Cell::into_bool).collect::<BooleanArray>()),
        Kind::TextList => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for cell in cells {
                match cell {
                    Cell::TextList(items) => {
                        for item in items.iter() {
                            b.values().append_value(item);
                        }
                        b.append(true);
                    }
                    _ => b.append(false),
                }
            }
            Arc::new(b.finish())
        }
    }
}

/// `rows` as NDJSON lines of `columns`, appended to `out`.
pub fn ndjson<R>(columns: &[&Column<R>], rows: &[R], out: &mut Vec<u8>) {
    for row in rows {
        let object: Map<String, Value> = columns
            .iter()
            .map(|c| (c.name.to_owned(), (c.get)(row).json()))
            .collect();
        // A map of JSON values always serializes.
        let _ = serde_json::to_writer(&mut *out, &Value::Object(object));
        out.push(b'\n');
    }
}
