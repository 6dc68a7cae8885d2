//! Request bodies within a memory budget: every body the service holds is
//! charged to one budget of in-flight bytes ([`BodyBudget`]), and the
//! `/v1/deliveries` body is read without building a tree of the whole event
//! ([`DeliveryBody`]), because a `serde_json::Value` takes about 16 times the
//! bytes of a numeric array it holds. The gate needs four fields and a digest.
//! The defaults of `serve`'s body limit, body budget and request bound
//! live here too; the address and the header timeout are the listener's
//! (`listener.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body_util::BodyExt;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The default body limit: 25 MiB, GitHub's payload cap.
pub const DEFAULT_MAX_BODY: usize = 25 * 1024 * 1024;

/// The default bound on one request, store call included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The default budget of request-body bytes held at once: sixteen bodies of
/// the default 25 MiB limit would be 400 MiB; this lets ten in at a time.
pub const DEFAULT_BODY_BUDGET: usize = 256 * 1024 * 1024;

/// How long a request waits for room in the budget before it gets 503.
pub const BUDGET_WAIT: Duration = Duration::from_secs(2);

/// The budget counts in KiB, so a tokio semaphore (u32 permits per acquire) covers terabytes.
const UNIT: usize = 1024;

/// A budget of request-body bytes held at once, shared by every request.
#[derive(Clone, Debug)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    total: usize,
    wait: Duration,
}

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// The body is larger than the per-request limit (413).
    TooLarge(usize),
    /// No room in the budget within the wait (503 with `Retry-After`).
    Busy,
    /// The client stopped sending or the connection broke (400).
    Broken,
}

impl BodyBudget {
    /// A budget of `bytes` (at least one unit), waited on for at most `wait`.
    pub fn new(bytes: usize, wait: Duration) -> Self {
        let total = bytes.div_ceil(UNIT).max(1);
        Self { units: Arc::new(Semaphore::new(total)), total, wait }
    }

    /// The budget in bytes.
    pub fn bytes(&self) -> usize {
        self.total * UNIT
    }

    /// Reserves room for `bytes`, waiting up to the budget's wait. A request
    /// larger than the whole budget is charged the whole budget (it then
    /// runs alone) rather than refused forever.
    pub async fn reserve(&self, bytes: usize) -> Result<OwnedSemaphorePermit, BodyError> {
        self.reserve_units(bytes.div_ceil(UNIT).clamp(1, self.total)).await
    }

    /// Adds room for `bytes` more to `permit`, a request's room already
    /// held: together never more than the whole budget, so that a costly
    /// request runs alone rather than waits on itself.
    pub async fn top_up(&self, permit: &mut OwnedSemaphorePermit, bytes: usize) -> Result<(), BodyError> {
        let held = permit.num_permits();
        let want = bytes.div_ceil(UNIT).min(self.total.saturating_sub(held));
        if want > 0 {
            permit.merge(self.reserve_units(want).await?);
        }
        Ok(())
    }

    /// Charges a request `bytes` in all, in one piece: what it holds goes
    /// back first, so that requests holding part of their charge never
    /// wait on one another for the rest (five 25 MiB bodies each topping
    /// up would all time out together). At most the whole budget.
    pub async fn recharge(&self, held: OwnedSemaphorePermit, bytes: usize) -> Result<OwnedSemaphorePermit, BodyError> {
        let want = bytes.div_ceil(UNIT).min(self.total);
        if want <= held.num_permits() {
            return Ok(held);
        }
        drop(held);
        self.reserve_units(want).await
    }

    async fn reserve_units(&self, units: usize) -> Result<OwnedSemaphorePermit, BodyError> {
        let units = u32::try_from(units).map_err(|_| BodyError::Busy)?;
        match tokio::time::timeout(self.wait, self.units.clone().acquire_many_owned(units)).await {
            Ok(Ok(permit)) => Ok(permit),
            // Timed out, or the semaphore was closed (never done).
            _ => Err(BodyError::Busy),
        }
    }

    /// Reads a whole body of at most `max` bytes into one buffer, charging
    /// the budget `cost` times its bytes. A declared `Content-Length` is
    /// charged in one piece once the body's first bytes arrive: requests
    /// then wait their turn in arrival order (the semaphore is fair) and
    /// each one admitted can finish. Charging declared bodies as they
    /// arrive was measured worse: 16 concurrent 24 MiB bodies each took
    /// part of the budget, all waited for more, and 14 of them got 503.
    /// Charging before the first byte let clients that declare 25 MiB and
    /// send nothing hold the whole budget, so that small signed deliveries
    /// queued behind them got 503; such a client now holds nothing, and
    /// the provider deadline or the request timeout ends it. A body without a length (chunked)
    /// is charged as it arrives, in steps that double from 64 KiB, so that
    /// it is not charged `max` for a few bytes. The permit must be held for
    /// as long as the body and whatever is built from it live.
    pub async fn read(
        &self,
        mut body: Body,
        declared: Option<u64>,
        max: usize,
        cost: usize,
    ) -> Result<(Bytes, OwnedSemaphorePermit), BodyError> {
        if declared.is_some_and(|len| len > max as u64) {
            return Err(BodyError::TooLarge(max));
        }
        let expected = declared.map_or(max, |len| len as usize);
        let mut permit: Option<OwnedSemaphorePermit> = None;
        // Body bytes paid for, and the budget units that cost (capped at the
        // whole budget, so that a costly request runs alone, not never).
        let (mut paid, mut charged) = (0usize, 0usize);
        let mut declared_unpaid = declared.filter(|len| *len > 0);
        let mut buf: Vec<u8> = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|_| BodyError::Broken)?.into_data() else { continue }; // trailers
            if let Some(len) = declared_unpaid.take() {
                paid = len as usize;
                charged = paid.saturating_mul(cost).div_ceil(UNIT).clamp(1, self.total);
                permit = Some(self.reserve_units(charged).await?);
                buf.reserve_exact(paid);
            }
            let need = buf.len() + data.len();
            if need > max {
                return Err(BodyError::TooLarge(max));
            }
            if need > paid {
                paid = need.max(paid * 2).max(STEP).min(expected.max(need));
                let target = paid.saturating_mul(cost).div_ceil(UNIT).min(self.total);
                if target > charged {
                    let more = self.reserve_units(target - charged).await?;
                    charged = target;
                    match &mut permit {
                        Some(p) => p.merge(more),
                        None => permit = Some(more),
                    }
                }
                // One buffer, grown as it is paid for: collecting chunks and
                // joining them would hold the body twice.
                buf.reserve_exact(paid - buf.len());
            }
            buf.extend_from_slice(&data);
        }
        let permit = match permit {
            Some(p) => p,
            None => self.reserve(1).await?,
        };
        Ok((Bytes::from(buf), permit))
    }
}

/// The first step of a body's charge (see [`BodyBudget::read`]).
const STEP: usize = 64 * 1024;

/// How long a request body that was answered before it was read in full
/// goes on being read and dropped ([`Lingering`]).
pub const LINGER: Duration = Duration::from_secs(5);

/// How many bytes of such a body are read and dropped at most.
pub const LINGER_BYTES: usize = 64 * 1024 * 1024;

/// A request body that, dropped before its end, is read to its end and
/// dropped in a task of its own (a lingering close), for at most
/// [`LINGER`] and [`LINGER_BYTES`]. A request refused before its body was
/// read (413 by its declared length, 401 by its headers, 503 with no room
/// in the budget, a deadline) is then answered to a client that can read
/// the answer: closing a socket with unread bytes makes the kernel send a
/// reset, and a client still sending gets `Broken pipe` or loses the
/// answer. The bytes drained are not kept, so they cost no budget. A
/// client that sent `Expect: 100-continue` is waiting for permission to
/// send and is not drained: hyper answers it without `100 Continue`.
pub struct Lingering {
    inner: Option<Body>,
    ended: bool,
}

impl Lingering {
    /// Wraps a request's body; `expects_continue`: the request carried
    /// `Expect: 100-continue`.
    pub fn new(body: Body, expects_continue: bool) -> Self {
        Self { inner: Some(body), ended: expects_continue }
    }
}

impl hyper::body::Body for Lingering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        let Some(inner) = self.inner.as_mut() else { return std::task::Poll::Ready(None) };
        let polled = std::pin::Pin::new(inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None | Some(Err(_)))) {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(hyper::body::Body::is_end_stream)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.as_ref().map(hyper::body::Body::size_hint).unwrap_or_default()
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        let Some(body) = self.inner.take().filter(|b| !self.ended && !hyper::body::Body::is_end_stream(b)) else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body));
        }
    }
}

/// Reads and drops `body` for at most [`LINGER`] and [`LINGER_BYTES`].
async fn drain(mut body: Body) {
    let read = async {
        let mut dropped = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            dropped += frame.data_ref().map_or(0, Bytes::len);
            if dropped > LINGER_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, read).await;
}

/// The `/v1/deliveries` body, read for what the gate needs: `provider`,
/// `delivery_id`, the four event fields the rules look at, and the event's
/// digest, without a tree of the whole event.
#[derive(Debug)]
pub struct DeliveryBody {
    /// `provider`: a non-empty string.
    pub provider: String,
    /// `delivery_id`: a non-empty string.
    pub delivery_id: String,
    /// An object holding only the event's `org`, `repo`, `action` and
    /// `number` (those present), or `null` when the event is not an object:
    /// what [`crate::gate::validate`] reads.
    pub fields: Value,
    /// [`crate::event_digest::of_value`] of the whole event (`null` when absent).
    pub digest: String,
    /// The event object's text as sent, when the caller asked to keep it
    /// (top-level `keep_payload`) and the event is an object.
    pub event_text: Option<String>,
}

/// Bodies larger than this are parsed on the blocking pool, so that a few
/// large ones cannot stall the threads that answer everyone else.
const PARSE_INLINE_MAX: usize = 64 * 1024;

/// Parses a `/v1/deliveries` body ([`DeliveryBody::parse`]). A large body
/// is parsed on the blocking pool ([`on_cpu_pool`]). `permit` (the body's
/// room in the budget) is released only once the body is gone, even when
/// the request times out while the parse runs.
pub async fn parse_delivery(
    bytes: Bytes,
    permit: OwnedSemaphorePermit,
    keep_event: bool,
) -> Result<DeliveryBody, Malformed> {
    if bytes.len() <= PARSE_INLINE_MAX {
        return DeliveryBody::parse(&bytes, keep_event);
    }
    on_cpu_pool(move || {
        let parsed = DeliveryBody::parse(&bytes, keep_event);
        drop((bytes, permit));
        parsed
    })
    .await
    .unwrap_or_else(|| Err(Malformed("the body could not be parsed".into())))
}

/// The most memory a `serde_json::Value` tree of the JSON `body` takes
/// beside the body's own bytes: every value is a 32-byte `Value` in a
/// `Vec` that may have doubled ([`TREE_VALUE_BYTES`]), every object entry
/// a key `String` and a map slot besides ([`TREE_ENTRY_BYTES`]). A value
/// begins the document or follows a `,`, `[` or `:`, so those (and the
/// colons, one per entry) bound the counts; bytes inside strings count too,
/// which only overstates. A form body (GitHub's `payload=`) carries them
/// percent-encoded (`%2C`): those count too.
pub fn json_tree_overhead(body: &[u8]) -> usize {
    // Two SIMD passes (memchr): a byte loop per class cost a webhook of
    // 22 KB a fifth of its throughput.
    let mut separators = 1 + memchr::memchr3_iter(b',', b'[', b'{', body).count();
    let mut colons = memchr::memchr_iter(b':', body).count();
    let encoded = |hex: &[u8; 2]| {
        memchr::memchr_iter(b'%', body)
            .filter(|&i| {
                body.get(i + 1) == Some(&hex[0]) && body.get(i + 2).is_some_and(|b| b.eq_ignore_ascii_case(&hex[1]))
            })
            .count()
    };
    if body.starts_with(b"payload=") {
        separators += encoded(b"2C") + encoded(b"5B") + encoded(b"7B");
        colons += encoded(b"3A");
    }
    body.len() + separators * TREE_VALUE_BYTES + colons * TREE_ENTRY_BYTES
}

/// A tree value's bound in [`json_tree_overhead`]: the `Value`, twice.
const TREE_VALUE_BYTES: usize = 64;

/// An object entry's bound in [`json_tree_overhead`]: the key's `String`
/// and its heap block's slack, and the map's slot for the pair; as much as
/// the event digest's per key (`event_digest::canonical_overhead`), so the
/// one charge covers both, the tree and then the digest's canonical text.
const TREE_ENTRY_BYTES: usize = 128;

/// Whether work over a body of `len` bytes (parsing, an HMAC per secret)
/// runs on the blocking pool ([`on_cpu_pool`]) rather than inline.
pub fn is_heavy(len: usize) -> bool {
    len > PARSE_INLINE_MAX
}

/// Runs CPU work over a large body on the blocking pool, at most one job
/// per CPU at a time: ten large bodies worked on at once on two cores
/// would all take five times as long and time out together, and on the
/// async threads they would stall everyone else's answers. `None` when
/// the job could not run (the service is stopping, or it panicked).
pub async fn on_cpu_pool<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    static SLOTS: std::sync::OnceLock<Arc<Semaphore>> = std::sync::OnceLock::new();
    let slots = SLOTS
        .get_or_init(|| Arc::new(Semaphore::new(std::thread::available_parallelism().map_or(2, |n| n.get()))))
        .clone();
    let slot = slots.acquire_owned().await.ok()?;
    tokio::task::spawn_blocking(move || {
        let out = job();
        drop(slot);
        out
    })
    .await
    .ok()
}

/// Why a `/v1/deliveries` body was refused (400, nothing stored).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed(pub String);

impl DeliveryBody {
    /// Parses a body. Key order does not matter; of a key given twice the
    /// last one counts (as when the body is read into a tree); other keys
    /// are ignored. `keep_event` also keeps the event object's text.
    pub fn parse(bytes: &[u8], keep_event: bool) -> Result<Self, Malformed> {
        let text = std::str::from_utf8(bytes).map_err(|_| Malformed("body is not JSON: not UTF-8".into()))?;
        if !text.trim_start().starts_with('{') {
            return Err(match serde_json::from_str::<IgnoredAny>(text) {
                Ok(_) => Malformed("body must be a JSON object".into()),
                Err(e) => Malformed(format!("body is not JSON: {e}")),
            });
        }
        let [provider, delivery_id, event] = pick(text, ["provider", "delivery_id", "event"])
            .map_err(|e| Malformed(format!("body is not JSON: {e}")))?;
        let provider = string_field("provider", provider)?;
        let delivery_id = string_field("delivery_id", delivery_id)?;
        let event = event.map_or("null", RawValue::get);
        let is_object = event.trim_start().starts_with('{');
        let fields = if is_object {
            let picked = pick(event, ["org", "repo", "action", "number"])
                .map_err(|e| Malformed(format!("body is not JSON: {e}")))?;
            let mut map = serde_json::Map::new();
            for (name, raw) in ["org", "repo", "action", "number"].into_iter().zip(picked) {
                if let Some(raw) = raw {
                    let v = serde_json::from_str(raw.get()).map_err(|e| Malformed(format!("body is not JSON: {e}")))?;
                    map.insert(name.to_owned(), v);
                }
            }
            Value::Object(map)
        } else {
            Value::Null
        };
        let digest = crate::event_digest::of_text(event).map_err(|e| Malformed(format!("body is not JSON: {e}")))?;
        let event_text = (keep_event && is_object).then(|| event.to_owned());
        Ok(Self { provider, delivery_id, fields, digest, event_text })
    }
}

fn string_field(name: &str, raw: Option<&RawValue>) -> Result<String, Malformed> {
    let raw = raw.ok_or_else(|| Malformed(format!("`{name}` is missing")))?;
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::String(s)) if !s.is_empty() => Ok(s),
        Ok(Value::String(_)) => Err(Malformed(format!("`{name}` must not be empty"))),
        _ => Err(Malformed(format!("`{name}` must be a string"))),
    }
}

/// The raw values of the named keys of a JSON object (last one wins),
/// skipping every other key without building it.
fn pick<'a, const N: usize>(text: &'a str, names: [&'static str; N]) -> serde_json::Result<[Option<&'a RawValue>; N]> {
    struct Pick<const N: usize>([&'static str; N]);
    impl<'de, const N: usize> Visitor<'de> for Pick<N> {
        type Value = [Option<&'de RawValue>; N];
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = [None; N];
            while let Some(key) = map.next_key::<KeyName>()? {
                match self.0.iter().position(|n| *n == key.0) {
                    Some(i) => out[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let out = de.deserialize_map(Pick(names))?;
    de.end()?;
    Ok(out)
}

/// An object key, unescaped.
struct KeyName(String);

impl<'de> serde::Deserialize<'de> for KeyName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(KeyName)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_digest::of_value as event_digest;

    #[test]
    fn a_json_trees_charge_bounds_what_its_values_take() {
        // The hostile case: a numeric array, two bytes a value, a 32-byte
        // `Value` each, in a Vec that may have doubled.
        let numbers = format!("{{\"x\":[{}0]}}", "0,".repeat(10_000));
        let charged = json_tree_overhead(numbers.as_bytes());
        assert!(charged >= 10_000 * 2 * std::mem::size_of::<Value>(), "{charged}");
        // A real GitHub delivery is charged a few times its bytes, not more.
        let fixtures: Vec<Value> =
            serde_json::from_str(include_str!("../../tests/fixtures/github-webhook-examples.json")).unwrap();
        let payload = fixtures.iter().find(|g| g["name"] == "push").unwrap()["examples"][0].to_string();
        let ratio = json_tree_overhead(payload.as_bytes()) as f64 / payload.len() as f64;
        assert!((2.0..12.0).contains(&ratio), "{ratio}");
        // The same payload as a form (its JSON percent-encoded) is charged as much.
        let form = form_urlencoded::Serializer::new(String::new()).append_pair("payload", &payload).finish();
        assert!(json_tree_overhead(form.as_bytes()) >= json_tree_overhead(payload.as_bytes()));
    }

    #[test]
    fn delivery_body_fields() {
        let body = br#"{"event":{"org":"o","pad":[1,2,3],"number":"7"},"provider":"p","delivery_id":"d","x":{}}"#;
        let b = DeliveryBody::parse(body, true).unwrap();
        assert_eq!(b.event_text.as_deref(), Some(r#"{"org":"o","pad":[1,2,3],"number":"7"}"#));
        assert_eq!(DeliveryBody::parse(body, false).unwrap().event_text, None);
        assert_eq!((b.provider.as_str(), b.delivery_id.as_str()), ("p", "d"));
        assert_eq!(b.fields, serde_json::json!({"org": "o", "number": "7"}));
        assert_eq!(b.digest, event_digest(&serde_json::json!({"org":"o","pad":[1,2,3],"number":"7"})));
        let b = DeliveryBody::parse(br#"{"provider":"p","delivery_id":"d","event":[1]}"#, false).unwrap();
        assert_eq!(b.fields, Value::Null);
        let b = DeliveryBody::parse(br#"{"provider":"p","delivery_id":"d"}"#, false).unwrap();
        assert_eq!(b.digest, event_digest(&Value::Null));
        for (body, want) in [
            (&b"nope"[..], "not JSON"),
            (b"[1]", "must be a JSON object"),
            (b"{\"provider\":1,\"delivery_id\":\"d\"}", "`provider` must be a string"),
            (b"{\"provider\":\"\",\"delivery_id\":\"d\"}", "`provider` must not be empty"),
            (b"{\"provider\":\"p\"}", "`delivery_id` is missing"),
            (b"{\"provider\":\"p\",\"delivery_id\":\"d\"} x", "not JSON"),
            (b"{\"provider\":\"p\",\"delivery_id\":\"d\",\"event\":{\"a\":}}", "not JSON"),
        ] {
            let e = DeliveryBody::parse(body, false).unwrap_err().0;
            assert!(e.contains(want), "{e} lacks {want}");
        }
    }
}
