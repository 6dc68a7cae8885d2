//! The Redis key schema of docs/reference.md#redis-keys: length-prefixed fields under a
//! namespace hash tag, so no two identities share a key and one namespace
//! lives in one Redis Cluster slot.

use crate::vocabulary::{Identity, enc, push_enc};

/// The namespace the gate's keys live under when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Why a namespace was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("namespace {0:?} is invalid: it must be non-empty and contain no '{{', '}}' or whitespace")]
pub struct InvalidNamespace(pub String);

/// Builds every key of one namespace.
#[derive(Debug, Clone)]
pub struct Keys {
    namespace: String,
    /// `idemgate:{NS}:`
    prefix: String,
}

impl Keys {
    /// Keys under namespace `ns`. Braces would break the `{NS}` hash tag and
    /// whitespace would make keys hard to type in `redis-cli`, so both are refused.
    pub fn new(ns: &str) -> Result<Self, InvalidNamespace> {
        if ns.is_empty() || ns.contains(['{', '}']) || ns.chars().any(char::is_whitespace) {
            return Err(InvalidNamespace(ns.to_owned()));
        }
        Ok(Self { namespace: ns.to_owned(), prefix: format!("idemgate:{{{ns}}}:") })
    }

    /// The namespace these keys live under.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    fn key(&self, kind: &str) -> String {
        format!("{}{kind}", self.prefix)
    }

    /// `idemgate:{NS}:delivery:` enc(provider) `:` enc(delivery_id)
    pub fn delivery(&self, provider: &str, delivery_id: &str) -> String {
        let mut k = self.delivery_prefix();
        push_enc(&mut k, provider);
        k.push(':');
        push_enc(&mut k, delivery_id);
        k
    }

    /// `idemgate:{NS}:logical:` enc(provider) `:` enc(org/repo) `:` enc(action) `:` enc(subject);
    /// the subject is the number text, or `number@digest` for a content
    /// identity, and a signed body's key holds what the body states
    /// ([`Identity::key_parts`], docs/identities.md).
    pub fn logical(&self, id: &Identity) -> String {
        let mut k = self.key("logical:");
        for (i, field) in id.key_parts().into_iter().enumerate() {
            if i > 0 {
                k.push(':');
            }
            push_enc(&mut k, field);
        }
        k
    }

    /// `idemgate:{NS}:delivery:`, the start of every delivery key.
    pub fn delivery_prefix(&self) -> String {
        self.key("delivery:")
    }

    /// `idemgate:{NS}:logical`, the stem of every logical key.
    pub fn logical_prefix(&self) -> String {
        self.key("logical")
    }

    /// `idemgate:{NS}:run-counter`, the last run number handed out.
    pub fn run_counter(&self) -> String {
        self.key("run-counter")
    }

    /// `idemgate:{NS}:runs`, the stream of created runs.
    pub fn runs(&self) -> String {
        self.key("runs")
    }

    /// `idemgate:{NS}:runs:dead`, runs that failed their last allowed attempt.
    pub fn runs_dead(&self) -> String {
        self.key("runs:dead")
    }

    /// `idemgate:{NS}:retry:` enc(group), a sorted set: the run ids of
    /// `group` parked until their next attempt, scored by its due time (ms
    /// since the Unix epoch).
    pub fn retry(&self, group: &str) -> String {
        let mut key = self.retry_prefix();
        push_enc(&mut key, group);
        key
    }

    /// `idemgate:{NS}:destination-parked:` enc(group), a sorted set: the
    /// run ids of `group` parked after a failure of the destination's kind
    /// (a subset of [`Keys::retry`]), each scored by the earliest time a
    /// probe or a release may send it (its `Retry-After`, else when it
    /// failed). A return of the destination makes every one of them due at
    /// once; a run parked for its own failure is never in it.
    pub fn destination_parked(&self, group: &str) -> String {
        let mut key = self.key("destination-parked:");
        push_enc(&mut key, group);
        key
    }

    /// `idemgate:{NS}:destination-probe:` enc(group), a string with a TTL:
    /// the run a probe is out with, for a probe interval that its worker
    /// renews while the probe is out; then empty for one interval (or a
    /// `Retry-After`). While it exists, no worker of `group` sends another
    /// probe (one at a time and one per interval for the group, however
    /// many workers it has), and no release or wake sends the run it names.
    pub fn destination_probe(&self, group: &str) -> String {
        let mut key = self.key("destination-probe:");
        push_enc(&mut key, group);
        key
    }

    /// `idemgate:{NS}:destination:` enc(name), a hash with no TTL: the
    /// destination's state all its workers share
    /// (`lua/destination_take.lua`): `paused` and `paused_ms` while an
    /// operator paused it, `hold_until_ms` while a 429's `Retry-After`
    /// holds it back, `breaker` while a worker's breaker is open (its
    /// workers share it), and its pace's token bucket (`tokens`, `refill_ms`).
    pub fn destination(&self, name: &str) -> String {
        let mut key = self.key("destination:");
        push_enc(&mut key, name);
        key
    }

    /// `idemgate:{NS}:retry:`, the parking sets' common prefix (a script
    /// that reads a run's group from its record appends enc(group)).
    pub fn retry_prefix(&self) -> String {
        self.key("retry:")
    }

    /// `idemgate:{NS}:kept-payloads`, a sorted set: the run ids of done runs
    /// whose payload `--keep-done-payloads DURATION` keeps, scored by the
    /// time it goes (ms since the Unix epoch; `lua/payload_expire.lua`).
    pub fn kept_payloads(&self) -> String {
        self.key("kept-payloads")
    }

    /// `idemgate:{NS}:run:` — the run records' common prefix (the script
    /// appends the run id it creates; the hash tag keeps it in the slot).
    pub fn run_prefix(&self) -> String {
        self.key("run:")
    }

    /// `idemgate:{NS}:run:<run id>`, one run's record hash.
    pub fn run(&self, run_id: &str) -> String {
        self.run_prefix() + run_id
    }

    /// A run's **run key**, `NS:run-N:CREATED_MS` (not a Redis key: the
    /// `webhook-id` and `IDEMGATE_RUN_KEY` a handler dedupes on), from its
    /// record's `created_ms`. It is the same on every attempt of the run and
    /// differs for every other run, also in another namespace of the same
    /// Redis and after Redis lost data and handed `run-N` out again.
    pub fn run_key(&self, run_id: &str, created_ms: &str) -> String {
        format!("{}:{run_id}:{created_ms}", self.namespace)
    }

    /// `idemgate:{NS}:order:` + an order key ([`crate::order::OrderBy::key`]):
    /// what the key's lines, one per destination, are named after
    /// ([`Keys::order_line`]).
    pub fn order(&self, order_key: &str) -> String {
        self.key("order:") + order_key
    }

    /// [`Keys::order`] `:` enc(group): destination `group`'s line of
    /// `order_key`, a string: its head's run number while busy, the
    /// previous run while idle (docs/worker.md, "One at a time, in order,
    /// per key"; lua/shared/order.lua's `order_key_of`).
    pub fn order_line(&self, order_key: &str, group: &str) -> String {
        format!("{}:{}", self.order(order_key), enc(group))
    }

    /// `idemgate:{NS}:order-blocked`: the order keys' lines held behind a
    /// dead head, scored by when it died (lua/shared/order.lua).
    pub fn order_blocked(&self) -> String {
        self.key("order-blocked")
    }

    /// The member of [`Keys::order_blocked`] for `group`'s line of
    /// `order_key`: enc(group) `:` the key, as the order scripts'
    /// `order_blocked_member` writes it.
    pub fn order_blocked_member(group: &str, order_key: &str) -> String {
        format!("{}:{order_key}", enc(group))
    }

    /// `idemgate:{NS}:worker:` — the worker heartbeats' common prefix.
    pub fn worker_prefix(&self) -> String {
        self.key("worker:")
    }

    /// `idemgate:{NS}:worker:` enc(group) `:` enc(consumer): one live
    /// worker's heartbeat hash (docs/operations.md, "Worker heartbeats").
    pub fn worker(&self, group: &str, consumer: &str) -> String {
        format!("{}{}:{}", self.worker_prefix(), enc(group), enc(consumer))
    }

    /// A `SCAN MATCH` pattern for every key of one kind (`delivery`, `logical`, `run`).
    pub fn scan_pattern(&self, kind: &str) -> String {
        // The namespace cannot contain glob characters that matter except these.
        let ns: String = self
            .namespace
            .chars()
            .flat_map(|c| match c {
                '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        format!("idemgate:{{{ns}}}:{kind}:*")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(p: &str, r: &str, a: &str, n: &str) -> Identity {
        Identity::new(p, r, a, n)
    }

    #[test]
    fn contract_example() {
        let keys = Keys::new("default").unwrap();
        assert_eq!(keys.delivery("github", "d-1"), "idemgate:{default}:delivery:6:github:3:d-1");
        assert_eq!(
            keys.logical(&id("github", "octo/repo", "pull_request.opened", "7")),
            "idemgate:{default}:logical:6:github:9:octo/repo:19:pull_request.opened:1:7"
        );
        assert_eq!(
            keys.logical(&Identity::with_content("github", "octo/repo", "push", "", "0123456789abcdef01234567")),
            "idemgate:{default}:logical:6:github:9:octo/repo:4:push:25:@0123456789abcdef01234567"
        );
        assert_eq!(keys.run("run-7"), "idemgate:{default}:run:run-7");
        assert_eq!(keys.run_counter(), "idemgate:{default}:run-counter");
        assert_eq!(keys.runs(), "idemgate:{default}:runs");
        assert_eq!(keys.runs_dead(), "idemgate:{default}:runs:dead");
        assert_eq!(keys.retry("deliver"), "idemgate:{default}:retry:7:deliver");
        assert_eq!(keys.destination_parked("deliver"), "idemgate:{default}:destination-parked:7:deliver");
        assert_eq!(keys.destination_probe("deliver"), "idemgate:{default}:destination-probe:7:deliver");
        assert_eq!(keys.destination("ci"), "idemgate:{default}:destination:2:ci");
        assert_eq!(keys.kept_payloads(), "idemgate:{default}:kept-payloads");
    }

    #[test]
    fn lengths_are_bytes_not_chars() {
        assert_eq!(enc("é"), "2:é");
        assert_eq!(enc(""), "0:");
        assert_eq!(enc("a:b"), "3:a:b");
    }

    #[test]
    fn colon_collisions_stay_apart() {
        let keys = Keys::new("t").unwrap();
        assert_ne!(keys.logical(&id("a:x", "o/r", "push", "")), keys.logical(&id("a", "x:o/r", "push", "")));
        assert_ne!(keys.logical(&id("g", "o/r", "push:1", "2")), keys.logical(&id("g", "o/r", "push", "1:2")));
        assert_ne!(keys.delivery("a:1", "2"), keys.delivery("a", "1:2"));
    }

    #[test]
    fn bad_namespaces_are_refused() {
        for ns in ["", "a{b", "a}b", "a b", "\t"] {
            assert!(Keys::new(ns).is_err(), "{ns:?}");
        }
        assert!(Keys::new("tenant-1:github").is_ok());
    }

    /// Decodes a run of `enc` fields joined with `:`; the inverse of the encoder.
    fn decode(mut s: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        loop {
            let (len, rest) = s.split_once(':')?;
            let len: usize = len.parse().ok()?;
            out.push(rest.get(..len)?.to_owned());
            s = &rest[len..];
            if s.is_empty() {
                return Some(out);
            }
            s = s.strip_prefix(':')?;
        }
    }

    proptest::proptest! {
        #[test]
        fn logical_keys_are_injective(a in proptest::collection::vec(".*", 4), b in proptest::collection::vec(".*", 4)) {
            let keys = Keys::new("p").unwrap();
            let ka = keys.logical(&id(&a[0], &a[1], &a[2], &a[3]));
            let kb = keys.logical(&id(&b[0], &b[1], &b[2], &b[3]));
            proptest::prop_assert_eq!(ka == kb, a == b);
            let fields = decode(ka.strip_prefix("idemgate:{p}:logical:").unwrap()).unwrap();
            proptest::prop_assert_eq!(fields, a);
        }

        #[test]
        fn delivery_keys_round_trip(p in ".*", d in ".*") {
            let keys = Keys::new("p").unwrap();
            let k = keys.delivery(&p, &d);
            let fields = decode(k.strip_prefix("idemgate:{p}:delivery:").unwrap()).unwrap();
            proptest::prop_assert_eq!(fields, vec![p, d]);
        }

        #[test]
        fn namespace_check_never_panics(ns in ".*") {
            if let Ok(keys) = Keys::new(&ns) {
                let prefix = format!("idemgate:{{{}}}:", ns);
                proptest::prop_assert!(keys.run_counter().starts_with(&prefix));
            }
        }
    }
}
