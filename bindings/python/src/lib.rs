//! ferrox's Python bindings (PyO3, abi3): the native half of the `ferrox` package. A `Model`
//! is a loaded model behind ferrox-server's `Backend` (crates/ferrox-backend), answering
//! OpenAI-API requests in-process (`transport`); `ferrox.Llama` (python/ferrox/llama.py)
//! builds llama-cpp-python's high-level API on it. Computation runs with the GIL released.

mod load;
mod transport;

use std::path::PathBuf;
use std::sync::Arc;

use ferrox_backend::{BackendConfig, ModelBackend};
use ferrox_format::gguf::MetaValue;
use ferrox_server::{AppState, Backend, Options, Scheduler};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

/// Requests that may wait while the model's one slot is busy (other Python threads).
const QUEUE: usize = 64;

/// A loaded model and the in-process server over it.
#[pyclass(module = "ferrox._native", frozen)]
struct Model {
    backend: Arc<ModelBackend>,
    state: Arc<AppState>,
    router: axum::Router,
    rt: tokio::runtime::Runtime,
    path: PathBuf,
}

#[pymethods]
impl Model {
    /// Loads `model` (a path or a catalog name) with the GIL released. Errors: `ValueError`
    /// (a file or option that cannot be used), `RuntimeError` (anything else).
    #[new]
    #[pyo3(signature = (model, *, home, python, n_ctx, n_threads, no_spec, cache_type_k=None, cache_type_v=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: String,
        home: PathBuf,
        python: String,
        n_ctx: usize,
        n_threads: usize,
        no_spec: bool,
        cache_type_k: Option<String>,
        cache_type_v: Option<String>,
    ) -> PyResult<Model> {
        let place = load::Place { home, python };
        let options = load::LoadOptions {
            threads: n_threads,
            cache_type_k,
            cache_type_v,
        };
        let loaded = py.detach(|| {
            std::panic::catch_unwind(|| {
                let path = load::resolve(&model, &place)?;
                load::load(&path, &options).map(|m| (path, m))
            })
        });
        let (path, (decoder, tokenizer)) = match loaded {
            Ok(r) => r.map_err(PyValueError::new_err)?,
            Err(_) => return Err(PyRuntimeError::new_err(format!("loading {model} failed"))),
        };
        let id = path
            .file_name()
            .map_or_else(|| model.clone(), |f| f.to_string_lossy().into_owned());
        let backend = Arc::new(ModelBackend::new(
            Arc::new(decoder),
            Arc::new(tokenizer),
            BackendConfig {
                id,
                aliases: vec![model],
                // 0: the model's own context length.
                ctx: if n_ctx == 0 { usize::MAX } else { n_ctx },
                no_spec,
                pooling: None,
                cache_bytes: 0,
                recall_tokens: ferrox_models::engine::DEFAULT_RECALL_TOKENS,
                cache_disk: None,
                identity: None,
                // The bindings draft as the server does by default (no separate draft model).
                draft: None,
            },
        ));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ferrox-py")
            .enable_all()
            .build()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        // One slot: calls from several Python threads queue and run one after another.
        let scheduler = Scheduler::start(backend.clone(), 1, QUEUE);
        let state = Arc::new(AppState::new(
            backend.clone(),
            scheduler,
            Options::default(),
        ));
        let router = ferrox_server::router(state.clone());
        Ok(Model {
            backend,
            state,
            router,
            rt,
            path,
        })
    }

    /// The resolved file.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// The id the server answers in `model`.
    #[getter]
    fn model_id(&self) -> String {
        self.backend.model_id().to_string()
    }

    fn n_ctx(&self) -> usize {
        self.backend.ctx_size()
    }

    fn n_vocab(&self) -> usize {
        self.backend.tokenizer().vocab_size()
    }

    /// The model's chat template (Jinja text), if it has one.
    fn chat_template(&self) -> Option<String> {
        self.backend.tokenizer().chat_template().map(str::to_string)
    }

    fn token_bos(&self) -> Option<usize> {
        self.backend.tokenizer().bos_id()
    }

    fn token_eos(&self) -> Option<usize> {
        self.backend.tokenizer().eos_id()
    }

    /// Token ids of `text`: BOS/EOS as the model asks when `add_bos`, special-token text
    /// (e.g. `<|im_end|>`) as control tokens when `special`.
    fn tokenize(&self, py: Python<'_>, text: &str, add_bos: bool, special: bool) -> Vec<usize> {
        let tok = self.backend.tokenizer();
        py.detach(|| tok.encode(text, add_bos, special))
    }

    /// The bytes of `ids` (special tokens' text only when `special`).
    fn detokenize<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<usize>,
        special: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let tok = self.backend.tokenizer();
        let n = tok.vocab_size();
        if let Some(bad) = ids.iter().find(|&&t| t >= n) {
            return Err(PyValueError::new_err(format!(
                "token id {bad} is outside the vocabulary (size {n})"
            )));
        }
        let bytes = py.detach(|| tok.decode_bytes(&ids, !special));
        Ok(PyBytes::new(py, &bytes))
    }

    /// The GGUF metadata's scalar values, as text.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        if let Some(g) = &self.backend.decoder().gguf {
            for (k, v) in g.metadata() {
                // Arrays are left out, as llama.cpp's `llama_model_meta_val_str` does.
                if let Some(text) = meta_text(v) {
                    d.set_item(k, text)?;
                }
            }
        }
        Ok(d)
    }

    /// Draft tokens proposed and accepted since the model was loaded (speculative decoding).
    fn spec_counts(&self) -> (u64, u64) {
        self.state.scheduler.metrics.draft_totals()
    }

    /// POSTs `body` (JSON) to `path` and waits for the whole answer: `(status, body)`.
    fn request(&self, py: Python<'_>, path: &str, body: String) -> PyResult<(u16, String)> {
        let rx = transport::start(&self.rt, &self.router, path, body);
        transport::collect(py, rx)
    }

    /// POSTs `body` (JSON, with `"stream": true`) to `path`: its events as they come.
    fn stream(&self, path: &str, body: String) -> transport::Stream {
        transport::Stream::new(transport::start(&self.rt, &self.router, path, body))
    }
}

/// A scalar metadata value as text; `None` for an array. Every integer fits an i64 or a u64.
fn meta_text(v: &MetaValue) -> Option<String> {
    v.as_str()
        .map(str::to_string)
        .or_else(|| v.as_i64().map(|x| x.to_string()))
        .or_else(|| v.as_u64().map(|x| x.to_string()))
        .or_else(|| match v {
            // f64 printed in full (`as_f32` would narrow it).
            MetaValue::F64(x) => Some(x.to_string()),
            _ => v.as_f32().map(|x| x.to_string()),
        })
        .or_else(|| v.as_bool().map(|x| x.to_string()))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Model>()?;
    m.add_class::<transport::Stream>()?;
    Ok(())
}
