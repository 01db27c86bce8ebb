//! `/metrics` in the Prometheus text format.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::error::check_auth;
use super::{ApiError, Shared};
use crate::backend::DraftCount;

/// Name, type and help of each metric, in the order of the values in [`metrics`].
const METRICS: [(&str, &str, &str); 18] = [
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
    (
        "kv_cache_usage_ratio",
        "gauge",
        "Slot KV-cache positions in use over slots times context.",
    ),
    (
        "kv_cache_bytes",
        "gauge",
        "Bytes the slots' KV caches hold.",
    ),
    (
        "prefix_cache_query_tokens_total",
        "counter",
        "Prompt tokens admitted (looked up in the caches).",
    ),
    (
        "prefix_cache_hit_tokens_total",
        "counter",
        "Prompt tokens whose keys and values came from a cache.",
    ),
    (
        "prefix_cache_bytes",
        "gauge",
        "Bytes of finished requests' keys and values kept for prefix reuse.",
    ),
];

/// KV-cache positions in use over capacity.
fn kv_usage(s: &Shared) -> f64 {
    let m = &s.scheduler.metrics;
    let cap = m.kv_capacity.load(Ordering::Relaxed);
    if cap == 0 {
        return 0.0;
    }
    m.kv_positions.load(Ordering::Relaxed) as f64 / cap as f64
}

/// The model-server protocol of the Kubernetes Gateway API Inference Extension (its
/// recommended vLLM names): queued and running requests, KV-cache utilisation, prefix-cache
/// queries and hits in tokens.
fn gateway_metrics(s: &Shared, out: &mut String) {
    let m = &s.scheduler.metrics;
    let waiting = m.queue_depth.load(Ordering::SeqCst).to_string();
    let running = m.busy_slots.load(Ordering::SeqCst).to_string();
    let queries = m.prefix_queries.load(Ordering::Relaxed).to_string();
    let hits = m.prefix_hits.load(Ordering::Relaxed).to_string();
    let usage = format!("{:.4}", kv_usage(s));
    let rows = [
        ("vllm:num_requests_waiting", "gauge", waiting),
        ("vllm:num_requests_running", "gauge", running),
        ("vllm:kv_cache_usage_perc", "gauge", usage.clone()),
        ("vllm:gpu_cache_usage_perc", "gauge", usage),
        ("vllm:prefix_cache_queries_total", "counter", queries),
        ("vllm:prefix_cache_hits_total", "counter", hits),
    ];
    for (name, kind, v) in rows {
        out.push_str(&format!("# TYPE {name} {kind}\n{name} {v}\n"));
    }
}

pub(super) async fn metrics(
    State(s): State<Shared>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check_auth(&s, &headers)?;
    let out = render(&s);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response())
}

/// The Prometheus text of one model's counters.
pub(super) fn render(s: &Shared) -> String {
    let m = &s.scheduler.metrics;
    let tokens = m.decode_tokens.load(Ordering::Relaxed);
    let nanos = m.decode_nanos.load(Ordering::Relaxed);
    let tps = if nanos > 0 {
        tokens as f64 / (nanos as f64 / 1e9)
    } else {
        0.0
    };
    let ld = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
    let (drafted, accepted) = m.draft_totals();
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
        format!("{:.4}", kv_usage(s)),
        m.kv_bytes.load(Ordering::Relaxed).to_string(),
        ld(&m.prefix_queries),
        ld(&m.prefix_hits),
        m.prefix_bytes.load(Ordering::Relaxed).to_string(),
    ];
    let mut out = String::new();
    for ((name, kind, help), v) in METRICS.iter().zip(values) {
        out.push_str(&format!(
            "# HELP ferrox_{name} {help}\n# TYPE ferrox_{name} {kind}\nferrox_{name} {v}\n"
        ));
    }
    drafter_metrics(&m.drafters, &mut out);
    gateway_metrics(s, &mut out);
    out
}

/// Draft tokens proposed and accepted per drafter (label `drafter`): which of the drafters
/// (MTP block, recall, lookup) pays on this server's traffic.
fn drafter_metrics(drafters: &Mutex<Vec<DraftCount>>, out: &mut String) {
    let drafters = drafters.lock().unwrap_or_else(|e| e.into_inner());
    let rows = [
        (
            "draft_tokens_total",
            "Draft tokens proposed, per drafter.",
            false,
        ),
        (
            "draft_accepted_tokens_total",
            "Draft tokens accepted, per drafter.",
            true,
        ),
    ];
    for (name, help, accepted) in rows {
        out.push_str(&format!(
            "# HELP ferrox_{name} {help}\n# TYPE ferrox_{name} counter\n"
        ));
        for d in drafters.iter() {
            let v = if accepted { d.accepted } else { d.drafted };
            out.push_str(&format!("ferrox_{name}{{drafter=\"{}\"}} {v}\n", d.drafter));
        }
    }
}
