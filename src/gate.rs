//! The gate's rules (docs/reference.md#semantics), written once and shared by every store:
//! validation, the repo allowlist, `number_text` and the identity tuple.
//! A store only applies the verdict these rules compute, atomically.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::allowlist::Allowlist;
use crate::error::Error;
use crate::order::Ordering;
use crate::store::opened::OpenedStore;
use crate::store::{Call, HeldRun};
use crate::vocabulary::{Hold, Identity, KeySlots, Outcome, Response, Status, Verdict};

/// The idempotency gate: rules in front of a store.
#[derive(Clone)]
pub struct Gate {
    allowlist: Arc<Allowlist>,
    /// Providers with an allowlist of their own, which replaces `allowlist` for them.
    provider_allowlists: Arc<HashMap<String, Allowlist>>,
    /// The order the runs of `/v1/deliveries` keep (top-level `order_by`).
    ordering: Ordering,
    /// Providers with an order of their own (their table's `order_by`).
    provider_orderings: Arc<HashMap<String, Ordering>>,
    store: OpenedStore,
}

impl Gate {
    /// A gate that admits `allowed_repos` (`org/repo` compared exactly, or
    /// `org/*`: [`crate::allowlist`]) and keeps its state in `store`. The allowlist is copied here.
    pub fn new<I, S>(allowed_repos: I, store: impl Into<OpenedStore>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let store = store.into();
        Self {
            allowlist: Arc::new(Allowlist::new(allowed_repos)),
            provider_allowlists: Arc::default(),
            ordering: Ordering::default(),
            provider_orderings: Arc::default(),
            store,
        }
    }

    /// The order of the runs of providers with no order of their own
    /// (`/v1/deliveries`: the top-level `order_by`, `order_on_dead`).
    pub fn with_ordering(mut self, ordering: Ordering) -> Self {
        self.ordering = ordering;
        self
    }

    /// Gives `provider` an order of its own (its table's `order_by`).
    pub fn with_provider_ordering(mut self, provider: &str, ordering: Ordering) -> Self {
        Arc::make_mut(&mut self.provider_orderings).insert(provider.to_owned(), ordering);
        self
    }

    /// The order `provider`'s runs keep: its own, else the gate's.
    fn ordering_of(&self, provider: &str) -> Ordering {
        self.provider_orderings.get(provider).copied().unwrap_or(self.ordering)
    }

    /// Gives `provider` an allowlist of its own, which replaces the gate's
    /// for that provider's deliveries (a provider's `allowed_repos`).
    pub fn with_provider_allowlist<I, S>(mut self, provider: &str, allowed_repos: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Arc::make_mut(&mut self.provider_allowlists).insert(provider.to_owned(), Allowlist::new(allowed_repos));
        self
    }

    /// The allowlist that judges `provider`'s deliveries: its own, else the gate's.
    pub(crate) fn allowlist_of(&self, provider: &str) -> &Allowlist {
        self.provider_allowlists.get(provider).unwrap_or(&self.allowlist)
    }

    /// The store behind the gate.
    pub fn store(&self) -> &OpenedStore {
        &self.store
    }

    /// Handles one delivery and returns the gate's answer (docs/reference.md#semantics).
    /// `Err` means the store failed: nothing was decided, nothing cached.
    pub async fn handle(&self, provider: &str, delivery_id: &str, event: &Value) -> Result<Response, Error> {
        Ok(self.check(provider, delivery_id, event).await?.response)
    }

    /// Like [`Gate::handle`], and also says whether the answer was a replay
    /// and whether the replayed delivery's event differs from the first one.
    pub async fn check(&self, provider: &str, delivery_id: &str, event: &Value) -> Result<Outcome, Error> {
        self.submit(&Submission::new(provider, delivery_id, event, &crate::event_digest::of_value(event))).await
    }

    /// The general form of [`Gate::check`]: a delivery with the digest that
    /// tells "the same event" on a replay (a webhook endpoint digests the
    /// raw body the provider signed), its content digest (the identity's
    /// subject) and the payload to keep, if any.
    pub async fn submit(&self, s: &Submission<'_>) -> Result<Outcome, Error> {
        Ok(self.call(s, None).await?.0)
    }

    /// [`Gate::submit`] for a caller that runs the work itself instead of
    /// queueing it for `idemgate worker` (the embedded layer,
    /// [`crate::layer`]). A created run is not queued: it is held by the
    /// caller for `hold.lease`, who must then [`Gate::finish`] or
    /// [`Gate::release`] it. While it is held, a retry of the delivery or
    /// another delivery of the identity gets [`Error::InFlight`] (nothing
    /// written); once the lease runs out, the next one takes the work over.
    pub async fn submit_held(&self, s: &Submission<'_>, hold: Hold) -> Result<Admission, Error> {
        let (outcome, verdict) = self.call(s, Some(hold)).await?;
        Ok(match verdict {
            Verdict::Work(identity) if outcome.response.status == Status::Created && !outcome.replayed => {
                let run_id = outcome.response.run_id.clone().expect("a created response names its run");
                let claim = Claim {
                    run_id,
                    provider: s.provider.to_owned(),
                    delivery_id: s.delivery_id.to_owned(),
                    identity,
                    retention: hold.retention,
                };
                Admission::Claimed { outcome, claim: Box::new(claim) }
            }
            _ => Admission::Answered(outcome),
        })
    }

    /// The held run's work succeeded: it is `done`, retries of its delivery
    /// replay `created`, other deliveries of its identity are `duplicate`.
    /// `false` when the hold had run out and the work was taken over.
    pub async fn finish(&self, claim: &Claim) -> Result<bool, Error> {
        self.store.finish(&claim.held_run()).await
    }

    /// The held run's work failed: its delivery record and logical key are
    /// removed (if they still name it) and the run is `released`, so the
    /// provider's retry creates new work instead of a replay or a `duplicate`.
    pub async fn release(&self, claim: &Claim) -> Result<bool, Error> {
        self.store.release(&claim.held_run()).await
    }

    async fn call(&self, s: &Submission<'_>, hold: Option<Hold>) -> Result<(Outcome, Verdict), Error> {
        if !crate::otel::enabled() {
            return self.call_untraced(s, hold).await;
        }
        // Not entered (`instrument`): nothing in the call makes a span of its
        // own, and entering and leaving on each poll cost more than the
        // span itself; its parent is the span the caller runs in.
        let span = crate::otel::gate_span(s.provider, s.delivery_id);
        let trace = span.headers().map(|(parent, _)| parent);
        let result = self.call_traced(s, hold, trace.as_deref()).await;
        match &result {
            Ok((outcome, _)) => {
                let word = if outcome.replayed { "replayed" } else { outcome.response.status.as_str() };
                span.record_outcome(word, outcome.response.run_id.as_deref());
            }
            Err(_) => span.record_outcome("store_error", None),
        }
        result
    }

    async fn call_untraced(&self, s: &Submission<'_>, hold: Option<Hold>) -> Result<(Outcome, Verdict), Error> {
        self.call_traced(s, hold, None).await
    }

    /// One gate call; `trace` is the `traceparent` a created run keeps.
    async fn call_traced(
        &self,
        s: &Submission<'_>,
        hold: Option<Hold>,
        trace: Option<&str>,
    ) -> Result<(Outcome, Verdict), Error> {
        check_key_field("provider", s.provider)?;
        check_key_field("delivery_id", s.delivery_id)?;
        let verdict = self.verdict(s.provider, s.event, s.content_digest, s.key_slots);
        // The key is decided here, once, when the run may be created; the
        // store writes it with the run or not at all.
        let order = match &verdict {
            Verdict::Work(identity) => self.ordering_of(s.provider).of(identity),
            _ => None,
        };
        let call = Call {
            provider: s.provider,
            delivery_id: s.delivery_id,
            verdict,
            event_digest: s.event_digest,
            payload: s.payload,
            now_ms: crate::units::now_ms(),
            hold,
            trace,
            order: order.as_ref(),
        };
        let stored = self.store.apply(&call).await?;
        let event_mismatch = stored.replayed
            && stored.first_digest.as_deref().is_some_and(|d| !crate::event_digest::same_event(d, s.event_digest));
        Ok((Outcome { response: stored.response, replayed: stored.replayed, event_mismatch }, call.verdict))
    }

    /// Validation, then policy: the verdict for a delivery not seen before.
    /// With `content_digest` its work is named by its content (the
    /// identity's subject is `number@digest`), the logical key's slots
    /// replaced as `slots` says (a body signed alone names its work;
    /// [`KeySlots`]). Validation and the allowlist judge the event itself.
    fn verdict(&self, provider: &str, event: &Value, content_digest: Option<&str>, slots: &KeySlots) -> Verdict {
        let Some(fields) = validate(event) else {
            return Verdict::BadRequest;
        };
        let repo = format!("{}/{}", fields.org, fields.repo);
        if !self.allowlist_of(provider).admits_joined(fields.org, &repo) {
            return Verdict::Blocked;
        }
        let identity = Identity::new(provider, repo, fields.action, fields.number);
        Verdict::Work(match content_digest {
            None => identity,
            Some(d) => identity.named(d, slots),
        })
    }
}

/// What [`Gate::submit_held`] decided.
#[derive(Debug)]
pub enum Admission {
    /// New work: the run is created and held by the caller, who runs it and
    /// then calls [`Gate::finish`] or [`Gate::release`].
    Claimed {
        /// The gate's `created` answer.
        outcome: Outcome,
        /// The held run (boxed: it is most of the variant's size).
        claim: Box<Claim>,
    },
    /// Anything else (a replay, `duplicate`, `bad_request`, `blocked`): the
    /// answer, with nothing to run.
    Answered(Outcome),
}

/// A run held by the caller that created it (see [`Admission::Claimed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The run, `run-N`.
    pub run_id: String,
    /// The provider of the delivery that created it.
    pub provider: String,
    /// The delivery that created it.
    pub delivery_id: String,
    /// The logical work it is.
    pub identity: Identity,
    retention: Option<Duration>,
}

impl Claim {
    fn held_run(&self) -> HeldRun<'_> {
        HeldRun {
            provider: &self.provider,
            delivery_id: &self.delivery_id,
            identity: &self.identity,
            run_id: &self.run_id,
            retention: self.retention,
            now_ms: crate::units::now_ms(),
        }
    }
}

/// The key slots of a delivery whose event names its work.
static NO_SLOTS: KeySlots = KeySlots { repo: None, action: None, number: None };

/// One delivery as a caller hands it to [`Gate::submit`].
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    /// The provider the delivery came from.
    pub provider: &'a str,
    /// The provider's delivery id.
    pub delivery_id: &'a str,
    /// The normalized event (`org`, `repo`, `action`, `number`).
    pub event: &'a Value,
    /// What the delivery record keeps to tell a changed retry from the
    /// first delivery (see [`crate::event_digest::of_value`]).
    pub event_digest: &'a str,
    /// A digest of the event's content: when set, the work is named by
    /// `number@digest` instead of the number alone (docs/identities.md).
    pub content_digest: Option<&'a str>,
    /// Kept in the run record as `payload` when this delivery creates a run.
    pub payload: Option<&'a str>,
    /// With `content_digest`: the logical key's slots that a signed body
    /// names instead of the event ([`KeySlots`]).
    pub key_slots: &'a KeySlots,
}

impl<'a> Submission<'a> {
    /// A delivery named by its number, keeping no payload.
    pub fn new(provider: &'a str, delivery_id: &'a str, event: &'a Value, event_digest: &'a str) -> Self {
        Self { provider, delivery_id, event, event_digest, content_digest: None, payload: None, key_slots: &NO_SLOTS }
    }
}

/// The most bytes a `provider` or `delivery_id` may have. Longer ones
/// cannot key a record: the call is refused before the store, nothing stored.
pub const MAX_KEY_FIELD_BYTES: usize = 256;

/// The most bytes `org`, `repo`, `action` and `number_text` may have; a
/// longer one is invalid like an empty one (the cached `bad_request`), so a
/// hostile event cannot write megabytes into the logical key, the run record
/// and the stream.
pub const MAX_EVENT_FIELD_BYTES: usize = 1024;

fn check_key_field(field: &'static str, value: &str) -> Result<(), Error> {
    if value.len() > MAX_KEY_FIELD_BYTES {
        return Err(Error::TooLong { field, max: MAX_KEY_FIELD_BYTES });
    }
    Ok(())
}

/// The validated fields of an event.
#[derive(Debug, PartialEq, Eq)]
pub struct Fields<'a> {
    /// `org`, a non-empty string.
    pub org: &'a str,
    /// `repo`, a non-empty string.
    pub repo: &'a str,
    /// `action`, a non-empty string.
    pub action: &'a str,
    /// `number_text`.
    pub number: String,
}

/// Step 2 of the gate's rules (docs/reference.md): `org`, `repo` and
/// `action` present, strings, non-empty (never trimmed), and `number` of an
/// accepted type; each of the four at most [`MAX_EVENT_FIELD_BYTES`].
/// `None` means `bad_request`.
pub fn validate(event: &Value) -> Option<Fields<'_>> {
    let obj = event.as_object()?;
    Some(Fields {
        org: text_field(obj, "org")?,
        repo: text_field(obj, "repo")?,
        action: text_field(obj, "action")?,
        number: number_field(obj)?,
    })
}

/// `org`, `repo` or `action`: a non-empty string (never trimmed) of at most
/// [`MAX_EVENT_FIELD_BYTES`].
fn text_field<'a>(obj: &'a serde_json::Map<String, Value>, name: &str) -> Option<&'a str> {
    obj.get(name).and_then(Value::as_str).filter(|s| !s.is_empty() && s.len() <= MAX_EVENT_FIELD_BYTES)
}

/// The number text, when `number` has an accepted type and its text is at
/// most [`MAX_EVENT_FIELD_BYTES`].
fn number_field(obj: &serde_json::Map<String, Value>) -> Option<String> {
    number_text(obj.get("number")).filter(|n| n.len() <= MAX_EVENT_FIELD_BYTES)
}

/// The fields that make [`validate`] refuse `event` (`event` itself when
/// it is not an object), for logs that say why a delivery is `bad_request`.
pub fn invalid_fields(event: &Value) -> Vec<&'static str> {
    let Some(obj) = event.as_object() else { return vec!["event"] };
    let mut bad: Vec<&'static str> =
        ["org", "repo", "action"].into_iter().filter(|name| text_field(obj, name).is_none()).collect();
    if number_field(obj).is_none() {
        bad.push("number");
    }
    bad
}

/// `str(event.get("number") or "")` in Python, over JSON: missing, `null`,
/// `0` and `""` give `""`; integers print exactly (64-bit, sign kept);
/// strings are kept as they are. Floats, bools, arrays and objects give
/// `None` (`bad_request`). JSON `-0` is the integer 0 (`""`); serde_json
/// cannot tell it from `-0.0`, which therefore also gives `""`.
pub fn number_text(number: Option<&Value>) -> Option<String> {
    match number {
        None | Some(Value::Null) => Some(String::new()),
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                Some(if i == 0 { String::new() } else { i.to_string() })
            } else if let Some(u) = n.as_u64() {
                Some(u.to_string())
            } else if n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) {
                // serde_json reads the integer literal `-0` as the float -0.0;
                // Python reads it as the integer 0, which gives "".
                Some(String::new())
            } else {
                None
            }
        }
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn number_text_table() {
        let cases = [
            (None, Some("")),
            (Some(json!(null)), Some("")),
            (Some(json!(0)), Some("")),
            (Some(json!("")), Some("")),
            (Some(json!(7)), Some("7")),
            (Some(json!("7")), Some("7")),
            (Some(json!("0")), Some("0")),
            (Some(json!(-3)), Some("-3")),
            (Some(json!(9007199254740993u64)), Some("9007199254740993")),
            (Some(json!(u64::MAX)), Some("18446744073709551615")),
            (Some(json!(i64::MIN)), Some("-9223372036854775808")),
            (Some(json!(" ")), Some(" ")),
            (Some(json!(1.5)), None),
            (Some(json!(0.0)), None),
            (Some(json!(true)), None),
            (Some(json!(false)), None),
            (Some(json!([1])), None),
            (Some(json!({"n": 1})), None),
        ];
        for (input, want) in cases {
            assert_eq!(number_text(input.as_ref()).as_deref(), want, "{input:?}");
        }
    }

    #[test]
    fn integers_are_parsed_exactly_from_text() {
        let v: Value = serde_json::from_str(r#"{"number": 9007199254740993}"#).unwrap();
        assert_eq!(number_text(v.get("number")).unwrap(), "9007199254740993");
        let v: Value = serde_json::from_str(r#"{"number": 7.0}"#).unwrap();
        assert_eq!(number_text(v.get("number")), None, "7.0 is a float");
        let v: Value = serde_json::from_str(r#"{"number": -0}"#).unwrap();
        assert_eq!(number_text(v.get("number")).as_deref(), Some(""), "-0 is the integer 0");
    }

    #[test]
    fn validation_rules() {
        let ok = json!({"org": "o", "repo": "r", "action": "a"});
        assert!(validate(&ok).is_some());
        assert_eq!(validate(&json!({"org": " ", "repo": " ", "action": " "})).unwrap().org, " ");
        for field in ["org", "repo", "action"] {
            for bad in [Value::Null, json!(""), json!(1), json!(true), json!(["o"]), json!({})] {
                let mut e = ok.clone();
                e[field] = bad.clone();
                assert!(validate(&e).is_none(), "{field}={bad}");
            }
            let mut e = ok.clone();
            e.as_object_mut().unwrap().remove(field);
            assert!(validate(&e).is_none(), "{field} missing");
        }
        for not_object in [Value::Null, json!([]), json!("x"), json!(3)] {
            assert!(validate(&not_object).is_none());
            assert_eq!(invalid_fields(&not_object), ["event"]);
        }
        assert!(invalid_fields(&ok).is_empty());
        assert_eq!(invalid_fields(&json!({"org": "o", "repo": "", "number": 1.5})), ["repo", "action", "number"]);
    }

    #[test]
    fn response_json_is_exact() {
        assert_eq!(
            serde_json::to_string(&Response::with_run(Status::Created, "run-1")).unwrap(),
            r#"{"status":"created","code":202,"run_id":"run-1"}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::plain(Status::Blocked)).unwrap(),
            r#"{"status":"blocked","code":403}"#
        );
        assert_eq!(
            serde_json::to_string(&Response::plain(Status::BadRequest)).unwrap(),
            r#"{"status":"bad_request","code":400}"#
        );
    }

    #[test]
    fn digest_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":2}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":2,"a":1}"#).unwrap();
        use crate::event_digest::of_value;
        assert_eq!(of_value(&a), of_value(&b));
        assert_ne!(of_value(&a), of_value(&json!({"a": 1, "b": 3})));
    }

    proptest::proptest! {
        #[test]
        fn number_text_of_any_integer_is_its_decimal(i in proptest::num::i64::ANY) {
            let want = if i == 0 { String::new() } else { i.to_string() };
            proptest::prop_assert_eq!(number_text(Some(&json!(i))), Some(want));
        }

        #[test]
        fn number_text_never_panics_on_arbitrary_json(text in "[-0-9.eE+\"a-z\\[\\]{}:,tfn ]{0,40}", u in proptest::num::u64::ANY, f in proptest::num::f64::ANY) {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                let _ = number_text(Some(&v));
            }
            proptest::prop_assert_eq!(number_text(Some(&json!(u))), Some(if u == 0 { String::new() } else { u.to_string() }));
            let _ = number_text(Some(&json!(f)));
        }
    }
}
