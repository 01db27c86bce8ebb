//! `/v1/chat/completions` and `/v1/completions`: the request checks, submission to the
//! scheduler (`submit`), and the whole-response form (the streamed form is in `stream`).

use axum::response::{IntoResponse, Response};
use ferrox_tokenizer::TokenId;
use serde_json::Value;

use super::endpoint::Kind;
use super::error::Authed;
use super::infill::{fim_prompt, Fim};
use super::params::validate;
use super::render::OwnedChat;
use super::response::{collect_response, Meta};
use super::stream::stream_response;
use super::submit::{compile_grammar, finish, submit};
use super::tools::{tool_names, OutputSetup, ToolPlan};
use super::{new_id, unix_now, ApiError, Shared};
use crate::api::{ChatRequest, CommonParams, CompletionRequest, PromptField};
use crate::backend::{GenParams, RenderedChat};
use ferrox_tokenizer::chat_output::ToolFormat;

pub(super) async fn chat(Authed { s, body }: Authed<ChatRequest>) -> Response {
    let r = async {
        let req = body?;
        let p = prepare_chat(&s, &req).await?;
        start(&s, Kind::Chat, &req.common, p.prompt, p.params, p.output).await
    }
    .await;
    finish(&s, r)
}

/// A chat request made ready to run: its prompt, settings and how its answer is read back.
pub(super) struct Prepared {
    pub prompt: Vec<TokenId>,
    pub params: GenParams,
    pub output: Option<OutputSetup>,
}

/// Checks a chat request (in OpenAI's form; the Ollama and Anthropic routes translate theirs
/// into it), renders its prompt and compiles its grammar.
pub(super) async fn prepare_chat(s: &Shared, req: &ChatRequest) -> Result<Prepared, ApiError> {
    if req.messages.is_empty() {
        return Err(ApiError::bad("messages must not be empty").param("messages"));
    }
    for m in &req.messages {
        if !matches!(
            m.role.as_str(),
            "system" | "developer" | "user" | "assistant" | "tool"
        ) {
            return Err(
                ApiError::bad(format!("unknown message role `{}`", m.role)).param("messages")
            );
        }
        if m.content.text().is_none() {
            return Err(ApiError::bad("only text content parts are supported").param("messages"));
        }
    }
    let (rendered, plan) = render(s, req).await?;
    let mut params = validate(s, Kind::Chat, &req.common, rendered.tokens.len())?;
    // A call the model must make is a grammar: it always parses.
    if let Some(forced) = plan.forced_grammar(req, rendered.tool_format)? {
        if params.grammar.is_some() {
            return Err(ApiError::bad(
                "tool_choice \"required\" or a named function cannot be combined with response_format or a grammar",
            )
            .param("tool_choice"));
        }
        params.grammar = Some(forced);
    }
    compile_grammar(s, &req.common, &mut params).await?;
    // Harmony's channels say what is reasoning and what is the answer, tools or not.
    let harmony = rendered.tool_format.needs_special_tokens();
    params.keep_special = harmony;
    let offered = plan.offered(req);
    let output = OutputSetup {
        format: match offered {
            Some(_) => rendered.tool_format,
            None if harmony => rendered.tool_format,
            None => ToolFormat::None,
        },
        names: offered.map(tool_names).unwrap_or_default(),
        in_reasoning: rendered.in_reasoning,
        parallel: plan.parallel,
    };
    Ok(Prepared {
        prompt: rendered.tokens,
        params,
        output: Some(output),
    })
}

pub(super) async fn completions(Authed { s, body }: Authed<CompletionRequest>) -> Response {
    let r = async {
        let req = body?;
        let text = match &req.prompt {
            PromptField::Text(t) => t.clone(),
            PromptField::Texts(v) if v.len() == 1 => v[0].clone(),
            PromptField::Texts(_) => {
                return Err(ApiError::bad("prompt must be one string").param("prompt"))
            }
        };
        let prompt = match req.suffix.clone() {
            Some(suffix) => {
                let fim = Fim {
                    prefix: text,
                    suffix,
                    ..Fim::default()
                };
                fim_prompt(&s, fim, &req.common, "suffix").await?
            }
            None if text.is_empty() => {
                return Err(ApiError::bad("the prompt is empty").param("prompt"))
            }
            None => super::off_workers(&s, move |b| b.text_prompt(&text)).await?,
        };
        let mut params = validate(&s, Kind::Completion, &req.common, prompt.len())?;
        compile_grammar(&s, &req.common, &mut params).await?;
        start(&s, Kind::Completion, &req.common, prompt, params, None).await
    }
    .await;
    finish(&s, r)
}

async fn start(
    s: &Shared,
    kind: Kind,
    c: &CommonParams,
    prompt: Vec<TokenId>,
    params: GenParams,
    output: Option<OutputSetup>,
) -> Result<Response, ApiError> {
    let prompt_tokens = prompt.len();
    let want_logprobs = params.logprobs.is_some();
    let n = c.n.unwrap_or(1).max(1) as usize;
    let rxs = submit(s, prompt, &params, n)?;
    let meta = Meta {
        id: new_id(match kind {
            Kind::Chat => "chatcmpl",
            Kind::Completion => "cmpl",
        }),
        created: unix_now(),
        model: c.model.clone(),
        kind,
        prompt_tokens,
        include_usage: c.stream_options.as_ref().is_some_and(|o| o.include_usage),
        want_logprobs,
        output,
    };
    if c.stream {
        Ok(stream_response(meta, rxs).into_response())
    } else {
        Ok(collect_response(meta, rxs).await)
    }
}

/// The prompt of a chat request through the model's template (rendered off the async
/// workers under a time limit: `render`), and its tool plan.
pub(super) async fn render(
    s: &Shared,
    req: &ChatRequest,
) -> Result<(RenderedChat, ToolPlan), ApiError> {
    let plan = ToolPlan::of(req)?;
    let chat = OwnedChat {
        messages: req.messages.clone(),
        tools: plan.offered(req).map(<[Value]>::to_vec),
        kwargs: template_kwargs(req)?,
    };
    let rendered = super::render::chat_prompt(s, chat).await?;
    Ok((rendered, plan))
}

/// `chat_template_kwargs`, with `reasoning_effort` (OpenAI's field, gpt-oss's template
/// variable) among them when given.
fn template_kwargs(req: &ChatRequest) -> Result<Option<serde_json::Map<String, Value>>, ApiError> {
    let mut kw = req.chat_template_kwargs.clone();
    if let Some(effort) = &req.reasoning_effort {
        if !matches!(effort.as_str(), "low" | "medium" | "high") {
            return Err(ApiError::bad(format!(
                "reasoning_effort must be low, medium or high, got `{effort}`"
            ))
            .param("reasoning_effort"));
        }
        kw.get_or_insert_with(Default::default)
            .insert("reasoning_effort".into(), Value::String(effort.clone()));
    }
    Ok(kw)
}
