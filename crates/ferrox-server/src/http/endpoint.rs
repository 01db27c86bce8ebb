//! Which OpenAI generation endpoint a request came through: `/v1/chat/completions` or
//! `/v1/completions`. Parameter checks, ids and response shapes differ by it, so the modules
//! that check, answer and stream a request all read it from here.

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Chat,
    Completion,
}
