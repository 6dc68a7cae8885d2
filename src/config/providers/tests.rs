//! The `[[provider]]` tables, checked at start.

use std::time::Duration;

use crate::config::tests::{file, merged, resolve};
use crate::config::{FileConfig, Layer, ServeConfig};
use crate::providers::{IdentityMode, Kind, Provider, RefusalStatus};

use super::providers_from;
use crate::config::file::toml_error;

#[test]
fn providers_from_the_file() {
    let c = resolve(
        &Layer::default(),
        r#"
        [[provider]]
        name = "github"
        kind = "github"
        secret_env = "GH_SECRET"

        [[provider]]
        name = "billing"
        kind = "standard-webhooks"
        secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
        tolerance = "5m"
        fields = { org = "/data/org", repo = "/data/repo", action = "/type", number = "/data/number" }
    "#,
    )
    .unwrap();
    assert_eq!(c.providers.len(), 2);
    assert_eq!(c.providers[1].fields().unwrap().action, "/type");
}

#[test]
fn provider_keys_for_identities_events_rotation_and_payloads() {
    let env = |v: &str| match v {
        "GH_NEW" => Some("new".to_owned()),
        "GH_OLD" => Some("old".to_owned()),
        _ => None,
    };
    let text = r#"
        keep_payload = false
        allowed_repos = ["a/b"]

        [[provider]]
        name = "github"
        kind = "github"
        secret_env = ["GH_NEW", "GH_OLD"]
        identity = "number"
        refusal_status = "code"
        events = ["push", "pull_request.opened"]
        keep_payload = false
        allowed_repos = ["octo/one", " octo/two "]

        [[provider]]
        name = "plain"
        kind = "github"
        secret_env = "GH_NEW,GH_OLD"

        [[provider]]
        name = "billing"
        kind = "standard-webhooks"
        secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25k"]
        fields = { org = "=acme", repo = "=billing", action = "/type" }
    "#;
    let c = ServeConfig::resolve_with(&merged(&Layer::default(), text), env).unwrap();
    assert!(!c.keep_payload);
    let [gh, plain, billing] = &c.providers[..] else { panic!("{:?}", c.providers) };
    assert_eq!((gh.identity(), gh.keep_payload()), (Some(IdentityMode::Number), false));
    assert_eq!(gh.allowed_repos(), Some(&["octo/one".to_owned(), "octo/two".to_owned()][..]));
    assert_eq!(
        (plain.identity(), plain.keep_payload(), plain.allowed_repos()),
        (Some(IdentityMode::Event), true, None)
    );
    assert_eq!((gh.refusal_status(), plain.refusal_status()), (RefusalStatus::Code, RefusalStatus::Ack));
    assert_eq!(billing.fields().unwrap().org, "=acme");
    let debug = format!("{gh:?} {plain:?} {billing:?}");
    assert!(debug.contains("<redacted> (2)") && !debug.contains("whsec_") && !debug.contains("\"new\""), "{debug}");
    // Every variable of a secret_env list must be set.
    let e = ServeConfig::resolve_with(&merged(&Layer::default(), text), |v| (v == "GH_NEW").then(|| "n".into()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`secret_env` entry #2 names a variable that is not set") && !e.contains("GH_OLD"), "{e}");
    // Payloads are kept by default, at the top level and per provider.
    assert!(ServeConfig::resolve_with(&merged(&Layer::default(), ""), env).unwrap().keep_payload);
}

#[test]
fn stripe_slack_and_shopify_providers() {
    let text = r#"
        [[provider]]
        name = "stripe"
        kind = "stripe"
        secrets = ["whsec_new", "whsec_old"]
        tolerance = "2m"
        events = ["invoice.paid"]
        fields = { number = "/data/object/id" }

        [[provider]]
        name = "slack"
        kind = "slack"
        secret = "signing"

        [[provider]]
        name = "shopify"
        kind = "shopify"
        secret = "client"
        fields = { org = "=acme" }
    "#;
    let c = ServeConfig::resolve_with(&merged(&Layer::default(), text), |_| None).unwrap();
    let [stripe, slack, shopify] = &c.providers[..] else { panic!("{:?}", c.providers) };
    assert_eq!((stripe.kind(), slack.kind(), shopify.kind()), (Kind::Stripe, Kind::Slack, Kind::Shopify));
    assert_eq!(
        (stripe.tolerance(), slack.tolerance()),
        (Some(Duration::from_secs(120)), Some(Duration::from_secs(300)))
    );
    let debug = format!("{stripe:?} {slack:?} {shopify:?}");
    assert!(debug.contains("/data/object/id") && debug.contains("=acme"), "{debug}");
    assert!(!debug.contains("whsec_") && !debug.contains("signing") && !debug.contains("client"), "{debug}");
    for (text, want) in [
        (
            "[[provider]]\nname = \"x\"\nkind = \"shopify\"\nsecret = \"s\"\ntolerance = \"5m\"",
            "[[provider]] #1 (\"x\"): line 5, `tolerance` applies to kinds \"standard-webhooks\", \"stripe\", \"slack\" and \"hmac\" only",
        ),
        (
            "[[provider]]\nname = \"x\"\nkind = \"stripe\"\nsecret = \"s\"\nfields = { number = \"data.id\" }",
            "fields.number is not a JSON pointer",
        ),
        ("[[provider]]\nname = \"x\"\nkind = \"slack\"\nsecret = \"\"", "the secret is empty"),
        ("[[provider]]\nname = \"x\"\nkind = \"slack\"\nsecret = \"s\"\nidentity = \"event\"", "`identity`"),
        ("[[provider]]\nname = \"x\"\nkind = \"Stripe\"\nsecret = \"s\"", "\"stripe\", \"slack\", \"shopify\""),
    ] {
        let e = resolve(&Layer::default(), text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        assert!(!e.contains("Stripe") && !e.contains("data.id"), "values are not echoed: {e}");
    }
    let e = resolve(
        &Layer::default(),
        "[[provider]]\nname = \"x\"\nkind = \"stripe\"\nsecret = \"s\"\nfields = { subject = \"/id\" }",
    )
    .unwrap_err();
    assert!(e.contains("line 5, provider \"x\": `fields.subject`: unknown field `subject`"), "{e}");
}

#[test]
fn provider_deadline_overrides_the_kinds_default() {
    let text = r#"
        [[provider]]
        name = "slack-like"
        kind = "github"
        secret = "s"
        deadline = "3s"

        [[provider]]
        name = "fast"
        kind = "standard-webhooks"
        secret = "whsec_c2Vjb25k"
        deadline = "750ms"

        [[provider]]
        name = "gh"
        kind = "github"
        secret = "s"

        [[provider]]
        name = "sw"
        kind = "standard-webhooks"
        secret = "whsec_c2Vjb25k"
    "#;
    let providers = providers_from(&file(text), &|_: &str| None).unwrap();
    let deadlines: Vec<_> = providers.iter().map(|p| (p.name(), p.deadline())).collect();
    assert_eq!(
        deadlines,
        [
            ("slack-like", Duration::from_secs(3)),
            ("fast", Duration::from_millis(750)),
            ("gh", Kind::Github.default_deadline()),
            ("sw", Kind::StandardWebhooks.default_deadline()),
        ]
    );
}

#[test]
fn a_bad_deadline_names_the_key_never_the_value() {
    let provider = |deadline: &str| {
        format!("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\ndeadline = {deadline:?}")
    };
    for (value, want) in [
        ("0s", "`deadline` must be more than 0"),
        ("0ms", "`deadline` must be more than 0"),
        ("hunter2-in-the-wrong-key", "deadline`: not a duration"),
        ("3", "deadline`: not a duration"),
        ("3 s", "deadline`: not a duration"),
        ("-3s", "deadline`: not a duration"),
        ("1.5s", "deadline`: not a duration"),
    ] {
        let e = providers_from(&file(&provider(value)), &|_: &str| None).unwrap_err().to_string();
        assert!(e.contains(want) && e.contains("\"x\""), "{value:?}: {e:?} lacks {want:?}");
        assert!(!e.contains(value), "{value:?} echoed in {e:?}");
    }
    // Not a string at all: the TOML error names the key, not the value.
    let text = provider("x").replace("deadline = \"x\"", "deadline = 31337");
    let e = toml_error(&text, &toml::from_str::<FileConfig>(&text).unwrap_err());
    assert!(e.contains("deadline") && !e.contains("31337"), "{e}");
}

/// Every bad `hmac` combination stops the start with the provider and
/// the key named, never a value from the file.
#[test]
fn hmac_settings_are_checked_at_start() {
    const VALUE: &str = "Hunter2Value";
    let base = "[[provider]]\nname = \"h\"\nkind = \"hmac\"\nsecret = \"s\"\n";
    let good = "signature_header = \"X-Sig\"\ndelivery_id_header = \"X-Id\"\nfields = { action = \"/type\" }\n";
    let c = resolve(&Layer::default(), &format!("{base}{good}")).unwrap();
    let p = &c.providers[0];
    assert_eq!((p.kind(), p.fields().unwrap().action.as_str()), (Kind::Hmac, "/type"));
    let Provider::Hmac(hmac) = p else { panic!("{p:?}") };
    let scheme = hmac.scheme();
    assert_eq!((scheme.algorithm().as_str(), scheme.encoding().as_str()), ("sha256", "hex"));
    let full = format!(
        "{base}signature_header = \"X-Sig\"\nalgorithm = \"sha512\"\nencoding = \"base64\"\nsignature_prefix = \"v1=\"\nsigned_content = \"{{id}}.{{timestamp}}.{{body}}\"\ntimestamp_header = \"X-Ts\"\ntolerance = \"90s\"\ndelivery_id_header = \"X-Id\"\nfields = {{ org = \"=o\" }}\n"
    );
    let c = resolve(&Layer::default(), &full).unwrap();
    let p = &c.providers[0];
    assert_eq!(p.tolerance(), Some(Duration::from_secs(90)));
    let Provider::Hmac(hmac) = p else { panic!("{p:?}") };
    assert_eq!(hmac.scheme().algorithm().as_str(), "sha512");
    let cases = [
        ("delivery_id_header = \"X-Id\"\nfields = {}\n".to_owned(), "needs `signature_header`"),
        (format!("{good}algorithm = \"{VALUE}\"\n"), "`algorithm` must be"),
        (format!("{good}encoding = \"{VALUE}\"\n"), "`encoding` must be"),
        (format!("{good}signed_content = \"{VALUE}\"\n"), "`signed_content` must contain {body}"),
        (format!("{good}signed_content = \"{{{VALUE}}}{{body}}\"\n"), "placeholder other than"),
        (format!("{good}signed_content = \"{{timestamp}}.{{body}}\"\n"), "`timestamp_header` is not set"),
        (format!("{good}timestamp_header = \"X-Ts\"\n"), "does not contain {timestamp}"),
        (format!("{good}tolerance = \"5m\"\n"), "`tolerance` applies only with `timestamp_header`"),
        (format!("{good}delivery_id = \"/id\"\n"), "not both"),
        (
            "signature_header = \"X-Sig\"\ndelivery_id = \"/id\"\nsigned_content = \"{id}{body}\"\nfields = {}\n"
                .to_owned(),
            "`delivery_id_header` is not set",
        ),
        ("signature_header = \"X-Sig\"\nfields = {}\n".to_owned(), "needs `delivery_id_header` or `delivery_id`"),
        (
            format!("signature_header = \"X-Sig\"\ndelivery_id = \"{VALUE}\"\nfields = {{}}\n"),
            "`delivery_id` is not a JSON pointer",
        ),
        ("signature_header = \"X-Sig\"\ndelivery_id_header = \"X-Id\"\n".to_owned(), "needs `fields`"),
        (
            format!("signature_header = \"{VALUE} x\"\ndelivery_id_header = \"X-Id\"\nfields = {{}}\n"),
            "`signature_header` is not a valid HTTP header name",
        ),
        (
            format!("signature_header = \"X-Sig\"\ndelivery_id_header = \"{VALUE}:\"\nfields = {{}}\n"),
            "`delivery_id_header` is not a valid HTTP header name",
        ),
    ];
    for (keys, want) in cases {
        let e = resolve(&Layer::default(), &format!("{base}{keys}")).unwrap_err();
        assert!(e.contains(want) && e.contains("\"h\""), "{keys:?}: {e:?} lacks {want:?}");
        assert!(!e.contains(VALUE), "{e}");
    }
}

/// The allowlist compares `org/repo` as one string: entries with more
/// than one slash (a GitLab project in a subgroup) are accepted as they are.
#[test]
fn allowlist_entries_may_hold_nested_groups() {
    let text = "allowed_repos = [\"acme/platform/api\", \"a/b\"]\n[[provider]]\nname = \"gl\"\nkind = \"gitlab\"\nsecret = \"t\"\nallowed_repos = [\"acme/platform/sub/web\"]";
    let c = resolve(&Layer::default(), text).unwrap();
    assert_eq!(c.allowed_repos, ["acme/platform/api", "a/b"]);
    assert_eq!(c.providers[0].allowed_repos(), Some(&["acme/platform/sub/web".to_owned()][..]));
    assert_eq!(c.providers[0].kind(), Kind::Gitlab);
    for bad in ["/api", "acme/"] {
        let e = resolve(&Layer::default(), &format!("allowed_repos = [\"{bad}\"]")).unwrap_err();
        assert!(e.contains("not ORG/REPO"), "{bad}: {e}");
    }
}
