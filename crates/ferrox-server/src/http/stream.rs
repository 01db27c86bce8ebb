//! The SSE form of a request's generations: per choice a role chunk (chat), one chunk per
//! piece of text (with the log-probabilities of its tokens), the finish chunk; then the usage
//! chunk when asked for, then `[DONE]`. With `n` > 1 the choices' chunks interleave as their
//! tokens come, each carrying its `index` (OpenAI's streaming format). An engine failure is an
//! OpenAI-format error event followed by `finish_reason: "error"` for that choice.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::endpoint::Kind;
use super::error::UNFINISHED;
use super::response::Meta;
use super::tools::{call_json, OutputSetup};
use crate::backend::{Event, FinishReason, TokenLogprob};
use ferrox_tokenizer::chat_output::{OutputParser, OutputPart};

/// One choice's progress in the stream.
#[derive(Default)]
struct ChoiceState {
    /// Log-probabilities arrive before the text of their tokens (which stop strings may hold
    /// back); they ride on the choice's next chunk.
    pending: Vec<TokenLogprob>,
    /// Text streamed so far (completions' `text_offset`).
    text_len: usize,
    /// Chat: splits the text into reasoning, content and tool calls.
    parser: Option<OutputParser>,
    /// Tool calls streamed so far.
    calls: usize,
}

/// Everything the stream carries between events.
struct St {
    meta: Meta,
    choices: Vec<ChoiceState>,
    completion_tokens: usize,
    /// The first choice's prompt tokens served from a cache.
    cached_tokens: Option<usize>,
}

fn data(v: Value) -> SseEvent {
    SseEvent::default().data(v.to_string())
}

/// One choice's events, tagged with its index, ending with `None` (the channel closed early).
fn tagged(
    index: usize,
    rx: UnboundedReceiver<Event>,
) -> impl Stream<Item = (usize, Option<Event>)> {
    stream::unfold(Some(rx), move |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(ev @ (Event::Done(_) | Event::Failed(_))) => Some(((index, Some(ev)), None)),
            Some(ev) => Some(((index, Some(ev)), Some(rx))),
            None => Some(((index, None), None)),
        }
    })
}

impl St {
    /// The SSE events one generation event becomes.
    fn on(&mut self, index: usize, ev: Option<Event>) -> Vec<SseEvent> {
        let (meta, c) = (&self.meta, &mut self.choices[index]);
        match ev {
            Some(Event::Logprob(l)) => {
                c.pending.push(l);
                Vec::new()
            }
            Some(Event::Text(t)) => {
                let Some(parser) = c.parser.as_mut() else {
                    let lps = meta.logprobs(&c.pending, c.text_len);
                    c.pending.clear();
                    c.text_len += t.len();
                    return vec![data(meta.chunk(index, false, Some(&t), lps, None))];
                };
                let mut parts = Vec::new();
                parser.push(&t, &mut parts);
                parts_to_chunks(meta, index, c, parts)
            }
            Some(Event::Done(summary)) => {
                self.completion_tokens += summary.completion_tokens;
                self.cached_tokens.get_or_insert(summary.cached_tokens);
                let mut out = Vec::new();
                if let Some(mut parser) = c.parser.take() {
                    let mut parts = Vec::new();
                    parser.finish(&mut parts);
                    out = parts_to_chunks(meta, index, c, parts);
                }
                let lps = if c.pending.is_empty() {
                    Value::Null
                } else {
                    meta.logprobs(&c.pending, c.text_len)
                };
                let fin = match c.calls {
                    0 => summary.finish.as_str(),
                    _ => "tool_calls",
                };
                out.push(data(meta.chunk(index, false, None, lps, Some(fin))));
                out
            }
            Some(Event::Failed(msg)) => failed(meta, index, &msg),
            None => failed(meta, index, UNFINISHED),
        }
    }
}

/// Chat chunks for parsed output: a delta per part (`content`, `reasoning_content` or one
/// `tool_calls` entry); pending log-probabilities ride on the first.
fn parts_to_chunks(
    meta: &Meta,
    index: usize,
    c: &mut ChoiceState,
    parts: Vec<OutputPart>,
) -> Vec<SseEvent> {
    let parallel = meta.output.as_ref().is_none_or(|o| o.parallel);
    let mut out = Vec::new();
    for part in parts {
        let mut delta = serde_json::Map::new();
        match part {
            OutputPart::Content(t) => {
                delta.insert("content".into(), json!(t));
            }
            OutputPart::Reasoning(t) => {
                delta.insert("reasoning_content".into(), json!(t));
            }
            OutputPart::ToolCall(_) if !parallel && c.calls > 0 => continue,
            OutputPart::ToolCall(call) => {
                delta.insert(
                    "tool_calls".into(),
                    json!([call_json(&call, Some(c.calls))]),
                );
                c.calls += 1;
            }
        }
        let lps = meta.logprobs(&c.pending, 0);
        c.pending.clear();
        out.push(data(meta.delta_chunk(index, delta, lps, None)));
    }
    out
}

/// An engine failure mid-stream: an OpenAI-format error event, then the choice finishes with
/// `finish_reason: "error"`.
fn failed(meta: &Meta, index: usize, msg: &str) -> Vec<SseEvent> {
    vec![
        data(
            json!({"error": {"message": msg, "type": "server_error", "param": null, "code": null}}),
        ),
        data(meta.chunk(
            index,
            false,
            None,
            Value::Null,
            Some(FinishReason::Error.as_str()),
        )),
    ]
}

pub(super) fn stream_response(
    meta: Meta,
    rxs: Vec<UnboundedReceiver<Event>>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let n = rxs.len();
    // Chat streams open every choice with its role chunk; completions go straight to text.
    let opening: Vec<SseEvent> = match meta.kind {
        Kind::Chat => (0..n)
            .map(|i| data(meta.chunk(i, true, Some(""), Value::Null, None)))
            .collect(),
        Kind::Completion => Vec::new(),
    };
    let events = stream::select_all(
        rxs.into_iter()
            .enumerate()
            .map(|(i, rx)| tagged(i, rx).boxed()),
    );
    let choices = (0..n)
        .map(|_| ChoiceState {
            parser: meta.output.as_ref().map(OutputSetup::parser),
            ..ChoiceState::default()
        })
        .collect();
    let st = St {
        meta,
        choices,
        completion_tokens: 0,
        cached_tokens: None,
    };
    // Every choice's events, then the closing events once all have ended.
    let body = stream::unfold((Some(events), st), |(events, mut st)| async move {
        let mut events = events?;
        match events.next().await {
            Some((i, ev)) => {
                let out = st.on(i, ev);
                Some((out, (Some(events), st)))
            }
            None => {
                let mut out = Vec::new();
                if st.meta.include_usage {
                    let mut v = st.meta.chunk(0, false, None, Value::Null, None);
                    v["choices"] = json!([]);
                    v["usage"] = st
                        .meta
                        .usage(st.completion_tokens, st.cached_tokens.unwrap_or(0));
                    out.push(data(v));
                }
                out.push(SseEvent::default().data("[DONE]"));
                Some((out, (None, st)))
            }
        }
    });
    let all = stream::iter([opening]).chain(body);
    Sse::new(all.flat_map(|evs| stream::iter(evs.into_iter().map(Ok))))
}
