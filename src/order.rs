//! Order per key (docs/worker.md, "One at a time, in order, per key"): which
//! runs share a line, as the operator chose it with `order_by`, and what a
//! dead run at the head of a line does (`order_on_dead`).
//!
//! The gate decides a run's order key when it creates the run, from the
//! identity it already computed, and writes it into the run record and the
//! stream entry in the same atomic step (lua/gate.lua, `order_key`): the key
//! never changes afterwards, whatever the configuration becomes.
//!
//! The key is written in the key schema's own form, `enc(provider):enc(org/repo)`
//! and, for `subject`, `:enc(number text)` (src/vocabulary.rs): unambiguous for any
//! bytes, readable with `redis-cli`, and the tail of the key's state,
//! `idemgate:{NS}:order:` + the key.

use std::borrow::Cow;
use std::str::FromStr;

use crate::vocabulary::Identity;
use crate::vocabulary::enc;

/// Which runs share a line (`order_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderBy {
    /// Runs are independent (the default).
    #[default]
    None,
    /// Provider, `org/repo` and the number text: a pull request's or an
    /// issue's runs, whatever their action. GitHub's `identity = "event"`
    /// adds a digest to the logical key's subject; the order key leaves it
    /// out, so the pull request's runs still share one line. Runs with no
    /// number (a push) share one line per repository.
    Subject,
    /// Provider and `org/repo`.
    Repo,
}

impl OrderBy {
    /// Every spelling, as the config file writes it.
    pub const NAMES: [&'static str; 3] = ["none", "subject", "repo"];

    /// The order key of a run of `identity`, or `None` when runs are independent.
    pub fn key(self, identity: &Identity) -> Option<String> {
        let subject = match self {
            OrderBy::None => return None,
            OrderBy::Subject => Some(identity.number.as_str()),
            OrderBy::Repo => None,
        };
        Some(order_key(&identity.provider, &identity.repo, subject))
    }

    /// The spelling the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderBy::None => "none",
            OrderBy::Subject => "subject",
            OrderBy::Repo => "repo",
        }
    }
}

/// The order key of runs of `provider`'s `repo` (`enc(provider):enc(repo)`),
/// and of its `subject` when given (`…:enc(subject)`; a push's is empty):
/// what the gate writes and what `idemgate inspect order` looks up.
pub fn order_key(provider: &str, repo: &str, subject: Option<&str>) -> String {
    let line = format!("{}:{}", enc(provider), enc(repo));
    match subject {
        Some(subject) => format!("{line}:{}", enc(subject)),
        None => line,
    }
}

impl FromStr for OrderBy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(OrderBy::None),
            "subject" => Ok(OrderBy::Subject),
            "repo" => Ok(OrderBy::Repo),
            // The value is not echoed: a config file's values never reach a message.
            _ => Err("expected one of \"none\", \"subject\" or \"repo\"".to_owned()),
        }
    }
}

/// What a dead run at the head of its key's line does to the runs behind it (`order_on_dead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OrderOnDead {
    /// The line waits until the dead run is retried to `done` or skipped
    /// (`idemgate runs skip`): a later run never overtakes an earlier one.
    #[default]
    Block,
    /// The line moves on at once; the dead run stays the `previous` of the next one.
    Skip,
}

impl OrderOnDead {
    /// The spelling the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderOnDead::Block => "block",
            OrderOnDead::Skip => "skip",
        }
    }
}

impl FromStr for OrderOnDead {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(OrderOnDead::Block),
            "skip" => Ok(OrderOnDead::Skip),
            _ => Err("expected \"block\" or \"skip\"".to_owned()),
        }
    }
}

/// One provider's (or `/v1/deliveries`') ordering: `order_by` and `order_on_dead` together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ordering {
    /// Which runs share a line.
    pub by: OrderBy,
    /// What a dead head does.
    pub on_dead: OrderOnDead,
}

impl Ordering {
    /// Whether runs are ordered at all.
    pub fn is_ordered(&self) -> bool {
        self.by != OrderBy::None
    }

    /// What the gate writes for a run of `identity`: its order key, and
    /// whether a dead run of it lets the line move on. `None` for independent runs.
    pub fn of(&self, identity: &Identity) -> Option<RunOrder> {
        self.by.key(identity).map(|key| RunOrder { key, skip_dead: self.on_dead == OrderOnDead::Skip })
    }
}

/// A created run's place in the order: what the gate writes into its record and stream entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOrder {
    /// The order key ([`OrderBy::key`]).
    pub key: String,
    /// `order_on_dead = "skip"`: the record keeps `order_on_dead` only then
    /// (the default costs no bytes).
    pub skip_dead: bool,
}

/// The longest order key the gate writes, with room to spare: `enc` of a
/// provider ([`crate::gate::MAX_KEY_FIELD_BYTES`]), of `org/repo` and of a
/// number text (each event field at most [`crate::gate::MAX_EVENT_FIELD_BYTES`]).
/// Also the most a key may take as a query parameter, `%XX` included.
pub const MAX_KEY_BYTES: usize = 4096;

/// An order key (or `run-N:CREATED_MS`) as a request carries it in
/// `Idemgate-Order-Key` / `Idemgate-Order-Previous`: bytes outside visible
/// ASCII, and `%`, as `%XX`, so any key is a header value and reads back
/// as it was ([`key_from_header_form`]).
pub fn header_form(text: &str) -> Cow<'_, str> {
    let plain = |b: u8| (0x21..=0x7e).contains(&b) && b != b'%';
    if text.bytes().all(plain) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for b in text.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// The order key `text` names, given as a receiver got it
/// ([`header_form`]: `%XX` read back; a key of visible ASCII without `%`,
/// the usual one, is the same either way) and checked to be one the gate
/// writes: two or three length-prefixed parts ([`OrderBy::key`]). `name`
/// is the parameter's, for the message.
pub fn key_from_header_form(name: &str, text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err(format!("{name} is empty: leave it out instead"));
    }
    // Bounded as given, not as decoded: a request line stays well within
    // what the HTTP server takes (a longer one would be 414, not a clear 400).
    if text.len() > MAX_KEY_BYTES {
        return Err(format!("{name} is longer than {MAX_KEY_BYTES} bytes"));
    }
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b != b'%' {
            bytes.push(b);
            rest = tail;
            continue;
        }
        let hex = tail.get(..2).and_then(|h| std::str::from_utf8(h).ok());
        let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or_else(|| {
            format!("{name} has a % not followed by two hex digits: give the key as Idemgate-Order-Key carries it")
        })?;
        bytes.push(byte);
        rest = &tail[2..];
    }
    let key = String::from_utf8(bytes).map_err(|_| format!("{name} has %XX bytes that are not UTF-8 text"))?;
    match length_prefixed_parts(&key) {
        Some(2 | 3) => Ok(key),
        _ => Err(format!(
            "{name} must be an order key as Idemgate-Order-Key carries it, such as 6:github:12:acme/widgets:2:42 \
             (each part its length, a colon and its text), not {:?}",
            crate::text::escape_control(text)
        )),
    }
}

/// How many `LEN:TEXT` parts, joined by `:`, `key` is made of (`None`: it is not such a text).
fn length_prefixed_parts(key: &str) -> Option<usize> {
    let (mut rest, mut parts) = (key, 0);
    loop {
        let (len, tail) = rest.split_once(':')?;
        if len.is_empty() || len.len() > 4 || !len.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let part = tail.get(..len.parse::<usize>().ok()?)?;
        parts += 1;
        rest = &tail[part.len()..];
        if rest.is_empty() {
            return Some(parts);
        }
        rest = rest.strip_prefix(':')?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pr(number: &str) -> Identity {
        Identity::new("github", "acme/widgets", "pull_request.opened", number)
    }

    #[test]
    fn a_pull_requests_runs_share_a_key_whatever_their_action_and_digest() {
        let opened = pr("42");
        let mut closed = pr("42");
        closed.action = "pull_request.closed".into();
        let named = pr("42").named("sha256-abc", &crate::vocabulary::KeySlots::default());
        let key = OrderBy::Subject.key(&opened).unwrap();
        assert_eq!(key, "6:github:12:acme/widgets:2:42");
        assert_eq!(OrderBy::Subject.key(&closed).unwrap(), key);
        assert_eq!(OrderBy::Subject.key(&named).unwrap(), key, "the content digest is not part of the order key");
        assert_ne!(OrderBy::Subject.key(&pr("43")).unwrap(), key);
        assert_eq!(OrderBy::Repo.key(&pr("43")).unwrap(), "6:github:12:acme/widgets");
        assert_eq!(OrderBy::None.key(&opened), None);
    }

    #[test]
    fn runs_without_a_number_share_one_line_per_repository() {
        assert_eq!(OrderBy::Subject.key(&pr("")).unwrap(), "6:github:12:acme/widgets:0:");
    }

    #[test]
    fn the_key_is_unambiguous_for_any_bytes() {
        let a = Identity::new("p", "a:1/b", "x", "2");
        let b = Identity::new("p", "a", "x", "1/b:2");
        assert_ne!(OrderBy::Subject.key(&a), OrderBy::Subject.key(&b));
    }

    #[test]
    fn spellings_read_back_and_bad_ones_name_the_choices() {
        for name in OrderBy::NAMES {
            assert_eq!(name.parse::<OrderBy>().unwrap().as_str(), name);
        }
        assert!("Subject".parse::<OrderBy>().unwrap_err().contains("\"none\", \"subject\" or \"repo\""));
        assert_eq!("skip".parse::<OrderOnDead>(), Ok(OrderOnDead::Skip));
        assert!("later".parse::<OrderOnDead>().unwrap_err().contains("\"block\" or \"skip\""));
    }

    #[test]
    fn skip_is_written_only_when_chosen() {
        let ordering = Ordering { by: OrderBy::Repo, on_dead: OrderOnDead::Skip };
        assert!(ordering.of(&pr("1")).unwrap().skip_dead);
        assert!(!Ordering { by: OrderBy::Repo, ..Default::default() }.of(&pr("1")).unwrap().skip_dead);
        assert_eq!(Ordering::default().of(&pr("1")), None);
    }

    #[test]
    fn a_key_reads_back_from_its_header_form_and_bad_ones_are_named() {
        for key in ["6:github:12:acme/widgets:2:42", "3:api:4:a b%:2:\u{e9}", "6:github:12:acme/widgets:0:"] {
            let shown = header_form(key);
            assert!(shown.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{shown}");
            assert_eq!(key_from_header_form("order_key", &shown).unwrap(), key);
        }
        assert_eq!(header_form("3:api:4:a b%"), "3:api:4:a%20b%25");
        let too_long = "x".repeat(MAX_KEY_BYTES + 1);
        for bad in
            ["", "github", "6:github", "6:github:12:acme/widgets:2:4", "6:github:1:a:1:b:1:c", "%zz", "%C3", &too_long]
        {
            let e = key_from_header_form("order_key", bad).unwrap_err();
            assert!(e.starts_with("order_key "), "{bad}: {e}");
        }
        let widest =
            Identity::new("p".repeat(256), format!("{}/{}", "o".repeat(1024), "r".repeat(1024)), "a", "9".repeat(1024));
        let key = OrderBy::Subject.key(&widest).unwrap();
        assert!(key.len() <= MAX_KEY_BYTES, "{}", key.len());
        assert_eq!(key_from_header_form("order_key", &key).unwrap(), key);
    }
}
