//! `ferrox bench`: llama-bench-shaped prompt-processing and generation speed
//! (`ferrox bench spec`: speculative decoding on a workload; `ferrox bench moe`: one
//! GLM-4.5-Air-shaped MoE layer).
//!
//! Tests follow llama-bench (tools/llama-bench/llama-bench.cpp): `pp<N>` evaluates N random
//! tokens as one batch from an empty cache (logits of the last row only), `tg<N>` decodes N
//! single tokens from an empty cache; one warm-up run, then `-r` timed runs, and the reported
//! rate is the mean ± sample standard deviation of the per-run tokens/s.

use super::engine;
use anyhow::Context;
use ferrox_core::cache::KvCache;
use ferrox_models::blocks::moe::bench as moe_bench;
use ferrox_models::decoder::Decoder;
use ferrox_tokenizer::TokenId;
use serde_json::json;
use std::time::Instant;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub sub: Option<Sub>,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Plain vs speculative decoding on a prompt workload (tokens/s, acceptance per drafter).
    Spec(super::bench_spec::Args),
    /// One GLM-4.5-Air-shaped MoE layer (Q4_K, random weights) at batch 1 and 8.
    Moe(MoeArgs),
}

#[derive(clap::Args)]
pub struct ModelArgs {
    #[command(flatten)]
    pub model: super::engine::ModelFlags,
    #[command(flatten)]
    pub dist: super::dist::DistArgs,
    /// Prompt lengths, comma-separated (0 skips the prompt test).
    #[arg(short = 'p', long, value_delimiter = ',', default_value = "512")]
    pub n_prompt: Vec<usize>,
    /// Generation lengths, comma-separated (0 skips the generation test).
    #[arg(short = 'n', long, value_delimiter = ',', default_value = "128")]
    pub n_gen: Vec<usize>,
    /// Context depths, comma-separated: each test runs after this many tokens are already in
    /// the cache (llama-bench's `-d`; filling the context is not timed).
    #[arg(short = 'd', long, value_delimiter = ',', default_value = "0")]
    pub n_depth: Vec<usize>,
    /// Worker threads.
    #[arg(short = 't', long, default_value_t = 2)]
    pub threads: usize,
    /// Timed repetitions per test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Output format: md (table) or json (llama-bench's field names).
    #[arg(short = 'o', long, default_value = "md")]
    pub output: Format,
    /// The machine's memory bandwidth in GB/s, for the decode roofline fraction.
    #[arg(long, default_value_t = 30.0)]
    pub bandwidth: f64,
}

#[derive(clap::Args)]
pub struct MoeArgs {
    /// Worker threads.
    #[arg(short = 't', long, default_value_t = 2)]
    pub threads: usize,
    /// Batch sizes, comma-separated.
    #[arg(short = 'b', long, value_delimiter = ',', default_value = "1,8")]
    pub batch: Vec<usize>,
    /// Seconds of timed runs per batch size.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    #[arg(short = 'o', long, default_value = "md")]
    pub output: Format,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Md,
    Json,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.sub {
        Some(Sub::Spec(a)) => super::bench_spec::run(a),
        Some(Sub::Moe(a)) => run_moe(a),
        None => run_model(args.model),
    }
}

/// Builds the thread pool of exactly `threads` workers every parallel kernel runs on.
fn pool(threads: usize) -> anyhow::Result<rayon::ThreadPool> {
    anyhow::ensure!(threads > 0, "-t must be at least 1");
    engine::set_threads(threads);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("building the thread pool")
}

/// Sizes of the model's weights as llama-bench reports them, and the bytes one decoded token
/// reads: every weight except the embedding table (one row is looked up), plus the LM head;
/// of the routed expert stacks (`*_exps.*`) only the `n_active` experts a token uses per layer.
struct ModelSizes {
    size: u64,
    params: u64,
    read_per_token: u64,
}

impl ModelSizes {
    /// Weight bandwidth of decoding at `tokens_per_s`.
    fn gb_per_s(&self, tokens_per_s: f64) -> f64 {
        tokens_per_s * self.read_per_token as f64 / 1e9
    }
}

fn model_sizes(dec: &Decoder) -> ModelSizes {
    let (size, params, experts) = match &dec.gguf {
        Some(g) => g.tensors().iter().fold((0, 0, 0), |(s, p, e), t| {
            let routed = if t.name.contains("_exps.") {
                t.n_bytes
            } else {
                0
            };
            (s + t.n_bytes, p + t.n_elements, e + routed)
        }),
        None => (0, 0, 0),
    };
    let moe = &dec.config.moe;
    let active = match moe.n_experts {
        0 => experts,
        n => experts / n as u64 * moe.n_experts_active.min(n) as u64,
    };
    let embed = dec.embed.bytes().len() as u64;
    let tied = dec.embed.bytes().as_ptr() == dec.lm_head.bytes().as_ptr();
    let head = if tied { embed } else { 0 };
    ModelSizes {
        size,
        params,
        read_per_token: size.saturating_sub(embed + experts) + active + head,
    }
}

struct TestResult {
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    samples_ns: Vec<u64>,
}

impl TestResult {
    fn tokens(&self) -> usize {
        self.n_prompt + self.n_gen
    }
    fn samples_ts(&self) -> Vec<f64> {
        self.samples_ns
            .iter()
            .map(|&ns| self.tokens() as f64 * 1e9 / ns.max(1) as f64)
            .collect()
    }
    fn name(&self) -> String {
        let test = if self.n_gen == 0 {
            format!("pp{}", self.n_prompt)
        } else {
            format!("tg{}", self.n_gen)
        };
        match self.n_depth {
            0 => test,
            d => format!("{test} @ d{d}"),
        }
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / v.len() as f64;
    if v.len() < 2 {
        return (m, 0.0);
    }
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() - 1) as f64;
    (m, var.sqrt())
}

/// llama-bench's token source: a fixed-seed stream of ids over the vocabulary.
struct TokenStream(u64);

impl TokenStream {
    fn next(&mut self, vocab: usize) -> TokenId {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % vocab as u64) as TokenId
    }
}

/// The timed tests of one run: the model, repetitions per test, one token stream through all
/// of them.
struct Timer<'a> {
    dec: &'a Decoder,
    reps: usize,
    toks: TokenStream,
}

impl Timer<'_> {
    fn token(&mut self) -> TokenId {
        self.toks.next(self.dec.vocab_size())
    }

    /// Caches filled with `depth` stream tokens (untimed), as llama-bench does before a test
    /// at depth; the tests then cut back to this point between repetitions.
    fn fill(&mut self, depth: usize) -> Vec<KvCache> {
        let mut caches = self.dec.new_caches();
        if depth > 0 {
            let tokens: Vec<TokenId> = (0..depth).map(|_| self.token()).collect();
            let mut logits = Vec::new();
            self.dec
                .forward_into(&tokens, 0, &mut caches, depth - 1, &mut logits);
        }
        caches
    }

    /// `pp n` at `depth`: one batched forward of `n` tokens per repetition (plus a warm-up).
    fn prompt(&mut self, n: usize, depth: usize) -> Vec<u64> {
        let mut caches = self.fill(depth);
        let mut logits = Vec::new();
        let mut samples = Vec::with_capacity(self.reps);
        for rep in 0..=self.reps {
            caches.iter_mut().for_each(|c| c.truncate(depth));
            let tokens: Vec<TokenId> = (0..n).map(|_| self.token()).collect();
            let t = Instant::now();
            self.dec
                .forward_into(&tokens, depth, &mut caches, n - 1, &mut logits);
            let ns = t.elapsed().as_nanos() as u64;
            if rep > 0 {
                samples.push(ns);
            }
        }
        samples
    }

    /// `tg n` at `depth`: `n` one-token forwards per repetition.
    fn gen(&mut self, n: usize, depth: usize) -> Vec<u64> {
        let mut caches = self.fill(depth);
        let mut logits = Vec::new();
        // Warm-up: one token, as llama-bench does before generation tests.
        let first = self.token();
        self.dec
            .forward_into(&[first], depth, &mut caches, 0, &mut logits);
        let start = depth + 1;
        let mut samples = Vec::with_capacity(self.reps);
        for _ in 0..self.reps {
            caches.iter_mut().for_each(|c| c.truncate(start));
            let mut tok = self.token();
            let t = Instant::now();
            for pos in start..start + n {
                self.dec
                    .forward_into(&[tok], pos, &mut caches, 0, &mut logits);
                tok = self.token();
            }
            samples.push(t.elapsed().as_nanos() as u64);
        }
        samples
    }
}

fn run_model(a: ModelArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.reps > 0, "-r must be at least 1");
    let pool = pool(a.threads)?;
    let eng = a.model.load(a.output == Format::Md, &a.dist)?;
    let dec = &eng.decoder;
    let sizes = model_sizes(dec);
    let results = pool.install(|| run_tests(dec, &a));
    super::dist::save_load(&a.dist, dec)?;
    let model = Model {
        filename: eng.path.display().to_string(),
        model_type: format!("{:?} {}", dec.config.arch, type_name(dec)),
        sizes,
    };
    match a.output {
        Format::Json => print_json(&model, &results, &a),
        Format::Md => {
            print_md(&model, &results, &a);
            Ok(())
        }
    }
}

/// Per depth, the `pp` tests, then the `tg` tests, one token stream through all of them.
fn run_tests(dec: &Decoder, a: &ModelArgs) -> Vec<TestResult> {
    let mut timer = Timer {
        dec,
        reps: a.reps,
        toks: TokenStream(42),
    };
    let mut results = Vec::new();
    for &d in &a.n_depth {
        for &p in a.n_prompt.iter().filter(|&&p| p > 0) {
            results.push(TestResult {
                n_prompt: p,
                n_gen: 0,
                n_depth: d,
                samples_ns: timer.prompt(p, d),
            });
        }
        for &g in a.n_gen.iter().filter(|&&g| g > 0) {
            results.push(TestResult {
                n_prompt: 0,
                n_gen: g,
                n_depth: d,
                samples_ns: timer.gen(g, d),
            });
        }
    }
    results
}

/// What the report says about the model.
struct Model {
    filename: String,
    model_type: String,
    sizes: ModelSizes,
}

/// llama-bench's JSON rows, plus the decode bandwidth and roofline fraction.
fn print_json(model: &Model, results: &[TestResult], a: &ModelArgs) -> anyhow::Result<()> {
    let sizes = &model.sizes;
    let (type_k, type_v) = a.model.cache.types();
    let rows: Vec<_> = results
        .iter()
        .map(|r| {
            let ts = r.samples_ts();
            let (avg_ts, stddev_ts) = mean_sd(&ts);
            let ns: Vec<f64> = r.samples_ns.iter().map(|&x| x as f64).collect();
            let (avg_ns, stddev_ns) = mean_sd(&ns);
            let gbs = if r.n_gen > 0 {
                sizes.gb_per_s(avg_ts)
            } else {
                0.0
            };
            json!({
                "build_commit": env!("CARGO_PKG_VERSION"),
                "backends": "CPU",
                "model_filename": model.filename,
                "model_type": model.model_type,
                "model_size": sizes.size,
                "model_n_params": sizes.params,
                "n_batch": r.n_prompt.max(1),
                "n_threads": a.threads,
                "n_prompt": r.n_prompt,
                "n_gen": r.n_gen,
                "n_depth": r.n_depth,
                "type_k": type_k.name(),
                "type_v": type_v.name(),
                "avg_ns": avg_ns as u64,
                "stddev_ns": stddev_ns as u64,
                "avg_ts": avg_ts,
                "stddev_ts": stddev_ts,
                "samples_ns": r.samples_ns,
                "samples_ts": ts,
                "weight_bytes_per_token": sizes.read_per_token,
                "gb_per_s": gbs,
                "roofline_fraction": gbs / a.bandwidth,
            })
        })
        .collect();
    println!("{}", serde_json::to_string_pretty(&rows)?);
    Ok(())
}

/// llama-bench's markdown table, plus the decode bandwidth and roofline columns.
fn print_md(model: &Model, results: &[TestResult], a: &ModelArgs) {
    let sizes = &model.sizes;
    println!("| model | size | params | backend | threads | test | t/s | GB/s | roofline |");
    println!("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |");
    for r in results {
        let (m, sd) = mean_sd(&r.samples_ts());
        let (gbs, roof) = if r.n_gen > 0 {
            let g = sizes.gb_per_s(m);
            (
                format!("{g:.1}"),
                format!("{:.0}%", 100.0 * g / a.bandwidth),
            )
        } else {
            ("".into(), "".into())
        };
        println!(
            "| {} | {:.2} MiB | {:.2} M | CPU | {} | {} | {:.2} ± {:.2} | {} | {} |",
            model.model_type,
            sizes.size as f64 / (1u64 << 20) as f64,
            sizes.params as f64 / 1e6,
            a.threads,
            r.name(),
            m,
            sd,
            gbs,
            roof
        );
    }
    println!(
        "\nweights read per decoded token: {:.1} MB; roofline at {} GB/s: {:.1} tok/s",
        sizes.read_per_token as f64 / 1e6,
        a.bandwidth,
        a.bandwidth * 1e9 / sizes.read_per_token.max(1) as f64
    );
}

/// The weight type holding most bytes of the layer matrices (llama-bench prints the file type).
fn type_name(dec: &Decoder) -> String {
    let Some(g) = &dec.gguf else {
        return String::new();
    };
    let mut count: Vec<(ferrox_core::quant::GgmlType, u64)> = Vec::new();
    let layer =
        |t: &&ferrox_format::gguf::TensorInfo| t.dims.len() >= 2 && t.name.starts_with("blk.");
    for t in g.tensors().iter().filter(layer) {
        match count.iter_mut().find(|(ty, _)| *ty == t.ty) {
            Some((_, n)) => *n += t.n_bytes,
            None => count.push((t.ty, t.n_bytes)),
        }
    }
    count
        .iter()
        .max_by_key(|(_, n)| *n)
        .map(|(ty, _)| ty.name().to_string())
        .unwrap_or_default()
}

fn run_moe(a: MoeArgs) -> anyhow::Result<()> {
    let pool = pool(a.threads)?;
    let shape = moe_bench::GLM45_AIR;
    let layer = moe_bench::random_layer(shape, 1);
    let rows: Vec<_> = pool.install(|| {
        a.batch
            .iter()
            .filter(|&&b| b > 0)
            .map(|&b| moe_bench::bench(&layer, b, a.seconds))
            .collect()
    });
    match a.output {
        Format::Json => {
            let v: Vec<_> = rows
                .iter()
                .map(|r| {
                    json!({
                        "test": "moe_glm45_air",
                        "hidden": shape.hidden,
                        "n_experts": shape.n_experts,
                        "n_active": shape.n_active,
                        "n_shared": shape.n_shared,
                        "expert_ffn": shape.expert_ffn,
                        "n_threads": a.threads,
                        "n_batch": r.batch,
                        "avg_ts": r.tokens_per_s,
                        "gb_per_s": r.gb_per_s,
                        "experts_touched": r.experts_touched,
                    })
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&v)?);
        }
        Format::Md => {
            println!(
                "GLM-4.5-Air MoE layer: hidden {}, {} experts ({} active + {} shared), expert FFN {}, Q4_K (down: Q5_0)",
                shape.hidden, shape.n_experts, shape.n_active, shape.n_shared, shape.expert_ffn
            );
            println!("| threads | batch | experts touched | tokens/s | GB/s |");
            println!("| ---: | ---: | ---: | ---: | ---: |");
            for r in &rows {
                println!(
                    "| {} | {} | {:.1} | {:.1} | {:.1} |",
                    a.threads, r.batch, r.experts_touched, r.tokens_per_s, r.gb_per_s
                );
            }
        }
    }
    Ok(())
}
