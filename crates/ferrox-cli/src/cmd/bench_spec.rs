//! `ferrox bench spec`: plain vs speculative decoding on a workload.

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("ferrox bench spec: not built yet")
}
