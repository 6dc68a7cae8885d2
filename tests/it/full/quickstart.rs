//! docs/quickstart.md works as written: its commands, read from the page
//! (fenced blocks marked `sh quickstart`, and `sh quickstart-background`
//! for the processes that keep running), are run in order by bash in a
//! directory of their own, against the built binary and a real
//! `redis-server`, until the receiver prints `handled`. The page's ports
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
        let text = ports.iter().fold(block.text.clone(), |t, (page, ours)| t.replace(page, &ours.to_string()));
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
                break;
            }
            assert!(
                Instant::now() < deadline,
                "block {i} failed:\n{text}\nstdout: {}\nstderr: {}\nthe background processes' stderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                running.iter().map(Background::errors).collect::<Vec<_>>().join("\n---\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let receiver_printed = |line: &str| running.iter().any(|b| b.output().lines().any(|l| l.starts_with(line)));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !receiver_printed("handled default:run-1:") {
        assert!(
            Instant::now() < deadline,
            "the receiver never printed `handled`: {:?}",
            running.iter().map(Background::output).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `inspect run` printed the run key the receiver deduped on.
    let outputs: String = running.iter().map(Background::output).collect();
    let handled = outputs.lines().find_map(|l| l.strip_prefix("handled ")).unwrap().to_owned();
    assert!(printed.lines().any(|l| l.starts_with("run key:") && l.contains(&handled)), "{printed}");
    assert!(printed.contains("logical key:") && !printed.contains("none names this run"), "{printed}");
    // The sample ping from a repository outside the allowlist was warned of.
    let warned = running.iter().any(|b| {
        b.errors().lines().any(|l| {
            l.contains("WARN") && l.contains("will be answered `blocked`") && l.contains("Octocoders/Hello-World")
        })
    });
    assert!(warned, "serve did not warn of the ping's blocked repository");
    // Stopped the other way round: the receiver, the worker, serve, then Redis.
    while let Some(b) = running.pop() {
        drop(b);
    }
}
