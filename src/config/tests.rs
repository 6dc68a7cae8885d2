use std::time::Duration;

use super::*;
use crate::redis_io::RedisTarget;
use crate::units::{Lifetime, format_duration, parse_duration, parse_lifetime};

pub(crate) fn file(text: &str) -> FileConfig {
    FileConfig::parse(text).unwrap()
}

/// `flags` over the file `text`.
pub(crate) fn merged(flags: &Layer, text: &str) -> Merged {
    Merged::over_file(Sources { flags: flags.clone(), ..Default::default() }, file(text))
}

pub(crate) fn resolve(flags: &Layer, text: &str) -> Result<ServeConfig, String> {
    ServeConfig::resolve_with(&merged(flags, text), |v| (v == "GH_SECRET").then(|| "s3cret".to_owned()))
        .map_err(|e| e.to_string())
}

#[test]
fn durations() {
    assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("72h"), Ok(Duration::from_secs(72 * 3600)));
    assert_eq!(parse_duration("4d"), Ok(Duration::from_secs(4 * 86400)));
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    for bad in ["soon", "", "10", "1.5h", "-1s", "3w", "99999999999999999999d"] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
    assert!(!parse_duration("soon").unwrap_err().contains("soon"), "names no part of the value");
    assert_eq!(parse_lifetime("30d"), Ok(Lifetime(Some(Duration::from_secs(30 * 86_400)))));
    assert_eq!(parse_lifetime("never"), Ok(Lifetime(None)));
    for bad in ["0s", "0d", "forever", ""] {
        assert!(parse_lifetime(bad).is_err(), "{bad}");
    }
}

#[test]
fn defaults() {
    let c = resolve(&Layer::default(), "").unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
    assert!(c.store.redis.is_none());
    assert_eq!(c.store.keys.namespace(), "default");
    assert_eq!(c.settings.delivery_ttl, Duration::from_secs(7 * 86400));
    assert_eq!(c.settings.logical_ttl, Some(Duration::from_secs(30 * 86400)));
    assert_eq!(c.run_retention, Some(Duration::from_secs(7 * 86400)));
    assert_eq!(c.max_body, 25 * 1024 * 1024);
    assert_eq!(c.header_timeout, Duration::from_secs(10));
    assert_eq!(c.body_budget, 256 * 1024 * 1024);
    assert!(!c.allow_unauthenticated_api);
}

#[test]
fn lifetimes_take_never() {
    assert_eq!(parse_lifetime("never"), Ok(Lifetime(None)));
    assert_eq!(parse_lifetime("30d"), Ok(Lifetime(Some(Duration::from_secs(30 * 86400)))));
    for bad in ["0s", "500ms", "forever", ""] {
        assert!(parse_lifetime(bad).is_err(), "{bad}");
    }
    let c = resolve(&Layer::default(), "logical_ttl = \"never\"\nrun_retention = \"never\"").unwrap();
    assert_eq!((c.settings.logical_ttl, c.run_retention), (None, None));
    let c = resolve(&Layer::default(), "logical_ttl = \"2d\"\nrun_retention = \"3h\"").unwrap();
    assert_eq!(
        (c.settings.logical_ttl, c.run_retention),
        (Some(Duration::from_secs(2 * 86400)), Some(Duration::from_secs(3 * 3600)))
    );
    let args = Layer::flags([("logical_ttl", "never"), ("run_retention", "60s")]).unwrap();
    let c = resolve(&args, "logical_ttl = \"2d\"\nrun_retention = \"never\"").unwrap();
    assert_eq!((c.settings.logical_ttl, c.run_retention), (None, Some(Duration::from_secs(60))), "flags win");
}

#[test]
fn limits_from_the_file() {
    let c = resolve(
        &Layer::default(),
        "header_timeout = \"3s\"\nbody_budget = 100000000\nmax_body = 1000\nallow_unauthenticated_api = true\nallow_eviction = true",
    )
    .unwrap();
    assert_eq!(
        (c.header_timeout, c.body_budget, c.allow_unauthenticated_api, c.allow_eviction),
        (Duration::from_secs(3), 100_000_000, true, true)
    );
    assert!(!resolve(&Layer::default(), "").unwrap().allow_eviction);
    assert!(resolve(&Layer::default(), "body_budget = 10").unwrap_err().contains("body budget"));
    assert!(resolve(&Layer::default(), "header_timeout = \"0s\"").unwrap_err().contains("header timeout"));
}

#[test]
fn allowed_hosts_from_the_file_the_env_and_the_flags() {
    let c = resolve(&Layer::default(), "allowed_hosts = [\"gate.example\", \"10.0.0.5\"]").unwrap();
    assert_eq!(c.allowed_hosts, ["gate.example", "10.0.0.5"]);
    let args = Layer::flags([("allowed_hosts", "a.example,b.example")]).unwrap();
    assert_eq!(resolve(&args, "allowed_hosts = \"gate.example\"").unwrap().allowed_hosts, ["a.example", "b.example"]);
    assert!(resolve(&Layer::default(), "").unwrap().allowed_hosts.is_empty());
    for bad in ["http://gate.example", "gate.example/x", "a b"] {
        let e = resolve(&Layer::default(), &format!("allowed_hosts = [{bad:?}]")).unwrap_err();
        assert!(e.contains("`allowed_hosts`") && e.contains("not a host name or address"), "{bad}: {e}");
    }
}

/// A secret typed into the wrong place must not be echoed by the error.
#[test]
fn errors_never_echo_a_value_from_the_file() {
    const SECRET: &str = "hunter2-s3cr3t";
    let dir = std::env::temp_dir().join(format!("idemgate-cfg-echo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            format!("[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s\"\napi_token = \"{SECRET}\"\n"),
            "line 5, unknown key `api_token`",
        ),
        (format!("max_body = \"{SECRET}\""), "line 1, key `max_body`: invalid value (expected"),
        (format!("listen = \"127.0.0.1:80\"\nnamespace = {SECRET}\n"), "line 2"),
        (format!("delivery_ttl = \"{SECRET}\""), "config file line 1, `delivery_ttl`: not a duration"),
        (format!("logical_ttl = \"{SECRET}\""), "config file line 1, `logical_ttl`: not a lifetime"),
        (format!("run_retention = \"{SECRET}\""), "config file line 1, `run_retention`: not a lifetime"),
        (format!("listen = \"{SECRET}\""), "config file line 1, `listen`: not an address"),
        (format!("allowed_repos = [\"a/b\", \"{SECRET}\"]"), "config file line 1, `allowed_repos`: allowed repo #2"),
        (format!("namespace = \"{{{SECRET}\""), "config file line 1, `namespace`: the namespace must be"),
        (format!("[[provider]]\nname = \"x\"\nkind = \"{SECRET}\"\nsecret = \"s\""), "unknown kind"),
        (
            format!("[[provider]]\nname = \"{SECRET} \"\nkind = \"github\"\nsecret = \"s\""),
            "[[provider]] #1: name must",
        ),
        (
            format!("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\ntolerance = \"{SECRET}\""),
            "tolerance",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let path = dir.join(format!("c{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let flags = Layer::flags([("config", path.to_str().unwrap())]).unwrap();
        let e = Merged::load(Sources { flags, ..Default::default() })
            .and_then(|m| ServeConfig::resolve(&m))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        assert!(!e.contains(SECRET), "{text:?}: the error echoes the value: {e}");
    }
}

#[test]
fn flags_win_over_the_file() {
    let text = r#"
        listen = "0.0.0.0:9000"
        namespace = "from-file"
        allowed_repos = ["a/b"]
        delivery_ttl = "90s"
        redis_url = "redis://file:6379"
    "#;
    let c = resolve(&Layer::default(), text).unwrap();
    assert_eq!((c.listen.to_string().as_str(), c.store.keys.namespace()), ("0.0.0.0:9000", "from-file"));
    assert_eq!(c.allowed_repos, ["a/b"]);
    assert_eq!(c.settings.delivery_ttl, Duration::from_secs(90));
    let args = Layer::flags([
        ("listen", "127.0.0.1:1"),
        ("allowed_repos", "c/d"),
        ("delivery_ttl", "5s"),
        ("namespace", "flag"),
    ])
    .unwrap();
    let c = resolve(&args, text).unwrap();
    assert_eq!((c.listen.to_string().as_str(), c.store.keys.namespace()), ("127.0.0.1:1", "flag"));
    assert_eq!(c.allowed_repos, ["c/d"]);
    assert_eq!(c.settings.delivery_ttl, Duration::from_secs(5));
}

#[test]
fn each_bad_input_names_the_problem() {
    let cases = [
        ("delivery_ttl = \"soon\"", "delivery_ttl"),
        ("[[provider]]\nname = \"x\"\nkind = \"gitea\"\nsecret = \"s\"", "unknown kind"),
        ("[[provider]]\nname = \"x\"\nkind = \"github\"", "missing secret"),
        (
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret_env = \"NOPE\"",
            "`secret_env` entry #1 names a variable that is not set",
        ),
        ("[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_!!!\"", "\"x\""),
        ("[[provider]]\nname = \"a b\"\nkind = \"github\"\nsecret = \"s\"", "name must"),
        (
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\n[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"t\"",
            "defined twice",
        ),
        ("listen = \"nowhere\"", "listen"),
        ("allowed_repos = [\"justone\"]", "allowed repo #1 is not ORG/REPO"),
        ("namespace = \"a{b\"", "namespace"),
        ("redis_url = \"redis://x\"\nredis_cluster_nodes = \"redis://y\"", "not both"),
        ("api_token = \"\"", "api token"),
        ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nsecrets = [\"t\"]", "not several"),
        ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecrets = []", "`secrets` is empty"),
        ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecrets = [\"s\", \"\"]", "the secret is empty"),
        ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret_env = []", "names no variable"),
        ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nevents = []", "`events` must"),
        (
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nallowed_repos = [\"a\"]",
            "allowed repo #1 is not ORG/REPO",
        ),
        (
            "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_c2Vjb25k\"\nidentity = \"number\"",
            "line 5, `identity` applies to kinds \"github\", \"shopify\" and \"gitlab\" only",
        ),
        (
            "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecrets = [\"whsec_c2Vjb25k\", \"whsec_!\"]",
            "not valid base64",
        ),
    ];
    for (text, want) in cases {
        let e = resolve(&Layer::default(), text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
    }
}

#[test]
fn unknown_and_mistyped_keys_are_errors() {
    for text in [
        "lisen = \"x\"",
        "max_body = \"big\"",
        "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nrefusal_status = \"200\"",
    ] {
        assert!(toml::from_str::<FileConfig>(text).is_err(), "{text}");
    }
    // A kind's own keys are read by the kind, once the table names it: the
    // error names the provider, the line and the key.
    for (text, want) in [
        ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nextra = 1", "line 5, unknown key `extra`"),
        (
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nidentity = \"commit\"",
            "line 5, provider \"x\": `identity`: invalid value (expected one of `event`, `number`, `topic`)",
        ),
    ] {
        let e = resolve(&Layer::default(), text).unwrap_err();
        assert!(e.contains("[[provider]] #1 (\"x\")") && e.contains(want), "{text}: {e}");
    }
    let dir = std::env::temp_dir().join(format!("idemgate-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "lisen = 1").unwrap();
    let e = FileConfig::load(&path).unwrap_err().to_string();
    assert!(e.starts_with("the config file, line 1, key `lisen`: unknown field `lisen`"), "{e}");
    let e = FileConfig::load(&dir.join("missing.toml")).unwrap_err().to_string();
    assert!(e.starts_with("cannot read the config file: ") && !e.contains("missing.toml"), "{e}");
}

#[test]
fn min_replicas_ack_from_flag_env_or_file() {
    let url = "redis_url = \"redis://x\"\n";
    let ack = |args: &Layer, text: &str| {
        resolve(args, &format!("{url}{text}")).map(|c| c.store.redis.unwrap().min_replicas_ack)
    };
    let none = Layer::default();
    assert_eq!(ack(&none, ""), Ok(None));
    assert_eq!(ack(&none, "min_replicas_ack = 0"), Ok(None));
    assert_eq!(ack(&none, "min_replicas_ack = 1"), Ok(Some((1, Duration::from_millis(500)))));
    let file = "min_replicas_ack = 1\nmin_replicas_timeout = \"200ms\"\nredis_timeout = \"300ms\"";
    assert_eq!(ack(&none, file), Ok(Some((1, Duration::from_millis(200)))));
    let store = |ack: Option<&'static str>, timeout: Option<&'static str>| {
        let ack = ack.map(|a| ("min_replicas_ack", a));
        Layer::flags(ack.into_iter().chain(timeout.map(|t| ("redis_timeout", t)))).unwrap()
    };
    assert_eq!(ack(&store(Some("2"), Some("400ms")), file), Ok(Some((2, Duration::from_millis(200)))), "the flag wins");
    let half = ack(&store(None, Some("400ms")), "min_replicas_ack = 1");
    assert_eq!(half, Ok(Some((1, Duration::from_millis(200)))), "by default at most half the redis timeout");
    for (text, want) in [
        ("min_replicas_ack = 1\nmin_replicas_timeout = \"2s\"", "less than the redis timeout"),
        ("min_replicas_ack = 1\nmin_replicas_timeout = \"0ms\"", "more than 0"),
        ("min_replicas_ack = 1\nmin_replicas_timeout = \"soon\"", "min_replicas_timeout"),
    ] {
        let e = ack(&none, text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
    }
    assert!(resolve(&none, "min_replicas_ack = 1").unwrap_err().contains("needs a Redis store"));
    assert!(toml::from_str::<FileConfig>("min_replicas_ack = -1").is_err());
}

#[test]
fn allowed_repos_from_env_are_trimmed() {
    let args = Layer::flags([("allowed_repos", "o/r, a/b,")]).unwrap();
    assert_eq!(resolve(&args, "").unwrap().allowed_repos, ["o/r", "a/b"]);
}

#[test]
fn a_redis_flag_replaces_the_files_redis_setting() {
    let file = "redis_cluster_nodes = \"redis://c1,redis://c2\"";
    let args = Layer::flags([("redis_url", "redis://flag:6379")]).unwrap();
    let c = resolve(&args, file).unwrap();
    assert!(matches!(c.store.redis.unwrap().target, RedisTarget::Single(u) if u == "redis://flag:6379"));
    let c = resolve(&Layer::default(), file).unwrap();
    assert!(matches!(c.store.redis.unwrap().target, RedisTarget::Cluster(n) if n == ["redis://c1", "redis://c2"]));
}

#[test]
fn sentinel_tls_and_password_file_settings() {
    let dir = std::env::temp_dir().join(format!("idemgate-cfg-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pw = dir.join("pw");
    std::fs::write(&pw, "s3cret\n").unwrap();
    let text = format!(
        "redis_sentinel_nodes = \"redis://s1:26379, redis://s2:26379\"\nredis_sentinel_master = \"m\"\nredis_password_file = {:?}",
        pw.display().to_string()
    );
    let c = resolve(&Layer::default(), &text).unwrap();
    let redis = c.store.redis.as_ref().unwrap();
    assert!(
        matches!(&redis.target, RedisTarget::Sentinel { nodes, master } if nodes == &["redis://s1:26379", "redis://s2:26379"] && master == "m")
    );
    assert_eq!(redis.password.as_ref().unwrap().path(), pw);
    let described = c.store.describe();
    assert!(described.contains("sentinels") && described.contains(&pw.display().to_string()), "{described}");
    assert!(!described.contains("s3cret") && !format!("{redis:?}").contains("s3cret"), "{described}");
    // A flag for where Redis is replaces the file's sentinels, master name included.
    let flag = Layer::flags([("redis_url", "redis://flag:6379")]).unwrap();
    assert!(matches!(resolve(&flag, &text).unwrap().store.redis.unwrap().target, RedisTarget::Single(_)));
    let e = resolve(&Layer::default(), "redis_url = \"redis://x\"\nredis_sentinel_master = \"m\"").unwrap_err();
    assert!(e.contains("config file line 2, `redis_sentinel_master`: needs --redis-sentinel-nodes"), "{e}");
    for (text, want) in [
        ("redis_sentinel_nodes = \"redis://s:26379\"", "needs --redis-sentinel-master"),
        ("redis_url = \"redis://x\"\nredis_sentinel_nodes = \"redis://s:26379\"", "not both"),
        (
            "redis_url = \"redis://x\"\nredis_tls_ca = \"/nonexistent/ca.pem\"",
            "`redis_tls_ca`: redis TLS CA file: cannot read it",
        ),
        (
            "redis_url = \"redis://x\"\nredis_password_file = \"/nonexistent/pw\"",
            "`redis_password_file`: redis password file: cannot read it",
        ),
        (
            "redis_url = \"rediss://x\"\nredis_tls_cert = \"/nonexistent/c.pem\"",
            "both --redis-tls-cert and --redis-tls-key",
        ),
        ("redis_password_file = \"/nonexistent/pw\"", "need a Redis store"),
        (
            "[[provider]]\nname = \"x\"\nkind = \"gitlab\"\nsecret = \"s\"\nfields = { org = \"/o\" }",
            "line 5, `fields` applies to kinds \"standard-webhooks\", \"stripe\", \"slack\", \"shopify\" and \"hmac\" only",
        ),
        (
            "[[provider]]\nname = \"x\"\nkind = \"gitlab\"\nsecret = \"s\"\nidentity = \"topic\"",
            "`identity = \"topic\"` does not apply to kind \"gitlab\"",
        ),
        (
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nsignature_header = \"X-S\"",
            "`signature_header` applies to kind \"hmac\" only",
        ),
        (
            "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_c2Vjb25k\"\ndelivery_id = \"/id\"",
            "`delivery_id` applies to kind \"hmac\" only",
        ),
    ] {
        let e = resolve(&Layer::default(), text).unwrap_err();
        assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
    }
}

#[test]
fn the_ops_api_connects_as_its_own_user() {
    let dir = std::env::temp_dir().join(format!("idemgate-cfg-ops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (pw, ops_pw) = (dir.join("pw"), dir.join("ops-pw"));
    std::fs::write(&pw, "s3cret\n").unwrap();
    std::fs::write(&ops_pw, "0ps-s3cret\n").unwrap();
    let base = format!(
        "redis_url = \"redis://idemgate-serve@h:6379\"\nredis_password_file = {:?}\n",
        pw.display().to_string()
    );
    // None asked: the ops API uses the gate's connection.
    assert!(resolve(&Layer::default(), &base).unwrap().ops_redis.is_none());
    // The user alone: the gate's password, the same Redis, that user.
    let c = resolve(&Layer::default(), &format!("{base}ops_redis_user = \"idemgate-ops\"")).unwrap();
    let ops = c.ops_redis.unwrap();
    assert_eq!((ops.username.as_deref(), ops.password.as_ref().unwrap().path()), (Some("idemgate-ops"), pw.as_path()));
    assert!(matches!(&ops.target, RedisTarget::Single(url) if url == "redis://idemgate-serve@h:6379"));
    let info = ops.connection_info("redis://idemgate-serve@h:6379").unwrap();
    assert_eq!(
        (info.redis_settings().username(), info.redis_settings().password()),
        (Some("idemgate-ops"), Some("s3cret"))
    );
    // And its own password file, from the flags.
    let flags =
        Layer::flags([("ops_redis_user", "idemgate-ops"), ("ops_redis_password_file", ops_pw.to_str().unwrap())])
            .unwrap();
    let ops = resolve(&flags, &base).unwrap().ops_redis.unwrap();
    assert_eq!(ops.password.as_ref().unwrap().path(), ops_pw);
    let described =
        crate::store::config::StoreConfig { redis: Some(ops), keys: crate::keys::Keys::new("n").unwrap() }.describe();
    assert!(described.contains("as user idemgate-ops") && !described.contains("s3cret"), "{described}");
    for (text, want) in [
        (format!("{base}ops_redis_password_file = {:?}", ops_pw.display().to_string()), "needs --ops-redis-user"),
        ("ops_redis_user = \"idemgate-ops\"".to_owned(), "needs a Redis store"),
        (format!("{base}ops_redis_user = \"two words\""), "must be a user name"),
        (format!("{base}ops_redis_user = \"\""), "must be a user name"),
        (
            format!("{base}ops_redis_user = \"o\"\nops_redis_password_file = \"/nonexistent/pw\""),
            "`ops_redis_password_file`: redis password file: cannot read it",
        ),
    ] {
        let e = resolve(&Layer::default(), &text).unwrap_err();
        assert!(e.contains(want) && !e.contains("two words"), "{text:?}: {e:?} lacks {want:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn defaults_are_shown_in_the_units_the_help_has_always_used() {
    let shown = |secs| format_duration(Duration::from_secs(secs));
    assert_eq!(
        [shown(1), shown(10), shown(60), shown(300), shown(7 * 86_400), shown(30 * 86_400)],
        ["1s", "10s", "60s", "5m", "7d", "30d"]
    );
    assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
    assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
}

#[test]
fn passwords_are_redacted() {
    use crate::redact::redis_url;
    assert_eq!(redis_url("redis://:pw@host:6379/0"), "redis://***@host:6379/0");
    assert_eq!(redis_url("redis://host:6379"), "redis://host:6379");
}

/// Top-level string keys whose values the property below varies.
const TOP_KEYS: &[&str] = &[
    "listen",
    "redis_url",
    "namespace",
    "allowed_repos",
    "delivery_ttl",
    "logical_ttl",
    "api_token",
    "redis_timeout",
    "min_replicas_timeout",
    "request_timeout",
];

/// A TOML string shaped like what these keys take, or not.
fn arb_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    prop_oneof![
        "[0-9]{1,6}(ms|s|m|h|d|x|)",
        "[a-z]{1,6}/[a-z]{0,6}",
        "(127\\.0\\.0\\.1|[a-z]{1,5}):[0-9]{1,6}",
        "redis://[a-z:@]{0,10}[0-9]{0,5}",
        ".{0,16}",
    ]
}

/// A `[[provider]]` table with arbitrary names, kinds and settings.
fn arb_provider() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    (
        ".{0,8}",
        prop_oneof![
            Just("github".to_owned()),
            Just("standard-webhooks".to_owned()),
            Just("stripe".to_owned()),
            Just("slack".to_owned()),
            Just("shopify".to_owned()),
            Just("gitlab".to_owned()),
            Just("hmac".to_owned()),
            "[a-z-]{0,10}"
        ],
        proptest::option::of(".{0,12}"),
        proptest::option::of("[A-Z_]{1,8}"),
        proptest::option::of("[0-9]{1,3}(s|m|x)"),
        proptest::option::of("[0-9]{1,5}(ms|s|m|x|)"),
    )
        .prop_map(|(name, kind, secret, secret_env, tolerance, deadline)| {
            let q = |s: String| toml::Value::String(s).to_string();
            let mut t = format!("[[provider]]\nname = {}\nkind = {}\n", q(name), q(kind));
            let keys =
                [("secret", secret), ("secret_env", secret_env), ("tolerance", tolerance), ("deadline", deadline)];
            for (key, value) in keys {
                if let Some(v) = value {
                    t.push_str(&format!("{key} = {}\n", q(v)));
                }
            }
            t
        })
}

proptest::proptest! {
    #[test]
    fn config_parser_never_panics(text in ".{0,200}") {
        if let Ok(f) = FileConfig::parse(&text) {
            let _ = ServeConfig::resolve_with(&Merged::over_file(Sources::default(), f), |_| None);
        }
    }

    /// Well-formed files with arbitrary values: every case parses, so
    /// every case reaches the validation in `resolve_with`, which must
    /// answer with a value or a message, never a panic.
    #[test]
    fn any_values_resolve_or_explain(
        top in proptest::collection::vec((0..TOP_KEYS.len(), proptest::collection::vec(arb_text(), 1..3)), 0..6),
        providers in proptest::collection::vec(arb_provider(), 0..3),
    ) {
        let mut text = String::new();
        let mut seen = std::collections::HashSet::new();
        for (key, mut values) in top {
            if !seen.insert(key) {
                continue;
            }
            // The allowlist takes a list or one comma-separated string; the others one string.
            let value = if TOP_KEYS[key] == "allowed_repos" && values.len() > 1 {
                toml::Value::Array(values.into_iter().map(toml::Value::String).collect())
            } else {
                toml::Value::String(values.swap_remove(0))
            };
            text.push_str(&format!("{} = {value}\n", TOP_KEYS[key]));
        }
        for p in providers {
            text.push_str(&p);
        }
        let file = FileConfig::parse(&text);
        proptest::prop_assert!(file.is_ok(), "{text}: {:?}", file.err());
        match ServeConfig::resolve_with(&Merged::over_file(Sources::default(), file.unwrap()), |_| Some("env-secret".into())) {
            Ok(_) => {}
            Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn duration_parser_never_panics(s in ".{0,30}") {
        let _ = parse_duration(&s);
    }

    /// What `format_duration` writes, `parse_duration` reads back as the same duration.
    #[test]
    fn formatted_durations_parse_back(ms in 1u64..=400 * 86_400_000, whole_seconds: bool) {
        let d = if whole_seconds { Duration::from_secs(ms / 1000 + 1) } else { Duration::from_millis(ms) };
        proptest::prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
    }
}

/// A layer of env vars, as the binary fills it from clap's value sources.
fn env(pairs: &[(&str, &str, &str)]) -> Layer {
    let mut layer = Layer::default();
    for (name, var, value) in pairs {
        assert!(layer.set(name, Given::new(Raw::Text(value.to_string()), Origin::Env(var.to_string()))));
    }
    layer
}

#[test]
fn each_layer_wins_over_the_ones_below_and_its_errors_name_it() {
    let text = "delivery_ttl = \"90s\"\nlisten = \"127.0.0.1:1\"\nnamespace = \"file\"\n";
    let sources = |env: Layer, flags: Layer| Merged::over_file(Sources { env, flags }, file(text));
    let resolve = |m: &Merged| ServeConfig::resolve_with(m, |_| None).map_err(|e| e.to_string());
    let c = resolve(&sources(Layer::default(), Layer::default())).unwrap();
    assert_eq!((c.settings.delivery_ttl, c.store.keys.namespace()), (Duration::from_secs(90), "file"));
    let e = env(&[("delivery_ttl", "IDEMGATE_DELIVERY_TTL", "2m"), ("namespace", "IDEMGATE_NAMESPACE", "env")]);
    let c = resolve(&sources(e.clone(), Layer::default())).unwrap();
    assert_eq!((c.settings.delivery_ttl, c.store.keys.namespace()), (Duration::from_secs(120), "env"));
    assert_eq!(c.listen.to_string(), "127.0.0.1:1", "the file where env and flags say nothing");
    let m = sources(e.clone(), Layer::flags([("namespace", "flag")]).unwrap());
    let c = resolve(&m).unwrap();
    assert_eq!((c.settings.delivery_ttl, c.store.keys.namespace()), (Duration::from_secs(120), "flag"));
    assert_eq!(m.given.namespace.unwrap().origin, Origin::Flag("--namespace".into()));
    // Errors name the layer the winning value came from.
    let bad = env(&[("delivery_ttl", "IDEMGATE_DELIVERY_TTL", "0s")]);
    let e = resolve(&sources(bad.clone(), Layer::default())).unwrap_err();
    assert_eq!(e, "IDEMGATE_DELIVERY_TTL: the delivery TTL must be at least 1s");
    let e = resolve(&sources(bad, Layer::flags([("delivery_ttl", "500ms")]).unwrap())).unwrap_err();
    assert_eq!(e, "--delivery-ttl: the delivery TTL must be at least 1s");
    let e = self::resolve(&Layer::default(), "\n\ndelivery_ttl = \"0s\"").unwrap_err();
    assert_eq!(e, "config file line 3, `delivery_ttl`: the delivery TTL must be at least 1s");
}

#[test]
fn where_redis_is_comes_from_one_layer() {
    let text = "redis_cluster_nodes = \"redis://c1,redis://c2\"\nredis_sentinel_master = \"m\"\n";
    let target = |env: Layer, flags: Layer| {
        let m = Merged::over_file(Sources { env, flags }, file(text));
        StoreConfig::resolve(&m.given).map(|s| s.redis.unwrap().target).map_err(|e| e.to_string())
    };
    let url = env(&[("redis_url", "IDEMGATE_REDIS_URL", "redis://env")]);
    // The env's URL replaces the file's cluster; the file's master name is dropped with it.
    assert!(matches!(target(url.clone(), Layer::default()), Ok(RedisTarget::Single(u)) if u == "redis://env"));
    // The flags' sentinels replace the env's URL, and take the file's master name.
    let sentinels = Layer::flags([("redis_sentinel_nodes", "redis://s1")]).unwrap();
    let t = target(url.clone(), sentinels).unwrap();
    assert!(
        matches!(&t, RedisTarget::Sentinel { nodes, master } if nodes == &["redis://s1"] && master == "m"),
        "{t:?}"
    );
    // A master name given as high as the URL it does not fit is an error, named by its source.
    let master = env(&[
        ("redis_url", "IDEMGATE_REDIS_URL", "redis://env"),
        ("redis_sentinel_master", "IDEMGATE_REDIS_SENTINEL_MASTER", "m"),
    ]);
    let e = target(master, Layer::default()).unwrap_err();
    assert_eq!(e, "IDEMGATE_REDIS_SENTINEL_MASTER: needs --redis-sentinel-nodes");
}

/// A TOML integer reaches its setting as a number, never as text parsed
/// again; a bad number still names its source.
#[test]
fn a_toml_integer_reaches_its_setting_typed() {
    let layer = file("max_body = 1048576\nbody_budget = 2097152\n[worker]\nconcurrency = 7").layer();
    assert_eq!(layer.max_body.as_ref().map(|g| &g.value), Some(&Raw::Number(1_048_576)));
    assert_eq!(layer.concurrency.as_ref().map(|g| &g.value), Some(&Raw::Number(7)));
    let max_body = layer.max_body.number::<usize>().unwrap().unwrap();
    assert_eq!(max_body, Given::new(1_048_576, Origin::File { key: "max_body", table: None, line: 1 }));
    assert_eq!(resolve(&Layer::default(), "max_body = 1048576\nbody_budget = 2097152").unwrap().max_body, 1_048_576);
    // A number its setting cannot hold: the key and line, not the value.
    let huge = Some(Given::new(Raw::Number(u64::MAX), Origin::File { key: "max_processes", table: None, line: 4 }));
    assert_eq!(
        huge.number::<u32>().unwrap_err().to_string(),
        "config file line 4, `max_processes`: too large a number"
    );
    // A number where one text is wanted (no setting reads one so, but the error is clear).
    assert_eq!(layer.max_body.text().unwrap_err().to_string(), "config file line 1, `max_body`: expected one value");
    // A flag's number is text, parsed once, named by its flag.
    let e = Layer::flags([("max_body", "ten")]).unwrap().max_body.number::<usize>().unwrap_err();
    assert_eq!(e.to_string(), "--max-body: not a whole number");
    // The file refuses a number of the wrong TOML type by line and key.
    assert!(FileConfig::parse("max_body = \"1MiB\"").unwrap_err().to_string().starts_with("line 1, key `max_body`"));
}

/// The list gives every setting with a flag one env var and one long flag,
/// each its own (two settings sharing either would shadow each other).
#[test]
fn each_flag_has_its_own_env_var_and_long_name() {
    let mut seen = std::collections::HashSet::new();
    for flag in FLAGS {
        assert!(flag.env.starts_with("IDEMGATE_") && seen.insert(flag.env), "{}", flag.name);
        assert!(seen.insert(flag.long.unwrap_or(flag.name)), "{}", flag.name);
        assert!(!flag.on.is_empty() && !flag.help.is_empty(), "{}", flag.name);
        assert!(Layer::default().get(flag.name).is_none() && Layer::flags([(flag.name, "x")]).is_ok(), "{}", flag.name);
    }
    assert!(FLAGS.iter().all(|f| f.name != "keep_payload"), "a file key with no flag");
}
