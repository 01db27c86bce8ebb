//! `ferrox serve` over a BERT-family encoder: embeddings (`/v1/embeddings`, `/api/embed`) and,
//! for a cross-encoder, rerank (`/v1/rerank`, `/rerank`). The server's encoder guard answers
//! the generation routes with a 400; an embeddings request is one batched forward pass.

use std::path::Path;
use std::sync::Arc;

use ferrox_models::encoder::{EncodeError, Encoder};
use ferrox_server::api::ChatPrompt;
use ferrox_server::backend::{Backend, BackendError, Event, GenParams, RenderedChat, Stepper};
use ferrox_tokenizer::wordpiece::Encoded;
use ferrox_tokenizer::TokenId;

use super::serve_args::{served_id, Args};
use super::serve_listen::serve_backend;

struct EncoderBackend {
    id: String,
    aliases: Vec<String>,
    encoder: Encoder,
}

/// The engine of a model that does not generate: never reached (the guard answers first).
struct NoStepper;

impl Stepper for NoStepper {
    fn capacity(&self) -> usize {
        1
    }
    fn active(&self) -> usize {
        0
    }
    fn admit(&mut self, _: u64, _: &[TokenId], _: &GenParams) -> Result<(), String> {
        Err("an encoder model does not generate text".into())
    }
    fn step(&mut self, _: &mut dyn FnMut(u64, Event)) {}
    fn cancel(&mut self, _: u64) {}
}

fn backend_err(e: EncodeError) -> BackendError {
    match e {
        EncodeError::NotEmbedding | EncodeError::NotRanker => {
            BackendError::Unsupported(e.to_string())
        }
        EncodeError::Input { .. } => BackendError::BadTokens(e.to_string()),
    }
}

impl Backend for EncoderBackend {
    fn model_id(&self) -> &str {
        &self.id
    }
    fn aliases(&self) -> Vec<String> {
        self.aliases.clone()
    }
    fn ctx_size(&self) -> usize {
        self.encoder.tokenizer.max_len()
    }
    fn vocab_size(&self) -> usize {
        self.encoder.config.vocab
    }
    fn chat_prompt(&self, _: &ChatPrompt<'_>) -> Result<RenderedChat, BackendError> {
        Err(BackendError::Unsupported(
            "an encoder model does not generate text".into(),
        ))
    }
    fn text_prompt(&self, _: &str) -> Vec<TokenId> {
        Vec::new()
    }
    fn tokenize(&self, text: &str, add_special: bool) -> Vec<TokenId> {
        // A text the tokenizer cannot take becomes an empty input, refused by name upstream.
        let t = &self.encoder.tokenizer;
        t.encode_ids(text, add_special).unwrap_or_default()
    }
    fn detokenize(&self, ids: &[TokenId]) -> Result<String, BackendError> {
        let t = &self.encoder.tokenizer;
        t.decode(ids)
            .map_err(|e| BackendError::BadTokens(e.to_string()))
    }
    fn new_stepper(&self, _: usize) -> Box<dyn Stepper> {
        Box::new(NoStepper)
    }
    fn embed(&self, inputs: &[Vec<TokenId>]) -> Result<Vec<Vec<f32>>, BackendError> {
        let inputs: Vec<Encoded> = inputs
            .iter()
            .map(|ids| Encoded {
                ids: ids.clone(),
                types: vec![0; ids.len()],
            })
            .collect();
        self.encoder.embed(&inputs).map_err(backend_err)
    }
    fn generates(&self) -> bool {
        false
    }
    fn rerank(&self, query: &str, documents: &[String]) -> Result<Vec<f32>, BackendError> {
        let docs: Vec<&str> = documents.iter().map(String::as_str).collect();
        self.encoder.rank(query, &docs).map_err(backend_err)
    }
}

/// Loads the encoder at `path` and serves it.
pub fn run(args: Args, path: &Path) -> anyhow::Result<()> {
    let name = args.model.first().cloned().unwrap_or_default();
    let backend = backend(&name, path)?;
    let (id, ctx) = (backend.model_id().to_string(), backend.ctx_size());
    serve_backend(args, backend, &id, ctx)
}

/// The encoder at `path` (named `name` on the command line) as a server backend.
pub(super) fn backend(name: &str, path: &Path) -> anyhow::Result<Arc<dyn Backend>> {
    let encoder = Encoder::load(path)?;
    let name = name.to_string();
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let id = served_id(&name, &file);
    Ok(Arc::new(EncoderBackend {
        id,
        aliases: vec![name, file, path.display().to_string()],
        encoder,
    }))
}
