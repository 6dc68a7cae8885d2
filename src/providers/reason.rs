//! Why a provider endpoint refuses a delivery ([`Reason`]) and how it
//! answers a refusal ([`RefusalStatus`]). The kinds name the reason when
//! they reject a request; the refusal log (`refusals.rs`) counts and logs it.

use axum::http::StatusCode;
use serde::Deserialize;

use crate::vocabulary::{Response, Status};

/// How a provider endpoint answers a refusal (`refusal_status` of a
/// `[[provider]]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefusalStatus {
    /// HTTP 200, the body keeping the gate's `code` (the default): the
    /// provider stops retrying and never counts the endpoint as failing.
    #[default]
    Ack,
    /// HTTP status = the gate's `code` (400, 403): the provider shows the
    /// refusal, retries it and may disable the endpoint.
    Code,
}

impl RefusalStatus {
    /// The config name (`ack`, `code`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalStatus::Ack => "ack",
            RefusalStatus::Code => "code",
        }
    }

    /// The HTTP status of a gate answer: its `code`, except that a refusal
    /// is 200 under [`RefusalStatus::Ack`]. (`/v1/deliveries` answers its
    /// callers, the users' own code, with [`RefusalStatus::Code`].)
    pub fn http_status(self, response: &Response) -> StatusCode {
        match self {
            RefusalStatus::Ack if is_refusal(response.status) => StatusCode::OK,
            _ => StatusCode::from_u16(response.code).expect("gate codes are valid HTTP statuses"),
        }
    }
}

/// Whether a gate answer refuses the delivery: it starts no work, and
/// retrying it does not change that.
pub fn is_refusal(status: Status) -> bool {
    matches!(status, Status::BadRequest | Status::Blocked | Status::Ignored)
}

/// Why a provider endpoint refused a delivery, as the warning names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// `blocked`: the repository is not in the allowlist.
    NotAllowlisted,
    /// `ignored`: the event is not in the provider's `events` list.
    EventNotListed,
    /// `bad_request`: the payload does not map to a valid `org`, `repo`,
    /// `action` and `number`.
    PayloadUnmapped,
    /// `ignored`: a GitHub `ping` (sent when a hook is created) or Svix's
    /// `svix.ping` test event; logged at `info`, never warned about.
    Ping,
}

impl Reason {
    /// The reason in words, for the log line.
    pub fn text(self) -> &'static str {
        match self {
            Reason::NotAllowlisted => "the repository is missing from the allowlist",
            Reason::EventNotListed => "the event is not in the provider's `events` list",
            Reason::PayloadUnmapped => "the payload does not map to org, repo, action and number",
            Reason::Ping => "a ping or test event (GitHub's ping, Svix's svix.ping) starts no work",
        }
    }

    /// The reason of a gate answer that is a refusal, `None` otherwise.
    /// (`ignored` never comes from the gate: it is answered before it.)
    pub fn of_gate(status: Status) -> Option<Reason> {
        match status {
            Status::Blocked => Some(Reason::NotAllowlisted),
            Status::BadRequest => Some(Reason::PayloadUnmapped),
            Status::Created | Status::Duplicate | Status::Ignored => None,
        }
    }

    /// The gate status the refusal answers with (the metric's `status`).
    pub fn status(self) -> Status {
        match self {
            Reason::NotAllowlisted => Status::Blocked,
            Reason::PayloadUnmapped => Status::BadRequest,
            Reason::EventNotListed | Reason::Ping => Status::Ignored,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_acknowledged_unless_code_is_asked_for() {
        let cases = [
            (Response::with_run(Status::Created, "run-1"), 202, 202),
            (Response::with_run(Status::Duplicate, "run-1"), 200, 200),
            (Response::plain(Status::BadRequest), 200, 400),
            (Response::plain(Status::Blocked), 200, 403),
            (Response::plain(Status::Ignored), 200, 200),
        ];
        for (response, ack, code) in cases {
            assert_eq!(RefusalStatus::Ack.http_status(&response).as_u16(), ack, "{response:?}");
            assert_eq!(RefusalStatus::Code.http_status(&response).as_u16(), code, "{response:?}");
        }
        assert_eq!(RefusalStatus::default(), RefusalStatus::Ack);
    }
}
