//! The client commands: `vigil export` (an export's rows to Parquet, over HTTP or from the store
//! itself), `vigil gate` (a developer tool's signup and login), and `vigil healthcheck` (a
//! container's probe of `/readyz`).

pub mod export;
pub mod gate;
pub mod healthcheck;
