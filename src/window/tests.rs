//! Tests of the window analysis: each rule of docs/window.md (evidence, window edges, modes, decision
//! order, groups), the request checks and their messages, and the property that history order never
//! matters.

use super::*;
use crate::jcs::digest;
use proptest::prelude::*;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// An RFC 3339 instant `secs` seconds after 2026-11-04T10:00:00Z.
fn t(secs: i64) -> String {
    let base = OffsetDateTime::parse("2026-11-04T10:00:00Z", &Rfc3339).unwrap();
    (base + time::Duration::seconds(secs)).format(&Rfc3339).unwrap()
}

/// A history entry for identity `evt_9` with payload `{"amount": 5}`.
fn entry(id: &str, secs: i64, outcome: &str) -> Value {
    json!({"id": id, "identity": "evt_9", "receivedAt": t(secs),
               "payload": {"amount": 5}, "outcome": outcome})
}

fn request(history: Vec<Value>, incoming_secs: i64, window: i64, mode: &str) -> Value {
    json!({
        "history": history,
        "incoming": {"identity": "evt_9", "receivedAt": t(incoming_secs), "payload": {"amount": 5}},
        "windowSeconds": window,
        "windowMode": mode,
    })
}

fn run(request: &Value) -> Value {
    let response = analyze(request).unwrap();
    let data = response["data"].clone();
    assert_eq!(response, json!({ "data": data }));
    data
}

fn decision(data: &Value) -> (&str, &str) {
    (data["decision"].as_str().unwrap(), data["status"].as_str().unwrap())
}

fn rules(data: &Value) -> Vec<&str> {
    data["witnesses"].as_array().unwrap().iter().map(|w| w["rule"].as_str().unwrap()).collect()
}

fn error(request: Value) -> String {
    analyze(&request).unwrap_err().to_string()
}

#[test]
fn contract_example_is_a_dedupe() {
    let request: Value = serde_json::from_str(
        r#"{"history": [{"id": "d1", "identity": "evt_9", "receivedAt": "2026-11-04T10:00:00Z",
                             "payload": {"amount": 5}, "outcome": "processed"}],
                "incoming": {"identity": "evt_9", "receivedAt": "2026-11-04T10:00:30Z", "payload": {"amount": 5}},
                "windowSeconds": 300, "windowMode": "from-first"}"#,
    )
    .unwrap();
    let data = run(&request);
    assert_eq!(decision(&data), ("dedupe", "pass"));
    assert_eq!(data["matchedIds"], json!(["d1"]));
    assert_eq!(data["groups"], json!([]));
    assert_eq!(data["incomingDigest"], json!(digest(&json!({"amount": 5}))));
    assert_eq!(
        data["witnesses"],
        json!([
            {"rule": "window-match", "ids": ["d1"], "windowMode": "from-first", "windowSeconds": 300},
            {"rule": "matched-processed", "ids": ["d1"]},
        ])
    );
    assert_eq!(
        data["versions"],
        json!({"engine": "idemgate-window/1", "canonicalization": "RFC8785-JCS", "digest": "sha256"})
    );
    assert_eq!(data["limits"], json!(["history: at most 500 entries", "windowSeconds: 1..2592000"]));
    assert_eq!(data["deterministic"], json!(true));
    assert!(data["reason"].as_str().unwrap().contains("d1"));
    // The same bytes through the text entry points.
    assert_eq!(analyze_str(&request.to_string()).unwrap()["data"], data);
    assert_eq!(analyze_slice(request.to_string().as_bytes()).unwrap()["data"], data);
}

// Rule 1.

#[test]
fn incoming_without_time_abstains() {
    for at in [json!(null), json!("yesterday"), json!(1_700_000_000), json!("2026-11-04T10:00:30")] {
        let mut req = request(vec![entry("d1", 0, "processed")], 30, 300, "from-first");
        req["incoming"]["receivedAt"] = at.clone();
        let data = run(&req);
        assert_eq!(decision(&data), ("abstain", "unknown"), "{at}");
        assert_eq!(rules(&data), ["incoming-missing-time"]);
        assert_eq!(data["matchedIds"], json!([]));
        assert!(data["incomingDigest"].is_string());
    }
}

#[test]
fn incoming_without_payload_evidence_abstains() {
    let mut req = request(vec![entry("d1", 0, "processed")], 30, 300, "from-first");
    req["incoming"]["payload"] = json!(null);
    req["incoming"]["digest"] = json!(42);
    let data = run(&req);
    assert_eq!(decision(&data), ("abstain", "unknown"));
    assert_eq!(rules(&data), ["incoming-missing-payload"]);
    assert!(data.get("incomingDigest").is_none());

    req["incoming"].as_object_mut().unwrap().remove("receivedAt");
    let data = run(&req);
    assert_eq!(rules(&data), ["incoming-missing-time", "incoming-missing-payload"]);
}

#[test]
fn rule_1_comes_before_rule_2() {
    let mut untimed = entry("d1", 0, "processed");
    untimed.as_object_mut().unwrap().remove("receivedAt");
    let mut req = request(vec![untimed], 30, 300, "from-first");
    req["incoming"]["payload"] = json!(null);
    assert_eq!(rules(&run(&req)), ["incoming-missing-payload"]);
}

// Rule 2.

#[test]
fn same_identity_entry_without_time_abstains() {
    let mut untimed = entry("d2", 0, "failed");
    untimed["receivedAt"] = json!("not a time");
    let data = run(&request(vec![entry("d1", 0, "processed"), untimed], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("abstain", "unknown"));
    assert_eq!(data["witnesses"], json!([{"rule": "history-missing-time", "ids": ["d2"]}]));
}

#[test]
fn other_identity_without_time_does_not_matter() {
    let other = json!({"id": "x", "identity": "evt_other", "payload": 1});
    let data = run(&request(vec![entry("d1", 0, "processed"), other], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("dedupe", "pass"));
}

#[test]
fn only_later_history_abstains() {
    let data = run(&request(vec![entry("d2", 60, "processed"), entry("d1", 31, "processed")], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("abstain", "unknown"));
    assert_eq!(data["witnesses"], json!([{"rule": "no-earlier-entry", "ids": ["d1", "d2"]}]));
    assert_eq!(data["matchedIds"], json!([]));
}

#[test]
fn later_entries_are_not_earlier() {
    let mut later = entry("late", 40, "in_flight");
    later["payload"] = json!({"amount": 6});
    let data = run(&request(vec![later, entry("d1", 0, "processed")], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("dedupe", "pass"));
    assert_eq!(data["matchedIds"], json!(["d1"]));
}

#[test]
fn same_instant_as_incoming_is_earlier() {
    let data = run(&request(vec![entry("d1", 30, "processed")], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("dedupe", "pass"));
}

#[test]
fn offsets_are_compared_as_instants() {
    // 12:00:30+02:00 is 10:00:30Z, 30 seconds after d1.
    let mut req = request(vec![entry("d1", 0, "processed")], 0, 30, "from-first");
    req["incoming"]["receivedAt"] = json!("2026-11-04T12:00:30+02:00");
    assert_eq!(decision(&run(&req)), ("dedupe", "pass"));
    req["incoming"]["receivedAt"] = json!("2026-11-04T12:00:31+02:00");
    assert_eq!(decision(&run(&req)), ("process", "pass"));
    req["incoming"]["receivedAt"] = json!("2026-11-04T05:00:31-05:00");
    assert_eq!(decision(&run(&req)), ("process", "pass"));
}

// Rules 3 and 4.

#[test]
fn no_history_for_identity_processes() {
    let mut other = entry("x", 0, "processed");
    other["identity"] = json!("evt_other");
    let data = run(&request(vec![other], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("process", "pass"));
    assert_eq!(data["witnesses"], json!([{"rule": "no-history", "ids": []}]));

    let data = run(&request(vec![], 30, 300, "sliding"));
    assert_eq!(decision(&data), ("process", "pass"));
}

#[test]
fn outside_the_window_processes() {
    let data = run(&request(vec![entry("d1", 0, "processed")], 301, 300, "from-first"));
    assert_eq!(decision(&data), ("process", "pass"));
    assert_eq!(data["matchedIds"], json!([]));
    assert_eq!(data["witnesses"], json!([{"rule": "outside-window", "ids": ["d1"]}]));
}

#[test]
fn exactly_window_seconds_is_inside() {
    for mode in ["from-first", "sliding"] {
        let inside = run(&request(vec![entry("d1", 0, "processed")], 300, 300, mode));
        assert_eq!(decision(&inside), ("dedupe", "pass"), "{mode}");
        let outside = run(&request(vec![entry("d1", 0, "processed")], 301, 300, mode));
        assert_eq!(decision(&outside), ("process", "pass"), "{mode}");
    }
    // A fraction of a second past the edge is outside too.
    let mut req = request(vec![entry("d1", 0, "processed")], 0, 300, "from-first");
    req["incoming"]["receivedAt"] = json!("2026-11-04T10:05:00.001Z");
    assert_eq!(decision(&run(&req)), ("process", "pass"));
}

#[test]
fn group_edges_are_inclusive() {
    // from-first: 300 s after the first joins, 301 s starts a new group.
    let joined = run(&request(vec![entry("a", 0, "processed"), entry("b", 300, "processed")], 310, 300, "from-first"));
    assert_eq!(joined["groups"], json!([{"identity": "evt_9", "ids": ["a", "b"], "conflict": false}]));
    let split = run(&request(vec![entry("a", 0, "processed"), entry("b", 301, "processed")], 310, 300, "from-first"));
    assert_eq!(split["groups"], json!([]));
    assert_eq!(split["matchedIds"], json!(["b"]));
}

#[test]
fn modes_disagree_on_a_chain() {
    // 0, 200 then incoming at 400, window 300: from-first measures from 0
    // (400 > 300), sliding from 200 (200 <= 300).
    let history = vec![entry("a", 0, "processed"), entry("b", 200, "processed")];
    let first = run(&request(history.clone(), 400, 300, "from-first"));
    assert_eq!(decision(&first), ("process", "pass"));
    assert_eq!(first["witnesses"], json!([{"rule": "outside-window", "ids": ["a", "b"]}]));
    let sliding = run(&request(history, 400, 300, "sliding"));
    assert_eq!(decision(&sliding), ("dedupe", "pass"));
    assert_eq!(sliding["matchedIds"], json!(["a", "b"]));
}

#[test]
fn modes_cut_groups_differently() {
    // 0, 200, 400, 600 with window 300.
    let history: Vec<Value> = (0..4).map(|i| entry(&format!("e{i}"), i * 200, "failed")).collect();
    let first = run(&request(history.clone(), 650, 300, "from-first"));
    assert_eq!(
        first["groups"],
        json!([
            {"identity": "evt_9", "ids": ["e0", "e1"], "conflict": false},
            {"identity": "evt_9", "ids": ["e2", "e3"], "conflict": false},
        ])
    );
    assert_eq!(first["matchedIds"], json!(["e2", "e3"]));
    assert_eq!(decision(&first), ("retry", "pass"));
    let sliding = run(&request(history, 650, 300, "sliding"));
    assert_eq!(sliding["groups"], json!([{"identity": "evt_9", "ids": ["e0", "e1", "e2", "e3"], "conflict": false}]));
    assert_eq!(sliding["matchedIds"], json!(["e0", "e1", "e2", "e3"]));
}

#[test]
fn window_mode_defaults_to_from_first() {
    let mut req = request(vec![entry("a", 0, "processed"), entry("b", 200, "processed")], 400, 300, "x");
    req.as_object_mut().unwrap().remove("windowMode");
    assert_eq!(decision(&run(&req)), ("process", "pass"));
    req["windowMode"] = json!(null);
    assert_eq!(decision(&run(&req)), ("process", "pass"));
}

#[test]
fn matched_ids_are_in_time_order_ties_by_index() {
    let data = run(&request(
        vec![entry("b", 20, "processed"), entry("a", 10, "processed"), entry("c", 10, "processed")],
        30,
        300,
        "from-first",
    ));
    assert_eq!(data["matchedIds"], json!(["a", "c", "b"]));
}

#[test]
fn entries_without_id_are_named_by_index() {
    let mut e0 = entry("", 0, "failed");
    e0.as_object_mut().unwrap().remove("id");
    let mut e1 = entry("", 10, "failed");
    e1["id"] = json!(null);
    let data = run(&request(vec![e0, e1], 30, 300, "from-first"));
    assert_eq!(data["matchedIds"], json!(["0", "1"]));
    assert_eq!(decision(&data), ("retry", "pass"));
}

// Rules 5 to 9 and their order.

#[test]
fn matched_entry_without_payload_evidence_abstains() {
    let mut bare = entry("d2", 10, "processed");
    bare.as_object_mut().unwrap().remove("payload");
    let mut conflicting = entry("d3", 20, "processed");
    conflicting["payload"] = json!({"amount": 6});
    // Rule 5 wins over rule 6.
    let data = run(&request(vec![entry("d1", 0, "processed"), bare, conflicting], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("abstain", "unknown"));
    assert_eq!(data["matchedIds"], json!(["d1", "d2", "d3"]));
    assert_eq!(rules(&data), ["window-match", "matched-missing-payload"]);
    assert_eq!(data["witnesses"][1]["ids"], json!(["d2"]));
}

#[test]
fn payload_conflict_reconciles_before_dedupe() {
    let mut conflicting = entry("d2", 10, "processed");
    conflicting["payload"] = json!({"amount": 6});
    let data = run(&request(vec![entry("d1", 0, "processed"), conflicting], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("reconcile", "fail"));
    assert_eq!(data["witnesses"][1], json!({"rule": "payload-conflict", "ids": ["d2"]}));
    assert_eq!(data["groups"], json!([{"identity": "evt_9", "ids": ["d1", "d2"], "conflict": true}]));
}

#[test]
fn processed_dedupes_before_in_flight_reconciles() {
    let data = run(&request(
        vec![entry("d1", 0, "in_flight"), entry("d2", 10, "processed"), entry("d3", 20, "failed")],
        30,
        300,
        "from-first",
    ));
    assert_eq!(decision(&data), ("dedupe", "pass"));
    assert_eq!(data["witnesses"][1], json!({"rule": "matched-processed", "ids": ["d2"]}));
}

#[test]
fn in_flight_or_unknown_reconciles_before_retry() {
    for outcome in [json!("in_flight"), json!("unknown"), json!(null)] {
        let mut unsettled = entry("d2", 10, "failed");
        unsettled["outcome"] = outcome.clone();
        let data = run(&request(vec![entry("d1", 0, "failed"), unsettled], 30, 300, "sliding"));
        assert_eq!(decision(&data), ("reconcile", "fail"), "{outcome}");
        assert_eq!(data["witnesses"][1], json!({"rule": "matched-unsettled", "ids": ["d2"]}));
    }
    let mut absent = entry("d1", 0, "failed");
    absent.as_object_mut().unwrap().remove("outcome");
    assert_eq!(decision(&run(&request(vec![absent], 30, 300, "sliding"))), ("reconcile", "fail"));
}

#[test]
fn all_failed_retries() {
    let data = run(&request(vec![entry("d1", 0, "failed"), entry("d2", 10, "failed")], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("retry", "pass"));
    assert_eq!(data["matchedIds"], json!(["d1", "d2"]));
    assert_eq!(data["witnesses"][1], json!({"rule": "matched-all-failed", "ids": ["d1", "d2"]}));
}

// Payload evidence.

#[test]
fn digests_stand_in_for_payloads() {
    let five = digest(&json!({"amount": 5}));
    // History digest against incoming payload.
    let mut by_digest = entry("d1", 0, "processed");
    by_digest.as_object_mut().unwrap().remove("payload");
    by_digest["digest"] = json!(five);
    let data = run(&request(vec![by_digest.clone()], 30, 300, "from-first"));
    assert_eq!(decision(&data), ("dedupe", "pass"));

    // Digest against digest, compared as is (any string).
    let mut req = request(vec![by_digest.clone()], 30, 300, "from-first");
    req["incoming"] = json!({"identity": "evt_9", "receivedAt": t(30), "digest": five});
    let data = run(&req);
    assert_eq!(decision(&data), ("dedupe", "pass"));
    assert_eq!(data["incomingDigest"], json!(five));
    req["incoming"]["digest"] = json!("md5:abc");
    let data = run(&req);
    assert_eq!(decision(&data), ("reconcile", "fail"));
    assert_eq!(data["incomingDigest"], json!("md5:abc"));

    // A payload wins over a digest; a null payload falls back to it.
    let mut both = entry("d1", 0, "processed");
    both["digest"] = json!("sha256:whatever");
    assert_eq!(decision(&run(&request(vec![both.clone()], 30, 300, "from-first"))), ("dedupe", "pass"));
    both["payload"] = json!(null);
    assert_eq!(decision(&run(&request(vec![both], 30, 300, "from-first"))), ("reconcile", "fail"));
}

#[test]
fn canonical_payloads_compare_equal() {
    let mut history = entry("d1", 0, "processed");
    history["payload"] = serde_json::from_str(r#"{"b": [1.0, "\u00e9"], "a": 5.0}"#).unwrap();
    let mut req = request(vec![history], 30, 300, "from-first");
    req["incoming"]["payload"] = serde_json::from_str(r#"{"a":5,"b":[1,"é"]}"#).unwrap();
    assert_eq!(decision(&run(&req)), ("dedupe", "pass"));
    // Non-object payloads are fine too.
    req["incoming"]["payload"] = json!("text");
    assert_eq!(decision(&run(&req)), ("reconcile", "fail"));
}

// Groups.

#[test]
fn groups_cover_each_identity_and_skip_untimed() {
    let mut untimed = entry("u", 0, "failed");
    untimed.as_object_mut().unwrap().remove("receivedAt");
    untimed["identity"] = json!("evt_a");
    let mut bare = entry("b2", 5, "failed");
    bare["identity"] = json!("evt_b");
    bare.as_object_mut().unwrap().remove("payload");
    let history = vec![
        json!({"id": "b1", "identity": "evt_b", "receivedAt": t(0), "payload": 1}),
        bare,
        json!({"id": "a1", "identity": "evt_a", "receivedAt": t(0), "payload": 1}),
        json!({"id": "a2", "identity": "evt_a", "receivedAt": t(100), "payload": 2}),
        untimed,
        json!({"id": "c1", "identity": "evt_c", "receivedAt": t(0), "payload": 1}),
        json!({"id": "a3", "identity": "evt_a", "receivedAt": t(9000), "payload": 2}),
        // Dated after the incoming delivery, but still history.
        json!({"id": "a4", "identity": "evt_a", "receivedAt": t(9100), "payload": 2}),
    ];
    let data = run(&request(history, 30, 300, "from-first"));
    assert_eq!(
        data["groups"],
        json!([
            {"identity": "evt_a", "ids": ["a1", "a2"], "conflict": true},
            {"identity": "evt_a", "ids": ["a3", "a4"], "conflict": false},
            {"identity": "evt_b", "ids": ["b1", "b2"], "conflict": false},
        ])
    );
    assert_eq!(decision(&data), ("process", "pass"));
}

// Invalid input.

#[test]
fn body_must_be_a_json_object() {
    assert!(analyze_str("{").unwrap_err().to_string().starts_with("body is not valid JSON"));
    assert!(analyze_slice(b"\xff").unwrap_err().to_string().starts_with("body is not valid JSON"));
    assert_eq!(analyze_str("[]").unwrap_err().to_string(), "body must be a JSON object, got an array");
    assert_eq!(error(json!(5)), "body must be a JSON object, got 5");
    assert_eq!(error(json!(null)), "body must be a JSON object, got null");
}

#[test]
fn history_must_be_an_array_of_at_most_500() {
    let mut req = request(vec![], 30, 300, "from-first");
    req.as_object_mut().unwrap().remove("history");
    assert_eq!(error(req.clone()), "history is missing; it must be an array");
    req["history"] = json!({"0": {}});
    assert_eq!(error(req.clone()), "history must be an array, got an object");
    req["history"] = json!(null);
    assert_eq!(error(req.clone()), "history must be an array, got null");

    let full: Vec<Value> = (0..500).map(|i| entry(&i.to_string(), 0, "failed")).collect();
    req["history"] = json!(full);
    assert!(analyze(&req).is_ok());
    req["history"].as_array_mut().unwrap().push(entry("x", 0, "failed"));
    assert_eq!(error(req.clone()), "history has 501 entries; at most 500 are allowed");
}

#[test]
fn history_entries_are_checked() {
    let cases = [
        (json!(7), "history[1] must be an object, got 7"),
        (json!(["a"]), "history[1] must be an object, got an array"),
        (json!({"receivedAt": t(0)}), "history[1].identity is missing; it must be a string"),
        (json!({"identity": 9}), "history[1].identity must be a string, got 9"),
        (json!({"identity": null}), "history[1].identity must be a string, got null"),
        (
            json!({"identity": "e", "outcome": "done"}),
            r#"history[1].outcome must be one of "processed", "failed", "in_flight", "unknown", got "done""#,
        ),
        (
            json!({"identity": "e", "outcome": true}),
            r#"history[1].outcome must be one of "processed", "failed", "in_flight", "unknown", got true"#,
        ),
    ];
    for (bad, message) in cases {
        let req = request(vec![entry("d0", 0, "failed"), bad], 30, 300, "from-first");
        assert_eq!(error(req), message);
    }
}

#[test]
fn incoming_is_checked() {
    let mut req = request(vec![], 30, 300, "from-first");
    req.as_object_mut().unwrap().remove("incoming");
    assert_eq!(error(req.clone()), "incoming is missing; it must be an object");
    req["incoming"] = json!("evt_9");
    assert_eq!(error(req.clone()), r#"incoming must be an object, got "evt_9""#);
    req["incoming"] = json!({"receivedAt": t(0)});
    assert_eq!(error(req.clone()), "incoming.identity is missing; it must be a string");
    req["incoming"] = json!({"identity": ["evt_9"]});
    assert_eq!(error(req.clone()), "incoming.identity must be a string, got an array");
}

#[test]
fn window_seconds_is_checked() {
    let mut req = request(vec![], 30, 300, "from-first");
    req.as_object_mut().unwrap().remove("windowSeconds");
    assert_eq!(error(req.clone()), "windowSeconds is missing; it must be an integer from 1 to 2592000");
    let bad = [
        (json!(0), "0"),
        (json!(-1), "-1"),
        (json!(2_592_001), "2592001"),
        (json!(u64::MAX), "18446744073709551615"),
        (json!(1.5), "1.5"),
        (json!(2_592_001.0), "2592001.0"),
        (json!("300"), r#""300""#),
        (json!(null), "null"),
    ];
    for (value, shown) in bad {
        req["windowSeconds"] = value;
        assert_eq!(error(req.clone()), format!("windowSeconds must be an integer from 1 to 2592000, got {shown}"));
    }
    for ok in [json!(1), json!(2_592_000), json!(300.0), serde_json::from_str("3e2").unwrap()] {
        req["windowSeconds"] = ok;
        assert!(analyze(&req).is_ok(), "{}", req["windowSeconds"]);
    }
}

#[test]
fn window_mode_is_checked() {
    let mut req = request(vec![], 30, 300, "tumbling");
    assert_eq!(error(req.clone()), r#"windowMode must be "from-first" or "sliding", got "tumbling""#);
    req["windowMode"] = json!(1);
    assert_eq!(error(req), r#"windowMode must be "from-first" or "sliding", got 1"#);
}

#[test]
fn long_values_are_shortened_in_messages() {
    let req = request(vec![], 30, 300, &"x".repeat(1000));
    let message = error(req);
    assert!(message.len() < 120, "{message}");
    assert!(message.ends_with("…"));
}

#[test]
fn error_message_names_the_field() {
    // The HTTP API sends this text as `{"error": …}`; the CLI prints it.
    let err = analyze(&json!([])).unwrap_err();
    assert_eq!(err.to_string(), "body must be a JSON object, got an array");
}

#[test]
fn full_history_runs() {
    // 500 entries: 300 of the incoming identity, spread over an hour, and
    // 200 of others, all with payloads to digest.
    let history: Vec<Value> = (0..500)
        .map(|i| {
            let identity = if i < 300 { "evt_9".to_owned() } else { format!("evt_{}", i % 17) };
            json!({"id": format!("e{i}"), "identity": identity, "receivedAt": t((i * 7919) % 3600),
                       "payload": {"amount": 5, "items": [i % 3, "x"]}, "outcome": "failed"})
        })
        .collect();
    let data = run(&request(history, 3600, 300, "sliding"));
    assert_eq!(decision(&data), ("reconcile", "fail"));
    assert_eq!(rules(&data), ["window-match", "payload-conflict"]);
}

// The history's order never matters.

/// A history entry: identity, time step (none: no `receivedAt`),
/// outcome (4: absent) and payload evidence (3: none), as indexes.
type Spec = (usize, Option<i64>, usize, usize);
/// Entries, a shuffle of their indexes, the incoming delivery (identity,
/// time step, payload), windowSeconds and whether the mode is sliding.
type Case = (Vec<Spec>, Vec<usize>, (usize, i64, usize), i64, bool);

fn arb_entry() -> impl Strategy<Value = Spec> {
    (0..3usize, prop::option::weighted(0.95, 0..40i64), 0..5usize, 0..4usize)
}

fn build(specs: &[Spec], distinct: bool) -> Vec<Value> {
    let identities = ["evt_a", "evt_b", "evt_c"];
    let outcomes = ["processed", "failed", "in_flight", "unknown", "missing"];
    specs
        .iter()
        .enumerate()
        .map(|(i, &(identity, at, outcome, payload))| {
            let mut e = json!({"id": format!("e{i}"), "identity": identities[identity]});
            if let Some(at) = at {
                // Steps of 10 s, or unique odd seconds to rule out ties.
                let secs = if distinct { at * 100 + i as i64 } else { at * 10 };
                e["receivedAt"] = json!(t(secs));
            }
            if outcome < 4 {
                e["outcome"] = json!(outcomes[outcome]);
            }
            match payload {
                0 => e["payload"] = json!({"n": 1}),
                1 => e["payload"] = json!({"n": 1.0}),
                2 => e["digest"] = json!(digest(&json!({"n": 2}))),
                _ => {}
            }
            e
        })
        .collect()
}

/// Decision, matchedIds and groups; ids sorted when ties may reorder them.
fn summary(data: &Value, sort: bool) -> Value {
    let sorted = |ids: &Value| {
        let mut ids: Vec<String> = serde_json::from_value(ids.clone()).unwrap();
        if sort {
            ids.sort();
        }
        ids
    };
    let groups: Vec<Value> = data["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| json!([g["identity"], sorted(&g["ids"]), g["conflict"]]))
        .collect();
    json!([data["decision"], data["status"], sorted(&data["matchedIds"]), groups])
}

fn shuffle_case(
    specs: Vec<Spec>,
    order: Vec<usize>,
    incoming: (usize, i64, usize),
    window: i64,
    sliding: bool,
    distinct: bool,
) -> Result<(), TestCaseError> {
    let history = build(&specs, distinct);
    let shuffled: Vec<Value> = order.iter().map(|&i| history[i].clone()).collect();
    let mode = if sliding { "sliding" } else { "from-first" };
    let mut req = request(history, 0, window, mode);
    let identity = ["evt_a", "evt_b", "evt_c"][incoming.0];
    let secs = if distinct { incoming.1 * 100 + 50 } else { incoming.1 * 10 };
    req["incoming"] = json!({"identity": identity, "receivedAt": t(secs)});
    req["incoming"]["payload"] = match incoming.2 {
        0 => json!({"n": 1}),
        _ => json!({"n": 2}),
    };
    let mut shuffled_req = req.clone();
    shuffled_req["history"] = json!(shuffled);
    let (a, b) = (run(&req), run(&shuffled_req));
    prop_assert_eq!(summary(&a, !distinct), summary(&b, !distinct));
    Ok(())
}

fn arb_case() -> impl Strategy<Value = Case> {
    prop::collection::vec(arb_entry(), 0..24).prop_flat_map(|specs| {
        let order: Vec<usize> = (0..specs.len()).collect();
        (
            Just(specs),
            Just(order).prop_shuffle(),
            (0..3usize, 0..45i64, 0..2usize),
            prop::sample::select(vec![5i64, 10, 30, 100, 250]),
            any::<bool>(),
        )
    })
}

proptest! {
    #[test]
    fn history_order_never_matters((specs, order, incoming, window, sliding) in arb_case()) {
        shuffle_case(specs, order, incoming, window, sliding, false)?;
    }

    #[test]
    fn history_order_never_matters_without_ties((specs, order, incoming, window, sliding) in arb_case()) {
        shuffle_case(specs, order, incoming, window, sliding, true)?;
    }
}

#[test]
fn ids_that_are_not_strings_are_not_errors() {
    let req = json!({"history": [
            {"id": 5, "identity": "e", "receivedAt": "2026-11-04T10:00:00Z", "payload": 1, "outcome": "processed"},
            {"id": true, "identity": "e", "receivedAt": "2026-11-04T10:00:01Z", "payload": 1, "outcome": "processed"}],
            "incoming": {"identity": "e", "receivedAt": "2026-11-04T10:00:02Z", "payload": 1}, "windowSeconds": 60});
    let out = analyze(&req).unwrap();
    assert_eq!(out["data"]["matchedIds"], json!(["5", "1"]));
}
