//! What a failed Redis call means, in words an operator can act on: a
//! command the server refuses (`NOPERM`, a renamed command) against a
//! connection, TLS or authentication failure, and the eviction policy the
//! gate's keys depend on. `serve` checks these at start-up (server.rs).

use super::{Conn, RedisOptions, is_tls_url};
use crate::Error;

/// Whether Redis answered a command with an error reply that refuses the
/// command itself (`NOPERM`, an unknown or renamed command), as opposed to
/// a connection, TLS or authentication failure.
pub fn is_refused_command(e: &Error) -> bool {
    match e {
        Error::Redis(e) => e.code().is_some() && !is_refused_authentication(e),
        _ => false,
    }
}

/// Whether Redis refused the user or the password (redis-rs's own kind,
/// or the `WRONGPASS`/`NOAUTH` reply of a server it does not classify).
fn is_refused_authentication(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// What failed, in words, for a store error at start-up. A TLS server
/// that requires a client certificate accepts the handshake and then
/// closes the connection (TLS 1.3 sends its `CertificateRequired` alert
/// after the handshake), so the client sees a broken pipe or a reset on
/// its first command: with `rediss://` and no client certificate, that is
/// named as the likely cause.
pub fn what_failed(e: &Error, opts: &RedisOptions) -> &'static str {
    let Error::Redis(redis_error) = e else {
        return "Redis did not answer in time";
    };
    let text = redis_error.to_string().to_ascii_lowercase();
    let tls = opts.target.urls().iter().any(|u| is_tls_url(u));
    let dropped = redis_error.is_io_error() || redis_error.is_connection_dropped();
    if is_refused_authentication(redis_error) {
        "Redis refused the authentication (check the user and the password, or --redis-password-file)"
    } else if ["certificate", "alert", "tls", "handshake"].iter().any(|w| text.contains(w))
        || (tls && opts.tls.client.is_none() && dropped)
    {
        "the TLS handshake with Redis failed, or Redis closed the connection right after it: does it require a client certificate (--redis-tls-cert, --redis-tls-key)? is --redis-tls-ca its CA?"
    } else {
        "Redis could not be reached or dropped the connection"
    }
}

/// Reads `maxmemory-policy` with `CONFIG GET`. On a cluster every primary
/// is asked, and the first policy other than `noeviction` is returned with
/// the node it was found on.
pub async fn maxmemory_policy(opts: &RedisOptions) -> Result<Option<String>, Error> {
    let mut conn = Conn::connect(opts).await?;
    let per_primary: Vec<(Option<String>, Vec<String>)> =
        conn.on_every_primary(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy")).await?;
    let mut policies: Vec<(String, Option<String>)> =
        per_primary.into_iter().filter_map(|(node, pairs)| Some((pairs.get(1)?.clone(), node))).collect();
    policies.sort();
    Ok(match policies.iter().find(|(p, _)| p != "noeviction").or(policies.first()) {
        Some((p, Some(node))) if p != "noeviction" => Some(format!("{p} (on {node})")),
        found => found.map(|(p, _)| p.clone()),
    })
}
