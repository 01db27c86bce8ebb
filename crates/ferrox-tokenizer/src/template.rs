//! Chat templates: a model's `tokenizer.chat_template` (Jinja) rendered with minijinja the way
//! Hugging Face transformers renders it (`transformers/utils/chat_template_utils.py`: sandboxed
//! jinja2 with `trim_blocks`, `lstrip_blocks`, `raise_exception`, a `tojson` that is
//! `json.dumps(..., ensure_ascii=False)`, `strftime_now`), with Python string methods from
//! `minijinja-contrib`'s pycompat.
//!
//! Models without a template (base models such as Gemma 3 270M) use [`plain_prompt`].

use crate::chat_text::{self, ChatText};
pub use crate::message::{Message, TemplateError};
use crate::sandbox;
use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{context, Environment, Error, ErrorKind};

/// A compiled chat template plus the special-token strings it may reference.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").finish_non_exhaustive()
    }
}

const NAME: &str = "chat";

impl ChatTemplate {
    /// Compiles `source`; a syntax error is reported here, not at render time.
    pub fn new(
        source: &str,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        // Fuel, output and recursion limits, guarded builtins and Python string methods.
        sandbox::install(&mut env);
        env.add_template_owned(NAME, source.to_string())?;
        Ok(Self {
            env,
            bos_token: bos_token.into(),
            eos_token: eos_token.into(),
        })
    }

    /// Renders with `fuel` instructions instead of [`sandbox::FUEL`] (tests of the margin real
    /// templates have).
    pub fn set_fuel(&mut self, fuel: u64) {
        self.env.set_fuel(Some(fuel));
    }

    /// Renders the conversation; with `add_generation_prompt` the text ends where the
    /// assistant's reply begins.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with_tools(messages, None, add_generation_prompt)
    }

    /// Like [`render`](Self::render), with OpenAI-style tool definitions.
    pub fn render_with_tools(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with(messages, tools, add_generation_prompt, None)
    }

    /// Like [`render_with_tools`](Self::render_with_tools), with extra template variables
    /// (`chat_template_kwargs`, e.g. Qwen3's `enable_thinking`). They cannot replace the
    /// variables above.
    pub fn render_with(
        &self,
        messages: &[Message],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
    ) -> Result<String, TemplateError> {
        let tmpl = self.env.get_template(NAME)?;
        let tools = tools.map(Value::from_serialize);
        let extra = Value::from_serialize(kwargs.cloned().unwrap_or_default());
        let ctx = context! {
            messages => Value::from_serialize(messages),
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            ..extra
        };
        let mut out = sandbox::CappedOutput::default();
        let clock = sandbox::Clock::start(sandbox::TIME_BUDGET);
        let rendered = tmpl.render_captured_to(ctx, &mut out);
        // A loop cut short by the clock ends the render early but fine-looking: fail it.
        if let Some(e) = clock.overrun().or_else(|| out.error()) {
            return Err(e.into());
        }
        rendered?;
        // The engine writes only the UTF-8 text of values and template source.
        Ok(String::from_utf8(out.text).map_err(|e| {
            Error::new(ErrorKind::InvalidOperation, "the render is not UTF-8").with_source(e)
        })?)
    }
}

/// The prompt for a model without a chat template (documented fallback):
///
/// - a conversation that is only user turns (optionally after one system message) is the
///   system text, a blank line, then the user texts separated by blank lines — so a base model
///   simply continues the text it is given;
/// - anything else becomes a transcript, one `Role: content` paragraph per message
///   (`System:`, `User:`, `Assistant:`, `Tool:`), and with `add_generation_prompt` a final
///   `Assistant:` for the model to continue.
pub fn plain_prompt(messages: &[Message], add_generation_prompt: bool) -> String {
    let body: Vec<&Message> = match messages.first() {
        Some(m) if m.role == "system" => messages[1..].iter().collect(),
        _ => messages.iter().collect(),
    };
    let mut parts: Vec<&str> = Vec::new();
    if body.iter().all(|m| m.role == "user") {
        if let Some(m) = messages.first().filter(|m| m.role == "system") {
            parts.push(&m.content);
        }
        parts.extend(body.iter().map(|m| m.content.as_str()));
        return parts.join("\n\n");
    }
    let mut out = String::new();
    for m in messages {
        let mut role = m.role.clone();
        if let Some(c) = role.get_mut(0..1) {
            c.make_ascii_uppercase();
        }
        out.push_str(&role);
        out.push_str(": ");
        out.push_str(&m.content);
        out.push_str("\n\n");
    }
    if add_generation_prompt {
        out.push_str("Assistant:");
    } else {
        out.truncate(out.trim_end_matches('\n').len());
    }
    out
}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn strftime_now(format: String) -> Result<Value, Error> {
    // Days since 1970-01-01 → civil date (Howard Hinnant's algorithm); UTC.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_date(days);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem % 3600 / 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    Ok(Value::from(out))
}

/// `json.dumps(value, ensure_ascii=False, indent=indent)`: Python's separators and escaping.
fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = sandbox::tojson_indent(&kwargs)?;
    kwargs.assert_all_used()?;
    // Bounds the items `write_json` collects, however deeply nested.
    sandbox::check_items("tojson", &value)?;
    let mut out = String::new();
    write_json(&value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(
    v: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    // `open`, the items written by `item` (one a line when indenting), `close`; just the two
    // brackets when empty.
    type Item<'a> = dyn FnMut(&Value, &mut String) -> Result<(), Error> + 'a;
    let container = |out: &mut String,
                     items: &[Value],
                     (open, close): (char, char),
                     item: &mut Item<'_>|
     -> Result<(), Error> {
        out.push(open);
        if items.is_empty() {
            out.push(close);
            return Ok(());
        }
        for (i, it) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(item_sep);
            }
            newline(out, depth + 1);
            item(it, out)?;
        }
        newline(out, depth);
        out.push(close);
        Ok(())
    };
    sandbox::check_output(out.len())?;
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if let Some(i) = v.as_i64() {
                out.push_str(&i.to_string());
            } else {
                let f = f64::try_from(v.clone())?;
                if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
                    out.push_str(&format!("{f:.1}"));
                } else if f.is_nan() {
                    out.push_str("NaN");
                } else if f.is_infinite() {
                    out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
                } else {
                    out.push_str(&f.to_string());
                }
            }
        }
        ValueKind::String => write_json_str(v.as_str().unwrap_or(""), out),
        ValueKind::Map => {
            let keys: Vec<Value> = v.try_iter()?.collect();
            container(out, &keys, ('{', '}'), &mut |k, out| {
                match k.as_str() {
                    Some(s) => write_json_str(s, out),
                    None => write_json_str(&k.to_string(), out),
                }
                out.push_str(": ");
                write_json(&v.get_item(k)?, indent, depth + 1, out)
            })?;
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            container(out, &items, ('[', ']'), &mut |item, out| {
                write_json(item, indent, depth + 1, out)
            })?;
        }
        _ => write_json_str(&v.to_string(), out),
    }
    Ok(())
}

fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

impl ChatTemplate {
    /// The template of a tokenizer's model, with its BOS/EOS strings; `None` without one.
    pub fn for_tokenizer(tok: &crate::Tokenizer) -> Result<Option<Self>, TemplateError> {
        tok.chat_template()
            .map(|src| Self::new(src, tok.bos_text(), tok.eos_text()))
            .transpose()
    }
}

/// The prompt text for a conversation with tools and template variables: the model's chat
/// template (compiled once by the caller, [`ChatTemplate::for_tokenizer`]), or
/// [`plain_prompt`] (which shows neither) when the model has none.
pub fn render_chat(
    template: Option<&ChatTemplate>,
    messages: &[Message],
    tools: Option<&serde_json::Value>,
    kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<String, TemplateError> {
    match template {
        Some(t) => t.render_with(messages, tools, true, kwargs),
        None => Ok(plain_prompt(messages, true)),
    }
}

/// [`render_chat`] with the message text marked, for tokenizing so that it cannot become
/// control tokens ([`crate::chat_text`]).
pub fn render_chat_text(
    tok: &crate::Tokenizer,
    template: Option<&ChatTemplate>,
    messages: &[Message],
    tools: Option<&serde_json::Value>,
    kwargs: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<ChatText, TemplateError> {
    chat_text::guard(tok, messages, |m| render_chat(template, m, tools, kwargs))
}

/// [`render_prompt`] with the message text marked ([`crate::chat_text`]).
pub fn prompt_text(
    tok: &crate::Tokenizer,
    messages: &[Message],
    add_generation_prompt: bool,
) -> Result<ChatText, TemplateError> {
    let template = ChatTemplate::for_tokenizer(tok)?;
    chat_text::guard(tok, messages, |m| match &template {
        Some(t) => t.render(m, add_generation_prompt),
        None => Ok(plain_prompt(m, add_generation_prompt)),
    })
}

/// The prompt text for a conversation: the model's chat template, or [`plain_prompt`] when the
/// model has none.
pub fn render_prompt(
    tok: &crate::Tokenizer,
    messages: &[Message],
    add_generation_prompt: bool,
) -> Result<String, TemplateError> {
    match ChatTemplate::for_tokenizer(tok)? {
        Some(t) => t.render(messages, add_generation_prompt),
        None => Ok(plain_prompt(messages, add_generation_prompt)),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn kwargs_reach_the_template_but_not_over_its_variables() {
        let t = ChatTemplate::new(
            "{% if enable_thinking is defined and not enable_thinking %}off{% endif %}|{{ add_generation_prompt }}|{{ messages | length }}",
            "",
            "",
        )
        .unwrap();
        let kw: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
            r#"{"enable_thinking": false, "add_generation_prompt": "x", "messages": []}"#,
        )
        .unwrap();
        let got = t
            .render_with(&[Message::user("hi")], None, true, Some(&kw))
            .unwrap();
        assert_eq!(got, "off|True|1");
    }
    use super::*;

    #[test]
    fn tojson_is_python_json_dumps() {
        let t = ChatTemplate::new("{{ x | tojson }}|{{ x | tojson(indent=2) }}", "", "").unwrap();
        let env = &t.env;
        let tmpl = env.get_template(NAME).unwrap();
        let x = serde_json::json!({"name": "f", "args": [1, 2.5, true, null, "é<\"\n"]});
        let s = tmpl
            .render(context! { x => Value::from_serialize(&x) })
            .unwrap();
        let (a, b) = s.split_once('|').unwrap();
        // serde_json without preserve_order sorts keys; both are valid json.dumps outputs here.
        assert_eq!(
            a,
            r#"{"args": [1, 2.5, true, null, "é<\"\n"], "name": "f"}"#
        );
        assert_eq!(
            b,
            "{\n  \"args\": [\n    1,\n    2.5,\n    true,\n    null,\n    \"é<\\\"\\n\"\n  ],\n  \"name\": \"f\"\n}"
        );
    }

    #[test]
    fn raise_exception_fails_render() {
        let t = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "").unwrap();
        let e = t
            .render(&[Message::user("x")], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no system role"), "{e}");
    }

    #[test]
    fn pycompat_methods_and_specials() {
        let src = "{{ bos_token }}{% for m in messages %}{{ m.content.strip().upper() }}{% endfor %}{{ eos_token }}";
        let t = ChatTemplate::new(src, "<s>", "</s>").unwrap();
        assert_eq!(
            t.render(&[Message::user("  hi ")], true).unwrap(),
            "<s>HI</s>"
        );
    }

    #[test]
    fn syntax_error_is_reported_at_compile() {
        assert!(ChatTemplate::new("{% if %}", "", "").is_err());
    }

    #[test]
    fn plain_fallback() {
        assert_eq!(
            plain_prompt(&[Message::user("The capital of France is")], true),
            "The capital of France is"
        );
        assert_eq!(
            plain_prompt(&[Message::system("Be brief."), Message::user("Hi")], true),
            "Be brief.\n\nHi"
        );
        let conv = [
            Message::user("hi"),
            Message::assistant("hello"),
            Message::user("joke?"),
        ];
        assert_eq!(
            plain_prompt(&conv, true),
            "User: hi\n\nAssistant: hello\n\nUser: joke?\n\nAssistant:"
        );
        assert_eq!(
            plain_prompt(&conv, false),
            "User: hi\n\nAssistant: hello\n\nUser: joke?"
        );
    }
}
