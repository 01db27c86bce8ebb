#[derive(clap::Args)]
pub struct Args {
    /// Model: a path, a catalog name or hf:OWNER/REPO/FILE.gguf.
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("not yet available in this build")
}
