//! `hf:OWNER/REPO/FILE` references through `hf-hub`: its cache under the ferrox home, the
//! network only when the file is missing, and a short reachability check first.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::{Hub, HubError};

impl Hub {
    /// `hf:` references: the hf-hub cache under the ferrox home, network only when missing.
    pub(crate) fn pull_hf(&self, repo: &str, file: &str) -> Result<PathBuf, HubError> {
        use hf_hub::{Cache, Repo};
        let cache_dir = self.dir.parent().unwrap_or(&self.dir).join("huggingface");
        let cache = Cache::new(cache_dir.clone());
        if let Some(p) = cache.repo(Repo::model(repo.to_string())).get(file) {
            return Ok(p);
        }
        let endpoint = self.hf_endpoint.clone();
        check_reachable(&endpoint)?;
        let api = hf_hub::api::sync::ApiBuilder::from_cache(cache)
            .with_progress(true)
            .with_endpoint(endpoint)
            .with_retries(0)
            .build()
            .map_err(|e| HubError::Hf {
                repo: repo.to_string(),
                file: file.to_string(),
                message: e.to_string(),
            })?;
        api.model(repo.to_string())
            .get(file)
            .map_err(|e| HubError::Hf {
                repo: repo.to_string(),
                file: file.to_string(),
                message: e.to_string(),
            })
    }
}

/// Connects to the endpoint with a short timeout so an offline machine fails in seconds
/// rather than after the HTTP client's long defaults.
fn check_reachable(endpoint: &str) -> Result<(), HubError> {
    let unreachable = |reason: String| HubError::HfUnreachable {
        endpoint: endpoint.to_string(),
        reason,
    };
    let rest = endpoint
        .strip_prefix("https://")
        .map(|r| (r, 443))
        .or_else(|| endpoint.strip_prefix("http://").map(|r| (r, 80)));
    let (rest, default_port) =
        rest.ok_or_else(|| unreachable("endpoint is not an http(s) URL".into()))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:{default_port}")
    };
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(|e| unreachable(format!("cannot resolve {hostport}: {e}")))?
        .collect();
    let mut last = String::from("no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(_) => return Ok(()),
            Err(e) => last = format!("connect {a}: {e}"),
        }
    }
    Err(unreachable(last))
}
