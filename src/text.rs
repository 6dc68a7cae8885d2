//! Text that reaches a log or a terminal. Values that clients choose (a
//! delivery id, an event's `repo`) and what a worker's command writes on
//! stderr may hold control characters: a newline would forge a log line, an
//! escape sequence would drive the operator's terminal, a line separator
//! (U+2028) or a bidi control (U+202E) would make a line read as another.
//! [`escape_control`] makes them visible instead.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is written as an escape: a control character (C0, DEL and
/// C1, so also `\n`, `\r`, `\t` and ESC), a line or paragraph separator
/// (U+2028, U+2029), or a bidi control (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069). Output with a syntax of its own (a key
/// quoted for redis-cli) escapes exactly these, in that syntax.
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `s` with every character of [`needs_escape`] written as an escape:
/// `\n`, `\r`, `\t`, `\x1b`, `\u{9b}`, `\u{2028}`, `\u{202e}`. A backslash
/// is doubled only when the text has something to escape, so plain text
/// comes back borrowed and unchanged.
pub fn escape_control(s: &str) -> Cow<'_, str> {
    if !s.chars().any(needs_escape) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_escaped_and_plain_text_is_kept() {
        assert!(matches!(escape_control("run-7 ok: é ✓ \\ path"), Cow::Borrowed(_)));
        assert_eq!(
            escape_control("a\nFAKE log\r\x1b[31mred\x07\u{9b}2J\\"),
            "a\\nFAKE log\\r\\x1b[31mred\\x07\\u{9b}2J\\\\"
        );
        assert_eq!(escape_control("tab\there\x7f"), "tab\\there\\x7f");
        assert_eq!(escape_control("a\u{2028}b\u{202e}c\u{2066}"), "a\\u{2028}b\\u{202e}c\\u{2066}");
    }

    proptest::proptest! {
        #[test]
        fn escaped_text_has_no_control_characters(s in ".*") {
            proptest::prop_assert!(!escape_control(&s).chars().any(needs_escape));
        }
    }
}
