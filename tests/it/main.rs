//! Integration tests: one binary, so it links once and shares one Redis.

mod gate;
mod redis_store;
mod support;
mod worker;
