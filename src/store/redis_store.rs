//! The Redis store: one Lua script (`lua/gate.lua`) does the whole call
//! atomically, so any number of stateless gate processes can share one
//! Redis (or one Redis Cluster) and still create one run per identity.

use std::time::Duration;

use redis::Cmd;

use super::{BoxFuture, Call, HeldRun, Store, Stored};
use crate::error::Error;
use crate::keys::Keys;
use crate::redis_io::run_scripts::{RunFinishCall, RunReleaseCall};
use crate::redis_io::scripts::{GATE, GATE_HOLD, GateCall, GateVerdict, LuaScript};
use crate::redis_io::{Conn, RedisHandle, RedisOptions};
use crate::units::redis_ms;
use crate::vocabulary::{DeliveryRecord, Settings, Verdict};

/// The Redis-backed store.
pub struct RedisStore {
    redis: RedisHandle,
    /// The namespace's fixed keys, built once: run counter, runs stream, run-record prefix.
    counter_key: String,
    runs_key: String,
    run_prefix: String,
    delivery_ttl_ms: u64,
    logical_ttl_ms: u64,
    min_replicas_ack: Option<(u32, Duration)>,
}

impl RedisStore {
    /// The handle this store writes through, for the operator views that
    /// read the same namespace ([`crate::ops::Source::of`]).
    pub fn redis(&self) -> &RedisHandle {
        &self.redis
    }

    /// A store over `conn`, under the namespace of `keys`.
    pub fn new(conn: Conn, keys: Keys, settings: &Settings, timeout: Duration) -> Self {
        Self::over(RedisHandle::new(conn, keys, timeout), settings)
    }

    /// A store writing through `redis`.
    pub fn over(redis: RedisHandle, settings: &Settings) -> Self {
        let keys = redis.keys();
        Self {
            counter_key: keys.run_counter(),
            runs_key: keys.runs(),
            run_prefix: keys.run_prefix(),
            redis,
            delivery_ttl_ms: redis_ms(settings.delivery_ttl),
            logical_ttl_ms: settings.logical_ttl.map_or(0, redis_ms),
            min_replicas_ack: None,
        }
    }

    /// After each call, `WAIT` until `n` replicas confirm its write, for at
    /// most `wait`; fewer is [`Error::ReplicasShort`] (a 503; the provider's
    /// retry replays the stored answer and waits again).
    pub fn with_min_replicas_ack(mut self, ack: Option<(u32, Duration)>) -> Self {
        self.min_replicas_ack = ack.filter(|(n, _)| *n > 0);
        self
    }

    /// Connects to Redis and builds the store.
    pub async fn connect(opts: &RedisOptions, keys: Keys, settings: &Settings) -> Result<Self, Error> {
        let store = Self::over(RedisHandle::connect(opts, keys).await?, settings);
        Ok(store.with_min_replicas_ack(opts.min_replicas_ack))
    }

    /// The key schema of this store's namespace.
    pub fn keys(&self) -> &Keys {
        self.redis.keys()
    }

    /// `EVALSHA` of the gate script for `call` (of the hold script when it
    /// holds), the script, and the delivery key (whose slot the script runs in).
    fn script_cmd(&self, call: &Call<'_>) -> (Cmd, &'static LuaScript, String) {
        let (verdict, id) = match &call.verdict {
            Verdict::BadRequest => (GateVerdict::BadRequest, None),
            Verdict::Blocked => (GateVerdict::Blocked, None),
            Verdict::Work(id) => (GateVerdict::Work, Some(id)),
        };
        // Without an identity there is no logical key; any key of the
        // namespace's slot keeps the KEYS list valid on a cluster.
        let logical = id.map(|id| self.keys().logical(id));
        let delivery = self.keys().delivery(call.provider, call.delivery_id);
        let cmd = GateCall {
            delivery_key: &delivery,
            logical_key: logical.as_deref().unwrap_or(&self.counter_key),
            counter_key: &self.counter_key,
            runs_key: &self.runs_key,
            run_prefix: &self.run_prefix,
            verdict,
            delivery_ttl_ms: self.delivery_ttl_ms,
            logical_ttl_ms: self.logical_ttl_ms,
            event_digest: stored_digest(call.event_digest),
            now_ms: call.now_ms,
            provider: call.provider,
            delivery_id: call.delivery_id,
            repo: id.map_or("", |i| &i.repo),
            action: id.map_or("", |i| &i.action),
            number: id.map_or("", |i| &i.number),
            rewrite_on_replay: self.min_replicas_ack.is_some(),
            // The run record keeps the subject only where it adds to the number.
            subject: id.filter(|i| i.subject != i.number).map_or("", |i| &i.subject),
            payload: call.payload.unwrap_or(""),
            hold_ms: call.hold.map_or(0, |hold| redis_ms(hold.lease)),
            held_run_ttl_ms: call.hold.and_then(|hold| hold.retention).map_or(0, redis_ms),
        };
        let script: &'static LuaScript = if cmd.holds() { &GATE_HOLD } else { &GATE };
        (cmd.evalsha(script.hash()), script, delivery)
    }

    async fn run_script(&self, call: &Call<'_>) -> Result<Stored, Error> {
        let (cmd, script, key) = self.script_cmd(call);
        let (replayed, record): (i64, String) = match self.min_replicas_ack {
            None => self.redis.eval(&cmd, script).await?,
            // A replay rewrites its record, so that the `WAIT` covers it.
            Some(ack) => self.redis.eval_and_wait(&cmd, script, &key, ack).await?,
        };
        if replayed == 2 {
            return Err(Error::InFlight { run_id: record });
        }
        let record: DeliveryRecord =
            serde_json::from_str(&record).map_err(|e| Error::Corrupt(format!("delivery record {record:?}: {e}")))?;
        Ok(Stored { response: record.response()?, replayed: replayed == 1, first_digest: record.digest })
    }

    async fn finish_run(&self, run: &HeldRun<'_>) -> Result<bool, Error> {
        let call = RunFinishCall {
            keys: self.keys(),
            run_id: run.run_id,
            now_ms: run.now_ms,
            retention_ms: run.retention.map_or(0, redis_ms),
        };
        self.redis.call(&call).await
    }

    async fn release_run(&self, run: &HeldRun<'_>) -> Result<bool, Error> {
        let call = RunReleaseCall {
            keys: self.keys(),
            provider: run.provider,
            delivery_id: run.delivery_id,
            identity: run.identity,
            run_id: run.run_id,
            now_ms: run.now_ms,
            retention_ms: run.retention.map_or(0, redis_ms),
        };
        self.redis.call(&call).await
    }
}

/// How many hex digits of the event digest a delivery record keeps (64
/// bits). The digest only tells a provider's changed retry from an unchanged
/// one (`idemgate-event-mismatch`); two different events under one delivery
/// id look the same with odds of 2^-64 per retry, and nothing else reads it
/// (docs/operations.md#memory).
pub const STORED_DIGEST_HEX: usize = 16;

/// The part of `digest` a delivery record keeps ([`STORED_DIGEST_HEX`]).
fn stored_digest(digest: &str) -> &str {
    digest.get(..STORED_DIGEST_HEX).unwrap_or(digest)
}

impl Store for RedisStore {
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>> {
        Box::pin(self.run_script(call))
    }

    fn finish<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(self.finish_run(run))
    }

    fn release<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(self.release_run(run))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let _: String = self.redis.query(&mut redis::cmd("PING")).await?;
            Ok(())
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn into_any(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}
