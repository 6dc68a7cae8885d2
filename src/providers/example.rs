//! Kind `example` (built for the tests only, `#[cfg(test)]` on its
//! registry line): the worked example of docs/architecture.md, "Adding a
//! provider kind". Its sender sends a shared token in a header the
//! provider's config names (`token_header`, its own key), and the delivery
//! id in `x-example-id`. It proves that a kind with settings of its own is
//! this file and one registry line: the config reads its key, refuses it
//! for every other kind, and the endpoint verifies, signs and normalizes.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderName};
use serde::Deserialize;
use serde_json::Value;

use super::fields::{FieldPointers, normalize};
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, ProviderKind};
use super::request::{Header, header, parse_body, required};
use super::signing::{Key, message_id, token_digest};
use crate::vocabulary::KeySlots;

/// An `example` provider: the shared settings and its token header.
#[derive(Clone, Debug)]
pub struct Example {
    common: Common,
    token_header: HeaderName,
}

/// The `[[provider]]` keys of kind `example` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExampleSettings {
    /// The header that carries the token (default `x-example-token`).
    token_header: Option<String>,
}

/// The delivery id header.
const ID_HEADER: &str = "x-example-id";

impl ProviderKind for Example {
    type Settings = ExampleSettings;
    const NAME: &'static str = "example";
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(7);

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        message_id(random)
    }

    fn build(common: Common, secrets: &[&str], settings: ExampleSettings) -> Result<Example, ProviderError> {
        let name = settings.token_header.as_deref().unwrap_or("x-example-token");
        let token_header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| ProviderError::Setting {
            provider: common.name().to_owned(),
            key: "token_header",
            problem: "`token_header` is not a valid HTTP header name".into(),
        })?;
        Ok(Example { common: common.with_keys(secrets.iter().map(|s| Key::token(s)).collect()), token_header })
    }
}

impl Endpoint for Example {
    fn common(&self) -> &Common {
        &self.common
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn check_headers(&self, headers: &HeaderMap, _: SystemTime) -> Result<(), Rejection> {
        match header(headers, self.token_header.as_str()) {
            Header::Value(_) => Ok(()),
            _ => Err(Rejection::Unauthorized(format!("missing {} header", self.token_header))),
        }
    }

    fn authenticate(&self, headers: &HeaderMap, _: &[u8], now: SystemTime) -> Result<(), Rejection> {
        self.check_headers(headers, now)?;
        let token = headers[&self.token_header].as_bytes();
        if !self.common.verifies(&[], &token_digest(token)) {
            return Err(Rejection::Unauthorized(format!("{} does not match a secret", self.token_header)));
        }
        Ok(())
    }

    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        let delivery_id = required(headers, ID_HEADER, ID_HEADER)?.to_owned();
        let event = normalize(&FieldPointers::default(), &parse_body(body)?);
        let action = event.get("action").and_then(Value::as_str).unwrap_or_default();
        self.common.admit(action, action)?;
        Ok(Delivery { delivery_id, event, content_digest: None, key_slots: KeySlots::default(), event_text: None })
    }

    fn sign(&self, delivery_id: &str, _: Option<&str>, _: &[u8], _: SystemTime) -> Vec<(&str, String)> {
        let token = self.common.token().expect("an example provider's keys are tokens");
        vec![(self.token_header.as_str(), token.to_owned()), (ID_HEADER, delivery_id.to_owned())]
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use axum::http::{HeaderMap, HeaderName, HeaderValue};
    use serde_json::json;

    use crate::config::FileConfig;
    use crate::providers::{Kind, Provider, Rejection};

    /// The kind's own key, read from a config file's `[[provider]]` table.
    fn from_file(table: &str) -> Result<Vec<Provider>, String> {
        let file = FileConfig::parse(&format!("[[provider]]\nname = \"ex\"\n{table}")).map_err(|e| e.to_string())?;
        crate::config::providers_from(&file, &|_: &str| None).map_err(|e| e.to_string())
    }

    #[test]
    fn a_kind_with_its_own_key_is_one_file_and_one_registry_line() {
        assert_eq!("example".parse::<Kind>(), Ok(Kind::Example));
        assert!(Kind::names().contains("\"example\""));
        assert_eq!(Kind::Example.keys(), ["token_header"]);
        let providers = from_file("kind = \"example\"\nsecret = \"t0ken\"\ntoken_header = \"X-Shared\"\n").unwrap();
        let p = &providers[0];
        assert_eq!((p.kind(), p.name(), p.deadline()), (Kind::Example, "ex", Kind::Example.default_deadline()));
        // Signed by the same code that verifies: `idemgate send` works for it.
        let body = json!({"org": "o", "repo": "r", "action": "a"}).to_string();
        let headers: HeaderMap = p
            .sign("d-1", None, body.as_bytes(), SystemTime::now())
            .unwrap()
            .into_iter()
            .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap()))
            .collect();
        assert_eq!(headers["x-shared"], "t0ken");
        let delivery = p.accept(&headers, body.as_bytes(), SystemTime::now()).unwrap();
        assert_eq!((delivery.delivery_id.as_str(), delivery.event), ("d-1", json!({"org": "o", "repo": "r", "action": "a"})));
        let mut wrong = headers.clone();
        wrong.insert("x-shared", HeaderValue::from_static("other"));
        assert!(matches!(p.accept(&wrong, body.as_bytes(), SystemTime::now()), Err(Rejection::Unauthorized(_))));
    }

    #[test]
    fn its_key_is_refused_for_every_other_kind_and_checked_for_its_own() {
        let e = from_file("kind = \"github\"\nsecret = \"s\"\ntoken_header = \"X-Shared\"\n").unwrap_err();
        assert!(e.contains("line 5,") && e.contains("`token_header` applies to kind \"example\" only"), "{e}");
        let e = from_file("kind = \"example\"\nsecret = \"s\"\ntoken_header = \"Hunter2 Value\"\n").unwrap_err();
        assert!(e.contains("`token_header` is not a valid HTTP header name") && !e.contains("Hunter2"), "{e}");
        let e = from_file("kind = \"example\"\nsecret = \"s\"\nidentity = \"number\"\n").unwrap_err();
        assert!(e.contains("`identity` applies to kinds \"github\", \"shopify\" and \"gitlab\" only"), "{e}");
    }
}
