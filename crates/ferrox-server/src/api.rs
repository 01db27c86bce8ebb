//! OpenAI request and response bodies (the subset ferrox serves), following the OpenAI API
//! reference for `/v1/chat/completions`, `/v1/completions` and `/v1/models`.

use ferrox_tokenizer::TokenId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    /// A string, or an array of content parts of which the text parts are used.
    #[serde(default)]
    pub content: MessageContent,
    /// An assistant turn's calls: `[{id, type: "function", function: {name, arguments}}]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    /// A tool turn's answer to this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant turn's reasoning (accepted; templates that show it get it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
    #[default]
    Null,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

impl MessageContent {
    /// The text of the message; `None` when it carries non-text parts.
    pub fn text(&self) -> Option<String> {
        match self {
            MessageContent::Text(s) => Some(s.clone()),
            MessageContent::Null => Some(String::new()),
            MessageContent::Parts(parts) => {
                let mut out = String::new();
                for p in parts {
                    if p.kind != "text" {
                        return None;
                    }
                    out.push_str(p.text.as_deref().unwrap_or(""));
                }
                Some(out)
            }
        }
    }
}

/// `stop`: a string or a list of strings.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
    #[default]
    None,
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
            Stop::None => Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Sampling and length fields shared by both completion endpoints.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct CommonParams {
    pub model: String,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i64>,
    pub min_p: Option<f32>,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub stop: Stop,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
    pub n: Option<i64>,
    /// OpenAI structured outputs: `{"type": "text" | "json_object" | "json_schema", ...}`.
    pub response_format: Option<ResponseFormat>,
    /// llama-server: a GBNF grammar (or llguidance Lark after a `%llguidance` line).
    pub grammar: Option<String>,
    /// llama-server: a JSON schema the output must follow.
    pub json_schema: Option<Value>,
    /// Chat: `true` for per-token log-probabilities; completions: the number of alternatives.
    pub logprobs: Option<Value>,
    /// Chat: alternatives per token (0–20), with `logprobs: true`.
    pub top_logprobs: Option<i64>,
    /// Token id (as a string) → bias in [-100, 100] added to its logit.
    pub logit_bias: Option<serde_json::Map<String, Value>>,
    /// llama-server's repetition penalty (1 = off) and its window (`repeat_last_n`; -1 = the
    /// context).
    pub repeat_penalty: Option<f32>,
    pub repeat_last_n: Option<i64>,
    /// vLLM's: log-probability tokens as `token_id:N` instead of their text.
    pub return_tokens_as_token_ids: Option<bool>,
    /// Fields not named above, checked by `http::params` (refused unless known harmless).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// `response_format` (OpenAI structured outputs). The type is a plain string so an unknown
/// one gets a message naming it.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    pub json_schema: Option<JsonSchemaFormat>,
    /// llama-server's form: `{"type": "json_object", "schema": {...}}`.
    pub schema: Option<Value>,
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct JsonSchemaFormat {
    pub name: Option<String>,
    pub description: Option<String>,
    pub schema: Option<Value>,
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    /// `[{type: "function", function: {name, description, parameters}}]`.
    pub tools: Option<Vec<Value>>,
    /// `"auto"`, `"none"`, `"required"` or `{type: "function", function: {name}}`.
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    /// Extra variables for the chat template (e.g. `{"enable_thinking": false}`).
    pub chat_template_kwargs: Option<serde_json::Map<String, Value>>,
    /// `"low"`, `"medium"` or `"high"`: the template variable of that name (gpt-oss).
    pub reasoning_effort: Option<String>,
    #[serde(flatten)]
    pub common: CommonParams,
}

/// A chat as the model's template gets it.
#[derive(Debug, Clone, Default)]
pub struct ChatPrompt<'a> {
    pub messages: &'a [ChatMessage],
    /// Tool definitions to show the model (none when `tool_choice` is `"none"`).
    pub tools: Option<&'a [Value]>,
    pub kwargs: Option<&'a serde_json::Map<String, Value>>,
}

/// `prompt`: a string or a list with one string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PromptField {
    Text(String),
    Texts(Vec<String>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub prompt: PromptField,
    /// Text after the completion: the prompt is the text before it (fill-in-the-middle).
    pub suffix: Option<String>,
    #[serde(flatten)]
    pub common: CommonParams,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        }
    }
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, Serialize)]
pub struct ErrorDetail {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TokenizeRequest {
    pub content: String,
    #[serde(default)]
    pub add_special: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct DetokenizeRequest {
    pub tokens: Vec<TokenId>,
}

/// A JSON value helper for building response bodies.
pub fn obj(pairs: Vec<(&str, Value)>) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// A chat request's JSON built from another API's request (Anthropic's, `/v1/responses`):
/// `model`, `messages`, and those of `fields` the request set (a null is one left out).
pub(crate) fn chat_json<'a>(
    model: &str,
    messages: Vec<Value>,
    fields: impl IntoIterator<Item = (&'a str, Value)>,
) -> Value {
    let mut r = serde_json::json!({"model": model, "messages": messages});
    for (k, v) in fields {
        if !v.is_null() {
            r[k] = v;
        }
    }
    r
}
