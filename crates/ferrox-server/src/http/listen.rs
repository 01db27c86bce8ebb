//! The accept loop, with the limits a server facing untrusted clients needs (hyper's
//! connection builder rather than `axum::serve`, which has no knobs): a cap on open
//! connections (beyond it new ones wait in the listen backlog), a deadline for each request's
//! headers — which also closes keep-alive connections that sit idle — and a deadline and a
//! size limit for the whole request body. Shutdown is graceful: open
//! connections finish their current request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connection and request limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, and to start the next request on a
    /// kept-alive connection.
    pub header_timeout: Duration,
    /// Time the whole request body has to arrive (a slow sender is cut off).
    pub body_timeout: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_body_bytes: 16 << 20,
        }
    }
}

/// The request-side limits as a router layer: the whole body must arrive within
/// `body_timeout` (a deadline per chunk would let a client trickle a byte a second forever)
/// and fit `max_body_bytes` (413).
pub(super) fn layers(router: Router, limits: &Limits) -> Router {
    let (deadline, max) = (limits.body_timeout, limits.max_body_bytes);
    router
        .layer(axum::extract::DefaultBodyLimit::max(max))
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| async move {
                let (parts, body) = req.into_parts();
                let too_large = || {
                    super::ApiError::new(
                        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                        format!("the request body is larger than {max} bytes"),
                    )
                    .into_response()
                };
                // A body declared too large is refused before any of it is read: reading up
                // to the limit first costs the limit in memory (and its copy) for nothing.
                let declared = parts.headers.get(axum::http::header::CONTENT_LENGTH);
                if declared
                    .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                    .is_some_and(|n| n > max as u64)
                {
                    return too_large();
                }
                let bytes =
                    match tokio::time::timeout(deadline, axum::body::to_bytes(body, max)).await {
                        Ok(Ok(b)) => b,
                        Ok(Err(_)) => return too_large(),
                        Err(_) => {
                            return super::ApiError::new(
                                axum::http::StatusCode::REQUEST_TIMEOUT,
                                "the request body did not arrive in time",
                            )
                            .into_response()
                        }
                    };
                let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
                next.run(req).await
            },
        ))
}

/// Serves `app` on `listener` within `limits` until `shutdown` resolves; then stops
/// accepting and gives open connections `grace` to finish.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.map_err(std::io::Error::other)?,
            _ = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                // Out of descriptors and the like: back off instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let (builder, watcher) = (builder.clone(), graceful.watcher());
        let first_byte = limits.header_timeout;
        tokio::spawn(async move {
            // hyper's header deadline starts with the first byte; a connection that never
            // sends one is closed here.
            let mut b = [0u8; 1];
            if !matches!(tokio::time::timeout(first_byte, stream.peek(&mut b)).await, Ok(Ok(n)) if n > 0)
            {
                return;
            }
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
            let _ = watcher.watch(conn.into_owned()).await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
    Ok(())
}
