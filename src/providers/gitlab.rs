//! Kind `gitlab` (docs/providers.md): GitLab sends the hook's
//! secret token itself in `X-Gitlab-Token`; nothing is signed.
//!
//! Choices where the contract is silent:
//! - the token is compared by its SHA-256 digest, in constant time, under
//!   every secret: a digest has one length, so the time taken says nothing
//!   about the length of the token or of a prefix that matched. The token
//!   is compared as the bytes sent (GitLab accepts any text as a token).
//! - a missing or repeated `X-Gitlab-Token` is 401. `Idempotency-Key` (sent
//!   since GitLab 17.4, the same on every retry and "Resend Request") is
//!   the delivery id when present, even if `X-Gitlab-Event-UUID` is too; a
//!   present but empty or repeated `Idempotency-Key` is 400, not a reason
//!   to fall back. Without it, `X-Gitlab-Event-UUID` is the delivery id.
//! - `org`/`repo`: `project.path_with_namespace` split at its last `/`
//!   (`acme/platform/api` gives org `acme/platform`, repo `api`); a path
//!   without `/` gives only a `repo`, a value that is not a string neither,
//!   so the gate answers `bad_request` (group-only events, which carry no
//!   `project`, do too).
//! - `action`: `object_kind`, plus `.<object_attributes.action>` when that
//!   is a string (`merge_request.open`); an `object_kind` that is not a
//!   string is copied for the gate to judge.
//! - `number`: `object_attributes.iid`, else `merge_request.iid`, else
//!   `issue.iid` (a `null` counts as absent): the issue, merge request or
//!   pipeline number a worker can act on, like GitHub's `number`.
//! - the subject is GitHub's `identity = "event"` (the default): the number
//!   with the digest of the whole canonical payload, so a retry or a resend
//!   under a new id is a duplicate and a new push, note or update is new work.
//!   GitLab payloads carry nothing about the hook they were delivered to, so
//!   no key is removed before digesting. `identity = "number"` makes the
//!   number alone the subject, as for GitHub.
//! - the event name of an `events` list is the `object_kind` (`push`,
//!   `merge_request`), or the whole action (`merge_request.merge`).

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::fields::digest_without;
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, IdentityMode, ProviderKind};
use super::request::{Header, Repeated, header, parse_body, required, single};
use super::signing::{Key, guid, token_digest};
use crate::vocabulary::KeySlots;

/// A `gitlab` provider (module docs).
#[derive(Clone, Debug)]
pub struct Gitlab {
    common: Common,
    identity: IdentityMode,
}

/// The `[[provider]]` keys of kind `gitlab` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitlabSettings {
    /// `event` (default) or `number` (docs/identities.md).
    identity: Option<IdentityMode>,
}

impl ProviderKind for Gitlab {
    type Settings = GitlabSettings;
    const NAME: &'static str = "gitlab";
    // GitLab.com's webhook timeout is 10 s ("Other limits"), and
    // self-managed instances default to it.
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        guid(random)
    }

    /// The sender sends the secret itself: kept as a token, compared by digest.
    fn build(common: Common, secrets: &[&str], settings: GitlabSettings) -> Result<Gitlab, ProviderError> {
        const OFFERED: &[IdentityMode] = &[IdentityMode::Event, IdentityMode::Number];
        let identity = IdentityMode::offered(settings.identity, OFFERED, Self::NAME, common.name())?;
        Ok(Gitlab { common: common.with_keys(secrets.iter().map(|s| Key::token(s)).collect()), identity })
    }
}

impl Endpoint for Gitlab {
    fn common(&self) -> &Common {
        &self.common
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn check_headers(&self, headers: &HeaderMap, _: SystemTime) -> Result<(), Rejection> {
        token(headers).map(drop)
    }

    fn authenticate(&self, headers: &HeaderMap, _: &[u8], _: SystemTime) -> Result<(), Rejection> {
        verify(&self.common, headers)
    }

    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        read(self, headers, body)
    }

    fn sign(&self, delivery_id: &str, _: Option<&str>, _: &[u8], _: SystemTime) -> Vec<(&str, String)> {
        sign(&self.common, delivery_id)
    }

    fn identity(&self) -> Option<IdentityMode> {
        Some(self.identity)
    }

    fn set_identity(&mut self, identity: IdentityMode) {
        self.identity = identity;
    }
}

/// The secret token header.
pub const TOKEN_HEADER: &str = "x-gitlab-token";
/// The delivery id header of GitLab 17.4 and later, kept across retries.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The delivery id header of older GitLab versions.
pub const EVENT_UUID_HEADER: &str = "x-gitlab-event-uuid";


/// The token `X-Gitlab-Token` carries: present once, else 401.
fn token(headers: &HeaderMap) -> Result<&[u8], Rejection> {
    match single(headers, TOKEN_HEADER) {
        Ok(Some(v)) => Ok(v.as_bytes()),
        Ok(None) => Err(Rejection::unauthorized("missing X-Gitlab-Token header")),
        Err(Repeated) => Err(Rejection::unauthorized("X-Gitlab-Token sent more than once")),
    }
}

/// Checks `X-Gitlab-Token` against every secret, by digest.
fn verify(common: &Common, headers: &HeaderMap) -> Result<(), Rejection> {
    let token = token(headers)?;
    if common.verifies(&[], &token_digest(token)) {
        Ok(())
    } else {
        Err(Rejection::unauthorized("X-Gitlab-Token does not match a secret"))
    }
}

/// `Idempotency-Key` when sent, else `X-Gitlab-Event-UUID`.
fn delivery_id(headers: &HeaderMap) -> Result<&str, Rejection> {
    match header(headers, IDEMPOTENCY_HEADER) {
        Header::Missing => match header(headers, EVENT_UUID_HEADER) {
            Header::Missing => {
                Err(Rejection::BadRequest("missing Idempotency-Key and X-Gitlab-Event-UUID headers".into()))
            }
            _ => required(headers, EVENT_UUID_HEADER, "X-Gitlab-Event-UUID"),
        },
        _ => required(headers, IDEMPOTENCY_HEADER, "Idempotency-Key"),
    }
}

fn read(provider: &Gitlab, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, Rejection> {
    let delivery_id = delivery_id(headers)?;
    let payload = parse_body(body)?;
    let event = normalize(&payload);
    let event_name = payload.get("object_kind").and_then(Value::as_str).unwrap_or_default();
    provider.common.admit(event_name, event.get("action").and_then(Value::as_str).unwrap_or(event_name))?;
    let content_digest = match provider.identity {
        IdentityMode::Event => Some(digest_without(payload, &[])),
        IdentityMode::Number | IdentityMode::Topic => None,
    };
    Ok(Delivery { delivery_id: delivery_id.to_owned(), event, content_digest, key_slots: KeySlots::default(), event_text: None })
}

/// The headers GitLab would send with a delivery: the first secret as the
/// token, and `delivery_id` as the `Idempotency-Key`.
fn sign<'a>(common: &'a Common, delivery_id: &str) -> Vec<(&'a str, String)> {
    let token = common.token().expect("a gitlab provider's keys are tokens");
    vec![(TOKEN_HEADER, token.to_owned()), (IDEMPOTENCY_HEADER, delivery_id.to_owned())]
}

/// The gate's event for a GitLab payload: values copied as they are, keys
/// absent when their source is.
pub fn normalize(payload: &Value) -> Value {
    let mut event = Map::new();
    if let Some(Value::String(path)) = payload.pointer("/project/path_with_namespace") {
        match path.rsplit_once('/') {
            Some((org, repo)) => {
                event.insert("org".into(), Value::String(org.to_owned()));
                event.insert("repo".into(), Value::String(repo.to_owned()));
            }
            None => {
                event.insert("repo".into(), Value::String(path.clone()));
            }
        }
    }
    match payload.get("object_kind") {
        Some(Value::String(kind)) => {
            let action = match payload.pointer("/object_attributes/action") {
                Some(Value::String(a)) => format!("{kind}.{a}"),
                _ => kind.clone(),
            };
            event.insert("action".into(), Value::String(action));
        }
        Some(other) => {
            event.insert("action".into(), other.clone());
        }
        None => {}
    }
    let number = ["/object_attributes/iid", "/merge_request/iid", "/issue/iid"]
        .into_iter()
        .filter_map(|pointer| payload.pointer(pointer))
        .find(|n| !n.is_null());
    if let Some(number) = number {
        event.insert("number".into(), number.clone());
    }
    Value::Object(event)
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;
    use crate::providers::test_support::is_unauthorized;
    use crate::providers::{Provider, Kind, SignError};

    const SECRET: &str = "gitlab token \u{2603}";

    fn provider(secrets: &[&str]) -> Provider {
        Provider::new("gl", Kind::Gitlab, secrets, None, None).unwrap()
    }

    fn headers(token: Option<&[u8]>, key: Option<&str>, uuid: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = token {
            h.insert(TOKEN_HEADER, HeaderValue::from_bytes(t).unwrap());
        }
        for (name, value) in [(IDEMPOTENCY_HEADER, key), (EVENT_UUID_HEADER, uuid)] {
            if let Some(v) = value {
                h.insert(name, HeaderValue::from_str(v).unwrap());
            }
        }
        h
    }

    fn accept(p: &Provider, h: &HeaderMap, body: &Value) -> Result<Delivery, Rejection> {
        p.accept(h, body.to_string().as_bytes(), SystemTime::UNIX_EPOCH)
    }


    /// The merge request payload of GitLab's webhook events page, trimmed.
    fn merge_request() -> Value {
        json!({
            "object_kind": "merge_request",
            "event_type": "merge_request",
            "user": {"id": 1, "username": "root"},
            "project": {"id": 1, "name": "Gitlab Test", "path_with_namespace": "gitlabhq/gitlab-test"},
            "object_attributes": {"id": 99, "iid": 1, "title": "MS-Viewport", "action": "open", "state": "opened"},
            "changes": {}
        })
    }

    #[test]
    fn documented_payloads_normalize() {
        let push = json!({"object_kind": "push", "before": "95790bf8", "after": "da156088",
                          "project": {"path_with_namespace": "mike/diaspora"}, "commits": []});
        let note = json!({"object_kind": "note", "project": {"path_with_namespace": "gitlab-org/gitlab-test"},
                          "object_attributes": {"id": 1244, "noteable_type": "MergeRequest", "action": "create"},
                          "merge_request": {"id": 7, "iid": 1}});
        let issue_note = json!({"object_kind": "note", "project": {"path_with_namespace": "g/p"},
                                "object_attributes": {"id": 1241}, "issue": {"iid": 17}});
        let pipeline = json!({"object_kind": "pipeline", "project": {"path_with_namespace": "gitlab-org/gitlab-test"},
                              "object_attributes": {"id": 31, "iid": 3, "status": "success"},
                              "merge_request": {"iid": 1}});
        // Release events carry their action at the top level, not in object_attributes.
        let release = json!({"object_kind": "release", "action": "create", "project": {"path_with_namespace": "a/b"}});
        // Group-only events carry no project.
        let member = json!({"group_path": "webhook-test", "event_name": "user_add_to_group"});
        let cases = [
            (
                merge_request(),
                json!({"org": "gitlabhq", "repo": "gitlab-test", "action": "merge_request.open", "number": 1}),
            ),
            (push, json!({"org": "mike", "repo": "diaspora", "action": "push"})),
            (note, json!({"org": "gitlab-org", "repo": "gitlab-test", "action": "note.create", "number": 1})),
            (issue_note, json!({"org": "g", "repo": "p", "action": "note", "number": 17})),
            (pipeline, json!({"org": "gitlab-org", "repo": "gitlab-test", "action": "pipeline", "number": 3})),
            (release, json!({"org": "a", "repo": "b", "action": "release"})),
            (member, json!({})),
        ];
        for (payload, want) in cases {
            assert_eq!(normalize(&payload), want, "{payload}");
        }
    }

    #[test]
    fn nested_groups_stay_in_the_org() {
        let cases = [
            ("acme/platform/api", json!({"org": "acme/platform", "repo": "api"})),
            ("a/b/c/d", json!({"org": "a/b/c", "repo": "d"})),
            ("solo", json!({"repo": "solo"})),
            ("trailing/", json!({"org": "trailing", "repo": ""})),
        ];
        for (path, want) in cases {
            assert_eq!(normalize(&json!({"project": {"path_with_namespace": path}})), want, "{path}");
        }
        for project in [json!(null), json!({"path_with_namespace": 7}), json!("a/b"), json!({})] {
            assert_eq!(normalize(&json!({"project": project})), json!({}), "{project}");
        }
    }

    #[test]
    fn normalization_copies_values_as_they_are() {
        let cases = [
            (json!({"object_kind": 5}), json!({"action": 5})),
            (json!({"object_kind": "issue", "object_attributes": {"action": 1}}), json!({"action": "issue"})),
            (json!({"object_kind": "issue", "object_attributes": {"action": ""}}), json!({"action": "issue."})),
            (
                json!({"object_attributes": {"iid": null}, "merge_request": {"iid": "4"}, "issue": {"iid": 5}}),
                json!({"number": "4"}),
            ),
            (json!({"object_attributes": {"iid": 1.5}}), json!({"number": 1.5})),
            (json!([1, 2]), json!({})),
        ];
        for (payload, want) in cases {
            assert_eq!(normalize(&payload), want, "{payload}");
        }
    }

    #[test]
    fn valid_token_and_delivery_ids() {
        let p = provider(&[SECRET]);
        let body = merge_request();
        let d = accept(&p, &headers(Some(SECRET.as_bytes()), Some("key-1"), Some("uuid-1")), &body).unwrap();
        assert_eq!(d.delivery_id, "key-1", "Idempotency-Key wins");
        assert_eq!(d.event["action"], "merge_request.open");
        assert_eq!(d.content_digest, Some(digest_without(body.clone(), &[])));
        let d = accept(&p, &headers(Some(SECRET.as_bytes()), None, Some("uuid-1")), &body).unwrap();
        assert_eq!(d.delivery_id, "uuid-1", "older GitLab: the event UUID");
        let token = Some(SECRET.as_bytes());
        for (h, reason) in [
            (headers(token, None, None), "missing Idempotency-Key and X-Gitlab-Event-UUID headers"),
            (headers(token, Some(""), Some("uuid-1")), "empty Idempotency-Key header"),
            (headers(token, None, Some("")), "empty X-Gitlab-Event-UUID header"),
        ] {
            assert_eq!(accept(&p, &h, &body), Err(Rejection::BadRequest(reason.into())));
        }
        let mut h = headers(token, Some("k"), None);
        h.append(IDEMPOTENCY_HEADER, HeaderValue::from_static("k2"));
        assert_eq!(accept(&p, &h, &body), Err(Rejection::BadRequest("Idempotency-Key sent more than once".into())));
        let h = headers(token, Some("k"), None);
        assert_eq!(
            p.accept(&h, b"token=x", SystemTime::UNIX_EPOCH),
            Err(Rejection::BadRequest("the body is not JSON".into()))
        );
    }

    #[test]
    fn token_failures_are_unauthorized_and_never_echoed() {
        let p = provider(&[SECRET]);
        let body = merge_request();
        let wrong: [&[u8]; 6] =
            [b"wrong", b"", b"gitlab token", b"GITLAB TOKEN \xe2\x98\x83", b"\xff\xfe", b"gitlab token \xe2\x98\x83 "];
        for token in wrong {
            let r = accept(&p, &headers(Some(token), Some("k"), None), &body);
            assert!(is_unauthorized(&r), "{token:?}: {r:?}");
            let reason = r.unwrap_err().reason().to_owned();
            assert!(token.len() < 4 || !reason.as_bytes().windows(token.len()).any(|w| w == token), "{reason}");
        }
        assert!(is_unauthorized(&accept(&p, &headers(None, Some("k"), None), &body)));
        let mut h = headers(Some(SECRET.as_bytes()), Some("k"), None);
        h.append(TOKEN_HEADER, HeaderValue::from_str("x").unwrap());
        assert_eq!(accept(&p, &h, &body), Err(Rejection::Unauthorized("X-Gitlab-Token sent more than once".into())));
        // Nothing else is read before the token: no delivery id, no JSON, still 401.
        assert!(is_unauthorized(&p.accept(&headers(Some(b"nope"), None, None), b"not json", SystemTime::UNIX_EPOCH)));
    }

    #[test]
    fn rotation_events_and_identity() {
        let p = provider(&["new-token", "old-token"]);
        let body = merge_request();
        for token in ["new-token", "old-token"] {
            assert!(accept(&p, &headers(Some(token.as_bytes()), Some("k"), None), &body).is_ok(), "{token}");
        }
        assert!(is_unauthorized(&accept(&p, &headers(Some(b"older-token"), Some("k"), None), &body)));
        let listed = p.clone().with_events(["push", "merge_request.merge"]);
        let h = headers(Some(b"old-token"), Some("k"), None);
        assert_eq!(accept(&listed, &h, &body), Err(Rejection::Ignored(crate::providers::reason::Reason::EventNotListed)));
        let mut merged = merge_request();
        merged["object_attributes"]["action"] = json!("merge");
        assert!(accept(&listed, &h, &merged).is_ok(), "the whole action matches");
        let push = json!({"object_kind": "push", "project": {"path_with_namespace": "a/b"}});
        assert!(accept(&listed, &h, &push).is_ok(), "the object kind matches");
        // Authentication first: a wrong token on an ignored event is 401.
        assert!(is_unauthorized(&accept(&listed, &headers(Some(b"x"), Some("k"), None), &body)));
        let numbered = p.with_identity(IdentityMode::Number);
        assert_eq!(accept(&numbered, &h, &body).unwrap().content_digest, None);
    }

    #[test]
    fn sign_sends_the_first_token() {
        let p = provider(&["new-token", "old-token"]);
        let now = SystemTime::UNIX_EPOCH;
        let signed = p.sign("d-1", None, b"{}", now).unwrap();
        assert_eq!(signed, [(TOKEN_HEADER, "new-token".to_owned()), (IDEMPOTENCY_HEADER, "d-1".to_owned())]);
        assert_eq!(p.sign("d-1", Some("Push Hook"), b"{}", now), Err(SignError::EventNotSent(Kind::Gitlab)));
    }
}
