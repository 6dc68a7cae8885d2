//! What a worker command can reach (docs/security.md), as another user
//! and as the worker's own, probed by a Python script.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::redis::worker::Workers;
use crate::support::{fresh_ns, temp_dir, wait_for};

/// As root with `--command-user`: the command runs as that user and cannot
/// open the config file, the password file, `/proc/$PPID/mem`, environ or
/// fd, and holds no descriptor but 0, 1 and 2.
#[tokio::test]
async fn a_command_of_another_user_cannot_reach_what_the_worker_holds() {
    command_user(COMMAND_USER);
    let report = what_a_command_reaches(None, Some(COMMAND_USER)).await;
    for line in [
        "config:denied",
        "password:denied",
        "mem:denied",
        "environ:denied",
        "fd:denied",
        &format!("uid:{COMMAND_USER}"),
        "fds:",
    ] {
        assert!(report.lines().any(|l| l == line), "{line:?} in {report}");
    }
}

/// The documented residue (docs/security.md): a command of the worker's own
/// (non-root) user opens the files that user can read, the config file and
/// the password file; the non-dumpable worker's memory, environment and
/// descriptors stay closed to it, and it holds no descriptor but 0, 1 and 2.
#[tokio::test]
async fn a_command_of_the_workers_own_user_reaches_only_the_documented_residue() {
    command_user(COMMAND_USER);
    let report = what_a_command_reaches(Some(COMMAND_USER), None).await;
    for line in [
        "config:open",
        "password:open",
        "mem:denied",
        "environ:denied",
        "fd:denied",
        &format!("uid:{COMMAND_USER}"),
        "fds:",
    ] {
        assert!(report.lines().any(|l| l == line), "{line:?} in {report}");
    }
}

/// What a command reaches of its worker, reported line by line: the
/// worker runs as root (`worker_user` `None`) or as that user, with
/// `--command-user` or without; its config and password files are 0600,
/// owned by the worker's user.
async fn what_a_command_reaches(worker_user: Option<&str>, command_user_flag: Option<&str>) -> String {
    use std::os::unix::fs::PermissionsExt;
    let ns = fresh_ns("command-user");
    let dir = temp_dir("command-user");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let redis = crate::redis::secrets::redis_with_alice(&dir);
    let config = dir.join("idemgate.toml");
    std::fs::write(&config, "api_token = \"Config-S3cret\"\n[worker]\nmax_attempts = 1\n").unwrap();
    let pw = dir.join("redis-password");
    std::fs::write(&pw, format!("{}\n", crate::redis::secrets::PASSWORD)).unwrap();
    let ids = worker_user.map(|u| {
        let id = |flag: &str| {
            let out = Command::new("id").args([flag, u]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap()
        };
        (id("-u"), id("-g"))
    });
    for f in [&config, &pw] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(f, Some(uid), Some(gid)).unwrap();
        }
    }
    // Python, not sh: dash keeps descriptors of its own (10, for redirections).
    let script = r#"
import os, pwd, sys
sys.stdin.read()
open_fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
def attempt(name, path, mode="r"):
    try:
        with open(path, "rb"):
            return name + ":open"
    except OSError:
        return name + ":denied"
def listing(name, path):
    try:
        os.listdir(path)
        return name + ":open"
    except OSError:
        return name + ":denied"
ppid = os.getppid()
lines = [attempt("config", os.environ["CFG"]), attempt("password", os.environ["PW"]),
         attempt("mem", "/proc/%d/mem" % ppid), attempt("environ", "/proc/%d/environ" % ppid),
         listing("fd", "/proc/%d/fd" % ppid), "uid:" + pwd.getpwuid(os.getuid()).pw_name,
         "fds:" + " ".join(map(str, open_fds))]
with open(os.path.join(os.environ["D"], "result"), "w") as f:
    f.write("\n".join(lines) + "\n")
"#;
    let url = format!("redis://alice@127.0.0.1:{}", redis.port);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        cmd.env_remove(var);
    }
    let child = cmd
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--redis-url", &url, "--redis-password-file"])
        .arg(&pw)
        .args(["--namespace", &ns, "--group", "g", "--block", "200ms"])
        .args(command_user_flag.map(|u| ["--command-user", u]).into_iter().flatten())
        .args(["--", "python3", "-c", script])
        .env("D", &dir)
        .env("CFG", &config)
        .env("PW", &pw)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("w.log")).unwrap());
    if let Some((uid, gid)) = ids {
        child.uid(uid).gid(gid);
    }
    let _w = Workers(vec![child.spawn().unwrap()]);
    let opts = idemgate::redis_io::RedisOptions::single(format!(
        "redis://alice:{}@127.0.0.1:{}",
        crate::redis::secrets::PASSWORD,
        redis.port
    ));
    let keys = idemgate::keys::Keys::new(&ns).unwrap();
    let store =
        idemgate::store::redis_store::RedisStore::connect(&opts, keys.clone(), &Default::default()).await.unwrap();
    let gate = idemgate::gate::Gate::new(["o/r"], std::sync::Arc::new(store));
    let event = serde_json::json!({"org": "o", "repo": "r", "action": "push", "number": 1});
    gate.handle("github", "d-1", &event).await.unwrap();
    let result = dir.join("result");
    wait_for(Duration::from_secs(30), "the command's report", || async { result.exists() }).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = std::fs::read_to_string(&result).unwrap();
    let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    format!("{report}\n--- worker log:\n{log}")
}

/// Ensures a user `name` for commands exists (created with useradd as root).
fn command_user(name: &str) {
    // SAFETY: geteuid(2) has no arguments and no failure.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "THIS TEST NEEDS ROOT: it runs the worker as root with --command-user {name} (useradd, setuid); it did not run"
    );
    if !Command::new("id").arg("-u").arg(name).stdout(Stdio::null()).status().unwrap().success() {
        let made = Command::new("useradd").args(["--system", "--no-create-home", "--shell", "/bin/sh", name]).status();
        assert!(made.is_ok_and(|s| s.success()), "useradd {name}");
    }
}

const COMMAND_USER: &str = "idemgate-cmd";
