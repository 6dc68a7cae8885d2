//! The first hour of a GitHub hook, on a real Redis: from a run to its
//! keys with `inspect`.

use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::providers::Provider;
use idemgate::vocabulary::Settings;
use serde_json::Value;

use crate::base::first_hour::{JSON, SECRET, fixture, github, status_of};
use crate::support::send;

/// From a run to its keys: `inspect run` prints the logical key that names
/// it and its run key; `inspect logical` takes the identity as the run
/// shows it (`pull_request.opened`, the subject), and a subject without its
/// digest is told what to type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_goes_from_a_run_to_its_keys() {
    use crate::base::ops::stdout;
    use crate::redis::ops::idemgate_in;
    let ns = crate::support::fresh_ns("runkeys");
    let store = crate::support::redis_store_in(&ns, &Settings::default()).await;
    let app = app(AppState::new(Gate::new(["Codertocat/*"], store), vec![Provider::github("github", SECRET)], None));
    let opened = fixture("pull_request", 0).to_string();
    let r = send(&app, github("d-1", "pull_request", JSON, opened.into_bytes())).await;
    assert_eq!(status_of(&r), ("created".into(), Some("run-1".into())), "{}", r.text);

    let o = idemgate_in(&ns, &["inspect", "run", "run-1", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let run: Value = serde_json::from_slice(&o.stdout).unwrap();
    let subject = run["fields"]["subject"].as_str().unwrap().to_owned();
    assert!(subject.starts_with("2@"), "{run}");
    let created = run["fields"]["created_ms"].as_str().unwrap();
    assert_eq!(run["run_key"], format!("{ns}:run-1:{created}"));
    let logical_key = run["logical_key"].as_str().unwrap().to_owned();
    // The key's action slot is what the body states: `opened`.
    assert!(logical_key.contains(":6:opened:") && logical_key.ends_with(&subject), "{logical_key}");
    let text = stdout(&idemgate_in(&ns, &["inspect", "run", "run-1"]));
    let run_key = format!("{ns}:run-1:{created} (webhook-id, IDEMGATE_RUN_KEY)");
    assert!(text.lines().any(|l| l.starts_with("run key:") && l.ends_with(&run_key)), "{text}");
    assert!(text.contains("logical key:") && text.contains(&subject), "{text}");

    // `inspect logical` as the run shows the identity, and with the key's own slot.
    for action in ["pull_request.opened", "opened"] {
        let o =
            idemgate_in(&ns, &["inspect", "logical", "github", "Codertocat/Hello-World", action, &subject, "--json"]);
        assert!(o.status.success(), "{action}: {o:?}");
        let found: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!((found["key"].as_str(), found["run_id"].as_str()), (Some(logical_key.as_str()), Some("run-1")));
    }
    // The number alone is not the subject of an event identity: exit 1, and what to type.
    let o = idemgate_in(&ns, &["inspect", "logical", "github", "Codertocat/Hello-World", "pull_request.opened", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("NUMBER@DIGEST") && err.contains("inspect run"), "{err}");
}
