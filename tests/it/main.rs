//! Integration tests: one binary, so it links once and shares one Redis.

mod gate;
mod ops;
mod redis_store;
mod support;
