//! Vigil's wire contract: the ids, credential formats, resources, envelopes and error codes that
//! every crate and every client agrees on; the log records and stored documents one process
//! writes and another (perhaps of another version) reads (`collect`, `events`, `dead`,
//! `decision`, `session_view`); the redaction every crate applies before a URL reaches a log
//! (`redact`); and the free-space reserve both embedded engines keep (`disk`).
//! Nothing here does I/O but `disk`'s one `statvfs`.

// So that `schemas::…` paths in this crate's exported macros resolve here too.
extern crate self as schemas;

pub mod collect;
pub mod credential;
pub mod dead;
pub mod decision;
pub mod disk;
pub mod error;
pub mod events;
pub mod gate;
pub mod ids;
pub mod network;
pub mod raw;
pub mod redact;
pub mod resources;
pub mod scope;
pub mod session_digest;
pub mod session_view;
pub mod time;
pub mod validate;

pub use error::ErrorCode;
pub use ids::{DecisionId, EventId, KeyId, OrgId, PingId, RequestId, SessionId, VisitorId};
pub use scope::Scope;
