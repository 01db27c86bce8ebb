//! The sampling and length fields shared by chat and completion requests, checked.

use axum::http::StatusCode;

use serde_json::Value;

use super::endpoint::Kind;
use super::{ApiError, AppState};
use crate::api::CommonParams;
use crate::backend::{Backend, GenParams, GrammarSpec, SamplerConfig};

/// Most choices (`n`) one request may ask for.
const MAX_CHOICES: i64 = 8;

/// Fields that change nothing ferrox computes (bookkeeping for the client's side, or settings
/// ferrox always has), accepted and ignored.
const HARMLESS: &[&str] = &[
    "user",
    "store",
    "metadata",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
    "cache_prompt",
];

/// Checks the shared fields; returns the generation settings (the sampler's fields the request
/// leaves out are `SamplerConfig::default()`'s).
pub(super) fn validate(
    s: &AppState,
    kind: Kind,
    c: &CommonParams,
    prompt_len: usize,
) -> Result<GenParams, ApiError> {
    check_request(s, c)?;
    let b = &s.backend;
    let ctx = b.ctx_size();
    let max_tokens = max_tokens(c, ctx, prompt_len)?;
    let d = SamplerConfig::default();
    let temperature = c.temperature.unwrap_or(d.temperature);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(
            ApiError::bad(format!("temperature must be in [0, 2], got {temperature}"))
                .param("temperature"),
        );
    }
    let top_p = c.top_p.unwrap_or(d.top_p);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad(format!("top_p must be in (0, 1], got {top_p}")).param("top_p"));
    }
    let min_p = c.min_p.unwrap_or(d.min_p);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::bad(format!("min_p must be in [0, 1], got {min_p}")).param("min_p"));
    }
    let top_k = c.top_k.unwrap_or(d.top_k as i64);
    if top_k < 0 {
        return Err(ApiError::bad(format!("top_k must be >= 0, got {top_k}")).param("top_k"));
    }
    let stop = c.stop.clone().into_vec();
    if stop.len() > 4 || stop.iter().any(String::is_empty) {
        return Err(ApiError::bad("stop takes up to 4 non-empty strings").param("stop"));
    }
    let (repeat_penalty, penalty_last_n) = repetition(c, ctx, &d)?;
    let sampler = SamplerConfig {
        temperature,
        top_p,
        top_k: top_k as usize,
        min_p,
        presence_penalty: penalty(c.presence_penalty, d.presence_penalty, "presence_penalty")?,
        frequency_penalty: penalty(
            c.frequency_penalty,
            d.frequency_penalty,
            "frequency_penalty",
        )?,
        repeat_penalty,
        penalty_last_n,
        // No seed: a fresh one, so regenerating gives another answer (a given seed reproduces).
        seed: c.seed.map_or_else(fresh_seed, |v| v as u64),
        logit_bias: logit_bias(c, b.vocab_size())?,
    };
    Ok(GenParams {
        max_tokens,
        stop,
        sampler,
        logprobs: logprobs(kind, c)?,
        tokens_as_ids: c.return_tokens_as_token_ids.unwrap_or(false),
        keep_special: false,
        grammar: grammar(c)?.map(|(g, _)| g),
        compiled: None,
    })
}

/// Fields the request may not have, the model it names, the number of choices.
fn check_request(s: &AppState, c: &CommonParams) -> Result<(), ApiError> {
    if let Some(name) = c.extra.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return Err(ApiError::bad(format!(
            "unsupported parameter `{name}`: ferrox does not implement it, and ignoring it would change the answer"
        ))
        .param(name.clone())
        .code("unsupported_parameter"));
    }
    check_model(s.backend.as_ref(), &c.model)?;
    match c.n {
        Some(n) if !(1..=MAX_CHOICES).contains(&n) => Err(ApiError::bad(format!(
            "n = {n}: choices per request run from 1 to {MAX_CHOICES}"
        ))
        .param("n")),
        _ => Ok(()),
    }
}

/// The model a request names: this server's or one of its aliases, else a 404 naming it.
pub(super) fn check_model(b: &dyn Backend, model: &str) -> Result<(), ApiError> {
    if model == b.model_id() || b.aliases().iter().any(|a| a == model) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "The model `{model}` does not exist; this server serves `{}`",
            b.model_id()
        ),
    )
    .param("model")
    .code("model_not_found"))
}

/// The token budget: what the request asks for, checked against the context the prompt leaves.
fn max_tokens(c: &CommonParams, ctx: usize, prompt_len: usize) -> Result<usize, ApiError> {
    if prompt_len == 0 {
        return Err(ApiError::bad("the prompt is empty").param("messages"));
    }
    if prompt_len >= ctx {
        return Err(ApiError::bad(format!(
            "This model's maximum context length is {ctx} tokens; the prompt has {prompt_len} tokens"
        ))
        .code("context_length_exceeded"));
    }
    let room = ctx - prompt_len;
    match c.max_completion_tokens.or(c.max_tokens) {
        None => Ok(room),
        Some(m) if m < 1 => {
            Err(ApiError::bad(format!("max_tokens must be at least 1, got {m}")).param("max_tokens"))
        }
        Some(m) if m as u64 > room as u64 => Err(ApiError::bad(format!(
            "max_tokens = {m} does not fit: the context holds {ctx} tokens and the prompt uses {prompt_len}"
        ))
        .param("max_tokens")
        .code("context_length_exceeded")),
        Some(m) => Ok(m as usize),
    }
}

/// OpenAI's presence / frequency penalty, in [-2, 2] (`default` when absent).
fn penalty(v: Option<f32>, default: f32, name: &'static str) -> Result<f32, ApiError> {
    let v = v.unwrap_or(default);
    if (-2.0..=2.0).contains(&v) {
        Ok(v)
    } else {
        Err(ApiError::bad(format!("{name} must be in [-2, 2], got {v}")).param(name))
    }
}

/// llama-server's `repeat_penalty` and `repeat_last_n` (-1: the whole context).
fn repetition(c: &CommonParams, ctx: usize, d: &SamplerConfig) -> Result<(f32, usize), ApiError> {
    let repeat_penalty = c.repeat_penalty.unwrap_or(d.repeat_penalty);
    if !(repeat_penalty > 0.0 && repeat_penalty <= 10.0) {
        return Err(ApiError::bad(format!(
            "repeat_penalty must be in (0, 10], got {repeat_penalty}"
        ))
        .param("repeat_penalty"));
    }
    let last_n = match c.repeat_last_n {
        None => d.penalty_last_n,
        Some(-1) => ctx,
        // A window past the context covers the whole context (the history is no longer).
        Some(n) if n >= 0 => usize::try_from(n).map_or(ctx, |n| n.min(ctx)),
        Some(n) => {
            return Err(
                ApiError::bad(format!("repeat_last_n must be >= -1, got {n}"))
                    .param("repeat_last_n"),
            )
        }
    };
    Ok((repeat_penalty, last_n))
}

/// A random seed from the process's hasher keys (random per process, advanced per call).
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// `logit_bias`: token ids (as strings) inside the vocabulary, biases in [-100, 100].
fn logit_bias(c: &CommonParams, vocab: usize) -> Result<Vec<(usize, f32)>, ApiError> {
    let Some(map) = &c.logit_bias else {
        return Ok(Vec::new());
    };
    let bad = |msg: String| ApiError::bad(msg).param("logit_bias");
    if map.len() > 1024 {
        return Err(bad(format!("{} entries; at most 1024", map.len())));
    }
    map.iter()
        .map(|(k, v)| {
            let id: usize = k
                .parse()
                .map_err(|_| bad(format!("`{k}` is not a token id")))?;
            if id >= vocab {
                return Err(bad(format!(
                    "token id {id} is outside the vocabulary (size {vocab})"
                )));
            }
            match v.as_f64() {
                Some(b) if (-100.0..=100.0).contains(&b) => Ok((id, b as f32)),
                _ => Err(bad(format!(
                    "the bias of {id} must be a number in [-100, 100]"
                ))),
            }
        })
        .collect()
}

/// Alternatives per token to report, or `None` without log-probabilities. Chat: `logprobs:
/// true` with `top_logprobs` (0–20); completions: `logprobs` is the count itself (0–5 in
/// OpenAI's legacy API; up to 20 here).
fn logprobs(kind: Kind, c: &CommonParams) -> Result<Option<usize>, ApiError> {
    let top = |v: i64, name: &'static str| {
        if (0..=20).contains(&v) {
            Ok(v as usize)
        } else {
            Err(ApiError::bad(format!("{name} must be in [0, 20], got {v}")).param(name))
        }
    };
    match kind {
        Kind::Chat => {
            let on = match &c.logprobs {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(ApiError::bad("logprobs must be a boolean").param("logprobs"))
                }
            };
            match (on, c.top_logprobs) {
                (true, t) => Ok(Some(top(t.unwrap_or(0), "top_logprobs")?)),
                (false, Some(_)) => {
                    Err(ApiError::bad("top_logprobs needs logprobs: true").param("top_logprobs"))
                }
                (false, None) => Ok(None),
            }
        }
        Kind::Completion => match &c.logprobs {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) => Ok(Some(top(n, "logprobs")?)),
                None => Err(ApiError::bad("logprobs must be an integer").param("logprobs")),
            },
        },
    }
}

/// Largest grammar or schema text a request may carry (llguidance's own limits bound the
/// compile work; this bounds what is parsed before it).
const MAX_GRAMMAR_BYTES: usize = 1 << 20;

/// The grammar a request asks for through `response_format` (OpenAI structured outputs), or
/// llama-server's `grammar` (GBNF; llguidance Lark after a `%llguidance` line) and
/// `json_schema`, with the parameter it came from. At most one of them.
pub(super) fn grammar(c: &CommonParams) -> Result<Option<(GrammarSpec, &'static str)>, ApiError> {
    let mut found: Vec<(GrammarSpec, &'static str)> = Vec::new();
    if let Some(rf) = &c.response_format {
        let bad = |m: String| ApiError::bad(m).param("response_format");
        match rf.kind.as_str() {
            "text" => {}
            "json_object" => found.push((
                match &rf.schema {
                    Some(schema) => GrammarSpec::JsonSchema {
                        schema: schema_object(schema, "response_format")?,
                        strict: false,
                    },
                    None => GrammarSpec::JsonObject,
                },
                "response_format",
            )),
            "json_schema" => {
                let js = rf.json_schema.as_ref().ok_or_else(|| {
                    bad("response_format of type json_schema needs a json_schema object".into())
                })?;
                let schema = js
                    .schema
                    .as_ref()
                    .or(rf.schema.as_ref())
                    .ok_or_else(|| bad("response_format.json_schema needs a schema".into()))?;
                found.push((
                    GrammarSpec::JsonSchema {
                        schema: schema_object(schema, "response_format")?,
                        strict: js.strict.unwrap_or(false),
                    },
                    "response_format",
                ));
            }
            other => {
                return Err(bad(format!(
                    "unknown response_format type `{other}` (text, json_object or json_schema)"
                )))
            }
        }
    }
    if let Some(g) = &c.grammar {
        if g.len() > MAX_GRAMMAR_BYTES {
            return Err(ApiError::bad("grammar is too large").param("grammar"));
        }
        let spec = match g.trim_start().strip_prefix("%llguidance") {
            // llama.cpp's marker for llguidance's Lark; the line is Lark's own header.
            Some(_) => GrammarSpec::Lark(g.clone()),
            None => GrammarSpec::Gbnf(g.clone()),
        };
        if !g.trim().is_empty() {
            found.push((spec, "grammar"));
        }
    }
    if let Some(schema) = &c.json_schema {
        found.push((
            GrammarSpec::JsonSchema {
                schema: schema_object(schema, "json_schema")?,
                strict: false,
            },
            "json_schema",
        ));
    }
    if found.len() > 1 {
        return Err(ApiError::bad(
            "give at most one of response_format (json_object / json_schema), grammar and json_schema",
        )
        .param(found[1].1));
    }
    Ok(found.pop())
}

fn schema_object(schema: &Value, param: &'static str) -> Result<Value, ApiError> {
    if !schema.is_object() {
        return Err(ApiError::bad("a JSON schema must be an object").param(param));
    }
    if serde_json::to_string(schema).map_or(0, |s| s.len()) > MAX_GRAMMAR_BYTES {
        return Err(ApiError::bad("the JSON schema is too large").param(param));
    }
    Ok(schema.clone())
}
