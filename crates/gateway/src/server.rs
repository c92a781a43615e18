//! The gateway as a server: binding the configured address, serving the router
//! ([`crate::router`]) over the shared state ([`crate::state`]), and the graceful shutdown.
//!
//! Shutdown (SIGTERM, Ctrl-C, or the embedder's future): the listener stops accepting,
//! `/readyz` turns 503, new turns are refused with 503, and in-flight requests get
//! `gateway.shutdownTimeoutMs` to finish. Past that, the turns still running are aborted
//! through their abort signals (their transcripts stay valid) and get a few more seconds to
//! write. Then the runtime stops its maintenance and disposes the engine, so stores flush
//! before the process exits.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::GatewayConfig;
use crate::error::{GatewayError, Result};
use crate::state::{GatewayParts, Shared};

/// How long aborted turns get to finish writing after the shutdown deadline.
const ABORT_GRACE: Duration = Duration::from_secs(10);

/// A gateway ready to serve.
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Wraps the runtime and settings.
    pub fn new(parts: GatewayParts) -> Self {
        Gateway {
            shared: Arc::new(Shared::new(parts)),
        }
    }

    /// The settings in effect.
    pub fn config(&self) -> &GatewayConfig {
        &self.shared.config
    }

    /// Binds the configured address.
    pub async fn bind(&self) -> Result<TcpListener> {
        let addr = self.shared.config.addr;
        TcpListener::bind(addr)
            .await
            .map_err(|source| GatewayError::Bind {
                addr: addr.to_string(),
                source,
            })
    }

    /// The application: every route with its layers.
    pub fn router(&self) -> Router {
        crate::router::router(self.shared.clone())
    }

    /// Serves on `listener` until `shutdown` completes, then drains (see the module docs) and
    /// shuts the runtime down.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let shared = self.shared.clone();
        // Turns accepted before a restart whose engine was down reach it now (the outbox).
        let recovering = shared.clone();
        tokio::spawn(async move {
            recovering.runtime.deliver_pending_commits().await;
        });
        let app = crate::router::router(shared.clone());
        let stop = CancellationToken::new();
        let trigger = stop.clone();
        tokio::spawn(async move {
            shutdown.await;
            trigger.cancel();
        });
        let on_stop = shared.clone();
        let graceful = stop.clone();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            graceful.cancelled().await;
            on_stop.stopping.store(true, Ordering::SeqCst);
            tracing::info!("shutting down: no new connections; waiting for in-flight requests");
        });
        let server = std::future::IntoFuture::into_future(server);
        tokio::pin!(server);
        let deadline = shared.config.shutdown_timeout;
        let result = tokio::select! {
            r = &mut server => r,
            () = async { stop.cancelled().await; tokio::time::sleep(deadline).await } => {
                tracing::warn!(
                    "in-flight requests did not finish within gateway.shutdownTimeoutMs ({} ms); aborting their turns",
                    deadline.as_millis()
                );
                shared.abort_all.cancel();
                match tokio::time::timeout(ABORT_GRACE, &mut server).await {
                    Ok(r) => r,
                    Err(_) => Ok(()),
                }
            }
        };
        shared.tasks.close();
        if tokio::time::timeout(ABORT_GRACE, shared.tasks.wait())
            .await
            .is_err()
        {
            shared.abort_all.cancel();
            tracing::warn!("turns still running after the shutdown grace period; they are aborted");
            let _ = tokio::time::timeout(ABORT_GRACE, shared.tasks.wait()).await;
        }
        shared.runtime.shutdown().await;
        // The last turns' traces are in the file before the process exits.
        let _ = tokio::time::timeout(ABORT_GRACE, shared.tracer.flush()).await;
        tracing::info!("gateway stopped");
        result.map_err(GatewayError::Serve)
    }
}
