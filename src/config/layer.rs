//! What the one list of settings ([`super::settings`]) is made into: the
//! `settings!` macro, which generates from it the `Layer` (one source's
//! settings, each an optional `Given` raw value), the file's tables
//! (`FileTables`, `WorkerTable`) and `FLAGS`; [`Flag`], how a setting's
//! flag shows; and how a file value becomes a [`Raw`] ([`IntoRaw`]).

use std::path::PathBuf;

use super::origin::Raw;
use crate::config_values::StringOrList;

/// How a setting's flag shows on the command line; the binary makes a
/// `clap::Arg` of each (its id is [`Flag::name`], its long flag the name
/// with dashes unless [`Flag::long`] says otherwise).
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// The setting's name: the clap id, the file's key.
    pub name: &'static str,
    /// The long flag without its dashes, where it is not the name with dashes.
    pub long: Option<&'static str>,
    /// The environment variable that gives the setting.
    pub env: &'static str,
    /// The placeholder of the value in `--help`.
    pub value_name: &'static str,
    /// The help text.
    pub help: &'static str,
    /// The default `--help` shows after the text (`[default: …]`); defaults
    /// that are not one value are written into the text.
    pub default: Option<fn() -> String>,
    /// What the flag takes.
    pub form: Form,
    /// The commands that take the flag.
    pub on: &'static [Command],
    /// The help a command shows instead of [`Flag::help`], where the
    /// setting means more to it (`worker`'s `--run-retention`).
    pub help_on: &'static [(Command, &'static str)],
}

impl Flag {
    /// The long flag, without its dashes.
    pub fn long_name(&self) -> String {
        self.long.map_or_else(|| self.name.replace('_', "-"), str::to_owned)
    }

    /// What every entry of the list starts from.
    pub(super) const BASE: Flag = Flag {
        name: "",
        long: None,
        env: "",
        value_name: "",
        help: "",
        default: None,
        form: Form::Value,
        on: STORE,
        help_on: &[],
    };
}

/// What a flag takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// One value.
    Value,
    /// Several values: the flag repeated, or commas.
    List,
    /// An on/off switch (no value on the command line; the env var takes true/false).
    Switch,
    /// A value, or the flag alone for `true` (a setting that was a
    /// [`Form::Switch`]: its old spelling keeps working).
    ValueOrSwitch,
}

/// The commands that take settings, as [`Flag::on`] names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `serve`.
    Serve,
    /// `worker`.
    Worker,
    /// The operator commands: `healthcheck`, `inspect`, `stats`, `key`, `dead`, `runs`.
    Ops,
    /// `send` and `sign`: only the file, for its providers.
    Send,
    /// `bench`: only its Redis (never the file's, which `bench` refuses) and the file.
    Bench,
}

/// The commands that reach the store: they take its settings.
pub const STORE: &[Command] = &[Command::Serve, Command::Worker, Command::Ops];

/// The list of settings, each `name: TOML type [table] { flag }`: the
/// table is `top` or `worker` for a key of the file (`none`: no key), the
/// flag is absent for a key with no flag. The order is the order `--help`
/// shows the flags in. A tt-muncher sorts the entries into the file's two
/// tables, then the rest is generated from the whole list.
macro_rules! settings {
    (@split [$($all:tt)*] [$($top:tt)*] [$($w:tt)*]) => {
        settings!(@emit [$($all)*] [$($top)*] [$($w)*]);
    };
    (@split [$($all:tt)*] [$($top:tt)*] [$($w:tt)*]
        $name:ident: $ty:ty [top] $({ $($flag:tt)* })?, $($rest:tt)*) => {
        settings!(@split [$($all)* ($name $({ $($flag)* })?)] [$($top)* $name: $ty,] [$($w)*] $($rest)*);
    };
    (@split [$($all:tt)*] [$($top:tt)*] [$($w:tt)*]
        $name:ident: $ty:ty [worker] $({ $($flag:tt)* })?, $($rest:tt)*) => {
        settings!(@split [$($all)* ($name $({ $($flag)* })?)] [$($top)*] [$($w)* $name: $ty,] $($rest)*);
    };
    (@split [$($all:tt)*] [$($top:tt)*] [$($w:tt)*]
        $name:ident [none] $({ $($flag:tt)* })?, $($rest:tt)*) => {
        settings!(@split [$($all)* ($name $({ $($flag)* })?)] [$($top)*] [$($w)*] $($rest)*);
    };
    (@emit [$(($name:ident $({ $($flag:tt)* })?))*] [$($top:ident: $top_ty:ty,)*] [$($w:ident: $w_ty:ty,)*]) => {
        /// One source's settings (the file, the environment or the flags),
        /// or all of them merged; `None`: this source does not set it.
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        #[allow(missing_docs)] // each field is the setting of the same name (docs/reference.md)
        pub struct Layer {
            $(pub $name: Option<Given<Raw>>,)*
        }

        /// Every flag of a setting, in the order `--help` shows them.
        pub const FLAGS: &[Flag] = &[$($(Flag { name: stringify!($name), $($flag)* ..Flag::BASE },)?)*];

        impl Layer {
            /// The keys of the file's top level (besides its `[[provider]]`
            /// and `[worker]` tables), in the list's order.
            pub const TOP_KEYS: &'static [&'static str] = &[$(stringify!($top)),*];

            /// The keys of the file's `[worker]` table.
            pub const WORKER_KEYS: &'static [&'static str] = &[$(stringify!($w)),*];

            /// The setting named `name`, if this layer gives it (`None` too for no such setting).
            pub fn get(&self, name: &str) -> Option<&Given<Raw>> {
                match name {
                    $(stringify!($name) => self.$name.as_ref(),)*
                    _ => None,
                }
            }

            /// Every setting's value from `self`, else from `lower`.
            pub fn over(self, lower: Layer) -> Layer {
                Layer { $($name: self.$name.or(lower.$name),)* }
            }

            /// Sets the setting named `name`; `false` when there is none of that name.
            pub fn set(&mut self, name: &str, value: Given<Raw>) -> bool {
                let slot = match name {
                    $(stringify!($name) => &mut self.$name,)*
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
            /// The `[destinations.NAME]` tables, read by `super::destinations`.
            #[serde(default)]
            pub(super) destinations: toml::Table,
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
                Self { $($top: None,)* provider: Vec::new(), worker: WorkerTable::default(), destinations: toml::Table::new(), line_starts: Vec::new(), text: String::new() }
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
    ($($entries:tt)*) => {
        settings!(@split [] [] [] $($entries)*);
    };
}

pub(super) use settings;

/// A file value as a layer holds it: TOML's own type, never turned back into text.
pub(super) trait IntoRaw {
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
        Raw::Number(self.into())
    }
}

impl IntoRaw for usize {
    fn into_raw(self) -> Raw {
        Raw::Number(self as u64)
    }
}

impl IntoRaw for bool {
    fn into_raw(self) -> Raw {
        Raw::Bool(self)
    }
}

impl IntoRaw for crate::config_values::SwitchOrText {
    fn into_raw(self) -> Raw {
        match self {
            crate::config_values::SwitchOrText::Switch(b) => Raw::Bool(b),
            crate::config_values::SwitchOrText::Text(t) => Raw::Text(t),
        }
    }
}

impl IntoRaw for StringOrList {
    fn into_raw(self) -> Raw {
        Raw::List(self.into_vec())
    }
}
