//! One model across processes (issue 22): `mpiexec -n R ferrox CMD --expert-parallel ...`.
//! Every rank runs the same command line; rank 0 does the command's work (and alone writes
//! stdout and files), the other ranks load only their share of each MoE layer's routed
//! experts and serve them until rank 0 finishes, then exit 0 silently. The MPI side is
//! `ferrox-mpi`, built with `--features mpi`; without it the flag is refused.

use anyhow::Context;
use ferrox_models::decoder::Decoder;
#[cfg(feature = "mpi")]
use ferrox_models::distributed::Share;
use std::path::{Path, PathBuf};
#[cfg(feature = "mpi")]
use std::sync::Arc;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct DistArgs {
    /// Spread each MoE layer's routed experts over the MPI ranks (run under `mpiexec`; needs
    /// a build with `--features mpi`). Logits are bit-identical to one process.
    #[arg(long = "expert-parallel")]
    pub expert_parallel: bool,
    /// Split the layers into contiguous ranges, one per MPI rank, with several micro-batches
    /// in flight (run under `mpiexec`; needs a build with `--features mpi`). Each rank keeps
    /// only its layers' weights and KV caches; logits are bit-identical to one process.
    #[arg(long = "pipeline-parallel", conflicts_with = "expert_parallel")]
    pub pipeline_parallel: bool,
    /// With --expert-parallel: place each MoE layer's experts by their measured load (a JSON
    /// file --save-expert-load wrote) in contiguous ranges of about equal load, instead of
    /// equal size.
    #[arg(
        long = "expert-load",
        value_name = "FILE",
        requires = "expert_parallel"
    )]
    pub expert_load: Option<PathBuf>,
    /// When the command ends, write how many tokens the router sent to each expert of each
    /// MoE layer, as JSON (the input of --expert-load).
    #[arg(long = "save-expert-load", value_name = "FILE")]
    pub save_expert_load: Option<PathBuf>,
}

/// The file of `--save-expert-load` / `--expert-load`: per layer (by index), the tokens routed
/// to each of its experts; `null` for a layer without routed experts.
#[derive(serde::Serialize, serde::Deserialize)]
struct ExpertLoad {
    layers: Vec<Option<Vec<u64>>>,
}

/// `--expert-load`'s per-layer placement weights: each expert's count plus one, so an expert
/// the measurement never routed to still weighs something (and still gets a place).
#[cfg(feature = "mpi")]
fn read_load(path: &Path) -> anyhow::Result<Arc<Vec<Option<Vec<f64>>>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let load: ExpertLoad = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not an expert load file (--save-expert-load writes them)",
            path.display()
        )
    })?;
    let weights = load
        .layers
        .into_iter()
        .map(|l| l.map(|counts| counts.into_iter().map(|c| c as f64 + 1.0).collect()));
    Ok(Arc::new(weights.collect()))
}

/// Writes `--save-expert-load`'s file from what `decoder`'s routers counted.
pub fn save_load(args: &DistArgs, decoder: &Decoder) -> anyhow::Result<()> {
    let Some(path) = &args.save_expert_load else {
        return Ok(());
    };
    let layers = decoder
        .layers
        .iter()
        .map(|l| {
            let moe = l.ffn.as_moe().filter(|m| m.router.is_some())?;
            let mut counts = moe.routed_counts();
            counts.resize(moe.experts.len(), 0);
            Some(counts)
        })
        .collect();
    let text = serde_json::to_string(&ExpertLoad { layers })?;
    std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
}

#[cfg(feature = "mpi")]
pub use ferrox_mpi::Cluster;

/// Without MPI there is never a cluster.
#[cfg(not(feature = "mpi"))]
pub enum Cluster {}

/// Joins the MPI job when the flags ask for it (before loading: a failed start costs nothing).
#[cfg(feature = "mpi")]
pub fn start(args: &DistArgs) -> anyhow::Result<Option<Cluster>> {
    use ferrox_mpi::Mode;
    Ok(match (args.expert_parallel, args.pipeline_parallel) {
        (true, _) => Some(Cluster::start(Mode::Experts)?),
        (_, true) => Some(Cluster::start(Mode::Stages)?),
        _ => None,
    })
}

#[cfg(not(feature = "mpi"))]
pub fn start(args: &DistArgs) -> anyhow::Result<Option<Cluster>> {
    anyhow::ensure!(
        !args.expert_parallel && !args.pipeline_parallel,
        "--expert-parallel and --pipeline-parallel need ferrox built with `--features mpi`"
    );
    Ok(None)
}

/// Loads the model as this process's role asks: alone, everything; rank 0 of an
/// expert-parallel job, everything but the other ranks' routed experts (which it sends them
/// work for); any other rank, only its routed experts, which it serves until rank 0 ends,
/// then ends the process (exit 0). Pipeline-parallel: see [`load_stages`].
#[cfg(feature = "mpi")]
pub fn load(
    cluster: Option<Cluster>,
    path: &Path,
    args: &DistArgs,
) -> anyhow::Result<(Decoder, Option<Cluster>)> {
    let loading = || format!("loading {}", path.display());
    let Some(c) = cluster else {
        return Ok((Decoder::load(path).with_context(loading)?, None));
    };
    if args.pipeline_parallel {
        return load_stages(c, path).map(|d| (d.0, Some(d.1)));
    }
    // From here on a failing rank must take the others down: they would wait for it in a
    // collective forever.
    let load = match args.expert_load.as_deref().map(read_load).transpose() {
        Ok(load) => load,
        Err(e) => c.abort(&format!("{e:#}")),
    };
    let split = ferrox_mpi::split(&c, load);
    if c.rank() != 0 {
        let blocks = ferrox_models::load::load_experts(path, &split).with_context(loading);
        let handler = blocks.and_then(|(cfg, blocks)| {
            let h = ferrox_mpi::expert_handler(&c, blocks, &split)?;
            Ok((cfg.hidden_dim, h))
        });
        let (hidden, handler) = match handler {
            Ok(h) => h,
            Err(e) => c.abort(&format!("{e:#}")),
        };
        super::heap::trim_heap();
        c.ready()?;
        c.serve(hidden, handler)?;
        std::process::exit(0);
    }
    let share = Share {
        experts: Some(split.clone()),
        layers: None,
        driver: true,
    };
    let decoder = Decoder::load_share(path, &share).with_context(loading);
    let decoder = decoder.and_then(|mut d| {
        ferrox_mpi::drive_experts(&c, &mut d, &split)?;
        Ok(d)
    });
    let decoder = match decoder {
        Ok(d) => d,
        Err(e) => c.abort(&format!("{e:#}")),
    };
    c.ready()?;
    if let Some(file) = &args.expert_load {
        eprintln!(
            "expert placement by the load in {}: {}",
            file.display(),
            placement_text(&decoder, &split)
        );
    }
    Ok((decoder, Some(c)))
}

/// Pipeline parallelism: this rank builds only its layers (rank 0 also the embedding, the
/// final norm and the LM head); ranks 1.. serve their layers and exit inside.
#[cfg(feature = "mpi")]
fn load_stages(c: Cluster, path: &Path) -> anyhow::Result<(Decoder, Cluster)> {
    let loading = || format!("loading {}", path.display());
    let decoder = ferrox_models::load::load_config(path).and_then(|cfg| {
        let share = Share {
            experts: None,
            layers: Some(ferrox_mpi::stage_layers(&c, &cfg)),
            driver: c.rank() == 0,
        };
        Decoder::load_share(path, &share)
    });
    let mut decoder = match decoder.with_context(loading) {
        Ok(d) => d,
        Err(e) => c.abort(&format!("{e:#}")),
    };
    if c.rank() != 0 {
        let hidden = decoder.config.hidden_dim;
        super::heap::trim_heap();
        c.ready()?;
        c.serve_stages(hidden, ferrox_mpi::stage_handler(decoder))?;
        std::process::exit(0);
    }
    ferrox_mpi::drive_stages(&c, &mut decoder);
    c.ready()?;
    Ok((decoder, c))
}

/// Each MoE layer's expert ranges, rank by rank: `layer 1: 0..40 40..128; ...`.
#[cfg(feature = "mpi")]
fn placement_text(decoder: &Decoder, split: &ferrox_models::distributed::ExpertSplit) -> String {
    let layers = decoder.layers.iter().enumerate().filter_map(|(l, layer)| {
        let p = layer.ffn.as_moe()?.remote.as_ref()?;
        let ranges: Vec<String> = (0..split.places)
            .map(|r| format!("{:?}", p.placement.range(r)))
            .collect();
        Some(format!("layer {l}: {}", ranges.join(" ")))
    });
    layers.collect::<Vec<_>>().join("; ")
}

#[cfg(not(feature = "mpi"))]
pub fn load(
    cluster: Option<Cluster>,
    path: &Path,
    _args: &DistArgs,
) -> anyhow::Result<(Decoder, Option<Cluster>)> {
    match cluster {
        None => Ok((
            Decoder::load(path).with_context(|| format!("loading {}", path.display()))?,
            None,
        )),
        Some(c) => match c {},
    }
}

/// What rank 0 sent and received so far, on stderr: per token and MoE layer, next to the
/// analytic figure for the measured routing.
#[cfg(feature = "mpi")]
pub fn report(cluster: Option<&Cluster>, hidden: usize) {
    let Some(c) = cluster else {
        return;
    };
    let t = c.traffic();
    if c.mode() == ferrox_mpi::Mode::Stages {
        eprintln!(
            "pipeline parallel over {} ranks: {} forwards in {} micro-batches, {} rows; {} bytes \
             across each rank boundary (analytic 4·hidden·rows = {} plus headers)",
            c.size(),
            t.forwards,
            t.micro_batches,
            t.stage_rows,
            t.stage_bytes,
            4 * hidden as u64 * t.stage_rows,
        );
        return;
    }
    eprintln!(
        "expert parallel over {} ranks: {} exchanges, {} token rows and {} (token, expert) \
         pairs sent; {} bytes out, {} bytes back; analytic 4·hidden·(rows + pairs) + 8·pairs \
         = {} bytes",
        c.size(),
        t.exchanges,
        t.rows,
        t.pairs,
        t.bytes_out,
        t.bytes_back,
        4 * hidden as u64 * (t.rows + t.pairs) + 8 * t.pairs,
    );
}

#[cfg(not(feature = "mpi"))]
pub fn report(cluster: Option<&Cluster>, _hidden: usize) {
    if let Some(c) = cluster {
        match *c {}
    }
}
