//! Structured output by constrained sampling with llguidance (guidance-ai/llguidance, the
//! engine llama.cpp and vLLM use; its docs: `README.md`, `docs/syntax.md` for the Lark dialect
//! and JSON schema support). A [`Grammar`] (OpenAI structured outputs' `json_object` and
//! `json_schema`, llama.cpp's GBNF, llguidance's Lark, or any llguidance `TopLevelGrammar`) is
//! compiled once per request by the model's [`GrammarCompiler`] into a [`Constraint`], which
//! the engine attaches to the request: before each token the constraint gives the set of
//! allowed tokens, the sampler draws only among them, and each committed token advances it.
//!
//! Exactness under speculation: `speculative::verify_tree` asks for the mask of row
//! `i` after the tokens committed before it and advances the constraint only on commit, so a
//! rejected draft token never touches it: constrained output with drafts is constrained output
//! without them, token for token.
//!
//! End of generation: once the grammar is complete llguidance allows only end-of-generation
//! tokens (the tokenizer's EOG ids are the trie's EOS set), the sampler picks one and the
//! stop rules end the generation as at any EOG token. A grammar that can no longer continue
//! (llguidance's limits hit, an internal error) is an error the engine reports, not text.

mod gbnf;

pub use gbnf::{gbnf_to_lark, GbnfError};
pub use llguidance;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrox_tokenizer::{TokenId, Tokenizer};
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{SimpleVob, TokRxInfo, TokTrie, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// The grammar or schema was refused (llguidance's message).
    #[error("{0}")]
    Grammar(String),
    #[error(transparent)]
    Gbnf(#[from] GbnfError),
    #[error("the tokenizer has no end-of-generation token to end a constrained generation with")]
    NoEog,
    /// The constraint could not go on during generation.
    #[error("constrained generation failed: {0}")]
    Failed(String),
}

/// A grammar as a request states it.
#[derive(Debug, Clone)]
pub enum Grammar {
    /// Any JSON object (OpenAI `response_format: {"type": "json_object"}`).
    JsonObject,
    /// JSON valid under `schema`. `strict` (OpenAI `json_schema.strict`) refuses schema
    /// keywords llguidance cannot enforce; without it they are ignored (llguidance `lenient`).
    JsonSchema { schema: Value, strict: bool },
    /// llguidance's Lark dialect (may embed `%json { schema }`, special tokens like
    /// `<|tool_call|>`, regexes).
    Lark(String),
    /// llama.cpp's GBNF, converted to Lark ([`gbnf_to_lark`]).
    Gbnf(String),
    /// A grammar built with llguidance's own API.
    TopLevel(TopLevelGrammar),
}

/// Whitespace a JSON grammar allows between tokens: a space or two, or one line break and an
/// indent of at most 20 (llama.cpp's schema converter allows one space or a line break and 20),
/// so a model cannot fill its budget with blank lines.
const JSON_WHITESPACE: &str = r"(?:[\x20\x09]{1,2}|\x0D?\x0A[\x20\x09]{0,20})";

impl Grammar {
    /// The llguidance grammar this stands for.
    pub fn to_top_level(&self) -> Result<TopLevelGrammar, ConstraintError> {
        Ok(match self {
            Grammar::JsonObject => TopLevelGrammar::from_json_schema(json_options(
                serde_json::json!({"type": "object"}),
                true,
            )),
            Grammar::JsonSchema { schema, strict } => {
                if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
                    return Err(ConstraintError::Grammar(
                        "a JSON schema must be an object".into(),
                    ));
                }
                TopLevelGrammar::from_json_schema(json_options(schema.clone(), *strict))
            }
            Grammar::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
            Grammar::Gbnf(text) => TopLevelGrammar::from_lark(gbnf_to_lark(text)?),
            Grammar::TopLevel(g) => g.clone(),
        })
    }
}

/// `schema` with ferrox's JSON options (`x-guidance`, llguidance's per-schema options) unless
/// it brings its own.
fn json_options(mut schema: Value, strict: bool) -> Value {
    if let Value::Object(map) = &mut schema {
        map.entry("x-guidance").or_insert_with(|| {
            serde_json::json!({
                "whitespace_pattern": JSON_WHITESPACE,
                "lenient": !strict,
            })
        });
    }
    schema
}

/// Limits on what one grammar may cost (llguidance `ParserLimits`): a huge or hostile schema
/// fails to compile, or fails its generation, instead of stalling the engine. llguidance's
/// defaults, with the grammar size and the per-token work bounded tighter.
fn limits() -> ParserLimits {
    ParserLimits {
        // Symbols in productions: a few megabytes of JSON schema at the default 500k.
        max_grammar_size: 200_000,
        // Lexer work to build the grammar's regexes (about 50k/ms): at most ~20 ms.
        initial_lexer_fuel: 1_000_000,
        // Per token mask (about 14k/ms and 20k/ms): at most ~15 ms and ~2.5 ms.
        step_lexer_fuel: 200_000,
        step_max_items: 50_000,
        // Errors carry llguidance's message, not the parser state and grammar.
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

/// The tokenizer as llguidance sees it: every token's bytes in a trie. Tokens are bytes as
/// `Tokenizer::token_to_piece` renders them; control tokens are marked special (llguidance's
/// `\xFF` prefix), so only a grammar naming them (or the end of the grammar, for EOG tokens)
/// allows them. Ids the model has no logits for are empty (never allowed).
struct TokEnv {
    trie: TokTrie,
}

impl TokenizerEnv for TokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// Only used by llguidance for text it tokenizes itself (forced tokens are off, see
    /// `tokenize_is_canonical`): the trie's greedy tokenization is enough.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.trie.greedy_tokenize(s)
    }

    /// Greedy tokenization is not the model's, so llguidance must not force tokens from it.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// Compiles grammars for one model: built once per tokenizer (the token trie and llguidance's
/// precomputed token slices), shared by every request.
pub struct GrammarCompiler {
    factory: ParserFactory,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler")
            .field("vocab", &self.factory.tok_env().tok_trie().vocab_size())
            .finish()
    }
}

impl GrammarCompiler {
    /// The compiler for `tokenizer`'s vocabulary, for a model with `model_vocab` logits.
    pub fn new(tokenizer: &Tokenizer, model_vocab: usize) -> Result<Self, ConstraintError> {
        let n = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..n)
            .map(|id| {
                let piece = tokenizer.token_to_piece(id);
                if id >= model_vocab {
                    Vec::new()
                } else if tokenizer.is_special(id) {
                    let mut w = Vec::with_capacity(piece.len() + 1);
                    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                    w.extend_from_slice(piece);
                    w
                } else {
                    piece.to_vec()
                }
            })
            .collect();
        let eog: Vec<u32> = tokenizer
            .eog_ids()
            .iter()
            .filter(|&&t| t < n.min(model_vocab))
            .map(|&t| t as u32)
            .collect();
        let Some(&first) = eog.first() else {
            return Err(ConstraintError::NoEog);
        };
        let info = TokRxInfo {
            vocab_size: n as u32,
            tok_eos: first,
            tok_bos: tokenizer.bos_id().map(|t| t as u32),
            tok_pad: None,
            tok_unk: None,
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eog);
        let env: llguidance::toktrie::TokEnv = Arc::new(TokEnv { trie });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstraintError::Grammar(e.to_string()))?;
        // Warnings go into the error messages, not to the server's stderr.
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(GrammarCompiler { factory })
    }

    /// The constraint of one generation under `grammar`.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, ConstraintError> {
        self.compile_top_level(grammar.to_top_level()?)
    }

    /// The constraint of one generation under an llguidance grammar (the hook for callers
    /// that build theirs with llguidance's API, e.g. tool calls).
    pub fn compile_top_level(
        &self,
        grammar: TopLevelGrammar,
    ) -> Result<Constraint, ConstraintError> {
        // llguidance catches its own panics in the matcher; compilation is guarded here too so
        // a grammar that trips one is a refused grammar.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.factory.create_parser(grammar)
        }))
        .map_err(|_| ConstraintError::Grammar("the grammar compiler failed".into()))?
        .map_err(|e| ConstraintError::Grammar(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(ConstraintError::Grammar(e));
        }
        Ok(Constraint {
            matcher,
            mask: None,
            failed: None,
            stats: ConstraintStats::default(),
        })
    }
}

/// Time spent on masks, for logs and tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConstraintStats {
    pub masks: u64,
    pub mask_time: Duration,
    pub committed: u64,
}

/// One generation's grammar state: the tokens allowed next, advanced token by token.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    /// The mask of the current state, once computed.
    mask: Option<SimpleVob>,
    /// Why the constraint stopped working, once it has.
    failed: Option<String>,
    pub stats: ConstraintStats,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .field("error", &self.matcher.get_error())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Constraint {
    /// The tokens allowed next as a bitset (bit `t % 32` of word `t / 32`; tokens past the
    /// end are not allowed). Once the grammar is complete, only end-of-generation tokens.
    pub fn mask(&mut self) -> Result<&[u32], ConstraintError> {
        if let Some(e) = &self.failed {
            return Err(ConstraintError::Failed(e.clone()));
        }
        if self.mask.is_none() {
            let t = Instant::now();
            let m = self.matcher.compute_mask_or_eos();
            self.stats.masks += 1;
            self.stats.mask_time += t.elapsed();
            let m = match m {
                Ok(m) if !m.is_zero() => m,
                Ok(_) => return Err(self.fail("the grammar allows no token".into())),
                Err(e) => return Err(self.fail(e.to_string())),
            };
            self.mask = Some(m);
        }
        Ok(self.mask.as_ref().map_or(&[], |m| m.as_slice()))
    }

    /// Advances the grammar by a committed token (one the mask allowed).
    pub fn commit(&mut self, token: TokenId) -> Result<(), ConstraintError> {
        self.mask = None;
        if let Some(e) = &self.failed {
            return Err(ConstraintError::Failed(e.clone()));
        }
        // With end-of-generation tokens taken as text (`ignore_eog`, no tokenizer), a finished
        // grammar keeps allowing them: they change nothing.
        if self.is_finished() && self.is_eos(token) {
            self.stats.committed += 1;
            return Ok(());
        }
        let r = u32::try_from(token)
            .map_err(|_| format!("token id {token} out of range"))
            .and_then(|t| self.matcher.consume_token(t).map_err(|e| e.to_string()));
        match r {
            Ok(()) => {
                self.stats.committed += 1;
                Ok(())
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn is_eos(&self, token: TokenId) -> bool {
        self.matcher.tok_env().is_ok_and(|e| {
            e.tok_trie()
                .eos_tokens()
                .iter()
                .any(|&t| t as usize == token)
        })
    }

    fn fail(&mut self, e: String) -> ConstraintError {
        self.failed = Some(e.clone());
        ConstraintError::Failed(e)
    }

    /// How many leading tokens of `draft` the grammar accepts from here (the state is left as
    /// it is): drafts the grammar forbids need not be verified.
    pub fn valid_prefix(&mut self, draft: &[TokenId]) -> usize {
        if draft.is_empty() || self.matcher.is_stopped() {
            return 0;
        }
        let Ok(vocab) = self.matcher.tok_env().map(|e| e.tok_trie().vocab_size()) else {
            return 0;
        };
        let known: Vec<u32> = draft
            .iter()
            .take_while(|&&t| t < vocab)
            .map(|&t| t as u32)
            .collect();
        // A speculative run in llguidance: the parser state is restored. An error only loses
        // the draft; the next mask reports a broken grammar.
        self.matcher.validate_tokens(&known).unwrap_or(0)
    }

    /// The grammar is complete: only end-of-generation tokens are allowed.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && self.error().is_none()
    }

    /// Why the constraint cannot go on, once it cannot.
    pub fn error(&self) -> Option<String> {
        self.failed.clone().or_else(|| self.matcher.get_error())
    }
}

#[cfg(test)]
mod tests;
