//! The config file's `[destinations.NAME]` tables
//! (docs/destinations.md#several-destinations): a destination is a named
//! consumer group with its handler (`url` and `secret_file`, or
//! `command`), its [`RunFilter`], its pace (`rate`, `burst`) and any
//! `[worker]` key for itself alone. `idemgate worker --destination NAME`
//! runs one: the table becomes a layer of settings between the environment
//! and the file's `[worker]` table ([`Destination::layer`]), so flags and
//! env still win and `[worker]` gives what the table leaves out.
//!
//! Every table is checked when any destination starts (a typo shows on the
//! first worker to start, whichever it runs); the secret file only of the
//! destination started (the others' may live on other hosts). No error
//! shows a value from the file.

use std::path::PathBuf;
use std::time::Duration;

use super::origin::{ConfigError, Given, Origin, Raw};
use super::providers::FileConfig;
use super::settings::Layer;
use crate::destination_filter::RunFilter;

/// The table's own keys; any other must be a `[worker]` key.
const OWN_KEYS: [&str; 6] = ["url", "command", "secret_file", "filter", "rate", "burst"];

/// `[worker]` keys a destination's table names otherwise: the group is the
/// destination's name, `url` and `secret_file` are its `deliver` and
/// `deliver_secret_file`.
const RENAMED: [(&str, &str); 3] =
    [("group", "the table's name"), ("deliver", "url"), ("deliver_secret_file", "secret_file")];

pub use crate::worker::pace::Pace;

/// One `[destinations.NAME]` table, checked.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The name: its consumer group.
    pub name: String,
    /// Which runs it takes.
    pub filter: RunFilter,
    /// Its pace, if it has one.
    pub pace: Option<Pace>,
    /// `command = [...]`: the argv of its handler, else it delivers to `url`.
    pub command: Option<Given<Vec<String>>>,
    /// Its settings as a layer: the group, `deliver`, `deliver_secret_file`
    /// and its `[worker]` keys, each with its line.
    pub layer: Layer,
    /// Where `secret_file` was given, to check the file it names.
    secret_file: Option<Given<PathBuf>>,
}

/// Where a key of a destination's table sits, for its errors.
struct Table<'a> {
    file: &'a FileConfig,
    /// `destinations.NAME`, leaked: an [`Origin`] names its table for the
    /// life of the process, and a worker reads its file's few tables once.
    name: &'static str,
    /// The byte offset of the table's header, when it has one of its own.
    header: Option<usize>,
}

impl Table<'_> {
    fn origin(&self, key: &'static str) -> Origin {
        let line = self.header.and_then(|h| self.file.line_of_key(h, key)).or_else(|| self.header_line()).unwrap_or(0);
        Origin::File { key, table: Some(self.name), line }
    }

    fn header_line(&self) -> Option<usize> {
        self.header.map(|h| self.file.text[..h].matches('\n').count() + 1)
    }

    fn fail(&self, key: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.origin(key), message)
    }
}

/// A destination's name: it becomes a consumer group and a metric label.
fn check_name(name: &str) -> Result<(), &'static str> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok { Ok(()) } else { Err("a destination's name is 1 to 64 letters, digits, `-`, `_` or `.`") }
}

impl FileConfig {
    /// The names of the file's `[destinations.NAME]` tables.
    pub fn destination_names(&self) -> impl Iterator<Item = &str> {
        self.destinations.keys().map(String::as_str)
    }

    /// Every `[destinations.NAME]` table of the file, checked.
    pub fn destinations(&self) -> Result<Vec<Destination>, ConfigError> {
        let mut out = Vec::with_capacity(self.destinations.len());
        for (name, value) in &self.destinations {
            let header = self.destination_header(name);
            if let Err(why) = check_name(name) {
                let line = header.map(|h| self.text[..h].matches('\n').count() + 1);
                return Err(ConfigError::new(match line {
                    Some(line) => format!("config file line {line}: {why}"),
                    None => format!("the config file's [destinations] table: {why}"),
                }));
            }
            let table = Table { file: self, name: Box::leak(format!("destinations.{name}").into_boxed_str()), header };
            let toml::Value::Table(keys) = value else {
                return Err(ConfigError::new(format!("the config file's `{}`: expected a table", table.name)));
            };
            out.push(Destination::read(name, keys, &table)?);
        }
        Ok(out)
    }

    /// The byte offset of `[destinations.NAME]`'s header, if the file writes one.
    fn destination_header(&self, name: &str) -> Option<usize> {
        let headers = [format!("[destinations.{name}]"), format!("[destinations.\"{name}\"]")];
        let mut offset = 0;
        for line in self.text.split_inclusive('\n') {
            let bare = line.split('#').next().unwrap_or("").trim();
            if headers.iter().any(|h| h == bare) {
                return Some(offset);
            }
            offset += line.len();
        }
        None
    }

    /// The destination named `name`, checked with all the others, its
    /// secret file read; `given` is where `--destination` came from.
    pub fn destination(&self, given: &Given<String>) -> Result<Destination, ConfigError> {
        let all = self.destinations()?;
        let Some(found) = all.into_iter().find(|d| d.name == given.value) else {
            return Err(given.fail(if self.destinations.is_empty() {
                "the config file declares no destination ([destinations.NAME] tables)".to_owned()
            } else {
                format!(
                    "no such destination in the config file (it declares: {})",
                    self.destinations.keys().filter(|n| check_name(n).is_ok()).cloned().collect::<Vec<_>>().join(", ")
                )
            }));
        };
        if let Some(file) = &found.secret_file {
            crate::worker::deliver::read_secrets(&file.value).map_err(|e| {
                let message = e.to_string();
                file.fail(message.strip_prefix("--deliver-secret-file: ").unwrap_or(&message))
            })?;
        }
        Ok(found)
    }
}

impl Destination {
    fn read(name: &str, keys: &toml::Table, t: &Table<'_>) -> Result<Self, ConfigError> {
        let mut layer = Layer::default();
        let mut filter = RunFilter::default();
        let (mut rate, mut burst) = (None, None);
        let (mut url, mut command, mut secret_file) = (None, None, None);
        for (key, value) in keys {
            if let Some(own) = OWN_KEYS.iter().find(|k| **k == key) {
                let origin = t.origin(own);
                match *own {
                    "url" => url = Some(Given::new(text(value, t, own)?, origin)),
                    "secret_file" => secret_file = Some(Given::new(PathBuf::from(text(value, t, own)?), origin)),
                    "command" => command = Some(Given::new(argv(value, t)?, origin)),
                    "filter" => {
                        let json = serde_json::to_value(value).map_err(|_| t.fail(own, "not a filter"))?;
                        filter = RunFilter::compile(&json).map_err(|e| t.fail(own, e.to_string()))?;
                    }
                    "rate" => rate = Some(parse_rate(&text(value, t, own)?).map_err(|why| t.fail(own, why))?),
                    _ => {
                        burst = Some(
                            value
                                .as_integer()
                                .filter(|n| *n > 0)
                                .ok_or_else(|| t.fail(own, "expected a whole number more than 0"))?,
                        )
                    }
                }
                continue;
            }
            if let Some((_, instead)) = RENAMED.iter().find(|(k, _)| k == key) {
                let origin = t.origin(Layer::WORKER_KEYS.iter().find(|k| **k == key).expect("a worker key"));
                return Err(ConfigError::at(origin, format!("a destination's table writes this as {instead}")));
            }
            let Some(worker_key) = Layer::WORKER_KEYS.iter().find(|k| **k == key) else {
                // The key is a name, not a value, but shown only when it looks like one.
                let plain = key.len() <= 64 && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                let shown = if plain { format!("`{key}`") } else { "a key".to_owned() };
                let line = t.header_line().map_or_else(String::new, |l| format!("config file line {l}, "));
                return Err(ConfigError::new(format!(
                    "{line}`[{}]`: unknown key {shown} (expected url or command, secret_file, filter, rate, burst, or a [worker] key)",
                    t.name
                )));
            };
            let origin = t.origin(worker_key);
            let raw = raw(value).map_err(|why| ConfigError::at(origin.clone(), why))?;
            layer.set(worker_key, Given::new(raw, origin));
        }
        let group = Given::new(
            Raw::Text(name.to_owned()),
            Origin::File { key: "group", table: Some(t.name), line: t.header_line().unwrap_or(0) },
        );
        layer.set("group", group);
        match (&url, &command) {
            (Some(_), Some(c)) => return Err(c.fail("give either url or command, not both")),
            (None, None) => {
                let line = t.header_line().map_or_else(String::new, |l| format!("config file line {l}, "));
                return Err(ConfigError::new(format!("{line}`[{}]`: give url (with secret_file) or command", t.name)));
            }
            (Some(url), None) => {
                layer.set("deliver", Given::new(Raw::Text(url.value.clone()), url.origin.clone()));
                let Some(file) = &secret_file else {
                    return Err(url.fail("needs secret_file (Standard Webhooks secrets, one a line)"));
                };
                layer.set(
                    "deliver_secret_file",
                    Given::new(Raw::Text(file.value.to_string_lossy().into_owned()), file.origin.clone()),
                );
            }
            (None, Some(_)) => {
                if let Some(file) = &secret_file {
                    return Err(file.fail("signs requests to url: a command destination takes none"));
                }
            }
        }
        let pace = match (rate, burst) {
            (Some((count, per)), burst) => {
                let per_second = if per == Duration::from_secs(60) { count.div_ceil(60) } else { count };
                let burst = burst.map_or(Ok(per_second.max(1)), |b| {
                    u32::try_from(b).map_err(|_| t.fail("burst", "too large a number"))
                })?;
                Some(Pace { count, per, burst })
            }
            (None, Some(_)) => return Err(t.fail("burst", "goes with rate")),
            (None, None) => None,
        };
        Ok(Destination { name: name.to_owned(), filter, pace, command, layer, secret_file })
    }
}

/// `"N/s"` or `"N/min"`, N a whole number more than 0.
fn parse_rate(text: &str) -> Result<(u32, Duration), &'static str> {
    const SHAPE: &str = "expected N/s or N/min (N a whole number more than 0)";
    let (n, unit) = text.trim().split_once('/').ok_or(SHAPE)?;
    let n: u32 = n.trim().parse().ok().filter(|n| *n > 0).ok_or(SHAPE)?;
    let per = match unit.trim() {
        "s" => Duration::from_secs(1),
        "min" => Duration::from_secs(60),
        _ => return Err(SHAPE),
    };
    Ok((n, per))
}

fn text(value: &toml::Value, t: &Table<'_>, key: &'static str) -> Result<String, ConfigError> {
    match value {
        toml::Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        toml::Value::String(_) => Err(t.fail(key, "must not be empty")),
        _ => Err(t.fail(key, "expected a string")),
    }
}

fn argv(value: &toml::Value, t: &Table<'_>) -> Result<Vec<String>, ConfigError> {
    let items = value.as_array().ok_or_else(|| t.fail("command", "expected a list: [\"program\", \"arg\", …]"))?;
    let argv: Vec<String> = items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect();
    if argv.len() != items.len() || argv.first().is_none_or(|p| p.is_empty()) {
        return Err(t.fail("command", "expected a non-empty list of strings, the program first"));
    }
    Ok(argv)
}

/// A `[worker]` key's value as the file's layer holds it.
fn raw(value: &toml::Value) -> Result<Raw, &'static str> {
    Ok(match value {
        toml::Value::String(s) => Raw::Text(s.clone()),
        toml::Value::Boolean(b) => Raw::Bool(*b),
        toml::Value::Integer(n) => Raw::Number(u64::try_from(*n).map_err(|_| "must not be negative")?),
        toml::Value::Array(items) => Raw::List(
            items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<_>>()
                .ok_or("expected a list of strings")?,
        ),
        _ => return Err("expected a string, a number, true or false, or a list of strings"),
    })
}

/// The worker's settings for `--destination NAME` (`given`): the
/// destination's table between the flags and env (`above_file`) and the
/// file's own layer. The destination's name, url and secret file may not
/// be given again on the line or in the environment.
pub fn destination_layer(
    given: &Given<String>,
    above_file: &Layer,
    file: &FileConfig,
) -> Result<(Destination, Layer), ConfigError> {
    if let Some(clash) =
        [&above_file.group, &above_file.deliver, &above_file.deliver_secret_file].into_iter().flatten().next()
    {
        return Err(clash.fail(format!("the destination's table gives this: drop it, or drop {}", given.origin)));
    }
    let destination = file.destination(given)?;
    let mut layer = above_file.clone().over(destination.layer.clone()).over(file.layer());
    if file.destination_names().count() > 1 && layer.keep_done_payloads.is_none() {
        // Destinations share one run record: the first to finish must not
        // take the payload the others, maybe not started yet, still filter
        // on and deliver. The default's, so below every layer: a value
        // given anywhere (flag, env, the table, `[worker]`) wins.
        layer.set("keep_done_payloads", Given::new(Raw::Bool(true), Origin::Default("keep_done_payloads")));
    }
    Ok((destination, layer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::worker::{Mode, WorkerSetup};

    fn file(text: &str) -> FileConfig {
        FileConfig::parse(text).unwrap()
    }

    fn flag(name: &str) -> Given<String> {
        Given::new(name.to_owned(), Origin::Flag("--destination".into()))
    }

    const THREE: &str = r#"
[worker]
concurrency = 2
timeout = "9s"

[destinations.ci]
command = ["./handle", "--flag"]
filter = { repos = ["acme/*"], actions = ["pull_request.*", "push"] }
rate = "50/s"
concurrency = 16

[destinations.notify]
command = ["notify"]
rate = "120/min"
burst = 5
max_attempts = 3

[destinations.notify.filter.payload]
"sender.type" = { "$neq" = "Bot" }
"$or" = [{ action = "closed" }, { "pull_request.merged" = true }]

[destinations.audit]
command = ["audit"]
keep_done_payloads = false
"#;

    #[test]
    fn a_destinations_max_attempts_replaces_the_worker_tables_schedule() {
        let f = file(&THREE.replace("timeout = \"9s\"", "timeout = \"9s\"\nretry_schedule = [\"1s\"]"));
        let (notify, layer) = destination_layer(&flag("notify"), &Layer::default(), &f).unwrap();
        let s = WorkerSetup::resolve(&layer, &notify.command.unwrap().value).unwrap();
        assert_eq!((s.config.max_attempts, s.config.retry_schedule), (3, None));
        let (ci, layer) = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap();
        let s = WorkerSetup::resolve(&layer, &ci.command.unwrap().value).unwrap();
        assert_eq!((s.config.max_attempts, s.config.retry_schedule), (2, Some(vec![Duration::from_secs(1)])));
        // The shorthand's pieces still combine across layers.
        let f = file(&THREE.replace("timeout = \"9s\"", "timeout = \"9s\"\nbackoff = \"10s\"\nmax_backoff = \"5m\""));
        let (notify, layer) = destination_layer(&flag("notify"), &Layer::default(), &f).unwrap();
        let c = WorkerSetup::resolve(&layer, &notify.command.unwrap().value).unwrap().config;
        assert_eq!((c.max_attempts, c.backoff, c.max_backoff), (3, Duration::from_secs(10), Duration::from_secs(300)));
    }

    #[test]
    fn several_destinations_keep_done_payloads_unless_the_worker_table_says_otherwise() {
        let f = file(&THREE.replace("timeout = \"9s\"", "timeout = \"9s\"\nkeep_done_payloads = false"));
        let (ci, layer) = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap();
        let s = WorkerSetup::resolve(&layer, ci.command.as_ref().map_or(&[][..], |c| &c.value)).unwrap();
        assert!(s.config.keep_done_payloads.is_none(), "[worker] keep_done_payloads = false is the operator's");
        let f = file(&THREE.replace("timeout = \"9s\"", "timeout = \"9s\"\nkeep_done_payloads = \"2h\""));
        let (ci, layer) = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap();
        let s = WorkerSetup::resolve(&layer, ci.command.as_ref().map_or(&[][..], |c| &c.value)).unwrap();
        assert_eq!(s.config.keep_done_payloads, Some(crate::units::Lifetime(Some(Duration::from_secs(7200)))));
    }

    #[test]
    fn each_destination_takes_its_table_then_the_worker_table() {
        let f = file(THREE);
        let all = f.destinations().unwrap();
        let names: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["audit", "ci", "notify"]);
        let (ci, layer) = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap();
        let s = WorkerSetup::resolve(&layer, ci.command.as_ref().map_or(&[][..], |c| &c.value)).unwrap();
        assert_eq!((s.config.group.as_str(), s.config.concurrency), ("ci", 16));
        assert_eq!(s.config.timeout, Duration::from_secs(9), "[worker] gives what the table leaves out");
        assert!(s.config.keep_done_payloads.is_some(), "several destinations keep a done run's payload for each other");
        assert!(matches!(&s.mode, Mode::Command(argv) if argv == &["./handle", "--flag"]));
        assert_eq!(ci.pace, Some(Pace { count: 50, per: Duration::from_secs(1), burst: 50 }));
        assert!(!ci.filter.reads_payload());
        let (notify, layer) = destination_layer(&flag("notify"), &Layer::default(), &f).unwrap();
        assert_eq!(notify.pace, Some(Pace { count: 120, per: Duration::from_secs(60), burst: 5 }));
        assert!(notify.filter.reads_payload());
        let s = WorkerSetup::resolve(&layer, &notify.command.unwrap().value).unwrap();
        assert_eq!((s.config.max_attempts, s.config.concurrency), (3, 2));
        let (audit, layer) = destination_layer(&flag("audit"), &Layer::default(), &f).unwrap();
        assert_eq!(audit.pace, None);
        assert!(
            WorkerSetup::resolve(&layer, &audit.command.unwrap().value).unwrap().config.keep_done_payloads.is_none()
        );
        // A flag still wins over the table.
        let flags = Layer::flags([("concurrency", "5")]).unwrap();
        let (_, layer) = destination_layer(&flag("ci"), &flags, &f).unwrap();
        assert_eq!(WorkerSetup::resolve(&layer, &["x".into()]).unwrap().config.concurrency, 5);
        // The table's group, url and secret file may not come again from a flag.
        let flags = Layer::flags([("group", "other")]).unwrap();
        let e = destination_layer(&flag("ci"), &flags, &f).unwrap_err().to_string();
        assert!(e.starts_with("--group: the destination's table gives this"), "{e}");
        let e = destination_layer(&flag("nope"), &Layer::default(), &f).unwrap_err().to_string();
        assert_eq!(e, "--destination: no such destination in the config file (it declares: audit, ci, notify)");
    }

    #[test]
    fn a_url_destination_delivers_with_its_secret_file() {
        let dir = std::env::temp_dir().join(format!("idemgate-dest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let secrets = dir.join("ci.secrets");
        std::fs::write(&secrets, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
        let text = format!(
            "[destinations.ci]\nurl = \"http://127.0.0.1:1/hooks\"\nsecret_file = \"{}\"\nbreaker_failures = 2\n",
            secrets.display()
        );
        let f = file(&text);
        let (d, layer) = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap();
        assert!(d.command.is_none());
        let s = WorkerSetup::resolve(&layer, &[]).unwrap();
        let Mode::Deliver(opts) = &s.mode else { panic!("{:?}", s.mode) };
        assert_eq!(
            (opts.url.as_str(), opts.secret_file.as_path(), opts.breaker.failures),
            ("http://127.0.0.1:1/hooks", secrets.as_path(), 2)
        );
        assert!(s.config.keep_done_payloads.is_none(), "one destination: the default");
        assert_eq!(
            s.config.concurrency,
            crate::worker::config::DEFAULT_DELIVER_CONCURRENCY,
            "a url takes --deliver's default"
        );
        std::fs::write(&secrets, "whsec_hunter2\n").unwrap();
        let e = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "config file line 3, `[destinations.ci] secret_file`: line 1 is not a Standard Webhooks secret"
            ),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        std::fs::remove_file(&secrets).unwrap();
        let e = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap_err().to_string();
        assert!(e.starts_with("config file line 3, `[destinations.ci] secret_file`: cannot read it"), "{e}");
        assert!(!e.contains("ci.secrets"), "the path is a value: {e}");
    }

    #[test]
    fn a_bad_table_names_the_destination_and_the_key_never_the_value() {
        for (text, want) in [
            (
                "[destinations.ci]\ncommand = [\"x\"]\nconcurency = 4\n",
                "config file line 1, `[destinations.ci]`: unknown key `concurency`",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\n\"sk_live_hunter2 x\" = 4\n",
                "config file line 1, `[destinations.ci]`: unknown key a key",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\nfilter = { repos = [\"hunter2\"] }\n",
                "config file line 3, `[destinations.ci] filter`: `filter.repos[0]`: is not ORG/REPO",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\n[destinations.ci.filter.payload]\n\"a.b\" = { \"$gt\" = [\"hunter2\"] }\n",
                "`[destinations.ci] filter`: `filter.payload.a.b.$gt`: expected a number or a string",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\nrate = \"hunter2/s\"\n",
                "config file line 3, `[destinations.ci] rate`: expected N/s or N/min",
            ),
            ("[destinations.ci]\ncommand = [\"x\"]\nrate = \"5/h\"\n", "`[destinations.ci] rate`: expected N/s"),
            (
                "[destinations.ci]\ncommand = [\"x\"]\nburst = 3\n",
                "config file line 3, `[destinations.ci] burst`: goes with rate",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\nrate = \"1/s\"\nburst = 0\n",
                "`[destinations.ci] burst`: expected a whole number more than 0",
            ),
            (
                "[destinations.ci]\nurl = \"http://hunter2/\"\n",
                "config file line 2, `[destinations.ci] url`: needs secret_file",
            ),
            (
                "[destinations.ci]\nurl = \"http://h/\"\ncommand = [\"x\"]\n",
                "config file line 3, `[destinations.ci] command`: give either url or command",
            ),
            (
                "[destinations.ci]\nconcurrency = 2\n",
                "config file line 1, `[destinations.ci]`: give url (with secret_file) or command",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\ndeliver = \"http://hunter2/\"\n",
                "config file line 3, `[destinations.ci] deliver`: a destination's table writes this as url",
            ),
            (
                "[destinations.ci]\ncommand = [\"x\"]\ntimeout = -1\n",
                "config file line 3, `[destinations.ci] timeout`: must not be negative",
            ),
            ("[destinations.\"c i\"]\ncommand = [\"x\"]\n", "config file line 1: a destination's name is"),
        ] {
            let e = file(text).destinations().map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}:\n{e}");
            assert!(!e.contains("hunter2"), "a value was echoed: {e}");
        }
        // A [worker] key with a bad value fails when the worker reads it, named by its line.
        let f = file("[destinations.ci]\ncommand = [\"x\"]\ntimeout = \"hunter2\"\n");
        let (_, layer) = destination_layer(&flag("ci"), &Layer::default(), &f).unwrap();
        let e = WorkerSetup::resolve(&layer, &["x".into()]).unwrap_err().to_string();
        assert!(
            e.starts_with("config file line 3, `[destinations.ci] timeout`: not a duration") && !e.contains("hunter2"),
            "{e}"
        );
    }
}
