//! Tests that need no service: the memory store, the router in process and
//! the real binary on loopback. Their `both_stores!` behaviours also run on
//! Redis when the redis tier is compiled in.

pub(crate) mod config;
pub(crate) mod console;
pub(crate) mod csrf;
pub(crate) mod deadlines;
pub(crate) mod embed;
pub(crate) mod first_hour;
pub(crate) mod gate;
pub(crate) mod hostile;
pub(crate) mod http;
pub(crate) mod identities;
pub(crate) mod ops;
pub(crate) mod otel;
pub(crate) mod production_redis;
pub(crate) mod provider_kinds;
pub(crate) mod refusals;
pub(crate) mod refused_values;
pub(crate) mod send;
