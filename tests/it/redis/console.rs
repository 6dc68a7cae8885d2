//! The ops API (`/v1/ops/*`) against a real Redis: each endpoint, paging,
//! the token, the retry's atomicity.

use axum::http::StatusCode;
use idemgate::gate::Gate;
use idemgate::vocabulary::Settings;

use idemgate::keys::Keys;
use redis::AsyncCommands;
use serde_json::Value;

use crate::base::console::{TOKEN, app_closed, call, deliver, event, event_text, get, router, run_ids};
use crate::support::{Backend, raw_conn};

/// Marks `run_id` dead as `lua/worker_fail.lua` leaves it: record `dead`
/// with its last error, and a dead-stream entry naming it.
pub(crate) async fn kill_run(ns: &str, run_id: &str) {
    let keys = Keys::new(ns).unwrap();
    let mut c = raw_conn().await;
    let _: () = c
        .hset_multiple(keys.run(run_id), &[("status", "dead"), ("attempts", "3"), ("last_error", "exit status 3")])
        .await
        .unwrap();
    let fields = [("run_id", run_id), ("group", "g"), ("attempts", "3"), ("last_error", "exit status 3")];
    let _: String = c.xadd(keys.runs_dead(), "*", &fields).await.unwrap();
    // The destination it died for reads the runs stream, as a real dead run's does.
    // (Once: a second dead run finds it there, BUSYGROUP.)
    let _: redis::RedisResult<()> =
        redis::cmd("XGROUP").arg("CREATE").arg(keys.runs()).arg("g").arg("$").arg("MKSTREAM").query_async(&mut c).await;
}

/// Every endpoint on a real Redis: stats, the run list, one run with its
/// payload verbatim, a delivery with its run, the dead list, a retry; and
/// what each answers for a record that is not there.
#[tokio::test]
async fn each_endpoint_on_redis() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    for n in 1..=3 {
        assert_eq!(deliver(&app, &format!("d-{n}"), n).await["run_id"], format!("run-{n}"));
    }
    assert_eq!(deliver(&app, "d-1-again", 1).await["status"], "duplicate");
    kill_run(&ns, "run-2").await;

    let r = get(&app, "/v1/ops/stats").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let s = r.json();
    assert_eq!((s["store"].as_str(), s["namespace"].as_str()), (Some("redis"), Some(ns.as_str())));
    assert_eq!(
        (s["keys"]["delivery"].as_u64(), s["keys"]["run"].as_u64(), s["run_counter"].as_u64()),
        (Some(4), Some(3), Some(3))
    );
    assert_eq!((s["runs"]["length"].as_u64(), s["dead"]["length"].as_u64()), (Some(3), Some(1)));
    assert!(s["memory"]["server"]["used_memory"].as_u64().unwrap() > 0, "{s}");
    assert!(s["read_at_ms"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(s["service"]["deliveries"]["created"], 3, "{s}");
    assert_eq!(s["service"]["deliveries"]["duplicate"], 1, "{s}");

    let page = get(&app, "/v1/ops/runs").await.json();
    assert_eq!(run_ids(&page), ["run-3", "run-2", "run-1"]);
    assert_eq!(page["next_before"], Value::Null);
    let r2 = &page["runs"][1];
    assert_eq!(
        (r2["status"].as_str(), r2["attempts"].as_u64(), r2["last_error"].as_str()),
        (Some("dead"), Some(3), Some("exit status 3"))
    );
    assert_eq!(
        (r2["provider"].as_str(), r2["repo"].as_str(), r2["number"].as_str(), r2["delivery_id"].as_str()),
        (Some("github"), Some("o/r"), Some("2"), Some("d-2"))
    );
    assert!(r2["created_at"].as_str().unwrap().ends_with('Z'), "{r2}");

    let run = get(&app, "/v1/ops/runs/run-1").await;
    assert_eq!(run.status, StatusCode::OK, "{}", run.text);
    assert!(run.text.contains("18446744073709551617"), "the number past 2^64 keeps its digits");
    let run = run.json();
    assert_eq!(
        (run["status"].as_str(), run["key"].as_str()),
        (Some("queued"), Some(Keys::new(&ns).unwrap().run("run-1").as_str()))
    );
    assert_eq!(run["payload"], event(1), "the payload as sent");
    assert!(!run["fields"].as_object().unwrap().contains_key("payload"));
    assert_eq!(
        (run["payload_bytes"].as_u64(), run["payload_cut"].as_bool()),
        (Some(event_text(1).len() as u64), Some(false))
    );
    // The whole payload, byte for byte, at its own URL.
    let whole = get(&app, "/v1/ops/runs/run-1/payload").await;
    assert_eq!((whole.status, whole.header("content-type")), (StatusCode::OK, Some("application/json")));
    assert_eq!(whole.text, event_text(1));

    let d = get(&app, "/v1/ops/deliveries/github/d-1-again").await.json();
    assert_eq!((d["record"]["status"].as_str(), d["record"]["run_id"].as_str()), (Some("duplicate"), Some("run-1")));
    assert_eq!(d["run"]["run_id"], "run-1");
    assert_eq!(d["key"], Keys::new(&ns).unwrap().delivery("github", "d-1-again"));
    assert!(d["ttl_ms"].as_u64().unwrap() > 0);

    let dead = get(&app, "/v1/ops/dead").await.json();
    assert_eq!(run_ids(&dead), ["run-2"]);
    assert_eq!(dead["key"], Keys::new(&ns).unwrap().runs_dead());

    let r = call(&app, "POST", "/v1/ops/dead/run-2/retry", Some(TOKEN), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!((r.json()["result"].as_str(), r.json()["dead_entries_removed"].as_u64()), (Some("moved"), Some(1)));
    assert!(run_ids(&get(&app, "/v1/ops/dead").await.json()).is_empty());
    assert_eq!(get(&app, "/v1/ops/runs/run-2").await.json()["status"], "queued");

    // Not there, or not dead: nothing changes.
    let r = call(&app, "POST", "/v1/ops/dead/run-1/retry", Some(TOKEN), None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.json()["error"].as_str().unwrap().contains("run-1 is queued, not dead"), "{}", r.text);
    for uri in ["/v1/ops/runs/run-99", "/v1/ops/deliveries/github/nope"] {
        let r = get(&app, uri).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}: {}", r.text);
        assert!(r.json()["error"].is_string());
    }
    assert_eq!(call(&app, "POST", "/v1/ops/dead/run-99/retry", Some(TOKEN), None).await.status, StatusCode::NOT_FOUND);
}

/// Newest first, `limit` at a time, `next_before` to go on; a status filter.
#[tokio::test]
async fn runs_are_paged_newest_first_and_filtered_by_status() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    for n in 1..=5 {
        deliver(&app, &format!("d-{n}"), n).await;
    }
    kill_run(&ns, "run-4").await;
    kill_run(&ns, "run-1").await;
    let mut seen = Vec::new();
    let mut uri = "/v1/ops/runs?limit=2".to_owned();
    loop {
        let page = get(&app, &uri).await.json();
        let ids: Vec<String> = run_ids(&page).into_iter().map(str::to_owned).collect();
        assert!(ids.len() <= 2);
        seen.push(ids);
        match page["next_before"].as_str() {
            Some(next) => uri = format!("/v1/ops/runs?limit=2&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen, [vec!["run-5", "run-4"], vec!["run-3", "run-2"], vec!["run-1"]]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=dead").await.json()), ["run-4", "run-1"]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=dead&before=run-4").await.json()), ["run-1"]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=queued&limit=1").await.json()), ["run-5"]);
    assert!(run_ids(&get(&app, "/v1/ops/runs?status=done").await.json()).is_empty());
    for bad in
        ["status=zombie", "before=7", "limit=0", "limit=1001", "limit=x", "limit=1&limit=2", "repo=", "since=soon"]
    {
        let r = get(&app, &format!("/v1/ops/runs?{bad}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
        assert!(r.json()["error"].is_string(), "{bad}");
    }
}

const OPS_ENDPOINTS: [(&str, &str); 6] = [
    ("GET", "/v1/ops/stats"),
    ("GET", "/v1/ops/runs"),
    ("GET", "/v1/ops/runs/run-1"),
    ("GET", "/v1/ops/deliveries/github/d-1"),
    ("GET", "/v1/ops/dead"),
    ("POST", "/v1/ops/dead/run-1/retry"),
];

/// No token, or a wrong one: 401 on every endpoint, and a dead run stays dead.
/// Without a token on a public address: `/v1/ops/*` and `/console` closed.
#[tokio::test]
async fn every_endpoint_needs_the_token_and_a_public_address_closes_the_console() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    deliver(&app, "d-1", 1).await;
    kill_run(&ns, "run-1").await;
    for (method, uri) in OPS_ENDPOINTS {
        for token in [None, Some("wrong")] {
            let r = call(&app, method, uri, token, None).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {uri} {token:?}: {}", r.text);
            assert!(r.json()["error"].is_string());
            assert!(!r.text.contains(TOKEN));
        }
    }
    assert_eq!(get(&app, "/v1/ops/runs/run-1").await.json()["status"], "dead", "the refused retry changed nothing");
    // The page holds no data: it loads without the token and asks for it.
    assert_eq!(call(&app, "GET", "/console", None, None).await.status, StatusCode::OK);

    let gate = Gate::new(["o/r"], Backend::Memory.store(&Settings::default()).await);
    let closed = app_closed(gate, true);
    for (method, uri) in OPS_ENDPOINTS.iter().copied().chain([("GET", "/console"), ("GET", "/console/main.js")]) {
        let r = call(&closed, method, uri, None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {uri}: {}", r.text);
        assert!(r.json()["error"].as_str().unwrap().contains("--allow-unauthenticated-api"));
    }
    let gate = Gate::new(["o/r"], Backend::Memory.store(&Settings::default()).await);
    let open = app_closed(gate, false);
    assert_eq!(call(&open, "GET", "/v1/ops/stats", None, None).await.status, StatusCode::OK);
    assert_eq!(call(&open, "GET", "/console", None, None).await.status, StatusCode::OK);
}

/// Two operators press `Retry` on one dead run at once: the run goes back
/// on the runs stream once; the other retry is refused (409), changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_retries_of_one_dead_run_redrive_it_once() {
    const RUNS: u64 = 20;
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    let keys = Keys::new(&ns).unwrap();
    for n in 1..=RUNS {
        deliver(&app, &format!("d-{n}"), n).await;
        kill_run(&ns, &format!("run-{n}")).await;
    }
    let mut c = raw_conn().await;
    let stream_before: u64 = c.xlen(keys.runs()).await.unwrap();
    for n in 1..=RUNS {
        let uri = format!("/v1/ops/dead/run-{n}/retry");
        let (a, b) = tokio::join!(
            tokio::spawn({
                let (app, uri) = (app.clone(), uri.clone());
                async move { call(&app, "POST", &uri, Some(TOKEN), None).await.status }
            }),
            tokio::spawn({
                let (app, uri) = (app.clone(), uri.clone());
                async move { call(&app, "POST", &uri, Some(TOKEN), None).await.status }
            }),
        );
        let mut statuses = [a.unwrap(), b.unwrap()];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "run-{n}");
    }
    let stream_after: u64 = c.xlen(keys.runs()).await.unwrap();
    assert_eq!(stream_after - stream_before, RUNS, "each dead run queued again exactly once");
    let dead_len: u64 = c.xlen(keys.runs_dead()).await.unwrap();
    assert_eq!(dead_len, 0);
    for n in 1..=RUNS {
        let retries: Option<u64> = c.hget(keys.run(&format!("run-{n}")), "dead_retries").await.unwrap();
        assert_eq!(retries, Some(1), "run-{n}");
    }
}

/// Writes run `run_id`'s record as the worker scripts leave a run that
/// destination `ci` delivered (its done record compact, the owner of the
/// plain fields) and destination `audit` has `audit_status` (parked with
/// a failed attempt and its due time, or dead), `audit`'s fields under
/// their `5:audit:` prefix; the identity is run `n`'s, as the gate made it.
pub(crate) async fn write_two_destination_run(ns: &str, run_id: &str, n: u64, audit_status: &str) {
    use idemgate::vocabulary::RunRecord;
    let keys = Keys::new(ns).unwrap();
    let mut c = raw_conn().await;
    let failed = r#"[{"attempt":1,"worker":"w-audit","started_ms":1796457000000,"duration_ms":30,"status":503,"outcome":"failed","error":"HTTP 503"}]"#;
    let due = (idemgate::units::now_ms() + 3_600_000).to_string();
    let (number, delivery) = (n.to_string(), format!("d-{n}"));
    let mut fields: Vec<(String, String)> = [
        ("provider", "github"),
        ("repo", "o/r"),
        ("action", "push"),
        ("number", number.as_str()),
        ("delivery_id", delivery.as_str()),
        ("created_ms", "1796456900000"),
        ("group", "ci"),
        (RunRecord::OTHER_DESTINATIONS, "5:audit"),
        ("status", "done"),
        ("attempts", "1"),
        ("worker", "w-ci"),
        ("started_ms", "1796456950000"),
        ("duration_ms", "12"),
        ("attempt_status", "204"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut audit = vec![("status", audit_status), ("attempts", "1"), ("last_error", "HTTP 503"), ("history", failed)];
    if audit_status == "parked" {
        audit.extend([("next_attempt_ms", due.as_str()), ("parked_group", "audit")]);
    }
    fields.extend(audit.into_iter().map(|(k, v)| (RunRecord::destination_field("audit", k), v.to_owned())));
    let key = keys.run(run_id);
    let _: () = c.del(&key).await.unwrap();
    let _: () = c.hset_multiple(&key, &fields).await.unwrap();
}

/// A run two destinations started: `/v1/ops/runs/{id}` answers one
/// progress per destination (the owner's done record unfolded, the other's
/// parked with its due time) and the run's own status worked out of theirs
/// (parked: the least advanced; dead: one is dead), as the run list does;
/// `inspect run` shows one block and one timeline per destination, the
/// other destination's fields under their plain names.
#[tokio::test]
async fn a_run_two_destinations_started_shows_each() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    for n in 1..=3 {
        deliver(&app, &format!("d-{n}"), n).await;
    }
    write_two_destination_run(&ns, "run-1", 1, "parked").await;
    write_two_destination_run(&ns, "run-2", 2, "dead").await;

    let r = get(&app, "/v1/ops/runs/run-1").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let run = r.json();
    assert_eq!((run["status"].as_str(), run["attempts"].as_u64()), (Some("parked"), Some(1)), "{run}");
    assert_eq!(run["last_error"], "HTTP 503");
    let names: Vec<_> =
        run["destinations"].as_array().unwrap().iter().map(|d| (d["name"].clone(), d["status"].clone())).collect();
    assert_eq!(names, [(Value::from("ci"), Value::from("done")), (Value::from("audit"), Value::from("parked"))]);
    let [ci, audit] = &run["destinations"].as_array().unwrap()[..] else { panic!("{run}") };
    assert_eq!((ci["history"][0]["status"].as_i64(), ci["history"][0]["outcome"].as_str()), (Some(204), Some("done")));
    assert_eq!(ci["fields"]["finished_ms"], "1796456950012", "the owner's done record unfolded");
    assert_eq!((audit["history"][0]["status"].as_i64(), audit["last_error"].as_str()), (Some(503), Some("HTTP 503")));
    let due = audit["next_attempt_ms"].as_u64().unwrap();
    assert_eq!(run["next_attempt"]["group"], "audit", "{run}");
    assert_eq!(run["next_attempt"]["due_ms"].as_u64(), Some(due));
    assert_eq!(audit["fields"]["parked_group"], "audit");
    let fields = run["fields"].as_object().unwrap();
    assert!(fields.keys().all(|k| !k.starts_with("5:")), "the other destination's fields are its own: {run}");
    assert_eq!((fields["status"].as_str(), fields["group"].as_str()), (Some("done"), Some("ci")));
    // A run one destination started keeps its shape, with one destination.
    let one = get(&app, "/v1/ops/runs/run-3").await.json();
    assert_eq!(one["destinations"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!((one["status"].as_str(), one["destinations"][0]["name"].as_str()), (Some("queued"), Some("")));

    let dead = get(&app, "/v1/ops/runs/run-2").await.json();
    assert_eq!((dead["status"].as_str(), dead["next_attempt"].is_null()), (Some("dead"), true), "{dead}");
    let page = get(&app, "/v1/ops/runs").await.json();
    let listed: Vec<_> =
        page["runs"].as_array().unwrap().iter().map(|r| (r["run_id"].clone(), r["status"].clone())).collect();
    assert_eq!(
        listed,
        [("run-3", "queued"), ("run-2", "dead"), ("run-1", "parked")].map(|(r, s)| (Value::from(r), Value::from(s)))
    );
    let parked = get(&app, "/v1/ops/runs?status=parked").await.json();
    assert_eq!(run_ids(&parked), ["run-1"]);

    let out = crate::redis::ops::idemgate_in(&ns, &["inspect", "run", "run-1"]);
    let text = crate::base::ops::stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle:?} in\n{text}"));
    assert!(text.lines().any(|l| l.starts_with("status:") && l.ends_with(" parked")), "the run's own status\n{text}");
    assert!(at("destination ci (the record's plain fields):") < at("destination audit:"), "{text}");
    let audit_block = &text[at("destination audit:")..];
    assert!(audit_block.lines().any(|l| l.starts_with("  status:") && l.ends_with(" parked")), "{text}");
    assert!(audit_block.lines().any(|l| l.starts_with("  next attempt:")), "{text}");
    assert!(audit_block.contains("  history (1 newest attempt, oldest first):"), "{text}");
    assert!(
        audit_block.contains("w-audit") && !audit_block.contains("w-ci"),
        "each destination's own timeline\n{text}"
    );
    assert!(!text.contains("5:audit:"), "fields under their plain names\n{text}");
    let json = crate::base::ops::stdout(&crate::redis::ops::idemgate_in(&ns, &["inspect", "run", "run-1", "--json"]));
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!((json["status"].as_str(), json["destinations"][1]["name"].as_str()), (Some("parked"), Some("audit")));
    assert_eq!(json["destinations"][1]["next_attempt"]["group"], "audit", "{json}");
}
