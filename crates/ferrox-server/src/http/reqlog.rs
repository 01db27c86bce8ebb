//! The request log (`ferrox serve --log-requests`): one line per request on stderr once its
//! response has been sent — method, route, status, prompt / cached / generated tokens, time to
//! the first token and in all. The chat path's counters reach it through a task-local that
//! `submit::submit` hands to the engine with each job, so every route that generates is
//! logged alike. A refused request's line ends with the error's message, so a user debugging
//! an agent sees why without a proxy.

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
        error: None,
    };
    let r = STATS.scope(line.stats.clone(), next.run(req)).await;
    let (parts, inner) = r.into_parts();
    line.status = parts.status.as_u16();
    let inner = if parts.status.is_client_error() || parts.status.is_server_error() {
        // Error bodies are small JSON: read whole, the message kept, the bytes sent on.
        let bytes = axum::body::to_bytes(inner, ERROR_BODY_MAX)
            .await
            .unwrap_or_default();
        line.error = Some(error_message(&bytes));
        Body::from(bytes)
    } else {
        inner
    };
    // Streams are logged when they end, with what they generated.
    Response::from_parts(parts, Body::new(Logged { inner, _line: line }))
}

/// Largest error body the log reads (ours are a few hundred bytes).
const ERROR_BODY_MAX: usize = 1 << 16;

/// The message of an error body (OpenAI, Anthropic and Ollama shapes), else its text.
fn error_message(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let msg = ["/error/message", "/error", "/message"]
        .iter()
        .find_map(|p| v.pointer(p).and_then(|m| m.as_str()).map(str::to_string));
    let text = msg.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    // One line, bounded.
    text.replace('\n', " ").chars().take(300).collect()
}

/// One log line, written when dropped (the response body is done or abandoned).
struct Line {
    start: Instant,
    method: String,
    route: String,
    status: u16,
    stats: Arc<RequestStats>,
    /// A refused request's error message.
    error: Option<String>,
}

impl Line {
    fn text(&self) -> String {
        let st = &self.stats;
        let ttft = st.first_text.get().map_or("-".into(), |t| {
            format!("{:.3}s", (*t - self.start).as_secs_f64())
        });
        let error = self
            .error
            .as_ref()
            .map_or(String::new(), |e| format!(" error={e:?}"));
        format!(
            "{} {} {} prompt={} cached={} generated={} ttft={ttft} total={:.3}s{error}",
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

#[cfg(test)]
mod tests {
    use super::error_message;

    #[test]
    fn error_lines_name_the_message() {
        let anthropic = br#"{"type":"error","error":{"type":"invalid_request_error","message":"unsupported parameter `x`"}}"#;
        assert_eq!(error_message(anthropic), "unsupported parameter `x`");
        assert_eq!(
            error_message(br#"{"error":"model \"y\" not found"}"#),
            "model \"y\" not found"
        );
        assert_eq!(error_message(b"plain\ntext"), "plain text");
        assert_eq!(error_message(&[b'a'; 1000]).len(), 300);
    }
}
