//! Exactly-once effects behind idemgate: identity-verification sessions whose
//! callback events are applied once, in SQLite (docs/exactly-once.md).
//!
//! ```sh
//! cargo run --example verification -- --db state.db session s-1 --tenant acme --subject u-1 --deadline 60
//! cargo run --example verification -- --db state.db event s-1 fixture-approved --tenant acme --subject u-1 --status Approved --policy true
//! idemgate worker --group verify -- target/debug/examples/verification --db state.db handle
//! ```
//!
//! Each command prints one JSON object on stdout; an error prints
//! `{"error": "<CODE>"}` (with a detail on stderr) and exits 1. `handle`
//! exits 65 instead on an error no retry can fix, which `idemgate worker`
//! dead-letters at once.
//!
//! The whole pattern is in [`apply_event`]: one `BEGIN IMMEDIATE`
//! transaction inserts the event into `events`, whose primary key
//! `(session, event_id)` makes a second record of the same event impossible,
//! and changes the session only when that insert added a row. Either both
//! are written or neither, so an event delivered, or a run re-run, any
//! number of times changes the state once.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgAction, Parser, Subcommand};
use idemgate::worker::command::PERMANENT_FAILURE_EXIT;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// Synthetic input only: the example has no verifier for a real provider's
/// signatures, so anything that does not look like the fixture is refused.
const SYNTHETIC_EVENT_PREFIX: &str = "fixture-";
const SYNTHETIC_MODE: &str = "synthetic_fixture";
const SYNTHETIC_SOURCE: &str = "fixture_callback";

/// Test hook (docs/exactly-once.md): `handle` sleeps this many milliseconds
/// after its transaction, before it answers, which makes "the worker died
/// after the commit, before its acknowledgement" a window a test can hit.
const PAUSE_AFTER_COMMIT_ENV: &str = "VERIFICATION_PAUSE_AFTER_COMMIT_MS";

/// Test hook: applying an event sleeps this many milliseconds inside its
/// transaction (after the checks, before the dedup insert), so two
/// processes applying one event surely overlap.
const PAUSE_IN_TRANSACTION_ENV: &str = "VERIFICATION_PAUSE_IN_TRANSACTION_MS";

/// How long a command waits for another process's write transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The schema, version 1 (`PRAGMA user_version`).
const SCHEMA: &str = "
CREATE TABLE sessions (
    session            TEXT PRIMARY KEY NOT NULL,
    tenant             TEXT NOT NULL,
    subject            TEXT NOT NULL,
    deadline           INTEGER NOT NULL,
    status             TEXT NOT NULL
                       CHECK (status IN ('pending', 'approved', 'declined', 'unknown', 'expired')),
    permission_granted INTEGER NOT NULL CHECK (permission_granted IN (0, 1)),
    grant_count        INTEGER NOT NULL CHECK (grant_count >= 0),
    -- the --policy of the event that approved the session
    policy             INTEGER NOT NULL CHECK (policy IN (0, 1))
) STRICT;

-- The dedup record: one row per event and session, never two.
CREATE TABLE events (
    session  TEXT NOT NULL REFERENCES sessions (session),
    event_id TEXT NOT NULL,
    status   TEXT NOT NULL,
    policy   INTEGER NOT NULL CHECK (policy IN (0, 1)),
    -- the idemgate run that carried the event (handle), else NULL
    run_id   TEXT,
    PRIMARY KEY (session, event_id)
) STRICT, WITHOUT ROWID;
";

#[derive(Debug, Parser)]
#[command(
    name = "verification",
    about = "Identity-verification sessions whose callback events take effect exactly once (SQLite).",
    after_help = "Every write is one BEGIN IMMEDIATE transaction. Errors print {\"error\": CODE} and exit 1; \
                  `handle` exits 65 on an error no retry can fix (BINDING_MISMATCH, \
                  PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED, INVALID_RUN). See docs/exactly-once.md."
)]
struct Cli {
    /// The SQLite database file; created with its schema when missing.
    #[arg(long, value_name = "FILE")]
    db: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create a session, status `pending`.
    Session {
        session: String,
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        subject: String,
        /// After this time (an integer, e.g. Unix seconds) `recover` expires a session still pending or unknown.
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        deadline: i64,
    },
    /// Apply a callback event to a session, once.
    Event {
        session: String,
        event_id: String,
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        subject: String,
        /// `Approved`, `Declined`, or anything else (unknown: never a grant).
        #[arg(long)]
        status: String,
        /// Whether the approval allows the action (`allow_action`).
        #[arg(long, value_name = "true|false", action = ArgAction::Set, default_value_t = false)]
        policy: bool,
        #[arg(long, value_name = "M", default_value = SYNTHETIC_MODE)]
        mode: String,
        #[arg(long, value_name = "S", default_value = SYNTHETIC_SOURCE)]
        source: String,
    },
    /// Expire a session still pending or unknown whose deadline is before N; never asks a provider.
    Recover {
        session: String,
        #[arg(long, value_name = "N", allow_negative_numbers = true)]
        now: i64,
    },
    /// Print a session's state.
    Read { session: String },
    /// Worker handler: read an idemgate run on stdin and apply the event in its `payload`.
    Handle,
}

/// Why a command gave no state.
#[derive(Debug)]
enum Refusal {
    /// Not the synthetic fixture: no signature verifier for real input exists here.
    NotSynthetic,
    /// No such session, or the event names another tenant or subject.
    BindingMismatch,
    SessionNotFound,
    /// `session` for an id that exists with other settings.
    SessionExists,
    /// `handle`: stdin is not a run whose payload carries an event.
    InvalidRun(String),
    /// SQLite failed (busy past the timeout, I/O, a foreign database).
    Database(rusqlite::Error),
}

impl Refusal {
    fn code(&self) -> &'static str {
        match self {
            Refusal::NotSynthetic => "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED",
            Refusal::BindingMismatch => "BINDING_MISMATCH",
            Refusal::SessionNotFound => "SESSION_NOT_FOUND",
            Refusal::SessionExists => "SESSION_EXISTS",
            Refusal::InvalidRun(_) => "INVALID_RUN",
            Refusal::Database(_) => "DATABASE",
        }
    }

    /// Retrying the same input can never succeed. A database error can
    /// (a lock held too long, a full disk freed): the worker retries it.
    fn permanent(&self) -> bool {
        !matches!(self, Refusal::Database(_))
    }

    fn detail(&self) -> String {
        match self {
            Refusal::NotSynthetic => format!(
                "only synthetic input is accepted: an event id starting with {SYNTHETIC_EVENT_PREFIX:?}, \
                 mode {SYNTHETIC_MODE:?}, source {SYNTHETIC_SOURCE:?}"
            ),
            Refusal::BindingMismatch => "no such session, or its tenant or subject differs".into(),
            Refusal::SessionNotFound => "no such session".into(),
            Refusal::SessionExists => "the session exists with another tenant, subject or deadline".into(),
            Refusal::InvalidRun(why) => why.clone(),
            Refusal::Database(e) => e.to_string(),
        }
    }
}

impl From<rusqlite::Error> for Refusal {
    fn from(e: rusqlite::Error) -> Self {
        Refusal::Database(e)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    Pending,
    Approved,
    Declined,
    Unknown,
    Expired,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Declined => "declined",
            Status::Unknown => "unknown",
            Status::Expired => "expired",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [Status::Pending, Status::Approved, Status::Declined, Status::Unknown, Status::Expired]
            .into_iter()
            .find(|st| st.as_str() == s)
    }

    /// The status an event with provider status `event` moves a session
    /// to; `None` leaves it as it is. From `pending` or `unknown` every
    /// event decides (anything but `Approved` or `Declined` is `unknown`);
    /// after that the only move is the revocation of an approval.
    fn after(self, event: &str) -> Option<Status> {
        match (self, event) {
            (Status::Pending | Status::Unknown, "Approved") => Some(Status::Approved),
            (Status::Pending | Status::Unknown, "Declined") => Some(Status::Declined),
            (Status::Pending | Status::Unknown, _) => Some(Status::Unknown),
            (Status::Approved, "Declined") => Some(Status::Declined),
            (Status::Approved | Status::Declined | Status::Expired, _) => None,
        }
    }
}

/// A session row.
#[derive(Debug, Clone)]
struct Session {
    session: String,
    tenant: String,
    subject: String,
    deadline: i64,
    status: Status,
    permission_granted: bool,
    grant_count: i64,
    policy: bool,
}

/// The answer of every command that succeeds.
#[derive(Debug, Serialize)]
struct State {
    session: String,
    status: Status,
    deadline: i64,
    permission_granted: bool,
    /// Grants ever made: a revocation keeps the count.
    grant_count: i64,
    /// Always false: the grant is a flag in this database, not a real permission.
    live_permission_changed: bool,
    policy_version: u32,
    allow_action: bool,
}

impl Session {
    fn state(&self) -> State {
        State {
            session: self.session.clone(),
            status: self.status,
            deadline: self.deadline,
            permission_granted: self.permission_granted,
            grant_count: self.grant_count,
            live_permission_changed: false,
            policy_version: 1,
            allow_action: self.status == Status::Approved && self.policy,
        }
    }

    fn load(db: &Connection, session: &str) -> rusqlite::Result<Option<Session>> {
        db.query_row(
            "SELECT session, tenant, subject, deadline, status, permission_granted, grant_count, policy
             FROM sessions WHERE session = ?1",
            [session],
            |r| {
                let status: String = r.get(4)?;
                Ok(Session {
                    session: r.get(0)?,
                    tenant: r.get(1)?,
                    subject: r.get(2)?,
                    deadline: r.get(3)?,
                    status: Status::parse(&status).ok_or_else(|| {
                        rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, status.into())
                    })?,
                    permission_granted: r.get(5)?,
                    grant_count: r.get(6)?,
                    policy: r.get(7)?,
                })
            },
        )
        .optional()
    }

    fn store(&self, tx: &Transaction) -> rusqlite::Result<()> {
        tx.execute(
            "UPDATE sessions SET status = ?2, permission_granted = ?3, grant_count = ?4, policy = ?5
             WHERE session = ?1",
            params![self.session, self.status.as_str(), self.permission_granted, self.grant_count, self.policy],
        )?;
        Ok(())
    }
}

/// One callback event, from the command line or a run's payload.
#[derive(Debug)]
struct Event {
    session: String,
    event_id: String,
    tenant: String,
    subject: String,
    status: String,
    policy: bool,
    mode: String,
    source: String,
}

impl Event {
    fn is_synthetic(&self) -> bool {
        self.event_id.starts_with(SYNTHETIC_EVENT_PREFIX)
            && self.mode == SYNTHETIC_MODE
            && self.source == SYNTHETIC_SOURCE
    }

    /// The event in a run's `payload`: its fields at the top, or under `data`.
    fn from_payload(payload: &Value) -> Result<Event, Refusal> {
        let top = payload.as_object().ok_or_else(|| invalid("the payload is not a JSON object"))?;
        let fields = if top.contains_key("session") {
            top
        } else {
            top.get("data").and_then(Value::as_object).ok_or_else(|| invalid("the payload has no session"))?
        };
        let text = |key: &str| -> Result<String, Refusal> {
            match fields.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(invalid(&format!("payload field {key} is not a string"))),
                None => Err(invalid(&format!("payload field {key} is missing"))),
            }
        };
        let text_or = |key: &str, default: &str| -> Result<String, Refusal> {
            if fields.contains_key(key) { text(key) } else { Ok(default.to_owned()) }
        };
        Ok(Event {
            session: text("session")?,
            event_id: text("event")?,
            tenant: text("tenant")?,
            subject: text("subject")?,
            status: text("status")?,
            policy: policy_of(fields)?,
            mode: text_or("mode", SYNTHETIC_MODE)?,
            source: text_or("source", SYNTHETIC_SOURCE)?,
        })
    }
}

fn invalid(why: &str) -> Refusal {
    Refusal::InvalidRun(why.to_owned())
}

/// `policy`: a boolean (or the text `"true"` / `"false"`, as on the command line); absent is false.
fn policy_of(fields: &Map<String, Value>) -> Result<bool, Refusal> {
    match fields.get("policy") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" || s == "false" => Ok(s == "true"),
        Some(_) => Err(invalid("payload field policy is not true or false")),
    }
}

/// Opens the database, creating the schema on first use (under the write
/// lock, so two first processes cannot both create it).
fn open(path: &Path) -> Result<Connection, Refusal> {
    let mut db = Connection::open(path)?;
    db.busy_timeout(BUSY_TIMEOUT)?;
    db.pragma_update(None, "foreign_keys", true)?;
    let version = |db: &Connection| db.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0));
    if version(&db)? == 0 {
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if version(&tx)? == 0 {
            tx.execute_batch(SCHEMA)?;
            tx.pragma_update(None, "user_version", 1)?;
        }
        tx.commit()?;
    }
    match version(&db)? {
        1 => Ok(db),
        v => Err(Refusal::Database(rusqlite::Error::InvalidParameterName(format!(
            "{}: schema version {v}, not this example's (1)",
            path.display()
        )))),
    }
}

fn write_tx(db: &mut Connection) -> rusqlite::Result<Transaction<'_>> {
    db.transaction_with_behavior(TransactionBehavior::Immediate)
}

fn create_session(
    db: &mut Connection,
    session: &str,
    tenant: &str,
    subject: &str,
    deadline: i64,
) -> Result<State, Refusal> {
    let tx = write_tx(db)?;
    if let Some(existing) = Session::load(&tx, session)? {
        // The same creation again (a retried script) is answered, not refused.
        let same = existing.tenant == tenant && existing.subject == subject && existing.deadline == deadline;
        return if same { Ok(existing.state()) } else { Err(Refusal::SessionExists) };
    }
    tx.execute(
        "INSERT INTO sessions (session, tenant, subject, deadline, status, permission_granted, grant_count, policy)
         VALUES (?1, ?2, ?3, ?4, 'pending', 0, 0, 0)",
        params![session, tenant, subject, deadline],
    )?;
    let created = Session::load(&tx, session)?.expect("inserted in this transaction");
    tx.commit()?;
    Ok(created.state())
}

/// Applies `event` once: the checks, the dedup record and the state change
/// in one `BEGIN IMMEDIATE` transaction.
fn apply_event(db: &mut Connection, event: &Event, run_id: Option<&str>) -> Result<State, Refusal> {
    if !event.is_synthetic() {
        return Err(Refusal::NotSynthetic);
    }
    let tx = write_tx(db)?;
    let mut session = match Session::load(&tx, &event.session)? {
        Some(s) if s.tenant == event.tenant && s.subject == event.subject => s,
        _ => return Err(Refusal::BindingMismatch),
    };
    pause(PAUSE_IN_TRANSACTION_ENV);
    // The primary key decides: no row added means this event was applied before.
    let recorded = tx.execute(
        "INSERT INTO events (session, event_id, status, policy, run_id) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session, event_id) DO NOTHING",
        params![event.session, event.event_id, event.status, event.policy, run_id],
    )?;
    if recorded == 0 {
        return Ok(session.state()); // the transaction rolls back; it wrote nothing
    }
    if let Some(next) = session.status.after(&event.status) {
        if next == Status::Approved {
            session.grant_count += 1; // reachable only from pending or unknown: one grant per session
            session.policy = event.policy;
        }
        session.permission_granted = next == Status::Approved;
        session.status = next;
        session.store(&tx)?;
    }
    tx.commit()?;
    Ok(session.state())
}

/// The answer of `recover`: the state, then what to do about a session no
/// event decided.
#[derive(Debug, Serialize)]
struct Recovered {
    #[serde(flatten)]
    state: State,
    next: &'static str,
    /// Always false: no provider is ever asked.
    provider_polled: bool,
}

fn recover(db: &mut Connection, session: &str, now: i64) -> Result<Recovered, Refusal> {
    let tx = write_tx(db)?;
    let mut s = Session::load(&tx, session)?.ok_or(Refusal::SessionNotFound)?;
    if matches!(s.status, Status::Pending | Status::Unknown) && s.deadline < now {
        s.status = Status::Expired;
        s.permission_granted = false;
        s.store(&tx)?;
    }
    tx.commit()?;
    Ok(Recovered { state: s.state(), next: "review_or_authorized_provider_refresh", provider_polled: false })
}

/// `handle`: the run on stdin, applied like `event`.
fn handle(db: &mut Connection) -> Result<State, Refusal> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).map_err(|e| invalid(&format!("reading stdin: {e}")))?;
    let run: Value = serde_json::from_str(&input).map_err(|e| invalid(&format!("stdin is not JSON: {e}")))?;
    let run_id = run.get("run_id").and_then(Value::as_str);
    let payload = run.get("payload").filter(|p| !p.is_null()).ok_or_else(|| {
        invalid("the run has no payload: give the provider keep_payload = true (docs/exactly-once.md)")
    })?;
    let event = Event::from_payload(payload)?;
    let state = apply_event(db, &event, run_id)?;
    pause(PAUSE_AFTER_COMMIT_ENV);
    Ok(state)
}

/// Sleeps the milliseconds test hook `env` asks for, if any.
fn pause(env: &str) {
    let Some(ms) = std::env::var(env).ok().and_then(|v| v.parse::<u64>().ok()) else { return };
    eprintln!("pausing {ms} ms ({env})");
    std::thread::sleep(Duration::from_millis(ms));
}

/// Runs one command; the answer is one line of JSON.
fn run(cli: Cli) -> Result<String, Refusal> {
    let db = || open(&cli.db);
    let state = match cli.command {
        Command::Session { session, tenant, subject, deadline } => {
            create_session(&mut db()?, &session, &tenant, &subject, deadline)?
        }
        Command::Event { session, event_id, tenant, subject, status, policy, mode, source } => {
            let event = Event { session, event_id, tenant, subject, status, policy, mode, source };
            if !event.is_synthetic() {
                return Err(Refusal::NotSynthetic); // before the database is opened (or created)
            }
            apply_event(&mut db()?, &event, None)?
        }
        Command::Recover { session, now } => return Ok(to_json(&recover(&mut db()?, &session, now)?)),
        Command::Read { session } => Session::load(&db()?, &session)?.ok_or(Refusal::SessionNotFound)?.state(),
        Command::Handle => handle(&mut db()?)?,
    };
    Ok(to_json(&state))
}

/// Fields in declaration order (a `serde_json::Value` would sort them).
fn to_json(answer: &impl Serialize) -> String {
    serde_json::to_string(answer).expect("answers serialize")
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            eprint!("{e}");
            println!("{}", json!({"error": "USAGE"}));
            return ExitCode::FAILURE;
        }
    };
    let handling = matches!(cli.command, Command::Handle);
    match run(cli) {
        Ok(answer) => {
            println!("{answer}");
            ExitCode::SUCCESS
        }
        Err(refusal) => {
            // stderr becomes the run's last_error under the worker: name the code there too.
            eprintln!("{}: {}", refusal.code(), refusal.detail());
            println!("{}", json!({"error": refusal.code()}));
            if handling && refusal.permanent() {
                ExitCode::from(PERMANENT_FAILURE_EXIT as u8)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
