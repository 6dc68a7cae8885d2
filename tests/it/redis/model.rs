//! Property test: random call sequences give identical responses on the
//! memory store, the Redis store and a small reference model of docs/reference.md#semantics.

use std::collections::HashMap;

use idemgate::gate::Gate;
use idemgate::store::memory::MemoryStore;
use idemgate::vocabulary::Settings;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{fresh_ns, redis_store_in};

/// The contract, written as plainly as possible and independently of the
/// library's rules.
#[derive(Default)]
struct Model {
    deliveries: HashMap<(String, String), Value>,
    logical: HashMap<(String, String, String, String), String>,
    last_run: u64,
}

impl Model {
    fn handle(&mut self, provider: &str, delivery: &str, event: &Value, allow: &[&str]) -> Value {
        if let Some(r) = self.deliveries.get(&(provider.into(), delivery.into())) {
            return r.clone();
        }
        let r = self.decide(provider, event, allow);
        self.deliveries.insert((provider.into(), delivery.into()), r.clone());
        r
    }

    fn decide(&mut self, provider: &str, event: &Value, allow: &[&str]) -> Value {
        let bad = json!({"status": "bad_request", "code": 400});
        let text = |k: &str| match event.get(k) {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        let (Some(org), Some(repo), Some(action)) = (text("org"), text("repo"), text("action")) else {
            return bad;
        };
        let number = match event.get("number") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                if n.as_i64() == Some(0) {
                    String::new()
                } else {
                    n.to_string()
                }
            }
            _ => return bad,
        };
        let full = format!("{org}/{repo}");
        if !allow.contains(&full.as_str()) {
            return json!({"status": "blocked", "code": 403});
        }
        let key = (provider.to_owned(), full, action, number);
        if let Some(run) = self.logical.get(&key) {
            return json!({"status": "duplicate", "code": 200, "run_id": run});
        }
        self.last_run += 1;
        let run = format!("run-{}", self.last_run);
        self.logical.insert(key, run.clone());
        json!({"status": "created", "code": 202, "run_id": run})
    }
}

const ALLOW: [&str; 3] = ["o/r", "o:x/r", "ü/r"];

fn field() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::sample::select(vec!["o", "r", "x", "o:x", "ü", " ", "push", "push:1"]).prop_map(Value::from),
        1 => Just(json!("")),
        1 => Just(Value::Null),
        1 => Just(json!(3)),
    ]
}

fn number() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Value::Null)),
        3 => (-2i64..4).prop_map(|n| Some(json!(n))),
        2 => prop::sample::select(vec!["", "0", "1", "2", "1:2", "-1"]).prop_map(|s| Some(json!(s))),
        1 => Just(Some(json!(1.5))),
        1 => Just(Some(json!(true))),
    ]
}

fn event() -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => (field(), field(), field(), number()).prop_map(|(org, repo, action, n)| {
            let mut e = json!({"org": org, "repo": repo, "action": action});
            if let Some(n) = n {
                e["number"] = n;
            }
            e
        }),
        1 => Just(Value::Null),
        1 => Just(json!(["o", "r"])),
    ]
}

fn call() -> impl Strategy<Value = (String, String, Value)> {
    (prop::sample::select(vec!["github", "gitlab", "a:x"]), 0u8..12, event())
        .prop_map(|(p, d, e)| (p.to_owned(), format!("d{d}"), e))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn stores_agree_with_the_model(calls in prop::collection::vec(call(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let memory = Gate::new(ALLOW, std::sync::Arc::new(MemoryStore::new(&Settings::default())));
            let redis = Gate::new(ALLOW, redis_store_in(&fresh_ns("model"), &Settings::default()).await);
            let mut model = Model::default();
            for (provider, delivery, event) in &calls {
                let want = model.handle(provider, delivery, event, &ALLOW);
                let m = serde_json::to_value(memory.handle(provider, delivery, event).await.unwrap()).unwrap();
                let r = serde_json::to_value(redis.handle(provider, delivery, event).await.unwrap()).unwrap();
                prop_assert_eq!(&m, &want, "memory store, call {:?}", (provider, delivery, event));
                prop_assert_eq!(&r, &want, "redis store, call {:?}", (provider, delivery, event));
            }
            Ok(())
        })?;
    }
}
