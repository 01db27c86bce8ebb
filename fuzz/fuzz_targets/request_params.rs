//! Fuzzes request JSON → engine parameters through the server's real router (OpenAI, Ollama
//! and Anthropic routes, tokenize/detokenize, count_tokens) over a model-free backend. Every
//! request is answered (a 4xx for a bad one, never a 500 or a panic), and the parameters of
//! every request that reaches the engine are in the sampler's domain: the fake engine builds
//! a real `Sampler` from them and samples.
//!
//! Input (UTF-8): the first line picks the route (an index into `ROUTES`, or a path), the rest
//! is the body.
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use ferrox_models::sampling::Sampler;
use ferrox_server::api::ChatPrompt;
use ferrox_server::backend::{
    Backend, BackendError, CompiledGrammar, Stepper, Event, FinishReason, GenParams, GenSummary,
    GrammarSpec, RenderedChat, Scheduler,
};
use ferrox_server::http::{router, AppState};
use ferrox_server::Options;
use ferrox_tokenizer::chat_output::ToolFormat;
use ferrox_tokenizer::TokenId;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const ROUTES: &[&str] = &[
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/api/chat",
    "/api/generate",
    "/tokenize",
    "/detokenize",
    "/v1/embeddings",
    "/api/embed",
    "/api/show",
];

const CTX: usize = 256;
const VOCAB: usize = 300;

/// Tokens are bytes; the engine writes one word and stops.
struct Fake;

struct FakeStepper {
    slots: usize,
    running: Vec<u64>,
}

/// The engine's side of `GenParams`: what the sampler and the slot need to hold.
fn check(prompt: &[TokenId], p: &GenParams) {
    assert!(!prompt.is_empty() && prompt.iter().all(|&t| (t as usize) < VOCAB));
    assert!(p.max_tokens >= 1 && prompt.len() + p.max_tokens <= CTX, "{p:?}");
    let c = &p.sampler;
    assert!(c.temperature.is_finite() && c.temperature >= 0.0, "{p:?}");
    assert!(c.top_p > 0.0 && c.top_p <= 1.0 && (0.0..=1.0).contains(&c.min_p));
    for x in [c.presence_penalty, c.frequency_penalty, c.repeat_penalty] {
        assert!(x.is_finite(), "{p:?}");
    }
    assert!(c.repeat_penalty > 0.0 && c.penalty_last_n <= CTX);
    assert!(c.logit_bias.iter().all(|&(t, b)| (t as usize) < VOCAB && b.is_finite()));
    assert!(p.stop.len() <= 4 && p.stop.iter().all(|s| !s.is_empty()));
    assert!(p.logprobs.is_none_or(|n| n <= 20));
    let mut s = Sampler::new(c.clone());
    let logits: Vec<f32> = (0..VOCAB).map(|i| ((i * 37) % 101) as f32 / 10.0).collect();
    for _ in 0..2 {
        let t = s.sample(&logits, prompt);
        assert!((t as usize) < VOCAB);
    }
}

impl Stepper for FakeStepper {
    fn capacity(&self) -> usize {
        self.slots
    }
    fn active(&self) -> usize {
        self.running.len()
    }
    fn admit(&mut self, id: u64, prompt: &[TokenId], params: &GenParams) -> Result<(), String> {
        check(prompt, params);
        self.running.push(id);
        Ok(())
    }
    fn step(&mut self, events: &mut dyn FnMut(u64, Event)) {
        for id in self.running.drain(..) {
            events(id, Event::Text("w0 ".into()));
            events(
                id,
                Event::Done(GenSummary {
                    finish: FinishReason::Length,
                    completion_tokens: 1,
                    cancelled: false,
                    stop_string: None,
                    cached_tokens: 0,
                }),
            );
        }
    }
    fn cancel(&mut self, id: u64) {
        self.running.retain(|&g| g != id);
    }
}

impl Backend for Fake {
    fn model_id(&self) -> &str {
        "fake-model"
    }
    fn ctx_size(&self) -> usize {
        CTX
    }
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn chat_prompt(&self, chat: &ChatPrompt<'_>) -> Result<RenderedChat, BackendError> {
        let mut s = String::new();
        for m in chat.messages {
            s.push_str(&m.role);
            s.push_str(&m.content.text().unwrap_or_default());
        }
        if let Some(t) = chat.tools {
            s.push_str(&serde_json::Value::from(t.to_vec()).to_string());
        }
        Ok(RenderedChat {
            tokens: self.text_prompt(&s),
            tool_format: ToolFormat::Hermes,
            in_reasoning: false,
        })
    }
    fn text_prompt(&self, text: &str) -> Vec<TokenId> {
        text.bytes().map(TokenId::from).collect()
    }
    fn tokenize(&self, text: &str, add_special: bool) -> Vec<TokenId> {
        let mut v = if add_special { vec![299] } else { vec![] };
        v.extend(text.bytes().map(TokenId::from));
        v
    }
    fn detokenize(&self, ids: &[TokenId]) -> Result<String, BackendError> {
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= VOCAB) {
            return Err(BackendError::BadTokens(format!("token id {bad} is outside")));
        }
        Ok(ids.iter().map(|&t| char::from(t as u8)).collect())
    }
    fn new_stepper(&self, slots: usize) -> Box<dyn Stepper> {
        Box::new(FakeStepper {
            slots,
            running: Vec::new(),
        })
    }
    fn compile_grammar(&self, grammar: &GrammarSpec) -> Result<CompiledGrammar, String> {
        Ok(CompiledGrammar(Arc::new(grammar.clone())))
    }
    fn embed(&self, inputs: &[Vec<TokenId>]) -> Result<Vec<Vec<f32>>, BackendError> {
        for i in inputs {
            assert!(!i.is_empty() && i.len() <= CTX && i.iter().all(|&t| (t as usize) < VOCAB));
        }
        Ok(inputs.iter().map(|_| vec![0.6, 0.8]).collect())
    }
}

fn app() -> &'static (tokio::runtime::Runtime, Router) {
    static APP: OnceLock<(tokio::runtime::Runtime, Router)> = OnceLock::new();
    APP.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let backend: Arc<dyn Backend> = Arc::new(Fake);
        let router = rt.block_on(async {
            let scheduler = Scheduler::start(backend.clone(), 4, 64);
            router(Arc::new(AppState::new(
                backend,
                scheduler,
                Options::default(),
            )))
        });
        (rt, router)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let (first, body) = s.split_once('\n').unwrap_or((s, ""));
    let path = match first.trim().parse::<usize>() {
        Ok(i) => ROUTES[i % ROUTES.len()].to_string(),
        Err(_) if first.starts_with('/') => first.trim().to_string(),
        Err(_) => return,
    };
    let Ok(req) = Request::post(path.as_str())
        .header("content-type", "application/json")
        .header("host", "127.0.0.1")
        .body(Body::from(body.to_string()))
    else {
        return;
    };
    let (rt, router) = app();
    let (status, bytes) = rt.block_on(async {
        let resp = router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
            .await
            .expect("the whole answer");
        (status, bytes)
    });
    assert!(
        // 503 (busy) and 501 (a feature this server was not started with, e.g. slot
        // actions without `--slot-save-path`) are answers; any other 5xx is a defect.
        !status.is_server_error()
            || status == StatusCode::SERVICE_UNAVAILABLE
            || status == StatusCode::NOT_IMPLEMENTED,
        "{path} {body:?} → {status}: {}",
        String::from_utf8_lossy(&bytes)
    );
});
