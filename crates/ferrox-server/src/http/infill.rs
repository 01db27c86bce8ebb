//! Fill-in-the-middle: llama-server's `POST /infill` (llama.cpp `tools/server/README.md`:
//! `input_prefix`, `input_suffix`, `input_extra`, `prompt`, `n_predict`, the `/completion`
//! response and its SSE stream), and the prompt the `suffix` of `/v1/completions` and Ollama's
//! `/api/generate` share with it. The layout itself is the tokenizer's (`ferrox_tokenizer::fim`);
//! generation is the one completion path.

use std::time::Duration;

use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrox_tokenizer::fim::{FimChunk, FimInput};
use ferrox_tokenizer::TokenId;
use futures_util::stream;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::answer::{collect, Piece, Pieces};
use super::endpoint::Kind;
use super::error::Authed;
use super::params::validate;
use super::submit::{compile_grammar, finish, submit_one};
use super::{ApiError, Shared};
use crate::api::CommonParams;
use crate::backend::{BackendError, FinishReason, GenSummary, TokenLogprob};

/// One `input_extra` entry: another file of the project.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExtraChunk {
    #[serde(default)]
    filename: Option<String>,
    text: String,
}

#[derive(Debug, Deserialize)]
struct InfillBody {
    input_prefix: String,
    input_suffix: String,
    #[serde(default)]
    input_extra: Vec<ExtraChunk>,
    #[serde(default)]
    prompt: String,
    #[serde(flatten)]
    common: CommonParams,
}

/// What a fill-in-the-middle prompt is made of (owned: it is built off the async workers).
#[derive(Debug, Default)]
pub(super) struct Fim {
    pub prefix: String,
    pub suffix: String,
    pub extra: Vec<ExtraChunk>,
    pub prompt: String,
}

/// The prompt tokens of `fim` for a request with these settings; a model without FIM tokens
/// is a 400 naming what it lacks.
pub(super) async fn fim_prompt(
    s: &Shared,
    fim: Fim,
    c: &CommonParams,
    param: &'static str,
) -> Result<Vec<TokenId>, ApiError> {
    let max_tokens = c
        .max_completion_tokens
        .or(c.max_tokens)
        .filter(|&m| m > 0)
        .map(|m| m as usize);
    let r = super::off_workers(s, move |b| {
        let extra: Vec<FimChunk<'_>> = fim
            .extra
            .iter()
            .map(|e| FimChunk {
                filename: e.filename.as_deref(),
                text: &e.text,
            })
            .collect();
        let input = FimInput {
            prefix: &fim.prefix,
            suffix: &fim.suffix,
            extra: &extra,
            prompt: &fim.prompt,
        };
        b.fim_prompt(&input, max_tokens)
    })
    .await?;
    r.map_err(|e| match e {
        BackendError::Unsupported(m) | BackendError::Template(m) | BackendError::BadTokens(m) => {
            ApiError::bad(m).param(param).code("fim_not_supported")
        }
    })
}

/// llama-server's field names on the way in: `n_predict` (-1: no limit) is `max_tokens`,
/// `n_probs` (0: none) the completions' `logprobs` count; a request without `model` asks for
/// the served one.
fn llama_server_fields(s: &Shared, mut body: Map<String, Value>) -> Result<Value, ApiError> {
    if let Some(n) = body.remove("n_probs") {
        if body.contains_key("logprobs") {
            return Err(ApiError::bad("give n_probs or logprobs, not both").param("n_probs"));
        }
        if n.as_i64() != Some(0) {
            body.insert("logprobs".into(), n);
        }
    }
    if let Some(n) = body.remove("n_predict") {
        if body.contains_key("max_tokens") {
            return Err(ApiError::bad("give n_predict or max_tokens, not both").param("n_predict"));
        }
        if n.as_i64() != Some(-1) {
            body.insert("max_tokens".into(), n);
        }
    }
    body.entry("model")
        .or_insert_with(|| json!(s.backend.model_id()));
    Ok(Value::Object(body))
}

pub(super) async fn infill(Authed { s, body }: Authed<Map<String, Value>>) -> Response {
    let r = async {
        let raw = body?;
        let b: InfillBody = serde_json::from_value(llama_server_fields(&s, raw)?)
            .map_err(|e| ApiError::bad(format!("invalid /infill request: {e}")))?;
        let fim = Fim {
            prefix: b.input_prefix,
            suffix: b.input_suffix,
            extra: b.input_extra,
            prompt: b.prompt,
        };
        let prompt = fim_prompt(&s, fim, &b.common, "input_prefix").await?;
        let mut params = validate(&s, Kind::Completion, &b.common, prompt.len())?;
        compile_grammar(&s, &b.common, &mut params).await?;
        let stops = params.stop.clone();
        let prompt_tokens = prompt.len();
        let rx = submit_one(&s, prompt, &params)?;
        let out = Out {
            model: b.common.model.clone(),
            prompt_tokens,
            stops,
            probs: params.logprobs.is_some(),
        };
        let pieces = match params.logprobs {
            Some(_) => Pieces::new(rx, None).keep_logprobs(),
            None => Pieces::new(rx, None),
        };
        if b.common.stream {
            Ok(sse(out, pieces))
        } else {
            whole(out, pieces).await
        }
    }
    .await;
    finish(&s, r)
}

/// What every object of one answer repeats.
struct Out {
    model: String,
    prompt_tokens: usize,
    stops: Vec<String>,
    /// `n_probs` asked for `completion_probabilities`.
    probs: bool,
}

impl Out {
    fn partial(&self, content: &str) -> Value {
        json!({
            "index": 0,
            "content": content,
            "tokens": [],
            "id_slot": 0,
            "stop": false,
            "tokens_evaluated": self.prompt_tokens,
        })
    }

    /// The final object: llama-server's stop fields and counters.
    fn last(&self, content: &str, summary: &GenSummary, times: (Duration, Duration)) -> Value {
        let (prompt, eval) = times;
        let word = summary.stop_string.and_then(|i| self.stops.get(i));
        let stop_type = match (summary.finish, word) {
            (FinishReason::Length, _) => "limit",
            (_, Some(_)) => "word",
            _ => "eos",
        };
        let n = summary.completion_tokens;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut v = self.partial(content);
        v["stop"] = json!(true);
        v["model"] = json!(self.model);
        v["tokens_predicted"] = json!(n);
        v["has_new_line"] = json!(content.contains('\n'));
        v["truncated"] = json!(false);
        v["stop_type"] = json!(stop_type);
        v["stopping_word"] = json!(word.map_or("", String::as_str));
        v["tokens_cached"] = json!(summary.cached_tokens);
        v["timings"] = json!({
            "prompt_n": self.prompt_tokens - summary.cached_tokens.min(self.prompt_tokens),
            "prompt_ms": ms(prompt),
            "predicted_n": n,
            "predicted_ms": ms(eval),
        });
        v
    }
}

/// llama-server's `completion_probabilities` entries (`n_probs`): each generated token with its
/// log-probability and its `top_logprobs` alternatives.
fn probabilities(lps: &[TokenLogprob]) -> Value {
    let entry = |t: &str, b: &[u8], lp: f32| json!({"token": t, "bytes": b, "logprob": lp});
    lps.iter()
        .map(|l| {
            let mut e = entry(&l.token, &l.bytes, l.logprob);
            e["top_logprobs"] = l.top.iter().map(|(t, b, lp)| entry(t, b, *lp)).collect();
            e
        })
        .collect()
}

/// Adds the kept log-probabilities to `v` when the request asked for them.
fn with_probabilities(mut v: Value, pieces: &mut Pieces, asked: bool) -> Value {
    if asked {
        v["completion_probabilities"] = probabilities(&pieces.take_logprobs());
    }
    v
}

async fn whole(out: Out, mut pieces: Pieces) -> Result<Response, ApiError> {
    let a = collect(&mut pieces).await?;
    let v = out.last(&a.content, &a.summary, pieces.durations());
    let v = with_probabilities(v, &mut pieces, out.probs);
    Ok(Json(v).into_response())
}

/// The streamed form: `data: {...}` per piece of text, the last with `stop: true` and the
/// counters (llama-server sends no `[DONE]` on its own routes); an engine failure is an
/// `{"error": …}` event.
fn sse(out: Out, pieces: Pieces) -> Response {
    let events = stream::unfold(Some((pieces, out)), |st| async move {
        let (mut pieces, out) = st?;
        let (v, next) = match pieces.next().await? {
            Piece::Done(summary) => {
                let v = out.last("", &summary, pieces.durations());
                (with_probabilities(v, &mut pieces, out.probs), None)
            }
            Piece::Failed(msg) => (json!({"error": {"code": 500, "message": msg}}), None),
            Piece::Content(t) | Piece::Reasoning(t) => {
                let v = with_probabilities(out.partial(&t), &mut pieces, out.probs);
                (v, Some((pieces, out)))
            }
            Piece::Call(_) => (out.partial(""), Some((pieces, out))),
        };
        let ev = SseEvent::default().data(v.to_string());
        Some((Ok::<_, std::convert::Infallible>(ev), next))
    });
    Sse::new(events).into_response()
}
