//! Integration tests, in three tiers by what they need (docs/testing.md):
//! `base/` nothing but the built binary, `redis/` a `redis-server` on PATH
//! (feature `test-redis`), `full/` Docker, Chromium, promtool, Python, Go
//! and Node as well (feature `test-full`). A tier is selected when the
//! binary is compiled, so a test outside it is not run, and not counted.
//! One binary, so it links once and shares one Redis.

/// Runs each named behaviour `async fn NAME(backend)` of the enclosing
/// module against the memory store and, in the redis tier and above, the
/// Redis store. With
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
        #[cfg(feature = "test-redis")]
        mod redis {
            $( #[$test] async fn $name() { super::$name(crate::support::Backend::Redis).await } )*
        }
    };
}

mod base;
#[cfg(feature = "test-full")]
mod full;
#[cfg(feature = "test-redis")]
mod redis;
mod support;
