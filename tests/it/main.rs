//! Integration tests: one binary, so it links once and shares one Redis.

/// Runs each named behaviour `async fn NAME(backend)` of the enclosing
/// module against the memory store and the Redis store.
macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $( #[tokio::test] async fn $name() { super::$name(crate::support::Backend::Memory).await } )*
        }
        mod redis {
            $( #[tokio::test] async fn $name() { super::$name(crate::support::Backend::Redis).await } )*
        }
    };
}

mod chaos;
mod cluster;
mod durability;
mod gate;
mod http;
mod model;
mod ops;
mod production_redis;
mod redis_store;
mod support;
mod worker;
