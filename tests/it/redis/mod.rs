//! Tests that need `redis-server` and `redis-cli` on PATH (and `openssl`,
//! for the TLS tests' certificates, and a cgroup v2 mount for
//! `worker_limits`): the shared server of `support::redis_url`, and
//! servers, clusters and sentinels of their own.

pub(crate) mod chaos;
pub(crate) mod cluster;
pub(crate) mod concurrency;
pub(crate) mod console;
pub(crate) mod dead;
pub(crate) mod deadlines;
pub(crate) mod destinations;
pub(crate) mod durability;
pub(crate) mod embed;
pub(crate) mod embed_settle;
pub(crate) mod first_hour;
pub(crate) mod gate;
pub(crate) mod hostile;
pub(crate) mod http;
pub(crate) mod identities;
pub(crate) mod logs;
pub(crate) mod long_haul;
pub(crate) mod model;
pub(crate) mod ops;
pub(crate) mod ops_bounds;
pub(crate) mod ops_search;
pub(crate) mod order;
pub(crate) mod order_model;
pub(crate) mod pace;
pub(crate) mod parked;
pub(crate) mod production_redis;
pub(crate) mod redis_store;
pub(crate) mod refusals;
pub(crate) mod returns;
pub(crate) mod secrets;
pub(crate) mod traces;
pub(crate) mod verification;
pub(crate) mod worker;
pub(crate) mod worker_hostile;
pub(crate) mod worker_limits;
