//! The flags of `ferrox serve`, and what the start-up makes of them for any kind of server
//! (one model, an encoder, several models): the id a model is served under and the server's
//! settings.

use std::sync::Arc;

use ferrox_models::embedding::Pooling;

#[derive(clap::Args)]
pub struct Args {
    /// Model: a catalog name, a path or hf:OWNER/REPO/FILE.gguf (default: the catalog default).
    /// Repeat to serve several: each loads on first use and the request's `model` picks.
    #[arg(short = 'm', long = "model")]
    pub model: Vec<String>,
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
    /// A smaller model with the same vocabulary that drafts for the served models (llama.cpp's
    /// `-md`), beside the lookup drafts: a catalog name or a path. A model whose vocabulary it
    /// does not share is served without it.
    #[arg(long = "draft-model", visible_alias = "model-draft")]
    pub draft_model: Option<String>,
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
    /// Keep the prefix cache's blocks in DIR too (per model and cache type): written as
    /// requests finish, read back at start within --cache-ram, so a restart keeps them.
    #[arg(long = "cache-dir", value_name = "DIR")]
    pub cache_dir: Option<std::path::PathBuf>,
    /// Where llama-server's `POST /slots/{id}?action=save|restore` keep their files (off:
    /// those routes answer 501).
    #[arg(long = "slot-save-path", value_name = "DIR")]
    pub slot_save_path: Option<std::path::PathBuf>,
    /// MiB the model's files under --cache-dir may take (least recently used go first).
    #[arg(long = "cache-disk-mb", default_value_t = 8192)]
    pub cache_disk_mb: u64,
    /// Tokens of finished generations (each output with its prompt's last 64 tokens) kept for
    /// drafting: an agent repeating earlier work has its old answer proposed and verified at
    /// batch cost (0 turns it off; the oldest go first).
    #[arg(long = "recall-tokens", default_value_t = ferrox_models::engine::DEFAULT_RECALL_TOKENS)]
    pub recall_tokens: usize,
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
    /// Also accept NAME in `model` for the served MODEL (e.g. the Haiku id an agent asks for;
    /// repeatable).
    #[arg(long = "alias", value_name = "NAME=MODEL")]
    pub aliases: Vec<String>,
    /// Log one line per request on stderr: route, status, prompt / cached / generated tokens,
    /// time to first token, total time.
    #[arg(long = "log-requests")]
    pub log_requests: bool,
    /// Serve every model in DIR (`.gguf` files and Hugging Face model directories) under its
    /// file name without extension; each loads on first use.
    #[arg(long = "models-dir", value_name = "DIR")]
    pub models_dir: Option<std::path::PathBuf>,
    /// With several -m: models loaded at once; the least recently used idle one unloads to
    /// make room (0: no limit).
    #[arg(long = "max-loaded", default_value_t = 0)]
    pub max_loaded: usize,
    /// With several -m: MiB the loaded models may hold together (weights, slot caches and
    /// prompt caches, as /api/ps reports them); the least recently used idle one unloads to
    /// make room, the one in use stays whatever its size (0: no limit).
    #[arg(long = "max-memory-mb", default_value_t = 0)]
    pub max_memory_mb: u64,
    /// With several -m: how long a model stays loaded after its last request, unless the
    /// request's `keep_alive` says otherwise (seconds or e.g. 10m; negative: forever).
    #[arg(long = "keep-alive", allow_hyphen_values = true)]
    pub keep_alive: Option<String>,
    /// With several -m: seconds a request waits for its model to load before a 503.
    #[arg(long = "load-timeout", default_value_t = 300)]
    pub load_timeout: u64,
}

/// The id a model is served under: catalog models by their catalog name however -m named
/// them, others by the -m text.
pub(super) fn served_id(name: &str, file: &str) -> String {
    ferrox_hub::CATALOG
        .iter()
        .find(|e| e.file == file || e.name == name)
        .map_or_else(|| name.to_string(), |e| e.name.to_string())
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

/// The server's settings from the flags (and `FERROX_API_KEY`).
pub(super) fn server_options(args: &Args, bound: std::net::SocketAddr) -> ferrox_server::Options {
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
        response_store: Default::default(),
        log_requests: args.log_requests,
        slot_save_path: args.slot_save_path.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
