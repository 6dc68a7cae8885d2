//! `idemgate send` and `idemgate sign` (docs/integration-testing.md): the
//! flags, reading the payload, and the exit codes (0 sent and 2xx, 1 sent
//! and not 2xx, 2 not sent).

use std::process::ExitCode;

use clap::Args;
use idemgate::config::{Command, Merged, Sources};
use idemgate::send::{DEFAULT_TIMEOUT, Encoding};
use idemgate::units::{format_duration, parse_duration};

use super::{OWN_FLAGS, setting_flags};

/// What to sign: flags shared by `send` and `sign`
/// (docs/integration-testing.md). The config file is a setting
/// (`super::setting_flags`): `--config` over `IDEMGATE_CONFIG`, as for
/// every command.
#[derive(Args)]
#[command(next_display_order = OWN_FLAGS, args = setting_flags(Command::Send))]
pub struct SignArgs {
    /// The `[[provider]]` name in the config file whose kind and secret sign the payload.
    // Shown before --config (the settings' flags start at 1, after --log-format's 0).
    #[arg(long, value_name = "NAME", display_order = 0)]
    provider: String,
    /// Event name, for kinds that send it in a header (github: X-GitHub-Event, e.g. push; shopify: X-Shopify-Topic).
    #[arg(long, value_name = "NAME")]
    event: Option<String>,
    /// Delivery id to send; absent: a fresh one (send the same id twice to see a replay). Stripe, Slack and an hmac provider with `delivery_id` carry it in the payload: only that id is accepted.
    #[arg(long, value_name = "ID")]
    delivery_id: Option<String>,
    /// The payload file; absent or `-`: standard input. Sent byte for byte as signed.
    #[arg(long, value_name = "PAYLOAD")]
    file: Option<std::path::PathBuf>,
}

/// Flags of `idemgate send`.
#[derive(Args)]
pub struct SendArgs {
    /// Where to POST, e.g. http://127.0.0.1:8080/webhooks/github.
    url: String,
    #[command(flatten)]
    sign: SignArgs,
    /// Send a github provider's payload form-encoded, as a hook with content type application/x-www-form-urlencoded does: `payload=` and the percent-encoded JSON, signed over those bytes (kind github only).
    #[arg(long)]
    form: bool,
    /// Give up (exit 2) when no complete answer came within this long.
    // Not a setting: no env var or file key gives it, so its clap default hides nothing.
    #[arg(long, value_name = "DURATION", default_value = format_duration(DEFAULT_TIMEOUT), value_parser = parse_duration)]
    timeout: std::time::Duration,
}

/// Exit code of `send` and `sign` when nothing could be sent.
const NOT_SENT: u8 = 2;

/// Reads the payload and signs it as the named provider would; the error
/// is a message for stderr.
fn prepare(args: SignArgs, sources: Sources, encoding: Encoding) -> Result<idemgate::send::Outgoing, String> {
    let providers = Merged::load(sources).and_then(|m| m.file.providers()).map_err(|e| e.to_string())?;
    // The messages name the flag, never what it was given (docs/security.md,
    // "Secrets and output"); the config's provider names are no secret.
    let provider = providers.iter().find(|p| p.name() == args.provider).ok_or_else(|| {
        let names: Vec<&str> = providers.iter().map(|p| p.name()).collect();
        match names.is_empty() {
            true => "--provider: the config has no [[provider]] (give --config FILE)".to_owned(),
            false => format!("--provider: no provider of that name in the config (it has: {})", names.join(", ")),
        }
    })?;
    let body = match args.file.as_deref() {
        None => read_stdin(),
        Some(path) if path.as_os_str() == "-" => read_stdin(),
        Some(path) => std::fs::read(path).map_err(|e| format!("--file: cannot read it: {e}")),
    }?;
    let now = std::time::SystemTime::now();
    idemgate::send::prepare_encoded(provider, body, args.delivery_id, args.event.as_deref(), encoding, now)
        .map_err(|e| e.to_string())
}

fn read_stdin() -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body).map_err(|e| format!("cannot read the payload from stdin: {e}"))?;
    Ok(body)
}

/// `idemgate sign`: prints the headers `send` would send.
pub fn sign(args: SignArgs, sources: Sources) -> ExitCode {
    match prepare(args, sources, Encoding::Json) {
        Ok(outgoing) => {
            print!("{}", idemgate::send::header_lines(&outgoing));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idemgate sign: {e}");
            ExitCode::from(NOT_SENT)
        }
    }
}

/// `idemgate send`: signs, posts, prints the answer.
pub async fn send(args: SendArgs, sources: Sources) -> ExitCode {
    let encoding = if args.form { Encoding::Form } else { Encoding::Json };
    let outgoing = match prepare(args.sign, sources, encoding) {
        Ok(outgoing) => outgoing,
        Err(e) => {
            eprintln!("idemgate send: {e}");
            return ExitCode::from(NOT_SENT);
        }
    };
    eprintln!("idemgate send: delivery id {}", outgoing.delivery_id);
    match idemgate::send::send(&args.url, outgoing, args.timeout).await {
        Ok(answer) => {
            print!("{}", idemgate::send::render_answer(&answer));
            if answer.status.is_success() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            // Redacted as a destination is: a webhook URL may carry a token in its path too.
            eprintln!("idemgate send: {}: {e}", idemgate::redact::deliver_url(&args.url));
            ExitCode::from(NOT_SENT)
        }
    }
}
