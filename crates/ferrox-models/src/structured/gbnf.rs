//! llama.cpp's GBNF (`grammars/README.md` in llama.cpp: `name ::= alternatives`, `"literals"`,
//! `[character classes]`, `.`, `( groups )`, `* + ?` and `{m,n}` repetition, `#` comments,
//! `root` as the start rule) converted to llguidance's Lark dialect (llguidance
//! `docs/syntax.md`), the same translation llguidance's `gbnf_to_lark.py` makes.
//!
//! Literals and character classes become Lark strings and regexes; a rule made only of
//! terminals (no reference to a rule that is not itself one) becomes a Lark TERMINAL, which
//! llguidance lexes as one regex instead of parsing character by character (llguidance's
//! docs call this essential for speed). As in llguidance's own converter, terminals are lexed
//! greedily, so a GBNF grammar that depends on a scannerless reading of an ambiguous terminal
//! may accept less than llama.cpp's engine would.

use std::collections::HashMap;
use std::fmt::Write;

/// A GBNF text llguidance cannot be given: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("GBNF: {msg} at line {line}")]
pub struct GbnfError {
    pub msg: String,
    pub line: usize,
}

#[derive(Debug, Clone)]
enum Node {
    /// Decoded text.
    Literal(String),
    /// Regex source.
    Regex(String),
    /// Index of the referenced rule (a name until resolved).
    Ref(String),
    Repeat(Box<Node>, u32, Option<u32>),
    Seq(Vec<Node>),
    Alt(Vec<Node>),
}

struct Rule {
    name: String,
    body: Node,
    terminal: bool,
}

/// The Lark text of a GBNF grammar (its `root` rule becomes `start`).
pub fn gbnf_to_lark(src: &str) -> Result<String, GbnfError> {
    let mut p = Parser { src, pos: 0 };
    let mut rules: Vec<Rule> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    p.skip_space(true);
    while !p.at_end() {
        let (name, body) = p.rule()?;
        if by_name.insert(name.clone(), rules.len()).is_some() {
            return Err(p.err(format!("rule `{name}` is defined twice")));
        }
        rules.push(Rule {
            name,
            body: simplify(body),
            terminal: false,
        });
        p.skip_space(true);
    }
    let line = p.line();
    let err = |msg: String| GbnfError { msg, line };
    if !by_name.contains_key("root") {
        return Err(err("no `root` rule".into()));
    }
    for r in &rules {
        if let Some(missing) = first_undefined(&r.body, &by_name) {
            return Err(err(format!(
                "rule `{missing}` is used by `{}` but never defined",
                r.name
            )));
        }
    }
    // Promote to a fixpoint: a chain of terminal-only rules becomes a chain of terminals. A
    // reference reads the flag of its rule, so a recursive rule is never promoted.
    loop {
        let mut changed = false;
        for i in 0..rules.len() {
            if rules[i].name != "root"
                && !rules[i].terminal
                && is_terminal(&rules[i].body, &rules, &by_name)
            {
                rules[i].terminal = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let names = lark_names(&rules);
    let mut out = String::new();
    for (i, r) in rules.iter().enumerate() {
        let _ = write!(out, "{}: ", names[i]);
        write_alts(&mut out, &r.body, &names, &by_name, true);
        out.push('\n');
    }
    Ok(out)
}

/// Lark names: `start` for `root`, lower case for rules, upper case for terminals, `-` as `_`,
/// made unique with a numeric suffix when two GBNF names fold together.
fn lark_names(rules: &[Rule]) -> Vec<String> {
    let mut taken: HashMap<String, ()> = HashMap::new();
    taken.insert("start".into(), ());
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if r.name == "root" {
                return "start".to_string();
            }
            let base: String = r
                .name
                .chars()
                .map(|c| if c == '-' { '_' } else { c })
                .collect();
            let mut n = if r.terminal {
                format!("T_{}", base.to_ascii_uppercase())
            } else {
                format!("r_{}", base.to_ascii_lowercase())
            };
            if taken.contains_key(&n) {
                n = format!("{n}_{i}");
            }
            taken.insert(n.clone(), ());
            n
        })
        .collect()
}

fn first_undefined<'n>(n: &'n Node, by_name: &HashMap<String, usize>) -> Option<&'n str> {
    match n {
        Node::Ref(name) if !by_name.contains_key(name) => Some(name),
        Node::Repeat(inner, ..) => first_undefined(inner, by_name),
        Node::Seq(v) | Node::Alt(v) => v.iter().find_map(|k| first_undefined(k, by_name)),
        _ => None,
    }
}

fn is_terminal(n: &Node, rules: &[Rule], by_name: &HashMap<String, usize>) -> bool {
    match n {
        Node::Literal(_) | Node::Regex(_) => true,
        Node::Ref(name) => rules[by_name[name]].terminal,
        Node::Repeat(inner, ..) => is_terminal(inner, rules, by_name),
        Node::Seq(v) | Node::Alt(v) => v.iter().all(|k| is_terminal(k, rules, by_name)),
    }
}

fn simplify(n: Node) -> Node {
    match n {
        Node::Seq(v) | Node::Alt(v) if v.len() == 1 => {
            simplify(v.into_iter().next().expect("one element"))
        }
        Node::Seq(v) => Node::Seq(v.into_iter().map(simplify).collect()),
        Node::Alt(v) => Node::Alt(v.into_iter().map(simplify).collect()),
        Node::Repeat(inner, lo, hi) => Node::Repeat(Box::new(simplify(*inner)), lo, hi),
        n => n,
    }
}

/// A rule body: alternatives without parentheses at the top.
fn write_alts(
    out: &mut String,
    n: &Node,
    names: &[String],
    by_name: &HashMap<String, usize>,
    top: bool,
) {
    match n {
        Node::Alt(v) => {
            if !top {
                out.push('(');
            }
            for (i, k) in v.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                write_node(out, k, names, by_name);
            }
            if !top {
                out.push(')');
            }
        }
        n => write_node(out, n, names, by_name),
    }
}

fn write_node(out: &mut String, n: &Node, names: &[String], by_name: &HashMap<String, usize>) {
    match n {
        Node::Literal(s) => {
            out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into()))
        }
        Node::Regex(r) => {
            let _ = write!(out, "/{r}/");
        }
        Node::Ref(name) => out.push_str(&names[by_name[name]]),
        Node::Repeat(inner, lo, hi) => {
            let atomic = !matches!(**inner, Node::Seq(_) | Node::Alt(_));
            if !atomic {
                out.push('(');
            }
            write_alts(out, inner, names, by_name, true);
            if !atomic {
                out.push(')');
            }
            match (lo, hi) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (lo, None) => {
                    let _ = write!(out, "{{{lo},}}");
                }
                (lo, Some(hi)) => {
                    let _ = write!(out, "{{{lo},{hi}}}");
                }
            }
        }
        Node::Seq(v) if v.is_empty() => out.push_str("\"\""),
        Node::Seq(v) => {
            for (i, k) in v.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_alts(out, k, names, by_name, false);
            }
        }
        Node::Alt(_) => write_alts(out, n, names, by_name, false),
    }
}

/// Recursive descent over the GBNF text, following llama.cpp's `grammar-parser`: a sequence
/// ends at a newline unless it is inside parentheses, `|` may be followed by one.
struct Parser<'s> {
    src: &'s str,
    pos: usize,
}

/// Most repetitions a `{m,n}` bound may ask for (a hostile bound must not blow up the grammar).
const MAX_REPEAT: u32 = 10_000;

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn peek(&self) -> Option<char> {
        self.src[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Whether the next character closes the string or class being read (then consumed); the
    /// end of the text is an error, `unterminated`.
    fn closes(&mut self, close: char, unterminated: &str) -> Result<bool, GbnfError> {
        match self.peek() {
            None => Err(self.err(unterminated)),
            Some(c) if c == close => {
                self.pos += 1;
                Ok(true)
            }
            Some(_) => Ok(false),
        }
    }

    fn line(&self) -> usize {
        1 + self.src[..self.pos.min(self.src.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
    }

    fn err(&self, msg: impl Into<String>) -> GbnfError {
        GbnfError {
            msg: msg.into(),
            line: self.line(),
        }
    }

    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n' && c != '\r') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected a rule name"));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn rule(&mut self) -> Result<(String, Node), GbnfError> {
        let name = self.name()?;
        self.skip_space(false);
        if !self.src[self.pos..].starts_with("::=") {
            return Err(self.err(format!("expected `::=` after `{name}`")));
        }
        self.pos += 3;
        self.skip_space(true);
        let body = self.alternatives(false)?;
        match self.peek() {
            None | Some('\n' | '\r') => Ok((name, body)),
            Some(c) => Err(self.err(format!("unexpected `{c}`"))),
        }
    }

    fn alternatives(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.skip_space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(Node::Alt(alts))
    }

    fn sequence(&mut self, nested: bool) -> Result<Node, GbnfError> {
        let mut items = Vec::new();
        while let Some(c) = self.peek() {
            let item = match c {
                '"' => {
                    self.pos += 1;
                    let mut s = String::new();
                    while !self.closes('"', "unterminated string")? {
                        s.push(self.char()?);
                    }
                    Node::Literal(s)
                }
                '[' => self.class()?,
                '.' => {
                    self.pos += 1;
                    Node::Regex("(?s:.)".into())
                }
                '(' => {
                    self.pos += 1;
                    self.skip_space(true);
                    let inner = self.alternatives(true)?;
                    if self.peek() != Some(')') {
                        return Err(self.err("expected `)`"));
                    }
                    self.pos += 1;
                    inner
                }
                c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => Node::Ref(self.name()?),
                _ => break,
            };
            items.push(item);
            self.skip_space(nested);
            self.repetition(&mut items)?;
            self.skip_space(nested);
        }
        Ok(Node::Seq(items))
    }

    fn repetition(&mut self, items: &mut [Node]) -> Result<(), GbnfError> {
        let Some(last) = items.last_mut() else {
            return Ok(());
        };
        let (lo, hi) = match self.peek() {
            Some('*') => (0, None),
            Some('+') => (1, None),
            Some('?') => (0, Some(1)),
            Some('{') => {
                self.pos += 1;
                self.skip_space(true);
                let lo = self.int()?.unwrap_or(0);
                self.skip_space(true);
                let hi = match self.bump() {
                    Some('}') => Some(lo),
                    Some(',') => {
                        self.skip_space(true);
                        let hi = self.int()?;
                        self.skip_space(true);
                        if self.bump() != Some('}') {
                            return Err(self.err("expected `}`"));
                        }
                        hi
                    }
                    _ => return Err(self.err("expected `,` or `}`")),
                };
                if hi.is_some_and(|h| h < lo) {
                    return Err(self.err(format!("repetition {{{lo},..}} has max < min")));
                }
                let old = std::mem::replace(last, Node::Seq(Vec::new()));
                *last = Node::Repeat(Box::new(old), lo, hi);
                return Ok(());
            }
            _ => return Ok(()),
        };
        self.pos += 1;
        let old = std::mem::replace(last, Node::Seq(Vec::new()));
        *last = Node::Repeat(Box::new(old), lo, hi);
        Ok(())
    }

    fn int(&mut self) -> Result<Option<u32>, GbnfError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if self.pos == start {
            return Ok(None);
        }
        match self.src[start..self.pos].parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(Some(n)),
            _ => Err(self.err(format!("repetition bound above {MAX_REPEAT}"))),
        }
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, GbnfError> {
        let c = self.bump().ok_or_else(|| self.err("unexpected end"))?;
        if c != '\\' {
            return Ok(c);
        }
        let e = self.bump().ok_or_else(|| self.err("unfinished escape"))?;
        let digits = match e {
            'n' => return Ok('\n'),
            'r' => return Ok('\r'),
            't' => return Ok('\t'),
            '\\' | '"' | '[' | ']' | '-' | '^' | '/' => return Ok(e),
            'x' => 2,
            'u' => 4,
            'U' => 8,
            _ => return Err(self.err(format!("unknown escape `\\{e}`"))),
        };
        let hex = self
            .src
            .get(self.pos..self.pos + digits)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.err(format!("`\\{e}` needs {digits} hex digits")))?;
        self.pos += digits;
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| self.err(format!("`\\{e}{hex}` is not a character")))
    }

    /// `[...]` as a regex class; every character but ASCII letters and digits is written as
    /// `\x{..}`, so nothing in it can be read as class syntax or end the Lark regex.
    fn class(&mut self) -> Result<Node, GbnfError> {
        self.pos += 1;
        let mut rx = String::from("[");
        if self.peek() == Some('^') {
            self.pos += 1;
            rx.push('^');
        }
        let mut empty = true;
        while !self.closes(']', "unterminated character class")? {
            let lo = self.char()?;
            push_class_char(&mut rx, lo);
            empty = false;
            let rest = &self.src[self.pos..];
            if rest.starts_with('-') && !rest.starts_with("-]") {
                self.pos += 1;
                let hi = self.char()?;
                if hi < lo {
                    return Err(self.err("character range is reversed"));
                }
                rx.push('-');
                push_class_char(&mut rx, hi);
            }
        }
        if empty {
            return Err(self.err("empty character class"));
        }
        rx.push(']');
        Ok(Node::Regex(rx))
    }
}

fn push_class_char(rx: &mut String, c: char) {
    if c.is_ascii_alphanumeric() {
        rx.push(c);
    } else {
        let _ = write!(rx, "\\x{{{:x}}}", c as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_rules_terminals_and_repetition() {
        let g = r#"
# a list of yes/no answers
root ::= answer ("," ws answer){0,3}
answer ::= "yes" | "no" | num
num ::= [0-9]+ ("." [0-9]{1,2})?
ws ::= [ \t\n]*
"#;
        let lark = gbnf_to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: T_ANSWER (\",\" T_WS T_ANSWER){0,3}\n\
             T_ANSWER: \"yes\" | \"no\" | T_NUM\n\
             T_NUM: /[0-9]/+ (\".\" /[0-9]/{1,2})?\n\
             T_WS: /[\\x{20}\\x{9}\\x{a}]/*\n"
        );
    }

    #[test]
    fn recursive_rules_stay_rules_and_alternatives_continue_after_bar() {
        let g =
            "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= list |\n  \"x\"\n";
        let lark = gbnf_to_lark(g).unwrap();
        assert!(
            lark.contains("r_list: \"[\" (r_item (\",\" r_item)*)? \"]\""),
            "{lark}"
        );
        assert!(lark.contains("r_item: r_list | \"x\""), "{lark}");
    }

    #[test]
    fn escapes_classes_and_any() {
        let g = r#"root ::= "\x41\u00e9\"" [^\]a-c-] . "#;
        let lark = gbnf_to_lark(g).unwrap();
        assert_eq!(lark, "start: \"Aé\\\"\" /[^\\x{5d}a-c\\x{2d}]/ /(?s:.)/\n");
    }

    /// Random texts over GBNF's alphabet: an error or Lark text, never a panic.
    #[test]
    fn arbitrary_text_never_panics() {
        let alphabet: Vec<char> = "root ::=\"ab|()[]^-*+?{},.#\\xu0\n\té".chars().collect();
        let mut rng = crate::sampling::Rng::new(7);
        for _ in 0..20_000 {
            let len = (rng.next_u64() % 40) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(rng.next_u64() % alphabet.len() as u64) as usize])
                .collect();
            let _ = gbnf_to_lark(&format!("root ::= {text}"));
            let _ = gbnf_to_lark(&text);
        }
    }

    #[test]
    fn errors_name_the_line() {
        let e = gbnf_to_lark("root ::= a\n").unwrap_err();
        assert!(e.msg.contains("`a`"), "{e}");
        let e = gbnf_to_lark("x ::= \"a\"\n").unwrap_err();
        assert!(e.msg.contains("root"), "{e}");
        let e = gbnf_to_lark("root ::= \"a\"\n\nroot ::= \"b\"").unwrap_err();
        assert_eq!(e.line, 3, "{e}");
        assert!(gbnf_to_lark("root ::= \"a").is_err());
        assert!(gbnf_to_lark("root ::= [z-a]").is_err());
        assert!(gbnf_to_lark("root ::= \"a\"{99999999}").is_err());
        assert!(gbnf_to_lark("root = \"a\"").is_err());
    }
}
