//! The models on disk as the server's model-management routes see them (Ollama's
//! `/api/tags`, `/api/show`, `/api/pull`). The binary supplies it (model files, the catalog
//! and downloads live there); a server without one lists only the model it serves.

/// A model's card, read from its file's metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelCard {
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    /// ferrox's architecture name (`qwen2`, `gemma3`, …).
    pub family: String,
    /// The file's own architecture key (`general.architecture`).
    pub architecture: String,
    pub parameters: u64,
    /// The type holding most of the weights' bytes (`Q4_K`, …).
    pub quantization: String,
    pub context_length: usize,
    pub embedding_length: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    /// Routed experts and experts used per token (0 for dense models).
    pub experts: (usize, usize),
    pub vocab: usize,
    pub template: Option<String>,
    /// The file's size in bytes.
    pub size: u64,
}

/// One downloaded model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelEntry {
    /// The name it is asked for by (catalog name, else file name).
    pub name: String,
    pub size: u64,
    /// Last modification, Unix seconds.
    pub modified: u64,
    /// sha256 of the file when known (catalog models), lowercase hex.
    pub digest: Option<String>,
    pub card: Option<ModelCard>,
}

/// Progress of a download.
#[derive(Debug, Clone, PartialEq)]
pub enum PullStatus {
    /// A stage or status line.
    Message(String),
    /// Bytes done of `total` in a stage (`downloading`, `assembling`, `verifying`).
    Bytes {
        stage: &'static str,
        done: u64,
        total: u64,
    },
}

/// The model store. Calls may block (file reads, downloads): the server makes them on
/// blocking threads.
pub trait Library: Send + Sync + 'static {
    fn list(&self) -> Result<Vec<ModelEntry>, String>;
    /// The card of a model by the name or path it is asked for.
    fn card(&self, name: &str) -> Result<ModelCard, String>;
    /// Downloads a catalog model unless present and verified.
    fn pull(&self, name: &str, progress: &(dyn Fn(PullStatus) + Sync)) -> Result<(), String>;
}

/// A parameter count as Ollama and `ferrox show` print it: 494032768 → `494.03M`.
pub fn parameter_size(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2}M", n as f64 / 1e6),
        n => n.to_string(),
    }
}
