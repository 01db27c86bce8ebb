//! `ferrox run`: one completion, streamed. The prompt goes through the model's chat template as
//! a single user turn (unless `--raw` or the model has none); stdout carries only the generated
//! text, everything else goes to stderr.

use super::engine;
use ferrox_models::engine::{DrafterCount, DEFAULT_RECALL_TOKENS};
use ferrox_models::generate::{GenerateOutput, GenerateParams, Session};
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{
    Beside, DraftModel, Drafter, LongestMatchDrafter, MtpDrafter, PromptLookupSpeculator,
    RecallDrafter, RecallIndex, ReducedExperts, SharedRecall, Speculation,
};
use ferrox_models::structured::{Grammar, GrammarCompiler};
use ferrox_tokenizer::fim::FimInput;
use ferrox_tokenizer::template::{prompt_text, Message};
use std::io::Write;

use anyhow::Context;

/// Sampling and generation flags shared by `run` and `chat`.
#[derive(clap::Args, Clone)]
pub struct GenFlags {
    /// Temperature (0 = greedy).
    #[arg(long = "temp", default_value_t = SamplerConfig::default().temperature)]
    pub temp: f32,
    /// Top-k (0 = off).
    #[arg(long = "top-k", default_value_t = SamplerConfig::default().top_k)]
    pub top_k: usize,
    /// Top-p (1 = off).
    #[arg(long = "top-p", default_value_t = SamplerConfig::default().top_p)]
    pub top_p: f32,
    /// Min-p (0 = off).
    #[arg(long = "min-p", default_value_t = SamplerConfig::default().min_p)]
    pub min_p: f32,
    /// Repetition penalty over the last 64 tokens (1 = off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// RNG seed (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Tokens to generate (-1 = until the end of generation or the context is full).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    pub n_predict: i64,
    /// Context size in tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    pub ctx: usize,
    /// Threads (0 = all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Print prompt and generation speed (and speculation statistics) to stderr.
    #[arg(long)]
    pub verbose: bool,
    /// Decode plainly, without speculative decoding.
    #[arg(long = "no-spec")]
    pub no_spec: bool,
    /// Drafter for speculative decoding.
    #[arg(long, value_enum, default_value_t = DrafterKind::Auto)]
    pub drafter: DrafterKind,
    /// Longest draft verified per forward call.
    #[arg(long = "draft-max", default_value_t = DEFAULT_DRAFT_MAX)]
    pub draft_max: usize,
    /// A smaller model with the same vocabulary that drafts too (llama.cpp's `-md`), beside
    /// `--drafter`'s drafts: a catalog name or a path. The cost model leaves it unused where it
    /// costs more than it saves.
    #[arg(long = "draft-model", visible_alias = "model-draft")]
    pub draft_model: Option<String>,
}

/// Longest draft by default: long verbatim copies are common in code edits, and the adaptive
/// length only reaches it after consecutive full acceptances.
pub const DEFAULT_DRAFT_MAX: usize = 16;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrafterKind {
    /// The model's MTP (NextN) block where it ships one, with `longest` beside it; `longest`
    /// alone otherwise.
    Auto,
    /// Suffix automaton: continuation of the longest earlier match of the context.
    Longest,
    /// The seed's prompt lookup: continuation of the latest earlier 3-gram.
    Ngram,
    /// Earlier generations' outputs (with their prompts' tails) or the longest match in the
    /// context, whichever matches longer (the server's default).
    Recall,
    /// A mixture-of-experts model drafting for itself with at most two routed experts per
    /// token (shared experts kept), with `longest` beside it; `longest` alone for other models.
    Experts,
}

/// Routed experts per token of an `experts` self-draft.
pub const DRAFT_EXPERTS: usize = 2;

impl DrafterKind {
    /// The drafter, with `draft`'s model beside it when given; `recall` is the store of
    /// earlier generations a `Recall` drafter reads and feeds (shared by the generations that
    /// should learn from each other).
    pub fn build(self, recall: &SharedRecall, draft: Option<&DraftModel>) -> Box<dyn Drafter> {
        let own = self.build_own(recall);
        match draft {
            Some(m) => Box::new(m.drafter(own)),
            None => own,
        }
    }

    fn build_own(self, recall: &SharedRecall) -> Box<dyn Drafter> {
        match self {
            DrafterKind::Auto => Box::new(MtpDrafter::new(Box::new(LongestMatchDrafter::new(2)))),
            DrafterKind::Longest => Box::new(LongestMatchDrafter::new(2)),
            DrafterKind::Ngram => Box::new(PromptLookupSpeculator::new(3, DEFAULT_DRAFT_MAX)),
            DrafterKind::Recall => Box::new(RecallDrafter::new(recall.clone())),
            DrafterKind::Experts => Box::new(Beside::with(
                ReducedExperts::new(DRAFT_EXPERTS),
                Box::new(LongestMatchDrafter::new(2)),
            )),
        }
    }
}

impl GenFlags {
    pub fn sampler(&self) -> Sampler {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        });
        Sampler::new(SamplerConfig {
            temperature: self.temp,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repeat_penalty: self.repeat_penalty,
            seed,
            ..SamplerConfig::default()
        })
    }

    /// Speculative decoding state for a session, unless `--no-spec` (or a zero draft length);
    /// `draft` is the loaded `--draft-model` ([`Self::draft`]).
    pub fn speculation(&self, draft: Option<&DraftModel>) -> Option<Speculation> {
        (!self.no_spec && self.draft_max > 0).then(|| {
            // `chat` keeps this for the whole session: `recall` then drafts from earlier turns.
            let recall = SharedRecall::new(RecallIndex::new(DEFAULT_RECALL_TOKENS).into());
            Speculation::new(self.drafter.build(&recall, draft), self.draft_max)
        })
    }

    /// The `--draft-model` for `target`, unless there is none or speculation is off.
    pub fn draft(&self, target: &engine::LoadedModel) -> anyhow::Result<Option<DraftModel>> {
        let Some(name) = self.draft_model.as_deref().filter(|_| !self.no_spec) else {
            return Ok(None);
        };
        let draft = engine::LoadedDraft::load(name, target.decoder.cache_format(), self.verbose)?;
        draft
            .for_target(&target.decoder, target.tokenizer()?)
            .map(Some)
    }

    pub fn params(&self) -> GenerateParams {
        GenerateParams {
            max_tokens: if self.n_predict < 0 {
                usize::MAX
            } else {
                self.n_predict as usize
            },
            ..GenerateParams::default()
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: super::engine::ModelFlags,
    /// The prompt; without one, standard input is read to its end (`echo hi | ferrox run`).
    pub prompt: Option<String>,
    /// Send the prompt as is, without the chat template.
    #[arg(long)]
    pub raw: bool,
    /// Fill in the middle: the prompt is the code before the hole, this the code after it (the
    /// prompt laid out as llama-server's /infill lays it out, with the model's FIM tokens).
    #[arg(long = "fim-suffix", value_name = "TEXT", conflicts_with = "raw")]
    pub fim_suffix: Option<String>,
    /// Constrain the output to a JSON schema: inline JSON or a file (as llama-cli's -j).
    #[arg(short = 'j', long = "json-schema", value_name = "SCHEMA|FILE")]
    pub json_schema: Option<String>,
    /// Constrain the output to a GBNF grammar (llguidance Lark after a `%llguidance` line).
    #[arg(long, conflicts_with = "json_schema")]
    pub grammar: Option<String>,
    /// Constrain the output to the GBNF grammar in a file.
    #[arg(long = "grammar-file", value_name = "FILE", conflicts_with_all = ["json_schema", "grammar"])]
    pub grammar_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub gen: GenFlags,
    #[command(flatten)]
    pub dist: super::dist::DistArgs,
}

impl Args {
    /// The grammar the flags ask for, if any.
    fn grammar(&self) -> anyhow::Result<Option<Grammar>> {
        if let Some(s) = &self.json_schema {
            let text = if s.trim_start().starts_with('{') {
                s.clone()
            } else {
                std::fs::read_to_string(s).with_context(|| format!("--json-schema {s}"))?
            };
            let schema = serde_json::from_str(&text).context("--json-schema is not JSON")?;
            return Ok(Some(Grammar::JsonSchema {
                schema,
                strict: false,
            }));
        }
        let text = match (&self.grammar, &self.grammar_file) {
            (Some(g), _) => g.clone(),
            (None, Some(f)) => std::fs::read_to_string(f)
                .with_context(|| format!("--grammar-file {}", f.display()))?,
            (None, None) => return Ok(None),
        };
        // llama.cpp's marker for llguidance's Lark.
        Ok(Some(if text.trim_start().starts_with("%llguidance") {
            Grammar::Lark(text)
        } else {
            Grammar::Gbnf(text)
        }))
    }
}

/// Each drafter's draft tokens and how many were kept, comma-separated (`none` without any).
pub fn drafter_summary(counts: &[DrafterCount]) -> String {
    if counts.is_empty() {
        return "none".into();
    }
    let each = counts.iter().map(|c| {
        let pct = 100.0 * c.accepted as f64 / c.drafted.max(1) as f64;
        format!(
            "{} {} drafted, {} accepted ({pct:.0}%)",
            c.drafter, c.drafted, c.accepted
        )
    });
    each.collect::<Vec<_>>().join(", ")
}

pub fn report(out: &GenerateOutput) {
    let rate = |n: usize, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-9);
    eprintln!(
        "prompt eval: {} tokens in {:.1} ms ({:.2} tokens/s)",
        out.prompt_tokens,
        out.prompt_time.as_secs_f64() * 1e3,
        rate(out.prompt_tokens, out.prompt_time)
    );
    eprintln!(
        "eval: {} tokens in {:.1} ms ({:.2} tokens/s), stop: {:?}",
        out.gen_tokens,
        out.gen_time.as_secs_f64() * 1e3,
        rate(out.gen_tokens, out.gen_time),
        out.stop
    );
    if let Some(c) = &out.constraint {
        eprintln!(
            "grammar: {} masks in {:.1} ms ({:.0} µs per mask)",
            c.masks,
            c.mask_time.as_secs_f64() * 1e3,
            c.mask_time.as_secs_f64() * 1e6 / c.masks.max(1) as f64
        );
    }
    let s = &out.spec;
    if s.calls > 0 {
        eprintln!(
            "speculation: {} forward calls, {:.2} tokens/call; {} drafts verified, {} tokens drafted, {} accepted ({:.1}%), {:.2} accepted/verify",
            s.calls,
            out.gen_tokens as f64 / s.calls as f64,
            s.verify_calls,
            s.drafted,
            s.accepted,
            100.0 * s.acceptance(),
            s.accepted as f64 / s.verify_calls.max(1) as f64
        );
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.gen.threads);
    let eng = args.model.load(args.gen.verbose, &args.dist)?;
    let tok = eng.tokenizer()?;
    let prompt = match &args.prompt {
        Some(p) => p.clone(),
        None => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)?;
            s
        }
    };
    let ids = if let Some(suffix) = &args.fim_suffix {
        let input = FimInput {
            prefix: &prompt,
            suffix,
            ..FimInput::default()
        };
        let n = args.gen.n_predict;
        tok.fim_prompt(&input, args.gen.ctx, (n >= 0).then_some(n as usize))?
    } else if args.raw {
        tok.encode(&prompt, true, true)
    } else {
        // The user's text is not control tokens: only the template's markers are.
        let chat = prompt_text(tok, &[Message::user(prompt.clone())], true)?;
        if args.gen.verbose {
            eprintln!("prompt: {:?}", chat.text);
        }
        tok.encode_prompt(&chat.text, &chat.literal)
    };
    anyhow::ensure!(!ids.is_empty(), "empty prompt");
    let mut params = args.gen.params();
    if let Some(g) = args.grammar()? {
        let t = std::time::Instant::now();
        let compiler = GrammarCompiler::new(tok, eng.decoder.vocab_size())?;
        let built = t.elapsed();
        params.constraint = Some(compiler.compile(&g)?);
        if args.gen.verbose {
            eprintln!(
                "grammar: token trie in {:.1} ms, grammar compiled in {:.1} ms",
                built.as_secs_f64() * 1e3,
                (t.elapsed() - built).as_secs_f64() * 1e3
            );
        }
    }
    let draft = args.gen.draft(&eng)?;
    let mut session = Session::new(&eng.decoder, tok, args.gen.ctx);
    session.set_speculation(args.gen.speculation(draft.as_ref()));
    let mut sampler = args.gen.sampler();
    let stdout = std::io::stdout();
    let out = session.generate(&ids, &params, &mut sampler, |t| {
        let mut o = stdout.lock();
        o.write_all(t.as_bytes()).is_ok() && o.flush().is_ok()
    });
    // A reader that went away (`| head`) ends the run quietly, as generation already stopped.
    let _ = writeln!(stdout.lock());
    if args.gen.verbose {
        report(&out);
        if out.spec.calls > 0 {
            eprintln!(
                "drafts by drafter: {}",
                drafter_summary(session.drafter_counts())
            );
        }
        super::dist::report(eng.cluster.as_ref(), eng.decoder.config.hidden_dim);
    }
    if let Some(e) = out.error {
        anyhow::bail!("{e}");
    }
    super::dist::save_load(&args.dist, &eng.decoder)
}
