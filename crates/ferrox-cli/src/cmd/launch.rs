//! `ferrox launch claude|codex`: starts a coding agent on ferrox, as `ollama launch` does. It
//! reuses a server already answering on the port or starts `ferrox serve` with a context the
//! agent needs, and points the agent at it through its environment only — Claude Code's
//! `ANTHROPIC_*` variables, Codex's `CODEX_HOME` set to a temporary profile whose provider
//! speaks the Responses API (Codex's `config.toml`, `model_providers`) — so the user's own
//! agent configuration is never written.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Agent {
    /// Claude Code (`claude`), over the Anthropic Messages API.
    Claude,
    /// OpenAI Codex CLI (`codex`), over the Responses API.
    Codex,
}

impl Agent {
    fn binary(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
        }
    }
    fn npm_package(self) -> &'static str {
        match self {
            Agent::Claude => "@anthropic-ai/claude-code",
            Agent::Codex => "@openai/codex",
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// The agent to start.
    pub agent: Agent,
    /// Model (as `ferrox serve -m`; default: the catalog default).
    #[arg(short = 'm', long = "model")]
    pub model: Option<String>,
    /// Port of the server to reuse or start (on 127.0.0.1).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Context size of a server started here: the agents' instructions and tools alone take
    /// some 15k tokens.
    #[arg(short = 'c', long = "ctx-size", default_value_t = 32768)]
    pub ctx: usize,
    /// Arguments for the agent (after `--`).
    #[arg(last = true)]
    pub agent_args: Vec<String>,
}

/// The agent's executable on `path` (a `PATH` value).
fn find_binary(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    std::env::split_paths(path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn missing_message(agent: Agent) -> String {
    format!(
        "`{}` was not found on PATH; install it with:\n    npm install -g {}",
        agent.binary(),
        agent.npm_package()
    )
}

/// Claude Code's environment: the server as its API, the served model for every model role
/// (its background requests name the small model), the server's context window (an unknown
/// model id is otherwise taken for a 1M-token one, and compaction never starts in time), no
/// traffic to Anthropic's other services.
fn claude_env(base: &str, model: &str, key: &str, ctx: usize) -> Vec<(String, String)> {
    let ctx = ctx.to_string();
    let mut env = vec![
        ("ANTHROPIC_BASE_URL", base),
        ("ANTHROPIC_AUTH_TOKEN", key),
        ("ANTHROPIC_MODEL", model),
        ("ANTHROPIC_SMALL_FAST_MODEL", model),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", model),
        ("ANTHROPIC_DEFAULT_SONNET_MODEL", model),
        ("ANTHROPIC_DEFAULT_OPUS_MODEL", model),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
        ("CLAUDE_CODE_MAX_CONTEXT_TOKENS", &ctx),
        // Its per-request billing line would otherwise open the system prompt (the server
        // drops it too, for agents started by hand).
        ("CLAUDE_CODE_ATTRIBUTION_HEADER", "0"),
        // Its default 10-minute request timeout is shorter than a first prefill of its
        // ~12k-token instructions on a small CPU.
        ("API_TIMEOUT_MS", "3600000"),
    ];
    env.sort();
    env.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Codex's `config.toml` for a temporary `CODEX_HOME`: ferrox as the model provider.
fn codex_config(base: &str, model: &str, key_env: Option<&str>) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut c = format!(
        "model = {}\nmodel_provider = \"ferrox\"\n\n[model_providers.ferrox]\n\
         name = \"ferrox\"\nbase_url = {}\nwire_api = \"responses\"\n",
        quote(model),
        quote(&format!("{base}/v1"))
    );
    if let Some(k) = key_env {
        c.push_str(&format!("env_key = {}\n", quote(k)));
    }
    c
}

/// A plain HTTP GET on 127.0.0.1; the status and body, or `None` when nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some((status, body))
}

/// The model a server on `port` serves, if one answers.
fn served_model(port: u16) -> Option<String> {
    let (status, body) = http_get(port, "/v1/models")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    v.pointer("/data/0/id")?.as_str().map(String::from)
}

/// The context window of the model a server on `port` has loaded (Ollama's `/api/ps`).
fn served_ctx(port: u16) -> Option<usize> {
    let (status, body) = http_get(port, "/api/ps")?;
    let v: serde_json::Value = serde_json::from_str(&body).ok().filter(|_| status == 200)?;
    let n = v.pointer("/models/0/context_length")?.as_u64()?;
    usize::try_from(n).ok()
}

/// Starts `ferrox serve` (its output in `log`) and waits until it is ready.
fn start_server(a: &Args, model: &str, log: &Path) -> anyhow::Result<Child> {
    let out = std::fs::File::create(log)?;
    let mut child = Command::new(std::env::current_exe()?)
        .args(["serve", "-m", model, "--log-requests", "--no-webui"])
        .args(["-c", &a.ctx.to_string(), "--port", &a.port.to_string()])
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(600) {
        if let Some(status) = child.try_wait()? {
            bail!("ferrox serve exited ({status}); see {}", log.display());
        }
        if http_get(a.port, "/health/ready").is_some_and(|(s, _)| s == 200) {
            return Ok(child);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = child.kill();
    bail!("ferrox serve did not get ready; see {}", log.display())
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let bin = find_binary(a.agent.binary(), &path)
        .ok_or_else(|| anyhow::anyhow!(missing_message(a.agent)))?;
    let dir = std::env::temp_dir().join(format!("ferrox-launch-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (model, mut server) = match served_model(a.port) {
        Some(served) => {
            if a.model.as_ref().is_some_and(|m| m != &served) {
                bail!(
                    "the server on port {} serves `{served}`; stop it or pick another --port",
                    a.port
                );
            }
            eprintln!("using the ferrox server on port {} ({served})", a.port);
            (served, None)
        }
        None => {
            let model = a
                .model
                .clone()
                .unwrap_or_else(|| ferrox_hub::DEFAULT_MODEL.to_string());
            let log = dir.join("serve.log");
            eprintln!("starting ferrox serve -m {model} (log: {})", log.display());
            let child = start_server(&a, &model, &log)?;
            let served = served_model(a.port).unwrap_or(model);
            (served, Some(child))
        }
    };
    let base = format!("http://127.0.0.1:{}", a.port);
    // The CLI's own key, if the server wants one; the agents need some key either way.
    let key = std::env::var("FERROX_API_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    let mut cmd = Command::new(&bin);
    match a.agent {
        Agent::Claude => {
            let k = key.as_deref().unwrap_or("ferrox");
            let ctx = served_ctx(a.port).unwrap_or(a.ctx);
            cmd.envs(claude_env(&base, &model, k, ctx))
                .args(["--model", &model]);
        }
        Agent::Codex => {
            let home = dir.join("codex-home");
            std::fs::create_dir_all(&home)?;
            let key_env = key.as_ref().map(|_| "FERROX_API_KEY");
            std::fs::write(
                home.join("config.toml"),
                codex_config(&base, &model, key_env),
            )?;
            cmd.env("CODEX_HOME", &home);
        }
    }
    let status = cmd
        .args(&a.agent_args)
        .status()
        .with_context(|| format!("running {}", bin.display()));
    if let Some(s) = server.as_mut() {
        let _ = s.kill();
        let _ = s.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::process::exit(status?.code().unwrap_or(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_profile_points_at_the_responses_api() {
        let c = codex_config("http://127.0.0.1:9", "qwen2.5-coder:1.5b-instruct", None);
        assert_eq!(
            c,
            "model = \"qwen2.5-coder:1.5b-instruct\"\nmodel_provider = \"ferrox\"\n\n\
             [model_providers.ferrox]\nname = \"ferrox\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
             wire_api = \"responses\"\n"
        );
        let keyed = codex_config("http://h", "m", Some("FERROX_API_KEY"));
        assert!(keyed.ends_with("env_key = \"FERROX_API_KEY\"\n"), "{keyed}");
    }

    #[test]
    fn claude_gets_every_model_role() {
        let env = claude_env("http://127.0.0.1:9", "m", "k", 32768);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ANTHROPIC_BASE_URL"), Some("http://127.0.0.1:9"));
        for role in ["MODEL", "SMALL_FAST_MODEL", "DEFAULT_HAIKU_MODEL"] {
            assert_eq!(get(&format!("ANTHROPIC_{role}")), Some("m"), "{role}");
        }
        assert_eq!(get("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), Some("1"));
        assert_eq!(get("CLAUDE_CODE_MAX_CONTEXT_TOKENS"), Some("32768"));
        assert_eq!(get("CLAUDE_CODE_ATTRIBUTION_HEADER"), Some("0"));
    }

    #[test]
    fn a_missing_agent_names_its_npm_package() {
        let empty = std::env::temp_dir().join("ferrox-launch-test-empty");
        std::fs::create_dir_all(&empty).unwrap();
        assert_eq!(find_binary("claude", empty.as_os_str()), None);
        let m = missing_message(Agent::Codex);
        assert!(m.contains("npm install -g @openai/codex"), "{m}");
    }
}
