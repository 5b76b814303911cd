//! The store's tests in one binary: the conformance suite on the embedded backend (with its
//! crash test) and on PostgreSQL.

mod embedded;
mod postgres;
