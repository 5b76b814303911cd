//! The store's tests in one binary: the conformance suite on the embedded backend (with its
//! crash test) and on PostgreSQL, and the ScyllaDB backend against CQL wire doubles.

mod embedded;
mod postgres;
mod postgres_tls;
mod scylla;
