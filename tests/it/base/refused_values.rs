//! No error echoes a value it refused (docs/security.md, "Secrets and
//! output"), against the real binary: every setting of the library's one
//! list ([`FLAGS`], [`Layer::TOP_KEYS`], [`Layer::WORKER_KEYS`]) is given
//! values it refuses, from its flag, its env var and its config file key,
//! on each command that takes it, and neither stdout nor stderr shows any
//! part of them. A setting added to the list later is covered as it is
//! added. A value a setting accepts (a token, a consumer name) must not be
//! printed either: such a run is stopped after [`ACCEPTED_RUNS_FOR`].

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use idemgate::config::{Command as On, FLAGS, Form, Layer};

use crate::support::{free_port, temp_dir};

/// What every refused value holds, and what no output may hold.
const MARK: &str = "MARKER";

/// Values each setting is given, one run each: a URL with a password and
/// a query token (refused by every setting that takes no URL, and the
/// redaction's case for those that do; its braces are refused by the
/// names, the namespace and the group, which are printed once accepted),
/// and a plain value with a space and braces.
const VALUES: [&str; 2] = ["https://user:s3cret{MARKER}@host/p?token=MARKER2", "MARKER3 {x}"];

/// How long a run whose value was accepted goes on before it is killed:
/// long enough for a server's or a worker's first lines.
const ACCEPTED_RUNS_FOR: Duration = Duration::from_secs(3);

/// Where a value comes from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Flag,
    Env,
    File,
}

/// One run of the binary: a setting, a source, a value, a command line.
#[derive(Debug)]
struct Case {
    what: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Files the runs share: a config with one provider for `send`, a
/// payload, a deliver secrets file.
struct Fixtures {
    dir: PathBuf,
}

impl Fixtures {
    fn new() -> Self {
        let dir = temp_dir("refused");
        std::fs::write(dir.join("send.toml"), "[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s\"\n")
            .unwrap();
        std::fs::write(dir.join("payload.json"), "{}").unwrap();
        std::fs::write(dir.join("secrets"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }

    /// A config file holding `key = value`, in `[worker]` when it is a worker key.
    fn config_with(&self, n: usize, key: &str, value: &str) -> String {
        let table = if Layer::WORKER_KEYS.contains(&key) { "[worker]\n" } else { "" };
        let path = self.dir.join(format!("c{n}.toml"));
        std::fs::write(&path, format!("{table}{key} = {}\n", toml_string(value))).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The Redis settings that name where Redis is: one is given at a time.
const REDIS_TARGET: [&str; 3] = ["redis_url", "redis_cluster_nodes", "redis_sentinel_nodes"];

/// Whether the line of a run that tests `tested` gives the setting
/// `name`: not the tested one itself (its value is the only one that can
/// be refused), nor another of the Redis target's (they exclude each other).
fn gives(tested: &str, name: &str) -> bool {
    name != tested && !(REDIS_TARGET.contains(&name) && REDIS_TARGET.contains(&tested))
}

/// A command line on which `on` starts, all but the setting `tested`. The
/// Redis it names has no server (a closed loopback port).
fn base_line(on: On, tested: &str, fixtures: &Fixtures) -> Vec<String> {
    let closed_redis = format!("redis://127.0.0.1:{}", free_port());
    let mut line: Vec<String> = Vec::new();
    // `give("", …)`: what names no setting is always given.
    let mut give = |name: &str, args: &[&str]| {
        if gives(tested, name) {
            line.extend(args.iter().map(|s| s.to_string()));
        }
    };
    match on {
        On::Serve => {
            give("", &["serve"]);
            give("listen", &["--listen", &format!("127.0.0.1:{}", free_port())]);
        }
        On::Worker => {
            give("", &["worker"]);
            give("group", &["--group", "g"]);
            give("redis_url", &["--redis-url", &closed_redis]);
            // The destination's settings are read in deliver mode only, the command's in command mode.
            if tested.starts_with("deliver") || tested.starts_with("breaker") {
                give("deliver", &["--deliver", "http://127.0.0.1:9/hook"]);
                give("deliver_secret_file", &["--deliver-secret-file", &fixtures.path("secrets")]);
            } else {
                give("", &["--", "true"]);
            }
        }
        On::Ops => {
            give("", &["stats"]);
            give("redis_url", &["--redis-url", &closed_redis]);
        }
        On::Send => {
            let target = format!("http://127.0.0.1:{}/webhooks/gh", free_port());
            give("", &["send", &target, "--provider", "gh", "--event", "push"]);
            give("", &["--file", &fixtures.path("payload.json")]);
            give("config", &["--config", &fixtures.path("send.toml")]);
        }
        On::Bench => {
            give("", &["bench", "--smoke", "--skip-http", "--skip-redis-benchmark"]);
            give("redis_url", &["--redis-url", &closed_redis]);
        }
    }
    line
}

/// Puts `args` before a trailing `-- COMMAND`, if any.
fn with_args(mut line: Vec<String>, args: &[String]) -> Vec<String> {
    let at = line.iter().position(|a| a == "--").unwrap_or(line.len());
    let tail = line.split_off(at);
    line.extend_from_slice(args);
    line.extend(tail);
    line
}

/// Every run: each setting with a flag, from its flag and its env var, on
/// each command that takes it; each key of the file, from the file, on
/// `serve` (a top-level key) or `worker` (a `[worker]` key) or the first
/// command its flag is on.
fn cases(fixtures: &Fixtures) -> Vec<Case> {
    let mut cases = Vec::new();
    for flag in FLAGS {
        for &on in flag.on {
            for value in VALUES {
                for source in [Source::Flag, Source::Env] {
                    let line = base_line(on, flag.name, fixtures);
                    let (args, env) = match (source, flag.form) {
                        // A switch takes no value on the line: one given is refused by clap.
                        (Source::Flag, Form::Switch) => (vec![format!("--{}={value}", flag.long_name())], vec![]),
                        (Source::Flag, _) => (vec![format!("--{}", flag.long_name()), value.to_owned()], vec![]),
                        (_, _) => (vec![], vec![(flag.env.to_owned(), value.to_owned())]),
                    };
                    let what = format!("{} from {source:?} on {on:?}, {value:?}", flag.name);
                    cases.push(Case { what, args: with_args(line, &args), env });
                }
            }
        }
    }
    for key in Layer::TOP_KEYS.iter().chain(Layer::WORKER_KEYS) {
        let on = match FLAGS.iter().find(|f| f.name == *key) {
            Some(flag) => flag.on[0],
            None if Layer::WORKER_KEYS.contains(key) => On::Worker,
            None => On::Serve,
        };
        for value in VALUES {
            let config = fixtures.config_with(cases.len(), key, value);
            let line = with_args(base_line(on, key, fixtures), &["--config".into(), config]);
            cases.push(Case {
                what: format!("{key} from {:?} on {on:?}, {value:?}", Source::File),
                args: line,
                env: vec![],
            });
        }
    }
    cases
}

/// What a run printed: stdout and stderr together, and whether it was
/// still running (its value accepted) when it was stopped.
struct Printed {
    text: String,
    accepted: bool,
}

fn run(case: &Case) -> Printed {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        command.env_remove(var);
    }
    let mut child: Child = command
        .args(&case.args)
        .envs(case.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both pipes are drained while the process runs, so that a chatty one never blocks on a full pipe.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + ACCEPTED_RUNS_FOR;
    let accepted = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            break true;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = [out.join().unwrap(), err.join().unwrap()].map(|b| String::from_utf8_lossy(&b).into_owned()).join("\n");
    Printed { text, accepted }
}

/// Runs every case, a few at a time (each accepted one takes
/// [`ACCEPTED_RUNS_FOR`]); returns those whose output holds the mark.
fn echoed(cases: Vec<Case>) -> (Vec<String>, usize) {
    let queue = Mutex::new(cases.into_iter());
    let found = Mutex::new((Vec::new(), 0));
    std::thread::scope(|s| {
        for _ in 0..6 {
            s.spawn(|| {
                loop {
                    let Some(case) = queue.lock().unwrap().next() else { break };
                    let printed = run(&case);
                    let mut found = found.lock().unwrap();
                    found.1 += usize::from(printed.accepted);
                    if printed.text.contains(MARK) {
                        found.0.push(format!("{} ({:?} {:?}):\n{}", case.what, case.args, case.env, printed.text));
                    }
                }
            });
        }
    });
    found.into_inner().unwrap()
}

#[test]
fn no_setting_echoes_a_value_from_its_flag_env_var_or_config_key() {
    let fixtures = Fixtures::new();
    let cases = cases(&fixtures);
    let total = cases.len();
    // Every setting of the list is given from each of its sources (a guard on the case maker).
    assert!(total >= 2 * (2 * FLAGS.len() + Layer::TOP_KEYS.len() + Layer::WORKER_KEYS.len()), "{total} runs");
    let (echoes, accepted) = echoed(cases);
    assert!(echoes.is_empty(), "{} of {total} runs echo a value:\n\n{}", echoes.len(), echoes.join("\n\n"));
    // Most values are refused; the few a setting takes (a token) must be few, or the values test nothing.
    assert!(accepted * 4 < total, "{accepted} of {total} runs accepted their value");
    eprintln!("{total} runs, {accepted} of them accepted their value and were stopped");
    let _ = std::fs::remove_dir_all(&fixtures.dir);
}

/// The flags and arguments outside the settings' list (a command's own:
/// `send`'s, `bench`'s, `stats`', the global `--log-format`), each given
/// a value it refuses; clap refuses most of them, and its message must
/// name the flag alone.
#[test]
fn no_command_flag_echoes_a_value_it_refused() {
    let fixtures = Fixtures::new();
    let send = |extra: &[&str]| -> Vec<String> {
        let target = format!("http://127.0.0.1:{}/webhooks/gh", free_port());
        let mut line: Vec<String> = ["send", &target, "--config", &fixtures.path("send.toml")].map(String::from).into();
        line.extend(extra.iter().map(|s| s.to_string()));
        line
    };
    let payload = fixtures.path("payload.json");
    let value = VALUES[0];
    let control = "MARKER4\ninjected";
    let line = |args: &[&str]| -> Vec<String> { args.iter().map(|s| s.to_string()).collect() };
    let case = |args: Vec<String>, env: &[(&str, &str)]| {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Case { what: format!("{args:?} {env:?}"), args, env }
    };
    let cases = vec![
        case(send(&["--provider", value, "--event", "push", "--file", &payload]), &[]),
        case(send(&["--provider", "gh", "--event", "push", "--file", value]), &[]),
        case(send(&["--provider", "gh", "--event", "push", "--file", &payload, "--timeout", value]), &[]),
        case(send(&["--provider", "gh", "--event", control, "--file", &payload]), &[]),
        case(send(&["--provider", "gh", "--event", "push", "--file", &payload, "--delivery-id", control]), &[]),
        case(line(&["bench", "--duration", value]), &[]),
        case(line(&["stats", "--progress-every", value]), &[]),
        case(line(&["serve", "--log-format", value]), &[]),
        case(line(&["serve"]), &[("IDEMGATE_LOG_FORMAT", value)]),
        case(line(&["serve", "--listen", "127.0.0.1:1", value]), &[]),
        case(line(&["serve", &format!("--no-such-flag={value}")]), &[]),
        case(line(&["healthcheck", "--http", value]), &[]),
    ];
    let total = cases.len();
    let (echoes, accepted) = echoed(cases);
    assert!(echoes.is_empty(), "{} of {total} runs echo a value:\n\n{}", echoes.len(), echoes.join("\n\n"));
    assert_eq!(accepted, 0, "every one of these values is refused");
    let _ = std::fs::remove_dir_all(&fixtures.dir);
}

/// `idemgate send` to a URL where nothing listens, with a password and a
/// query token: exit 2, and the URL named as every printed URL is.
#[test]
fn send_names_a_refused_url_without_its_userinfo_or_query() {
    let fixtures = Fixtures::new();
    let closed = free_port();
    let url = format!("http://user:s3cretMARKER@127.0.0.1:{closed}/webhooks/gh?token=MARKER2");
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["send", &url, "--provider", "gh", "--event", "push", "--config", &fixtures.path("send.toml")])
        .args(["--file", &fixtures.path("payload.json")])
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stdout.contains(MARK) && !stderr.contains(MARK), "{stdout}\n{stderr}");
    let shown = format!("http://***@127.0.0.1:{closed}/webhooks/***?token=***: cannot connect");
    assert!(stderr.contains(&shown), "{stderr}");
    let _ = std::fs::remove_dir_all(Path::new(&fixtures.dir));
}
