//! Everything idemgate says to Redis goes through this module: the
//! connection to a standalone server, a Cluster or a Sentinel-watched
//! primary ([`Conn`]), TLS and the password file (`connection.rs`), the bound
//! on every command ([`bounded`]), routing a command to every primary or to
//! the primary that owns a key's slot, the Lua scripts and their typed calls
//! ([`scripts`], [`run_scripts`], [`worker_scripts`], [`parked_scripts`], [`destination_scripts`]), and the namespace-scoped handle that puts
//! these together ([`RedisHandle`]) with the worker's blocking reader
//! ([`BlockingReader`]), and what a failed call means in words
//! ([`diagnose`]). The store, the worker, the operator commands and the
//! bench build on it and never match on the deployment to talk to Redis;
//! where a report differs on a Cluster (`ops memory` lists every primary),
//! it asks [`Conn::is_cluster`]. See docs/redis.md.

mod conn;
mod connection;
pub mod destination_scripts;
pub mod diagnose;
mod handle;
pub mod info;
pub mod parked_scripts;
mod reader;
pub mod run_scripts;
pub mod scripts;
pub mod sentinel;
pub mod worker_scripts;

pub use conn::{Conn, bounded};
pub use connection::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_MIN_REPLICAS_TIMEOUT, PemFile, RedisOptions, RedisTarget, Secret, Tls, is_tls_url,
};
pub use handle::{RedisHandle, call_on};
pub use reader::BlockingReader;
