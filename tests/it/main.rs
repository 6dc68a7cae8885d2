//! Integration tests: one binary, so it links once and shares one Redis.

/// Runs each named behaviour `async fn NAME(backend)` of the enclosing
/// module against the memory store and the Redis store. With
/// `multi_thread:` first, each runs on a four-thread runtime, so tasks that
/// race really run at the same time.
macro_rules! both_stores {
    (multi_thread: $($name:ident),* $(,)?) => {
        both_stores!(@on [tokio::test(flavor = "multi_thread", worker_threads = 4)] $($name),*);
    };
    ($($name:ident),* $(,)?) => {
        both_stores!(@on [tokio::test] $($name),*);
    };
    (@on [$test:meta] $($name:ident),*) => {
        mod memory {
            $( #[$test] async fn $name() { super::$name(crate::support::Backend::Memory).await } )*
        }
        mod redis {
            $( #[$test] async fn $name() { super::$name(crate::support::Backend::Redis).await } )*
        }
    };
}

mod chaos;
mod cluster;
mod config;
mod console;
mod console_views;
mod csrf;
mod dead;
mod deadlines;
mod deploy;
mod destinations;
mod docs_recipes;
mod durability;
mod embed;
mod embed_settle;
mod first_hour;
mod gate;
mod hostile;
mod http;
mod identities;
mod logs;
mod long_haul;
mod model;
mod ops;
mod ops_bounds;
mod ops_search;
mod production_redis;
mod provider_kinds;
mod proxy;
mod quickstart;
mod receivers;
mod redis_store;
mod refusals;
mod secrets;
mod send;
mod support;
#[cfg(feature = "testcontainers")]
mod testing;
mod verification;
mod worker;
mod worker_hostile;
mod worker_limits;

/// The container fixture's suite needs the `testcontainers` feature; a run
/// without it must not look complete.
#[cfg(not(feature = "testcontainers"))]
#[test]
fn testcontainers_feature_is_on() {
    panic!(
        "run the tests with `--features testcontainers` (scripts/test.sh does), else tests/it/testing.rs is left out"
    );
}
