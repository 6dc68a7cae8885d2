//! The HTTP service (being written).

use crate::config::ServeConfig;

/// Runs the service until `shutdown` resolves.
pub async fn serve(_config: ServeConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    shutdown.await;
    Ok(())
}

/// Resolves on SIGTERM or ctrl-c.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
