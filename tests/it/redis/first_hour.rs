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

/// `idemgate key logical` writes the key the gate wrote for the config's
/// GitHub provider (the payload's `opened` in the action slot, the run's
/// `subject`), which Redis holds; given the number alone, it refuses and
/// says that `inspect run` prints the key. A name the config does not have
/// is a `/v1` provider, keyed on the fields as given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_logical_writes_the_key_the_gate_wrote() {
    use crate::base::ops::stdout;
    use crate::redis::ops::idemgate_in;
    let ns = crate::support::fresh_ns("keylogical");
    let dir = crate::support::temp_dir("keylogical");
    let store = crate::support::redis_store_in(&ns, &Settings::default()).await;
    let app = app(AppState::new(Gate::new(["Codertocat/*"], store), vec![Provider::github("github", SECRET)], None));
    let opened = fixture("pull_request", 0).to_string();
    let r = send(&app, github("d-1", "pull_request", JSON, opened.into_bytes())).await;
    assert_eq!(status_of(&r), ("created".into(), Some("run-1".into())), "{}", r.text);
    let run: Value = serde_json::from_slice(&idemgate_in(&ns, &["inspect", "run", "run-1", "--json"]).stdout).unwrap();
    let subject = run["fields"]["subject"].as_str().unwrap().to_owned();
    let logical_key = run["logical_key"].as_str().unwrap().to_owned();

    // The secret comes from an env var the command does not have: `key` needs no secret.
    let config = dir.join("idemgate.toml");
    std::fs::write(
        &config,
        "[[provider]]\nname = \"github\"\nkind = \"github\"\nsecret_env = \"KEY_TEST_UNSET_SECRET\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let key = |subject: &str| {
        let args = ["key", "logical", "github", "Codertocat/Hello-World", "pull_request.opened", subject, "--raw"];
        idemgate_in(&ns, &[&args[..], &["--config", config]].concat())
    };
    let o = key(&subject);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), format!("{logical_key}\n"));
    let mut c = crate::support::raw_conn().await;
    let held: Option<String> = redis::AsyncCommands::get(&mut c, &logical_key).await.unwrap();
    assert_eq!(held.as_deref(), Some("run-1"), "the key printed is the one Redis holds");

    let o = key("2");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(stdout(&o).is_empty(), "no key that does not exist: {}", stdout(&o));
    assert!(err.contains("NUMBER@DIGEST") && err.contains("idemgate inspect run RUN_ID"), "{err}");

    // Without the config, `github` is a /v1 provider: the fields as given.
    let o =
        idemgate_in(&ns, &["key", "logical", "github", "Codertocat/Hello-World", "pull_request.opened", "2", "--raw"]);
    assert_eq!(
        stdout(&o),
        format!("idemgate:{{{ns}}}:logical:6:github:22:Codertocat/Hello-World:19:pull_request.opened:1:2\n")
    );
    let _ = std::fs::remove_dir_all(dir);
}
