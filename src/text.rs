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

/// `value` as compact JSON in which every character of [`needs_escape`]
/// that JSON itself leaves raw (DEL, C1, line separators, bidi controls) is
/// written `\uXXXX`: the same JSON value, and nothing in it a terminal that
/// shows it obeys.
pub fn json_text<T: serde::Serialize + ?Sized>(value: &T) -> String {
    struct Escaping;
    impl serde_json::ser::Formatter for Escaping {
        fn write_string_fragment<W: ?Sized + std::io::Write>(
            &mut self,
            w: &mut W,
            fragment: &str,
        ) -> std::io::Result<()> {
            let mut rest = fragment;
            while let Some(at) = rest.find(needs_escape) {
                let c = rest[at..].chars().next().expect("a character where find stopped");
                w.write_all(&rest.as_bytes()[..at])?;
                // Every such character is in the Basic Multilingual Plane: one escape.
                write!(w, "\\u{:04x}", u32::from(c))?;
                rest = &rest[at + c.len_utf8()..];
            }
            w.write_all(rest.as_bytes())
        }
    }
    let mut out = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut out, Escaping)).expect("the value serializes");
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// JSON text (`json`: a document serde_json wrote, which escapes only the
/// C0 controls) with every other character of [`needs_escape`] (DEL, C1,
/// line separators, bidi controls) written `\uXXXX`: the same JSON value,
/// as [`json_text`] writes it. Such a character can only stand inside a
/// string there, where the escape means the character itself. (For JSON
/// another library wrote: the JSON log lines.)
pub fn escape_json_text(json: &str) -> Cow<'_, str> {
    let raw = |c: char| needs_escape(c) && u32::from(c) >= 0x7f;
    if !json.chars().any(raw) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if raw(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_another_library_wrote_gets_the_same_escapes_and_keeps_its_value() {
        let value = serde_json::json!({"id": "ok\u{202e}\u{9b}2J\u{2028}x\u{7f}", "n": 1});
        let plain = serde_json::to_string(&value).unwrap();
        let escaped = escape_json_text(&plain);
        assert_eq!(escaped, json_text(&value));
        assert_eq!(serde_json::from_str::<serde_json::Value>(&escaped).unwrap(), value);
        assert!(matches!(escape_json_text("{\"a\":\"b\"}\n"), Cow::Borrowed(_)));
    }

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

    #[test]
    fn json_text_escapes_what_json_leaves_raw() {
        let v = serde_json::json!({"k\u{202e}": ["x\u{202e}y\u{2028}\u{7f}\u{9b}\n\"é", 7]});
        assert_eq!(json_text(&v), r#"{"k\u202e":["x\u202ey\u2028\u007f\u009b\n\"é",7]}"#);
    }

    proptest::proptest! {
        #[test]
        fn escaped_text_has_no_control_characters(s in ".*") {
            proptest::prop_assert!(!escape_control(&s).chars().any(needs_escape));
        }

        #[test]
        fn json_text_is_the_same_value_with_nothing_to_escape(s in ".*") {
            let text = json_text(&serde_json::json!({"s": s}));
            proptest::prop_assert!(!text.chars().any(needs_escape));
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            proptest::prop_assert_eq!(back["s"].as_str(), Some(s.as_str()));
        }
    }
}
