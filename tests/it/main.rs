//! Integration tests: one binary, so it links once and shares one Redis.

mod cluster;
mod gate;
mod http;
mod model;
mod redis_store;
mod support;
