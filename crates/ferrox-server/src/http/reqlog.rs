//! The request log (`ferrox serve --log-requests`): one line per request on stderr once its
//! response has been sent — method, route, status, prompt / cached / generated tokens, time to
//! the first token and in all. The chat path's counters reach it through a task-local that
//! `submit::submit` hands to the engine with each job, so every route that generates is
//! logged alike.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

use super::Shared;
use crate::backend::RequestStats;

/// nginx's status for "the client closed the request before the answer".
const CLIENT_CLOSED: u16 = 499;

tokio::task_local! {
    static STATS: Arc<RequestStats>;
}

/// The running request's counters, when the log is on.
pub(super) fn current() -> Option<Arc<RequestStats>> {
    STATS.try_with(Arc::clone).ok()
}

pub(super) async fn middleware(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if !s.options.log_requests {
        return next.run(req).await;
    }
    let mut line = Line {
        start: Instant::now(),
        method: req.method().to_string(),
        route: req.uri().path().to_string(),
        // Until the handler answers: a client that leaves before is logged as nginx does.
        status: CLIENT_CLOSED,
        stats: Arc::default(),
    };
    let r = STATS.scope(line.stats.clone(), next.run(req)).await;
    let (parts, inner) = r.into_parts();
    line.status = parts.status.as_u16();
    // Streams are logged when they end, with what they generated.
    Response::from_parts(parts, Body::new(Logged { inner, _line: line }))
}

/// One log line, written when dropped (the response body is done or abandoned).
struct Line {
    start: Instant,
    method: String,
    route: String,
    status: u16,
    stats: Arc<RequestStats>,
}

impl Line {
    fn text(&self) -> String {
        let st = &self.stats;
        let ttft = st.first_text.get().map_or("-".into(), |t| {
            format!("{:.3}s", (*t - self.start).as_secs_f64())
        });
        format!(
            "{} {} {} prompt={} cached={} generated={} ttft={ttft} total={:.3}s",
            self.method,
            self.route,
            self.status,
            st.prompt_tokens.load(Ordering::Relaxed),
            st.cached_tokens.load(Ordering::Relaxed),
            st.generated_tokens.load(Ordering::Relaxed),
            self.start.elapsed().as_secs_f64()
        )
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        eprintln!("{}", self.text());
    }
}

/// A response body that writes its log line when it is dropped.
struct Logged {
    inner: Body,
    _line: Line,
}

impl HttpBody for Logged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
