//! A warning at start for a file that holds a secret (a config file with a
//! secret in it, a password file, a secrets file) and that other users can read: its group
//! or everyone has the read bit. The file is still used; the warning names
//! it and the fix.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Logs a warning when users other than the owner may read `path`.
pub fn warn_if_others_can_read(path: &Path, what: &str) {
    let Ok(meta) = std::fs::metadata(path) else { return };
    let mode = meta.permissions().mode();
    if mode & 0o044 != 0 {
        tracing::warn!(
            file = %path.display(),
            mode = format_args!("{:o}", mode & 0o777),
            "{what} can be read by other users than its owner: it may hold a secret; chmod 600 it"
        );
    }
}
