//! The digest a delivery record keeps of its event (`d` in the record),
//! for each way an event arrives: as a tree ([`of_value`], `Gate::check`
//! and the embedding callers), as JSON text read without building a tree
//! ([`of_text`], the `/v1/deliveries` body), and as a provider's signed
//! body, digested as the bytes it is ([`of_body`], `/webhooks/{name}`).
//! All three keep the first 64 bits of SHA-256, in hex ([`STORED_BYTES`]).
//! The first two share one canonical form: keys sorted at every level, compact, numbers and
//! strings as serde_json writes them. A tree gets it from serde_json's own
//! serializer, its objects' keys put in order by [`Sorted`] (whatever order
//! the tree's maps keep: `serde_json/preserve_order` keeps insertion
//! order); text gets it from [`Canonical`], which
//! writes the same bytes while it reads (the tests hold the two equal, on
//! pinned digests, the shared fixtures and arbitrary JSON). Replays
//! compare against digests already stored in Redis, so the canonical form
//! must never change (the tests pin known digests).

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The digest a delivery record keeps of its first event: the first 64 bits
/// of SHA-256 over the event's canonical JSON, in hex. Enough to tell a
/// changed retry from an unchanged one; it is not a security boundary.
pub fn of_value(event: &Value) -> String {
    // A tree's canonical form is serde_json's own compact serialization of
    // it, keys sorted by `Sorted` at every level, and numbers and strings
    // written as `Canonical` writes them (the tests hold the two equal).
    // Streamed into the hash with no buffer, since every gate call digests
    // its event, replays included: the visitor below, which sorts into a
    // rope, cost replays a sixth of their rate.
    struct HashWriter(Sha256);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.update(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut hash = HashWriter(Sha256::new());
    // Writing a Value into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut hash, &Sorted(event));
    hex_prefix(hash.0)
}

/// A tree serialized with each object's keys in byte order, as the digest
/// has always had them: serde_json's `Map` is sorted by default, but an
/// application that embeds idemgate may turn on `serde_json/preserve_order`
/// anywhere in its dependency graph, and the stored digests must not
/// change with it. An object whose keys already come in order (always,
/// without that feature) is written as it is, with no allocation.
struct Sorted<'a>(&'a Value);

impl serde::Serialize for Sorted<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(map) => {
                let mut out = s.serialize_map(Some(map.len()))?;
                let in_order = map.keys().zip(map.keys().skip(1)).all(|(a, b)| a <= b);
                if in_order {
                    for (key, value) in map {
                        out.serialize_entry(key, &Sorted(value))?;
                    }
                } else {
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                    for (key, value) in entries {
                        out.serialize_entry(key, &Sorted(value))?;
                    }
                }
                out.end()
            }
            Value::Array(items) => {
                let mut out = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    out.serialize_element(&Sorted(item))?;
                }
                out.end()
            }
            leaf => leaf.serialize(s),
        }
    }
}

/// How deep an event may nest; serde_json's own limit when it builds a tree.
const MAX_DEPTH: usize = 128;

/// [`of_value`] of the JSON text `event`, computed while reading it, with
/// no tree of the event built: the same canonical writer, so the digest of
/// a delivery is the same whichever way it was computed. The text is parsed
/// once: each value is written in canonical form as it is read, an
/// object's entries into pieces of their own that are put in key order
/// when the object ends (large pieces are moved, not copied). So a body
/// nested 120 levels deep costs what a flat one does; no tree of the
/// event is built. What it holds is the canonical text (about the event's
/// size) and one entry per key of the object being read
/// ([`canonical_overhead`] bounds both, for the budget).
pub fn of_text(event: &str) -> serde_json::Result<String> {
    let mut de = serde_json::Deserializer::from_str(event);
    let mut out = Rope::default();
    Canonical { out: &mut out, depth: 0 }.deserialize(&mut de)?;
    de.end()?;
    let mut hash = Sha256::new();
    for chunk in &out.chunks {
        hash.update(chunk);
    }
    Ok(hex_prefix(hash))
}

/// The digest a delivery record keeps of a provider delivery: of the raw
/// body the provider signed, since a retry carries the same bytes (an
/// authenticated body is never re-serialized); for a GitHub form body, the
/// caller gives the JSON its `payload` field holds, so one event has one
/// digest in either encoding.
pub fn of_body(body: &[u8]) -> String {
    hex_prefix(Sha256::new_with_prefix(body))
}

/// How much of SHA-256 a digest keeps: 64 bits. The digest only tells a
/// provider's changed retry from an unchanged one (`idemgate-event-mismatch`);
/// two different events under one delivery id look the same with odds of
/// 2^-64 per retry, and nothing else reads it (docs/operations.md#memory).
pub const STORED_BYTES: usize = 8;

/// The stored form of a digest: its first [`STORED_BYTES`] in hex.
fn hex_prefix(hash: Sha256) -> String {
    hex::encode(&hash.finalize()[..STORED_BYTES])
}

/// Whether a record's `stored` digest is of the same event as `digest`.
/// Records of earlier versions keep 128 bits; a caller's own digest may be
/// longer or shorter still: the two are compared on the digits both have.
pub fn same_event(stored: &str, digest: &str) -> bool {
    let n = stored.len().min(digest.len());
    stored.get(..n) == digest.get(..n)
}

/// The most memory [`of_text`] takes for `event` besides the text
/// itself: the canonical text (no longer than the event) and, per object
/// key, an entry of at most [`ENTRY_BYTES`] (a key is at least two bytes
/// of quotes and is followed by a `:`, so the colons bound the keys).
pub fn canonical_overhead(event: &[u8]) -> usize {
    let colons = event.iter().filter(|b| **b == b':').count();
    event.len() + colons * ENTRY_BYTES
}

/// What one object entry costs while its object is read: the key's
/// `String` and its piece list (`Vec`), their heap blocks, and the piece's
/// first bytes.
const ENTRY_BYTES: usize = 128;

/// Canonical text in pieces: small writes go into the last piece; a
/// nested value's large pieces are moved into its parent, not copied.
#[derive(Default)]
struct Rope {
    chunks: Vec<Vec<u8>>,
}

/// A piece at least this large is moved whole from a child to its parent;
/// smaller ones are copied into the parent's last piece.
const MOVE_AT: usize = 4 * 1024;

impl Rope {
    fn push(&mut self, bytes: &[u8]) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < SINK_BUFFER => last.extend_from_slice(bytes),
            _ => self.chunks.push(bytes.to_vec()),
        }
    }

    fn append(&mut self, other: Rope) {
        for chunk in other.chunks {
            if chunk.len() >= MOVE_AT {
                self.chunks.push(chunk);
            } else {
                self.push(&chunk);
            }
        }
    }

    fn last(&mut self) -> &mut Vec<u8> {
        if self.chunks.last().is_none_or(|last| last.len() >= SINK_BUFFER) {
            self.chunks.push(Vec::new());
        }
        self.chunks.last_mut().expect("pushed above")
    }
}

/// The size a rope's last piece grows to before a new one starts.
const SINK_BUFFER: usize = 64 * 1024;

/// Writes one JSON value in canonical form into a rope.
struct Canonical<'h> {
    out: &'h mut Rope,
    /// How deep the value being written sits; deeper than [`MAX_DEPTH`] is refused.
    depth: usize,
}

impl Canonical<'_> {
    fn write(&mut self, bytes: &[u8]) {
        self.out.push(bytes);
    }

    fn write_json<T: serde::Serialize + ?Sized>(&mut self, v: &T) {
        // Serializing a number or a string into a Vec cannot fail.
        let _ = serde_json::to_writer(self.out.last(), v);
    }

    fn nested(&mut self) -> Canonical<'_> {
        Canonical { out: self.out, depth: self.depth + 1 }
    }
}

impl<'de> DeserializeSeed<'de> for Canonical<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Canonical<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(mut self) -> Result<(), E> {
        self.write(b"null");
        Ok(())
    }
    fn visit_bool<E>(mut self, v: bool) -> Result<(), E> {
        self.write(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        // Integers print as serde_json writes them: plain decimal.
        let _ = std::io::Write::write_fmt(self.out.last(), format_args!("{v}"));
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let _ = std::io::Write::write_fmt(self.out.last(), format_args!("{v}"));
        Ok(())
    }
    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        // What a tree does with the number: `Value::from` (a non-finite
        // float, which JSON text cannot hold, would be `null`).
        self.write_json(&Value::from(v));
        Ok(())
    }
    fn visit_str<E>(mut self, v: &str) -> Result<(), E> {
        self.write_json(v);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(de::Error::custom("the event nests too deep"));
        }
        self.write(b"[");
        let mut first = true;
        // The separator goes before every element but the first; the seed
        // writes it once it knows that an element follows.
        while seq.next_element_seed(Element { inner: &mut self.nested(), comma: !first })?.is_some() {
            first = false;
        }
        self.write(b"]");
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            return Err(de::Error::custom("the event nests too deep"));
        }
        // Each value is written once, into a rope of its own, as it is
        // read; sorted by key when the object ends, the last of a repeated
        // key winning: a tree's order.
        let mut entries: BTreeMap<String, Rope> = BTreeMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let mut value = Rope::default();
            map.next_value_seed(Canonical { out: &mut value, depth: self.depth + 1 })?;
            entries.insert(key, value);
        }
        self.write(b"{");
        for (i, (k, v)) in entries.into_iter().enumerate() {
            if i > 0 {
                self.write(b",");
            }
            self.write_json(&k);
            self.write(b":");
            self.out.append(v);
        }
        self.write(b"}");
        Ok(())
    }
}

/// An array element: writes the separator only once an element is there.
struct Element<'a, 'h> {
    inner: &'a mut Canonical<'h>,
    comma: bool,
}

impl<'de> DeserializeSeed<'de> for Element<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.comma {
            self.inner.write(b",");
        }
        Canonical { out: self.inner.out, depth: self.inner.depth }.deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_digest(text: &str) {
        let tree: Value = serde_json::from_str(text).unwrap();
        assert_eq!(of_text(text).unwrap(), of_value(&tree), "{text}");
    }

    /// The digests delivery records already in Redis carry: the canonical
    /// form must never change, or a replay would report a changed event.
    #[test]
    fn a_body_digest_is_the_first_64_bits_of_its_sha256() {
        // SHA-256("abc") = ba7816bf8f01cfea 414140de5dae2223…
        assert_eq!(of_body(b"abc"), "ba7816bf8f01cfea");
    }

    #[test]
    fn digests_are_the_stored_ones() {
        for (event, stored) in [
            (serde_json::json!({"org": "octo", "repo": "repo", "action": "opened", "number": 7}), "314e77443fb0c7f3"),
            (Value::Null, "74234e98afe7498f"),
            (serde_json::json!({"b": [1, "x\u{1}é", true, null], "a": {"z": 1, "y": "2"}}), "71deb580d58f3cb9"),
        ] {
            assert_eq!(of_value(&event), stored, "{event}");
            assert_eq!(of_text(&event.to_string()).unwrap(), stored, "{event}");
        }
    }

    /// A record of an earlier version (128 bits) still matches its event.
    #[test]
    fn same_event_compares_the_digits_both_keep() {
        let old = "ba7816bf8f01cfea414140de5dae2223";
        assert!(same_event(old, &of_body(b"abc")));
        assert!(same_event(&of_body(b"abc"), &of_body(b"abc")));
        assert!(!same_event(old, &of_body(b"abd")));
        assert!(!same_event("ba7816bf8f01cfeb414140de5dae2223", &of_body(b"abc")));
    }

    /// The digest keeps its keys in byte order whatever order the tree's
    /// maps keep. Without `serde_json/preserve_order` every `Map` is
    /// sorted; `cargo test --no-default-features --features
    /// serde_json/preserve_order --lib event_digest` (a step of
    /// scripts/test.sh) holds it with maps in insertion order (it failed
    /// there before `Sorted`).
    #[test]
    fn the_digest_does_not_depend_on_the_maps_order() {
        let written = r#"{"repo":"r","org":"o","number":{"z":1,"a":[{"y":2,"b":3}]},"action":"a"}"#;
        let sorted = r#"{"action":"a","number":{"a":[{"b":3,"y":2}],"z":1},"org":"o","repo":"r"}"#;
        let tree: Value = serde_json::from_str(written).unwrap();
        let digest = of_value(&tree);
        assert_eq!(digest, of_value(&serde_json::from_str(sorted).unwrap()));
        assert_eq!(digest, of_text(written).unwrap());
        assert_eq!(digest, of_text(sorted).unwrap());
        // SHA-256 of the sorted text itself: the canonical form is that text.
        assert_eq!(digest, hex_prefix(Sha256::new_with_prefix(sorted.as_bytes())));
    }

    #[test]
    fn a_deep_tree_has_a_digest() {
        let mut deep = Value::Null;
        for _ in 0..300 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(of_value(&deep).len(), 16);
    }

    #[test]
    fn digest_equals_the_tree_digest() {
        for text in [
            "null",
            "{}",
            "[]",
            r#"{"b":1,"a":[1,2,{"z":null,"y":true}],"c":"x\"\n\u0001é"}"#,
            r#"{"a":1,"a":2}"#,
            r#"[1.5, -0, 0.1, 1e300, -3, 18446744073709551615, -9223372036854775808, 12345678901234567890123]"#,
            r#"{"org":"o","repo":"r","action":"a","number":7,"deep":[[[[{"k":[{}]}]]]]}"#,
            "  { \"sp\" : [ 1 , 2 ] }  ",
            r#""just a string""#,
        ] {
            same_digest(text);
        }
    }

    #[test]
    fn digest_of_the_shared_fixtures() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/github-webhook-examples.json");
        let all: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let examples: Vec<&Value> =
            all.as_array().unwrap().iter().flat_map(|e| e["examples"].as_array().unwrap()).collect();
        assert_eq!(examples.len(), 329);
        for ex in examples {
            same_digest(&serde_json::to_string_pretty(ex).unwrap());
        }
        same_digest(&all.to_string());
    }

    #[test]
    fn too_deep_is_refused() {
        let deep = "[".repeat(300) + &"]".repeat(300);
        assert!(of_text(&deep).is_err());
        let deep = "{\"a\":".repeat(300) + "1" + &"}".repeat(300);
        assert!(of_text(&deep).is_err());
    }

    proptest::proptest! {
        #[test]
        fn digest_equals_the_tree_digest_for_any_json(text in r#"[\[\]{}",:0-9a-c.eE+\- ]{0,60}"#) {
            if let Ok(tree) = serde_json::from_str::<Value>(&text) {
                proptest::prop_assert_eq!(of_text(&text).unwrap(), of_value(&tree));
            }
        }
    }
}
