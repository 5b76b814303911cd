//! JSON documents carried as text: passed through (stored, logged, forwarded) without being
//! parsed into a tree, and decoded straight into a typed value by whoever interprets them.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

/// Reads a member as `Some(T)` when it has the right shape, and as `None` otherwise: for
/// documents read leniently (what a browser reports, what another version of the processor
/// stored), where one odd member must not cost the rest (`#[serde(deserialize_with = …)]`).
pub fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

/// Declares a struct whose members are all optional and read with [`lenient`]: a member of
/// the wrong shape reads as absent, an unknown one is ignored. For what a browser reports (the
/// processor's observations) and what another version of the processor stored (the session
/// views). The caller needs `serde` among its dependencies.
#[macro_export]
macro_rules! lenient_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$field_meta:meta])* $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                #[serde(
                    default,
                    deserialize_with = "schemas::raw::lenient",
                    skip_serializing_if = "Option::is_none"
                )]
                pub $field: Option<$ty>,
            )*
        }
    };
}

/// A JSON document kept as its text: stored, logged and read back without being parsed into a
/// tree, for members only one party interprets (a session's processor state is rewritten on
/// every batch, and a batch's observations pass through ingest and the log to the processor;
/// parsing either into a `Value` on the way cost more than the rest of the work).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<serde_json::value::RawValue>);

impl RawJson {
    /// `null`.
    pub fn null() -> Self {
        RawJson(serde_json::value::RawValue::NULL.to_owned())
    }

    /// `value` encoded.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Self> {
        serde_json::value::to_raw_value(value).map(RawJson)
    }

    /// The document decoded as `T`.
    pub fn decode<'a, T: Deserialize<'a>>(&'a self) -> serde_json::Result<T> {
        serde_json::from_str(self.0.get())
    }

    /// The document as a tree (reads that pick members out of it).
    pub fn to_value(&self) -> serde_json::Value {
        self.decode().unwrap_or(serde_json::Value::Null)
    }

    pub fn as_str(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl std::fmt::Display for RawJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<serde_json::Value> for RawJson {
    type Error = serde_json::Error;
    fn try_from(value: serde_json::Value) -> serde_json::Result<Self> {
        RawJson::encode(&value)
    }
}

impl RawJson {
    /// Checks `bytes` is one JSON document and keeps its text.
    pub fn parse(bytes: &[u8]) -> serde_json::Result<Self> {
        serde_json::from_slice(bytes)
    }
}
