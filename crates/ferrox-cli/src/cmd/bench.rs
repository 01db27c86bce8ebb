//! `ferrox bench`: llama-bench-shaped prompt-processing and generation speed
//! (`ferrox bench spec`: speculative decoding on a workload).

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub sub: Option<Sub>,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Plain vs speculative decoding on a prompt workload (tokens/s, acceptance per drafter).
    Spec(super::bench_spec::Args),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.sub {
        Some(Sub::Spec(a)) => super::bench_spec::run(a),
        None => anyhow::bail!("ferrox bench: the model benchmark is not built yet"),
    }
}
