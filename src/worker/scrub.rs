//! The process's secrets out of what `ps` and the worker's commands can read of it.
//!
//! A command runs as the worker's user, so it can read
//! `/proc/<worker>/environ` and `/proc/<worker>/cmdline`. The kernel shows
//! there the bytes of the environment block and the argument list as they
//! are now in the worker's memory (the area the process started with), not
//! the variables as `setenv`/`unsetenv` left them. Hiding a variable from
//! the command's own environment is therefore not enough: once the worker
//! has read its settings, [`environment`] removes the variables the command
//! does not get and overwrites their values in that area with NUL bytes,
//! and [`arguments`] overwrites every secret in the argument list with `*`:
//! the value of `--api-token`, and what [`crate::redact`] hides of each URL
//! (userinfo, query values, a `--deliver` URL's path after its first
//! segment; a URL flag's value that is not a URL, whole), node lists
//! included. Every command calls [`arguments`] once its flags are parsed,
//! so `ps` shows no secret of any of them; the worker also calls
//! [`environment`].
//!
//! What remains: a process of the same user that may trace the worker
//! (`ptrace`, `/proc/<worker>/mem`) can read its whole memory, which holds
//! the Redis password while the worker runs. With Yama's `ptrace_scope` 1 a
//! command may not (it is not the worker's ancestor); with 0 it may. Run
//! commands as another user where that matters.

use crate::redact::{self, Kind};

/// Flags whose whole value is masked: a secret, or the path of a file that
/// holds one (kept out of a same-user command's sight: docs/security.md).
const SECRET_FLAGS: &[&str] = &[
    "--api-token",
    "--config",
    "--redis-password-file",
    "--deliver-secret-file",
    "--redis-tls-key",
    // `destinations keys`: the same file as --deliver-secret-file.
    "--secret-file",
];

/// Removes every variable `hidden` names from this process's environment
/// and overwrites its value where `/proc/self/environ` reads it.
///
/// Call it once the process has read its settings, before it starts
/// threads of its own that read the environment (here: before the worker
/// connects, while no thread resolves names or reads variables).
pub fn environment(hidden: impl Fn(&str) -> bool) {
    let names: Vec<_> = std::env::vars_os().map(|(k, _)| k).filter(|k| k.to_str().is_some_and(&hidden)).collect();
    for name in &names {
        // SAFETY: the worker calls this before it starts anything that reads
        // the environment concurrently (see above). Removing the variable
        // first means no environ pointer refers to the bytes overwritten below.
        unsafe { std::env::remove_var(name) };
    }
    if let Some(block) = start_area(Area::Environment) {
        scrub_environment(block, &hidden);
    }
}

/// Overwrites the secrets in this process's argument list (before a `--`,
/// after which the command's own arguments follow) where
/// `/proc/self/cmdline` reads them. The program must have parsed its
/// arguments already: `std::env::args` reads the same bytes.
pub fn arguments() {
    if let Some(block) = start_area(Area::Arguments) {
        scrub_arguments(block);
    }
}

/// Zeroes the value of every `NAME=value` entry of a NUL-separated block
/// whose name `hidden` picks.
fn scrub_environment(block: &mut [u8], hidden: &impl Fn(&str) -> bool) {
    for entry in block.split_mut(|b| *b == 0) {
        let Some(eq) = entry.iter().position(|b| *b == b'=') else { continue };
        if std::str::from_utf8(&entry[..eq]).is_ok_and(hidden) {
            entry[eq + 1..].fill(0);
        }
    }
}

/// Flags whose value is one URL or a list of them, and which part of a
/// destination URL may be shown.
const URL_FLAGS: &[(&str, Kind)] = &[
    ("--redis-url", Kind::Redis),
    ("--redis-cluster-nodes", Kind::Redis),
    ("--redis-sentinel-nodes", Kind::Redis),
    ("--deliver", Kind::Deliver),
];

/// Overwrites with `*` the secrets of a NUL-separated argument list, up to
/// its first `--` argument: the whole value of a [`SECRET_FLAGS`] flag, the
/// parts [`crate::redact`] hides of a URL flag's value, and of any other
/// argument that holds a `scheme://` URL (read as a Redis URL; a value that
/// is not a URL is masked whole).
fn scrub_arguments(block: &mut [u8]) {
    enum Next {
        Plain,
        Secret,
        Url(Kind),
    }
    let mut next = Next::Plain;
    for arg in block.split_mut(|b| *b == 0) {
        if arg == b"--" {
            break;
        }
        match std::mem::replace(&mut next, Next::Plain) {
            Next::Secret => {
                arg.fill(b'*');
                continue;
            }
            Next::Url(kind) => {
                redact::mask(arg, kind);
                continue;
            }
            Next::Plain => {}
        }
        let flag_value = |flag: &str, arg: &[u8]| match arg.strip_prefix(flag.as_bytes()) {
            Some([]) => Some(None),
            Some([b'=', ..]) => Some(Some(flag.len() + 1)),
            _ => None,
        };
        if let Some(found) = SECRET_FLAGS.iter().find_map(|f| flag_value(f, arg)) {
            match found {
                None => next = Next::Secret,
                Some(at) => arg[at..].fill(b'*'),
            }
            continue;
        }
        if let Some((found, kind)) = URL_FLAGS.iter().find_map(|(f, k)| flag_value(f, arg).map(|v| (v, *k))) {
            match found {
                None => next = Next::Url(kind),
                Some(at) => redact::mask(&mut arg[at..], kind),
            }
            continue;
        }
        if memchr::memmem::find(arg, b"://").is_some() {
            let at = if arg.starts_with(b"--") { arg.iter().position(|b| *b == b'=').map_or(0, |i| i + 1) } else { 0 };
            redact::mask(&mut arg[at..], Kind::Redis);
        }
    }
}

#[derive(Clone, Copy)]
enum Area {
    Arguments,
    Environment,
}

/// The process's original argument or environment area, as
/// `/proc/self/cmdline` and `/proc/self/environ` read it.
fn start_area(area: Area) -> Option<&'static mut [u8]> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name's last `)`: field 3 (state) is index 0,
    // so arg_start (field 48) is index 45, … env_end (field 51) index 48.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let (start, end) = match area {
        Area::Arguments => (45, 46),
        Area::Environment => (47, 48),
    };
    let start: usize = fields.get(start)?.parse().ok()?;
    let end: usize = fields.get(end)?.parse().ok()?;
    if start == 0 || end <= start {
        return None;
    }
    // SAFETY: the kernel placed the arguments and the environment at these
    // addresses of this process's stack when it started; that memory stays
    // mapped and writable for the life of the process. Only bytes inside it
    // change, never its length, and callers run once, after the program has
    // parsed its arguments (std::env::args reads these bytes) and removed
    // the variables whose values they overwrite.
    Some(unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(parts: &[&str]) -> Vec<u8> {
        parts.iter().flat_map(|p| p.bytes().chain([0])).collect()
    }

    #[test]
    fn scrub_masks_url_credentials_and_token_values_before_the_command() {
        let mut args = block(&[
            "idemgate",
            "worker",
            "--redis-url",
            "redis://:pw-a@h:6379/0",
            "--redis-sentinel-nodes=redis://u:pw-b@s1:26379,redis://s2:26379,rediss://:pw-c@s3",
            "--api-token",
            "tok-d",
            "--api-token=tok-e",
            "--group",
            "g",
            "--redis-url=redis://:pw,f@h",
            "--redis-url",
            "redis+unix:///run/r.sock?pass=pw-g",
            "--deliver",
            "https://u:pw-h@hooks.example/services/T/B/pw-i?key=pw-j",
            "--redis-url",
            "redis:/:pw-k@h",
            "--other=rediss://:pw-l@h",
            "--",
            "deploy",
            "redis://:own@h",
        ]);
        scrub_arguments(&mut args);
        let text = String::from_utf8(args).unwrap();
        for secret in [
            "pw-a", "pw-b", "pw-c", "tok-d", "tok-e", "u:", "pw,f", ",f@", "pw-g", "pw-h", "pw-i", "pw-j", "pw-k",
            "pw-l",
        ] {
            assert!(!text.contains(secret), "{secret} in {text:?}");
        }
        assert!(text.contains("\0redis://*****@h:6379/0\0"), "{text:?}");
        assert!(text.contains("redis://s2:26379,rediss://*****@s3\0"), "{text:?}");
        assert!(text.contains("\0--api-token\0*****\0--api-token=*****\0--group\0g\0"), "{text:?}");
        assert!(text.contains("\0redis+unix:///run/r.sock?pass=****\0"), "{text:?}");
        assert!(text.contains("\0https://******@hooks.example/services/********?key=****\0"), "{text:?}");
        // The command's own arguments are its own.
        assert!(text.ends_with("\0--\0deploy\0redis://:own@h\0"), "{text:?}");
    }

    #[test]
    fn scrub_zeroes_the_values_of_hidden_variables_only() {
        let mut env = block(&["PATH=/bin", "IDEMGATE_API_TOKEN=tok", "GH=s=cret", "KEEP=1"]);
        scrub_environment(&mut env, &|n: &str| n.starts_with("IDEMGATE_") || n == "GH");
        assert_eq!(env, b"PATH=/bin\0IDEMGATE_API_TOKEN=\0\0\0\0GH=\0\0\0\0\0\0\0KEEP=1\0");
    }
}
