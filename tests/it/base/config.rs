//! One configuration for every command, against the real binary: a value
//! from each layer wins in the order flags > env > config file > default,
//! and every start-up error names where the bad value came from (the file's
//! line and key, the env var, or the flag), never showing a file's value.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The binary with no `IDEMGATE_*` variable of the test's own environment.
fn idemgate(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        c.env_remove(var);
    }
    c.args(args).envs(env.iter().copied()).stdin(std::process::Stdio::null()).output().unwrap()
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("idemgate-config-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// The stderr of a command that must fail to start.
fn start_error(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = idemgate(args, env);
    assert!(!out.status.success(), "{args:?} {env:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn config_layers_win_flags_over_env_over_the_file_over_the_default() {
    let d = dir("layers");
    let file = write(&d, "ns.toml", "namespace = \"from-file\"\n");
    // `idemgate key` prints a key with the namespace it was given, and needs no Redis.
    let namespace = |args: &[&str], env: &[(&str, &str)]| {
        let out = idemgate(&[&["key", "run", "run-1", "--raw"], args].concat(), env);
        assert!(out.status.success(), "{args:?} {env:?}: {}", String::from_utf8_lossy(&out.stderr));
        let key = String::from_utf8(out.stdout).unwrap();
        key.split(['{', '}']).nth(1).unwrap().to_owned()
    };
    assert_eq!(namespace(&[], &[]), "default");
    assert_eq!(namespace(&["--config", &file], &[]), "from-file");
    assert_eq!(namespace(&[], &[("IDEMGATE_CONFIG", &file)]), "from-file");
    assert_eq!(namespace(&["--config", &file], &[("IDEMGATE_NAMESPACE", "from-env")]), "from-env");
    let all = namespace(&["--config", &file, "--namespace", "from-flag"], &[("IDEMGATE_NAMESPACE", "from-env")]);
    assert_eq!(all, "from-flag");
    // A flag wins over a malformed value under it: the losing layers are never parsed.
    let bad = write(&d, "bad.toml", "redis_timeout = \"soon\"\nnamespace = \"from-file\"\n");
    let out = idemgate(
        &["key", "run", "run-1", "--config", &bad, "--redis-timeout", "1s"],
        &[("IDEMGATE_REDIS_TIMEOUT", "later")],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn config_errors_name_the_file_line_and_key_never_the_value() {
    let d = dir("file");
    let serve = write(&d, "serve.toml", "listen = \"127.0.0.1:0\"\n\ndelivery_ttl = \"hunter2-soon\"\n");
    let e = start_error(&["serve", "--config", &serve], &[]);
    assert!(e.contains("config file line 3, `delivery_ttl`: not a duration"), "{e}");
    assert!(!e.contains("hunter2"), "a value from the file is shown: {e}");
    let worker = write(
        &d,
        "worker.toml",
        "redis_url = \"redis://127.0.0.1:1\"\n[worker]\ngroup = \"g\"\ntimeout = \"hunter2\"\n",
    );
    let e = start_error(&["worker", "--config", &worker, "--", "true"], &[]);
    assert!(e.contains("config file line 4, `[worker] timeout`: not a duration"), "{e}");
    assert!(!e.contains("hunter2"), "a value from the file is shown: {e}");
    let ops = write(&d, "ops.toml", "redis_url = \"redis://127.0.0.1:1\"\nnamespace = \"a b\"\n");
    let e = start_error(&["stats", "--config", &ops], &[]);
    assert!(e.contains("config file line 2, `namespace`: the namespace must be"), "{e}");
    // Where Redis is, given twice in one layer: both places named, the password not shown.
    let twice = write(&d, "twice.toml", "redis_url = \"redis://:hunter2@x\"\nredis_cluster_nodes = \"redis://y\"\n");
    let e = start_error(&["healthcheck", "--config", &twice], &[]);
    assert!(
        e.contains("config file line 1, `redis_url` and config file line 2, `redis_cluster_nodes`: give just one of"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
    // A flag for where Redis is replaces the file's: no conflict.
    let out = idemgate(&["key", "run", "run-1", "--config", &twice, "--redis-url", "redis://z"], &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn config_errors_name_the_env_var_the_value_came_from() {
    let e = start_error(&["serve"], &[("IDEMGATE_DELIVERY_TTL", "soon")]);
    assert!(e.contains("IDEMGATE_DELIVERY_TTL: not a duration") && !e.contains("soon"), "{e}");
    assert!(!e.contains("--delivery-ttl"), "the flag was not given: {e}");
    let e = start_error(&["serve"], &[("IDEMGATE_MAX_BODY", "lots")]);
    assert!(e.contains("IDEMGATE_MAX_BODY: not a whole number") && !e.contains("lots"), "{e}");
    let e = start_error(
        &["worker", "--redis-url", "redis://127.0.0.1:1", "--", "true"],
        &[("IDEMGATE_WORKER_GROUP", "g"), ("IDEMGATE_WORKER_CONCURRENCY", "0")],
    );
    assert!(e.contains("IDEMGATE_WORKER_CONCURRENCY: the concurrency must be more than 0"), "{e}");
    // No value is shown, whatever its source.
    let e = start_error(&["serve"], &[("IDEMGATE_API_TOKEN", "")]);
    assert!(e.contains("IDEMGATE_API_TOKEN: the api token is empty"), "{e}");
}

#[test]
fn config_errors_name_the_flag_the_value_came_from() {
    let e = start_error(&["serve", "--delivery-ttl", "soon"], &[("IDEMGATE_DELIVERY_TTL", "90s")]);
    assert!(e.contains("--delivery-ttl: not a duration") && !e.contains("soon"), "{e}");
    assert!(!e.contains("IDEMGATE_DELIVERY_TTL"), "the flag won over the env var: {e}");
    let e = start_error(&["serve", "--listen", "nowhere"], &[]);
    assert!(e.contains("--listen: not an address"), "{e}");
    let e = start_error(
        &["worker", "--redis-url", "redis://127.0.0.1:1", "--group", "g", "--lease", "1ms", "--", "true"],
        &[],
    );
    assert!(e.contains("--lease: the lease must be at least 30ms"), "{e}");
    let e = start_error(&["inspect", "run", "run-1", "--redis-url", "redis://x", "--redis-sentinel-master", "m"], &[]);
    assert!(e.contains("--redis-sentinel-master: needs --redis-sentinel-nodes"), "{e}");
}

/// `bench` reads the same layers, and refuses the file's Redis, saying why
/// (the bench writes to the Redis it measures); without one it asks for one.
#[test]
fn bench_refuses_the_config_files_redis() {
    let d = dir("bench");
    let file = write(&d, "redis.toml", "namespace = \"n\"\nredis_url = \"redis://127.0.0.1:1\"\n");
    for (args, env) in [(vec!["--config", file.as_str()], vec![]), (vec![], vec![("IDEMGATE_CONFIG", file.as_str())])] {
        let e = start_error(&[&["bench", "--smoke"], &args[..]].concat(), &env);
        assert!(
            e.contains("config file line 2, `redis_url`: the bench does not measure the config file's Redis"),
            "{e}"
        );
        assert!(e.contains("--redis-url or IDEMGATE_REDIS_URL") && !e.contains("127.0.0.1:1"), "{e}");
    }
    let e = start_error(&["bench", "--smoke"], &[]);
    assert!(e.contains("give the Redis to measure against: --redis-url URL (or IDEMGATE_REDIS_URL)"), "{e}");
    // A malformed file is named as for every command.
    let bad = write(&d, "bad.toml", "redis_url = 5\n");
    let e = start_error(&["bench", "--smoke", "--config", &bad], &[]);
    assert!(e.contains("line 1, key `redis_url`: invalid value"), "{e}");
    // The TLS CA is the setting every command takes, and the file's is refused as its URL is.
    let ca = write(&d, "ca.toml", "redis_tls_ca = \"/etc/gate-ca.pem\"\n");
    let e = start_error(&["bench", "--smoke", "--redis-url", "redis://127.0.0.1:1", "--config", &ca], &[]);
    assert!(
        e.contains("config file line 1, `redis_tls_ca`: the bench does not take the config file's Redis settings"),
        "{e}"
    );
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate")).args(["bench", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--redis-tls-ca <FILE>") && help.contains("the CA that verifies --tls-url"), "{help}");
    assert!(help.contains("IDEMGATE_REDIS_TLS_CA"), "{help}");
    let _ = std::fs::remove_dir_all(d);
}

/// `order_by` needs a queue: on the memory store `serve` refuses it at
/// start, naming the setting (top-level or the provider's); a bad value is
/// named by its line and key, never shown.
#[test]
fn order_by_is_refused_on_the_memory_store_and_bad_values_name_their_key() {
    let d = dir("order");
    let top = write(&d, "top.toml", "listen = \"127.0.0.1:0\"\norder_by = \"subject\"\n");
    let e = start_error(&["serve", "--config", &top], &[]);
    assert!(e.contains("order_by = \"subject\" needs Redis"), "{e}");
    let provider = write(
        &d,
        "provider.toml",
        "listen = \"127.0.0.1:0\"\n[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s3cret\"\norder_by = \"repo\"\n",
    );
    let e = start_error(&["serve", "--config", &provider], &[]);
    assert!(e.contains("[[provider]] \"gh\": order_by = \"repo\" needs Redis"), "{e}");
    let bad = write(&d, "bad.toml", "listen = \"127.0.0.1:0\"\norder_by = \"hunter2\"\n");
    let e = start_error(&["serve", "--config", &bad], &[]);
    assert!(e.contains("config file line 2, `order_by`: expected one of \"none\", \"subject\" or \"repo\""), "{e}");
    assert!(!e.contains("hunter2"), "a value from the file is shown: {e}");
    let bad_provider = write(
        &d,
        "bad-provider.toml",
        "[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s3cret\"\norder_on_dead = \"hunter2\"\n",
    );
    let e = start_error(&["serve", "--config", &bad_provider], &[]);
    assert!(e.contains("`order_on_dead`: expected \"block\" or \"skip\""), "{e}");
    assert!(e.contains("line 5"), "the key's line: {e}");
    assert!(!e.contains("hunter2"), "a value from the file is shown: {e}");
    let _ = std::fs::remove_dir_all(d);
}
