//! Integration tests: one binary, so it links once and shares one Redis.

mod chaos;
mod cluster;
mod durability;
mod gate;
mod http;
mod model;
mod redis_store;
mod support;
