//! What Redis says of itself and of a stream, read into plain figures: the
//! one parser of `INFO memory` and the one of `XINFO GROUPS`
//! ([`super::RedisHandle::stream_info`]), used by `stats`, `/metrics`,
//! `/v1/ops/workers` and the bench.

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

/// Parses `XINFO GROUPS` (an array of maps in RESP3, of flat key/value
/// arrays in RESP2). Fields a server does not report stay `None`.
pub fn parse_groups(raw: Value) -> Result<Vec<GroupStats>, Error> {
    let unexpected = |what: &str| Error::UnexpectedReply(format!("XINFO GROUPS: {what}"));
    let Value::Array(groups) = raw else {
        return Err(unexpected("not an array"));
    };
    groups
        .into_iter()
        .map(|g| {
            let pairs: Vec<(Value, Value)> = match g {
                Value::Map(pairs) => pairs,
                Value::Array(flat) => {
                    let mut it = flat.into_iter();
                    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
                }
                _ => return Err(unexpected("a group is not a map")),
            };
            let mut m: HashMap<String, Value> = HashMap::new();
            for (k, v) in pairs {
                if let Ok(k) = redis::from_redis_value::<String>(k) {
                    m.insert(k, v);
                }
            }
            let text = |k: &str| m.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
            let num = |k: &str| m.get(k).and_then(|v| redis::from_redis_value_ref::<u64>(v).ok());
            Ok(GroupStats {
                name: text("name").ok_or_else(|| unexpected("a group without a name"))?,
                consumers: num("consumers").unwrap_or(0),
                pending: num("pending").unwrap_or(0),
                last_delivered_id: text("last-delivered-id").unwrap_or_default(),
                entries_read: num("entries-read"),
                lag: num("lag"),
            })
        })
        .collect()
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
}
