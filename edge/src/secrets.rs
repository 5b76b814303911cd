//! The server secret, re-exported from the `secrets` crate (it moved there so the roles that
//! use it without serving HTTP, the processor among them, need not depend on this crate).

pub use ::secrets::*;
