//! What Redis says of itself in `INFO`, read into plain figures: the one
//! parser of `INFO memory`, used by `stats`, `/metrics` and the bench.

use serde::Serialize;

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
