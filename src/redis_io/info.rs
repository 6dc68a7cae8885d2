//! What Redis says of itself and of a stream, read into plain figures: the
//! one parser of `INFO memory`, and the one of `XINFO`'s replies
//! ([`xinfo_fields`]) behind `XINFO GROUPS`
//! ([`super::RedisHandle::stream_info`], used by `stats`, `/metrics`,
//! `/v1/ops/workers` and the bench) and `XINFO CONSUMERS`
//! (`/v1/ops/workers`).

use std::collections::HashMap;

use redis::Value;
use serde::Serialize;

use crate::error::Error;

/// `used_memory` and `maxmemory` of one Redis server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeMemory {
    /// `host:port` of the server.
    pub node: String,
    /// `used_memory`, bytes.
    pub used_memory: u64,
    /// `maxmemory`, bytes (0: no limit).
    pub maxmemory: u64,
}

impl NodeMemory {
    /// `used_memory / maxmemory` (`None` without a limit).
    pub fn ratio(&self) -> Option<f64> {
        (self.maxmemory > 0).then(|| self.used_memory as f64 / self.maxmemory as f64)
    }
}

/// Reads `used_memory` and `maxmemory` from an `INFO memory` text.
pub fn parse_info_memory(node: String, info: &str) -> NodeMemory {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    NodeMemory { node, used_memory: field("used_memory"), maxmemory: field("maxmemory") }
}

/// A stream's length and consumer groups ([`super::RedisHandle::stream_info`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// `XLEN` (0 when the stream does not exist).
    pub length: u64,
    /// Its consumer groups (none when the key is not a stream).
    pub groups: Vec<GroupStats>,
}

/// One consumer group of a stream (`XINFO GROUPS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupStats {
    /// The group name (the worker's `--group`).
    pub name: String,
    /// Consumers the group knows (live or not).
    pub consumers: u64,
    /// Entries delivered to a consumer and not yet acknowledged.
    pub pending: u64,
    /// The last entry id delivered to the group.
    pub last_delivered_id: String,
    /// Entries the group has read (Redis 7+; `None` before, or when unknown).
    pub entries_read: Option<u64>,
    /// Entries not yet delivered to the group (Redis 7+; `None` when unknown).
    pub lag: Option<u64>,
}

/// The fields of one entry of an `XINFO` reply, by name: a map in RESP3, a
/// flat key/value array in RESP2 (`None` for anything else). Every
/// `XINFO` reply is read through here, so both protocols read alike.
fn xinfo_fields(entry: Value) -> Option<HashMap<String, Value>> {
    let pairs: Vec<(Value, Value)> = match entry {
        Value::Map(pairs) => pairs,
        Value::Array(flat) => {
            let mut it = flat.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        _ => return None,
    };
    Some(pairs.into_iter().filter_map(|(k, v)| Some((redis::from_redis_value::<String>(k).ok()?, v))).collect())
}

/// Each entry of an `XINFO` list reply (`GROUPS`, `CONSUMERS`), read by
/// `entry` from its fields; `what` names the subcommand in errors.
fn parse_xinfo_list<T>(
    what: &str,
    raw: Value,
    entry: impl Fn(&HashMap<String, Value>) -> Option<T>,
) -> Result<Vec<T>, Error> {
    let unexpected = |why: &str| Error::UnexpectedReply(format!("XINFO {what}: {why}"));
    let Value::Array(entries) = raw else {
        return Err(unexpected("not an array"));
    };
    entries
        .into_iter()
        .map(|e| {
            let fields = xinfo_fields(e).ok_or_else(|| unexpected("an entry is not a map"))?;
            entry(&fields).ok_or_else(|| unexpected("an entry without a name"))
        })
        .collect()
}

fn text(fields: &HashMap<String, Value>, name: &str) -> Option<String> {
    fields.get(name).and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
}

fn number<T: redis::FromRedisValue>(fields: &HashMap<String, Value>, name: &str) -> Option<T> {
    fields.get(name).and_then(|v| redis::from_redis_value_ref::<T>(v).ok())
}

/// Parses `XINFO GROUPS`. Fields a server does not report stay `None`.
pub fn parse_groups(raw: Value) -> Result<Vec<GroupStats>, Error> {
    parse_xinfo_list("GROUPS", raw, |g| {
        Some(GroupStats {
            name: text(g, "name")?,
            consumers: number(g, "consumers").unwrap_or(0),
            pending: number(g, "pending").unwrap_or(0),
            last_delivered_id: text(g, "last-delivered-id").unwrap_or_default(),
            entries_read: number(g, "entries-read"),
            lag: number(g, "lag"),
        })
    })
}

/// One consumer of a group (`XINFO CONSUMERS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerStats {
    /// The consumer name (the worker's `--consumer`).
    pub name: String,
    /// Entries delivered to it and not yet acknowledged.
    pub pending: u64,
    /// ms since it last tried to read or claim (`idle`).
    pub idle_ms: u64,
    /// ms since its last successful read or claim (`inactive`, Redis 7.2+;
    /// `-1` when it never had one).
    pub inactive_ms: Option<i64>,
}

/// Parses `XINFO CONSUMERS`; `inactive` is `None` before Redis 7.2.
pub fn parse_consumers(raw: Value) -> Result<Vec<ConsumerStats>, Error> {
    parse_xinfo_list("CONSUMERS", raw, |c| {
        Some(ConsumerStats {
            name: text(c, "name")?,
            pending: number(c, "pending").unwrap_or(0),
            idle_ms: number(c, "idle").unwrap_or(0),
            inactive_ms: number(c, "inactive"),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn xinfo_groups_resp2_and_resp3() {
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("workers"),
            bulk("consumers"),
            Value::Int(2),
            bulk("pending"),
            Value::Int(1),
            bulk("last-delivered-id"),
            bulk("1-0"),
            bulk("entries-read"),
            Value::Int(3),
            bulk("lag"),
            Value::Nil,
        ])]);
        let g = &parse_groups(resp2).unwrap()[0];
        assert_eq!((g.name.as_str(), g.consumers, g.pending, g.entries_read, g.lag), ("workers", 2, 1, Some(3), None));
        let resp3 = Value::Array(vec![Value::Map(vec![(bulk("name"), bulk("g")), (bulk("pending"), Value::Int(4))])]);
        let g = &parse_groups(resp3).unwrap()[0];
        assert_eq!((g.name.as_str(), g.pending, g.consumers, g.entries_read), ("g", 4, 0, None));
    }

    #[test]
    fn xinfo_consumers_resp2_and_resp3() {
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("w1"),
            bulk("pending"),
            Value::Int(2),
            bulk("idle"),
            Value::Int(150),
        ])]);
        let c = &parse_consumers(resp2).unwrap()[0];
        assert_eq!((c.name.as_str(), c.pending, c.idle_ms, c.inactive_ms), ("w1", 2, 150, None));
        let resp3 = Value::Array(vec![Value::Map(vec![
            (bulk("name"), bulk("w2")),
            (bulk("pending"), Value::Int(0)),
            (bulk("idle"), Value::Int(7)),
            (bulk("inactive"), Value::Int(-1)),
        ])]);
        let c = &parse_consumers(resp3).unwrap()[0];
        assert_eq!((c.name.as_str(), c.pending, c.idle_ms, c.inactive_ms), ("w2", 0, 7, Some(-1)));
        assert!(parse_consumers(Value::Array(vec![Value::Map(vec![(bulk("pending"), Value::Int(1))])])).is_err());
        assert!(parse_consumers(Value::Nil).is_err());
    }
}
