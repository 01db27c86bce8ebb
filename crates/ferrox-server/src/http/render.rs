//! Rendering a chat through the model's template off the async workers. The template comes
//! with the model file and runs in a sandbox (`ferrox_tokenizer::sandbox`: fuel, output and
//! time limits), but a few of its operations are not bounded in-process; so it renders on a
//! blocking thread, the request waits at most [`RENDER_TIMEOUT`], and while
//! [`MAX_OVERDUE`] renders are still running past their timeout new ones are refused at once
//! instead of piling up threads. The async workers (and so `/health`) never wait on a template.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Map, Value};

use super::{ApiError, Shared};
use crate::api::{ChatMessage, ChatPrompt};
use crate::backend::RenderedChat;

/// How long a request waits for its prompt to render (the sandbox's own budget is 0.5 s).
pub const RENDER_TIMEOUT: Duration = Duration::from_secs(2);
/// Renders allowed to run on past their timeout before new ones are refused.
pub const MAX_OVERDUE: usize = 2;

/// A chat as the template gets it, owned (it moves to a blocking thread).
#[derive(Debug, Clone, Default)]
pub struct OwnedChat {
    pub messages: Vec<ChatMessage>,
    pub tools: Option<Vec<Value>>,
    pub kwargs: Option<Map<String, Value>>,
}

/// Renders and tokenizes `chat` with the backend's template on a blocking thread. A template
/// error is a 400 naming `messages`; a render past [`RENDER_TIMEOUT`] a 500; too many overdue
/// renders a 503.
pub async fn chat_prompt(s: &Shared, chat: OwnedChat) -> Result<RenderedChat, ApiError> {
    let overdue = s.renders_overdue.clone();
    if overdue.load(Ordering::SeqCst) >= MAX_OVERDUE {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the chat template is still busy with earlier requests that ran out of time",
        );
        e.retry_after = Some(2);
        return Err(e);
    }
    let backend = s.backend.clone();
    let late = Arc::new(Late::default());
    let flag = late.clone();
    let task = tokio::task::spawn_blocking(move || {
        let prompt = ChatPrompt {
            messages: &chat.messages,
            tools: chat.tools.as_deref(),
            kwargs: chat.kwargs.as_ref(),
        };
        // Dropped however the render ends, a panic included.
        let _done = Done(flag, overdue);
        backend.chat_prompt(&prompt)
    });
    match tokio::time::timeout(RENDER_TIMEOUT, task).await {
        Ok(Ok(r)) => r.map_err(|e| ApiError::bad(e.to_string()).param("messages")),
        Ok(Err(_)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the chat template failed",
        )),
        Err(_) => {
            late.overdue(&s.renders_overdue);
            Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the chat template did not finish within {} s",
                    RENDER_TIMEOUT.as_secs()
                ),
            ))
        }
    }
}

struct Done(Arc<Late>, Arc<AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.finish(&self.1);
    }
}

/// Whether a render finished, or was counted overdue, first (exactly one of the two counts).
#[derive(Default)]
struct Late(std::sync::Mutex<(bool, bool)>);

impl Late {
    /// The render ended: if it had been counted overdue, it no longer is.
    fn finish(&self, overdue: &AtomicUsize) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.0 = true;
        if g.1 {
            overdue.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// The request gave up waiting: count the render overdue unless it already ended.
    fn overdue(&self, overdue: &AtomicUsize) {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if !g.0 {
            g.1 = true;
            overdue.fetch_add(1, Ordering::SeqCst);
        }
    }
}
