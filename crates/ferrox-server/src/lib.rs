//! ferrox-server: the HTTP server — OpenAI, Ollama and Anthropic routes over one engine.

pub mod api;
pub mod backend;
pub mod http;
pub mod library;
pub mod models;
pub mod slots;

use std::sync::Arc;

pub use backend::{Backend, GenParams, Scheduler, Stepper};
pub use http::{router, AppState, Front, LibraryHandle, Limits, Options};
pub use library::{Library, ModelCard, ModelEntry, PullStatus};
pub use models::{KeepAlive, Loader, ModelSpec, ModelsConfig, Registry};

/// Serves `backend` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn Backend>,
    parallel: usize,
    queue: usize,
    options: Options,
) -> std::io::Result<()> {
    serve_until(
        listener,
        backend,
        parallel,
        queue,
        options,
        std::future::pending(),
    )
    .await
}

/// [`serve`] until `stop` resolves (a signal) or `POST /admin/drain` arrives; then drains and
/// returns (see [`http::serve_until`]).
pub async fn serve_until(
    listener: tokio::net::TcpListener,
    backend: Arc<dyn Backend>,
    parallel: usize,
    queue: usize,
    options: Options,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let scheduler = Scheduler::start(backend.clone(), parallel, queue);
    let state = Arc::new(AppState::new(backend, scheduler, options));
    http::serve_until(listener, state, stop).await
}
