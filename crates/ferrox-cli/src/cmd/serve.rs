//! `ferrox serve`: the OpenAI-compatible server (crates/ferrox-server) over a loaded model.
//! Requests run on a continuous-batching `BatchEngine`: one batched forward per step for all
//! slots, each slot with its own KV caches (prefix reuse across turns) and prompt-lookup drafts.

use std::sync::{Arc, OnceLock};

use ferrox_models::decoder::Decoder;
use ferrox_models::embedding::{self, Pooling};
use ferrox_models::engine::{BatchEngine, BatchEvent, BatchParams};
use ferrox_models::generate::StopReason;
use ferrox_models::sampling::SamplerConfig;
use ferrox_models::structured::{Constraint, Grammar, GrammarCompiler};
use ferrox_server::api::{ChatMessage, ChatPrompt};
use ferrox_server::backend::{
    Backend, BackendError, CacheUsage, CompiledGrammar, Engine, Event, FinishReason, GenParams,
    GenSummary, GrammarSpec, RenderedChat, TokenLogprob,
};
use ferrox_tokenizer::chat_output::ToolFormat;
use ferrox_tokenizer::fim::FimInput;
use ferrox_tokenizer::template::{render_chat_text, ChatTemplate, Message};
use ferrox_tokenizer::{TokenId, Tokenizer};

use super::engine;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a catalog name, a path or hf:OWNER/REPO/FILE.gguf (default: the catalog default).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    #[command(flatten)]
    pub cache: super::engine::CacheArgs,
    /// Address to bind (loopback by default; use 0.0.0.0 to expose the server).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Context size of each slot, in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx: usize,
    #[command(flatten)]
    pub dist: super::dist::DistArgs,
    /// Slots: requests generated at the same time.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// Requests that may wait for a slot before the server answers 503.
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Require `Authorization: Bearer KEY` (also read from FERROX_API_KEY).
    #[arg(long = "api-key")]
    pub api_key: Option<String>,
    /// Threads (0 = all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Decode without prompt-lookup drafts.
    #[arg(long = "no-spec")]
    pub no_spec: bool,
    /// This replica's name in `X-Ferrox-Instance` (default: HOST:PORT as bound).
    #[arg(long = "instance-id")]
    pub instance_id: Option<String>,
    /// On SIGTERM / SIGINT or `POST /admin/drain`: seconds running requests get to finish.
    #[arg(long = "drain-timeout", default_value_t = 30)]
    pub drain_timeout: u64,
    /// Answer HAProxy agent checks (ready / drain / weight) on this port.
    #[arg(long = "agent-port")]
    pub agent_port: Option<u16>,
    /// Connections served at once (more wait in the listen backlog).
    #[arg(long = "max-connections", default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds a client has to send request headers (and to start the next request on an
    /// idle kept-alive connection).
    #[arg(long = "header-timeout", default_value_t = 30)]
    pub header_timeout: u64,
    /// Seconds the whole request body has to arrive.
    #[arg(long = "body-timeout", default_value_t = 30)]
    pub body_timeout: u64,
    /// Largest request body, in MiB.
    #[arg(long = "max-body-mb", default_value_t = 16)]
    pub max_body_mb: usize,
    /// Without an API key, Host names accepted besides IP addresses and `localhost`
    /// (DNS-rebinding protection; repeatable).
    #[arg(long = "allowed-host")]
    pub allowed_hosts: Vec<String>,
    /// MiB of finished requests' keys and values kept for later prompts sharing their prefix
    /// (llama-server's `--cache-ram`; 0 turns the cache off).
    #[arg(long = "cache-ram", default_value_t = 1024)]
    pub cache_ram: usize,
    /// How `/v1/embeddings` pools token states: mean, cls or last (default: the GGUF's
    /// `pooling_type`, else last — a causal model's last state has seen the whole input).
    #[arg(long)]
    pub pooling: Option<Pooling>,
    /// Serve the chat page at `/` whatever the host (default: only on a loopback address).
    #[arg(long, conflicts_with = "no_webui")]
    pub webui: bool,
    /// Do not serve the chat page.
    #[arg(long = "no-webui")]
    pub no_webui: bool,
}

/// Whether the chat page is served: as the flags say, else only when the server is bound to a
/// loopback address, where no other machine can reach it.
fn webui_enabled(webui: bool, no_webui: bool, bound: std::net::IpAddr) -> bool {
    match (webui, no_webui) {
        (true, _) => true,
        (_, true) => false,
        // `::ffff:127.0.0.1` is loopback too.
        _ => bound.to_canonical().is_loopback(),
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

struct ModelBackend {
    id: String,
    aliases: Vec<String>,
    decoder: &'static Decoder,
    tokenizer: &'static Tokenizer,
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
}

struct ModelEngine {
    engine: BatchEngine<'static>,
    tokenizer: &'static Tokenizer,
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
        let tok = self.tokenizer;
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
                let c = GrammarCompiler::new(self.tokenizer, self.decoder.vocab_size())
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
            .map(|ids| embedding::embed(self.decoder, ids, self.pooling))
            .collect())
    }
    fn new_engine(&self, slots: usize) -> Box<dyn Engine> {
        let mut engine = BatchEngine::new(self.decoder, self.tokenizer, slots, self.ctx);
        if self.no_spec {
            engine.max_draft = 0;
        }
        engine.set_prefix_cache(self.cache_bytes);
        Box::new(ModelEngine {
            engine,
            tokenizer: self.tokenizer,
            tokens_as_ids: Default::default(),
        })
    }
}

impl Engine for ModelEngine {
    fn capacity(&self) -> usize {
        self.engine.capacity()
    }
    fn active(&self) -> usize {
        self.engine.active()
    }
    fn admit(&mut self, id: u64, prompt: &[TokenId], p: &GenParams) -> Result<(), String> {
        let params = BatchParams {
            sampler: SamplerConfig {
                temperature: p.temperature,
                top_k: p.top_k,
                top_p: p.top_p,
                min_p: p.min_p,
                presence_penalty: p.presence_penalty,
                frequency_penalty: p.frequency_penalty,
                repeat_penalty: p.repeat_penalty,
                penalty_last_n: p.repeat_last_n,
                seed: p.seed,
                logit_bias: p.logit_bias.clone(),
            },
            max_tokens: p.max_tokens,
            stop: p.stop.clone(),
            logprobs: p.logprobs,
            keep_special: p.keep_special,
            // Each generation runs its own copy of the compiled grammar's start state.
            constraint: p
                .compiled
                .as_ref()
                .and_then(|c| c.0.downcast_ref::<Constraint>())
                .cloned(),
        };
        if p.compiled.is_some() && params.constraint.is_none() {
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
    fn spec_counts(&self) -> (u64, u64) {
        (self.engine.stats.drafted, self.engine.stats.accepted)
    }
    fn grammar_counts(&self) -> (u64, u64) {
        (self.engine.stats.masks, self.engine.stats.mask_nanos)
    }
    fn cache_usage(&self) -> CacheUsage {
        CacheUsage {
            positions: self.engine.cached_positions(),
            capacity: self.engine.capacity() * self.engine.ctx_size(),
            prefix_bytes: self.engine.prefix_cache_bytes(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.threads);
    let mut eng = engine::load_with(args.model.as_deref(), true, &args.dist)?;
    args.cache.apply(&mut eng)?;
    let tokenizer = eng
        .tokenizer
        .ok_or_else(|| anyhow::anyhow!("{}: no tokenizer found", eng.path.display()))?;
    let name = args
        .model
        .clone()
        .unwrap_or_else(|| ferrox_hub::DEFAULT_MODEL.to_string());
    let file = eng
        .path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ctx = args.ctx.min(eng.decoder.config.max_seq_len.max(1));
    let pooling = args
        .pooling
        .or_else(|| eng.decoder.gguf.as_deref().and_then(Pooling::from_gguf))
        .unwrap_or(Pooling::Last);
    // The model lives as long as the server process; leaking gives slots 'static sessions.
    let decoder: &'static Decoder = Box::leak(Box::new(eng.decoder));
    // Dropped when serving ends: stops the other ranks.
    let cluster = eng.cluster;
    let tokenizer: &'static Tokenizer = Box::leak(Box::new(tokenizer));
    // Catalog models are served under their catalog name however -m named them.
    let id = ferrox_hub::CATALOG
        .iter()
        .find(|e| e.file == file)
        .map_or_else(|| name.clone(), |e| e.name.to_string());
    let backend = Arc::new(ModelBackend {
        id: id.clone(),
        aliases: vec![name, file, eng.path.display().to_string()],
        decoder,
        tokenizer,
        ctx,
        no_spec: args.no_spec,
        template: ChatTemplate::for_tokenizer(tokenizer).map_err(|e| e.to_string()),
        tool_format: ToolFormat::detect(tokenizer.chat_template().unwrap_or("")),
        grammars: OnceLock::new(),
        pooling,
        cache_bytes: args.cache_ram.saturating_mul(1 << 20),
    });
    // Ready means warmed up: one forward pages the weights in and starts the thread pool
    // before the first request (or health check) arrives.
    decoder.forward_token(0, 0, &mut decoder.new_caches());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dist = args.dist.clone();
    rt.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        let bound = listener.local_addr()?;
        let options = server_options(&args, bound);
        eprintln!(
            "serving {id} on http://{bound} ({} slots, ctx {ctx}{}{})",
            args.parallel,
            if options.api_key.is_some() {
                ", API key required"
            } else {
                ""
            },
            if options.webui {
                ", chat page at /"
            } else {
                ""
            }
        );
        let (parallel, queue) = (args.parallel, args.queue);
        ferrox_server::serve_until(listener, backend, parallel, queue, options, stop_signal())
            .await?;
        eprintln!("drained; exiting");
        anyhow::Ok(())
    })?;
    super::dist::save_load(&dist, decoder)?;
    // With the `mpi` feature the cluster's drop stops the expert ranks; without it there is
    // nothing to drop.
    #[allow(clippy::drop_non_drop)]
    drop(cluster);
    Ok(())
}

/// The server's settings from the flags (and `FERROX_API_KEY`).
fn server_options(args: &Args, bound: std::net::SocketAddr) -> ferrox_server::Options {
    ferrox_server::Options {
        api_key: args.api_key.clone().or_else(|| {
            std::env::var("FERROX_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
        }),
        library: super::model::hub()
            .ok()
            .map(|hub| ferrox_server::LibraryHandle(Arc::new(super::library::HubLibrary { hub }))),
        webui: webui_enabled(args.webui, args.no_webui, bound.ip()),
        instance_id: args
            .instance_id
            .clone()
            .unwrap_or_else(|| bound.to_string()),
        drain_timeout: std::time::Duration::from_secs(args.drain_timeout),
        agent_addr: args.agent_port.map(|p| format!("{}:{p}", args.host)),
        limits: ferrox_server::Limits {
            max_connections: args.max_connections,
            header_timeout: std::time::Duration::from_secs(args.header_timeout.max(1)),
            body_timeout: std::time::Duration::from_secs(args.body_timeout.max(1)),
            max_body_bytes: args.max_body_mb.saturating_mul(1 << 20),
        },
        allowed_hosts: args.allowed_hosts.clone(),
    }
}

/// Resolves on SIGTERM (an orchestrator stopping the replica) or SIGINT: the server drains.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    eprintln!("draining: readiness off, new requests refused, running ones finish");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrox_server::backend::DEFAULT_SAMPLING;

    #[test]
    fn chat_page_defaults_to_loopback_only() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        for (host, served) in [
            ("127.0.0.1", true),
            ("::1", true),
            ("::ffff:127.0.0.1", true),
            ("0.0.0.0", false),
            ("::", false),
            ("192.168.1.5", false),
        ] {
            assert_eq!(webui_enabled(false, false, ip(host)), served, "{host}");
            assert!(webui_enabled(true, false, ip(host)), "--webui on {host}");
            assert!(
                !webui_enabled(false, true, ip(host)),
                "--no-webui on {host}"
            );
        }
    }

    /// A request that names no sampler settings samples as `ferrox run` does by default.
    #[test]
    fn server_and_cli_default_samplers_agree() {
        let c = SamplerConfig::default();
        let d = DEFAULT_SAMPLING;
        assert_eq!(
            (c.temperature, c.top_k, c.top_p, c.min_p, c.penalty_last_n),
            (d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_last_n)
        );
    }
}
