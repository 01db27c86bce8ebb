//! Ollama's generation routes, `/api/chat` and `/api/generate` (Ollama's docs/api.md):
//! requests are translated into the OpenAI chat request the rest of the server checks, and the
//! answer comes back as Ollama's NDJSON lines (streaming is Ollama's default) or one object.
//! `options` map onto the same sampler; an option that would change the answer and that
//! ferrox does not implement is refused, not ignored.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::stream;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::answer::{Piece, Pieces};
use super::endpoint::Kind;
use super::error::Authed;
use super::generate::{prepare_chat, Prepared};
use super::infill::{fim_prompt, Fim};
use super::params::validate;
use super::submit::{compile_grammar, submit_one};
use super::tools::OutputSetup;
use super::{ApiError, Shared};
use crate::api::{ChatRequest, CommonParams};
use crate::backend::{Event, FinishReason, GenSummary};
use ferrox_tokenizer::chat_output::ToolCall;

/// Options that only say how the model runs (hardware, memory, batching): they change no
/// answer, and ferrox's server settings decide them.
const RUNTIME_OPTIONS: &[&str] = &[
    "num_ctx",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "num_thread",
    "use_mmap",
    "use_mlock",
    "num_keep",
    "low_vram",
    "f16_kv",
    "vocab_only",
    "numa",
    "logits_all",
    "embedding_only",
    // Removed from Ollama's sampler in 0.5; clients still send it.
    "penalize_newline",
];

/// Sampler options with the same name and meaning as the OpenAI fields.
const SAMPLER_OPTIONS: &[&str] = &[
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "repeat_last_n",
    "stop",
];

#[derive(Debug, Deserialize)]
pub(super) struct OllamaMessage {
    role: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    images: Option<Vec<Value>>,
    /// `[{function: {name, arguments: {...}}}]`.
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    thinking: Option<String>,
    /// A tool turn: the tool that answered.
    #[serde(default)]
    tool_name: Option<String>,
}

/// Fields `/api/chat` and `/api/generate` share.
#[derive(Debug, Deserialize)]
pub(super) struct Shape {
    model: String,
    /// `"json"` or a JSON schema.
    #[serde(default)]
    format: Option<Value>,
    #[serde(default)]
    options: Option<Map<String, Value>>,
    /// Ollama streams unless told not to.
    #[serde(default)]
    stream: Option<bool>,
    /// How long to keep the model loaded: ferrox keeps its one model for the process's life.
    #[serde(default)]
    #[allow(dead_code)]
    keep_alive: Option<Value>,
    /// `true`/`false`, or `"low"`/`"medium"`/`"high"` (gpt-oss).
    #[serde(default)]
    think: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct ChatBody {
    #[serde(default)]
    messages: Vec<OllamaMessage>,
    #[serde(default)]
    tools: Option<Vec<Value>>,
    #[serde(flatten)]
    shape: Shape,
}

#[derive(Debug, Deserialize)]
pub(super) struct GenerateBody {
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    suffix: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    template: Option<String>,
    #[serde(default)]
    context: Option<Vec<Value>>,
    #[serde(default)]
    raw: bool,
    #[serde(default)]
    images: Option<Vec<Value>>,
    #[serde(flatten)]
    shape: Shape,
}

/// RFC 3339 UTC time with nanoseconds, as Ollama writes `created_at`.
pub(super) fn rfc3339_now() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs(), d.subsec_nanos())
}

pub(super) fn rfc3339(secs: u64, nanos: u32) -> String {
    let (y, mo, day) = ferrox_tokenizer::template::civil_date((secs / 86_400) as i64);
    let t = secs % 86_400;
    format!(
        "{y:04}-{mo:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        t / 3600,
        (t % 3600) / 60,
        t % 60
    )
}

/// The OpenAI request fields an Ollama request stands for: sampler options, `format`,
/// `think`.
fn openai_fields(shape: &Shape) -> Result<Map<String, Value>, ApiError> {
    let mut out = Map::new();
    out.insert("model".into(), json!(shape.model));
    for (k, v) in shape.options.iter().flatten() {
        let neutral = match k.as_str() {
            "mirostat" => v.as_f64() == Some(0.0),
            "typical_p" | "tfs_z" => v.as_f64() == Some(1.0),
            _ => false,
        };
        if SAMPLER_OPTIONS.contains(&k.as_str()) {
            out.insert(k.clone(), v.clone());
        } else if k == "num_predict" {
            // -1 (and -2, "fill the context") mean no limit but the context.
            if v.as_i64().is_some_and(|n| n > 0) {
                out.insert("max_tokens".into(), v.clone());
            }
        } else if !neutral && !RUNTIME_OPTIONS.contains(&k.as_str()) {
            return Err(ApiError::bad(format!(
                "unsupported option `{k}`: ferrox does not implement it, and ignoring it would change the answer"
            ))
            .param(format!("options.{k}")));
        }
    }
    match &shape.format {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) if s == "json" => {
            out.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(schema @ Value::Object(_)) => {
            out.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "format", "schema": schema}}),
            );
        }
        Some(other) => {
            return Err(ApiError::bad(format!(
                "format must be \"json\" or a JSON schema, got {other}"
            ))
            .param("format"))
        }
    }
    match &shape.think {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => {
            out.insert("chat_template_kwargs".into(), json!({"enable_thinking": b}));
        }
        Some(Value::String(level)) => {
            out.insert("reasoning_effort".into(), json!(level));
        }
        Some(other) => {
            return Err(ApiError::bad(format!(
                "think must be a boolean or low / medium / high, got {other}"
            ))
            .param("think"))
        }
    }
    Ok(out)
}

/// An Ollama message as an OpenAI one (tool calls get ids and JSON-string arguments).
fn openai_message(m: &OllamaMessage) -> Result<Value, ApiError> {
    if m.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(
            ApiError::bad("images are not supported: this model reads text only").param("messages"),
        );
    }
    let mut v = json!({"role": m.role, "content": m.content});
    if let Some(calls) = &m.tool_calls {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let f = c.get("function").cloned().unwrap_or(Value::Null);
                let args = f.get("arguments").cloned().unwrap_or(json!({}));
                json!({
                    "id": format!("call_{i}"),
                    "type": "function",
                    "function": {"name": f.get("name").cloned().unwrap_or(Value::Null), "arguments": args.to_string()},
                })
            })
            .collect();
        v["tool_calls"] = json!(calls);
    }
    if let Some(t) = &m.thinking {
        v["reasoning_content"] = json!(t);
    }
    if let Some(name) = &m.tool_name {
        v["name"] = json!(name);
    }
    Ok(v)
}

fn chat_request(fields: Map<String, Value>) -> Result<ChatRequest, ApiError> {
    serde_json::from_value(Value::Object(fields)).map_err(|e| ApiError::bad(e.to_string()))
}

pub(super) async fn chat(Authed { s, body }: Authed<ChatBody>) -> Response {
    let r = async {
        let b = body?;
        let mut fields = openai_fields(&b.shape)?;
        let msgs = b
            .messages
            .iter()
            .map(openai_message)
            .collect::<Result<Vec<_>, _>>()?;
        fields.insert("messages".into(), json!(msgs));
        if let Some(tools) = &b.tools {
            fields.insert("tools".into(), json!(tools));
        }
        let req = chat_request(fields)?;
        if req.messages.is_empty() {
            // Ollama loads the model for an empty chat and answers at once.
            return Ok(Json(loaded(&b.shape.model, "message")).into_response());
        }
        let p = prepare_chat(&s, &req).await?;
        run(&s, &b.shape, Route::Chat, p).await
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

pub(super) async fn generate(Authed { s, body }: Authed<GenerateBody>) -> Response {
    let r = async {
        let b = body?;
        refuse_generate_fields(&b)?;
        let mut fields = openai_fields(&b.shape)?;
        if b.prompt.is_empty() {
            return Ok(Json(loaded(&b.shape.model, "response")).into_response());
        }
        let suffix = b.suffix.clone().filter(|t| !t.is_empty());
        if b.raw || suffix.is_some() {
            let c: CommonParams = serde_json::from_value(Value::Object(fields))
                .map_err(|e| ApiError::bad(e.to_string()))?;
            let text = b.prompt.clone();
            let prompt = match suffix {
                // The prompt is the text before the hole, laid out as `/infill` lays it out.
                Some(suffix) => {
                    let fim = Fim {
                        prefix: text,
                        suffix,
                        ..Fim::default()
                    };
                    fim_prompt(&s, fim, &c, "suffix").await?
                }
                // The prompt as is (special tokens parsed): the user wrote the template's text.
                None => super::off_workers(&s, move |be| be.text_prompt(&text)).await?,
            };
            let mut params = validate(&s, Kind::Completion, &c, prompt.len())?;
            compile_grammar(&s, &c, &mut params).await?;
            let p = Prepared {
                prompt,
                params,
                output: None,
            };
            return run(&s, &b.shape, Route::Generate, p).await;
        }
        let mut msgs = Vec::new();
        if let Some(sys) = b.system.as_ref().filter(|t| !t.is_empty()) {
            msgs.push(json!({"role": "system", "content": sys}));
        }
        msgs.push(json!({"role": "user", "content": b.prompt}));
        fields.insert("messages".into(), json!(msgs));
        let p = prepare_chat(&s, &chat_request(fields)?).await?;
        run(&s, &b.shape, Route::Generate, p).await
    }
    .await;
    r.unwrap_or_else(ApiError::ollama)
}

/// `/api/generate` fields ferrox cannot honour: refused with the reason.
fn refuse_generate_fields(b: &GenerateBody) -> Result<(), ApiError> {
    let set = |o: &Option<String>| o.as_ref().is_some_and(|t| !t.is_empty());
    if set(&b.suffix) && (b.raw || set(&b.system)) {
        return Err(ApiError::bad(
            "suffix (fill-in-the-middle) cannot be combined with raw or system: its prompt is the model's FIM layout",
        )
        .param("suffix"));
    }
    if set(&b.template) {
        return Err(ApiError::bad(
            "a per-request Go template is not supported; ferrox uses the model's Jinja chat template (or raw: true)",
        )
        .param("template"));
    }
    if b.context.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(ApiError::bad(
            "context (the deprecated token list) is not supported; send the conversation to /api/chat",
        )
        .param("context"));
    }
    if b.images.as_ref().is_some_and(|i| !i.is_empty()) {
        return Err(
            ApiError::bad("images are not supported: this model reads text only").param("images"),
        );
    }
    Ok(())
}

/// Ollama's answer to an empty request: the model is loaded.
fn loaded(model: &str, field: &str) -> Value {
    let mut v =
        json!({"model": model, "created_at": rfc3339_now(), "done": true, "done_reason": "load"});
    v[field] = match field {
        "message" => json!({"role": "assistant", "content": ""}),
        _ => json!(""),
    };
    v
}

#[derive(Clone, Copy, PartialEq)]
enum Route {
    Chat,
    Generate,
}

async fn run(s: &Shared, shape: &Shape, route: Route, p: Prepared) -> Result<Response, ApiError> {
    let prompt_tokens = p.prompt.len();
    let rx = submit_one(s, p.prompt, &p.params)?;
    let out = Out {
        model: shape.model.clone(),
        route,
        prompt_tokens,
    };
    if shape.stream.unwrap_or(true) {
        Ok(ndjson(out, rx, p.output))
    } else {
        whole(out, rx, p.output).await
    }
}

/// What every line of one answer repeats.
struct Out {
    model: String,
    route: Route,
    prompt_tokens: usize,
}

impl Out {
    fn line(&self, reasoning: &str, content: &str, calls: &[ToolCall]) -> Value {
        let mut v = json!({"model": self.model, "created_at": rfc3339_now(), "done": false});
        match self.route {
            Route::Chat => {
                let mut m = json!({"role": "assistant", "content": content});
                if !reasoning.is_empty() {
                    m["thinking"] = json!(reasoning);
                }
                if !calls.is_empty() {
                    m["tool_calls"] = calls
                        .iter()
                        .map(|c| json!({"function": {"name": c.name, "arguments": c.arguments}}))
                        .collect();
                }
                v["message"] = m;
            }
            Route::Generate => {
                v["response"] = json!(content);
                if !reasoning.is_empty() {
                    v["thinking"] = json!(reasoning);
                }
            }
        }
        v
    }

    /// The closing fields: why it ended and Ollama's counters (durations in nanoseconds).
    fn close(&self, v: &mut Value, summary: &GenSummary, times: (Duration, Duration)) {
        let (prompt, eval) = times;
        v["done"] = json!(true);
        v["done_reason"] = json!(match summary.finish {
            FinishReason::Length => "length",
            _ => "stop",
        });
        v["total_duration"] = json!((prompt + eval).as_nanos() as u64);
        v["load_duration"] = json!(0);
        v["prompt_eval_count"] = json!(self.prompt_tokens);
        v["prompt_eval_duration"] = json!(prompt.as_nanos() as u64);
        v["eval_count"] = json!(summary.completion_tokens);
        v["eval_duration"] = json!(eval.as_nanos() as u64);
    }
}

async fn whole(
    out: Out,
    rx: UnboundedReceiver<Event>,
    setup: Option<OutputSetup>,
) -> Result<Response, ApiError> {
    let mut pieces = Pieces::new(rx, setup.as_ref());
    let a = super::answer::collect(&mut pieces).await?;
    let mut v = out.line(&a.reasoning, &a.content, &a.calls);
    let summary = a.summary;
    out.close(&mut v, &summary, pieces.durations());
    Ok(Json(v).into_response())
}

/// The streamed form: one JSON object per line (`application/x-ndjson`), the last with
/// `done: true` and the counters; an engine failure is an `{"error": …}` line.
fn ndjson(out: Out, rx: UnboundedReceiver<Event>, setup: Option<OutputSetup>) -> Response {
    let pieces = Pieces::new(rx, setup.as_ref());
    let lines = stream::unfold(Some((pieces, out)), |st| async move {
        let (mut pieces, out) = st?;
        let v = match pieces.next().await? {
            Piece::Reasoning(t) => out.line(&t, "", &[]),
            Piece::Content(t) => out.line("", &t, &[]),
            Piece::Call(c) => out.line("", "", &[c]),
            Piece::Done(summary) => {
                let mut v = out.line("", "", &[]);
                out.close(&mut v, &summary, pieces.durations());
                v
            }
            Piece::Failed(msg) => json!({"error": msg}),
        };
        let mut line = v.to_string();
        line.push('\n');
        Some((
            Ok::<_, std::convert::Infallible>(Bytes::from(line)),
            Some((pieces, out)),
        ))
    });
    let mut r = Response::new(Body::from_stream(lines));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/x-ndjson"),
    );
    r
}
