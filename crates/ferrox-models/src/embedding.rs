//! Sentence embeddings from a decoder, as llama.cpp computes them (`llama-embedding`,
//! llama-server's `/v1/embeddings`): the final hidden states after the output norm, pooled
//! over the input's positions (`{arch}.pooling_type`: mean, CLS or last token), then
//! L2-normalised.

use std::str::FromStr;

use crate::decoder::Decoder;
use ferrox_format::gguf::GgufFile;
use ferrox_tokenizer::TokenId;

/// How the positions' states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The average over all positions.
    Mean,
    /// The first position's state.
    Cls,
    /// The last position's state (causal decoders: the only one that saw every token).
    Last,
}

impl FromStr for Pooling {
    type Err = String;
    fn from_str(s: &str) -> Result<Pooling, String> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "last" => Ok(Pooling::Last),
            _ => Err(format!("unknown pooling `{s}` (mean, cls or last)")),
        }
    }
}

impl Pooling {
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Last => "last",
        }
    }

    /// The pooling a GGUF declares (`{arch}.pooling_type`, llama.cpp's enum: 1 mean, 2 CLS,
    /// 3 last); `None` when it declares none (0) or a kind that is not a sentence embedding.
    pub fn from_gguf(file: &GgufFile) -> Option<Pooling> {
        let arch = file.get_str("general.architecture")?;
        match file.get_u64(&crate::arch::keys::POOLING.gguf_key(arch))? {
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }
}

/// Pools `[rows, d]` states into one vector and scales it to unit length.
pub fn pool_normalized(states: &[f32], d: usize, pooling: Pooling) -> Vec<f32> {
    let mut v = pool(states, d, pooling);
    normalize(&mut v);
    v
}

/// Pools `[rows, d]` states into one vector.
pub fn pool(states: &[f32], d: usize, pooling: Pooling) -> Vec<f32> {
    let rows = states.len() / d.max(1);
    let mut v = vec![0f32; d];
    if rows == 0 {
        return v;
    }
    match pooling {
        Pooling::Cls => v.copy_from_slice(&states[..d]),
        Pooling::Last => v.copy_from_slice(&states[(rows - 1) * d..rows * d]),
        Pooling::Mean => {
            // Summed in f64: the mean of a long input should not depend on its length's
            // rounding.
            let mut acc = vec![0f64; d];
            for row in states.chunks_exact(d) {
                acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x as f64);
            }
            v.iter_mut()
                .zip(&acc)
                .for_each(|(o, &a)| *o = (a / rows as f64) as f32);
        }
    }
    v
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (*x as f64 / norm) as f32);
    }
}

/// The embedding of `tokens` (evaluated from position 0 in fresh caches).
pub fn embed(decoder: &Decoder, tokens: &[TokenId], pooling: Pooling) -> Vec<f32> {
    let mut caches = decoder.new_caches();
    // Only the rows the pooling reads need the output norm.
    let first = match pooling {
        Pooling::Last => tokens.len().saturating_sub(1),
        Pooling::Mean | Pooling::Cls => 0,
    };
    let states = decoder.hidden_states(tokens, 0, &mut caches, first);
    let d = decoder.config.hidden_dim;
    pool_normalized(&states, d, pooling)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_and_normalizes() {
        let s = [3.0, 0.0, 0.0, 4.0];
        assert_eq!(pool_normalized(&s, 2, Pooling::Cls), vec![1.0, 0.0]);
        assert_eq!(pool_normalized(&s, 2, Pooling::Last), vec![0.0, 1.0]);
        assert_eq!(pool_normalized(&s, 2, Pooling::Mean), vec![0.6, 0.8]);
        assert_eq!(
            pool_normalized(&[0.0, 0.0], 2, Pooling::Mean),
            vec![0.0, 0.0]
        );
        assert_eq!("mean".parse::<Pooling>(), Ok(Pooling::Mean));
        assert!("max".parse::<Pooling>().is_err());
    }
}
