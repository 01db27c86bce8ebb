//! The real engine behind ferrox-server's `Backend` trait: a loaded `Decoder` and its
//! tokenizer, requests run on a continuous-batching `BatchEngine` (one batched forward per step
//! for all slots, each slot with its own KV caches, prefix reuse and longest-match drafts).
//! `ferrox serve` puts it behind HTTP; the Python bindings (bindings/python) call the same
//! routes in-process, so both share one request path down to the engine loop.

use std::sync::{Arc, OnceLock};

use ferrox_models::decoder::Decoder;
use ferrox_models::embedding::{self, Pooling};
use ferrox_models::engine::prefix_disk::{CacheKey, PrefixDisk};
use ferrox_models::engine::slot_file::SlotFileError;
use ferrox_models::engine::{BatchEngine, BatchEvent, BatchParams, GenerateParams};
use ferrox_models::generate::StopReason;
use ferrox_models::speculative::DraftModel;
use ferrox_models::structured::{Constraint, Grammar, GrammarCompiler};
use ferrox_server::api::{ChatMessage, ChatPrompt};
use ferrox_server::backend::{
    Backend, BackendError, CacheUsage, CompiledGrammar, DraftCount, Event, FinishReason, GenParams,
    GenSummary, GrammarSpec, RenderedChat, SlotAction, SlotDone, SlotError, Stepper, TokenLogprob,
};
use ferrox_tokenizer::chat_output::ToolFormat;
use ferrox_tokenizer::fim::FimInput;
use ferrox_tokenizer::template::{render_chat_text, ChatTemplate, Message};
use ferrox_tokenizer::{TokenId, Tokenizer};

/// How a [`ModelBackend`] serves its model.
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// The id answered in `model` fields.
    pub id: String,
    /// Other names accepted in `model`.
    pub aliases: Vec<String>,
    /// Context size of each slot (clamped to the model's).
    pub ctx: usize,
    /// Decode without longest-match drafts.
    pub no_spec: bool,
    /// Embedding pooling (default: the GGUF's `pooling_type`, else last).
    pub pooling: Option<Pooling>,
    /// Prefix-cache budget in bytes (0: off).
    pub cache_bytes: usize,
    /// Tokens of finished generations the drafters recall (0: off).
    pub recall_tokens: usize,
    /// The prefix cache's blocks on disk (`--cache-dir`), if any.
    pub cache_disk: Option<CacheDiskConfig>,
    /// The model file's identity (`prefix_disk::model_identity`): saved slot files carry it,
    /// and only files with the same one are restored (None: zeros, any file of the same
    /// shapes is taken).
    pub identity: Option<[u8; 32]>,
    /// A draft model drafting beside every slot's own drafter (`--draft-model`).
    pub draft: Option<DraftModel>,
}

/// Where the prefix cache persists (`--cache-dir`, `--cache-disk-mb`).
#[derive(Debug, Clone)]
pub struct CacheDiskConfig {
    pub dir: std::path::PathBuf,
    /// Bytes the model's directory may take.
    pub budget: u64,
    /// The model file's identity (`prefix_disk::model_identity`).
    pub model: [u8; 32],
}

/// Opens the disk side of the prefix cache, or says (in the log) why it stays off.
fn open_cache_disk(
    decoder: &Decoder,
    cache_bytes: usize,
    cfg: Option<CacheDiskConfig>,
) -> Option<Arc<PrefixDisk>> {
    let cfg = cfg?;
    if cache_bytes == 0 {
        tracing::warn!("--cache-dir ignored: the prefix cache is off (--cache-ram 0)");
        return None;
    }
    if decoder.has_recurrent_layers() {
        tracing::warn!(
            "--cache-dir ignored: this model has recurrent layers, whose state no prefix \
             cache can keep"
        );
        return None;
    }
    let key = CacheKey::new(cfg.model, decoder.cache_format());
    let warn: ferrox_models::engine::prefix_disk::Warn = Arc::new(|m| tracing::warn!("{m}"));
    match PrefixDisk::open(&cfg.dir, key, cfg.budget, warn) {
        Ok(d) => Some(Arc::new(d)),
        Err(e) => {
            tracing::warn!(
                "--cache-dir {}: {e}; prompts are not persisted",
                cfg.dir.display()
            );
            None
        }
    }
}

impl ModelBackend {
    /// A backend owning its model: the weights are freed (their file unmapped) once the
    /// backend and the engines borrowing it are gone, so a server can unload a model.
    pub fn new(
        decoder: Arc<Decoder>,
        tokenizer: Arc<Tokenizer>,
        config: BackendConfig,
    ) -> ModelBackend {
        let pooling = config
            .pooling
            .or_else(|| decoder.gguf.as_deref().and_then(Pooling::from_gguf))
            .unwrap_or(Pooling::Last);
        let cache_disk = open_cache_disk(&decoder, config.cache_bytes, config.cache_disk);
        ModelBackend {
            id: config.id,
            aliases: config.aliases,
            ctx: config.ctx.min(decoder.config.max_seq_len.max(1)),
            no_spec: config.no_spec,
            template: ChatTemplate::for_tokenizer(&tokenizer).map_err(|e| e.to_string()),
            tool_format: ToolFormat::detect(tokenizer.chat_template().unwrap_or("")),
            decoder,
            tokenizer,
            grammars: OnceLock::new(),
            pooling,
            cache_bytes: config.cache_bytes,
            recall_tokens: config.recall_tokens,
            cache_disk,
            identity: config.identity.unwrap_or_default(),
            draft: config.draft,
        }
    }

    /// Waits (up to `timeout`) until the prefix cache's pending blocks are on disk (at
    /// shutdown); true when there was nothing to wait for.
    pub fn flush_cache_disk(&self, timeout: std::time::Duration) -> bool {
        self.cache_disk.as_ref().is_none_or(|d| d.flush(timeout))
    }

    pub fn decoder(&self) -> &Decoder {
        &self.decoder
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// An API message as the chat template expects it: text content, and tool calls whose
/// `arguments` are objects (the API sends JSON strings; templates write `arguments | tojson`,
/// so they are parsed first, as llama.cpp and vLLM do).
fn template_message(m: &ChatMessage) -> Message {
    let mut tool_calls = m.tool_calls.clone();
    if let Some(serde_json::Value::Array(calls)) = tool_calls.as_mut() {
        for c in calls {
            let args = c.pointer_mut("/function/arguments");
            if let Some(a) = args {
                if let Some(parsed) = a.as_str().and_then(|s| serde_json::from_str(s).ok()) {
                    *a = parsed;
                }
            }
        }
    }
    Message {
        role: m.role.clone(),
        content: m.content.text().unwrap_or_default(),
        tool_calls,
        tool_call_id: m.tool_call_id.clone(),
        name: m.name.clone(),
    }
}

pub struct ModelBackend {
    id: String,
    aliases: Vec<String>,
    decoder: Arc<Decoder>,
    tokenizer: Arc<Tokenizer>,
    ctx: usize,
    no_spec: bool,
    /// The model's chat template, compiled once (none: plain prompts); one that does not
    /// compile fails each chat request, not the server.
    template: Result<Option<ChatTemplate>, String>,
    /// The tool-call format that template teaches.
    tool_format: ToolFormat,
    /// Built on the first request with a grammar (the token trie takes a moment), then shared.
    grammars: OnceLock<Result<GrammarCompiler, String>>,
    pooling: Pooling,
    /// Prefix-cache budget in bytes.
    cache_bytes: usize,
    recall_tokens: usize,
    cache_disk: Option<Arc<PrefixDisk>>,
    identity: [u8; 32],
    draft: Option<DraftModel>,
}

/// The server's `Stepper` over the models' `BatchEngine`: requests in, events out.
struct ModelStepper<'m> {
    engine: BatchEngine<'m>,
    tokenizer: &'m Tokenizer,
    /// What saved slot files are written for and must match.
    slot_key: CacheKey,
    /// Generations whose log-probability tokens are named by id.
    tokens_as_ids: std::collections::HashSet<u64>,
}

impl Backend for ModelBackend {
    fn model_id(&self) -> &str {
        &self.id
    }
    fn aliases(&self) -> Vec<String> {
        self.aliases.clone()
    }
    fn ctx_size(&self) -> usize {
        self.ctx
    }
    fn vocab_size(&self) -> usize {
        // Ids the model has logits for (the tokenizer may list fewer).
        self.decoder.vocab_size()
    }
    fn chat_prompt(&self, chat: &ChatPrompt<'_>) -> Result<RenderedChat, BackendError> {
        let msgs: Vec<Message> = chat.messages.iter().map(template_message).collect();
        let tools = chat.tools.map(|t| serde_json::Value::Array(t.to_vec()));
        let template = self
            .template
            .as_ref()
            .map_err(|e| BackendError::Template(e.clone()))?;
        // Message text is tokenized as text: only the template's markers are control tokens.
        let tok = &*self.tokenizer;
        let chat = render_chat_text(tok, template.as_ref(), &msgs, tools.as_ref(), chat.kwargs)
            .map_err(|e| BackendError::Template(e.to_string()))?;
        Ok(RenderedChat {
            tokens: tok.encode_prompt(&chat.text, &chat.literal),
            tool_format: self.tool_format,
            // DeepSeek-R1-style templates open the reasoning block in the generation prompt.
            in_reasoning: chat.text.trim_end().ends_with("<think>"),
        })
    }
    fn text_prompt(&self, text: &str) -> Vec<TokenId> {
        self.tokenizer.encode(text, true, true)
    }
    fn fim_prompt(
        &self,
        input: &FimInput<'_>,
        max_tokens: Option<usize>,
    ) -> Result<Vec<TokenId>, BackendError> {
        self.tokenizer
            .fim_prompt(input, self.ctx, max_tokens)
            .map_err(|e| BackendError::Unsupported(e.to_string()))
    }
    fn tokenize(&self, text: &str, add_special: bool) -> Vec<TokenId> {
        self.tokenizer.encode(text, add_special, true)
    }
    fn detokenize(&self, ids: &[TokenId]) -> Result<String, BackendError> {
        let n = self.tokenizer.vocab_size();
        if let Some(bad) = ids.iter().find(|&&t| t >= n) {
            return Err(BackendError::BadTokens(format!(
                "token id {bad} is outside the vocabulary (size {n})"
            )));
        }
        Ok(self.tokenizer.decode(ids))
    }
    fn compile_grammar(&self, spec: &GrammarSpec) -> Result<CompiledGrammar, String> {
        let compiler = self
            .grammars
            .get_or_init(|| {
                let t = std::time::Instant::now();
                let c = GrammarCompiler::new(&self.tokenizer, self.decoder.vocab_size())
                    .map_err(|e| e.to_string());
                tracing::info!(
                    "grammar compiler built in {:.0} ms",
                    t.elapsed().as_secs_f64() * 1e3
                );
                c
            })
            .as_ref()?;
        let grammar = match spec {
            GrammarSpec::JsonObject => Grammar::JsonObject,
            GrammarSpec::JsonSchema { schema, strict } => Grammar::JsonSchema {
                schema: schema.clone(),
                strict: *strict,
            },
            GrammarSpec::Gbnf(t) => Grammar::Gbnf(t.clone()),
            GrammarSpec::Lark(t) => Grammar::Lark(t.clone()),
        };
        let constraint = compiler.compile(&grammar).map_err(|e| e.to_string())?;
        Ok(CompiledGrammar(Arc::new(constraint)))
    }
    fn embed(&self, inputs: &[Vec<TokenId>]) -> Result<Vec<Vec<f32>>, BackendError> {
        // The caller checked ids and lengths; the decoder shares its scratch with the engine
        // thread, so embeddings and generation steps take turns.
        Ok(inputs
            .iter()
            .map(|ids| embedding::embed(&self.decoder, ids, self.pooling))
            .collect())
    }
    fn flush(&self, timeout: std::time::Duration) -> bool {
        self.flush_cache_disk(timeout)
    }
    fn new_stepper(&self, slots: usize) -> Box<dyn Stepper + '_> {
        let mut engine = BatchEngine::new(&self.decoder, &self.tokenizer, slots, self.ctx);
        if self.no_spec {
            engine.max_draft = 0;
        }
        engine.set_prefix_cache(self.cache_bytes);
        if let Some(disk) = &self.cache_disk {
            let n = engine.set_prefix_disk(disk);
            tracing::info!(
                "prompt cache: {n} blocks restored from {}",
                disk.dir().display()
            );
        }
        engine.set_recall(self.recall_tokens);
        if let Some(d) = &self.draft {
            engine.set_draft_model(d);
        }
        Box::new(ModelStepper {
            engine,
            tokenizer: &self.tokenizer,
            slot_key: CacheKey::new(self.identity, self.decoder.cache_format()),
            tokens_as_ids: Default::default(),
        })
    }
}

impl Stepper for ModelStepper<'_> {
    fn capacity(&self) -> usize {
        self.engine.capacity()
    }
    fn active(&self) -> usize {
        self.engine.active()
    }
    fn admit(&mut self, id: u64, prompt: &[TokenId], p: &GenParams) -> Result<(), String> {
        let params = BatchParams {
            sampler: p.sampler.clone(),
            logprobs: p.logprobs,
            limits: GenerateParams {
                max_tokens: p.max_tokens,
                stop: p.stop.clone(),
                keep_special: p.keep_special,
                // Each generation runs its own copy of the compiled grammar's start state.
                constraint: p
                    .compiled
                    .as_ref()
                    .and_then(|c| c.0.downcast_ref::<Constraint>())
                    .cloned(),
                ignore_eog: false,
            },
        };
        if p.compiled.is_some() && params.limits.constraint.is_none() {
            return Err("the request's grammar was compiled by another backend".into());
        }
        self.engine
            .admit(id, prompt, &params)
            .map_err(|e| e.to_string())?;
        if p.tokens_as_ids {
            self.tokens_as_ids.insert(id);
        }
        Ok(())
    }
    fn step(&mut self, events: &mut dyn FnMut(u64, Event)) {
        let (tok, by_id) = (self.tokenizer, &mut self.tokens_as_ids);
        self.engine.step(|id, ev| match ev {
            BatchEvent::Logprob(l) => {
                let as_id = by_id.contains(&id);
                let piece = |t: TokenId| {
                    let b = tok.token_to_piece(t).to_vec();
                    let s = match as_id {
                        true => format!("token_id:{t}"),
                        false => String::from_utf8_lossy(&b).into_owned(),
                    };
                    (s, b)
                };
                let (token, bytes) = piece(l.token);
                let top = l
                    .top
                    .iter()
                    .map(|&(t, lp)| {
                        let (s, b) = piece(t);
                        (s, b, lp)
                    })
                    .collect();
                events(
                    id,
                    Event::Logprob(TokenLogprob {
                        token,
                        bytes,
                        logprob: l.logprob,
                        top,
                    }),
                )
            }
            BatchEvent::Text(t) => events(id, Event::Text(t)),
            BatchEvent::Error(e) => {
                // A grammar that cannot go on ends the request as an error; the engine's
                // `Done` that follows is dropped by the scheduler.
                by_id.remove(&id);
                events(id, Event::Failed(e))
            }
            BatchEvent::Done {
                stop,
                tokens,
                stop_string,
                cached_tokens,
            } => {
                by_id.remove(&id);
                events(
                    id,
                    Event::Done(GenSummary {
                        finish: match stop {
                            StopReason::MaxTokens | StopReason::Context => FinishReason::Length,
                            _ => FinishReason::Stop,
                        },
                        completion_tokens: tokens,
                        cancelled: stop == StopReason::Cancelled,
                        stop_string,
                        cached_tokens,
                    }),
                )
            }
        });
    }
    fn cancel(&mut self, id: u64) {
        self.tokens_as_ids.remove(&id);
        self.engine.cancel(id);
    }
    fn drafter_counts(&self, out: &mut Vec<DraftCount>) {
        out.clear();
        out.extend(self.engine.drafters.iter().map(|d| DraftCount {
            drafter: d.drafter,
            drafted: d.drafted,
            accepted: d.accepted,
        }));
    }
    fn grammar_counts(&self) -> (u64, u64) {
        (self.engine.stats.masks, self.engine.stats.mask_nanos)
    }
    fn slot_action(&mut self, slot: usize, action: SlotAction) -> Result<SlotDone, SlotError> {
        let e = &mut self.engine;
        let key = &self.slot_key;
        let r = match action {
            SlotAction::Save => e
                .save_slot(slot, key)
                .map(|(bytes, tokens)| SlotDone { tokens, bytes }),
            SlotAction::Restore(bytes) => {
                e.restore_slot(slot, key, &bytes).map(|tokens| SlotDone {
                    tokens,
                    bytes: Vec::new(),
                })
            }
            SlotAction::Erase => e.erase_slot(slot).map(|tokens| SlotDone {
                tokens,
                bytes: Vec::new(),
            }),
        };
        r.map_err(|e| match e {
            SlotFileError::Busy(_) => SlotError::Busy(e.to_string()),
            SlotFileError::NotPortable => SlotError::Unsupported(e.to_string()),
            _ => SlotError::Invalid(e.to_string()),
        })
    }
    fn cache_usage(&self) -> CacheUsage {
        CacheUsage {
            positions: self.engine.cached_positions(),
            capacity: self.engine.capacity() * self.engine.ctx_size(),
            prefix_bytes: self.engine.prefix_cache_bytes(),
            slot_bytes: self.engine.slot_cache_bytes(),
        }
    }
}
