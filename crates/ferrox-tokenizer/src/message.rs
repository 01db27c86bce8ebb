//! What a chat template renders: messages (OpenAI's chat shape, as transformers'
//! `apply_chat_template` takes them) and the error of rendering them. A leaf: the template
//! engine and the control-token marking (`chat_text`) both use it.

use serde::{Deserialize, Serialize};

/// One chat message. `content` is plain text; `tool_calls` / `tool_call_id` / `name` are passed
/// to the template as given (OpenAI-style JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            ..Default::default()
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new("tool", content)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("chat template: {0}")]
    Jinja(#[from] minijinja::Error),
    /// The messages cannot be rendered safely (see `chat_text`).
    #[error("chat template: {0}")]
    Content(String),
}
