//! The `idemgate` binary's command line (part of the binary, not of the
//! library): the clap flags of each command, which map onto the library's
//! plain option structs, and the printing and exit codes of each command.
//!
//! - this module: the settings' flags, made from the library's list, and
//!   the layers they give.
//! - [`serve`]: `serve` and `window`.
//! - [`ops`]: `healthcheck`, `inspect`, `stats`, `key` and `dead`.
//! - [`destinations`]: `destinations keys`.
//! - [`worker`]: the `worker` command.
//! - [`bench`]: the `bench` command.
//! - [`send`]: `send` and `sign`.

pub mod bench;
pub mod destinations;
pub mod logging;
pub mod ops;
pub mod otlp;
pub mod send;
pub mod serve;
pub mod telemetry;
pub mod worker;

use std::io::Write;

use clap::{Arg, ArgAction, ArgMatches};
use idemgate::config::{Command, FLAGS, Flag, Form, Given, Origin, Raw, Sources};

/// `command` with every flag's environment value hidden from `--help`, on
/// every subcommand: help shows `[env: NAME]`, never what the variable
/// holds. Redis URLs, Sentinel and Cluster node lists and tokens carry
/// passwords, and a help text is pasted into tickets and chat; one rule
/// here covers flags added later too, rather than one attribute per flag.
pub fn hide_env_values(command: clap::Command) -> clap::Command {
    command.mut_args(|arg| arg.hide_env_values(true)).mut_subcommands(hide_env_values)
}

/// The clap arguments of the settings `command` takes, made from the
/// library's one list ([`FLAGS`]) and shown in its order; a command's
/// `Args` struct adds them with `#[command(args = setting_flags(…))]`.
/// They are no fields: [`sources`] reads their values, with their source,
/// from the matches. No flag has a clap default: one would hide the config
/// file's value (flag > env > file > default, `idemgate::config::Merged`).
pub fn setting_flags(command: Command) -> Vec<Arg> {
    let taken = FLAGS.iter().filter(|flag| flag.on.contains(&command));
    // 0 is the global --log-format's place: it stays first.
    let shown = taken.enumerate().map(|(i, flag)| {
        let help = flag.help_on.iter().find(|(c, _)| *c == command).map_or(flag.help, |(_, help)| help);
        arg(flag, help).display_order(i + 1)
    });
    shown.collect()
}

/// Where a command's own flags start in `--help`, after the settings' (an
/// `Args` struct with both says `#[command(next_display_order = OWN_FLAGS)]`).
pub const OWN_FLAGS: usize = FLAGS.len() + 1;

/// One setting's flag, showing `help` (and the default after it, as
/// `[default: …]`).
fn arg(flag: &Flag, help: &str) -> Arg {
    let help = match flag.default {
        Some(default) => format!("{help} [default: {}]", default()),
        None => help.to_owned(),
    };
    let arg = Arg::new(flag.name).long(flag.long_name()).env(flag.env).help(help);
    match flag.form {
        Form::Value => arg.value_name(flag.value_name).action(ArgAction::Set),
        Form::List => arg.value_name(flag.value_name).action(ArgAction::Append).value_delimiter(','),
        Form::Switch => arg.action(ArgAction::SetTrue).value_parser(clap::builder::FalseyValueParser::new()),
        Form::ValueOrSwitch => {
            arg.value_name(flag.value_name).action(ArgAction::Set).num_args(0..=1).default_missing_value("true")
        }
    }
}

/// The settings the command line gave, from the matches of the command run
/// (the leaf subcommand): each setting whose flag the command takes, put in
/// the env layer or the flags' by clap's value source.
pub fn sources(command: &clap::Command, matches: &ArgMatches) -> Sources {
    let (mut command, mut matches) = (command, matches);
    while let Some((name, sub)) = matches.subcommand() {
        match command.find_subcommand(name) {
            Some(c) => (command, matches) = (c, sub),
            None => break,
        }
    }
    let mut sources = Sources::default();
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        let setting = FLAGS.iter().find(|f| f.name == id);
        let Some(flag) = setting else { continue };
        let (layer, origin) = match matches.value_source(id) {
            Some(clap::parser::ValueSource::CommandLine) => {
                (&mut sources.flags, Origin::Flag(format!("--{}", arg.get_long().unwrap_or(id))))
            }
            Some(clap::parser::ValueSource::EnvVariable) => (&mut sources.env, Origin::Env(flag.env.to_owned())),
            _ => continue,
        };
        let texts = || -> Vec<String> {
            matches.get_raw(id).into_iter().flatten().map(|v| v.to_string_lossy().into_owned()).collect()
        };
        let raw = match flag.form {
            Form::Switch => Raw::Bool(matches.get_flag(id)),
            Form::List => Raw::List(texts()),
            Form::Value | Form::ValueOrSwitch => Raw::Text(texts().pop().unwrap_or_default()),
        };
        layer.set(id, Given::new(raw, origin));
    }
    sources
}

/// Exits on a command line clap refused, as clap would (its exit code,
/// the usage, the valid values, a similar flag), but naming only flags:
/// clap's own message quotes what the line or an env var gave ("invalid
/// value 'X' for '--log-format'"), and no error echoes a value it refused
/// (docs/security.md, "Secrets and output"). Help and the version are
/// clap's own.
pub fn refuse(error: clap::Error) -> ! {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    let texts = |kind| match error.get(kind) {
        Some(ContextValue::String(one)) => vec![one.clone()],
        Some(ContextValue::Strings(many)) => many.clone(),
        _ => Vec::new(),
    };
    let mut message = format!("error: {}", error.kind());
    let named = texts(ContextKind::InvalidArg);
    // A missing argument is named by its definition (`<URL>`); any other by what the line typed.
    let flags: Vec<String> = match error.kind() {
        ErrorKind::MissingRequiredArgument => named,
        _ => named.iter().filter_map(|arg| flag_of(arg)).collect(),
    };
    if !flags.is_empty() {
        message += &format!(": {}", flags.join(", "));
    }
    // A value parser's reason names no value (`idemgate::units::parse_duration`, the number parsers).
    if let (ErrorKind::ValueValidation, Some(reason)) = (error.kind(), std::error::Error::source(&error)) {
        message += &format!(": {reason}");
    }
    // The valid values and a similar flag come from the definitions, not from the line.
    let valid = texts(ContextKind::ValidValue);
    if !valid.is_empty() {
        message += &format!(" [possible values: {}]", valid.join(", "));
    }
    if let Some(similar) = texts(ContextKind::SuggestedArg).iter().find_map(|arg| flag_of(arg)) {
        message += &format!("\n\n  tip: a similar argument exists: '{similar}'");
    }
    if let Some(similar) = texts(ContextKind::SuggestedSubcommand).first() {
        message += &format!("\n\n  tip: a similar subcommand exists: '{similar}'");
    }
    if let Some(ContextValue::StyledStr(usage)) = error.get(ContextKind::Usage) {
        message += &format!("\n\n{usage}");
    }
    eprintln!("{message}\n\nFor more information, try '--help'.");
    std::process::exit(error.exit_code())
}

/// The long flag an argument of clap's message names (`--log-format` of
/// `--log-format <LOG_FORMAT>` or of a typed `--listen=X`), or `None` when
/// it names none: a stray value on the line (`-5`, `s3cret`) is shown by
/// no message.
fn flag_of(arg: &str) -> Option<String> {
    let end = arg.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(arg.len());
    let flag = &arg[..end];
    let name = flag.strip_prefix("--")?;
    name.starts_with(|c: char| c.is_ascii_alphabetic()).then(|| flag.to_owned())
}

/// Prints a text and a newline; a closed stdout (`| head`) is not an error.
pub fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use idemgate::config::{FLAGS, Origin, Raw};

    /// Every setting's flag is an argument of each command that takes it,
    /// and what the line gives reaches the flags' layer under the
    /// setting's name, a list as a list and a switch as a switch.
    #[test]
    fn the_flags_made_from_the_list_fill_the_layers() {
        let command = crate::Cli::command();
        for flag in FLAGS {
            let on_some = ["serve", "worker", "stats", "send", "bench"].iter().any(|name| {
                let sub = command.find_subcommand(name).unwrap();
                sub.get_arguments().any(|a| a.get_id() == flag.name && a.get_env().is_some_and(|e| e == flag.env))
            });
            assert!(on_some, "{}", flag.name);
        }
        let line = ["idemgate", "serve", "--allowed-repo", "a/b", "--allowed-repo", "c/d", "--max-body", "5"];
        let matches = command.clone().try_get_matches_from(line.iter().chain(&["--allow-eviction"])).unwrap();
        let flags = super::sources(&command, &matches).flags;
        let repos = flags.allowed_repos.unwrap();
        assert_eq!(
            (repos.value, repos.origin),
            (Raw::List(vec!["a/b".into(), "c/d".into()]), Origin::Flag("--allowed-repo".into()))
        );
        assert_eq!(flags.max_body.unwrap().value, Raw::Text("5".into()));
        assert_eq!(flags.allow_eviction.unwrap().value, Raw::Bool(true));
        assert!(flags.listen.is_none(), "not given");
        // A flag a command does not take is refused by clap, not dropped.
        assert!(command.try_get_matches_from(["idemgate", "send", "u", "--provider", "p", "--listen", "x"]).is_err());
    }
}
