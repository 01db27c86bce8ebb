//! The SSE form of a generation: a role chunk (chat), one chunk per piece of text, the
//! finish chunk, the usage chunk when asked for, then `[DONE]`.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::generate::{Kind, Meta};
use crate::backend::{Event, GenSummary};

pub(super) fn stream_response(
    meta: Meta,
    rx: UnboundedReceiver<Event>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    enum St {
        Start,
        Running,
        Usage(GenSummary),
        Done,
        End,
    }
    let data = |v: Value| SseEvent::default().data(v.to_string());
    let s = stream::unfold((St::Start, rx, meta), move |(st, rx, meta)| async move {
        match st {
            St::Start => {
                let ev = match meta.kind {
                    Kind::Chat => data(meta.chunk(true, Some(""), None)),
                    Kind::Completion => {
                        // Completions have no role chunk; go straight to text.
                        return next_text(rx, meta).await;
                    }
                };
                Some((vec![ev], (St::Running, rx, meta)))
            }
            St::Running => next_text(rx, meta).await,
            St::Usage(summary) => {
                let mut v = meta.chunk(false, None, None);
                v["choices"] = json!([]);
                v["usage"] = meta.usage(&summary);
                Some((vec![data(v)], (St::Done, rx, meta)))
            }
            St::Done => Some((
                vec![SseEvent::default().data("[DONE]")],
                (St::End, rx, meta),
            )),
            St::End => None,
        }
    });

    async fn next_text(
        mut rx: UnboundedReceiver<Event>,
        meta: Meta,
    ) -> Option<(Vec<SseEvent>, (St, UnboundedReceiver<Event>, Meta))> {
        let data = |v: Value| SseEvent::default().data(v.to_string());
        match rx.recv().await {
            Some(Event::Text(t)) => Some((
                vec![data(meta.chunk(false, Some(&t), None))],
                (St::Running, rx, meta),
            )),
            // OpenAI's form for an error in a stream: an `error` object, then the end.
            Some(Event::Error(e)) => Some((
                vec![data(
                    json!({"error": {"message": e, "type": "server_error", "param": null, "code": null}}),
                )],
                (St::Running, rx, meta),
            )),
            Some(Event::Done(summary)) => {
                let fin = data(meta.chunk(false, None, Some(summary.finish.as_str())));
                let next = if meta.include_usage {
                    St::Usage(summary)
                } else {
                    St::Done
                };
                Some((vec![fin], (next, rx, meta)))
            }
            None => Some((
                vec![data(
                    json!({"error": {"message": "generation ended unexpectedly", "type": "server_error", "param": null, "code": null}}),
                )],
                (St::Done, rx, meta),
            )),
        }
    }

    Sse::new(s.flat_map(|evs| stream::iter(evs.into_iter().map(Ok))))
}
