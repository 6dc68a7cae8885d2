//! Operator commands that need no Redis: `idemgate key`, and the helpers
//! that run the binary for the others.

use std::process::{Command, Output};

#[tokio::test]
async fn key_prints_the_schema_without_redis() {
    let o = idemgate(&["key", "delivery", "github", "d-1"]);
    assert_eq!(stdout(&o), "idemgate:{default}:delivery:6:github:3:d-1\n");
    let o = idemgate(&["key", "logical", "github", "octo/repo", "pull_request.opened", "7", "--namespace", "prod"]);
    assert_eq!(stdout(&o), "idemgate:{prod}:logical:6:github:9:octo/repo:19:pull_request.opened:1:7\n");
    let o = idemgate(&["key", "logical", "github", "octo/repo", "push"]);
    assert_eq!(stdout(&o), "idemgate:{default}:logical:6:github:9:octo/repo:4:push:0:\n");
    let o = idemgate(&["key", "run", "run-7"]);
    assert_eq!(stdout(&o), "idemgate:{default}:run:run-7\n");
    let o = idemgate(&["key", "delivery", "github", "a b"]);
    assert_eq!(stdout(&o), "\"idemgate:{default}:delivery:6:github:3:a b\"\n");
    let o = idemgate(&["key", "delivery", "github", "a b", "--raw"]);
    assert_eq!(stdout(&o), "idemgate:{default}:delivery:6:github:3:a b\n");
}

pub(crate) fn idemgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .env_remove("IDEMGATE_REDIS_URL")
        .env_remove("IDEMGATE_NAMESPACE")
        .output()
        .unwrap()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
