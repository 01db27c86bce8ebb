//! `ferrox bench spec`: plain vs speculative decoding on a prompt workload (issue 7). Each
//! workload prompt (`instruction + "\n\n```python\n" + code + "```"`, one user message through
//! the model's chat template) and each prompt of an open-ended control set (where lookup cannot
//! help) is decoded greedily plainly and with each drafter, `-r` times in turn so machine noise
//! hits every mode alike (each mode counts its median run). Reports decode tokens/s (prefill excluded), the speedup over plain,
//! accepted tokens per verify call and tokens per forward call, and checks that every
//! speculative output equals the plain one token for token.

use super::engine;
use super::run::{DrafterKind, DEFAULT_DRAFT_MAX};
use anyhow::Context;
use ferrox_models::engine::DrafterCount;
use ferrox_models::generate::{GenerateOutput, GenerateParams, Session};
use ferrox_models::sampling::{Sampler, SamplerConfig};
use ferrox_models::speculative::{DraftModel, RecallIndex, SharedRecall, Speculation};
use ferrox_tokenizer::template::{prompt_text, Message};
use ferrox_tokenizer::{TokenId, Tokenizer};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a catalog name, a path or hf:OWNER/REPO/FILE.gguf.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// New tokens per prompt (generation also stops at end of generation).
    #[arg(short = 'n', long = "n-predict", default_value_t = 256)]
    pub n: usize,
    /// Workload: JSON lines with `instruction` and `code` (e.g. code-edit.jsonl).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// A plain-text prompt file, benchmarked as one more workload prompt (repeatable: one
    /// prompt per file).
    #[arg(short = 'p', long = "prompt-file")]
    pub prompt_file: Vec<PathBuf>,
    /// Tokenize `--prompt-file` as is (no chat template), as llama.cpp's examples do.
    #[arg(long)]
    pub raw: bool,
    /// Keep generating through end-of-generation tokens (always `-n` tokens).
    #[arg(long = "ignore-eos")]
    pub ignore_eos: bool,
    /// Only the first N workload prompts.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Skip the open-ended control set.
    #[arg(long = "no-control")]
    pub no_control: bool,
    /// Drafters to compare with plain decoding.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [DrafterKind::Ngram, DrafterKind::Longest])]
    pub drafters: Vec<DrafterKind>,
    #[arg(long = "draft-max", default_value_t = DEFAULT_DRAFT_MAX)]
    pub draft_max: usize,
    /// A draft model (llama.cpp's `-md`): each drafter of `--drafters` is measured again with
    /// it beside (`MODE+md`).
    #[arg(long = "draft-model", visible_alias = "model-draft")]
    pub draft_model: Option<String>,
    /// Also time one forward of k tokens against one token (k = 1, 2, 4, 8, 16).
    #[arg(long = "batch-cost")]
    pub batch_cost: bool,
    /// Threads (0 = all cores).
    #[arg(short = 't', long, default_value_t = 0)]
    pub threads: usize,
    /// Rounds over the whole prompt list: rounds after the first are reported as the
    /// `repeats` set (what a `recall` drafter, which remembers every earlier generation of
    /// this run, gains when agents repeat their requests).
    #[arg(long = "rounds", default_value_t = 1)]
    pub rounds: usize,
    /// Tokens a `recall` drafter keeps of earlier generations.
    #[arg(long = "recall-tokens", default_value_t = ferrox_models::engine::DEFAULT_RECALL_TOKENS)]
    pub recall_tokens: usize,
    /// Runs per prompt and mode, interleaved (plain, drafters, plain, ...); each mode counts
    /// its median-speed run, so a burst of machine noise does not decide a ratio.
    #[arg(short = 'r', long = "repetitions", default_value_t = 1)]
    pub repetitions: usize,
}

/// Open-ended prompts whose answers do not copy the prompt: drafts mostly miss here, so these
/// show what speculation costs when it cannot help.
const CONTROL: &[&str] = &[
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain in plain words why the sky is blue and sunsets are red.",
    "List ten creative names for a coffee shop and say in one sentence why each works.",
    "Compare travelling by train and by plane within Europe: cost, comfort, time, climate.",
    "Describe how a hash map works to a new programmer, with an everyday analogy.",
];

struct Prompt {
    set: &'static str,
    name: String,
    ids: Vec<TokenId>,
}

#[derive(Default, Clone, Copy)]
struct Totals {
    tokens: usize,
    secs: f64,
    calls: usize,
    verify_calls: usize,
    drafted: usize,
    accepted: usize,
    branches: usize,
    branches_kept: usize,
    mismatches: usize,
}

impl Totals {
    fn add(&mut self, o: &GenerateOutput, mismatch: bool) {
        self.tokens += o.gen_tokens;
        self.secs += o.gen_time.as_secs_f64();
        self.calls += o.spec.calls;
        self.verify_calls += o.spec.verify_calls;
        self.drafted += o.spec.drafted;
        self.accepted += o.spec.accepted;
        self.branches += o.spec.branches;
        self.branches_kept += o.spec.branches_kept;
        self.mismatches += mismatch as usize;
    }
    fn rate(&self) -> f64 {
        self.tokens as f64 / self.secs.max(1e-9)
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    engine::set_threads(args.threads);
    let eng = engine::load(args.model.as_deref(), true)?;
    let tok = eng.tokenizer()?;
    let draft = match &args.draft_model {
        Some(name) => Some(
            engine::LoadedDraft::load(name, eng.decoder.cache_format(), true)?
                .for_target(&eng.decoder, tok)?,
        ),
        None => None,
    };
    let prompts = load_prompts(&args, tok)?;
    anyhow::ensure!(
        !prompts.is_empty(),
        "no prompts: give -f FILE or --prompt-file"
    );

    if args.batch_cost {
        batch_cost(&eng.decoder, &prompts[0].ids);
    }

    let with_model = args.drafters.iter().filter(|_| draft.is_some());
    let modes: Vec<Mode> = std::iter::once(None)
        .chain(args.drafters.iter().map(|&d| Some((d, false))))
        .chain(with_model.map(|&d| Some((d, true))))
        .collect();
    let (totals, speedups) = measure(&args, &eng.decoder, tok, &prompts, &modes, draft.as_ref());
    print_table(&modes, &totals, &speedups);
    let bad: usize = totals.iter().flatten().map(|t| t.mismatches).sum();
    anyhow::ensure!(
        bad == 0,
        "{bad} speculative outputs differ from plain greedy"
    );
    Ok(())
}

/// The prompt sets, in the order they are reported.
const SETS: [&str; 3] = ["workload", "control", "repeats"];

/// Plain decoding, or a drafter (with the draft model beside it).
type Mode = Option<(DrafterKind, bool)>;

fn mode_label(m: &Mode) -> String {
    match m {
        None => "plain".to_string(),
        Some((d, false)) => format!("{d:?}").to_lowercase(),
        Some((d, true)) => format!("{d:?}+md").to_lowercase(),
    }
}

/// One user message through the model's chat template, tokenized.
fn chat(tok: &Tokenizer, text: String) -> anyhow::Result<Vec<TokenId>> {
    let chat = prompt_text(tok, &[Message::user(text)], true)?;
    Ok(tok.encode_prompt(&chat.text, &chat.literal))
}

/// The workload (`-f`, `--prompt-file`) and, unless `--no-control`, the control set.
fn load_prompts(args: &Args, tok: &Tokenizer) -> anyhow::Result<Vec<Prompt>> {
    let mut prompts = Vec::new();
    if let Some(f) = &args.file {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            if args.limit.is_some_and(|n| i >= n) {
                break;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{} line {}", f.display(), i + 1))?;
            let field = |k: &str| {
                v[k].as_str()
                    .map(str::to_string)
                    .with_context(|| format!("{} line {}: no string `{k}`", f.display(), i + 1))
            };
            let body = format!(
                "{}\n\n```python\n{}```",
                field("instruction")?,
                field("code")?
            );
            let name = v["id"]
                .as_str()
                .map_or_else(|| format!("#{i}"), str::to_string);
            prompts.push(Prompt {
                set: "workload",
                name,
                ids: chat(tok, body)?,
            });
        }
    }
    for f in &args.prompt_file {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let ids = if args.raw {
            tok.encode(&text, true, true)
        } else {
            chat(tok, text)?
        };
        prompts.push(Prompt {
            set: "workload",
            name: f
                .file_name()
                .map_or("prompt".into(), |n| n.to_string_lossy().into()),
            ids,
        });
    }
    if !args.no_control {
        for (i, c) in CONTROL.iter().enumerate() {
            prompts.push(Prompt {
                set: "control",
                name: format!("control-{i}"),
                ids: chat(tok, c.to_string())?,
            });
        }
    }
    Ok(prompts)
}

/// Per set, per mode: totals and per-prompt speedups.
type Measured = (Vec<Vec<Totals>>, Vec<Vec<Vec<f64>>>);

/// Decodes every prompt in every mode, printing one line per prompt and mode to stderr.
fn measure(
    args: &Args,
    decoder: &ferrox_models::decoder::Decoder,
    tok: &Tokenizer,
    prompts: &[Prompt],
    modes: &[Mode],
    draft: Option<&DraftModel>,
) -> Measured {
    let params = GenerateParams {
        max_tokens: args.n,
        ignore_eog: args.ignore_eos,
        ..GenerateParams::default()
    };
    let mut totals = vec![vec![Totals::default(); modes.len()]; SETS.len()];
    let mut speedups = vec![vec![Vec::new(); modes.len()]; SETS.len()];
    let mut session = Session::new(decoder, tok, 8192);
    let recall = SharedRecall::new(RecallIndex::new(args.recall_tokens).into());
    // One speculation state per mode for the whole run, as a server slot keeps its own across
    // requests: the draft-length controller's measured costs and acceptance carry over.
    let mut specs: Vec<Option<Speculation>> = modes
        .iter()
        .map(|m| {
            m.map(|(d, md)| {
                let drafter = d.build(&recall, draft.filter(|_| md));
                Speculation::new(drafter, args.draft_max)
            })
        })
        .collect();
    let rounds = (0..args.rounds.max(1)).flat_map(|r| prompts.iter().map(move |p| (r, p)));
    eprintln!(
        "{:<44} {:>6} {:>5} {:>9} {:>8} {:>9} {:>9}",
        "prompt", "mode", "tok", "tok/s", "speedup", "acc/ver", "tok/call"
    );
    let rate = |o: &GenerateOutput| o.gen_tokens as f64 / o.gen_time.as_secs_f64().max(1e-9);
    let mut sources = vec![Sources::default(); modes.len()];
    for (round, p) in rounds {
        let set = if round > 0 { "repeats" } else { p.set };
        let si = SETS.iter().position(|s| *s == set).unwrap_or(0);
        let mut runs: Vec<Vec<GenerateOutput>> = (0..modes.len()).map(|_| Vec::new()).collect();
        for _ in 0..args.repetitions.max(1) {
            for (mi, spec) in specs.iter_mut().enumerate() {
                // No reset: the prompt stays cached, so only the first run pays for the prefill
                // (untimed either way). Except for a drafter with per-position state (an MTP
                // block or draft head): joining a prefix cached under another mode, it would
                // attend only to the rows since then, not to the prompt.
                if spec.as_ref().is_some_and(|s| s.drafter.wants_hidden()) {
                    session.reset();
                }
                session.set_speculation(spec.take());
                let before = session.drafter_counts().to_vec();
                let mut sampler = Sampler::new(SamplerConfig::greedy());
                runs[mi].push(session.generate(&p.ids, &params, &mut sampler, |_| true));
                *spec = session.take_speculation();
                sources[mi].add_since(&before, session.drafter_counts());
            }
        }
        let mut plain: Option<GenerateOutput> = None;
        for (mi, (m, mut outs)) in modes.iter().zip(runs).enumerate() {
            let mismatch = outs
                .iter()
                .any(|o| plain.as_ref().is_some_and(|b| b.tokens != o.tokens));
            outs.sort_by(|a, b| rate(a).total_cmp(&rate(b)));
            let out = outs.swap_remove(outs.len() / 2);
            let speedup = plain
                .as_ref()
                .map_or(1.0, |b| rate(&out) / rate(b).max(1e-9));
            let s = out.spec;
            eprintln!(
                "{:<44} {:>6} {:>5} {:>9.2} {:>7.2}x {:>9.2} {:>9.2}{}",
                format!("{set} {}", p.name),
                mode_label(m),
                out.gen_tokens,
                rate(&out),
                speedup,
                s.accepted as f64 / s.verify_calls.max(1) as f64,
                if m.is_some() {
                    out.gen_tokens as f64 / s.calls.max(1) as f64
                } else {
                    1.0
                },
                if mismatch {
                    "  OUTPUT DIFFERS FROM PLAIN"
                } else {
                    ""
                }
            );
            totals[si][mi].add(&out, mismatch);
            speedups[si][mi].push(speedup);
            if m.is_none() {
                plain = Some(out);
            }
        }
    }
    print_sources(modes, &sources, &totals);
    (totals, speedups)
}

/// Per speculative mode, on stderr: its draft tokens per drafter, and its draft trees'
/// branches kept.
fn print_sources(modes: &[Mode], sources: &[Sources], totals: &[Vec<Totals>]) {
    for (mi, (m, src)) in modes.iter().zip(sources).enumerate() {
        if m.is_none() {
            continue;
        }
        eprintln!("drafts of {} by drafter: {src}", mode_label(m));
        let (tried, kept) = totals.iter().fold((0, 0), |(n, k), t| {
            (n + t[mi].branches, k + t[mi].branches_kept)
        });
        if tried > 0 {
            eprintln!(
                "draft trees of {}: {kept} of {tried} rejected draft tokens had their branch kept",
                mode_label(m)
            );
        }
    }
}

/// One mode's draft tokens per drafter over the run (a combining drafter's parts apart:
/// how much of `auto` the MTP block or draft head drafted, and how much of it was kept).
#[derive(Default, Clone)]
struct Sources(Vec<DrafterCount>);

impl Sources {
    /// Adds what `now` counts beyond `before` (the session's counters around one run).
    fn add_since(&mut self, before: &[DrafterCount], now: &[DrafterCount]) {
        for c in now {
            let b = before.iter().find(|b| b.drafter == c.drafter);
            let (d0, a0) = b.map_or((0, 0), |b| (b.drafted, b.accepted));
            if c.drafted == d0 {
                continue;
            }
            DrafterCount::book(&mut self.0, c.drafter, c.drafted - d0, c.accepted - a0);
        }
    }
}

impl std::fmt::Display for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&super::run::drafter_summary(&self.0))
    }
}

/// The markdown summary on stdout: one row per set and mode.
fn print_table(modes: &[Mode], totals: &[Vec<Totals>], speedups: &[Vec<Vec<f64>>]) {
    println!(
        "| set | mode | tokens | tok/s | speedup (total) | speedup (median) | accepted/verify | tokens/call | acceptance | identical |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (si, set) in SETS.iter().enumerate() {
        let base = totals[si][0];
        if base.tokens == 0 {
            continue;
        }
        for (mi, m) in modes.iter().enumerate() {
            let t = totals[si][mi];
            let spec = m.is_some();
            println!(
                "| {set} | {} | {} | {:.2} | {:.2}x | {:.2}x | {} | {} | {} | {} |",
                mode_label(m),
                t.tokens,
                t.rate(),
                t.rate() / base.rate().max(1e-9),
                median(speedups[si][mi].clone()),
                if spec {
                    format!("{:.2}", t.accepted as f64 / t.verify_calls.max(1) as f64)
                } else {
                    "-".into()
                },
                if spec {
                    format!("{:.2}", t.tokens as f64 / t.calls.max(1) as f64)
                } else {
                    "1.00".into()
                },
                if spec {
                    format!(
                        "{:.1}%",
                        100.0 * t.accepted as f64 / t.drafted.max(1) as f64
                    )
                } else {
                    "-".into()
                },
                if t.mismatches == 0 {
                    "yes".to_string()
                } else {
                    format!("NO ({} prompts)", t.mismatches)
                },
            );
        }
    }
}

/// Median time of one forward of k tokens (k = 1, 2, 4, 8, 16) after `prompt`, relative to one.
fn batch_cost(decoder: &ferrox_models::decoder::Decoder, prompt: &[TokenId]) {
    let mut caches = decoder.new_caches();
    let mut logits = Vec::new();
    decoder.forward_into(prompt, 0, &mut caches, prompt.len() - 1, &mut logits);
    let pos = prompt.len();
    let mut one = 0.0;
    eprintln!("forward cost of k tokens at position {pos} (median of 7, all k rows of logits):");
    for k in [1usize, 2, 4, 8, 16] {
        let toks: Vec<TokenId> = prompt[..k.min(prompt.len())].to_vec();
        let mut times: Vec<f64> = (0..7)
            .map(|_| {
                let t = Instant::now();
                decoder.forward_into(&toks, pos, &mut caches, 0, &mut logits);
                t.elapsed().as_secs_f64()
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let med = times[3];
        if k == 1 {
            one = med;
        }
        eprintln!(
            "  k = {k:>2}: {:>7.2} ms  ({:.2}x one token, {:.1} tokens/s)",
            med * 1e3,
            med / one,
            k as f64 / med
        );
    }
}
