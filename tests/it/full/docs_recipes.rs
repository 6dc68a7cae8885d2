//! Every `redis-cli` line in the docs' shell blocks runs as written against
//! Debian's redis-cli and a real redis-server holding what the recipes read:
//! namespace `default`, run-7 created by delivery `d-1` of `/v1`'s
//! `octo/repo pull_request.opened 7`, the worker group `deploy` (a real
//! `idemgate worker` that fails runs 1 to 7, so the dead stream has entries,
//! and holds run-8, so the group has a pending entry; a second worker
//! parks run-9 for an hour).
//! Only `-p PORT` is added, so the test never meets a server it did not start.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::{Settings, Status};
use serde_json::json;

use crate::support::{RedisProcess, redis_cli, temp_dir, wait_for};

/// `(file, line number, command)` of every `redis-cli` command in a fenced block of `docs/` and the README.
fn recipes() -> Vec<(String, usize, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.push(root.join("README.md"));
    pages.sort();
    let mut found = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let mut fenced = false;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.starts_with("```") {
                fenced = !fenced;
            } else if fenced && line.starts_with("redis-cli ") {
                let name = page.file_name().unwrap().to_string_lossy().into_owned();
                found.push((name, i + 1, line.to_owned()));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_redis_cli_recipe_runs() {
    let redis = RedisProcess::start(&[]);
    let store =
        RedisStore::connect(&RedisOptions::single(redis.url()), Keys::new("default").unwrap(), &Settings::default())
            .await
            .unwrap();
    let gate = Gate::new(["octo/repo"], Arc::new(store));
    for n in 1..=6 {
        let e = json!({"org": "octo", "repo": "repo", "action": "push", "number": n});
        assert_eq!(gate.handle("github", &format!("d-{}", n + 1), &e).await.unwrap().status, Status::Created);
    }
    let e = json!({"org": "octo", "repo": "repo", "action": "pull_request.opened", "number": 7});
    let r = gate.handle("github", "d-1", &e).await.unwrap();
    assert_eq!(r.run_id.as_deref(), Some("run-7"));

    let e = json!({"org": "octo", "repo": "repo", "action": "push", "number": 8});
    assert_eq!(gate.handle("github", "d-8", &e).await.unwrap().run_id.as_deref(), Some("run-8"));

    // A real worker of group `deploy` whose command fails runs 1 to 7 (they
    // go dead) and holds run-8 (it stays pending) while the recipes run.
    let dir = temp_dir("recipes");
    let command = r#"if [ "$IDEMGATE_RUN_ID" = run-8 ]; then exec sleep 20; fi; exit 3"#;
    let worker = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", &redis.url(), "--group", "deploy", "--block", "200ms"])
        .args(["--max-attempts", "1", "--", "sh", "-c", command])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("worker.log")).unwrap())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(30), "seven dead runs and one pending", || async {
        redis_cli(redis.port, &["XLEN", "idemgate:{default}:runs:dead"]) == "7"
            && redis_cli(redis.port, &["XPENDING", "idemgate:{default}:runs", "deploy"]).starts_with('1')
    })
    .await;
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut first = Stop(worker);
    // A second worker of the group parks run-9 for an hour (the parking
    // recipe's answer); the first is killed so that it cannot take run-9,
    // and its run-8 stays pending under its name.
    let _ = first.0.kill();
    let _ = first.0.wait();
    let e = json!({"org": "octo", "repo": "repo", "action": "push", "number": 9});
    let parker = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", &redis.url(), "--group", "deploy", "--block", "200ms"])
        .args(["--retry-schedule", "1h", "--", "sh", "-c", "exit 3"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("parker.log")).unwrap())
        .spawn()
        .unwrap();
    let _parker = Stop(parker);
    assert_eq!(gate.handle("github", "d-9", &e).await.unwrap().run_id.as_deref(), Some("run-9"));
    wait_for(Duration::from_secs(30), "run-9 parked", || async {
        redis_cli(redis.port, &["ZCARD", "idemgate:{default}:retry:6:deploy"]) == "1"
    })
    .await;

    let recipes = recipes();
    assert!(recipes.len() >= 20, "{recipes:?}");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_idemgate")).parent().unwrap().to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut failed = Vec::new();
    for (page, line, command) in &recipes {
        let command = if command.starts_with("redis-cli -p ") {
            command.replacen("redis-cli -p 6379", &format!("redis-cli -p {}", redis.port), 1)
        } else {
            command.replace("redis-cli ", &format!("redis-cli -p {} ", redis.port))
        };
        let out = Command::new("bash")
            .args(["-euo", "pipefail", "-c", &command])
            .env("PATH", &path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let refused = ["ERR", "NOGROUP", "WRONGTYPE", "Unrecognized"]
            .iter()
            .any(|e| stdout.contains(e) || String::from_utf8_lossy(&out.stderr).contains(e));
        // Every recipe reads something that is there: nothing comes back empty or nil.
        let empty = stdout.trim().is_empty() || stdout.trim() == "(nil)";
        if !out.status.success() || refused || empty {
            failed.push(format!(
                "{page}:{line}: {command}\n  exit {:?}\n  stdout: {stdout}\n  stderr: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(failed.is_empty(), "recipes that do not run as written:\n{}", failed.join("\n"));
}
