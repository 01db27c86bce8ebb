//! A replica's life behind a load balancer: `/health` (alive), `/health/ready` (serving, not
//! draining), drain on SIGTERM or `POST /admin/drain` (new requests 503 + `Retry-After`, running
//! streams finish), the `X-Ferrox-Instance` header on every response, and HAProxy's
//! `agent-check` protocol (HAProxy configuration manual, "agent-check": a line of words such
//! as `ready`, `drain`, `75%`).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::error::check_auth;
use super::{ApiError, AppState, Shared};

pub(super) async fn ready(State(s): State<Shared>) -> Response {
    if s.draining.load(Ordering::SeqCst) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        )
            .into_response()
    } else {
        Json(json!({"status": "ready"})).into_response()
    }
}

pub(super) async fn drain(State(s): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(e) = check_auth(&s, &headers) {
        return e.into_response();
    }
    s.start_drain();
    (StatusCode::ACCEPTED, Json(json!({"status": "draining"}))).into_response()
}

/// Every response names the replica; while draining, new work is refused so the balancer
/// sends it elsewhere (HAProxy's `retry-on 503`), while reads (`GET`) still answer.
pub(super) async fn middleware(State(s): State<Shared>, req: Request, next: Next) -> Response {
    if let Err(e) = super::error::check_host(&s, req.headers()) {
        return e.into_response();
    }
    let draining = s.draining.load(Ordering::SeqCst);
    drain_guard(draining, &s.options.instance_id, req, next).await
}

/// The rest of the lifecycle middleware, shared with the multi-model front: while draining, a
/// new `POST` (other than the drain itself) is a 503 with `Retry-After`; every response names
/// the replica.
pub(super) async fn drain_guard(
    draining: bool,
    instance_id: &str,
    req: Request,
    next: Next,
) -> Response {
    let refuse = draining && req.method() == Method::POST && req.uri().path() != "/admin/drain";
    let mut r = if refuse {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica is draining; retry on another",
        );
        e.retry_after = Some(1);
        e.into_response()
    } else {
        next.run(req).await
    };
    if let Ok(v) = HeaderValue::from_str(instance_id) {
        r.headers_mut().insert("x-ferrox-instance", v);
    }
    r
}

impl AppState {
    /// Turns readiness off and refuses new requests; [`drained`](Self::drained) then waits
    /// for the running ones.
    pub fn start_drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.drain_requested.notify_one();
    }

    /// Waits until no request runs or waits, or `timeout` passes.
    pub async fn drained(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let m = &self.scheduler.metrics;
        while Instant::now() < deadline
            && (m.busy_slots.load(Ordering::SeqCst) > 0 || m.queue_depth.load(Ordering::SeqCst) > 0)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The agent-check reply: `drain` while draining, else `ready up` and a weight by load.
    /// A weight change moves some consistent-hash keys (conversations lose their cache), so
    /// it stays at 100% until a quarter of the queue is waiting, then falls to 50% when full.
    pub fn agent_reply(&self) -> String {
        if self.draining.load(Ordering::SeqCst) {
            return "drain\n".into();
        }
        format!("ready up {}%\n", self.agent_weight())
    }

    /// The agent-check weight by this model's queue.
    pub(super) fn agent_weight(&self) -> usize {
        let queued = self.scheduler.metrics.queue_depth.load(Ordering::SeqCst);
        let room = self.scheduler.queue.max(1);
        let over = queued.saturating_sub(room / 4).min(room);
        100 - 50 * over / (room - room / 4).max(1)
    }
}

/// Answers HAProxy's agent checks on `listener`: each connection gets one status line.
pub(super) async fn agent(
    listener: tokio::net::TcpListener,
    reply: impl Fn() -> String + Send + 'static,
) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            continue;
        };
        let line = reply();
        tokio::spawn(async move {
            let _ = conn.write_all(line.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}
