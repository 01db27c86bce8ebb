//! The sampling and length fields shared by chat and completion requests, checked.

use axum::http::StatusCode;

use super::{ApiError, AppState};
use crate::api::CommonParams;
use crate::backend::{GenParams, GrammarSpec};
use serde_json::Value;

/// Checks the shared fields; returns the generation settings.
pub(super) fn validate(
    s: &AppState,
    c: &CommonParams,
    prompt_len: usize,
) -> Result<GenParams, ApiError> {
    let b = &s.backend;
    if c.model != b.model_id() && !b.aliases().iter().any(|a| a == &c.model) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "The model `{}` does not exist; this server serves `{}`",
                c.model,
                b.model_id()
            ),
        )
        .param("model")
        .code("model_not_found"));
    }
    if let Some(n) = c.n {
        if n != 1 {
            return Err(ApiError::bad(format!("n = {n} is not supported; only n = 1")).param("n"));
        }
    }
    let ctx = b.ctx_size();
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
    let max_tokens = match c.max_completion_tokens.or(c.max_tokens) {
        None => room,
        Some(m) if m < 1 => {
            return Err(ApiError::bad(format!("max_tokens must be at least 1, got {m}")).param("max_tokens"))
        }
        Some(m) if m as u64 > room as u64 => {
            return Err(ApiError::bad(format!(
                "max_tokens = {m} does not fit: the context holds {ctx} tokens and the prompt uses {prompt_len}"
            ))
            .param("max_tokens")
            .code("context_length_exceeded"))
        }
        Some(m) => m as usize,
    };
    let temperature = c.temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(
            ApiError::bad(format!("temperature must be in [0, 2], got {temperature}"))
                .param("temperature"),
        );
    }
    let top_p = c.top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::bad(format!("top_p must be in (0, 1], got {top_p}")).param("top_p"));
    }
    let min_p = c.min_p.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&min_p) {
        return Err(ApiError::bad(format!("min_p must be in [0, 1], got {min_p}")).param("min_p"));
    }
    let top_k = c.top_k.unwrap_or(0);
    if top_k < 0 {
        return Err(ApiError::bad(format!("top_k must be >= 0, got {top_k}")).param("top_k"));
    }
    let pen = |v: Option<f32>, name: &'static str| -> Result<f32, ApiError> {
        let v = v.unwrap_or(0.0);
        if (-2.0..=2.0).contains(&v) {
            Ok(v)
        } else {
            Err(ApiError::bad(format!("{name} must be in [-2, 2], got {v}")).param(name))
        }
    };
    let stop = c.stop.clone().into_vec();
    if stop.len() > 4 || stop.iter().any(String::is_empty) {
        return Err(ApiError::bad("stop takes up to 4 non-empty strings").param("stop"));
    }
    Ok(GenParams {
        max_tokens,
        stop,
        temperature,
        top_p,
        top_k: top_k as usize,
        min_p,
        presence_penalty: pen(c.presence_penalty, "presence_penalty")?,
        frequency_penalty: pen(c.frequency_penalty, "frequency_penalty")?,
        seed: c.seed.unwrap_or(0) as u64,
        grammar: grammar(c)?.map(|(g, _)| g),
        compiled: None,
    })
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
