//! The black-box tests: the whole service over real HTTP, one module per surface, in one test
//! binary (linking 36 binaries on two cores took longer than running most of them). Run one
//! module with `cargo nextest run -p vigil-tests -E 'test(/^gate_flows::/)'`.

mod abuse_limits;
mod api_keys;
mod auth;
mod browser;
mod collect;
mod collect_binding;
mod compose;
mod contract;
mod crash;
mod dead_letters;
mod dependencies;
mod detection;
mod durability;
mod errors;
mod event_dead_letters;
mod events;
mod events_api;
mod export_command;
mod exports;
mod fingerprints;
mod fleet;
mod full_disk;
mod gate_approvals;
mod gate_flows;
mod gate_services;
mod idempotency;
mod kafka_pipeline;
mod limiter_conformance;
mod limits;
mod openapi;
mod operator;
mod organizations;
mod pipeline;
mod postgres_store;
mod retention;
mod roles;
mod router_properties;
mod sdk_delivery;
mod secret_answers;
mod security;
mod slow_clients;
mod web_bot_auth;
mod webhook_deliveries;
mod webhook_endpoints;
