//! docs/quickstart.md works as written: its commands, read from the page
//! (fenced blocks marked `sh quickstart`, and `sh quickstart-background`
//! for the processes that keep running), are run in order by bash in a
//! directory of their own, against the built binary and a real
//! `redis-server`, until the receiver prints `handled` for the sample and
//! for its copy with another pull request number. The page's ports
//! (Redis 6379, serve 8080, the receiver 8000) are swapped for free ones,
//! so the test never meets a server it did not start; nothing else of the
//! text is changed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{free_port, temp_dir};

const PAGE: &str = include_str!("../../../docs/quickstart.md");

/// One marked block of the page.
#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) background: bool,
    pub(crate) text: String,
}

/// The blocks of `page` fenced as ```` ```sh MARK ```` or ```` ```sh MARK-background ````, in order.
pub(crate) fn marked_blocks(page: &str, mark: &str) -> Vec<Block> {
    let (plain, background) = (format!("```sh {mark}"), format!("```sh {mark}-background"));
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_end();
        let is_background = line == background;
        if line != plain && !is_background {
            continue;
        }
        let text: Vec<&str> = lines.by_ref().take_while(|l| l.trim_end() != "```").collect();
        blocks.push(Block { background: is_background, text: text.join("\n") + "\n" });
    }
    blocks
}

/// A background block's process group, killed with the test.
struct Background {
    child: Child,
    out: PathBuf,
}

impl Background {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }

    fn errors(&self) -> String {
        std::fs::read_to_string(self.out.with_extension("err")).unwrap_or_default()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // The block's bash and everything it started (its own process group).
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", self.child.id())]).status();
        std::thread::sleep(Duration::from_millis(100));
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).status();
        let _ = self.child.wait();
    }
}

/// `text` with each of the page's ports that stands as a number of its own
/// (no digit either side) swapped for ours, in one pass: a free port that
/// happens to contain `8000` is never swapped again.
fn with_our_ports(text: &str, ports: &[(&str, u16)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let after_digit = out.ends_with(|p: char| p.is_ascii_digit());
        let whole =
            |page: &str| rest.strip_prefix(page).is_some_and(|after| !after.starts_with(|n: char| n.is_ascii_digit()));
        match ports.iter().find(|(page, _)| !after_digit && whole(page)) {
            Some((page, ours)) => {
                out.push_str(&ours.to_string());
                rest = &rest[page.len()..];
            }
            None => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    out
}

/// Everything the background processes printed, for a failure's message.
fn printed_by(running: &[Background]) -> String {
    running
        .iter()
        .map(|b| format!("--- {}\nstdout:\n{}\nstderr:\n{}", b.out.display(), b.output(), b.errors()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn bash(dir: &Path, text: &str, path: &str) -> Command {
    let mut c = Command::new("bash");
    c.args(["-euo", "pipefail", "-c", text]).current_dir(dir).env("PATH", path).env("NO_COLOR", "1");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_runs_as_written() {
    let blocks = marked_blocks(PAGE, "quickstart");
    assert!(blocks.len() >= 8, "the page's marked blocks: {blocks:?}");
    let dir = temp_dir("quickstart");
    // The page runs from the checkout's root, where examples/ is.
    std::os::unix::fs::symlink(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"), dir.join("examples")).unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_idemgate")).parent().unwrap().to_owned();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let ports = [("6379", free_port()), ("8080", free_port()), ("8000", free_port())];
    let mut running: Vec<Background> = Vec::new();
    let mut printed = String::new();
    for (i, block) in blocks.iter().enumerate() {
        let text = with_our_ports(&block.text, &ports);
        if block.background {
            use std::os::unix::process::CommandExt;
            let out = dir.join(format!("block-{i}.out"));
            let child = bash(&dir, &text, &path)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(std::fs::File::create(dir.join(format!("block-{i}.err"))).unwrap())
                .spawn()
                .unwrap();
            running.push(Background { child, out });
            continue;
        }
        // A check right after a start may come before the server is up:
        // each foreground block is retried until it succeeds, for a while.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = bash(&dir, &text, &path).stdin(Stdio::null()).output().unwrap();
            if out.status.success() {
                printed.push_str(&String::from_utf8_lossy(&out.stdout));
                // `curl /readyz` prints no newline: each block's output starts a line.
                if !printed.is_empty() && !printed.ends_with('\n') {
                    printed.push('\n');
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "block {i} failed:\n{text}\nstdout: {}\nstderr: {}\nthe background processes:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                printed_by(&running)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let receiver_printed = |line: &str| running.iter().any(|b| b.output().lines().any(|l| l.starts_with(line)));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !receiver_printed("handled default:run-1:") || !receiver_printed("handled default:run-2:") {
        assert!(
            Instant::now() < deadline,
            "the receiver never printed `handled`; the background processes:\n{}",
            printed_by(&running)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `inspect run` printed the run key the receiver deduped on.
    let outputs: String = running.iter().map(Background::output).collect();
    let handled = outputs.lines().find_map(|l| l.strip_prefix("handled ")).unwrap().to_owned();
    assert!(printed.lines().any(|l| l.starts_with("run key:") && l.contains(&handled)), "{printed}");
    assert!(printed.contains("logical key:") && !printed.contains("none names this run"), "{printed}");
    // `send --form` sent the sample form-encoded: the same event, so run-1's duplicate;
    // the copy with another pull request number was new work.
    let lines: Vec<&str> = printed.lines().collect();
    assert!(lines.contains(&r#"{"status":"duplicate","code":200,"run_id":"run-1"}"#), "{printed}");
    assert!(lines.contains(&r#"{"status":"created","code":202,"run_id":"run-2"}"#), "{printed}");
    // The receiver was up, and refused the unsigned request, before the worker started.
    assert!(printed.lines().any(|l| l == "401"), "{printed}");
    // The sample ping from a repository outside the allowlist was warned of.
    let warned = running.iter().any(|b| {
        b.errors().lines().any(|l| {
            l.contains("WARN") && l.contains("will be answered `blocked`") && l.contains("Octocoders/Hello-World")
        })
    });
    assert!(warned, "serve did not warn of the ping's blocked repository:\n{}", printed_by(&running));
    // The config's placeholder entry was warned of at start, as the page says.
    let placeholder = running.iter().any(|b| {
        b.errors().lines().any(|l| l.contains("WARN") && l.contains(r#"still holds the placeholder "YOUR-ORG/*""#))
    });
    assert!(placeholder, "serve did not warn of YOUR-ORG/*:\n{}", printed_by(&running));
    // Stopped the other way round: the receiver, the worker, serve, then Redis.
    while let Some(b) = running.pop() {
        drop(b);
    }
}

#[test]
fn ports_are_swapped_once_and_only_as_whole_numbers() {
    let ports = [("6379", 48000), ("8080", 38080), ("8000", 51234)];
    assert_eq!(
        with_our_ports("--port 6379 --listen 127.0.0.1:8080 http://127.0.0.1:8000/ 18000 80801", &ports),
        "--port 48000 --listen 127.0.0.1:38080 http://127.0.0.1:51234/ 18000 80801"
    );
}
