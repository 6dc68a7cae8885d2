//! Redis memory as operators need it: `used_memory` against `maxmemory`
//! (per primary on a cluster), the bytes each kind of gate key takes, and
//! how fast those keys grow (docs/operations.md, "Memory").
//!
//! Bytes per kind are estimated from a sample: `stats` keeps a uniform
//! sample of each kind's keys while it scans (reservoir sampling), reads
//! `MEMORY USAGE … SAMPLES 0` of each sampled key (exact for that key, run
//! payloads included), and multiplies the mean by the count.
//!
//! Growth comes from the same sample: delivery records carry their first-
//! seen time (`at`), run records their `created_ms`, and every key its
//! TTL. Over the last day (or the age of the oldest sampled record, when
//! the data is younger), the keys created per day minus the keys expiring
//! per day, times their mean size, is the net growth. A logical key is
//! created with its run in one step, so logical keys are created at the
//! run-creation rate.

use serde::Serialize;

use super::client::{Ops, OpsError};

/// Keys sampled per kind.
pub const SAMPLE_SIZE: usize = 100;
const DAY_MS: u64 = 86_400_000;
/// Below this much history, growth per day is not extrapolated.
const MIN_HISTORY_MS: u64 = 3_600_000;

use crate::redis_io::info::{NodeMemory, parse_info_memory};

/// A uniform sample of each kind's keys, kept while scanning.
pub struct Sampler {
    kinds: [Vec<String>; 3],
    seen: [u64; 3],
    rng: u64,
}

/// The three counted kinds, in [`Sampler`] order.
pub const KINDS: [&str; 3] = ["delivery", "logical", "run"];

impl Default for Sampler {
    fn default() -> Self {
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        Self { kinds: Default::default(), seen: [0; 3], rng: seed | 1 }
    }
}

impl Sampler {
    /// Offers one key of kind `kind` (an index into [`KINDS`]): the first
    /// [`SAMPLE_SIZE`] are kept, then each later key replaces a random one
    /// with probability SAMPLE_SIZE / seen (Algorithm R).
    pub fn offer(&mut self, kind: usize, key: &str) {
        self.seen[kind] += 1;
        let sample = &mut self.kinds[kind];
        if sample.len() < SAMPLE_SIZE {
            sample.push(key.to_owned());
            return;
        }
        // xorshift64: enough randomness for a sample, no dependency.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let j = self.rng % self.seen[kind];
        if (j as usize) < SAMPLE_SIZE {
            sample[j as usize] = key.to_owned();
        }
    }
}

/// The memory one kind of key takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindMemory {
    /// `delivery`, `logical`, `run`, `streams`.
    pub kind: &'static str,
    /// Keys of this kind.
    pub count: u64,
    /// Keys measured with `MEMORY USAGE`.
    pub sampled: u64,
    /// Mean bytes per key in the sample.
    pub mean_bytes: u64,
    /// `mean_bytes × count`.
    pub bytes: u64,
    /// Net change per day at the current rates (`None`: not measurable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_bytes_per_day: Option<i64>,
}

/// Memory of the namespace and of its Redis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryReport {
    /// Bytes by kind of key; `streams` is the runs and dead streams and the run counter, measured whole.
    pub kinds: Vec<KindMemory>,
    /// The run payloads kept in run records (`payload` field), estimated
    /// from the sample; already part of the `run` bytes.
    pub run_payload_bytes: u64,
    /// All of the above.
    pub total_bytes: u64,
    /// The server holding the namespace (on a cluster: the primary that owns its slot).
    pub server: Option<NodeMemory>,
    /// Every primary of a cluster (empty for one server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub primaries: Vec<NodeMemory>,
    /// Net growth of the gate's keys, bytes per day (`None`: not measurable; see `growth_note`).
    pub growth_bytes_per_day: Option<i64>,
    /// Days until `used_memory` reaches `maxmemory` at that growth.
    pub days_until_full: Option<f64>,
    /// Why there is no growth or no days-until-full figure, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub growth_note: Option<String>,
    /// Redis refused a read the report needs (e.g. `MEMORY` or `INFO` not allowed by ACL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// One sampled key: its size, TTL left, and creation time when known.
struct Probe {
    bytes: u64,
    pttl: i64,
    created_ms: Option<u64>,
    payload: u64,
}

/// Keys created and expiring per day among `probes` (scaled to `count`).
/// `None` when no probe knows its creation time, or the data is younger
/// than an hour.
fn rates(probes: &[Probe], count: u64, now: u64) -> Option<(f64, f64)> {
    let oldest = probes.iter().filter_map(|p| p.created_ms).min()?;
    let window = now.saturating_sub(oldest).min(DAY_MS);
    if window < MIN_HISTORY_MS {
        return None;
    }
    let n = probes.len() as f64;
    let new = probes.iter().filter(|p| p.created_ms.is_some_and(|c| now.saturating_sub(c) <= window)).count() as f64;
    let expiring = probes.iter().filter(|p| p.pttl >= 0 && (p.pttl as u64) < window).count() as f64;
    let per_day = DAY_MS as f64 / window as f64;
    Some((count as f64 * new / n * per_day, count as f64 * expiring / n * per_day))
}

impl Ops {
    /// `INFO memory` of every primary (a cluster) or of the one server.
    pub async fn memory_all(&self) -> Result<Vec<NodeMemory>, OpsError> {
        let per_primary: Vec<(Option<String>, String)> =
            self.redis.on_every_primary(redis::cmd("INFO").arg("memory")).await?;
        Ok(per_primary
            .into_iter()
            .map(|(node, info)| parse_info_memory(node.unwrap_or_else(|| self.redis.server().to_owned()), &info))
            .collect())
    }

    /// `INFO memory` of the server holding the namespace (on a cluster, the
    /// primary that owns its slot).
    async fn memory_of_namespace(&self) -> Result<NodeMemory, OpsError> {
        let info: String = self.redis.on_namespace_slot(redis::cmd("INFO").arg("memory")).await?;
        let node =
            if self.redis.conn().is_cluster() { self.namespace_node().await? } else { self.redis.server().to_owned() };
        Ok(parse_info_memory(node, &info))
    }

    /// `host:port` of the cluster primary owning the namespace's slot: the
    /// primary whose `run_id` the slot's node reports.
    async fn namespace_node(&self) -> Result<String, OpsError> {
        let run_id = |info: &str| {
            info.lines().find_map(|l| l.strip_prefix("run_id:")).map(|v| v.trim().to_owned()).unwrap_or_default()
        };
        let own: String = self.redis.on_namespace_slot(redis::cmd("INFO").arg("server")).await?;
        let every: Vec<(Option<String>, String)> =
            self.redis.on_every_primary(redis::cmd("INFO").arg("server")).await?;
        let want = run_id(&own);
        Ok(every
            .into_iter()
            .find(|(_, info)| run_id(info) == want)
            .and_then(|(node, _)| node)
            .unwrap_or_else(|| "the primary owning the namespace's slot".to_owned()))
    }

    /// Measures the sampled keys: `MEMORY USAGE … SAMPLES 0`, `PTTL`, and the
    /// creation time (`at` of a delivery record, `created_ms` of a run).
    async fn probe(&self, kind: usize, keys: &[String]) -> Result<Vec<Probe>, OpsError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(50) {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.cmd("MEMORY").arg("USAGE").arg(k).arg("SAMPLES").arg(0).cmd("PTTL").arg(k);
                // The payload's length, not the payload: a sampled run may hold megabytes.
                match KINDS[kind] {
                    "delivery" => pipe.cmd("GET").arg(k).cmd("EXISTS").arg(k),
                    "run" => pipe.cmd("HGET").arg(k).arg("created_ms").cmd("HSTRLEN").arg(k).arg("payload"),
                    _ => pipe.cmd("EXISTS").arg(k).cmd("EXISTS").arg(k),
                };
            }
            let values: Vec<redis::Value> = self.redis.query(&mut pipe).await?;
            for triple in values.chunks(4) {
                // A key that expired since the scan answers nil: skip it.
                let Ok(bytes) = redis::from_redis_value_ref::<u64>(&triple[0]) else { continue };
                let pttl = redis::from_redis_value_ref::<i64>(&triple[1]).unwrap_or(-2);
                let (created_ms, payload) = match KINDS[kind] {
                    "delivery" => {
                        let text = redis::from_redis_value_ref::<String>(&triple[2]).unwrap_or_default();
                        let at = serde_json::from_str::<serde_json::Value>(&text).ok().and_then(|v| v["at"].as_u64());
                        (at, 0)
                    }
                    "run" => {
                        let created = redis::from_redis_value_ref::<Option<String>>(&triple[2])
                            .ok()
                            .flatten()
                            .and_then(|v| v.parse().ok());
                        (created, redis::from_redis_value_ref::<u64>(&triple[3]).unwrap_or(0))
                    }
                    _ => (None, 0),
                };
                out.push(Probe { bytes, pttl, created_ms, payload });
            }
        }
        Ok(out)
    }

    /// The memory report of `stats`: `counts` are the kinds' key counts from
    /// the scan, `sampler` its sample. A Redis that refuses `MEMORY` or
    /// `INFO` (a managed service's ACL) gives a report that says so.
    pub async fn memory_report(&self, counts: [u64; 3], sampler: &Sampler) -> Result<MemoryReport, OpsError> {
        match self.memory_report_inner(counts, sampler).await {
            // An error reply (not a lost connection): the server refuses the command.
            Err(OpsError::Store(crate::Error::Redis(e))) if e.code().is_some() => Ok(MemoryReport {
                kinds: Vec::new(),
                run_payload_bytes: 0,
                total_bytes: 0,
                server: None,
                primaries: Vec::new(),
                growth_bytes_per_day: None,
                days_until_full: None,
                growth_note: None,
                unavailable: Some(format!("Redis refused a memory read: {e}")),
            }),
            other => other,
        }
    }

    async fn memory_report_inner(&self, counts: [u64; 3], sampler: &Sampler) -> Result<MemoryReport, OpsError> {
        let now = crate::units::now_ms();
        let mut probes = Vec::new();
        for (kind, keys) in sampler.kinds.iter().enumerate() {
            probes.push(self.probe(kind, keys).await?);
        }
        let mean = |p: &[Probe], f: fn(&Probe) -> u64| {
            if p.is_empty() { 0 } else { p.iter().map(f).sum::<u64>() / p.len() as u64 }
        };
        // Keys created per day: deliveries from their own `at`; runs and
        // logical keys (created together) from the runs' `created_ms`.
        let run_rates = rates(&probes[2], counts[2], now);
        let mut kinds = Vec::new();
        for (i, kind) in KINDS.iter().enumerate() {
            let p = &probes[i];
            let mean_bytes = mean(p, |p| p.bytes);
            let growth = match i {
                0 => rates(p, counts[0], now),
                1 => run_rates.map(|(new, _)| (new, expiring_per_day(p, counts[1]))),
                _ => run_rates,
            }
            .map(|(new, exp)| ((new - exp) * mean_bytes as f64) as i64);
            kinds.push(KindMemory {
                kind,
                count: counts[i],
                sampled: p.len() as u64,
                mean_bytes,
                bytes: mean_bytes * counts[i],
                growth_bytes_per_day: growth,
            });
        }
        let run_payload_bytes = mean(&probes[2], |p| p.payload) * counts[2];

        let mut streams = 0;
        for key in [self.keys().runs(), self.keys().runs_dead(), self.keys().run_counter()] {
            let b: Option<u64> =
                self.redis.query(redis::cmd("MEMORY").arg("USAGE").arg(&key).arg("SAMPLES").arg(0)).await?;
            streams += b.unwrap_or(0);
        }
        kinds.push(KindMemory {
            kind: "streams",
            count: 3,
            sampled: 3,
            mean_bytes: streams / 3,
            bytes: streams,
            growth_bytes_per_day: None,
        });
        let total_bytes = kinds.iter().map(|k| k.bytes).sum();

        let server = self.memory_of_namespace().await?;
        let primaries = if self.redis.conn().is_cluster() { self.memory_all().await? } else { Vec::new() };
        let measured: Vec<i64> = kinds.iter().filter_map(|k| k.growth_bytes_per_day).collect();
        let growth = (!measured.is_empty()).then(|| measured.iter().sum::<i64>());
        let (days_until_full, growth_note) = match growth {
            None if counts.iter().all(|c| *c == 0) => {
                (None, Some("cannot measure growth: the namespace holds no keys".into()))
            }
            None => (None, Some("cannot measure growth yet: the sampled records span less than an hour".into())),
            Some(_) if server.maxmemory == 0 => {
                (None, Some("no maxmemory set: Redis grows until the host runs out of memory".into()))
            }
            Some(g) if g <= 0 => (None, Some("not growing: keys expire as fast as they are created".into())),
            Some(g) => {
                let room = server.maxmemory.saturating_sub(server.used_memory) as f64;
                (Some((room / g as f64 * 10.0).round() / 10.0), None)
            }
        };
        Ok(MemoryReport {
            kinds,
            run_payload_bytes,
            total_bytes,
            server: Some(server),
            primaries,
            growth_bytes_per_day: growth,
            days_until_full,
            growth_note,
            unavailable: None,
        })
    }
}

/// Keys of `probes` (scaled to `count`) whose TTL runs out within a day.
fn expiring_per_day(probes: &[Probe], count: u64) -> f64 {
    if probes.is_empty() {
        return 0.0;
    }
    let expiring = probes.iter().filter(|p| p.pttl >= 0 && (p.pttl as u64) < DAY_MS).count() as f64;
    count as f64 * expiring / probes.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_memory_fields() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:4194304\r\nmaxmemory_human:4.00M\r\n";
        let m = parse_info_memory("n".into(), info);
        assert_eq!((m.used_memory, m.maxmemory), (1_048_576, 4_194_304));
        assert_eq!(m.ratio(), Some(0.25));
        assert_eq!(parse_info_memory("n".into(), "used_memory:5\r\n").ratio(), None);
    }

    #[test]
    fn reservoir_keeps_a_bounded_sample_of_every_kind() {
        let mut s = Sampler::default();
        for i in 0..10_000 {
            s.offer(0, &format!("k{i}"));
        }
        s.offer(2, "only");
        assert_eq!(s.kinds[0].len(), SAMPLE_SIZE);
        // Uniform: some of the sample comes from the later keys.
        assert!(s.kinds[0].iter().any(|k| k[1..].parse::<u32>().unwrap() >= 5000), "{:?}", s.kinds[0]);
        assert_eq!(s.kinds[2], ["only"]);
        assert!(s.kinds[1].is_empty());
    }

    #[test]
    fn growth_rates_from_creation_times_and_ttls() {
        let now = 10 * DAY_MS;
        let p = |age: u64, pttl: i64| Probe { bytes: 100, pttl, created_ms: Some(now - age), payload: 0 };
        // Half created in the last day, a quarter expiring within a day: of 1000 keys, 500 new, 250 gone per day.
        let probes = [
            p(DAY_MS / 2, -1),
            p(DAY_MS / 3, -1),
            p(3 * DAY_MS, (DAY_MS / 2) as i64),
            p(4 * DAY_MS, 2 * DAY_MS as i64),
        ];
        let (new, exp) = rates(&probes, 1000, now).unwrap();
        assert_eq!((new.round(), exp.round()), (500.0, 250.0));
        // Data two hours old: the rate is extrapolated to a day.
        let young = [p(2 * 3_600_000, -1)];
        assert_eq!(rates(&young, 10, now).unwrap().0.round(), 120.0);
        // Younger than an hour: not measurable.
        assert!(rates(&[p(60_000, -1)], 10, now).is_none());
        assert!(rates(&[], 10, now).is_none());
    }
}
