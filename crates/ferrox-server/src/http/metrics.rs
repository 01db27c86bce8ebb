//! `/metrics` in the Prometheus text format.

use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::error::check_auth;
use super::{ApiError, Shared};

/// Name, type and help of each metric, in the order of the values in [`metrics`].
const METRICS: [(&str, &str, &str); 13] = [
    ("requests_total", "counter", "Completion requests accepted."),
    (
        "request_errors_total",
        "counter",
        "Requests answered with an error.",
    ),
    (
        "requests_rejected_total",
        "counter",
        "Requests refused because the queue was full.",
    ),
    (
        "requests_cancelled_total",
        "counter",
        "Generations stopped because the client went away.",
    ),
    ("prompt_tokens_total", "counter", "Prompt tokens received."),
    ("completion_tokens_total", "counter", "Tokens generated."),
    ("queue_depth", "gauge", "Requests waiting for a slot."),
    ("slots_busy", "gauge", "Slots generating."),
    ("slots_total", "gauge", "Slots."),
    (
        "decode_tokens_per_second",
        "gauge",
        "Generated tokens per second of engine time (all slots together).",
    ),
    (
        "speculative_acceptance_ratio",
        "gauge",
        "Accepted draft tokens over proposed draft tokens.",
    ),
    (
        "grammar_masks_total",
        "counter",
        "Allowed-token masks computed for constrained generations.",
    ),
    (
        "grammar_mask_seconds_total",
        "counter",
        "Engine time spent computing grammar masks.",
    ),
];

pub(super) async fn metrics(
    State(s): State<Shared>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check_auth(&s, &headers)?;
    let m = &s.scheduler.metrics;
    let tokens = m.decode_tokens.load(Ordering::Relaxed);
    let nanos = m.decode_nanos.load(Ordering::Relaxed);
    let tps = if nanos > 0 {
        tokens as f64 / (nanos as f64 / 1e9)
    } else {
        0.0
    };
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    let (drafted, accepted) = (
        m.draft_tokens.load(Ordering::Relaxed),
        m.accepted_tokens.load(Ordering::Relaxed),
    );
    let acceptance = if drafted > 0 {
        accepted as f64 / drafted as f64
    } else {
        0.0
    };
    let values = [
        ld(&m.requests),
        ld(&m.errors),
        ld(&m.rejected),
        ld(&m.cancelled),
        ld(&m.prompt_tokens),
        ld(&m.completion_tokens),
        m.queue_depth.load(Ordering::SeqCst).to_string(),
        m.busy_slots.load(Ordering::SeqCst).to_string(),
        s.scheduler.parallel.to_string(),
        format!("{tps:.3}"),
        format!("{acceptance:.4}"),
        ld(&m.grammar_masks),
        format!(
            "{:.6}",
            m.grammar_mask_nanos.load(Ordering::Relaxed) as f64 / 1e9
        ),
    ];
    let mut out = String::new();
    for ((name, kind, help), v) in METRICS.iter().zip(values) {
        out.push_str(&format!(
            "# HELP ferrox_{name} {help}\n# TYPE ferrox_{name} {kind}\nferrox_{name} {v}\n"
        ));
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}
