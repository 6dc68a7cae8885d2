//! The operator commands (docs/reference.md#commands): `inspect`, `stats`,
//! `key`, `dead`, `runs` and `healthcheck`. The library's [`idemgate::ops`] reads;
//! these print what it returns and choose the exit code.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use idemgate::config::{Command, Merged, Setting, Sources, StoreConfig};
use idemgate::ops::{Ops, OpsError, Retried, Skipped, Target, render};
use idemgate::order::order_key;
use idemgate::text::json_text;

use super::{OWN_FLAGS, print_out, setting_flags};

/// How often `stats` reports its scan progress by default (keys found).
const DEFAULT_PROGRESS_EVERY: u64 = 100_000;

/// Flags every reading command shares: the store's (the same as `serve`),
/// and the output format.
#[derive(Debug, Clone, Args)]
#[command(next_display_order = OWN_FLAGS, args = setting_flags(Command::Ops))]
pub struct ReadArgs {
    /// Print JSON (one object) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `idemgate inspect …`: read one record back.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// What to read.
    #[command(subcommand)]
    pub what: InspectCommand,
}

/// The records `inspect` reads.
#[derive(Debug, Clone, Subcommand)]
pub enum InspectCommand {
    /// A delivery's cached answer: status, code, run, first seen, TTL left, event digest.
    Delivery {
        /// Provider name (e.g. `github`).
        provider: String,
        /// The provider's delivery id.
        delivery_id: String,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// A logical identity's run id, and that run's record. Give the
    /// identity as `inspect run` shows it: `inspect logical github octo/app
    /// pull_request.opened 7@3f0c…` (the key's own slots, `opened` for a
    /// GitHub event, are found too).
    Logical {
        /// Provider name.
        provider: String,
        /// `ORG/REPO`.
        repo: String,
        /// The run record's `action` (e.g. `pull_request.opened`), or the
        /// logical key's action slot (`opened`: what the payload states).
        action: String,
        /// The run record's `subject` when it has one, else its `number`.
        /// For a GitHub or GitLab provider with `identity = "event"` (the
        /// default) that is the number text, `@` and the content digest,
        /// e.g. `7@3f0c…` (docs/identities.md). Otherwise the number text as
        /// the gate computes it; omit it for events without a number
        /// (missing, null, 0 and "" all mean "no number"; the string "0" is
        /// the number text `0`).
        number: Option<String>,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// An order key's line per destination (`order_by`): the run that may be attempted now, the
    /// runs waiting behind it in creation order, and the run finished last. Give the key's parts:
    /// `inspect order github acme/widgets 42` (with `order_by = "subject"`; leave the subject out
    /// for `"repo"`, and give `""` for runs without a number).
    Order {
        /// Provider name.
        provider: String,
        /// `ORG/REPO`.
        repo: String,
        /// The number text, for `order_by = "subject"`.
        subject: Option<String>,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// A run record: identity, creating delivery, processing state (every field).
    Run {
        /// The run id, e.g. `run-7`.
        run_id: String,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
}

impl InspectCommand {
    /// The lookup and the shared flags.
    pub fn target(&self) -> (Target, &ReadArgs) {
        match self {
            InspectCommand::Delivery { provider, delivery_id, read } => {
                (Target::Delivery { provider: provider.clone(), delivery_id: delivery_id.clone() }, read)
            }
            InspectCommand::Logical { provider, repo, action, number, read } => {
                (Target::logical(provider, repo, action, number.as_deref().unwrap_or("")), read)
            }
            InspectCommand::Run { run_id, read } => (Target::Run { run_id: run_id.clone() }, read),
            InspectCommand::Order { provider, repo, subject, read } => {
                (Target::Order { key: order_key(provider, repo, subject.as_deref()) }, read)
            }
        }
    }
}

/// `idemgate stats`.
#[derive(Debug, Clone, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    read: ReadArgs,
    /// Report scan progress on stderr every N keys found (0: never).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_PROGRESS_EVERY)]
    progress_every: u64,
}

/// `idemgate dead …`: the dead stream, and moving dead runs back.
#[derive(Debug, Clone, Args)]
pub struct DeadArgs {
    /// What to do.
    #[command(subcommand)]
    pub what: DeadCommand,
}

/// The `dead` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum DeadCommand {
    /// The dead stream, oldest first: run id, identity, attempts, last error, time of death.
    List {
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Put dead runs back on the runs stream: a new attempt budget (attempt numbers go on), record
    /// `queued`, dead-stream entries removed; atomically per run. A run that is not dead is refused
    /// and left as it is.
    #[command(group = clap::ArgGroup::new("which").required(true).args(["run_ids", "all"]))]
    Retry {
        /// The runs to retry, e.g. `run-7`.
        run_ids: Vec<String>,
        /// Every run the dead stream names.
        #[arg(long)]
        all: bool,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// `idemgate runs …`: act on run records.
#[derive(Debug, Clone, Args)]
pub struct RunsArgs {
    /// What to do.
    #[command(subcommand)]
    pub what: RunsCommand,
}

/// The `runs` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum RunsCommand {
    /// Put done or dead runs back on the runs stream, atomically per run, with the same run key
    /// (webhook-id): a receiver that dedupes on it drops the redelivery. The next attempt is the
    /// run's highest so far + 1, with a new attempt budget. A queued, running or parked run is
    /// refused and left as it is.
    ///
    /// A done run whose payload is gone (removed at `done`, or kept by `--keep-done-payloads` and
    /// past its time) is refused, since the destination would get the record without it, unless
    /// `--without-payload`.
    #[command(group = clap::ArgGroup::new("which").required(true).args(["run_ids", "all_dead"]))]
    Redeliver {
        /// The runs to redeliver, e.g. `run-7`.
        run_ids: Vec<String>,
        /// Every run the dead stream names.
        #[arg(long)]
        all_dead: bool,
        /// Redeliver a done run whose payload is gone without it: the record alone.
        #[arg(long)]
        without_payload: bool,
        /// To this destination (consumer group) alone [default: a dead run to the one it died
        /// for, a done run to every one its record has].
        #[arg(long, value_name = "NAME")]
        destination: Option<String>,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Make parked runs due at once: their group's workers take them within a second. The attempt
    /// budget is kept (no attempt is counted for it; the next attempt counts as the schedule's
    /// would). A run that is not parked is refused and left as it is.
    #[command(group = clap::ArgGroup::new("which").required(true).args(["run_ids", "all_parked"]))]
    RetryNow {
        /// The parked runs, e.g. `run-7`.
        run_ids: Vec<String>,
        /// Every run parked for the group `--group` names, in batches (time linear in their number).
        #[arg(long, requires = "parked_group")]
        all_parked: bool,
        /// The consumer group (the workers' `--group`) whose parked runs `--all-parked` sends.
        #[arg(long = "group", value_name = "NAME", requires = "all_parked")]
        parked_group: Option<String>,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Let the line of a dead run's order key move on without retrying it (`order_on_dead =
    /// "block"` holds a key's later runs behind a dead one). The next run of the key goes at once;
    /// the skipped run stays dead (`dead retry` can still send it, to the back of the line) and is
    /// still the `Idemgate-Order-Previous` of the next, so the receiver sees the gap.
    Skip {
        /// The dead run, e.g. `run-7`.
        run_id: String,
        /// Only this destination's line (consumer group) [default: every line the run heads].
        #[arg(long = "group", value_name = "NAME")]
        group: Option<String>,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// `idemgate key …`: print a key, for pasting into redis-cli (no Redis needed).
#[derive(Debug, Clone, Args)]
pub struct KeyArgs {
    /// Which key.
    #[command(subcommand)]
    pub what: KeyCommand,
}

/// The keys `idemgate key` prints.
#[derive(Debug, Clone, Subcommand)]
pub enum KeyCommand {
    /// `idemgate:{NS}:delivery:…` of a delivery.
    Delivery {
        /// Provider name.
        provider: String,
        /// The provider's delivery id.
        delivery_id: String,
        /// Namespace and output flags.
        #[command(flatten)]
        out: KeyOut,
    },
    /// `idemgate:{NS}:logical:…` of an identity, as the gate writes it for
    /// the provider's kind (no Redis is read). The kind is the config's
    /// `[[provider]]` of that name (--config); a name the config does not
    /// have is a `/v1/deliveries` provider. Where the key holds a digest of
    /// the payload and no subject with it is given (GitHub's and GitLab's
    /// `identity = "event"`, Shopify), it refuses (exit 1) and says how to
    /// find the key: `idemgate inspect run RUN_ID` prints it.
    Logical {
        /// Provider name.
        provider: String,
        /// `ORG/REPO`.
        repo: String,
        /// The action as the run reports it (`pull_request.opened`, `push`):
        /// for GitHub's event identity the key keeps what the payload
        /// states (`opened`, or '' for `push`).
        action: String,
        /// The subject: the number text as the gate computes it (omit it
        /// for no number), or a run record's `subject` (`7@3f0c…`), which
        /// GitHub's and GitLab's event identity and Shopify need.
        number: Option<String>,
        /// Namespace and output flags.
        #[command(flatten)]
        out: KeyOut,
    },
    /// `idemgate:{NS}:run:RUN_ID` of a run.
    Run {
        /// The run id, e.g. `run-7`.
        run_id: String,
        /// Namespace and output flags.
        #[command(flatten)]
        out: KeyOut,
    },
}

/// Flags of `idemgate key`: the store's (only the namespace is used), and the output.
#[derive(Debug, Clone, Args)]
#[command(next_display_order = OWN_FLAGS, args = setting_flags(Command::Ops))]
pub struct KeyOut {
    /// Print the key as is, never quoted for redis-cli.
    #[arg(long)]
    pub raw: bool,
}

/// The store the merged settings name (flags > env > the config file).
fn store(sources: Sources) -> Result<StoreConfig, OpsError> {
    Ok(StoreConfig::resolve(&Merged::load(sources)?.given)?)
}

/// `idemgate inspect`: prints the key read, then the record; exit 1 (and
/// a message on stderr) when there is none.
pub async fn inspect_command(args: &InspectArgs, sources: Sources) -> Result<ExitCode, OpsError> {
    let (target, read) = args.what.target();
    let ops = Ops::connect(&store(sources)?).await?;
    let inspection = ops.inspect(&target).await?;
    if inspection.found.is_none() {
        eprintln!(
            "idemgate: no {} record at {} (never written, or expired)",
            inspection.kind,
            render::cli_quote(&inspection.key)
        );
        if let Target::Logical(id) = &target
            && !id.subject.contains(idemgate::vocabulary::SUBJECT_DIGEST_SEPARATOR)
        {
            eprintln!(
                "idemgate: a GitHub or GitLab provider with identity = \"event\" (the default) names its work NUMBER@DIGEST: \
                 give the `subject` that `idemgate inspect run RUN_ID` prints (the run id is in `inspect delivery`'s answer)"
            );
        }
        return Ok(ExitCode::FAILURE);
    }
    let text =
        if read.json { json_text(&render::inspection_json(&inspection)) } else { render::inspection_text(&inspection) };
    print_out(&text);
    Ok(ExitCode::SUCCESS)
}

/// `idemgate stats`.
pub async fn stats_command(args: &StatsArgs, sources: Sources) -> Result<ExitCode, OpsError> {
    let ops = Ops::connect(&store(sources)?).await?;
    let stats = ops
        .stats(args.progress_every, |c| {
            eprintln!(
                "idemgate stats: {} keys so far (delivery {}, logical {}, run {})…",
                c.total(),
                c.delivery,
                c.logical,
                c.run
            )
        })
        .await?;
    let text = if args.read.json { json_text(&stats) } else { render::stats_text(&stats) };
    print_out(&text);
    Ok(ExitCode::SUCCESS)
}

/// `idemgate dead list` (exit 0, also when the stream is empty) and `idemgate
/// dead retry` (exit 1 when a named run was refused; with `--all`, runs the
/// stream names that are no longer dead are reported and skipped, exit 0).
pub async fn dead_command(args: &DeadArgs, sources: Sources) -> Result<ExitCode, OpsError> {
    match &args.what {
        DeadCommand::List { read } => {
            let ops = Ops::connect(&store(sources)?).await?;
            let dead = ops.dead_list().await?;
            let text = if read.json {
                json_text(&serde_json::json!({"key": ops.keys().runs_dead(), "runs": dead}))
            } else {
                render::dead_text(&ops.keys().runs_dead(), &dead)
            };
            print_out(&text);
            Ok(ExitCode::SUCCESS)
        }
        DeadCommand::Retry { run_ids, all, read } => {
            let ops = Ops::connect(&store(sources)?).await?;
            let which = (!*all).then_some(run_ids.as_slice());
            let mut report = MovedReport::new(*all, false, read.json);
            let results = ops.dead_retry(which, None, &mut |r| report.one(r)).await;
            report.end(results)
        }
    }
}

/// `idemgate runs redeliver` (exit 1 when a named run was refused; with
/// `--all-dead`, runs the dead stream names that are no longer dead are
/// reported and skipped, exit 0) and `idemgate runs retry-now` (exit 1 when
/// a named run was not parked).
pub async fn runs_command(args: &RunsArgs, sources: Sources) -> Result<ExitCode, OpsError> {
    match &args.what {
        RunsCommand::Redeliver { run_ids, all_dead, without_payload, destination, read } => {
            let ops = Ops::connect(&store(sources)?).await?;
            let which = (!*all_dead).then_some(run_ids.as_slice());
            let mut report = MovedReport::new(*all_dead, true, read.json);
            let results = ops.redeliver(which, *without_payload, destination.as_deref(), &mut |r| report.one(r)).await;
            report.end(results)
        }
        RunsCommand::RetryNow { parked_group: Some(group), read, .. } => {
            let ops = Ops::connect(&store(sources)?).await?;
            if !ops.is_destination(group).await? {
                eprintln!(
                    "idemgate runs retry-now: no group {}: no consumer group of that name reads the runs stream; nothing changed",
                    render::one_line(group)
                );
                return Ok(ExitCode::FAILURE);
            }
            let made_due = ops.retry_now_group(group).await?;
            let text = if read.json {
                json_text(&serde_json::json!({"group": group, "made_due": made_due}))
            } else {
                format!(
                    "made {made_due} parked run{} of group {} due now (its workers take them within a second)",
                    if made_due == 1 { "" } else { "s" },
                    render::one_line(group)
                )
            };
            print_out(&text);
            Ok(ExitCode::SUCCESS)
        }
        RunsCommand::Skip { run_id, group, read } => {
            let ops = Ops::connect(&store(sources)?).await?;
            let result = ops.skip_dead(run_id, group.as_deref()).await?;
            let (text, ok) = match &result {
                Skipped::Skipped { groups } => {
                    let groups: Vec<_> = groups.iter().map(|g| render::one_line(g)).collect();
                    let shown = render::one_line(run_id);
                    (format!("{shown} skipped: the next run of its order key goes now ({})", groups.join(", ")), true)
                }
                refused => (refused.refusal(run_id, group.as_deref()).unwrap_or_default(), false),
            };
            print_out(&if read.json { json_text(&result) } else { text });
            Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        RunsCommand::RetryNow { run_ids, read, .. } => {
            let ops = Ops::connect(&store(sources)?).await?;
            let results = ops.retry_now(run_ids).await?;
            let due = results.iter().filter(|r| r.due()).count();
            let text = if read.json {
                json_text(&serde_json::json!({"made_due": due, "runs": results}))
            } else {
                render::retried_now_text(&results)
            };
            print_out(&text);
            Ok(if due < results.len() { ExitCode::FAILURE } else { ExitCode::SUCCESS })
        }
    }
}

/// What `dead retry` or `runs redeliver` did, printed as it happens: a
/// line per run as it moves or is refused (a long `--all` shows its
/// progress, and a store error part of the way leaves what moved before it
/// on the screen), then the count; `--json`: one document at the end, with
/// the `error` that stopped it, if one did.
struct MovedReport {
    all: bool,
    redeliver: bool,
    json: bool,
    seen: Vec<Retried>,
}

impl MovedReport {
    fn new(all: bool, redeliver: bool, json: bool) -> Self {
        MovedReport { all, redeliver, json, seen: Vec::new() }
    }

    fn one(&mut self, r: &Retried) {
        if !self.json {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(render::retried_line(r, self.redeliver).as_bytes());
            let _ = out.flush();
        }
        self.seen.push(r.clone());
    }

    /// Exit 1 when a named run was refused (with `--all`, runs no longer
    /// dead are skipped, exit 0), when `--destination` names no group, or
    /// when the store failed part of the way (after what moved before).
    fn end(self, results: Result<Vec<Retried>, OpsError>) -> Result<ExitCode, OpsError> {
        let error = results.err();
        let moved = self.seen.iter().filter(|r| r.moved()).count();
        if self.json {
            let mut doc = serde_json::json!({"moved": moved, "runs": self.seen});
            if let Some(e) = &error {
                doc["error"] = serde_json::json!(e.to_string());
            }
            print_out(&json_text(&doc));
        } else {
            let mut summary = render::retried_summary(&self.seen, self.all);
            if error.is_some() {
                summary.push_str(" before the error below");
            }
            print_out(&summary);
        }
        if let Some(e) = error {
            return Err(e);
        }
        let no_destination = self.seen.iter().any(|r| matches!(r, Retried::NoDestination { .. }));
        let refused = self.seen.len() - moved;
        Ok(if no_destination || (refused > 0 && !self.all) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
    }
}

/// `idemgate key`.
pub fn key_command(args: &KeyArgs, sources: Sources) -> Result<ExitCode, OpsError> {
    let merged = Merged::load(sources)?;
    let (target, out) = match &args.what {
        KeyCommand::Delivery { provider, delivery_id, out } => {
            (Target::Delivery { provider: provider.clone(), delivery_id: delivery_id.clone() }, out)
        }
        KeyCommand::Logical { provider, repo, action, number, out } => {
            let configured = merged.file.provider_naming(provider)?;
            let subject = number.as_deref().unwrap_or("");
            match Target::logical_written(configured, provider, repo, action, subject) {
                Ok(target) => (target, out),
                Err(why) => {
                    eprintln!("idemgate key logical: {}", idemgate::text::escape_control(&why));
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
        KeyCommand::Run { run_id, out } => (Target::Run { run_id: run_id.clone() }, out),
    };
    let key = target.key(&StoreConfig::resolve(&merged.given)?.keys);
    print_out(&if out.raw { key } else { render::cli_quote(&key) });
    Ok(ExitCode::SUCCESS)
}

/// Flags of `idemgate healthcheck`: the store's (without --http, the
/// check is that this store answers), and --http.
#[derive(Debug, Clone, Args)]
#[command(next_display_order = OWN_FLAGS, args = setting_flags(Command::Ops))]
pub struct HealthcheckArgs {
    /// Check a running service instead: GET this URL (e.g.
    /// http://127.0.0.1:8080/readyz, which answers 200 only while the
    /// service's store answers) and expect a 2xx within --redis-timeout.
    #[arg(long, value_name = "URL")]
    pub http: Option<String>,
}

/// `idemgate healthcheck`: one line on stdout when the store (or, with
/// `--http`, the service) answers; one line on stderr and exit 1 when not.
pub async fn healthcheck_command(args: &HealthcheckArgs, sources: Sources) -> Result<ExitCode, OpsError> {
    let merged = Merged::load(sources)?;
    if let Some(given) = &args.http {
        let timeout =
            merged.given.redis_timeout.duration()?.map_or(idemgate::redis_io::DEFAULT_COMMAND_TIMEOUT, |t| t.value);
        let url = idemgate::redact::deliver_url(given);
        return Ok(match idemgate::ops::http_status(given, timeout).await {
            Ok(code) if (200..300).contains(&code) => {
                print_out(&format!("ok: {url} answered {code}"));
                ExitCode::SUCCESS
            }
            Ok(code) => {
                eprintln!("idemgate healthcheck: {url} answered {code}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("idemgate healthcheck: {url}: {e}");
                ExitCode::FAILURE
            }
        });
    }
    let config = StoreConfig::resolve(&merged.given)?;
    match idemgate::ops::healthcheck(&config).await {
        Ok(desc) => {
            print_out(&format!("ok: {desc}"));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "idemgate healthcheck: {} does not answer: {}",
                config.describe(),
                // One line, whatever the error text holds (container health logs).
                e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
            );
            Ok(ExitCode::FAILURE)
        }
    }
}
