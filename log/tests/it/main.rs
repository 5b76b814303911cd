//! The log's tests in one binary: the conformance suite on both backends (Kafka on librdkafka's
//! mock cluster and on a real broker), consumer groups, the embedded log's crash durability and
//! its retention.

mod backpressure;
mod conformance;
mod crash;
mod groups;
mod kafka_broker;
mod kafka_tls;
mod retention;
