//! Every setting, once: its name (the flag without dashes, the file's key)
//! and, for the file, the TOML type it takes. From that one list come the
//! [`Layer`] (one source's settings, each an optional [`Given`] raw value)
//! and the file's tables ([`FileTables`], [`WorkerTable`]). The layers are
//! merged once, field by field ([`Layer::over`]); the commands then parse
//! the winning values with their origin at hand.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::origin::{ConfigError, Given, Origin, Raw};
use crate::config_values::StringOrList;

/// The list of settings: top-level file keys, `[worker]` keys, and the
/// settings only flags and env vars give. Each name is the clap arg id of
/// its flag, so the binary fills a [`Layer`] by id.
macro_rules! settings {
    (
        top { $($top:ident: $top_ty:ty,)* }
        worker { $($w:ident: $w_ty:ty,)* }
        flags_only { $($f:ident,)* }
    ) => {
        /// One source's settings (the file, the environment or the flags),
        /// or all of them merged; `None`: this source does not set it.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        #[allow(missing_docs)] // each field is the setting of the same name (docs/reference.md)
        pub struct Layer {
            $(pub $top: Option<Given<Raw>>,)*
            $(pub $w: Option<Given<Raw>>,)*
            $(pub $f: Option<Given<Raw>>,)*
        }

        impl Layer {
            /// The keys of the file's `[worker]` table.
            pub const WORKER_KEYS: &'static [&'static str] = &[$(stringify!($w)),*];

            /// The setting named `name`, if this layer gives it (`None` too for no such setting).
            pub fn get(&self, name: &str) -> Option<&Given<Raw>> {
                match name {
                    $(stringify!($top) => self.$top.as_ref(),)*
                    $(stringify!($w) => self.$w.as_ref(),)*
                    $(stringify!($f) => self.$f.as_ref(),)*
                    _ => None,
                }
            }

            /// Every setting's value from `self`, else from `lower`.
            pub fn over(self, lower: Layer) -> Layer {
                Layer {
                    $($top: self.$top.or(lower.$top),)*
                    $($w: self.$w.or(lower.$w),)*
                    $($f: self.$f.or(lower.$f),)*
                }
            }

            /// Sets the setting named `name`; `false` when there is none of that name.
            pub fn set(&mut self, name: &str, value: Given<Raw>) -> bool {
                let slot = match name {
                    $(stringify!($top) => &mut self.$top,)*
                    $(stringify!($w) => &mut self.$w,)*
                    $(stringify!($f) => &mut self.$f,)*
                    _ => return false,
                };
                *slot = Some(value);
                true
            }

            /// The file's layer: each key given, with its line.
            pub(super) fn of_file<P>(file: &FileTables<P>, line_of: impl Fn(usize) -> usize) -> Layer {
                fn given<T: IntoRaw + Clone>(
                    value: &Option<Spanned<T>>,
                    key: &'static str,
                    table: Option<&'static str>,
                    line_of: &impl Fn(usize) -> usize,
                ) -> Option<Given<Raw>> {
                    value.as_ref().map(|v| {
                        let origin = Origin::File { key, table, line: line_of(v.span().start) };
                        Given::new(v.get_ref().clone().into_raw(), origin)
                    })
                }
                Layer {
                    $($top: given(&file.$top, stringify!($top), None, &line_of),)*
                    $($w: given(&file.worker.$w, stringify!($w), Some("worker"), &line_of),)*
                    ..Layer::default()
                }
            }
        }

        /// The TOML file (docs/reference.md#config-file), its `[[provider]]`
        /// tables of type `P` (`config::FileConfig` names the file with
        /// them: this list sits below the providers). Unknown keys are
        /// errors, so typos show; each value keeps its place for the errors.
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct FileTables<P> {
            $($top: Option<Spanned<$top_ty>>,)*
            #[serde(default = "Vec::new")]
            pub(super) provider: Vec<P>,
            #[serde(default)]
            worker: WorkerTable,
            /// Where each line starts (byte offsets), for the errors.
            #[serde(skip)]
            pub(super) line_starts: Vec<usize>,
            /// The file's text, to find the line of a provider kind's key
            /// (read after the file, by the kind).
            #[serde(skip)]
            pub(super) text: String,
        }

        impl<P> Default for FileTables<P> {
            fn default() -> Self {
                Self { $($top: None,)* provider: Vec::new(), worker: WorkerTable::default(), line_starts: Vec::new(), text: String::new() }
            }
        }

        /// The file's `[worker]` table: `idemgate worker`'s own settings,
        /// under the flags' names without dashes.
        #[derive(Debug, Default, Clone, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct WorkerTable {
            $($w: Option<Spanned<$w_ty>>,)*
        }
    };
}

settings! {
    top {
        listen: String,
        redis_url: String,
        redis_cluster_nodes: StringOrList,
        namespace: String,
        allowed_repos: StringOrList,
        delivery_ttl: String,
        logical_ttl: String,
        run_retention: String,
        api_token: String,
        redis_timeout: String,
        min_replicas_ack: u32,
        min_replicas_timeout: String,
        max_body: usize,
        request_timeout: String,
        keep_payload: bool,
        header_timeout: String,
        body_budget: usize,
        allow_unauthenticated_api: bool,
        allowed_hosts: StringOrList,
        allow_eviction: bool,
        redis_tls_ca: PathBuf,
        redis_tls_cert: PathBuf,
        redis_tls_key: PathBuf,
        redis_password_file: PathBuf,
        redis_sentinel_nodes: StringOrList,
        redis_sentinel_master: String,
    }
    worker {
        group: String,
        concurrency: usize,
        max_attempts: u32,
        timeout: String,
        lease: String,
        retry_schedule: StringOrList,
        backoff: String,
        max_backoff: String,
        trim_interval: String,
        block: String,
        deliver: String,
        deliver_secret_file: PathBuf,
        deliver_ca: PathBuf,
        breaker_failures: u32,
        breaker_cooldown: String,
        breaker_max_cooldown: String,
        keep_done_payloads: bool,
        metrics_listen: String,
        heartbeat_interval: String,
        command_user: String,
        max_processes: u32,
    }
    flags_only {
        config,
        consumer,
    }
}

/// A file value as a layer holds it.
trait IntoRaw {
    fn into_raw(self) -> Raw;
}

impl IntoRaw for String {
    fn into_raw(self) -> Raw {
        Raw::Text(self)
    }
}

impl IntoRaw for PathBuf {
    fn into_raw(self) -> Raw {
        // TOML text is UTF-8, so the path is too.
        Raw::Text(self.to_string_lossy().into_owned())
    }
}

impl IntoRaw for u32 {
    fn into_raw(self) -> Raw {
        Raw::Text(self.to_string())
    }
}

impl IntoRaw for usize {
    fn into_raw(self) -> Raw {
        Raw::Text(self.to_string())
    }
}

impl IntoRaw for bool {
    fn into_raw(self) -> Raw {
        Raw::Bool(self)
    }
}

impl IntoRaw for StringOrList {
    fn into_raw(self) -> Raw {
        Raw::List(self.into_vec())
    }
}

impl Layer {
    /// A layer of flags as a library caller (or a test) gives them:
    /// `(name, value)` pairs, each as if from flag `--name` (the name with
    /// dashes); a list is one comma-separated value, a switch `true` or
    /// `false`. An unknown name is an error.
    pub fn flags<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Layer, ConfigError> {
        let mut layer = Layer::default();
        for (name, value) in pairs {
            let origin = Origin::Flag(format!("--{}", name.replace('_', "-")));
            if !layer.set(name, Given::new(Raw::Text(value.to_owned()), origin)) {
                return Err(ConfigError::new(format!("there is no setting {name:?}")));
            }
        }
        Ok(layer)
    }
}
