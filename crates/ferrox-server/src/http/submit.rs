//! A checked generation request handed to the scheduler, for every route that generates
//! (OpenAI's, Ollama's, Anthropic's, Responses, infill): its grammar compiled off the async
//! workers, its choices queued and counted, and a failed request counted on the way out.

use std::sync::atomic::Ordering;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ferrox_tokenizer::TokenId;
use tokio::sync::mpsc::UnboundedReceiver;

use super::params::grammar;
use super::{ApiError, AppState, Shared};
use crate::api::CommonParams;
use crate::backend::{Event, GenParams, Job, SubmitError};

/// Compiles the request's grammar on a blocking thread (a large schema takes a while and must
/// not hold up an async worker); a grammar the backend refuses is a 400 naming the parameter
/// it came from, with the compiler's message.
pub(super) async fn compile_grammar(
    s: &Shared,
    c: &CommonParams,
    params: &mut GenParams,
) -> Result<(), ApiError> {
    let Some(spec) = params.grammar.clone() else {
        return Ok(());
    };
    let param = grammar(c)?.map_or("tool_choice", |(_, p)| p);
    let backend = s.backend.clone();
    let compiled = tokio::task::spawn_blocking(move || backend.compile_grammar(&spec))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the grammar compiler failed",
            )
        })?
        .map_err(|e| ApiError::bad(e).param(param))?;
    params.compiled = Some(compiled);
    Ok(())
}

/// The route's response, or its error (counted in the metrics) as one.
pub(super) fn finish(s: &AppState, r: Result<Response, ApiError>) -> Response {
    match r {
        Ok(r) => r,
        Err(e) => {
            s.scheduler.metrics.errors.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

/// Queues `n` generations of `prompt` (the request's choices) and counts the request.
/// `n` choices are `n` generations of the same prompt; the engine shares the prompt's keys
/// and values between them. Seeds differ per choice (a given seed still reproduces).
pub(super) fn submit(
    s: &AppState,
    prompt: Vec<TokenId>,
    params: &GenParams,
    n: usize,
) -> Result<Vec<UnboundedReceiver<Event>>, ApiError> {
    let prompt_tokens = prompt.len();
    let stats = super::reqlog::current();
    if let Some(st) = &stats {
        st.prompt_tokens.fetch_add(prompt_tokens, Ordering::Relaxed);
    }
    let mut rxs = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut params = params.clone();
        params.sampler.seed = params.sampler.seed.wrapping_add(i as u64);
        // A refusal drops the receivers already made: their jobs are cancelled unrun.
        s.scheduler
            .submit(Job {
                prompt: prompt.clone(),
                params,
                events: tx,
                stats: stats.clone(),
            })
            .map_err(|SubmitError::QueueFull| {
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is busy; retry shortly",
                );
                e.retry_after = Some(1);
                e
            })?;
        rxs.push(rx);
    }
    let m = &s.scheduler.metrics;
    m.requests.fetch_add(1, Ordering::Relaxed);
    m.prompt_tokens
        .fetch_add(prompt_tokens as u64, Ordering::Relaxed);
    Ok(rxs)
}

/// The one generation of a route without choices (`n`): its events.
pub(super) fn submit_one(
    s: &AppState,
    prompt: Vec<TokenId>,
    params: &GenParams,
) -> Result<UnboundedReceiver<Event>, ApiError> {
    submit(s, prompt, params, 1)?
        .pop()
        .ok_or_else(|| ApiError::failed("no generation"))
}
