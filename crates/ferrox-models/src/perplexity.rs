//! Perplexity by llama.cpp's `llama-perplexity` method: the token stream is cut into
//! non-overlapping chunks of `n_ctx` tokens (the first token of each chunk replaced by BOS when
//! the model adds one), each chunk is evaluated from an empty cache, and the second half of
//! each chunk is scored on predicting its next token.

use crate::decoder::Decoder;
use ferrox_tokenizer::TokenId;

#[derive(Debug, thiserror::Error)]
pub enum PplError {
    #[error("context size {0} is too small")]
    CtxTooSmall(usize),
    #[error("need at least {need} tokens, got {have}")]
    TooShort { need: usize, have: usize },
}

/// Result of a perplexity run.
pub struct Ppl {
    pub ppl: f64,
    pub err: f64,
    pub chunks: usize,
}

/// Scores `tokens` in chunks of `n_ctx`; `progress` receives each chunk's running estimate.
pub fn perplexity(
    dec: &Decoder,
    tokens: &[TokenId],
    n_ctx: usize,
    bos: Option<TokenId>,
    max_chunks: Option<usize>,
    mut progress: impl FnMut(usize, f64),
) -> Result<Ppl, PplError> {
    if n_ctx < 4 {
        return Err(PplError::CtxTooSmall(n_ctx));
    }
    let mut n_chunk = tokens.len() / n_ctx;
    if let Some(m) = max_chunks {
        n_chunk = n_chunk.min(m);
    }
    if n_chunk == 0 {
        return Err(PplError::TooShort {
            need: n_ctx,
            have: tokens.len(),
        });
    }
    let first = n_ctx / 2;
    let vocab = dec.vocab_size();
    let mut caches = dec.new_caches();
    let mut logits = Vec::new();
    let mut chunk = Vec::with_capacity(n_ctx);
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for i in 0..n_chunk {
        let start = i * n_ctx;
        chunk.clear();
        chunk.extend_from_slice(&tokens[start..start + n_ctx]);
        if let Some(b) = bos {
            chunk[0] = b;
        }
        dec.forward_into(&chunk, 0, &mut caches, first, &mut logits);
        // Row r is position first + r, predicting the original token after it.
        for r in 0..n_ctx - 1 - first {
            let row = &logits[r * vocab..(r + 1) * vocab];
            let target = tokens[start + first + r + 1];
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&l| ((l - max) as f64).exp()).sum();
            let lp = (row[target] - max) as f64 - sum.ln();
            nll -= lp;
            nll2 += lp * lp;
            count += 1;
        }
        progress(i, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = (nll2 / count as f64 - mean * mean).max(0.0);
    let err = if count > 1 {
        ppl * (var / (count - 1) as f64).sqrt()
    } else {
        0.0
    };
    Ok(Ppl {
        ppl,
        err,
        chunks: n_chunk,
    })
}
