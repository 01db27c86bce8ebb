//! What a chat model writes back, split into its parts as it streams: reasoning
//! (`<think>…</think>`, Qwen3 / GLM-4.5 / DeepSeek-R1), the answer, and tool calls in the format
//! the model's chat template teaches it. Formats follow the templates themselves and the
//! parsers of llama.cpp (`common/chat.cpp`) and vLLM (`tool_parsers/*`):
//! - Hermes (Qwen2.5, Qwen3, Hermes): `<tool_call>{"name": …, "arguments": {…}}</tool_call>`;
//! - GLM-4.5+: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`;
//! - Llama 3.x: the whole answer is `{"name": …, "parameters": {…}}` (optionally after
//!   `<|python_tag|>`);
//! - Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]` or `[TOOL_CALLS]NAME[ARGS]{…}`;
//! - DeepSeek-V3: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and a fenced JSON block (V3.1:
//!   `NAME<｜tool▁sep｜>{…}`), up to `<｜tool▁call▁end｜>`;
//! - gpt-oss (OpenAI's harmony format): messages `<|channel|>CHANNEL[ to=RECIPIENT]<|message|>…`
//!   ended by `<|end|>`, `<|call|>` or `<|return|>`; the `analysis` channel is reasoning,
//!   `final` the answer, a message `to=functions.NAME` a call. Its markers are special tokens,
//!   so the text must be decoded with them ([`ToolFormat::needs_special_tokens`]).
//!
//! Small models often answer a tool request with the bare JSON call, or one fenced as
//! ```` ```json ````, instead of the template's markers (Qwen2.5-Coder does); as llama.cpp's
//! Hermes parser does, an answer that is only such a call to an offered tool is a call.
//!
//! Text that only may begin a marker is held back until it is decided, so a streamed answer
//! never shows half a marker. A call that does not parse is passed on as plain text.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a model writes tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolFormat {
    Hermes,
    Glm45,
    Llama3Json,
    Mistral,
    DeepSeekV3,
    /// OpenAI's harmony messages (gpt-oss).
    Harmony,
    /// The template shows no tool-call format.
    None,
}

impl ToolFormat {
    /// The format a chat template teaches (`None` when it has no tool calls).
    pub fn detect(template: &str) -> ToolFormat {
        if template.contains("<|channel|>") {
            ToolFormat::Harmony
        } else if template.contains("<arg_key>") {
            ToolFormat::Glm45
        } else if template.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if template.contains("tool▁call▁begin") {
            ToolFormat::DeepSeekV3
        } else if template.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if template.contains("<|python_tag|>") || template.contains("\"parameters\": ") {
            ToolFormat::Llama3Json
        } else {
            ToolFormat::None
        }
    }

    /// The answer's structure is in special tokens, which text decoding must keep.
    pub fn needs_special_tokens(self) -> bool {
        self == ToolFormat::Harmony
    }

    /// The text that opens a call (or the calls) in this format.
    fn opener(self) -> Option<&'static str> {
        match self {
            ToolFormat::Hermes | ToolFormat::Glm45 => Some("<tool_call>"),
            ToolFormat::Mistral => Some("[TOOL_CALLS]"),
            ToolFormat::DeepSeekV3 => Some("<｜tool▁call▁begin｜>"),
            ToolFormat::Llama3Json | ToolFormat::Harmony | ToolFormat::None => None,
        }
    }

    /// The text that closes one call; `None`: the call runs to the end of the output.
    fn closer(self) -> Option<&'static str> {
        match self {
            ToolFormat::Hermes | ToolFormat::Glm45 => Some("</tool_call>"),
            ToolFormat::DeepSeekV3 => Some("<｜tool▁call▁end｜>"),
            _ => None,
        }
    }
}

/// One tool call the model made.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Value,
}

/// A piece of the output, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputPart {
    Reasoning(String),
    Content(String),
    ToolCall(ToolCall),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing seen yet: the output may open with `<think>` or (Llama 3) a JSON call.
    Start,
    Reasoning,
    Content,
    /// Inside a call's text (after its opener).
    Call,
    /// An answer that may be one bare or fenced JSON call: held until the end.
    WholeJson,
    /// Harmony: a message header, up to `<|message|>`.
    HarmonyHeader,
    /// Harmony: a message body of this kind, up to its end marker.
    HarmonyBody(Body),
}

/// What a harmony message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    /// A call to the function named in `OutputParser::callee`.
    Call,
}

const HARMONY_ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Splits streamed output into [`OutputPart`]s.
pub struct OutputParser {
    format: ToolFormat,
    /// Offered tools: a bare or fenced JSON answer is a call only to one of these.
    names: Vec<String>,
    mode: Mode,
    buf: String,
    /// Reasoning just ended: whitespace before the answer is dropped.
    trim_next: bool,
    /// Harmony: the function the current message calls.
    callee: String,
}

impl OutputParser {
    /// `format`: the tool-call format to recognise (`ToolFormat::None`: no tools offered);
    /// `in_reasoning`: the prompt already opened a `<think>` block (DeepSeek-R1-style templates
    /// end the generation prompt with it).
    pub fn new(format: ToolFormat, in_reasoning: bool) -> Self {
        OutputParser {
            format,
            names: Vec::new(),
            mode: if format == ToolFormat::Harmony {
                Mode::HarmonyHeader
            } else if in_reasoning {
                Mode::Reasoning
            } else {
                Mode::Start
            },
            buf: String::new(),
            trim_next: false,
            callee: String::new(),
        }
    }

    /// Recognises bare or fenced JSON answers as calls to these tools (Hermes and Llama 3
    /// formats).
    pub fn with_tools(mut self, names: Vec<String>) -> Self {
        self.names = names;
        self
    }

    /// Takes the next piece of text; appends the parts it completes to `out`.
    pub fn push(&mut self, text: &str, out: &mut Vec<OutputPart>) {
        self.buf.push_str(text);
        loop {
            let before = (self.mode, self.buf.len());
            match self.mode {
                Mode::Start => self.start(),
                Mode::Reasoning => self.reasoning(out),
                Mode::Content => self.content(out),
                Mode::Call => self.call(out),
                Mode::WholeJson => {}
                Mode::HarmonyHeader => self.harmony_header(),
                Mode::HarmonyBody(body) => self.harmony_body(body, out),
            }
            if (self.mode, self.buf.len()) == before {
                return;
            }
        }
    }

    /// The output ended: everything held back is decided.
    pub fn finish(&mut self, out: &mut Vec<OutputPart>) {
        let rest = std::mem::take(&mut self.buf);
        match self.mode {
            Mode::Reasoning => emit(out, OutputPart::Reasoning(rest)),
            Mode::Start | Mode::Content => self.emit_content(rest, out),
            Mode::Call => {
                let opener = self.format.opener().unwrap_or("");
                match parse_calls(self.format, &rest) {
                    Some(calls) => out.extend(calls.into_iter().map(OutputPart::ToolCall)),
                    None => self.emit_content(format!("{opener}{rest}"), out),
                }
            }
            Mode::WholeJson => match self.loose_calls(&rest) {
                Some(calls) => out.extend(calls.into_iter().map(OutputPart::ToolCall)),
                None => self.emit_content(rest, out),
            },
            // A header cut short says nothing; a body ends with the output.
            Mode::HarmonyHeader => {}
            Mode::HarmonyBody(body) => {
                self.buf = rest;
                self.end_harmony_body(body, self.buf.len(), out);
            }
        }
        self.mode = Mode::Content;
    }

    /// A harmony header (`<|start|>assistant`, `<|channel|>analysis`, ` to=functions.f`,
    /// ` <|constrain|>json`, in any order) up to `<|message|>` says what the body is.
    fn harmony_header(&mut self) {
        let Some(i) = self.buf.find("<|message|>") else {
            return;
        };
        let header: String = self.buf.drain(..i + "<|message|>".len()).collect();
        let recipient = header.split("to=").nth(1).map(|r| {
            r.split(|c: char| c.is_whitespace() || c == '<')
                .next()
                .unwrap_or("")
        });
        let body = match recipient.and_then(|r| r.strip_prefix("functions.")) {
            Some(name) => {
                self.callee = name.to_string();
                Body::Call
            }
            None if header.contains("<|channel|>analysis") => Body::Reasoning,
            None => Body::Content,
        };
        self.mode = Mode::HarmonyBody(body);
    }

    fn harmony_body(&mut self, body: Body, out: &mut Vec<OutputPart>) {
        let end = HARMONY_ENDS
            .iter()
            .filter_map(|m| self.buf.find(m).map(|i| (i, m.len())))
            .min();
        match end {
            Some((i, len)) => {
                self.end_harmony_body(body, i, out);
                self.buf.drain(..len);
                self.mode = Mode::HarmonyHeader;
            }
            None if body == Body::Call => {}
            None => {
                let keep = held_back(&self.buf, &HARMONY_ENDS);
                let text: String = self.buf.drain(..self.buf.len() - keep).collect();
                let part = match body {
                    Body::Reasoning => OutputPart::Reasoning(text),
                    _ => OutputPart::Content(text),
                };
                emit(out, part);
            }
        }
    }

    /// The first `at` bytes of the buffer end the current harmony message.
    fn end_harmony_body(&mut self, body: Body, at: usize, out: &mut Vec<OutputPart>) {
        let text: String = self.buf.drain(..at).collect();
        match body {
            Body::Reasoning => emit(out, OutputPart::Reasoning(text)),
            Body::Content => emit(out, OutputPart::Content(text)),
            Body::Call => match serde_json::from_str::<Value>(text.trim()) {
                Ok(arguments) if arguments.is_object() => {
                    out.push(OutputPart::ToolCall(ToolCall {
                        name: std::mem::take(&mut self.callee),
                        arguments,
                    }))
                }
                _ => emit(out, OutputPart::Content(text)),
            },
        }
    }

    /// Decides how the output opens once enough of it is there.
    fn start(&mut self) {
        let t = self.buf.trim_start();
        if t.is_empty() {
            return;
        }
        if let Some(rest) = t.strip_prefix(THINK_OPEN) {
            self.buf = rest.to_string();
            self.mode = Mode::Reasoning;
            return;
        }
        if THINK_OPEN.starts_with(t) {
            return; // may still become `<think>`
        }
        let loose = self.format == ToolFormat::Llama3Json
            || (self.format == ToolFormat::Hermes && !self.names.is_empty());
        if loose {
            let openers = ["{", "```", "[", "<|python_tag|>"];
            if openers.iter().any(|o| t.starts_with(o)) {
                self.mode = Mode::WholeJson;
                return;
            }
            if openers.iter().any(|o| o.starts_with(t)) {
                return; // may still become one
            }
        }
        self.mode = Mode::Content;
    }

    /// A whole answer that is one JSON call (or a list of them), bare, after
    /// `<|python_tag|>`, or fenced; with tool names known, each must name one.
    fn loose_calls(&self, text: &str) -> Option<Vec<ToolCall>> {
        let mut t = text.trim().trim_start_matches("<|python_tag|>").trim();
        if let Some(inner) = t.strip_prefix("```") {
            let inner = inner.strip_suffix("```")?;
            let inner = inner.trim_start_matches(|c: char| c.is_ascii_alphabetic());
            t = inner.trim();
        }
        let calls = match serde_json::from_str::<Value>(t).ok()? {
            Value::Array(items) => items.iter().map(json_call).collect::<Option<Vec<_>>>()?,
            v => vec![json_call(&v)?],
        };
        let known = |c: &ToolCall| self.names.is_empty() || self.names.contains(&c.name);
        (!calls.is_empty() && calls.iter().all(known)).then_some(calls)
    }

    fn reasoning(&mut self, out: &mut Vec<OutputPart>) {
        match self.buf.find(THINK_CLOSE) {
            Some(i) => {
                let thought = self.buf[..i].to_string();
                self.buf.drain(..i + THINK_CLOSE.len());
                emit(out, OutputPart::Reasoning(thought));
                self.trim_next = true;
                self.mode = Mode::Content;
            }
            None => {
                let keep = held_back(&self.buf, &[THINK_CLOSE]);
                let thought: String = self.buf.drain(..self.buf.len() - keep).collect();
                emit(out, OutputPart::Reasoning(thought));
            }
        }
    }

    fn content(&mut self, out: &mut Vec<OutputPart>) {
        let Some(opener) = self.format.opener() else {
            let text = std::mem::take(&mut self.buf);
            self.emit_content(text, out);
            return;
        };
        match self.buf.find(opener) {
            Some(i) => {
                let text = self.buf[..i].to_string();
                self.buf.drain(..i + opener.len());
                self.emit_content(text, out);
                self.mode = Mode::Call;
            }
            None => {
                let keep = held_back(&self.buf, &[opener]);
                let text: String = self.buf.drain(..self.buf.len() - keep).collect();
                self.emit_content(text, out);
            }
        }
    }

    fn call(&mut self, out: &mut Vec<OutputPart>) {
        let Some(closer) = self.format.closer() else {
            return; // runs to the end of the output
        };
        let Some(i) = self.buf.find(closer) else {
            return;
        };
        let body = self.buf[..i].to_string();
        self.buf.drain(..i + closer.len());
        match parse_calls(self.format, &body) {
            Some(calls) => out.extend(calls.into_iter().map(OutputPart::ToolCall)),
            None => {
                let opener = self.format.opener().unwrap_or("");
                self.emit_content(format!("{opener}{body}{closer}"), out);
            }
        }
        self.mode = Mode::Content;
    }

    fn emit_content(&mut self, text: String, out: &mut Vec<OutputPart>) {
        let text = if self.trim_next {
            let t = text.trim_start().to_string();
            self.trim_next = t.is_empty();
            t
        } else {
            text
        };
        emit(out, OutputPart::Content(text));
    }
}

/// Appends `part` unless it is empty text; adjacent text of one kind is merged.
fn emit(out: &mut Vec<OutputPart>, part: OutputPart) {
    match (out.last_mut(), part) {
        (_, OutputPart::Content(t) | OutputPart::Reasoning(t)) if t.is_empty() => {}
        (Some(OutputPart::Content(a)), OutputPart::Content(b)) => a.push_str(&b),
        (Some(OutputPart::Reasoning(a)), OutputPart::Reasoning(b)) => a.push_str(&b),
        (_, p) => out.push(p),
    }
}

/// How many trailing bytes of `s` could begin one of `markers` (held back until decided).
fn held_back(s: &str, markers: &[&str]) -> usize {
    let mut keep = 0;
    for m in markers {
        for (i, _) in m.char_indices().skip(1) {
            if i > keep && s.ends_with(&m[..i]) {
                keep = i;
            }
        }
    }
    keep
}

/// The calls in one call's text (after its opener, before its closer).
fn parse_calls(format: ToolFormat, body: &str) -> Option<Vec<ToolCall>> {
    let body = body.trim();
    match format {
        ToolFormat::Hermes | ToolFormat::Llama3Json => {
            let v: Value = serde_json::from_str(body).ok()?;
            Some(vec![json_call(&v)?])
        }
        ToolFormat::Glm45 => glm_call(body).map(|c| vec![c]),
        ToolFormat::Mistral => mistral_calls(body),
        ToolFormat::DeepSeekV3 => deepseek_call(body).map(|c| vec![c]),
        ToolFormat::Harmony | ToolFormat::None => None,
    }
}

/// `{"name": …, "arguments"|"parameters": {…}}` (arguments may be a JSON string).
fn json_call(v: &Value) -> Option<ToolCall> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    let arguments = match args {
        Value::String(s) => serde_json::from_str(&s).ok()?,
        other => other,
    };
    arguments
        .is_object()
        .then_some(ToolCall { name, arguments })
}

fn glm_call(body: &str) -> Option<ToolCall> {
    let (name, mut rest) = match body.find("<arg_key>") {
        Some(i) => (body[..i].trim(), &body[i..]),
        None => (body, ""),
    };
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let mut args = serde_json::Map::new();
    while let Some(k0) = rest.find("<arg_key>") {
        let k1 = rest.find("</arg_key>")?;
        let key = rest[k0 + "<arg_key>".len()..k1].trim().to_string();
        let after = &rest[k1 + "</arg_key>".len()..];
        let v0 = after.find("<arg_value>")? + "<arg_value>".len();
        let v1 = after.find("</arg_value>")?;
        let raw = &after[v0..v1];
        // Values are written raw: JSON when they parse as non-strings, else the text itself.
        let value = match serde_json::from_str::<Value>(raw.trim()) {
            Ok(v) if !v.is_string() => v,
            _ => Value::String(raw.to_string()),
        };
        args.insert(key, value);
        rest = &after[v1 + "</arg_value>".len()..];
    }
    Some(ToolCall {
        name: name.to_string(),
        arguments: Value::Object(args),
    })
}

fn mistral_calls(body: &str) -> Option<Vec<ToolCall>> {
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(body) {
        return items.iter().map(json_call).collect();
    }
    // Newer templates: NAME[ARGS]{…}, possibly repeated after further [TOOL_CALLS].
    body.split("[TOOL_CALLS]")
        .map(|one| {
            let (name, args) = one.split_once("[ARGS]")?;
            let arguments: Value = serde_json::from_str(args.trim()).ok()?;
            (arguments.is_object() && !name.trim().is_empty()).then(|| ToolCall {
                name: name.trim().to_string(),
                arguments,
            })
        })
        .collect()
}

fn deepseek_call(body: &str) -> Option<ToolCall> {
    let (head, args) = body.split_once("<｜tool▁sep｜>")?;
    let head = head.trim();
    // V3: `function<｜tool▁sep｜>NAME\n```json\n{…}\n```` ; V3.1: `NAME<｜tool▁sep｜>{…}`.
    let (name, json) = if head == "function" {
        let (name, rest) = args.split_once('\n')?;
        let json = rest
            .trim()
            .trim_start_matches("```json")
            .trim_end_matches("```");
        (name.trim(), json.trim())
    } else {
        (head, args.trim())
    };
    let arguments: Value = serde_json::from_str(json).ok()?;
    (arguments.is_object() && !name.is_empty()).then(|| ToolCall {
        name: name.to_string(),
        arguments,
    })
}

#[cfg(test)]
mod tests;
