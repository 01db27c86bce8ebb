//! The constraint over a small SentencePiece vocabulary (bytes plus a few JSON-ish pieces) and,
//! on a random model of that vocabulary, constrained decoding with and without drafts.

use super::*;
use crate::arch::glm_moe_dsa::glm_5_2_tiny;
use crate::decoder::Decoder;
use crate::generate::{GenerateParams, Session, StopReason};
use crate::sampling::{Sampler, SamplerConfig};
use crate::speculative::{AdaptiveDraft, Drafter, Speculation};
use ferrox_tokenizer::{SpecialTokens, TokenizerSpec};
use serde_json::json;

const PIECES: [&str; 12] = [
    "{\"",
    "\":",
    "\",\"",
    "\"}",
    "true",
    "false",
    "null",
    "12",
    "name",
    "age",
    "▁",
    "<|im_end|>",
];

/// `<unk> <s> </s>`, the 256 byte tokens, then [`PIECES`] (the last one a control token that
/// also ends generation).
fn tokenizer() -> Tokenizer {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        types.push(6);
    }
    for p in PIECES {
        tokens.push(p.into());
        types.push(if p.starts_with("<|") { 3 } else { 1 });
    }
    let n = tokens.len();
    Tokenizer::from_spec(TokenizerSpec {
        model: "llama".into(),
        tokens,
        scores: Some((0..n).map(|i| -(i as f32)).collect()),
        token_types: Some(types),
        special: SpecialTokens {
            bos: Some(1),
            eos: Some(2),
            eot: Some(n - 1),
            unk: Some(0),
            ..Default::default()
        },
        add_space_prefix: Some(false),
        add_bos: Some(false),
        ..Default::default()
    })
    .unwrap()
}

fn byte_token(b: u8) -> TokenId {
    3 + b as usize
}

fn allowed(mask: &[u32], t: TokenId) -> bool {
    mask.get(t / 32).is_some_and(|w| w >> (t % 32) & 1 != 0)
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "kind": {"enum": ["cat", "dog"]}
        },
        "required": ["name", "age", "kind"],
        "additionalProperties": false
    })
}

#[test]
fn mask_follows_the_schema_and_ends_with_eog_only() {
    let tok = tokenizer();
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let mut c = compiler
        .compile(&Grammar::JsonSchema {
            schema: person_schema(),
            strict: true,
        })
        .unwrap();
    let first = c.mask().unwrap().to_vec();
    assert!(allowed(&first, byte_token(b'{')));
    assert!(!allowed(&first, byte_token(b'[')));
    assert!(!allowed(&first, 2), "EOS before any JSON");
    let text = br#"{"name":"Al","age":42,"kind":"dog"}"#;
    for &b in text {
        let t = byte_token(b);
        assert!(allowed(c.mask().unwrap(), t), "{:?} refused", b as char);
        c.commit(t).unwrap();
    }
    let last = c.mask().unwrap().to_vec();
    let set: Vec<TokenId> = (0..tok.vocab_size())
        .filter(|&t| allowed(&last, t))
        .collect();
    assert_eq!(
        set,
        tok.eog_ids(),
        "only end-of-generation tokens once complete"
    );
    assert!(c.is_finished());
    assert_eq!(c.error(), None);
    assert_eq!(c.stats.committed, text.len() as u64);
    // EOG taken as text (ignore_eog) keeps the finished grammar finished; other text fails it.
    c.commit(2).unwrap();
    assert!(c.is_finished());
    assert!(c.commit(byte_token(b' ')).is_err());
}

#[test]
fn enum_and_bounds_are_enforced() {
    let tok = tokenizer();
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let g = Grammar::JsonSchema {
        schema: person_schema(),
        strict: true,
    };
    let mut c = compiler.compile(&g).unwrap();
    for &b in br#"{"name":"Al","age":1"# {
        c.commit(byte_token(b)).unwrap();
    }
    // 1 then 2 then 1 would be 121 > 120; "12" is fine.
    assert!(allowed(c.mask().unwrap(), byte_token(b'2')));
    c.commit(byte_token(b'2')).unwrap();
    assert!(allowed(c.mask().unwrap(), byte_token(b'0')));
    assert!(!allowed(c.mask().unwrap(), byte_token(b'1')));
    for &b in br#","kind":"c"# {
        c.commit(byte_token(b)).unwrap();
    }
    assert!(allowed(c.mask().unwrap(), byte_token(b'a')));
    assert!(!allowed(c.mask().unwrap(), byte_token(b'o')));
    // A token the mask refuses is an error, and the constraint stays failed.
    assert!(c.commit(byte_token(b'o')).is_err());
    assert!(c.error().is_some());
    assert!(c.mask().is_err());
}

#[test]
fn bad_grammars_are_refused_with_llguidance_s_message() {
    let tok = tokenizer();
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let bad = [
        Grammar::JsonSchema {
            schema: json!({"type": "object", "properties": {"a": {"type": "strnig"}}}),
            strict: true,
        },
        Grammar::JsonSchema {
            schema: json!("not a schema"),
            strict: true,
        },
        Grammar::Lark("start: foo".into()),
        Grammar::Gbnf("root ::= foo".into()),
    ];
    for g in bad {
        let e = compiler.compile(&g).unwrap_err();
        assert!(!e.to_string().is_empty(), "{g:?}");
    }
    // Unknown keywords: refused when strict, ignored otherwise.
    let odd = json!({"type": "object", "properties": {"a": {"type": "string", "x-odd": 1, "contentEncoding": "base64"}}});
    let lenient = Grammar::JsonSchema {
        schema: odd,
        strict: false,
    };
    assert!(compiler.compile(&lenient).is_ok());
}

#[test]
fn gbnf_and_lark_grammars_constrain() {
    let tok = tokenizer();
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let mut c = compiler
        .compile(&Grammar::Gbnf(
            "root ::= (\"yes\" | \"no\") \" \" [0-9]{2}\n".into(),
        ))
        .unwrap();
    assert!(allowed(c.mask().unwrap(), byte_token(b'y')));
    assert!(!allowed(c.mask().unwrap(), byte_token(b'x')));
    for &b in b"no 4" {
        c.commit(byte_token(b)).unwrap();
    }
    assert!(!allowed(c.mask().unwrap(), 2));
    c.commit(byte_token(b'2')).unwrap();
    assert!(c.is_finished());
    // Lark naming a special token: the tool-call shape a server can force.
    let lark = r#"start: <|im_end|> "x" | "y""#;
    let mut c = compiler.compile(&Grammar::Lark(lark.into())).unwrap();
    let im_end = tok.vocab_size() - 1;
    assert!(allowed(c.mask().unwrap(), im_end));
    assert!(allowed(c.mask().unwrap(), byte_token(b'y')));
    assert!(!allowed(c.mask().unwrap(), byte_token(b'x')));
}

/// Another token of the same kind for a whitespace, letter or digit byte token.
fn swap(t: TokenId) -> Option<TokenId> {
    let b = u8::try_from(t.checked_sub(3)?).ok()?;
    let to = match b {
        b' ' => b'\n',
        b'\n' => b'\t',
        b'\t' | b'\r' => b' ',
        b'z' | b'Z' | b'9' => b - 1,
        b if b.is_ascii_alphanumeric() => b + 1,
        _ => return None,
    };
    Some(byte_token(to))
}

/// Proposes the continuation of a known output, with every third draft corrupted at its first
/// whitespace, letter or digit after the first token (another of the kind: the grammar allows
/// it, the model rejects it) and every fifth ending in a token no JSON allows (pruned before
/// the forward).
struct Oracle {
    prompt: usize,
    out: Vec<TokenId>,
    calls: usize,
}

impl Drafter for Oracle {
    fn propose_into(&mut self, history: &[TokenId], max: usize, out: &mut Vec<TokenId>) {
        self.calls += 1;
        let done = history.len() - self.prompt;
        let start = out.len();
        out.extend(self.out.iter().skip(done).take(max));
        if self.calls.is_multiple_of(3) {
            if let Some(t) = out.iter_mut().skip(start + 1).find(|t| swap(**t).is_some()) {
                *t = swap(*t).unwrap_or(*t);
            }
        }
        if self.calls.is_multiple_of(5) {
            out.push(byte_token(0x01));
        }
    }
    fn name(&self) -> &'static str {
        "oracle"
    }
}

#[test]
fn speculative_constrained_output_is_plain_constrained_output() {
    let tok = tokenizer();
    let decoder = Decoder::new_random_small(glm_5_2_tiny(), 2, tok.vocab_size());
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let grammar = Grammar::JsonSchema {
        schema: person_schema(),
        strict: true,
    };
    let prompt: Vec<TokenId> = vec![1, byte_token(b'a'), byte_token(b'b')];
    let configs = [
        SamplerConfig::greedy(),
        SamplerConfig {
            repeat_penalty: 1.3,
            ..SamplerConfig::greedy()
        },
        SamplerConfig {
            temperature: 0.9,
            seed: 7,
            ..SamplerConfig::default()
        },
        SamplerConfig {
            temperature: 1.5,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            presence_penalty: 0.5,
            seed: 3,
            ..SamplerConfig::default()
        },
    ];
    for cfg in configs {
        let params = GenerateParams {
            max_tokens: 120,
            constraint: Some(compiler.compile(&grammar).unwrap()),
            ..GenerateParams::default()
        };
        let mut plain = Session::new(&decoder, &tok, 256);
        let p = plain.generate(&prompt, &params, &mut Sampler::new(cfg.clone()), |_| true);
        assert_eq!(p.stop, StopReason::Eog, "{cfg:?}: {:?}", p.text);
        let v: Value = serde_json::from_str(&p.text).unwrap_or_else(|e| panic!("{e}: {}", p.text));
        assert!(
            v["name"].as_str().is_some_and(|s| s.chars().count() <= 6),
            "{v}"
        );
        assert!(v["age"].as_u64().is_some_and(|a| a <= 120), "{v}");
        assert!(matches!(v["kind"].as_str(), Some("cat" | "dog")), "{v}");
        assert_eq!(v.as_object().map(|o| o.len()), Some(3), "{v}");
        let stats = p.constraint.unwrap();
        assert!(stats.masks as usize > p.tokens.len(), "{stats:?}");

        let mut spec = Session::new(&decoder, &tok, 256);
        let mut s = Speculation::new(
            Box::new(Oracle {
                prompt: prompt.len(),
                out: p.tokens.clone(),
                calls: 0,
            }),
            4,
        );
        s.adaptive = AdaptiveDraft::fixed(4);
        spec.set_speculation(Some(s));
        let q = spec.generate(&prompt, &params, &mut Sampler::new(cfg.clone()), |_| true);
        assert_eq!(q.tokens, p.tokens, "{cfg:?}");
        assert_eq!(q.text, p.text);
        assert_eq!(q.stop, p.stop);
        assert!(
            q.spec.accepted > 0 && q.spec.accepted < q.spec.drafted,
            "{:?}",
            q.spec
        );
        // One mask per committed token either way (plus the final EOG row): drafts cost none.
        assert_eq!(q.constraint.unwrap().masks, stats.masks, "{cfg:?}");
    }
}

#[test]
fn a_failing_grammar_ends_the_generation_with_an_error() {
    let tok = tokenizer();
    let decoder = Decoder::new_random_small(glm_5_2_tiny(), 2, tok.vocab_size());
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let mut c = compiler.compile(&Grammar::JsonObject).unwrap();
    // Broken on purpose: a token the grammar refuses.
    assert!(c.commit(byte_token(b'x')).is_err());
    let params = GenerateParams {
        max_tokens: 20,
        constraint: Some(c),
        ..GenerateParams::default()
    };
    let mut s = Session::new(&decoder, &tok, 64);
    let out = s.generate(
        &[1, 5],
        &params,
        &mut Sampler::new(SamplerConfig::greedy()),
        |_| true,
    );
    assert_eq!(out.stop, StopReason::Grammar);
    assert!(out.tokens.is_empty());
    assert!(out.error.is_some_and(|e| !e.is_empty()));
}

/// Grammars built to be expensive neither stall nor panic: compiling is lazy in llguidance, and
/// each mask is bounded by the lexer's fuel and state limits (a limit hit is an error).
#[test]
fn hostile_grammars_neither_stall_nor_panic() {
    let tok = tokenizer();
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let t = std::time::Instant::now();
    // A regex whose DFA is exponential in the bound (built lazily, state by state).
    let blowup = Grammar::JsonSchema {
        schema: json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|b)*a(a|b){40}$"}}, "required": ["s"]}),
        strict: true,
    };
    // A large enum (about the size the server's 1 MiB cap lets through).
    let huge = Grammar::JsonSchema {
        schema: json!({"enum": (0..60_000).map(|i| format!("value number {i}")).collect::<Vec<_>>()}),
        strict: true,
    };
    for g in [blowup, huge] {
        match compiler.compile(&g) {
            Err(e) => eprintln!("refused: {e}"),
            Ok(mut c) => {
                let mut steps = 0;
                // Whatever it allows, walk greedily; the mask must fail or the walk finish.
                while let Ok(m) = c.mask() {
                    let Some(t) = (0..tok.vocab_size()).find(|&t| allowed(m, t)) else {
                        break;
                    };
                    if tok.is_eog(t) || steps > 200 || c.commit(t).is_err() {
                        break;
                    }
                    steps += 1;
                }
                eprintln!("ran {steps} steps, error {:?}", c.error());
            }
        }
    }
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
}

/// llama.cpp's `grammars/json.gbnf`, as it ships: multi-line rules, an empty alternative,
/// escapes in classes, comments.
const JSON_GBNF: &str = r#"root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[test]
fn llama_cpp_json_gbnf_compiles_and_constrains() {
    let tok = tokenizer();
    let compiler = GrammarCompiler::new(&tok, tok.vocab_size()).unwrap();
    let mut c = compiler
        .compile(&Grammar::Gbnf(JSON_GBNF.into()))
        .unwrap_or_else(|e| panic!("{e}\n{}", gbnf_to_lark(JSON_GBNF).unwrap()));
    for &b in br#"{"a": [1.5, "x\n", true], "b": {}}"# {
        assert!(allowed(c.mask().unwrap(), byte_token(b)), "{:?}", b as char);
        c.commit(byte_token(b)).unwrap();
    }
    assert!(allowed(c.mask().unwrap(), 2), "complete: EOS allowed");
    assert!(!allowed(c.mask().unwrap(), byte_token(b'x')));
}
