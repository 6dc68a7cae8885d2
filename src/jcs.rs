//! RFC 8785 JSON Canonicalization Scheme (JCS) and the digests built on it:
//! the window analysis's payload digest (docs/window.md) and the GitHub
//! event identity (docs/identities.md) use this one canonicalizer.
//!
//! JCS is what lets two senders agree on a digest: object members sorted by
//! their UTF-16 code units, no whitespace, numbers in ECMAScript
//! `Number.prototype.toString` form (so `5.0` and `5` are one value) and
//! minimal string escapes.

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use std::fmt::Write as _;

/// Serializes `v` in RFC 8785 canonical form.
///
/// Every JSON number is treated as an IEEE-754 double, as JCS requires: an
/// integer beyond 2^53 is rounded to the nearest double first.
pub fn canonicalize(v: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

/// The payload digest of the window analysis (docs/window.md): `sha256:`
/// and the lowercase hex SHA-256 of [`canonicalize`]`(payload)`.
pub fn digest(payload: &Value) -> String {
    format!("sha256:{}", hex::encode(sha256(payload)))
}

/// SHA-256 of [`canonicalize`]`(v)`.
pub fn sha256(v: &Value) -> [u8; 32] {
    Sha256::digest(canonicalize(v).as_bytes()).into()
}

/// Whether `a` and `b` have the same canonical form (and so the same
/// digest), decided without serializing or hashing either.
pub(crate) fn same_canonical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        // Distinct doubles print differently, and +0 == -0 print alike.
        (Value::Number(x), Value::Number(y)) => double(x) == double(y),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_canonical(v, w)),
        (Value::Object(x), Value::Object(y)) => {
            // Both maps iterate in the same key order, so a pairwise walk
            // suffices; `get` keeps this right under any map ordering.
            x.len() == y.len()
                && x.iter().zip(y).all(|((xk, xv), (yk, yv))| {
                    if xk == yk { same_canonical(xv, yv) } else { y.get(xk).is_some_and(|w| same_canonical(xv, w)) }
                })
        }
        _ => false,
    }
}

/// A JSON number as the IEEE-754 double JCS works with.
fn double(n: &serde_json::Number) -> f64 {
    // Without serde_json's `arbitrary_precision` every number has an f64
    // view; the parse is a fallback should that feature ever be on.
    n.as_f64().or_else(|| n.to_string().parse().ok()).unwrap_or(f64::NAN)
}

fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, double(n)),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // The map iterates in UTF-8 byte order; JCS wants UTF-16 code
            // unit order, which differs once keys hold characters above
            // U+FFFF next to ones in U+E000..=U+FFFF.
            // Only a key holding a character at or above U+E000 (UTF-8 lead
            // byte 0xEE or more) can be out of place.
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            if members.iter().any(|(key, _)| key.bytes().any(|b| b >= 0xEE)) {
                members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            }
            out.push('{');
            for (i, (key, value)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, value);
            }
            out.push('}');
        }
    }
}

/// Writes `x` as ECMAScript's `Number.prototype.toString` would (ECMA-262
/// Number::toString, radix 10), which is the number form JCS prescribes.
fn write_number(out: &mut String, x: f64) {
    if !x.is_finite() {
        // JSON cannot carry NaN or infinities, so a serde_json value never
        // holds one; `null` keeps this function total.
        out.push_str("null");
        return;
    }
    if x == 0.0 {
        // Both +0 and -0.
        out.push('0');
        return;
    }
    if x < 0.0 {
        out.push('-');
    }
    let (digits, n) = shortest_digits(x.abs());
    // ECMA-262 names: x = digits × 10^(n - k), with k digits.
    let k = digits.len() as i32;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        let _ = write!(out, "e{}{}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

/// The shortest decimal digits that round-trip to `x` (finite, positive),
/// and the exponent `n` with `x = 0.digits × 10^n`.
///
/// Ryu picks, among the shortest candidates, the closest one and on a tie
/// the even one, exactly as ECMA-262 asks; Rust's own `{:e}` rounds ties
/// up (`1424953923781206.25` gives `…206.3`, not `…206.2`). Only the digits
/// are taken from Ryu's text, whatever its layout.
fn shortest_digits(x: f64) -> (String, i32) {
    let mut buffer = ryu::Buffer::new();
    let text = buffer.format_finite(x);
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().expect("ryu exponent is an integer")),
        None => (text, 0),
    };
    let point = mantissa.find('.').unwrap_or(mantissa.len()) as i32;
    let all: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let leading = all.len() - all.trim_start_matches('0').len();
    let digits = all.trim_start_matches('0').trim_end_matches('0').to_owned();
    (digits, point + exponent - leading as i32)
}

/// Writes `s` quoted with JCS's minimal escapes: `"`, `\` and the control
/// characters below U+0020; everything else is written as is.
fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(bits: u64) -> String {
        let mut out = String::new();
        write_number(&mut out, f64::from_bits(bits));
        out
    }

    /// RFC 8785 Appendix B: IEEE-754 bit patterns and their JCS text.
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let table: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for &(bits, want) in table {
            assert_eq!(num(bits), want, "bits {bits:#018x}");
        }
    }

    #[test]
    fn ecmascript_number_layout() {
        let cases: &[(f64, &str)] = &[
            (5.0, "5"),
            (4.5, "4.5"),
            (0.002, "0.002"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (1e-27, "1e-27"),
            (1e30, "1e+30"),
            (-0.0, "0"),
            (-12.25, "-12.25"),
            (123456789.0, "123456789"),
        ];
        for &(x, want) in cases {
            let mut out = String::new();
            write_number(&mut out, x);
            assert_eq!(out, want, "{x:?}");
        }
    }

    proptest::proptest! {
        /// Every finite double comes back exactly, with as few digits as
        /// Rust's own shortest form.
        #[test]
        fn numbers_round_trip_shortest(bits in proptest::prelude::any::<u64>()) {
            let x = f64::from_bits(bits);
            proptest::prop_assume!(x.is_finite());
            let text = num(bits);
            let back: f64 = text.parse().unwrap();
            proptest::prop_assert!(back == x, "{} -> {}", x, text);
            let digits = |s: &str| {
                let m = s.split(['e', 'E']).next().unwrap();
                m.chars().filter(char::is_ascii_digit).collect::<String>()
                    .trim_start_matches('0').trim_end_matches('0').len()
            };
            proptest::prop_assert_eq!(digits(&text), digits(&format!("{:e}", x.abs())));
        }
    }

    /// Small JSON values over a tiny alphabet, so that equal canonical
    /// forms come up often.
    fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(Value::from),
            prop::sample::select(vec![json!(0), json!(-0.0), json!(5), json!(5.0), json!(0.5), json!(1e21)]),
            prop::sample::select(vec!["", "a", "\u{e000}", "\u{1f600}"]).prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec!["a", "b", "\u{e000}", "\u{1f600}"]).prop_map(String::from),
                    inner,
                    0..3,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn same_canonical_agrees_with_canonicalize(a in arb_json(), b in arb_json()) {
            proptest::prop_assert_eq!(same_canonical(&a, &b), canonicalize(&a) == canonicalize(&b));
            proptest::prop_assert!(same_canonical(&a, &a));
        }
    }

    #[test]
    fn same_canonical_cases() {
        let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert!(same_canonical(&parse(r#"{"a":5.0,"b":[-0.0]}"#), &parse(r#"{"b":[0],"a":5}"#)));
        assert!(!same_canonical(&parse(r#"{"a":5}"#), &parse(r#"{"a":"5"}"#)));
        assert!(!same_canonical(&parse(r#"{"a":5}"#), &parse(r#"{"a":5,"b":null}"#)));
        assert!(!same_canonical(&parse("[1,2]"), &parse("[2,1]")));
    }

    #[test]
    fn integers_are_doubles() {
        // 2^53 + 1 is not a double: it rounds to 2^53.
        assert_eq!(canonicalize(&json!(9007199254740993u64)), "9007199254740992");
        assert_eq!(canonicalize(&json!(u64::MAX)), "18446744073709552000");
        assert_eq!(canonicalize(&json!(i64::MIN)), "-9223372036854776000");
        assert_eq!(canonicalize(&json!(-7)), "-7");
    }

    #[test]
    fn five_point_zero_and_five_share_a_digest() {
        let a: Value = serde_json::from_str(r#"{"amount": 5.0}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"amount":5}"#).unwrap();
        assert_eq!(canonicalize(&a), r#"{"amount":5}"#);
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&a), digest(&json!({"amount": 6})));
    }

    #[test]
    fn digest_form() {
        // SHA-256 of the three bytes `{}`.
        assert_eq!(digest(&json!({})), "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
    }

    /// RFC 8785 §3.2.2: the sample input and its canonical output.
    #[test]
    fn rfc8785_sample() {
        let input = r#"{
            "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        let v: Value = serde_json::from_str(input).unwrap();
        assert_eq!(
            canonicalize(&v),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
             \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
    }

    /// RFC 8785 §3.2.3: members sorted by UTF-16 code units, so the emoji
    /// (U+1F600, surrogates D83D DE00) sorts before U+FB33.
    #[test]
    fn rfc8785_sorting_of_object_properties() {
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let v: Value = serde_json::from_str(input).unwrap();
        let want = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
                    \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
                    \"\u{1f600}\":\"Emoji: Grinning Face\",\
                    \"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canonicalize(&v), want);
    }

    #[test]
    fn string_escapes_are_minimal() {
        let v = json!("q\" b\\ \u{8}\t\n\u{c}\r \u{0} \u{1f} \u{7f} / \u{2028} é");
        assert_eq!(canonicalize(&v), "\"q\\\" b\\\\ \\b\\t\\n\\f\\r \\u0000 \\u001f \u{7f} / \u{2028} é\"");
    }

    #[test]
    fn nested_structure_without_whitespace() {
        let v: Value = serde_json::from_str(r#"{ "b": [1, {"d": 2, "c": null}], "a": true }"#).unwrap();
        assert_eq!(canonicalize(&v), r#"{"a":true,"b":[1,{"c":null,"d":2}]}"#);
    }
}
