//! The `ferrox` command line.

mod cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ferrox",
    version,
    about = "Run open-weight language models on the CPU"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Download a model from the catalog (or hf:OWNER/REPO/FILE.gguf) and print its path.
    Pull(cmd::pull::Args),
    /// Print a GGUF file's metadata and tensor table.
    Inspect(cmd::inspect::Args),
    /// List the downloaded models.
    List(cmd::models::ListArgs),
    /// Delete downloaded models.
    Rm(cmd::models::RmArgs),
    /// Print a model's card: family, parameters, quantization, context, chat template.
    Show(cmd::models::ShowArgs),
    /// Print the token ids (and pieces) of a text.
    Tokenize(cmd::tokenize::Args),
    /// Generate a completion of a prompt, streamed to stdout.
    Run(cmd::run::Args),
    /// Interactive multi-turn chat through the model's chat template.
    Chat(cmd::chat::Args),
    /// Write a model's logits for a text or token ids as a float32 .npy file.
    Logits(cmd::logits::Args),
    /// Perplexity of a text file (llama-perplexity's method); last line `PPL = <value>`.
    Perplexity(cmd::perplexity::Args),
    /// Sentence embeddings (or rerank scores) of texts with an encoder model, as JSON lines.
    Embed(cmd::embed::Args),
    /// Collect a draft head's training data from text: tokens, the model's greedy choices
    /// and final hidden states, as .npy files.
    SpecData(cmd::spec_data::Args),
    /// Serve the model over an OpenAI-compatible HTTP API.
    Serve(cmd::serve_args::Args),
    /// Measure prompt and generation speed (llama-bench's table and JSON).
    Bench(cmd::bench::Args),
    /// Start a coding agent (claude or codex) on a ferrox server, reusing or starting one.
    Launch(cmd::launch::Args),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FERROX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    // The supported architectures come from the registry, so help cannot drift from it.
    let help = format!(
        "Model architectures: {}",
        ferrox_models::arch::supported_names()
    );
    let matches = <Cli as clap::CommandFactory>::command()
        .after_help(help)
        .get_matches();
    let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches)?;
    configure_kernels()?;
    match cli.command {
        Command::Pull(a) => cmd::pull::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::List(a) => cmd::models::list(a),
        Command::Rm(a) => cmd::models::rm(a),
        Command::Show(a) => cmd::models::show(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Chat(a) => cmd::chat::run(a),
        Command::Logits(a) => cmd::logits::run(a),
        Command::Perplexity(a) => cmd::perplexity::run(a),
        Command::SpecData(a) => cmd::spec_data::run(a),
        Command::Embed(a) => cmd::embed::run(a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Launch(a) => cmd::launch::run(a),
    }
}

/// Kernel options from the environment, before any kernel runs: `FERROX_ISA=scalar` (or `avx2`)
/// forces a lesser instruction set than the detected one, `FERROX_X16=0` keeps the GGUF layout
/// and the row kernels.
fn configure_kernels() -> anyhow::Result<()> {
    use ferrox_core::kernels::{configure, Isa, KernelOptions};
    let isa = match std::env::var("FERROX_ISA").as_deref() {
        Ok("scalar") => Some(Isa::Scalar),
        Ok("avx2") => Some(Isa::Avx2),
        _ => None,
    };
    let x16 = !std::env::var("FERROX_X16").is_ok_and(|v| v == "0");
    Ok(configure(KernelOptions { isa, x16 })?)
}
