//! A destination's filter (docs/destinations.md#several-destinations):
//! which runs one destination takes. It is compiled once, when the worker
//! starts ([`RunFilter::compile`]), into a typed tree; deciding a run then
//! walks the tree and never reads the filter's text again.
//!
//! - `providers`: the run's provider, exactly.
//! - `repos`: `ORG/REPO` or `ORG/*`, the allowlist's rule ([`Allowlist`]).
//! - `actions`: the run's action (`push`, `pull_request.opened`), exactly
//!   or with `*` standing for any text (`pull_request.*`).
//! - `payload`: a JSON filter on the run's kept payload, by dotted path,
//!   with the operators Convoy and Outpost document ([`PayloadFilter`]).
//!
//! Every part given must admit the run; a part not given admits every run.
//! An error names the place in the filter (`filter.payload.sender.$in`),
//! never a value: a secret typed into the wrong key must not reach a log.

use serde_json::Value;

use crate::allowlist::{Allowlist, check_entry};
use crate::vocabulary::RunFields;

/// One destination's filter, compiled.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    providers: Option<Vec<String>>,
    repos: Option<Allowlist>,
    actions: Option<Vec<Glob>>,
    payload: Option<PayloadFilter>,
}

/// A filter that did not compile: where in it, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    /// The place, from `filter`: `filter.repos[2]`, `filter.payload.a.b.$gt`.
    pub path: String,
    /// What is wrong there, never the value.
    pub message: String,
}

impl std::fmt::Display for FilterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.path, self.message)
    }
}

fn fail<T>(path: &str, message: impl Into<String>) -> Result<T, FilterError> {
    Err(FilterError { path: path.to_owned(), message: message.into() })
}

/// A key as an error may show it: the filter's keys are names the
/// operator chose, but a long or odd one is cut, in case a value was
/// typed where a key belongs.
fn shown_key(key: &str) -> String {
    let plain = key.len() <= 64 && key.chars().all(|c| c.is_ascii_alphanumeric() || "_-$.".contains(c));
    if plain { key.to_owned() } else { "…".to_owned() }
}

impl RunFilter {
    /// Compiles `filter` (the destination's `filter` table, as JSON).
    pub fn compile(filter: &Value) -> Result<Self, FilterError> {
        let Value::Object(parts) = filter else { return fail("filter", "expected a table") };
        let mut out = RunFilter::default();
        for (key, value) in parts {
            let path = format!("filter.{}", shown_key(key));
            match key.as_str() {
                "providers" => out.providers = Some(strings(value, &path)?),
                "repos" => {
                    let entries = strings(value, &path)?;
                    for (i, entry) in entries.iter().enumerate() {
                        if let Err(why) = check_entry(entry) {
                            return fail(&format!("{path}[{i}]"), why);
                        }
                    }
                    out.repos = Some(Allowlist::new(entries));
                }
                "actions" => out.actions = Some(strings(value, &path)?.iter().map(|s| Glob::new(s)).collect()),
                "payload" => out.payload = Some(PayloadFilter::compile(value, &path)?),
                _ => return fail(&path, "unknown key (expected providers, repos, actions or payload)"),
            }
        }
        Ok(out)
    }

    /// Whether the filter reads the run's payload.
    pub fn reads_payload(&self) -> bool {
        self.payload.is_some()
    }

    /// Whether the run's own fields pass (everything but the payload).
    pub fn admits_fields(&self, run: &RunFields) -> bool {
        let org = run.repo.rsplit_once('/').map_or("", |(org, _)| org);
        self.providers.as_ref().is_none_or(|p| p.contains(&run.provider))
            && self.repos.as_ref().is_none_or(|r| r.admits_joined(org, &run.repo))
            && self.actions.as_ref().is_none_or(|a| a.iter().any(|g| g.matches(&run.action)))
    }

    /// Whether the run's kept payload, as the record holds it (JSON text),
    /// passes: what the worker decides on. Text that is not JSON is as no
    /// payload. The text is read once, keeping only the paths the filter
    /// names (`Wanted`): reading it is most of the cost
    /// (docs/destinations.md#where-a-filter-runs-and-what-it-costs).
    pub fn admits_payload_text(&self, text: Option<&str>) -> bool {
        let Some(filter) = &self.payload else { return true };
        let payload = text.and_then(|t| filter.read(t));
        self.admits_payload(payload.as_ref())
    }

    /// Whether the run's payload passes; `None`: the run kept none, which a
    /// payload filter refuses (it cannot tell whether it would admit it).
    pub fn admits_payload(&self, payload: Option<&Value>) -> bool {
        match (&self.payload, payload) {
            (None, _) => true,
            (Some(filter), Some(payload)) => filter.admits(payload),
            (Some(_), None) => false,
        }
    }
}

/// A list of strings, or one string.
fn strings(value: &Value, path: &str) -> Result<Vec<String>, FilterError> {
    let items = match value {
        Value::String(s) => return Ok(vec![s.clone()]),
        Value::Array(items) => items,
        _ => return fail(path, "expected a list of strings"),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let Value::String(s) = item else { return fail(&format!("{path}[{i}]"), "expected a string") };
        if s.is_empty() {
            return fail(&format!("{path}[{i}]"), "must not be empty");
        }
        out.push(s.clone());
    }
    Ok(out)
}

/// A pattern where `*` stands for any text, possibly none.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glob(Vec<String>);

impl Glob {
    fn new(pattern: &str) -> Self {
        Glob(pattern.split('*').map(str::to_owned).collect())
    }

    fn matches(&self, text: &str) -> bool {
        let (first, rest) = self.0.split_first().expect("split gives one part at least");
        let Some(mut left) = text.strip_prefix(first.as_str()) else { return false };
        let Some((last, middle)) = rest.split_last() else { return left.is_empty() };
        for part in middle {
            match left.find(part.as_str()) {
                Some(at) => left = &left[at + part.len()..],
                None => return false,
            }
        }
        left.len() >= last.len() && left.ends_with(last.as_str())
    }
}

/// A JSON filter on a run's payload, as Convoy and Outpost write theirs: a
/// table of conditions that must all hold. A key is a dotted path into the
/// payload (`pull_request.base.ref`; a number indexes an array), a nested
/// table without `$` keys is the same as the dotted path, and a value is
/// either what the payload must hold there (`$eq`) or a table of
/// operators: `$eq $neq $in $nin $exist $gt $gte $lt $lte`, and at any
/// level `$and`, `$or` (lists of filters) and `$not` (a filter).
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadFilter(Node, Wanted);

#[derive(Debug, Clone, PartialEq)]
enum Node {
    All(Vec<Node>),
    Any(Vec<Node>),
    Not(Box<Node>),
    At(Vec<String>, Test),
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Eq(Value),
    Neq(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exist(bool),
    Order(Order, Bound),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Gt,
    Gte,
    Lt,
    Lte,
}

/// What `$gt` and its kin compare with: a number with numbers, a string
/// with strings (RFC 3339 times order as text); any other type refuses.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Number(f64),
    Text(String),
}

impl PayloadFilter {
    /// Compiles the filter at `path` (`filter.payload`).
    fn compile(value: &Value, path: &str) -> Result<Self, FilterError> {
        let node = compile_table(value, path, &[])?;
        let mut wanted = Wanted::default();
        node.paths(&mut |path| wanted.insert(path));
        Ok(PayloadFilter(node, wanted))
    }

    /// Whether `payload` passes.
    pub fn admits(&self, payload: &Value) -> bool {
        self.0.admits(payload)
    }

    /// The parts of the JSON `text` the filter reads; `None`: not JSON.
    fn read(&self, text: &str) -> Option<Value> {
        use serde::de::DeserializeSeed;
        let mut de = serde_json::Deserializer::from_str(text);
        let value = (&self.1).deserialize(&mut de).ok()?;
        de.end().ok()?;
        Some(value)
    }
}

/// The paths a payload filter reads, as a tree: reading a payload keeps
/// these and skips the rest without building it (a 1 MiB payload is
/// mostly what no filter asks about).
#[derive(Debug, Clone, Default, PartialEq)]
struct Wanted {
    /// The whole value here is read (a path ends here).
    whole: bool,
    /// The keys (or array indexes, as text) read below.
    below: std::collections::BTreeMap<String, Wanted>,
}

impl Wanted {
    fn insert(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.whole = true,
            Some((first, rest)) => self.below.entry(first.clone()).or_default().insert(rest),
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for &Wanted {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.whole {
            return serde::Deserialize::deserialize(d);
        }
        d.deserialize_any(self)
    }
}

/// Between the paths: objects and arrays keep what is read below them;
/// a scalar here has nothing below it, so it stands as `null`, which no
/// path looks into either.
impl<'de> serde::de::Visitor<'de> for &Wanted {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match self.below.get(key.as_ref()) {
                Some(wanted) => {
                    out.insert(key.into_owned(), map.next_value_seed(wanted)?);
                }
                None => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            let next = match self.below.get(&out.len().to_string()) {
                Some(wanted) => seq.next_element_seed(wanted)?,
                None => seq.next_element::<serde::de::IgnoredAny>()?.map(|_| Value::Null),
            };
            let Some(item) = next else { break };
            out.push(item);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A table of conditions under `prefix` (the dotted path so far).
fn compile_table(value: &Value, path: &str, prefix: &[String]) -> Result<Node, FilterError> {
    let Value::Object(entries) = value else { return fail(path, "expected a table") };
    let mut all = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let here = format!("{path}.{}", shown_key(key));
        match key.as_str() {
            "$and" | "$or" => {
                let Value::Array(items) = value else { return fail(&here, "expected a list of tables") };
                if items.is_empty() {
                    return fail(&here, "expected at least one table");
                }
                let nodes = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| compile_table(item, &format!("{here}[{i}]"), prefix))
                    .collect::<Result<_, _>>()?;
                all.push(if key == "$and" { Node::All(nodes) } else { Node::Any(nodes) });
            }
            "$not" => all.push(Node::Not(Box::new(compile_table(value, &here, prefix)?))),
            k if k.starts_with('$') => {
                return fail(&here, "not an operator here (a path's operators go under the path)");
            }
            k => {
                if k.split('.').any(str::is_empty) {
                    return fail(&here, "a path has an empty part");
                }
                let mut at = prefix.to_vec();
                at.extend(k.split('.').map(str::to_owned));
                all.push(compile_condition(value, &here, at)?);
            }
        }
    }
    Ok(match all.len() {
        1 => all.pop().expect("one"),
        _ => Node::All(all),
    })
}

/// What the payload must hold at `at`: a value, a table of operators, or a
/// nested table (more path).
fn compile_condition(value: &Value, path: &str, at: Vec<String>) -> Result<Node, FilterError> {
    let Value::Object(entries) = value else { return Ok(Node::At(at, Test::Eq(value.clone()))) };
    let operators = entries.keys().filter(|k| k.starts_with('$')).count();
    let logical = |k: &&String| ["$and", "$or", "$not"].contains(&k.as_str());
    if entries.keys().filter(|k| k.starts_with('$')).all(|k| logical(&k)) {
        // More path, possibly with `$and`, `$or`, `$not` beside it.
        return compile_table(value, path, &at);
    }
    if operators != entries.len() {
        return fail(path, "mixes operators and paths in one table");
    }
    let mut tests = Vec::with_capacity(entries.len());
    for (op, operand) in entries {
        let here = format!("{path}.{}", shown_key(op));
        let list = |operand: &Value| match operand {
            Value::Array(items) => Ok(items.clone()),
            _ => fail(&here, "expected a list"),
        };
        let bound = |operand: &Value| match operand {
            Value::Number(n) => n.as_f64().map(Bound::Number).map_or_else(|| fail(&here, "expected a number"), Ok),
            Value::String(s) => Ok(Bound::Text(s.clone())),
            _ => fail(&here, "expected a number or a string"),
        };
        let test = match op.as_str() {
            "$eq" => Test::Eq(operand.clone()),
            "$neq" => Test::Neq(operand.clone()),
            "$in" => Test::In(list(operand)?),
            "$nin" => Test::Nin(list(operand)?),
            "$exist" => match operand {
                Value::Bool(b) => Test::Exist(*b),
                _ => return fail(&here, "expected true or false"),
            },
            "$gt" => Test::Order(Order::Gt, bound(operand)?),
            "$gte" => Test::Order(Order::Gte, bound(operand)?),
            "$lt" => Test::Order(Order::Lt, bound(operand)?),
            "$lte" => Test::Order(Order::Lte, bound(operand)?),
            "$and" | "$or" | "$not" => return fail(&here, "goes beside paths, not beside a path's operators"),
            _ => {
                return fail(
                    &here,
                    "unknown operator (expected $eq $neq $in $nin $exist $gt $gte $lt $lte $and $or $not)",
                );
            }
        };
        tests.push(Node::At(at.clone(), test));
    }
    Ok(match tests.len() {
        1 => tests.pop().expect("one"),
        _ => Node::All(tests),
    })
}

impl Node {
    /// Calls `f` with every path the node reads.
    fn paths(&self, f: &mut impl FnMut(&[String])) {
        match self {
            Node::All(nodes) | Node::Any(nodes) => nodes.iter().for_each(|n| n.paths(f)),
            Node::Not(node) => node.paths(f),
            Node::At(path, _) => f(path),
        }
    }

    fn admits(&self, payload: &Value) -> bool {
        match self {
            Node::All(nodes) => nodes.iter().all(|n| n.admits(payload)),
            Node::Any(nodes) => nodes.iter().any(|n| n.admits(payload)),
            Node::Not(node) => !node.admits(payload),
            Node::At(path, test) => test.holds(lookup(payload, path)),
        }
    }
}

/// The value at `path`, if the payload has one there.
fn lookup<'a>(mut value: &'a Value, path: &[String]) -> Option<&'a Value> {
    for part in path {
        value = match value {
            Value::Object(map) => map.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

impl Test {
    fn holds(&self, found: Option<&Value>) -> bool {
        match self {
            Test::Exist(want) => found.is_some() == *want,
            Test::Eq(want) => found.is_some_and(|v| equals_or_contains(v, want)),
            Test::Neq(want) => !found.is_some_and(|v| equals_or_contains(v, want)),
            Test::In(set) => found.is_some_and(|v| set.iter().any(|want| equals_or_contains(v, want))),
            Test::Nin(set) => !found.is_some_and(|v| set.iter().any(|want| equals_or_contains(v, want))),
            Test::Order(order, bound) => found.is_some_and(|v| ordered(v, *order, bound)),
        }
    }
}

/// Equal values, numbers by value (`1` equals `1.0`); an array of the
/// payload also matches a value it contains (Convoy's array match: `labels
/// = "bug"` admits `"labels": ["bug", "ui"]`).
fn equals_or_contains(found: &Value, want: &Value) -> bool {
    same(found, want) || matches!(found, Value::Array(items) if !want.is_array() && items.iter().any(|i| same(i, want)))
}

fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn ordered(found: &Value, order: Order, bound: &Bound) -> bool {
    let cmp = match (found, bound) {
        (Value::Number(n), Bound::Number(b)) => n.as_f64().and_then(|n| n.partial_cmp(b)),
        (Value::String(s), Bound::Text(b)) => Some(s.as_str().cmp(b.as_str())),
        _ => None,
    };
    let Some(cmp) = cmp else { return false };
    match order {
        Order::Gt => cmp.is_gt(),
        Order::Gte => cmp.is_ge(),
        Order::Lt => cmp.is_lt(),
        Order::Lte => cmp.is_le(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn payload_filter(filter: Value) -> RunFilter {
        RunFilter::compile(&json!({ "payload": filter })).unwrap()
    }

    #[test]
    fn each_payload_operator_decides_as_documented() {
        let payload = json!({
            "action": "closed",
            "number": 7,
            "ratio": 0.5,
            "labels": ["bug", "ui"],
            "sender": {"login": "octo", "type": "User", "site_admin": false},
            "pull_request": {"merged": true, "base": {"ref": "main"}, "merged_at": "2026-12-01T10:00:00Z"},
            "commits": [{"id": "a1"}, {"id": "b2"}],
            "nothing": null,
        });
        let cases: Vec<(Value, bool)> = vec![
            // Plain values are $eq; a dotted path and a nested table are the same.
            (json!({"action": "closed"}), true),
            (json!({"action": "opened"}), false),
            (json!({"pull_request.base.ref": "main"}), true),
            (json!({"pull_request": {"base": {"ref": "main"}}}), true),
            (json!({"pull_request": {"base.ref": "dev"}}), false),
            (json!({"commits.1.id": "b2"}), true),
            (json!({"commits.2.id": "b2"}), false),
            (json!({"number": 7.0}), true),
            (json!({"labels": "bug"}), true),
            (json!({"labels": "docs"}), false),
            (json!({"labels": ["bug", "ui"]}), true),
            (json!({"nothing": null}), true),
            // $eq, $neq
            (json!({"sender.type": {"$eq": "User"}}), true),
            (json!({"sender.type": {"$neq": "Bot"}}), true),
            (json!({"sender.type": {"$neq": "User"}}), false),
            (json!({"missing": {"$neq": "x"}}), true),
            // $in, $nin
            (json!({"action": {"$in": ["opened", "closed"]}}), true),
            (json!({"action": {"$in": ["opened"]}}), false),
            (json!({"labels": {"$in": ["docs", "ui"]}}), true),
            (json!({"action": {"$nin": ["opened", "closed"]}}), false),
            (json!({"missing": {"$nin": ["x"]}}), true),
            (json!({"missing": {"$in": ["x"]}}), false),
            // $exist: null is there; a missing path is not.
            (json!({"sender.login": {"$exist": true}}), true),
            (json!({"nothing": {"$exist": true}}), true),
            (json!({"sender.email": {"$exist": false}}), true),
            (json!({"sender.email": {"$exist": true}}), false),
            (json!({"pull_request.base.ref.deeper": {"$exist": false}}), true),
            // Order: numbers with numbers, strings with strings.
            (json!({"number": {"$gt": 6}}), true),
            (json!({"number": {"$gt": 7}}), false),
            (json!({"number": {"$gte": 7}}), true),
            (json!({"number": {"$lt": 7.5}}), true),
            (json!({"number": {"$lte": 6}}), false),
            (json!({"ratio": {"$gt": 0.25, "$lt": 1}}), true),
            (json!({"pull_request.merged_at": {"$gte": "2026-12-01T00:00:00Z"}}), true),
            (json!({"pull_request.merged_at": {"$lt": "2026-12-01T00:00:00Z"}}), false),
            // Type mismatches refuse, whichever way round.
            (json!({"action": {"$gt": 1}}), false),
            (json!({"number": {"$gt": "1"}}), false),
            (json!({"labels": {"$gt": 0}}), false),
            (json!({"sender": {"$lte": "z"}}), false),
            (json!({"missing": {"$gt": 0}}), false),
            // $and, $or, $not, nested, at the top or under a path.
            (json!({"$and": [{"action": "closed"}, {"pull_request.merged": true}]}), true),
            (json!({"$and": [{"action": "closed"}, {"pull_request.merged": false}]}), false),
            (json!({"$or": [{"action": "opened"}, {"labels": "bug"}]}), true),
            (json!({"$or": [{"action": "opened"}, {"labels": "docs"}]}), false),
            (json!({"$not": {"sender.type": "Bot"}}), true),
            (json!({"$not": {"$or": [{"sender.type": "Bot"}, {"sender.login": "octo"}]}}), false),
            (
                json!({"$or": [{"$and": [{"action": "closed"}, {"$not": {"pull_request.merged": false}}]}, {"number": {"$gt": 100}}]}),
                true,
            ),
            (json!({"pull_request": {"$or": [{"merged": false}, {"base.ref": "main"}]}}), true),
            (json!({"pull_request": {"$not": {"merged": true}}}), false),
            (json!({"action": "closed", "sender.site_admin": true}), false),
        ];
        let text = payload.to_string();
        for (filter, want) in cases {
            let f = payload_filter(filter.clone());
            assert_eq!(f.admits_payload(Some(&payload)), want, "{filter}");
            assert_eq!(f.admits_payload_text(Some(&text)), want, "read sparsely: {filter}");
            assert!(!f.admits_payload(None), "a payload filter refuses a run without a payload: {filter}");
            assert!(!f.admits_payload_text(Some("{\"action\": ")), "text that is not JSON is no payload: {filter}");
        }
    }

    #[test]
    fn the_run_fields_filters_admit_what_they_name() {
        let run = |provider: &str, repo: &str, action: &str| RunFields {
            run_id: "run-1".into(),
            provider: provider.into(),
            repo: repo.into(),
            action: action.into(),
            number: String::new(),
            delivery_id: "d".into(),
        };
        let f = RunFilter::compile(&json!({
            "providers": ["github", "gitlab"],
            "repos": ["acme/*", "octo/hello"],
            "actions": ["pull_request.*", "push", "*.deleted", "issue*comment.*"],
        }))
        .unwrap();
        for (r, want) in [
            (run("github", "acme/api", "push"), true),
            (run("gitlab", "octo/hello", "pull_request.opened"), true),
            (run("github", "acme/api", "branch.deleted"), true),
            (run("github", "acme/api", "issue_comment.created"), true),
            (run("stripe", "acme/api", "push"), false),
            (run("github", "octo/other", "push"), false),
            (run("github", "acmecorp/api", "push"), false),
            (run("github", "Acme/api", "push"), false),
            (run("github", "acme/api", "pull_request"), false),
            (run("github", "acme/api", "pushed"), false),
            (run("github", "acme/api", "issues.opened"), false),
        ] {
            assert_eq!(f.admits_fields(&r), want, "{r:?}");
        }
        let empty = RunFilter::compile(&json!({})).unwrap();
        assert!(empty.admits_fields(&run("x", "a/b", "c")) && empty.admits_payload(None));
        assert!(!empty.reads_payload());
        // One string is a list of one; an action without `*` is exact.
        let one = RunFilter::compile(&json!({"actions": "push", "repos": "a/b/*"})).unwrap();
        assert!(one.admits_fields(&run("x", "a/b/c", "push")) && !one.admits_fields(&run("x", "a/b/c", "push.x")));
    }

    #[test]
    fn an_invalid_filter_names_its_place_and_never_its_value() {
        for (filter, path, message) in [
            (json!([]), "filter", "expected a table"),
            (json!({"repo": ["a/b"]}), "filter.repo", "unknown key"),
            (json!({"repos": ["a/b", "secret-token"]}), "filter.repos[1]", "is not ORG/REPO"),
            (json!({"repos": ["a/b*"]}), "filter.repos[0]", "has a `*`"),
            (json!({"actions": [1]}), "filter.actions[0]", "expected a string"),
            (json!({"providers": [""]}), "filter.providers[0]", "must not be empty"),
            (json!({"payload": "secret-token"}), "filter.payload", "expected a table"),
            (json!({"payload": {"a": {"$gt": true}}}), "filter.payload.a.$gt", "expected a number or a string"),
            (json!({"payload": {"a": {"$in": "secret-token"}}}), "filter.payload.a.$in", "expected a list"),
            (json!({"payload": {"a": {"$exist": "yes"}}}), "filter.payload.a.$exist", "expected true or false"),
            (json!({"payload": {"a": {"$like": "x"}}}), "filter.payload.a.$like", "unknown operator"),
            (json!({"payload": {"a": {"$eq": 1, "b": 2}}}), "filter.payload.a", "mixes operators and paths"),
            (json!({"payload": {"$or": []}}), "filter.payload.$or", "at least one"),
            (json!({"payload": {"$or": [{"a": 1}, "x"]}}), "filter.payload.$or[1]", "expected a table"),
            (json!({"payload": {"$not": {"a": {"$gte": []}}}}), "filter.payload.$not.a.$gte", "expected a number"),
            (json!({"payload": {"a..b": 1}}), "filter.payload.a..b", "empty part"),
            (json!({"payload": {"a b": {"$like": 1}}}), "filter.payload.….$like", "unknown operator"),
            (json!({"payload": {"$eq": 1}}), "filter.payload.$eq", "not an operator here"),
            (json!({"payload": {"x": {"y": {"$lt": null}}}}), "filter.payload.x.y.$lt", "expected a number"),
        ] {
            let e = RunFilter::compile(&filter).unwrap_err();
            assert_eq!(e.path, path, "{filter}");
            assert!(e.message.contains(message), "{filter}: {e}");
            assert!(!e.to_string().contains("secret-token"), "{e}");
        }
    }
}
