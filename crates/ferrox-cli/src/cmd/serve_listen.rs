//! Serving on the address the flags give until a stop signal or a drain, for one backend
//! (`serve`, `serve_encoder`) or the several-model front (`serve_multi`): the runtime, the
//! bound listener and the server's settings are made here once for all of them.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use ferrox_server::Backend;
use tokio::net::TcpListener;

use super::serve_args::{server_options, Args};

/// Serves `backend` on the address of `args` until a stop signal or a drain.
pub(super) fn serve_backend(
    args: Args,
    backend: Arc<dyn Backend>,
    id: &str,
    ctx: usize,
) -> anyhow::Result<()> {
    let (parallel, queue) = (args.parallel, args.queue);
    listen(&args, |listener, bound, options| async move {
        eprintln!(
            "serving {id} on http://{bound} ({parallel} slots, ctx {ctx}{}{})",
            if options.api_key.is_some() {
                ", API key required"
            } else {
                ""
            },
            if options.webui {
                ", chat page at /"
            } else {
                ""
            }
        );
        ferrox_server::serve_until(listener, backend, parallel, queue, options, stop_signal())
            .await?;
        anyhow::Ok(())
    })
}

/// Binds the address of `args` and runs `serve` on the listener (with the address bound and
/// the server's settings from the flags) on a runtime of two workers, until it returns: the
/// server has drained.
pub(super) fn listen<F, Fut>(args: &Args, serve: F) -> anyhow::Result<()>
where
    F: FnOnce(TcpListener, SocketAddr, ferrox_server::Options) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = TcpListener::bind(&addr).await?;
        let bound = listener.local_addr()?;
        let options = server_options(args, bound);
        serve(listener, bound, options).await?;
        eprintln!("drained; exiting");
        anyhow::Ok(())
    })
}

/// Resolves on SIGTERM (an orchestrator stopping the replica) or SIGINT: the server drains.
pub(super) async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("draining: readiness off, new requests refused, running ones finish");
}
