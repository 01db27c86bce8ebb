//! ferrox-server: the OpenAI-compatible HTTP server.

pub mod api;
pub mod backend;
pub mod http;

use std::sync::Arc;

pub use backend::{Backend, Engine, GenParams, Scheduler};
pub use http::{router, AppState, Options};

/// Serves `backend` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn Backend>,
    parallel: usize,
    queue: usize,
    options: Options,
) -> std::io::Result<()> {
    let scheduler = Scheduler::start(backend.clone(), parallel, queue);
    let state = Arc::new(AppState::new(backend, scheduler, options));
    axum::serve(listener, router(state)).await
}
