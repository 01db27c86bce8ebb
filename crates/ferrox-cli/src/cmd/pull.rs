//! `ferrox pull NAME`: fetch a catalog model (or hf: file) and print its path on stdout.

use ferrox_hub::{CATALOG, DEFAULT_MODEL};

use super::model::{hub, BarProgress};

#[derive(clap::Args)]
pub struct Args {
    /// Catalog name (see --list) or hf:OWNER/REPO/FILE.gguf; default: the default model.
    pub name: Option<String>,
    /// List the catalog and what is already downloaded.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let hub = hub()?;
    if args.list {
        println!("{:<30} {:>10}  {:<8} FILE", "NAME", "SIZE", "STATE");
        for e in CATALOG {
            // Size only: --list must stay instant, the sha256 is checked on pull.
            let state = match std::fs::metadata(hub.path_of(e)) {
                Ok(m) if m.len() == e.bytes => "present",
                Ok(_) => "damaged",
                Err(_) => "missing",
            };
            let default = if e.name == DEFAULT_MODEL {
                " (default)"
            } else {
                ""
            };
            println!(
                "{:<30} {:>7} MB  {:<8} {}{default}",
                e.name,
                e.bytes / 1_000_000,
                state,
                hub.path_of(e).display()
            );
        }
        return Ok(());
    }
    let name = args.name.as_deref().unwrap_or(DEFAULT_MODEL);
    let bar = BarProgress::new();
    let r = hub.pull(name, &bar);
    bar.finish();
    let path = r?;
    println!("{}", path.display());
    Ok(())
}
