//! Pre-tokenizers for byte-level BPE, chosen by `tokenizer.ggml.pre` as llama.cpp does
//! (llama.cpp `src/llama-vocab.cpp` `llm_tokenizer_bpe`, `src/unicode.cpp`).
//!
//! The hot regexes (GPT-2, Llama 3 / GLM-4 and Qwen2 families) are scanned by hand: they are the
//! exact regexes with leftmost-first alternation, written as a loop because a backtracking regex
//! engine is the bottleneck of encoding. Tests check them against the same regex run through the
//! HF `tokenizers` `Split` pre-tokenizer. Everything else runs through `Split` directly.

use std::sync::OnceLock;

use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{
    OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, SplitDelimiterBehavior,
};

use crate::TokenizerError;

const LETTER: u8 = 1;
const NUMBER: u8 = 2;
const SPACE: u8 = 4;

/// Per-codepoint class flags (`\p{L}`, `\p{N}`, `\s`) from regex-syntax's Unicode tables, so the
/// hand-written scanners agree with the regex engine's idea of each class.
fn class_table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![0u8; 0x110000];
        for (pat, flag) in [(r"\p{L}", LETTER), (r"\p{N}", NUMBER), (r"\s", SPACE)] {
            let hir = regex_syntax::Parser::new()
                .parse(pat)
                .expect("static class regex");
            if let regex_syntax::hir::HirKind::Class(regex_syntax::hir::Class::Unicode(c)) =
                hir.kind()
            {
                for r in c.ranges() {
                    for cp in r.start() as u32..=r.end() as u32 {
                        t[cp as usize] |= flag;
                    }
                }
            }
        }
        t
    })
}

#[inline]
fn class(table: &[u8], c: char) -> u8 {
    table[c as usize]
}

/// Which regex family a vocabulary's pre-tokenizer uses.
#[derive(Debug, Clone)]
pub(crate) enum PreTokenizerKind {
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
    Gpt2,
    /// `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}|
    /// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` with D = `max_digits`
    /// (3: Llama 3, GLM-4; 1: Qwen2).
    Llama3 { max_digits: usize },
    /// A sequence of regexes applied one after the other (llama.cpp `regex_exprs`), each
    /// isolating its matches and keeping the gaps.
    Regexes(Vec<String>),
}

pub(crate) struct PreTokenizerImpl {
    kind: PreTokenizerKind,
    splits: Vec<Split>,
}

impl std::fmt::Debug for PreTokenizerImpl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.kind)
    }
}

pub(crate) const GPT2_RE: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

#[cfg(test)]
pub(crate) fn llama3_re(max_digits: usize) -> String {
    let digits = if max_digits == 1 {
        r"\p{N}".to_string()
    } else {
        format!(r"\p{{N}}{{1,{max_digits}}}")
    };
    format!(
        r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{{L}}\p{{N}}]?\p{{L}}+|{digits}| ?[^\s\p{{L}}\p{{N}}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
}

/// What llama.cpp does for a `tokenizer.ggml.pre` value: the pre-tokenizer plus whether whole
/// words found in the vocabulary skip the merges (`ignore_merges`) and the default of `add_bos`.
pub(crate) struct PreConfig {
    pub kind: PreTokenizerKind,
    pub ignore_merges: bool,
    pub add_bos_default: bool,
    pub clears_bos: bool,
}

pub(crate) fn pre_config(pre: &str) -> Result<PreConfig, TokenizerError> {
    let cfg = |kind, ignore_merges, add_bos_default| PreConfig {
        kind,
        ignore_merges,
        add_bos_default,
        clears_bos: false,
    };
    let gpt2_like = || PreTokenizerKind::Gpt2;
    Ok(match pre {
        "default" => cfg(
            PreTokenizerKind::Regexes(vec![
                r"[\p{P}\$\+<=>\^~\|]+".into(),
                GPT2_RE.into(),
                r"\p{N}+".into(),
                "[0-9][0-9][0-9]".into(),
            ]),
            false,
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" => cfg(PreTokenizerKind::Llama3 { max_digits: 3 }, true, true),
        "dbrx" | "smaug-bpe" => cfg(PreTokenizerKind::Llama3 { max_digits: 3 }, false, false),
        "glm4" | "chatglm-bpe" => PreConfig {
            clears_bos: true,
            ..cfg(PreTokenizerKind::Llama3 { max_digits: 3 }, false, false)
        },
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" => {
            cfg(PreTokenizerKind::Llama3 { max_digits: 1 }, false, false)
        }
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "mpt" | "olmo" | "jais" | "trillion" | "granite-docling"
        | "exaone4" => cfg(gpt2_like(), false, false),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b" => {
            cfg(
                PreTokenizerKind::Regexes(vec![r"\p{N}".into(), GPT2_RE.into()]),
                false,
                false,
            )
        }
        "deepseek-v3" | "hunyuan-dense" => cfg(
            PreTokenizerKind::Regexes(vec![
                r"\p{N}{1,3}".into(),
                "[一-龥぀-ゟ゠-ヿ]+".into(),
                r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##.into(),
            ]),
            false,
            false,
        ),
        "deepseek-coder" => cfg(
            PreTokenizerKind::Regexes(vec![
                "[\r\n]".into(),
                r"\s?\p{L}+".into(),
                r"\s?\p{P}+".into(),
                "[一-龥ࠀ-一가-퟿]+".into(),
                r"\p{N}".into(),
            ]),
            false,
            false,
        ),
        "falcon" => cfg(
            PreTokenizerKind::Regexes(vec![
                r"[\p{P}\$\+<=>\^~\|`]+".into(),
                GPT2_RE.into(),
                "[0-9][0-9][0-9]".into(),
            ]),
            false,
            false,
        ),
        other => return Err(TokenizerError::UnknownPre(other.to_string())),
    })
}

impl PreTokenizerImpl {
    pub(crate) fn new(kind: PreTokenizerKind) -> Result<Self, TokenizerError> {
        let splits = match &kind {
            PreTokenizerKind::Regexes(res) => res
                .iter()
                .map(|r| regex_split(r))
                .collect::<Result<Vec<_>, _>>()?,
            _ => Vec::new(),
        };
        // Build the class table now rather than on the first encode.
        class_table();
        Ok(Self { kind, splits })
    }

    /// Calls `f` with each pre-token of `text`, in order; the pieces concatenate to `text`.
    pub(crate) fn for_each<'t>(&self, text: &'t str, mut f: impl FnMut(&'t str)) {
        match &self.kind {
            PreTokenizerKind::Gpt2 => scan_gpt2(text, f),
            PreTokenizerKind::Llama3 { max_digits } => scan_llama3(text, *max_digits, f),
            PreTokenizerKind::Regexes(_) => {
                let mut pts = PreTokenizedString::from(text);
                for s in &self.splits {
                    // A regex that compiled cannot fail to split.
                    let _ = s.pre_tokenize(&mut pts);
                }
                for (_, (a, b), _) in pts.get_splits(OffsetReferential::Original, OffsetType::Byte)
                {
                    f(&text[a..b]);
                }
            }
        }
    }
}

pub(crate) fn regex_split(re: &str) -> Result<Split, TokenizerError> {
    Split::new(
        SplitPattern::Regex(re.to_string()),
        SplitDelimiterBehavior::Isolated,
        false,
    )
    .map_err(|e| TokenizerError::Hf(format!("regex {re:?}: {e}")))
}

/// Byte offsets and chars of `text`, for scanners that look ahead.
struct Cursor<'t> {
    text: &'t str,
    chars: Vec<(usize, char)>,
}

impl<'t> Cursor<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            text,
            chars: text.char_indices().collect(),
        }
    }
    #[inline]
    fn byte(&self, i: usize) -> usize {
        self.chars.get(i).map_or(self.text.len(), |c| c.0)
    }
    #[inline]
    fn ch(&self, i: usize) -> Option<char> {
        self.chars.get(i).map(|c| c.1)
    }
}

fn scan_gpt2<'t>(text: &'t str, mut f: impl FnMut(&'t str)) {
    let t = class_table();
    let cur = Cursor::new(text);
    let n = cur.chars.len();
    let cls = |i: usize| cur.ch(i).map_or(0, |c| class(t, c));
    let is_other = |i: usize| i < n && cls(i) & (LETTER | NUMBER | SPACE) == 0;
    let mut i = 0;
    while i < n {
        let c = cur.chars[i].1;
        let start = i;
        let mut end = None;
        if c == '\'' {
            let c1 = cur.ch(i + 1);
            let c2 = cur.ch(i + 2);
            if matches!(c1, Some('s' | 't' | 'm' | 'd')) {
                end = Some(i + 2);
            } else if matches!(
                (c1, c2),
                (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
            ) {
                end = Some(i + 3);
            }
        }
        if end.is_none() {
            let j = if c == ' ' { i + 1 } else { i };
            let run = |mut k: usize, pred: &dyn Fn(usize) -> bool| {
                while k < n && pred(k) {
                    k += 1;
                }
                k
            };
            if j < n && cls(j) & LETTER != 0 {
                end = Some(run(j, &|k| cls(k) & LETTER != 0));
            } else if j < n && cls(j) & NUMBER != 0 {
                end = Some(run(j, &|k| cls(k) & NUMBER != 0));
            } else if is_other(j) {
                end = Some(run(j, &|k| is_other(k)));
            } else {
                // \s+(?!\S): a whitespace run, minus its last char when a non-space follows.
                let k = run(i, &|k| cls(k) & SPACE != 0);
                end = Some(if k == n || k - i < 2 {
                    k.max(i + 1)
                } else {
                    k - 1
                });
            }
        }
        let e = end.unwrap_or(i + 1);
        f(&text[cur.byte(start)..cur.byte(e)]);
        i = e;
    }
}

fn scan_llama3<'t>(text: &'t str, max_digits: usize, mut f: impl FnMut(&'t str)) {
    let t = class_table();
    let cur = Cursor::new(text);
    let n = cur.chars.len();
    let cls = |i: usize| cur.ch(i).map_or(0, |c| class(t, c));
    let is_other = |i: usize| i < n && cls(i) & (LETTER | NUMBER | SPACE) == 0;
    let is_rn = |i: usize| matches!(cur.ch(i), Some('\r' | '\n'));
    let mut i = 0;
    while i < n {
        let c = cur.chars[i].1;
        let ci = cls(i);
        let e = 'm: {
            if c == '\'' {
                let l1 = cur.ch(i + 1).map(|c| c.to_ascii_lowercase());
                let l2 = cur.ch(i + 2).map(|c| c.to_ascii_lowercase());
                if matches!(l1, Some('s' | 't' | 'm' | 'd')) {
                    break 'm i + 2;
                }
                if matches!(
                    (l1, l2),
                    (Some('r'), Some('e')) | (Some('v'), Some('e')) | (Some('l'), Some('l'))
                ) {
                    break 'm i + 3;
                }
            }
            // [^\r\n\p{L}\p{N}]?\p{L}+
            let lead = ci & (LETTER | NUMBER) == 0 && !is_rn(i);
            if ci & LETTER != 0 || (lead && cls(i + 1) & LETTER != 0) {
                let mut k = i + 1;
                while k < n && cls(k) & LETTER != 0 {
                    k += 1;
                }
                break 'm k;
            }
            // \p{N}{1,D}
            if ci & NUMBER != 0 {
                let mut k = i + 1;
                while k < n && k - i < max_digits && cls(k) & NUMBER != 0 {
                    k += 1;
                }
                break 'm k;
            }
            // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
            let j = if c == ' ' { i + 1 } else { i };
            if is_other(j) {
                let mut k = j + 1;
                while is_other(k) {
                    k += 1;
                }
                while is_rn(k) {
                    k += 1;
                }
                break 'm k;
            }
            // Whitespace alternatives: \s*[\r\n]+ | \s+(?!\S) | \s+
            let mut k = i;
            let mut last_rn = None;
            while k < n && cls(k) & SPACE != 0 {
                if is_rn(k) {
                    last_rn = Some(k);
                }
                k += 1;
            }
            if let Some(r) = last_rn {
                break 'm r + 1;
            }
            if k > i {
                break 'm if k == n || k - i < 2 { k } else { k - 1 };
            }
            // Unreachable for valid classes (every char is letter, number, space or other).
            i + 1
        };
        f(&text[cur.byte(i)..cur.byte(e)]);
        i = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn via_regex(re: &str, text: &str) -> Vec<String> {
        let p = PreTokenizerImpl::new(PreTokenizerKind::Regexes(vec![re.to_string()])).unwrap();
        let mut v = Vec::new();
        p.for_each(text, |s| v.push(s.to_string()));
        v
    }

    fn via_scan(kind: PreTokenizerKind, text: &str) -> Vec<String> {
        let p = PreTokenizerImpl::new(kind).unwrap();
        let mut v = Vec::new();
        p.for_each(text, |s| v.push(s.to_string()));
        v
    }

    const SAMPLES: &[&str] = &[
        "Hello world",
        "tabs\tand\nnewlines\n\n",
        "Unicode: naïve café 日本語 🚀",
        "    def foo(self, x):\n        return x ** 2",
        "I'm here, they'RE 'll  'x  12345 and 3.14159!!\r\n\r\n  \t end   ",
        "a  \n  b\u{a0}\u{a0}c\u{3000}d ½ ²³ x\u{85}y ' ''' \"q\"",
        " ",
        "  ",
        "\n",
        "x ",
        "x  ",
        " !!\n\n x",
    ];

    #[test]
    fn scanners_match_regex() {
        for s in SAMPLES {
            assert_eq!(
                via_scan(PreTokenizerKind::Gpt2, s),
                via_regex(GPT2_RE, s),
                "{s:?}"
            );
            for d in [1, 3] {
                assert_eq!(
                    via_scan(PreTokenizerKind::Llama3 { max_digits: d }, s),
                    via_regex(&llama3_re(d), s),
                    "{s:?}"
                );
            }
        }
    }

    #[test]
    fn unknown_pre_is_named() {
        let e = pre_config("no-such-pre").err().unwrap();
        assert!(e.to_string().contains("no-such-pre"));
    }
}
