//! The Redis store: one Lua script (`lua/gate.lua`) does the whole call
//! atomically, so any number of stateless gate processes can share one
//! Redis (or one Redis Cluster) and still create one run per identity.

use std::time::Duration;

use redis::Value;

use super::{BoxFuture, Call, HeldRun, Store, Stored};
use crate::error::Error;
use crate::keys::Keys;
use crate::redis_io::run_scripts::{RunFinishCall, RunReleaseCall};
use crate::redis_io::scripts::{GATE, GATE_HOLD, GateArgs, GateCall, GateHoldCall, GateReply, GateVerdict, ScriptCall};
use crate::redis_io::{Conn, RedisHandle, RedisOptions};
use crate::units::redis_ms;
use crate::vocabulary::{Settings, Verdict};

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
        let redis = RedisHandle::connect(opts, keys).await?;
        redis.preload(&[&GATE, &GATE_HOLD]).await;
        let store = Self::over(redis, settings);
        Ok(store.with_min_replicas_ack(opts.min_replicas_ack))
    }

    /// The key schema of this store's namespace.
    pub fn keys(&self) -> &Keys {
        self.redis.keys()
    }

    /// The gate scripts' shared arguments for `call`, and the delivery key
    /// (whose slot the script runs in).
    fn gate_args<'a>(&'a self, call: &'a Call<'a>, delivery: &'a str, logical: Option<&'a str>) -> GateArgs<'a> {
        let (verdict, id) = match &call.verdict {
            Verdict::BadRequest => (GateVerdict::BadRequest, None),
            Verdict::Blocked => (GateVerdict::Blocked, None),
            Verdict::Work(id) => (GateVerdict::Work, Some(id)),
        };
        GateArgs {
            delivery_key: delivery,
            // Without an identity there is no logical key; any key of the
            // namespace's slot keeps the KEYS list valid on a cluster.
            logical_key: logical.unwrap_or(&self.counter_key),
            counter_key: &self.counter_key,
            runs_key: &self.runs_key,
            run_prefix: &self.run_prefix,
            verdict,
            delivery_ttl_ms: self.delivery_ttl_ms,
            logical_ttl_ms: self.logical_ttl_ms,
            event_digest: call.event_digest,
            now_ms: call.now_ms,
            provider: call.provider,
            delivery_id: call.delivery_id,
            repo: id.map_or("", |i| &i.repo),
            action: id.map_or("", |i| &i.action),
            number: id.map_or("", |i| &i.number),
            // The run record keeps the subject only where it adds to the number.
            subject: id.filter(|i| i.subject != i.number).map_or("", |i| &i.subject),
            payload: call.payload.unwrap_or(""),
            rewrite_on_replay: self.min_replicas_ack.is_some(),
            trace: call.trace.unwrap_or(""),
            order_key: call.order.map_or("", |o| &o.key),
            order_skip_dead: call.order.is_some_and(|o| o.skip_dead),
        }
    }

    async fn run_script(&self, call: &Call<'_>) -> Result<Stored, Error> {
        let logical = match &call.verdict {
            Verdict::Work(id) => Some(self.keys().logical(id)),
            _ => None,
        };
        let delivery = self.keys().delivery(call.provider, call.delivery_id);
        let gate = self.gate_args(call, &delivery, logical.as_deref());
        let reply = match call.hold {
            None => self.gate(&GateCall(gate), &delivery).await?,
            Some(hold) => {
                let held_run_ttl_ms = hold.retention.map_or(0, redis_ms);
                self.gate(&GateHoldCall { gate, hold_ms: redis_ms(hold.lease), held_run_ttl_ms }, &delivery).await?
            }
        };
        let (record, replayed) = match reply {
            GateReply::Decided(record) => (record, false),
            GateReply::Replayed(record) => (record, true),
            GateReply::InFlight { run_id } => return Err(Error::InFlight { run_id }),
        };
        Ok(Stored { response: record.response()?, replayed, first_digest: record.digest })
    }

    /// Runs one gate script call; with `--min-replicas-ack`, followed by a
    /// `WAIT` on the delivery key's node (a replay rewrites its record, so
    /// that the `WAIT` covers it).
    async fn gate<C: ScriptCall<Reply = GateReply>>(&self, call: &C, delivery: &str) -> Result<GateReply, Error> {
        match self.min_replicas_ack {
            None => self.redis.call(call).await,
            Some(ack) => {
                let reply: Value = self.redis.eval_and_wait(&call.command(), call.script(), delivery, ack).await?;
                call.decode(reply)
            }
        }
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
}
