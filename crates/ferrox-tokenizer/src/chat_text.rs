//! Chat prompts in which message text cannot become control tokens. The template's own
//! markers (`<|im_start|>`, `<start_of_turn>`) are tokenized as the special tokens they are;
//! the same strings typed in a message are tokenized as text, as llama.cpp does with
//! `parse_special = false`, so a user cannot forge a system turn.
//!
//! The rendered prompt is tokenized as one text, with special-token matching turned off over
//! the byte ranges that came from message text ([`ChatText::literal`]); everything else about
//! the tokenization is unchanged, so a prompt whose messages hold no special-token text gets
//! exactly the tokens it always had. Finding those ranges:
//! 1. Render with each message's text replaced by a unique sentinel, put the texts back where
//!    the sentinels landed, and compare with the real render. Equal (the template copies
//!    message text verbatim, the common case): the ranges are exact, and no control token can
//!    be formed across a message's edge either.
//! 2. Otherwise the template transforms the text (`| trim`, `.strip()`, a split on
//!    `</think>`, an escaping filter), so the real render is kept. If no message holds
//!    control-token text there is nothing to protect; else the template is rendered once more
//!    with only those occurrences replaced by sentinels, which survive trimming and splitting
//!    around them, and their ranges are the literal ones. When that does not give back the
//!    real render (a sentinel cut apart, a template that measures or case-folds the text), the
//!    request is refused rather than guessed at.

use std::ops::Range;

use crate::message::{Message, TemplateError};
use crate::{hf, Fragment, Specials, TokenId, Tokenizer};

/// A rendered chat prompt: its text, and the sorted, disjoint byte ranges of it that are
/// message text (tokenized without special-token matching).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChatText {
    pub text: String,
    pub literal: Vec<Range<usize>>,
}

impl Tokenizer {
    /// Byte ranges of `text` holding control tokens (those only special-token parsing turns
    /// into tokens), overlapping occurrences merged.
    pub fn control_token_spans(&self, text: &str) -> Vec<Range<usize>> {
        let Some(ac) = self.special_matcher.as_ref().map(|m| &m.all) else {
            return Vec::new();
        };
        let control = |rank: usize| {
            self.attrs[self.special_ids[rank]] & (crate::attr::CONTROL | crate::attr::UNKNOWN) != 0
        };
        let mut spans: Vec<Range<usize>> = ac
            .find_overlapping_iter(text)
            .filter(|m| control(m.pattern().as_usize()))
            .map(|m| m.start()..m.end())
            .collect();
        spans.sort_by_key(|r| r.start);
        let mut merged: Vec<Range<usize>> = Vec::with_capacity(spans.len());
        for r in spans {
            match merged.last_mut() {
                Some(last) if r.start < last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        merged
    }

    /// Tokens of a rendered prompt: control tokens parsed except over `literal` (sorted,
    /// disjoint byte ranges); BOS added when the model wants one and the text does not already
    /// start with it.
    pub fn encode_prompt(&self, text: &str, literal: &[Range<usize>]) -> Vec<TokenId> {
        let mut ids = self.encode_with(text, false, Specials::Outside(literal));
        if self.adds_bos() {
            if let Some(bos) = self.bos_id() {
                if ids.first() != Some(&bos) {
                    ids.insert(0, bos);
                }
            }
        }
        ids
    }

    /// [`encode_prompt`](Self::encode_prompt) for a `tokenizer.json` model: as a whole when no
    /// control token falls in a literal range (the tokens it always had); otherwise cut at the
    /// control tokens outside them, the pieces encoded with special tokens as text.
    pub(crate) fn hf_encode_outside(
        &self,
        h: &hf::HfModel,
        text: &str,
        literal: &[Range<usize>],
    ) -> Vec<TokenId> {
        let inside = self.control_token_spans(text).into_iter().any(|r| {
            let spans = Specials::Outside(literal);
            !spans.allows(r.start, r.end)
        });
        if !inside {
            return h.encode(text, false, true);
        }
        let mut out = Vec::new();
        for frag in self.partition(text, Specials::Outside(literal)) {
            match frag {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(s) => out.extend(h.encode(s, false, false)),
            }
        }
        out
    }
}

/// What `render` makes of `messages`, with the ranges that are message text (see the module
/// documentation). `render` is called two or three times.
pub fn guard(
    tok: &Tokenizer,
    messages: &[Message],
    render: impl Fn(&[Message]) -> Result<String, TemplateError>,
) -> Result<ChatText, TemplateError> {
    let text = render(messages)?;
    let nonce = Nonce::new(messages, &text);
    // 1. Whole message texts (empty ones stay empty: templates test for them).
    let marked: Vec<Message> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| match m.content.is_empty() {
            true => m.clone(),
            false => Message {
                content: nonce.sentinel(i),
                ..m.clone()
            },
        })
        .collect();
    if let Ok(r) = render(&marked) {
        let back = nonce.put_back(&r, |i| messages.get(i).map(|m| m.content.as_str()));
        if let Some((t, literal)) = back.filter(|(t, _)| *t == text) {
            return Ok(ChatText { text: t, literal });
        }
    }
    // 2. Only the control-token text inside messages.
    let mut originals: Vec<&str> = Vec::new();
    let escaped: Vec<Message> = messages
        .iter()
        .map(|m| {
            let mut content = String::with_capacity(m.content.len());
            let mut at = 0;
            for r in tok.control_token_spans(&m.content) {
                content.push_str(&m.content[at..r.start]);
                content.push_str(&nonce.sentinel(originals.len()));
                originals.push(&m.content[r.clone()]);
                at = r.end;
            }
            content.push_str(&m.content[at..]);
            Message {
                content,
                ..m.clone()
            }
        })
        .collect();
    if originals.is_empty() {
        return Ok(ChatText {
            text,
            literal: Vec::new(),
        });
    }
    let r = render(&escaped)?;
    match nonce.put_back(&r, |i| originals.get(i).copied()) {
        Some((t, literal)) if t == text => Ok(ChatText { text, literal }),
        _ => Err(TemplateError::Content(
            "the chat template rewrote message text around special-token markers; \
             refusing to guess which tokens are the user's"
                .into(),
        )),
    }
}

/// Sentinels `\u{F8F0}{nonce}:{i}\u{F8F1}`: private-use characters around a random decimal
/// number no message and no render contains (digits survive case changes).
struct Nonce(String);

const OPEN: char = '\u{F8F0}';
const CLOSE: char = '\u{F8F1}';

impl Nonce {
    fn new(messages: &[Message], text: &str) -> Nonce {
        use std::hash::{BuildHasher, Hasher};
        let mut seed = std::collections::hash_map::RandomState::new().build_hasher();
        loop {
            seed.write_u8(0);
            let n = format!("{}", seed.finish());
            let taken = text.contains(&n) || messages.iter().any(|m| m.content.contains(&n));
            if !taken {
                return Nonce(n);
            }
        }
    }

    fn sentinel(&self, i: usize) -> String {
        format!("{OPEN}{}:{i}{CLOSE}", self.0)
    }

    /// `rendered` with each sentinel replaced by `original(i)`, and where those went; `None`
    /// when a sentinel is unknown or the nonce is left anywhere (a sentinel cut apart).
    fn put_back<'a>(
        &self,
        rendered: &str,
        original: impl Fn(usize) -> Option<&'a str>,
    ) -> Option<(String, Vec<Range<usize>>)> {
        let open = format!("{OPEN}{}:", self.0);
        let mut out = String::with_capacity(rendered.len());
        let mut literal = Vec::new();
        let mut rest = rendered;
        while let Some(at) = rest.find(&open) {
            out.push_str(&rest[..at]);
            let after = &rest[at + open.len()..];
            let end = after.find(CLOSE)?;
            let text = original(after[..end].parse().ok()?)?;
            if !text.is_empty() {
                literal.push(out.len()..out.len() + text.len());
            }
            out.push_str(text);
            rest = &after[end + CLOSE.len_utf8()..];
        }
        out.push_str(rest);
        // What is left of a sentinel the template cut or rewrote (the nonce is in no message,
        // so in no original either).
        if out.contains(&self.0) {
            return None;
        }
        Some((out, literal))
    }
}
