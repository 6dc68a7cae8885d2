//! Every process an attempt started dies with the attempt, even one that
//! left the command's process group (`setsid`, a double fork).
//!
//! Killing the command's process group misses a process that called
//! `setsid`: it has a group (and session) of its own. So, when an attempt
//! ends (its command exited, it timed out, or it was fenced), [`Attempt`]'s
//! `Drop`, besides the group (and the attempt's cgroup, where it has one):
//!
//! 1. kills every descendant of the command that is still alive, found by
//!    walking the worker's own process tree (`/proc/<pid>/task/*/children`,
//!    each checked against its `/proc/<pid>/stat`);
//! 2. in a worker that is a child subreaper
//!    ([`Containment::reap_orphans_of_this_process`], as `idemgate worker`
//!    is), kills the orphans of the attempt too. A process
//!    whose parent died is re-parented to the nearest subreaper above it,
//!    so everything an attempt leaves behind ends up as a child of the
//!    worker, and nothing escapes to init. Such an orphan belongs to the run
//!    named by the `IDEMGATE_RUN_ID` of its environment (every process of an
//!    attempt inherits it); an orphan that names the ending run, or no run
//!    this worker is running, is killed with its descendants. One that names
//!    another live attempt is left to that attempt's end;
//! 3. reaps the orphans that have exited (the worker is their parent now,
//!    and tokio only waits for the children it spawned).
//!
//! Between attempts, [`Containment::reap_orphans`] goes on: on every
//! `SIGCHLD` and every second it reaps exited orphans and kills live ones
//! that name no live run, so no zombie piles up under an idle worker.
//!
//! What this needs to know (the attempts running, the cgroups' place and
//! limit, whether orphans are the worker's to kill) is a [`Containment`]
//! the worker owns and shares with its handler and its orphan reaper.
//!
//! It repeats this until a pass finds nothing (for up to 2 s), so a process
//! forked between the scan and the kill is found by the next pass, and a
//! fast fork chain is chased to its end; and when a pass met a
//! process dying under it (a zombie, or a child no longer under the parent
//! it was listed under), once more, since that process's children may have
//! moved to the worker after the worker's own list was read.
//!
//! What remains: a descendant that clears `IDEMGATE_RUN_ID` and sets another
//! live run's id lives until that run's attempt ends; the attempts of a
//! worker that is itself killed with SIGKILL lose their subreaper (the
//! command dies with the worker through `PR_SET_PDEATHSIG`, an escaped
//! grandchild does not: run the worker under a service manager that kills
//! its whole cgroup, as systemd and container runtimes do).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// Whether a [`Containment`] of this process has taken its orphans. The
/// one static of containment, because what it guards is the process's: the
/// kernel re-parents every orphan below a child subreaper to the process,
/// whichever attempt it came from, so one containment must know every
/// command the process runs. A second one's sweeps would kill the first's
/// commands as processes of no run it knows. Everything else of
/// containment (the attempts running, the cgroups, whether this worker
/// kills orphans) is the worker's own, in its [`Containment`]; this flag is
/// what the kernel's subreaper bit is, one per process (tested:
/// `reaper_a_second_containment_cannot_take_the_orphans_of_the_process`).
#[cfg(target_os = "linux")]
static ORPHANS_TAKEN: AtomicBool = AtomicBool::new(false);

/// How long an attempt's end goes on sweeping while it still finds
/// processes to kill: a fork chain is chased until none is left, and only a
/// process that does not die even of SIGKILL (stuck in the kernel) outlasts
/// this, to be killed by the orphan sweeps ([`Containment::reap_orphans`]).
const SWEEP_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// How often [`Containment::reap_orphans`] sweeps without a `SIGCHLD` to wake it.
const ORPHAN_SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What contains a worker's attempts: the attempts running, where their
/// cgroups go and their process limit, and whether the worker is a child
/// subreaper whose orphans are its to kill. The worker owns it; its
/// command handler and its orphan reaper share it.
pub struct Containment {
    /// The attempts running: run id → the command's pid. Held while a
    /// command is spawned and while an attempt's processes are killed, so
    /// a sweep never mistakes a command just started for an orphan.
    live: Mutex<HashMap<String, u32>>,
    /// Set once this process is a child subreaper and the orphans are
    /// this containment's to kill ([`Containment::reap_orphans_of_this_process`]).
    reaps_orphans: bool,
    /// Where the attempts' cgroups go, if the worker may create them.
    cgroups: Option<Cgroups>,
}

/// The attempts' cgroups: under the worker's own cgroup v2 directory.
struct Cgroups {
    base: PathBuf,
    /// `pids.max` of every attempt's cgroup (0: no limit; `--max-processes`).
    max_processes: u32,
    /// The number in the next attempt cgroup's name.
    next: AtomicU64,
}

impl std::fmt::Debug for Containment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containment")
            .field("cgroups", &self.cgroups.as_ref().map(|c| &c.base))
            .field("max_processes", &self.cgroups.as_ref().map(|c| c.max_processes))
            .field("reaps_orphans", &self.reaps_orphans)
            .finish()
    }
}

impl Default for Containment {
    fn default() -> Self {
        Self::new()
    }
}

impl Containment {
    /// Attempts in cgroups under the worker's own where it may create them,
    /// with no process limit, and orphans left alone.
    pub fn new() -> Self {
        let cgroups = cgroup_base().map(|base| Cgroups { base, max_processes: 0, next: AtomicU64::new(0) });
        Self { live: Mutex::default(), reaps_orphans: false, cgroups }
    }

    /// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`), so the
    /// orphans of attempts are re-parented to it and [`Attempt`] kills them.
    /// Only for a process whose children are all this containment's
    /// attempts, like `idemgate worker`: an orphan that names no live run is
    /// killed. Fails with [`std::io::ErrorKind::AlreadyExists`] where another
    /// containment of this process took the orphans already.
    pub fn reap_orphans_of_this_process(&mut self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        {
            if ORPHANS_TAKEN.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_err() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "another worker of this process reaps its orphans already",
                ));
            }
            // SAFETY: prctl(2) with an integer argument; no memory is passed.
            if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) } != 0 {
                let e = std::io::Error::last_os_error();
                ORPHANS_TAKEN.store(false, Ordering::SeqCst);
                return Err(e);
            }
            self.reaps_orphans = true;
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        Err(std::io::Error::other("child subreapers exist on Linux only"))
    }
}

/// One running attempt's processes; dropping it kills them all.
pub struct Attempt {
    run_id: String,
    pid: u32,
    /// The attempt's own cgroup, where the worker may create one.
    cgroup: Option<Cgroup>,
    containment: Arc<Containment>,
}

impl Attempt {
    /// Spawns `cmd` (which must lead a process group of its own: a session) as the
    /// command of `run_id`'s attempt, in a cgroup of its own where the
    /// worker may create one ([`Cgroup`]).
    pub fn spawn(
        containment: &Arc<Containment>,
        run_id: &str,
        cmd: &mut tokio::process::Command,
    ) -> std::io::Result<(Self, tokio::process::Child)> {
        let cgroup = containment.cgroups.as_ref().and_then(Cgroup::create);
        if let Some(cg) = &cgroup {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&cg.procs);
            // SAFETY: write(2) of a static byte between fork and exec. A move
            // that fails is found after the spawn, and the attempt goes on
            // without the cgroup.
            unsafe {
                cmd.pre_exec(move || {
                    libc::write(fd, b"0".as_ptr().cast(), 1);
                    Ok(())
                });
            }
        }
        let mut live = lock(&containment.live);
        let child = cmd.spawn()?;
        let pid = child.id().ok_or_else(|| std::io::Error::other("the command exited at once"))?;
        live.insert(run_id.to_owned(), pid);
        let cgroup = cgroup.filter(|cg| cg.holds(pid));
        match &cgroup {
            Some(cg) => tracing::debug!(run_id, cgroup = %cg.dir.display(), "the attempt runs in a cgroup of its own"),
            None if containment.cgroups.as_ref().is_some_and(|c| c.max_processes > 0) => {
                tracing::warn!(run_id, "the attempt runs without a cgroup, so without the process limit")
            }
            None => tracing::debug!(run_id, "the attempt runs without a cgroup: its end sweeps the process tree"),
        }
        Ok((Self { run_id: run_id.to_owned(), pid, cgroup, containment: containment.clone() }, child))
    }
}

/// A cgroup v2 of one attempt, created under the worker's own: every
/// process the attempt starts is in it, whatever it does to its group or
/// session, and `cgroup.kill` (Linux 5.14) kills them all at once, a fork
/// chain included. Where the worker may not create one (no cgroup2 mount,
/// no write access, an older kernel), attempts go without, and the sweeps
/// of [`Attempt`]'s end are the only means.
struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for the child to move itself in before its exec.
    procs: std::fs::File,
}

impl Containment {
    /// Limits every attempt to `n` processes (its cgroup's `pids.max`), or says
    /// why this host cannot: it takes a cgroup v2 the worker may create
    /// attempts' cgroups in, with the pids controller enabled for them.
    pub fn limit_processes(&mut self, n: u32) -> Result<(), String> {
        let Some(cgroups) = self.cgroups.as_mut() else {
            return Err("needs a cgroup v2 the worker may create cgroups in, and none is mounted or found".into());
        };
        let base = &cgroups.base;
        let enabled = |b: &Path| {
            std::fs::read_to_string(b.join("cgroup.subtree_control"))
                .is_ok_and(|c| c.split_whitespace().any(|x| x == "pids"))
        };
        if !enabled(base) {
            // Possible only where the worker's cgroup holds no process of its own (the root one does not count).
            let _ = std::fs::write(base.join("cgroup.subtree_control"), "+pids");
        }
        if !enabled(base) {
            return Err(format!(
                "needs the pids controller enabled for the cgroups under {} (cgroup.subtree_control +pids), and it is not: run the worker in a cgroup delegated to it with pids, or leave the limit out",
                base.display()
            ));
        }
        cgroups.max_processes = n;
        Ok(())
    }
}

/// Where the attempts' cgroups go: the worker's own cgroup v2 directory.
fn cgroup_base() -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    // `id parent dev root mountpoint opts … - fstype source superopts`
    let (root, mount) = mounts.lines().find_map(|l| {
        let (fields, rest) = l.split_once(" - ")?;
        if rest.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = fields.split_whitespace().skip(3);
        Some((f.next()?.to_owned(), f.next()?.to_owned()))
    })?;
    let relative = own.strip_prefix(root.trim_end_matches('/')).unwrap_or(&own).trim_start_matches('/').to_owned();
    let base = Path::new(&mount).join(relative);
    base.join("cgroup.procs").exists().then_some(base)
}

impl Cgroup {
    fn create(cgroups: &Cgroups) -> Option<Self> {
        // Another containment of this process (a library's second handler)
        // counts from 0 too: a name it took is skipped.
        let mut created = None;
        for _ in 0..64 {
            let n = cgroups.next.fetch_add(1, Ordering::Relaxed);
            let dir = cgroups.base.join(format!("idemgate-{}-{n}", std::process::id()));
            match std::fs::create_dir(&dir) {
                Ok(()) => {
                    created = Some(dir);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(_) => return None,
            }
        }
        let dir = created?;
        let procs = std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs"));
        let max = cgroups.max_processes;
        if max > 0 && std::fs::write(dir.join("pids.max"), max.to_string()).is_err() {
            tracing::warn!(cgroup = %dir.display(), "cannot set the attempt's pids.max: it runs without the process limit");
        }
        match procs {
            Ok(procs) if dir.join("cgroup.kill").exists() => Some(Self { dir, procs }),
            _ => {
                let _ = std::fs::remove_dir(&dir);
                None
            }
        }
    }

    /// Whether process `pid` is in this cgroup.
    fn holds(&self, pid: u32) -> bool {
        let name = self.dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|c| c.lines().any(|l| l.starts_with("0::") && l.ends_with(&format!("/{name}"))))
    }

    /// Kills every process in the cgroup and waits (up to 1 s) until it is
    /// empty; then removes it.
    fn kill_all(&self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        let until = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while std::time::Instant::now() < until {
            let events = std::fs::read_to_string(self.dir.join("cgroup.events")).unwrap_or_default();
            if events.lines().any(|l| l == "populated 0") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Containment {
    /// Kills and removes the attempt cgroups that a worker no longer running
    /// left (one killed with SIGKILL never ends its attempts): what they still
    /// hold dies now, at this worker's start.
    pub fn remove_stale_cgroups(&self) {
        let Some(cgroups) = &self.cgroups else { return };
        let Ok(dir) = std::fs::read_dir(&cgroups.base) else { return };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("idemgate-")).and_then(|r| r.split('-').next())
            else {
                continue;
            };
            let Ok(pid) = pid.parse::<u32>() else { continue };
            if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
                continue;
            }
            let stale = Cgroup {
                dir: entry.path(),
                procs: match std::fs::File::open("/dev/null") {
                    Ok(f) => f,
                    Err(_) => return,
                },
            };
            stale.kill_all();
            tracing::debug!(cgroup = %stale.dir.display(), "removing the cgroup of a worker no longer running");
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if std::fs::remove_dir(&self.dir).is_err() {
            tracing::debug!(cgroup = %self.dir.display(), "cannot remove the attempt's cgroup yet");
        }
    }
}

impl Drop for Attempt {
    fn drop(&mut self) {
        let mut live = lock(&self.containment.live);
        live.remove(&self.run_id);
        // SAFETY: kill(2) has no memory effects; a negative pid names the group.
        unsafe {
            libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL);
        }
        if let Some(cg) = &self.cgroup {
            cg.kill_all();
        }
        let others: HashSet<u32> = live.values().copied().collect();
        let others_runs: HashSet<&str> = live.keys().map(String::as_str).collect();
        let me = std::process::id();
        let mut rescanned = false;
        let until = std::time::Instant::now() + SWEEP_FOR;
        while std::time::Instant::now() < until {
            let table = ProcessTable::scan();
            let mut victims = Vec::new();
            // The command itself, while it is still this process's child (not
            // yet reaped by tokio, so its pid cannot have been reused).
            if table.parent.get(&self.pid) == Some(&me) {
                victims.extend(table.descendants(self.pid));
            }
            if self.containment.reaps_orphans {
                for &pid in table.children.get(&me).into_iter().flatten() {
                    // Tokio reaps the commands it spawned; their pids are theirs.
                    if pid == self.pid || others.contains(&pid) {
                        continue;
                    }
                    if table.zombies.contains(&pid) {
                        reap(pid);
                        continue;
                    }
                    let claim = run_of(pid);
                    if claim.as_deref() == Some(self.run_id.as_str())
                        || !claim.as_deref().is_some_and(|r| others_runs.contains(r))
                    {
                        victims.push(pid);
                        victims.extend(table.descendants(pid));
                    }
                }
            }
            victims.retain(|p| !table.zombies.contains(p));
            if victims.is_empty() {
                // A process that died while this pass read the tree may have
                // handed its children to this worker after the worker's own
                // list was read: they were in neither list. A dead process's
                // children are re-parented before it shows as a zombie, so
                // one more read finds them.
                if table.unsettled && !rescanned {
                    rescanned = true;
                    continue;
                }
                break;
            }
            for &pid in &victims {
                // SAFETY: as above.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
            tracing::debug!(run_id = self.run_id, killed = victims.len(), "killed what the attempt left running");
            // SAFETY: as above; the group again, for what its members forked meanwhile.
            unsafe {
                libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL);
            }
            // A moment for the victims to exit, short enough to outrun a fork chain.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

impl Containment {
    /// Reaps, for as long as the process runs, every child that is not a
    /// command tokio spawned and waits for: the orphans of attempts that the
    /// worker, a child subreaper, inherits. Woken by each `SIGCHLD` and every
    /// [`ORPHAN_SWEEP_EVERY`], it reaps those that exited (so zombies never pile
    /// up under an idle worker) and kills those naming no live run (what
    /// escaped an attempt's end sweeps). Each is waited for by its pid, never
    /// `waitpid(-1)`, so tokio's own children are left to tokio.
    pub async fn reap_orphans(self: Arc<Self>) {
        if !self.reaps_orphans {
            return;
        }
        let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGCHLD: orphans are reaped every second only");
                None
            }
        };
        loop {
            match &mut sigchld {
                Some(s) => {
                    let _ = tokio::time::timeout(ORPHAN_SWEEP_EVERY, s.recv()).await;
                }
                None => tokio::time::sleep(ORPHAN_SWEEP_EVERY).await,
            }
            // Off the runtime's threads: it reads /proc.
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.sweep_orphans()).await;
        }
    }

    /// One sweep of [`Containment::reap_orphans`]; `(reaped, killed)`.
    fn sweep_orphans(&self) -> (usize, usize) {
        let live = lock(&self.live);
        let commands: HashSet<u32> = live.values().copied().collect();
        let me = std::process::id();
        let (mut reaped, mut killed) = (0, 0);
        for pid in children_of(me) {
            if commands.contains(&pid) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let Some((state, ppid)) = parse_stat(&stat) else { continue };
            if ppid != me {
                continue;
            }
            if state == 'Z' {
                reap(pid);
                reaped += 1;
            } else if !run_of(pid).is_some_and(|r| live.contains_key(&r)) {
                // SAFETY: kill(2) of this process's own child, not yet reaped (so its pid is its own).
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
                killed += 1;
            }
        }
        if killed > 0 {
            tracing::debug!(killed, "killed orphans that name no live run");
        }
        (reaped, killed)
    }
}

/// Reaps child `pid` if it has exited.
fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid(2) writes only the status integer we pass.
    unsafe {
        libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG);
    }
}

/// The `IDEMGATE_RUN_ID` of process `pid`'s environment, if it is readable.
fn run_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ
        .split(|b| *b == 0)
        .find_map(|entry| entry.strip_prefix(b"IDEMGATE_RUN_ID="))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// Who is whose parent, from one pass over `/proc`.
#[derive(Default)]
struct ProcessTable {
    parent: HashMap<u32, u32>,
    children: HashMap<u32, Vec<u32>>,
    zombies: HashSet<u32>,
    /// The tree changed while it was read: a process was a zombie, or had
    /// left the parent it was listed under.
    unsettled: bool,
}

impl ProcessTable {
    /// The worker's own process tree: its children and everything below
    /// them, read through each thread's `/proc/<pid>/task/<tid>/children`
    /// (a process's children are listed under the thread that forked them),
    /// so an attempt's end costs the size of the worker's tree, not of every
    /// process on the machine.
    fn scan() -> Self {
        let me = std::process::id();
        // Kernels built without CONFIG_PROC_CHILDREN have no `children` files.
        if !Path::new(&format!("/proc/{me}/task/{me}/children")).exists() {
            return Self::scan_all();
        }
        let mut table = Self::default();
        let mut queue = vec![me];
        while let Some(parent) = queue.pop() {
            for child in children_of(parent) {
                if child == parent || table.parent.contains_key(&child) {
                    continue;
                }
                let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
                let Some((state, ppid)) = parse_stat(&stat) else { continue };
                if ppid != parent {
                    // Re-parented (its parent died) or exited and its pid
                    // reused since the list was read.
                    table.unsettled = true;
                    continue;
                }
                table.parent.insert(child, parent);
                table.children.entry(parent).or_default().push(child);
                if state == 'Z' {
                    table.zombies.insert(child);
                    table.unsettled = true;
                } else {
                    queue.push(child);
                }
            }
        }
        table
    }

    /// Every process of the machine, from one pass over `/proc`.
    fn scan_all() -> Self {
        let mut table = Self::default();
        let Ok(dir) = std::fs::read_dir("/proc") else { return table };
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let Some((state, ppid)) = parse_stat(&stat) else { continue };
            table.parent.insert(pid, ppid);
            table.children.entry(ppid).or_default().push(pid);
            if state == 'Z' {
                table.zombies.insert(pid);
                table.unsettled = true;
            }
        }
        table
    }

    /// `pid` and everything below it.
    fn descendants(&self, pid: u32) -> Vec<u32> {
        // Parent links from one snapshot form a tree, so each pid is met once.
        let mut found = vec![pid];
        let mut next = 0;
        while let Some(&p) = found.get(next) {
            found.extend(self.children.get(&p).into_iter().flatten().filter(|c| **c != p));
            next += 1;
        }
        found
    }
}

/// The children of process `pid`, from the `children` file of each of its threads.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else { continue };
        found.extend(list.split_ascii_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    found
}

/// The state and the parent pid of a `/proc/<pid>/stat` line. The command
/// name in parentheses may hold spaces and parentheses, so the fields are
/// read after its last `)`.
fn parse_stat(stat: &str) -> Option<(char, u32)> {
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaper_reads_state_and_parent_after_the_last_parenthesis() {
        assert_eq!(parse_stat("42 (sh) S 7 42 42 0 -1"), Some(('S', 7)));
        assert_eq!(parse_stat("42 (a) b) (c) Z 1 0 0"), Some(('Z', 1)));
        assert_eq!(parse_stat("garbage"), None);
    }

    /// Only one containment of a process takes its orphans: a second one's
    /// sweeps would kill the first's commands.
    #[cfg(target_os = "linux")]
    #[test]
    fn reaper_a_second_containment_cannot_take_the_orphans_of_the_process() {
        // In a process of its own: the one that takes the orphans is a
        // child subreaper for good.
        const IN_CHILD: &str = "REAPER_TEST_IN_A_PROCESS_OF_ITS_OWN";
        const NAME: &str = "worker::reaper::tests::reaper_a_second_containment_cannot_take_the_orphans_of_the_process";
        if std::env::var_os(IN_CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", NAME, "--test-threads", "1"])
                .env(IN_CHILD, "1")
                .output()
                .unwrap();
            let shown = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && shown.contains("1 passed"), "{shown}");
            return;
        }
        let mut first = Containment::new();
        first.reap_orphans_of_this_process().unwrap();
        let mut second = Containment::new();
        let refused = second.reap_orphans_of_this_process().unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::AlreadyExists, "{refused}");
        assert!(first.reaps_orphans && !second.reaps_orphans);
        let mut subreaper: libc::c_int = 0;
        // SAFETY: prctl(2) writes one int to the address passed.
        assert_eq!(unsafe { libc::prctl(libc::PR_GET_CHILD_SUBREAPER, &mut subreaper as *mut libc::c_int) }, 0);
        assert_eq!(subreaper, 1);
    }

    #[test]
    fn reaper_finds_descendants_at_any_depth() {
        let mut t = ProcessTable::default();
        for (pid, ppid) in [(2, 1), (3, 2), (4, 3), (5, 1), (6, 4)] {
            t.parent.insert(pid, ppid);
            t.children.entry(ppid).or_default().push(pid);
        }
        let mut d = t.descendants(2);
        d.sort();
        assert_eq!(d, [2, 3, 4, 6]);
        assert_eq!(t.descendants(5), [5]);
    }
}
